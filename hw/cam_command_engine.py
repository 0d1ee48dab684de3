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

Stages (``CAMCommandEngine.STAGES``), each a Component with its own one-hot states; a stage
hands a command on with a strobe that sets the next one's first state, so the engine runs
one command at a time through them:

- `CAMCommandFront`: accept, clear, home probe and decision (``EVAL_LATENCY`` = 9 cycles
  from the handshake to the decision); it answers CLEAR, DELETE and EXISTS itself.
- `CAMKickWalk`: the relocation path of an insert that found no free way at home, 13
  cycles per victim.
- `CAMMover`: the moves along the path (5 cycles each) and the write of the key (PLACE).
- `CAMStash`: the stash entries, their compare (2 cycles) and the stash insert (1 cycle).
- `CAMTableWriter`: the tables' write port (1 cycle) and the key select (1 cycle).

The engine merges the stages' read, write and select requests (each stage drives 0 outside
its states) and registers the response of the one that answers.
"""
import functools
import operator
from contextlib import contextmanager

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from hotline.contract.shapes import CAMOp, CAMStatus
from hotline.contract.streams import cam_cmd_layout

from .bram import BucketTable
from .cam_lookup_pipeline import CAMEngineSignature, CAMLookupPipeline
from .lib.onehot import binary_select, lowest_index, one_hot_select
from .lib.replica import replica

__all__ = ["CAMCommandEngine", "CAMCommandFront", "CAMKickWalk", "CAMMover", "CAMStash",
           "CAMTableWriter"]


def _any(values):
    """OR of ``values`` (requests of stages that drive 0 outside their own states)."""
    return functools.reduce(operator.or_, (Value.cast(v) for v in values))


def _read_layout(g):
    """A stage's read request: in a cycle with ``en`` the engine stages ``addr`` (a bucket per
    table) for the pipeline, which loads it the next cycle if ``load``."""
    return data.StructLayout({"en": 1, "load": 1, "addr": data.ArrayLayout(g.bucket_bits, 2)})


def _write_layout(g):
    """A stage's table write request: ways ``en`` of bucket ``addr``, per table."""
    return data.StructLayout({"addr": data.ArrayLayout(g.bucket_bits, 2),
                              "en": data.ArrayLayout(g.ways, 2)})


def _select_layout(g):
    """A stage's key select request: with ``load``, `CAMTableWriter.selected` is the key
    ``onehot`` names (`CAMTableWriter.onehot`) from the next cycle on."""
    return data.StructLayout({"load": 1, "onehot": 2 * g.ways + 1})


def _write_ports(g):
    """The tables' write ports (the engine's, from `CAMTableWriter`'s registers)."""
    return {"write_addr": Out(data.ArrayLayout(g.bucket_bits, 2)),
            "write_en": Out(data.ArrayLayout(g.ways, 2)), "write_data": Out(g.entry_layout)}


def _response_layout(g):
    """``resp``'s payload."""
    return data.StructLayout({"status": CAMStatus, "slot": g.slot_width,
                              "moves": bits_for(g.max_kicks)})


def _responder(g):
    """The members of a stage that answers commands: ``done`` (a response this cycle) and its
    ``resp`` (0 when not ``done``)."""
    return {"done": Out(1), "resp": Out(_response_layout(g))}


class _States:
    """A stage's states as one-hot flip-flops: every state test is a single flip-flop, so no
    state decoding sits in front of the read address, the clock enables or the handshakes.
    ``with states("X"):`` is X's logic; `goto` leaves it (for another stage: ``None``)."""

    def __init__(self, m, names, init=None):
        self.m, self.stack = m, []
        self.index = {name: i for i, name in enumerate(names)}
        self.bits = Signal(len(names), name="state",
                           init=0 if init is None else 1 << self.index[init])

    def __getitem__(self, name):
        return self.bits[self.index[name]]

    @contextmanager
    def __call__(self, name):
        with self.m.If(self[name]):
            self.stack.append(name)
            try:
                yield
            finally:
                self.stack.pop()

    def goto(self, name=None):
        here = self.stack[-1]
        if name != here:
            self.m.d.sync += self[here].eq(0)
            if name is not None:
                self.m.d.sync += self[name].eq(1)

    def enter(self, name, when):
        """Enter ``name`` after a cycle with ``when`` (another stage's handoff)."""
        with self.m.If(when):
            self.m.d.sync += self[name].eq(1)

    def settle(self, name, then, go=1, count=BucketTable.LATENCY):
        """States ``name0`` .. : X_READ loads the address staged a cycle ahead; the word is in
        bucket_data BucketTable.LATENCY cycles later. The last of ``count`` waits lasts until
        ``go``, and the word stays."""
        for i in range(count):
            with self(f"{name}{i}"):
                if i + 1 < count:
                    self.goto(f"{name}{i + 1}")
                else:
                    with self.m.If(go):
                        self.goto(then)

    def respond(self, stage, status, slot=0, moves=0, then=None):
        """``stage`` answers this cycle (its ``done`` and ``resp``) and leaves for ``then``."""
        self.m.d.comb += [stage.done.eq(1), stage.resp.status.eq(status),
                          stage.resp.slot.eq(slot), stage.resp.moves.eq(moves)]
        self.goto(then)


