"""Shared by the backend parity tests (model:// against sim://, serial://, the board
co-simulation): a Device API session, a dense real stream, a link-damaging TCP proxy."""
import socket
import threading
import time

import numpy as np

import hotline
from helpers import DATA
from hotline.data import open_data
from hotline.contract.config import AcceleratorConfig
from hotline.contract.streams import lookup_beats, pack
from hotline.host.host_memory import HostMemory

ROW_BYTES = 32
MEMORY_BYTES = 1 << 22


def session_config(hot, batch):
    """The accelerator configuration `session` opens devices with."""
    return AcceleratorConfig.for_workload(len(hot), batch, 26 * batch)


def session(url, ds, hot, batch, tmp_path, name, config=None, memory_bytes=MEMORY_BYTES,
            row_bytes=ROW_BYTES, align=4096, reserve=0, **options):
    """Open ``url``, register tables and staging in a fresh memory with the same contents,
    load the hot set, run every batch double-buffered (+1 on each staging byte, scatter);
    return (results, memory bytes, counters, placement, the closed device). ``reserve``:
    bytes allocated first, so that the tables and staging lie above them; the memory bytes
    returned are those from there on."""
    ROW_BYTES = row_bytes
    config = config or session_config(hot, batch)
    mem = HostMemory(memory_bytes, tmp_path / f"{name}.bin")
    if reserve:
        mem.alloc(reserve, align, name="reserved")
    rng = np.random.default_rng(0)
    out = []
    with hotline.open(url, config=config, memory=mem, **options) as dev:
        for t, rows in enumerate(ds.table_sizes.tolist()):
            w = mem.alloc(rows * ROW_BYTES, align, name=f"t{t}")
            mem.array[w.base:w.end] = rng.integers(0, 256, w.size, dtype=np.uint8)
            dev.set_table(t, w, rows, ROW_BYTES)
        slots = config.cold_max_keys
        staging = mem.alloc(2 * slots * ROW_BYTES, align, name="staging")
        dev.set_staging(staging, ROW_BYTES, slots, banks=2)
        placement = dev.load_hot_set(hot)
        # the link's bytes so far (sim:// and serial://), to tell the setup's from the batches'
        stats = getattr(dev, "link_stats", {})
        dev.setup_wire_bytes = stats.get("bytes_out", 0) + stats.get("bytes_in", 0)
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
    data = mem.array[reserve:].copy()
    mem.close()
    return out, data, counters, placement, dev


def abandon_session(url, ds, hot, batch, tmp_path, config=None, memory_bytes=MEMORY_BYTES,
                    row_bytes=ROW_BYTES, align=4096, **options):
    """A host that dies mid-batch: it registers the tables and staging (gather on), loads
    another hot set (the coldest keys), starts the learner, sends the lookup beats of two
    batches and half of a third (below the Device API, on its agent thread, so that no result
    is fetched and the fragmenter is left inside a batch), leaves its last served seq at 3 (a
    READ32 of SCRATCH: the seq of the next serial:// session's ID read, which a response
    cache that outlived the session would answer with 0) and closes the port without a word.
    Returns the lookup beats sent."""
    config = config or session_config(hot, batch)
    with HostMemory(memory_bytes, tmp_path / "abandoned.bin") as mem:
        dev = hotline.open(url, config=config, memory=mem, **options)
        for t, rows in enumerate(ds.table_sizes.tolist()):
            dev.set_table(t, mem.alloc(rows * row_bytes, align), rows, row_bytes)
        slots = config.cold_max_keys
        dev.set_staging(mem.alloc(2 * slots * row_bytes, align), row_bytes, slots, banks=2)
        keys, counts = np.unique(ds.keys, return_counts=True)
        dev.load_hot_set(keys[np.argsort(counts, kind="stable")][:len(hot)])
        dev.learner_start()

        def leave_mid_batch():
            o, sent = ds.sample_offsets, 0
            for i in range(3):
                s0, s1 = i * batch, (i + 1) * batch
                key, eos, eob, empty = lookup_beats(ds.keys[o[s0]:o[s1]], o[s0:s1 + 1] - o[s0],
                                                    batch)
                beats = pack(dev.layouts["lookups"], key=key, eos=eos, eob=eob, empty=empty)
                beats = beats if i < 2 else beats[:len(beats) // 2]
                dev._send_beats("LOOKUPS", beats)
                sent += len(beats)
            dev.seq = 2
            dev.regs.read("SCRATCH")
            return sent
        sent = dev._agent_call(leave_mid_batch)
        dev.close()
    return sent


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


def dense_stream(samples):
    """``samples`` samples of the real Criteo file, else of the generator, with rows renumbered
    densely per table (same access pattern; the tables then fit a small memory window)."""
    real = DATA / "criteo_kaggle/train_random4584.csv.gz"
    ds = open_data(str(real) if real.exists() else f"synth:criteo-kaggle:{samples}")
    return ds.head(samples).dense_rows()


class Proxy:
    """A TCP relay between SerialDevice and the server that damages traffic on demand:
    ``faults[direction]`` ("up": host to device, "down") = "drop" (a byte) or "flip" (a bit)
    hits the next chunk; ``blackhole`` swallows everything; `close` cuts both sides."""

    def __init__(self, url):
        self.target = int(url.rsplit(":", 1)[1])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"serial://socket://127.0.0.1:{self.listener.getsockname()[1]}"
        self.faults = {"up": None, "down": None}
        self.blackhole = False
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        host, _ = self.listener.accept()
        device = socket.create_connection(("127.0.0.1", self.target))
        self.socks = [host, device]
        threading.Thread(target=self._pump, args=(host, device, "up"), daemon=True).start()
        self._pump(device, host, "down")

    def _pump(self, src, dst, direction):
        while True:
            try:
                data = bytearray(src.recv(1 << 16))
            except OSError:
                return
            if not data:
                return
            fault, self.faults[direction] = self.faults[direction], None
            if fault == "drop":
                del data[len(data) // 2]
            elif fault == "flip":
                data[len(data) // 2] ^= 0x10
            if not self.blackhole:
                dst.sendall(data)

    def close(self):
        for s in self.socks:
            s.shutdown(socket.SHUT_RDWR)
            s.close()
        self.listener.close()


def check_link_faults(dev, proxy, timeout, settle=0.2):
    """Through ``proxy``, a flipped bit and a dropped byte in each direction are recovered by
    resending (CSR writes and reads still agree); a link that swallows everything raises
    "no answer" after the retries. ``timeout``: the device's request timeout."""
    from hotline.host.link import LinkError
    for i, (direction, fault) in enumerate([("up", "flip"), ("down", "flip"),
                                             ("up", "drop"), ("down", "drop")]):
        time.sleep(settle)  # let any late duplicate of the last exchange arrive first
        dev.regs.read("ID")
        before = dev.link_stats["resends"]
        proxy.faults[direction] = fault
        dev.regs.write("SCRATCH", 0x1234ABC0 + i)
        assert dev.regs.read("SCRATCH") == 0x1234ABC0 + i, (direction, fault)
        assert proxy.faults[direction] is None and dev.link_stats["resends"] > before
    proxy.blackhole = True
    t0 = time.monotonic()
    try:
        dev.regs.read("SCRATCH")
    except LinkError as e:
        assert "no answer to READ32" in str(e)
    else:
        raise AssertionError("a link that answers nothing did not raise LinkError")
    assert time.monotonic() - t0 >= 3 * timeout
