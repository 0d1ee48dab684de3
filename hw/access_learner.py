"""AccessLearner: heavy-hitter counting on the embedding lookup stream.

Algorithm: hashed, bucketized Space-Saving with a same-bucket hazard rule. A key hashes (``bucket_hash``,
``seed``) to one of ``buckets`` buckets of ``ways`` (key, count) entries, stored side by side
in one block-RAM word. A key already in its bucket gets count + 1; a new key replaces the
bucket's minimum-count entry (lowest way on ties; an empty entry has count 0) and takes
count = minimum + 1. Counts saturate at ``2**count_bits - 1``. Entry address =
``bucket * ways + way``; an entry is valid iff its count is non-zero.

Hazard rule (``WINDOW`` = 6): a counted key is **dropped** (leaves the table untouched and
increments ``dropped``) when one of the ``WINDOW`` keys counted just before it, dropped or
not, has the same bucket and a different key. The rule depends on the key sequence only,
never on timing, so the model mirrors it exactly. It is what lets the read-modify-write
span seven pipeline stages at one key per cycle: every update still in flight when a key
reads its bucket is then one of the same key, whose result is forwarded (count + 1, same
way).

Size it with ``hotline.contract.config.learner_geometry(K, distinct_keys)``: entries = next
power of two >= max(8 K, distinct / 2), at least 4096. A fixed 8 x 2048 keeps >= 0.99 of
the exact top-K coverage on the Criteo samples but only 0.67 on Amazon-book (flat, 135k
distinct keys): the gap is capacity, not the hash or the hazard rule (see
``hotline.sim.bench_access_learner``). The rule drops 0-1.7% of the lookups and costs
<= 0.003 of that ratio at 512 buckets or more; with few buckets (<= 32) it drops most keys. A count-min sketch
admission filter in front helps only when the table is smaller than about 2x K; at the
default size its collision noise made the ranking worse, so it is not used. On LFE5U-85F-6
with ``primitive="ecp5"`` the learner alone places and routes at 128-132 MHz (nextpnr).
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

__all__ = ["AccessLearner", "READ_LATENCY", "WINDOW", "entry_layout", "readout_layout"]

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
        wrap at 2**32; ``dropped`` lags ``counted`` by up to 3 cycles).
    read_addr : In(range(buckets * ways)), read_data : Out(readout_layout)
        Readout, latency 5: ``read_data`` in cycle t+5 is entry ``read_addr`` of cycle t
        (``valid``, ``key``, ``count``), provided ``idle`` was 1 in cycle t (otherwise the
        read port serves the pipeline and ``read_data`` is undefined).

    Timing: one key per cycle, 8 cycles from transfer to write-back. A key transferred in
    cycle t is hashed in t+1, addresses its bucket in t+2 (and is checked against the hazard
    window), gets its verdict and finds the in-flight updates of its bucket in t+3, has the
    bucket word in t+5 (block RAM, its output register, a fabric register), compares key
    bytes and count halves in t+4 (from the output register) and completes the compares in
    t+5, finds the minimum and picks its way in t+6, computes count + 1 in t+7 and writes in
    t+8.
    The updates of the 6 keys ahead of it reach the block RAM too late for its read; under
    the hazard rule those of its bucket carry its own key, so it takes the youngest one's way
    and count + 1 (a forward from the write stage or the 5 result registers after it): the
    only one-cycle loop is that increment and select.
    """

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
        ways, way_bits, key_bits, count_bits = (self.ways, self.way_bits, self.key_bits,
                                                self.count_bits)
        bucket_bits = self.bucket_bits

        # The forwards below cover every update the read cannot see, and no key uses a word
        # read in the cycle its bucket is written. One table per way, each with its own copy
        # of the address registers (`replica`; timing: one register driving the address pins
        # of all 8 x ways block RAMs had 9-10 ns routes).
        lanes = []
        for w in range(ways):
            m.submodules[f"table{w}"] = lane = BucketTable(
                depth=self.buckets, ways=1, width=self.entry.size, primitive=self.primitive)
            lanes.append(lane)
        read_addr = [replica(bucket_bits, f"read_addr{w}") for w in range(ways)]
        write_addr = [replica(bucket_bits, f"write_addr{w}") for w in range(ways)]
        write_en = Signal(ways)
        write_data = Signal(self.entry)   # driven below
        for w, lane in enumerate(lanes):
            m.d.comb += [lane.read_addr.eq(read_addr[w]), lane.write_addr.eq(write_addr[w]),
                         lane.write_en.eq(write_en[w]), lane.write_data.eq(write_data)]
        word = data.ArrayLayout(self.entry, ways)(Cat(lane.read_data for lane in lanes))
        early = data.ArrayLayout(self.entry, ways)(Cat(lane.read_early for lane in lanes))

        window = Signal()
        with m.If(self.stop):
            m.d.sync += window.eq(0)
        with m.Elif(self.start):
            m.d.sync += window.eq(1)
        m.d.comb += [
            self.lookups.ready.eq(1),
            self.active.eq(window & ~self.clearing),
        ]
        take = self.lookups.valid & self.active
        with m.If(self.clear):
            m.d.sync += self.counted.eq(0)
        with m.Elif(take):
            m.d.sync += self.counted.eq(self.counted + 1)

        def stage(name, valid, **fields):
            """Pipeline registers ``name_valid`` (cancelled by a clear) and ``name_<field>``,
            loaded every cycle (no reset: the reset net reaches the valid bits only)."""
            regs = SimpleNamespace(valid=Signal(name=f"{name}_valid"))
            if valid is not None:    # None: the caller drives ``valid``
                m.d.sync += regs.valid.eq(valid & ~self.clear)
            for field, value in fields.items():
                setattr(regs, field, Signal.like(value, name=f"{name}_{field}", reset_less=True))
                m.d.sync += getattr(regs, field).eq(value)
            return regs

        # t+1: the counted key and its bucket (hashed from the input port, so only flip-flops
        # drive the read address below: timing).
        # Its valid is the AND of two registers, the input's valid and whether it is taken
        # (timing: the valid comes late, through the accelerator's lookup handshake, and went
        # through two LUTs here to s1_valid).
        s1 = stage("s1", None, key=self.lookups.payload,
                   bucket=self.hash.expr(self.lookups.payload))
        s1_in, s1_open = Signal(name="s1_in"), Signal(name="s1_open")
        m.d.sync += [s1_in.eq(self.lookups.valid), s1_open.eq(self.active & ~self.clear)]
        m.d.comb += s1.valid.eq(s1_in & s1_open)

        # t+2: the bucket addresses the read port (the host readout borrows the port whenever
        # the stage is empty) and is checked against the last WINDOW counted keys.
        bucket = s1.bucket
        s2 = stage("s2", s1.valid, key=s1.key, bucket=bucket)
        # The read address is chosen a cycle ahead: it reaches the block RAMs straight from a
        # flip-flop.
        m.d.sync += [a.eq(Mux(s1.valid, bucket, self.read_addr[way_bits:])) for a in read_addr]

        history = [SimpleNamespace(valid=Signal(name=f"hist{d}_valid"),
                                   bucket=Signal(bucket_bits, name=f"hist{d}_bucket",
                                                 reset_less=True),
                                   key=Signal(key_bits, name=f"hist{d}_key", reset_less=True))
                   for d in range(WINDOW)]
        with m.If(self.clear):
            m.d.sync += [h.valid.eq(0) for h in history]
        with m.Elif(s2.valid):
            for newer, older in zip([s2] + history, history):
                m.d.sync += [older.valid.eq(newer.valid), older.bucket.eq(newer.bucket),
                             older.key.eq(newer.key)]
        same_bucket = Cat(h.valid & (h.bucket == s2.bucket) for h in history)
        other_key = Cat(h.key != s2.key for h in history)

        # t+3: the hazard verdict, and which of the updates the read misses (the WINDOW keys
        # ahead, now in stages 4..9) hit this bucket.
        s3 = stage("s3", s2.valid, key=s2.key, bucket=s2.bucket, same_bucket=same_bucket,
                   other_key=other_key)
        drop = (s3.same_bucket & s3.other_key).any()
        with m.If(self.clear):
            m.d.sync += self.dropped.eq(0)
        with m.Elif(s3.valid & drop):
            m.d.sync += self.dropped.eq(self.dropped + 1)

        # Stages 4..7 carry "valid" only for keys that will write (not dropped).
        in_flight = Signal(WINDOW)   # one-hot of the youngest; driven below
        s4 = stage("s4", s3.valid & ~drop, key=s3.key, bucket=s3.bucket, fwd=in_flight)
        # t+4: the table's registers carry the word away from the block RAM.
        s5 = stage("s5", s4.valid, key=s4.key, bucket=s4.bucket, fwd=s4.fwd)

        # t+4: the bucket word at the block RAMs' output registers (``read_early``): the
        # equality of each key byte, and the pairwise compares of the counts' halves,
        # registered (timing: whole key and count compares from the word in t+5 were critical
        # paths at every seed). Each way compares with its own copy of the key (timing: one
        # register fanned out to the compares beside all the ways' block RAMs).
        match_key = [replica(key_bits, f"s4_key{w}") for w in range(ways)]
        m.d.sync += [k.eq(s3.key) for k in match_key]
        parts = [(lo, min(lo + 8, key_bits)) for lo in range(0, key_bits, 8)]
        key_parts = [Signal(len(parts), name=f"s5_key_parts{w}") for w in range(ways)]
        m.d.sync += [key_parts[w].eq(Cat(early[w].key[lo:hi] == match_key[w][lo:hi]
                                         for lo, hi in parts)) for w in range(ways)]
        pairs = [(w, v) for w in range(ways) for v in range(w)]
        half = count_bits // 2
        # per pair (w, v): high half of w's count below v's, high halves equal, low half below
        halves = Signal(3 * len(pairs), name="s5_count_halves")
        m.d.sync += halves.eq(Cat(
            Cat(early[w].count[half:] < early[v].count[half:],
                early[w].count[half:] == early[v].count[half:],
                early[w].count[:half] < early[v].count[:half]) for w, v in pairs))

        # t+5: the bucket word; hits and every pairwise count comparison, registered (timing:
        # the minimum's AND after the compares' carry chains was a critical path).
        hits = Cat(word[w].valid & key_parts[w].all() for w in range(ways))
        below = [halves[3 * i] | halves[3 * i + 1] & halves[3 * i + 2] for i in range(len(pairs))]
        # Every count travels with its flag "all ones" (``full``), found beside the compares
        # here and kept up to date with each increment, so a saturating increment needs no
        # all-ones test in front of its carry chain (timing: that was the loop through r1).
        s6 = stage("s6", s5.valid, key=s5.key, bucket=s5.bucket, fwd=s5.fwd, hits=hits,
                   lower=Cat(below),
                   counts=Cat(word[w].count for w in range(ways)),
                   full=Cat(word[w].count.all() for w in range(ways)))

        # t+6: the minimum (one-hot, lowest way on ties), the way (the hit, else the minimum)
        # and its count, both selected while the hit test runs.
        lower = dict(zip(pairs, s6.lower))
        minimum = Cat(Cat([lower[w, v] for v in range(w)] +
                          [~lower[v, w] for v in range(w + 1, ways)]).all()
                      for w in range(ways))
        hit = s6.hits.any()
        counts = [s6.counts.word_select(w, count_bits) for w in range(ways)]
        # A count forwarded in t+7 from r2..r6 is in r1..r5 now (the result registers shift
        # every cycle): it is selected here, a cycle early, so the loop through r1 keeps only
        # its own increment and a 2:1 select (timing). Driven below, once r1..r5 exist.
        early, early_full = Signal(count_bits), Signal()
        s7 = stage("s7", s6.valid, key=s6.key, bucket=s6.bucket, fwd=s6.fwd, early=early,
                   early_full=early_full, lanes=Mux(hit, s6.hits, minimum),
                   count=Mux(hit, one_hot_select(s6.hits, counts),
                             one_hot_select(minimum, counts)),
                   full=Mux(hit, (s6.hits & s6.full).any(), (minimum & s6.full).any()))

        # t+7: count + 1 (saturating) of the chosen entry, or of the youngest forwarded one.
        # The result registers after r1 hold count + 1 already.
        def plus_one(count, full):
            """(count + 1 saturating, its full flag) of a count and its flag: saturation adds 0
            to a full count, so no select follows the carry chain (a select on the carry out
            fanned out to every bit: timing); the sum is full when count >= max - 1."""
            return (count + ~full)[:count_bits], count[1:].all()

        new_lanes, new_count, new_full = Signal(ways), Signal(count_bits), Signal()
        results = [stage("r1", s7.valid, bucket=s7.bucket, lanes=new_lanes,
                         count=new_count, full=new_full)]
        r1_next, r1_next_full = plus_one(results[0].count, results[0].full)
        for d in range(2, WINDOW + 1):
            prev = results[-1]
            # Only r2 is still matched against a bucket (see `ahead` below); the last one's
            # count is taken from the one before it (`early`).
            fields = {"bucket": prev.bucket} if d == 2 else {}
            if d < WINDOW:
                fields["next"] = r1_next if d == 2 else prev.next
                fields["next_full"] = r1_next_full if d == 2 else prev.next_full
            results.append(stage(f"r{d}", prev.valid, lanes=prev.lanes, **fields))
        forward = s7.fwd.any()
        sources = Cat(s7.fwd, ~forward)
        # The way written is one-hot throughout, in the result registers too (timing: a
        # decode after, then in front of, the forward select was the longest path).
        m.d.comb += [
            new_lanes.eq(one_hot_select(sources, [r.lanes for r in results] + [s7.lanes])),
            early.eq(one_hot_select(s6.fwd[1:],
                                     [r1_next] + [r.next for r in results[1:WINDOW - 1]])),
            early_full.eq(one_hot_select(
                s6.fwd[1:], [r1_next_full] + [r.next_full for r in results[1:WINDOW - 1]])),
            Cat(new_count, new_full).eq(Mux(s7.fwd[0], Cat(r1_next, r1_next_full),
                                            Mux(s7.fwd[1:].any(), Cat(s7.early, s7.early_full),
                                                Cat(*plus_one(s7.count, s7.full))))),
        ]

        # Back in t+3: the key d places ahead of the one in stage 3 is in stage 3 + d, and
        # will hold its result in results[d - 1] when this key reaches stage 7.
        ahead = [s4, s5, s6, s7, results[0], results[1]]
        m.d.comb += in_flight.eq(lowest_one_hot([a.valid & (a.bucket == s3.bucket) for a in ahead]))

        # t+8: write-back. A clear cancels every key in flight, so the wipe owns the port. The
        # write address, enables and data are chosen a cycle ahead and the wipe's zero entry
        # is a reset of the data register: the block RAMs (8 x ways of them, spread out) get
        # the write port straight from flip-flops. The data register is a copy of r1's key and
        # count (timing: r1's count, in the increment loop, was pulled towards the RAMs).
        wipe_addr = Signal(bucket_bits)
        wipe_last = Signal()   # wipe_addr == buckets - 1, from a register (timing)
        with m.If(self.clear):
            m.d.sync += [self.clearing.eq(1), wipe_addr.eq(0), wipe_last.eq(self.buckets == 1)]
        with m.Elif(self.clearing):
            m.d.sync += [wipe_addr.eq(wipe_addr + 1),
                         wipe_last.eq(wipe_addr == self.buckets - 2 if self.buckets > 1 else 0)]
            with m.If(wipe_last):
                m.d.sync += self.clearing.eq(0)
        wiping = self.clear | (self.clearing & ~wipe_last)   # clearing in the next cycle
        write_key = replica(key_bits, "write_key")
        write_count = replica(count_bits, "write_count")
        m.d.sync += [write_key.eq(s7.key), write_count.eq(new_count)]
        with m.If(wiping):
            m.d.sync += [write_key.eq(0), write_count.eq(0)]
        m.d.sync += [
            *(a.eq(Mux(wiping, Mux(self.clear, 0, wipe_addr + 1), s7.bucket)) for a in write_addr),
            write_en.eq(Mux(wiping, 2**ways - 1, Mux(s7.valid & ~self.clear, new_lanes, 0))),
        ]
        r1, written_valid = results[0], Signal()
        m.d.sync += written_valid.eq(~wiping)  # every count written is >= 1
        m.d.comb += write_data.eq(Cat(write_key, write_count, written_valid))

        busy = Cat(s.valid for s in (s1, s2, s3, s4, s5, s6, s7, r1)).any()
        m.d.comb += self.idle.eq(~window & ~self.clearing & ~busy)
        # The readout shares the table's registered read (its address registered first, so
        # 4 cycles); selecting the entry and testing its count take the fifth.
        read_way = [Signal(way_bits, name=f"read_way{i}") for i in range(READ_LATENCY - 1)]
        m.d.sync += [read_way[0].eq(self.read_addr[:way_bits]),
                     *(later.eq(earlier) for earlier, later in zip(read_way, read_way[1:]))]
        m.d.sync += [
            self.read_data.valid.eq(word[read_way[-1]].valid),
            self.read_data.key.eq(word[read_way[-1]].key),
            self.read_data.count.eq(word[read_way[-1]].count),
        ]
        return m
