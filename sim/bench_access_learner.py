"""AccessLearner benchmark: learned-vs-exact hot-set coverage on every shared data file and
simulator speed (Amaranth simulator, cocotb + Verilator).

``python -m hotline.sim.bench_access_learner [--out results.json]`` prints ``measure()``.
Coverage ratio = (lookups hitting the learned top-K) / (lookups hitting the exact top-K),
K = ceil(fraction * distinct keys), exact ties broken by key ascending. ``dropped`` is the
fraction of lookups the learner's hazard rule left uncounted. The learner is sized per K by
``hotline.contract.config.learner_geometry``; ``h3_fixed_16384`` is the learner before that
(H3 hash, 16,384 entries), ``no_hazard_rule`` plain bucketized Space-Saving (model
``window=0``) and ``h3_sized`` the H3 hash at the sized geometry, for comparison.
"""
import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np
from amaranth.sim import Simulator

from hotline.contract.beats import learner_sample
from hotline.contract.config import LEARNER_WINDOW, learner_geometry
from hotline.contract.keys import make_keys
from hotline.data.readers import load_dataset, real_data_files, shared_data_dir
from hotline.host.simulators import simulator_available
from hotline.hw.access_learner import AccessLearner
from hotline.model.access_learner import AccessLearnerModel, top_k

__all__ = ["DATA_DIR", "criteo_files", "shared_files", "quick_files", "load_keys",
           "coverage_ratio", "top_coverage_ratio", "coverage_target", "sized_coverage",
           "lane_coverage", "amaranth_speed", "measure"]

DATA_DIR = shared_data_dir() / "criteo_kaggle"
FRACTIONS = (0.05, 0.10)


def criteo_files(data_dir=DATA_DIR):
    """The real Criteo sample files (empty when the data directory is absent)."""
    data_dir = Path(data_dir)
    return sorted(data_dir.glob("*.gz")) if data_dir.is_dir() else []


def load_keys(path):
    """Flat uint32 lookup keys of a data file, sample-major."""
    return np.asarray(load_dataset(path).keys, dtype=np.uint32)


def coverage_ratio(keys, model, fraction):
    """Learned top-K coverage over exact top-K coverage for K = ceil(fraction * distinct)."""
    return top_coverage_ratio(keys, model.top, fraction)


def top_coverage_ratio(keys, top, fraction):
    """The coverage of ``top(K)`` (K keys) over exact top-K coverage for K = ceil(fraction *
    distinct)."""
    uniq, counts = np.unique(keys, return_counts=True)
    k = math.ceil(fraction * len(uniq))
    exact = counts[np.lexsort((uniq, -counts))[:k]].sum()
    learned = counts[np.isin(uniq, top(k))].sum()
    return float(learned / exact)


def _stream(n, seed=0):
    """A Zipf-like key stream over 26 tables, like a Criteo lookup stream."""
    rng = np.random.default_rng(seed)
    rows = (rng.zipf(1.1, n) - 1) % (1 << 20)
    return make_keys(np.arange(n) % 26, rows)


def amaranth_speed(n=5000, **params):
    """Lookups per second of the default learner in the Amaranth simulator."""
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


def _ratios(keys, model):
    return {f"K={int(f * 100)}%": coverage_ratio(keys, model, f) for f in FRACTIONS}


# Targets of the AccessLearner (issue 16): Criteo files (and Alimama) 0.98; user-item files
# (MovieLens, Amazon-book: flat two-table streams) 0.95.
USER_ITEM_DIRS = ("movielens", "amazon_book")


def coverage_target(path):
    """Coverage-ratio target of a shared file."""
    return 0.95 if Path(path).parent.name in USER_ITEM_DIRS else 0.98


def shared_files():
    """Every shared data file the readers support (empty when the data directory is absent)."""
    return real_data_files()


def quick_files():
    """The ``--quick`` subset: one Criteo CSV and MovieLens (a flat user-item stream)."""
    files = shared_files()
    return [p for p in files if p.name.startswith("train_random4584")][:1] + \
        [p for p in files if p.parent.name == "movielens"][:1]


def sized_coverage(keys, fractions=FRACTIONS, window=LEARNER_WINDOW, hash_family="tabulation"):
    """{"K=5%": ratio, ...} and {"K=5%": entries, ...} of learners sized by `learner_geometry`
    for each K (models of one geometry are shared), plus the dropped fraction per K."""
    uniq = np.unique(keys)
    ratios, entries, dropped, models = {}, {}, {}, {}
    for f in fractions:
        name, k = f"K={int(f * 100)}%", math.ceil(f * len(uniq))
        geometry = learner_geometry(k, len(uniq))
        if geometry not in models:
            models[geometry] = AccessLearnerModel(buckets=geometry[0], ways=geometry[1],
                                                  window=window, hash_family=hash_family)
            models[geometry].update(keys)
        ratios[name] = coverage_ratio(keys, models[geometry], f)
        entries[name] = geometry[0] * geometry[1]
        dropped[name] = models[geometry].dropped / len(keys)
    return ratios, entries, dropped


