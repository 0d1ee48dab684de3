"""Data-parallel training (`hotline train --nproc N`, torchrun): the same losses and tables as
one process and as the independent dense reference, uneven and empty shards, resume with
another rank count, a killed rank, and the errors. Runs the CLI as users do (subprocesses)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import real_file
from hotline.data.spec import open_data
from hotline.nn.inputs import fbgemm_layout
from hotline.train import TrainConfig, prepare_data
from hotline.train import trainer as trainer_module
from test_train import assert_same_run, reference_train, tables_of

HOTLINE = [sys.executable, "-m", "hotline"]
SMALL = ["--dim", "8", "--bottom", "16", "--top", "16", "--threads", "1"]
SPEC, FOLD = "synth:criteo-kaggle:640:1", 400


def hotline_train(tmp_path, name, *args, spec=SPEC, check=True, launcher=HOTLINE):
    """Run ``hotline train`` (``launcher`` + train); (JSON report, final tables) from its
    report and checkpoint."""
    out, ckpt = tmp_path / f"{name}.json", tmp_path / f"{name}.pt"
    cmd = [*launcher, "train", spec, "--max-ind-range", str(FOLD), *SMALL, *args,
           "--json", str(out)]
    if "--checkpoint" in args:
        ckpt = Path(args[args.index("--checkpoint") + 1])
    else:
        cmd += ["--checkpoint", str(ckpt)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    else:
        return p
    rep = json.loads(out.read_text())
    tables = [t.numpy() for t in torch.load(ckpt, weights_only=False)["tables"]]
    return rep, tables


def reference(optimizer, batch, epochs, test_fraction=0.1, samples=None):
    data = prepare_data(open_data(SPEC, max_ind_range=FOLD, limit=samples), test_fraction, FOLD)
    cfg = TrainConfig(mode="baseline", dim=8, bottom=(16,), top=(16,), batch_size=batch,
                      optimizer=optimizer, epochs=epochs).check()
    losses, tables = reference_train(data, cfg)
    return cfg, losses, tables


@pytest.mark.parametrize("mode,optimizer,nproc,extra", [
    ("baseline", "sgd", 2, []),
    pytest.param("baseline", "adagrad", 4, [], marks=pytest.mark.slow),
    pytest.param("device-only", "sgd", 2, [], marks=pytest.mark.slow),
    ("hotline", "sgd", 2, ["--hot-rows", "300"]),
    ("hotline", "adagrad", 3, ["--hot-rows", "300", "--hot-set", "learn", "--refresh", "every:3",
                               "--learn-window", "128"]),
])
def test_ranks_train_like_one_process_and_the_reference(tmp_path, mode, optimizer, nproc, extra):
    args = ["--mode", mode, "--optimizer", optimizer, "--batch-size", "64", "--epochs", "2",
            *extra]
    one = hotline_train(tmp_path, "one", *args)
    many = hotline_train(tmp_path, "many", *args, "--nproc", str(nproc))
    assert many[0]["world_size"] == nproc and one[0]["world_size"] == 1
    assert_same_run(one, many)
    cfg, losses, tables = reference(optimizer, 64, 2)
    assert_same_run(({"losses": losses}, tables), (many[0], tables_of(many[1], cfg)))
    assert many[0]["test_auc"] == pytest.approx(one[0]["test_auc"], abs=1e-4)
    # what moved: every rank sent its dense gradients each step, and rows to their owners
    # (baseline) or to every rank (device-only's replicated tables)
    b = many[0]["collective_bytes_per_step"]
    n_params = sum(p.numel() for p in torch.nn.Sequential(
        torch.nn.Linear(13, 16), torch.nn.Linear(16, 8),
        torch.nn.Linear(8 + 27 * 26 // 2, 16), torch.nn.Linear(16, 1)).parameters())
    assert b["dense"] == 4 * n_params
    assert b["cold" if mode == "baseline" else "hot"] > 0
    assert 0 < many[0]["collective_share"] < 1
    if mode == "hotline":
        # every rank's device did its part of the cold traffic, inside the windows; the hot
        # share is the whole batch's
        c, c1 = many[0]["counters"], one[0]["counters"]
        assert c["lookups"] == c1["lookups"] and c1["hits"] > 0
        if "learn" in extra:  # the ranks' merged learners: the same set up to their hash luck
            assert c["hits"] == pytest.approx(c1["hits"], rel=0.01)
        else:
            assert c["hits"] == c1["hits"]
        assert c["gather_rows"] >= c1["gather_rows"] > 0 and c["scatter_rows"] > 0
        assert c["window_errors"] == c["axi_errors"] == 0
        assert many[0]["refreshes"] == one[0]["refreshes"]
        assert b["cold"] > 0


@pytest.mark.parametrize("mode,extra", [
    pytest.param("baseline", [], marks=pytest.mark.slow),   # (hotline's covers its path too)
    ("hotline", ["--hot-rows", "2600"])])
def test_ranks_on_a_real_criteo_file(tmp_path, mode, extra):
    """`train_random4584.csv.gz` (4,584 real samples), 2 ranks = one process; the sharded
    copy of the file, streamed (each rank reads the shards of its samples), too."""
    path = real_file("criteo_kaggle/train_random4584.csv.gz")
    args = ["--mode", mode, "--optimizer", "adagrad", "--batch-size", "128", *extra]
    one = hotline_train(tmp_path, "one", *args, spec=str(path))
    many = hotline_train(tmp_path, "many", *args, "--nproc", "2", spec=str(path))
    assert_same_run(one, many)
    shards = tmp_path / "shards"
    subprocess.run([*HOTLINE, "data", "convert", str(path), "--max-ind-range", str(FOLD),
                    "--shards", str(shards), "--shard-samples", "4096"], check=True,
                   capture_output=True)
    streamed = hotline_train(tmp_path, "streamed", *args, "--nproc", "2", spec=str(shards))
    assert_same_run(many, streamed, rtol=0)


def test_uneven_and_empty_shards(tmp_path):
    """B = 50 over 4 ranks (13, 13, 12, 12), and a last batch of one sample: three ranks train
    nothing in it and still take part in every collective."""
    args = ["--mode", "baseline", "--batch-size", "50", "--test-fraction", "0",
            "--max-samples", "551"]
    one = hotline_train(tmp_path, "one", *args)
    many = hotline_train(tmp_path, "many", *args, "--nproc", "4")
    assert many[0]["steps"] == 12
    assert_same_run(one, many)


@pytest.mark.parametrize("mode,extra", [
    pytest.param("baseline", [], marks=pytest.mark.slow),
    ("hotline", ["--hot-rows", "300", "--hot-set", "learn", "--refresh", "every:3",
                 "--learn-window", "128"]),
])
def test_resume_with_another_rank_count(tmp_path, mode, extra):
    """A checkpoint holds no rank state: saved by 2 ranks, resumed by 1 and by 3 (hotline:
    across the hot-set loads)."""
    args = ["--mode", mode, "--optimizer", "adagrad", "--batch-size", "64", "--epochs", "2",
            *extra]
    whole = hotline_train(tmp_path, "whole", *args)
    ckpt = tmp_path / "half.pt"
    hotline_train(tmp_path, "half", *args, "--nproc", "2", "--max-steps", "7",
                  "--checkpoint", str(ckpt))
    for nproc in (1, 3):
        shutil.copy(ckpt, tmp_path / f"r{nproc}.pt")
        rest = hotline_train(tmp_path, f"rest{nproc}", *args, "--nproc", str(nproc),
                             "--resume", str(tmp_path / f"r{nproc}.pt"),
                             "--checkpoint", str(tmp_path / f"r{nproc}.pt"))
        assert len(rest[0]["losses"]) == len(whole[0]["losses"])
        assert_same_run(whole, rest)
        # the run totals are the run's, whatever the rank counts of its parts
        assert rest[0]["bytes_device_to_host"] > 0


@pytest.mark.slow   # (the two-node test runs torchrun -m hotline in the default tier)
def test_torchrun_module_form(tmp_path):
    """`torchrun ... -m hotline train ...` (how several nodes run it) = one process."""
    torchrun = Path(sys.executable).with_name("torchrun")
    args = ["--mode", "baseline", "--batch-size", "64"]
    one = hotline_train(tmp_path, "one", *args)
    many = hotline_train(tmp_path, "many", *args, launcher=[
        str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "hotline"])
    assert many[0]["world_size"] == 2
    assert_same_run(one, many)


def emulated_ranks(data, cfg, world):
    """Data-parallel training emulated in one process, written out independently: each
    global batch in ``world`` contiguous shards, each shard's forward and backward alone
    (dense gradients accumulate in rank order, as the all-reduce sums them), each touched
    row's gradients summed in rank order and applied once. Same summation order as the
    ranks, so the same bits (one process sums in another order, and drifts from it)."""
    class Emulated(trainer_module.Trainer):
        def train_batch(self, j, prefetch):
            store = self.embedding.store   # the host tables (a HostStore)
            dim, F = self.cfg.dim, self.F
            s0, s1 = self.batch_range(j)
            n, total, ids, grads = s1 - s0, 0.0, [], []
            self.opt.zero_grad(set_to_none=True)
            for r in range(world):
                a = s0 + r * (n // world) + min(r, n % world)
                b = a + n // world + (r < n % world)
                keys, lengths = self.batch_arrays(a, b)
                keys, offsets = fbgemm_layout(lengths, keys)     # bags feature-major
                uniq, inv = torch.unique(keys, return_inverse=True)
                rows = store.read(uniq)
                bags = torch.nn.functional.embedding_bag(
                    inv, rows[:, :dim], offsets, mode="sum",
                    include_last_offset=True).requires_grad_(True)
                dense, label = self.tensors(a, b)
                loss = self.loss_sum(bags.view(F, b - a, dim).transpose(0, 1), dense, label)
                (loss / n).backward()
                total += float(loss.detach())
                # each lookup's bag gradient summed into its row, in lookup order
                bag = torch.arange(F * (b - a)).repeat_interleave(offsets.diff())
                ids.append(uniq.numpy())
                grads.append(torch.zeros(len(uniq), dim).index_add_(
                    0, inv, bags.grad.index_select(0, bag)))
            self.opt.step()
            u, inv = np.unique(np.concatenate(ids), return_inverse=True)
            g = torch.zeros(len(u), dim).index_add_(0, torch.from_numpy(inv), torch.cat(grads))
            rows = store.read(torch.from_numpy(u))
            self.embedding.ebc.optimizer.apply(rows, g)
            store.scatter(torch.from_numpy(u), rows)
            return total / n

    from hotline.train import run as run_module
    real = trainer_module.Trainer
    trainer_module.Trainer = Emulated
    try:
        rep, trainer = run_module.train(data, cfg, keep=True)
    finally:
        trainer_module.Trainer = real
    try:
        return rep, trainer.tables()
    finally:
        trainer.close()


@pytest.mark.parametrize("mode,extra", [
    pytest.param("baseline", [], marks=pytest.mark.slow),   # (hotline's sums the same way)
    ("hotline", ["--hot-rows", "300", "--hot-set", "learn", "--refresh", "every:12",
                 "--learn-window", "3000"]),
])
def test_ranks_sum_in_rank_order_bit_for_bit(tmp_path, mode, extra):
    """A longer run on the drifting generator with Adagrad, where one process and two ranks
    drift apart (float sums in another order): the ranks equal their emulation exactly."""
    spec = "synth:criteo-kaggle:30000:0:drift=0.5"
    args = ["--mode", mode, "--optimizer", "adagrad", "--batch-size", "500", "--bottom",
            "64-32", "--top", "64", *extra]
    ranks = hotline_train(tmp_path, "ranks", *args, "--nproc", "2", spec=spec)
    data = prepare_data(open_data(spec, max_ind_range=FOLD), 0.1, FOLD)
    cfg = TrainConfig(mode="baseline", optimizer="adagrad", batch_size=500, dim=8,
                      bottom=(64, 32), top=(64,), threads=1)
    emulated = emulated_ranks(data, cfg, 2)
    np.testing.assert_array_equal(ranks[0]["losses"], emulated[0]["losses"])
    for x, y in zip(ranks[1], emulated[1]):
        np.testing.assert_array_equal(x, y)
    if mode == "hotline":
        assert ranks[0]["refreshes"] >= 3


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(tmp_path, name, *args):
    """Two `torchrun --nnodes 2 --node-rank K` invocations on this machine (one rank each), a
    c10d rendezvous on a local port (which assigns the ranks): ([(exit code, stderr)] of
    both, the JSON path)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    port = _free_port()
    out = tmp_path / f"{name}.json"
    procs = [subprocess.Popen(
        [str(torchrun), "--nnodes", "2", "--node-rank", str(k), "--nproc-per-node", "1",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", name,
         "-m", "hotline", "train", SPEC, "--max-ind-range", str(FOLD), *SMALL, *args,
         "--json", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k in (0, 1)]
    results = []
    for p in procs:
        _, err = p.communicate(timeout=600)
        results.append((p.returncode, err))
    return results, out


@pytest.mark.parametrize("mode,optimizer,extra", [
    pytest.param("device-only", "sgd", [], marks=pytest.mark.slow),
    pytest.param("baseline", "adagrad", [], marks=pytest.mark.slow),  # (hotline's splits too)
    ("hotline", "adagrad", ["--hot-rows", "300", "--hot-set", "learn", "--refresh", "every:3",
                            "--learn-window", "128"]),
])
def test_two_nodes_through_torchrun(tmp_path, mode, optimizer, extra):
    """The multi-node path (two torchrun invocations, a rendezvous endpoint) = one process:
    device-only (tables replicated); baseline and hotline with the host tables split over the
    two nodes' memory files (each node's first rank writes its half; rows travel to the
    ranks that read them and to their owners by all_to_all_single; hotline: each rank's
    device gathers from its node, the other node's cold rows come from their owners, and
    the hot set migrates), checkpoint tables included."""
    args = ["--mode", mode, "--optimizer", optimizer, "--batch-size", "64", "--epochs", "2",
            *extra]
    one = hotline_train(tmp_path, "one", *args)
    ckpt = tmp_path / "nodes.pt"
    nodes, out = two_nodes(tmp_path, "nodes", *args, "--checkpoint", str(ckpt))
    assert [rc for rc, _ in nodes] == [0, 0], nodes
    rep = json.loads(out.read_text())
    assert rep["world_size"] == 2
    tables = [t.numpy() for t in torch.load(ckpt, weights_only=False)["tables"]]
    assert_same_run(one, (rep, tables))
    # a checkpoint of the split tables resumes in one process
    rest = hotline_train(tmp_path, "rest", *args, "--epochs", "3", "--resume", str(ckpt),
                         "--checkpoint", str(ckpt))
    whole = hotline_train(tmp_path, "whole", *args, "--epochs", "3")
    assert_same_run(whole, rest)


def _children(pid) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_rank_ends_every_rank_with_one_line(tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.Popen([*HOTLINE, "train", "synth:criteo-kaggle:400000", "--max-ind-range",
                          "100000", "--mode", "baseline", "--batch-size", "256", "--threads", "1",
                          "--nproc", "2", "--dist-timeout", "30", "--json", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        ranks = []
        while time.time() < deadline and len(ranks) < 2:
            time.sleep(0.5)
            ranks = [c for c in _children(p.pid) if _alive(c)
                     and b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(ranks) >= 2, "the ranks did not start"
        time.sleep(8)  # into training
        os.kill(ranks[-1], signal.SIGKILL)
        t0 = time.time()
        _, err = p.communicate(timeout=60)
        assert time.time() - t0 < 45
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(r"hotline: error: rank \d+.*", lines[0]), err
    assert not out.exists()
    deadline = time.time() + 10  # the launcher's SIGTERM takes effect
    while [c for c in ranks if _alive(c)] and time.time() < deadline:
        time.sleep(0.2)
    assert not [c for c in ranks if _alive(c)], "a rank outlived the run"


def test_one_accelerator_per_rank_and_a_device_error_on_one_rank(tmp_path):
    """--device-url as a list, one per rank; a rank whose device cannot open ends every rank
    with one line naming it (exit 2, no JSON)."""
    args = ["--mode", "hotline", "--hot-rows", "300", "--batch-size", "64"]
    one = hotline_train(tmp_path, "one", *args)
    many = hotline_train(tmp_path, "many", *args, "--nproc", "2", "--device-url",
                         "model://,model://{rank}")
    assert_same_run(one, many)
    p = hotline_train(tmp_path, "bad", *args, "--nproc", "2", "--device-url", "model://,nope://",
                      check=False)
    assert p.returncode == 2 and not (tmp_path / "bad.json").exists()
    assert p.stderr.strip().splitlines() == [
        "hotline: error: rank 1: nope://: unknown device scheme 'nope' (known: model, serial, "
        "sim)"], p.stderr


@pytest.mark.parametrize("args,env,message", [
    (["--nproc", "2", "--dist-timeout", "0"], {}, "--dist-timeout must be positive"),
    (["--nproc", "0"], {}, "--nproc"),
    (["--nproc", "2"], {"WORLD_SIZE": "2"}, "leave --nproc out"),
    (["--nproc", "2", "--mode", "hotline", "--device-url", "model://,model://,model://"], {},
     "lists 3 URLs for 2 ranks"),
])
def test_bad_distributed_options_one_line_exit_2(tmp_path, args, env, message, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    p = hotline_train(tmp_path, "bad", "--mode", "baseline", "--batch-size", "64", *args,
                      check=False)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [f"hotline: error: {p.stderr.split('error: ')[1].strip()}"]
    assert message in p.stderr
    assert not (tmp_path / "bad.json").exists()
