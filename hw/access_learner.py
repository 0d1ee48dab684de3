"""AccessLearner: heavy-hitter counting on the embedding lookup stream.

Algorithm: hashed, bucketized Space-Saving. A key hashes (H3, ``seed``) to one of ``buckets``
buckets of ``ways`` (key, count) entries, stored side by side in one block-RAM word. A key
already in its bucket gets count + 1; a new key replaces the bucket's minimum-count entry
(lowest way on ties; an empty entry has count 0) and takes count = minimum + 1. Counts
saturate at ``2**count_bits - 1``. Each bucket is an independent Space-Saving instance, so a
stored count never underestimates the key's true count within the window. Entry address =
``bucket * ways + way``; an entry is valid iff its count is non-zero.

Measured on the Criteo samples (see ``hotline.sim.bench_access_learner``), 8 ways x 2048
buckets keeps >= 0.99 of the exact top-K coverage for K = 5% and 10% of the distinct keys. A
count-min sketch admission filter in front helps only when the table is smaller than about
2x K; at the default size its collision noise made the ranking worse, so it is not used.
"""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from .hashing import h3_hash, h3_masks

__all__ = ["AccessLearner", "entry_layout", "readout_layout"]


def entry_layout(key_bits, count_bits):
    return data.StructLayout({"key": key_bits, "count": count_bits})


def readout_layout(key_bits, count_bits):
    return data.StructLayout({"valid": 1, "key": key_bits, "count": count_bits})


def _argmin(items):
    """(index, count) of the smallest count in ``items``; the lowest index wins ties."""
    if len(items) == 1:
        return items[0]
    half = len(items) // 2
    (lo_idx, lo_cnt), (hi_idx, hi_cnt) = _argmin(items[:half]), _argmin(items[half:])
    take_hi = hi_cnt < lo_cnt
    return Mux(take_hi, hi_idx, lo_idx), Mux(take_hi, hi_cnt, lo_cnt)


