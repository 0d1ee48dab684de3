"""ColdKeySet: batch-local first-appearance numbering of keys (the fragmenter's cold-key dedup).

Beats with ``insert`` set get ``slot`` = the index of their key among the distinct inserted
keys of the current batch, in order of first appearance, and ``first`` = this is that first
appearance. Other beats pass through in order (``slot`` = 0, ``first`` = 0). ``eob`` marks the
last beat of a batch: the next beat starts a new batch, numbered from 0 again.

Organisation: a two-choice hash set. Two memories (tables 0 and 1, ``bucket_hash`` seeds ``seeds``) of
``capacity // (2 * ways)`` buckets x ``ways`` entries {epoch, key, slot}; an entry belongs to the
current batch iff its epoch equals the batch epoch, so a new batch needs no clearing pass. A new
key goes to the lowest free way of the bucket with more free ways (table 0 on a tie), else to
the lowest free ``stash`` entry; with both full it still gets the next slot but is flagged
``overflow`` (a later repeat of it would get a new slot: dedup is no longer exact in that
batch, and the fragmenter counts it as an error). Sized at capacity >= 2x the distinct keys per
batch, overflow needs five or more keys in both buckets of a key and a full stash.
``max_keys`` bounds the slots per batch; a new key beyond it is flagged ``overflow``, slot 0.

Partitions and lanes: with ``partitions`` P > 1 the set is P such sets (each ``capacity // P``
entries and its own stash), a key belonging to the one its partition hash
(`hotline.contract.config.COLD_PARTITION_SEED`) names, and a beat carries ``lanes`` keys
(key and insert per lane, ``lanes`` <= P): the keys inserted by one beat must belong to
distinct partitions (the sender's duty: the Fragmenter's dispatcher), and are numbered in lane
order, then before the next beat's. The slots and ``max_keys`` stay global: the result is the
one-lane set's on the keys in order, except that a partition's tables and stash fill alone
(`hotline.model.cold_key_set.ColdKeySetModel` with the same ``partitions``). The partitions
run in lockstep (one pipeline each, sharing the batch count, the epochs and the output queue);
only the decision's slot numbering crosses them. With ``lanes`` = 1 the ports are the one-key
layouts.

Epochs count 1 .. 2**epoch_bits - 1 (0 = never valid). After the batch with the last epoch,
and after reset, both memories are cleared, every block-RAM bank at once (`clear_cycles`:
``min(capacity // (2 * ways * partitions), BANK_DEPTH)`` cycles, ``i.ready`` low, ``clearing``
high).

Timing: ``i`` -> ``o`` latency ``LATENCY`` = 8 cycles, 9 with partitions (from the ``i`` handshake to ``o.valid``
when ``o`` is not stalled), one beat per cycle sustained, in order. The pipeline itself never
stalls: its beats wait in an ``OutputQueue`` of ``QUEUE_DEPTH + 1`` entries, and ``i.ready`` is
low while the beats accepted and not yet delivered could fill it (no loss, duplication or
bubble; ``o.ready`` reaches ``i.ready`` through a register only). The tables are
``BucketTable`` block RAMs (banks of at most ``BANK_DEPTH`` buckets) read every cycle into
registers, and written one cycle late through registers; a read misses the inserts of the
``FORWARD`` beats ahead of it, which the decision takes from their recorded outcomes (key
comparisons with them are made at the start of the pipeline), so a key inserted by one beat
is seen by the very next one. Timing paths end at flip-flops; the loop from one decision to
the next is a few LUTs (forwarded hit, free-way count, way choice).

Stages (``ColdKeySet.STAGES``, each a ``wiring.Component`` whose docstring states its latency,
throughput and backpressure): `ColdInput` (the epochs, ``i.ready``, each lane's key to its
partition's first register and its tables' read addresses: the partition-count branch), the
partitions' pipelines (in the set itself: the tables, whose instance names the floorplan
fixes, forwarding, match, decision and slot numbering), and `ColdLaneAnswers` (each
partition's answer back to its lane, the register in front of the output queue).
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from hotline.contract.config import COLD_PARTITION_SEED, COLD_SEEDS, PRODUCT, cold_slot_width
from hotline.contract.hashing import bucket_hash

from .bram import BucketTable
from .lib.onehot import binary_select, lowest_index, one_hot_select, popcount
from .lib.output_queue import OutputQueue
from .lib.replica import replica

__all__ = ["ColdKeySet"]


def _lanes_layout(fields, lanes):
    """{name: width} with the per-key fields (all but ``eob`` and ``user``) as
    ``ArrayLayout(width, lanes)``; at one lane, as they are."""
    return data.StructLayout({
        n: w if lanes == 1 or n in ("eob", "user") else data.ArrayLayout(w, lanes)
        for n, w in fields.items()})


def _lane(value, lanes, j):
    """Lane ``j`` of a per-lane field (the field itself at one lane)."""
    return value if lanes == 1 else value[j]


class ColdInput(wiring.Component):
    """The ColdKeySet ``cold``'s input stage: ``i`` beats -> each partition's first pipeline
    register ``s1`` and its tables' read addresses.

    ``i`` In: the set's input; ``i.ready`` = ``room`` (the output queue's), not ``clearing``,
    and not waiting for the clearing pass after the last epoch's batch (it counts the batches'
    epochs, 1 .. 2**epoch_bits - 1: after the end of the last epoch's batch no beat is taken
    until the clearing pass is over, since the next beat must read the cleared tables).
    ``s1`` Out (per partition, ``cold.front_layout``): the partition's key (one partition:
    the beat's; with partitions, that of the lane whose key's partition hash names it, with
    its ``lane``, ``insert`` = there is one), the beat's ``eob``, ``user`` and epoch, and the
    key's bucket in each table; ``rd_addr`` Out [partition][table][bank]: those buckets' low
    bits, one register per bank (`replica`), the tables' read addresses. ``fed``: a beat
    enters ``s1`` at this edge.

    Latency: a beat taken in cycle t is in ``s1`` in cycle t + 1 with one partition, t + 2
    with partitions (``s0``: each partition's key selected from its lane, registered; timing:
    the partition hashes and the select in front of the bucket hashes and their fan-out to
    the read-address replicas made the 2-lane set's input paths, 10.8-11.1 ns). Throughput:
    one beat per cycle. Backpressure: ``i.ready`` as above; past it nothing stalls.
    """

    def __init__(self, cold):
        self.cold = cold
        _, low_bits, banks = cold.banks()
        super().__init__({
            "i": In(cold.i.signature.flip()),
            "room": In(1), "clearing": In(1),
            "s1": Out(data.ArrayLayout(cold.front_layout, cold.partitions)),
            "rd_addr": Out(data.ArrayLayout(data.ArrayLayout(
                data.ArrayLayout(low_bits, len(banks)), 2), cold.partitions)),
            "fed": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        c = self.cold
        P, L, parts, tables = c.partitions, c.lanes, range(c.partitions), (0, 1)
        _, low_bits, banks = c.banks()
        max_epoch = (1 << c.epoch_bits) - 1
        sfx = ["" if P == 1 else f"_p{p}" for p in parts]
        taken = self.i.valid & self.i.ready
        ip = self.i.payload
        in_epoch = Signal(c.epoch_bits, init=1)
        wrap_wait = Signal()
        m.d.comb += self.i.ready.eq(self.room & ~self.clearing & ~wrap_wait)
        with m.If(taken & ip.eob):
            m.d.sync += in_epoch.eq(Mux(in_epoch == max_epoch, 1, in_epoch + 1))
            with m.If(in_epoch == max_epoch):
                m.d.sync += wrap_wait.eq(1)
        with m.If(self.clearing):
            m.d.sync += wrap_wait.eq(0)

        s1 = [Signal(c.front_layout, name=f"s1{sfx[p]}", reset_less=True) for p in parts]
        s0 = [Signal(c.front_layout, name=f"s0{sfx[p]}", reset_less=True) for p in parts]
        rd_addr = [[[replica(low_bits, f"rd_addr{t}_{b}{sfx[p]}") for b in banks] for t in tables]
                   for p in parts]
        m.d.comb += [self.s1[p].eq(s1[p]) for p in parts]
        m.d.comb += [self.rd_addr[p][t][b].eq(rd_addr[p][t][b])
                     for p in parts for t in tables for b in banks]
        # Each lane's key to its partition's pipeline.
        in_key = [_lane(ip.key, L, j) for j in range(L)]
        in_insert = [_lane(ip.insert, L, j) for j in range(L)]
        in_part = [Signal(ceil_log2(P), name=f"in_part{j}") for j in range(L)]
        m.d.comb += [x.eq(c.partition_hash.expr(k)) for x, k in zip(in_part, in_key)]
        if P == 1:
            m.d.comb += self.fed.eq(taken)
        else:
            valid0 = Signal()
            m.d.sync += valid0.eq(taken)
            m.d.comb += self.fed.eq(valid0)
        for p in parts:
            if P == 1:
                first, key, insert, at = s1[p], in_key[0], in_insert[0], C(0, 0)
            else:
                sel = [in_insert[j] & (in_part[j] == p) for j in range(L)]
                first, key = s0[p], one_hot_select(sel, in_key)
                insert, at = Cat(*sel).any(), lowest_index(sel)[1][:ceil_log2(L)]
            m.d.sync += [
                first.key.eq(key), first.insert.eq(insert), first.lane.eq(at),
                first.eob.eq(ip.eob), first.user.eq(ip.user), first.epoch.eq(in_epoch),
            ]
            if P > 1:
                m.d.sync += [getattr(s1[p], f).eq(getattr(s0[p], f))
                             for f in ("key", "insert", "eob", "user", "epoch", "lane")]
            for t in tables:
                bucket = c.hashes[t].expr(s0[p].key if P > 1 else key)
                m.d.sync += [s1[p].bucket[t].eq(bucket),
                             *(a.eq(bucket[:low_bits]) for a in rd_addr[p][t])]
        return m


class ColdLaneAnswers(wiring.Component):
    """The ColdKeySet ``cold``'s output register: each partition's decision back to its
    key's lane.

    ``decided`` In (per partition): the decided beat's ``key``, ``insert`` and ``lane``, and
    its answer (``first``: a new key, ``overflow``; one partition: its ``slot``; with
    partitions ``found``: a repeat, of ``found_slot``); ``eob``, ``user`` and ``valid`` In:
    the beat's; with partitions ``count`` In, the batch's slots before the beat's. ``o`` Out
    (the set's ``o`` payload): one partition: its answer; with partitions, lane j takes the
    answer of the partition whose inserted key came from lane j (``insert``: there is one;
    else its fields are 0), and a new key's slot is numbered here, from the lanes' ``first``
    flags (`ColdKeySet._numbered`, as the partitions number them for their own records), so
    the lane select does not come after the numbering's adder (timing: the partitions' slots
    through it made the 2-lane set's output register late, 15.5 ns).

    Latency: 1 cycle (a register). Throughput: one beat per cycle. Backpressure: none
    (``o.ready`` is not looked at: the set's output queue has room for every beat).
    """

    def __init__(self, cold):
        self.cold = cold
        answer = ({"slot": cold.slot_width} if cold.partitions == 1 else
                  {"found": 1, "found_slot": cold.slot_width})
        decided = data.StructLayout({"key": cold.key_width, "insert": 1,
                                     "lane": ceil_log2(cold.lanes), **answer,
                                     "first": 1, "overflow": 1})
        super().__init__({
            "decided": In(data.ArrayLayout(decided, cold.partitions)),
            **({"count": In(cold.count_shape)} if cold.partitions > 1 else {}),
            "eob": In(1), "user": In(cold.user_width), "valid": In(1),
            "o": Out(cold.o.signature),
        })

    def elaborate(self, platform):
        m = Module()
        P, L = self.cold.partitions, self.cold.lanes
        sd = [self.decided[p] for p in range(P)]
        so = Signal(self.o.payload.shape(), reset_less=True)
        so_valid = Signal()
        m.d.comb += [self.o.valid.eq(so_valid), self.o.payload.eq(so)]
        m.d.sync += [so_valid.eq(self.valid), so.eob.eq(self.eob), so.user.eq(self.user)]
        new = []    # per lane: its key is new
        for j in range(L):
            if P == 1:
                sel = [C(1, 1)]
                m.d.sync += _lane(so.insert, L, j).eq(sd[0].insert)
                slot = one_hot_select(sel, [x.slot for x in sd])
            else:
                sel = [sd[p].insert & (sd[p].lane == j) for p in range(P)]
                m.d.sync += _lane(so.insert, L, j).eq(Cat(*sel).any())
                new.append(one_hot_select(sel, [x.first for x in sd]))
                room, numbered = self.cold._numbered(self.count,
                                                     popcount(new[:j]) if j else C(0, 1))
                slot = Mux(one_hot_select(sel, [x.found for x in sd]),
                           one_hot_select(sel, [x.found_slot for x in sd]),
                           Mux(new[j] & room, numbered, 0))
            m.d.sync += [
                _lane(so.key, L, j).eq(one_hot_select(sel, [x.key for x in sd])),
                _lane(so.slot, L, j).eq(slot),
                *(_lane(getattr(so, f), L, j).eq(one_hot_select(sel, [x[f] for x in sd]))
                  for f in ("first", "overflow")),
            ]
        return m


class ColdKeySet(wiring.Component):
    """Batch-local dedup of keys: ``i`` {key, insert, eob, user} -> ``o`` {key, slot, first,
    insert, eob, overflow, user}, ``key``, ``insert`` (and ``slot``, ``first``, ``overflow``)
    per lane with ``lanes`` > 1. Semantics and timing in the module docstring.

    Parameters: ``capacity`` (hash-set entries, power of two), ``ways`` (per bucket, power of
    two), ``stash`` (per partition), ``max_keys`` (slots per batch), ``key_width``,
    ``user_width``, ``epoch_bits``, ``seeds`` (two distinct hash seeds), ``hash_family``,
    ``primitive`` (the tables' ``BucketTable`` primitive: None infers block RAM, for simulation
    and any FPGA; "ecp5": DP16KD instances that use their output register), ``partitions``
    (power of two), ``lanes`` (keys per beat, <= ``partitions``; default ``partitions``). The
    geometry defaults are the product configuration's (`hotline.contract.config.PRODUCT`).
    """
    LATENCY = 8   # one partition; with partitions, an input stage more (`latency`)
    # Its stage components (see the module docstring).
    STAGES = (ColdInput, ColdLaneAnswers)
    # Buckets per block-RAM bank (BucketTable's "ecp5" limit).
    BANK_DEPTH = 2048
    # Results the output queue holds besides its output register: enough for one beat per
    # cycle (LATENCY beats are outstanding then).
    QUEUE_DEPTH = LATENCY + 1   # with partitions, one more (the instance's)
    # Beats ahead whose inserts a table read can miss, hence forwarded: BucketTable.LATENCY,
    # plus the compare and match stages between the read and the decision, plus the write
    # register.
    FORWARD = BucketTable.LATENCY + 3

    def __init__(self, capacity=PRODUCT.cold_capacity, *, ways=PRODUCT.cold_ways,
                 stash=PRODUCT.cold_stash, max_keys=PRODUCT.cold_max_keys, key_width=32,
                 user_width=1, epoch_bits=PRODUCT.cold_kwargs()["epoch_bits"], seeds=COLD_SEEDS,
                 hash_family="tabulation", primitive=None, partitions=1, lanes=None):
        lanes = partitions if lanes is None else lanes
        for name, value in (("capacity", capacity), ("ways", ways), ("partitions", partitions),
                            ("lanes", lanes)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if lanes > partitions:
            raise ValueError(f"lanes ({lanes}) must not exceed partitions ({partitions})")
        if capacity < 4 * ways * partitions:
            raise ValueError(f"capacity ({capacity}) must be at least 4 * ways * partitions "
                             f"({4 * ways * partitions})")
        if stash < 1 or max_keys < 1 or epoch_bits < 2 or len(seeds) != 2 or seeds[0] == seeds[1]:
            raise ValueError("need stash >= 1, max_keys >= 1, epoch_bits >= 2, two distinct seeds")
        self.capacity, self.ways, self.stash, self.max_keys = capacity, ways, stash, max_keys
        self.key_width, self.user_width, self.epoch_bits = key_width, user_width, epoch_bits
        self.seeds, self.primitive = tuple(seeds), primitive
        self.partitions, self.lanes = partitions, lanes
        self.LATENCY = self.latency(partitions)
        self.QUEUE_DEPTH = self.LATENCY + 1
        self.buckets = capacity // (2 * ways * partitions)   # per table and partition
        self.slot_width = cold_slot_width(max_keys)
        # The batch's slot count (with partitions it takes every new key of a beat while below
        # max_keys, so it passes max_keys by less than a beat's keys, then holds).
        self.count_shape = range(max_keys + partitions)
        self.hash_family = hash_family
        self.hashes = [bucket_hash(s, key_width, ceil_log2(self.buckets), hash_family) for s in seeds]
        self.partition_hash = bucket_hash(COLD_PARTITION_SEED, key_width, ceil_log2(partitions),
                                          hash_family)
        # A partition's first pipeline register (`ColdInput.s1`).
        self.front_layout = data.StructLayout({
            "key": key_width, "insert": 1, "eob": 1, "user": user_width, "epoch": epoch_bits,
            "bucket": data.ArrayLayout(ceil_log2(self.buckets), 2), "lane": ceil_log2(lanes)})
        self.entry_layout = data.StructLayout({"epoch": epoch_bits, "key": key_width,
                                               "slot": self.slot_width})
        self.bucket_layout = data.ArrayLayout(self.entry_layout, ways)
        super().__init__({
            "i": In(stream.Signature(_lanes_layout({
                "key": key_width, "insert": 1, "eob": 1, "user": user_width}, lanes))),
            "o": Out(stream.Signature(_lanes_layout({
                "key": key_width, "slot": self.slot_width, "first": 1, "insert": 1, "eob": 1,
                "overflow": 1, "user": user_width}, lanes))),
            "clearing": Out(1),
        })

    @classmethod
    def clear_cycles(cls, capacity, ways, partitions=1):
        """Cycles of a clearing pass of a set of this geometry: one per bucket of a block-RAM
        bank, since every bank of both tables and all partitions is written at once."""
        return min(capacity // (2 * ways * partitions), cls.BANK_DEPTH)

    def banks(self):
        """(bank bits, low bits, banks) of a table's buckets: a table deeper than BANK_DEPTH
        is split into banks, selected after the read registers, so each block RAM output goes
        to flip-flops only (timing)."""
        bucket_bits = ceil_log2(self.buckets)
        bank_bits = max(0, bucket_bits - ceil_log2(self.BANK_DEPTH))
        return bank_bits, bucket_bits - bank_bits, range(1 << bank_bits)

    @classmethod
    def latency(cls, partitions):
        """``i`` -> ``o`` latency of a set of ``partitions``: with more than one, the
        lane-to-partition select has a register stage of its own (``s0``)."""
        return cls.LATENCY + (partitions > 1)

    def elaborate(self, platform):
        m = Module()
        P, ways = self.partitions, self.ways
        parts = range(P)
        bucket_bits = ceil_log2(self.buckets)
        max_epoch = (1 << self.epoch_bits) - 1
        window = self.FORWARD
        sfx = ["" if P == 1 else f"_p{p}" for p in parts]   # signal name suffixes

        low_bits = self.banks()[1]
        m.submodules.front = front = ColdInput(self)
        table, wr_addr, wr_data, wr_en = self._tables(m, front.rd_addr, sfx)

        count = Signal(self.count_shape)
        stash_key = [Array(Signal(self.key_width, name=f"stash_key{i}{sfx[p]}", reset_less=True)
                           for i in range(self.stash)) for p in parts]
        stash_slot = [Array(Signal(self.slot_width, name=f"stash_slot{i}{sfx[p]}",
                                   reset_less=True) for i in range(self.stash)) for p in parts]
        stash_valid = [Signal(self.stash, name=f"stash_valid{sfx[p]}") for p in parts]

        # Pipeline, never stalled: s1 (hashes registered: the tables' read address), s2, s3,
        # sc (the words read are in table[t].read_data: compare), sm (match), sd (decide),
        # then so into the output queue; one per partition, all in lockstep (a partition
        # without a key in a beat gets a non-insert beat). Each beat carries the epoch of its
        # batch, counted at the input, and its key's lane.
        # Comparisons with the ``window`` beats ahead, made at s1 (in s3 from s3 on, `_carry`)
        # and carried along:
        # same_key[k] / same_bucket[k][t]: the beat k + 1 ahead is valid, in the same batch,
        # an insert (same_key only) with the same key / the same bucket in table t.
        # s1 is the input stage's (`ColdInput`).
        stages = 3 + BucketTable.LATENCY  # s1 .. sd
        beat = data.StructLayout({**self.front_layout.members, "same_key": window,
                                  "same_bucket": data.ArrayLayout(2, window)})
        s = [[front.s1[p]] + [Signal(beat, name=f"s{j + 1}{sfx[p]}", reset_less=True)
                              for j in range(1, stages)] for p in parts]
        valid = Signal(stages)  # of s1 .. sd
        vd = valid[-1]
        # What the last ``window`` beats decided (hist[0]: the beat decided in the last cycle).
        hist_layout = data.StructLayout({"wrote": 2, "stored": 1, "slot": self.slot_width})
        hist = [[Signal(hist_layout, name=f"hist{k}{sfx[p]}", reset_less=True)
                 for k in range(window)] for p in parts]
        last = [Signal(data.StructLayout({"key": self.key_width, "epoch": self.epoch_bits,
                                          "insert": 1, "bucket": data.ArrayLayout(bucket_bits, 2)}),
                       name=f"last{sfx[p]}", reset_less=True)
                for p in parts]  # of the beat decided in the last cycle
        last_valid = Signal()

        clearing = self.clearing
        # Every bank takes the same low address bits: a pass walks one bank's buckets.
        clear_addr = Signal(range(self.clear_cycles(self.capacity, ways, P)))

        taken = self.i.valid & self.i.ready
        queue, room = OutputQueue.behind_pipeline(m, self.o, self.QUEUE_DEPTH, taken)
        wiring.connect(m, wiring.flipped(self.i), front.i)
        m.d.comb += [front.room.eq(room), front.clearing.eq(clearing)]
        m.d.sync += valid.eq(Cat(front.fed, valid[:-1]))
        for p in parts:
            self._carry(m, s[p], valid, last[p], last_valid, sfx[p])

        decided = [self._match_and_decide(m, p, sfx[p], s[p], valid, hist[p], table[p],
                                          stash_key[p], stash_slot[p], stash_valid[p], low_bits)
                   for p in parts]

        # The slots: a new key gets the batch's count, plus the new keys of this beat in
        # earlier lanes (other partitions).
        sd = [s[p][-1] for p in parts]
        new = [decided[p]["new"] for p in parts]
        if P == 1:
            base = [count]
            room_keys = [count < self.max_keys]
            n_new = popcount([new[0] & room_keys[0]])
            counting = vd
        else:
            before = [popcount([new[q] & (sd[q].lane < sd[p].lane) for q in parts if q != p])
                      for p in parts]
            room_keys, base = zip(*(self._numbered(count, k) for k in before))
            # Every new key counts while the count is below max_keys, so the count's loop
            # holds no room decision (timing: the decisions through the room select into the
            # count, and into room registers for the next beat, made the 2-lane set's count
            # and room late, 14.9-15.2 ns).
            n_new = popcount(new)
            counting = vd & (count < self.max_keys)
        placed = [self._place(m, p, sd[p], vd, decided[p], base, room_keys, hist[p], last[p],
                              (wr_addr[p], wr_data[p], wr_en[p]), clear_addr,
                              (stash_key[p], stash_slot[p], stash_valid[p]), sfx[p])
                  for p in parts]
        m.d.sync += last_valid.eq(vd & ~clearing)

        # Each partition's answer back to its key's lane.
        m.submodules.back = back = ColdLaneAnswers(self)
        m.d.comb += [back.valid.eq(vd), back.eob.eq(sd[0].eob), back.user.eq(sd[0].user)]
        fields = ("slot",) if P == 1 else ("found", "found_slot")
        for p in parts:
            d, answer = back.decided[p], {**decided[p], **placed[p]}
            m.d.comb += [d.key.eq(sd[p].key), d.insert.eq(sd[p].insert), d.lane.eq(sd[p].lane),
                         *(d[f].eq(answer[f]) for f in fields + ("first", "overflow"))]
        if P > 1:
            m.d.comb += back.count.eq(count)
        wiring.connect(m, back.o, queue.i)

        with m.If(counting):
            m.d.sync += count.eq(count + n_new)
        with m.If(vd & sd[0].eob):
            m.d.sync += [count.eq(0), *(v.eq(0) for v in stash_valid)]

        # Reset starts with a clearing pass, since the memories keep their contents.
        with m.FSM(init="CLEAR"):
            with m.State("CLEAR"):
                m.d.comb += clearing.eq(1)
                m.d.sync += clear_addr.eq(clear_addr + 1)
                with m.If(clear_addr == self.clear_cycles(self.capacity, ways, P) - 1):
                    m.next = "RUN"
            with m.State("RUN"):
                with m.If(vd & sd[0].eob & (sd[0].epoch == max_epoch)):
                    m.next = "CLEAR"
        return m

    def _numbered(self, count, before):
        """With partitions: (room, slot) of a new key after ``before`` new keys of its beat
        (in earlier lanes): slot ``count + before``, room while that is below ``max_keys``. The
        room is a select by ``before`` of compares of ``count`` alone (timing: no compare
        behind the adder; registered sums for the slot too, a select by ``before``, made the
        2-lane set slower: 97.27 against 99.99 MHz)."""
        below = Cat(count + k < self.max_keys for k in range(self.partitions))
        return below.bit_select(before, 1), count + before

    def _carry(self, m, s, valid, last, last_valid, sfx):
        """One partition's pipeline registers ``s`` (s1 .. sd) carry the beat along; at s1 it
        is compared with the ``FORWARD`` beats ahead (``same_key``, ``same_bucket``, valid from
        s3 on), the last of them the one decided in the last cycle (``last``)."""
        window, tables = self.FORWARD, (0, 1)
        carried = ("key", "insert", "eob", "user", "epoch", "bucket", "lane")
        for j in range(1, len(s)):
            m.d.sync += [getattr(s[j], f).eq(getattr(s[j - 1], f)) for f in carried]
            if j >= 3:
                m.d.sync += [s[j].same_key.eq(s[j - 1].same_key),
                             s[j].same_bucket.eq(s[j - 1].same_bucket)]
        ahead = ([(valid[j], s[j]) for j in range(1, len(s))] + [(last_valid, last)])
        ahead = ahead[:window]
        assert len(ahead) == window and len(s) >= 4   # sc, their first use, is s4 or later
        # The compares are registered in parts (the batch, each half of the key, each table's
        # bucket) beside s2 and ANDed into s3, as the first use is at sc (timing: a 32-bit
        # compare ANDed with the epoch compare into s2 was the 2-lane set's latest input,
        # 12.5 ns, the keys fanning out to 6 compares each).
        half = self.key_width // 2
        parts = Signal(data.StructLayout({
            "in_batch": window, "insert": window, "key_lo": window, "key_hi": window,
            "bucket": data.ArrayLayout(data.ArrayLayout(1, 2), window)}),
            name=f"compare_parts{sfx}", reset_less=True)
        for k, (v, b) in enumerate(ahead):
            m.d.sync += [parts.in_batch[k].eq(valid[0] & v & (b.epoch == s[0].epoch)),
                         parts.insert[k].eq(b.insert),
                         parts.key_lo[k].eq(b.key[:half] == s[0].key[:half]),
                         parts.key_hi[k].eq(b.key[half:] == s[0].key[half:]),
                         *(parts.bucket[k][t].eq(b.bucket[t] == s[0].bucket[t]) for t in tables)]
            m.d.sync += s[2].same_key[k].eq(parts.in_batch[k] & parts.insert[k] &
                                            parts.key_lo[k] & parts.key_hi[k])
            for t in tables:
                m.d.sync += s[2].same_bucket[k][t].eq(parts.in_batch[k] & parts.bucket[k][t])

    def _place(self, m, p, sd, vd, d, base, room_keys, hist, last, writes, clear_addr, stash,
               sfx):
        """Partition ``p``'s decision carried out: a new key (``d`` from `_match_and_decide`,
        slot ``base[p]`` if ``room_keys[p]``) into its way, the stash, or flagged overflow;
        the table write registers ``writes`` (the clearing pass's too), the stash, ``hist``
        and ``last``. Returns its answer {slot, first, overflow}."""
        ways, window, clearing = self.ways, self.FORWARD, self.clearing
        bank_bits, low_bits, banks = self.banks()
        wr_addr, wr_data, wr_en = writes
        stash_key, stash_slot, stash_valid = stash
        new, b = d["new"], base[p]
        any_way = d["any0"] | d["any1"]
        to_table = new & room_keys[p] & any_way
        to_stash = new & room_keys[p] & ~any_way & d["stash_free"]
        overflow = new & ~(to_table | to_stash)
        wrote = Cat(to_table & ~d["use1"], to_table & d["use1"])
        slot = Mux(sd.insert, Mux(d["found"], d["found_slot"], Mux(room_keys[p], b, 0)), 0)
        m.d.sync += [
            hist[0].wrote.eq(wrote),
            hist[0].stored.eq(vd & sd.insert & (d["found"] | to_table | to_stash)),
            hist[0].slot.eq(slot),
            *(hist[k].eq(hist[k - 1]) for k in range(1, window)),
            last.key.eq(sd.key), last.epoch.eq(sd.epoch),
            last.insert.eq(sd.insert), last.bucket.eq(sd.bucket),
        ]
        entry = Signal(self.entry_layout, name=f"entry{sfx}")
        m.d.comb += [entry.epoch.eq(sd.epoch), entry.key.eq(sd.key), entry.slot.eq(b)]
        for t in (0, 1):
            addr = Mux(clearing, clear_addr, sd.bucket[t])[:low_bits]
            for k in banks:
                hit = wrote[t] & (sd.bucket[t][low_bits:] == k) if bank_bits else wrote[t]
                m.d.sync += [
                    wr_addr[t][k].eq(addr),
                    wr_data[t][k].eq(Mux(clearing, 0, entry)),
                    wr_en[t][k].eq(Mux(clearing, -1, Mux(hit, C(1, ways) << d["way"][t], 0))),
                ]
        with m.If(to_stash):
            m.d.sync += stash_valid.eq(stash_valid | (1 << d["stash_index"]))
        # The free entry's key and slot are written without the room decision (timing: the
        # room takes the other partitions' new keys, and it reached these 45-bit enables): an
        # entry not made valid is not read.
        with m.If(new & ~any_way & d["stash_free"]):
            m.d.sync += [stash_key[d["stash_index"]].eq(sd.key),
                         stash_slot[d["stash_index"]].eq(b)]
        return dict(slot=slot, first=new, overflow=overflow)

    def _tables(self, m, rd_addr, sfx):
        """The tables' banks (submodules ``table{t}_{b}{sfx}``, read at ``rd_addr``:
        `ColdInput`'s) and their write registers: (table, wr_addr, wr_data, wr_en), each
        [partition][table][bank]."""
        # The tables read every cycle, from a register (BucketTable). Writes reach them one
        # cycle late through registers (timing), so a word read at s1 misses the writes of the
        # ``FORWARD`` beats ahead of it: their effect is forwarded (see the decide stage).
        # Every bank has its own copy of the address and data registers (`replica`): one
        # register driving the pins of all the tables' block RAMs, spread over the die, made
        # 14 ns routes (timing).
        bank_bits, low_bits, banks = self.banks()
        parts, tables, ways = range(self.partitions), (0, 1), self.ways
        table = [[[BucketTable(depth=self.buckets >> bank_bits, ways=ways,
                               width=self.entry_layout.size, primitive=self.primitive)
                   for b in banks] for t in tables] for p in parts]
        wr_addr = [[[replica(low_bits, f"wr_addr{t}_{b}{sfx[p]}") for b in banks] for t in tables]
                   for p in parts]
        wr_data = [[[replica(self.entry_layout.size, f"wr_data{t}_{b}{sfx[p]}") for b in banks]
                    for t in tables] for p in parts]
        wr_en = [[[Signal(ways, name=f"wr_en{t}_{b}{sfx[p]}") for b in banks] for t in tables]
                 for p in parts]
        for p in parts:
            for t in tables:
                for b, bank in enumerate(table[p][t]):
                    m.submodules[f"table{t}_{b}{sfx[p]}"] = bank
                    m.d.comb += [bank.read_addr.eq(rd_addr[p][t][b]),
                                 bank.write_addr.eq(wr_addr[p][t][b]),
                                 bank.write_en.eq(wr_en[p][t][b]),
                                 bank.write_data.eq(wr_data[p][t][b])]
        return table, wr_addr, wr_data, wr_en

    def _match_and_decide(self, m, p, sfx, s, valid, hist, table, stash_key, stash_slot,
                          stash_valid, low_bits):
        """One partition's compare (sc) and match (sm) stages, and its decision's own part:
        {new, found, found_slot, any0, any1, use1, way, stash_free, stash_index} of sd."""
        ways, tables, window = self.ways, (0, 1), self.FORWARD
        way_bits = max(1, ceil_log2(ways))
        sc, sm, sd, vd = s[-3], s[-2], s[-1], valid[-1]

        # Compare (sc): each way of the words read against the key and the epoch; registered
        # with the ways' slots, so the match starts from flip-flops (timing: a 32-bit compare
        # before the hit-slot select made the match stage too deep for 100 MHz).
        compared = data.StructLayout({"hit": ways, "live": ways,
                                      "slot": data.ArrayLayout(self.slot_width, ways)})
        cr = [Signal(compared, name=f"compared{t}{sfx}", reset_less=True) for t in tables]
        # Each table, and the stash, compares with its own copy of sc's key (timing: the key
        # register, pulled towards both tables' block RAMs, made the compares at s1 and sc
        # late).
        sc_key = [replica(self.key_width, f"sc_key{t}{sfx}") for t in ("0", "1", "_stash")]
        m.d.sync += [k.eq(s[-4].key) for k in sc_key]
        for t in tables:
            word = Array(bank.read_data for bank in table[t])[sc.bucket[t][low_bits:]]
            word = self.bucket_layout(word)
            for w in range(ways):
                live = word[w].epoch == sc.epoch
                m.d.sync += [cr[t].live[w].eq(live),
                             cr[t].hit[w].eq(live & (word[w].key == sc_key[t])),
                             cr[t].slot[w].eq(word[w].slot)]

        # Match (sm): the ways' comparisons, the stash, and the outcomes of the beats
        # 2 .. window ahead (in hist[0 ..] now). Registered into ``mr``, for both outcomes of
        # the beat just ahead (``e``: it took a way of the bucket).
        match = data.StructLayout({
            "hit": 1, "slot": self.slot_width,
            "any": data.ArrayLayout(data.ArrayLayout(1, 2), 2),       # [t][e]
            "way": data.ArrayLayout(data.ArrayLayout(way_bits, 2), 2),  # [t][e]
            "use1": 3})  # none, table 0, table 1 taken by the beat just ahead
        mr = Signal(match, name=f"mr{sfx}", reset_less=True)
        hit_any, hit_slot = [], C(0, self.slot_width)
        avail = []
        for t in tables:
            for w in range(ways):
                hit_any.append(cr[t].hit[w])
                hit_slot |= Mux(cr[t].hit[w], cr[t].slot[w], 0)
            free = [~cr[t].live[w] for w in range(ways)]
            free_count = popcount(free)
            # Ways of this bucket taken by the beats 2 .. window ahead: those 3 .. window
            # ahead counted a cycle early (timing), the one 2 ahead decided in the last cycle.
            early = Signal(range(window), name=f"taken_early{t}{sfx}", reset_less=True)
            m.d.sync += early.eq(popcount([s[-3].same_bucket[2 + j][t] & hist[j].wrote[t]
                                           for j in range(window - 2)]))
            # Ways used = early + late + e, late the beat 2 ahead's: the outcomes for
            # early + 0, 1, 2 come from registers and ``late`` selects among them (timing:
            # late through the adders and the compares into ``mr`` was the 1-lane top's
            # critical path at seed 1, 9.5 ns).
            late = sm.same_bucket[1][t] & hist[0].wrote[t]
            index_k, any_k, avail_k = [], [], []
            for k in range(3):
                used = early + k
                # the way taken next: the lowest free way with ``used`` free ways below it
                index = C(0, way_bits)
                for w in reversed(range(ways)):
                    below = popcount(free[:w]) if w else C(0, 1)
                    index = Mux(free[w] & (below == used), w, index)
                a_k = Signal(bits_for(ways), name=f"avail{t}_{k}{sfx}")
                m.d.comb += a_k.eq(Mux(free_count > used, free_count - used, 0))
                index_k.append(index)
                any_k.append(free_count > used)
                avail_k.append(a_k)
            for e in (0, 1):
                m.d.sync += [mr.any[t][e].eq(Mux(late, any_k[e + 1], any_k[e])),
                             mr.way[t][e].eq(Mux(late, index_k[e + 1], index_k[e]))]
            avail.append((late, avail_k))
        # use1's compares for every pair of outcomes, then selected by both tables' late bits
        (late0, a0), (late1, a1) = avail

        def more1(e1, e0):
            """Table 1 has more ways left than table 0 after e1 / e0 more taken."""
            return binary_select([a1[x1 + e1] > a0[x0 + e0] for x0 in (0, 1) for x1 in (0, 1)],
                                 Cat(late1, late0))
        m.d.sync += mr.use1.eq(Cat(more1(0, 0), more1(0, 1), more1(1, 0)))
        # The stash is compared a stage early, at sc (timing: its key compares made the match
        # stage too deep), then it holds the inserts of the beats 3 and more ahead: those of
        # the beat 2 ahead come from hist[0] below. It is emptied at a batch's end, so its
        # entries are not ours if the beat 1 or 2 ahead (at sm, sd) ends a batch; otherwise a
        # matching entry stays as it is until this beat decides.
        stash_hit = Signal(self.stash, name=f"stash_hit{sfx}", reset_less=True)
        stash_ok = ~(vd & sd.eob) & ~(valid[-2] & sm.eob)
        m.d.sync += stash_hit.eq(Cat(stash_ok & stash_valid[i] & (stash_key[i] == sc_key[2])
                                     for i in range(self.stash)))
        for i in range(self.stash):
            hit_any.append(stash_hit[i])
            hit_slot |= Mux(stash_hit[i], stash_slot[i], 0)
        for j in range(window - 1):
            hit = sm.same_key[1 + j] & hist[j].stored
            hit_any.append(hit)
            hit_slot |= Mux(hit, hist[j].slot, 0)
        m.d.sync += [mr.hit.eq(Cat(*hit_any).any()), mr.slot.eq(hit_slot)]

        # Decide (sd): the rest is what the beat just ahead (hist[0]) did.
        last_hit = sd.same_key[0] & hist[0].stored
        found = mr.hit | last_hit
        took = [sd.same_bucket[0][t] & hist[0].wrote[t] for t in tables]  # never both
        stash_free, stash_index = lowest_index([~stash_valid[i] for i in range(self.stash)])
        return dict(
            new=vd & sd.insert & ~found, found=found,
            found_slot=Mux(last_hit, hist[0].slot, mr.slot),
            way=[Mux(took[t], mr.way[t][1], mr.way[t][0]) for t in tables],
            any0=Mux(took[0], mr.any[0][1], mr.any[0][0]),
            any1=Mux(took[1], mr.any[1][1], mr.any[1][0]),
            use1=Mux(took[0], mr.use1[1], Mux(took[1], mr.use1[2], mr.use1[0])),
            stash_free=stash_free, stash_index=stash_index)
