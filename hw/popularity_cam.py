"""PopularityCAM: exact-match key -> hot slot map in block RAM (bucketized cuckoo hash + stash).

Organisation: two hash tables ``t`` in {0, 1}, each its own memory of ``entries // (2 * ways)``
buckets of ``ways`` entries (valid bit + full key, so there are no false positives), addressed by
the hash ``h_t(key)`` (``hotline.hw.hashing.bucket_hash``, seeds ``seeds[t]``). A lookup reads both
buckets in the same cycle and compares ``2 * ways`` keys plus the ``stash`` flip-flop entries.
Each table is a ``hotline.hw.bram.BucketTable`` (block RAM, read every cycle, registered output).

Slots (contract: the device hot table is indexed by them):
``slot = t * entries // 2 + bucket * ways + way`` for table entries, ``entries + i`` for stash
entry ``i``.

Lookup: ``lookup`` (key, user) -> ``result`` (hit, slot, user); in order, one per cycle
sustained, latency ``LATENCY`` = 6 cycles from the ``lookup`` handshake cycle to ``result.valid``
when ``result`` is not stalled. The pipeline itself never stalls: its results wait in an
``OutputQueue`` of ``QUEUE_DEPTH + 1`` entries, and ``lookup.ready`` is low while the lookups
accepted and not yet delivered could fill it (no loss, duplication or bubble; ``result.ready``
reaches ``lookup.ready`` through a register only).

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
  Cost: 9 cycles without relocation, plus 11 per victim searched and 5 per move.
- DELETE: OK + freed slot, or NOT_FOUND.
- CLEAR: empties table and stash and zeroes ``kicks``; takes ``entries // (2 * ways)`` cycles.
  Reset runs the same pass (no response); ``lookup`` and ``cmd`` are not ready meanwhile.
"""
from contextlib import contextmanager
from types import SimpleNamespace

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from hotline.contract.hashing import bucket_hash
from hotline.contract.shapes import CAMOp, CAMStatus

from .bram import BucketTable
from .onehot import one_hot_select
from .replica import replica

__all__ = ["CAMOp", "CAMStatus", "OutputQueue", "PopularityCAM"]


def _first(bits):
    """(any, index) of the lowest set bit of a list of 1-bit values, as a priority chain."""
    width = ceil_log2(len(bits))
    found, index = C(0), C(0, width)
    for i in reversed(range(len(bits))):
        found, index = bits[i] | found, Mux(bits[i], C(i, width), index)
    return found, index


