"""A Device API session shared by the backend parity tests (model:// against the others)."""
import numpy as np

import hotline
from hotline.device_model import AcceleratorConfig
from hotline.host_memory import HostMemory

ROW_BYTES = 32
MEMORY_BYTES = 1 << 22


def session_config(hot, batch):
    """The accelerator configuration `session` opens devices with."""
    return AcceleratorConfig.for_workload(len(hot), batch, 26 * batch)


def session(url, ds, hot, batch, tmp_path, name, **options):
    """Open ``url``, register tables and staging in a fresh memory with the same contents,
    load the hot set, run every batch double-buffered (+1 on each staging byte, scatter);
    return (results, memory bytes, counters, placement, the closed device)."""
    config = session_config(hot, batch)
    mem = HostMemory(MEMORY_BYTES, tmp_path / f"{name}.bin")
    rng = np.random.default_rng(0)
    out = []
    with hotline.open(url, config=config, memory=mem, **options) as dev:
        for t, rows in enumerate(ds.table_sizes.tolist()):
            w = mem.alloc(rows * ROW_BYTES, name=f"t{t}")
            mem.array[w.base:w.end] = rng.integers(0, 256, w.size, dtype=np.uint8)
            dev.set_table(t, w, rows, ROW_BYTES)
        slots = config.cold_max_keys
        staging = mem.alloc(2 * slots * ROW_BYTES, name="staging")
        dev.set_staging(staging, ROW_BYTES, slots, banks=2)
        placement = dev.load_hot_set(hot)
        offsets = ds.sample_offsets
        starts = list(range(0, ds.num_samples, batch))
        lens = np.diff(offsets)

        def push(i):
            s0, s1 = starts[i], min(starts[i] + batch, ds.num_samples)
            dev.push_batch(ds.keys[offsets[s0]:offsets[s1]], lens[s0:s1])

        push(0)
        for i in range(len(starts)):
            if i + 1 < len(starts):
                push(i + 1)
            r = dev.pull_batch()
            out.append(r)
            lo = staging.base + r.bank * slots * ROW_BYTES
            n = len(r.cold_keys) * ROW_BYTES
            mem.array[lo:lo + n] += 1
            r.scatter = dev.scatter(r.bank, r.cold_keys)
        counters = dev.counters()
    data = mem.array.copy()
    mem.close()
    return out, data, counters, placement, dev


def assert_sessions_match(got, want, batches):
    """Two `session` returns agree: placement, every batch result, host memory, counters."""
    assert np.array_equal(got[3].keys, want[3].keys) and np.array_equal(got[3].slots, want[3].slots)
    assert len(got[0]) == len(want[0]) == batches
    for g, w in zip(got[0], want[0]):
        for f in ("hot", "slot", "popular", "non_popular", "cold_keys"):
            assert np.array_equal(np.asarray(getattr(g, f), np.int64),
                                  np.asarray(getattr(w, f), np.int64)), (g.batch_id, f)
        assert (g.bank, g.overflow, g.gather, g.scatter) == (w.bank, w.overflow, w.gather, w.scatter)
    assert np.array_equal(got[1], want[1]), "host memory differs after the scatters"
    assert got[2] == want[2]
