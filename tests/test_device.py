"""HostMemory and the Device API (model:// backend) against independent references: the naive
fragmenter of tests/reference.py and plain numpy row copies."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import hotline
from helpers import real_file
from hotline.data import load_dataset
from hotline.host.device import BatchResult, Device, ModelDevice
from hotline.contract.config import AcceleratorConfig
from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, ROW_BITS, make_keys
from hotline.host import host_memory
from hotline.host.host_memory import HostMemory, Window
from hotline.model.planner import exact_hot_set
from hotline.data.generator import synth_criteo
import reference

ROW_BYTES = 24   # 6 floats: a row that is 3 bus words


# -- HostMemory -----------------------------------------------------------------------------


def test_host_memory_windows_views_and_file_sharing():
    with HostMemory(1 << 20) as mem:
        a = mem.alloc(100, name="a")
        b = mem.alloc(5000, align=4096, name="b")
        c = mem.alloc(8, align=8, name="c")
        assert (a.base, b.base, c.base) == (0, 4096, 9096)
        v = mem.view(b, np.float32, (10, 4))
        v[:] = np.arange(40, dtype=np.float32).reshape(10, 4)
        t = torch.from_numpy(v)
        t[3, 1] = -7.0                   # torch writes through to host memory
        raw = mem.array[b.base:b.base + 160].view(np.float32).reshape(10, 4)
        assert raw[3, 1] == -7.0 and raw[9, 3] == 39.0
        mem.flush()
        # a second process (here: a second mapping) of the same file sees the bytes
        other = np.memmap(mem.path, np.uint8, "r", shape=(mem.size,))
        assert other[b.base:b.base + 160].view(np.float32)[13] == -7.0
        del other


def _our_files(directory):
    return {p.name for p in directory.glob(f"{host_memory.PREFIX}*")} if directory.is_dir() else set()


def _ram_dir_usable(size) -> bool:
    d = host_memory.RAM_DIR
    if not (sys.platform.startswith("linux") and d.is_dir() and os.access(d, os.W_OK)):
        return False
    st = os.statvfs(d)
    return st.f_bavail * st.f_frsize >= size and host_memory.available_ram() >= 2 * size


@pytest.mark.skipif(not _ram_dir_usable(1 << 20), reason="no writable /dev/shm with room here")
def test_host_memory_default_is_in_ram_and_mapped_by_other_processes():
    """The default file is in RAM, reserved, mapped by another process by its path, and gone
    after close (a file on a disk made the in-place kernel 2x slower: writeback)."""
    before = _our_files(host_memory.RAM_DIR)
    with HostMemory(1 << 20) as mem:
        mem.array[4096:4100] = [7, 8, 9, 10]
        st = os.stat(mem.path)
        assert st.st_blocks * 512 >= mem.size        # reserved: a full tmpfs cannot SIGBUS it
        child = subprocess.run(
            [sys.executable, "-c", "import numpy as np, sys; "
             "m = np.memmap(sys.argv[1], np.uint8, 'r+'); print(m[4096:4100].tolist()); m[0] = 99",
             str(mem.path)], capture_output=True, text=True, check=True)
        assert child.stdout.strip() == "[7, 8, 9, 10]" and mem.array[0] == 99
    assert _our_files(host_memory.RAM_DIR) == before   # nothing left in RAM


def test_host_memory_falls_back_to_a_sparse_temporary_file(tmp_path, monkeypatch):
    """No RAM directory, one too small for the size, more than half the available RAM, or
    ``in_ram=False``: a sparse temporary file on the disk, removed by close."""
    small = tmp_path / "small"
    small.mkdir()
    real_statvfs = os.statvfs

    def tiny(path):
        st = real_statvfs(path)
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, st.f_bfree, 1,
                                  st.f_files, st.f_ffree, st.f_favail, st.f_flag, st.f_namemax))

    monkeypatch.setattr(host_memory.tempfile, "tempdir", str(tmp_path))
    cases = [(tmp_path / "absent", {}), (small, {}), (host_memory.RAM_DIR, {"in_ram": False}),
             (host_memory.RAM_DIR, "short")]
    for ram_dir, kw in cases:
        monkeypatch.setattr(host_memory, "RAM_DIR", ram_dir)
        if ram_dir == small:
            monkeypatch.setattr(host_memory.os, "statvfs", tiny)
        if kw == "short":   # 64 MiB would be more than half of the RAM available
            monkeypatch.setattr(host_memory, "available_ram", lambda: (128 << 20) - 2)
            kw = {}
        with HostMemory(64 << 20, **kw) as mem:
            assert mem.path.parent == tmp_path and mem.path.exists()
            assert os.stat(mem.path).st_blocks * 512 < mem.size   # sparse
            path = mem.path
        assert not path.exists()
        monkeypatch.setattr(host_memory.os, "statvfs", real_statvfs)
    assert _our_files(small) == set()


def test_host_memory_errors():
    with HostMemory(8192) as mem:
        mem.alloc(4096)
        with pytest.raises(HotlineError, match="do not fit in host memory"):
            mem.alloc(4097, name="big")
        with pytest.raises(HotlineError, match="alignment must be positive"):
            mem.alloc(8, align=0)
        w = mem.alloc(64, align=64)
        with pytest.raises(HotlineError, match="needs 128 bytes"):
            mem.view(w, np.float32, (32,))
        with pytest.raises(HotlineError, match="outside host memory"):
            mem.view(Window(8000, 400, "x"), np.uint8)
    with pytest.raises(HotlineError, match="positive"):
        HostMemory(0)


# -- a small device set-up ---------------------------------------------------------------------


def make_device(table_sizes, hot_keys, *, banks=2, slots=None, batch=64, lookups=None,
                row_bytes=ROW_BYTES, seed=0):
    """A model device over random tables; returns (device, memory, table arrays, staging view)."""
    rng = np.random.default_rng(seed)
    lookups = lookups or batch * len(table_sizes)
    config = AcceleratorConfig.for_workload(max(1, len(hot_keys)), batch, lookups)
    slots = slots or config.cold_max_keys
    need = sum(-(-int(r) * row_bytes // 4096) * 4096 for r in table_sizes) + 4096 + banks * slots * row_bytes
    mem = HostMemory(need)
    dev = hotline.open("model://", config=config, memory=mem)
    tables = []
    for t, rows in enumerate(table_sizes):
        w = mem.alloc(rows * row_bytes, name=f"t{t}")
        v = mem.view(w, np.uint8, (rows, row_bytes))
        v[:] = rng.integers(0, 256, v.shape, dtype=np.uint8)
        dev.set_table(t, w, rows, row_bytes)
        tables.append(v)
    sw = mem.alloc(banks * slots * row_bytes, name="staging")
    dev.set_staging(sw, row_bytes, slots, banks)
    staging = mem.view(sw, np.uint8, (banks, slots, row_bytes))
    placement = dev.load_hot_set(hot_keys)
    return dev, mem, tables, staging, placement


def split(key):
    return int(key) >> ROW_BITS, int(key) & (MAX_ROWS - 1)


def check_batch(r, samples, placement, tables, staging):
    """One BatchResult against reference.fragment and a numpy gather of its cold keys."""
    slot_of = dict(zip(placement.keys.tolist(), placement.slots.tolist()))
    (ref,) = reference.fragment(samples, slot_of, len(samples))
    assert r.popular.tolist() == ref["popular"]
    assert r.non_popular.tolist() == ref["non_popular"]
    assert r.cold_keys.tolist() == ref["cold_keys"]
    flat = [x for entry in ref["remap"] for x in entry]
    assert r.hot.tolist() == [kind == "hot" for kind, _ in flat]
    assert r.slot.tolist() == [s for _, s in flat]
    want = np.array([tables[split(k)[0]][split(k)[1]] for k in ref["cold_keys"]]).reshape(-1, ROW_BYTES)
    np.testing.assert_array_equal(staging[r.bank, :len(ref["cold_keys"])], want)
    assert r.gather == {"rows": len(ref["cold_keys"]), "errors": 0}


def stream(ds):
    keys, off = ds.keys, ds.sample_offsets
    return keys, off, [keys[off[i]:off[i + 1]].tolist() for i in range(ds.num_samples)]


@pytest.mark.parametrize("source", ["generator", "criteo"])
def test_model_device_fragments_gathers_and_scatters_like_numpy(source):
    if source == "criteo":
        ds = load_dataset(real_file("criteo_kaggle/train_random4584.csv.gz"), limit=1200)
    else:
        ds = synth_criteo(1200, seed=5)
        ds.indices %= 5000
        ds.table_sizes = np.minimum(ds.table_sizes, 5000)
    keys, off, samples = stream(ds)
    hot = exact_hot_set(keys, 600).keys
    B = 200
    dev, mem, tables, staging, placement = make_device(ds.table_sizes, hot, batch=B)
    with dev:
        info = dev.info()
        assert info["data_width"] == 64 and info["row_bits"] == 27 and info["num_tables"] == 32
        assert placement.keys.size + placement.failed.size == len(hot)
        results, at_push = [], {}

        def push(i):
            at_push[i] = [t.copy() for t in tables]   # what the gather must read
            return dev.push_batch(keys[off[i * B]:off[(i + 1) * B]], ds.lengths[i * B:(i + 1) * B])

        # double buffering: two batches in flight, pulled in push order, banks alternate
        assert (push(0), push(1)) == (0, 1) and dev.in_flight == 2
        with pytest.raises(HotlineError, match="in flight"):
            dev.push_batch(keys[off[0]:off[B]], ds.lengths[:B])
        for i in range(6):
            r = dev.pull_batch()
            assert isinstance(r, BatchResult) and r.batch_id == i and r.bank == i % 2
            s0, s1 = i * B, (i + 1) * B
            # batch i was gathered before batch i - 1's scatter: it holds the rows as they were
            check_batch(r, samples[s0:s1], placement, at_push[i], staging)
            results.append(r)
            # scatter: new bytes in staging go back to exactly the cold keys' rows
            U = len(r.cold_keys)
            new = np.random.default_rng(i).integers(0, 256, (U, ROW_BYTES), dtype=np.uint8)
            staging[r.bank, :U] = new
            before = [t.copy() for t in tables]
            done = dev.scatter(r.bank, r.cold_keys)
            assert done == {"rows": U, "errors": 0}
            for t, rows in enumerate(before):
                sel = [j for j, k in enumerate(r.cold_keys.tolist()) if split(k)[0] == t]
                rows[[split(int(r.cold_keys[j]))[1] for j in sel]] = new[sel]
                np.testing.assert_array_equal(tables[t], rows)
            if i + 2 < 6:
                push(i + 2)
        c = dev.counters()
        assert c["batches"] == 6 and c["samples"] == 6 * B and c["lookups"] == int(off[6 * B])
        assert c["hits"] == sum(int(r.hot.sum()) for r in results)
        assert c["popular_samples"] == sum(len(r.popular) for r in results)
        cold = sum(len(r.cold_keys) for r in results)
        assert c["cold_rows"] == c["gather_rows"] == c["scatter_rows"] == cold
        assert c["dma_bytes_read"] == c["dma_bytes_written"] == 2 * cold * ROW_BYTES
        assert c["window_errors"] == c["axi_errors"] == c["overflows"] == 0
        with pytest.raises(HotlineError, match="no batch in flight"):
            dev.pull_batch()
    mem.close()


def test_keys_beyond_32_bits_are_refused():
    """A batch or a hot set with a value that is no 32-bit key is refused (one line); uint32
    arrays are not scanned, their every value is one."""
    dev, mem, tables, staging, placement = make_device([10, 20], [], batch=4)
    with dev:
        for bad in (1 << 32, -1):
            with pytest.raises(HotlineError, match="push_batch: keys must be 32-bit"):
                dev.push_batch(np.array([3, bad], np.int64), [2])
            with pytest.raises(HotlineError, match="hot keys must be 32-bit"):
                dev.load_hot_set(np.array([bad], np.int64))
        dev.push_batch(np.array([3, 4], np.int64), [2])   # in range, of a wide type
        assert dev.pull_batch().cold_keys.tolist() == [3, 4]
    mem.close()


def test_out_of_range_rows_are_refused_and_counted():
    dev, mem, tables, staging, placement = make_device([10, 20], [], batch=4)
    with dev:
        staging[:] = 0
        bad = int(make_keys(1, 25))                       # table 1 has 20 rows
        keys = np.array([3, bad, make_keys(1, 2), 3], np.uint32)
        dev.push_batch(keys, [2, 2])
        r = dev.pull_batch()
        assert r.cold_keys.tolist() == [3, bad, int(make_keys(1, 2))]
        assert r.gather == {"rows": 2, "errors": 1}
        assert not staging[0, 1].any()             # the refused row was never written
        np.testing.assert_array_equal(staging[0, 2], tables[1][2])
        assert dev.counters()["window_errors"] == 1
        done = dev.scatter(0, make_keys([5], [0]))   # no descriptor for table 5
        assert done == {"rows": 0, "errors": 1}
    mem.close()


def test_device_bad_arguments():
    with pytest.raises(HotlineError, match="unknown device scheme"):
        hotline.open("pcie://0")
    with pytest.raises(HotlineError, match="no scheme"):
        hotline.open("model")
    with HostMemory(1 << 16) as mem, hotline.open("model://", memory=mem) as dev:
        assert isinstance(dev, Device) and isinstance(dev, ModelDevice)
        w = mem.alloc(4096)
        with pytest.raises(HotlineError, match="multiple of the 8-byte bus word"):
            dev.set_table(0, w, 10, 12)
        with pytest.raises(HotlineError, match="do not fit its window"):
            dev.set_table(0, w, 1000, 16)
        with pytest.raises(HotlineError, match="tables 0..31"):
            dev.set_table(32, w, 10, 16)
        dev.set_table(0, w, 10, 32)
        s = mem.alloc(4096)
        with pytest.raises(HotlineError, match="smaller than table 0's row_bytes"):
            dev.set_staging(s, 16, 8, 2)
        with pytest.raises(HotlineError, match="do not fit window"):
            dev.set_staging(s, 32, 100, 2)
        with pytest.raises(HotlineError, match="banks"):
            dev.set_staging(s, 32, 8, 4)
        dev.set_staging(s, 32, 8, 2)
        with pytest.raises(HotlineError, match="lengths sum"):
            dev.push_batch(np.arange(5, dtype=np.uint32), [2, 2])
        with pytest.raises(HotlineError, match="distinct"):
            dev.load_hot_set([1, 1])
        with pytest.raises(HotlineError, match="at most"):
            dev.push_batch(np.zeros(5000, np.uint32), np.ones(5000, np.int64))
    with pytest.raises(HotlineError, match="closed"):
        dev.counters()


def test_model_refuses_a_hot_set_beyond_capacity_before_any_insert():
    """More hot keys than ``config.hot_capacity`` is one HotlineError, and the device keeps its
    earlier hot set (the check comes before any insert; the same on every backend)."""
    config = AcceleratorConfig.for_workload(16, 8, 64)   # a 64-entry CAM: 57 hot rows
    with HostMemory(1 << 16) as mem, hotline.open("model://", config=config, memory=mem) as dev:
        keys = np.arange(config.hot_capacity + 1, dtype=np.uint32)
        held = dev.load_hot_set(keys[:config.hot_capacity])
        with pytest.raises(HotlineError, match=f"holds at most {config.hot_capacity} hot rows"):
            dev.load_hot_set(keys)
        assert dev.placement is held


def test_set_table_refuses_a_table_beyond_the_devices_count():
    """A table index >= the device's table count is one HotlineError naming both."""
    with HostMemory(1 << 16) as mem, hotline.open("model://", memory=mem, num_tables=8) as dev:
        assert dev.info()["num_tables"] == 8
        w = mem.alloc(4096)
        dev.set_table(7, w, 10, 16)
        with pytest.raises(HotlineError, match="table 8: the device has 8 tables"):
            dev.set_table(8, w, 10, 16)
        assert sorted(dev.tables) == [7]


