"""AccessLearner: heavy-hitter counting on the embedding lookup stream.

Algorithm: hashed, bucketized Space-Saving with a same-bucket hazard rule. A key hashes (H3,
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

Measured on the Criteo samples (see ``hotline.sim.bench_access_learner``), 8 ways x 2048
buckets keeps >= 0.99 of the exact top-K coverage for K = 5% and 10% of the distinct keys;
the rule drops 0-0.8% of the lookups and costs <= 1e-4 of that ratio. A count-min sketch
admission filter in front helps only when the table is smaller than about 2x K; at the
default size its collision noise made the ranking worse, so it is not used. On LFE5U-85F-6
with ``primitive="ecp5"`` the learner alone places and routes at 128-132 MHz (nextpnr).
"""
from types import SimpleNamespace

from amaranth.hdl import Cat, ClockSignal, Const, Elaboratable, Instance, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from .hashing import h3_hash, h3_masks

__all__ = ["AccessLearner", "BucketTable", "READ_LATENCY", "WINDOW", "entry_layout",
           "readout_layout"]

# Keys in flight between a key's bucket read and its write-back; the hazard window may not
# be shorter (see AccessLearner's timing notes).
WINDOW = 6
# Cycles from ``read_addr`` to ``read_data``.
READ_LATENCY = 5


def entry_layout(key_bits, count_bits):
    return data.StructLayout({"key": key_bits, "count": count_bits})


def readout_layout(key_bits, count_bits):
    return data.StructLayout({"valid": 1, "key": key_bits, "count": count_bits})


def _one_hot_select(select, values):
    """OR of ``values[i]`` where one-hot ``select[i]`` is set (0 when none is)."""
    out = Const(0, len(values[0]))
    for i, value in enumerate(values):
        out = out | Mux(select[i], value, 0)
    return out


def _first(bits):
    """One-hot of the lowest set bit of ``bits`` (0 when none is)."""
    return Cat(bits[i] & ~bits[:i].any() if i else bits[0] for i in range(len(bits)))


def _dp16kd_addr(port, addr):
    """DP16KD address pins of ``port`` for a 9-bit-wide word address (pins 3..13)."""
    pins = Cat(addr, Const(0, 11))[:11]
    return {f"i_AD{port}{i}": pins[i - 3] if i >= 3 else 0 for i in range(14)}


class BucketTable(Elaboratable):
    """The bucket words: ``depth`` words of ``ways`` entries of ``width`` bits, one write port
    and one read port, both in ``sync``.

    Write: ``write_addr``, ``write_en`` (one bit per entry lane), ``write_data`` (one entry,
    written to every enabled lane) take effect at the end of the cycle. Read: ``read_data``
    in cycle t+3 is word ``read_addr`` of cycle t, from a register; a read of the word being
    written in cycle t returns undefined data (the learner never uses such a read).
    ``primitive``: None infers a Memory followed by two registers; "ecp5" instantiates DP16KD
    block RAMs (depth <= 2048, 9-bit ports) whose output register is the first of them, with
    a 0.95 ns clock-to-out instead of 5.8 ns (Yosys does not infer it). The last register is
    in the fabric, so the block RAMs' long routes end at flip-flops, not at logic.
    """

    def __init__(self, *, depth, ways, width, primitive=None):
        if primitive not in (None, "ecp5"):
            raise ValueError(f"primitive must be None or 'ecp5', not {primitive!r}")
        if primitive == "ecp5" and depth > 2048:
            raise ValueError(f"the ECP5 table holds at most 2048 buckets, not {depth}")
        self.depth, self.ways, self.width, self.primitive = depth, ways, width, primitive
        self.write_addr = Signal(range(depth))
        self.write_en = Signal(ways)
        self.write_data = Signal(width)
        self.read_addr = Signal(range(depth))
        self.read_data = Signal(ways * width)

    @staticmethod
    def dp16kd(**ports):
        """One DP16KD block RAM (the tests substitute a model: Instances do not simulate)."""
        return Instance("DP16KD", **ports)

    def elaborate(self, platform):
        m = Module()
        if self.primitive == "ecp5":
            # One DP16KD per 9 bits of an entry lane, 2048 x 9: port A writes, port B reads.
            for lane in range(self.ways):
                for lsb in range(0, self.width, 9):
                    bits = min(9, self.width - lsb)
                    dout = Signal(9, name=f"dout_{lane}_{lsb}")
                    m.submodules[f"bram_{lane}_{lsb}"] = self.dp16kd(
                        p_DATA_WIDTH_A=9, p_DATA_WIDTH_B=9, p_REGMODE_A="NOREG",
                        p_REGMODE_B="OUTREG", p_WRITEMODE_A="NORMAL", p_WRITEMODE_B="NORMAL",
                        p_RESETMODE="SYNC", p_CSDECODE_A="0b000", p_CSDECODE_B="0b000",
                        p_GSR="DISABLED",
                        i_CLKA=ClockSignal(), i_CEA=1, i_OCEA=1, i_RSTA=0,
                        i_WEA=self.write_en[lane], i_CSA0=0, i_CSA1=0, i_CSA2=0,
                        **_dp16kd_addr("A", self.write_addr),
                        **{f"i_DIA{i}": self.write_data[lsb + i] if i < bits else 0
                           for i in range(18)},
                        i_CLKB=ClockSignal(), i_CEB=1, i_OCEB=1, i_RSTB=0, i_WEB=0,
                        i_CSB0=0, i_CSB1=0, i_CSB2=0,
                        **_dp16kd_addr("B", self.read_addr),
                        **{f"i_DIB{i}": 0 for i in range(18)},
                        **{f"o_DOB{i}": dout[i] for i in range(9)})
                    m.d.sync += self.read_data[lane * self.width + lsb:][:bits].eq(dout)
        else:
            m.submodules.memory = memory = Memory(
                shape=self.width * self.ways, depth=self.depth, init=[],
                # Read-during-write data is don't-care: without this Yosys emulates old-data
                # reads with a bypass mux behind the block-RAM output.
                attrs={"no_rw_check": 1})
            wr = memory.write_port(granularity=self.width)
            rd = memory.read_port()
            m.d.comb += [
                wr.addr.eq(self.write_addr),
                wr.en.eq(self.write_en),
                wr.data.eq(self.write_data.replicate(self.ways)),
                rd.addr.eq(self.read_addr),
            ]
            array_out = Signal.like(rd.data)
            m.d.sync += [array_out.eq(rd.data), self.read_data.eq(array_out)]
        return m