class CAMCommandFront(wiring.Component):
    """Command accept, table clear and home probe: the engine's first stage.

    After reset (no response) and on CLEAR, ``clear`` for ``buckets`` cycles, writing every
    way of buckets 0, 1, .. of both tables invalid (``write``); CLEAR then answers OK. Another
    command's home buckets are read (``read``, staged while ``idle``); its key goes down the
    pipeline (``match_key[0]``; ``way_hit`` is its match) and to the stash compare
    (``match_key[1]``, ``stash_match`` registers ``stash_hit``). ``EVAL_LATENCY`` cycles after
    the ``cmd`` handshake the front decides, in one cycle (``prepare``, with ``home`` and
    ``target``: the first free way of the home buckets): DELETE frees the entry (``write``
    or ``stash_remove``) and answers OK + slot, or NOT_FOUND; an INSERT of a present key
    answers EXISTS + slot; else ``place`` (a free way) or ``search`` (none) hands the insert
    on. ``resume``: a later stage answered.

    Latency: decision ``EVAL_LATENCY`` = 9 cycles after the handshake; CLEAR ``buckets``.
    Throughput: one command at a time. Backpressure: ``cmd.ready`` = ``idle`` and no
    response waiting (``resp_pending``)."""
    HOME_WAITS = BucketTable.LATENCY + CAMLookupPipeline.MATCH_LATENCY - 1
    EVAL_LATENCY = HOME_WAITS + 5  # handshake, HOME_READ, waits, MATCH, DECODE, SLOT -> EVAL

    def __init__(self, g):
        self.g = g
        super().__init__({
            "cmd": In(stream.Signature(cam_cmd_layout(g.key_width))),
            "resp_pending": In(1), "resume": In(1),
            "way_hit": In(data.ArrayLayout(g.ways, 2)),
            "bucket_data": In(data.ArrayLayout(g.bucket_layout, 2)),
            "stash_hit": In(g.stash),
            "idle": Out(1), "key": Out(g.key_width),
            "match_key": Out(data.ArrayLayout(g.key_width, 2)),
            "read": Out(_read_layout(g)), "write": Out(_write_layout(g)),
            "select": Out(_select_layout(g)),
            "clear": Out(1), "stash_match": Out(1), "stash_remove": Out(1),
            "prepare": Out(1), "home": Out(g.bucket_bits), "target": Out(g.place_layout),
            "place": Out(1), "search": Out(1),
            **_responder(g),
        })

    def elaborate(self, platform):
        m = Module()
        g, tables = self.g, (0, 1)
        st = _States(m, ["CLEAR", "IDLE", "HOME_READ",
                         *(f"HOME_WAIT{i}" for i in range(self.HOME_WAITS)),
                         "HOME_MATCH", "HOME_DECODE", "HOME_SLOT", "HOME_EVAL"], init="CLEAR")
        st.enter("IDLE", self.resume)
        m.d.comb += [self.idle.eq(st["IDLE"]), self.cmd.ready.eq(st["IDLE"] & ~self.resp_pending)]

        op = Signal(CAMOp)
        key = Signal(g.key_width, reset_less=True)
        # Copies of the command's key, one that goes down the lookup pipeline and one for the
        # stash compare (timing: ``key`` also drives the write data of every table block RAM,
        # which pulled it away from the compare logic).
        match_key = [replica(g.key_width, f"match_key{i}") for i in range(2)]
        m.d.comb += [self.key.eq(key), *(self.match_key[i].eq(match_key[i]) for i in range(2))]
        home = Array(Signal(g.bucket_bits, name=f"home{t}", reset_less=True) for t in tables)
        clear_count = Signal(g.bucket_bits)
        clear_cmd = Signal()

        with st("CLEAR"):
            m.d.comb += self.clear.eq(1)
            for t in tables:
                m.d.comb += [self.write.addr[t].eq(clear_count), self.write.en[t].eq(-1)]
            m.d.sync += clear_count.eq(clear_count + 1)
            with m.If(clear_count == g.buckets - 1):
                with m.If(clear_cmd):
                    st.respond(self, CAMStatus.OK, then="IDLE")
                with m.Else():
                    st.goto("IDLE")

        with st("IDLE"):
            # The home buckets, for HOME_READ (the load is harmless otherwise: while idle,
            # the lookup's hash wins, and CLEAR reads nothing).
            m.d.comb += [self.read.en.eq(1), self.read.load.eq(1),
                         *(self.read.addr[t].eq(g.hash(t, self.cmd.payload.key)) for t in tables)]
            with m.If(self.cmd.valid & self.cmd.ready):
                m.d.sync += [op.eq(self.cmd.payload.op), key.eq(self.cmd.payload.key),
                             *(k.eq(self.cmd.payload.key) for k in match_key)]
                m.d.sync += [home[t].eq(g.hash(t, self.cmd.payload.key)) for t in tables]
                with m.If(self.cmd.payload.op == CAMOp.CLEAR):
                    m.d.sync += [clear_count.eq(0), clear_cmd.eq(1)]
                    st.goto("CLEAR")
                with m.Else():
                    st.goto("HOME_READ")

        with st("HOME_READ"):
            st.goto("HOME_WAIT0")

        st.settle("HOME_WAIT", "HOME_MATCH", count=self.HOME_WAITS)

        # The key compares (the lookup pipeline's, into way_hit, and the stash's), then what
        # follows from them, get a cycle each (two for the hit's slot), so HOME_EVAL only
        # decides, from flip-flops.
        with st("HOME_MATCH"):
            m.d.comb += self.stash_match.eq(1)
            st.goto("HOME_DECODE")

        found_r, in_table_r, in_stash_any, hit_slot_r, free_r, free_slot_r = \
            self._decode(m, st, home)

        with st("HOME_EVAL"):
            in_stash = in_stash_any
            with m.If(op == CAMOp.DELETE):
                with m.If(in_table_r):
                    m.d.comb += [self.write.addr[t].eq(home[t]) for t in tables]
                    m.d.comb += [self.write.en[t].eq(found_r[t]) for t in tables]
                    st.respond(self, CAMStatus.OK, hit_slot_r, then="IDLE")
                with m.Elif(in_stash):
                    m.d.comb += self.stash_remove.eq(1)
                    st.respond(self, CAMStatus.OK, hit_slot_r, then="IDLE")
                with m.Else():
                    st.respond(self, CAMStatus.NOT_FOUND, then="IDLE")
            with m.Elif(in_table_r | in_stash):
                st.respond(self, CAMStatus.EXISTS, hit_slot_r, then="IDLE")
            with m.Else():
                m.d.comb += [self.place.eq(free_r[0] | free_r[1]),
                             self.search.eq(~(free_r[0] | free_r[1]))]
                st.goto()
            # Loaded by the later stages whatever the outcome: each is used only after the
            # state it suits (timing: the decision drives only the state and the response).
            m.d.comb += [self.prepare.eq(1), self.home.eq(home[0]),
                         self.target.eq(Mux(free_r[0], free_slot_r[0], free_slot_r[1])),
                         self.select.load.eq(1),
                         self.select.onehot.eq(CAMTableWriter.onehot(g))]  # for PLACE
        return m

    def _decode(self, m, st, home):
        """HOME_DECODE and HOME_SLOT: the home match, registered, and what follows from it
        (the hit's slot, the first free way of each home bucket)."""
        g, tables, ways = self.g, (0, 1), self.g.ways
        bucket_data, way_hit = self.bucket_data, self.way_hit
        found_r = [Signal(ways, name=f"found{t}") for t in tables]
        in_stash_any = Signal()
        in_table_r = Signal()
        hit_slot_r = Signal(g.slot_width, reset_less=True)  # of the key in table or stash
        free_r = [Signal(name=f"free{t}") for t in tables]
        free_slot_r = [Signal(g.place_layout, name=f"free_slot{t}", reset_less=True)
                       for t in tables]

        with st("HOME_DECODE"):
            m.d.sync += [found_r[t].eq(way_hit[t]) for t in tables]
            m.d.sync += [
                in_table_r.eq(Cat(way_hit[0], way_hit[1]).any()),
                in_stash_any.eq(self.stash_hit.any()),
            ]
            for t in tables:
                free, free_way = lowest_index([~bucket_data[t][w].valid for w in range(ways)])
                m.d.sync += [free_r[t].eq(free),
                             free_slot_r[t].eq(Cat(free_way, home[t], C(t, 1)))]
            st.goto("HOME_SLOT")

        # The hit's slot, from the registered hits (timing: decoded straight from way_hit, it
        # was the critical path).
        with st("HOME_SLOT"):
            found = list(found_r[0]) + list(found_r[1])
            hit_table = found_r[1].any()
            hit_way = lowest_index(found)[1][:g.way_bits]   # the way in its table
            stash_index = lowest_index(list(self.stash_hit))[1]
            m.d.sync += hit_slot_r.eq(Mux(in_table_r, g.slot(hit_table, home[hit_table], hit_way),
                                          g.stash_slot(0) + stash_index))
            st.goto("HOME_EVAL")
        return found_r, in_table_r, in_stash_any, hit_slot_r, free_r, free_slot_r


