"""Generic cocotb testbench for stream-in / stream-out blocks (see ``stream_regression``).

The spec (JSON file named by $HOTLINE_TB_SPEC) gives, per input stream, the payloads to drive
and, per output stream, the payloads expected in order; ``busy_in`` / ``busy_out`` are the
probabilities of a stall cycle (valid or ready low) before each beat; ``phases`` (optional)
lists the inputs driven in each phase, the next phase starting once the outputs have been
quiet for ``quiet_cycles``; ``resets`` lists beat indices of the last phase's first input at
which the DUT is reset mid-stream (each output list then holds only what is expected after
the last reset). Payloads are the flattened ints of the Amaranth
layouts (least-significant field first). The result (cycles, wall time) goes to
$HOTLINE_TB_RESULT.
"""
import json
import os
import random
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge


class StreamSource:
    """Drives ``<name>__valid/__payload`` and honours ``<name>__ready``."""

    def __init__(self, dut, name, busy, seed):
        self.valid = getattr(dut, f"{name}__valid")
        self.payload = getattr(dut, f"{name}__payload")
        self.ready = getattr(dut, f"{name}__ready")
        self.clk, self.busy, self.rng = dut.clk, busy, random.Random(seed)
        self.valid.value = 0
        self.sent = 0

    async def send(self, payloads):
        for payload in payloads:
            while self.busy and self.rng.random() < self.busy:
                self.valid.value = 0
                await RisingEdge(self.clk)
            self.valid.value = 1
            self.payload.value = payload
            while True:
                await ReadOnly()
                fired = int(self.ready.value)
                await RisingEdge(self.clk)
                if fired:
                    break
            self.sent += 1
        self.valid.value = 0


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


@cocotb.test()
async def stream_regression(dut):
    with open(os.environ["HOTLINE_TB_SPEC"]) as f:
        spec = json.load(f)
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
    with open(os.environ["HOTLINE_TB_RESULT"], "w") as f:
        json.dump({"cycles": cycles, "seconds": time.perf_counter() - t0,
                   "beats": {n: len(s.got) for n, s in tb.sinks.items()}}, f)