class AccessLearner(wiring.Component):
    """Heavy-hitter learner tapping the lookup stream (see the module docstring).

    Parameters: ``buckets``, ``ways`` (powers of two; capacity = buckets * ways entries),
    ``key_bits``, ``count_bits``, ``seed`` (H3 hash number for the bucket index),
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
    bucket word in t+5 (block RAM, its output register, a fabric register), compares keys
    and counts in t+5, picks its way in t+6, computes count + 1 in t+7 and writes in t+8.
    The updates of the 6 keys ahead of it reach the block RAM too late for its read; under
    the hazard rule those of its bucket carry its own key, so it takes the youngest one's way
    and count + 1 (a forward from the write stage or the 5 result registers after it): the
    only one-cycle loop is that increment and select.
    """

    def __init__(self, *, buckets=2048, ways=8, key_bits=32, count_bits=32, seed=0,
                 primitive=None):
        self.primitive = primitive
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
        # read in the cycle its bucket is written.
        m.submodules.table = table = BucketTable(
            depth=self.buckets, ways=ways, width=key_bits + count_bits,
            primitive=self.primitive)
        word = data.ArrayLayout(self.entry, ways)(table.read_data)

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
            loaded every cycle."""
            regs = SimpleNamespace(valid=Signal(name=f"{name}_valid"))
            m.d.sync += regs.valid.eq(valid & ~self.clear)
            for field, value in fields.items():
                setattr(regs, field, Signal.like(value, name=f"{name}_{field}"))
                m.d.sync += getattr(regs, field).eq(value)
            return regs

        # t+1: the counted key.
        s1 = stage("s1", take, key=self.lookups.payload)

        # t+2: the bucket addresses the read port (the host readout borrows the port whenever
        # the stage is empty) and is checked against the last WINDOW counted keys.
        masks = h3_masks(self.seed, key_bits, bucket_bits)
        s2 = stage("s2", s1.valid, key=s1.key, bucket=h3_hash(s1.key, masks))
        m.d.comb += table.read_addr.eq(Mux(s2.valid, s2.bucket, self.read_addr[way_bits:]))

        history = [SimpleNamespace(valid=Signal(name=f"hist{d}_valid"),
                                   bucket=Signal(bucket_bits, name=f"hist{d}_bucket"),
                                   key=Signal(key_bits, name=f"hist{d}_key"))
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

        # t+5: the bucket word; hits, and every pairwise count comparison (one comparator
        # level per stage).
        hits = Cat((word[w].count != 0) & (word[w].key == s5.key) for w in range(ways))
        pairs = [(w, v) for w in range(ways) for v in range(w)]
        below = Cat(word[w].count < word[v].count for w, v in pairs)
        s6 = stage("s6", s5.valid, key=s5.key, bucket=s5.bucket, fwd=s5.fwd, hits=hits,
                   below=below, counts=Cat(word[w].count for w in range(ways)))

        # t+6: the way (the hit, else the minimum, lowest way on ties) and its count.
        lower = {pair: s6.below[i] for i, pair in enumerate(pairs)}
        minimum = Cat(Cat([lower[w, v] for v in range(w)] +
                          [~lower[v, w] for v in range(w + 1, ways)]).all()
                      for w in range(ways))
        lanes = Mux(s6.hits.any(), s6.hits, minimum)
        counts = [s6.counts.word_select(w, count_bits) for w in range(ways)]
        s7 = stage("s7", s6.valid, key=s6.key, bucket=s6.bucket, fwd=s6.fwd,
                   lanes=lanes, count=_one_hot_select(lanes, counts))

        # t+7: count + 1 (saturating) of the chosen entry, or of the youngest forwarded one.
        # The result registers after r1 hold count + 1 already, so the loop through r1 is
        # one increment and one select.
        def plus_one(count):
            wide = Signal(count_bits + 1)
            m.d.comb += wide.eq(count + 1)
            return Mux(wide[-1], count, wide[:count_bits])

        new_way, new_count = Signal(way_bits), Signal(count_bits)   # driven below
        results = [stage("r1", s7.valid, key=s7.key, bucket=s7.bucket, way=new_way,
                         count=new_count)]
        r1_next = plus_one(results[0].count)
        for d in range(2, WINDOW + 1):
            prev = results[-1]
            # Only r2 is still matched against a bucket (see `ahead` below).
            bucket = {"bucket": prev.bucket} if d == 2 else {}
            results.append(stage(f"r{d}", prev.valid, way=prev.way,
                                 next=r1_next if d == 2 else prev.next, **bucket))
        own_way = _one_hot_select(s7.lanes, [Const(w, way_bits) for w in range(ways)])
        forward = s7.fwd.any()
        sources = Cat(s7.fwd, ~forward)
        m.d.comb += [
            new_way.eq(_one_hot_select(sources, [r.way for r in results] + [own_way])),
            new_count.eq(_one_hot_select(
                sources, [r1_next] + [r.next for r in results[1:]] + [plus_one(s7.count)])),
        ]

        # Back in t+3: the key d places ahead of the one in stage 3 is in stage 3 + d, and
        # will hold its result in results[d - 1] when this key reaches stage 7.
        ahead = [s4, s5, s6, s7, results[0], results[1]]
        m.d.comb += in_flight.eq(_first(Cat(a.valid & (a.bucket == s3.bucket) for a in ahead)))

        # t+8: write-back. A clear cancels every key in flight, so the wipe owns the port.
        wipe_addr = Signal(bucket_bits)
        with m.If(self.clear):
            m.d.sync += [self.clearing.eq(1), wipe_addr.eq(0)]
        with m.Elif(self.clearing):
            m.d.sync += wipe_addr.eq(wipe_addr + 1)
            with m.If(wipe_addr == self.buckets - 1):
                m.d.sync += self.clearing.eq(0)

        r1 = results[0]
        new_entry = Signal(self.entry)
        m.d.comb += [new_entry.key.eq(r1.key), new_entry.count.eq(r1.count)]
        with m.If(self.clearing):
            m.d.comb += [table.write_addr.eq(wipe_addr), table.write_en.eq(2**ways - 1)]
        with m.Elif(r1.valid):
            m.d.comb += [
                table.write_addr.eq(r1.bucket),
                table.write_en.eq(Const(1, ways) << r1.way),
                table.write_data.eq(new_entry),
            ]

        busy = Cat(s.valid for s in (s1, s2, s3, s4, s5, s6, s7, r1)).any()
        m.d.comb += self.idle.eq(~window & ~self.clearing & ~busy)
        # The readout shares the table's registered read; selecting the entry and testing its
        # count take a cycle each, off the pipeline's timing paths.
        read_way = [Signal(way_bits, name=f"read_way{i}") for i in range(3)]
        m.d.sync += [read_way[0].eq(self.read_addr[:way_bits]),
                     read_way[1].eq(read_way[0]), read_way[2].eq(read_way[1])]
        read_entry = Signal(self.entry)
        m.d.sync += [
            read_entry.eq(word[read_way[2]]),
            self.read_data.valid.eq(read_entry.count != 0),
            self.read_data.key.eq(read_entry.key),
            self.read_data.count.eq(read_entry.count),
        ]
        return m
