"""The PopularityCAM's stages alone, in the Amaranth simulator, against the model.

- `CAMLookupPipeline` with its tables and the engine's side played by the testbench: lookups
  answered as `PopularityCAMModel.lookup` answers them, in order, at ``LATENCY`` when not
  stalled, under backpressure; the engine's reads come back as ``way_hit``.
- `CAMCommandEngine` with the pipeline and both tables played by the testbench (a cycle-level
  Python copy of the pipeline's contract: ``s1`` loads ``pipe.addr`` on ``pipe.load``, block
  RAM words ``BucketTable.LATENCY`` cycles later, ``way_hit`` ``MATCH_LATENCY`` after that): every
  response and relocation as the model's, and the tables it leaves equal to the model's.
"""
from collections import deque

import numpy as np
import pytest
from helpers import real_file, simulate

from hotline.contract.cam import CAMOp, CAMStatus
from hotline.contract.keys import make_keys
from hotline.data import load_dataset
from hotline.hw.bram import BucketTable
from hotline.hw.cam_command_engine import CAMCommandEngine
from hotline.hw.cam_geometry import CAMGeometry
from hotline.hw.cam_lookup_pipeline import CAMLookupPipeline
from hotline.model.popularity_cam import PopularityCAMModel

SMALL = dict(entries=64, ways=4, stash=2, max_kicks=8)


def geometry(entries, ways, stash, max_kicks, key_width=32):
    return CAMGeometry(entries, ways, key_width, stash, max_kicks, (1, 2), "tabulation")


def model_of(g):
    return PopularityCAMModel(g.entries, ways=g.ways, key_width=g.key_width, stash=g.stash,
                              max_kicks=g.max_kicks, seeds=g.seeds, hash_family=g.hash_family)


class Tables:
    """Both tables as Python lists of (valid, key) per way, packed as the ports carry them."""

    def __init__(self, g, rng=None):
        self.g = g
        self.valid = np.zeros((2, g.buckets, g.ways), bool)
        self.keys = np.zeros((2, g.buckets, g.ways), np.uint64)
        if rng is not None:  # garbage, as block RAM holds before the reset clear
            self.valid[:] = rng.random(self.valid.shape) < 0.5
            self.keys[:] = rng.integers(0, 1 << g.key_width, self.keys.shape, dtype=np.uint64)

    def word(self, t, bucket):
        size, out = self.g.entry_layout.size, 0
        for w in range(self.g.ways):
            out |= (int(self.valid[t, bucket, w]) | int(self.keys[t, bucket, w]) << 1) << w * size
        return out

    def pair(self, buckets):
        return self.word(0, buckets[0]) | self.word(1, buckets[1]) << self.g.ways * self.g.entry_layout.size

    def write(self, t, bucket, en, entry):
        for w in range(self.g.ways):
            if en >> w & 1:
                self.valid[t, bucket, w], self.keys[t, bucket, w] = entry & 1, entry >> 1


def unpack(value, width, n):
    return [value >> i * width & ((1 << width) - 1) for i in range(n)]


# ---- lookup pipeline ---------------------------------------------------------------------

def filled_model(g, keys):
    model = model_of(g)
    for k in keys:
        model.insert(k)
    return model


def tables_of(model, g):
    tables = Tables(g)
    tables.valid[:], tables.keys[:] = model.valid, model.keys
    return tables


