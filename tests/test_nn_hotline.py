"""The "hotline" placement (`hotline.nn.hotline_store.HotlineStore`, model:// device) against
the "host" placement (`HostStore`, host memory) as the oracle: for sequences of batches,
each gather returns exactly HostStore's rows and after the scatters every table equals
HostStore's, bit for bit. The updates touch every float of a row, optimizer state included,
so a row that loses its state or a write-back anywhere shows."""
import time

import numpy as np
import pytest
import torch

from helpers import real_file
from hotline.contract.config import AcceleratorConfig
from hotline.contract.errors import HotlineError
from hotline.contract.keys import make_keys
from hotline.data import load_dataset
from hotline.data.generator import synth_criteo
from hotline.model.cold_key_set import ColdKeySetModel
from hotline.nn.hotline_store import HotlineStore
from hotline.nn.layout import RowLayout
from hotline.nn.stores import HostStore

LAYOUT = RowLayout(4, 1)   # 4 weights, 1 state float, padded to 6


def stores(sizes, seed=0, layout=LAYOUT, **options):
    """(HostStore, HotlineStore) of tables ``sizes`` holding the same random rows."""
    ref, store = HostStore(sizes, layout), HotlineStore(sizes, layout, **options)
    rng = np.random.default_rng(seed)
    for t, n in enumerate(sizes):
        rows = torch.from_numpy(rng.standard_normal((n, layout.floats)).astype(np.float32))
        ref.write_table(t, rows)
        store.write_table(t, rows)
    return ref, store


def as_keys(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, np.int64))


