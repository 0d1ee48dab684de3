"""PopularityCAM: exact-match key -> hot slot map in block RAM (bucketized cuckoo hash + stash).

Organisation: two hash tables ``t`` in {0, 1}, each its own memory of ``entries // (2 * ways)``
buckets of ``ways`` entries (valid bit + full key, so there are no false positives), addressed by
the hash ``h_t(key)`` (``hotline.contract.hashing.bucket_hash``, seeds ``seeds[t]``). A lookup
reads both buckets in the same cycle and compares ``2 * ways`` keys plus the ``stash`` flip-flop
entries. Each table is a ``hotline.hw.bram.BucketTable`` (block RAM, read every cycle,
registered output). Two stages share the tables (``CAMGeometry`` holds their common shape):

- `CAMLookupPipeline` (``hw/cam_lookup_pipeline.py``): reads both tables every cycle, compares
  the keys and answers lookups; the command engine's reads go through its lane 0, so the key
  compares are built once per lane.
- `CAMCommandEngine` (``hw/cam_command_engine.py``): the insert/delete/clear state machine, the
  stash, and the tables' only writer.

Lanes: a lookup beat carries ``lanes`` (1, 2 or 4) keys, each with its own hash, stash and
table compares and slot. Lane 0 reads each table through the block RAM's read port; lane 1
through its write port, which the engine leaves free while lookups run (commands block
lookups), so 2 lanes take no more block RAM than 1. Lanes 2 and 3 read a replica of each
table in the same way; the engine writes every replica and reads replica 0.

Slots (contract: the device hot table is indexed by them):
``slot = t * entries // 2 + bucket * ways + way`` for table entries, ``entries + i`` for stash
entry ``i``.

Lookup: ``lookup`` (key[lanes], user) -> ``result`` (hit[lanes], slot[lanes], user); in
order, one beat (``lanes`` lookups) per cycle sustained, latency ``LATENCY`` = 7 cycles from
the ``lookup`` handshake cycle to ``result.valid`` when ``result`` is not stalled. The pipeline
itself never stalls: its results wait in an ``OutputQueue`` of ``QUEUE_DEPTH + 1`` beats, and
``lookup.ready`` is low while the beats accepted and not yet delivered could fill it (no loss,
duplication or bubble; ``result.ready`` reaches ``lookup.ready`` through a register only).

Commands: ``cmd`` (op, key) -> ``resp`` (status, slot, moves), one response per command.
Ordering rule: a valid ``cmd`` blocks new lookups; lookups accepted before it see the table
without its effect, lookups accepted after it with it.

- INSERT: EXISTS + slot if present; else the first free way of bucket ``h_0`` then ``h_1``;
  else a cuckoo relocation path is searched without touching the table: the first victim is in
  bucket ``h_0(key)``, each next one in the other table's bucket of the previous victim, at most
  ``max_kicks`` victims, no slot visited twice; victim way = first way not on the path, scanning
  from ``kicks mod ways``, where ``kicks`` counts victims since the last clear/reset. If a path ends
  in a free way, the keys along it are moved (each one reported on ``moves`` as (src, dst)
  before the response, in an order in which the host can copy rows one by one) and the key is
  written at the head of the path: OK + slot, ``moves`` = number of relocations. Otherwise the
  key goes to the first free stash entry (OK, no moves) or, with the stash full, the table is
  left unchanged and the response is FULL. A key is never lost.
  Cost: 11 cycles without relocation, plus 13 per victim searched and 5 per move.
- DELETE: OK + freed slot, or NOT_FOUND.
- CLEAR: empties table and stash and zeroes ``kicks``; takes ``entries // (2 * ways)`` cycles.
  Reset runs the same pass (no response); ``lookup`` and ``cmd`` are not ready meanwhile.
"""
from amaranth import *
from amaranth.lib import wiring

from hotline.contract.shapes import CAMOp, CAMStatus

from .bram import BucketTable
from .cam_command_engine import CAMCommandEngine
from .cam_geometry import CAMGeometry
from .cam_lookup_pipeline import CAMLookupPipeline

__all__ = ["CAMOp", "CAMStatus", "PopularityCAM"]


