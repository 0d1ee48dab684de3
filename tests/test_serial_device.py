"""serial:// against the accelerator RTL served in listen mode (`serve_in_background`): its
memory window is a separate file, so every byte the DMA moves was mirrored by SerialDevice.

One server (one Verilator build) for the module, with a small max_request (the server refuses
anything larger, so every payload path must split) and an input buffer of one request (so
LOOKUPS meet BUSY), built with a 36-bit bus (the width serial:// reports is the device's).
Parity with model:// on a real stream (or the built-in generator), host
memory coherence, the open-time checks, and link faults through a damaging TCP proxy."""

import numpy as np
import pytest

import hotline
from device_session import (MEMORY_BYTES, Proxy, abandon_session, assert_sessions_match,
                            check_link_faults, dense_stream, session, session_config)
from hotline.contract.config import AcceleratorConfig
from hotline.contract.errors import HotlineError
from hotline.host.host_memory import HostMemory
from hotline.host.link import LinkError
from hotline.model.planner import exact_hot_set

BATCH = 64
MAX_REQUEST = 4096
ADDR_WIDTH = 36   # not the default 32: serial:// must take the width from ADDR_WIDTH


@pytest.fixture(scope="module")
def board(tmp_path_factory, simulator_or_skip):
    """(stream, hot keys, url, window file) of a listen-mode server for the session config."""
    simulator_or_skip("verilator")
    from hotline.sim.device_server import serve_in_background

    ds = dense_stream(200)
    hot = exact_hot_set(ds.keys, 300).keys
    tmp = tmp_path_factory.mktemp("board")
    with serve_in_background(session_config(hot, BATCH), tmp / "window.bin", MEMORY_BYTES,
                             tmp / "build", max_request=MAX_REQUEST,
                             input_beats=MAX_REQUEST // 8, addr_width=ADDR_WIDTH) as url:
        yield ds, hot, url, tmp / "window.bin"


def test_serial_device_matches_model_and_mirrors_memory(board, tmp_path):
    ds, hot, url, window = board
    want = session("model://", ds, hot, BATCH, tmp_path, "model")
    got = session(url, ds, hot, BATCH, tmp_path, "serial", timeout=60)
    # Host memory equal to model:// after the scatters is the coherence check: the gathers
    # and scatters ran on the device's own window.
    assert_sessions_match(got, want, batches=4)
    assert np.array_equal(np.fromfile(window, np.uint8)[:MEMORY_BYTES], got[1]), \
        "the device window is not a mirror of host memory"
    assert got[4].link_stats["busy"] > 0, "LOOKUPS never met a full input buffer"
    assert got[4].info()["max_request"] == MAX_REQUEST


def test_open_checks_memory_window_and_configuration(board, tmp_path):
    ds, hot, url, _ = board
    config = session_config(hot, BATCH)
    with HostMemory(MEMORY_BYTES + 8, tmp_path / "big.bin") as mem:
        with pytest.raises(HotlineError, match=f"host memory of {MEMORY_BYTES + 8:,} bytes does "
                                               f"not fit the device's {MEMORY_BYTES:,}-byte"):
            hotline.open(url, config=config, memory=mem)
    other = AcceleratorConfig(**{**config.as_dict(), "cam_entries": 2 * config.cam_entries})
    with HostMemory(1 << 16, tmp_path / "small.bin") as mem:
        with pytest.raises(HotlineError, match=f"CAM_ENTRIES is {config.cam_entries}, "
                                               f"config.cam_entries {other.cam_entries}"):
            hotline.open(url, config=other, memory=mem)
        with hotline.open(url, config=config, memory=mem) as dev:
            info = dev.info()
            assert (info["window_bytes"], info["data_width"]) == (MEMORY_BYTES, 64)
            assert info["addr_width"] == dev.regs.read("ADDR_WIDTH") == ADDR_WIDTH


def test_open_needs_a_port_that_opens(tmp_path):
    with HostMemory(1 << 12, tmp_path / "m.bin") as mem:
        with pytest.raises(HotlineError, match="no port"):
            hotline.open("serial://", memory=mem)
        with pytest.raises(LinkError, match="cannot open /nonexistent/tty"):
            hotline.open("serial:///nonexistent/tty", memory=mem)


def test_link_faults_are_recovered_and_a_dead_link_raises(board, tmp_path):
    ds, hot, url, _ = board
    proxy = Proxy(url)
    with HostMemory(1 << 16, tmp_path / "m.bin") as mem, \
            hotline.open(proxy.url, config=session_config(hot, BATCH), memory=mem,
                         timeout=1.5, retries=3) as dev:
        check_link_faults(dev, proxy, 1.5)
        proxy.close()
        with pytest.raises(LinkError, match="link failed"):
            dev.regs.read("SCRATCH")


def test_a_new_session_finds_nothing_of_an_abandoned_one(board, tmp_path):
    """After a host died mid-batch (`abandon_session`: another hot set, the learner counting,
    batches in flight, its last seq that of the next session's ID read), the next session
    equals model:// from the first beat: OPEN emptied the response cache and the server's
    input and result buffers, and the soft reset emptied the accelerator."""
    ds, hot, url, _ = board
    assert abandon_session(url, ds, hot, BATCH, tmp_path, timeout=60) > 0
    want = session("model://", ds, hot, BATCH, tmp_path, "model")
    got = session(url, ds, hot, BATCH, tmp_path, "serial", timeout=60)
    assert_sessions_match(got, want, batches=4)


def test_a_hot_set_loads_in_a_few_round_trips(board, tmp_path):
    """load_hot_set of 300 keys in bulk (CAM_CMDS out, cam_events back): the same placement as
    model://, with a handful of requests besides the RESULTS fetches (whose number is how
    often the host asked before the simulated CAM was done) where the register path took
    three or more per key; update_hot_set after it likewise."""
    ds, hot, url, _ = board
    config = session_config(hot, BATCH)
    with HostMemory(1 << 16, tmp_path / "m.bin") as mem:
        with hotline.open("model://", config=config, memory=mem) as ref:
            want = ref.load_hot_set(hot)
            want_update = ref.update_hot_set(hot[50:] if len(hot) > 50 else hot)
        with hotline.open(url, config=config, memory=mem, timeout=60) as dev:
            s = dev.link_stats
            before = s["requests"] - s["fetches"]
            got = dev.load_hot_set(hot)
            loaded = s["requests"] - s["fetches"] - before
            got_update = dev.update_hot_set(hot[50:] if len(hot) > 50 else hot)
    for g, w in ((got, want), (got_update, want_update)):
        assert np.array_equal(g.keys, w.keys) and np.array_equal(g.slots, w.slots)
        assert np.array_equal(g.failed, w.failed)
    # CONFIG.cam_events, and 301 commands in one CAM_CMDS frame (max_request 4096)
    assert len(hot) == 300 and loaded == 2, f"{loaded} requests for 300 inserts"
