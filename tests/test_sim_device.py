"""sim:// (the accelerator RTL in co-simulation, over the framed host link) against model://
through the same Device API, on a real stream; and a dead simulator raising LinkError."""
import pytest

import hotline
from helpers import real_file
from device_session import assert_sessions_match, session
from hotline.data import open_data
from hotline.contract.config import AcceleratorConfig
from hotline.host.host_memory import HostMemory
from hotline.host.link import LinkError
from hotline.model.planner import exact_hot_set


def test_sim_device_matches_model(tmp_path, simulator_or_skip):
    simulator_or_skip("verilator")
    ds = open_data(str(real_file("criteo_kaggle/train_random4584.csv.gz"))).head(200)
    hot = exact_hot_set(ds.keys, 300).keys
    want = session("model://", ds, hot, 64, tmp_path, "model")
    got = session("sim://verilator", ds, hot, 64, tmp_path, "sim", build_dir=tmp_path / "build")
    assert_sessions_match(got, want, batches=4)


@pytest.mark.slow
@pytest.mark.ci
def test_sim_device_above_4gib_matches_model(tmp_path, simulator_or_skip):
    """Issue 44: a HostMemory of more than 4 GiB gives sim:// (and model://) a 33-bit bus by
    default; tables and staging placed above a reserved window that ends 16 KiB below 4 GiB
    (the first table straddles 2**32, the rest lie above it) are gathered and scattered by the
    RTL exactly as model:// does on the same memory contents (DESC_BASE_HI and
    STAGING_BASE_HI set)."""
    simulator_or_skip("verilator")
    ds = open_data(str(real_file("criteo_kaggle/train_random4584.csv.gz"))).head(128)
    hot = exact_hot_set(ds.keys, 300).keys
    reserve = (1 << 32) - (16 << 10)
    big = dict(memory_bytes=reserve + (4 << 20), reserve=reserve)
    want = session("model://", ds, hot, 64, tmp_path, "model", **big)
    got = session("sim://verilator", ds, hot, 64, tmp_path, "sim",
                  build_dir=tmp_path / "build", **big)
    assert got[4].addr_width == want[4].addr_width == 33
    assert got[4].staging.window.base >= 1 << 32
    assert got[2]["gather_rows"] > 0 and got[2]["scatter_rows"] > 0 and got[2]["window_errors"] == 0
    assert_sessions_match(got, want, batches=2)


def test_sim_device_refuses_an_addr_width_short_of_its_memory(tmp_path):
    """sim:// with an addr_width that cannot reach every byte of its HostMemory, or outside
    32..64, is refused in one line before any simulator starts."""
    from hotline.contract.errors import HotlineError

    config = AcceleratorConfig.for_workload(16, 8, 64)
    with HostMemory((1 << 32) + 4096, tmp_path / "m.bin") as mem:
        for bad, why in ((32, "exceeds the 32-bit AXI address space"),
                         (65, "addr_width must be an integer 32..64"),
                         ("x40", "addr_width must be an integer 32..64")):
            with pytest.raises(HotlineError, match=why):
                hotline.open("sim://verilator", config=config, memory=mem, addr_width=bad)


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


@pytest.mark.slow   # (serial:// has its link faults in the default tier: test_serial_device)
def test_link_faults(tmp_path, simulator_or_skip):
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
def test_train_over_sim_gives_model_losses(tmp_path, simulator_or_skip):
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


@pytest.mark.slow
def test_learn_and_refresh_over_sim_give_model_results(tmp_path, simulator_or_skip):
    """hotline train --hot-set learn --refresh every:3 over sim://verilator: the RTL learner's
    sets (readout over the link) and the in-place updates give the same loads, per-step hot
    shares, losses and counters as model://."""
    simulator_or_skip("verilator")
    from hotline.train import TrainConfig, prepare_data, train

    ds = open_data(str(real_file("criteo_kaggle/train_random4584.csv.gz")), limit=600)
    data = prepare_data(ds, 0.1)
    reports = [train(data, TrainConfig(mode="hotline", batch_size=64, hot_rows=300, dim=8,
                                       bottom=(16,), top=(16,), threads=1, device_url=url,
                                       hot_set="learn", learn_window=128, refresh="every:3"))
               for url in ("model://", "sim://verilator")]
    assert len(reports[0]["hot_loads"]) == 3
    for key in ("losses", "counters", "hot_loads", "step_hot_share"):
        assert reports[0][key] == reports[1][key], key


@pytest.mark.rtl
def test_sim_refuses_a_hot_set_beyond_capacity(tmp_path):
    """sim:// refuses more hot keys than ``config.hot_capacity`` in one line, as model://
    does, before any insert; a hot set that fits still loads."""
    import numpy as np

    from hotline.contract.errors import HotlineError
    from hotline.host.simulators import simulator_available

    if not simulator_available("verilator"):
        pytest.skip("verilator is not installed")
    config = AcceleratorConfig.for_workload(16, 8, 64)   # a 64-entry CAM: 57 hot rows
    keys = np.arange(config.hot_capacity + 1, dtype=np.uint32)
    with HostMemory(1 << 20, tmp_path / "m.bin") as mem, \
            hotline.open("sim://verilator", config=config, memory=mem,
                         build_dir=tmp_path / "b", timeout=60) as dev:
        with pytest.raises(HotlineError, match=f"holds at most {config.hot_capacity} hot rows"):
            dev.load_hot_set(keys)
        assert dev.placement is None
        placement = dev.load_hot_set(keys[:16])
        assert placement.keys.size + placement.failed.size == 16
