"""BucketTable against a Python list of words, in each DP16KD width it picks (512 x 36 with one
read port up to 512 buckets, 1024 x 18 up to 1024, 2048 x 9 beyond) and inferred, on random
lane writes and reads with address collisions."""
import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator

from hotline.hw.bram import BucketTable

from test_access_learner import DP16KDModel


@pytest.mark.parametrize("depth, block", [(300, 36), (512, 36), (700, 18), (1500, 9),
                                          (300, None)])
def test_table_matches_words(depth, block, monkeypatch):
    ways, width = 3, 54
    if block is not None:
        table = BucketTable(depth=depth, ways=ways, width=width, primitive="ecp5")
        text = verilog.convert(table, name="top", emit_src=False, ports=[
            table.write_addr, table.write_en, table.write_data, table.read_addr,
            table.read_data])
        assert text.count("DP16KD #(") == text.count(f".DATA_WIDTH_B(32'd{block})") == \
            ways * -(-width // block)
    monkeypatch.setattr(BucketTable, "dp16kd", DP16KDModel)
    dut = BucketTable(depth=depth, ways=ways, width=width,
                      primitive=None if block is None else "ecp5")
    rng = np.random.default_rng(depth)
    # Addresses from a few hot words, so reads often hit the word written in the same cycle.
    hot = rng.choice(depth, 6, replace=False)
    words = [[0] * ways for _ in range(depth)]
    checked = []

    async def testbench(ctx):
        expect = []          # per cycle: (the word read, lanes written to it that cycle)
        for cycle in range(1500):
            wa, ra = (int(rng.choice(hot)) if rng.random() < 0.6 else int(rng.integers(depth))
                      for _ in range(2))
            en = int(rng.integers(1 << ways)) if cycle >= depth // 4 else (1 << ways) - 1
            wa = cycle if cycle < depth // 4 else wa       # fill some words first
            value = int(rng.integers(1 << 62)) & ((1 << width) - 1)
            ctx.set(dut.write_addr, wa)
            ctx.set(dut.write_en, en)
            ctx.set(dut.write_data, value)
            ctx.set(dut.read_addr, ra)
            expect.append((list(words[ra]), en if wa == ra else 0))
            await ctx.tick()
            for lane in range(ways):
                if en >> lane & 1:
                    words[wa][lane] = value
            if len(expect) >= BucketTable.LATENCY:
                want, clobbered = expect[-BucketTable.LATENCY]
                got = ctx.get(dut.read_data)
                for lane in range(ways):
                    if not clobbered >> lane & 1:
                        assert (got >> (lane * width)) & ((1 << width) - 1) == want[lane], \
                            (cycle, lane)
                        checked.append(lane)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert len(checked) > 3000
