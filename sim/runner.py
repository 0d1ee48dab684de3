"""Verilog export and cocotb runs of Amaranth components.

``export_verilog`` writes a component as Verilog that both Verilator and Icarus accept;
``run_cocotb`` builds it with the chosen simulator and runs a cocotb test module, raising
``CocotbFailure`` when any test fails. A testbench module's own runner passes its stimulus
to its cocotb tests in a *handoff* file (``run_cocotb(..., handoff=path)``; the tests find it
with `handoff`); what the file holds is that module's business. Simulator setup facts are in
../shared/TOOLCHAIN.md and docs/toolchain.md; which simulators are installed is
`hotline.host.simulators`.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

from amaranth.back import verilog

from hotline.host.simulators import SIMULATORS, verilator_root

TIMESCALE = ("1ns", "1ps")  # Amaranth emits no `timescale; Icarus' default cannot express 10 ns clocks

# Yosys writes `reg \x = 0;` initialisers; under Icarus -g2012 these create no event, so
# combinational outputs stay X until an input changes (Yosys issue #2271). Names may be
# escaped (`\valid$45 `, ending at a blank): Yosys's own time-zero trigger of every module's
# `always @*` blocks is one, and a renamed register left a valid X through reset (issue 44).
_REG_INIT = re.compile(r"^(\s*)reg (\[[^\]]+\] )?(\\\S+ |[^\\\s]\S*) = ([^;]+);$", re.M)


# The environment variable that carries the handoff path into the simulator process.
_HANDOFF = "HOTLINE_TB_HANDOFF"


def handoff():
    """In a cocotb test: the path its runner gave `run_cocotb` as ``handoff``."""
    return Path(os.environ[_HANDOFF])


class CocotbFailure(RuntimeError):
    """A cocotb regression failed; the message names the failing tests and the log."""


def export_verilog(component, name, path):
    """Write ``component`` as Verilog module ``name`` to ``path``; return the path."""
    text = verilog.convert(component, name=name, emit_src=False)
    text = _REG_INIT.sub(r"\1reg \2\3; initial \3 = \4;", text)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# The PyPI wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so designs big enough to use
# precompiled headers fail to compile ("Vtop__pch.h.fast: linker input file not found").
VERILATOR_FIX_ARGS = ["-MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include"]


def run_cocotb(component, toplevel, test_module, build_dir, simulator="verilator",
               testcase=None, extra_env=None, waves=False, seed=None, wrapper=None,
               handoff=None):
    """Export ``component``, build it with ``simulator`` and run cocotb ``test_module``.

    ``build_dir`` holds the Verilog, the simulator build and ``results.xml``. ``wrapper``
    (name, Verilog text): a module around ``toplevel`` that becomes the simulated top (built
    with ``--timing`` on Verilator, so it may generate its own clock). ``handoff``: a file
    for the test module, which reads it at `handoff()`. Raises
    ``CocotbFailure`` if any test fails; returns the results path otherwise.
    """
    # lazy: cocotb is the dev extra, and the harness backends export Verilog without it
    from cocotb_tools.runner import get_runner
    from cocotb_tools.check_results import get_results

    if simulator not in SIMULATORS:
        raise ValueError(f"unknown simulator {simulator!r} (choose from {', '.join(SIMULATORS)})")
    build_dir = Path(build_dir).resolve()
    sources = [export_verilog(component, toplevel, build_dir / f"{toplevel}.v")]
    build_args = []
    if wrapper is not None:
        toplevel, text = wrapper
        sources.append(build_dir / f"{toplevel}.v")
        sources[-1].write_text(text)
        if simulator == "verilator":
            # Only the wrapper's ports are driven from Python: the rest may be optimised.
            build_args += ["--timing", "-CFLAGS", "-fcoroutines -std=c++20", "--no-public-flat-rw"]
    if simulator == "verilator":
        verilator_root()
        build_args += ["-Wno-fatal", "-O3"]
        # cocotb runs make itself: pass the fix as a command-line variable through MAKEFLAGS.
        flags = os.environ.get("MAKEFLAGS", "")
        if VERILATOR_FIX_ARGS[1] not in flags:
            os.environ["MAKEFLAGS"] = f"{flags} {VERILATOR_FIX_ARGS[1]}".strip()
        if waves:
            build_args.append("--trace")
    runner = get_runner(simulator)
    module_dir = str(Path(sys.modules[test_module].__file__).parent) if test_module in sys.modules else None
    env = dict(extra_env or {})
    if handoff is not None:
        env[_HANDOFF] = str(Path(handoff).resolve())
    if module_dir:
        env["PYTHONPATH"] = module_dir + os.pathsep + os.environ.get("PYTHONPATH", "")
    # cocotb's runner leaves by sys.exit when the build or the simulator fails (and, under
    # pytest, when a test fails): a CocotbFailure naming the log instead, so that a caller
    # (the CLI) reports one line rather than exiting silently.
    log = build_dir / "build.log"
    try:
        runner.build(verilog_sources=sources, hdl_toplevel=toplevel, build_dir=build_dir,
                     build_args=build_args, always=True, waves=waves, timescale=TIMESCALE,
                     log_file=log)
        log = build_dir / "sim.log"
        results = runner.test(hdl_toplevel=toplevel, test_module=test_module, build_dir=build_dir,
                              test_dir=build_dir, testcase=testcase, extra_env=env, waves=waves,
                              seed=seed, log_file=log, timescale=TIMESCALE)
    except (SystemExit, subprocess.CalledProcessError) as e:
        code = e.code if isinstance(e, SystemExit) else e.returncode
        raise CocotbFailure(f"{test_module} on {simulator} failed (exit {code}); see {log}") from None
    total, failed = get_results(results)
    if failed:
        raise CocotbFailure(f"{failed} of {total} cocotb tests failed in {test_module} "
                            f"on {simulator}; see {build_dir / 'sim.log'}")
    return results
