"""ColdKeySet: batch-local first-appearance numbering of keys (the fragmenter's cold-key dedup).

Beats with ``insert`` set get ``slot`` = the index of their key among the distinct inserted
keys of the current batch, in order of first appearance, and ``first`` = this is that first
appearance. Other beats pass through in order (``slot`` = 0, ``first`` = 0). ``eob`` marks the
last beat of a batch: the next beat starts a new batch, numbered from 0 again.

Organisation: a two-choice hash set. Two memories (tables 0 and 1, H3 seeds ``seeds``) of
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

Timing: ``i`` -> ``o`` latency ``LATENCY`` = 3 cycles, one beat per cycle sustained, in order.
``o`` backpressure stalls the pipeline (no loss, duplication or bubble); ``i.ready`` follows
``o.ready`` combinationally. A key inserted by one beat is seen by the very next beat (the
read ports are transparent to the write ports).
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from .hashing import h3_hash, h3_masks

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
    ``epoch_bits``, ``seeds`` (two distinct H3 seeds).
    """
    LATENCY = 3

    def __init__(self, capacity=32768, *, ways=4, stash=4, max_keys=32768, key_width=32,
                 user_width=1, epoch_bits=8, seeds=(11, 12)):
        for name, value in (("capacity", capacity), ("ways", ways)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if capacity < 4 * ways:
            raise ValueError(f"capacity ({capacity}) must be at least 4 * ways ({4 * ways})")
        if stash < 1 or max_keys < 1 or epoch_bits < 2 or len(seeds) != 2 or seeds[0] == seeds[1]:
            raise ValueError("need stash >= 1, max_keys >= 1, epoch_bits >= 2, two distinct seeds")
        self.capacity, self.ways, self.stash, self.max_keys = capacity, ways, stash, max_keys
        self.key_width, self.user_width, self.epoch_bits = key_width, user_width, epoch_bits
        self.seeds = tuple(seeds)
        self.buckets = capacity // (2 * ways)
        self.slot_width = bits_for(max_keys - 1)
        self.masks = [h3_masks(s, key_width, ceil_log2(self.buckets)) for s in seeds]
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

        rd, wr = [], []
        for t in tables:
            mem = Memory(shape=self.bucket_layout, depth=self.buckets, init=[])
            m.submodules[f"table{t}"] = mem
            wr.append(mem.write_port(granularity=1))  # one enable bit per way
            rd.append(mem.read_port(transparent_for=(wr[-1],)))

        epoch = Signal(self.epoch_bits, init=1)
        count = Signal(range(self.max_keys + 1))
        stash_key = Array(Signal(self.key_width, name=f"stash_key{i}") for i in range(self.stash))
        stash_slot = Array(Signal(self.slot_width, name=f"stash_slot{i}") for i in range(self.stash))
        stash_valid = Signal(self.stash)

        beat = data.StructLayout({"valid": 1, "key": self.key_width, "insert": 1, "eob": 1,
                                  "user": self.user_width,
                                  "bucket": data.ArrayLayout(bucket_bits, 2)})
        s1, s2 = Signal(beat), Signal(beat)

        clearing = self.clearing
        clear_addr = Signal(bucket_bits)
        advance = (~self.o.valid | self.o.ready) & ~clearing
        # Near the last epoch, stop taking beats while a batch end is in flight: the beat after
        # the last epoch's batch must read the memories after the clearing pass.
        ending = (s1.valid & s1.eob) | (s2.valid & s2.eob)
        m.d.comb += self.i.ready.eq(advance & ~(ending & (epoch >= max_epoch - 1)))

        for t in tables:
            m.d.comb += [rd[t].addr.eq(s1.bucket[t]), rd[t].en.eq(advance)]

        with m.If(advance):
            m.d.sync += [
                s1.valid.eq(self.i.valid & self.i.ready),
                s1.key.eq(self.i.payload.key),
                s1.insert.eq(self.i.payload.insert),
                s1.eob.eq(self.i.payload.eob),
                s1.user.eq(self.i.payload.user),
                s2.eq(s1),
            ]
            m.d.sync += [s1.bucket[t].eq(h3_hash(self.i.payload.key, self.masks[t])) for t in tables]

        # Stage 2: match against both buckets and the stash, decide and write.
        bucket = [self.bucket_layout(rd[t].data) for t in tables]
        live = [[bucket[t][w].epoch == epoch for w in range(ways)] for t in tables]
        way_hit = [[live[t][w] & (bucket[t][w].key == s2.key) for w in range(ways)] for t in tables]
        stash_hit = [stash_valid[i] & (stash_key[i] == s2.key) for i in range(self.stash)]
        found = Cat(*way_hit[0], *way_hit[1], *stash_hit).any()
        found_slot = C(0, self.slot_width)
        for t in tables:
            for w in range(ways):
                found_slot |= Mux(way_hit[t][w], bucket[t][w].slot, 0)
        for i in range(self.stash):
            found_slot |= Mux(stash_hit[i], stash_slot[i], 0)

        free = [[~live[t][w] for w in range(ways)] for t in tables]
        use1 = _popcount(free[1]) > _popcount(free[0])
        any0, way0 = _first_set(free[0])
        any1, way1 = _first_set(free[1])
        stash_free, stash_index = _first_set([~stash_valid[i] for i in range(self.stash)])
        new = s2.valid & s2.insert & ~found
        room = count < self.max_keys
        to_table = new & room & (any0 | any1)
        to_stash = new & room & ~(any0 | any1) & stash_free
        overflow = new & ~(to_table | to_stash)

        entry = Signal(self.entry_layout)
        m.d.comb += [entry.epoch.eq(epoch), entry.key.eq(s2.key), entry.slot.eq(count)]
        with m.If(clearing):
            for t in tables:
                m.d.comb += [wr[t].addr.eq(clear_addr), wr[t].en.eq(-1), wr[t].data.eq(0)]
        with m.Elif(advance & to_table):
            for t, way in ((0, way0), (1, way1)):
                chosen = use1 if t else ~use1
                m.d.comb += [
                    wr[t].addr.eq(s2.bucket[t]),
                    wr[t].en.eq(Mux(chosen, C(1, ways) << way, 0)),
                    wr[t].data.eq(Cat(*([entry] * ways))),
                ]

        with m.If(advance):
            m.d.sync += [
                self.o.valid.eq(s2.valid),
                self.o.payload.key.eq(s2.key),
                self.o.payload.slot.eq(Mux(s2.insert, Mux(found, found_slot, Mux(room, count, 0)), 0)),
                self.o.payload.first.eq(new),
                self.o.payload.insert.eq(s2.insert),
                self.o.payload.eob.eq(s2.eob),
                self.o.payload.overflow.eq(overflow),
                self.o.payload.user.eq(s2.user),
            ]
            with m.If(new & room):
                m.d.sync += count.eq(count + 1)
            with m.If(to_stash):
                m.d.sync += [stash_valid.eq(stash_valid | (1 << stash_index)),
                             stash_key[stash_index].eq(s2.key),
                             stash_slot[stash_index].eq(count)]
            with m.If(s2.valid & s2.eob):
                m.d.sync += [count.eq(0), stash_valid.eq(0),
                             epoch.eq(Mux(epoch == max_epoch, 1, epoch + 1))]
        with m.Elif(~self.o.valid | self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        # Reset starts with a clearing pass, since the memories keep their contents.
        with m.FSM(init="CLEAR"):
            with m.State("CLEAR"):
                m.d.comb += clearing.eq(1)
                m.d.sync += clear_addr.eq(clear_addr + 1)
                with m.If(clear_addr == self.buckets - 1):
                    m.next = "RUN"
            with m.State("RUN"):
                with m.If(advance & s2.valid & s2.eob & (epoch == max_epoch)):
                    m.next = "CLEAR"
        return m