def lane_coverage(ds, lanes, fraction=0.10, batch_size=1024):
    """(coverage ratio, sampled exact) at K = ``fraction`` of the distinct keys of dataset
    ``ds`` when the learner counts what it sees with ``lanes`` lookup lanes
    (`learner_sample`, batches of ``batch_size``): the sized learner's, and the exact top K of
    the very keys it counted (the floor that seeing 1 lookup in L sets)."""
    keys, offsets = np.asarray(ds.keys, np.uint32), ds.sample_offsets
    counted, state = [], None
    for s in range(0, ds.num_samples, batch_size):
        o = offsets[s:min(s + batch_size, ds.num_samples) + 1]
        sample, state = learner_sample(keys[o[0]:o[-1]], o - o[0], lanes, state)
        counted.append(sample)
    counted = np.concatenate(counted) if counted else keys[:0]
    distinct = len(np.unique(keys))
    buckets, ways = learner_geometry(math.ceil(fraction * distinct), distinct)
    model = AccessLearnerModel(buckets=buckets, ways=ways)
    model.update(counted)
    seen, seen_counts = np.unique(counted, return_counts=True)
    return (coverage_ratio(keys, model, fraction),
            top_coverage_ratio(keys, lambda k: top_k(seen, seen_counts, k), fraction))


def measure(files=None, speed_lookups=20000, simulators=("verilator",), build_dir=None,
            sweep_buckets=(256, 512, 1024), decompose=True):
    """Per real file (default: every shared file) and K = 5% / 10% of its distinct keys:
    ``coverage[file]["K=5%"]`` = the coverage ratio of the learner sized by
    `learner_geometry` (``entries``), beside ``h3_fixed_16384`` (the learner before issue 16:
    H3 hash, 2048 x 8 entries) and ``fixed_16384`` (tabulation, 2048 x 8) measured in the same
    run, and ``target``. With ``decompose``: ``no_hazard_rule`` (sized, window 0) and
    ``h3_sized`` (sized, H3). ``lanes[file]["L=2"]`` (and 4): the K=10% coverage when the
    learner sees one lookup beat in L (`lane_coverage`), with its floor. ``capacity_sweep``:
    smaller fixed tables (8 ways). ``speed``: simulator lookups/s."""
    result = {"coverage": {}, "lanes": {}, "capacity_sweep": {}, "speed": {}}
    for path in (shared_files() if files is None else [Path(f) for f in files]):
        ds = load_dataset(path)
        keys = np.asarray(ds.keys, np.uint32)
        result["lanes"][path.name] = {
            f"L={lanes}": dict(zip(("coverage", "exact_top_k_of_seen"), lane_coverage(ds, lanes)))
            for lanes in (2, 4)}
        t0 = time.perf_counter()
        ratios, entries, dropped = sized_coverage(keys)
        rate = len(keys) * len(set(entries.values())) / (time.perf_counter() - t0)
        fixed = {}
        for family in ("h3", "tabulation"):
            model = AccessLearnerModel(buckets=2048, ways=8, hash_family=family)
            model.update(keys)
            fixed[family] = _ratios(keys, model)
        row = result["coverage"][path.name] = {
            "lookups": int(len(keys)), "distinct": int(len(np.unique(keys))),
            "target": coverage_target(path), "model_lookups_per_s": rate, **ratios,
            "entries": entries, "dropped": dropped,
            "h3_fixed_16384": fixed["h3"], "fixed_16384": fixed["tabulation"]}
        if decompose:
            row["no_hazard_rule"] = sized_coverage(keys, window=0)[0]
            row["h3_sized"] = sized_coverage(keys, hash_family="h3")[0]
        sweep = result["capacity_sweep"][path.name] = {}
        for buckets in sweep_buckets:
            small = AccessLearnerModel(buckets=buckets)
            small.update(keys)
            sweep[f"{buckets * small.ways} entries"] = _ratios(keys, small)
    result["speed"]["amaranth"] = amaranth_speed(min(speed_lookups, 5000))
    from . import tb_access_learner  # lazy: the testbench imports cocotb (the dev extra)
    build_root = Path(build_dir or tempfile.mkdtemp(prefix="bench_al_"))
    for sim in simulators:
        if simulator_available(sim):
            report = tb_access_learner.run(_stream(speed_lookups), build_dir=build_root / sim,
                                           simulator=sim)
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
