"""The board build flow: the UART echo image simulated against the test_uart reference and
built into a real iCEBreaker bitstream (yosys + nextpnr + icepack, through the CLI), pin
assignments of every board, failures; every board's whole design under ``slow``."""
import json
import random
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.hdl import Fragment
from amaranth.lib import io
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from hotline.cli import main
from hotline.fpga import board_build
from hotline.fpga.board_build import BoardBuildError, EchoTop, board_platform, build_board
from hotline.fpga.boards import BOARDS, board
from test_uart import decode, encode


class UARTPins:
    """Stand-in platform for simulation: ``request("uart", 0, dir="-")`` gives simulation
    ports."""

    def __init__(self):
        self.uart = types.SimpleNamespace(rx=io.SimulationPort("i", 1), tx=io.SimulationPort("o", 1))

    def request(self, name, number, *, dir):
        assert (name, number, dir) == ("uart", 0, "-")
        return self.uart


def test_echo_top_sends_every_byte_back():
    spec = board("icebreaker")
    pins = UARTPins()
    rng = random.Random(5)
    data = [0x00, 0xFF] + [rng.randrange(256) for _ in range(30)]
    # a sender 2% fast: its bytes come before the previous echo is out
    wave = encode([(b, 1) for b in data], spec.divisor * 0.98, rng)
    echoed = []

    async def bench(ctx):
        for level in wave + [1] * 12 * spec.divisor:
            ctx.set(pins.uart.rx.i, level)
            *_, tx = await ctx.tick().sample(pins.uart.tx.o)
            echoed.append(tx)

    sim = Simulator(Fragment.get(EchoTop(spec), pins))
    sim.add_clock(1 / spec.clock_hz)
    sim.add_testbench(bench)
    sim.run()
    assert [b for _, b in decode(echoed, spec.divisor)] == data


# Each board's link pins (from its schematic; OrangeCrab: the Feather header's RX/TX) and
# clock pin, as the build's constraint file must place them.
PINS = {"ulx3s-85f": ("lpf", {"uart_0__rx__io": "M1", "uart_0__tx__io": "L4", "clk25_0__io": "G2"}),
        "orangecrab-85f": ("lpf", {"uart_0__rx__io": "N17", "uart_0__tx__io": "M18",
                                   "clk_0__io": "A9"}),
        "icebreaker": ("pcf", {"uart_0__rx__io": "6", "uart_0__tx__io": "9", "clk12_0__io": "35"})}


@pytest.mark.parametrize("name", list(BOARDS))
def test_platform_pins_and_no_programmer(name):
    spec = board(name)
    plan = board_platform(spec).prepare(EchoTop(spec), name="t")
    ext, pins = PINS[name]
    constraints = plan.files[f"t.{ext}"]
    for port, pin in pins.items():
        pattern = (rf'LOCATE COMP "{port}" SITE "{pin}";' if ext == "lpf"
                   else rf"set_io {port} {pin}\n")
        assert re.search(pattern, constraints), (port, pin, constraints)
    script = plan.files[f"{plan.script}.sh"]
    assert "dfu-suffix" not in script and "openFPGALoader" not in script


