"""PopularityCAM benchmark: lookup throughput (per lane count: L lookups per cycle expected
without backpressure), load factor at the first failed insert, and simulator speed (Amaranth
simulator and cocotb + Verilator), every run checked against the model.

``python -m hotline.sim.bench_popularity_cam [--json OUT]`` prints the `measure` dict.
"""
import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from hotline.contract.cam import CAMStatus
from hotline.data.readers import load_dataset, shared_data_dir
from hotline.host.simulators import simulator_available
from hotline.hw.popularity_cam import PopularityCAM
from hotline.model.popularity_cam import PopularityCAMModel
from hotline.sim import tb_popularity_cam as tb

DATA_DIR = shared_data_dir()
HOT_SETS = (("criteo_kaggle/train_head1999.csv.gz", 8192),
            ("criteo_kaggle/train_random4584.csv.gz", 16384))


def first_failure_load(model, keys):
    """Fraction of ``model.entries`` (stash included) filled when the first insert fails,
    or None if every key fits."""
    for i, key in enumerate(keys):
        if model.insert(key)[0] == CAMStatus.FULL:
            return i / model.entries
    return None


def real_keys(rel):
    return load_dataset(DATA_DIR / rel).keys.astype(np.int64)


def lookup_script(cam, keys, n, rng, hot_keys=1024):
    """``hot_keys`` inserts of the hottest keys, then ``n`` lookups drawn from ``keys``."""
    hot = tb.hot_first(keys)[:hot_keys]
    stream = keys[rng.integers(0, len(keys), n)]
    return tb.concat(tb.commands(tb.INSERT, hot), tb.lookups(stream, cam.user_width, rng))


def speed(stats):
    """Simulator speed over the whole run (reset, clear pass, inserts, lookups)."""
    return {**stats, "cycles_per_s": stats["cycles"] / stats["wall_s"],
            "lookups_per_s": stats["lookups"] / stats["wall_s"]}


def measure(entries=16384, *, seeds=(0, 1, 2), amaranth_lookups=5000,
            verilator_lookups=200_000, build_dir=None):
    """Dict of measurements (keys named by what they measure; load factors are fractions;
    ``lookups_per_cycle`` is one lane's, ``lookups_per_cycle_by_lanes`` each lane count's, in
    the Amaranth simulator)."""
    rng = np.random.default_rng(0)
    out = {"entries": entries}
    loads = []
    for seed in seeds:
        keys = np.random.default_rng(seed).choice(1 << 32, int(1.2 * entries), replace=False)
        loads.append(first_failure_load(PopularityCAMModel(entries), keys))
    out["load_factor_random"] = {"min": min(loads), "mean": float(np.mean(loads)), "seeds": len(seeds)}
    for rel, size in HOT_SETS:
        if (DATA_DIR / rel).exists():
            hot = tb.hot_first(real_keys(rel))
            out[f"load_factor_hot_{Path(rel).name.split('.')[0]}"] = {
                "entries": size, "distinct_keys": len(hot),
                "load": first_failure_load(PopularityCAMModel(size), hot)}

    keys = (real_keys(HOT_SETS[0][0]) if (DATA_DIR / HOT_SETS[0][0]).exists()
            else rng.integers(0, 1 << 32, 50_000))
    out["lookups_per_cycle_by_lanes"] = {}
    for lanes in PopularityCAM.LANES:
        cam = PopularityCAM(entries, lanes=lanes)
        st = tb.run_amaranth(cam, lookup_script(cam, keys, amaranth_lookups, rng))
        if lanes == 1:
            out["amaranth"] = speed({**st.stats(), "wall_s": st.wall_s})
        out["lookups_per_cycle_by_lanes"][str(lanes)] = st.stats()["lookups_per_cycle"]
    out["lookups_per_cycle"] = out["lookups_per_cycle_by_lanes"]["1"]

    if simulator_available("verilator"):
        cam = PopularityCAM(entries)
        build = build_dir or tempfile.mkdtemp(prefix="cam_bench_")
        s = lookup_script(cam, keys, verilator_lookups, rng)
        [stats] = tb.run(cam, [("bench", s, 0.0)], build_dir=build)
        out["verilator"] = speed(stats)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=16384)
    p.add_argument("--build-dir")
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args(argv)
    result = measure(args.entries, build_dir=args.build_dir)
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
