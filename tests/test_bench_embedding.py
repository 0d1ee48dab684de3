"""`make bench`'s embedding and peer sections and `make gpu-check` (hotline.bench.embedding,
.peer, .gpu_check) on tiny configurations: the batches' layout against a loop over the samples,
the time split's check, sane JSON fields, and the GPU check's CPU form."""
import json
import time

import numpy as np
import pytest
import torch

from hotline.bench import embedding, gpu_check, peer
from hotline.bench.embedding import MULTI_HOT_SIZES, Config, TimeSplit
from hotline.contract.keys import MAX_ROWS, ROW_BITS
from hotline.data.spec import open_data
from hotline.train import prepare_data

TINY = Config("tiny", 8, 32, 400, 300, warmup=1, timed=2)
TINY_MULTI = Config("tiny-multi", 8, 16, 400, 300, MULTI_HOT_SIZES, 1, 2)


@pytest.fixture(scope="module")
def tiny_data():
    return prepare_data(open_data("synth:criteo-kaggle:400", max_ind_range=300), 0.0, 300)


def test_batches_are_fbgemm_layout(tiny_data):
    """Bag t * B + s holds sample s's lookups of table t (a loop over the samples), and the
    multi-hot bags start with that row and hold MULTI_HOT_SIZES[t] rows of table t."""
    d = tiny_data
    single, multi = (embedding.make_batches(d, c, 2) for c in (TINY, TINY_MULTI))
    for j, b in enumerate(single):
        bs = TINY.batch_size
        for s in range(bs):
            n = j * bs + s
            keys = d.keys[d.offsets[n]:d.offsets[n + 1]]
            for t in range(d.num_tables):
                mine = keys[(keys >> ROW_BITS) == t] & (MAX_ROWS - 1)
                lo, hi = int(b.offsets[t * bs + s]), int(b.offsets[t * bs + s + 1])
                assert b.indices[lo:hi].tolist() == mine.tolist()
    b, bs = multi[0], TINY_MULTI.batch_size
    assert b.lookups == bs * sum(MULTI_HOT_SIZES)
    for t, m in enumerate(MULTI_HOT_SIZES):
        for s in range(bs):
            lo, hi = int(b.offsets[t * bs + s]), int(b.offsets[t * bs + s + 1])
            assert hi - lo == m
            assert int(b.indices[lo]) == int(single[0].indices[single[0].offsets[t * 32 + s]])
            assert (b.indices[lo:hi] < int(d.table_sizes[t])).all()
            assert ((b.keys[lo:hi] >> ROW_BITS) == t).all()


def test_time_split_check_catches_a_broken_split():
    TimeSplit(10.0, 3.0, 7.0, 0.0).check()
    TimeSplit(10.0, 3.0, 6.8, 0.0).check()        # within the 5% tolerance
    for bad in (TimeSplit(10.0, 3.0, 9.0, 0.0),   # parts sum to 12
                TimeSplit(10.0, 3.0, 4.0, 0.0),   # to 7
                TimeSplit(10.0, 12.0, -2.0, 0.0),  # a part beyond the whole, one negative
                TimeSplit(10.0, 3.0, 11.0, -4.0)):      # sums right, a negative part
        with pytest.raises(ValueError, match="time split"):
            bad.check()


class _FakePath(embedding.Path):
    """Sleeps per step; its host clock counts ``host_share`` of each step's time."""

    def __init__(self, host_share):
        self.host_share, self.host = host_share, 0.0

    def step(self, batch, grad, next_batch):
        t0 = time.perf_counter()
        time.sleep(0.004)
        self.host += self.host_share * (time.perf_counter() - t0)

    def clocks(self):
        return self.host, 0.0, 0.0


def test_time_path_catches_a_double_counting_clock():
    grad = torch.zeros(1)
    split = embedding.time_path(_FakePath(0.5), [None] * 4, grad, 1, 2)
    assert 0.4 < split.host / split.total <= 0.5 + 1e-9
    with pytest.raises(ValueError, match="time split"):
        embedding.time_path(_FakePath(2.0), [None] * 4, grad, 1, 2)   # counted twice


