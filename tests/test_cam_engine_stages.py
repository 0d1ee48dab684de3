"""The CAMCommandEngine's stages alone (hw/cam_command_engine.py), in the Amaranth simulator,
each against its slice of the model (`PopularityCAMModel`) or a Python reference of its
contract: `CAMStash`, `CAMTableWriter`, `CAMCommandFront`, `CAMKickWalk`, `CAMMover`.

The neighbours of a stage are played by the testbench: the lookup pipeline and the tables
(`PipeModel`, behind the engine's read stager: `Reads`), the key select (`Select`), the
path stack (for the mover), the stash's hits (for the front).
"""
import numpy as np
import pytest
from amaranth.hdl import C
from amaranth.lib import data
from helpers import simulate
from test_cam_stages import (PipeModel, Tables, check_engine, geometry, model_of, script,
                             unpack)

from hotline.contract.cam import CAMOp, CAMStatus
from hotline.hw.cam_command_engine import (CAMCommandFront, CAMKickWalk, CAMMover, CAMStash,
                                           CAMTableWriter)

SMALL = dict(entries=64, ways=4, stash=2, max_kicks=8)


def place_of(g, slot):
    """(table, bucket, way) of a table slot."""
    return slot // (g.entries // 2), slot // g.ways % g.buckets, slot % g.ways


class Reads:
    """The engine's read stager (a bucket per table staged on ``read.en``, loaded the next
    cycle if ``read.load``) in front of a `PipeModel` over ``tables``."""

    def __init__(self, g, tables):
        self.g, self.pipe = g, PipeModel(g, tables)
        self.addr, self.load = (0, 0), 0

    def drive(self, ctx, dut):
        ctx.set(dut.bucket_data.as_value(), self.pipe.word())

    def clock(self, ctx, read, idle=0, key=0):
        req = ctx.get(read)
        self.pipe.clock(idle, self.load, self.addr, key)
        if req.en:
            self.addr = (int(req.addr[0]), int(req.addr[1]))
        self.load = int(req.load)

    def stage(self, buckets):
        """Stage ``buckets`` with a load (what the stage before the one tested asked for)."""
        self.addr, self.load = tuple(buckets), 1


class Select:
    """`CAMTableWriter`'s key select: the key that the last ``select`` named, read from
    this cycle's ``bucket_data`` (packed, as `PipeModel.word`) or the command's ``key``."""

    def __init__(self, g):
        self.g, self.source = g, None

    def key(self, word, key):
        g, width = self.g, self.g.entry_layout.size
        if self.source is None:
            return 0
        if self.source == 2 * g.ways:
            return key
        return word >> self.source * width + 1 & ((1 << g.key_width) - 1)

    def clock(self, ctx, select):
        req = ctx.get(select)
        if req.load:
            self.source = int(req.onehot).bit_length() - 1


def onehot_of(ctx, g, where):
    """`CAMTableWriter.onehot`'s value for (table, bucket, way) ``where`` (None: the key)."""
    if where is None:
        return ctx.get(CAMTableWriter.onehot(g))
    t, b, w = where
    return ctx.get(CAMTableWriter.onehot(g, data.View(g.place_layout, C(
        (t * g.buckets + b) * g.ways + w, g.place_layout.size))))


# ---- the stash ------------------------------------------------------------------------------

