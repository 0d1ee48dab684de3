"""Generic cocotb testbench for stream-in / stream-out blocks, and its runner `run`.

`run` exports the component and checks its output streams against the expected payloads
under cocotb (`stream_regression`). `StreamSource` and `StreamSink` also serve
``hotline.sim.tb_accelerator``.
"""
import json
import random
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from hotline.sim.runner import handoff, run_cocotb


class StreamSource:
    """Drives ``<name>__valid/__payload`` and honours ``<name>__ready``."""

    def __init__(self, dut, name, busy, seed):
        self.valid = getattr(dut, f"{name}__valid")
        self.payload = getattr(dut, f"{name}__payload")
        self.ready = getattr(dut, f"{name}__ready")
        self.clk, self.busy, self.rng = dut.clk, busy, random.Random(seed)
        self.valid.value = 0
        self.sent = 0
        self.aborted = False

    async def send(self, payloads):
        self.aborted = False
        for payload in payloads:
            while self.busy and self.rng.random() < self.busy and not self.aborted:
                self.valid.value = 0
                await RisingEdge(self.clk)
            if self.aborted:
                break
            self.valid.value = 1
            self.payload.value = payload
            while True:
                await ReadOnly()
                fired = int(self.ready.value)
                await RisingEdge(self.clk)
                if fired or self.aborted:
                    break
            self.sent += fired
        self.valid.value = 0

    def abort(self):
        """End the `send` under way after this cycle: the beat offered is withdrawn unless it
        is taken at the next edge, and the rest are not sent (a new host-link session)."""
        self.aborted = True


class StreamSink:
    """Collects ``<name>__payload`` beats, with random ready stalls, and checks them."""

    def __init__(self, dut, name, busy, seed):
        self.name = name
        self.valid = getattr(dut, f"{name}__valid")
        self.payload = getattr(dut, f"{name}__payload")
        self.ready = getattr(dut, f"{name}__ready")
        self.clk, self.busy, self.rng = dut.clk, busy, random.Random(seed)
        self.ready.value = 0
        self.got = []

    async def run(self):
        while True:
            self.ready.value = int(not (self.busy and self.rng.random() < self.busy))
            await ReadOnly()
            if int(self.ready.value) and int(self.valid.value):
                self.got.append(self.payload.value.to_unsigned())
            await RisingEdge(self.clk)


class TB:
    """Clock, reset, one source per input stream, one sink per output stream."""

    def __init__(self, dut, spec):
        self.dut, self.spec = dut, spec
        busy_in, busy_out = spec.get("busy_in", 0.0), spec.get("busy_out", 0.0)
        self.sources = {n: StreamSource(dut, n, busy_in, i) for i, n in enumerate(spec["inputs"])}
        self.sinks = {n: StreamSink(dut, n, busy_out, 100 + i) for i, n in enumerate(spec["outputs"])}

    async def reset(self, cycles=2):
        self.dut.rst.value = 1
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        for sink in self.sinks.values():
            sink.got.clear()

    def beats(self):
        return sum(len(s.got) for s in self.sinks.values())

    def done(self):
        return all(len(s.got) >= len(self.spec["outputs"][n]) for n, s in self.sinks.items())

    def check(self):
        for name, sink in self.sinks.items():
            want = self.spec["outputs"][name]
            assert len(sink.got) == len(want), f"{name}: {len(sink.got)} beats, expected {len(want)}"
            for i, (g, w) in enumerate(zip(sink.got, want)):
                assert g == w, f"{name} beat {i}: got {g:#x}, expected {w:#x}"


def _pack(port, payloads):
    layout = port.payload.shape()
    if not hasattr(layout, "const"):
        return [int(p) for p in payloads]
    return [p if isinstance(p, int) else layout.const(p).as_value().value for p in payloads]