def test_time_paired_runs_the_paths_in_turn():
    """Batch by batch, each path in turn, the order reversed every other batch; each path's
    median of its timed batches."""
    calls = []

    class Sleeper(embedding.Path):
        def __init__(self, name, seconds):
            self.name, self.seconds = name, seconds

        def step(self, batch, grad, next_batch):
            calls.append((self.name, batch))
            time.sleep(self.seconds)

    fast, slow = Sleeper("fast", 0.002), Sleeper("slow", 0.006)
    tf, ts = embedding.time_paired([fast, slow], list(range(6)), torch.zeros(1), 1, 4)
    assert calls == [("fast", 0), ("slow", 0), ("slow", 1), ("fast", 1), ("fast", 2),
                     ("slow", 2), ("slow", 3), ("fast", 3), ("fast", 4), ("slow", 4)]
    assert 0.002 <= tf < 0.006 <= ts


def test_embedding_section_on_tiny_tables():
    out, rows = embedding.bench_embedding(False, [TINY, TINY_MULTI])
    json.dumps(out)
    placements, left_out = embedding.nn_placements()
    assert out["placements"] == list(placements) and out["left_out"] == left_out
    assert torch.get_num_threads() >= 1
    for cfg in (TINY, TINY_MULTI):
        res = out["configs"][cfg.name]
        per_sample = sum(MULTI_HOT_SIZES) if cfg.multi_hot else 26
        assert res["lookups_per_batch"] == cfg.batch_size * per_sample
        names = ["fbgemm-tbe", "torch-embeddingbag"] + [f"hotline.nn {p}" for p in placements]
        names += ["hotline.nn hotline (torch)", "hotline.nn hotline (process agent)"] \
            if "hotline" in placements else []
        assert list(res["paths"]) == names
        for name, e in res["paths"].items():
            parts = e["host_ms"] + e["device_ms"] + e["accelerator_ms"]
            assert e["total_ms"] > 0 and abs(parts - e["total_ms"]) <= 0.05 * e["total_ms"]
            assert e["samples_per_s"] == pytest.approx(cfg.batch_size / e["total_ms"] * 1e3)
        assert res["paths"]["fbgemm-tbe"]["host_ms"] == 0.0
        if "host" in placements:
            assert res["paths"]["hotline.nn host"]["host_ms"] > 0
            assert res["paths"]["hotline.nn device"]["host_ms"] == 0.0
        if "hotline" in placements:
            hl = res["paths"]["hotline.nn hotline"]
            assert hl["accelerator_busy_ms"] > 0 and 0 <= hl["hot_share"] <= 1
            # FBGEMM's kernel in place, and the torch path beside it, both on the device
            assert hl["kernel"] == "fbgemm" and hl["host_ms"] > 0
            assert res["paths"]["hotline.nn hotline (torch)"]["kernel"] == "torch"
            # the model in a process of its own: the same kernel, its busy time its own
            pa = res["paths"]["hotline.nn hotline (process agent)"]
            assert pa["kernel"] == "fbgemm" and pa["accelerator_busy_ms"] > 0
            assert pa["hot_share"] == hl["hot_share"]
            assert res["ratios"]["hotline_vs_tbe"] == pytest.approx(
                hl["total_ms"] / res["paths"]["fbgemm-tbe"]["total_ms"])
            # TBE and the hotline path again, batch by batch in turn
            paired = res["paired"]
            assert paired["paths"] == list(embedding.PAIRED) and min(paired["median_ms"]) > 0
            assert res["ratios"]["hotline_vs_tbe_paired"] == pytest.approx(
                paired["median_ms"][1] / paired["median_ms"][0])
            assert res["ratios"]["hotline_host_vs_host_path"] == pytest.approx(
                hl["host_ms"] / res["paths"]["hotline.nn host"]["total_ms"])
            g = hl["gpu_node_projection"]
            assert g["projection"] and g["step_ms"] >= g["host_ms"] + g["pcie_ms"]
        rtl = res["accelerator_rtl"]
        # one lookup per cycle at most at 1 lane; every cold row gathered and scattered
        assert rtl["fragmenter_cycles"] >= res["lookups_per_batch"]
        assert rtl["dma_cycles"] == 2 * rtl["cold_unique_rows"] * (4 * cfg.dim // 8)
        for bits, e in rtl["at_bus_bits"].items():   # a row of 4 * dim bytes, bits / 8 a beat
            assert e["dma_cycles"] == 2 * rtl["cold_unique_rows"] * -(-4 * cfg.dim * 8 // bits)
        assert set(rtl["at_bus_bits"]) == {64, 128, 256, 512}
    assert any(r[0] == "accelerator RTL estimate" for r in rows)
    # without the projection (what the GPU check runs): neither the estimate nor projections
    out, rows = embedding.bench_embedding(False, [TINY], projection=False)
    res = out["configs"]["tiny"]
    assert res["accelerator_rtl"] is None
    assert not any("gpu_node_projection" in e for e in res["paths"].values())
    assert not any(r[0].startswith(("accelerator", "PROJECTION")) for r in rows)


def test_torchrec_peer_runs_fused_and_cleans_up(tiny_data):
    import torch.distributed as dist
    data = prepare_data(open_data("synth:criteo-kaggle:600", max_ind_range=300), 0.1, 300)
    r = peer.train_torchrec(data, batch_size=128, max_steps=3)
    assert r["compute_kernels"] == ["fused"] and r["steps"] == 3
    assert r["samples_per_s"] > 0 and np.isfinite(r["train_logloss"])
    assert not dist.is_initialized()


def test_peer_summary_ratios():
    runs = {"torchrec": [{"samples_per_s": 100.0}, {"samples_per_s": 300.0}],
            "baseline": [{"samples_per_s": 150.0}, {"samples_per_s": 250.0}],
            "hotline": [{"samples_per_s": 100.0}, {"samples_per_s": 100.0}]}
    out, rows = peer.summarize({"data": "x", "runs": runs})
    assert out["samples_per_s"] == {"torchrec": 200.0, "baseline": 200.0, "hotline": 100.0}
    assert out["ratio_vs_torchrec"]["hotline"] == 0.5 and out["baseline_vs_torchrec_met"]
    assert [r[-1] for r in rows] == [1.0, 1.0, 0.5]


def test_gpu_check_without_cuda_says_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path / "g.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: nothing to run")
    assert not (tmp_path / "g.json").exists()


def test_gpu_check_on_the_cpu(tmp_path):
    out = tmp_path / "g.json"
    rc = gpu_check.main(["--cpu", "--out", str(out)])
    r = json.loads(out.read_text())
    assert rc == 0, {k: v.get("error") or v.get("placements") for k, v in r.items()
                     if isinstance(v, dict)}
    placements, _ = embedding.nn_placements()
    assert set(r["equivalence"]["placements"]) == set(placements)
    assert r["equivalence"]["equal"] == bool(placements)
    assert "fbgemm-tbe" in r["embedding"]["configs"]["criteo-d16-b128"]["paths"]
    assert set(r["peer"]["runs"]) == {"torchrec", *peer.MODES}
    assert all(e["samples_per_s"] > 0 for e in r["peer"]["runs"].values())


def test_gpu_check_equivalence_catches_a_wrong_update(monkeypatch):
    """The module updated with twice the reference's learning rate must fail the check."""
    placements, _ = embedding.nn_placements()
    if not placements:
        pytest.skip("no hotline.nn placement in this checkout")
    real = gpu_check.NNPath
    monkeypatch.setattr(gpu_check, "NNPath",
                        lambda *a, lr, **kw: real(*a, lr=2 * lr, **kw))
    cfg = Config("equivalence", 8, 16, 200, 200)
    res = gpu_check.check_equivalence("cpu", cfg, 3)
    assert not res["equal"]
    assert all(e["table_max_rel_diff"] > 1e-3 for e in res["placements"].values())


_FAULTS = """
import resource, sys, torch
from hotline.bench.embedding import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
faults = []
for _ in range(6):     # a step's 109 MB output, allocated, written and freed
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    out = torch.empty(8192 * 26 * 128)
    out.fill_(1.0)
    del out
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(kept is not None, *faults)
"""


def test_keep_freed_memory_stops_the_per_step_page_faults():
    """A freed 109 MB tensor is mapped anew, and faulted in page by page, at every allocation;
    with `keep_freed_memory` the heap is reused once it has settled (its first 2-3
    allocations may still map pages; no glibc: skipped)."""
    import subprocess
    import sys
    runs = {how: subprocess.run([sys.executable, "-c", _FAULTS, how], capture_output=True,
                                text=True, check=True).stdout.split() for how in ("plain", "keep")}
    if runs["keep"][0] != "True":
        pytest.skip("the C library has no glibc mallopt")
    plain, keep = ([int(f) for f in runs[how][1:]] for how in ("plain", "keep"))
    assert min(plain) > 20_000          # 26,624 pages of 4 KiB, every time
    assert sum(keep[3:]) < 1_000
