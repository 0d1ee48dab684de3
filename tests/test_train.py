"""DLRM training: hotline vs baseline vs device-only vs an independent dense reference,
checkpoint/resume, the CLI and its errors."""
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from helpers import real_file
from hotline import cli
from hotline.contract.errors import HotlineError
from hotline.contract.keys import split_keys
from hotline.data import Dataset, load_dataset
from hotline.train.dlrm import DLRM
from hotline.data.generator import synth_criteo
from hotline.data.spec import open_data
from hotline.train import TrainConfig, auc, prepare_data, train

DEFAULT_THREADS = torch.get_num_threads()
torch.set_num_threads(1)  # tiny models: one thread is faster, and the cores are shared
SMALL = dict(dim=8, bottom=(16,), top=(16,), batch_size=64)


def generated(n=640, fold=400, seed=1):
    ds = synth_criteo(n, seed=seed)
    return prepare_data(ds, 0.1, fold)


def run(data, mode, **kw):
    cfg = TrainConfig(mode=mode, **{**SMALL, **kw})
    rep, trainer = train(data, cfg, keep=True)
    try:
        return rep, trainer.tables()
    finally:
        trainer.close()


def initial_tables(data, cfg):
    """DLRM's initialisation, written out independently: uniform(-1/sqrt(rows), 1/sqrt(rows))."""
    out = []
    for t, rows in enumerate(data.table_sizes):
        rng = np.random.default_rng([cfg.seed, 1000 + t])
        a = np.float32(1 / math.sqrt(rows))
        out.append(rng.random((int(rows), cfg.dim), dtype=np.float32) * (2 * a) - a)
    return out


