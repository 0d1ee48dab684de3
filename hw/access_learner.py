"""AccessLearner: heavy-hitter counting on the embedding lookup stream.

Algorithm: hashed, bucketized Space-Saving with a same-bucket hazard rule. A key hashes (``bucket_hash``,
``seed``) to one of ``buckets`` buckets of ``ways`` (key, count) entries, stored side by side
in one block-RAM word. A key already in its bucket gets count + 1; a new key replaces the
bucket's minimum-count entry (lowest way on ties; an empty entry has count 0) and takes
count = minimum + 1. Counts saturate at ``2**count_bits - 1``. Entry address =
``bucket * ways + way``; an entry is valid iff its count is non-zero.

Hazard rule (``WINDOW`` = 7): a counted key is **dropped** (leaves the table untouched and
increments ``dropped``) when one of the ``WINDOW`` keys counted just before it, dropped or
not, has the same bucket and a different key. The rule depends on the key sequence only,
never on timing, so the model mirrors it exactly. It is what lets the read-modify-write
span eight pipeline stages at one key per cycle: every update still in flight when a key
reads its bucket is then one of the same key, whose result is forwarded (count + 1, same
way).

Size it with ``hotline.contract.config.learner_geometry(K, distinct_keys)``: entries = next
power of two >= max(8 K, distinct / 2), at least 4096. A fixed 8 x 2048 keeps >= 0.99 of
the exact top-K coverage on the Criteo samples but only 0.67 on Amazon-book (flat, 135k
distinct keys): the gap is capacity, not the hash or the hazard rule (see
``hotline.sim.bench_access_learner``). The rule (window 7) drops 0-2.0% of the lookups and
costs <= 0.001 of that ratio at the sized geometry on the shared files (`python -m
hotline.bench --only learner`); with few buckets (<= 32) it drops most keys. A count-min
sketch admission filter in front helps only when the table is smaller than about 2x K; at
the default size its collision noise made the ranking worse, so it is not used. On
LFE5U-85F-6 with ``primitive="ecp5"`` the learner alone places and routes at 132.86 / 146.80
/ 133.98 MHz at nextpnr seeds 1 / 2 / 3.
"""
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hotline.contract.config import LEARNER_WINDOW as WINDOW
from hotline.contract.hashing import bucket_hash

from .bram import BucketTable
from .lib.onehot import lowest_one_hot, one_hot_select
from .lib.replica import replica

__all__ = ["AccessLearner", "LearnerCompare", "LearnerFront", "LearnerReadout", "LearnerUpdate",
           "READ_LATENCY", "WINDOW", "entry_layout", "readout_layout"]

# WINDOW: keys in flight between a key's bucket read and its write-back; the hazard window may
# not be shorter (see AccessLearner's timing notes). The model uses the same contract value.
# Cycles from ``read_addr`` to ``read_data``.
READ_LATENCY = 5


def entry_layout(key_bits, count_bits):
    """A table entry. ``valid`` (= count != 0) is stored too, so a hit test needs no wide OR;
    with 32-bit keys and counts it takes a spare bit of the 9-bit-wide block RAMs."""
    return data.StructLayout({"key": key_bits, "count": count_bits, "valid": 1})


def readout_layout(key_bits, count_bits):
    return data.StructLayout({"valid": 1, "key": key_bits, "count": count_bits})


def _stage(m, clear, name, valid, **fields):
    """Pipeline registers ``name_valid`` (loaded with ``valid`` and cancelled by ``clear``;
    ``valid`` None: the caller drives it) and ``name_<field>``, loaded every cycle (no reset:
    the reset net reaches the valid bits only)."""
    regs = SimpleNamespace(valid=Signal(name=f"{name}_valid"))
    if valid is not None:
        m.d.sync += regs.valid.eq(valid & ~clear)
    for field, value in fields.items():
        setattr(regs, field, Signal.like(value, name=f"{name}_{field}", reset_less=True))
        m.d.sync += getattr(regs, field).eq(value)
    return regs


