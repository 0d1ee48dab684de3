"""The CLI contract: JSON keys, one-line errors, non-zero exit, no partial output."""
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import real_file
from hotline.cli import main
import reference

HOTLINE = [sys.executable, "-m", "hotline.cli"]


def run(*args):
    return subprocess.run(HOTLINE + [str(a) for a in args], capture_output=True, text=True)


def test_fragment_json_contract(tmp_path):
    path = real_file("criteo_kaggle/train_head1999.csv.gz")
    out = tmp_path / "f.json"
    assert main(["fragment", str(path), "--hot-rows", "1000", "--batch-size", "256",
                 "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for key in ("samples", "lookups", "hot_rows", "popular_samples", "hot_lookup_fraction", "batches"):
        assert key in res
    assert res["samples"] == 1999 and res["lookups"] == 1999 * 26 and res["hot_rows"] == 1000
    assert len(res["batches"]) == 8
    assert sum(b["popular"] + b["non_popular"] for b in res["batches"]) == 1999
    assert sum(b["popular"] for b in res["batches"]) == res["popular_samples"]
    samples = reference.read_criteo_csv(path)
    flat = [k for s in samples for k in s]
    hot = reference.exact_top_k(flat, 1000)
    assert res["hot_lookup_fraction"] == pytest.approx(reference.coverage(flat, hot))


def test_profile_fraction_and_hot_bytes(tmp_path):
    path = real_file("criteo_kaggle/train_random4584.csv.gz")
    out = tmp_path / "p.json"
    assert main(["profile", str(path), "--hot-bytes", str(64 * 512), "--dim", "16",
                 "--profile-fraction", "0.05", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    samples = reference.read_criteo_csv(path)
    n = reference.window(len(samples), 0.05)
    window = [k for s in samples[:n] for k in s]
    hot = reference.exact_top_k(window, 512)
    assert res["hot_rows"] == 512 and res["profile_samples"] == n == 230
    assert res["hot_keys"] == hot
    assert res["coverage"] == pytest.approx(reference.coverage(window, hot))


def test_clamped_hot_rows_says_so(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["profile", "synth:criteo-kaggle:50", "--hot-rows", "100000", "--json", str(out)]) == 0
    assert "exceeds the" in capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["hot_rows"] == res["distinct_keys"] < 100000


@pytest.mark.parametrize("command", [["profile"], ["fragment", "--batch-size", "64"]])
def test_clamped_hot_bytes_note_names_hot_bytes(tmp_path, capsys, command):
    """The note names what was asked for: --hot-bytes, not a --hot-rows the user never gave."""
    out = tmp_path / "p.json"
    assert main([*command, "synth:criteo-kaggle:50", "--hot-bytes", "1048576", "--dim", "16",
                 "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: --hot-bytes 1048576 (16384 rows of dim 16) exceeds the" in err
    assert "--hot-rows" not in err
    r = run(*command, "synth:criteo-kaggle:50", "--hot-bytes", "10", "--dim", "16", "--json", out)
    assert r.returncode == 2 and r.stderr == ("hotline: error: --hot-bytes 10 holds no row of "
                                              "dim 16 (64 bytes each)\n")


# A Criteo CSV header (every standard column is required) and a row of it with one field set.
CSV_HEAD = "Id,Label," + ",".join(f"I{i}" for i in range(1, 14)) + "," + \
    ",".join(f"C{i}" for i in range(1, 27)) + "\n"


def csv_row(i1="3", c1="ab"):
    return f"1,0,{i1}," + "3," * 12 + f"{c1}," + ",".join(["ab"] * 25) + "\n"


@pytest.mark.parametrize("content,args,message", [
    (CSV_HEAD + csv_row() + "2,0,4\n", ["--batch-size", "4"], "bad.csv:3: 3 columns"),
    (CSV_HEAD + csv_row(c1="zz"), ["--batch-size", "4"], "bad.csv:2: field C1 = 'zz'"),
    (CSV_HEAD + csv_row(i1="x"), ["--batch-size", "4"], "bad.csv:2: field I1 = 'x'"),
    ("", ["--batch-size", "4"], "bad.csv: empty file"),
    (CSV_HEAD.replace(",C26", "") + csv_row()[:-4] + "\n", ["--batch-size", "4"],
     "bad.csv:1: the Criteo CSV header lacks C26"),
    (CSV_HEAD + csv_row(), ["--batch-size", "0"], "--batch-size: must be a positive"),
    (CSV_HEAD + csv_row(), ["--batch-size", "4", "--hot-rows", "0"], "--hot-rows: must be"),
])
def test_bad_input_one_line_error_no_output(tmp_path, content, args, message):
    data = tmp_path / "bad.csv"
    data.write_text(content)
    out = tmp_path / "out.json"
    base = ["fragment", data, "--json", out]
    if "--hot-rows" not in args:
        base += ["--hot-rows", "4"]
    r = run(*base, *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.glob(".*partial"))


@pytest.mark.parametrize("arrays,message", [
    ({"sparse": np.array([[0, 9]]), "table_sizes": np.array([4, 5])}, "row id 9 is outside table 1"),
    ({"sparse": np.array([[-3, 0]]), "table_sizes": np.array([4, 5])}, "row id -3 is outside table 0"),
])
def test_bad_npz_one_line_error(tmp_path, arrays, message):
    data = tmp_path / "bad.npz"
    np.savez(data, **arrays)
    out = tmp_path / "p.json"
    r = run("profile", data, "--hot-rows", "2", "--json", out)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_missing_file_error(tmp_path):
    r = run("profile", tmp_path / "nope.csv", "--hot-rows", "2", "--json", tmp_path / "p.json")
    assert r.returncode == 2 and "nope.csv: no such file" in r.stderr
    assert r.stderr.count("\n") == 1


def test_synth_and_sim(tmp_path, capsys):
    npz = tmp_path / "s.npz"
    assert main(["data", "synth", "--samples", "2000", "--out", str(npz)]) == 0
    assert main(["fragment", str(npz), "--hot-rows", "500", "--batch-size", "300",
                 "--json", str(tmp_path / "f.json")]) == 0
    capsys.readouterr()
    assert main(["sim", "--backend", "model", "--samples", "3000", "--hot-rows", "800",
                 "--batch-size", "512", "--data", str(npz), "--out", str(tmp_path / "sim")]) == 0
    printed = capsys.readouterr()
    assert "backend model" in printed.out and "synth-criteo-3000" in printed.out
    res = json.loads((tmp_path / "sim" / "sim.json").read_text())
    assert [r["samples"] for r in res["runs"]] == [3000, 2000]
    assert all(Path(r["plot"]).stat().st_size > 10_000 for r in res["runs"])


def test_help_explains_every_command():
    for cmd in (["--help"], ["profile", "--help"], ["fragment", "--help"], ["sim", "--help"],
                ["data", "synth", "--help"]):
        r = run(*cmd)
        assert r.returncode == 0 and "usage: hotline" in r.stdout
    assert "example" in run("fragment", "--help").stdout


def test_sim_on_verilator_checks_the_rtl(tmp_path, capsys, simulator_or_skip):
    simulator_or_skip("verilator")
    assert main(["sim", "--samples", "1500", "--hot-rows", "600", "--batch-size", "256",
                 "--out", str(tmp_path / "sim")]) == 0
    out = capsys.readouterr().out
    assert "backend verilator" in out and "lookups/cycle" in out
    run = json.loads((tmp_path / "sim" / "sim.json").read_text())["runs"][0]
    assert run["rtl_checked_against_model"] and run["lookups_per_cycle"] > 0.95
    assert run["cycles"] >= run["lookups"]
    assert run["schedule_cycles"] <= run["cycles"] <= run["schedule_cycles"] * 1.002 + 64


def test_fpga_report_lanes_only_for_the_lane_blocks(capsys):
    """``--lanes`` with a block that has no lanes is one error line, before any synthesis."""
    assert main(["fpga", "report", "learner", "--lanes", "2"]) == 2
    err = capsys.readouterr().err
    assert ("lanes is an option of the cam, cold-key-set, fragmenter, accelerator blocks, "
            "not of 'learner'") in err
    assert err.count("hotline: error") == 1


def test_sim_in_lanes_on_the_amaranth_simulator(tmp_path, capsys):
    """``hotline sim --lanes 2``: the Fragmenter RTL takes lane beats, every beat = model,
    and lookups/cycle is measured against 2 (more than one lookup per cycle)."""
    assert main(["sim", "--backend", "amaranth", "--samples", "120", "--hot-rows", "300",
                 "--batch-size", "32", "--lanes", "2", "--out", str(tmp_path / "sim")]) == 0
    assert "2 lookup lane(s)" in capsys.readouterr().out
    res = json.loads((tmp_path / "sim" / "sim.json").read_text())
    run = res["runs"][0]
    assert res["accelerator"]["lanes"] == 2 and run["lanes"] == 2
    assert run["rtl_checked_against_model"] and 1.0 < run["lookups_per_cycle"] <= 2.0


@pytest.mark.slow   # (CI runs the README's profile --learner hw command)
def test_profile_with_the_learner_rtl(tmp_path, simulator_or_skip):
    simulator_or_skip("verilator")
    path = real_file("criteo_kaggle/train_head1999.csv.gz")
    out = tmp_path / "p.json"
    assert main(["profile", str(path), "--limit", "600", "--hot-rows", "400", "--learner", "hw",
                 "--build-dir", str(tmp_path / "rtl"), "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    samples = reference.read_criteo_csv(path)[:600]
    flat = [k for s in samples for k in s]
    assert res["exact_coverage"] == pytest.approx(reference.coverage(flat, reference.exact_top_k(flat, 400)))
    assert res["coverage"] == pytest.approx(reference.coverage(flat, res["hot_keys"]))
    assert res["hot_rows"] == 400 and res["rtl_checked_against_model"]
    assert res["coverage_ratio"] >= 0.98


# --- output paths: checked before any work, resolved once (issue 16) -------------------------

from hotline.cli import cli  # noqa: E402

# Every command with outputs: argv (cheap; the check comes before the data is read) and its
# output options, each "file" or "dir".
OUTPUT_COMMANDS = {
    "profile": (["profile", "synth:criteo-kaggle:100", "--hot-rows", "8", "--learner", "hw"],
                {"--json": "file", "--build-dir": "dir"}),
    "fragment": (["fragment", "synth:criteo-kaggle:100", "--hot-rows", "8", "--batch-size", "8",
                  "--backend", "verilator"], {"--json": "file", "--build-dir": "dir"}),
    "gather": (["gather", "synth:criteo-kaggle:100", "--hot-rows", "8", "--batch-size", "8"],
               {"--json": "file", "--build-dir": "dir"}),
    "sim": (["sim", "--backend", "model", "--samples", "100"], {"--out": "dir"}),
    "train": (["train", "synth:criteo-kaggle:100", "--mode", "baseline", "--batch-size", "8"],
              {"--json": "file", "--plot": "file", "--checkpoint": "file"}),
    "fpga report": (["fpga", "report", "cam"], {"--json": "file", "--build-dir": "dir"}),
    "fpga build": (["fpga", "build", "--board", "icebreaker"], {"--json": "file", "--build-dir": "dir"}),
    "fpga cosim": (["fpga", "cosim", "--board", "ulx3s-85f"], {"--build-dir": "dir"}),
    "data synth": (["data", "synth", "--samples", "10"], {"--out": "file"}),
    "data convert": (["data", "convert", "x.csv"], {"--out": "file"}),
    "data stats": (["data", "stats", "synth:criteo-kaggle:10"], {"--json": "file"}),
    "data calibrate": (["data", "calibrate", "x.csv"], {"--json": "file"}),
}
REQUIRED = {"profile": "--json", "fragment": "--json", "gather": "--json", "train": "--json",
            "data synth": "--out", "data convert": "--out"}


def _bad_path(tmp_path, kind, how):
    if how == "wrong kind":  # a directory where a file is wanted, and the other way round
        if kind == "file":
            (tmp_path / "d").mkdir()
            return tmp_path / "d"
        (tmp_path / "f").write_text("x")
        return tmp_path / "f"
    if how == "under a file":
        (tmp_path / "f").write_text("x")
        return tmp_path / "f" / "sub" / "out.json"
    if how == "read-only dir":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories ('under /proc' covers it)")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return ro / "out.json"
    if how == "under /proc":
        if not Path("/proc/self").exists():
            pytest.skip("no /proc here")
        return Path("/proc/hotline-no-such-dir/out.json")


CASES = [(name, opt, how) for name, (_, opts) in OUTPUT_COMMANDS.items() for opt in opts
         for how in ("wrong kind", "under a file", "read-only dir", "under /proc")]


@pytest.mark.parametrize("name,option,how", CASES, ids=[f"{n} {o} {h}" for n, o, h in CASES])
def test_unwritable_output_fails_at_once(tmp_path, name, option, how):
    argv, opts = OUTPUT_COMMANDS[name]
    bad = _bad_path(tmp_path, opts[option], how)
    args = argv + [option, str(bad)]
    if name in REQUIRED and option != REQUIRED[name]:
        args += [REQUIRED[name], str(tmp_path / "ok.out")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run(*args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("hotline: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert f"{option} {bad}" in r.stderr and r.stdout == ""
    # CPU seconds, not wall time: "at once" = before any data or torch work, however loaded
    # the machine (wall time was 13 s under a load of 4 on 2 cores)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu < 1.0, f"{cpu:.2f} CPU s before the error"
    assert not (tmp_path / "ok.out").exists()


def _all_options():
    """(command words, argparse action) for every option of every command."""
    import argparse

    def walk(parser, words):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, p in a.choices.items():
                    yield from walk(p, words + (name,))
            else:
                yield words, a
    return list(walk(cli.build_parser(), ()))


def test_every_output_option_is_checked():
    """An option that names a file or directory to write is one `main` checks and resolves
    (a new --log PATH in any command, `train` included, must be added to the lists)."""
    inputs = {"data", "resume"}
    seen = set()
    for words, a in _all_options():
        pathlike = (a.dest in ("json", "plot", "checkpoint", "out", "resume", "data")
                    or a.dest.endswith(("_dir", "_path", "_file"))
                    or a.metavar in ("OUT", "PATH", "PNG", "DIR", "FILE"))
        if pathlike:
            seen.add(a.dest)
            assert a.dest in cli.OUTPUT_FILES + cli.OUTPUT_DIRS or a.dest in inputs, \
                f"hotline {' '.join(words)} {a.option_strings}: not checked as an output"
    assert {"json", "plot", "checkpoint", "out", "build_dir"} <= seen


def test_outputs_and_build_dirs_are_resolved_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    parser = cli.build_parser()
    for argv, opts in OUTPUT_COMMANDS.values():
        args = parser.parse_args(argv + [a for o in opts for a in (o, "rel/x")])
        cli.resolve_paths(args)
        for o in opts:
            assert getattr(args, o[2:].replace("-", "_")) == str(tmp_path / "rel" / "x")
    args = cli.resolve_paths(parser.parse_args(["profile", "in.csv", "--hot-rows", "1",
                                                "--json", "p.json"]))
    assert args.data == "in.csv"  # inputs stay as typed: error messages name them so


def test_relative_outputs_from_another_directory(tmp_path, monkeypatch):
    """A relative --json and --build-dir from an unrelated working directory."""
    monkeypatch.chdir(tmp_path)
    assert main(["fragment", "synth:criteo-kaggle:300", "--hot-rows", "50", "--batch-size", "64",
                 "--json", "out/f.json"]) == 0
    assert json.loads((tmp_path / "out" / "f.json").read_text())["samples"] == 300


def test_an_unused_build_dir_is_not_checked(tmp_path, monkeypatch):
    """The model backend needs no build directory: a default one that cannot be created (the
    working directory holds a file named build) does not stop it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "build").write_text("x")
    assert main(["fragment", "synth:criteo-kaggle:200", "--hot-rows", "20", "--batch-size", "64",
                 "--json", "f.json"]) == 0
    assert main(["profile", "synth:criteo-kaggle:200", "--hot-rows", "20", "--json", "p.json"]) == 0
    assert main(["profile", "synth:criteo-kaggle:200", "--hot-rows", "20", "--learner", "hw",
                 "--json", "q.json"]) == 2 and not (tmp_path / "q.json").exists()


def test_a_simulator_that_exits_is_one_error_line(tmp_path, monkeypatch, capsys):
    """cocotb's runner leaves by sys.exit when the simulator fails: `profile --learner hw`
    then reports one line naming the log (it exited 1 with nothing to say)."""
    import cocotb_tools.runner
    from hotline.cli import commands

    class Dead:
        def build(self, **kw):
            pass

        def test(self, **kw):
            raise SystemExit(139)

    monkeypatch.setattr(cocotb_tools.runner, "get_runner", lambda name: Dead())
    monkeypatch.setattr(commands, "simulator_available", lambda name: True)
    monkeypatch.setenv("HOTLINE_RTL_CACHE", str(tmp_path / "cache"))   # Dead builds nothing
    assert main(["profile", "synth:criteo-kaggle:50", "--hot-rows", "8", "--learner", "hw",
                 "--build-dir", str(tmp_path / "rtl"), "--json", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exit 139" in err and "sim.log" in err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("argv,message", [
    ([], "the following arguments are required: COMMAND"),
    (["profile", "x.csv"], "profile: the following arguments are required: --json"),
    (["fragment", "x", "--json", "y", "--hot-rows", "0", "--batch-size", "2"],
     "fragment: argument --hot-rows: must be a positive integer, not 0"),
    (["fpga", "build", "--board", "nope"], "fpga build: argument --board: invalid choice"),
    (["train", "x", "--mode", "hotline"], "train: the following arguments are required"),
    (["data", "synth", "--samples", "x", "--out", "y"], "data synth: argument --samples"),
    (["sim", "--lanes", "3"], "sim: argument --lanes: invalid choice: 3"),
])
def test_usage_errors_are_one_line(argv, message):
    r = run(*argv)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"hotline: error: {message}") and r.stderr.count("\n") == 1, r.stderr
