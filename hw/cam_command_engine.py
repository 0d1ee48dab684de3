"""CAMCommandEngine: the PopularityCAM's insert/delete/clear engine, the tables' only writer.

Interface (``g`` a `CAMGeometry`):

- ``cmd`` In stream {op: CAMOp, key}; ``resp`` Out stream {status: CAMStatus, slot, moves},
  one per command; ``moves`` Out stream {src, dst}, one per relocated key, before its
  command's response. What each op does, and its cost in cycles, is in
  `hotline.hw.popularity_cam`'s docstring.
- ``pipe`` Out(`CAMEngineSignature`): the engine reads the tables through the lookup
  pipeline (its key and bucket addresses go down ``s1``, its home match comes back as
  ``pipe.way_hit``), and owns the stash the pipeline compares.
- ``bucket_data`` In ArrayLayout(bucket_layout, 2): the tables' read words (as the pipeline's).
- ``write_addr`` Out ArrayLayout(bucket_bits, 2), ``write_en`` Out ArrayLayout(ways, 2),
  ``write_data`` Out entry_layout: the tables' write ports, from registers (a write reaches
  the block RAM one cycle after the state that makes it; the engine reads no word it has just
  written before then).

Timing: ``cmd.ready`` = idle and no response waiting. A valid ``cmd`` blocks new lookups
(``pipe.cmd_pending``); lookups accepted before it see the table without its effect. After
reset the engine clears the tables (``buckets`` cycles) before it is idle.
"""
from contextlib import contextmanager

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from hotline.contract.shapes import CAMOp, CAMStatus
from hotline.contract.streams import cam_cmd_layout

from .bram import BucketTable
from .cam_lookup_pipeline import CAMEngineSignature, CAMLookupPipeline
from .lib.onehot import lowest_index, one_hot_select
from .lib.replica import replica

__all__ = ["CAMCommandEngine"]


