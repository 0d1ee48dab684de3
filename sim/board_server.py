"""Board co-simulation: a board's exact top (`hotline.fpga.board_top.BoardTop`) in Verilator,
its UART pins bridged to a loopback TCP port, so the `serial://` driver that talks to a real
board talks to the simulated one: ``hotline.open("serial://socket://127.0.0.1:PORT")``.

The bridge is bit-level: a Verilog wrapper shifts host bytes onto ``rx`` at the board's baud
(``divisor`` clock cycles per bit, 8N1) and samples ``tx`` at mid-bit, so the RTL UART, the
link bridge and everything behind it run as on the board, at the board's clock (only faster
than real time: about 1 KB/s of link traffic on this machine). The memory window is the board's block RAM, reached only through the link.

``python -m hotline.sim.board_server SPEC.json`` (spec: board, build_dir, simulator,
port_file) serves one connection after another, like a board, until it is killed;
`BoardCosim` runs one in the background and gives its ``serial://`` URL.
"""
import json
import os
import socket
import sys
import time
from pathlib import Path

import cocotb
from cocotb.triggers import FallingEdge, Timer, ValueChange

from hotline.fpga.board_top import BoardTop
from hotline.fpga.boards import board
from hotline.host.sim_device import kill_server, start_server

from .runner import run_cocotb

POLL_CYCLES = 200  # between polls of the host socket


@cocotb.test()
async def serve(dut):
    spec = json.loads(os.environ["HOTLINE_BOARD_SPEC"])
    b = board(spec["board"])
    period_ps = _half_period_ps(b) * 2

    def cycles(n):
        return Timer(n * period_ps, unit="ps")

    dut.rst.value = 1
    dut.h2d_go.value = 0
    await cycles(4)
    dut.rst.value = 0
    listener = socket.create_server(("127.0.0.1", 0))
    Path(spec["port_file"]).write_text(str(listener.getsockname()[1]))
    listener.setblocking(False)
    link = {"conn": None}

    async def to_host():
        while True:
            await ValueChange(dut.d2h_count)
            if link["conn"] is not None:
                try:
                    link["conn"].sendall(bytes([int(dut.d2h_byte.value)]))
                except OSError:
                    pass  # the host went away: like a board, keep running

    cocotb.start_soon(to_host())
    # A board outlives its host sessions: serve one connection after another until killed.
    go = 0
    while True:
        try:
            link["conn"], _ = listener.accept()
        except BlockingIOError:
            await cycles(POLL_CYCLES)
            continue
        conn = link["conn"]
        conn.setblocking(False)
        while True:
            try:
                data = conn.recv(1 << 16)
            except BlockingIOError:
                await cycles(POLL_CYCLES)
                continue
            except OSError:
                break
            if not data:
                break
            for value in data:
                dut.h2d_byte.value = value
                go ^= 1
                dut.h2d_go.value = go
                await FallingEdge(dut.h2d_busy)
        link["conn"] = None
        conn.close()


def _half_period_ps(spec):
    return round(1e12 / spec.clock_hz / 2)


# The clock and the UART line drivers run inside the simulator (Verilator --timing): Python
# hands over one byte at a time. A cocotb clock, or bit timing in Python, costs a callback per
# edge or bit; it made the co-simulation ~20x slower.
_WRAPPER = """`timescale 1ns/1ps
module board_sim(input wire rst /*verilator public_flat_rw*/,
                 input wire [7:0] h2d_byte /*verilator public_flat_rw*/,
                 input wire h2d_go /*verilator public_flat_rw*/,
                 output reg h2d_busy /*verilator public_flat_rw*/,
                 output reg [7:0] d2h_byte /*verilator public_flat_rw*/,
                 output reg [31:0] d2h_count /*verilator public_flat_rw*/);
  reg clk = 1'b0;
  always #({half_ns}) clk = ~clk;
  reg rx = 1'b1;
  wire tx;
  board_top top(.clk(clk), .rst(rst), .rx(rx), .tx(tx));
  integer i, j;
  reg [7:0] shift;
  initial begin h2d_busy = 1'b0; d2h_byte = 8'd0; d2h_count = 0; end
  // host -> board: one 8N1 frame on rx per toggle of h2d_go
  always @(h2d_go) begin
    h2d_busy = 1'b1;
    rx = 1'b0;
    repeat ({div}) @(posedge clk);
    for (i = 0; i < 8; i = i + 1) begin
      rx = h2d_byte[i];
      repeat ({div}) @(posedge clk);
    end
    rx = 1'b1;
    repeat ({div}) @(posedge clk);
    h2d_busy = 1'b0;
  end
  // board -> host: tx sampled at mid-bit
  always begin
    @(negedge tx);
    repeat ({half_div}) @(posedge clk);
    for (j = 0; j < 8; j = j + 1) begin
      repeat ({div}) @(posedge clk);
      shift[j] = tx;
    end
    repeat ({div}) @(posedge clk);
    d2h_byte = shift;
    d2h_count = d2h_count + 1;
  end
endmodule
"""


def main(argv=None):
    path = (argv or sys.argv[1:])[0]
    spec = json.loads(Path(path).read_text())
    top = BoardTop(board(spec["board"]))
    run_cocotb(top, "board_top", "hotline.sim.board_server", spec["build_dir"],
               spec.get("simulator", "verilator"),
               extra_env={"HOTLINE_BOARD_SPEC": json.dumps(spec)},
               wrapper=("board_sim", _WRAPPER.format(
                   half_ns=_half_period_ps(top.spec) / 1000, div=top.spec.divisor,
                   half_div=top.spec.divisor // 2)))


class BoardCosim:
    """Context manager: the co-simulated board in a child process; ``url`` is its
    ``serial://socket://...`` address. ``start_timeout`` covers the Verilator build."""

    def __init__(self, board_name, build_dir="build/boardsim", simulator="verilator",
                 start_timeout=1200.0):
        board(board_name)  # a clear error for an unknown board, before any build
        build = Path(build_dir) / f"{board_name}_{simulator}"
        port_file = build / "port"
        port_file.unlink(missing_ok=True)
        spec = {"board": board_name, "build_dir": str(build.resolve()), "simulator": simulator,
                "port_file": str(port_file.resolve())}
        self.proc, self._log, self.log_path = start_server("hotline.sim.board_server", spec,
                                                           build)
        deadline = time.monotonic() + start_timeout
        while not port_file.exists() or not port_file.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"board co-simulation of {board_name} did not start; "
                                   f"see {self.log_path}")
            time.sleep(0.5)
        self.url = f"serial://socket://127.0.0.1:{int(port_file.read_text())}"

    def close(self):
        kill_server(self.proc)
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__":
    main()
