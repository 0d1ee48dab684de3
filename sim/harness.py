"""File-driven co-simulation of stream components, with no Python in the clock loop.

A generated SystemVerilog testbench reads each input stream's payloads from a hex file, drives
them with optional random valid stalls, collects every output stream into a hex file with
optional random ready stalls, and runs in *phases*: phase p drives its input streams to the end
of their files, then waits until no output has moved for ``drain`` cycles. It reports the
cycles from the first handshake of the last phase to its last output beat. The same testbench
runs on Verilator (``--binary --timing``) and Icarus; it is what ``hotline fragment --backend
verilator|icarus`` and ``make sim`` use, where cocotb's per-cycle Python would dominate.
"""
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .runner import VERILATOR_FIX_ARGS, cached_build, export_verilog, tool_identity, verilator_root

__all__ = ["HarnessError", "StreamHarness"]


class HarnessError(RuntimeError):
    """The simulator failed to build or run; the message names the log."""


def _width(port):
    return port.payload.shape().size if hasattr(port.payload.shape(), "size") else len(port.payload)


@dataclass
class _Stream:
    name: str
    width: int


def _testbench(inputs, outputs, phases, drain, waves):
    """SystemVerilog source of the testbench module ``tb`` around module ``dut``; with
    ``waves``, the first ``+wave_cycles=N`` cycles (default 20000) go to waves.vcd."""
    L = ["`timescale 1ns/1ps", "module tb;",
         "  reg clk = 0; reg rst = 1;", "  always #5 clk = ~clk;",
         "  reg [63:0] cycle = 0; reg [63:0] last_move = 0; reg [63:0] first_fire = 0;",
         "  reg started = 0; integer phase = 0; integer busy_in = 0, busy_out = 0;",
         "  integer fd_report, wave_cycles = 0;"]
    conns = [".clk(clk)", ".rst(rst)"]
    for i, s in enumerate(inputs):
        L += [f"  reg {s.name}_valid = 0; reg [{s.width - 1}:0] {s.name}_payload = 0; wire {s.name}_ready;",
              f"  reg [{s.width - 1}:0] {s.name}_word; integer {s.name}_fd, {s.name}_r; reg {s.name}_done = 0;",
              f"  reg [31:0] {s.name}_rng = 32'h9E3779B9 ^ {i + 1};"]
        conns += [f".{s.name}__valid({s.name}_valid)", f".{s.name}__payload({s.name}_payload)",
                  f".{s.name}__ready({s.name}_ready)"]
    for i, s in enumerate(outputs):
        L += [f"  wire {s.name}_valid; wire [{s.width - 1}:0] {s.name}_payload; reg {s.name}_ready = 0;",
              f"  integer {s.name}_fd; reg [31:0] {s.name}_rng = 32'h7F4A7C15 ^ {i + 1};"]
        conns += [f".{s.name}__valid({s.name}_valid)", f".{s.name}__payload({s.name}_payload)",
                  f".{s.name}__ready({s.name}_ready)"]
    L.append("  dut u_dut (" + ", ".join(conns) + ");")
    L += ["  initial begin",
          "    if (!$value$plusargs(\"busy_in=%d\", busy_in)) busy_in = 0;",
          "    if (!$value$plusargs(\"busy_out=%d\", busy_out)) busy_out = 0;"]
    for s in inputs:
        L.append(f"    {s.name}_fd = $fopen(\"in_{s.name}.hex\", \"r\");")
    for s in outputs:
        L.append(f"    {s.name}_fd = $fopen(\"out_{s.name}.hex\", \"w\");")
    if waves:
        L += ["    $dumpfile(\"waves.vcd\"); $dumpvars(0, tb);",
              "    if (!$value$plusargs(\"wave_cycles=%d\", wave_cycles)) wave_cycles = 20000;"]
    L += ["    repeat (4) @(posedge clk);", "    rst <= 0;", "  end",
          "  always @(posedge clk) cycle <= cycle + 1;"]
    if waves:
        L.append("  always @(posedge clk) if (cycle == wave_cycles) $dumpoff;")
    # xorshift32 per stream; a stall when (rng % 1000) < busy (per mille)
    step = lambda x: f"r = {x}; r = r ^ (r << 13); r = r ^ (r >> 17); r = r ^ (r << 5); {x} <= r;"
    for s in inputs:
        members = [p for p, names in enumerate(phases) if s.name in names]
        active = " || ".join(f"phase == {p}" for p in members)
        L += [f"  always @(posedge clk) if (!rst && ({active})) begin : drive_{s.name}",
              f"    reg [31:0] r; {step(s.name + '_rng')}",
              f"    if (!{s.name}_valid || {s.name}_ready) begin",
              f"      if (busy_in > 0 && (r % 1000) < busy_in) {s.name}_valid <= 0;",
              "      else begin",
              f"        {s.name}_r = $fscanf({s.name}_fd, \"%h\\n\", {s.name}_word);",
              f"        if ({s.name}_r == 1) begin {s.name}_valid <= 1; {s.name}_payload <= {s.name}_word; end",
              f"        else begin {s.name}_valid <= 0; {s.name}_done <= 1; end",
              "      end", "    end", "  end"]
    for s in outputs:
        L += [f"  always @(posedge clk) if (!rst) begin : collect_{s.name}",
              f"    reg [31:0] r; {step(s.name + '_rng')}",
              f"    if ({s.name}_valid && {s.name}_ready) begin",
              f"      $fwrite({s.name}_fd, \"%h\\n\", {s.name}_payload);",
              "    end",
              f"    {s.name}_ready <= !(busy_out > 0 && (r % 1000) < busy_out);",
              "  end"]
    fired = " || ".join([f"({s.name}_valid && {s.name}_ready)" for s in inputs]) or "0"
    moving = " || ".join([f"({s.name}_valid && {s.name}_ready)" for s in inputs + outputs]) or "0"
    L += ["  always @(posedge clk) if (!rst) begin",
          f"    if (!started && ({fired})) begin started <= 1; first_fire <= cycle; end",
          f"    if ({moving}) last_move <= cycle;"]
    for p, names in enumerate(phases):
        done = " && ".join(f"{n}_done && !{n}_valid" for n in names) or "1"
        L += [f"    if (phase == {p} && {done} && cycle - last_move > {drain}) begin",
              f"      phase <= {p + 1}; started <= 0; last_move <= cycle;"]
        if p == len(phases) - 1:
            L += ["      fd_report = $fopen(\"report.txt\", \"w\");",
                  "      $fwrite(fd_report, \"%0d %0d\\n\", first_fire, last_move);",
                  "      $fclose(fd_report);"]
            L += [f"      $fclose({s.name}_fd);" for s in outputs]
            L += ["      $finish;"]
        L.append("    end")
    L += ["  end", "endmodule", ""]
    return "\n".join(L)


