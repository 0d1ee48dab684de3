"""`make gpu-check`: issue 45's checks on a CUDA GPU, in one run of a few minutes.

Usage: python -m hotline.bench.gpu_check [--cpu] [--out build/gpu-check.json]

On CUDA it runs, in order, each part recorded even when another fails:
- equivalence: `hotline.nn.EmbeddingBagCollection` in each placement this checkout has, against
  per-table `torch.nn.EmbeddingBag` + `torch.optim.SGD` on the same device, from the same
  weights over the same batches (the hotline placement with prefetch): pooled outputs of every
  step and the final tables, relative to 1e-5;
- embedding: the ``embedding`` bench section's paths on the GPU (`hotline.bench.embedding`:
  TBE is left out, the installed fbgemm_gpu being its CPU build) on Criteo's 26 tables, dim 16
  and 128, and the multi-hot configuration;
- peer: TorchRec's DLRM under DMP and `hotline train` in each mode, samples/s
  (`hotline.bench.peer`; TorchRec on CUDA needs the CUDA build of fbgemm_gpu, else the part
  records the error).
It writes JSON (``--out``) and prints a table. Without CUDA it prints one line and exits 0;
``--cpu`` runs the same parts on the CPU in reduced sizes (what the tests run). Exit status 1
when the equivalence fails or a part raised.
"""
import argparse
import json
import platform
import sys
import time
import traceback

import numpy as np

from hotline.data.report import table, write_json
from hotline.data.spec import open_data
from hotline.train import TrainConfig, prepare_data, train

from .embedding import MULTI_HOT_SIZES, NNPath, Config, bench_embedding, criteo_stream, \
    make_batches, nn_placements
from .peer import MODES, train_torchrec

GPU_CONFIGS = [
    Config("criteo-d16-b8192", 16, 8192, 500_000, 1_000_000, warmup=2, timed=10),
    Config("criteo-d128-b8192", 128, 8192, 500_000, 1_000_000, warmup=2, timed=10),
    Config("multihot-d128-b8192", 128, 8192, 500_000, 1_000_000, MULTI_HOT_SIZES, 1, 3),
]
CPU_CONFIGS = [Config("criteo-d16-b128", 16, 128, 3_000, 5_000, warmup=1, timed=2)]
EQUIV_STEPS = {"cuda": 50, "cpu": 6}
RTOL = 1e-5


def reference_weights(sizes, dim, seed=0):
    """Initial weights of every table, the same for the module and the reference."""
    import torch  # lazy: torch takes seconds to import
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(int(n), dim, generator=g) - 0.5) / np.sqrt(n) for n in sizes]


def check_equivalence(device, cfg, steps, lr=0.05) -> dict:
    """Each available placement against nn.EmbeddingBag + SGD: the largest relative difference
    of the pooled outputs over ``steps`` batches and of the final tables."""
    import torch  # lazy: (see reference_weights)
    placements, left_out = nn_placements()
    spec, data = criteo_stream(cfg)
    sizes = [int(n) for n in data.table_sizes]
    batches = make_batches(data, cfg, steps + 1)
    for b in batches:
        b.indices, b.offsets = b.indices.to(device), b.offsets.to(device)
    weights = reference_weights(sizes, cfg.dim)
    grads = [torch.randn(cfg.batch_size, len(sizes) * cfg.dim,
                         generator=torch.Generator().manual_seed(i)).to(device)
             for i in range(steps)]
    # the reference: one EmbeddingBag per table, sparse gradients, plain SGD
    bags = torch.nn.ModuleList(torch.nn.EmbeddingBag.from_pretrained(
        w.clone(), freeze=False, mode="sum", sparse=True) for w in weights).to(device)
    opt = torch.optim.SGD(bags.parameters(), lr=lr)
    want = []
    for b, g in zip(batches, grads):
        outs = []
        for t, bag in enumerate(bags):
            lo, hi = int(b.offsets[t * b.batch_size]), int(b.offsets[(t + 1) * b.batch_size])
            outs.append(bag(b.indices[lo:hi], b.offsets[t * b.batch_size:(t + 1) * b.batch_size] - lo))
        out = torch.cat(outs, dim=1)
        want.append(out.detach().cpu())
        opt.zero_grad(set_to_none=True)
        out.backward(g)
        opt.step()
    final = [bag.weight.detach().cpu() for bag in bags]
    hot = np.unique(np.concatenate([b.keys for b in batches]))[::4].astype(np.uint32)
    res = {"data": spec, "dim": cfg.dim, "batch_size": cfg.batch_size, "steps": steps,
           "rtol": RTOL, "left_out": left_out, "placements": {}}
    for p in placements:
        path = NNPath(p, sizes, cfg.dim, lr=lr, hot_keys=hot, torch_device=device,
                      batch_size=cfg.batch_size, batch_lookups=max(b.lookups for b in batches))
        try:
            state = path.ebc.state_dict()
            for t, w in enumerate(weights):
                state[f"embedding_bags.t{t}.weight"] = w
            path.ebc.load_state_dict(state)
            out_diff = 0.0
            for i, (b, g) in enumerate(zip(batches, grads)):
                out = path.ebc(b.indices, b.offsets)
                if p == "hotline" and i + 1 < steps:
                    path.ebc.prefetch(batches[i + 1].indices, batches[i + 1].offsets)
                out_diff = max(out_diff, rel_diff(out.detach().cpu(), want[i]))
                out.backward(g)
            state = path.ebc.state_dict()
            table_diff = max(rel_diff(state[f"embedding_bags.t{t}.weight"], w)
                             for t, w in enumerate(final))
        finally:
            path.close()
        res["placements"][p] = {"output_max_rel_diff": out_diff, "table_max_rel_diff": table_diff,
                                "equal": out_diff <= RTOL and table_diff <= RTOL}
    res["equal"] = bool(placements) and all(r["equal"] for r in res["placements"].values())
    return res