class OutputQueue(wiring.Component):
    """Stream FIFO whose output is a register: ``i`` -> ``o`` (payload ``shape``), in order.

    An entry that enters an empty queue is on ``o`` in the next cycle, as behind a plain
    pipeline register; entries behind it wait in ``depth`` words of memory with an
    asynchronous read (LUT RAM on ECP5). It holds ``depth + 1`` entries; ``i.ready`` = not
    full, from registers only. One entry in and one out per cycle sustained.
    """

    def __init__(self, shape, depth):
        self.depth = depth
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    @classmethod
    def behind_pipeline(cls, m, o, depth, taken):
        """An OutputQueue of ``depth`` driving stream ``o``, for a pipeline that never stalls:
        returns (queue, room). ``room`` (a register) is high while fewer than ``depth + 1``
        beats are accepted (``taken``) and not yet delivered on ``o``, so a beat taken while
        it is high always finds space, whatever the pipeline's latency below ``depth``."""
        m.submodules.queue = queue = cls(o.payload.shape(), depth)
        wiring.connect(m, queue.o, wiring.flipped(o))
        capacity = depth + 1
        outstanding = Signal(range(capacity + 1))
        room = Signal(init=1)
        given = o.valid & o.ready
        # One step up or down at a time, with both outcomes computed from registers (timing).
        with m.If(taken & ~given):
            m.d.sync += [outstanding.eq(outstanding + 1), room.eq(outstanding < capacity - 1)]
        with m.Elif(given & ~taken):
            m.d.sync += [outstanding.eq(outstanding - 1), room.eq(1)]
        return queue, room

    def elaborate(self, platform):
        m = Module()
        m.submodules.storage = storage = Memory(shape=self.i.payload.shape(), depth=self.depth,
                                                init=[])
        write, read = storage.write_port(), storage.read_port(domain="comb")
        produce, consume = Signal(range(self.depth)), Signal(range(self.depth))
        stored = Signal(range(self.depth + 1))
        # `stored == 0` and `stored == depth` as registers: compared combinationally, they
        # went into every payload bit's next-state function (ABC9 merged them: 600 LUT4 and
        # 3-level wide-LUT trees for a 70-bit queue, against 100 LUT4 this way).
        empty, full = Signal(init=1), Signal()
        # no reset for the payload: o.valid says whether it holds an entry
        payload = Signal.like(self.o.payload, name="payload", reset_less=True)
        m.d.comb += self.o.payload.eq(payload)
        load = ~self.o.valid | self.o.ready      # the output register takes an entry
        push = self.i.valid & self.i.ready
        pop = load & ~empty
        bypass = load & empty                    # the input goes straight to the output
        m.d.comb += [
            self.i.ready.eq(~self.o.valid | ~full),
            write.addr.eq(produce), write.data.eq(self.i.payload), write.en.eq(push & ~bypass),
            read.addr.eq(consume),
        ]

        def step(pointer):
            return Mux(pointer == self.depth - 1, 0, pointer + 1)

        with m.If(write.en):
            m.d.sync += produce.eq(step(produce))
        with m.If(pop):
            m.d.sync += [consume.eq(step(consume)), payload.eq(read.data)]
        with m.Elif(bypass):
            m.d.sync += payload.eq(self.i.payload)
        with m.If(load):
            m.d.sync += self.o.valid.eq(pop | push)
        # one step up or down at a time, both outcomes compared from registers
        with m.If(write.en & ~pop):
            m.d.sync += [stored.eq(stored + 1), empty.eq(0), full.eq(stored == self.depth - 1)]
        with m.Elif(pop & ~write.en):
            m.d.sync += [stored.eq(stored - 1), empty.eq(stored == 1), full.eq(0)]
        return m