class CAMCommandEngine(wiring.Component):
    """Insert (cuckoo relocation, stash), delete and clear of a PopularityCAM's tables (see
    the module docstring); ``g`` a `CAMGeometry`."""
    # Copies of the written key's select, each driving a slice of the key (see elaborate).
    KEY_SELECT_COPIES = 3

    @staticmethod
    def ports(g):
        """The command stream ports (PopularityCAM has the same)."""
        return {
            "cmd": In(stream.Signature(cam_cmd_layout(g.key_width))),
            "resp": Out(stream.Signature(data.StructLayout(
                {"status": CAMStatus, "slot": g.slot_width, "moves": bits_for(g.max_kicks)}))),
            "moves": Out(stream.Signature(data.StructLayout(
                {"src": g.slot_width, "dst": g.slot_width}))),
        }

    def __init__(self, g):
        self.g = g
        super().__init__({
            **self.ports(g),
            "pipe": Out(CAMEngineSignature(g)),
            "bucket_data": In(data.ArrayLayout(g.bucket_layout, 2)),
            "write_addr": Out(data.ArrayLayout(g.bucket_bits, 2)),
            "write_en": Out(data.ArrayLayout(g.ways, 2)),
            "write_data": Out(g.entry_layout),
        })

    def elaborate(self, platform):
        m = Module()
        g, tables = self.g, (0, 1)
        ways, bucket_bits, way_bits = g.ways, g.bucket_bits, g.way_bits
        bucket_data, way_hit = self.bucket_data, self.pipe.way_hit

        wr = [wiring.Signature({"addr": Out(bucket_bits), "en": Out(ways)}).create(path=(f"wr{t}",))
              for t in tables]
        wr_entry = Signal(g.entry_layout)
        # Writes reach the block RAM one cycle late through registers (timing): only the
        # engine writes, and it reads no written word before the write is done.
        wr_data = Signal(g.entry_layout, reset_less=True)
        m.d.sync += wr_data.eq(wr_entry)
        m.d.comb += self.write_data.eq(wr_data)
        for t in tables:
            wr_addr = Signal(bucket_bits, name=f"wr_addr{t}", reset_less=True)
            wr_en = Signal(ways, name=f"wr_en{t}")
            m.d.sync += [wr_addr.eq(wr[t].addr), wr_en.eq(wr[t].en)]
            m.d.comb += [self.write_addr[t].eq(wr_addr), self.write_en[t].eq(wr_en)]

        stash_key = Array(Signal(g.key_width, name=f"stash_key{i}", reset_less=True)
                          for i in range(g.stash))
        stash_valid = Signal(g.stash)

        # State, one-hot: every state test is a single flip-flop, so no state decoding sits in
        # front of the read address, the clock enables or the handshakes.
        # The home read also waits for the pipeline's key compares (way_hit in HOME_DECODE).
        waits = BucketTable.LATENCY
        home_waits = waits + CAMLookupPipeline.MATCH_LATENCY - 1
        states = ["CLEAR", "IDLE", "HOME_READ", *(f"HOME_WAIT{i}" for i in range(home_waits)),
                  "HOME_MATCH", "HOME_DECODE", "HOME_SLOT", "HOME_EVAL", "MASK", "MASK_WAYS", "CHOOSE", "SELECT",
                  "PUSH",
                  "VICTIM_HASH", "WALK_ADDR", "WALK_READ", *(f"WALK_WAIT{i}" for i in range(waits)),
                  "WALK_EVAL", "STASH",
                  "MOVE_READ", *(f"MOVE_WAIT{i}" for i in range(waits)), "MOVE_WRITE", "PLACE"]
        state_index = {name: i for i, name in enumerate(states)}
        fsm_state = Signal(len(states), init=1 << state_index["CLEAR"])
        idle = fsm_state[state_index["IDLE"]]
        m.d.comb += self.cmd.ready.eq(idle & ~self.resp.valid)

        # Copies of the command's key, one that goes down the lookup pipeline and one for the
        # stash compare (timing: ``key`` also drives the write data of every table block RAM,
        # which pulled it away from the compare logic).
        match_key = [replica(g.key_width, f"match_key{i}") for i in range(2)]
        # The buckets the engine reads, staged a cycle ahead (see read_next).
        eng_addr = [Signal(bucket_bits, name=f"eng_addr{t}", reset_less=True) for t in tables]
        eng_load = Signal()
        m.d.comb += [
            self.pipe.idle.eq(idle), self.pipe.cmd_pending.eq(self.cmd.valid),
            self.pipe.key.eq(match_key[0]), self.pipe.load.eq(eng_load),
            *(self.pipe.addr[t].eq(eng_addr[t]) for t in tables),
            self.pipe.stash_valid.eq(stash_valid),
            *(self.pipe.stash_key[i].eq(stash_key[i]) for i in range(g.stash)),
        ]

        with m.If(self.resp.ready):
            m.d.sync += self.resp.valid.eq(0)
        with m.If(self.moves.ready):
            m.d.sync += self.moves.valid.eq(0)
        moves_free = ~self.moves.valid | self.moves.ready

        op = Signal(CAMOp)
        key = Signal(g.key_width, reset_less=True)
        home = Array(Signal(bucket_bits, name=f"home{t}", reset_less=True) for t in tables)
        clear_count = Signal(bucket_bits)
        clear_cmd = Signal()
        # from_kicks (below) follows kicks a cycle late: kicks changes in PUSH and CLEAR only,
        # several cycles before the next CHOOSE.
        kicks = Signal(ceil_log2(ways))

        # Relocation path as a stack of victim slots, newest in path[0]: the search pushes, the
        # moves pop (newest first), so no entry is ever addressed by a dynamic index. target is
        # where the key being moved goes (first the free way that ends the path).
        path_layout = g.place_layout
        path = [Signal(path_layout, name=f"path{j}", reset_less=True) for j in range(g.max_kicks)]
        path_valid = Signal(g.max_kicks)
        path_len = Signal(range(g.max_kicks + 1))
        cur = Signal(path_layout, reset_less=True)
        target = Signal(path_layout, reset_less=True)
        victim_key = Signal(g.key_width, reset_less=True)
        same_bucket = Signal(g.max_kicks)
        on_path_r = Signal(ways)
        found_r = [Signal(ways, name=f"found{t}") for t in tables]
        in_stash_r = Signal(g.stash)
        in_stash_any = Signal()
        in_table_r = Signal()
        victim_home = [Signal(bucket_bits, name=f"victim_home{t}", reset_less=True) for t in tables]
        # The first free stash entry's slot, from stash_valid a cycle earlier: the stash only
        # changes in states that respond, and STASH comes many cycles after any of them.
        stash_free = Signal()
        stash_free_index = Signal(range(g.stash), reset_less=True)
        stash_free_slot = Signal(g.slot_width, reset_less=True)
        hit_slot_r = Signal(g.slot_width, reset_less=True)  # of the key in table or stash
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
            selected = Signal(g.bucket_layout)
            m.d.comb += selected.eq(Mux(table, bucket_data[1], bucket_data[0]))
            return selected

        def slot_of(where):
            return where.as_value()  # path_layout is laid out as a slot number

        def settle(name, then, go=1, count=waits):
            # X_READ loads the address read_next staged; the word is in bucket_data
            # BucketTable.LATENCY cycles later. The last of ``count`` waits lasts until ``go``,
            # and the word stays.
            for i in range(count):
                with state(f"{name}{i}"):
                    if i + 1 < count:
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
        cut = [g.key_width * i // self.KEY_SELECT_COPIES
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
            with m.If(clear_count == g.buckets - 1):
                with m.If(clear_cmd):
                    respond(CAMStatus.OK)
                with m.Else():
                    goto("IDLE")

        with state("IDLE"):
            m.d.sync += [path_len.eq(0), path_valid.eq(0)]  # not gated by cmd: timing
            # The home buckets, for HOME_READ (the load is harmless otherwise: while idle,
            # the lookup's hash wins, and CLEAR reads nothing).
            read_next(*(g.hash(t, self.cmd.payload.key) for t in tables))
            with m.If(self.cmd.valid & self.cmd.ready):
                m.d.sync += [op.eq(self.cmd.payload.op), key.eq(self.cmd.payload.key),
                             *(k.eq(self.cmd.payload.key) for k in match_key)]
                m.d.sync += [home[t].eq(g.hash(t, self.cmd.payload.key)) for t in tables]
                with m.If(self.cmd.payload.op == CAMOp.CLEAR):
                    m.d.sync += [clear_count.eq(0), clear_cmd.eq(1)]
                    goto("CLEAR")
                with m.Else():
                    goto("HOME_READ")

        with state("HOME_READ"):
            goto("HOME_WAIT0")

        settle("HOME_WAIT", "HOME_MATCH", count=home_waits)

        # The key compares (the lookup pipeline's, into way_hit), then what follows from
        # them, get a cycle each (two for the hit's slot), so HOME_EVAL only decides, from
        # flip-flops.
        # The stash compare in two steps, run every cycle: the equality of each key part, then
        # their AND in HOME_MATCH (timing: in one cycle it was a late path). The command's key
        # and the stash do not change from IDLE to HOME_MATCH, several cycles later.
        parts = CAMLookupPipeline.key_parts(g)
        stash_parts = Signal(g.stash * len(parts))
        m.d.sync += stash_parts.eq(Cat(stash_key[i][lo:hi] == match_key[1][lo:hi]
                                       for i in range(g.stash) for lo, hi in parts))
        with state("HOME_MATCH"):
            m.d.sync += in_stash_r.eq(Cat(
                stash_valid[i] & stash_parts.word_select(i, len(parts)).all()
                for i in range(g.stash)))
            goto("HOME_DECODE")

        with state("HOME_DECODE"):
            m.d.sync += [found_r[t].eq(way_hit[t]) for t in tables]
            m.d.sync += [
                in_table_r.eq(Cat(way_hit[0], way_hit[1]).any()),
                in_stash_any.eq(in_stash_r.any()),
            ]
            for t in tables:
                free, free_way = lowest_index([~bucket_data[t][w].valid for w in range(ways)])
                free_way = free_way[:way_bits]   # (lowest_index is 1 bit wide at 1 way)
                m.d.sync += [free_r[t].eq(free),
                             free_slot_r[t].eq(Cat(free_way, home[t], C(t, 1)))]
            goto("HOME_SLOT")

        # The hit's slot, from the registered hits (timing: decoded straight from way_hit, it
        # was the critical path).
        with state("HOME_SLOT"):
            found = list(found_r[0]) + list(found_r[1])
            hit_table = found_r[1].any()
            hit_way = lowest_index(found)[1][:way_bits]
            stash_index = lowest_index(list(in_stash_r))[1]
            m.d.sync += hit_slot_r.eq(Mux(in_table_r, g.slot(hit_table, home[hit_table], hit_way),
                                          g.stash_slot(0) + stash_index))
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
        # steps), the choice, the victim's key select and the push each take a cycle to keep
        # the path logic off the critical path.
        with state("MASK"):
            m.d.sync += same_bucket.eq(Cat(
                path_valid[j] & (path[j].table == cur.table) & (path[j].bucket == cur.bucket)
                for j in range(g.max_kicks)))
            goto("MASK_WAYS")

        with state("MASK_WAYS"):
            m.d.sync += on_path_r.eq(Cat(
                (same_bucket & Cat(path[j].way == w for j in range(g.max_kicks))).any()
                for w in range(ways)))
            goto("CHOOSE")

        # The first way not on the path, scanning from kicks: the first such way at or above
        # kicks, else the first one (two priority chains side by side, no rotate or add).
        from_kicks = Signal(ways)
        m.d.sync += from_kicks.eq(Cat(C(w, way_bits + 1) >= kicks for w in range(ways)))
        with state("CHOOSE"):
            candidate = [~on_path_r[w] for w in range(ways)]
            late, late_way = lowest_index([c & from_kicks[w] for w, c in enumerate(candidate)])
            avail, first_way = lowest_index(candidate)
            with m.If(path_valid[-1] | ~avail):
                goto("STASH")
            with m.Else():
                m.d.sync += cur.way.eq(Mux(late, late_way, first_way))
                goto("SELECT")

        # The victim's key select is loaded from the registered choice (timing: the priority
        # chains, then the select's decode and its state mux, were a critical path).
        with state("SELECT"):
            select_key(cur)
            goto("PUSH")

        with state("PUSH"):
            m.d.sync += [
                path[0].eq(cur),
                *(path[j].eq(path[j - 1]) for j in range(1, g.max_kicks)),
                path_valid.eq(Cat(C(1, 1), path_valid)),
                path_len.eq(path_len + 1),
                kicks.eq(kicks + 1),
                victim_key.eq(selected_key),
            ]
            goto("VICTIM_HASH")

        # Both of the victim's buckets are registered, then the other table's one is selected
        # (timing: the hash and the select took a cycle together).
        with state("VICTIM_HASH"):
            m.d.sync += [victim_home[t].eq(g.hash(t, victim_key)) for t in tables]
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
            free, free_way = lowest_index([~bucket[w].valid for w in range(ways)])
            # Only the state and the load depend on ``free`` (timing); target is unused
            # until set again if the walk goes on.
            m.d.sync += target.eq(Cat(free_way[:way_bits], cur.bucket, cur.table))
            read_next(path[0].bucket, when=free)
            with m.If(free):
                goto("MOVE_READ")
            with m.Else():
                goto("MASK")

        free, free_index = lowest_index([~stash_valid[i] for i in range(g.stash)])
        m.d.sync += [stash_free.eq(free), stash_free_index.eq(free_index),
                     stash_free_slot.eq(g.stash_slot(0) + free_index)]
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
                *(path[j].eq(path[j + 1]) for j in range(g.max_kicks - 1)),
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
