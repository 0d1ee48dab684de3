"""Planner and fragmenter model against the naive references, on real and generated streams."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from helpers import ALL_REAL, real_file
from hotline.data import Dataset, load_dataset
from hotline.model.device_model import DeviceModel
from hotline.contract.errors import HotlineError
from hotline.model.planner import exact_hot_set, hot_rows_from_bytes, profile_samples
from hotline.data.generator import synth_criteo
import reference


def samples_of(ds):
    keys, off = ds.keys, ds.sample_offsets
    return [keys[off[i]:off[i + 1]].tolist() for i in range(ds.num_samples)]


def check_against_reference(ds, k, batch_size, dense_index=True, slots=None):
    keys = ds.keys
    hot = exact_hot_set(keys, k)
    assert hot.keys.tolist() == reference.exact_top_k(keys, k)
    if slots is None:
        slots = np.arange(hot.size)
    model = DeviceModel(hot.keys, slots, ds.table_sizes if dense_index else None)
    run = model.fragment(keys, ds.sample_offsets, batch_size)
    ref = reference.fragment(samples_of(ds), dict(zip(hot.keys.tolist(), np.asarray(slots).tolist())),
                             batch_size)
    assert run.num_batches == len(ref)
    for b, rb in enumerate(ref):
        got = run.batch(b)
        assert got["popular"].tolist() == rb["popular"]
        assert got["non_popular"].tolist() == rb["non_popular"]
        assert got["cold_keys"].tolist() == rb["cold_keys"]
        flat = [x for entry in rb["remap"] for x in entry]
        assert got["hot"].tolist() == [kind == "hot" for kind, _ in flat]
        assert got["slot"].tolist() == [s for _, s in flat]
    c = run.counters
    assert c.lookups == len(keys) and c.samples == ds.num_samples
    assert c.hits == int(np.isin(keys, hot.keys).sum())
    assert c.popular_samples == sum(len(rb["popular"]) for rb in ref)
    assert c.cold_rows == sum(len(rb["cold_keys"]) for rb in ref)
    summary = run.summary()
    assert sum(b["popular"] for b in summary["batches"]) == summary["popular_samples"]
    assert sum(b["unique_cold_rows"] for b in summary["batches"]) == summary["unique_cold_rows"]
    return run


@pytest.mark.parametrize("rel", ALL_REAL)
@pytest.mark.parametrize("dense_index", [True, False])
def test_real_streams_match_reference(rel, dense_index):
    ds = load_dataset(real_file(rel), limit=20_000)
    distinct = len(np.unique(ds.keys))
    check_against_reference(ds, max(1, distinct // 20), 1024, dense_index)


def test_generated_stream_matches_reference():
    ds = synth_criteo(3000, seed=3)
    check_against_reference(ds, 4096, 512)


def test_placement_slots_are_used_verbatim():
    ds = synth_criteo(500, seed=1)
    k = 300
    slots = np.random.default_rng(0).permutation(10_000)[:k]  # e.g. CAM entry addresses
    check_against_reference(ds, k, 128, slots=slots)


@st.composite
def multi_hot_streams(draw):
    n = draw(st.integers(1, 40))
    f = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(1, 6), min_size=f, max_size=f))
    lengths = np.array(draw(st.lists(st.lists(st.integers(0, 4), min_size=f, max_size=f),
                                     min_size=n, max_size=n)), np.int32)
    feats = np.repeat(np.tile(np.arange(f), n), lengths.ravel())
    rows = [draw(st.integers(0, sizes[t] - 1)) for t in feats]
    return Dataset(lengths, np.array(rows, np.int64), np.array(sizes, np.int64))


@settings(max_examples=150, deadline=None)
@given(ds=multi_hot_streams(), k=st.integers(1, 30), batch=st.integers(1, 9),
       dense=st.booleans())
def test_invariants_on_random_streams(ds, k, batch, dense):
    run = check_against_reference(ds, k, batch, dense)
    keys = ds.keys
    hot = exact_hot_set(keys, k)
    slot_of = dict(zip(hot.keys.tolist(), range(hot.size)))
    for b in range(run.num_batches):
        got = run.batch(b)
        s0, s1 = run.batch_samples(b)
        assert len(got["popular"]) + len(got["non_popular"]) == s1 - s0
        l0, l1 = ds.sample_offsets[s0], ds.sample_offsets[s1]
        # remap + hot table + cold list reconstruct every key
        rebuilt = [hot.keys[s] if h else got["cold_keys"][s] for h, s in zip(got["hot"], got["slot"])]
        assert [int(x) for x in rebuilt] == keys[l0:l1].tolist()
        cold_slots = got["slot"][~got["hot"]]
        # cold slots are 0..U-1 in first-appearance order
        seen = []
        for s in cold_slots.tolist():
            if s not in seen:
                assert s == len(seen)
                seen.append(s)
        assert len(seen) == len(got["cold_keys"])
        for i in got["popular"]:
            a, e = ds.sample_offsets[s0 + i], ds.sample_offsets[s0 + i + 1]
            assert all(int(x) in slot_of for x in keys[a:e])


def test_exact_hot_set_ties_break_by_key():
    keys = np.array([5, 3, 9, 3, 9, 1], np.uint32)
    assert exact_hot_set(keys, 2).keys.tolist() == [3, 9]
    assert exact_hot_set(keys, 3).keys.tolist() == [3, 9, 1]


def test_clamp_and_coverage():
    keys = np.array([1, 1, 2, 3], np.uint32)
    hs = exact_hot_set(keys, 10)
    assert hs.size == 3 and hs.clamped and hs.coverage == 1.0
    assert exact_hot_set(keys, 1).coverage == 0.5


def test_sizing_rules():
    assert hot_rows_from_bytes(64 << 20, 16) == (64 << 20) // 64
    assert profile_samples(1000, 0.05) == 50
    assert profile_samples(7, 0.5) == 4
    for bad in (lambda: exact_hot_set([1], 0), lambda: profile_samples(10, 0.0),
                lambda: hot_rows_from_bytes(100, 0)):
        with pytest.raises(HotlineError):
            bad()


def test_batch_size_zero_rejected():
    ds = synth_criteo(10)
    with pytest.raises(HotlineError, match="batch-size"):
        DeviceModel(np.array([], np.uint32)).fragment(ds.keys, ds.sample_offsets, 0)
