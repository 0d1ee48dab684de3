"""Board co-simulation: a board's exact top (`hotline.fpga.board_top.BoardTop`) with its clocks
(`BoardClocks`: the board's EHXPLLL, its reset synchronisers) in Verilator, its UART pins
bridged to a loopback TCP port, so the `serial://` driver that talks to a real board talks to
the simulated one: ``hotline.open("serial://socket://127.0.0.1:PORT")``.

Clocks: the wrapper runs the board oscillator; a behavioural EHXPLLL (`PLL_MODEL`, Verilog)
measures its period and makes CLKOP and CLKOS from the Instance's own parameters (CLKI_DIV,
CLKFB_DIV, CLKOP_DIV, CLKOS_DIV, with feedback from CLKOP: CLKOP = CLKI * CLKFB_DIV /
CLKI_DIV, CLKOS = CLKOP * CLKOP_DIV / CLKOS_DIV), and raises LOCK a few input cycles after
CLKFB toggles. So the accelerator (``sync``) and the UART (``uart``) run at their true ratio,
and the bytes cross the real AsyncFIFOs.

The bridge is bit-level: a Verilog wrapper shifts host bytes onto ``rx`` at the board's baud in
absolute time (the host's own clock, 8N1) and samples ``tx`` at mid-bit, so wrong PLL dividers
show as a wrong baud. The RTL UART, the link bridge and everything behind it run as on the
board, only slower than real time (about 1 KB/s of link traffic on this machine). The memory
window is the board's block RAM, reached only through the link.

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

from hotline.fpga.board_top import BoardSim
from hotline.fpga.boards import board
from hotline.host.sim_device import kill_server, start_server

from .runner import run_cocotb

POLL_NS = 8000  # simulated time between polls of the host socket (24 bytes at 3 Mbaud)


@cocotb.test()
async def serve(dut):
    spec = json.loads(os.environ["HOTLINE_BOARD_SPEC"])

    def poll():
        return Timer(POLL_NS, unit="ns")

    dut.h2d_go.value = 0
    # the PLL model locks within 2 microseconds; the domains leave reset after it
    await Timer(2000, unit="ns")
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
            await poll()
            continue
        conn = link["conn"]
        conn.setblocking(False)
        while True:
            try:
                data = conn.recv(1 << 16)
            except BlockingIOError:
                await poll()
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


# A behavioural EHXPLLL for simulation: the parameters BoardClocks' Instance passes, the
# outputs derived from them and from CLKI's measured period. Only feedback from CLKOP is
# modelled (the one BoardClocks uses); anything else stops the simulation.
PLL_MODEL = """`timescale 1ns/1ps
module EHXPLLL #(
  parameter integer CLKI_DIV = 1, CLKFB_DIV = 1,
  parameter integer CLKOP_DIV = 8, CLKOS_DIV = 8, CLKOS2_DIV = 8, CLKOS3_DIV = 8,
  parameter integer CLKOP_CPHASE = 0, CLKOS_CPHASE = 0, CLKOS2_CPHASE = 0, CLKOS3_CPHASE = 0,
  parameter integer CLKOP_FPHASE = 0, CLKOS_FPHASE = 0, CLKOS2_FPHASE = 0, CLKOS3_FPHASE = 0,
  parameter FEEDBK_PATH = "CLKOP",
  parameter CLKOP_ENABLE = "ENABLED", CLKOS_ENABLE = "DISABLED",
  parameter CLKOS2_ENABLE = "DISABLED", CLKOS3_ENABLE = "DISABLED",
  parameter PLLRST_ENA = "DISABLED", INTFB_WAKE = "DISABLED", STDBY_ENABLE = "DISABLED",
  parameter DPHASE_SOURCE = "DISABLED", OUTDIVIDER_MUXA = "DIVA", OUTDIVIDER_MUXB = "DIVB",
  parameter OUTDIVIDER_MUXC = "DIVC", OUTDIVIDER_MUXD = "DIVD"
) (
  input wire CLKI, input wire CLKFB, input wire RST, input wire STDBY,
  input wire PHASESEL0, input wire PHASESEL1, input wire PHASEDIR, input wire PHASESTEP,
  input wire PHASELOADREG, input wire PLLWAKESYNC, input wire ENCLKOP,
  output reg CLKOP, output reg CLKOS, output reg CLKOS2, output reg CLKOS3,
  output reg LOCK, output wire CLKINTFB
);
  assign CLKINTFB = 1'b0;
  realtime t0, clki_ns, vco_ns;
  reg running;
  initial begin
    CLKOP = 1'b0; CLKOS = 1'b0; CLKOS2 = 1'b0; CLKOS3 = 1'b0; LOCK = 1'b0; running = 1'b0;
    if (FEEDBK_PATH != "CLKOP") begin
      $display("EHXPLLL model: only FEEDBK_PATH CLKOP is modelled"); $finish;
    end
    @(posedge CLKI); t0 = $realtime;
    @(posedge CLKI); clki_ns = $realtime - t0;
    // The loop locks CLKOP / CLKFB_DIV to CLKI / CLKI_DIV; the VCO runs at CLKOP * CLKOP_DIV.
    vco_ns = clki_ns * CLKI_DIV / CLKFB_DIV / CLKOP_DIV;
    running = 1'b1;
    @(posedge CLKFB);  // the feedback must come back (CLKFB wired to CLKOP) before lock
    repeat (8) @(posedge CLKI);
    LOCK = 1'b1;
  end
  always begin wait (running); #(vco_ns * CLKOP_DIV / 2.0); CLKOP = ~CLKOP; end
  always begin wait (running && CLKOS_ENABLE == "ENABLED"); #(vco_ns * CLKOS_DIV / 2.0); CLKOS = ~CLKOS; end
  always begin wait (running && CLKOS2_ENABLE == "ENABLED"); #(vco_ns * CLKOS2_DIV / 2.0); CLKOS2 = ~CLKOS2; end
  always begin wait (running && CLKOS3_ENABLE == "ENABLED"); #(vco_ns * CLKOS3_DIV / 2.0); CLKOS3 = ~CLKOS3; end
endmodule
"""


# The oscillator and the UART line drivers run inside the simulator (Verilator --timing):
# Python hands over one byte at a time. A cocotb clock, or bit timing in Python, costs a
# callback per edge or bit; it made the co-simulation ~20x slower. The line is timed in
# absolute time at the baud, like the host's USB-UART, not by any of the board's clocks.
_WRAPPER = """`timescale 1ns/1ps
module board_sim(input wire [7:0] h2d_byte /*verilator public_flat_rw*/,
                 input wire h2d_go /*verilator public_flat_rw*/,
                 output reg h2d_busy /*verilator public_flat_rw*/,
                 output reg [7:0] d2h_byte /*verilator public_flat_rw*/,
                 output reg [31:0] d2h_count /*verilator public_flat_rw*/);
  reg osc = 1'b0;
  always #({osc_half_ns}) osc = ~osc;
  reg rx = 1'b1;
  wire tx;
  board_top top(.clk(osc), .rx(rx), .tx(tx));
  integer i, j;
  reg [7:0] shift;
  initial begin h2d_busy = 1'b0; d2h_byte = 8'd0; d2h_count = 0; end
  // host -> board: one 8N1 frame on rx per toggle of h2d_go
  always @(h2d_go) begin
    h2d_busy = 1'b1;
    rx = 1'b0;
    #({bit_ns});
    for (i = 0; i < 8; i = i + 1) begin
      rx = h2d_byte[i];
      #({bit_ns});
    end
    rx = 1'b1;
    #({bit_ns});
    h2d_busy = 1'b0;
  end
  // board -> host: tx sampled at mid-bit
  always begin
    @(negedge tx);
    #({half_bit_ns});
    for (j = 0; j < 8; j = j + 1) begin
      #({bit_ns});
      shift[j] = tx;
    end
    #({bit_ns});
    d2h_byte = shift;
    d2h_count = d2h_count + 1;
  end
endmodule
"""


def main(argv=None):
    path = (argv or sys.argv[1:])[0]
    spec = json.loads(Path(path).read_text())
    b = board(spec["board"])
    bit_ns = 1e9 / b.baud
    run_cocotb(BoardSim(b), "board_top", "hotline.sim.board_server", spec["build_dir"],
               spec.get("simulator", "verilator"),
               extra_env={"HOTLINE_BOARD_SPEC": json.dumps(spec)},
               wrapper=("board_sim", _WRAPPER.format(
                   osc_half_ns=f"{0.5e9 / b.osc_hz:.3f}", bit_ns=f"{bit_ns:.3f}",
                   half_bit_ns=f"{bit_ns / 2:.3f}") + PLL_MODEL))


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
