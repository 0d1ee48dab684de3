"""ColdKeySet RTL against its model and against plain first-appearance numbering."""
import numpy as np
import pytest

from helpers import real_file
from hotline.model.cold_key_set import ColdKeySetModel, first_appearance
from hotline.data import load_dataset
from hotline.hw.bram import BucketTable
from hotline.hw.cold_key_set import ColdKeySet
from hotline.model.planner import exact_hot_set
from hotline.sim import streams
from test_access_learner import DP16KDModel


def expected(model, beats, first_index=0):
    """Model outputs for beats [(key, insert, eob)], batch by batch; the user bit is the beat's
    index (counted from ``first_index``) mod 2."""
    out, batch = [], []

    def flush():
        ins = [i for i, (_, insert, _) in enumerate(batch) if insert]
        slot, first, over = model.batch(np.array([batch[i][0] for i in ins], np.uint64))
        res = {i: (int(s), bool(f), bool(o)) for i, s, f, o in zip(ins, slot, first, over)}
        for i, (key, insert, eob) in enumerate(batch):
            s, f, o = res.get(i, (0, False, False))
            out.append(dict(key=key, slot=s, first=f, insert=insert, eob=eob, overflow=o,
                            user=(first_index + len(out)) & 1))
        batch.clear()

    for beat in beats:
        batch.append(beat)
        if beat[2]:
            flush()
    if batch:
        flush()
    return out


def simulate(dut, beats, busy_in=0.0, busy_out=0.0):
    layout = dut.o.payload.shape()
    stim = [dict(key=k, insert=i, eob=e, user=n & 1) for n, (k, i, e) in enumerate(beats)]
    got, = streams.run(dut, [(dut.i, stim, busy_in)], [(dut.o, len(beats), busy_out)],
                       deadline_cycles=20 * len(beats) + 4 * dut.buckets + 100)
    return [layout.from_bits(v) for v in got]


def check(dut, beats, **busy):
    model = ColdKeySetModel(dut.capacity, ways=dut.ways, stash=dut.stash, max_keys=dut.max_keys,
                            key_width=dut.key_width, seeds=dut.seeds)
    exp = expected(model, beats)
    got = simulate(dut, beats, **busy)
    for n, (g, e) in enumerate(zip(got, exp)):
        assert {f: int(getattr(g, f)) for f in e} == {f: int(v) for f, v in e.items()}, f"beat {n}"
    return exp


def batches_of(keys, batch, insert):
    return [(int(k), bool(h), (n + 1) % batch == 0 or n + 1 == len(keys))
            for n, (k, h) in enumerate(zip(keys, insert))]


def test_model_is_first_appearance_without_overflow():
    keys = np.random.default_rng(0).integers(0, 500, 3000)
    slot, first, over = ColdKeySetModel(8192).batch(keys)
    rank, _ = first_appearance(keys)
    assert not over.any() and np.array_equal(slot, rank)
    assert first.sum() == len(np.unique(keys))


def test_fast_path_equals_replay():
    model = ColdKeySetModel(64, ways=4, stash=2, max_keys=64)
    rng = np.random.default_rng(1)
    for n in (5, 20, 40, 70):
        keys = rng.integers(0, 1 << 20, n).astype(np.uint64)
        fast, replay = model.batch(keys), model.replay(keys)
        for a, b in zip(fast, replay):
            np.testing.assert_array_equal(a, b)