class PopularityCAM(wiring.Component):
    """Exact-match hash CAM: lookup stream -> (hit, slot); insert/delete/clear command port.

    Parameters: ``entries`` (table entries, power of two), ``ways`` (per bucket, power of two),
    ``key_width``, ``user_width`` (sideband carried from lookup to result), ``stash`` (entries),
    ``max_kicks`` (relocations per insert), ``seeds`` (the two hash functions' seeds), ``hash_family``,
    ``primitive`` (the tables' ``BucketTable`` primitive: None infers block RAM, for
    simulation and any FPGA; "ecp5": DP16KD instances, needed for 125 MHz on ECP5 speed grade
    6, at most 16384 entries), ``lanes`` (lookups per beat: 1, 2 or 4).

    Ports: ``lookup`` In stream {key: ArrayLayout(key_width, lanes), user}; ``result`` Out
    stream {hit: ArrayLayout(1, lanes), slot: ArrayLayout(slot_width, lanes), user};
    ``cmd`` In stream {op: CAMOp, key}; ``resp`` Out stream {status: CAMStatus, slot, moves};
    ``moves`` Out stream {src, dst}. Timing is in the module docstring.
    """
    LATENCY = CAMLookupPipeline.LATENCY
    # Results the queue holds besides its output register: enough for one beat per cycle
    # (LATENCY beats are outstanding then), with room to spare for a stall of the consumer.
    QUEUE_DEPTH = 8
    LANES = (1, 2, 4)

    def __init__(self, entries=16384, *, ways=8, key_width=32, user_width=8, stash=4,
                 max_kicks=64, seeds=(1, 2), hash_family="tabulation", primitive=None, lanes=1):
        if lanes not in self.LANES:
            raise ValueError(f"lanes must be one of {self.LANES}, not {lanes}")
        self.geometry = g = CAMGeometry(entries, ways, key_width, stash, max_kicks, seeds,
                                        hash_family)
        self.entries, self.ways, self.key_width, self.user_width = entries, ways, key_width, user_width
        self.stash, self.max_kicks, self.seeds = stash, max_kicks, g.seeds
        self.primitive, self.hash_family, self.lanes = primitive, hash_family, lanes
        self.buckets, self.slot_width, self.hashes = g.buckets, g.slot_width, g.hashes
        super().__init__({**CAMLookupPipeline.ports(g, user_width, lanes),
                          **CAMCommandEngine.ports(g)})

    def elaborate(self, platform):
        m = Module()
        g = self.geometry
        m.submodules.pipeline = pipeline = CAMLookupPipeline(g, self.user_width, self.QUEUE_DEPTH,
                                                             self.lanes)
        m.submodules.engine = engine = CAMCommandEngine(g)
        wiring.connect(m, wiring.flipped(self.lookup), pipeline.lookup)
        wiring.connect(m, pipeline.result, wiring.flipped(self.result))
        wiring.connect(m, wiring.flipped(self.cmd), engine.cmd)
        wiring.connect(m, engine.resp, wiring.flipped(self.resp))
        wiring.connect(m, engine.moves, wiring.flipped(self.moves))
        wiring.connect(m, engine.pipe, pipeline.engine)
        # Replica r serves lanes 2r (read port) and 2r + 1 (the write port's, see BucketTable).
        for r, first in enumerate(range(0, self.lanes, 2)):
            ports = min(2, self.lanes - first)
            for t in (0, 1):
                table = BucketTable(depth=g.buckets, ways=g.ways, width=g.entry_layout.size,
                                    primitive=self.primitive, read_ports=ports)
                m.submodules[f"table{t}_{r}" if r else f"table{t}"] = table
                m.d.comb += [
                    table.read_addr.eq(pipeline.read_addr[first][t]),
                    pipeline.bucket_data[first][t].eq(table.read_data),
                    table.write_addr.eq(engine.write_addr[t]),
                    table.write_en.eq(engine.write_en[t]),
                    table.write_data.eq(engine.write_data),
                ]
                if ports == 2:
                    m.d.comb += [table.read2_addr.eq(pipeline.read_addr[first + 1][t]),
                                 pipeline.bucket_data[first + 1][t].eq(table.read2_data)]
                if r == 0:
                    m.d.comb += engine.bucket_data[t].eq(table.read_data)
        return m
