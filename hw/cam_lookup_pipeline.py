"""CAMLookupPipeline: the PopularityCAM's lookup path, shared with its command engine.

Interface (``g`` a `CAMGeometry`, ``lanes`` lookups per beat):

- ``lookup`` In stream {key: ArrayLayout(key_width, lanes), user}; ``result`` Out stream
  {hit: ArrayLayout(1, lanes), slot: ArrayLayout(slot_width, lanes), user}, in order, one
  beat per lookup beat.
- ``read_addr`` Out ArrayLayout(ArrayLayout(bucket_bits, 2), lanes): per lane, the two
  tables' read addresses (a register, ``s1``'s bucket); ``bucket_data`` In
  ArrayLayout(ArrayLayout(bucket_layout, 2), lanes): their words, ``BucketTable.LATENCY`` = 3
  cycles later.
- ``engine`` In(`CAMEngineSignature`): the command engine's side, on lane 0. While
  ``engine.idle``, the pipeline reads the lookup's buckets; otherwise lane 0 of ``s1`` carries
  ``engine.key`` and loads ``engine.addr`` when ``engine.load``, so the engine's reads come
  back through lane 0's key compares: ``engine.way_hit`` (s5, ``MATCH_LATENCY`` = 2 cycles
  after ``bucket_data``) is the match of the engine's key in the words it read. The other
  lanes' addresses are don't-care then.

Timing: one beat per cycle sustained; ``LATENCY`` = 7 cycles from the ``lookup`` handshake
to ``result.valid`` when ``result`` is not stalled (s1 hash, 3 cycles of block RAM, s4 and s5
key compares, the output register). The pipeline never stalls: results wait in an `OutputQueue`
of ``queue_depth + 1`` entries, and ``lookup.ready`` is low while the beats accepted and not
yet delivered could fill it, while the engine is busy, and while a command waits
(``engine.cmd_pending``). ``result.ready`` reaches ``lookup.ready`` through a register only.
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .lib.output_queue import OutputQueue
from .lib.replica import replica

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
    """Keys -> (hit, slot) through both tables' block RAMs and the stash (see the module
    docstring); ``g`` a `CAMGeometry`, ``user_width`` the lookup's sideband, ``lanes`` the
    lookups per beat."""
    LATENCY = 7
    MATCH_LATENCY = 2  # bucket_data -> way_hit
    # The key compares are split at bytes (timing: s3b's key reaches the compares beside both
    # tables' block RAMs over long routes, so only a byte compare, two LUT levels, follows it).
    MATCH_PART = 8

    @staticmethod
    def ports(g, user_width, lanes=1):
        """The lookup stream ports (PopularityCAM has the same)."""
        return {
            "lookup": In(stream.Signature(data.StructLayout(
                {"key": data.ArrayLayout(g.key_width, lanes), "user": user_width}))),
            "result": Out(stream.Signature(data.StructLayout(
                {"hit": data.ArrayLayout(1, lanes), "slot": data.ArrayLayout(g.slot_width, lanes),
                 "user": user_width}))),
        }

    @classmethod
    def key_parts(cls, g):
        """The (lo, hi) bit ranges of a key compared apart (``MATCH_PART`` bits each)."""
        return [(lo, min(lo + cls.MATCH_PART, g.key_width))
                for lo in range(0, g.key_width, cls.MATCH_PART)]

    def __init__(self, g, user_width, queue_depth, lanes=1):
        self.g, self.user_width, self.queue_depth, self.lanes = g, user_width, queue_depth, lanes
        super().__init__({
            **self.ports(g, user_width, lanes),
            "read_addr": Out(data.ArrayLayout(data.ArrayLayout(g.bucket_bits, 2), lanes)),
            "bucket_data": In(data.ArrayLayout(data.ArrayLayout(g.bucket_layout, 2), lanes)),
            "engine": In(CAMEngineSignature(g)),
        })

    def elaborate(self, platform):
        m = Module()
        g, eng, tables, lanes = self.g, self.engine, (0, 1), range(self.lanes)
        taken = self.lookup.valid & self.lookup.ready
        queue, room = OutputQueue.behind_pipeline(m, self.result, self.queue_depth, taken)
        m.d.comb += self.lookup.ready.eq(room & eng.idle & ~eng.cmd_pending)

        buckets = data.ArrayLayout(g.bucket_bits, 2)
        parts = self.key_parts(g)

        def stage(name, **fields):
            # The beat's user sideband and each lane's ``fields``; data registers have no
            # reset: only the valid flags matter after a reset.
            return Signal(data.StructLayout({
                "user": self.user_width,
                "lane": data.ArrayLayout(data.StructLayout(fields), self.lanes)}),
                name=name, reset_less=True)

        valid = Signal(6)  # stages s1, s2, s3, s3b, s4, s5
        s1 = stage("s1", key=g.key_width, bucket=buckets)
        s2 = stage("s2", key=g.key_width, bucket=buckets, stash_hit=g.stash)
        s3 = Signal.like(s2)
        s3b = Signal.like(s2)  # aligned with bucket_data
        # s4: per table and way, the entry's valid bit and the equality of each key part
        s4 = stage("s4", bucket=buckets, stash_hit=g.stash,
                   match=data.ArrayLayout(data.ArrayLayout(1 + len(parts), g.ways), 2))
        s5 = stage("s5", bucket=buckets, stash_hit=g.stash, way_hit=data.ArrayLayout(g.ways, 2))
        m.d.sync += [
            valid.eq(Cat(taken, valid[:5])),
            s1.user.eq(self.lookup.payload.user), s2.user.eq(s1.user),
            s3.eq(s2),
            s3b.eq(s3),
            s4.user.eq(s3b.user), s5.user.eq(s4.user),
        ]
        for lane in lanes:
            key = self.lookup.payload.key[lane]
            l1, l2, l3b, l4, l5 = (s.lane[lane] for s in (s1, s2, s3b, s4, s5))
            m.d.sync += [
                # The engine's reads carry its key down lane 0, so its s5.way_hit is the
                # engine's home match too: lane 0's 2 x ways key compares are shared (each is
                # 33 bits wide, fed by block RAM).
                l1.key.eq(Mux(eng.idle, key, eng.key) if lane == 0 else key),
                l2.key.eq(l1.key), l2.bucket.eq(l1.bucket),
                l2.stash_hit.eq(Cat(g.stash_match(eng.stash_valid, eng.stash_key, l1.key))),
                l4.bucket.eq(l3b.bucket), l4.stash_hit.eq(l3b.stash_hit),
                l5.bucket.eq(l4.bucket), l5.stash_hit.eq(l4.stash_hit),
            ]
            for t in tables:
                word = self.bucket_data[lane][t]
                for w in range(g.ways):
                    # Each way compares with its own copy of s3b's key, placed by its block
                    # RAMs (timing: one s3b key fanned out to the 2 x ways compares beside both
                    # tables' block RAMs, 8.5-9 ns of route at seeds 2 and 3).
                    match_key = replica(g.key_width, f"s3b_key{lane}_{t}_{w}")
                    m.d.sync += match_key.eq(s3.lane[lane].key)
                    m.d.sync += [
                        l4.match[t][w].eq(Cat(word[w].valid,
                                              *(word[w].key[lo:hi] == match_key[lo:hi]
                                                for lo, hi in parts))),
                        l5.way_hit[t][w].eq(l4.match[t][w].all()),
                    ]
            m.d.comb += self.read_addr[lane].eq(l1.bucket)
            # The read address: the lookup's hash while idle, else (lane 0) the engine's
            # bucket, which it stages a cycle ahead: only flip-flops select it, and the hash is
            # all the logic in front of it. The other lanes read only for lookups.
            lookup_bucket = [l1.bucket[t].eq(g.hash(t, key)) for t in tables]
            if lane == 0:
                with m.If(eng.idle):
                    m.d.sync += lookup_bucket
                with m.Elif(eng.load):
                    m.d.sync += [l1.bucket[t].eq(eng.addr[t]) for t in tables]
            else:
                m.d.sync += lookup_bucket

            slot = C(0, g.slot_width)
            for t in tables:
                for w in range(g.ways):
                    slot |= Mux(l5.way_hit[t][w], g.slot(t, l5.bucket[t], w), 0)
            for i in range(g.stash):
                slot |= Mux(l5.stash_hit[i], g.stash_slot(i), 0)
            m.d.comb += [
                queue.i.payload.hit[lane].eq(Cat(l5.way_hit[0], l5.way_hit[1], l5.stash_hit).any()),
                queue.i.payload.slot[lane].eq(slot),
            ]
        # The engine's copy of lane 0's way hits (timing: one register serving the engine's
        # decode and the result's hit and slot was pulled between them; both paths were late).
        engine_hit = replica(len(s5.lane[0].way_hit.as_value()), "engine_way_hit")
        m.d.sync += engine_hit.eq(Cat(s4.lane[0].match[t][w].all()
                                      for t in tables for w in range(g.ways)))
        m.d.comb += [
            eng.way_hit.eq(engine_hit),
            queue.i.valid.eq(valid[5]),
            queue.i.payload.user.eq(s5.user),
        ]
        return m
