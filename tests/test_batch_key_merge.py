"""BatchKeyMerge and StreamFork against plain Python sequences, with random stalls."""
import random

import pytest
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from hotline.hw.batch_key_merge import BatchKeyMerge
from hotline.hw.lib.stream_fork import StreamFork
from hotline.sim import streams

KEY = data.StructLayout({"key": 32})
BATCH = data.StructLayout({"popular": 8, "non_popular": 8, "cold": 9, "overflow": 1})


class FragmenterOutputs(wiring.Component):
    """Fragmenter-like source: one ordered stream {record, key, batch} demultiplexed into two
    SyncFIFOBuffered (as the Fragmenter writes them), merged back by BatchKeyMerge."""

    def __init__(self):
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"record": 1, "key": 32, "batch": BATCH}))),
            "o": Out(stream.Signature(BatchKeyMerge(KEY, BATCH).out_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.merge = merge = BatchKeyMerge(KEY, BATCH)
        m.submodules.kf = kf = SyncFIFOBuffered(width=32, depth=4)
        m.submodules.bf = bf = SyncFIFOBuffered(width=BATCH.size, depth=4)
        p = self.i.payload
        m.d.comb += [
            kf.w_data.eq(p.key), bf.w_data.eq(p.batch),
            kf.w_en.eq(self.i.valid & ~p.record), bf.w_en.eq(self.i.valid & p.record),
            self.i.ready.eq(Mux(p.record, bf.w_rdy, kf.w_rdy)),
            merge.keys.valid.eq(kf.r_rdy), merge.keys.payload.eq(kf.r_data), kf.r_en.eq(merge.keys.ready),
            merge.batches.valid.eq(bf.r_rdy), merge.batches.payload.eq(bf.r_data),
            bf.r_en.eq(merge.batches.ready),
        ]
        wiring.connect(m, merge.o, wiring.flipped(self.o))
        return m


def batches(seed, n):
    """Random batches: (cold keys, summary); zero-key and one-key batches included."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        cold = rng.choice([0, 0, 1, 2, rng.randrange(3, 40)])
        keys = [rng.getrandbits(32) for _ in range(cold)]
        out.append((keys, dict(popular=rng.randrange(256), non_popular=rng.randrange(256),
                               cold=cold, overflow=rng.randrange(2))))
    return out


@pytest.mark.parametrize("busy", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.6), (0.4, 0.4)])
def test_merge_restores_batch_order(busy):
    dut = FragmenterOutputs()
    stim, expect = [], []
    for keys, summary in batches(seed=int(10 * sum(busy)), n=60):
        for k in keys:
            stim.append(dict(record=0, key=k, batch={}))
            expect.append((0, k, None))
        stim.append(dict(record=1, key=0, batch=summary))
        expect.append((1, None, summary))
    got, = streams.run(dut, [(dut.i, stim, busy[0])], [(dut.o, len(expect), busy[1])],
                       deadline_cycles=20 * len(expect))
    layout = dut.o.payload.shape()
    for n, (g, (end, key, summary)) in enumerate(zip(got, expect)):
        g = layout.from_bits(g)
        assert int(g.end) == end, f"beat {n}"
        if end:
            assert {f: int(getattr(g, f)) for f in summary} == summary, f"beat {n}"
        else:
            assert int(g.key) == key, f"beat {n}"


@pytest.mark.parametrize("busy", [0.0, 0.3, 0.7])
@pytest.mark.parametrize("enable", [0b11, 0b01, 0b10])
def test_fork_delivers_each_beat_once_per_output(busy, enable):
    dut = StreamFork(16, n=2)
    beats = [random.Random(5).getrandbits(16) for _ in range(200)]
    outs = [dut.o0, dut.o1]
    consumers = [(o, len(beats), busy) for k, o in enumerate(outs) if enable >> k & 1]

    from amaranth.sim import Simulator
    import functools
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    results = [[] for _ in consumers]

    async def init(ctx):
        ctx.set(dut.enable, enable)
    sim.add_testbench(init)
    sim.add_testbench(functools.partial(streams.put, stream=dut.i, payloads=beats, busy=busy,
                                        deadline=20 * len(beats)))
    for n, (o, count, b) in enumerate(consumers):
        sim.add_testbench(functools.partial(streams.get, stream=o, count=count, busy=b, seed=7 + n,
                                            out=results[n], deadline=20 * len(beats)))
    sim.run()
    for r in results:
        assert [int(v) for v in r] == beats
