"""RegisterSlice against the plain sequence it must pass on, with random stalls on both sides."""
import random

import pytest
from amaranth.sim import Simulator

from hotline.hw.lib.register_slice import RegisterSlice
from hotline.sim import streams


@pytest.mark.parametrize("busy", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.6), (0.4, 0.4), (0.9, 0.1)])
def test_slice_passes_every_beat_once_in_order(busy):
    dut = RegisterSlice(20)
    beats = [random.Random(len(busy) + int(10 * sum(busy))).getrandbits(20) for _ in range(300)]
    got, = streams.run(dut, [(dut.i, beats, busy[0])], [(dut.o, len(beats), busy[1])],
                       deadline_cycles=30 * len(beats))
    assert got == beats


def test_slice_timing():
    """One beat per cycle with no stalls, one cycle of latency, and i.ready and o.valid depend on
    registers only: with the output stalled, the slice takes exactly one more beat."""
    dut = RegisterSlice(8)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    log = {}

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        seen = []
        for n in range(12):                  # streaming: a beat in, a beat out, every cycle
            ctx.set(dut.i.payload, n)
            *_, o_valid, o_payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if o_valid:
                seen.append(o_payload)
        log["stream"] = seen
        ctx.set(dut.o.ready, 0)              # stall: beat 11 is on o, one more goes to the skid
        taken = 0
        for n in range(100, 104):
            ctx.set(dut.i.payload, n)
            *_, ready = await ctx.tick().sample(dut.i.ready)
            taken += ready
        log["taken_while_stalled"] = taken
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.o.ready, 1)
        out = []
        for _ in range(4):
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid:
                out.append(payload)
        log["drained"] = out
    sim.add_testbench(bench)
    sim.run()
    assert log["stream"] == list(range(11))   # beat n out in the cycle after it went in
    assert log["taken_while_stalled"] == 1    # 100, into the skid; then i.ready is low
    assert log["drained"] == [11, 100]
