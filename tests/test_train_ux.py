"""What a user of `hotline train` sees: argument checks before any work, Ctrl-C on several
ranks, the summary after --max-steps, the setup phases and ETA of the progress bar, the setup
and wall seconds of the report, and the comparison with a baseline run (--compare, --plot)."""
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hotline import cli
from hotline.cli import train_command
from hotline.data.spec import open_data
from hotline.train import TrainConfig, plots, prepare_data, train
from hotline.train.metrics import planned_fractions
from hotline.train.report import summary_rows
from test_dist import _alive, _children

HOTLINE = [sys.executable, "-m", "hotline"]
SMALL = ["--dim", "8", "--bottom", "16", "--top", "16", "--threads", "1"]
SYNTH = ["synth:criteo-kaggle:640:1", "--max-ind-range", "400", "--batch-size", "64", *SMALL]


def main_rc(argv) -> int:
    """`hotline.cli.main`'s exit code (argparse's errors exit through SystemExit)."""
    try:
        return cli.main(argv)
    except SystemExit as e:
        return e.code


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hotline: error: "), err
    return err[0]


@pytest.mark.parametrize("device, message", [
    ("tpu", "argument --torch-device: 'tpu': expected cpu, cuda or cuda:N"),
    ("cuda:x", "expected cpu, cuda or cuda:N"),
    # on a CPU build of torch: built without CUDA; with GPUs: not 99 of them
    ("cuda:99", "--torch-device cuda:99: (this torch was built without CUDA|no CUDA GPU is "
                "visible|this machine has \\d+ CUDA GPU)"),
])
@pytest.mark.parametrize("nproc", ["1", "2"])
def test_torch_device_refused_before_any_work(tmp_path, capsys, monkeypatch, device, message,
                                              nproc):
    def no_work(*a, **k):
        raise AssertionError("the data was opened before --torch-device was checked")
    monkeypatch.setattr(train_command, "open_data", no_work)
    out = tmp_path / "r.json"
    rc = main_rc(["train", *SYNTH, "--mode", "baseline", "--torch-device", device, "--nproc",
                  nproc, "--json", str(out)])
    assert rc == 2 and re.search(message, one_line_error(capsys))
    assert not out.exists()


def test_ctrl_c_on_two_ranks_exits_130_with_one_line(tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group: the launcher and both ranks) once the
    ranks train: exit 130, "hotline: interrupted", no report, no process left."""
    out, ck = tmp_path / "r.json", tmp_path / "c.pt"
    p = subprocess.Popen([*HOTLINE, "train", *SYNTH, "--mode", "baseline", "--epochs", "1000",
                          "--nproc", "2", "--checkpoint", str(ck), "--checkpoint-every", "3",
                          "--json", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.time() + 90
        while not ck.exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert ck.exists(), "no checkpoint: the ranks did not train"
        children = [c for c in _children(p.pid) if _alive(c)]
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130 and err.strip().splitlines() == ["hotline: interrupted"], err
    assert not out.exists()
    deadline = time.time() + 10  # (the resource tracker ends after the launcher)
    while [c for c in children if _alive(c)] and time.time() < deadline:
        time.sleep(0.2)
    assert len(children) >= 2 and not [c for c in children if _alive(c)], \
        "a rank outlived the run"


# -- the report: --max-steps, setup and wall seconds ---------------------------------------


def test_max_steps_mid_epoch_reports_train_and_test_figures_of_its_steps():
    """--max-steps 4 of 9 steps: train logloss over those 4 steps (their samples' mean loss),
    test logloss and AUC of the model they left, in a history entry marked partial."""
    data = prepare_data(open_data("synth:criteo-kaggle:640:1", max_ind_range=400), 0.1, 400)
    cfg = TrainConfig(mode="baseline", dim=8, bottom=(16,), top=(16,), batch_size=64,
                      max_steps=4)
    rep, trainer = train(data, cfg, keep=True)
    try:
        test_logloss, test_auc = trainer.evaluate()
    finally:
        trainer.close()
    assert rep["steps"] == 4 and rep["epochs"] == 1
    assert rep["train_logloss"] == pytest.approx(np.mean(rep["losses"]), rel=1e-12)
    assert (rep["test_logloss"], rep["test_auc"]) == (test_logloss, test_auc)
    assert 0 < test_auc < 1 and test_logloss > 0
    assert rep["history"] == [{"epoch": 1, "train_logloss": rep["train_logloss"],
                               "test_logloss": test_logloss, "test_auc": test_auc,
                               "samples_per_s": pytest.approx(rep["samples_per_s"]),
                               "seconds": rep["train_seconds"], "steps": 4, "partial": True}]
    rows = dict(summary_rows(rep))
    assert rows["train logloss"] == rep["train_logloss"] and rows["test AUC"] == test_auc


def test_setup_and_wall_seconds(tmp_path, monkeypatch):
    """setup_seconds: from the command's start to the first step (a data load made 0.4 s
    slower shows in it); wall_seconds: to the report, at least setup + steps, at most the
    command's own duration."""
    opened = train_command.open_data

    def slow_open(*a, **k):
        time.sleep(0.4)
        return opened(*a, **k)
    monkeypatch.setattr(train_command, "open_data", slow_open)
    out = tmp_path / "r.json"
    t0 = time.time()
    assert cli.main(["train", *SYNTH, "--mode", "baseline", "--json", str(out)]) == 0
    elapsed = time.time() - t0
    r = json.loads(out.read_text())
    assert 0.4 <= r["setup_seconds"] < r["wall_seconds"] <= elapsed
    assert r["setup_seconds"] + r["train_seconds"] <= r["wall_seconds"]