class PopularityCAM(wiring.Component):
    """Exact-match hash CAM: lookup stream -> (hit, slot); insert/delete/clear command port.

    Parameters: ``entries`` (table entries, power of two), ``ways`` (per bucket, power of two),
    ``key_width``, ``user_width`` (sideband carried from lookup to result), ``stash`` (entries),
    ``max_kicks`` (relocations per insert), ``seeds`` (the two hash functions' seeds), ``hash_family``,
    ``primitive`` (the tables' ``BucketTable`` primitive: None infers block RAM, for
    simulation and any FPGA; "ecp5": DP16KD instances, needed for 125 MHz on ECP5 speed grade
    6, at most 16384 entries).

    Ports: ``lookup`` In stream {key, user}; ``result`` Out stream {hit, slot, user};
    ``cmd`` In stream {op: CAMOp, key}; ``resp`` Out stream {status: CAMStatus, slot, moves};
    ``moves`` Out stream {src, dst}. Timing is in the module docstring.
    """
    LATENCY = 6
    # Results the queue holds besides its output register: enough for one lookup per cycle
    # (LATENCY lookups are outstanding then), with room to spare for a stall of the consumer.
    QUEUE_DEPTH = 8
    # Copies of the written key's select, each driving a slice of the key (see elaborate).
    KEY_SELECT_COPIES = 3

    def __init__(self, entries=16384, *, ways=8, key_width=32, user_width=8, stash=4,
                 max_kicks=64, seeds=(1, 2), hash_family="tabulation", primitive=None):
        for name, value in (("entries", entries), ("ways", ways)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if entries < 2 * ways:
            raise ValueError(f"entries ({entries}) must be at least 2 * ways ({2 * ways})")
        if stash < 1 or max_kicks < 1 or len(seeds) != 2 or seeds[0] == seeds[1]:
            raise ValueError("need stash >= 1, max_kicks >= 1 and two distinct seeds")
        self.entries, self.ways, self.key_width, self.user_width = entries, ways, key_width, user_width
        self.stash, self.max_kicks, self.seeds = stash, max_kicks, tuple(seeds)
        self.primitive = primitive
        self.buckets = entries // (2 * ways)
        self.slot_width = bits_for(entries + stash - 1)
        self.hash_family = hash_family
        self.hashes = [bucket_hash(seed, key_width, ceil_log2(self.buckets), hash_family)
                       for seed in seeds]

        self.entry_layout = data.StructLayout({"valid": 1, "key": key_width})
        self.bucket_layout = data.ArrayLayout(self.entry_layout, ways)
        super().__init__({
            "lookup": In(stream.Signature(data.StructLayout({"key": key_width, "user": user_width}))),
            "result": Out(stream.Signature(data.StructLayout(
                {"hit": 1, "slot": self.slot_width, "user": user_width}))),
            "cmd": In(stream.Signature(data.StructLayout({"op": CAMOp, "key": key_width}))),
            "resp": Out(stream.Signature(data.StructLayout(
                {"status": CAMStatus, "slot": self.slot_width, "moves": bits_for(max_kicks)}))),
            "moves": Out(stream.Signature(data.StructLayout(
                {"src": self.slot_width, "dst": self.slot_width}))),
        })

    def _slot(self, table, bucket, way):
        return Cat(C(way, ceil_log2(self.ways)) if isinstance(way, int) else way,
                   bucket, C(table, 1) if isinstance(table, int) else table)

    def _hash(self, table, key):
        return self.hashes[table].expr(key)

    def elaborate(self, platform):
        m = Module()
        ways, tables = self.ways, (0, 1)
        bucket_bits, way_bits = ceil_log2(self.buckets), ceil_log2(self.ways)

        # Both tables read every cycle, at the s1.bucket register: a registered block-RAM
        # output cannot hold its data, so nothing waits on the read data (see the lookup
        # pipeline) and the engine keeps s1.bucket still while it uses what it read.
        table = [BucketTable(depth=self.buckets, ways=ways, width=self.entry_layout.size,
                             primitive=self.primitive) for t in tables]
        wr = [wiring.Signature({"addr": Out(bucket_bits), "en": Out(ways)}).create(path=(f"wr{t}",))
              for t in tables]
        wr_entry = Signal(self.entry_layout)
        # Writes reach the block RAM one cycle late through registers (timing): only the
        # engine writes, and it reads no written word before the write is done.
        wr_data = Signal(self.entry_layout, reset_less=True)
        m.d.sync += wr_data.eq(wr_entry)
        for t in tables:
            m.submodules[f"table{t}"] = table[t]
            wr_addr = Signal(bucket_bits, name=f"wr_addr{t}", reset_less=True)
            wr_en = Signal(ways, name=f"wr_en{t}")
            m.d.sync += [wr_addr.eq(wr[t].addr), wr_en.eq(wr[t].en)]
            m.d.comb += [table[t].write_addr.eq(wr_addr), table[t].write_en.eq(wr_en),
                         table[t].write_data.eq(wr_data)]
        bucket_data = [self.bucket_layout(table[t].read_data) for t in tables]

        stash_key = Array(Signal(self.key_width, name=f"stash_key{i}", reset_less=True) for i in range(self.stash))
        stash_valid = Signal(self.stash)

        def stash_match(key):
            return [stash_valid[i] & (stash_key[i] == key) for i in range(self.stash)]

        def stash_slot(i):
            return C(self.entries + i, self.slot_width)

        def way_match(bucket, key):
            return [bucket[w].valid & (bucket[w].key == key) for w in range(ways)]

        # Command engine state, one-hot: every state test is a single flip-flop, so no state
        # decoding sits in front of the read address, the clock enables or the handshakes.
        waits = BucketTable.LATENCY
        states = ["CLEAR", "IDLE", "HOME_READ", *(f"HOME_WAIT{i}" for i in range(waits)),
                  "HOME_MATCH", "HOME_DECODE", "HOME_EVAL", "MASK", "MASK_WAYS", "CHOOSE", "PUSH",
                  "VICTIM_HASH", "WALK_ADDR", "WALK_READ", *(f"WALK_WAIT{i}" for i in range(waits)),
                  "WALK_EVAL", "STASH",
                  "MOVE_READ", *(f"MOVE_WAIT{i}" for i in range(waits)), "MOVE_WRITE", "PLACE"]
        state_index = {name: i for i, name in enumerate(states)}
        fsm_state = Signal(len(states), init=1 << state_index["CLEAR"])
        idle = fsm_state[state_index["IDLE"]]

        # Lookup pipeline: it never stalls, and the result queue takes what leaves it. A
        # lookup is accepted only while the queue is sure to have room for it, so none is
        # dropped.
        taken = self.lookup.valid & self.lookup.ready
        queue, room = OutputQueue.behind_pipeline(m, self.result, self.QUEUE_DEPTH, taken)
        m.d.comb += [self.lookup.ready.eq(room & idle & ~self.cmd.valid),
                     self.cmd.ready.eq(idle & ~self.resp.valid)]

        # Copies of the command's key, one that the engine sends down the lookup pipeline and
        # one for the stash compare (timing: ``key`` also drives the write data of every table
        # block RAM, which pulled it away from the compare logic).
        match_key = [replica(self.key_width, f"match_key{i}") for i in range(2)]

        # Data registers have no reset: only the valid flags matter after a reset.
        valid = Signal(5)  # stages s1, s2, s3, s3b, s4
        s1 = Signal(data.StructLayout({"key": self.key_width, "user": self.user_width,
                                       "bucket": data.ArrayLayout(bucket_bits, 2)}), reset_less=True)
        s2 = Signal(data.StructLayout({"key": self.key_width, "user": self.user_width,
                                       "bucket": data.ArrayLayout(bucket_bits, 2),
                                       "stash_hit": self.stash}), reset_less=True)
        s3 = Signal.like(s2)
        s3b = Signal.like(s2)  # aligned with bucket_data
        s4 = Signal(data.StructLayout({"user": self.user_width,
                                       "bucket": data.ArrayLayout(bucket_bits, 2),
                                       "way_hit": data.ArrayLayout(ways, 2),
                                       "stash_hit": self.stash}), reset_less=True)
        m.d.sync += [
            valid.eq(Cat(taken, valid[:4])),
            # The engine's reads carry its key, so s4.way_hit is its home match too: the
            # 2 x ways key compares are shared (each is 33 bits wide, fed by block RAM).
            s1.key.eq(Mux(idle, self.lookup.payload.key, match_key[0])),
            s1.user.eq(self.lookup.payload.user),
            s2.key.eq(s1.key), s2.user.eq(s1.user),
            s2.bucket.eq(s1.bucket), s2.stash_hit.eq(Cat(stash_match(s1.key))),
            s3.eq(s2),
            s3b.eq(s3),
            s4.user.eq(s3b.user), s4.bucket.eq(s3b.bucket), s4.stash_hit.eq(s3b.stash_hit),
        ]
        m.d.sync += [s4.way_hit[t].eq(Cat(way_match(bucket_data[t], s3b.key))) for t in tables]
        # The read address: the lookup's hash while idle, else the engine's bucket, which it
        # stages in eng_addr a cycle ahead (see read_next below): only flip-flops select it,
        # and the hash is all the logic in front of it.
        eng_addr = [Signal(bucket_bits, name=f"eng_addr{t}", reset_less=True) for t in tables]
        eng_load = Signal()
        m.d.comb += [table[t].read_addr.eq(s1.bucket[t]) for t in tables]
        with m.If(idle):
            m.d.sync += [s1.bucket[t].eq(self._hash(t, self.lookup.payload.key)) for t in tables]
        with m.Elif(eng_load):
            m.d.sync += [s1.bucket[t].eq(eng_addr[t]) for t in tables]

        slot = C(0, self.slot_width)
        for t in tables:
            for w in range(ways):
                slot |= Mux(s4.way_hit[t][w], self._slot(t, s4.bucket[t], w), 0)
        for i in range(self.stash):
            slot |= Mux(s4.stash_hit[i], stash_slot(i), 0)
        m.d.comb += [
            queue.i.valid.eq(valid[4]),
            queue.i.payload.hit.eq(Cat(s4.way_hit[0], s4.way_hit[1], s4.stash_hit).any()),
            queue.i.payload.slot.eq(slot),
            queue.i.payload.user.eq(s4.user),
        ]

        with m.If(self.resp.ready):
            m.d.sync += self.resp.valid.eq(0)
        with m.If(self.moves.ready):
            m.d.sync += self.moves.valid.eq(0)
        moves_free = ~self.moves.valid | self.moves.ready

        op = Signal(CAMOp)
        key = Signal(self.key_width, reset_less=True)
        home = Array(Signal(bucket_bits, name=f"home{t}", reset_less=True) for t in tables)
        clear_count = Signal(bucket_bits)
        clear_cmd = Signal()
        # from_kicks (below) follows kicks a cycle late: kicks changes in PUSH and CLEAR only,
        # several cycles before the next CHOOSE.
        kicks = Signal(ceil_log2(ways))

        # Relocation path as a stack of victim slots, newest in path[0]: the search pushes, the
        # moves pop (newest first), so no entry is ever addressed by a dynamic index. target is
        # where the key being moved goes (first the free way that ends the path).
        path_layout = data.StructLayout({"way": way_bits, "bucket": bucket_bits, "table": 1})
        path = [Signal(path_layout, name=f"path{j}", reset_less=True) for j in range(self.max_kicks)]
        path_valid = Signal(self.max_kicks)
        path_len = Signal(range(self.max_kicks + 1))
        cur = Signal(path_layout, reset_less=True)
        target = Signal(path_layout, reset_less=True)
        victim_key = Signal(self.key_width, reset_less=True)
        same_bucket = Signal(self.max_kicks)
        on_path_r = Signal(ways)
        found_r = [Signal(ways, name=f"found{t}") for t in tables]
        in_stash_r = Signal(self.stash)
        in_stash_any = Signal()
        in_table_r = Signal()
        victim_home = [Signal(bucket_bits, name=f"victim_home{t}", reset_less=True) for t in tables]
        # The first free stash entry's slot, from stash_valid a cycle earlier: the stash only
        # changes in states that respond, and STASH comes many cycles after any of them.
        stash_free = Signal()
        stash_free_index = Signal(range(self.stash), reset_less=True)
        stash_free_slot = Signal(self.slot_width, reset_less=True)
        hit_slot_r = Signal(self.slot_width, reset_less=True)  # of the key in table or stash
        free_r = [Signal(name=f"free{t}") for t in tables]
        free_slot_r = [Signal(path_layout, name=f"free_slot{t}", reset_less=True) for t in tables]

        def respond(status, slot=0, moves=0):
            m.d.sync += [
                self.resp.valid.eq(1),
                self.resp.payload.status.eq(status),
                self.resp.payload.slot.eq(slot),
                self.resp.payload.moves.eq(moves),
            ]
            goto("IDLE")

        def write(where):
            # The entry written depends on the state only (see below); valid entries are only
            # written in MOVE_WRITE and PLACE, the key of an invalid entry is never looked at.
            for t in tables:
                with m.If(where.table == t):
                    m.d.comb += [
                        wr[t].addr.eq(where.bucket),
                        wr[t].en.eq(C(1, ways) << where.way),
                    ]

        def current(table):
            selected = Signal(self.bucket_layout)
            m.d.comb += selected.eq(Mux(table, bucket_data[1], bucket_data[0]))
            return selected

        def slot_of(where):
            return where.as_value()  # path_layout is laid out as a slot number

        def settle(name, then, go=1):
            # X_READ loads the address read_next staged; the word is in bucket_data
            # BucketTable.LATENCY cycles later. The last wait lasts until ``go``, and the word
            # stays.
            for i in range(waits):
                with state(f"{name}{i}"):
                    if i + 1 < waits:
                        goto(f"{name}{i + 1}")
                    else:
                        with m.If(go):
                            goto(then)

        def read_next(*buckets, when=1):
            # If ``when``, read ``buckets`` (one per table, or one for both) from the cycle
            # after next on. Only the load depends on ``when`` (timing): staging an address
            # does not change the one read.
            m.d.sync += [eng_addr[t].eq(buckets[t % len(buckets)]) for t in tables]
            m.d.sync += eng_load.eq(when)

        m.d.sync += eng_load.eq(0)

        state_stack = []

        @contextmanager
        def state(name):
            with m.If(fsm_state[state_index[name]]):
                state_stack.append(name)
                try:
                    yield
                finally:
                    state_stack.pop()

        def goto(name):
            if name != state_stack[-1]:
                m.d.sync += [fsm_state[state_index[state_stack[-1]]].eq(0),
                             fsm_state[state_index[name]].eq(1)]

        moving = fsm_state[state_index["MOVE_WRITE"]]
        write_valid = moving | fsm_state[state_index["PLACE"]]
        # One key select serves every key written and the victim's: a moved key (MOVE_WRITE,
        # at path[0]), the command's key (PLACE) and the victim (PUSH, at cur). Its select is
        # one-hot over the 2 x ways keys of the bucket words and the command's key, loaded a
        # cycle ahead, and kept in a copy per slice of the key (timing: a binary select, then
        # its decode fanned out to every key bit, were the longest paths).
        sources = [bucket_data[t][w].key for t in tables for w in range(ways)] + [key]
        cut = [self.key_width * i // self.KEY_SELECT_COPIES
               for i in range(self.KEY_SELECT_COPIES + 1)]
        select = [replica(len(sources), f"key_select{i}") for i in range(self.KEY_SELECT_COPIES)]
        selected_key = Cat(one_hot_select(select[i], [source[lo:hi] for source in sources])
                           for i, (lo, hi) in enumerate(zip(cut, cut[1:])))

        def select_key(where=None):
            """Select, from the next cycle on, the key at ``where`` (None: the command's)."""
            onehot = (C(1 << 2 * ways, len(sources)) if where is None else
                      C(1, len(sources)) << Cat(where.way, where.table))
            m.d.sync += [s.eq(onehot) for s in select]

        m.d.comb += wr_entry.eq(Cat(write_valid, selected_key))

        with state("CLEAR"):
            for t in tables:
                m.d.comb += [wr[t].addr.eq(clear_count), wr[t].en.eq(-1)]
            m.d.sync += [clear_count.eq(clear_count + 1), stash_valid.eq(0), kicks.eq(0)]
            with m.If(clear_count == self.buckets - 1):
                with m.If(clear_cmd):
                    respond(CAMStatus.OK)
                with m.Else():
                    goto("IDLE")

        with state("IDLE"):
            m.d.sync += [path_len.eq(0), path_valid.eq(0)]  # not gated by cmd: timing
            # The home buckets, for HOME_READ (the load is harmless otherwise: while idle,
            # the lookup's hash wins, and CLEAR reads nothing).
            read_next(*(self._hash(t, self.cmd.payload.key) for t in tables))
            with m.If(self.cmd.valid & self.cmd.ready):
                m.d.sync += [op.eq(self.cmd.payload.op), key.eq(self.cmd.payload.key),
                             *(k.eq(self.cmd.payload.key) for k in match_key)]
                m.d.sync += [home[t].eq(self._hash(t, self.cmd.payload.key)) for t in tables]
                with m.If(self.cmd.payload.op == CAMOp.CLEAR):
                    m.d.sync += [clear_count.eq(0), clear_cmd.eq(1)]
                    goto("CLEAR")
                with m.Else():
                    goto("HOME_READ")

        with state("HOME_READ"):
            goto("HOME_WAIT0")

        settle("HOME_WAIT", "HOME_MATCH")

        # The key compares (the lookup pipeline's, into s4.way_hit), then what follows from
        # them, get a cycle each, so HOME_EVAL only decides, from flip-flops.
        with state("HOME_MATCH"):
            m.d.sync += in_stash_r.eq(Cat(stash_match(match_key[1])))
            goto("HOME_DECODE")

        with state("HOME_DECODE"):
            found = list(s4.way_hit[0]) + list(s4.way_hit[1])
            hit_table = s4.way_hit[1].any()
            m.d.sync += [found_r[t].eq(s4.way_hit[t]) for t in tables]
            hit_way = _first(found)[1][:way_bits]
            stash_index = _first(list(in_stash_r))[1]
            m.d.sync += [
                in_table_r.eq(Cat(found).any()),
                in_stash_any.eq(in_stash_r.any()),
                hit_slot_r.eq(Mux(Cat(found).any(),
                                  self._slot(hit_table, home[hit_table], hit_way),
                                  stash_slot(0) + stash_index)),
            ]
            for t in tables:
                free, free_way = _first([~bucket_data[t][w].valid for w in range(ways)])
                m.d.sync += [free_r[t].eq(free),
                             free_slot_r[t].eq(Cat(free_way, home[t], C(t, 1)))]
            goto("HOME_EVAL")

        with state("HOME_EVAL"):
            in_stash = in_stash_any
            with m.If(op == CAMOp.DELETE):
                with m.If(in_table_r):
                    m.d.comb += [wr[t].addr.eq(home[t]) for t in tables]
                    m.d.comb += [wr[t].en.eq(found_r[t]) for t in tables]
                    respond(CAMStatus.OK, hit_slot_r)
                with m.Elif(in_stash):
                    m.d.sync += stash_valid.eq(stash_valid & ~in_stash_r)
                    respond(CAMStatus.OK, hit_slot_r)
                with m.Else():
                    respond(CAMStatus.NOT_FOUND)
            with m.Elif(in_table_r | in_stash):
                respond(CAMStatus.EXISTS, hit_slot_r)
            with m.Else():
                with m.If(free_r[0] | free_r[1]):
                    goto("PLACE")
                with m.Else():
                    goto("MASK")
            # Loaded whatever the outcome: each is used only after the state it suits
            # (timing: the decision drives only the state and the response).
            m.d.sync += [target.eq(Mux(free_r[0], free_slot_r[0], free_slot_r[1])),
                         cur.table.eq(0), cur.bucket.eq(home[0])]
            select_key()  # for PLACE

        # Ways of the current bucket already on the path are not candidates, so every key
        # moves at most once and the search never needs to modify the table. The mask (two
        # steps), the choice and the push each take a cycle to keep the path logic off the
        # critical path.
        with state("MASK"):
            m.d.sync += same_bucket.eq(Cat(
                path_valid[j] & (path[j].table == cur.table) & (path[j].bucket == cur.bucket)
                for j in range(self.max_kicks)))
            goto("MASK_WAYS")

        with state("MASK_WAYS"):
            m.d.sync += on_path_r.eq(Cat(
                (same_bucket & Cat(path[j].way == w for j in range(self.max_kicks))).any()
                for w in range(ways)))
            goto("CHOOSE")

        # The first way not on the path, scanning from kicks: the first such way at or above
        # kicks, else the first one (two priority chains side by side, no rotate or add).
        from_kicks = Signal(ways)
        m.d.sync += from_kicks.eq(Cat(C(w, way_bits + 1) >= kicks for w in range(ways)))
        with state("CHOOSE"):
            candidate = [~on_path_r[w] for w in range(ways)]
            late, late_way = _first([c & from_kicks[w] for w, c in enumerate(candidate)])
            avail, first_way = _first(candidate)
            with m.If(path_valid[-1] | ~avail):
                goto("STASH")
            with m.Else():
                chosen = Mux(late, late_way, first_way)
                m.d.sync += cur.way.eq(chosen)
                select_key(SimpleNamespace(way=chosen, table=cur.table))
                goto("PUSH")

        with state("PUSH"):
            m.d.sync += [
                path[0].eq(cur),
                *(path[j].eq(path[j - 1]) for j in range(1, self.max_kicks)),
                path_valid.eq(Cat(C(1, 1), path_valid)),
                path_len.eq(path_len + 1),
                kicks.eq(kicks + 1),
                victim_key.eq(selected_key),
            ]
            goto("VICTIM_HASH")

        # Both of the victim's buckets are registered, then the other table's one is selected
        # (timing: the hash and the select took a cycle together).
        with state("VICTIM_HASH"):
            m.d.sync += [victim_home[t].eq(self._hash(t, victim_key)) for t in tables]
            m.d.sync += cur.table.eq(~cur.table)
            goto("WALK_ADDR")

        with state("WALK_ADDR"):
            next_bucket = Mux(cur.table, victim_home[1], victim_home[0])
            m.d.sync += cur.bucket.eq(next_bucket)
            read_next(next_bucket)
            goto("WALK_READ")

        with state("WALK_READ"):
            goto("WALK_WAIT0")

        settle("WALK_WAIT", "WALK_EVAL")

        with state("WALK_EVAL"):
            bucket = current(cur.table)
            free, free_way = _first([~bucket[w].valid for w in range(ways)])
            # Only the state and the load depend on ``free`` (timing); target is unused
            # until set again if the walk goes on.
            m.d.sync += target.eq(Cat(free_way, cur.bucket, cur.table))
            read_next(path[0].bucket, when=free)
            with m.If(free):
                goto("MOVE_READ")
            with m.Else():
                goto("MASK")

        free, free_index = _first([~stash_valid[i] for i in range(self.stash)])
        m.d.sync += [stash_free.eq(free), stash_free_index.eq(free_index),
                     stash_free_slot.eq(stash_slot(0) + free_index)]
        with state("STASH"):
            with m.If(stash_free):
                m.d.sync += [stash_key[stash_free_index].eq(key),
                             stash_valid.bit_select(stash_free_index, 1).eq(1)]
                respond(CAMStatus.OK, stash_free_slot)
            with m.Else():
                respond(CAMStatus.FULL)

        # Moves run from the end of the path back to its head, so each copy goes to a
        # slot that is already free.
        with state("MOVE_READ"):
            select_key(path[0])
            goto("MOVE_WAIT0")

        # Waiting for the moves register before MOVE_WRITE keeps moves.ready out of the
        # path shift and the read address logic (timing).
        settle("MOVE_WAIT", "MOVE_WRITE", go=moves_free)

        with state("MOVE_WRITE"):
            src = path[0]
            write(target)
            m.d.sync += [
                self.moves.valid.eq(1),
                self.moves.payload.src.eq(slot_of(src)),
                self.moves.payload.dst.eq(slot_of(target)),
                target.eq(src),
                *(path[j].eq(path[j + 1]) for j in range(self.max_kicks - 1)),
                path_valid.eq(path_valid[1:]),
            ]
            read_next(path[1].bucket, when=path_valid[1])
            select_key()  # for PLACE (MOVE_READ selects the next move's key)
            with m.If(path_valid[1]):
                goto("MOVE_READ")
            with m.Else():
                goto("PLACE")

        # The write repeats while the response waits for the last move to be taken, so
        # moves.ready stays out of the write port logic (timing).
        with state("PLACE"):
            write(target)
            with m.If(moves_free):
                respond(CAMStatus.OK, slot_of(target), path_len)

        return m