def run_pipeline(g, model, lookups, *, stall, seed, engine_reads=(), lanes=1):
    """Lookups (keys) through a CAMLookupPipeline over ``model``'s tables, in beats of
    ``lanes`` (user: the beat's number); returns the results [(hit, slot, user)] per lookup,
    the cycles from each accepted beat to its result, and the ``way_hit`` seen for each engine
    read (key, (bucket0, bucket1))."""
    dut = CAMLookupPipeline(g, user_width=8, queue_depth=8, lanes=lanes)
    tables = tables_of(model, g)
    rng = np.random.default_rng(seed)
    results, latency, hits = [], [], []
    beats = np.asarray(lookups).reshape(-1, lanes)
    pair_bits = 2 * g.ways * g.entry_layout.size

    def read(ctx, addrs):
        """Block RAM: this cycle's words are those addressed LATENCY cycles ago; the address
        of each lane read this cycle goes in ``addrs``."""
        ctx.set(dut.bucket_data.as_value(),
                sum(tables.pair(a) << lane * pair_bits for lane, a in enumerate(addrs[0])))

    def address(ctx, addrs):
        flat = unpack(ctx.get(dut.read_addr.as_value()), g.bucket_bits, 2 * lanes)
        addrs.append([flat[2 * lane:2 * lane + 2] for lane in range(lanes)])

    async def bench(ctx):
        ctx.set(dut.engine.idle, 1)
        ctx.set(dut.engine.stash_valid, int(sum(int(v) << i for i, v in enumerate(model.stash_valid))))
        ctx.set(dut.engine.stash_key.as_value(),
                sum(int(k) << i * g.key_width for i, k in enumerate(model.stash_keys)))
        addrs = deque([[(0, 0)] * lanes] * BucketTable.LATENCY, maxlen=BucketTable.LATENCY)
        sent, taken_at, cycle = 0, deque(), 0
        while len(results) < len(lookups):
            read(ctx, addrs)
            ctx.set(dut.lookup.valid, sent < len(beats) and rng.random() >= stall)
            if sent < len(beats):
                ctx.set(dut.lookup.payload, {"key": [int(k) for k in beats[sent]],
                                             "user": sent & 0xff})
            ctx.set(dut.result.ready, rng.random() >= stall)
            await ctx.delay(1e-9)  # comb settles: read the handshakes of this cycle
            took = ctx.get(dut.lookup.valid) and ctx.get(dut.lookup.ready)
            if ctx.get(dut.result.valid) and ctx.get(dut.result.ready):
                p = ctx.get(dut.result.payload)
                results.extend((int(p.hit[i]), int(p.slot[i]), int(p.user)) for i in range(lanes))
                latency.append(cycle - taken_at.popleft())
            if took:
                taken_at.append(cycle)
                sent += 1
            address(ctx, addrs)
            await ctx.tick()
            cycle += 1
        # the engine's reads: s1 takes its key and buckets, the compare comes back as way_hit
        for key, buckets in engine_reads:
            ctx.set(dut.engine.idle, 0)
            ctx.set(dut.engine.key, int(key))
            ctx.set(dut.engine.addr.as_value(), buckets[0] | buckets[1] << g.bucket_bits)
            ctx.set(dut.engine.load, 1)
            for step in range(BucketTable.LATENCY + CAMLookupPipeline.MATCH_LATENCY + 1):
                read(ctx, addrs)
                await ctx.delay(1e-9)
                address(ctx, addrs)
                await ctx.tick()
                ctx.set(dut.engine.load, 0)
                assert not ctx.get(dut.lookup.ready)  # lookups wait while the engine works
            hits.append(unpack(ctx.get(dut.engine.way_hit.as_value()), g.ways, 2))
    simulate(dut, bench)
    return results, latency, hits


def lookup_keys(g, rng, stored, n):
    absent = rng.integers(0, 1 << g.key_width, n, dtype=np.uint64)
    return np.where(rng.random(n) < 0.6, rng.choice(stored, n), absent)