def inserted_one_by_one(model, keys, window=0):
    """The set's rule, key by key, into an empty set (written from the module docstring), as
    (slot, first, overflow) lists: a key equal to one of the ``window`` keys before it takes
    the latest one's slot; a stored key its slot; else it is new and takes the next slot:
    overflow at ``max_keys`` slots, else the emptier of its two buckets (table 1 only when
    strictly emptier), else its partition's stash, else overflow (not stored: new again
    later)."""
    h0, h1 = model.buckets_of(keys)
    part = model.partition_of(keys)
    fill, stash, stored, count = {}, {}, {}, 0
    slot, first, over = [], [], []
    for i, k in enumerate(keys.tolist()):
        near = [j for j in range(max(0, i - window), i) if keys[j] == k]
        if near or k in stored:
            slot.append(slot[near[-1]] if near else stored[k])
            first.append(False)
            over.append(False)
            continue
        first.append(True)
        if count >= model.max_keys:
            slot.append(0)
            over.append(True)
            continue
        slot.append(count)
        free = [model.ways - fill.get((0, h0[i]), 0), model.ways - fill.get((1, h1[i]), 0)]
        if max(free) > 0:
            t = 1 if free[1] > free[0] else 0
            fill[(t, (h0[i], h1[i])[t])] = model.ways - free[t] + 1
            over.append(False)
        elif stash.get(part[i], 0) < model.stash:
            stash[part[i]] = stash.get(part[i], 0) + 1
            over.append(False)
        else:
            over.append(True)
        if not over[-1]:
            stored[k] = count
        count += 1
    return slot, first, over


@pytest.mark.parametrize("capacity, ways, stash, partitions, max_keys", [
    (64, 4, 2, 1, 64), (256, 2, 0, 1, 200), (256, 1, 4, 4, 256), (1024, 4, 4, 8, 900)])