def test_stash_against_reference():
    """Compares (key 2 cycles before ``match``, ``hit`` the cycle after), inserts (answered a
    cycle after ``insert``: OK + the first free entry's slot, or FULL), removes of the hits and
    clears, against a list of entries; keys from a small pool so that they hit."""
    g = geometry(entries=16, ways=2, stash=3, max_kicks=2)
    dut = CAMStash(g)
    rng = np.random.default_rng(1)
    seen = set()

    async def bench(ctx):
        ref = [None] * g.stash

        async def step(**inputs):
            for name in ("match", "remove", "clear", "insert"):
                ctx.set(getattr(dut, name), inputs.get(name, 0))
            await ctx.delay(1e-9)
            done = ctx.get(dut.done), ctx.get(dut.resp.status), ctx.get(dut.resp.slot)
            await ctx.tick()
            return done

        for _ in range(400):
            op = rng.choice(["match", "insert", "clear"], p=[0.55, 0.4, 0.05])
            key = int(rng.integers(0, 6))
            ctx.set(dut.key, key)
            ctx.set(dut.store_key, key)
            if op == "match":
                await step()
                assert (await step(match=1))[0] == 0
                hit = [e == key for e in ref]
                assert ctx.get(dut.hit) == sum(h << i for i, h in enumerate(hit))
                if any(hit) and rng.random() < 0.6:
                    await step(remove=1)
                    ref = [None if h else e for h, e in zip(hit, ref)]
                    seen.add("remove")
            elif op == "insert":
                assert (await step(insert=1))[0] == 0
                done, status, slot = await step()
                free = [i for i, e in enumerate(ref) if e is None]
                assert done
                if free:
                    assert (status, slot) == (CAMStatus.OK, g.entries + free[0])
                    ref[free[0]] = key
                else:
                    assert status == CAMStatus.FULL
                seen.add(CAMStatus(status))
            else:
                await step(clear=1)
                ref = [None] * g.stash
            assert (await step())[0] == 0
            assert ctx.get(dut.valid) == sum((e is not None) << i for i, e in enumerate(ref))
            keys = unpack(ctx.get(dut.keys.as_value()), g.key_width, g.stash)
            assert all(e is None or k == e for k, e in zip(keys, ref))

    simulate(dut, bench)
    assert seen == {CAMStatus.OK, CAMStatus.FULL, "remove"}


# ---- the write port and the key select --------------------------------------------------------