def _pairs(ways):
    """The way pairs (w, v), v < w, whose counts the learner compares."""
    return [(w, v) for w in range(ways) for v in range(w)]


def verdict_signature(key_bits, bucket_bits):
    """A key at its verdict (`LearnerFront` -> `LearnerCompare`): ``drop`` by the hazard rule."""
    return wiring.Signature({"valid": Out(1), "key": Out(key_bits), "bucket": Out(bucket_bits),
                             "drop": Out(1)})


def compared_signature(ways, key_bits, bucket_bits, count_bits):
    """A key with its bucket word compared (`LearnerCompare` -> `LearnerUpdate`): ``fwd``
    one-hot of the youngest of the WINDOW keys ahead that update its bucket (0: none), ``hits``
    its ways holding the key, ``minimum`` one-hot of the lowest way with the least count,
    ``counts`` the ways' counts side by side and ``full`` whether each is all ones."""
    return wiring.Signature({
        "valid": Out(1), "key": Out(key_bits), "bucket": Out(bucket_bits), "fwd": Out(WINDOW),
        "hits": Out(ways), "minimum": Out(ways), "counts": Out(ways * count_bits),
        "full": Out(ways)})


def ahead_signature(bucket_bits):
    """The updates that `LearnerCompare` checks beside its own: those in s8, r1 and r2."""
    return wiring.Signature({"valid": Out(3), "bucket": Out(bucket_bits).array(3)})