def run(ref, store, batches, prefetch="none", events=None, seed=1, in_place=False):
    """Train both stores on ``batches`` (each (lookups, lengths or None)) with the same row
    updates; check every gather and, at the end, every table. ``prefetch``: "none", "early"
    (the next batch announced before this one's scatter: its staging copy is stale), "late"
    (after the scatter) or "mixed". ``events[i]``: called with the store before batch i.
    ``in_place``: the store's batches that fit (`fuses`) go through `gather_lookups` (every
    lookup's row checked; odd batches of an even size as a transposed grid), are updated in
    its ``rows`` through each key's first lookup (a key whose lookups had several rows would
    keep an old one), and `scatter_lookups`; ``"deferred"``: the same with
    ``gather_lookups(deferred=True)`` and `update_lookups` before the update. Returns the
    store's counters and ``fused``: whether each batch went in place."""
    rng = np.random.default_rng(seed)
    events = events or {}
    announced, fused_batches = False, []
    for i, (lookups, lengths) in enumerate(batches):
        if i in events:
            events[i](store)
            announced = False
        keys, inverse = torch.unique(lookups, return_inverse=True)
        want = ref.gather(keys)
        fused = bool(in_place)
        fused_batches.append(fused)
        if fused:
            if not announced:
                store.prefetch(lookups, lengths)
            n = len(lookups)
            deferred = in_place == "deferred"
            if i % 2 and n and n % 2 == 0:   # as a (n / 2) x 2 grid, transposed: back here
                at = store.gather_lookups(grid=(2, n // 2), deferred=deferred).view(
                    2, n // 2).T.reshape(-1)
            else:
                at = store.gather_lookups(deferred=deferred)
            assert torch.equal(store.rows[at], want[inverse]), f"batch {i}: lookup rows differ"
        else:
            got = store.gather(keys)
            assert torch.equal(got, want), f"batch {i}: gathered rows differ"
        new = want + torch.from_numpy(rng.standard_normal(want.shape).astype(np.float32))
        mode = prefetch if prefetch != "mixed" else ("early", "late", "none")[i % 3]
        nxt = batches[i + 1] if i + 1 < len(batches) else None
        announced = nxt is not None and mode in ("early", "late") and i + 1 not in events
        if announced and mode == "early":
            store.prefetch(*nxt)
        ref.scatter(keys, new)
        if fused:
            first = torch.full((len(keys),), len(lookups)).scatter_reduce_(
                0, inverse, torch.arange(len(lookups)), "amin")
            if deferred:
                store.update_lookups()
            store.rows[at[first]] = new
            store.scatter_lookups()
        else:
            store.scatter(keys, new.clone())
        if nxt is not None and mode == "late" and i + 1 not in events:
            store.prefetch(*nxt)
    for t in range(len(ref.table_rows)):
        assert torch.equal(store.read_table(t), ref.read_table(t)), f"table {t} differs"
    return {**store.counters(), "fused": fused_batches}


def dataset_batches(ds, batch):
    """(lookups tensor, lookups per sample) of each batch of ``batch`` samples of ``ds``."""
    out = []
    for s0 in range(0, ds.num_samples, batch):
        s1 = min(s0 + batch, ds.num_samples)
        keys = ds.keys[ds.sample_offsets[s0]:ds.sample_offsets[s1]]
        out.append((as_keys(keys), torch.from_numpy(ds.lengths[s0:s1].sum(1).astype(np.int64))))
    return out


def random_batches(sizes, n, lookups, seed=2, alpha=1.3):
    """``n`` batches of zipf-distributed keys over tables ``sizes``, no sample lengths."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray(sizes)
    out = []
    for _ in range(n):
        t = rng.integers(0, len(sizes), lookups)
        r = (rng.zipf(alpha, lookups) - 1) % sizes[t]
        out.append((as_keys(make_keys(t, r)), None))
    return out


SYNTH = synth_criteo(1200, seed=3, drift=0.5).fold(500)
POLICIES = {
    "exact-profiled": dict(hot_rows=400, profile_batches=4),
    "exact-profiled-every": dict(hot_rows=400, profile_batches=4, refresh="every:8",
                                 learn_window=4),
    "learn-auto": dict(hot_rows=400, hot_set="learn", learn_window=4, refresh="auto"),
    "given-every": dict(hot_keys=make_keys(np.arange(26) % 26, np.arange(26) % 3),
                        hot_rows=300, refresh="every:6", learn_window=3),
}


@pytest.mark.parametrize("prefetch", ["none", "early", "late", "mixed"])
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("in_place", [False, True])
def test_synth_drift_equals_host(policy, prefetch, in_place):
    """The generator's drifting stream, 38 batches of 32 samples x 26 tables, under each
    hot-set policy (loads and refreshes in the middle) and prefetch pattern."""
    ref, store = stores([int(n) for n in SYNTH.table_sizes], batch_lookups=32 * 26,
                        batch_size=32, **POLICIES[policy])
    with store:
        c = run(ref, store, dataset_batches(SYNTH, 32), prefetch, in_place=in_place)
    assert c["steps"] == 38 and c["loads"] and 0 < c["hot_share"] < 1
    if prefetch != "none":
        assert c["samples"] > 38   # the sample lengths reached the device


@pytest.mark.realdata
@pytest.mark.parametrize("rel, fold, batch", [
    ("criteo_kaggle/train_head1999.csv.gz", 2000, 64),
    ("movielens/ml-100k.inter.gz", None, 256),
])
@pytest.mark.parametrize("in_place", [False, True])
def test_real_streams_equal_host(rel, fold, batch, in_place):
    ds = load_dataset(real_file(rel), limit=24 * batch)
    ds = ds.fold(fold) if fold else ds
    batches = dataset_batches(ds, batch)[:24]
    ref, store = stores([int(n) for n in ds.table_sizes], hot_rows=200, hot_set="learn",
                        learn_window=4, refresh="every:8", batch_lookups=batch * len(ds.table_sizes),
                        batch_size=batch)
    with store:
        c = run(ref, store, batches, "mixed", in_place=in_place)
    assert len(c["loads"]) == 3


@pytest.mark.parametrize("in_place", [False, True])
def test_every_row_hot(in_place):
    sizes = [20, 30]
    every = np.concatenate([make_keys(t, np.arange(n)) for t, n in enumerate(sizes)])
    ref, store = stores(sizes, hot_keys=every, batch_lookups=64)
    with store:
        c = run(ref, store, random_batches(sizes, 20, 40), "early", in_place=in_place)
    assert c["hot_share"] == 1.0 and c["cold_rows"] == 0


@pytest.mark.parametrize("in_place", [False, True])
def test_every_row_cold(in_place):
    sizes = [20, 30]
    ref, store = stores(sizes, batch_lookups=64)
    with store:
        c = run(ref, store, random_batches(sizes, 20, 40), "mixed", in_place=in_place)
    assert c["hot_share"] == 0.0 and c["hot_keys"] == 0 and c["cold_rows"] > 0


@pytest.mark.parametrize("prefetch", ["none", "early", "late"])
@pytest.mark.parametrize("in_place", [False, True, "deferred"])
def test_batches_beyond_the_staging_slots(prefetch, in_place):
    """16 staging slots, batches of 120 lookups over ~100 distinct cold keys: the device
    stages 16 of them, the host reads and writes the rest. Deferred: every device scatter
    lands 10 ms late, so the rows it writes are read from its staging rows by the host and
    updated only after it (`update_lookups`)."""
    sizes = [300, 300]
    ref, store = stores(sizes, hot_keys=make_keys([0] * 5, np.arange(5)), batch_lookups=16)
    if in_place == "deferred":
        scatter = store.dev._scatter
        store.dev._scatter = lambda bank, keys: (time.sleep(0.01), scatter(bank, keys))[1]
    with store:
        c = run(ref, store, random_batches(sizes, 12, 120, alpha=1.1), prefetch, in_place=in_place)
    assert store.slots == 16 and c["host_rows"] > 0


@pytest.mark.parametrize("prefetch", ["none", "early", "late", "mixed"])
def test_batches_over_the_slots_go_in_place_with_the_host_rows_beyond(prefetch):
    """16 staging slots, batches of 120 lookups, every one through `gather_lookups` (each
    lookup's row checked): a batch with at most 16 cold lookups (counted here against the
    hot keys) is pushed as its lookups; one with more as its unique keys, and the cold keys
    after the first 16 (ascending) are read and written by the host: exactly these counted
    in ``host_rows``. Everything equals the host store, across a load of the same hot set."""
    sizes = [300, 300]
    hot = make_keys([0] * 60 + [1] * 60, np.r_[0:60, 0:60])
    rng = np.random.default_rng(4)
    batches, host_rows = [], 0
    for i in range(12):
        cold = (4, 16, 17, 40)[i % 4]
        cold_keys = make_keys(rng.integers(0, 2, cold), rng.integers(60, 300, cold))
        keys = np.r_[rng.choice(hot, 120 - cold), cold_keys]
        batches.append((as_keys(rng.permutation(keys)), None))
        host_rows += max(0, len(np.unique(cold_keys)) - 16) if cold > 16 else 0
    ref, store = stores(sizes, hot_keys=hot, batch_lookups=16)
    with store:
        c = run(ref, store, batches, prefetch, in_place=True,
                events={6: lambda s: s.load(hot[::-1].copy())})
    assert store.slots == 16 and all(c["fused"]) and host_rows > 0
    assert c["host_rows"] == host_rows


def overflowing_keys(table_rows, config, n):
    """``n`` keys of table 0 whose two cold-key-set buckets are both bucket 0: beyond
    2 x ways + stash of them, the set overflows."""
    cold = ColdKeySetModel(**config.cold_kwargs())
    keys = make_keys(0, np.arange(table_rows))
    h0, h1 = cold.buckets_of(keys)
    return keys[(h0 == 0) & (h1 == 0)][:n]


@pytest.mark.parametrize("prefetch", ["early", "late"])
@pytest.mark.parametrize("in_place", [False, True])
def test_cold_key_set_overflow(prefetch, in_place):
    """Keys that overflow the device's cold-key set take several staging slots each (a
    prefetched batch is pushed with its repeats); every slot gets the key's updated row."""
    sizes = [40000]
    config = AcceleratorConfig.for_workload(0, 1, 64)
    keys = overflowing_keys(sizes[0], config, 16)
    assert len(keys) == 16
    lookups = as_keys(np.r_[keys, keys[::-1], keys])   # repeats of the overflowed keys
    ref, store = stores(sizes, batch_lookups=64)
    with store:
        run(ref, store, [(lookups, None)] * 4, prefetch, in_place=in_place)
        assert store.dev.counters()["overflows"] > 0


@pytest.mark.parametrize("in_place", [False, True])
def test_cold_key_set_overflow_beside_hot_keys(in_place):
    """An overflowed batch with hot lookups too: each hot lookup keeps its hot slot (its slot
    number may pass the batch's cold slots: it is no index into them)."""
    sizes = [40000]
    config = AcceleratorConfig.for_workload(64, 1, 64)
    keys = overflowing_keys(sizes[0], config, 16)
    hot = np.setdiff1d(make_keys(0, np.arange(0, 40000, 97)), keys)[:64]
    lookups = as_keys(np.r_[keys, hot[:24], keys[::-1], hot[:24]])
    ref, store = stores(sizes, hot_keys=hot, batch_lookups=64)
    with store:
        assert store.placement.slots.max() >= 3 * len(keys)   # beyond the cold slots
        run(ref, store, [(lookups, None)] * 3, "early", in_place=in_place)
        assert store.dev.counters()["overflows"] > 0


@pytest.mark.parametrize("grid", [None, (2, 8)])
def test_in_place_rows_past_2_to_31(grid):
    """Each lookup's row of `rows` is int64 arithmetic: with the hot table and the staging
    banks moved past 2**31 rows (for the row numbers only, after the gather), every hot and
    cold lookup's row is past 2**31 too, not wrapped. A grid that does not cover the batch
    is refused before anything is taken (the batch is gathered after)."""
    sizes = [50]
    ref, store = stores(sizes, hot_keys=make_keys(0, [1, 2, 3]), batch_lookups=32)
    lookups = as_keys(make_keys(0, [1, 5, 2, 7, 5, 9, 3, 11, 1, 12, 13, 2, 14, 15, 3, 16]))
    keys, inverse = torch.unique(lookups, return_inverse=True)
    far, pull = 2**32, store._pull_result

    def pull_then_move(b):
        out = pull(b)
        store.hot_row0 += far
        store.staging_row0 += far
        return out

    with store:
        store.prefetch(lookups)
        with pytest.raises(HotlineError, match=r"grid \(3, 5\) does not cover the batch's 16"):
            store.gather_lookups(grid=(3, 5))
        store._pull_result = pull_then_move
        try:
            at = store.gather_lookups(grid=grid)
        finally:
            store._pull_result = pull
            store.hot_row0 -= far
            store.staging_row0 -= far
        if grid is not None:
            at = at.view(grid).T.reshape(-1)
        assert at.dtype == torch.int64 and bool((at >= far).all())
        assert torch.equal(store.rows[at - far], ref.gather(keys)[inverse])
        store.scatter_lookups()


@pytest.mark.parametrize("prefetch", ["none", "early", "late"])
@pytest.mark.parametrize("in_place", [False, True])
def test_small_and_empty_batches(prefetch, in_place):
    sizes = [10, 10]
    k = lambda *rows: as_keys(make_keys([0] * len(rows), rows))
    batches = [(k(3), None), (k(), None), (k(3), None), (k(3, 3, 3), None), (k(), None),
               (k(), None), (k(1, 4), None), (k(4), None)]
    ref, store = stores(sizes, hot_keys=make_keys(0, [1]), batch_lookups=16)
    with store:
        run(ref, store, batches, prefetch, in_place=in_place)


@pytest.mark.parametrize("prefetch", ["none", "early", "late"])
@pytest.mark.parametrize("in_place", [False, True])
def test_keys_repeated_in_consecutive_batches(prefetch, in_place):
    """The same cold and hot keys batch after batch: with the next batch prefetched before
    the scatter, its staged copies are stale and must come from the scattered rows."""
    sizes = [50]
    batch = (as_keys(make_keys(0, [1, 2, 3, 4, 5, 1, 2])), None)
    ref, store = stores(sizes, hot_keys=make_keys(0, [1, 2]), batch_lookups=16)
    with store:
        run(ref, store, [batch] * 6, prefetch, in_place=in_place)


@pytest.mark.parametrize("prefetch", ["none", "early", "late"])
@pytest.mark.parametrize("in_place", [False, True])
def test_load_and_refresh_mid_stream(prefetch, in_place):
    """The caller loads a new hot set and refreshes from the learner between batches, with a
    batch prefetched (pulled back and pushed again): leaving rows go back to host memory,
    entering rows come from it."""
    sizes = [60, 40]
    batches = random_batches(sizes, 24, 30, alpha=1.2)
    swap = make_keys([1] * 10, np.arange(10, 20))
    events = {5: lambda s: s.load(s.plan(torch.cat([b[0] for b in batches[5:10]]))),
              9: lambda s: s.load(swap),
              14: lambda s: s.refresh()}
    ref, store = stores(sizes, hot_keys=make_keys(0, np.arange(10)), hot_rows=10,
                        refresh="auto", learn_window=3, batch_lookups=32)
    with store:
        c = run(ref, store, batches, prefetch, events, in_place=in_place)
    mine = [r for r in c["loads"] if r["step"] in events]
    assert [r["source"] for r in mine] == ["given", "given", "learned"]
    assert all(r["left"] > 0 for r in mine)


def test_prefetch_is_not_sent_across_a_scheduled_load():
    """A batch whose step loads a new hot set is pushed after the load, not before."""
    sizes = [40]
    ref, store = stores(sizes, hot_rows=8, profile_batches=2, batch_lookups=32)
    with store:
        batches = random_batches(sizes, 6, 20)
        store.gather(torch.unique(batches[0][0]))
        store.prefetch(*batches[1])
        assert store.dev.in_flight == 1
        store.scatter(torch.unique(batches[0][0]), ref.gather(torch.unique(batches[0][0])))
        store.gather(torch.unique(batches[1][0]))
        store.prefetch(*batches[2])    # step 2 loads the profiled set: not pushed yet
        assert store.dev.in_flight == 0


def test_bad_keys_and_misuse_raise():
    sizes = [10, 20]
    _, store = stores(sizes, batch_lookups=16)
    with store:
        for bad, what in ((make_keys(0, [10]), "row 10 is beyond table 0's 10 rows"),
                          (make_keys(2, [0]), "names table 2; the store has tables 0..1"),
                          ([-1], "not a 32-bit key")):
            with pytest.raises(HotlineError, match=what):
                store.gather(as_keys(bad))
            with pytest.raises(HotlineError, match=what):
                store.prefetch(as_keys(bad))
        with pytest.raises(HotlineError, match="unique and sorted"):
            store.gather(as_keys([3, 1]))
        with pytest.raises(HotlineError, match="no batch gathered"):
            store.scatter(as_keys([1]), torch.zeros(1, LAYOUT.floats))
        store.prefetch(as_keys([1, 2, 2]))
        with pytest.raises(HotlineError, match="prefetched before was not gathered"):
            store.prefetch(as_keys([1]))
        for other in ([1], [], [1, 2, 3]):
            with pytest.raises(HotlineError, match="not the prefetched batch's unique keys"):
                store.gather(as_keys(other))
        rows = store.gather(as_keys([1, 2]))
        with pytest.raises(HotlineError, match="not scattered"):
            store.gather(as_keys([1, 2]))
        with pytest.raises(HotlineError, match="between batches"):
            store.load(make_keys(0, [1]))
        with pytest.raises(HotlineError, match="not the last gather's"):
            store.scatter(as_keys([1, 3]), rows)
        store.scatter(as_keys([1, 2]), rows)
        with pytest.raises(HotlineError, match="learner is not counting"):
            store.refresh()


def test_a_dma_error_raises():
    """The device's table descriptor shrunk behind the store's back: the gather's DMA refuses
    the row, and the store raises instead of training on a stale staging slot."""
    sizes = [10]
    _, store = stores(sizes, batch_lookups=16)
    with store:
        store.dev.set_table(0, store.windows[0], 5, LAYOUT.nbytes)
        with pytest.raises(HotlineError, match="gather of batch 0 reported 1 DMA errors"):
            store.gather(as_keys(make_keys(0, [2, 7])))
    _, store = stores(sizes, batch_lookups=16)
    with store:
        keys = as_keys(make_keys(0, [2, 7]))
        rows = store.gather(keys)
        store.dev.set_table(0, store.windows[0], 5, LAYOUT.nbytes)
        store.scatter(keys, rows)   # the DMA runs behind; its error comes with the next wait
        with pytest.raises(HotlineError, match="scatter of staging bank 0 reported 1 DMA errors"):
            store.read_table(0)


def test_configuration_errors():
    with pytest.raises(HotlineError, match="needs hot_keys or profile_batches"):
        HotlineStore([10], LAYOUT, hot_rows=4)
    with pytest.raises(HotlineError, match="learn_window"):
        HotlineStore([10], LAYOUT, hot_rows=4, hot_set="learn")
    with pytest.raises(HotlineError, match="refresh"):
        HotlineStore([10], LAYOUT, hot_rows=4, hot_set="learn", learn_window=2, refresh="x")


def table_configs(sizes, dim, names=None, pooling="SUM"):
    """A collection's tables ``t0, t1, ...`` of ``sizes`` rows; table t's features
    ``names[t]`` (default ``[f"f{t}"]``)."""
    from hotline.nn import TableConfig  # lazy: (see test_collection_hotline_equals_host)
    return [TableConfig(f"t{t}", n, dim, names[t] if names else [f"f{t}"], pooling)
            for t, n in enumerate(sizes)]


def train_alike(a, b, batches, head, prefetch, weights=None):
    """Train ``a`` and ``b`` (FBGEMM's layout in, [B, F * dim] out) on ``batches``, each
    step's loss ``tanh(pooled @ head)^2``, ``b`` prefetching the next batch when
    ``prefetch``; every step's losses must be equal. ``weights(indices)``: the batch's
    per-sample weights (None: unweighted)."""
    for i, (indices, offsets) in enumerate(batches):
        w = weights(indices) if weights is not None else None
        losses = []
        for model in (a, b):
            pooled = model(indices, offsets, per_sample_weights=w)
            if prefetch and i + 1 < len(batches) and model is b:
                b.prefetch(*batches[i + 1])
            loss = torch.tanh(pooled @ head).square().mean()
            loss.backward()
            losses.append(float(loss.detach()))
        assert losses[0] == losses[1], f"step {i}: losses differ"


def fbgemm_batches(sizes, steps, batch, seed=5, single=False):
    """(indices, offsets) in FBGEMM's layout (feature-major bags of 0-3 ids; ``single``: one
    each) over tables ``sizes``, their popular ids drifting by a few rows a step."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(steps):
        lengths = np.ones((len(sizes), batch), np.int64) if single else \
            rng.integers(0, 4, (len(sizes), batch))
        ids = [(rng.zipf(1.3, int(n.sum())) - 1 + s // 4) % rows for n, rows in zip(lengths, sizes)]
        offsets = np.r_[0, np.cumsum(lengths.ravel())]
        out.append((torch.from_numpy(np.concatenate(ids).astype(np.int64)),
                    torch.from_numpy(offsets.astype(np.int64))))
    return out


@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad"])
def test_collection_hotline_equals_host(optimizer, prefetch):
    """EmbeddingBagCollection(placement="hotline", kernel="torch") trains exactly as
    placement="host": the same losses and final tables (weights and optimizer state), over
    100 steps with the hot set learned, then refreshed every 20 steps, with and without
    prefetch. (The FBGEMM kernel's case: `test_collection_in_place_equals_fbgemm_tbe`.)"""
    from hotline.nn import EmbeddingBagCollection  # lazy: skips cleanly if the module moves
    sizes = [300, 120, 40]
    tables = table_configs(sizes, 8)
    host = EmbeddingBagCollection(tables, placement="host", optimizer=optimizer, lr=0.1,
                                  device="cpu")
    hot = EmbeddingBagCollection(tables, placement="hotline", optimizer=optimizer, lr=0.1,
                                 device="cpu", hot_rows=60, hot_set="learn", learn_window=5,
                                 refresh="every:20", batch_lookups=3 * 3 * 16, batch_size=16,
                                 kernel="torch")
    hot.load_state_dict(host.state_dict())
    head = torch.from_numpy(np.random.default_rng(9).standard_normal(3 * 8).astype(np.float32))
    batches = fbgemm_batches(sizes, 100, 16)
    try:
        train_alike(host, hot, batches, head, prefetch)
        a, b = host.state_dict(), hot.state_dict()
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k
        c = hot.store.counters()
        assert [r["source"] for r in c["loads"]] == ["learned"] * 5 and c["hot_share"] > 0.3
        # prefetched or not, the device saw every lookup (its learner counts them) and every
        # sample (its popular split): the popular share is of samples whose lookups are all hot
        assert c["lookups"] == sum(len(i) for i, _ in batches)
        assert c["samples"] == 100 * 16 and 0 < c["popular_share"] < 1
    finally:
        hot.close()


def tbe_reference(configs, features, lr, pooling):
    """FBGEMM's TBE (HOST, CPU, EXACT_SGD) over the whole tables of ``configs`` (TorchRec's
    DMP on a CPU): ``features`` [(feature, table)] in the collection's order."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType  # lazy: fbgemm (seconds)
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)
    return SplitTableBatchedEmbeddingBagsCodegen(
        [(c.num_embeddings, c.embedding_dim, EmbeddingLocation.HOST, ComputeDevice.CPU)
         for c in configs], feature_table_map=[t for _, t in features],
        optimizer=EmbOptimType.EXACT_SGD, learning_rate=lr,
        pooling_mode=PoolingMode.MEAN if pooling == "MEAN" else PoolingMode.SUM)


@pytest.mark.parametrize("pooling, weighted, prefetch, slots, banks, late, single", [
    ("SUM", False, True, 192, 2, False, False), ("SUM", False, False, 192, 2, False, False),
    ("MEAN", False, True, 192, 2, False, False), ("SUM", True, True, 192, 2, False, False),
    ("SUM", False, True, 24, 2, False, False), ("SUM", False, False, 24, 2, False, False),
    ("SUM", False, True, 24, 2, True, False), ("SUM", False, False, 192, 1, False, False),
    ("SUM", False, True, 192, 2, False, True), ("SUM", False, False, 24, 2, False, True)])
def test_collection_in_place_equals_fbgemm_tbe(pooling, weighted, prefetch, slots, banks, late,
                                               single):
    """kernel="fbgemm" (FBGEMM's kernels in place on the hot table and the batch's cold rows,
    each lookup given its row by the device) trains as FBGEMM's TBE over the whole tables:
    the same losses and final tables, bit for bit, over 80 multi-hot steps with empty bags,
    two features sharing a table, the hot set learned then refreshed every 16 steps, with and
    without prefetch (the next batch's cold rows gathered before this one's update). With 24
    staging ``slots`` most batches have more cold keys: those beyond the slots are updated in
    their tables (the kernel's rows are host memory itself, never copied nor grown). With one
    staging bank each batch is gathered into the bank the batch before was updated in.
    ``single``: one id per bag, where the backward is the kernel's own (`_sgd_rows`).
    ``late``: every device scatter lands 20 ms late (the keys beyond the slots are trained in
    their tables only after the batch before's scatter, which may write them)."""
    from hotline.nn import EmbeddingBagCollection  # lazy: (see above)
    sizes = [300, 120, 40]
    names = [["f0"], ["f1", "f1b"], ["f2"]]
    tables = table_configs(sizes, 8, names, pooling)
    features = [(f, t) for t, fs in enumerate(names) for f in fs]
    hot = EmbeddingBagCollection(tables, placement="hotline", lr=0.1, device="cpu",
                                 hot_rows=60, hot_set="learn", learn_window=5,
                                 refresh="every:16", batch_lookups=slots, batch_size=16,
                                 kernel="fbgemm", is_weighted=weighted, banks=banks)
    if late:
        dev, scatter = hot.store.dev, hot.store.dev._scatter
        dev._scatter = lambda bank, keys: (time.sleep(0.02), scatter(bank, keys))[1]
    rows = hot.store.rows
    ref = tbe_reference(tables, features, 0.1, pooling)
    with torch.no_grad():
        for t, w in enumerate(ref.split_embedding_weights()):
            w.copy_(hot.state_dict()[f"embedding_bags.t{t}.weight"])
    head = torch.from_numpy(np.random.default_rng(9).standard_normal(4 * 8).astype(np.float32))
    batches = fbgemm_batches(sizes[:1] + sizes[1:2] * 2 + sizes[2:], 80, 16, single=single)
    rng = np.random.default_rng(4)
    try:
        train_alike(ref, hot, batches, head, prefetch, weights=(
            lambda indices: torch.from_numpy(rng.random(len(indices)).astype(np.float32)))
            if weighted else None)
        got = hot.state_dict()
        for t, w in enumerate(ref.split_embedding_weights()):
            assert torch.equal(got[f"embedding_bags.t{t}.weight"], w), f"table {t}"
        c = hot.store.counters()
        assert len(c["loads"]) == 5 and 0.3 < c["hot_share"] < 1 and c["cold_rows"] > 0
        assert hot.store.slots == slots and hot._kernel.rows is hot.store.rows is rows
        assert hot.store.rows.data_ptr() == hot.store.host_rows.ctypes.data
        assert (c["host_rows"] > 0) == (slots < 192)
    finally:
        hot.close()


@pytest.mark.parametrize("batch", [16, 1])
def test_sort_free_backward_equals_fbgemm(batch):
    """`TBEKernel`'s own SGD backward (no sort: `_sgd_rows`, taken at no more lookups than
    bags) against FBGEMM's EXACT_SGD backward on a copy of the same rows, bit for bit: rows
    and outputs over 12 steps of empty bags, bags of one and of two lookups (a row twice in
    a bag), two features on one table, each table's rows a dense hot range and a staging
    range as `HotlineStore` lays them out, for B = 16 and a one-sample batch; an empty batch
    updates nothing; more lookups than bags go to FBGEMM's backward."""
    from hotline.nn.kernels import TBEKernel, _sgd_rows   # lazy: fbgemm_gpu (seconds)
    rng = np.random.default_rng(11)
    rows = torch.from_numpy(rng.standard_normal((5000, 8)).astype(np.float32))
    start, tables = rows.clone(), np.array([0, 1, 1, 2])
    ours, theirs = TBEKernel(rows, tables, 0.05), TBEKernel(rows.clone(), tables, 0.05)
    for step in range(12):
        lengths = rng.permutation(np.r_[[0, 2] * (batch // 2 + 1), [1] * (4 * batch)][:4 * batch])
        lengths[-1] += 4 * batch - lengths.sum()   # as many lookups as bags
        table = np.repeat(tables, batch).repeat(lengths)
        hot = 3000 + 300 * table + rng.zipf(1.4, len(table)) % 300    # each table's hot rows
        staged = 4500 + 100 * table + rng.integers(0, 60, len(table))  # and staging slots
        indices = torch.from_numpy(np.where(rng.random(len(table)) < 0.7, hot, staged))
        offsets = torch.from_numpy(np.r_[0, np.cumsum(lengths)])
        grad = torch.from_numpy(rng.standard_normal((batch, 4 * 8)).astype(np.float32))
        a, b = ours(indices, offsets), theirs.tbe(indices, offsets)
        assert torch.equal(a, b) and "SortFree" in type(a.grad_fn).__name__
        a.backward(grad)
        b.backward(grad)
        assert torch.equal(ours.rows, theirs.rows), step
    assert not torch.equal(ours.rows, start)
    before = ours.rows.clone()
    empty = torch.zeros(0, dtype=torch.int64)
    ours(empty, torch.zeros(4 * batch + 1, dtype=torch.int64)).backward(torch.ones(batch, 32))
    assert torch.equal(ours.rows, before)
    more = ours(torch.arange(8 * batch) + 3000, torch.arange(4 * batch + 1) * 2)
    assert "SortFree" not in type(more.grad_fn).__name__
    r = np.ones((4, 2), np.float32)   # a row twice: one update with the sum
    assert _sgd_rows(np.array([2, 0, 2]), np.array([0, 2, 3]), np.array([[1, 2, 4, 8]], np.float32),
                     2, 0.5, r, np.empty(3, np.int64)) == 2
    assert r.tolist() == [[0.5, 0.0], [1, 1], [-1.5, -4.0], [1, 1]]


@pytest.mark.parametrize("kernel", ["fbgemm", "torch"])
def test_evaluation_passes_the_pipeline_by(kernel):
    """A forward under no_grad with no batch announced (an evaluation) reads the current rows
    (hot ones from the hot table) past the device: host's outputs, and the device neither
    counts it nor steps the hot-set schedule; training then goes on as host's."""
    from hotline.nn import EmbeddingBagCollection  # lazy: (see above)
    sizes = [200, 80]
    tables = table_configs(sizes, 8)
    host = EmbeddingBagCollection(tables, placement="host", lr=0.1, device="cpu")
    hot = EmbeddingBagCollection(tables, placement="hotline", lr=0.1, device="cpu", hot_rows=40,
                                 hot_set="learn", learn_window=3, refresh="every:4",
                                 batch_lookups=3 * 2 * 16, batch_size=16, kernel=kernel)
    hot.load_state_dict(host.state_dict())
    batches = fbgemm_batches(sizes, 12, 16)
    try:
        for i, (indices, offsets) in enumerate(batches[:8]):
            for m in (host, hot):
                m(indices, offsets).square().sum().backward()
            if i in (2, 5):
                before = hot.store.counters()
                with torch.no_grad():
                    for ev, eo in batches[8:]:
                        assert torch.allclose(hot(ev, eo), host(ev, eo), rtol=0, atol=1e-6)
                after = hot.store.counters()
                for k in ("lookups", "samples", "steps", "loads"):
                    assert after[k] == before[k], k
        assert [r["step"] for r in hot.store.counters()["loads"]] == [3, 7]   # 8 steps trained
        for t in range(2):
            assert torch.allclose(hot.store.read_table(t), host.store.read_table(t), rtol=0,
                                  atol=1e-6)
    finally:
        hot.close()


def test_kernel_choice():
    """kernel="fbgemm" where it cannot run says why in one line; "auto" then takes the
    torch path; a batch of more cold keys than the staging slots goes in place too, the host
    moving the rows beyond the slots."""
    from hotline.nn import EmbeddingBagCollection  # lazy: (see above)
    tables = table_configs([50], 4)
    with pytest.raises(HotlineError, match="the store has no in-place batches"):
        EmbeddingBagCollection(tables, placement="host", kernel="fbgemm")
    with pytest.raises(HotlineError, match="keeps state in the row"):
        EmbeddingBagCollection(tables, placement="hotline", kernel="fbgemm",
                               optimizer="rowwise_adagrad", hot_keys=make_keys(0, [1]))
    assert EmbeddingBagCollection(tables, placement="host")._kernel is None
    with pytest.raises(HotlineError, match="kernel 'x': expected one of auto, fbgemm, torch"):
        EmbeddingBagCollection(tables, kernel="x")
    hot = EmbeddingBagCollection(tables, placement="hotline", kernel="auto", lr=0.1,
                                 hot_keys=make_keys(0, [1]), batch_lookups=8, batch_size=4)
    host = EmbeddingBagCollection(tables, placement="host", lr=0.1)
    hot.load_state_dict(host.state_dict())
    try:
        assert hot._kernel is not None
        for n in (6, 30):   # within and beyond the 8 staging slots
            indices, offsets = torch.arange(n) % 50, torch.tensor([0, n // 2, n // 2, n - 1, n])
            for m in (host, hot):
                m(indices, offsets).sum().backward()
            assert torch.allclose(hot.state_dict()["embedding_bags.t0.weight"],
                                  host.state_dict()["embedding_bags.t0.weight"], rtol=0, atol=1e-6)
        assert hot.store.counters()["host_rows"] > 0 and hot._kernel.rows is hot.store.rows
    finally:
        hot.close()


def test_gather_positions_are_checked():
    """`gather(keys, positions=)`: positions that are not each prefetched lookup's place in
    ``keys`` are not trusted (the store searches, as without them): HostStore's rows all the
    same; keys that are not the batch's unique keys raise, whatever the positions."""
    sizes = [10, 20]
    ref, store = stores(sizes, batch_lookups=16, hot_keys=make_keys(1, [2]))
    lookups = as_keys(make_keys(1, [4, 2, 4, 7, 9]))
    keys, inverse = torch.unique(lookups, return_inverse=True)
    with store:
        for wrong in (inverse, inverse.flip(0), inverse[:3], inverse + 1, inverse - 1,
                      inverse.double(), torch.tensor([1, 0, 1, 3, 2])):
            store.prefetch(lookups)
            rows = store.gather(keys, positions=wrong)
            assert torch.equal(rows, ref.gather(keys)), wrong
            store.scatter(keys, rows)
        store.prefetch(lookups)
        for wrong_keys in (make_keys(1, [2, 4, 7, 9, 11]), make_keys(1, [2, 4, 7])):
            with pytest.raises(HotlineError, match="not the prefetched batch's unique keys"):
                store.gather(as_keys(wrong_keys), positions=inverse)
        with pytest.raises(HotlineError, match="row 30 is beyond table 1's 20 rows"):
            store.gather(as_keys(make_keys(1, [2, 4, 7, 30])), positions=inverse)


@pytest.mark.parametrize("lookups", [[4, 2, 4, 7, 9], [5, 3, 1, 0, 6, 2, 8, 9, 3] * 3])
def test_prefetch_unique_keys_are_checked(lookups):
    """`prefetch(..., unique=)`: unique keys that are not the lookups' raise at the gather,
    which drops the batch; unsorted ones raise at once; the right ones give HostStore's rows
    (a batch of more lookups than the staging slots is pushed as them)."""
    ref, store = stores([10, 20], batch_lookups=8, hot_keys=make_keys(1, [2]))
    lookups = as_keys(make_keys(1, lookups))
    keys = torch.unique(lookups)
    with store:
        with pytest.raises(HotlineError, match="keys must be unique and sorted"):
            store.prefetch(lookups, unique=keys.flip(0))
        for wrong in (keys[1:], torch.cat([keys, as_keys(make_keys(1, [19]))])):
            store.prefetch(lookups, unique=wrong)
            with pytest.raises(HotlineError, match="unique keys given to prefetch were not"):
                store.gather(keys)   # the batch is dropped: announced again below
        store.prefetch(lookups, unique=keys)
        rows = store.gather(keys)
        assert torch.equal(rows, ref.gather(keys))
        store.scatter(keys, rows)


def test_sample_order_is_a_stable_sort_by_sample():
    """The collection announces a batch sample by sample: its O(lookups) order equals a
    stable argsort of each lookup's sample (bags feature-major, empty bags included), and its
    inverse is the permutation's inverse; single-hot (a transpose) and multi-hot."""
    from hotline.nn import EmbeddingBagCollection  # lazy: (see above)
    sizes = [50, 30, 20]
    tables = table_configs(sizes, 4)
    ebc = EmbeddingBagCollection(tables, placement="host", device="cpu")
    rng = np.random.default_rng(3)
    for batch, most in ((0, 4), (1, 4), (7, 4), (7, 1), (5, 2), (3, 1), (7, 1)):
        lengths = torch.from_numpy(rng.integers(0 if most > 1 else 1, most, len(sizes) * batch)
                                   if most > 1 else np.ones(len(sizes) * batch, np.int64))
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        bag = torch.arange(len(lengths)).repeat_interleave(lengths)
        checked = ebc._keys(torch.zeros(len(bag), dtype=torch.int64), offsets)
        assert checked.single_hot == bool((lengths == 1).all())
        order, per_sample = ebc._sample_order(checked)
        expected = torch.argsort(bag % max(batch, 1), stable=True)
        assert torch.equal(order.by_sample, expected)
        assert np.array_equal(order.inverse, torch.argsort(expected).numpy())
        values = rng.permutation(len(bag)).astype(np.int64)   # a value per input lookup
        assert np.array_equal(order.to_samples(values), values[expected.numpy()])
        by_sample = checked.keys_by_sample(order)   # the device's keys, both paths
        assert by_sample.dtype == np.uint32 and \
            np.array_equal(by_sample, checked.keys.numpy()[expected.numpy()])
        assert np.array_equal(order.to_features(values[expected.numpy()]), values)
        assert (order.grid is not None) == checked.single_hot   # single-hot: a transpose
        assert np.array_equal(per_sample, np.bincount(bag % max(batch, 1), minlength=batch))


@pytest.mark.parametrize("kernel", ["torch", "fbgemm"])
def test_collection_prefetch_reuses_only_the_same_unmodified_batch(kernel):
    """A forward of the tensors given to `prefetch` reuses their checked keys; of equal copies
    it trains the same; of the same tensors modified in place it is refused (the batch
    announced is not this one), not trained on the keys announced. With FBGEMM's kernel
    (in place) too: the ids announced are views of the tensors, so modified they read equal."""
    from hotline.nn import EmbeddingBagCollection  # lazy: (see above)
    sizes = [40, 30]
    tables = table_configs(sizes, 4)
    host = EmbeddingBagCollection(tables, placement="host", lr=0.1, device="cpu")
    # batches of more lookups than the staging slots: pushed as the unique keys announced
    hot = EmbeddingBagCollection(tables, placement="hotline", lr=0.1, device="cpu",
                                 hot_keys=make_keys(0, [0, 1, 2]), batch_lookups=16,
                                 batch_size=8, kernel=kernel)
    hot.load_state_dict(host.state_dict())
    batches = fbgemm_batches(sizes, 4, 8)
    try:
        for i, (indices, offsets) in enumerate(batches[:3]):
            if i:   # prefetched: the same tensors (step 1) or equal copies (step 2)
                hot.prefetch(indices, offsets)
                indices, offsets = (indices, offsets) if i == 1 else (indices.clone(),
                                                                      offsets.clone())
            for ebc in (host, hot):
                ebc(indices, offsets).sum().backward()
        # FBGEMM's kernel sums a row's gradients in its own order: equal within float rounding
        torch.testing.assert_close(hot.state_dict()["embedding_bags.t0.weight"],
                                   host.state_dict()["embedding_bags.t0.weight"],
                                   rtol=0 if kernel == "torch" else 1e-6,
                                   atol=0 if kernel == "torch" else 1e-7)
        indices, offsets = batches[3]
        hot.prefetch(indices, offsets)
        indices[0] = next(v for v in range(min(sizes)) if v not in set(indices.tolist()))
        with pytest.raises(HotlineError, match="not the prefetched batch's unique keys"):
            hot(indices, offsets)
    finally:
        hot.close()


@pytest.mark.slow
def test_sim_device_equals_host(tmp_path, simulator_or_skip):
    """The same store over the accelerator RTL (sim://verilator): prefetched batches, a
    cold-only learning window, the learned set loaded and refreshed in place."""
    simulator_or_skip("verilator")
    sizes = [50, 30]
    ref, store = stores(sizes, device_url="sim://verilator", hot_rows=12, hot_set="learn",
                        learn_window=3, refresh="every:4", batch_lookups=32, batch_size=8,
                        device_options=dict(build_dir=tmp_path / "build"))
    with store:
        c = run(ref, store, random_batches(sizes, 12, 24), "mixed")
    assert [r["source"] for r in c["loads"]] == ["learned"] * 3 and c["hot_share"] > 0


def test_refresh_stale_takes_each_key_from_its_part():
    """`refresh_stale` (a compiled hash match) gives every key held by a part of ``prev`` that
    part's row, and leaves the others, against a dict: structured keys (dense rows of one and
    of 26 tables, the real hot set of a Zipf stream), parts in any order, a part given with
    ``at`` (each key's row elsewhere), a key twice in a part (after a cold-key overflow: the
    same row), empty parts, no key in common, and more keys than the part by far."""
    from hotline.nn.hotline_store import refresh_stale
    rng = np.random.default_rng(11)
    one = make_keys(np.zeros(5000, int), np.arange(5000))
    many = make_keys(np.repeat(np.arange(26), 300), np.tile(np.arange(300), 26))
    zipf = np.unique(many[np.minimum(rng.zipf(1.2, 20000) - 1, len(many) - 1)])
    for universe in (one, many, zipf):
        universe = universe.astype(np.uint32)
        for n_parts, share in ((1, 0.5), (2, 0.3), (2, 0.0), (1, 1.0)):
            pool = rng.permutation(universe)
            parts, want, at_used = [], {}, False
            cut = np.array_split(pool[:len(pool) // 2], n_parts)
            for p, keys in enumerate(cut):
                rows = rng.standard_normal((len(keys), 3)).astype(np.float32)
                if p == 1 and len(keys):   # given through ``at``: rows elsewhere, reversed
                    at = np.arange(len(keys))[::-1].copy()
                    parts.append((keys, rows[::-1].copy(), at))
                    at_used = True
                elif len(keys) > 1:   # a key twice, with the same row
                    keys, rows = np.r_[keys, keys[:1]], np.r_[rows, rows[:1]]
                    parts.append((keys, rows))
                else:
                    parts.append((keys, rows))
                want.update({int(k): r for k, r in zip(keys, rows)})
            held = pool[:int(share * len(pool) / 2)]
            other = pool[len(pool) // 2:]
            keys = rng.permutation(np.r_[held, other[:len(other) // 3]]).astype(np.uint32)
            before = rng.standard_normal((len(keys), 3)).astype(np.float32)
            got = before.copy()
            refresh_stale(got, keys, parts + [(np.zeros(0, np.uint32), np.zeros((0, 3)))])
            for i, k in enumerate(keys.tolist()):
                np.testing.assert_array_equal(got[i], want.get(k, before[i]), err_msg=str(k))
            assert at_used == (n_parts == 2)