# -- the device's agent ---------------------------------------------------------------------


class GatedDevice(ModelDevice):
    """model:// whose fragment and gather wait for ``gate`` (a threading.Event), and whose
    ``fail_push`` makes the next push raise: shows what runs on the agent and when."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate, self.fail_push, self.pushes_done = threading.Event(), False, 0

    def _push(self, batch_id, keys, offsets):
        if not self.gate.wait(timeout=10):
            raise HotlineError("the gate stayed closed: the push ran in the caller's thread")
        if self.fail_push:
            raise HotlineError("injected fragmenter failure")
        result = super()._push(batch_id, keys, offsets)
        self.pushes_done += 1
        return result


def test_push_returns_before_the_device_works_and_pull_waits_for_it():
    """push_batch hands the batch to the agent and returns; the batch is fragmented only when
    the (gated) agent runs; pull_batch then returns it, hot and cold keys as the model says."""
    config = AcceleratorConfig.for_workload(1, 4, 8)
    with HostMemory(1 << 16) as mem, GatedDevice("model://", config=config, memory=mem) as dev:
        dev.load_hot_set([make_keys(0, 1)])
        keys = make_keys([0, 1, 0, 1], [1, 2, 3, 2]).astype(np.uint32)
        assert dev.push_batch(keys, [1, 1, 1, 1]) == 0
        assert dev.pushes_done == 0 and dev.in_flight == 1   # returned before the work
        dev.gate.set()
        r = dev.pull_batch()
        assert dev.pushes_done == 1
        assert r.hot.tolist() == [True, False, False, False]
        assert r.cold_keys.tolist() == keys[1:3].tolist()
        t = dev.time
        assert t["busy_seconds"] > 0 and 0.0 <= t["overlap"] <= 1.0


def test_a_failed_push_is_raised_by_its_pull_and_later_batches_still_run():
    config = AcceleratorConfig.for_workload(1, 4, 8)
    with HostMemory(1 << 16) as mem, GatedDevice("model://", config=config, memory=mem) as dev:
        dev.gate.set()
        dev.fail_push = True
        dev.push_batch(np.arange(4, dtype=np.uint32), [2, 2])
        with pytest.raises(HotlineError, match="injected fragmenter failure"):
            dev.pull_batch()
        dev.fail_push = False
        dev.push_batch(np.arange(4, dtype=np.uint32), [2, 2])
        assert dev.pull_batch().cold_keys.tolist() == [0, 1, 2, 3]


def test_a_scatter_not_waited_for_keeps_order_and_reports_its_errors_later():
    """scatter(wait=False) returns None at once; the next push of that bank gathers the rows it
    wrote (the agent keeps the calls' order); a DMA error of such a scatter is raised by the
    next counters() / drain()."""
    dev, mem, tables, staging, placement = make_device([30], [], batch=2, banks=1)
    with dev:
        keys = make_keys([0, 0], [4, 7]).astype(np.uint32)
        dev.push_batch(keys, [1, 1])
        r = dev.pull_batch()
        new = np.arange(2 * ROW_BYTES, dtype=np.uint8).reshape(2, ROW_BYTES)
        staging[r.bank, :2] = new
        assert not (tables[0][[4, 7]] == new).all()
        # the scatter starts 2 s late, so a gather that did not wait for it would copy the
        # old rows
        late, scatter = threading.Event(), dev._scatter
        dev._scatter = lambda bank, keys: (late.wait(timeout=2), scatter(bank, keys))[1]
        assert dev.scatter(r.bank, r.cold_keys, wait=False) is None
        dev.push_batch(keys, [1, 1])            # the same bank: gathered after the scatter
        r2 = dev.pull_batch()
        np.testing.assert_array_equal(staging[r2.bank, :2], new)
        np.testing.assert_array_equal(tables[0][[4, 7]], new)
        dev.scatter(0, make_keys([5], [0]), wait=False)   # no descriptor for table 5
        with pytest.raises(HotlineError, match="scatter of staging bank 0 reported 1 DMA errors"):
            dev.counters()
        dev.drain()                               # reported once
    mem.close()


def test_wait_scatters_waits_for_the_scatters_only():
    """wait_scatters() returns once the scatters made with wait=False are done, not the batch
    pushed after them (it may still be gathering), and raises such a scatter's DMA error."""
    dev, mem, tables, staging, placement = make_device([30], [], batch=2, banks=2)
    with dev:
        keys = make_keys([0, 0], [4, 7]).astype(np.uint32)
        dev.push_batch(keys, [1, 1])
        r = dev.pull_batch()
        staging[r.bank, :2] = 9
        dev.scatter(r.bank, r.cold_keys, wait=False)
        # the next push's gather is held until the test lets it go
        go, push = threading.Event(), dev._push
        dev._push = lambda *a: (go.wait(timeout=5), push(*a))[1]
        dev.push_batch(keys, [1, 1])
        t0 = time.monotonic()
        dev.wait_scatters()
        assert time.monotonic() - t0 < 4   # it did not wait for the held gather
        assert (tables[0][[4, 7]] == 9).all()
        go.set()
        dev.pull_batch()
        dev.scatter(0, make_keys([5], [0]), wait=False)   # no descriptor for table 5
        with pytest.raises(HotlineError, match="scatter of staging bank 0 reported 1 DMA errors"):
            dev.wait_scatters()
    mem.close()


# -- access learner and in-place hot-set updates -------------------------------------------------


@pytest.mark.parametrize("source", ["generator", "criteo"])
def test_learner_counts_exactly_the_batches_pushed_after_start(source):
    """learner_start / learner_stop bracket pushes in call order: a batch pushed before the
    start (still in flight) is not counted. The learned top-K covers >= 0.98 of the exact
    top-K's lookups over the window (the learner sized by `learner_geometry`)."""
    if source == "criteo":
        ds = load_dataset(real_file("criteo_kaggle/train_random4584.csv.gz"), limit=3000)
    else:
        ds = synth_criteo(3000, seed=7)
    keys, off = ds.keys, ds.sample_offsets
    B, K = 500, 400
    config = AcceleratorConfig.for_workload(K, B, int(np.diff(off[::B]).max()), learn=True,
                                            distinct_keys=len(np.unique(keys)))
    mem = HostMemory(1 << 12)
    with hotline.open("model://", config=config, memory=mem) as dev:
        dev.push_batch(keys[:off[B]], ds.lengths[:B])             # before the start: not counted
        dev.learner_start()
        for i in range(1, 6):
            dev.push_batch(keys[off[i * B]:off[(i + 1) * B]], ds.lengths[i * B:(i + 1) * B])
            dev.pull_batch()
        dev.pull_batch()
        got = dev.learner_stop()
        window = keys[off[B]:off[6 * B]]
        assert got.counted == len(window)
        assert len(got.keys) == len(got.counts) == config.learner_entries
        # every count is a true over-estimate bound of Space-Saving: count >= true frequency
        # for a held key; the total counted mass equals the lookups not dropped
        assert int(got.counts.sum()) == got.counted - got.dropped
        uniq, freq = np.unique(window, return_counts=True)
        true = dict(zip(uniq.tolist(), freq.tolist()))
        held = got.counts > 0
        assert all(c >= true[k] or got.dropped for k, c in
                   zip(got.keys[held].tolist(), got.counts[held].tolist()))
        exact = exact_hot_set(window, K).keys
        cover = lambda s: np.isin(window, s).mean()
        assert cover(got.top(K)) >= 0.98 * cover(exact)
        with pytest.raises(HotlineError, match="not started"):
            dev.learner_stop()
    mem.close()


def test_update_hot_set_deletes_leavers_inserts_newcomers_and_lookups_agree():
    ds = synth_criteo(1200, seed=3)
    keys, off, samples = stream(ds)
    B = 200
    ranked = exact_hot_set(keys, 900).keys
    first, second = ranked[:600], np.concatenate([ranked[:300], ranked[600:900]])
    dev, mem, tables, staging, placement = make_device(ds.table_sizes, first, batch=B)
    with dev:
        slot_before = dict(zip(placement.keys.tolist(), placement.slots.tolist()))
        new = dev.update_hot_set(second)
        assert sorted(new.keys.tolist() + new.failed.tolist()) == sorted(second.tolist())
        assert len(np.unique(new.slots)) == len(new.slots)
        # the first responses delete the 300 keys that left, then the newcomers are inserted
        assert len(new.responses) == 300 + 300
        moved = {src for _, _, moves in new.responses[300:] for src, _ in moves}
        for k, s in zip(new.keys.tolist(), new.slots.tolist()):
            if k in slot_before and slot_before[k] not in moved:
                assert s == slot_before[k]           # a key that stays keeps its slot
        for i in range(2):                           # lookups see exactly the new set
            dev.push_batch(keys[off[i * B]:off[(i + 1) * B]], ds.lengths[i * B:(i + 1) * B])
            r = dev.pull_batch()
            check_batch(r, samples[i * B:(i + 1) * B], new, tables, staging)
            dev.scatter(r.bank, r.cold_keys)
        assert not np.isin(ranked[300:600], new.keys).any()
    mem.close()
