"""The README's commands, run exactly as written (issue 16).

Every ``hotline ...``, ``make ...``, ``torchrun ...`` and ``python ...`` line of README.md's ```sh blocks (``\\`` continuations
joined, comments stripped) runs from the root of a clean copy of the repository: the tracked
files of the working tree (``HOTLINE_README_SOURCE=HEAD``: the last commit instead), with a
``shared`` symlink beside it pointing at the real ``../shared``, so that ``../shared/data/...``
resolves from the copy's root as it does from a fresh clone's. The copy's own code runs: the
venv's ``hotline`` is on PATH and the copy's package is first on PYTHONPATH; ``make`` finds the
venv through a ``.venv`` symlink (its install stamp newer than the copy's pyproject.toml, so
make never reinstalls it from the copy).

Tiers (``TIERS``: the first rule that matches a command decides):
- fast (``make test``): the model and data commands;
- ``slow`` (``make test-full``): everything that builds RTL or a board, synthesises or trains
  for minutes; ``hotline fpga cosim`` (serves until interrupted) is started, its URL read and
  connected to, and then interrupted (Ctrl-C) and must exit 0;
- ``slow`` and ``ci``: the reduced slow set CI runs (``make test-ci``, about 3 min): the
  Verilator runs of profile and fragment;
- ``make test`` itself only as ``make -n test`` (it is this suite; reason in ``TIERS``).

A README command that stops working fails the test whose id is the command. Commands on
``../shared/data`` skip cleanly when it is absent. Each command's output files (``--json``,
``--out``, ``--plot``) must exist afterwards, and nothing may be written at the copy's root
except ``build/``.
"""
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rtl_guard

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent

# (pattern, marks, timeout in seconds, why); the first match wins. A timeout of None: only
# ``make -n`` of it (the reason says what covers it instead).
SLOW, CI, RTL = pytest.mark.slow, pytest.mark.ci, pytest.mark.rtl
TIERS = [
    (r"^make test$", [], None,
     "the test suite itself: running it from inside it would recurse (it is CI's entry point, "
     ".ci/run); make -n checks the target and its pytest line"),
    (r"^hotline fpga cosim\b", [SLOW, RTL], 900,
     "serves until interrupted: started, its serial:// URL read and connected to, then Ctrl-C "
     "(builds the board top in Verilator, about a minute)"),
    (r"^hotline fpga report accelerator\b", [SLOW, RTL], 3 * 3600,
     "synthesis, place and route of the whole top: about 35 min, nextpnr gets 45 min per seed "
     "and up to 3 seeds"),
    (r"^hotline fpga (report|build)\b", [SLOW, RTL], 3600,
     "synthesis, place and route (several minutes)"),
    (r"^hotline gather\b", [SLOW, RTL], 1800,
     "the whole accelerator top under cocotb in Verilator (about 3 min: left out of CI's "
     "reduced set, whose cocotb path handling profile --learner hw exercises)"),
    (r"--learner hw|--backend (verilator|icarus)", [SLOW, CI, RTL], 1800,
     "builds and runs RTL in Verilator (a minute or two)"),
    (r"^make (sim|bench|fpga)\b", [SLOW, RTL], 3600, "RTL co-simulation, benchmarks or a board build"),
    (r"^make train\b", [SLOW], 1800, "DLRM training on 500000 generated samples (minutes)"),
    (r"^hotline train build/criteo-shards\b", [], 600,
     "DLRM training on the shards the convert command before it wrote (about 20 s)"),
    (r"^hotline train\b|^torchrun\b", [SLOW], 1800,
     "DLRM training, 5 epochs (about 2 min), or on 2 ranks"),
    (r"", [], 600, "models and data only"),
]