class StreamHarness:
    """Build once, run many times: ``run(inputs, ...) -> (outputs, cycles)``.

    ``inputs`` / ``outputs`` name the component's stream ports; ``phases`` lists, per phase,
    the input streams it drives (default: one phase with all of them). The simulator build is
    cached by content (`cached_build`): ``build_reused`` says whether this one was reused,
    ``build_seconds`` what the build (or the lookup) took.
    """

    def __init__(self, component, inputs, outputs, build_dir, simulator="verilator",
                 phases=None, drain=64, waves=False):
        self.simulator = simulator
        self.build_dir = Path(build_dir).resolve()
        self.inputs = [_Stream(n, _width(getattr(component, n))) for n in inputs]
        self.outputs = [_Stream(n, _width(getattr(component, n))) for n in outputs]
        self.phases = phases or [list(inputs)]
        self.build_dir.mkdir(parents=True, exist_ok=True)
        dut = export_verilog(component, "dut", self.build_dir / "dut.v")
        tb = self.build_dir / "tb.sv"
        tb.write_text(_testbench(self.inputs, self.outputs, self.phases, drain, waves))
        self.run_dir = self.build_dir / "run"
        t0 = time.perf_counter()
        if simulator == "verilator":
            root = verilator_root()
            args = ["--binary", "--timing", "-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3",
                    "--top-module", "tb", "-j", "2", "-CFLAGS", "-fcoroutines -std=c++20",
                    *VERILATOR_FIX_ARGS, *(["--trace"] if waves else [])]
            tool = str(root / "bin" / "verilator")
            def command(entry):
                return [tool, *args, "--Mdir", str(entry / "obj"), "-o", "sim", str(tb), str(dut)]
            exe = lambda entry: [str(entry / "obj" / "sim")]
        elif simulator == "icarus":
            if not shutil.which("iverilog"):
                raise HarnessError("Icarus Verilog (iverilog) is not installed")
            tool, args = "iverilog", ["-g2012", "-s", "tb"]
            def command(entry):
                return [tool, *args, "-o", str(entry / "sim.vvp"), str(tb), str(dut)]
            exe = lambda entry: ["vvp", "-n", str(entry / "sim.vvp")]
        else:
            raise HarnessError(f"unknown simulator {simulator!r}")
        log = self.build_dir / "build.log"

        def build(entry):
            with open(log, "w") as f:
                rc = subprocess.run(command(entry), stdout=f, stderr=subprocess.STDOUT,
                                    cwd=entry).returncode
            if rc:
                raise HarnessError(f"{simulator} build failed; see {log}")
        # the trace (waves) is written in the run directory, so a traced build is shared too
        model, self.build_reused = cached_build((simulator, *args, tool_identity(tool)),
                                                [tb, dut], build)
        if self.build_reused:
            log.write_text(f"reused the build in {model}\n")
        self.exe = exe(model)
        self.build_seconds = time.perf_counter() - t0

    def run(self, inputs, busy_in=0.0, busy_out=0.0, progress=None, watch=None, timeout=None):
        """Drive ``inputs`` {stream: [int]}; return ({stream: [int]}, cycles, seconds).

        ``progress(n)`` is called as the ``watch`` output stream grows (a progress bar).
        """
        run_dir = self.run_dir
        run_dir.mkdir(exist_ok=True)
        for s in self.inputs:
            digits = (s.width + 3) // 4
            with open(run_dir / f"in_{s.name}.hex", "w") as f:
                f.write("".join(f"{v:0{digits}x}\n" for v in inputs.get(s.name, [])))
        for s in self.outputs:
            (run_dir / f"out_{s.name}.hex").unlink(missing_ok=True)
        (run_dir / "report.txt").unlink(missing_ok=True)
        args = self.exe + [f"+busy_in={int(busy_in * 1000)}", f"+busy_out={int(busy_out * 1000)}"]
        t0 = time.perf_counter()
        log = open(run_dir / "sim.log", "w")
        proc = subprocess.Popen(args, cwd=run_dir, stdout=log, stderr=subprocess.STDOUT)
        watched = next((s for s in self.outputs if s.name == watch), None)
        seen = 0
        try:
            while proc.poll() is None:
                time.sleep(0.2)
                if timeout and time.perf_counter() - t0 > timeout:
                    proc.kill()
                    raise HarnessError(f"simulation exceeded {timeout} s; see {run_dir / 'sim.log'}")
                if progress and watched:
                    path = run_dir / f"out_{watched.name}.hex"
                    now = path.stat().st_size // ((watched.width + 3) // 4 + 1) if path.exists() else 0
                    progress(now - seen)
                    seen = now
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
        seconds = time.perf_counter() - t0
        report = run_dir / "report.txt"
        if proc.returncode or not report.exists():
            raise HarnessError(f"{self.simulator} simulation failed (exit {proc.returncode}); "
                               f"see {run_dir / 'sim.log'}")
        first, last = map(int, report.read_text().split())
        outputs = {}
        for s in self.outputs:
            text = (run_dir / f"out_{s.name}.hex").read_text().split()
            outputs[s.name] = [int(x, 16) for x in text]
        if progress and watched:
            progress(len(outputs[watched.name]) - seen)
        return outputs, last - first + 1, seconds
