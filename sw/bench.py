"""`make bench`: performance figures, each next to a same-run reference, written as JSON.

Usage: python -m hotline.bench [--out bench/results.json] [--only SECTION ...] [--quick]

Sections:
- fragment_model: the model fragmenter on generated Criteo samples (lookups/s), beside
  ``np.unique`` over the same keys (the cheapest pass that touches every key once);
- criteo_parse: the Criteo CSV reader in MB/s of uncompressed text, beside Python's csv
  module reading the same file.
"""
import argparse
import csv
import gzip
import io
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .data import load_dataset, shared_data_dir
from .device_model import DeviceModel
from .planner import exact_hot_set
from .report import table, write_json
from .synth import synth_criteo



def _best_of(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def bench_fragment_model(samples, hot_rows=16384, batch_size=1024, repeat=3):
    ds = synth_criteo(samples, seed=0)
    keys, offsets = ds.keys, ds.sample_offsets
    hot = exact_hot_set(keys, hot_rows)
    model = DeviceModel(hot.keys, table_sizes=ds.table_sizes)
    t_model, run = _best_of(lambda: model.fragment(keys, offsets, batch_size), repeat)
    t_ref, _ = _best_of(lambda: np.unique(keys), repeat)
    lookups = len(keys)
    return {
        "data": f"synth:criteo-kaggle:{samples}", "backend": "model", "samples": samples,
        "lookups": lookups, "hot_rows": hot_rows, "batch_size": batch_size,
        "seconds": t_model, "lookups_per_s": lookups / t_model,
        "reference": "np.unique(keys)", "reference_lookups_per_s": lookups / t_ref,
        "ratio_vs_reference": t_ref / t_model,
        "target_lookups_per_s": 20e6, "meets_target": lookups / t_model >= 20e6,
        "hot_lookup_fraction": run.counters.hits / lookups,
        "popular_fraction": run.counters.popular_samples / samples,
    }


def _criteo_csv_bytes(quick):
    """Uncompressed Criteo CSV text: the real files when present, else generated rows."""
    files = sorted((shared_data_dir() / "criteo_kaggle").glob("*.csv.gz"))
    files = files[:1] if quick else files
    if files:
        texts = [gzip.open(f).read() for f in files]
        # One header, then the rows of every file.
        body = b"".join(t.split(b"\n", 1)[1] for t in texts[1:])
        return texts[0] + body, ", ".join(f.name for f in files)
    ds = synth_criteo(2000 if quick else 20000, seed=1)
    sparse = ds.indices.reshape(ds.lengths.shape)
    buf = io.StringIO()
    buf.write("Id,Label," + ",".join(f"I{i}" for i in range(1, 14)) + ","
              + ",".join(f"C{i}" for i in range(1, 27)) + "\n")
    for n in range(ds.num_samples):
        buf.write(f"{n},{int(ds.label[n])}," + ",".join(str(int(v)) for v in ds.dense[n]) + ","
                  + ",".join(f"{(int(v) * 2654435761) & 0xffffffff:08x}" for v in sparse[n]) + "\n")
    return buf.getvalue().encode(), "generated Criteo rows"


def bench_criteo_parse(quick, repeat=3):
    raw, source = _criteo_csv_bytes(quick)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_criteo.csv"
        path.write_bytes(raw)
        t_ours, ds = _best_of(lambda: load_dataset(path), repeat)

        def csv_module():
            with open(path, newline="") as f:
                return sum(1 for _ in csv.reader(f))

        t_ref, rows = _best_of(csv_module, repeat)
    mb = len(raw) / 1e6
    return {"data": source, "megabytes": mb, "samples": ds.num_samples,
            "seconds": t_ours, "mb_per_s": mb / t_ours,
            "reference": "csv.reader row iteration (no conversion)",
            "reference_mb_per_s": mb / t_ref, "ratio_vs_reference": t_ref / t_ours}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hotline.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="bench/results.json")
    p.add_argument("--only", nargs="*", choices=("fragment_model", "criteo_parse"))
    p.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    args = p.parse_args(argv)
    want = set(args.only or ("fragment_model", "criteo_parse"))
    results = {"machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                           "cpus": os.cpu_count()},
               "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    rows = []
    if "fragment_model" in want:
        r = results["fragment_model"] = bench_fragment_model(20_000 if args.quick else 1_000_000)
        rows.append(["fragment (model)", r["data"], f"{r['lookups_per_s'] / 1e6:.1f} M lookups/s",
                     f"{r['reference_lookups_per_s'] / 1e6:.1f} M/s np.unique", r["ratio_vs_reference"]])
    if "criteo_parse" in want:
        r = results["criteo_parse"] = bench_criteo_parse(args.quick)
        rows.append(["Criteo CSV parse", r["data"][:40], f"{r['mb_per_s']:.1f} MB/s",
                     f"{r['reference_mb_per_s']:.1f} MB/s csv.reader", r["ratio_vs_reference"]])
    write_json(args.out, results)
    print(table(rows, ["benchmark", "data", "result", "same-run reference", "ratio"]))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
