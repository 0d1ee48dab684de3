"""BufferedFIFO against Amaranth's SyncFIFOBuffered: the same outputs in every cycle under
random writes and reads (its inner FIFO's flags are registered, its behaviour is not
changed)."""
import random

import pytest
from amaranth.hdl import Module
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.sim import Simulator

from hotline.hw.buffered_fifo import BufferedFIFO


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 8, 17])
def test_buffered_fifo_matches_sync_fifo_buffered(depth):
    m = Module()
    m.submodules.dut = dut = BufferedFIFO(width=8, depth=depth)
    m.submodules.ref = ref = SyncFIFOBuffered(width=8, depth=depth)
    rng = random.Random(depth)

    async def bench(ctx):
        for cycle in range(2000):
            # phases of mostly writing and mostly reading, so the FIFO fills and drains
            p_write = 0.8 if (cycle // 64) % 2 == 0 else 0.3
            w_en, r_en = rng.random() < p_write, rng.random() < 1.1 - p_write
            w_data = rng.randrange(256)
            for fifo in (dut, ref):
                ctx.set(fifo.w_en, w_en)
                ctx.set(fifo.r_en, r_en)
                ctx.set(fifo.w_data, w_data)
            for name in ("w_rdy", "r_rdy", "level", "w_level", "r_level"):
                assert ctx.get(getattr(dut, name)) == ctx.get(getattr(ref, name)), (cycle, name)
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), cycle
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