@pytest.mark.parametrize("lanes", [1, 2, 4])
@pytest.mark.parametrize("stall", [0.0, 0.4])
@pytest.mark.parametrize("family", ["dense", "tables", "real"])
def test_pipeline_answers_as_model(family, stall, lanes):
    g = geometry(**SMALL)
    rng = np.random.default_rng(3)
    if family == "dense":        # rows 0.. of one table
        keys = np.arange(70, dtype=np.uint64)
    elif family == "tables":     # dense rows spread over 26 tables
        keys = make_keys(np.arange(70) % 26, np.arange(70) // 26).astype(np.uint64)
    else:
        keys = np.unique(load_dataset(real_file("criteo_kaggle/train_head1999.csv.gz")).keys)
        keys = rng.permutation(keys)[:70].astype(np.uint64)
    model = filled_model(g, keys)
    assert model.stash_valid.any()  # the stash answers too
    lookups = lookup_keys(g, rng, keys, 400)
    results, latency, _ = run_pipeline(g, model, lookups, stall=stall, seed=5, lanes=lanes)
    hit, slot = model.lookup(lookups)
    assert [r[0] for r in results] == hit.astype(int).tolist()
    assert [r[1] for r in results] == np.where(hit, slot, 0).tolist()
    assert [r[2] for r in results] == [i // lanes & 0xff for i in range(len(lookups))]
    if stall == 0.0:
        assert set(latency) == {CAMLookupPipeline.LATENCY}


@pytest.mark.parametrize("lanes", [1, 4])
def test_pipeline_serves_engine_reads(lanes):
    """The engine's key goes down lane 0's s1 with its buckets; way_hit is its match in both
    words."""
    g = geometry(**SMALL)
    keys = np.arange(40, dtype=np.uint64) << 3
    model = filled_model(g, keys)
    reads = [(int(k), (model._bucket(0, k), model._bucket(1, k))) for k in keys[:12]]
    reads.append((12345678, (0, 1)))
    _, _, hits = run_pipeline(g, model, keys[:4], stall=0.0, seed=1, engine_reads=reads,
                              lanes=lanes)
    for (key, buckets), got in zip(reads, hits):
        want = [int(sum(int(model.valid[t, buckets[t], w] and model.keys[t, buckets[t], w] == key) << w
                        for w in range(g.ways))) for t in (0, 1)]
        assert got == want


# ---- command engine ----------------------------------------------------------------------

class PipeModel:
    """The lookup pipeline as the engine sees it, cycle by cycle (a Python copy of its
    contract): ``s1`` loads the engine's buckets on ``load`` (while idle the lookups' hash
    wins: bucket 0 here), block RAM words ``BucketTable.LATENCY`` cycles later, the match of
    the key ``s1`` carried ``MATCH_LATENCY`` cycles after them."""

    def __init__(self, g, tables):
        self.g, self.tables = g, tables
        self.addrs = deque([(0, 0)] * BucketTable.LATENCY, maxlen=BucketTable.LATENCY)
        self.s1_bucket, self.keys = (0, 0), [0] * 4  # s1, s2, s3, s3b keys
        # the compares of s3b's key, way_hit MATCH_LATENCY cycles later
        self.compares = deque([0] * CAMLookupPipeline.MATCH_LATENCY)

    def word(self):
        """This cycle's ``bucket_data`` (both tables' words, packed)."""
        return self.tables.pair(self.addrs[0])

    def way_hit(self):
        return self.compares[0]

    def clock(self, idle, load, addr, key):
        """The pipeline's registers at the clock edge, from this cycle's engine side."""
        g, width = self.g, self.g.entry_layout.size
        words = unpack(self.word(), g.ways * width, 2)
        self.compares.popleft()
        self.compares.append(sum(sum(int(e & 1 and e >> 1 == self.keys[-1]) << w
                                     for w, e in enumerate(unpack(words[t], width, g.ways)))
                                 << t * g.ways for t in (0, 1)))
        self.keys = [0 if idle else key] + self.keys[:3]
        read_now = self.s1_bucket
        if not idle and load:
            self.s1_bucket = tuple(addr)
        elif idle:
            self.s1_bucket = (0, 0)
        self.addrs.append(read_now)


def run_engine(g, commands, *, stall, seed):
    """Commands [(op, key)] through a CAMCommandEngine over emulated tables and pipeline;
    returns ([(status, slot, moves, [(src, dst)...])], Tables, stash (valid, keys))."""
    dut = CAMCommandEngine(g)
    rng = np.random.default_rng(seed)
    tables = Tables(g, rng)
    out = []

    async def bench(ctx):
        pipe = PipeModel(g, tables)
        sent, moves = 0, []
        for _ in range(200_000):
            if len(out) == len(commands):
                break
            ctx.set(dut.bucket_data.as_value(), pipe.word())
            ctx.set(dut.pipe.way_hit.as_value(), pipe.way_hit())
            ctx.set(dut.cmd.valid, sent < len(commands) and rng.random() >= stall)
            if sent < len(commands):
                ctx.set(dut.cmd.payload, {"op": commands[sent][0], "key": commands[sent][1]})
            ctx.set(dut.resp.ready, rng.random() >= stall)
            ctx.set(dut.moves.ready, rng.random() >= stall)
            await ctx.delay(1e-9)
            if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready):
                sent += 1
            if ctx.get(dut.moves.valid) and ctx.get(dut.moves.ready):
                p = ctx.get(dut.moves.payload)
                moves.append((int(p.src), int(p.dst)))
            if ctx.get(dut.resp.valid) and ctx.get(dut.resp.ready):
                p = ctx.get(dut.resp.payload)
                out.append((CAMStatus(p.status), int(p.slot), int(p.moves), moves))
                moves = []
            pipe.clock(ctx.get(dut.pipe.idle), ctx.get(dut.pipe.load),
                       unpack(ctx.get(dut.pipe.addr.as_value()), g.bucket_bits, 2),
                       ctx.get(dut.pipe.key))
            for t in (0, 1):
                tables.write(t, ctx.get(dut.write_addr[t]), ctx.get(dut.write_en[t]),
                             ctx.get(dut.write_data.as_value()))
            await ctx.tick()
        assert len(out) == len(commands), "the engine stopped answering"
    simulate(dut, bench)
    return out, tables


def check_engine(g, commands, stall):
    model = model_of(g)
    got, tables = run_engine(g, commands, stall=stall, seed=11)
    for (op, key), (status, slot, n_moves, moves) in zip(commands, got):
        if op == CAMOp.INSERT:
            want_status, want_slot, want_moves = model.insert(key)
        elif op == CAMOp.DELETE:
            (want_status, want_slot), want_moves = model.delete(key), []
        else:
            model.clear()
            want_status, want_slot, want_moves = CAMStatus.OK, 0, []
        assert (status, moves) == (want_status, want_moves), (op, key)
        if status != CAMStatus.FULL and op != CAMOp.CLEAR:
            assert slot == want_slot
        if op == CAMOp.INSERT and status == CAMStatus.OK:
            assert n_moves == len(want_moves)
    # the tables the engine left are the model's (keys of invalid entries do not matter)
    assert (tables.valid == model.valid).all()
    assert (np.where(tables.valid, tables.keys, 0) == np.where(model.valid, model.keys, 0)).all()
    return got


def script(keys, rng, deletes=0.15, clear_at=None):
    out = []
    for i, k in enumerate(keys):
        if clear_at is not None and i == clear_at:
            out.append((CAMOp.CLEAR, 0))
        out.append((CAMOp.INSERT, int(k)))
        if rng.random() < deletes:
            out.append((CAMOp.DELETE, int(rng.choice(keys[:i + 1]))))
        if rng.random() < 0.05:
            out.append((CAMOp.INSERT, int(k)))  # EXISTS
    return out


@pytest.mark.parametrize("stall", [0.0, 0.3])
def test_engine_fills_dense_rows_as_model(stall):
    """Dense rows of one table past full: free ways, relocations, the stash, FULL, EXISTS,
    deletes, and the tables the reset clear leaves (emulated block RAM starts as garbage)."""
    g = geometry(**SMALL)
    got = check_engine(g, script(np.arange(72, dtype=np.uint64), np.random.default_rng(2)), stall)
    statuses = {s for s, *_ in got}
    assert {CAMStatus.OK, CAMStatus.FULL, CAMStatus.EXISTS} <= statuses
    assert any(n for _, _, n, _ in got), "no insert relocated a key"


def test_engine_many_tables_and_clear():
    """Dense rows spread over 26 tables, a CLEAR half way, deletes of absent keys."""
    g = geometry(**SMALL)
    keys = make_keys(np.arange(80) % 26, np.arange(80) // 26).astype(np.uint64)
    commands = script(keys, np.random.default_rng(4), clear_at=40)
    commands += [(CAMOp.DELETE, 0xdeadbeef), (CAMOp.DELETE, int(keys[-1]))]
    check_engine(g, commands, 0.2)


def test_engine_real_keys():
    g = geometry(entries=128, ways=4, stash=2, max_kicks=16)
    keys = np.unique(load_dataset(real_file("criteo_kaggle/train_head1999.csv.gz")).keys)
    keys = np.random.default_rng(8).permutation(keys)[:130].astype(np.uint64)
    check_engine(g, script(keys, np.random.default_rng(9), deletes=0.05), 0.1)
