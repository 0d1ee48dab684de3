"""``model://`` with its dense hot index (`HotIndex` over the registered tables' rows) against
the same device with the binary-search index, session for session; both against
`reference.fragment` where the cold-key set does not overflow."""
import numpy as np
import pytest

import hotline
from hotline.contract.config import AcceleratorConfig
from hotline.contract.keys import make_keys
from hotline.data.spec import open_data
from hotline.host import device as device_module
from hotline.host.host_memory import HostMemory
from hotline.model.planner import exact_hot_set
import reference

ROW_BYTES = 8
B = 500
LATE = 26        # a table registered after the hot set is loaded
LATE_ROWS = 300
UNREGISTERED = 30


def session(data, hot, batches, probe):
    """Run ``batches`` ([keys, lengths] or "late": register table LATE) on a fresh model
    device; returns (BatchResults, staging bytes after each gather, counters, placement,
    whether the hot index answers the keys ``probe`` densely at the end)."""
    config = AcceleratorConfig.for_workload(len(hot), B, 26 * B)
    sizes = [int(n) for n in data.table_sizes]
    slots, banks = config.cold_max_keys, 2
    need = (sum(sizes) + LATE_ROWS + banks * slots) * ROW_BYTES + 4096 * 30
    with HostMemory(need) as mem, hotline.open("model://", config=config, memory=mem) as dev:
        rng = np.random.default_rng(0)
        windows = []
        for t, rows in enumerate(sizes + [LATE_ROWS]):
            w = mem.alloc(rows * ROW_BYTES, name=f"t{t}")
            mem.view(w, np.uint8)[:] = rng.integers(0, 256, w.size, dtype=np.uint8)
            windows.append(w)
        for t, rows in enumerate(sizes):
            dev.set_table(t, windows[t], rows, ROW_BYTES)
        sw = mem.alloc(banks * slots * ROW_BYTES, name="staging")
        dev.set_staging(sw, ROW_BYTES, slots, banks)
        staging = mem.view(sw, np.uint8, (banks, slots * ROW_BYTES))
        placement = dev.load_hot_set(hot)
        results, gathered = [], []
        for item in batches:
            if item == "late":
                dev.set_table(LATE, windows[LATE], LATE_ROWS, ROW_BYTES)
                continue
            dev.push_batch(*item)
            r = dev.pull_batch()
            results.append(r)
            gathered.append(staging[r.bank].copy())
            dev.scatter(r.bank, r.cold_keys[:slots])
        dense = dev._model.index.dense_rows(probe) is not None
        return results, gathered, dev.counters(), placement, dense