class AccessLearner(wiring.Component):
    """Heavy-hitter learner tapping the lookup stream (see the module docstring).

    Parameters: ``buckets``, ``ways`` (powers of two; capacity = buckets * ways entries),
    ``key_bits``, ``count_bits``, ``seed`` (H3 hash number for the bucket index).

    Ports
    -----
    lookups : In(stream.Signature(key_bits))
        Tap of the lookup stream. ``ready`` is always 1: the learner never stalls. A key
        transferred in a cycle where ``active`` is 1 is counted (any rate, repeats included).
    start, stop, clear : In(1)
        Pulses. ``start`` opens the profiling window from the next cycle; ``stop`` closes it
        from the next cycle (wins over ``start``). ``clear`` discards every key counted up to
        and including its cycle: ``clearing`` is high for the next ``buckets`` cycles, which
        zero one bucket each. Counting pauses while clearing and resumes after if the window
        is open. ``clear`` during a clear restarts it.
    active, clearing, idle : Out(1)
        ``active`` = window open and not clearing. ``idle`` = not active, not clearing and the
        pipeline empty: the state is final and readout is valid.
    counted : Out(32)
        Keys counted since the last clear (wraps at 2**32).
    read_addr : In(range(buckets * ways)), read_data : Out(readout_layout)
        Readout, latency 2: ``read_data`` in cycle t+2 is entry ``read_addr`` of cycle t
        (``valid``, ``key``, ``count``), provided ``idle`` was 1 in cycle t (otherwise the
        read port serves the pipeline and ``read_data`` is undefined).

    Timing: a counted key transferred in cycle t is hashed in t, addresses its bucket in t+1,
    has the bucket word registered in t+2 and writes its update in t+3. Updates of the same
    bucket by the two previous keys reach it through read-port transparency and a forward
    from stage 3, so back-to-back repeats count exactly. ``buckets`` >= 4 lets a clear
    outlast the keys still in flight.
    """

    def __init__(self, *, buckets=2048, ways=8, key_bits=32, count_bits=32, seed=0):
        if buckets < 4:
            raise ValueError(f"buckets must be at least 4, not {buckets}")
        self.bucket_bits = exact_log2(buckets)
        self.way_bits = exact_log2(ways)
        self.buckets, self.ways = buckets, ways
        self.key_bits, self.count_bits, self.seed = key_bits, count_bits, seed
        self.entry = entry_layout(key_bits, count_bits)
        super().__init__({
            "lookups": In(stream.Signature(key_bits)),
            "start": In(1),
            "stop": In(1),
            "clear": In(1),
            "active": Out(1),
            "clearing": Out(1),
            "idle": Out(1),
            "counted": Out(32),
            "read_addr": In(range(buckets * ways)),
            "read_data": Out(readout_layout(key_bits, count_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        ways = self.ways

        m.submodules.table = table = Memory(
            shape=data.ArrayLayout(self.entry, ways), depth=self.buckets, init=[])
        wr = table.write_port(granularity=1)
        rd = table.read_port(transparent_for=(wr,))

        window = Signal()
        with m.If(self.stop):
            m.d.sync += window.eq(0)
        with m.Elif(self.start):
            m.d.sync += window.eq(1)
        m.d.comb += [
            self.lookups.ready.eq(1),
            self.active.eq(window & ~self.clearing),
        ]

        # Stage 1: the counted key and its bucket index, registered.
        take = self.lookups.valid & self.active
        s1_valid = Signal()
        s1_key = Signal(self.key_bits)
        s1_bucket = Signal(self.bucket_bits)
        masks = h3_masks(self.seed, self.key_bits, self.bucket_bits)
        m.d.sync += [
            s1_valid.eq(take),
            s1_key.eq(self.lookups.payload),
            s1_bucket.eq(h3_hash(self.lookups.payload, masks)),
        ]
        with m.If(self.clear):
            m.d.sync += self.counted.eq(0)
        with m.Elif(take):
            m.d.sync += self.counted.eq(self.counted + 1)

        # Stage 1 addresses the read port with its bucket; the host readout borrows the port
        # whenever stage 1 is empty.
        s2_valid = Signal()
        s2_key = Signal(self.key_bits)
        s2_bucket = Signal(self.bucket_bits)
        read_way = Signal(self.way_bits)
        m.d.comb += rd.addr.eq(Mux(s1_valid, s1_bucket, self.read_addr[self.way_bits:]))
        m.d.sync += [
            s2_valid.eq(s1_valid),
            s2_key.eq(s1_key),
            s2_bucket.eq(s1_bucket),
            read_way.eq(self.read_addr[:self.way_bits]),
        ]

        # Stage 3 updates a registered copy of the bucket word, which keeps the block-RAM
        # output delay out of the compare-and-increment path. A hit and a replaced minimum
        # both become count + 1, so only the selected way's lane is written.
        s3_valid = Signal()
        s3_key = Signal(self.key_bits)
        s3_bucket = Signal(self.bucket_bits)
        word = Signal(data.ArrayLayout(self.entry, ways))
        hits = Cat((word[w].count != 0) & (word[w].key == s3_key) for w in range(ways))
        # A key is stored at most once per bucket, so OR-ing the masked counts selects the hit.
        hit_count = Const(0, self.count_bits)
        for w in range(ways):
            hit_count = hit_count | Mux(hits[w], word[w].count, 0)
        min_way, min_count = _argmin([(Const(w, self.way_bits), word[w].count)
                                      for w in range(ways)])
        old_count = Mux(hits.any(), hit_count, min_count)
        new_entry = Signal(self.entry)
        lanes = Signal(ways)
        m.d.comb += [
            new_entry.key.eq(s3_key),
            new_entry.count.eq(Mux(old_count == 2**self.count_bits - 1, old_count, old_count + 1)),
            lanes.eq(Mux(hits.any(), hits, Const(1, ways) << min_way)),
        ]
        # The read port is transparent to the write of the cycle it is addressed in, not to
        # stage 3's write in the next cycle: forward that one when stage 2 has the same bucket.
        merged = Cat(Mux(lanes[w], new_entry, word[w]) for w in range(ways))
        forward = s3_valid & (s3_bucket == s2_bucket)
        m.d.sync += [
            s3_valid.eq(s2_valid),
            s3_key.eq(s2_key),
            s3_bucket.eq(s2_bucket),
            word.eq(Mux(forward, merged, rd.data)),
        ]

        # Keys still in the pipeline when a clear starts were counted before it, so the wipe
        # may take the write port from them (they leave within its first three cycles); no
        # new key enters while clearing.
        wipe_addr = Signal(self.bucket_bits)
        with m.If(self.clear):
            m.d.sync += [self.clearing.eq(1), wipe_addr.eq(0)]
        with m.Elif(self.clearing):
            m.d.sync += wipe_addr.eq(wipe_addr + 1)
            with m.If(wipe_addr == self.buckets - 1):
                m.d.sync += self.clearing.eq(0)

        with m.If(self.clearing):
            m.d.comb += [wr.addr.eq(wipe_addr), wr.en.eq(2**ways - 1), wr.data.eq(0)]
        with m.Elif(s3_valid):
            m.d.comb += [
                wr.addr.eq(s3_bucket),
                wr.en.eq(lanes),
                wr.data.eq(new_entry.as_value().replicate(ways)),
            ]

        m.d.comb += self.idle.eq(~window & ~self.clearing & ~s1_valid & ~s2_valid & ~s3_valid)
        sel = rd.data[read_way]
        m.d.sync += [
            self.read_data.valid.eq(sel.count != 0),
            self.read_data.key.eq(sel.key),
            self.read_data.count.eq(sel.count),
        ]
        return m