def reference_train(data, cfg):
    """Dense full-table training in plain torch: every table a tensor, F.embedding lookups,
    the whole mini-batch at once, the optimizer applied to every row (untouched rows get a
    zero gradient, which changes nothing). Shares only the DLRM module with the package."""
    torch.manual_seed(cfg.seed)
    model = DLRM(data.dense.shape[1], data.num_tables, cfg.dim, cfg.bottom, cfg.top)
    opt = (torch.optim.SGD(model.parameters(), lr=cfg.lr) if cfg.optimizer == "sgd"
           else torch.optim.Adagrad(model.parameters(), lr=cfg.lr, eps=1e-8))
    tables = [torch.from_numpy(t) for t in initial_tables(data, cfg)]
    states = [torch.zeros(int(rows)) for rows in data.table_sizes]
    F = data.num_tables
    losses = []
    for epoch in range(cfg.epochs):
        for s0 in range(0, data.n_train, cfg.batch_size):
            s1 = min(s0 + cfg.batch_size, data.n_train)
            n = s1 - s0
            leaves = [t.clone().requires_grad_() for t in tables]
            keys = data.keys[data.offsets[s0]:data.offsets[s1]]
            rows = torch.from_numpy(split_keys(keys)[1])
            lengths = data.lengths[s0:s1]
            if np.all(lengths == 1):
                rows = rows.view(n, F)
                emb = torch.stack([leaves[f][rows[:, f]] for f in range(F)], 1)
            else:
                pos, parts = 0, [[None] * F for _ in range(n)]
                for i in range(n):
                    for f in range(F):
                        k = lengths[i, f]
                        parts[i][f] = leaves[f][rows[pos:pos + k]].sum(0) if k else torch.zeros(cfg.dim)
                        pos += k
                emb = torch.stack([torch.stack(p) for p in parts])
            logits = model(torch.from_numpy(data.dense[s0:s1]), emb)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, torch.from_numpy(data.label[s0:s1]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            with torch.no_grad():
                for t, leaf in enumerate(leaves):
                    g = leaf.grad
                    if cfg.optimizer == "sgd":
                        tables[t] = tables[t] - cfg.lr * g
                    else:
                        states[t] = states[t] + (g * g).mean(1)
                        tables[t] = tables[t] - cfg.lr * g / (states[t].sqrt() + 1e-8)[:, None]
    return losses, [torch.cat([t, s[:, None]], 1).numpy() if cfg.optimizer == "adagrad"
                    else t.numpy() for t, s in zip(tables, states)]


def assert_same_run(a, b, rtol=1e-5):
    (ra, ta), (rb, tb) = a, b
    np.testing.assert_allclose(rb["losses"], ra["losses"], rtol=rtol)
    for x, y in zip(ta, tb):
        np.testing.assert_allclose(y, x, rtol=rtol, atol=1e-5)  # float reordering


def tables_of(tables, cfg):
    width = cfg.dim + (1 if cfg.optimizer == "adagrad" else 0)
    return [t[:, :width] for t in tables]


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_hotline_equals_baseline_device_only_and_reference_on_generator(optimizer):
    data = generated()
    kw = dict(optimizer=optimizer, hot_rows=300, epochs=2)
    base = run(data, "baseline", **kw)
    hot = run(data, "hotline", **kw)
    split = run(data, "hotline", micro_batches="split", **kw)  # the GPU's two passes
    dev = run(data, "device-only", **kw)
    assert_same_run(base, hot)
    assert_same_run(base, split)
    assert_same_run(base, dev)
    cfg = TrainConfig(mode="baseline", **SMALL, **kw).check()
    ref_losses, ref_tables = reference_train(data, cfg)
    assert_same_run((base[0], tables_of(base[1], cfg)), ({"losses": ref_losses}, ref_tables))
    r = hot[0]
    c = r["counters"]
    # the device did the cold traffic: every cold row gathered and scattered, no errors
    assert c["gather_rows"] == c["scatter_rows"] == c["cold_rows"] > 0
    assert c["window_errors"] == c["axi_errors"] == 0
    assert 0 < r["hot_lookup_fraction"] < 1 and c["hits"] > 0
    assert r["steps"] == 2 * math.ceil(data.n_train / 64) == len(r["losses"])
    assert r["test_auc"] is not None and len(r["history"]) == 2
    # hotline ships fewer embedding bytes than the baseline
    assert r["bytes_host_to_device"] < base[0]["bytes_host_to_device"]
    # the device worked beside the trainer: per step (busy, waited), adding up to the totals;
    # the setup (descriptors, hot-set load) and the drains of evaluation are outside the steps
    steps = np.asarray(r["step_device_seconds"])
    assert steps.shape == (r["steps"], 2) and (steps >= 0).all() and steps[:, 0].sum() > 0
    np.testing.assert_allclose(steps.sum(0), [r["device_busy_seconds"], r["device_wait_seconds"]])
    assert r["device_other_seconds"] > 0
    assert r["device_busy_seconds"] > 0 and 0.0 <= r["overlap"] <= 1.0
    assert base[0]["overlap"] is None and base[0]["device_busy_seconds"] == 0
    # the host row work of baseline's steps, and the Amdahl bound it puts on hotline
    b = base[0]
    assert 0 < b["host_rows_seconds"] < b["train_seconds"]
    assert b["speedup_bound"] == pytest.approx(
        b["train_seconds"] / (b["train_seconds"] - b["host_rows_seconds"]))
    assert r["speedup_bound"] is None and r["host_rows_seconds"] == 0


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_learned_and_refreshed_hot_sets_train_exactly(optimizer):
    """--hot-set learn (the first window with every row cold, then the learner's top-K) and
    --refresh (the set migrates in place while training) keep baseline's trajectory, and the
    learned set covers >= 0.98 of what the exact top-K of its window covers."""
    data = generated()
    kw = dict(optimizer=optimizer, hot_rows=300, epochs=2)
    base = run(data, "baseline", **kw)
    learn = run(data, "hotline", hot_set="learn", learn_window=128, refresh="every:4", **kw)
    auto = run(data, "hotline", refresh="auto", learn_window=64, **kw)
    assert_same_run(base, learn)
    assert_same_run(base, auto)
    r = learn[0]
    steps = r["steps"]                  # 2 epochs x 9 steps: loads before steps 2, 6, 10, 14
    assert [x["step"] for x in r["hot_loads"]] == list(range(2, steps, 4))
    assert r["refreshes"] == len(r["hot_loads"]) - 1 and r["learn_window_steps"] == 2
    share = np.asarray(r["step_hot_share"])
    assert len(share) == steps and (share[:2] == 0).all() and (share[2:] > 0).all()
    for x in r["hot_loads"]:
        assert x["window_steps"] == [x["step"] - 2, x["step"]]
        assert x["learned_coverage"] >= 0.98 * x["exact_coverage"] > 0
    # the learner is sized for K with the window's lookups as its distinct-key bound
    from hotline.contract.config import learner_geometry, max_batch_lookups
    most = max_batch_lookups(data.offsets[:data.n_train + 1], 64)
    for rep, window in ((r, 2), (auto[0], 1)):
        dev = rep["device"]
        assert (dev["accelerator_learner_buckets"], dev["accelerator_learner_ways"]) == \
            learner_geometry(300, window * most)
    # the device's hit counter agrees with the per-step shares
    lookups = [int(data.offsets[min(s0 + 64, data.n_train)] - data.offsets[s0])
               for s0 in range(0, data.n_train, 64)] * 2
    assert round(float(np.dot(share, lookups))) == r["counters"]["hits"]
    assert r["counters"]["gather_rows"] == r["counters"]["scatter_rows"]


def test_refresh_auto_follows_drift_where_off_decays():
    """On the drifting generator: with --refresh off the first window's exact set decays
    (its per-window hot share equals `hot_share_decay`'s numpy count of the same set), while
    --refresh auto re-learns and stays within 2 points of the oracle that re-plans every window
    exactly; the losses stay baseline's."""
    from hotline.data.drift import hot_share_decay
    data = prepare_data(open_data("synth:criteo-kaggle:24000:0:drift=0.9"), 0.1, 20000)
    W, K, B = 8, 3000, 64
    kw = dict(hot_rows=K, profile_fraction=W * B / data.n_train)
    n = data.n_train
    ref = hot_share_decay(data.keys[:data.offsets[n]], data.offsets[:n + 1], B, W, K)
    base = run(data, "baseline", **kw)
    off = run(data, "hotline", refresh="off", **kw)
    auto = run(data, "hotline", refresh="auto", **kw)
    assert_same_run(base, off)
    assert_same_run(base, auto)

    def windows(r):
        share = np.asarray(r[0]["step_hot_share"])
        return np.array([share[i:i + W].mean() for i in range(0, len(share), W)])
    got_off, got_auto = windows(off), windows(auto)
    full = n // (W * B)
    np.testing.assert_allclose(got_off[:full], ref.off[:full], atol=2e-3)
    assert ref.oracle[-10:].mean() - got_off[-10:].mean() > 0.03        # off decays
    assert auto[0]["refreshes"] >= 2
    assert (ref.oracle[1:] - got_auto[1:]).mean() < 0.02                  # auto keeps up
    assert got_auto[-10:].mean() - got_off[-10:].mean() > 0.015


CRITEO_FILES = ["train_head1999.csv.gz", "test_head1999.csv.gz", "train_random4584.csv.gz",
                "train_random45840_7cat.arff.gz", "train_rows0-206k_sub1pct.csv.gz",
                "train_rows39.80M-39.99M_sub1pct.csv.gz"]


@pytest.mark.parametrize("name", CRITEO_FILES)
def test_learned_hot_set_on_every_real_criteo_file(name):
    """--hot-set learn on each real Criteo file (its first 2,000 samples; the learner counts
    the first 512, then every 8 steps the 8 before; K = 10% of the rows): each learned set
    covers >= 0.98 of what the exact top-K of its window covers, and training stays
    baseline's (SGD; adagrad on one)."""
    ds = load_dataset(real_file(f"criteo_kaggle/{name}"), limit=2000)
    data = prepare_data(ds, 0.1)
    optimizer = "adagrad" if name.startswith("train_random4584") else "sgd"
    kw = dict(optimizer=optimizer, hot_fraction=0.1)
    base = run(data, "baseline", **kw)
    learn = run(data, "hotline", hot_set="learn", learn_window=512, refresh="every:8", **kw)
    assert_same_run(base, learn)
    loads = learn[0]["hot_loads"]
    assert len(loads) == 3 and loads[0]["window_steps"] == [0, 8]
    for x in loads:
        assert x["coverage_ratio"] >= 0.98, x


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_hotline_equals_baseline_on_real_criteo(optimizer):
    ds = load_dataset(real_file("criteo_kaggle/train_random4584.csv.gz"), limit=700)
    data = prepare_data(ds, 0.1)
    kw = dict(optimizer=optimizer, hot_rows=800)
    base, hot = run(data, "baseline", **kw), run(data, "hotline", **kw)
    assert_same_run(base, hot)
    assert hot[0]["counters"]["cold_rows"] > 0 and hot[0]["popular_fraction"] > 0


def test_multi_hot_with_empty_bags():
    rng = np.random.default_rng(4)
    n, F = 300, 3
    lengths = rng.integers(0, 4, (n, F)).astype(np.int32)
    sizes = np.array([50, 7, 300])
    tables = np.repeat(np.broadcast_to(np.arange(F), (n, F)).ravel(), lengths.ravel())
    indices = (rng.zipf(1.5, lengths.sum()) - 1) % sizes[tables]
    ds = Dataset(lengths, indices.astype(np.int64), sizes, rng.random((n, 2)).astype(np.float32),
                 (rng.random(n) < 0.3).astype(np.float32), "multi")
    data = prepare_data(ds, 0.0)
    kw = dict(optimizer="adagrad", hot_rows=20, batch_size=32, lr=0.1)
    base, hot = run(data, "baseline", **kw), run(data, "hotline", **kw)
    assert_same_run(base, hot)
    assert hot[0]["popular_fraction"] > 0
    cfg = TrainConfig(mode="baseline", **{**SMALL, **kw}).check()
    ref_losses, ref_tables = reference_train(data, cfg)
    assert_same_run((base[0], tables_of(base[1], cfg)), ({"losses": ref_losses}, ref_tables))


def test_cold_set_overflow_still_trains_exactly(monkeypatch):
    """A tiny cold-key set overflows: keys repeat across cold slots; training must not care."""
    from hotline.contract.config import AcceleratorConfig
    orig = AcceleratorConfig.for_workload.__func__

    def tiny(cls, hot_rows, batch_size, max_batch_lookups, **kw):
        c = orig(cls, hot_rows, batch_size, max_batch_lookups, **kw)
        return AcceleratorConfig(**{**c.as_dict(), "cold_capacity": 64})
    monkeypatch.setattr(AcceleratorConfig, "for_workload", classmethod(tiny))
    data = generated(n=320)
    kw = dict(optimizer="adagrad", hot_rows=50)
    base, hot = run(data, "baseline", **kw), run(data, "hotline", **kw)
    assert hot[0]["counters"]["overflows"] > 0
    assert_same_run(base, hot)


def test_hot_keys_in_the_cam_stash_are_trained_in_range(monkeypatch):
    """A hot key the CAM puts in its stash has slot cam_entries + i (docs/design.md, "Keys and
    slots"): the hot table has a row for it (the device's `hot_slots` count the stash), and that
    row is trained like any other hot row. A 2-way CAM with one kick stashes 4 of 50 keys."""
    from hotline.contract.config import AcceleratorConfig
    orig = AcceleratorConfig.for_workload.__func__

    def stashing(cls, hot_rows, batch_size, max_batch_lookups, **kw):
        c = orig(cls, hot_rows, batch_size, max_batch_lookups, **kw)
        return AcceleratorConfig(**{**c.as_dict(), "cam_ways": 2, "cam_max_kicks": 1})
    monkeypatch.setattr(AcceleratorConfig, "for_workload", classmethod(stashing))
    data = generated(n=320)
    kw = dict(hot_rows=50)
    base = run(data, "baseline", **kw)
    cfg = TrainConfig(mode="hotline", **{**SMALL, **kw})
    rep, trainer = train(data, cfg, keep=True)
    try:
        store = trainer.embedding.store
        p, geometry = store.placement, store.config
        stashed = p.slots >= geometry.cam_entries
        assert stashed.sum() == 4 and not p.failed.size
        slots = geometry.cam_entries + geometry.cam_stash
        assert store.dev.info()["hot_slots"] == slots == len(store.hot_table)
        assert p.slots.max() < slots
        tables = trainer.tables()
    finally:
        trainer.close()
    assert rep["device"]["hot_slots"] == slots
    assert_same_run(base, (rep, tables))
    # the stashed rows were looked up and updated
    start = initial_tables(data, cfg)
    keys = p.keys[stashed]
    t, r = split_keys(keys)
    batch_keys = data.keys[:data.offsets[data.n_train]]
    assert np.isin(keys, batch_keys).all()
    for ti, ri in zip(t, r):
        assert not np.array_equal(tables[ti][ri, :cfg.dim], start[ti][ri])


@pytest.mark.parametrize("mode", ["hotline", "baseline"])
def test_checkpoint_resume_is_bit_identical(mode, tmp_path):
    data = generated(n=400)
    kw = dict(optimizer="adagrad", hot_rows=200)
    straight = run(data, mode, epochs=2, **kw)
    ck = tmp_path / "ck.pt"
    first = run(data, mode, epochs=1, checkpoint=str(ck), **kw)
    resumed = run(data, mode, epochs=2, resume=str(ck), **kw)
    # mid-epoch: stop after 8 steps (checkpoint taken there), then resume to the end
    ck2 = tmp_path / "mid.pt"
    part = run(data, mode, epochs=2, checkpoint=str(ck2), checkpoint_every=3, max_steps=8, **kw)
    mid = run(data, mode, epochs=2, resume=str(ck2), **kw)
    assert len(part[0]["losses"]) == 8
    for r in (resumed, mid):
        assert r[0]["losses"] == straight[0]["losses"]
        for x, y in zip(r[1], straight[1]):
            np.testing.assert_array_equal(x, y)
        assert [h["train_logloss"] for h in r[0]["history"]] == \
               [h["train_logloss"] for h in straight[0]["history"]]
    assert first[0]["losses"] == straight[0]["losses"][:len(first[0]["losses"])]
    if mode == "hotline":
        keys = ("lookups", "hits", "cold_rows", "gather_rows", "scatter_rows")
        assert {k: mid[0]["counters"][k] for k in keys} == {k: straight[0]["counters"][k] for k in keys}


@pytest.mark.parametrize("refresh, stop", [("every:4", 8), ("every:4", 9), ("auto", 9)])
def test_checkpoint_resume_across_refreshes_is_bit_identical(refresh, stop, tmp_path):
    """Stopped at step 8 (a learner window starts there) or 9 (inside it: the window restarts
    at the resume) and resumed: the same losses and tables as a straight run."""
    data = generated(n=400)
    kw = dict(optimizer="adagrad", hot_rows=200, epochs=3, hot_set="learn", learn_window=128,
              refresh=refresh)
    straight = run(data, "hotline", **kw)
    ck = tmp_path / "ck.pt"
    part = run(data, "hotline", checkpoint=str(ck), checkpoint_every=1, max_steps=stop, **kw)
    resumed = run(data, "hotline", resume=str(ck), **kw)
    assert len(part[0]["losses"]) == stop
    assert len(straight[0]["hot_loads"]) >= (3 if refresh.startswith("every") else 1)
    assert resumed[0]["losses"] == straight[0]["losses"]
    for x, y in zip(resumed[1], straight[1]):
        np.testing.assert_array_equal(x, y)
    assert len(resumed[0]["step_hot_share"]) == straight[0]["steps"]


@pytest.fixture
def default_threads():
    """torch's default thread count, at least 2 (so that parallel CPU kernels run in parallel),
    as `hotline train` has without --threads."""
    torch.set_num_threads(max(2, DEFAULT_THREADS))
    yield
    torch.set_num_threads(1)


def test_row_gradient_sums_in_lookup_order_at_several_threads(default_threads):
    """The collection's row update (SGD, lr 1: the row minus its gradient) sums each row's
    lookup gradients in lookup order, whatever the thread count (advanced indexing's backward
    adds them with parallel atomics instead, in an order that changes from run to run)."""
    from hotline.nn import EmbeddingBagCollection, TableConfig
    rng = np.random.default_rng(0)
    R, B, D = 3000, 512, 16
    tables = [TableConfig(f"t{t}", R, D, [f"f{t}"]) for t in range(26)]
    idx = (rng.zipf(1.3, 26 * B) - 1) % R          # hot rows: many lookups per row
    offsets = torch.arange(26 * B + 1)
    g = rng.standard_normal((B, 26 * D)).astype(np.float32)
    per_lookup = g.reshape(B, 26, D).transpose(1, 0, 2).reshape(-1, D)   # feature-major
    for _ in range(5):
        ebc = EmbeddingBagCollection(tables, placement="device", lr=1.0, device="cpu")
        before = [ebc.state_dict()[f"embedding_bags.t{t}.weight"].numpy() for t in range(26)]
        want = np.zeros((26, R, D), np.float32)
        np.add.at(want, (np.repeat(np.arange(26), B), idx), per_lookup)   # in lookup order
        ebc(torch.from_numpy(idx), offsets).backward(torch.from_numpy(g))
        for t in range(26):
            np.testing.assert_array_equal(
                ebc.state_dict()[f"embedding_bags.t{t}.weight"].numpy(), before[t] - want[t])


@pytest.mark.parametrize("mode", ["baseline", "hotline"])
def test_default_threads_runs_and_resume_are_bit_identical(mode, tmp_path, default_threads):
    """Two runs at torch's default thread count give the same per-step losses and tables, and
    a resumed run equals an uninterrupted one. Batches of 256 x 26 lookups of dim 8 are large
    enough for torch's parallel CPU kernels."""
    data = generated(n=2400, fold=300)
    kw = dict(optimizer="adagrad", hot_rows=400, batch_size=256)
    a, b = run(data, mode, **kw), run(data, mode, **kw)
    assert a[0]["losses"] == b[0]["losses"]
    for x, y in zip(a[1], b[1]):
        np.testing.assert_array_equal(x, y)
    ck = tmp_path / "ck.pt"
    run(data, mode, checkpoint=str(ck), max_steps=4, **kw)
    resumed = run(data, mode, resume=str(ck), **kw)
    assert resumed[0]["losses"] == a[0]["losses"]
    for x, y in zip(resumed[1], a[1]):
        np.testing.assert_array_equal(x, y)


def test_interrupted_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch):
    from hotline.contract.errors import HotlineError
    data = generated(n=400)
    kw = dict(optimizer="adagrad", hot_rows=200, epochs=2)
    straight = run(data, "hotline", **kw)
    ck = tmp_path / "ck.pt"
    run(data, "hotline", checkpoint=str(ck), max_steps=4, **kw)
    good = ck.read_bytes()
    # A write that fails half-way (disk full): one-line error, the step-4 checkpoint stays.
    real_save = torch.save

    def failing(obj, f):
        f.write(good[:len(good) // 2])
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(torch, "save", failing)
    with pytest.raises(HotlineError, match="No space left on device.*unchanged"):
        run(data, "hotline", checkpoint=str(ck), resume=str(ck), max_steps=6, **kw)
    monkeypatch.setattr(torch, "save", real_save)
    assert ck.read_bytes() == good and not list(tmp_path.glob(".*partial"))
    # A process killed mid-write leaves the hidden partial file behind: the next run removes
    # it, says so, and resumes from the previous checkpoint.
    partial = tmp_path / ".ck.pt.partial"
    for more in ({}, {"checkpoint": str(ck)}):
        partial.write_bytes(good[:len(good) // 2])
        rep, _ = run(data, "hotline", resume=str(ck), **more, **kw)
        assert not partial.exists()
        assert any("interrupted checkpoint write" in n for n in rep["notes"])
        assert rep["losses"] == straight[0]["losses"]


def test_auc_matches_pairwise_definition():
    rng = np.random.default_rng(0)
    y = (rng.random(300) < 0.4).astype(np.float32)
    s = np.round(rng.normal(size=300) + y, 1)            # with ties
    pos, neg = s[y == 1], s[y == 0]
    want = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    assert auc(y, s) == pytest.approx(want, abs=1e-12)
    assert auc(np.ones(4), np.arange(4)) is None


def test_dot_interaction_against_loops():
    torch.manual_seed(0)
    m = DLRM(3, 4, dim=5, bottom=(6,), top=(7,))
    x, emb = torch.randn(2, 5), torch.randn(2, 4, 5)
    z = m.interact(x, emb)
    vecs = [x] + [emb[:, f] for f in range(4)]
    pairs = [(vecs[i] * vecs[j]).sum(1) for i in range(5) for j in range(i)]
    torch.testing.assert_close(z, torch.cat([x, torch.stack(pairs, 1)], 1))


# -- the CLI -------------------------------------------------------------------------------


def cli_run(tmp_path, *args):
    out = tmp_path / "train.json"
    rc = cli.main(["train", *args, "--json", str(out)])
    return rc, out


def test_cli_train_writes_report_and_plot(tmp_path, capsys):
    png = tmp_path / "train.png"
    rc, out = cli_run(tmp_path, "synth:criteo-kaggle:500", "--max-ind-range", "300", "--mode",
                      "hotline", "--batch-size", "64", "--hot-rows", "200", "--dim", "8",
                      "--bottom", "16", "--top", "16", "--plot", str(png))
    assert rc == 0
    r = json.loads(out.read_text())
    for k in ("samples_per_s", "train_logloss", "test_auc", "bytes_host_to_device",
              "hot_lookup_fraction", "popular_fraction", "history", "losses", "mode",
              "device_url", "counters"):
        assert k in r, k
    assert r["mode"] == "hotline" and r["device_url"] == "model://" and r["samples_per_s"] > 0
    assert png.stat().st_size > 1000
    assert "samples / s" in capsys.readouterr().out


HOT300 = ["synth:criteo-kaggle:300", "--max-ind-range", "100", "--mode", "hotline",
          "--batch-size", "64"]


@pytest.mark.parametrize("args, message", [
    (["synth:criteo-kaggle:300", "--mode", "baseline", "--batch-size", "64", "--host-memory", "1M"],
     "need .* of host memory"),
    (["synth:criteo-kaggle:300", "--max-ind-range", "5000", "--mode", "device-only",
      "--batch-size", "64", "--device-memory", "100K"], "cpu device memory"),
    (["synth:criteo-kaggle:300", "--mode", "hotline", "--batch-size", "64", "--hot-bytes", "8"],
     "holds no row"),
    (["synth:criteo-kaggle:300", "--max-ind-range", "100", "--mode", "hotline", "--batch-size",
      "64", "--hot-rows", "10", "--device-url", "bogus://x"], "unknown device scheme"),
    (["synth:criteo-kaggle:3000", "--max-ind-range", "100", "--mode", "hotline", "--batch-size",
      "3000", "--hot-rows", "10"], "staging slots"),
    ([*HOT300, "--refresh", "sometimes"], "--refresh 'sometimes': expected off, auto or every:N"),
    ([*HOT300, "--refresh", "every:0"], "expected off, auto or every:N"),
    ([*HOT300, "--hot-set", "learn", "--learn-window", "63"], "shorter than one batch"),
    ([*HOT300, "--hot-set", "learn", "--profile-fraction", "0.1"],
     "learner window .--profile-fraction 0.1 of 270 train samples: 27 samples. is shorter"),
    ([*HOT300, "--refresh", "every:1", "--learn-window", "128"], "shorter than the learner window"),
    (["synth:criteo-kaggle:300", "--max-ind-range", "100", "--mode", "baseline", "--batch-size",
      "64", "--hot-set", "learn"], "are for --mode hotline"),
    (["synth:criteo-kaggle:300", "--max-ind-range", "5000", "--mode", "hotline", "--batch-size",
      "64", "--hot-bytes", "1G", "--device-memory", "1M"],
     r"the hot set \(--hot-bytes 1073741824: 1.0 GiB\) exceeds the cpu device's memory"),
    (["BAD_NPZ", "--mode", "baseline", "--batch-size", "8"], "outside table"),
    (["NOLABEL_NPZ", "--mode", "baseline", "--batch-size", "8"], "no labels"),
    (["synth:criteo-kaggle:300", "--max-ind-range", "100", "--mode", "baseline", "--batch-size",
      "64", "--resume", "MISSING"], "no such checkpoint"),
])
def test_cli_bad_input_one_line_exit_2_no_json(tmp_path, capsys, args, message):
    bad = tmp_path / "bad.npz"
    np.savez(bad, sparse=np.array([[0, 1], [5, 0]]), table_sizes=np.array([3, 2]),
             label=np.array([0.0, 1.0], np.float32))
    nolabel = tmp_path / "nolabel.npz"
    np.savez(nolabel, sparse=np.array([[0, 1], [2, 0]]), table_sizes=np.array([3, 2]))
    args = [{"BAD_NPZ": str(bad), "NOLABEL_NPZ": str(nolabel),
             "MISSING": str(tmp_path / "none.pt")}.get(a, a) for a in args]
    rc, out = cli_run(tmp_path, *args)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists()
    assert len(err) == 1 and err[0].startswith("hotline: error: ")
    assert re.search(message, err[0]), err[0]


def test_cli_stale_partial_checkpoint_removed_or_refused_before_any_work(tmp_path, capsys):
    common = ["synth:criteo-kaggle:300", "--max-ind-range", "100", "--mode", "baseline",
              "--batch-size", "64", "--dim", "4", "--bottom", "8", "--top", "8"]
    ck = tmp_path / "c.pt"
    partial = tmp_path / ".c.pt.partial"
    partial.mkdir()
    rc, out = cli_run(tmp_path, *common, "--checkpoint", str(ck))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists() and not ck.exists()
    assert err == [f"hotline: error: {partial}: not a file, and in the way of checkpoint "
                   f"writes to {ck}"]
    partial.rmdir()
    partial.write_bytes(b"torn")
    assert cli_run(tmp_path, *common, "--checkpoint", str(ck))[0] == 0
    assert "note: removed" in capsys.readouterr().err and not partial.exists() and ck.is_file()


def test_resume_with_other_settings_is_refused(tmp_path, capsys):
    common = ["synth:criteo-kaggle:300", "--max-ind-range", "100", "--mode", "baseline",
              "--batch-size", "64", "--dim", "4", "--bottom", "8", "--top", "8"]
    ck = tmp_path / "c.pt"
    assert cli_run(tmp_path, *common, "--checkpoint", str(ck))[0] == 0
    rc, _ = cli_run(tmp_path, *common, "--lr", "0.5", "--resume", str(ck))
    assert rc == 2 and "--lr" in capsys.readouterr().err


def test_cli_and_package_import_neither_torch_nor_matplotlib():
    """`hotline --help`, its argument checks and `import hotline.train` stay fast: the trainers
    (torch) are imported when a run starts, matplotlib only for --plot."""
    code = ("import sys, hotline.cli, hotline.train\n"
            "hotline.cli.build_parser().parse_args(['train', 'x', '--mode', 'baseline', "
            "'--batch-size', '8', '--json', 'j'])\n"
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_has_example(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = capsys.readouterr().out
    assert "example:" in text and "--mode" in text and "--max-ind-range" in text
    outputs = re.findall(r"--(?:json|plot|checkpoint) (\S+)", text.partition("example:")[2])
    assert outputs and all(path.startswith("build/") for path in outputs), outputs


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_default_criteo_model_hotline_equals_baseline_and_device_only(optimizer):
    """The full Criteo Kaggle DLRM (dim 16, 512-256-64 / 512-256) on 20k generated samples."""
    data = prepare_data(synth_criteo(20_000, seed=2), 0.1, 100_000)
    kw = dict(optimizer=optimizer, hot_rows=16384, batch_size=1024)
    runs = [run(data, m, dim=16, bottom=(512, 256, 64), top=(512, 256), **kw)
            for m in ("baseline", "hotline", "device-only")]
    assert_same_run(runs[0], runs[1])
    assert runs[2][0]["losses"] == runs[0][0]["losses"]


@pytest.mark.slow
def test_real_criteo_full_file_adagrad_epochs():
    ds = load_dataset(real_file("criteo_kaggle/train_random4584.csv.gz"))
    data = prepare_data(ds, 0.1)
    kw = dict(optimizer="adagrad", hot_rows=2600, batch_size=256, epochs=3, dim=16,
              bottom=(512, 256, 64), top=(512, 256))
    base, hot = run(data, "baseline", **kw), run(data, "hotline", **kw)
    assert_same_run(base, hot)


def test_hot_budget_from_rows_bytes_fraction_or_device_memory(tmp_path):
    """The hot set a run asks for, from each option, and by default 25% of the device memory;
    the JSON states it (hot_budget) and hotline mode plans that many rows."""
    data = generated()
    total = int(data.table_sizes.sum())
    row = 4 * SMALL["dim"]
    cases = [(dict(hot_rows=100), 100, "--hot-rows 100"),
             (dict(hot_bytes=row * 50 + 3), 50, f"--hot-bytes {row * 50 + 3}"),
             (dict(hot_fraction=0.25), int(0.25 * total), "--hot-fraction 0.25"),
             (dict(device_memory=512 << 10), (128 << 10) // row, "25% of the cpu")]
    for kw, rows, source in cases:
        r, _ = run(data, "hotline", **kw)
        b = r["hot_budget"]
        assert (b["rows"], b["bytes"], b["row_bytes"]) == (rows, rows * row, row), kw
        assert source in b["source"] and r["hot_rows_requested"] == rows
        assert r["hot_rows"] == min(rows, len(np.unique(data.keys[:data.offsets[data.n_train]])))
    with pytest.raises(HotlineError, match="give one of --hot-rows, --hot-bytes"):
        TrainConfig(hot_rows=5, hot_bytes=100).check()
    base, _ = run(data, "baseline")
    assert base["hot_budget"] is None and base["hot_lookup_fraction"] is None


def test_hot_budget_is_taken_once_and_reported_as_taken(monkeypatch):
    """The default budget (25% of the device's free memory) is taken before the stores exist
    and reported as planned, though the free memory changes during the run (the host memory
    file lives in RAM)."""
    import hotline.train.trainer as trainer_module  # lazy: patched for this test alone
    free = iter([512 << 10] + [800 << 10] * 100)   # the host tables need 680 KiB of it
    monkeypatch.setattr(trainer_module, "available_ram", lambda: next(free))
    r, _ = run(generated(), "hotline")
    rows = (128 << 10) // (4 * SMALL["dim"])        # 4,096 of 7,311 rows (6,400 later)
    assert r["hot_budget"]["rows"] == r["hot_rows_requested"] == rows

