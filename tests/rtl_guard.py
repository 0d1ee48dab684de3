"""The fast tier's guard: a test that is not marked ``rtl`` may not start an HDL simulator or
the FPGA flow.

From the setup of such a test (its module- and session-scoped fixtures included) to the end
of its teardown, conftest `arm`s the guard: `ENV` names a record file, and
``tests/rtl_guard_site`` (a ``sitecustomize``) is on ``PYTHONPATH``. An audit hook, installed
in the pytest process and, through that ``sitecustomize``, in every Python process the test
starts (the hotline CLI, the sim:// server), then refuses to start Verilator, Icarus or a
YoWASP tool: the launch raises `RtlNotMarked` and is written to the record, which conftest
turns into a failure of the test even when the code under test swallowed the exception or
the launch was in a child process. Inert while `ENV` is unset (tests marked ``rtl``, and every
process outside the tests).
"""
import os
import sys
import tempfile
from pathlib import Path, PurePath

ENV = "HOTLINE_TEST_NOT_RTL"
SIMULATORS = {"verilator", "verilator_bin", "verilator_bin_dbg", "iverilog", "vvp"}
FLOW_ENV = ("YOSYS", "NEXTPNR_ECP5", "NEXTPNR_ICE40")   # pointed at YoWASP: the board build

SITE = Path(__file__).resolve().parent / "rtl_guard_site"
RECORD = Path(tempfile.gettempdir()) / f"hotline-rtl-guard-{os.getpid()}.log"

_installed = False
_saved = None


class RtlNotMarked(RuntimeError):
    """An HDL simulator or the FPGA flow was started by a test not marked ``rtl``."""


def hdl_tool(executable, env=None):
    """The HDL tool that starting ``executable`` with environment ``env`` runs, or None."""
    name = PurePath(os.fsdecode(executable)).name
    if name in SIMULATORS or name.startswith(("yowasp-", "nextpnr-")):
        return name
    if env and any(PurePath(env.get(k, "")).name.startswith("yowasp-") for k in FLOW_ENV):
        return f"{name} (the FPGA build script)"
    return None


def _hook(event, args):
    if event != "subprocess.Popen":
        return
    record = os.environ.get(ENV)
    if not record:
        return
    executable, _argv, _cwd, env = args    # subprocess resolves executable before the event
    tool = hdl_tool(executable, env)
    if tool is None:
        return
    message = (f"{tool} started by a test not marked rtl: request the simulator_or_skip fixture "
               f"or mark the test @pytest.mark.rtl (`make test-fast` runs no HDL tools)")
    try:
        with open(record, "a") as f:
            f.write(message + "\n")
    except OSError:
        pass
    raise RtlNotMarked(message)


def install():
    """Add the audit hook to this process (once; audit hooks cannot be removed)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def arm():
    """Refuse HDL tools from now on, in this process and in the Python processes it starts."""
    global _saved
    if ENV not in os.environ:
        _saved = os.environ.get("PYTHONPATH")
    RECORD.unlink(missing_ok=True)
    os.environ[ENV] = str(RECORD)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SITE)] + ([_saved] if _saved else []))


def disarm():
    """Undo `arm` (no-op when not armed)."""
    if os.environ.pop(ENV, None) is None:
        return
    if _saved is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = _saved


def refused():
    """The first launch refused since the last call (and forget them), or None."""
    try:
        lines = RECORD.read_text().splitlines()
    except FileNotFoundError:
        return None
    RECORD.unlink(missing_ok=True)
    return lines[0] if lines else None


def child_env(env):
    """``env`` (an environment made for a child process, e.g. a copy of os.environ taken
    earlier) with the guard's current state: armed or not, as this process is now."""
    env = {k: v for k, v in env.items() if k != ENV}
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SITE)]
    if ENV in os.environ:
        env[ENV] = os.environ[ENV]
        path.insert(0, str(SITE))
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    else:
        env.pop("PYTHONPATH", None)
    return env
