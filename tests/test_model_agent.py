"""model://?agent=process (`hotline.host.model_agent`): the model in a child process gives
model://'s results bit for bit, in the same call order, and its errors and its death reach
the caller as one-line HotlineErrors."""
import os
import signal

import numpy as np
import pytest

import hotline
from device_session import assert_sessions_match, dense_stream, session
from hotline.contract.config import AcceleratorConfig
from hotline.contract.errors import HotlineError
from hotline.host.host_memory import HostMemory
from hotline.model.planner import exact_hot_set

PROCESS = "model://?agent=process"


def test_process_agent_matches_the_thread_agent(tmp_path):
    """A whole double-buffered session (tables, staging, hot set, pushes two deep, gathers,
    +1 on the staging rows, scatters, counters) on the real Criteo stream (or the generator):
    the same results, host memory bytes and counters as model://."""
    ds = dense_stream(400)
    hot = exact_hot_set(ds.keys, 300).keys
    want = session("model://", ds, hot, 64, tmp_path, "thread")
    got = session(PROCESS, ds, hot, 64, tmp_path, "process")
    assert_sessions_match(got, want, batches=7)
    assert got[4].info()["agent"] == "process"
    assert got[4].time["busy_seconds"] > 0


def test_process_agent_learner_and_hot_set_update_match(tmp_path):
    """learner_start / learner_stop and update_hot_set run in the child in call order: the
    readout and the new placement equal model://'s."""
    ds = dense_stream(600)
    keys, off = ds.keys, ds.sample_offsets
    config = AcceleratorConfig.for_workload(200, 100, 26 * 100, learn=True,
                                            distinct_keys=len(np.unique(keys)))
    out = []
    for url in ("model://", PROCESS):
        with HostMemory(1 << 12) as mem, hotline.open(url, config=config, memory=mem) as dev:
            dev.load_hot_set(exact_hot_set(keys[:off[100]], 200).keys)
            dev.push_batch(keys[:off[100]], ds.lengths[:100])   # before the start: not counted
            dev.learner_start()
            for i in range(1, 5):
                dev.push_batch(keys[off[i * 100]:off[(i + 1) * 100]],
                               ds.lengths[i * 100:(i + 1) * 100])
                dev.pull_batch()
            dev.pull_batch()
            r = dev.learner_stop()
            placement = dev.update_hot_set(r.top(200))
            dev.push_batch(keys[off[500]:off[600]], ds.lengths[500:600])
            b = dev.pull_batch()
            out.append((r, placement, b, dev.counters()))
    (r0, p0, b0, c0), (r1, p1, b1, c1) = out
    assert r1.counted == r0.counted > 0 and r1.dropped == r0.dropped
    assert np.array_equal(r1.keys, r0.keys) and np.array_equal(r1.counts, r0.counts)
    assert np.array_equal(p1.keys, p0.keys) and np.array_equal(p1.slots, p0.slots)
    assert np.array_equal(b1.slot, b0.slot) and np.array_equal(b1.cold_keys, b0.cold_keys)
    assert c1 == c0


def test_process_agent_errors_reach_the_caller(tmp_path):
    """A DMA error of a scatter not waited for is raised by the next counters(), as model://
    does; a refused argument of the child's model (a hot set beyond the CAM) is raised by the
    call; a bad URL option is refused; a child that dies is named by the next call."""
    config = AcceleratorConfig.for_workload(4, 8, 16)
    with HostMemory(1 << 16, tmp_path / "m.bin") as mem:
        dev = hotline.open(PROCESS, config=config, memory=mem)
        w = mem.alloc(16 * 32)
        dev.set_table(0, w, 16, 32)
        dev.set_staging(mem.alloc(2 * config.cold_max_keys * 32), 32, config.cold_max_keys)
        dev.scatter(0, np.array([5 << 27], np.uint32), wait=False)   # table 5: no descriptor
        with pytest.raises(HotlineError, match="scatter of staging bank 0 reported 1 DMA errors"):
            dev.counters()
        with pytest.raises(HotlineError, match="hot set"):
            dev.load_hot_set(np.arange(config.hot_slots + 1, dtype=np.uint32))
        os.kill(dev._proc.pid, signal.SIGKILL)
        dev._proc.wait()
        with pytest.raises(HotlineError, match=r"model agent process exited with status -9"):
            dev.push_batch(np.arange(4, dtype=np.uint32), [2, 2])
            dev.pull_batch()
        dev.close()
    for url, match in (("model://?agent=fork", "unknown model agent 'fork'"),
                       ("model://?trace=1", "takes one option"),
                       ("model://rank0?agent=process&x=1", "takes one option")):
        with pytest.raises(HotlineError, match=match):
            hotline.open(url)
    with hotline.open("model://rank1?agent=process") as dev:   # a name labels the device
        assert dev.info()["agent"] == "process" and dev.url == "model://rank1?agent=process"


def test_collection_trains_the_same_over_the_process_agent():
    """hotline.nn's hotline placement over model://?agent=process: every loss and the final
    tables equal model://'s bit for bit (prefetch on, a hot set planned from the first
    batches loading mid-run, FBGEMM's kernel in place)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("fbgemm_gpu")
    from hotline.nn import EmbeddingBagCollection, TableConfig
    from hotline.nn.inputs import batches
    ds = dense_stream(1200)
    tables = [TableConfig(f"t{t}", int(n), 8, [f"f{t}"]) for t, n in enumerate(ds.table_sizes)]
    runs = []
    for url in ("model://", PROCESS):
        torch.manual_seed(0)
        ebc = EmbeddingBagCollection(tables, placement="hotline", device_url=url, lr=0.1,
                                     device="cpu", hot_rows=300, profile_batches=4)
        losses, data = [], list(batches(ds, 64))
        for i, (idx, off) in enumerate(data):
            out = ebc(idx, off)
            if i + 1 < len(data):
                ebc.prefetch(*data[i + 1])
            loss = (out * out).mean()
            loss.backward()
            losses.append(loss.item())
        runs.append((losses, ebc.state_dict(), ebc._kernel is not None))
        ebc.close()
    (l0, s0, k0), (l1, s1, k1) = runs
    assert l1 == l0 and k0 and k1
    assert all(torch.equal(s1[k], s0[k]) for k in s0)


def test_populate_maps_a_window_without_changing_it(tmp_path):
    """`HostMemory.populate` (the process agent's, on each DMA window): a second mapping of
    a filled file keeps every byte after populating a window that starts inside a page, and
    shares its pages with the first."""
    with HostMemory(1 << 20, tmp_path / "m.bin") as mem:
        w = mem.alloc(300_000, align=8, name="t0")
        mem.array[:] = np.random.default_rng(0).integers(0, 256, mem.size, dtype=np.uint8)
        other = HostMemory(mem.size, path=mem.path)
        inside = type(w)(w.base + 100, w.size - 100, "inside")
        other.populate(inside)
        assert np.array_equal(other.array, mem.array)
        other.array[inside.base] ^= 1
        assert mem.array[inside.base] == other.array[inside.base]   # the same pages
        other.close()
        assert mem.path.exists()
