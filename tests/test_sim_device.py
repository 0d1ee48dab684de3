"""sim:// (the accelerator RTL in co-simulation, over the framed host link) against model://
through the same Device API, on a real stream; and a dead simulator raising LinkError."""
import numpy as np
import pytest

import hotline
from conftest import real_file, simulator_or_skip
from hotline.commands import open_data
from hotline.device_model import AcceleratorConfig
from hotline.host_memory import HostMemory
from hotline.link import LinkError
from hotline.planner import exact_hot_set

ROW_BYTES = 32


def session(url, ds, hot, batch, tmp_path, name, **options):
    """Open ``url``, register tables and staging in a fresh memory with the same contents,
    load the hot set, run every batch double-buffered (+1 on each staging byte, scatter);
    return (results, memory bytes, counters, placement)."""
    config = AcceleratorConfig.for_workload(len(hot), batch, 26 * batch)
    mem = HostMemory(1 << 22, tmp_path / f"{name}.bin")
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
    return out, data, counters, placement


def test_sim_device_matches_model(tmp_path):
    simulator_or_skip("verilator")
    ds = open_data(str(real_file("criteo_kaggle/train_random4584.csv.gz"))).head(200)
    hot = exact_hot_set(ds.keys, 300).keys
    want = session("model://", ds, hot, 64, tmp_path, "model")
    got = session("sim://verilator", ds, hot, 64, tmp_path, "sim", build_dir=tmp_path / "build")
    assert np.array_equal(got[3].keys, want[3].keys) and np.array_equal(got[3].slots, want[3].slots)
    assert len(got[0]) == len(want[0]) == 4
    for g, w in zip(got[0], want[0]):
        for f in ("hot", "slot", "popular", "non_popular", "cold_keys"):
            assert np.array_equal(np.asarray(getattr(g, f), np.int64),
                                  np.asarray(getattr(w, f), np.int64)), (g.batch_id, f)
        assert (g.bank, g.overflow, g.gather, g.scatter) == (w.bank, w.overflow, w.gather, w.scatter)
    assert np.array_equal(got[1], want[1]), "host memory differs after the scatters"
    assert got[2] == want[2]


class FlakySocket:
    """Wraps the link socket: flips one bit of the next frame sent or of the next bytes
    received, once each when armed."""

    def __init__(self, sock):
        self.sock, self.corrupt_send, self.corrupt_recv = sock, False, False

    def sendall(self, data):
        if self.corrupt_send:
            self.corrupt_send = False
            data = bytearray(data)
            data[len(data) // 2] ^= 0x04
        return self.sock.sendall(bytes(data))

    def recv(self, n):
        data = self.sock.recv(n)
        if self.corrupt_recv and data:
            self.corrupt_recv = False
            data = bytearray(data)
            data[-1] ^= 0x80
        return bytes(data)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def test_link_faults(tmp_path):
    """Corrupted request and response frames are retried; a stopped simulator times out and a
    dead one raises LinkError; close() always ends the process group."""
    import os
    import signal

    simulator_or_skip("verilator")
    config = AcceleratorConfig.for_workload(16, 8, 64)
    mem = HostMemory(1 << 20, tmp_path / "m.bin")
    dev = hotline.open("sim://verilator", config=config, memory=mem, build_dir=tmp_path / "b",
                       timeout=20)
    try:
        dev.sock = flaky = FlakySocket(dev.sock)
        flaky.corrupt_send = True
        dev.regs.write("SCRATCH", 0x1234ABCD)          # NAK, resent
        flaky.corrupt_recv = True
        assert dev.regs.read("SCRATCH") == 0x1234ABCD   # bad response, resent, cached answer
        assert not flaky.corrupt_send and not flaky.corrupt_recv
        dev.timeout, dev.retries = 2, 0
        os.killpg(dev.proc.pid, signal.SIGSTOP)
        with pytest.raises(LinkError, match="no answer"):
            dev.counters()
        os.killpg(dev.proc.pid, signal.SIGCONT)
        dev.kill()  # the whole simulator process group, as a crash would
        with pytest.raises(LinkError):
            dev.regs.read("ID")
    finally:
        dev.close()
    assert dev.proc.poll() is not None


@pytest.mark.slow
def test_train_over_sim_gives_model_losses(tmp_path):
    """hotline train --device-url sim://verilator: the same per-step losses and counters as
    model:// on a small real stream (the RTL gathers and scatters the trainer's rows)."""
    simulator_or_skip("verilator")
    from hotline.train import TrainConfig, prepare_data, train

    ds = open_data(str(real_file("criteo_kaggle/train_random4584.csv.gz")), limit=400)
    data = prepare_data(ds, 0.1)
    reports = [train(data, TrainConfig(mode="hotline", batch_size=64, hot_rows=300, dim=8,
                                       bottom=(16,), top=(16,), threads=1, device_url=url))
               for url in ("model://", "sim://verilator")]
    assert reports[0]["losses"] == reports[1]["losses"]
    assert reports[0]["counters"] == reports[1]["counters"]