def readme_commands(text):
    """Every ``hotline`` / ``torchrun`` / ``make`` command of the ```sh blocks of ``text``, in
    order."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            line = re.sub(r"\s+", " ", line)
            if line.split(" ")[0] in ("hotline", "make", "torchrun", "python"):
                commands.append(line)
    return commands


def tier(command):
    for pattern, marks, timeout, why in TIERS:
        if re.search(pattern, command):
            return marks, timeout, why
    raise AssertionError("the last rule matches everything")


COMMANDS = readme_commands(README.read_text())


def _params():
    out = []
    for command in COMMANDS:
        marks, timeout, why = tier(command)
        out.append(pytest.param(command, timeout, why, marks=marks, id=command))
    return out


def test_readme_commands_are_found():
    """The extraction sees the README's examples (a reformatted README must not silently turn
    this tier into nothing)."""
    assert len(COMMANDS) >= 15
    assert "make sim" in COMMANDS and "make test" in COMMANDS
    assert any(c.startswith("hotline gather ") and c.endswith("--json build/gather.json")
               for c in COMMANDS), "continuation lines are joined"
    assert "hotline fpga report accelerator --device ecp5-85f --json build/synth_top.json" \
        in COMMANDS, "trailing comments are stripped"


def test_extraction_joins_continuations_and_strips_comments():
    text = ("```sh\n# a comment\nhotline a \\\n    --b c   # note\nmake x Y=1\necho no\n```\n"
            "```python\nhotline no\n```\n")
    assert readme_commands(text) == ["hotline a --b c", "make x Y=1"]


def test_readme_outputs_go_under_build():
    """No README example writes into the repository root."""
    for command in COMMANDS:
        for flag, path in re.findall(r"(--json|--out|--plot|--checkpoint|--build-dir) (\S+)",
                                     command):
            assert path.startswith("build/"), f"{command}: {flag} {path} is outside build/"


# --- the clean copy -------------------------------------------------------------------------

def _tracked_copy(dest):
    source = os.environ.get("HOTLINE_README_SOURCE", "worktree")
    if source == "worktree":
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                               check=True).stdout.decode().split("\0")
        for rel in filter(None, files):
            src = ROOT / rel
            if src.is_file():  # a tracked file deleted in the working tree is left out
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / rel)
    else:
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", source], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """(root of the copy, environment to run its commands in)."""
    base = tmp_path_factory.mktemp("readme")
    repo = base / "hotline"
    _tracked_copy(repo)
    shared = ROOT.parent / "shared"
    if shared.exists():
        (base / "shared").symlink_to(shared.resolve(), target_is_directory=True)
    # The copy's package, importable as hotline (pyproject's package-dir, as symlinks).
    pkg = base / "pkg" / "hotline"
    pkg.mkdir(parents=True)
    for entry in (repo / "sw").iterdir():
        (pkg / entry.name).symlink_to(entry)
    for sub in ("hw", "sim", "fpga"):
        (pkg / sub).symlink_to(repo / sub, target_is_directory=True)
    (repo / ".venv").symlink_to(VENV_BIN.parent, target_is_directory=True)
    # The venv stands installed from this pyproject.toml: the copy's file must not look newer
    # than the install stamp (a copy or an archive gets a fresh or a commit mtime).
    stamp = VENV_BIN.parent / ".installed-stamp"
    if stamp.exists():
        t = stamp.stat().st_mtime - 1
        os.utime(repo / "pyproject.toml", (t, t))
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOTLINE_DATA", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "PYTEST_ADDOPTS",
                        "PYTEST_CURRENT_TEST")}  # a user's shell: cocotb acts on the last one
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(base / "pkg")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return repo, env


def _data_or_skip(command, repo):
    for rel in re.findall(r"\.\./shared/data/\S+", command):
        if not (repo / rel).exists():
            pytest.skip(f"real data not present: {rel}")


def _outputs(command):
    return re.findall(r"--(?:json|out|plot|checkpoint) (\S+)", command)


def _make_is_up_to_date(repo, env):
    """make must not (re)install the venv from the copy (it would repoint the editable
    install at a temporary directory)."""
    r = subprocess.run(["make", "-q", ".venv/.installed-stamp"], cwd=repo, env=env,
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip("the venv's install stamp is older than pyproject.toml: run `make setup` "
                    "first (make would reinstall the venv from the copy)")


def _serve(command, repo, env, timeout):
    """Start a command that serves until interrupted, read its serial:// URL, connect to it,
    interrupt it (Ctrl-C) and require exit 0."""
    # No shell in between: its own death by SIGINT would hide hotline's exit status.
    proc = subprocess.Popen(shlex.split(command), cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines, url = [], None
    try:
        deadline = time.monotonic() + timeout
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.match(r"serial://socket://([\d.]+):(\d+)", line)
            if m:
                url, address = m.group(0), (m.group(1), int(m.group(2)))
                with socket.create_connection(address, timeout=30):
                    pass
        assert url, f"no serial:// URL printed:\n{''.join(lines[-20:])}"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole job
        rest, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"exit {proc.returncode} after Ctrl-C:\n{rest[-3000:]}"
        with pytest.raises(OSError):  # the co-simulated board went with it
            socket.create_connection(address, timeout=5).close()
    finally:
        if proc.poll() is None:  # once more gently (the board server dies with hotline), then not
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.parametrize("command,timeout,why", _params())
def test_readme_command(command, timeout, why, clone):
    repo, env = clone
    env = rtl_guard.child_env(env)
    if timeout is None:
        r = subprocess.run(command.replace("make ", "make -n ", 1), shell=True, cwd=repo,
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "pytest" in r.stdout, r.stderr
        return
    _data_or_skip(command, repo)
    if command.startswith("make "):
        _make_is_up_to_date(repo, env)
    before = {p.name for p in repo.iterdir()}
    t0 = time.monotonic()
    if command.startswith("hotline fpga cosim"):
        _serve(command, repo, env, timeout)
    else:
        try:
            r = subprocess.run(command, shell=True, cwd=repo, env=env, capture_output=True,
                               text=True, timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command}: still running after {timeout} s")
        assert r.returncode == 0, (f"{command}: exit {r.returncode}\n--- stderr:\n"
                                   f"{r.stderr[-3000:]}\n--- stdout:\n{r.stdout[-2000:]}")
        assert "Traceback" not in r.stderr, r.stderr[-3000:]
    print(f"\nREADME command took {time.monotonic() - t0:.1f} s: {command}")
    for out in _outputs(command):
        assert (repo / out).exists(), f"{command}: {out} was not written"
    new = {p.name for p in repo.iterdir()} - before - {"build"}
    assert not new, f"{command} wrote {sorted(new)} into the repository root"


def _subcommands():
    """Every command and action of the CLI, e.g. ('fpga', 'report')."""
    import argparse
    from hotline.cli import build_parser

    def walk(parser, prefix):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield prefix
        for action in subs:
            for name, p in action.choices.items():
                yield from walk(p, prefix + (name,))
    return list(walk(build_parser(), ()))


@pytest.mark.parametrize("words", [(), *_subcommands()], ids=lambda w: " ".join(("hotline",) + w
                                                                                 + ("--help",)))
def test_every_command_has_help(words, clone):
    """``hotline ... --help`` from the copy's root: usage on stdout, exit 0."""
    repo, env = clone
    env = rtl_guard.child_env(env)
    r = subprocess.run(["hotline", *words, "--help"], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "usage: hotline" in r.stdout, r.stderr
    assert r.stderr == ""