def rel_diff(a, b) -> float:
    """max |a - b| / max(|b|, 1e-12) over the whole tensor's scale."""
    scale = float(b.abs().max()) or 1e-12
    return float((a - b).abs().max()) / scale


def peer_check(device, samples, max_steps) -> dict:
    """TorchRec's DLRM under DMP and `hotline train` in each mode on ``device``: samples/s."""
    spec = f"synth:criteo-kaggle:{samples}"
    data = prepare_data(open_data(spec, max_ind_range=1_000_000), 0.1, 1_000_000)
    out = {"data": f"{spec} (--max-ind-range 1000000)", "batch_size": 1024, "runs": {}}
    try:
        out["runs"]["torchrec"] = train_torchrec(data, device=device, max_steps=max_steps)
    except Exception as e:  # noqa: BLE001 (recorded: e.g. fbgemm_gpu's CPU build on CUDA)
        out["runs"]["torchrec"] = {"error": f"{type(e).__name__}: {e}"}
    for mode in MODES:
        cfg = TrainConfig(mode=mode, batch_size=1024, hot_fraction=0.1, epochs=1,
                          max_ind_range=1_000_000, torch_device=device, max_steps=max_steps,
                          threads=1)
        rep = train(data, cfg)
        out["runs"][mode] = {k: rep.get(k) for k in ("samples_per_s", "train_logloss")}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m hotline.bench.gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true",
                   help="run on the CPU in reduced sizes (no GPU needed)")
    p.add_argument("--out", default="build/gpu-check.json")
    args = p.parse_args(argv)
    import torch  # lazy: `--help` needs no torch
    if not args.cpu and not torch.cuda.is_available():
        why = ("this torch was built without CUDA" if torch.version.cuda is None
               else "no CUDA GPU is visible")
        print(f"gpu-check: nothing to run: {why} (torch {torch.__version__}); "
              f"--cpu runs the reduced check on the CPU")
        return 0
    device = "cpu" if args.cpu else "cuda"
    res = {"device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor()
           or platform.machine(), "torch": torch.__version__,
           "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    rows, failed = [], False
    equiv_cfg = Config("equivalence", 16, 512 if device == "cuda" else 64, 20_000 if device ==
                       "cuda" else 2_000, 100_000 if device == "cuda" else 2_000)
    parts = (
        ("equivalence", lambda: check_equivalence(device, equiv_cfg, EQUIV_STEPS[device])),
        ("embedding", lambda: bench_embedding(False, GPU_CONFIGS if device == "cuda"
                                              else CPU_CONFIGS, torch_device=device)[0]),
        ("peer", lambda: peer_check(device, 200_000 if device == "cuda" else 3_000,
                                    None if device == "cuda" else 2)),
    )
    for name, run in parts:
        t0 = time.perf_counter()
        try:
            res[name] = run()
        except Exception as e:  # noqa: BLE001 (each part is recorded; the exit status says)
            res[name] = {"error": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc(limit=4)}
            failed = True
        res[name + "_seconds"] = time.perf_counter() - t0
        rows += summary_rows(name, res[name])
    failed = failed or not res["equivalence"].get("equal", False)
    write_json(args.out, res)
    print(table(rows, ["check", "case", "result"]))
    print(f"\nwrote {args.out}" + ("; FAILED" if failed else ""))
    return 1 if failed else 0


def summary_rows(name, r) -> list[list]:
    """The printed table's rows of one part."""
    if "error" in r:
        return [[name, "error", r["error"][:100]]]
    if name == "equivalence":
        rows = [[name, p, f"outputs {e['output_max_rel_diff']:.1e}, tables "
                          f"{e['table_max_rel_diff']:.1e} ({'equal' if e['equal'] else 'DIFFER'})"]
                for p, e in r["placements"].items()]
        return rows or [[name, "-", f"no placement available: {r['left_out']}"]]
    if name == "embedding":
        return [[name, f"{c} {p}", f"{e['total_ms']:.3f} ms/batch, "
                                   f"{e['samples_per_s']:,.0f} samples/s"]
                for c, res in r["configs"].items() for p, e in res["paths"].items()]
    return [[name, mode, f"{e['samples_per_s']:,.0f} samples/s" if "samples_per_s" in e
             else e.get("error", "")[:100]] for mode, e in r["runs"].items()]


if __name__ == "__main__":
    sys.exit(main())
