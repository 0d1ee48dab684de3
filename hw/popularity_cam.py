"""PopularityCAM: exact-match key -> hot slot map in block RAM (bucketized cuckoo hash + stash).

Organisation: two hash tables ``t`` in {0, 1}, each its own memory of ``entries // (2 * ways)``
buckets of ``ways`` entries (valid bit + full key, so there are no false positives), addressed by
the H3 hash ``h_t(key)`` (``hotline.hw.hashing``, seeds ``seeds[t]``). A lookup reads both
buckets in the same cycle and compares ``2 * ways`` keys plus the ``stash`` flip-flop entries.
Each table is stored as banks of ``bank_depth`` buckets whose outputs are registered before the
bank is selected (timing; invisible at the ports).

Slots (contract: the device hot table is indexed by them):
``slot = t * entries // 2 + bucket * ways + way`` for table entries, ``entries + i`` for stash
entry ``i``.

Lookup: ``lookup`` (key, user) -> ``result`` (hit, slot, user); in order, one per cycle
sustained, latency ``LATENCY`` = 6 cycles from the ``lookup`` handshake cycle to ``result.valid``
when ``result`` is not stalled. Backpressure stalls the whole pipeline (no loss, duplication or
bubble); ``lookup.ready`` follows ``result.ready`` combinationally.

Commands: ``cmd`` (op, key) -> ``resp`` (status, slot, moves), one response per command.
Ordering rule: a valid ``cmd`` blocks new lookups; it is accepted once the lookups already in
the pipeline have read the table, and lookups accepted after it see its effect.

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
  Cost: 7 cycles without relocation, plus 9 per victim searched and 4 per move.
- DELETE: OK + freed slot, or NOT_FOUND.
- CLEAR: empties table and stash and zeroes ``kicks``; takes ``entries // (2 * ways)`` cycles.
  Reset runs the same pass (no response); ``lookup`` and ``cmd`` are not ready meanwhile.
"""
from contextlib import contextmanager

from amaranth import *
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from .hashing import h3_hash, h3_masks

__all__ = ["CAMOp", "CAMStatus", "PopularityCAM"]


class CAMOp(enum.Enum, shape=2):
    INSERT = 0
    DELETE = 1
    CLEAR = 2


class CAMStatus(enum.Enum, shape=2):
    OK = 0
    EXISTS = 1
    FULL = 2
    NOT_FOUND = 3


def _first(bits):
    """(any, index) of the lowest set bit of a list of 1-bit values, as a priority chain."""
    width = ceil_log2(len(bits))
    found, index = C(0), C(0, width)
    for i in reversed(range(len(bits))):
        found, index = bits[i] | found, Mux(bits[i], C(i, width), index)
    return found, index