class CAMStash(wiring.Component):
    """The stash: ``stash`` flip-flop entries (``valid``, ``keys``), compared with the
    command's key and filled by an insert that found no relocation path.

    ``hit``: per entry, valid and equal to ``key``, registered in a cycle with ``match``; the
    compare is registered too (its key parts every cycle, then their AND), so ``key`` must be
    steady 2 cycles before ``match``. ``insert`` (an insert's last stage): the next cycle the
    stash answers (``done``) OK + the first free entry's slot and stores ``store_key`` there,
    or FULL when no entry is free. The first free entry follows ``valid`` a cycle late: the
    stash changes only in cycles that answer, many cycles before the next ``insert``.
    ``remove`` frees the ``hit`` entries, ``clear`` every entry (both the next cycle).

    Latency: ``hit`` 2 cycles after ``key``, the answer 1 after ``insert``. Throughput: one
    operation a cycle. Backpressure: none (the engine takes the answer in its cycle)."""

    def __init__(self, g):
        self.g = g
        super().__init__({
            "key": In(g.key_width), "store_key": In(g.key_width),
            "match": In(1), "remove": In(1), "clear": In(1), "insert": In(1),
            "hit": Out(g.stash),
            "valid": Out(g.stash), "keys": Out(data.ArrayLayout(g.key_width, g.stash)),
            **_responder(g),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.g
        stash_key = Array(Signal(g.key_width, name=f"stash_key{i}", reset_less=True)
                          for i in range(g.stash))
        stash_valid = Signal(g.stash)
        in_stash_r = Signal(g.stash)
        m.d.comb += [self.valid.eq(stash_valid), self.hit.eq(in_stash_r),
                     *(self.keys[i].eq(stash_key[i]) for i in range(g.stash))]

        # The compare in two steps: the equality of each key part, then their AND (timing:
        # in one cycle it was a late path).
        parts = CAMLookupPipeline.key_parts(g)
        stash_parts = Signal(g.stash * len(parts))
        m.d.sync += stash_parts.eq(Cat(stash_key[i][lo:hi] == self.key[lo:hi]
                                       for i in range(g.stash) for lo, hi in parts))
        with m.If(self.match):
            m.d.sync += in_stash_r.eq(Cat(
                stash_valid[i] & stash_parts.word_select(i, len(parts)).all()
                for i in range(g.stash)))

        stash_free = Signal()
        stash_free_index = Signal(range(g.stash), reset_less=True)
        stash_free_slot = Signal(g.slot_width, reset_less=True)
        free, free_index = lowest_index([~stash_valid[i] for i in range(g.stash)])
        m.d.sync += [stash_free.eq(free), stash_free_index.eq(free_index),
                     stash_free_slot.eq(g.stash_slot(0) + free_index)]

        with m.If(self.clear):
            m.d.sync += stash_valid.eq(0)
        with m.If(self.remove):
            m.d.sync += stash_valid.eq(stash_valid & ~in_stash_r)
        st = _States(m, ["STASH"])
        st.enter("STASH", self.insert)
        with st("STASH"):
            with m.If(stash_free):
                m.d.sync += [stash_key[stash_free_index].eq(self.store_key),
                             stash_valid.bit_select(stash_free_index, 1).eq(1)]
                st.respond(self, CAMStatus.OK, stash_free_slot)
            with m.Else():
                st.respond(self, CAMStatus.FULL)
        return m


class CAMKickWalk(wiring.Component):
    """The cuckoo relocation walk: searches a path of victims for an insert that found no free
    way at home, without touching the tables, and holds it for `CAMMover`.

    ``prepare`` starts at way 0 of ``home`` in table 0; ``start`` searches. Per victim, 13
    cycles: the ways of the bucket already on the path are masked (every key moves at most
    once; per group of 8 path entries, then across the groups), the victim is the first
    other way from ``kicks`` on, its key comes from the bucket's keys (held from
    ``bucket_data`` in the cycle before the push), it is pushed on the path and its
    bucket in the other table is read (``read``). A free way there ends
    the walk: ``found``, with ``target`` (loaded by the mover with ``target_load``, in every
    evaluation). A full path or a bucket with every way on it ends it with ``full`` (the
    stash's turn). The path is a stack, newest on ``head``: ``pop`` drops the head (the
    mover's; pops at least 2 cycles apart, the mover's are 5), ``restart`` empties it; ``length`` entries, ``more`` when more than one.
    ``kicks`` counts victims from reset or ``clear``.

    Latency after ``start``: ``found`` 13 x victims cycles, ``full`` 13 x victims + 4.
    Throughput: one search at a time. Backpressure: none."""

    def __init__(self, g):
        self.g = g
        super().__init__({
            "prepare": In(1), "home": In(g.bucket_bits), "start": In(1),
            "restart": In(1), "clear": In(1), "pop": In(1),
            "bucket_data": In(data.ArrayLayout(g.bucket_layout, 2)),
            "head": Out(g.place_layout), "next_bucket": Out(g.bucket_bits), "more": Out(1),
            "length": Out(range(g.max_kicks + 1)),
            "read": Out(_read_layout(g)),
            "target_load": Out(1), "target": Out(g.place_layout),
            "found": Out(1), "full": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        g, tables, ways, kmax = self.g, (0, 1), self.g.ways, self.g.max_kicks
        st = _States(m, ["MASK", "MASK_WAYS", "MASK_OR", "CHOOSE", "SELECT", "PUSH", "VICTIM_HASH",
                         "WALK_ADDR", "WALK_READ",
                         *(f"WALK_WAIT{i}" for i in range(BucketTable.LATENCY)), "WALK_EVAL"])
        st.enter("MASK", self.start)
        # from_kicks (below) follows kicks a cycle late: kicks changes in PUSH and on clear
        # only, several cycles before the next CHOOSE.
        kicks = Signal(ceil_log2(ways))
        path, path_valid, push = self._path(m)
        cur = Signal(g.place_layout, reset_less=True)
        victim_key = Signal(g.key_width, reset_less=True)
        same_bucket = Signal(kmax)
        on_path_r = Signal(ways)
        victim_home = [Signal(g.bucket_bits, name=f"victim_home{t}", reset_less=True)
                       for t in tables]
        with m.If(self.clear):
            m.d.sync += kicks.eq(0)
        with m.If(self.prepare):
            m.d.sync += [cur.table.eq(0), cur.bucket.eq(self.home)]

        # The mask (two steps), the choice, the victim's key select and the push each take a
        # cycle to keep the path logic off the critical path.
        with st("MASK"):
            m.d.sync += same_bucket.eq(Cat(
                path_valid[j] & (path[j].table == cur.table) & (path[j].bucket == cur.bucket)
                for j in range(kmax)))
            st.goto("MASK_WAYS")

        # The ways on the path in two steps: per group of 8 entries, then across the groups
        # (timing: one OR over all 64 entries per way was 4 LUT levels of spread routing).
        groups = [range(lo, min(lo + 8, kmax)) for lo in range(0, kmax, 8)]
        on_path_parts = Signal(len(groups) * ways)
        with st("MASK_WAYS"):
            m.d.sync += on_path_parts.eq(Cat(
                Cat(same_bucket[j] & (path[j].way == w) for j in group).any()
                for group in groups for w in range(ways)))
            st.goto("MASK_OR")

        with st("MASK_OR"):
            m.d.sync += on_path_r.eq(Cat(
                Cat(on_path_parts[k * ways + w] for k in range(len(groups))).any()
                for w in range(ways)))
            st.goto("CHOOSE")

        # The first way not on the path, scanning from kicks: the first such way at or above
        # kicks, else the first one (two priority chains side by side, no rotate or add).
        from_kicks = Signal(ways)
        m.d.sync += from_kicks.eq(Cat(C(w, g.way_bits + 1) >= kicks for w in range(ways)))
        with st("CHOOSE"):
            candidate = [~on_path_r[w] for w in range(ways)]
            late, late_way = lowest_index([c & from_kicks[w] for w, c in enumerate(candidate)])
            avail, first_way = lowest_index(candidate)
            with m.If(path_valid[-1] | ~avail):
                m.d.comb += self.full.eq(1)
                st.goto()
            with m.Else():
                m.d.sync += cur.way.eq(Mux(late, late_way, first_way))
                st.goto("SELECT")

        # The keys of the bucket evaluated are held, a table's ways through a 2:1 select,
        # and the victim's key is taken from them by the registered choice (timing: the
        # writer's one-of-9 key select from the block RAMs' far outputs, 11.98 ns at two lanes).
        way_keys = Signal(data.ArrayLayout(g.key_width, ways), reset_less=True)
        with st("SELECT"):
            m.d.sync += way_keys.eq(Mux(cur.table, Cat(w.key for w in self.bucket_data[1]),
                                        Cat(w.key for w in self.bucket_data[0])))
            st.goto("PUSH")

        with st("PUSH"):
            push(cur)
            m.d.sync += [kicks.eq(kicks + 1), victim_key.eq(way_keys[cur.way])]
            st.goto("VICTIM_HASH")

        # Both of the victim's buckets are registered, then the other table's one is selected
        # (timing: the hash and the select took a cycle together).
        with st("VICTIM_HASH"):
            m.d.sync += [victim_home[t].eq(g.hash(t, victim_key)) for t in tables]
            m.d.sync += cur.table.eq(~cur.table)
            st.goto("WALK_ADDR")

        with st("WALK_ADDR"):
            next_bucket = Mux(cur.table, victim_home[1], victim_home[0])
            m.d.sync += cur.bucket.eq(next_bucket)
            m.d.comb += [self.read.en.eq(1), self.read.load.eq(1),
                         *(self.read.addr[t].eq(next_bucket) for t in tables)]
            st.goto("WALK_READ")

        with st("WALK_READ"):
            st.goto("WALK_WAIT0")

        st.settle("WALK_WAIT", "WALK_EVAL")

        with st("WALK_EVAL"):
            bucket = Signal(g.bucket_layout)
            m.d.comb += bucket.eq(Mux(cur.table, self.bucket_data[1], self.bucket_data[0]))
            free, free_way = lowest_index([~bucket[w].valid for w in range(ways)])
            # Only the state and the load depend on ``free`` (timing); the target is unused
            # until set again if the walk goes on.
            m.d.comb += [self.target_load.eq(1),
                         self.target.eq(Cat(free_way, cur.bucket, cur.table)),
                         self.read.en.eq(1), self.read.load.eq(free),
                         *(self.read.addr[t].eq(self.head.bucket) for t in tables)]
            with m.If(free):
                m.d.comb += self.found.eq(1)
                st.goto()
            with m.Else():
                st.goto("MASK")
        return m

    def _path(self, m):
        """The path as a stack of victim slots: entry j holds the (j+1)-th victim pushed and
        keeps it until ``restart``; ``path_valid`` marks the entries still on the stack. The
        head and the entry below it are registers of their own, shifted on a pop, which reads
        the entry under them through a mux tree indexed by a register: ``pop`` enables about
        100 flip-flops, not every entry (timing: shifting the 64 entries, about 900
        flip-flops, was the 2-lane top's critical path). Returns (entries, path_valid, push), where
        ``push(place)`` adds the statements of a push (only entry ``depth`` is written)."""
        g, kmax = self.g, self.g.max_kicks
        path = [Signal(g.place_layout, name=f"path{j}", reset_less=True) for j in range(kmax)]
        path_valid = Signal(kmax)
        length = Signal(range(kmax + 1))     # the path found: the moves answered
        depth = Signal(range(kmax + 1))      # entries still on the stack
        # depth - 3 (mod a power of two), the entry under the two registers: kept beside
        # depth so that the pop's read is a mux tree behind a register, no subtraction; the
        # tree's output is registered too (``third``, a cycle behind third_at: pops come at
        # least 2 cycles apart; timing: the tree into ``below`` was the 1-lane top's
        # second-latest path at seed 1, 9.49 ns)
        third_at = Signal(max(1, ceil_log2(kmax)))
        third = Signal(g.place_layout, reset_less=True)
        head = Signal(g.place_layout, reset_less=True)
        below = Signal(g.place_layout, reset_less=True)
        m.d.comb += [self.head.eq(head), self.length.eq(length),
                     self.next_bucket.eq(below.bucket)]
        if kmax > 1:  # with one kick the path never holds a second entry
            m.d.comb += self.more.eq(path_valid[1])
        m.d.sync += third.eq(binary_select(path, third_at))
        with m.If(self.restart):
            m.d.sync += [length.eq(0), depth.eq(0), third_at.eq(-3), path_valid.eq(0)]
        with m.If(self.pop):
            m.d.sync += [head.eq(below), below.eq(third),
                         path_valid.eq(path_valid[1:]), depth.eq(depth - 1),
                         third_at.eq(third_at - 1)]

        def push(place):
            for j in range(kmax):
                with m.If(depth == j):
                    m.d.sync += path[j].eq(place)
            m.d.sync += [head.eq(place), below.eq(head),
                         path_valid.eq(Cat(C(1, 1), path_valid)),
                         length.eq(length + 1), depth.eq(depth + 1), third_at.eq(third_at + 1)]
        return path, path_valid, push

class CAMMover(wiring.Component):
    """Moves the keys along a found path and writes the command's key: an insert's last stage
    when it placed its key in the table.

    ``target`` is loaded in a cycle with ``load`` (from ``load_target``). ``start`` (a path
    was found): per move, 5 cycles: the head's key is selected (``select``) and its bucket,
    staged a cycle ahead (``read``), read, then, once ``moves`` is free, the key is written
    at ``target`` (``write``, ``writing``), (src = head, dst = target) goes out on
    ``moves``, ``target`` becomes the head and the path is popped (``pop``), from its end
    back to its head, so each copy goes to a slot already free. Then, or on ``place``
    (a free way at home), PLACE writes the command's key at ``target`` and answers OK +
    slot, ``length`` moves, once the last move is taken (the write repeats meanwhile).

    Latency: 5 cycles per move plus 1 for PLACE (more while ``moves`` is stalled).
    Throughput: one insert at a time. Backpressure: ``moves.ready`` holds the next move's
    write and the answer."""

    def __init__(self, g):
        self.g = g
        super().__init__({
            "start": In(1), "place": In(1),
            "load": In(1), "load_target": In(g.place_layout),
            "head": In(g.place_layout), "next_bucket": In(g.bucket_bits), "more": In(1),
            "length": In(range(g.max_kicks + 1)),
            "pop": Out(1),
            "moves": Out(stream.Signature(data.StructLayout(
                {"src": g.slot_width, "dst": g.slot_width}))),
            "read": Out(_read_layout(g)), "write": Out(_write_layout(g)), "writing": Out(1),
            "select": Out(_select_layout(g)),
            **_responder(g),
        })

    def elaborate(self, platform):
        m = Module()
        g, tables = self.g, (0, 1)
        st = _States(m, ["MOVE_READ", *(f"MOVE_WAIT{i}" for i in range(BucketTable.LATENCY)),
                         "MOVE_WRITE", "PLACE"])
        st.enter("MOVE_READ", self.start)
        st.enter("PLACE", self.place)
        target = Signal(g.place_layout, reset_less=True)
        with m.If(self.load):
            m.d.sync += target.eq(self.load_target)
        with m.If(self.moves.ready):
            m.d.sync += self.moves.valid.eq(0)
        moves_free = ~self.moves.valid | self.moves.ready
        m.d.comb += self.writing.eq(st["MOVE_WRITE"] | st["PLACE"])

        def write(where):
            # The entry written depends on the state only (`CAMTableWriter`): valid entries
            # are only written here, the key of an invalid entry is never looked at.
            for t in tables:
                with m.If(where.table == t):
                    m.d.comb += [self.write.addr[t].eq(where.bucket),
                                 self.write.en[t].eq(C(1, g.ways) << where.way)]

        with st("MOVE_READ"):
            m.d.comb += [self.select.load.eq(1),
                         self.select.onehot.eq(CAMTableWriter.onehot(g, self.head))]
            st.goto("MOVE_WAIT0")

        # Waiting for the moves register before MOVE_WRITE keeps moves.ready out of the
        # path shift and the read address logic (timing).
        st.settle("MOVE_WAIT", "MOVE_WRITE", go=moves_free)

        with st("MOVE_WRITE"):
            write(target)
            m.d.sync += [
                self.moves.valid.eq(1),
                self.moves.payload.src.eq(self.head.as_value()),  # laid out as a slot
                self.moves.payload.dst.eq(target.as_value()),
                target.eq(self.head),
            ]
            m.d.comb += [self.pop.eq(1),
                         self.read.en.eq(1), self.read.load.eq(self.more),
                         *(self.read.addr[t].eq(self.next_bucket) for t in tables),
                         # for PLACE (MOVE_READ selects the next move's key)
                         self.select.load.eq(1), self.select.onehot.eq(CAMTableWriter.onehot(g))]
            with m.If(self.more):
                st.goto("MOVE_READ")
            with m.Else():
                st.goto("PLACE")

        # The write repeats while the response waits for the last move to be taken, so
        # moves.ready stays out of the write port logic (timing).
        with st("PLACE"):
            write(target)
            with m.If(moves_free):
                st.respond(self, CAMStatus.OK, target.as_value(), self.length)
        return m


class CAMTableWriter(wiring.Component):
    """The tables' write port and the key select: the engine's last stage.

    ``write`` (addresses and way enables per table) and the entry (``valid``, ``selected``)
    reach ``write_addr`` / ``write_en`` / ``write_data`` through registers: a write reaches the
    block RAM one cycle after the cycle that asks for it. ``selected`` is the key that the
    last ``select`` with ``load`` named, from the cycle after it: one of the ``2 x ways`` keys
    of ``bucket_data`` or the command's ``key`` (`onehot`).

    Latency: 1 cycle (write port and select). Throughput: one write and one select a cycle.
    Backpressure: none."""
    # Copies of the select, each driving a slice of the key (see elaborate).
    KEY_SELECT_COPIES = 3

    @staticmethod
    def onehot(g, where=None):
        """The select of the key at place ``where`` (None: the command's key)."""
        width = 2 * g.ways + 1
        return (C(1 << 2 * g.ways, width) if where is None else
                C(1, width) << Cat(where.way, where.table))

    def __init__(self, g):
        self.g = g
        super().__init__({
            "bucket_data": In(data.ArrayLayout(g.bucket_layout, 2)), "key": In(g.key_width),
            "select": In(_select_layout(g)), "write": In(_write_layout(g)), "valid": In(1),
            "selected": Out(g.key_width),
            **_write_ports(g),
        })

    def elaborate(self, platform):
        m = Module()
        g, tables = self.g, (0, 1)
        # Writes reach the block RAM one cycle late through registers (timing): only the
        # engine writes, and it reads no written word before the write is done.
        wr_data = Signal(g.entry_layout, reset_less=True)
        m.d.sync += wr_data.eq(Cat(self.valid, self.selected))
        m.d.comb += self.write_data.eq(wr_data)
        for t in tables:
            wr_addr = Signal(g.bucket_bits, name=f"wr_addr{t}", reset_less=True)
            wr_en = Signal(g.ways, name=f"wr_en{t}")
            m.d.sync += [wr_addr.eq(self.write.addr[t]), wr_en.eq(self.write.en[t])]
            m.d.comb += [self.write_addr[t].eq(wr_addr), self.write_en[t].eq(wr_en)]

        # One key select serves every key written and the victim's. It is one-hot over the
        # 2 x ways keys of the bucket words and the command's key, loaded a cycle ahead, and
        # kept in a copy per slice of the key (timing: a binary select, then its decode fanned
        # out to every key bit, were the longest paths).
        sources = [self.bucket_data[t][w].key for t in tables for w in range(g.ways)] + [self.key]
        cut = [g.key_width * i // self.KEY_SELECT_COPIES
               for i in range(self.KEY_SELECT_COPIES + 1)]
        select = [replica(len(sources), f"key_select{i}") for i in range(self.KEY_SELECT_COPIES)]
        with m.If(self.select.load):
            m.d.sync += [s.eq(self.select.onehot) for s in select]
        m.d.comb += self.selected.eq(Cat(
            one_hot_select(select[i], [source[lo:hi] for source in sources])
            for i, (lo, hi) in enumerate(zip(cut, cut[1:]))))
        return m


class CAMCommandEngine(wiring.Component):
    """Insert (cuckoo relocation, stash), delete and clear of a PopularityCAM's tables (see
    the module docstring); ``g`` a `CAMGeometry`. Its stages (``STAGES``): `CAMCommandFront`
    (accept, clear, home probe, decision), `CAMKickWalk` (relocation path), `CAMMover`
    (moves and the key's write), `CAMStash`, `CAMTableWriter` (write port, key select)."""
    STAGES = (CAMCommandFront, CAMStash, CAMKickWalk, CAMMover, CAMTableWriter)

    @staticmethod
    def ports(g):
        """The command stream ports (PopularityCAM has the same)."""
        return {
            "cmd": In(stream.Signature(cam_cmd_layout(g.key_width))),
            "resp": Out(stream.Signature(_response_layout(g))),
            "moves": Out(stream.Signature(data.StructLayout(
                {"src": g.slot_width, "dst": g.slot_width}))),
        }

    def __init__(self, g):
        self.g = g
        super().__init__({
            **self.ports(g),
            "pipe": Out(CAMEngineSignature(g)),
            "bucket_data": In(data.ArrayLayout(g.bucket_layout, 2)),
            **_write_ports(g),
        })

    def elaborate(self, platform):
        m = Module()
        g, tables = self.g, (0, 1)
        m.submodules.front = front = CAMCommandFront(g)
        m.submodules.stash = stash = CAMStash(g)
        m.submodules.walk = walk = CAMKickWalk(g)
        m.submodules.mover = mover = CAMMover(g)
        m.submodules.writer = writer = CAMTableWriter(g)
        wiring.connect(m, wiring.flipped(self.cmd), front.cmd)
        wiring.connect(m, mover.moves, wiring.flipped(self.moves))

        responders = (front, stash, mover)
        with m.If(self.resp.ready):
            m.d.sync += self.resp.valid.eq(0)
        with m.If(Cat(s.done for s in responders).any()):
            m.d.sync += [self.resp.valid.eq(1),
                         self.resp.payload.eq(_any(s.resp for s in responders))]

        # The buckets the engine reads, staged a cycle ahead, so only flip-flops select the
        # pipeline's read address.
        read = Signal(_read_layout(g))
        eng_addr = [Signal(g.bucket_bits, name=f"eng_addr{t}", reset_less=True) for t in tables]
        eng_load = Signal()
        m.d.comb += read.eq(_any(s.read for s in (front, walk, mover)))
        m.d.sync += eng_load.eq(read.load)
        with m.If(read.en):
            m.d.sync += [eng_addr[t].eq(read.addr[t]) for t in tables]

        m.d.comb += [
            front.resp_pending.eq(self.resp.valid), front.resume.eq(stash.done | mover.done),
            front.way_hit.eq(self.pipe.way_hit), front.bucket_data.eq(self.bucket_data),
            front.stash_hit.eq(stash.hit),
            stash.key.eq(front.match_key[1]), stash.store_key.eq(front.key),
            stash.match.eq(front.stash_match), stash.remove.eq(front.stash_remove),
            stash.clear.eq(front.clear), stash.insert.eq(walk.full),
            walk.prepare.eq(front.prepare), walk.home.eq(front.home), walk.start.eq(front.search),
            walk.restart.eq(front.idle), walk.clear.eq(front.clear), walk.pop.eq(mover.pop),
            walk.bucket_data.eq(self.bucket_data),
            mover.start.eq(walk.found), mover.place.eq(front.place),
            mover.load.eq(front.prepare | walk.target_load),
            mover.load_target.eq(Mux(walk.target_load, walk.target, front.target)),
            mover.head.eq(walk.head), mover.next_bucket.eq(walk.next_bucket),
            mover.more.eq(walk.more), mover.length.eq(walk.length),
            writer.bucket_data.eq(self.bucket_data), writer.key.eq(front.key),
            writer.select.eq(_any(s.select for s in (front, mover))),
            writer.write.eq(_any(s.write for s in (front, mover))),
            writer.valid.eq(mover.writing),
            self.write_addr.eq(writer.write_addr), self.write_en.eq(writer.write_en),
            self.write_data.eq(writer.write_data),
            self.pipe.idle.eq(front.idle), self.pipe.cmd_pending.eq(self.cmd.valid),
            self.pipe.key.eq(front.match_key[0]), self.pipe.load.eq(eng_load),
            *(self.pipe.addr[t].eq(eng_addr[t]) for t in tables),
            self.pipe.stash_valid.eq(stash.valid), self.pipe.stash_key.eq(stash.keys),
        ]
        return m