@pytest.mark.rtl
def test_echo_bitstream_through_the_cli(tmp_path, monkeypatch, capsys):
    """One real build (about 15 s): `hotline fpga build` with the echo image as the top."""
    real = board_build.build_board
    monkeypatch.setattr(board_build, "build_board",
                        lambda name, build_dir, seed: real(name, build_dir, seed,
                                                           top=EchoTop(board(name))))
    out = tmp_path / "icebreaker.json"
    assert main(["fpga", "build", "--board", "icebreaker", "--build-dir", str(tmp_path),
                 "--seed", "3", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["board"] == "icebreaker" and r["top"] == "EchoTop" and r["seed"] == 3
    bitstream = Path(r["bitstream"])
    assert bitstream == tmp_path / "icebreaker" / "hotline_icebreaker.bin"
    assert bitstream.stat().st_size == 104090  # every iCE40 UP5K bitstream is this long
    # receiver + transmitter + FIFO control: tens of cells; the FIFO's 16 bytes: one RAM
    assert 30 < r["lut4"] < 400 and 40 < r["ff"] < 300 and r["bram"] == 1
    assert (r["lut4_available"], r["bram_available"]) == (5280, 30)
    assert r["lut4_fraction"] == r["lut4"] / 5280
    assert r["constraint_mhz"] == 12 and r["timing_ok"] and r["fmax_mhz"] >= 12
    stdout = capsys.readouterr().out
    assert "icebreaker" in stdout and "met" in stdout and str(bitstream) in stdout


def test_timing_miss_prints_the_table_and_exits_1(tmp_path, monkeypatch, capsys):
    result = dict(board="icebreaker", device="ice40-up5k", top="BoardBuild", bitstream="x.bin",
                  lut4=5000, ff=3000, bram=20, lut4_available=5280, ff_available=5280,
                  bram_available=30, lut4_fraction=0.95, ff_fraction=0.57, bram_fraction=0.67,
                  fmax_mhz=11.2, constraint_mhz=12.0, timing_ok=False, seconds=80.0,
                  hot_capacity=230, cam_entries=256)

    def missed(name, build_dir, seed):
        raise BoardBuildError("icebreaker: timing missed, Fmax 11.2 MHz < 12 MHz board clock; "
                              "see x.tim", result)

    monkeypatch.setattr(board_build, "build_board", missed)
    out = tmp_path / "r.json"
    assert main(["fpga", "build", "--board", "icebreaker", "--json", str(out)]) == 1
    captured = capsys.readouterr()
    assert "MISSED" in captured.out
    assert captured.err.strip().splitlines()[-1].endswith("see x.tim")
    assert json.loads(out.read_text())["fmax_mhz"] == 11.2


class TooManyRAMs(Elaboratable):
    """32 Kbit x 4 more block RAM than the iCE40 UP5K has (32 of 30 SB_RAM40_4K)."""

    def elaborate(self, platform):
        m = Module()
        uart = platform.request("uart", 0, dir="-")
        m.submodules.rx = rx = io.Buffer("i", uart.rx)
        m.submodules.tx = tx = io.Buffer("o", uart.tx)
        m.submodules.mem = mem = Memory(shape=16, depth=8192, init=[])
        w, r = mem.write_port(), mem.read_port()
        addr = Signal(13)
        m.d.sync += addr.eq(addr + 1)
        m.d.comb += [w.addr.eq(addr), w.data.eq(addr * 3 + rx.i), w.en.eq(1),
                     r.addr.eq(addr ^ 0x1555), tx.o.eq(r.data.xor())]
        return m


@pytest.mark.rtl
def test_design_that_does_not_fit_fails_in_one_line(tmp_path):
    with pytest.raises(BoardBuildError) as e:
        build_board("icebreaker", tmp_path, top=TooManyRAMs())
    message = str(e.value)
    assert "\n" not in message and e.value.result is None
    assert message.startswith("icebreaker: nextpnr failed: ")
    assert "ICESTORM_RAM 32/30" in message
    assert message.endswith(f"see {tmp_path / 'icebreaker' / 'hotline_icebreaker.tim'}")


def test_unknown_board():
    with pytest.raises(ValueError, match="unknown board 'nope' \\(choose from ulx3s-85f"):
        build_board("nope")
    r = subprocess.run([sys.executable, "-m", "hotline.cli", "fpga", "build", "--board", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice: 'nope'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "hotline.cli", "fpga", "build", "--help"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "hotline fpga build --board ulx3s-85f" in r.stdout


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize("name", list(BOARDS))
def test_board_design_builds_and_meets_the_board_clock(name, tmp_path):
    r = build_board(name, tmp_path)
    assert Path(r["bitstream"]).stat().st_size > 100_000
    assert r["timing_ok"] and r["fmax_mhz"] >= r["constraint_mhz"]
    assert max(r["lut4_fraction"], r["ff_fraction"], r["bram_fraction"]) <= 1.0
