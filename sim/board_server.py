"""Board co-simulation: a board's exact top (`hotline.fpga.board_top.BoardTop`) in Verilator,
its UART pins bridged to a loopback TCP port, so the `serial://` driver that talks to a real
board talks to the simulated one: ``hotline.open("serial://socket://127.0.0.1:PORT")``.

The bridge is bit-level: host bytes are shifted onto ``rx`` at the board's baud (``divisor``
clock cycles per bit, 8N1) and ``tx`` is sampled at mid-bit, so the RTL UART, the link bridge
and everything behind it run as on the board, at the board's clock (only faster than real
time). The memory window is the board's block RAM, reached only through the link.

``python -m hotline.sim.board_server SPEC.json`` (spec: board, build_dir, simulator,
port_file) serves until the host closes the connection; `BoardCosim` starts one in the
background and gives the ``serial://`` URL.
"""
import json
import os
import socket
import sys
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

POLL_CYCLES = 200


@cocotb.test()
async def serve(dut):
    from hotline.fpga.boards import board
    spec = json.loads(os.environ["HOTLINE_BOARD_SPEC"])
    b = board(spec["board"])
    div = b.divisor
    Clock(dut.clk, round(1e9 / b.clock_hz), unit="ns").start()
    dut.rx.value = 1
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    listener = socket.create_server(("127.0.0.1", 0))
    Path(spec["port_file"]).write_text(str(listener.getsockname()[1]))
    listener.settimeout(600)
    conn, _ = listener.accept()
    listener.close()
    conn.setblocking(False)
    closed = False

    async def to_host():
        while not closed:
            await FallingEdge(dut.tx)
            await ClockCycles(dut.clk, div // 2)
            value = 0
            for bit in range(8):
                await ClockCycles(dut.clk, div)
                await ReadOnly()
                value |= int(dut.tx.value) << bit
            await ClockCycles(dut.clk, div)  # the stop bit's middle
            try:
                conn.sendall(bytes([value]))
            except OSError:
                return

    cocotb.start_soon(to_host())
    while True:
        try:
            data = conn.recv(1 << 16)
        except BlockingIOError:
            await ClockCycles(dut.clk, POLL_CYCLES)
            continue
        except OSError:
            break
        if not data:
            break
        for value in data:
            for bit in [0] + [(value >> i) & 1 for i in range(8)] + [1]:
                dut.rx.value = bit
                await ClockCycles(dut.clk, div)
    closed = True
    conn.close()


def main(argv=None):
    from hotline.fpga.board_top import BoardTop
    from hotline.fpga.boards import board

    from .runner import run_cocotb

    path = (argv or sys.argv[1:])[0]
    spec = json.loads(Path(path).read_text())
    top = BoardTop(board(spec["board"]))
    run_cocotb(top, "board_top", "hotline.sim.board_server", spec["build_dir"],
               spec.get("simulator", "verilator"),
               extra_env={"HOTLINE_BOARD_SPEC": json.dumps(spec)})


class BoardCosim:
    """Context manager: the co-simulated board in a child process; ``url`` is its
    ``serial://socket://...`` address. ``start_timeout`` covers the Verilator build."""

    def __init__(self, board_name, build_dir="build/boardsim", simulator="verilator",
                 start_timeout=1200.0):
        import subprocess
        from hotline.fpga.boards import board
        board(board_name)  # a clear error for an unknown board, before any build
        build = Path(build_dir) / f"{board_name}_{simulator}"
        build.mkdir(parents=True, exist_ok=True)
        port_file = build / "port"
        port_file.unlink(missing_ok=True)
        spec = {"board": board_name, "build_dir": str(build.resolve()), "simulator": simulator,
                "port_file": str(port_file.resolve())}
        (build / "spec.json").write_text(json.dumps(spec))
        self.log_path = build / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "hotline.sim.board_server",
                                      str(build / "spec.json")], stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + start_timeout
        while not port_file.exists() or not port_file.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"board co-simulation of {board_name} did not start; "
                                   f"see {self.log_path}")
            time.sleep(0.5)
        self.url = f"serial://socket://127.0.0.1:{int(port_file.read_text())}"

    def close(self):
        import signal
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=20)  # it ends when the host closes the link
            except Exception:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__":
    main()
