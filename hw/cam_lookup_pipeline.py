"""CAMLookupPipeline: the PopularityCAM's lookup path, shared with its command engine.

Interface (``g`` a `CAMGeometry`):

- ``lookup`` In stream {key, user}; ``result`` Out stream {hit, slot, user}, in order.
- ``read_addr`` Out ArrayLayout(bucket_bits, 2): the two tables' read addresses (a register,
  ``s1.bucket``); ``bucket_data`` In ArrayLayout(bucket_layout, 2): their words,
  ``BucketTable.LATENCY`` = 3 cycles later.
- ``engine`` In(`CAMEngineSignature`): the command engine's side. While ``engine.idle``, the
  pipeline reads the lookup's buckets; otherwise ``s1`` carries ``engine.key`` and loads
  ``engine.addr`` when ``engine.load``, so the engine's reads come back through the same key
  compares: ``engine.way_hit`` (s5, ``MATCH_LATENCY`` = 2 cycles after ``bucket_data``) is the
  match of the engine's key in the words it read.

Timing: one lookup per cycle sustained; ``LATENCY`` = 7 cycles from the ``lookup`` handshake
to ``result.valid`` when ``result`` is not stalled (s1 hash, 3 cycles of block RAM, s4 and s5
key compares, the output register). The pipeline never stalls: results wait in an `OutputQueue`
of ``queue_depth + 1`` entries, and ``lookup.ready`` is low while the lookups accepted and not
yet delivered could fill it, while the engine is busy, and while a command waits
(``engine.cmd_pending``). ``result.ready`` reaches ``lookup.ready`` through a register only.
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .output_queue import OutputQueue

__all__ = ["CAMEngineSignature", "CAMLookupPipeline"]


class CAMEngineSignature(wiring.Signature):
    """The command engine's side of the lookup pipeline (members as the engine drives them):
    ``idle``, ``cmd_pending`` (a command is valid), ``key`` (the engine's key for the compares),
    ``addr`` and ``load`` (the buckets to read from the cycle after ``load``), the stash
    (``stash_valid``, ``stash_key``), and back from the pipeline ``way_hit`` (s5's match)."""

    def __init__(self, g):
        super().__init__({
            "idle": Out(1), "cmd_pending": Out(1), "key": Out(g.key_width),
            "addr": Out(data.ArrayLayout(g.bucket_bits, 2)), "load": Out(1),
            "stash_valid": Out(g.stash), "stash_key": Out(data.ArrayLayout(g.key_width, g.stash)),
            "way_hit": In(data.ArrayLayout(g.ways, 2)),
        })


class CAMLookupPipeline(wiring.Component):
    """Key -> (hit, slot) through both tables' block RAMs and the stash (see the module
    docstring); ``g`` a `CAMGeometry`, ``user_width`` the lookup's sideband."""
    LATENCY = 7
    MATCH_LATENCY = 2  # bucket_data -> way_hit
    # The key compares are split at bytes (timing: s3b's key reaches the compares beside both
    # tables' block RAMs over long routes, so only a byte compare, two LUT levels, follows it).
    MATCH_PART = 8

    @staticmethod
    def ports(g, user_width):
        """The lookup stream ports (PopularityCAM has the same)."""
        return {
            "lookup": In(stream.Signature(data.StructLayout({"key": g.key_width,
                                                             "user": user_width}))),
            "result": Out(stream.Signature(data.StructLayout(
                {"hit": 1, "slot": g.slot_width, "user": user_width}))),
        }

    def __init__(self, g, user_width, queue_depth):
        self.g, self.user_width, self.queue_depth = g, user_width, queue_depth
        super().__init__({
            **self.ports(g, user_width),
            "read_addr": Out(data.ArrayLayout(g.bucket_bits, 2)),
            "bucket_data": In(data.ArrayLayout(g.bucket_layout, 2)),
            "engine": In(CAMEngineSignature(g)),
        })

    def elaborate(self, platform):
        m = Module()
        g, eng, tables = self.g, self.engine, (0, 1)
        taken = self.lookup.valid & self.lookup.ready
        queue, room = OutputQueue.behind_pipeline(m, self.result, self.queue_depth, taken)
        m.d.comb += self.lookup.ready.eq(room & eng.idle & ~eng.cmd_pending)

        # Data registers have no reset: only the valid flags matter after a reset.
        buckets = data.ArrayLayout(g.bucket_bits, 2)
        parts = [(lo, min(lo + self.MATCH_PART, g.key_width))
                 for lo in range(0, g.key_width, self.MATCH_PART)]
        valid = Signal(6)  # stages s1, s2, s3, s3b, s4, s5
        s1 = Signal(data.StructLayout({"key": g.key_width, "user": self.user_width,
                                       "bucket": buckets}), reset_less=True)
        s2 = Signal(data.StructLayout({"key": g.key_width, "user": self.user_width,
                                       "bucket": buckets, "stash_hit": g.stash}), reset_less=True)
        s3 = Signal.like(s2)
        s3b = Signal.like(s2)  # aligned with bucket_data
        # s4: per table and way, the entry's valid bit and the equality of each key part
        s4 = Signal(data.StructLayout({
            "user": self.user_width, "bucket": buckets, "stash_hit": g.stash,
            "match": data.ArrayLayout(data.ArrayLayout(1 + len(parts), g.ways), 2)}),
            reset_less=True)
        s5 = Signal(data.StructLayout({"user": self.user_width, "bucket": buckets,
                                       "way_hit": data.ArrayLayout(g.ways, 2),
                                       "stash_hit": g.stash}), reset_less=True)
        m.d.sync += [
            valid.eq(Cat(taken, valid[:5])),
            # The engine's reads carry its key, so s5.way_hit is its home match too: the
            # 2 x ways key compares are shared (each is 33 bits wide, fed by block RAM).
            s1.key.eq(Mux(eng.idle, self.lookup.payload.key, eng.key)),
            s1.user.eq(self.lookup.payload.user),
            s2.key.eq(s1.key), s2.user.eq(s1.user), s2.bucket.eq(s1.bucket),
            s2.stash_hit.eq(Cat(g.stash_match(eng.stash_valid, eng.stash_key, s1.key))),
            s3.eq(s2),
            s3b.eq(s3),
            s4.user.eq(s3b.user), s4.bucket.eq(s3b.bucket), s4.stash_hit.eq(s3b.stash_hit),
            s5.user.eq(s4.user), s5.bucket.eq(s4.bucket), s5.stash_hit.eq(s4.stash_hit),
        ]
        for t in tables:
            word = self.bucket_data[t]
            for w in range(g.ways):
                m.d.sync += [
                    s4.match[t][w].eq(Cat(word[w].valid, *(word[w].key[lo:hi] == s3b.key[lo:hi]
                                                           for lo, hi in parts))),
                    s5.way_hit[t][w].eq(s4.match[t][w].all()),
                ]
        m.d.comb += [self.read_addr.eq(s1.bucket), eng.way_hit.eq(s5.way_hit)]
        # The read address: the lookup's hash while idle, else the engine's bucket, which it
        # stages a cycle ahead: only flip-flops select it, and the hash is all the logic in
        # front of it.
        with m.If(eng.idle):
            m.d.sync += [s1.bucket[t].eq(g.hash(t, self.lookup.payload.key)) for t in tables]
        with m.Elif(eng.load):
            m.d.sync += [s1.bucket[t].eq(eng.addr[t]) for t in tables]

        slot = C(0, g.slot_width)
        for t in tables:
            for w in range(g.ways):
                slot |= Mux(s5.way_hit[t][w], g.slot(t, s5.bucket[t], w), 0)
        for i in range(g.stash):
            slot |= Mux(s5.stash_hit[i], g.stash_slot(i), 0)
        m.d.comb += [
            queue.i.valid.eq(valid[5]),
            queue.i.payload.hit.eq(Cat(s5.way_hit[0], s5.way_hit[1], s5.stash_hit).any()),
            queue.i.payload.slot.eq(slot),
            queue.i.payload.user.eq(s5.user),
        ]
        return m