def test_dense_index_device_equals_binary_search_device(monkeypatch):
    data = open_data("synth:criteo-kaggle:4000", max_ind_range=10000)
    sizes = np.asarray(data.table_sizes, np.int64)
    keys, off = data.keys, data.sample_offsets
    # a real hot set (exact top-K of the stream), keys of the late table, a row beyond its
    # table and a key of a table never registered: the CAM holds them all
    late_hot = make_keys(LATE, np.arange(0, LATE_ROWS, 3))
    outside_hot = np.array([make_keys(0, sizes[0] + 5), make_keys(UNREGISTERED, 7)], np.uint32)
    hot = np.concatenate([exact_hot_set(keys, 1500).keys, late_hot, outside_hot])
    lengths = np.diff(off)

    def criteo(i):
        return keys[off[i * B]:off[(i + 1) * B]], lengths[i * B:(i + 1) * B]

    # dense rows of one table (every row of table 2 in order, twice) and of many
    one = np.tile(make_keys(2, np.arange(sizes[2])), 2)[:26 * B]
    many = make_keys(np.arange(26 * B) % 26, (np.arange(26 * B) // 26) % sizes[np.arange(26 * B) % 26])
    late = np.r_[make_keys(LATE, np.arange(200)), many[:100]]
    outside = np.r_[criteo(3)[0][:400], outside_hot, make_keys(1, sizes[1] + np.arange(3)),
                    make_keys(UNREGISTERED, [7, 8, 7])]
    # more distinct cold keys than the cold-key set holds (26 * B): it overflows
    everything = np.concatenate([make_keys(t, np.arange(n)) for t, n in enumerate(sizes)])
    cold_rows = np.setdiff1d(everything, hot)[::-1][:26 * B + 1000]
    over = np.r_[cold_rows, cold_rows[:50]]

    def batch(k, samples):
        k = np.asarray(k, np.uint32)
        n = np.full(samples, len(k) // samples)
        n[-1] += len(k) - n.sum()
        return k, n

    batches = [criteo(0), criteo(1), batch(one, B), batch(many, B), batch(late, 60), "late",
               batch(late, 60), criteo(2), batch(outside, 50), batch(over, 16), criteo(4)]
    probe = np.r_[late, many].astype(np.uint32)
    got = session(data, hot, batches, probe)
    monkeypatch.setattr(device_module, "MODEL_DENSE_INDEX_ROWS", 0)
    want = session(data, hot, batches, probe)
    # the dense index (rebuilt with the late table), and the binary search
    assert got[4] and not want[4]
    assert len(got[0]) == len(want[0]) == len(batches) - 1
    for a, b, ga, gb in zip(got[0], want[0], got[1], want[1]):
        for field in ("hot", "slot", "cold_keys", "popular", "non_popular"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
            assert getattr(a, field).dtype == getattr(b, field).dtype
        assert (a.overflow, a.gather, a.samples) == (b.overflow, b.gather, b.samples)
        np.testing.assert_array_equal(ga, gb)
    assert got[2] == want[2]
    # the binary-search session against the reference fragmenter: the late table's hot keys
    # hit before and after it is registered, the outside ones hit, the overflow is flagged
    slot_of = dict(zip(want[3].keys.tolist(), want[3].slots.tolist()))
    assert set(late_hot.tolist()) | set(outside_hot.tolist()) <= set(slot_of)
    pushed = [item for item in batches if item != "late"]
    for (k, n), r in zip(pushed, want[0]):
        o = np.r_[0, np.cumsum(n)]
        (ref,) = reference.fragment([k[o[i]:o[i + 1]].tolist() for i in range(len(n))], slot_of,
                                    len(n))
        if k is pushed[-2][0]:
            assert r.overflow
            continue
        assert not r.overflow
        assert r.hot.tolist() == [kind == "hot" for e in ref["remap"] for kind, _ in e]
        assert r.slot.tolist() == [s for e in ref["remap"] for _, s in e]
        assert r.cold_keys.tolist() == ref["cold_keys"]
        assert r.popular.tolist() == ref["popular"]
    assert want[0][4].hot[:200].sum() == want[0][5].hot[:200].sum() == 67   # rows 0, 3, .. 198
    assert want[2]["window_errors"] > 0   # the outside rows were refused by the DMA


def test_distinct_keys_equal_a_sort():
    """`HotIndex.distinct_keys` (a bitmap over the tables' rows) gives ``np.unique``'s keys on
    structured keys: dense rows of one table, of 26 tables and of tables with empty ones
    between, the first and last row of each table, a repeated row, one key, and again on the
    same index (its bitmap cleared after each call)."""
    from hotline.model.device_model import HotIndex
    rng = np.random.default_rng(5)
    for sizes in ([1000], [37] * 26, [5, 0, 0, 300, 0, 7, 1]):
        index = HotIndex(np.zeros(0, np.uint32), np.zeros(0, np.int64), sizes)
        tables = np.flatnonzero(sizes)
        ends = np.concatenate([make_keys(np.full(2, t), [0, sizes[t] - 1]) for t in tables])
        every = np.concatenate([make_keys(np.full(n, t), np.arange(n))
                                for t, n in enumerate(sizes) if n])
        for keys in (ends, every, every[rng.integers(0, len(every), 3 * len(every))],
                     every[:1], np.repeat(ends[-1:], 4), rng.permutation(every)[:10]):
            keys = keys.astype(np.uint32)
            got = index.distinct_keys(index.dense_rows(keys))
            assert got.dtype == np.uint32
            np.testing.assert_array_equal(got, np.unique(keys))


def test_cold_lookups_count_the_misses():
    """`HotIndex.cold_lookups` (a compiled pass over a bitmap of the hot rows) counts the keys
    outside the hot set (a Python set here) and gives `dense_rows`' rows, on structured keys: dense rows
    of one table, of 26 tables and of tables with empty ones between, with real hot sets (the
    most frequent rows of a Zipf stream, every row, none), the first and last row of each table
    (the bitmap's byte edges), and a key beyond its table or in a table beyond them (no rows:
    the binary search counts)."""
    from hotline.model.device_model import HotIndex
    rng = np.random.default_rng(6)
    for sizes in ([1000], [37] * 26, [5, 0, 0, 300, 0, 7, 1]):
        tables = np.flatnonzero(sizes)
        every = np.concatenate([make_keys(np.full(n, t), np.arange(n))
                                for t, n in enumerate(sizes) if n]).astype(np.uint32)
        ends = np.concatenate([make_keys(np.full(2, t), [0, sizes[t] - 1])
                               for t in tables]).astype(np.uint32)
        stream = every[np.minimum(rng.zipf(1.3, 4 * len(every)) - 1, len(every) - 1)]
        ranked, counts = np.unique(stream, return_counts=True)
        hot_sets = (ranked[np.argsort(-counts, kind="stable")][:len(every) // 10], every,
                    every[:0], ends[::2])
        for hot in hot_sets:
            slots = rng.permutation(len(hot) * 3)[:len(hot)]
            index, hot_set = HotIndex(hot, slots, sizes), set(hot.tolist())
            misses = lambda keys: sum(k not in hot_set for k in keys.tolist())
            for keys in (stream, every, ends, every[:1], np.repeat(ends[-1:], 9), every[:0]):
                cold, rows = index.cold_lookups(keys)
                assert cold == misses(keys)
                want = index.dense_rows(keys)
                assert (rows is None) == (want is None)
                if want is not None:
                    np.testing.assert_array_equal(rows, want)
            outside = [make_keys([tables[-1]], [sizes[tables[-1]]]), make_keys([len(sizes)], [0])]
            for extra in outside:
                keys = np.concatenate([every, extra]).astype(np.uint32)
                cold, rows = index.cold_lookups(keys)
                assert cold == misses(keys) and rows is None