class LearnerFront(wiring.Component):
    """Stages s1..s3: the tapped keys, their count, hash and bucket read, and the hazard rule.

    Ports: ``lookups`` In stream (``ready`` always 1); ``active`` In: a key transferred while
    it is 1 is counted; ``clear`` In: cancels the keys in s1..s3 and forgets the hazard
    window; ``host_bucket`` In: the readout's bucket, which gets the read port in every cycle
    s1 is empty; ``read_bucket`` Out, one register per way: the tables' read address; ``o``
    Out(`verdict_signature`): the key in s3 and its verdict; ``counted``, ``dropped`` Out(32)
    (zeroed by ``clear``); ``busy`` Out: a key in s1..s3.

    Latency: a key transferred in cycle t is hashed in t+1, its bucket is on ``read_bucket``
    in t+2 (and compared with the last WINDOW keys then), and it is on ``o`` with its verdict
    in t+3; ``counted`` counts it in t+2, ``dropped`` in t+4. Throughput: one key per cycle;
    no backpressure.
    """

    def __init__(self, hash, ways):
        self.hash = hash
        key_bits, bucket_bits = hash.key_bits, hash.out_bits
        super().__init__({
            "lookups": In(stream.Signature(key_bits)),
            "active": In(1), "clear": In(1), "host_bucket": In(bucket_bits),
            "read_bucket": Out(bucket_bits).array(ways),
            "o": Out(verdict_signature(key_bits, bucket_bits)),
            "counted": Out(32), "dropped": Out(32), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        clear, o = self.clear, self.o
        m.d.comb += self.lookups.ready.eq(1)

        # t+1: the counted key and its bucket (hashed from the input port, so only flip-flops
        # drive the read address below: timing).
        # Its valid is the AND of two registers, the input's valid and whether it is taken
        # (timing: the valid comes late, through the accelerator's lookup handshake, and went
        # through two LUTs here to s1_valid).
        s1 = _stage(m, clear, "s1", None, key=self.lookups.payload,
                    bucket=self.hash.expr(self.lookups.payload))
        s1_in, s1_open = Signal(name="s1_in"), Signal(name="s1_open")
        m.d.sync += [s1_in.eq(self.lookups.valid), s1_open.eq(self.active & ~clear)]
        m.d.comb += s1.valid.eq(s1_in & s1_open)
        # Counted from s1, not from the input port (timing: the accelerator's lookup handshake
        # reached the counter's enable).
        with m.If(clear):
            m.d.sync += self.counted.eq(0)
        with m.Elif(s1.valid):
            m.d.sync += self.counted.eq(self.counted + 1)

        # t+2: the bucket addresses the read port (the host readout borrows the port whenever
        # the stage is empty) and is checked against the last WINDOW counted keys.
        s2 = _stage(m, clear, "s2", s1.valid, key=s1.key, bucket=s1.bucket)
        # The read address is chosen a cycle ahead: it reaches the block RAMs straight from a
        # flip-flop.
        read_addr = [replica(len(s1.bucket), f"read_addr{w}") for w in range(len(self.read_bucket))]
        m.d.sync += [a.eq(Mux(s1.valid, s1.bucket, self.host_bucket)) for a in read_addr]
        m.d.comb += [port.eq(a) for port, a in zip(self.read_bucket, read_addr)]

        history = [SimpleNamespace(valid=Signal(name=f"hist{d}_valid"),
                                   bucket=Signal(len(s2.bucket), name=f"hist{d}_bucket",
                                                 reset_less=True),
                                   key=Signal(len(s2.key), name=f"hist{d}_key", reset_less=True))
                   for d in range(WINDOW)]
        with m.If(clear):
            m.d.sync += [h.valid.eq(0) for h in history]
        with m.Elif(s2.valid):
            for newer, older in zip([s2] + history, history):
                m.d.sync += [older.valid.eq(newer.valid), older.bucket.eq(newer.bucket),
                             older.key.eq(newer.key)]
        same_bucket = Cat(h.valid & (h.bucket == s2.bucket) for h in history)
        other_key = Cat(h.key != s2.key for h in history)

        # t+3: the hazard verdict, and (in `LearnerCompare`) which of the updates the read
        # misses hit this bucket.
        s3 = _stage(m, clear, "s3", s2.valid, key=s2.key, bucket=s2.bucket,
                    same_bucket=same_bucket, other_key=other_key)
        drop = (s3.same_bucket & s3.other_key).any()
        with m.If(clear):
            m.d.sync += self.dropped.eq(0)
        with m.Elif(s3.valid & drop):
            m.d.sync += self.dropped.eq(self.dropped + 1)
        m.d.comb += [o.valid.eq(s3.valid), o.key.eq(s3.key), o.bucket.eq(s3.bucket),
                     o.drop.eq(drop), self.busy.eq(Cat(s1.valid, s2.valid, s3.valid).any())]
        return m


class LearnerCompare(wiring.Component):
    """Stages s4..s7: the bucket word's key and count compares, and the forward choice.

    Ports: ``i`` In(`verdict_signature`): the key in s3 (it goes on only if not dropped);
    ``ahead`` In(`ahead_signature`): the keys in s8, r1 and r2 (`LearnerUpdate`); ``word``
    In(ArrayLayout(entry, ways)): the bucket word, two cycles after ``i`` (the tables' fabric
    register); ``clear`` In: cancels the keys in s4..s7; ``o`` Out(`compared_signature`): the
    key in s7; ``busy`` Out: a key in s4..s7.

    Latency: a key on ``i`` in cycle u is on ``o`` in u+4, with ``fwd`` one-hot of the
    youngest key ahead of it (in s4..s7 or ``ahead``, in cycle u) in its bucket.
    Throughput: one key per cycle; no backpressure.
    """

    def __init__(self, ways, key_bits, count_bits, bucket_bits):
        self.ways, self.count_bits = ways, count_bits
        entry = entry_layout(key_bits, count_bits)
        super().__init__({
            "i": In(verdict_signature(key_bits, bucket_bits)),
            "ahead": In(ahead_signature(bucket_bits)),
            "word": In(data.ArrayLayout(entry, ways)),
            "clear": In(1),
            "o": Out(compared_signature(ways, key_bits, bucket_bits, count_bits)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ways, count_bits, i, word = self.ways, self.count_bits, self.i, self.word
        key_bits = len(i.key)
        # Stages 4..8 carry "valid" only for keys that will write (not dropped).
        in_flight = Signal(WINDOW)   # one-hot of the youngest; driven below
        s4 = _stage(m, self.clear, "s4", i.valid & ~i.drop, key=i.key, bucket=i.bucket,
                    fwd=in_flight)
        s5 = _stage(m, self.clear, "s5", s4.valid, key=s4.key, bucket=s4.bucket, fwd=s4.fwd)

        # t+5: the bucket word, from the fabric register behind each way's block RAMs; the
        # equality of each key byte and the pairwise compares of the counts' halves,
        # registered. Nothing is computed from the block RAMs' own output registers (timing:
        # the count compares pair the words of two ways' block RAMs, which the placer spreads
        # over the die: 5-6 ns routes in front of a carry chain, 100.84 MHz alone at seed 1;
        # from flip-flops the placer moves, those routes end at registers). Each way compares
        # with its own copy of the key (timing: one register fanned out to the compares beside
        # all the ways' words).
        match_key = [replica(key_bits, f"s5_key{w}") for w in range(ways)]
        m.d.sync += [k.eq(s4.key) for k in match_key]
        parts = [(lo, min(lo + 8, key_bits)) for lo in range(0, key_bits, 8)]
        key_parts = [Signal(len(parts), name=f"s6_key_parts{w}") for w in range(ways)]
        m.d.sync += [key_parts[w].eq(Cat(word[w].key[lo:hi] == match_key[w][lo:hi]
                                         for lo, hi in parts)) for w in range(ways)]
        pairs = _pairs(ways)
        half = count_bits // 2
        # per pair (w, v): high half of w's count below v's, high halves equal, low half below
        halves = Signal(3 * len(pairs), name="s6_count_halves")
        m.d.sync += halves.eq(Cat(
            Cat(word[w].count[half:] < word[v].count[half:],
                word[w].count[half:] == word[v].count[half:],
                word[w].count[:half] < word[v].count[:half]) for w, v in pairs))
        # Every count travels with its flag "all ones" (``full``), found beside the compares
        # here and kept up to date with each increment, so a saturating increment needs no
        # all-ones test in front of its carry chain (timing: that was the loop through r1).
        s6 = _stage(m, self.clear, "s6", s5.valid, key=s5.key, bucket=s5.bucket, fwd=s5.fwd,
                    valid_ways=Cat(word[w].valid for w in range(ways)),
                    counts=Cat(word[w].count for w in range(ways)),
                    full=Cat(word[w].count.all() for w in range(ways)))

        # t+6: hits, and the minimum (one-hot, lowest way on ties) from the pairwise compares,
        # registered (timing: the minimum's AND after the compares' carry chains, then in
        # front of the count select in `LearnerUpdate`, were critical paths).
        hits = Cat(s6.valid_ways[w] & key_parts[w].all() for w in range(ways))
        lower = {pair: halves[3 * p] | halves[3 * p + 1] & halves[3 * p + 2]
                 for p, pair in enumerate(pairs)}
        minimum = Cat(Cat([lower[w, v] for v in range(w)] +
                          [~lower[v, w] for v in range(w + 1, ways)]).all()
                      for w in range(ways))
        s7 = _stage(m, self.clear, "s7", s6.valid, key=s6.key, bucket=s6.bucket, fwd=s6.fwd,
                    hits=hits, minimum=minimum, counts=s6.counts, full=s6.full)

        # Back in t+3: the key d places ahead of the one on ``i`` is in stage 3 + d, and will
        # hold its result in r(d - 1) when this key reaches stage 8.
        ahead = ([(s.valid, s.bucket) for s in (s4, s5, s6, s7)]
                 + list(zip(self.ahead.valid, self.ahead.bucket)))
        m.d.comb += in_flight.eq(lowest_one_hot([v & (b == i.bucket) for v, b in ahead]))
        m.d.comb += [getattr(self.o, name).eq(getattr(s7, name))
                     for name in self.o.signature.members]
        m.d.comb += self.busy.eq(Cat(s4.valid, s5.valid, s6.valid, s7.valid).any())
        return m


class LearnerUpdate(wiring.Component):
    """Stages s8 and r1..r7 (r1..rWINDOW) and the write-back: the way chosen and its count + 1
    (or the forwarded count + 1), written to the tables; and the wipe of a clear.

    Ports: ``i`` In(`compared_signature`): the key in s7; ``clear`` In: cancels the keys in
    s8..r7 and wipes the tables; ``write_bucket`` Out, one register per way, ``write_en``
    Out(ways), ``write_data`` Out(entry): the tables' write port, from registers;
    ``clearing`` Out: the wipe runs (``buckets`` cycles from the cycle after ``clear``, one
    bucket each; ``clear`` during it restarts it); ``ahead`` Out(`ahead_signature`): the keys
    in s8, r1 and r2; ``busy`` Out: a key in s8 or r1.

    Latency: a key on ``i`` in cycle u is on the write port in u+2: its way (the hit, else the
    lowest minimum count) and that count are selected in u (into s8), count + 1 (saturating)
    in u+1 (into r1 and the write port's registers). A key whose ``fwd`` bit d is set takes
    instead the way and count + 1 of the key d + 1 places ahead (in r(d+1) when it is in s8):
    the only one-cycle loop. Throughput: one key per cycle; no backpressure.
    """

    def __init__(self, ways, key_bits, count_bits, buckets):
        self.ways, self.count_bits, self.buckets = ways, count_bits, buckets
        bucket_bits = exact_log2(buckets)
        super().__init__({
            "i": In(compared_signature(ways, key_bits, bucket_bits, count_bits)),
            "clear": In(1),
            "write_bucket": Out(bucket_bits).array(ways),
            "write_en": Out(ways),
            "write_data": Out(entry_layout(key_bits, count_bits)),
            "clearing": Out(1),
            "ahead": Out(ahead_signature(bucket_bits)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ways, count_bits, s7, clear = self.ways, self.count_bits, self.i, self.clear
        # t+7: the way (the hit, else the minimum) and its count, both selected while the hit
        # test runs.
        minimum = s7.minimum
        hit = s7.hits.any()
        counts = [s7.counts.word_select(w, count_bits) for w in range(ways)]
        # A count forwarded in t+8 from r2..r7 is in r1..r6 now (the result registers shift
        # every cycle): it is selected here, a cycle early, so the loop through r1 keeps only
        # its own increment and a 2:1 select (timing). Driven below, once r1..r6 exist.
        early, early_full = Signal(count_bits), Signal()
        s8 = _stage(m, clear, "s8", s7.valid, key=s7.key, bucket=s7.bucket, fwd=s7.fwd,
                    early=early, early_full=early_full, lanes=Mux(hit, s7.hits, minimum),
                    count=Mux(hit, one_hot_select(s7.hits, counts),
                              one_hot_select(minimum, counts)),
                    full=Mux(hit, (s7.hits & s7.full).any(), (minimum & s7.full).any()))

        # t+8: count + 1 (saturating) of the chosen entry, or of the youngest forwarded one.
        # The result registers after r1 hold count + 1 already.
        def plus_one(count, full):
            """(count + 1 saturating, its full flag) of a count and its flag: saturation adds 0
            to a full count, so no select follows the carry chain (a select on the carry out
            fanned out to every bit: timing); the sum is full when count >= max - 1."""
            return (count + ~full)[:count_bits], count[1:].all()

        new_lanes, new_count, new_full = Signal(ways), Signal(count_bits), Signal()
        results = [_stage(m, clear, "r1", s8.valid, bucket=s8.bucket, lanes=new_lanes,
                          count=new_count, full=new_full)]
        r1_next, r1_next_full = plus_one(results[0].count, results[0].full)
        for d in range(2, WINDOW + 1):
            prev = results[-1]
            # Only r2 is still matched against a bucket (`ahead`); the last one's count is
            # taken from the one before it (`early`).
            fields = {"bucket": prev.bucket} if d == 2 else {}
            if d < WINDOW:
                fields["next"] = r1_next if d == 2 else prev.next
                fields["next_full"] = r1_next_full if d == 2 else prev.next_full
            results.append(_stage(m, clear, f"r{d}", prev.valid, lanes=prev.lanes, **fields))
        forward = s8.fwd.any()
        sources = Cat(s8.fwd, ~forward)
        # The way written is one-hot throughout, in the result registers too (timing: a
        # decode after, then in front of, the forward select was the longest path).
        m.d.comb += [
            new_lanes.eq(one_hot_select(sources, [r.lanes for r in results] + [s8.lanes])),
            early.eq(one_hot_select(s7.fwd[1:],
                                     [r1_next] + [r.next for r in results[1:WINDOW - 1]])),
            early_full.eq(one_hot_select(
                s7.fwd[1:], [r1_next_full] + [r.next_full for r in results[1:WINDOW - 1]])),
            Cat(new_count, new_full).eq(Mux(s8.fwd[0], Cat(r1_next, r1_next_full),
                                            Mux(s8.fwd[1:].any(), Cat(s8.early, s8.early_full),
                                                Cat(*plus_one(s8.count, s8.full))))),
        ]
        r1, r2 = results[0], results[1]
        m.d.comb += [self.ahead.valid.eq(Cat(s8.valid, r1.valid, r2.valid)),
                     *(b.eq(s.bucket) for b, s in zip(self.ahead.bucket, (s8, r1, r2))),
                     self.busy.eq(s8.valid | r1.valid)]
        self._write_back(m, s8, new_lanes, new_count)
        return m

    def _write_back(self, m, s8, new_lanes, new_count):
        """t+9: write-back. A clear cancels every key in flight, so the wipe owns the port. The
        write address, enables and data are chosen a cycle ahead and the wipe's zero entry is
        a reset of the data register: the block RAMs (8 x ways of them, spread out) get the
        write port straight from flip-flops. The data register is a copy of r1's key and count
        (timing: r1's count, in the increment loop, was pulled towards the RAMs)."""
        clear, buckets = self.clear, self.buckets
        wipe_addr = Signal(exact_log2(buckets))
        wipe_last = Signal()   # wipe_addr == buckets - 1, from a register (timing)
        with m.If(clear):
            m.d.sync += [self.clearing.eq(1), wipe_addr.eq(0), wipe_last.eq(buckets == 1)]
        with m.Elif(self.clearing):
            m.d.sync += [wipe_addr.eq(wipe_addr + 1),
                         wipe_last.eq(wipe_addr == buckets - 2 if buckets > 1 else 0)]
            with m.If(wipe_last):
                m.d.sync += self.clearing.eq(0)
        wiping = clear | (self.clearing & ~wipe_last)   # clearing in the next cycle
        write_key = replica(len(s8.key), "write_key")
        write_count = replica(self.count_bits, "write_count")
        m.d.sync += [write_key.eq(s8.key), write_count.eq(new_count)]
        with m.If(wiping):
            m.d.sync += [write_key.eq(0), write_count.eq(0)]
        write_addr = [replica(len(wipe_addr), f"write_addr{w}") for w in range(self.ways)]
        m.d.sync += [
            *(a.eq(Mux(wiping, Mux(clear, 0, wipe_addr + 1), s8.bucket)) for a in write_addr),
            self.write_en.eq(Mux(wiping, 2**self.ways - 1, Mux(s8.valid & ~clear, new_lanes, 0))),
        ]
        written_valid = Signal()
        m.d.sync += written_valid.eq(~wiping)  # every count written is >= 1
        m.d.comb += [self.write_data.eq(Cat(write_key, write_count, written_valid)),
                     *(port.eq(a) for port, a in zip(self.write_bucket, write_addr))]


class LearnerReadout(wiring.Component):
    """The host readout of one entry: ``way`` In (the way of the address whose bucket
    `LearnerFront` puts on the read port), ``word`` In(ArrayLayout(entry, ways)): the tables'
    read word, ``entry`` Out(readout_layout).

    Latency: ``entry`` in cycle t+5 is way ``way`` (of cycle t) of the word of cycle t+4, in
    the learner the bucket addressed in cycle t (1 cycle in `LearnerFront`'s read address
    register, 3 in the tables), so READ_LATENCY = 5 in all. Throughput: one entry per cycle;
    no backpressure.
    """

    def __init__(self, ways, key_bits, count_bits):
        super().__init__({
            "way": In(exact_log2(ways)),
            "word": In(data.ArrayLayout(entry_layout(key_bits, count_bits), ways)),
            "entry": Out(readout_layout(key_bits, count_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        # The readout shares the table's registered read (its address registered first, so
        # 4 cycles); selecting the entry and testing its count take the fifth.
        read_way = [Signal(len(self.way), name=f"read_way{i}") for i in range(READ_LATENCY - 1)]
        m.d.sync += [read_way[0].eq(self.way),
                     *(later.eq(earlier) for earlier, later in zip(read_way, read_way[1:]))]
        chosen = self.word[read_way[-1]]
        m.d.sync += [self.entry.valid.eq(chosen.valid), self.entry.key.eq(chosen.key),
                     self.entry.count.eq(chosen.count)]
        return m


class AccessLearner(wiring.Component):
    """Heavy-hitter learner tapping the lookup stream (see the module docstring).

    Parameters: ``buckets``, ``ways`` (powers of two; capacity = buckets * ways entries),
    ``key_bits``, ``count_bits``, ``seed`` (hash number for the bucket index), ``hash_family``,
    ``primitive`` (None: inferred block RAM, for simulation and any FPGA; "ecp5": DP16KD
    instances with output registers, needed for 125 MHz on ECP5 speed grade 6).

    Ports
    -----
    lookups : In(stream.Signature(key_bits))
        Tap of the lookup stream. ``ready`` is always 1: the learner never stalls. A key
        transferred in a cycle where ``active`` is 1 is counted (any rate, repeats included).
    start, stop, clear : In(1)
        Pulses. ``start`` opens the profiling window from the next cycle; ``stop`` closes it
        from the next cycle (wins over ``start``). ``clear`` discards every key counted up to
        and including its cycle (those still in the pipeline are cancelled) and forgets the
        hazard window: ``clearing`` is high for the next ``buckets`` cycles, which zero one
        bucket each. Counting pauses while clearing and resumes after if the window is open.
        ``clear`` during a clear restarts it.
    active, clearing, idle : Out(1)
        ``active`` = window open and not clearing. ``idle`` = not active, not clearing and the
        pipeline empty: the state is final and readout is valid.
    counted, dropped : Out(32)
        Keys counted since the last clear, and those of them the hazard rule dropped (both
        wrap at 2**32; ``counted`` lags the transfers by a cycle, ``dropped`` lags ``counted``
        by up to 2 cycles).
    read_addr : In(range(buckets * ways)), read_data : Out(readout_layout)
        Readout, latency 5: ``read_data`` in cycle t+5 is entry ``read_addr`` of cycle t
        (``valid``, ``key``, ``count``), provided ``idle`` was 1 in cycle t (otherwise the
        read port serves the pipeline and ``read_data`` is undefined).

    Timing: one key per cycle, 9 cycles from transfer to write-back. A key transferred in
    cycle t is hashed in t+1, addresses its bucket in t+2 (and is checked against the hazard
    window), gets its verdict and finds the in-flight updates of its bucket in t+3, has the
    bucket word in t+5 (block RAM, its output register, a fabric register), compares key
    bytes and count halves in t+5, completes the compares and finds the minimum in t+6,
    picks its way in t+7, computes count + 1 in t+8 and writes in t+9.
    The updates of the 7 keys ahead of it reach the block RAM too late for its read; under
    the hazard rule those of its bucket carry its own key, so it takes the youngest one's way
    and count + 1 (a forward from the write stage or the 6 result registers after it): the
    only one-cycle loop is that increment and select.

    Stages (``STAGES``, each a ``wiring.Component`` whose docstring states its latency,
    throughput and ports): `LearnerFront` (s1..s3: count, hash, read address, hazard
    verdict), `LearnerCompare` (s4..s7: key and count compares, the forward choice),
    `LearnerUpdate` (s8, r1..r7 and the write-back: way, count + 1, forwards, the clear's
    wipe), `LearnerReadout` (the host's entry select). This block owns the tables and the
    profiling window.
    """
    STAGES = (LearnerFront, LearnerCompare, LearnerUpdate, LearnerReadout)

    def __init__(self, *, buckets=2048, ways=8, key_bits=32, count_bits=32, seed=0,
                 hash_family="tabulation", primitive=None):
        self.primitive, self.hash_family = primitive, hash_family
        self.bucket_bits = exact_log2(buckets)
        self.way_bits = exact_log2(ways)
        self.buckets, self.ways = buckets, ways
        self.key_bits, self.count_bits, self.seed = key_bits, count_bits, seed
        self.hash = bucket_hash(seed, key_bits, self.bucket_bits, hash_family)
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
            "dropped": Out(32),
            "read_addr": In(range(buckets * ways)),
            "read_data": Out(readout_layout(key_bits, count_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        ways, way_bits, bucket_bits = self.ways, self.way_bits, self.bucket_bits
        m.submodules.front = front = LearnerFront(self.hash, ways)
        m.submodules.compare = compare = LearnerCompare(ways, self.key_bits, self.count_bits,
                                                        bucket_bits)
        m.submodules.update = update = LearnerUpdate(ways, self.key_bits, self.count_bits,
                                                     self.buckets)
        m.submodules.readout = readout = LearnerReadout(ways, self.key_bits, self.count_bits)

        # The forwards cover every update the read cannot see, and no key uses a word read in
        # the cycle its bucket is written. One table per way, each with its own copy of the
        # address registers (the stages' `replica`s; timing: one register driving the address
        # pins of all 8 x ways block RAMs had 9-10 ns routes).
        lanes = []
        for w in range(ways):
            m.submodules[f"table{w}"] = lane = BucketTable(
                depth=self.buckets, ways=1, width=self.entry.size, primitive=self.primitive)
            lanes.append(lane)
            m.d.comb += [lane.read_addr.eq(front.read_bucket[w]),
                         lane.write_addr.eq(update.write_bucket[w]),
                         lane.write_en.eq(update.write_en[w]), lane.write_data.eq(update.write_data)]
        word = data.ArrayLayout(self.entry, ways)(Cat(lane.read_data for lane in lanes))

        window = Signal()
        with m.If(self.stop):
            m.d.sync += window.eq(0)
        with m.Elif(self.start):
            m.d.sync += window.eq(1)
        wiring.connect(m, wiring.flipped(self.lookups), front.lookups)
        wiring.connect(m, front.o, compare.i)
        wiring.connect(m, compare.o, update.i)
        wiring.connect(m, update.ahead, compare.ahead)
        for stage in (front, compare, update):
            m.d.comb += stage.clear.eq(self.clear)
        busy = front.busy | compare.busy | update.busy
        m.d.comb += [
            self.active.eq(window & ~self.clearing),
            front.active.eq(self.active),
            front.host_bucket.eq(self.read_addr[way_bits:]),
            compare.word.eq(word),
            self.counted.eq(front.counted),
            self.dropped.eq(front.dropped),
            self.clearing.eq(update.clearing),
            self.idle.eq(~window & ~self.clearing & ~busy),
            readout.way.eq(self.read_addr[:way_bits]),
            readout.word.eq(word),
            self.read_data.eq(readout.entry),
        ]
        return m
