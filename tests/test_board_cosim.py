"""The board co-simulation through the real serial:// driver: the ULX3S-85F top (UART, host
link bridge, accelerator, block-RAM memory window) in Verilator, its UART pins bridged
bit by bit to a TCP socket, against model:// on a real Criteo stream (rows renumbered densely
so the tables fit the 64 KiB window). Link faults on the wire are caught by the RTL's CRC
checks and recovered by resending."""
import time
import pytest

import hotline
from device_session import (Proxy, abandon_session, assert_sessions_match, check_link_faults,
                            dense_stream, session)
from hotline.contract.errors import HotlineError
from hotline.fpga.boards import BOARDS
from hotline.host.host_memory import HostMemory
from hotline.model.planner import exact_hot_set

BOARD = BOARDS["ulx3s-85f"]
# 8-byte rows (one bus word) and 64-byte table alignment keep 26 tables + 2 staging banks of
# 1024 slots inside the 64 KiB window.
LAYOUT = dict(config=BOARD.config, memory_bytes=BOARD.window_bytes, row_bytes=8, align=64)
# The whole module is slow: one board build and a bit-level UART (about 3 min here, more on
# CI); CI's reduced set runs test_board_session_after_an_abandoned_one_matches_model, and
# serial:// against the accelerator RTL runs in the default tier (test_serial_device).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def board(tmp_path_factory, simulator_or_skip):
    simulator_or_skip("verilator")
    from hotline.sim.board_server import BoardCosim
    with BoardCosim(BOARD.name, tmp_path_factory.mktemp("boardsim")) as cosim:
        yield cosim.url


def _parity(url, tmp_path, samples, hot_keys):
    ds = dense_stream(samples)
    hot = exact_hot_set(ds.keys, hot_keys).keys
    want = session("model://", ds, hot, 32, tmp_path, "model", **LAYOUT)
    t0 = time.monotonic()
    got = session(url, ds, hot, 32, tmp_path, "board", timeout=600, **LAYOUT)
    batches = -(-samples // 32)
    dev = got[4]
    wire = dev.link_stats["bytes_out"] + dev.link_stats["bytes_in"] - dev.setup_wire_bytes
    print(f"board co-simulation session, {samples} samples: {time.monotonic() - t0:.0f} s; "
          f"{wire / batches:,.0f} wire bytes per batch ({wire / batches * 10 / BOARD.baud * 1e3:.2f} "
          f"ms at {BOARD.baud / 1e6:g} Mbaud), setup {dev.setup_wire_bytes:,} bytes")
    assert_sessions_match(got, want, batches=batches)
    assert got[2]["gather_rows"] > 0 and got[2]["scatter_rows"] > 0
    assert got[2]["window_errors"] == 0 and got[2]["axi_errors"] == 0
    info = got[4].info()
    assert (info["window_bytes"], info["max_request"], info["clock_hz"], info["baud"]) == \
        (BOARD.window_bytes, BOARD.max_request, BOARD.core_hz, BOARD.baud)
    assert (BOARD.core_hz, BOARD.baud) == (60_000_000, 3_000_000)  # INFO: the accelerator clock


def test_board_matches_model_through_the_serial_driver(board, tmp_path):
    _parity(board, tmp_path, 64, 100)


@pytest.mark.ci
def test_board_session_after_an_abandoned_one_matches_model(board, tmp_path):
    """A host died mid-batch on the board (`abandon_session`); the next session's OPEN and soft
    reset leave nothing of it: the RTL bridge's ring, result buffers and response cache, and
    the accelerator's CAM, learner, cold-key set, streams and counters all start afresh."""
    ds = dense_stream(96)
    hot = exact_hot_set(ds.keys, 100).keys
    assert abandon_session(board, ds, hot, 32, tmp_path, timeout=600, **LAYOUT) > 0
    _parity(board, tmp_path, 64, 100)


def test_board_matches_model_on_a_longer_stream(board, tmp_path):
    _parity(board, tmp_path, 256, 400)


def test_board_refuses_memory_beyond_its_window(board, tmp_path):
    with HostMemory(BOARD.window_bytes + 4096, tmp_path / "big.bin") as mem:
        with pytest.raises(HotlineError, match="does not fit"):
            hotline.open(board, config=BOARD.config, memory=mem, timeout=120)


def test_board_link_faults_are_caught_by_the_rtl_crc(board, tmp_path):
    proxy = Proxy(board)
    with HostMemory(4096, tmp_path / "m.bin") as mem, \
            hotline.open(proxy.url, config=BOARD.config, memory=mem, timeout=5,
                         retries=3) as dev:
        check_link_faults(dev, proxy, 5, settle=0.5)
        proxy.close()
