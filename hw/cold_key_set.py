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

Epochs count 1 .. 2**epoch_bits - 1 (0 = never valid). After the batch with the last epoch,
and after reset, both memories are cleared (``capacity // (2 * ways)`` cycles, ``i.ready`` low,
``clearing`` high).

Timing: ``i`` -> ``o`` latency ``LATENCY`` = 8 cycles (from the ``i`` handshake to ``o.valid``
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
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from hotline.contract.config import PRODUCT, cold_slot_width
from hotline.contract.hashing import bucket_hash

from .bram import BucketTable
from .output_queue import OutputQueue
from .replica import replica

__all__ = ["ColdKeySet"]


def _first_set(bits):
    """(any, index of the lowest set bit) of a list of 1-bit values."""
    index = C(0, max(1, ceil_log2(len(bits))))
    for i in reversed(range(len(bits))):
        index = Mux(bits[i], i, index)
    return Cat(*bits).any(), index


def _popcount(bits):
    total = C(0, bits_for(len(bits)))
    for b in bits:
        total = total + b
    return total


class ColdKeySet(wiring.Component):
    """Batch-local dedup of keys: ``i`` {key, insert, eob, user} -> ``o`` {key, slot, first,
    insert, eob, overflow, user}. Semantics and timing in the module docstring.

    Parameters: ``capacity`` (hash-set entries, power of two), ``ways`` (per bucket, power of
    two), ``stash``, ``max_keys`` (slots per batch), ``key_width``, ``user_width``,
    ``epoch_bits``, ``seeds`` (two distinct hash seeds), ``hash_family``, ``primitive`` (the tables'
    ``BucketTable`` primitive: None infers block RAM, for simulation and any FPGA; "ecp5":
    DP16KD instances that use their output register). The geometry defaults are the product
    configuration's (`hotline.contract.config.PRODUCT`).
    """
    LATENCY = 8
    # Buckets per block-RAM bank (BucketTable's "ecp5" limit).
    BANK_DEPTH = 2048
    # Results the output queue holds besides its output register: enough for one beat per
    # cycle (LATENCY beats are outstanding then).
    QUEUE_DEPTH = 9
    # Beats ahead whose inserts a table read can miss, hence forwarded: BucketTable.LATENCY,
    # plus the compare and match stages between the read and the decision, plus the write
    # register.
    FORWARD = BucketTable.LATENCY + 3

    def __init__(self, capacity=PRODUCT.cold_capacity, *, ways=PRODUCT.cold_ways,
                 stash=PRODUCT.cold_stash, max_keys=PRODUCT.cold_max_keys, key_width=32,
                 user_width=1, epoch_bits=PRODUCT.cold_epoch_bits, seeds=(11, 12),
                 hash_family="tabulation", primitive=None):
        for name, value in (("capacity", capacity), ("ways", ways)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if capacity < 4 * ways:
            raise ValueError(f"capacity ({capacity}) must be at least 4 * ways ({4 * ways})")
        if stash < 1 or max_keys < 1 or epoch_bits < 2 or len(seeds) != 2 or seeds[0] == seeds[1]:
            raise ValueError("need stash >= 1, max_keys >= 1, epoch_bits >= 2, two distinct seeds")
        self.capacity, self.ways, self.stash, self.max_keys = capacity, ways, stash, max_keys
        self.key_width, self.user_width, self.epoch_bits = key_width, user_width, epoch_bits
        self.seeds, self.primitive = tuple(seeds), primitive
        self.buckets = capacity // (2 * ways)
        self.slot_width = cold_slot_width(max_keys)
        self.hash_family = hash_family
        self.hashes = [bucket_hash(s, key_width, ceil_log2(self.buckets), hash_family) for s in seeds]
        self.entry_layout = data.StructLayout({"epoch": epoch_bits, "key": key_width,
                                               "slot": self.slot_width})
        self.bucket_layout = data.ArrayLayout(self.entry_layout, ways)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "key": key_width, "insert": 1, "eob": 1, "user": user_width}))),
            "o": Out(stream.Signature(data.StructLayout({
                "key": key_width, "slot": self.slot_width, "first": 1, "insert": 1, "eob": 1,
                "overflow": 1, "user": user_width}))),
            "clearing": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ways, tables = self.ways, (0, 1)
        bucket_bits = ceil_log2(self.buckets)
        max_epoch = (1 << self.epoch_bits) - 1
        window = self.FORWARD

        # The tables read every cycle, from a register (BucketTable). Writes reach them one
        # cycle late through registers (timing), so a word read at s1 misses the writes of the
        # ``window`` beats ahead of it: their effect is forwarded (see the decide stage).
        # A table deeper than BANK_DEPTH is split into banks, selected after the read
        # registers, so each block RAM output goes to flip-flops only (timing).
        bank_bits = max(0, bucket_bits - ceil_log2(self.BANK_DEPTH))
        low_bits = bucket_bits - bank_bits
        # Every bank has its own copy of the address and data registers (`replica`): one
        # register driving the pins of all the tables' block RAMs, spread over the die, made
        # 14 ns routes (timing).
        banks = range(1 << bank_bits)
        table = [[BucketTable(depth=self.buckets >> bank_bits, ways=ways,
                              width=self.entry_layout.size, primitive=self.primitive)
                  for b in banks] for t in tables]
        rd_addr = [[replica(low_bits, f"rd_addr{t}_{b}") for b in banks] for t in tables]
        wr_addr = [[replica(low_bits, f"wr_addr{t}_{b}") for b in banks] for t in tables]
        wr_data = [[replica(self.entry_layout.size, f"wr_data{t}_{b}") for b in banks]
                   for t in tables]
        wr_en = [[Signal(ways, name=f"wr_en{t}_{b}") for b in banks] for t in tables]
        for t in tables:
            for b, bank in enumerate(table[t]):
                m.submodules[f"table{t}_{b}"] = bank
                m.d.comb += [bank.read_addr.eq(rd_addr[t][b]), bank.write_addr.eq(wr_addr[t][b]),
                             bank.write_en.eq(wr_en[t][b]), bank.write_data.eq(wr_data[t][b])]

        count = Signal(range(self.max_keys + 1))
        stash_key = Array(Signal(self.key_width, name=f"stash_key{i}", reset_less=True)
                          for i in range(self.stash))
        stash_slot = Array(Signal(self.slot_width, name=f"stash_slot{i}", reset_less=True)
                           for i in range(self.stash))
        stash_valid = Signal(self.stash)

        # Pipeline, never stalled: s1 (hashes registered: the tables' read address), s2, s3,
        # sc (the words read are in table[t].read_data: compare), sm (match), sd (decide),
        # then so into the output queue. Each beat carries the epoch of its batch, counted at
        # the input.
        # Comparisons with the ``window`` beats ahead, made at s1 and carried along:
        # same_key[k] / same_bucket[k][t]: the beat k + 1 ahead is valid, in the same batch,
        # an insert (same_key only) with the same key / the same bucket in table t.
        stages = 3 + BucketTable.LATENCY  # s1 .. sd
        way_bits = max(1, ceil_log2(ways))
        beat = data.StructLayout({
            "key": self.key_width, "insert": 1, "eob": 1, "user": self.user_width,
            "epoch": self.epoch_bits, "bucket": data.ArrayLayout(bucket_bits, 2),
            "same_key": window, "same_bucket": data.ArrayLayout(2, window)})
        s = [Signal(beat, name=f"s{j + 1}", reset_less=True) for j in range(stages)]
        valid = Signal(stages)  # of s1 .. sd
        sc, sm, sd, vd = s[-3], s[-2], s[-1], valid[-1]
        # What the last ``window`` beats decided (hist[0]: the beat decided in the last cycle).
        hist_layout = data.StructLayout({"wrote": 2, "stored": 1, "slot": self.slot_width})
        hist = [Signal(hist_layout, name=f"hist{k}", reset_less=True) for k in range(window)]
        last = Signal(data.StructLayout({"key": self.key_width, "epoch": self.epoch_bits,
                                         "insert": 1, "bucket": data.ArrayLayout(bucket_bits, 2)}),
                      reset_less=True)  # of the beat decided in the last cycle
        last_valid = Signal()

        clearing = self.clearing
        clear_addr = Signal(bucket_bits)

        taken = self.i.valid & self.i.ready
        queue, room = OutputQueue.behind_pipeline(m, self.o, self.QUEUE_DEPTH, taken)

        # The input counts the batches. After the end of the last epoch's batch no beat is
        # taken until the clearing pass is over: the next beat must read the cleared tables.
        in_epoch = Signal(self.epoch_bits, init=1)
        wrap_wait = Signal()
        m.d.comb += self.i.ready.eq(room & ~clearing & ~wrap_wait)
        with m.If(taken & self.i.payload.eob):
            m.d.sync += in_epoch.eq(Mux(in_epoch == max_epoch, 1, in_epoch + 1))
            with m.If(in_epoch == max_epoch):
                m.d.sync += wrap_wait.eq(1)
        with m.If(clearing):
            m.d.sync += wrap_wait.eq(0)

        m.d.sync += valid.eq(Cat(taken, valid[:-1]))
        m.d.sync += [
            s[0].key.eq(self.i.payload.key),
            s[0].insert.eq(self.i.payload.insert),
            s[0].eob.eq(self.i.payload.eob),
            s[0].user.eq(self.i.payload.user),
            s[0].epoch.eq(in_epoch),
        ]
        for t in tables:
            bucket = self.hashes[t].expr(self.i.payload.key)
            m.d.sync += [s[0].bucket[t].eq(bucket), *(a.eq(bucket[:low_bits]) for a in rd_addr[t])]
        carried = ("key", "insert", "eob", "user", "epoch", "bucket")
        for j in range(1, stages):
            m.d.sync += [getattr(s[j], f).eq(getattr(s[j - 1], f)) for f in carried]
            if j >= 2:
                m.d.sync += [s[j].same_key.eq(s[j - 1].same_key),
                             s[j].same_bucket.eq(s[j - 1].same_bucket)]
        ahead = ([(valid[j], s[j]) for j in range(1, stages)] + [(last_valid, last)])[:window]
        assert len(ahead) == window
        for k, (v, b) in enumerate(ahead):
            in_batch = valid[0] & v & (b.epoch == s[0].epoch)
            m.d.sync += s[1].same_key[k].eq(in_batch & b.insert & (b.key == s[0].key))
            for t in tables:
                m.d.sync += s[1].same_bucket[k][t].eq(in_batch & (b.bucket[t] == s[0].bucket[t]))

        # Compare (sc): each way of the words read against the key and the epoch; registered
        # with the ways' slots, so the match starts from flip-flops (timing: a 32-bit compare
        # before the hit-slot select made the match stage too deep for 100 MHz).
        compared = data.StructLayout({"hit": ways, "live": ways,
                                      "slot": data.ArrayLayout(self.slot_width, ways)})
        cr = [Signal(compared, name=f"compared{t}", reset_less=True) for t in tables]
        # Each table, and the stash, compares with its own copy of sc's key (timing: the key
        # register, pulled towards both tables' block RAMs, made the compares at s1 and sc
        # late).
        sc_key = [replica(self.key_width, f"sc_key{t}") for t in ("0", "1", "_stash")]
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
        mr = Signal(match, reset_less=True)
        hit_any, hit_slot = [], C(0, self.slot_width)
        avail = []
        for t in tables:
            for w in range(ways):
                hit_any.append(cr[t].hit[w])
                hit_slot |= Mux(cr[t].hit[w], cr[t].slot[w], 0)
            free = [~cr[t].live[w] for w in range(ways)]
            free_count = _popcount(free)
            # Ways of this bucket taken by the beats 2 .. window ahead: those 3 .. window
            # ahead counted a cycle early (timing), the one 2 ahead decided in the last cycle.
            early = Signal(range(window), name=f"taken_early{t}", reset_less=True)
            m.d.sync += early.eq(_popcount([s[-3].same_bucket[2 + j][t] & hist[j].wrote[t]
                                            for j in range(window - 2)]))
            n = early + (sm.same_bucket[1][t] & hist[0].wrote[t])
            avail_t = []
            for e in (0, 1):
                used = n + e
                # the way taken next: the lowest free way with ``used`` free ways below it
                index = C(0, way_bits)
                for w in reversed(range(ways)):
                    below = _popcount(free[:w]) if w else C(0, 1)
                    index = Mux(free[w] & (below == used), w, index)
                a_e = Signal(bits_for(ways), name=f"avail{t}_{e}")
                m.d.comb += a_e.eq(Mux(free_count > used, free_count - used, 0))
                avail_t.append(a_e)
                m.d.sync += [mr.any[t][e].eq(free_count > used), mr.way[t][e].eq(index)]
            avail.append(avail_t)
        m.d.sync += mr.use1.eq(Cat(avail[1][0] > avail[0][0], avail[1][0] > avail[0][1],
                                   avail[1][1] > avail[0][0]))
        # The stash is compared a stage early, at sc (timing: its key compares made the match
        # stage too deep), then it holds the inserts of the beats 3 and more ahead: those of
        # the beat 2 ahead come from hist[0] below. It is emptied at a batch's end, so its
        # entries are not ours if the beat 1 or 2 ahead (at sm, sd) ends a batch; otherwise a
        # matching entry stays as it is until this beat decides.
        stash_hit = Signal(self.stash, reset_less=True)
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
        found_slot = Mux(last_hit, hist[0].slot, mr.slot)
        took = [sd.same_bucket[0][t] & hist[0].wrote[t] for t in tables]  # never both
        way = [Mux(took[t], mr.way[t][1], mr.way[t][0]) for t in tables]
        any0, any1 = (Mux(took[t], mr.any[t][1], mr.any[t][0]) for t in tables)
        use1 = Mux(took[0], mr.use1[1], Mux(took[1], mr.use1[2], mr.use1[0]))
        stash_free, stash_index = _first_set([~stash_valid[i] for i in range(self.stash)])
        new = vd & sd.insert & ~found
        room_keys = count < self.max_keys
        to_table = new & room_keys & (any0 | any1)
        to_stash = new & room_keys & ~(any0 | any1) & stash_free
        overflow = new & ~(to_table | to_stash)
        wrote = Cat(to_table & ~use1, to_table & use1)
        slot = Mux(sd.insert, Mux(found, found_slot, Mux(room_keys, count, 0)), 0)

        m.d.sync += [
            hist[0].wrote.eq(wrote),
            hist[0].stored.eq(vd & sd.insert & (found | to_table | to_stash)),
            hist[0].slot.eq(slot),
            *(hist[k].eq(hist[k - 1]) for k in range(1, window)),
            last_valid.eq(vd & ~clearing),
            last.key.eq(sd.key), last.epoch.eq(sd.epoch), last.insert.eq(sd.insert),
            last.bucket.eq(sd.bucket),
        ]

        entry = Signal(self.entry_layout)
        m.d.comb += [entry.epoch.eq(sd.epoch), entry.key.eq(sd.key), entry.slot.eq(count)]
        for t in tables:
            addr = Mux(clearing, clear_addr, sd.bucket[t])[:low_bits]
            for b in banks:
                hit = wrote[t] & (sd.bucket[t][low_bits:] == b) if bank_bits else wrote[t]
                m.d.sync += [
                    wr_addr[t][b].eq(addr),
                    wr_data[t][b].eq(Mux(clearing, 0, entry)),
                    wr_en[t][b].eq(Mux(clearing, -1, Mux(hit, C(1, ways) << way[t], 0))),
                ]

        so = Signal(self.o.payload.shape(), reset_less=True)
        so_valid = Signal()
        m.d.sync += [
            so_valid.eq(vd),
            so.key.eq(sd.key),
            so.slot.eq(slot),
            so.first.eq(new),
            so.insert.eq(sd.insert),
            so.eob.eq(sd.eob),
            so.overflow.eq(overflow),
            so.user.eq(sd.user),
        ]
        m.d.comb += [queue.i.valid.eq(so_valid), queue.i.payload.eq(so)]

        with m.If(new & room_keys):
            m.d.sync += count.eq(count + 1)
        with m.If(to_stash):
            m.d.sync += [stash_valid.eq(stash_valid | (1 << stash_index)),
                         stash_key[stash_index].eq(sd.key),
                         stash_slot[stash_index].eq(count)]
        with m.If(vd & sd.eob):
            m.d.sync += [count.eq(0), stash_valid.eq(0)]

        # Reset starts with a clearing pass, since the memories keep their contents.
        with m.FSM(init="CLEAR"):
            with m.State("CLEAR"):
                m.d.comb += clearing.eq(1)
                m.d.sync += clear_addr.eq(clear_addr + 1)
                with m.If(clear_addr == self.buckets - 1):
                    m.next = "RUN"
            with m.State("RUN"):
                with m.If(vd & sd.eob & (sd.epoch == max_epoch)):
                    m.next = "CLEAR"
        return m
