"""The operations behind the CLI: load data, plan the hot set, fragment, summarise.

Each returns plain dicts (the JSON contract of DESIGN.md) so the CLI, `hotline sim` and the
benchmarks share one implementation.
"""
import time

import numpy as np

from .data import load_dataset, split_keys
from .device_model import DeviceModel
from .errors import HotlineError
from .planner import exact_hot_set, hit_fraction, hot_rows_from_bytes, profile_samples
from .synth import synth

SYNTH_PREFIX = "synth:"
MODEL_BACKEND = "model"
RTL_BACKENDS = ("amaranth", "icarus", "verilator")
BACKENDS = (MODEL_BACKEND,) + RTL_BACKENDS


def open_data(spec, fmt=None, max_ind_range=None, limit=None):
    """A `Dataset` from a file path or ``synth:LIKE:SAMPLES[:SEED]`` (the built-in generator)."""
    spec = str(spec)
    if spec.startswith(SYNTH_PREFIX):
        parts = spec[len(SYNTH_PREFIX):].split(":")
        try:
            like, samples, seed = parts[0], int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
        except (IndexError, ValueError):
            raise HotlineError(f"{spec}: expected synth:LIKE:SAMPLES[:SEED], "
                               f"e.g. synth:criteo-kaggle:100000") from None
        ds = synth(like, samples, seed)
        return ds if limit is None else ds.head(limit)
    return load_dataset(spec, fmt, max_ind_range, limit)


def resolve_hot_rows(hot_rows, hot_bytes, dim):
    if hot_rows is not None and hot_bytes is not None:
        raise HotlineError("give either --hot-rows or --hot-bytes, not both")
    if hot_bytes is not None:
        return hot_rows_from_bytes(hot_bytes, dim)
    if hot_rows is None:
        raise HotlineError("--hot-rows K (or --hot-bytes B with --dim D) is required")
    return hot_rows


def plan(ds, hot_rows, profile_fraction=1.0):
    """Exact hot set of ``ds``'s profiling window; returns (HotSet, window samples, notes)."""
    if hot_rows is None or hot_rows <= 0:
        raise HotlineError(f"--hot-rows must be a positive integer, not {hot_rows}")
    window = profile_samples(ds.num_samples, profile_fraction)
    keys = ds.keys
    hot = exact_hot_set(keys[:ds.sample_offsets[window]], hot_rows)
    notes = []
    if hot.clamped:
        notes.append(f"--hot-rows {hot_rows} exceeds the {hot.distinct} distinct keys in the "
                     f"profiling window; using {hot.size}")
    return hot, window, keys, notes


def hot_rows_per_table(hot_keys, num_tables):
    tables, _ = split_keys(hot_keys)
    return np.bincount(tables, minlength=num_tables)


def profile(ds, hot_rows, profile_fraction=1.0, learner="exact"):
    """`hotline profile` JSON: the hot set and its coverage."""
    if learner != "exact":
        raise HotlineError(f"--learner {learner}: only 'exact' is available until the "
                           f"AccessLearner RTL lands (issue #3)")
    hot, window, keys, notes = plan(ds, hot_rows, profile_fraction)
    return {
        "data": ds.name,
        "learner": learner,
        "samples": ds.num_samples,
        "lookups": ds.num_lookups,
        "profile_fraction": profile_fraction,
        "profile_samples": window,
        "profile_lookups": hot.window_lookups,
        "distinct_keys": hot.distinct,
        "hot_rows_requested": hot.requested,
        "hot_rows": hot.size,
        "coverage": hot.coverage,
        "hot_lookup_fraction": hit_fraction(keys, hot.keys),
        "hot_rows_per_table": hot_rows_per_table(hot.keys, ds.num_features),
        "hot_keys": hot.keys,
        "hot_counts": hot.counts,
        "notes": notes,
    }


def fragment(ds, hot_rows, batch_size, profile_fraction=1.0, backend=MODEL_BACKEND, progress=None):
    """`hotline fragment` JSON plus the `FragmentRun` itself."""
    if backend not in BACKENDS:
        raise HotlineError(f"--backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend != MODEL_BACKEND:
        raise HotlineError(f"--backend {backend}: the fragmenter RTL is not built yet "
                           f"(issue #4); use --backend model")
    if batch_size is None or batch_size <= 0:
        raise HotlineError(f"--batch-size must be a positive integer, not {batch_size}")
    hot, window, keys, notes = plan(ds, hot_rows, profile_fraction)
    model = DeviceModel(hot.keys, table_sizes=ds.table_sizes)
    t0 = time.perf_counter()
    run = model.fragment(keys, ds.sample_offsets, batch_size, progress)
    wall = time.perf_counter() - t0
    out = {
        "data": ds.name,
        "backend": backend,
        "batch_size": batch_size,
        "hot_rows_requested": hot.requested,
        "hot_rows": hot.size,
        "profile_fraction": profile_fraction,
        "profile_samples": window,
        "coverage": hot.coverage,
        "distinct_keys": int(len(np.unique(keys))),
    }
    out.update(run.summary())
    out["wall_seconds"] = wall
    out["notes"] = notes
    return out, run


def fragment_table_rows(result):
    """Rows of the human summary of one fragment result."""
    b = result["batches"]
    cold = np.array([x["unique_cold_rows"] for x in b])
    return [
        ("data", result["data"]), ("backend", result["backend"]),
        ("samples", result["samples"]), ("lookups", result["lookups"]),
        ("distinct keys", result["distinct_keys"]),
        ("hot rows", result["hot_rows"]), ("batch size", result["batch_size"]),
        ("batches", len(b)),
        ("profile coverage", result["coverage"]),
        ("hot-lookup fraction", result["hot_lookup_fraction"]),
        ("popular samples", f"{result['popular_samples']:,} ({100 * result['popular_fraction']:.1f}%)"),
        ("unique cold rows / batch", f"mean {cold.mean():,.1f}, max {cold.max():,}" if len(cold) else "-"),
    ]