def test_table_writer_against_reference():
    """Random writes, entry valid bits, selects (of every way of both words and of the
    command's key) and bucket words: ``write_*`` are the request of the cycle before with the
    key selected then; ``selected`` is the key at the place the last select named."""
    g = geometry(**SMALL)
    dut = CAMTableWriter(g)
    rng = np.random.default_rng(2)
    word_bits = 2 * g.ways * g.entry_layout.size

    async def bench(ctx):
        source, last = None, None    # the key select's: (table, way), "key" or None (reset)
        for _ in range(600):
            word = int.from_bytes(rng.bytes(word_bits // 8 + 1), "little") & ((1 << word_bits) - 1)
            key = int(rng.integers(0, 1 << g.key_width))
            addr = [int(a) for a in rng.integers(0, g.buckets, 2)]
            en = [int(e) for e in rng.integers(0, 1 << g.ways, 2)]
            valid, load = int(rng.random() < 0.5), int(rng.random() < 0.3)
            where = None if rng.random() < 0.25 else (int(rng.integers(0, 2)),
                                                       int(rng.integers(0, g.buckets)),
                                                       int(rng.integers(0, g.ways)))
            ctx.set(dut.bucket_data.as_value(), word)
            ctx.set(dut.key, key)
            ctx.set(dut.write, {"addr": addr, "en": en})
            ctx.set(dut.valid, valid)
            ctx.set(dut.select, {"load": load, "onehot": onehot_of(ctx, g, where)})
            await ctx.delay(1e-9)
            entries = unpack(word, g.entry_layout.size, 2 * g.ways)
            selected = (0 if source is None else key if source == "key" else
                        entries[source[0] * g.ways + source[1]] >> 1)
            assert ctx.get(dut.selected) == selected
            if last is not None:
                assert [ctx.get(dut.write_addr[t]) for t in (0, 1)] == last[0]
                assert [ctx.get(dut.write_en[t]) for t in (0, 1)] == last[1]
                assert ctx.get(dut.write_data.as_value()) == last[2]
            last = addr, en, valid | selected << 1
            if load:
                source = "key" if where is None else (where[0], where[2])
            await ctx.tick()

    simulate(dut, bench)


# ---- the front: accept, clear, home probe, decision ----------------------------------------

def front_commands(rng, n):
    """Random INSERTs (present and absent keys) and DELETEs (present and absent), a CLEAR."""
    pool = np.arange(90, dtype=np.uint64) * 7
    out = [(CAMOp.INSERT if rng.random() < 0.6 else CAMOp.DELETE, int(rng.choice(pool)))
           for _ in range(n)]
    out.insert(n // 2, (CAMOp.CLEAR, 0))
    return out


def front_reference(model, op, key):
    """The front's outcome for a command, from the model (which it updates): ("done",
    status, slot), ("place", slot) or ("search",)."""
    if op == CAMOp.CLEAR:
        model.clear()
        return "done", CAMStatus.OK, 0
    if op == CAMOp.DELETE:
        return ("done", *model.delete(key))
    hit, slot = model.lookup([key])
    if hit[0]:
        return "done", CAMStatus.EXISTS, int(slot[0])
    if any(not model.valid[t, model._bucket(t, key)].all() for t in (0, 1)):
        status, slot, moves = model.insert(key)   # the first free way of h0, then of h1
        assert status == CAMStatus.OK and not moves
        return "place", slot
    return ("search",)


def test_front_against_model():
    """Each command's outcome at its cycle (``EVAL_LATENCY`` after the handshake), as
    `front_reference`: DELETE, EXISTS and NOT_FOUND answered, the entry freed (table write or
    ``stash_remove``); an absent key handed to ``place`` at the model's slot (the testbench
    writes it, as the mover would) or to ``search``; CLEAR sweeps every bucket invalid with
    ``clear`` (the stash's) and answers OK. The stash's hits are the model's."""
    g = geometry(**SMALL)
    model = model_of(g)
    for k in np.arange(70, dtype=np.uint64) * 7:
        model.insert(k)
    assert model.stash_valid.any()
    tables = Tables(g)
    dut = CAMCommandFront(g)
    rng = np.random.default_rng(3)
    commands = front_commands(rng, 160)
    kinds = set()

    async def bench(ctx):
        reads, sent, taken_at, cycle, resume, clear_cycles = Reads(g, tables), 0, None, 0, 0, 0
        stash_hit, answered = 0, 0
        while not ctx.get(dut.idle):        # the reset's clear, then the model's tables
            clear_cycles += ctx.get(dut.clear)
            await ctx.tick()
        tables.valid[:], tables.keys[:] = model.valid, model.keys
        while answered < len(commands) and cycle < 20_000:
            reads.drive(ctx, dut)
            ctx.set(dut.way_hit.as_value(), reads.pipe.way_hit())
            ctx.set(dut.stash_hit, stash_hit)
            ctx.set(dut.resume, resume)
            ctx.set(dut.cmd.valid, sent < len(commands) and rng.random() < 0.7)
            if sent < len(commands):
                ctx.set(dut.cmd.payload, {"op": commands[sent][0], "key": commands[sent][1]})
            await ctx.delay(1e-9)
            resume = 0
            if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready):
                op, key = commands[sent]
                sent, taken_at = sent + 1, cycle
            if ctx.get(dut.stash_match):
                stash_hit = sum(int(v and k == key) << i for i, (v, k)
                                in enumerate(zip(model.stash_valid, model.stash_keys)))
            clear_cycles += ctx.get(dut.clear)
            for t in (0, 1):
                tables.write(t, ctx.get(dut.write.addr[t]), ctx.get(dut.write.en[t]), 0)
            done, place, search = ctx.get(dut.done), ctx.get(dut.place), ctx.get(dut.search)
            if done or place or search:
                assert op == CAMOp.CLEAR or cycle - taken_at == CAMCommandFront.EVAL_LATENCY
                in_stash = op == CAMOp.DELETE and model.lookup([key])[1][0] >= g.entries
                want = front_reference(model, op, key)
                resp = ctx.get(dut.resp)
                if done:
                    assert (CAMStatus(resp.status), int(resp.slot)) == want[1:]
                    assert ctx.get(dut.stash_remove) == (in_stash and want[1] == CAMStatus.OK)
                elif place:
                    assert want == ("place", ctx.get(dut.target.as_value()))
                    t, b, w = place_of(g, want[1])
                    tables.write(t, b, 1 << w, 1 | key << 1)   # the mover's write
                else:
                    assert want == ("search",)
                assert (tables.valid == model.valid).all()
                kinds.add((op, want[0], want[1] if done else None))
                resume = place or search    # the later stages answer
                answered += 1
            reads.clock(ctx, dut.read, ctx.get(dut.idle), ctx.get(dut.match_key[0]))
            await ctx.tick()
            cycle += 1
        assert sent == len(commands) and clear_cycles == 2 * g.buckets  # reset and CLEAR

    simulate(dut, bench)
    assert len(kinds) >= 6, kinds    # CLEAR, delete OK / NOT_FOUND, EXISTS, place, search


# ---- the relocation walk --------------------------------------------------------------------

def reference_walk(model, key, kicks):
    """The spec's path search: (path [(table, bucket, way)] oldest first, the free place that
    ends it or None, kicks after)."""
    g_ways, path, t, b = model.ways, [], 0, model._bucket(0, key)
    while len(path) < model.max_kicks:
        taken = {w for pt, pb, w in path if (pt, pb) == (t, b)}
        order = [(kicks + r) % g_ways for r in range(g_ways)]
        ways = [w for w in order if w not in taken]
        if not ways:
            break
        path.append((t, b, ways[0]))
        kicks += 1
        t, b = 1 - t, model._bucket(1 - t, model.keys[t, b, ways[0]])
        free = np.flatnonzero(~model.valid[t, b])
        if free.size:
            return path, (t, b, int(free[0])), kicks
    return path, None, kicks


@pytest.mark.parametrize("params", [dict(entries=64, ways=4, stash=2, max_kicks=8),
                                    dict(entries=64, ways=4, stash=2, max_kicks=3),
                                    dict(entries=32, ways=2, stash=1, max_kicks=1)],
                         ids=["k8", "k3", "k1"])
def test_walk_against_model(params):
    """Absent keys with both home buckets full, over a nearly full table: the path (popped
    newest first, a pop every other cycle), the free place that ends it, or ``full``, at 13
    cycles per victim, and the running kick count, as `reference_walk` finds them."""
    g = geometry(**params)
    model = model_of(g)
    rng = np.random.default_rng(4)
    # 95% full: some walks end full, some find a place 3 to 7 moves away
    model.place(rng.choice(1 << 20, g.entries * 19 // 20, replace=False).astype(np.uint64))
    keys = [int(k) for k in rng.choice(1 << 20, 3000).astype(np.uint64)
            if not model.lookup([k])[0][0]
            and all(model.valid[t, model._bucket(t, k)].all() for t in (0, 1))][:40]
    tables = Tables(g)
    tables.valid[:], tables.keys[:] = model.valid, model.keys
    dut = CAMKickWalk(g)
    found = []

    async def bench(ctx):
        reads, kicks = Reads(g, tables), 0

        async def cycle(**inputs):
            for name in ("prepare", "start", "restart", "pop"):
                ctx.set(getattr(dut, name), inputs.get(name, 0))
            reads.drive(ctx, dut)
            await ctx.delay(1e-9)
            out = {name: ctx.get(getattr(dut, name)) for name in ("found", "full", "target_load")}
            out["target"] = ctx.get(dut.target.as_value())
            reads.clock(ctx, dut.read)
            await ctx.tick()
            return out

        for key in keys:
            path, end, kicks = reference_walk(model, key, kicks)
            reads.stage([model._bucket(t, key) for t in (0, 1)])   # the front's home read
            for _ in range(5):
                await cycle(restart=1)
            ctx.set(dut.home, model._bucket(0, key))
            await cycle(prepare=1, start=1)
            for n in range(1, 13 * g.max_kicks + 5):
                out = await cycle()
                if out["found"] or out["full"]:
                    break
            if end is None:
                assert out["full"] and n == 4 + 13 * len(path)
            else:
                assert out["found"] and out["target_load"] and n == 13 * len(path)
                assert place_of(g, out["target"]) == end
                got = []
                for _ in path:
                    got.append(place_of(g, ctx.get(dut.head.as_value())))
                    assert ctx.get(dut.length) == len(path)
                    assert ctx.get(dut.more) == (len(path) - len(got) > 0)
                    await cycle(pop=1)
                    await cycle()          # pops come at least 2 cycles apart
                assert got == path[::-1]
            found.append(0 if end is None else len(path))

    simulate(dut, bench)
    # some walks fail, and some found paths are deep enough to pop from below the registers
    assert 0 in found and max(found) >= min(3, g.max_kicks)


# ---- the mover ------------------------------------------------------------------------------

def test_mover_against_model():
    """Inserts that relocate (the path and free place from the model's moves) and that place
    at home: the moves (under a stalled ``moves`` stream), the tables written, and the
    response (OK + the model's slot, the number of moves), as `PopularityCAMModel.insert`."""
    g = geometry(**SMALL)
    model = model_of(g)
    rng = np.random.default_rng(5)
    tables = Tables(g)
    dut = CAMMover(g)
    relocated = []

    async def bench(ctx):
        reads, sel = Reads(g, tables), Select(g)
        written = None       # the write request of the cycle before (the writer's register)
        for key in rng.choice(1 << 20, 120, replace=False):
            key = int(key)
            tables.valid[:], tables.keys[:] = model.valid, model.keys
            status, slot, moves = model.insert(key)
            if status != CAMStatus.OK or slot >= g.entries:
                continue
            path = [place_of(g, src) for src, _ in moves]
            target = moves[0][1] if moves else slot
            ctx.set(dut.load_target.as_value(), target)
            ctx.set(dut.load, 1)
            ctx.set(dut.start if moves else dut.place, 1)
            if moves:
                reads.stage([path[0][1]] * 2)     # the walk's read of the head's bucket
            got, resp = [], None
            for _ in range(400):
                head = path[0] if path else (0, 0, 0)
                ctx.set(dut.head.as_value(), (head[0] * g.buckets + head[1]) * g.ways + head[2])
                ctx.set(dut.next_bucket, path[1][1] if len(path) > 1 else 0)
                ctx.set(dut.more, len(path) > 1)
                ctx.set(dut.length, len(moves))
                ctx.set(dut.moves.ready, rng.random() < 0.6)
                await ctx.delay(1e-9)
                if ctx.get(dut.moves.valid) and ctx.get(dut.moves.ready):
                    p = ctx.get(dut.moves.payload)
                    got.append((int(p.src), int(p.dst)))
                if ctx.get(dut.done):
                    r = ctx.get(dut.resp)
                    resp = CAMStatus(r.status), int(r.slot), int(r.moves)
                if written:
                    for t in (0, 1):
                        tables.write(t, *written[t], written[2])
                written = [(ctx.get(dut.write.addr[t]), ctx.get(dut.write.en[t])) for t in (0, 1)]
                written.append(ctx.get(dut.writing) | sel.key(reads.pipe.word(), key) << 1)
                if ctx.get(dut.pop):
                    path = path[1:]
                sel.clock(ctx, dut.select)
                reads.clock(ctx, dut.read)
                await ctx.tick()
                for name in ("load", "start", "place"):
                    ctx.set(getattr(dut, name), 0)
                if resp and not ctx.get(dut.moves.valid):
                    break
            assert resp == (CAMStatus.OK, slot, len(moves)) and got == moves
            relocated.append(len(moves))
        for t in (0, 1):
            tables.write(t, *written[t], written[2])

    simulate(dut, bench)
    assert (tables.valid == model.valid).all()
    assert (np.where(tables.valid, tables.keys, 0) == np.where(model.valid, model.keys, 0)).all()
    assert 0 in relocated and max(relocated) >= 2


# ---- one kick --------------------------------------------------------------------------------

def test_engine_with_one_kick():
    """``max_kicks`` = 1 builds (it indexed the path's second entry) and relocates as the
    model does: a victim moves to its other bucket when that has a free way."""
    g = geometry(entries=32, ways=2, stash=2, max_kicks=1)
    got = check_engine(g, script(np.arange(40, dtype=np.uint64) * 5, np.random.default_rng(6)),
                       0.2)
    assert any(n == 1 for _, _, n, _ in got)