def run(component, toplevel, inputs, outputs, *, build_dir, simulator="verilator", busy_in=0.0,
        busy_out=0.0, resets=(), drain_cycles=10000, waves=False, phases=None, quiet_cycles=64):
    """Drive ``inputs`` into ``component`` (exported as ``toplevel``) under cocotb and check
    that each output stream carries exactly ``outputs`` (a difference raises `CocotbFailure`).

    ``inputs`` / ``outputs`` map a stream port's name to its payloads, in order: dicts (packed
    with the port's layout) or ints (the flattened payload, least-significant field first).
    ``busy_in`` / ``busy_out``: the probability of a stall cycle (valid or ready low) before
    each beat. ``phases`` (optional): the inputs driven in each phase, the next phase starting
    once the outputs have been quiet for ``quiet_cycles``. ``resets``: beat indices of the last
    phase's first input at which the DUT is reset mid-stream (each output list then holds only
    what is expected after the last reset). ``drain_cycles``: how long the outputs may take
    after the last input. Returns ``cycles``, ``seconds`` (wall time) and ``beats`` per output.
    """
    build_dir = Path(build_dir).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path = build_dir / "spec.json", build_dir / "result.json"
    spec = {
        "inputs": {n: _pack(getattr(component, n), p) for n, p in inputs.items()},
        "outputs": {n: _pack(getattr(component, n), p) for n, p in outputs.items()},
        "busy_in": busy_in, "busy_out": busy_out, "resets": list(resets),
        "drain_cycles": drain_cycles, "phases": phases, "quiet_cycles": quiet_cycles,
        "result": str(result_path),
    }
    spec_path.write_text(json.dumps(spec))
    result_path.unlink(missing_ok=True)
    run_cocotb(component, toplevel, __name__, build_dir, simulator, waves=waves,
               handoff=spec_path)
    return json.loads(result_path.read_text())


@cocotb.test()
async def stream_regression(dut):
    """Drive and check the streams of the spec (the handoff written by `run`)."""
    spec = json.loads(handoff().read_text())
    Clock(dut.clk, 10, unit="ns").start()
    tb = TB(dut, spec)
    await tb.reset()
    for sink in tb.sinks.values():
        cocotb.start_soon(sink.run())
    resets = spec.get("resets", [])
    t0 = time.perf_counter()
    cycles = 0
    phases = spec.get("phases") or [list(spec["inputs"])]
    for p, names in enumerate(phases):
        first, *others = names
        payloads = spec["inputs"][first]
        # Mid-stream resets cut the last phase's first input into segments.
        bounds = [0] + (resets if p == len(phases) - 1 else []) + [len(payloads)]
        others_tasks = [cocotb.start_soon(tb.sources[n].send(spec["inputs"][n])) for n in others]
        for seg, (a, b) in enumerate(zip(bounds, bounds[1:])):
            if seg:
                await tb.reset()
            task = cocotb.start_soon(tb.sources[first].send(payloads[a:b]))
            while not task.done():
                await RisingEdge(dut.clk)
                cycles += 1
        while not all(t.done() for t in others_tasks):
            await RisingEdge(dut.clk)
            cycles += 1
        if p < len(phases) - 1:
            # Between phases, wait until the outputs have been quiet for quiet_cycles.
            quiet, seen = 0, tb.beats()
            while quiet < spec.get("quiet_cycles", 64):
                await RisingEdge(dut.clk)
                cycles += 1
                quiet = quiet + 1 if tb.beats() == seen else 0
                seen = tb.beats()
    limit = spec.get("drain_cycles", 10000)
    for _ in range(limit):
        if tb.done():
            break
        await RisingEdge(dut.clk)
        cycles += 1
    for _ in range(8):  # nothing extra may follow
        await RisingEdge(dut.clk)
    tb.check()
    Path(spec["result"]).write_text(json.dumps({
        "cycles": cycles, "seconds": time.perf_counter() - t0,
        "beats": {n: len(s.got) for n, s in tb.sinks.items()}}))