# -- progress --------------------------------------------------------------------------


def test_progress_labels_each_setup_phase_and_shows_the_eta_after_the_first_steps(
        tmp_path, monkeypatch):
    """Every frame the bar draws (captured): the setup phases as labels, in order, with no
    0% bar under them; then the steps, timed from the first, with an ETA from step
    ETA_AFTER_STEPS on."""
    shown = io.StringIO()
    real = train_command.tqdm
    monkeypatch.setattr(train_command, "tqdm", lambda **k: real(**{
        **k, "file": shown, "disable": False, "mininterval": 0, "miniters": 1}))
    out = tmp_path / "r.json"
    assert cli.main(["train", *SYNTH, "--mode", "hotline", "--hot-rows", "200",
                     "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["table_rows"]
    frames = [f.strip() for f in shown.getvalue().split("\r") if f.strip()]
    setup = [f for f in frames if "/576" not in f]
    steps = [f for f in frames if "/576" in f]
    assert frames[:len(setup)] == setup, "a setup label after the steps began"
    labels = list(dict.fromkeys(re.sub(r" \[\d\d:\d\d\]$", "", f) for f in setup))
    assert labels == ["train (hotline): loading data", "train (hotline): building the model",
                      "train (hotline): planning the hot set",
                      f"train (hotline): initialising {rows:,} table rows in host memory",
                      "train (hotline): opening the device (model://), loading 200 hot keys "
                      "into the CAM and their rows to the torch device"], labels
    # one frame per step after the bar's reset to 0 at the first step
    assert len(steps) == 1 + 9 and steps[0].startswith("train (hotline):   0%")
    eta = [bool(re.search(r"\[\d\d:\d\d<\d\d:\d\d", f)) for f in steps]
    k = train_command.ETA_AFTER_STEPS
    assert eta == [False] * k + [True] * (len(steps) - k), steps


# -- the plot and --compare ------------------------------------------------------------


def test_moving_throughput_and_mean_against_loops():
    """samples/s over each window = its samples over its seconds; each epoch's last batch
    holds the remainder (1000 samples at B = 64: 15 of 64, then 40)."""
    rng = np.random.default_rng(0)
    res = {"train_samples": 1000, "batch_size": 64,
           "step_seconds": list(rng.uniform(0.01, 0.1, 32))}
    samples = [40 if i % 16 == 15 else 64 for i in range(32)]
    for w in (1, 5):
        x, y = plots.moving_throughput(res, w)
        want = [sum(samples[i - w:i]) / sum(res["step_seconds"][i - w:i]) for i in range(w, 33)]
        assert list(x) == list(range(w, 33)) and y == pytest.approx(want, rel=1e-12)
        x, y = plots.moving_mean(samples, w)
        assert y == pytest.approx([np.mean(samples[i - w:i]) for i in range(w, 33)])
    assert plots.smoothing_window(24) == 1 and plots.smoothing_window(440) == 17


def legends(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend()
            for t in ax.get_legend().get_texts()]


def run_cli(tmp_path, name, *args) -> dict:
    out = tmp_path / f"{name}.json"
    assert cli.main(["train", *SYNTH, *args, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_compare_with_a_baseline_report(tmp_path, capsys):
    """hotline --compare BASELINE.json: the JSON's compare, the summary's line and the plot's
    title and legends carry the two runs' samples/s ratio and AUC difference, as computed
    from the two reports; the plot has both runs' curves."""
    base = run_cli(tmp_path, "base", "--mode", "baseline", "--batch-size", "8")
    png = tmp_path / "h.png"
    res = run_cli(tmp_path, "h", "--mode", "hotline", "--hot-rows", "200", "--batch-size", "8",
                  "--compare", str(tmp_path / "base.json"), "--plot", str(png))
    c = res["compare"]
    assert c["report"] == str(tmp_path / "base.json") and c["mode"] == "baseline"
    assert c["speedup"] == res["samples_per_s"] / base["samples_per_s"]
    assert c["test_auc"] == base["test_auc"] and c["samples_per_s"] == base["samples_per_s"]
    assert c["test_auc_delta"] == res["test_auc"] - base["test_auc"]
    assert c["test_logloss_delta"] == res["test_logloss"] - base["test_logloss"]
    assert c["same_data"] is True
    assert c["loss_max_rel_diff"] == pytest.approx(max(
        abs(a - b) / abs(b) for a, b in zip(res["losses"], base["losses"])), abs=1e-15)
    assert c["loss_max_rel_diff"] <= 1e-5   # the modes train alike (test_train.py)
    assert f"{c['speedup']:.2f}x samples/s, test AUC {c['test_auc_delta']:+.4f}" in \
        capsys.readouterr().out
    assert png.stat().st_size > 10_000
    fig = plots.training_figure(res, base)
    try:
        title = fig._suptitle.get_text()
        texts = legends(fig)
        titles = [ax.get_title() for ax in fig.axes]
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    assert (f"hotline {c['speedup']:.2f}x the samples/s of baseline "
            f"({res['samples_per_s']:,.0f} vs {base['samples_per_s']:,.0f})") in title
    assert "loss: hotline = baseline at every step (to 1e-05, relative)" in titles
    w = plots.smoothing_window(72)
    assert w == 2
    for run in ("hotline", "baseline"):
        assert f"{run}, moving mean over {w} steps" in texts
        assert f"{run} train, moving mean over {w} steps" in texts
    assert any(t.startswith("popular samples, moving mean over 2 steps (whole run ") for t in texts)
    assert not [t for t in texts if re.search(r"\bover 1 steps|mean of 1\b", t)]


def test_short_run_legends_say_per_step():
    res = {"mode": "baseline", "data": "d", "optimizer": "sgd", "dim": 8, "batch_size": 64,
           "train_samples": 576, "samples_per_s": 100.0, "test_auc": 0.6, "test_logloss": 0.6,
           "losses": [0.7] * 9, "step_seconds": [0.1] * 9, "history": [
               {"steps": 9, "test_logloss": 0.6}]}
    fig = plots.training_figure(res)
    texts = legends(fig)
    import matplotlib.pyplot as plt
    plt.close(fig)
    assert "baseline, per step" in texts and "baseline train, per step" in texts
    assert not [t for t in texts if re.search(r"mean (of|over) 1\b", t)]


def test_popular_share_per_step_matches_the_exact_hot_set():
    """Hotline mode's per-step popular-sample shares, weighted by the steps' samples, give
    the share of samples whose every lookup is in the exact hot set (`planned_fractions`,
    counted on the data without the device)."""
    data = prepare_data(open_data("synth:criteo-kaggle:640:1", max_ind_range=400), 0.1, 400)
    cfg = TrainConfig(mode="hotline", dim=8, bottom=(16,), top=(16,), batch_size=64,
                      hot_rows=2000).check()
    rep = train(data, cfg)
    samples = plots.step_samples(rep)
    hot, popular = planned_fractions(data, cfg, 2000)
    assert 0 < popular < 1
    assert np.dot(rep["step_popular_share"], samples) / samples.sum() == pytest.approx(popular)
    assert np.dot(rep["step_hot_share"], samples) > 0 and rep["popular_fraction"] == \
        pytest.approx(popular)


@pytest.mark.parametrize("content, message", [
    (None, "--compare {p}: no such file"),
    ("DIR", "--compare {p}: is a directory, not a JSON report"),
    (b"\xff\xfe", "--compare {p}: not JSON (not UTF-8 text)"),
    ('{"mode": "baseline",', "--compare {p}: not JSON (Expecting property name enclosed in "
                             "double quotes at line 1, column 21)"),
    ("[1, 2]", "--compare {p}: not a hotline train report (a JSON list, not an object)"),
    ('{"data": "x", "hot_rows": 10}', "--compare {p}: not a hotline train report (no 'mode')"),
    ("REPORT:losses=[0.5, \"x\"]", "--compare {p}: not a hotline train report ('losses' is "
                                   "[0.5, \"x\"])"),
    ("REPORT:mode=\"fast\"", "--compare {p}: not a hotline train report ('mode' is \"fast\")"),
    ("REPORT:step_seconds=[0.1]", "--compare {p}: not a hotline train report (2 losses, 1 "
                                  "step_seconds)"),
])
def test_compare_input_refused_with_one_line_before_any_work(tmp_path, capsys, monkeypatch,
                                                               content, message):
    p = tmp_path / "base.json"
    if content == "DIR":
        p.mkdir()
    elif isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None and content.startswith("REPORT:"):
        key, _, value = content[len("REPORT:"):].partition("=")
        good = {"mode": "baseline", "data": "d", "train_samples": 100, "batch_size": 64,
                "samples_per_s": 10.0, "test_auc": 0.7, "test_logloss": None,
                "losses": [0.7, 0.6], "step_seconds": [0.1, 0.1],
                "history": [{"steps": 2, "test_logloss": None}]}
        p.write_text(json.dumps({**good, key: json.loads(value)}))
    elif content is not None:
        p.write_text(content)

    def no_work(*a, **k):
        raise AssertionError("the data was opened before --compare was checked")
    monkeypatch.setattr(train_command, "open_data", no_work)
    out = tmp_path / "r.json"
    rc = main_rc(["train", *SYNTH, "--mode", "hotline", "--compare", str(p), "--json", str(out)])
    assert rc == 2 and one_line_error(capsys) == "hotline: error: " + message.format(p=p)
    assert not out.exists()


def test_make_train_runs_baseline_then_hotline_compared_unless_mode_is_given():
    def commands(*args):
        out = subprocess.run(["make", "-n", "-s", "train", *args], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).parent.parent).stdout
        return [line for line in out.splitlines() if " train " in line]
    both = commands("TRAIN_SAMPLES=1000")
    assert len(both) == 2
    assert "--mode baseline" in both[0] and "--json build/train/train-baseline.json" in both[0]
    assert "--mode hotline" in both[1] and "--compare build/train/train-baseline.json" in both[1]
    assert all("synth:criteo-kaggle:1000 " in c for c in both)
    for mode in ("baseline", "hotline", "device-only"):
        one = commands(f"MODE={mode}", "TRAIN_ARGS=--max-steps 3")
        assert len(one) == 1 and f"--mode {mode} " in one[0] and "--compare" not in one[0]
        assert "--max-steps 3" in one[0] and f"--plot build/train/train-{mode}.png" in one[0]
