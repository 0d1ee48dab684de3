"""examples/two_tower.py, the two-tower MovieLens model written against the public API
(issue 45 item 4): it runs as a user runs it, learns, trains identically in the host and
hotline placements, and refuses bad input in one line."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import real_file

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "two_tower.py"
TINY = ["--data", "synth", "--epochs", "4", "--batch-size", "64", "--threads", "1"]


def run(tmp_path, *args):
    """The script as a subprocess -> (completed process, its --json result or None)."""
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, str(SCRIPT), *args, "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    return r, json.loads(out.read_text()) if out.exists() else None


@pytest.fixture(scope="module")
def synth_runs(tmp_path_factory):
    """placement -> (process, result) of the tiny synthetic run."""
    return {p: run(tmp_path_factory.mktemp(p), *TINY, "--placement", p) for p in ("host", "hotline")}


@pytest.mark.parametrize("placement", ["host", "hotline"])
def test_synthetic_run_learns(synth_runs, placement):
    r, result = synth_runs[placement]
    assert r.returncode == 0, r.stderr
    assert result is not None and [e["epoch"] for e in result["epochs"]] == [1, 2, 3, 4]
    losses = [e["loss"] for e in result["epochs"]]
    assert losses == sorted(losses, reverse=True) and losses[-1] < 0.9 * losses[0], losses
    assert "epoch 4: loss" in r.stdout and "done: recall@10" in r.stdout


def test_hotline_trains_as_host(synth_runs):
    """Every step's loss equal to 1e-6 (bit for bit at 1 thread, in fact), across the hot-set
    load after 8 of each epoch's 12 batches; the hotline run did use hot rows."""
    (_, host), (_, hotline) = synth_runs["host"], synth_runs["hotline"]
    assert len(host["step_losses"]) == len(hotline["step_losses"]) == 4 * 12
    assert hotline["step_losses"] == pytest.approx(host["step_losses"], rel=1e-6, abs=0)
    assert hotline["epochs"][-1]["recall@10"] == host["epochs"][-1]["recall@10"]
    assert hotline["hot_keys"] > 0 and hotline["hot_share"] > 0.1


@pytest.mark.realdata
def test_movielens_beats_popularity(tmp_path):
    """One epoch on ml-100k: recall@10 of the held-out ratings above the popularity ranking's
    (0.086), and genres read from the .item file beside the .inter file."""
    r, result = run(tmp_path, "--data", str(real_file("movielens/ml-100k.inter.gz")),
                    "--epochs", "1", "--batch-size", "1024")
    assert r.returncode == 0, r.stderr
    assert "943 users, 1682 items, 19 genres, 99057 training ratings, 943 held out" in r.stdout
    assert result["epochs"][0]["recall@10"] > 1.5 * result["popularity_recall@10"] > 0.05


@pytest.fixture(scope="module")
def script():
    """The script as a module (its main() in this process: the refusals need no run); torch's
    thread count, which main() sets, restored afterwards."""
    import torch
    threads = torch.get_num_threads()
    spec = importlib.util.spec_from_file_location("two_tower", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    torch.set_num_threads(threads)


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    (b"user_id:token\titem_id:token\n1\t2\n", "the header lacks timestamp"),
    (b"user_id:token\titem_id:token\ttimestamp:float\n1\t2\t5\n1\t3\n", "line 3: 2 fields, the header has 3"),
    (b"user_id:token\titem_id:token\ttimestamp:float\n1\t2\tnoon\n", "a timestamp is not a number"),
    (b"user_id:token\titem_id:token\ttimestamp:float\n1\t2\t5\n2\t2\t6\n", "no user has two ratings"),
    (b"\x1f\x8b\x08 broken", "cannot be read"),
])
def test_bad_data_is_one_line_exit_2(script, tmp_path, capsys, content, message):
    path = tmp_path / ("x.inter.gz" if content and content.startswith(b"\x1f\x8b") else "x.inter")
    if content is not None:
        path.write_bytes(content)
    out = tmp_path / "out.json"
    assert script.main(["--data", str(path), "--json", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("two_tower.py: error: ") and "\n" not in err, err
    assert not out.exists()


def test_bad_json_path_fails_before_training(script, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert script.main(["--data", "synth", "--json", str(tmp_path / "file" / "out.json")]) == 2
    err = capsys.readouterr()
    assert err.err.startswith("two_tower.py: error: --json ") and err.out == ""


def test_only_the_public_api():
    """The example imports from hotline only what docs/nn.md documents for users."""
    import ast
    nodes = list(ast.walk(ast.parse(SCRIPT.read_text())))
    imported = {(node.module, alias.name) for node in nodes
                if isinstance(node, ast.ImportFrom) and node.module.startswith("hotline")
                for alias in node.names}
    plain = [alias.name for node in nodes if isinstance(node, ast.Import)
             for alias in node.names if alias.name.startswith("hotline")]
    assert imported == {("hotline.nn", "EmbeddingBagCollection"),
                        ("hotline.contract.errors", "HotlineError")} and not plain