class PopularityCAM(wiring.Component):
    """Exact-match hash CAM: lookup stream -> (hit, slot); insert/delete/clear command port.

    Parameters: ``entries`` (table entries, power of two), ``ways`` (per bucket, power of two),
    ``key_width``, ``user_width`` (sideband carried from lookup to result), ``stash`` (entries),
    ``max_kicks`` (relocations per insert), ``seeds`` (H3 seeds of the two hash functions),
    ``bank_depth`` (buckets per memory bank; a power of two, 512 suits ECP5 block RAM).

    Ports: ``lookup`` In stream {key, user}; ``result`` Out stream {hit, slot, user};
    ``cmd`` In stream {op: CAMOp, key}; ``resp`` Out stream {status: CAMStatus, slot, moves};
    ``moves`` Out stream {src, dst}. Timing is in the module docstring.
    """
    LATENCY = 6

    def __init__(self, entries=16384, *, ways=4, key_width=32, user_width=8, stash=4,
                 max_kicks=64, seeds=(1, 2), bank_depth=512):
        for name, value in (("entries", entries), ("ways", ways), ("bank_depth", bank_depth)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if entries < 2 * ways:
            raise ValueError(f"entries ({entries}) must be at least 2 * ways ({2 * ways})")
        if stash < 1 or max_kicks < 1 or len(seeds) != 2 or seeds[0] == seeds[1]:
            raise ValueError("need stash >= 1, max_kicks >= 1 and two distinct seeds")
        self.entries, self.ways, self.key_width, self.user_width = entries, ways, key_width, user_width
        self.stash, self.max_kicks, self.seeds = stash, max_kicks, tuple(seeds)
        self.bank_depth = bank_depth
        self.buckets = entries // (2 * ways)
        self.slot_width = bits_for(entries + stash - 1)
        self.masks = [h3_masks(seed, key_width, ceil_log2(self.buckets)) for seed in seeds]

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
        return h3_hash(key, self.masks[table])

    def elaborate(self, platform):
        m = Module()
        ways, tables = self.ways, (0, 1)
        bucket_bits, way_bits = ceil_log2(self.buckets), ceil_log2(self.ways)

        # Each table is split into banks of at most bank_depth buckets, each bank's read data
        # is registered as it leaves the BRAM and the bank is selected after that register:
        # yosys builds deeper ECP5 memories from 512-deep blocks plus an output mux, and the
        # BRAM clock-to-output leaves no time for a mux before the first flip-flop.
        bank_depth = min(self.buckets, self.bank_depth)
        banks, low_bits = self.buckets // bank_depth, ceil_log2(bank_depth)
        rd = [wiring.Signature({"addr": Out(bucket_bits), "en": Out(1)}).create(path=(f"rd{t}",))
              for t in tables]
        wr = [wiring.Signature({"addr": Out(bucket_bits), "en": Out(ways),
                                "data": Out(self.bucket_layout)}).create(path=(f"wr{t}",))
              for t in tables]
        bank_read = [[] for t in tables]
        for t in tables:
            # Writes reach the BRAM one cycle late through registers: only the engine writes,
            # and no bucket is read in the cycle after it was written.
            wr_addr = Signal(bucket_bits, name=f"wr_addr{t}", reset_less=True)
            wr_en = Signal(ways, name=f"wr_en{t}")
            wr_data = Signal(self.bucket_layout, name=f"wr_data{t}", reset_less=True)
            m.d.sync += [wr_addr.eq(wr[t].addr), wr_en.eq(wr[t].en), wr_data.eq(wr[t].data)]
            for k in range(banks):
                mem = Memory(shape=self.bucket_layout, depth=bank_depth, init=[], attrs={"no_rw_check": 1})
                m.submodules[f"table{t}_bank{k}"] = mem
                # An asynchronous read port plus an explicit output register: yosys merges the
                # register into the block RAM and, thanks to no_rw_check, without the read-first
                # collision bypass it would otherwise add around a synchronous port.
                read, write = mem.read_port(domain="comb"), mem.write_port(granularity=1)
                read_q = Signal(self.bucket_layout, name=f"read{t}_{k}", reset_less=True)
                with m.If(rd[t].en):
                    m.d.sync += read_q.eq(read.data)
                m.d.comb += [
                    read.addr.eq(rd[t].addr[:low_bits]),
                    write.addr.eq(wr_addr[:low_bits]), write.data.eq(wr_data),
                    write.en.eq(Mux(wr_addr[low_bits:] == k, wr_en, 0)),
                ]
                bank_read[t].append(read_q)

        stash_key = Array(Signal(self.key_width, name=f"stash_key{i}", reset_less=True) for i in range(self.stash))
        stash_valid = Signal(self.stash)

        def stash_match(key):
            return [stash_valid[i] & (stash_key[i] == key) for i in range(self.stash)]

        def stash_slot(i):
            return C(self.entries + i, self.slot_width)

        def way_match(bucket, key):
            return [bucket[w].valid & (bucket[w].key == key) for w in range(ways)]

        # Lookup pipeline. Every stage advances together, so a stalled result holds the BRAM
        # read data (read enable low) and no lookup is dropped or duplicated.
        # Command engine state, one-hot: every state test is a single flip-flop, so no state
        # decoding sits in front of the read port, the clock enables or the handshakes.
        states = ["CLEAR", "IDLE", "HOME_READ", "HOME_WAIT0", "HOME_WAIT1", "HOME_MATCH",
                  "HOME_EVAL", "MASK", "MASK_WAYS", "CHOOSE", "PUSH", "VICTIM_HASH", "WALK_READ",
                  "WALK_WAIT0", "WALK_WAIT1", "WALK_EVAL", "STASH", "MOVE_READ", "MOVE_WAIT0",
                  "MOVE_WAIT1", "MOVE_WRITE", "PLACE"]
        state_index = {name: i for i, name in enumerate(states)}
        fsm_state = Signal(len(states), init=1 << state_index["CLEAR"])
        idle = fsm_state[state_index["IDLE"]]
        advance = ~self.result.valid | self.result.ready
        m.d.comb += self.lookup.ready.eq(advance & idle & ~self.cmd.valid)

        # Data registers have no reset: only the valid flags matter after a reset, and on ECP5 a
        # resettable enable flip-flop costs a LUT in front of it (the BRAM output path is tight).
        valid = Signal(5)  # stages s1, s2, s3, s3b, s4
        m.d.comb += self.cmd.ready.eq(idle & ~valid[:4].any() & ~self.resp.valid)
        s1 = Signal(data.StructLayout({"key": self.key_width, "user": self.user_width,
                                       "bucket": data.ArrayLayout(bucket_bits, 2)}), reset_less=True)
        s2 = Signal(data.StructLayout({"key": self.key_width, "user": self.user_width,
                                       "bucket": data.ArrayLayout(bucket_bits, 2),
                                       "stash_hit": self.stash}), reset_less=True)
        s3 = Signal.like(s2)  # aligned with the bank registers
        s3b = Signal.like(s2)  # aligned with bucket_data
        bucket_data = [Signal(self.bucket_layout, name=f"bucket_data{t}", reset_less=True)
                       for t in tables]
        s4 = Signal(data.StructLayout({"user": self.user_width,
                                       "bucket": data.ArrayLayout(bucket_bits, 2),
                                       "way_hit": data.ArrayLayout(ways, 2),
                                       "stash_hit": self.stash}), reset_less=True)
        with m.If(advance):
            m.d.sync += [
                valid.eq(Cat(self.lookup.valid & self.lookup.ready, valid[:4])),
                s1.key.eq(self.lookup.payload.key),
                s1.user.eq(self.lookup.payload.user),
                s2.key.eq(s1.key), s2.user.eq(s1.user),
                s2.bucket.eq(s1.bucket), s2.stash_hit.eq(Cat(stash_match(s1.key))),
                s3.eq(s2),
                s3b.eq(s3),
                s4.user.eq(s3b.user), s4.bucket.eq(s3b.bucket), s4.stash_hit.eq(s3b.stash_hit),
            ]
            m.d.sync += [s1.bucket[t].eq(self._hash(t, self.lookup.payload.key)) for t in tables]
            m.d.sync += [s4.way_hit[t].eq(Cat(way_match(bucket_data[t], s3b.key))) for t in tables]

            slot = C(0, self.slot_width)
            for t in tables:
                for w in range(ways):
                    slot |= Mux(s4.way_hit[t][w], self._slot(t, s4.bucket[t], w), 0)
            for i in range(self.stash):
                slot |= Mux(s4.stash_hit[i], stash_slot(i), 0)
            m.d.sync += [
                self.result.valid.eq(valid[4]),
                self.result.payload.hit.eq(Cat(s4.way_hit[0], s4.way_hit[1], s4.stash_hit).any()),
                self.result.payload.slot.eq(slot),
                self.result.payload.user.eq(s4.user),
            ]

        # The command engine borrows the read ports and the read-data registers while the
        # lookup stages that use them are empty.
        # The read address is always the s1.bucket register: the engine loads it (and the
        # registered per-table read enable eng_ren) in the cycle before each of its reads, so the
        # block RAM address and enable come straight from flip-flops.
        eng_ren = Signal(2)
        m.d.sync += eng_ren.eq(0)
        for t in tables:
            m.d.comb += [
                rd[t].addr.eq(s1.bucket[t]),
                rd[t].en.eq(Mux(idle, advance, eng_ren[t])),
            ]
            read_bank, data_bank = Signal(range(banks)), Signal(range(banks))
            bank_data = [Signal(self.bucket_layout, name=f"bank_data{t}_{k}", reset_less=True)
                         for k in range(banks)]
            with m.If(rd[t].en):
                m.d.sync += read_bank.eq(rd[t].addr[low_bits:])
            with m.If(~idle | advance):
                m.d.sync += [bank_data[k].eq(bank_read[t][k]) for k in range(banks)]
                m.d.sync += data_bank.eq(read_bank)
                m.d.sync += bucket_data[t].eq(Array(bank_data)[data_bank] if banks > 1 else bank_data[0])

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

        def respond(status, slot=0, moves=0):
            m.d.sync += [
                self.resp.valid.eq(1),
                self.resp.payload.status.eq(status),
                self.resp.payload.slot.eq(slot),
                self.resp.payload.moves.eq(moves),
            ]
            goto("IDLE")

        def write(where):
            # The data written depends on the state only (see below); valid entries are only
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

        def settle(name, then):
            # BRAM -> bank registers -> bucket_data: the read data is usable two cycles later.
            for i in range(2):
                with state(f"{name}{i}"):
                    goto(f"{name}{i + 1}" if i == 0 else then)

        def read_next(table, bucket):
            # Read ``bucket`` of ``table`` (a 1-bit value) in the next cycle.
            m.d.sync += [s1.bucket[t].eq(bucket) for t in tables]
            m.d.sync += eng_ren.eq(Mux(table, 0b10, 0b01))

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
        write_key = Mux(moving, current(path[0].table)[path[0].way].key, key)
        m.d.comb += [wr[t].data.eq(Cat(*([Cat(write_valid, write_key)] * ways))) for t in tables]

        if True:
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
                with m.If(self.cmd.valid & self.cmd.ready):
                    m.d.sync += [op.eq(self.cmd.payload.op), key.eq(self.cmd.payload.key)]
                    m.d.sync += [home[t].eq(self._hash(t, self.cmd.payload.key)) for t in tables]
                    with m.If(self.cmd.payload.op == CAMOp.CLEAR):
                        m.d.sync += [clear_count.eq(0), clear_cmd.eq(1)]
                        goto("CLEAR")
                    with m.Else():
                        # HOME_READ reads both home buckets.
                        m.d.sync += [s1.bucket[t].eq(self._hash(t, self.cmd.payload.key)) for t in tables]
                        m.d.sync += eng_ren.eq(0b11)
                        goto("HOME_READ")

            with state("HOME_READ"):
                goto("HOME_WAIT0")

            settle("HOME_WAIT", "HOME_MATCH")

            # Key compares get a cycle of their own, so HOME_EVAL starts from flip-flops.
            with state("HOME_MATCH"):
                m.d.sync += [found_r[t].eq(Cat(way_match(bucket_data[t], key))) for t in tables]
                m.d.sync += in_stash_r.eq(Cat(stash_match(key)))
                goto("HOME_EVAL")

            with state("HOME_EVAL"):
                found = [list(f) for f in found_r]
                in_stash = list(in_stash_r)
                free = [_first([~bucket_data[t][w].valid for w in range(ways)]) for t in tables]
                hit_table = Cat(found[1]).any()
                hit_way = _first(found[0] + found[1])[1][:way_bits]
                hit_slot = self._slot(hit_table, home[hit_table], hit_way)
                in_table = Cat(found[0] + found[1]).any()
                stash_found, stash_index = _first(in_stash)
                with m.If(op == CAMOp.DELETE):
                    with m.If(in_table):
                        m.d.comb += [wr[t].addr.eq(home[t]) for t in tables]
                        m.d.comb += [wr[t].en.eq(Cat(found[t])) for t in tables]
                        respond(CAMStatus.OK, hit_slot)
                    with m.Elif(stash_found):
                        m.d.sync += stash_valid.bit_select(stash_index, 1).eq(0)
                        respond(CAMStatus.OK, stash_slot(0) + stash_index)
                    with m.Else():
                        respond(CAMStatus.NOT_FOUND)
                with m.Elif(in_table):
                    respond(CAMStatus.EXISTS, hit_slot)
                with m.Elif(stash_found):
                    respond(CAMStatus.EXISTS, stash_slot(0) + stash_index)
                with m.Else():
                    with m.If(free[0][0]):
                        m.d.sync += target.eq(Cat(free[0][1], home[0], C(0, 1)))
                        goto("PLACE")
                    with m.Elif(free[1][0]):
                        m.d.sync += target.eq(Cat(free[1][1], home[1], C(1, 1)))
                        goto("PLACE")
                    with m.Else():
                        m.d.sync += [cur.table.eq(0), cur.bucket.eq(home[0])]
                        goto("MASK")

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

            with state("CHOOSE"):
                rotated = Signal(ways)
                m.d.comb += rotated.eq(Cat(on_path_r, on_path_r) >> kicks)
                avail, offset = _first([~rotated[r] for r in range(ways)])
                with m.If(path_valid[-1] | ~avail):
                    goto("STASH")
                with m.Else():
                    m.d.sync += cur.way.eq(kicks + offset)
                    goto("PUSH")

            with state("PUSH"):
                m.d.sync += [
                    path[0].eq(cur),
                    *(path[j].eq(path[j - 1]) for j in range(1, self.max_kicks)),
                    path_valid.eq(Cat(C(1, 1), path_valid)),
                    path_len.eq(path_len + 1),
                    kicks.eq(kicks + 1),
                    victim_key.eq(current(cur.table)[cur.way].key),
                ]
                goto("VICTIM_HASH")

            with state("VICTIM_HASH"):
                next_bucket = Mux(cur.table, self._hash(0, victim_key), self._hash(1, victim_key))
                m.d.sync += [cur.table.eq(~cur.table), cur.bucket.eq(next_bucket)]
                read_next(~cur.table, next_bucket)
                goto("WALK_READ")

            with state("WALK_READ"):
                goto("WALK_WAIT0")

            settle("WALK_WAIT", "WALK_EVAL")

            with state("WALK_EVAL"):
                bucket = current(cur.table)
                free, free_way = _first([~bucket[w].valid for w in range(ways)])
                with m.If(free):
                    m.d.sync += target.eq(Cat(free_way, cur.bucket, cur.table))
                    read_next(path[0].table, path[0].bucket)
                    goto("MOVE_READ")
                with m.Else():
                    goto("MASK")

            with state("STASH"):
                free, free_index = _first([~stash_valid[i] for i in range(self.stash)])
                with m.If(free):
                    m.d.sync += [stash_key[free_index].eq(key),
                                 stash_valid.bit_select(free_index, 1).eq(1)]
                    respond(CAMStatus.OK, stash_slot(0) + free_index)
                with m.Else():
                    respond(CAMStatus.FULL)

            # Moves run from the end of the path back to its head, so each copy goes to a
            # slot that is already free.
            with state("MOVE_READ"):
                goto("MOVE_WAIT0")

            settle("MOVE_WAIT", "MOVE_WRITE")

            with state("MOVE_WRITE"):
                src = path[0]
                with m.If(moves_free):
                    write(target)
                    m.d.sync += [
                        self.moves.valid.eq(1),
                        self.moves.payload.src.eq(slot_of(src)),
                        self.moves.payload.dst.eq(slot_of(target)),
                        target.eq(src),
                        *(path[j].eq(path[j + 1]) for j in range(self.max_kicks - 1)),
                        path_valid.eq(path_valid[1:]),
                    ]
                    with m.If(~path_valid[1]):
                        goto("PLACE")
                    with m.Else():
                        read_next(path[1].table, path[1].bucket)
                        goto("MOVE_READ")

            with state("PLACE"):
                with m.If(moves_free):
                    write(target)
                    respond(CAMStatus.OK, slot_of(target), path_len)

        return m
