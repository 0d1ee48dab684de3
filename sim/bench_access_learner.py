"""AccessLearner benchmark: learned-vs-exact hot-set coverage on the real Criteo samples and
simulator speed (Amaranth simulator, cocotb + Verilator).

``python -m hotline.sim.bench_access_learner [--out results.json]`` prints ``measure()``.
Coverage ratio = (lookups hitting the learned top-K) / (lookups hitting the exact top-K),
K = ceil(fraction * distinct keys), exact ties broken by key ascending. ``dropped`` is the
fraction of lookups the learner's hazard rule left uncounted; ``no_hazard_rule`` gives the
ratios of plain Space-Saving (model ``window=0``) for comparison.
"""
import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from hotline.access_learner import AccessLearnerModel
from hotline.data import shared_data_dir

__all__ = ["DATA_DIR", "criteo_files", "load_keys", "coverage_ratio", "amaranth_speed",
           "cocotb_stream", "measure"]

DATA_DIR = shared_data_dir() / "criteo_kaggle"
FRACTIONS = (0.05, 0.10)


def criteo_files(data_dir=DATA_DIR):
    """The real Criteo sample files (empty when the data directory is absent)."""
    data_dir = Path(data_dir)
    return sorted(data_dir.glob("*.gz")) if data_dir.is_dir() else []


def load_keys(path):
    """Flat uint32 lookup keys of a data file, sample-major."""
    from hotline.data import load_dataset

    return np.asarray(load_dataset(path).keys, dtype=np.uint32)


def coverage_ratio(keys, model, fraction):
    """Learned top-K coverage over exact top-K coverage for K = ceil(fraction * distinct)."""
    uniq, counts = np.unique(keys, return_counts=True)
    k = math.ceil(fraction * len(uniq))
    exact = counts[np.lexsort((uniq, -counts))[:k]].sum()
    learned = counts[np.isin(uniq, model.top(k))].sum()
    return float(learned / exact)


def _stream(n, seed=0):
    """A Zipf-like key stream over 26 tables, like a Criteo lookup stream."""
    rng = np.random.default_rng(seed)
    rows = (rng.zipf(1.1, n) - 1) % (1 << 20)
    return ((np.arange(n) % 26).astype(np.uint32) << 27) | rows.astype(np.uint32)


def amaranth_speed(n=5000, **params):
    """Lookups per second of the default learner in the Amaranth simulator."""
    from amaranth.sim import Simulator
    from hotline.hw.access_learner import AccessLearner

    dut = AccessLearner(**params)
    keys = _stream(n).tolist()

    async def bench(ctx):
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.lookups.valid, 1)
        for key in keys:
            ctx.set(dut.lookups.payload, key)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    t0 = time.perf_counter()
    sim.run()
    return n / (time.perf_counter() - t0)


def cocotb_stream(keys, build_dir, simulator="verilator", params=None, gap=0.0, ops=None,
                  seed=1, testcase=None):
    """Run sim/tb_access_learner.py on ``keys`` (RTL checked against the model entry by entry).

    ``ops`` maps a key index to pulses ("start", "stop", "clear") on that key's cycle.
    Returns the testbench's report: lookups driven, lookups per second while streaming,
    dropped keys, and ``entries`` = the final readout (keys, counts) of the RTL.
    """
    from hotline.hw.access_learner import AccessLearner
    from hotline.sim.runner import run_cocotb

    params = params or {}
    build_dir = Path(build_dir).resolve()  # the testbench opens AL_* from the simulator's cwd
    build_dir.mkdir(parents=True, exist_ok=True)
    np.save(build_dir / "keys.npy", np.asarray(keys, dtype=np.uint32))
    report = build_dir / "report.json"
    report.unlink(missing_ok=True)
    env = {"AL_PARAMS": json.dumps(params), "AL_KEYS": str(build_dir / "keys.npy"),
           "AL_GAP": str(gap), "AL_OPS": json.dumps({str(k): v for k, v in (ops or {}).items()}),
           "AL_SEED": str(seed), "AL_REPORT": str(report),
           "AL_ENTRIES": str(build_dir / "entries.npz")}
    run_cocotb(AccessLearner(**params), "access_learner", "hotline.sim.tb_access_learner",
               build_dir, simulator=simulator, testcase=testcase, extra_env=env)
    out = json.loads(report.read_text())
    with np.load(build_dir / "entries.npz") as z:
        out["entries"] = (z["keys"], z["counts"])
    return out


def _ratios(keys, model):
    return {f"K={int(f * 100)}%": coverage_ratio(keys, model, f) for f in FRACTIONS}


def measure(files=None, speed_lookups=20000, simulators=("verilator",), build_dir=None,
            sweep_buckets=(256, 512, 1024)):
    """Coverage ratios per real file and K fraction for the default learner and for smaller
    tables (``capacity_sweep``, 8 ways), and simulator speeds (lookups/s)."""
    from hotline.sim.runner import simulator_available

    result = {"coverage": {}, "capacity_sweep": {}, "speed": {}}
    for path in (criteo_files() if files is None else [Path(f) for f in files]):
        keys = load_keys(path)
        model = AccessLearnerModel()
        t0 = time.perf_counter()
        model.update(keys)
        rate = len(keys) / (time.perf_counter() - t0)
        plain = AccessLearnerModel(window=0)
        plain.update(keys)
        result["coverage"][path.name] = {
            "lookups": int(len(keys)), "distinct": int(len(np.unique(keys))),
            "model_lookups_per_s": rate, **_ratios(keys, model),
            "dropped": model.dropped / len(keys), "no_hazard_rule": _ratios(keys, plain)}
        sweep = result["capacity_sweep"][path.name] = {}
        for buckets in sweep_buckets:
            small = AccessLearnerModel(buckets=buckets)
            small.update(keys)
            sweep[f"{buckets * small.ways} entries"] = _ratios(keys, small)
    result["speed"]["amaranth"] = amaranth_speed(min(speed_lookups, 5000))
    build_root = Path(build_dir or tempfile.mkdtemp(prefix="bench_al_"))
    for sim in simulators:
        if simulator_available(sim):
            report = cocotb_stream(_stream(speed_lookups), build_root / sim, simulator=sim,
                                   testcase="run_stream")
            result["speed"][sim] = report["lookups_per_s"]
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--lookups", type=int, default=20000, help="lookups for the speed runs")
    args = ap.parse_args()
    result = measure(speed_lookups=args.lookups)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