def test_replay_inserts_one_by_one(capacity, ways, stash, partitions, max_keys):
    """`replay` (a compiled loop) gives the slots, first flags and overflows of the rule key by
    key, at loads from a quarter of the capacity to beyond it: on distinct keys (a batch pushed
    as its unique keys) random, dense rows of one table and of many (structured keys); on keys
    with repeats (overflowed keys come back new), with no repeat window and with one."""
    from hotline.contract.keys import make_keys
    model = ColdKeySetModel(capacity, ways=ways, stash=stash, max_keys=max_keys,
                            partitions=partitions)
    rng = np.random.default_rng(capacity + ways)
    families = []
    for n in (capacity // 4, capacity // 2, capacity * 3 // 4, capacity, capacity * 5 // 4):
        families += [rng.choice(1 << 32, n, replace=False).astype(np.uint64),
                     make_keys(np.zeros(n, np.int64), np.arange(n)).astype(np.uint64),
                     make_keys(np.arange(n) % 26, np.arange(n) // 26).astype(np.uint64),
                     rng.choice(1 << 32, n, replace=False).astype(np.uint64)[
                         rng.integers(0, n, 2 * n)]]
    overflowed = 0
    for i, keys in enumerate(families):
        for window in (0, 3) if i % 4 == 3 else (0,):
            want = inserted_one_by_one(model, keys, window)
            got = model.replay(keys, window)
            for w, g in zip(want, got):
                np.testing.assert_array_equal(g, w)
            overflowed += got[2].any()
    assert overflowed >= 6   # the loads reach overflow


@pytest.mark.parametrize("busy", [dict(), dict(busy_in=0.3, busy_out=0.3), dict(busy_out=0.7)])
def test_random_batches_with_stalls(busy):
    rng = np.random.default_rng(2)
    keys = rng.integers(0, 60, 1500)
    beats = batches_of(keys, 97, rng.random(1500) < 0.7)
    check(ColdKeySet(256, max_keys=256, user_width=1), beats, **busy)


@pytest.mark.parametrize("primitive", [None, "ecp5"])
def test_banked_tables(primitive, monkeypatch):
    """Tables split into banks (8 buckets each here, 2048 in the product), inferred or DP16KD
    block RAMs, on random batches, colliding keys and a real stream, with stalls."""
    monkeypatch.setattr(ColdKeySet, "BANK_DEPTH", 8)
    monkeypatch.setattr(BucketTable, "dp16kd", DP16KDModel)
    dut = ColdKeySet(256, max_keys=256, primitive=primitive)
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 90, 1200)
    beats = batches_of(keys, 101, rng.random(1200) < 0.8)
    beats += [(int(k), True, n == 23) for n, k in enumerate(np.tile(colliding(dut, 12, rng), 2))]
    try:
        real = load_dataset(real_file("criteo_kaggle/train_head1999.csv.gz"), limit=30).keys
        beats += batches_of(real, 400, np.ones(len(real), bool))
    except pytest.skip.Exception:
        pass
    check(dut, beats, busy_in=0.2, busy_out=0.3)


def test_banked_clearing_pass_writes_every_bank_at_once(monkeypatch):
    """Tables of 32 buckets in 4 banks of 8: a clearing pass (after reset, and after every
    3 batches with 2 epoch bits) lasts one bank's 8 cycles, not 32, and still empties every
    bank: keys of the batch 3 back, same epoch, are new again."""
    from amaranth.sim import Simulator
    monkeypatch.setattr(ColdKeySet, "BANK_DEPTH", 8)
    dut = ColdKeySet(256, max_keys=256, epoch_bits=2)
    keys = np.random.default_rng(8).integers(0, 1 << 32, 40, dtype=np.uint64)
    beats = [(int(k), True, n == len(keys) - 1) for _ in range(5) for n, k in enumerate(keys)]
    exp = check(dut, beats)
    assert sum(e["first"] for e in exp) == 5 * len(keys)   # every batch numbers them afresh

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    passes = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        length = 0
        for t in range(200):
            # three one-beat batches from cycle 20: the last epoch's end starts a pass
            ctx.set(dut.i.valid, t in (20, 21, 22))
            ctx.set(dut.i.payload, dict(key=t, insert=1, eob=1))
            _, _, clearing = await ctx.tick().sample(dut.clearing)
            if clearing:
                length += 1
            elif length:
                passes.append(length)
                length = 0

    sim.add_testbench(bench)
    sim.run()
    assert passes == [8, 8]


def test_ecp5_tables_structure():
    from amaranth.back import verilog
    dut = ColdKeySet(32768, max_keys=16384, primitive="ecp5")
    text = verilog.convert(dut, name="top", emit_src=False)
    # 2 tables x 2 banks of 2048 buckets x 4 ways x 6 nine-bit blocks (54-bit entries)
    assert dut.entry_layout.size == 54
    assert text.count("DP16KD #(") == text.count('.REGMODE_B("OUTREG")') == 2 * 2 * 4 * 6
    # Four partitions of 512 buckets (the product's set with lanes): 512 x 36 blocks, 2 per
    # entry, not 3 of 1024 x 18 half used.
    dut = ColdKeySet(16384, max_keys=8192, partitions=4, lanes=4, primitive="ecp5")
    text = verilog.convert(dut, name="top", emit_src=False)
    assert text.count("DP16KD #(") == text.count(".DATA_WIDTH_B(32'd36)") == 4 * 2 * 4 * 2


def colliding(dut, n, rng):
    """n distinct keys whose two buckets are both bucket 0."""
    model = ColdKeySetModel(dut.capacity, ways=dut.ways, seeds=dut.seeds)
    cand = rng.integers(0, 1 << 32, 2_000_000, dtype=np.uint64)
    h0, h1 = model.buckets_of(cand)
    hits = np.unique(cand[(h0 == 0) & (h1 == 0)])
    assert len(hits) >= n
    return hits[:n]


def test_collisions_fill_buckets_then_stash_then_overflow():
    dut = ColdKeySet(64, ways=4, stash=2, max_keys=64)
    keys = colliding(dut, 12, np.random.default_rng(3))
    seq = list(keys) + list(keys[::-1]) + list(keys)  # repeats: found, or new again if overflowed
    exp = check(dut, [(int(k), True, n == len(seq) - 1) for n, k in enumerate(seq)],
                busy_in=0.2, busy_out=0.2)
    assert sum(e["overflow"] for e in exp[:12]) == 12 - 8 - 2


def test_stash_entries_do_not_outlive_their_batch():
    """A batch that leaves keys in the stash, then, back to back, a batch starting with one of
    its keys 1 or 2 beats after the end: the stash is compared two stages before the decision,
    while the old batch's last beats are still in the pipeline (mutation: without the check of
    the beat 1 ahead, those keys were found in the old batch's stash). And a stashed key found
    again right behind its insert (forwarded, not yet in the stash when compared)."""
    dut = ColdKeySet(64, ways=4, stash=2, max_keys=64)
    keys = [int(k) for k in colliding(dut, 10, np.random.default_rng(5))]  # 8 in tables, 2 stashed
    # the batch ends with keys of other buckets, so the stashed keys are out of the pipeline
    fill = [k for k in range(1, 100) if k not in keys][:4]
    batch = keys + fill
    beats = []
    for k in keys:
        for lead in ([], [fill[0]]):
            beats += [(key, True, n == len(batch) - 1) for n, key in enumerate(batch)]
            beats += [(key, True, False) for key in lead] + [(k, True, True)]
    # then a stashed key again 2, 1 and 3 beats later in its batch: found each time (2 beats
    # behind its insert it is not in the stash yet when compared: forwarded)
    again = [keys[8], fill[0], keys[8], keys[8], fill[1], fill[2], keys[8]]
    tail = keys[:8] + again
    beats += [(key, True, n == len(tail) - 1) for n, key in enumerate(tail)]
    exp = check(dut, beats)
    assert all(e["first"] for e in exp[:-len(tail)])
    assert [e["first"] for e in exp[-len(again):]] == [1, 1, 0, 0, 1, 1, 0]


def test_max_keys_and_repeated_key():
    dut = ColdKeySet(64, ways=4, stash=2, max_keys=5)
    beats = [(7, True, False)] * 4 + [(k, True, False) for k in range(100, 106)] + [(7, True, True)]
    exp = check(dut, beats + [(7, True, True)])
    assert [e["overflow"] for e in exp[4:10]] == [0, 0, 0, 0, 1, 1]
    assert exp[-1]["slot"] == 0 and exp[-1]["first"]  # a new batch numbers from 0 again


def test_epoch_wrap_clears_and_one_beat_batches():
    dut = ColdKeySet(32, ways=4, stash=1, max_keys=16, epoch_bits=2)
    rng = np.random.default_rng(4)
    beats = [(int(rng.integers(0, 6)), bool(rng.random() < 0.8), bool(rng.random() < 0.4))
             for _ in range(400)]
    check(dut, beats, busy_in=0.1, busy_out=0.2)


@pytest.mark.parametrize("partitions,lanes", [(1, 1), (4, 4)])
def test_full_throughput_without_backpressure(partitions, lanes):
    """One beat per cycle (with lanes, a key in each: four keys per cycle), no bubble, the
    same LATENCY."""
    from amaranth.sim import Simulator
    dut = ColdKeySet(256, max_keys=256, partitions=partitions, lanes=lanes)
    pool = np.arange(10_000, dtype=np.uint64)
    part = ColdKeySetModel(256, partitions=partitions).partition_of(pool)
    by = [pool[part == p] for p in range(partitions)]
    n = 300

    def keys(t):
        return t % 37 if lanes == 1 else [int(by[p][t % 23]) for p in (1, 0, 3, 2)]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    cycles = {}

    async def bench(ctx):
        await ctx.tick().until(dut.i.ready)
        ctx.set(dut.o.ready, 1)
        start, seen, last = None, 0, None
        for t in range(n + 50):
            ctx.set(dut.i.valid, t < n)
            ctx.set(dut.i.payload, dict(key=keys(t), insert=1 if lanes == 1 else [1] * lanes,
                                        eob=int(t % 50 == 49)))
            _, _, valid = await ctx.tick().sample(dut.o.valid)
            if valid:
                start = t if start is None else start
                seen, last = seen + 1, t
        cycles.update(first=start, seen=seen, last=last)

    sim.add_testbench(bench)
    sim.run()
    # one beat per cycle, no bubble, LATENCY cycles from the input handshake to o.valid
    assert cycles == dict(first=dut.LATENCY, seen=n, last=n - 1 + dut.LATENCY)


@pytest.mark.parametrize("rel", ["criteo_kaggle/train_head1999.csv.gz",
                                 "alimama/dmr_alimama_sampled_train500.csv.gz"])
def test_real_cold_keys(rel):
    ds = load_dataset(real_file(rel), limit=400)
    keys = ds.keys
    hot = np.isin(keys, exact_hot_set(keys, max(1, len(np.unique(keys)) // 10)).keys)
    b = 100
    samples_of_lookup = np.searchsorted(ds.sample_offsets, np.arange(len(keys)), side="right") - 1
    eob = np.r_[samples_of_lookup[1:] // b != samples_of_lookup[:-1] // b, True]
    beats = [(int(k), bool(~h), bool(e)) for k, h, e in zip(keys, hot, eob)][:4000]
    beats[-1] = (beats[-1][0], beats[-1][1], True)
    exp = check(ColdKeySet(4096, max_keys=4096), beats, busy_in=0.1, busy_out=0.2)
    assert not any(e["overflow"] for e in exp)


def test_placement_is_observable_through_overflow():
    """A tiny set overflows often, so the overflow flags pin down hashing and way choice."""
    dut = ColdKeySet(32, ways=4, stash=1, max_keys=64)
    rng = np.random.default_rng(5)
    beats = []
    for _ in range(8):  # batches of 36 distinct keys, each seen twice
        keys = rng.integers(0, 1 << 32, 36, dtype=np.uint64)
        seq = np.concatenate([keys, rng.permutation(keys)])
        beats += [(int(k), True, n == len(seq) - 1) for n, k in enumerate(seq)]
    exp = check(dut, beats, busy_in=0.1, busy_out=0.1)
    assert 0 < sum(e["overflow"] for e in exp) < len(exp)


@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
def test_cocotb_adversarial_and_real(simulator, tmp_path, simulator_or_skip):
    from hotline.sim import tb_streams
    dut = ColdKeySet(64, ways=4, stash=2, max_keys=48, epoch_bits=2, user_width=1)
    model = ColdKeySetModel(64, ways=4, stash=2, max_keys=48)
    rng = np.random.default_rng(6)
    beats = []
    for n in range(10):  # random batches, overflowing ones and one-beat ones, across epoch wraps
        size = int(rng.choice([1, 2, 40, 90]))
        keys = rng.integers(0, 70 if n % 2 else 1 << 32, size, dtype=np.uint64)
        beats += [(int(k), bool(rng.random() < 0.8), i == size - 1) for i, k in enumerate(keys)]
    colliding_keys = colliding(dut, 10, rng)
    beats += [(int(k), True, i == 19) for i, k in enumerate(np.tile(colliding_keys, 2))]
    path = "criteo_kaggle/train_head1999.csv.gz"
    try:
        keys = load_dataset(real_file(path), limit=60).keys
        beats += batches_of(keys, 26 * 20, np.ones(len(keys), bool))
    except pytest.skip.Exception:
        pass
    exp = expected(model, beats)
    stim = [dict(key=k, insert=i, eob=e, user=n & 1) for n, (k, i, e) in enumerate(beats)]
    res = tb_streams.run(dut, "cold_key_set", {"i": stim}, {"o": exp}, build_dir=tmp_path,
                         simulator=simulator_or_skip(simulator), busy_in=0.2, busy_out=0.3)
    assert res["beats"]["o"] == len(beats)
    # Reset mid-stream: everything after the reset is a fresh batch sequence.
    cut = len(beats) // 2
    res = tb_streams.run(dut, "cold_key_set", {"i": stim}, {"o": expected(model, beats[cut:], cut)},
                         build_dir=tmp_path / "reset", simulator=simulator, busy_in=0.1,
                         busy_out=0.1, resets=[cut])
    assert res["beats"]["o"] == len(beats) - cut


# ---- partitions and lanes ------------------------------------------------------------------

def lane_beats(dut, entries, rng, empty_eob=0.2):
    """Pack (key, eob) entries, all inserted, into ``dut.lanes``-lane beats as the Fragmenter's
    dispatcher does: each beat takes up to a random 1 .. lanes of the next entries whose
    partitions are distinct, placed in random lanes in order, the others not inserted (random
    keys); a beat never spans a batch end; a batch sometimes ends with a beat that inserts
    nothing. Returns [(keys, inserts, eob)] with per-lane lists."""
    part = ColdKeySetModel(dut.capacity, ways=dut.ways, partitions=dut.partitions).partition_of(
        [k for k, _ in entries]).tolist()
    L, beats, i = dut.lanes, [], 0
    while i < len(entries):
        limit, seen, take = int(rng.integers(1, L + 1)), set(), []
        while i < len(entries) and len(take) < limit and part[i] not in seen:
            seen.add(part[i])
            take.append(entries[i][0])
            i += 1
            if entries[i - 1][1]:
                break
        eob = entries[i - 1][1]
        at = sorted(rng.choice(L, len(take), replace=False).tolist())
        keys = [int(k) for k in rng.integers(0, 1 << 32, L, dtype=np.uint64)]
        inserts = [False] * L
        for lane, key in zip(at, take):
            keys[lane], inserts[lane] = int(key), True
        if eob and rng.random() < empty_eob:
            beats += [(keys, inserts, False), ([0] * L, [False] * L, True)]
        else:
            beats.append((keys, inserts, eob))
    return beats


def expected_lanes(model, beats):
    """Model outputs of lane beats: the inserted keys of a batch numbered in (beat, lane)
    order; a lane that inserts nothing answers zeros; the user bit is the beat index mod 2."""
    out, batch = [], []
    for n, beat in enumerate(beats):
        batch.append((n, beat))
        if not beat[2]:
            continue
        keys = [k for _, (ks, ins, _) in batch for k, i in zip(ks, ins) if i]
        answers = iter(zip(*model.batch(np.array(keys, np.uint64))))
        for m_, (ks, ins, eob) in batch:
            lanes = {f: [] for f in ("key", "slot", "first", "insert", "overflow")}
            for k, i in zip(ks, ins):
                s, f, o = next(answers) if i else (0, 0, 0)
                for name, v in zip(lanes, (k if i else 0, s, f, i, o)):
                    lanes[name].append(int(v))
            out.append(dict(**lanes, eob=int(eob), user=m_ & 1))
        batch.clear()
    return out


def check_lanes(dut, beats, **busy):
    model = ColdKeySetModel(dut.capacity, ways=dut.ways, stash=dut.stash, max_keys=dut.max_keys,
                            key_width=dut.key_width, seeds=dut.seeds, partitions=dut.partitions)
    exp = expected_lanes(model, beats)
    layout = dut.o.payload.shape()
    stim = [dict(key=k, insert=[int(x) for x in i], eob=int(e), user=n & 1)
            for n, (k, i, e) in enumerate(beats)]
    got, = streams.run(dut, [(dut.i, stim, busy.get("busy_in", 0.0))],
                       [(dut.o, len(beats), busy.get("busy_out", 0.0))],
                       deadline_cycles=20 * len(beats) + 4 * dut.buckets + 100)
    for n, (g, e) in enumerate(zip(got, exp)):
        g = layout.from_bits(g)
        have = {f: ([int(x) for x in getattr(g, f)] if isinstance(v, list) else int(getattr(g, f)))
                for f, v in e.items()}
        assert have == e, f"beat {n}"
    return exp


def colliding_in(dut, n, rng, partition=0):
    """n distinct keys of one partition whose two buckets are both bucket 0 of its tables."""
    model = ColdKeySetModel(dut.capacity, ways=dut.ways, seeds=dut.seeds,
                            partitions=dut.partitions)
    cand = rng.integers(0, 1 << 32, 4_000_000, dtype=np.uint64)
    h0, h1 = model.buckets_of(cand)
    at = partition * model.buckets
    hits = np.unique(cand[(h0 == at) & (h1 == at)])
    assert len(hits) >= n
    return hits[:n]


@pytest.mark.parametrize("partitions,lanes", [(2, 2), (4, 2), (4, 4)])
@pytest.mark.parametrize("busy", [dict(), dict(busy_in=0.3, busy_out=0.3)])
def test_lanes_random_batches(partitions, lanes, busy):
    """Random batches (small key range: many repeats, across lanes and beats) against the
    model, a one-beat batch and a batch of one key among them."""
    dut = ColdKeySet(256, max_keys=256, partitions=partitions, lanes=lanes)
    rng = np.random.default_rng(10 + partitions + lanes)
    keys = rng.integers(0, 80, 1500)
    entries = [(int(k), (n + 1) % 97 == 0 or n == 1499) for n, k in enumerate(keys)]
    entries += [(5, True), (6, False), (6, True)]
    beats = lane_beats(dut, entries, rng)
    exp = check_lanes(dut, beats, **busy)
    assert sum(sum(e["first"]) for e in exp) > 10 * 16   # repeats and new keys both


def test_lanes_slots_cross_partitions_in_lane_order():
    """The slots of one beat's new keys follow lane order whatever their partitions, with
    ``max_keys`` reached inside a beat (the later lanes overflow), and a key repeated in the
    very next beat in another lane (forwarded). Mutation: slots from the partition order."""
    dut = ColdKeySet(256, max_keys=6, partitions=4, lanes=4)
    model = ColdKeySetModel(256, partitions=4)
    rng = np.random.default_rng(3)
    pool = rng.integers(0, 1 << 32, 400, dtype=np.uint64)
    part = model.partition_of(pool)
    by = [pool[part == p] for p in range(4)]
    # beat 1: partitions 3, 2, 1, 0 in lanes 0 .. 3; beat 2: partitions 0, 1, 2, 3 with
    # the first lane repeating beat 1's lane-3 key; beat 3 crosses max_keys mid-beat
    b1 = [int(by[p][0]) for p in (3, 2, 1, 0)]
    b2 = [b1[3], int(by[1][1]), int(by[2][1]), int(by[3][1])]
    b3 = [int(by[0][2]), int(by[1][2]), int(by[2][2]), int(by[3][2])]
    beats = [(b1, [True] * 4, False), (b2, [True] * 4, False), (b3, [True] * 4, True),
             (b3, [True] * 4, True)]
    exp = check_lanes(dut, beats, busy_out=0.3)
    assert exp[0]["slot"] == [0, 1, 2, 3] and exp[1]["slot"] == [3, 4, 5, 0]
    assert exp[1]["first"] == [0, 1, 1, 1] and exp[1]["overflow"] == [0, 0, 0, 1]
    assert exp[2]["overflow"] == [1] * 4 and exp[3]["slot"] == [0, 1, 2, 3]


def test_lanes_many_new_keys_beyond_max_keys():
    """A batch with ten times ``max_keys`` distinct keys, in lane beats: every key beyond
    ``max_keys`` overflows however many come (the count stops past it, never wraps to give
    room again), and the next batch numbers from 0. Mutation caught: the count not held."""
    dut = ColdKeySet(256, max_keys=6, partitions=4, lanes=4)
    rng = np.random.default_rng(12)
    keys = rng.choice(1 << 20, 80, replace=False)
    entries = [(int(k), n == 59) for n, k in enumerate(keys[:60])]
    entries += [(int(k), n == 19) for n, k in enumerate(keys[60:])]
    exp = check_lanes(dut, lane_beats(dut, entries, rng), busy_out=0.2)
    assert sum(sum(e["overflow"]) for e in exp) == (60 - 6) + (20 - 6)


def test_lanes_partition_fills_alone():
    """Keys that all collide in one partition's tables fill its buckets, then its stash, then
    overflow, while the other partitions take keys in the same beats."""
    dut = ColdKeySet(128, ways=4, stash=2, max_keys=128, partitions=4, lanes=4)
    rng = np.random.default_rng(8)
    hot = colliding_in(dut, 12, rng, partition=2)
    model = ColdKeySetModel(128, partitions=4)
    others = rng.integers(0, 1 << 32, 400, dtype=np.uint64)
    others = others[model.partition_of(others) != 2][:36]
    seq = []
    for n, k in enumerate(list(hot) + list(hot[::-1])):
        seq += [(int(k), False), (int(others[n % 36]), False)]
    seq[-1] = (seq[-1][0], True)
    exp = check_lanes(dut, lane_beats(dut, seq, rng, empty_eob=0), busy_in=0.2, busy_out=0.2)
    overflows = sum(sum(e["overflow"]) for e in exp)
    assert overflows >= 2 * (12 - 8 - 2)


def test_lanes_structured_and_real_keys():
    """Dense row ids of one table and of many (table-offset keys), then a real Criteo stream's
    cold keys, in lane beats with stalls."""
    dut = ColdKeySet(4096, max_keys=2048, partitions=4, lanes=4)
    rng = np.random.default_rng(9)
    dense = np.arange(1500)
    tables = (np.arange(26)[None, :] * 100_000 + np.arange(40)[:, None]).ravel()
    entries = [(int(k), n == len(dense) - 1) for n, k in enumerate(dense)]
    entries += [(int(k), n == len(tables) - 1) for n, k in enumerate(np.tile(tables, 2))]
    try:
        real = load_dataset(real_file("criteo_kaggle/train_head1999.csv.gz"), limit=150).keys
        entries += [(int(k), (n + 1) % 1300 == 0 or n == len(real) - 1)
                    for n, k in enumerate(real)]
    except pytest.skip.Exception:
        pass
    exp = check_lanes(dut, lane_beats(dut, entries, rng), busy_in=0.1, busy_out=0.2)
    assert not any(any(e["overflow"]) for e in exp)


@pytest.mark.slow   # 100 s; the Amaranth-simulator lane tests above run in the default tier
@pytest.mark.parametrize("simulator", ["verilator"])
def test_cocotb_lanes(simulator, tmp_path, simulator_or_skip):
    """Partitions and lanes under cocotb: overflowing and one-beat batches across epoch wraps,
    colliding keys of one partition, a real stream, with stalls."""
    from hotline.sim import tb_streams
    dut = ColdKeySet(128, ways=4, stash=2, max_keys=48, epoch_bits=2, partitions=4, lanes=4)
    model = ColdKeySetModel(128, ways=4, stash=2, max_keys=48, partitions=4)
    rng = np.random.default_rng(12)
    entries = []
    for n in range(10):
        size = int(rng.choice([1, 2, 40, 90]))
        keys = rng.integers(0, 70 if n % 2 else 1 << 32, size, dtype=np.uint64)
        entries += [(int(k), i == size - 1) for i, k in enumerate(keys)]
    entries += [(int(k), i == 23) for i, k in enumerate(np.tile(colliding_in(dut, 12, rng, 1), 2))]
    try:
        keys = load_dataset(real_file("criteo_kaggle/train_head1999.csv.gz"), limit=60).keys
        entries += [(int(k), (n + 1) % 520 == 0 or n == len(keys) - 1) for n, k in enumerate(keys)]
    except pytest.skip.Exception:
        pass
    beats = lane_beats(dut, entries, rng)
    stim = [dict(key=k, insert=[int(x) for x in i], eob=int(e), user=n & 1)
            for n, (k, i, e) in enumerate(beats)]
    res = tb_streams.run(dut, "cold_key_set_lanes", {"i": stim}, {"o": expected_lanes(model, beats)},
                         build_dir=tmp_path, simulator=simulator_or_skip(simulator), busy_in=0.2,
                         busy_out=0.3)
    assert res["beats"]["o"] == len(beats)
