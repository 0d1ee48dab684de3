"""Verilog export and cocotb runs of Amaranth components.

``export_verilog`` writes a component as Verilog that both Verilator and Icarus accept;
``run_cocotb`` builds it with the chosen simulator and runs a cocotb test module, raising
``CocotbFailure`` when any test fails. A testbench module's own runner passes its stimulus
to its cocotb tests in a *handoff* file (``run_cocotb(..., handoff=path)``; the tests find it
with `handoff`); what the file holds is that module's business. Simulator setup facts are in
../shared/TOOLCHAIN.md and docs/toolchain.md; which simulators are installed is
`hotline.host.simulators`.

Builds are cached by content: a build of the same Verilog text, top, simulator and arguments
is reused (`build_cache_dir`), so that tests and runs of one design compile it once.
"""
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
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


# cocotb runs make itself, so make variables reach it through MAKEFLAGS (set for the build
# only). A cocotb simulation is bound by its Python side, and the C++ compile is most of a
# build: -O1 on the per-cycle code and -O0 elsewhere build the accelerator in 27 s instead of
# 38 s (Verilator's -Os), and one test's simulation then took 18 s instead of 16 s. A wrapper
# that clocks itself (the board's UART pins, bit by bit) is bound by the model: Verilator's
# -Os there.
QUICK_BUILD_VARS = ["OPT_FAST=-O1", "OPT_SLOW=-O0", "OPT_GLOBAL=-O0"]


@contextlib.contextmanager
def _make_flags(make_vars):
    before = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = " ".join(filter(None, [before, *make_vars]))
    try:
        yield
    finally:
        if before is None:
            del os.environ["MAKEFLAGS"]
        else:
            os.environ["MAKEFLAGS"] = before


# The newest builds kept; one Verilator build of the whole accelerator is about 5 MB once its
# object files are dropped (200 MB with them).
BUILD_CACHE_ENTRIES = 64
_BUILD_DONE = "complete"


def build_cache_dir():
    """Where simulator builds are cached: ``$HOTLINE_RTL_CACHE``, else
    ``$XDG_CACHE_HOME/hotline/rtl`` (``~/.cache/hotline/rtl``); `cached_build` falls back to
    the temporary directory where it cannot be created."""
    if os.environ.get("HOTLINE_RTL_CACHE"):
        return Path(os.environ["HOTLINE_RTL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hotline" / "rtl"


def cached_build(parts, sources, build):
    """The directory of a cached build of ``sources`` (paths) with ``parts`` (strings: tool,
    top, arguments), made by ``build(directory)`` unless an equal one is cached; returns
    ``(directory, reused)``. A lock per entry lets concurrent runs of one design wait for a
    single build. A failed build leaves nothing cached."""
    digest = hashlib.sha256()
    for part in (*parts, *TIMESCALE):
        digest.update(str(part).encode() + b"\0")
    for source in sources:
        digest.update(Path(source).name.encode() + b"\0" + Path(source).read_bytes() + b"\0")
    root = build_cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:     # no writable home: a cache for this machine's session
        root = Path(tempfile.gettempdir()) / f"hotline-rtl-{os.getuid()}"
        root.mkdir(exist_ok=True)
    entry = root / digest.hexdigest()[:32]
    with open(root / f"{entry.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reused = (entry / _BUILD_DONE).exists()
        if not reused:
            shutil.rmtree(entry, ignore_errors=True)
            entry.mkdir()
            build(entry)
            for f in entry.rglob("*"):    # a Verilator model runs from its executable alone
                if f.suffix in (".o", ".a", ".gch", ".cpp", ".h", ".d") and f.is_file():
                    f.unlink()
            (entry / _BUILD_DONE).touch()
        os.utime(entry)
    _evict_builds(root)
    return entry, reused


def tool_identity(name):
    """``name``'s path and install time, so that a reinstalled simulator rebuilds."""
    import cocotb_tools.config  # lazy: cocotb is the dev extra (see run_cocotb)
    tool = shutil.which(name) or name
    stamp = os.stat(tool).st_mtime_ns if os.path.exists(tool) else 0
    return f"{tool}@{stamp};cocotb={cocotb_tools.config.libs_dir}"


def _evict_builds(root):
    entries = sorted((d for d in root.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    for d in entries[:-BUILD_CACHE_ENTRIES]:
        shutil.rmtree(d, ignore_errors=True)
        (root / f"{d.name}.lock").unlink(missing_ok=True)


def run_cocotb(component, toplevel, test_module, build_dir, simulator="verilator",
               testcase=None, extra_env=None, waves=False, seed=None, wrapper=None,
               handoff=None):
    """Export ``component``, build it with ``simulator`` and run cocotb ``test_module``.

    ``build_dir`` holds the Verilog, the logs and ``results.xml``; the simulator build is
    cached (`build_cache_dir`), except with ``waves``, which builds in ``build_dir``. ``wrapper``
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
        make_vars = [] if simulator != "verilator" else \
            [VERILATOR_FIX_ARGS[1], *(QUICK_BUILD_VARS if wrapper is None else [])]

        def build(directory):
            with _make_flags(make_vars):
                runner.build(sources=sources, hdl_toplevel=toplevel, build_dir=directory,
                             build_args=build_args, always=True, waves=waves,
                             timescale=TIMESCALE, log_file=log)
        if waves:    # the trace is written beside the build
            build(build_dir)
            model = build_dir
        else:
            tool = "iverilog" if simulator == "icarus" else "verilator"
            model, reused = cached_build(
                (simulator, toplevel, *build_args, *make_vars, tool_identity(tool)), sources, build)
            if reused:
                log.write_text(f"reused the build in {model}\n")
        log = build_dir / "sim.log"
        # the language is named: on a cached build this runner never saw the sources
        results = runner.test(hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                              test_module=test_module, build_dir=model,
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
