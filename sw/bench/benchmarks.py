"""`make bench`: performance figures, each next to a same-run reference, written as JSON.

Usage: python -m hotline.bench [--out bench/results.json] [--only SECTION ...] [--quick]

Sections:
- fragment_model: the model fragmenter on generated Criteo samples (lookups/s), beside
  ``np.unique`` over the same keys (the cheapest pass that touches every key once);
- criteo_parse: the Criteo CSV reader in MB/s of uncompressed text, beside Python's csv
  module reading the same file;
- convert: ``hotline data convert --shards`` of the same text, fast reader against the
  reference parser, MB/s of uncompressed text (target 50);
- fragment_rtl: the Fragmenter RTL on Verilator over the generated stream and every real
  file (B = 1024) with 1, 2 and 4 lookup lanes, in lookups per cycle against the ideal L and
  against its schedule (`beat_cycles`: one beat per cycle while the partitioned cold set,
  a run of queued cold lookups in distinct partitions per cycle, across beats, and the
  cold_keys stream, one key per cycle, keep up), with the worst lanes figure per L against
  0.95 L, every beat checked against the model; and the simulators' speed (simulated
  cycles/s) on one short stream, Verilator beside
  Icarus and the Amaranth simulator (``--quick``: 1 lane, a 4,096-row hot set on the
  generator's stream);
- hashing: occupancy at the first refused CAM insert (bit-exact model) for every key family
  (random; dense rows of one and of 26 tables, random and rank order; the distinct keys of
  every shared file) at 4,096 / 16,384 / 65,536 entries, for the product geometry (tabulation
  hash, 2 x 8 ways; target 0.95) beside the linear H3 hash and the old 2 x 4 buckets in the
  same run; whether the CAM sized by ``for_workload`` holds exactly K hot keys of every shared
  file (K = 5%, 10%, 50% of its distinct keys); the ColdKeySet's occupancy at its first
  overflow (stated load 0.5); each hash's LUT4 and Fmax come from the synthesis section,
  whose full run builds ``hash-tabulation`` and ``hash-h3`` (``--quick``: 4,096 entries,
  synthetic keys, one file);
- cam: PopularityCAM lookups/cycle without backpressure (ideal 1.0), load factor at the first
  failed insert (random keys and real hot sets; target 0.90), simulator speeds;
- learner: AccessLearner coverage of its top K over the exact top K's, per shared data file,
  K = 5% and 10% of the distinct keys, at the geometry `learner_geometry` sizes (target 0.98;
  0.95 on the user-item files), beside the H3 / fixed 16,384-entry learner of the same run, and
  simulator speeds (``--quick``: one Criteo file and MovieLens);
- synthesis: LUT4 / FF / block RAM / Fmax of cam (1, 2 and 4 lookup lanes), cold-key-set and
  fragmenter (2 and 4 lanes), learner and
  cam+learner on LFE5U-85F-6 (target 125 MHz, <= 50% of the block RAM), the whole accelerator
  at 1 lane at nextpnr seeds 1, 2 and 3 and at 2 and 4 lanes (target 100 MHz), with the lookups/s at Fmax (L x Fmax) beside the
  43-140M lookups/s a GPU node needs and, with lanes, against the 1-lane top's of the same run, the two
  bucket hashes alone (hash-tabulation, hash-h3: LUT4 and Fmax, about 15 s each) and the
  1024-entry CAM on iCE40 UP5K (``--quick``: the iCE40 CAM only);
- dma: RowDMA read-channel utilisation (beats per cycle from the first AR to the last B,
  against the peak 1.0) gathering 64-byte and 256-byte rows with a 32-cycle memory latency,
  per AXI data width, and the gathered GB/s at the whole accelerator's synthesised Fmax (at its
  100 MHz target when the synthesis section did not run);
- gather: the whole accelerator co-simulated on a real Criteo file (generator when absent):
  rows gathered and scattered (every row checked against numpy), read beats per DMA-active
  cycle, simulated cycles/s;
- link: wire bytes per batch on a board's link (serial:// to the accelerator RTL served with
  the ULX3S-85F configuration and link limits; B = 256 on the generator), result beats in the
  whole bytes of their widths beside the same beats at 16 bytes each, and seconds per batch at
  1 and 3 Mbaud (``--quick``: 2 batches);
- boards: each board's bitstream (`hotline fpga build`): LUT4 / FF / block RAM against the
  part and each clock domain's Fmax against its PLL clock; slow (minutes per ECP5 board),
  so ``--quick`` leaves it out unless it is named with ``--only``;
- board_link: the host link's cost per batch on a board: the ULX3S-85F co-simulation
  (`hotline fpga cosim`'s Verilator model, PLL model and CDC included) runs the board parity test's session
  (64 dense samples of the real Criteo file, else the generator, 100 hot rows, B = 32, tables
  and staging in the 64 KiB window) through `serial://`; bytes on the wire per batch (sent,
  received, the setup apart) and the batch's wire time at 3 Mbaud (the boards' rate) against
  1 Mbaud (the former one); slow (a Verilator build and minutes of simulation), so
  ``--quick`` leaves it out unless it is named with ``--only``;
- train: DLRM training throughput (samples/s) on `make train`'s data (500k generated samples,
  --max-ind-range 1000000, B 1024, the hot set 10% of the rows) at 1 and 2 torch threads:
  ``hotline`` (exact hot set), ``hotline-learn`` (--hot-set learn --refresh auto) and
  ``device-only`` beside ``baseline`` in the same run, with host-to-device bytes, overlap,
  the final losses (which must agree) and baseline's host row work with the speedup bound it
  puts on any accelerator (``--quick``: 20k samples);
- drift: the hot-lookup share per learner window on the drifting generator (drift=0.1) with
  --refresh off and auto, beside the oracle that re-plans every window exactly
  (``--quick``: 60k samples);
- dist: ``hotline train --nproc N`` (N = 1, 2, 4, one torch thread each) in baseline and
  hotline mode on `make train`'s data: samples/s against one rank, the share
  of the steps in collectives, payload bytes per step per rank (``--quick``: 20k samples);
- formal: each formal property's proof (docs/verification.md): verdict, depth and seconds at
  `make formal`'s depth (``--quick``: `QUICK_FORMAL` at the reduced depth; `make test`
  proves every one at that depth);
- embedding: the embedding path alone (forward, backward, fused SGD) at 1 torch thread, per
  batch, split into host / device / accelerator time: FBGEMM's TBE on the CPU, nn.EmbeddingBag,
  and hotline.nn's placements, on Criteo's 26 tables at dim 16 and 128 and the MLPerf
  DLRM-DCNv2 multi-hot sizes, B = 1024 and 8192; the accelerator's RTL cycles at its Fmax and
  a labelled projection of a GPU node's step (`hotline.bench.embedding`; ``--quick``: tiny
  tables, B = 256 / 128);
- peer: TorchRec's DLRM under DistributedModelParallel (fused TBE, gloo, one rank) beside
  `hotline train --mode baseline / device-only / hotline` on `make train`'s data, samples/s
  interleaved in one run (`hotline.bench.peer`; ``--quick``: 20k samples, one round).
"""
import argparse
import csv
import dataclasses
import gzip
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import hotline
from hotline.cli.commands import fragment
from hotline.contract.config import LANES, AcceleratorConfig, max_batch_lookups
from hotline.contract.link import result_beat_bytes
from hotline.contract.streams import RESULT_STREAMS, stream_layouts
from hotline.data.drift import hot_share_decay
from hotline.data.generator import synth_criteo
from hotline.data.readers import iter_chunks, load_dataset, real_data_files, shared_data_dir, write_atomic
from hotline.data.shards import write_shards
from hotline.data.report import table, write_json
from hotline.data.spec import open_data
from hotline.fpga.boards import BOARDS
from hotline.host.host_memory import HostMemory
from hotline.host.simulators import simulator_available
from hotline.model.device_model import DeviceModel, place_hot_set
from hotline.model.planner import exact_hot_set
from hotline.train import TrainConfig, prepare_data, train

from .embedding import bench_embedding
from .hash_quality import GEOMETRIES, cam_first_refusal, cold_first_overflow, file_families, \
    key_families
from .peer import bench_peer


SECTIONS = ("fragment_model", "criteo_parse", "convert", "hashing", "fragment_rtl", "cam", "learner",
            "synthesis",
            "dma", "gather", "link", "boards", "board_link", "train", "drift", "dist", "formal",
            "embedding", "peer")
QUICK_FORMAL = "stream_slice"   # the formal property --quick proves (under a second)
SLOW_SECTIONS = ("boards", "board_link")  # not in --quick runs unless named with --only


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


def bench_convert(quick, repeat=3):
    """`hotline data convert --shards` of the Criteo text (`_criteo_csv_bytes`) with the fast
    reader and with the reference parser, in MB/s of uncompressed text."""
    raw, source = _criteo_csv_bytes(quick)
    mb = len(raw) / 1e6
    out = {"data": source, "megabytes": mb}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_criteo.csv"
        path.write_bytes(raw)
        for engine in ("fast", "legacy"):
            t, index = _best_of(lambda: write_shards(iter_chunks(path, engine=engine),
                                                     Path(tmp) / engine), repeat)
            out[engine] = {"seconds": t, "mb_per_s": mb / t, "samples": index["samples"],
                           "shards": len(index["shards"])}
    out["ratio_vs_legacy"] = out["legacy"]["seconds"] / out["fast"]["seconds"]
    out["target_mb_per_s"] = 50.0
    out["meets_target"] = out["fast"]["mb_per_s"] >= 50.0
    return out


def bench_fragment_rtl(quick):
    if not simulator_available("verilator"):
        return {"skipped": "verilator is not available"}, []
    batch = 1024
    specs = [f"synth:criteo-kaggle:{5000 if quick else 100_000}"]
    specs += [str(p) for p in real_data_files()][:1 if quick else None]
    datasets = [open_data(spec) for spec in specs]
    # --quick (a smoke run): one lane and a 4,096-row CAM, one Verilator build per geometry
    lanes_run = LANES[:1] if quick else LANES
    hot_rows = [(4096 if quick else 16384) if spec.startswith("synth:") else
                max(1, int(0.1 * len(np.unique(ds.keys)))) for spec, ds in zip(specs, datasets)]
    # The geometry a user gets (`for_workload`), shared by the streams whose cold sets come
    # out the same size (one build per geometry and lane count). One sized for all (`make
    # sim`'s) would be Alimama's (82,137 lookups in a batch: a 262,144-entry cold set), whose
    # clearing passes (2,048 cycles every 255 batches, all banks at once; every 1023 at 4
    # lanes) cost Amazon-book's 590 batches 0.3% of their cycles at one lane.
    batch_lookups = [max_batch_lookups(ds.sample_offsets, batch) for ds in datasets]
    groups = {}
    for i, n in enumerate(batch_lookups):
        groups.setdefault(AcceleratorConfig.for_workload(1, batch, n).cold_capacity, []).append(i)
    configs = [None] * len(datasets)
    for members in groups.values():
        config = AcceleratorConfig.for_workload(max(hot_rows[i] for i in members), batch,
                                                max(batch_lookups[i] for i in members))
        for i in members:
            configs[i] = config
    cache, streams = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for lanes in lanes_run:
            for ds, k, config in zip(datasets, hot_rows, configs):
                res, _ = fragment(ds, k, batch, backend="verilator", build_dir=tmp,
                                  config=dataclasses.replace(config, lanes=lanes),
                                  rtl_cache=cache)
                streams.append({**{key: res[key] for key in (
                    "data", "lanes", "samples", "lookups", "hot_rows", "cycles",
                    "lookups_per_cycle", "simulated_cycles_per_second", "popular_fraction",
                    "hot_lookup_fraction", "schedule_cycles", "cycles_over_schedule",
                    "lookups_per_cycle_per_lane")}, "accelerator": config.report()})
        # Simulator speed, same short stream and geometry on each backend.
        short = open_data(f"synth:criteo-kaggle:{100 if quick else 500}")
        speed = {}
        for backend in ("verilator", "icarus", "amaranth"):
            if backend != "amaranth" and not simulator_available(backend):
                continue
            res, _ = fragment(short, 500, 128, backend=backend, build_dir=tmp)
            speed[backend] = {"cycles": res["cycles"], "sim_seconds": res["sim_seconds"],
                              "cycles_per_second": res["simulated_cycles_per_second"],
                              "build_seconds": res["build_seconds"]}
    v = speed["verilator"]["cycles_per_second"]
    for name, r in speed.items():
        r["verilator_speedup"] = v / r["cycles_per_second"]
    worst = {lanes: min(x["lookups_per_cycle_per_lane"] for x in streams if x["lanes"] == lanes)
             for lanes in lanes_run}
    result = {"batch_size": batch, "ideal_lookups_per_cycle": "lanes", "streams": streams,
              "simulator_speed": {"data": short.name, **speed},
              "min_lookups_per_cycle_per_lane": worst,
              "target_per_lane": 0.95,
              "meets_target": {lanes: w >= 0.95 for lanes, w in worst.items()}}
    rows = [[f"fragmenter RTL lookups/cycle, {x['lanes']} lane(s)", x["data"][:40],
             f"{x['lookups_per_cycle']:.4f} (cold {1 - x['hot_lookup_fraction']:.2f}, "
             f"{x['cycles_over_schedule']:.4f}x schedule)", f"ideal {x['lanes']}.0",
             x["lookups_per_cycle_per_lane"]] for x in streams]
    rows += [[f"{name} speed", short.name, f"{r['cycles_per_second']:,.0f} cycles/s",
              "Verilator", 1 / r["verilator_speedup"]] for name, r in speed.items()]
    return result, rows


def bench_hashing(quick):
    sizes = (4096,) if quick else (4096, 16384, 65536)
    files = real_data_files()[:1] if quick else real_data_files()
    cam, rows = [], []
    fmt = lambda v: "all fit" if v is None else f"{v:.3f}"

    def record(data, entries, keys):
        loads = {f"{fam}/{ways}": cam_first_refusal(keys, entries, ways, fam)
                 for fam, ways in GEOMETRIES}
        cam.append({"data": data, "entries": entries, "keys": len(keys), **loads})
        after, h3 = loads["tabulation/8"], loads["h3/4"]
        rows.append([f"CAM load at first refusal ({entries})", data[:40], fmt(after),
                     f"{fmt(h3)} H3 2x4; {fmt(loads['tabulation/4'])} tab 2x4; target 0.95",
                     (after or 1.0) / 0.95])

    for entries in sizes:
        for name, keys in key_families(int(entries * 1.25)).items():
            record(name, entries, keys)
    hold, cold = [], []
    for path in files:
        fams = file_families(path)
        ranked = fams["rank order"]
        # The largest table the file's keys overfill (the smallest one when they cannot).
        entries = max(64, 1 << max(6, (len(ranked) - 1).bit_length() - 1))
        for order, keys in fams.items():
            record(f"{path.name.split('.')[0]} {order}", min(entries, 65536), keys)
        for share in (0.05, 0.10, 0.50):
            k = max(1, int(share * len(ranked)))
            config = AcceleratorConfig.for_workload(k, 1024, 26 * 1024)
            held = place_hot_set(ranked[:k], config).keys.size
            hold.append({"data": path.name, "k": k, "cam_entries": config.cam_entries,
                         "held": int(held)})
            rows.append([f"CAM holds K = {share:.0%} of distinct keys", path.name[:40],
                         f"{held} of {k}", f"{config.cam_entries} entries", held / k])
    capacity = 4096 if quick else 16384
    for name, keys in key_families(capacity).items():
        loads = {fam: cold_first_overflow(keys, capacity, fam) for fam in ("tabulation", "h3")}
        # the cold set with lanes (its geometry as built): partitions fill alone
        lanes_sets = {}
        for lanes in (2, 4):
            g = AcceleratorConfig(cold_capacity=capacity, lanes=lanes).cold_kwargs()
            label = f"{g['partitions']} partitions x {g['ways']} ways, stash {g['stash']}"
            lanes_sets[label] = loads[f"tabulation_{lanes}_lanes"] = cold_first_overflow(
                keys, capacity, "tabulation", ways=g["ways"], stash=g["stash"],
                partitions=g["partitions"])
        cold.append({"data": name, "capacity": capacity, **loads})
        rows.append([f"cold set load at first overflow ({capacity})", name,
                     fmt(loads["tabulation"]),
                     ", ".join(f"{fmt(v)} in {k}" for k, v in lanes_sets.items()) +
                     f", {fmt(loads['h3'])} H3; stated load 0.5",
                     min(v or 1.0 for v in (loads["tabulation"], *lanes_sets.values())) / 0.5])
    return {"cam_first_refusal": cam, "cam_holds_k": hold, "cold_first_overflow": cold,
            "target_cam_load": 0.95, "cam_sizing_load": AcceleratorConfig.CAM_LOAD}, rows


def bench_cam(quick):
    # lazy: cocotb and Amaranth elaboration only for the sections that run them (here and in
    # the other RTL sections)
    from hotline.sim.bench_popularity_cam import measure
    r = measure(1024 if quick else 16384, seeds=(0,) if quick else (0, 1, 2),
                amaranth_lookups=500 if quick else 5000,
                verilator_lookups=5000 if quick else 200_000)
    rows = [["CAM lookups/cycle (no backpressure)", f"{r['entries']} entries",
             f"{r['lookups_per_cycle']:.3f}", "ideal 1.0", r["lookups_per_cycle"]],
            ["CAM load at first failed insert", "random keys",
             f"{r['load_factor_random']['min']:.3f}", "target 0.90",
             r["load_factor_random"]["min"] / 0.9]]
    rows += [["CAM load at first failed insert", name[len("load_factor_hot_"):], f"{v['load']:.3f}",
              "target 0.90", v["load"] / 0.9] for name, v in r.items() if name.startswith("load_factor_hot")]
    return r, rows


def bench_learner(quick):
    from hotline.sim.bench_access_learner import measure, quick_files  # lazy: (see bench_cam)
    files = quick_files() if quick else None
    r = measure(files, speed_lookups=2000 if quick else 20000, simulators=("verilator", "icarus"),
                sweep_buckets=() if quick else (256, 512, 1024), decompose=not quick)
    rows = [[f"learner coverage ratio {k} ({v['entries'][k]} entries)", name[:30],
             f"{v[k]:.4f}", f"{v['h3_fixed_16384'][k]:.4f} H3/16384; target {v['target']}",
             v[k] / v["target"]]
            for name, v in r["coverage"].items() for k in ("K=5%", "K=10%")]
    rows += [[f"learner coverage ratio K=10%, {lanes}", name[:30], f"{v['coverage']:.4f}",
              f"{v['exact_top_k_of_seen']:.4f} exact top K of the keys seen", v["coverage"]]
             for name, by_lanes in r["lanes"].items() for lanes, v in by_lanes.items()]
    return r, rows


def bench_synthesis(quick):
    from hotline.fpga.blocks import report  # lazy: (see bench_cam)
    # (block, device, lanes, nextpnr seed): the product configuration at seeds 1-3 (its
    # margin must hold at each)
    jobs = ([("cam", "ice40-up5k", 1, 1)] if quick else
            [("cam", "ecp5-85f", 1, 1), ("cam", "ecp5-85f", 2, 1), ("cam", "ecp5-85f", 4, 1),
             ("learner", "ecp5-85f", 1, 1), ("cam+learner", "ecp5-85f", 1, 1),
             *(("accelerator", "ecp5-85f", 1, seed) for seed in (1, 2, 3)),
             ("cold-key-set", "ecp5-85f", 2, 1), ("cold-key-set", "ecp5-85f", 4, 1),
             ("fragmenter", "ecp5-85f", 2, 1), ("fragmenter", "ecp5-85f", 4, 1),
             ("accelerator", "ecp5-85f", 2, 1), ("accelerator", "ecp5-85f", 4, 1),
             ("hash-tabulation", "ecp5-85f", 1, 1), ("hash-h3", "ecp5-85f", 1, 1),
             ("cam", "ice40-up5k", 1, 1)])
    out, rows = [], []
    one_lane = None  # the 1-lane top's lookups/s at seed 1: what lanes must beat
    with tempfile.TemporaryDirectory() as tmp:
        for block, device, lanes, seed in jobs:
            name = (block if lanes == 1 else f"{block} ({lanes} lanes)") + \
                (f", seed {seed}" if seed != 1 else "")
            try:
                r = report(block, device, tmp, seed=seed, lanes=lanes)
            except RuntimeError as e:  # e.g. a place and route over its time limit
                out.append({"block": block, "device": device, "lanes": lanes, "seed": seed,
                            "error": str(e), **getattr(e, "progress", {})})
                rows.append([f"{name} Fmax", device, "failed", str(e).split(";")[0], "-"])
                continue
            r.pop("build_dir")
            out.append(r)
            if block in ("cam", "fragmenter", "accelerator"):  # L lookups per cycle at Fmax
                r["lookups_per_s_at_fmax"] = lanes * r["fmax_mhz"] * 1e6
                rows.append([f"{name} lookups/s at Fmax", device,
                             f"{r['lookups_per_s_at_fmax'] / 1e6:.0f}M",
                             "a GPU node: 43-140M", r["lookups_per_s_at_fmax"] / 140e6])
            if block == "accelerator" and lanes == 1 and seed == 1:
                one_lane = r["lookups_per_s_at_fmax"]
            elif block == "accelerator" and lanes > 1 and one_lane:
                r["lookups_per_s_vs_1_lane"] = r["lookups_per_s_at_fmax"] / one_lane
                rows.append([f"{name} lookups/s vs 1 lane", device,
                             f"{r['lookups_per_s_vs_1_lane']:.3f}x",
                             f"1 lane: {one_lane / 1e6:.0f}M", r["lookups_per_s_vs_1_lane"]])
            block = name
            rows.append([f"{block} Fmax", device, f"{r['fmax_mhz']} MHz",
                         f"target {r['freq_mhz']:g} MHz", r["fmax_mhz"] / r["freq_mhz"]])
            if block.startswith("hash-"):  # logic alone: its cost is its LUT4
                rows.append([f"{block} LUT4", device, f"{r['lut4']}", "-", "-"])
            else:
                rows.append([f"{block} block RAM", device,
                             f"{r['bram']} of {r['bram_available']}", "budget 50%",
                             r["bram_fraction"] / 0.5])
    return out, rows


def bench_boards(quick):
    """Every board's bitstream build; a failed build is recorded with its error."""
    from hotline.fpga.board_build import BoardBuildError, build_board  # lazy: (see bench_cam)
    out, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in BOARDS:
            try:
                r = build_board(name, tmp)
            except BoardBuildError as e:
                r = dict(e.result or {"board": name}, error=str(e))
            for key in ("build_dir", "bitstream"):  # inside the deleted temporary directory
                r.pop(key, None)
            out.append(r)
            if "fmax_mhz" not in r:
                rows.append([f"{name} bitstream", "-", "FAILED", r["error"][:40], 0.0])
                continue
            rows.append([f"{name} Fmax", r["device"], f"{r['fmax_mhz']} MHz",
                         f"accelerator clock {r['constraint_mhz']:g} MHz",
                         r["fmax_mhz"] / r["constraint_mhz"]])
            rows.append([f"{name} LUT4/FF/BRAM", r["device"],
                         f"{r['lut4']:,} / {r['ff']:,} / {r['bram']}",
                         f"of {r['lut4_available']:,} / {r['ff_available']:,} / "
                         f"{r['bram_available']}",
                         max(r["lut4_fraction"], r["ff_fraction"], r["bram_fraction"])])
    return out, rows


def _register_tables(dev, mem, ds, config, row_bytes):
    """Every table of ``ds`` and two staging banks of ``config.cold_max_keys`` slots in
    ``mem`` (rows of ``row_bytes``, 64-byte aligned), registered on ``dev``."""
    for t, rows in enumerate(ds.table_sizes.tolist()):
        dev.set_table(t, mem.alloc(rows * row_bytes, 64), rows, row_bytes)
    slots = config.cold_max_keys
    dev.set_staging(mem.alloc(2 * slots * row_bytes, 64), row_bytes, slots, banks=2)


def _run_batches(dev, ds, batch):
    """Every batch of ``batch`` samples of ``ds`` in turn: push, pull, scatter."""
    offsets, lens = ds.sample_offsets, np.diff(ds.sample_offsets)
    for lo in range(0, ds.num_samples, batch):
        hi = min(lo + batch, ds.num_samples)
        dev.push_batch(ds.keys[offsets[lo]:offsets[hi]], lens[lo:hi])
        r = dev.pull_batch()
        dev.scatter(r.bank, r.cold_keys)


def _wire_bytes(dev):
    """A link device's bytes on the wire so far, {sent, received}."""
    return {"sent": dev.link_stats["bytes_out"], "received": dev.link_stats["bytes_in"]}


def bench_board_link(quick, samples=64, hot_rows=100, batch=32, row_bytes=8):
    """Wire bytes per batch of a board session through the co-simulated ULX3S-85F."""
    from hotline.sim.board_server import BoardCosim  # lazy: cocotb, Verilator
    name = "ulx3s-85f"
    spec = BOARDS[name]
    real = shared_data_dir() / "criteo_kaggle/train_random4584.csv.gz"
    src = str(real) if real.exists() else f"synth:criteo-kaggle:{samples}"
    ds = open_data(src).head(samples).dense_rows()
    hot = exact_hot_set(ds.keys, hot_rows).keys
    batches = -(-samples // batch)
    with tempfile.TemporaryDirectory() as tmp, BoardCosim(name, Path(tmp) / "boardsim") as board, \
            HostMemory(spec.window_bytes, Path(tmp) / "m.bin") as mem:
        t0 = time.monotonic()
        with hotline.open(board.url, config=spec.config, memory=mem, timeout=600) as dev:
            _register_tables(dev, mem, ds, spec.config, row_bytes)
            dev.load_hot_set(hot)
            setup = _wire_bytes(dev)
            _run_batches(dev, ds, batch)
            total = _wire_bytes(dev)
        seconds = time.monotonic() - t0
    per_batch = {k: (total[k] - setup[k]) / batches for k in total}
    wire = per_batch["sent"] + per_batch["received"]
    out = {"board": name, "data": f"{ds.name}, {samples} samples (dense rows)",
           "batch_size": batch, "hot_rows": hot_rows, "batches": batches, "row_bytes": row_bytes,
           "setup_bytes": setup, "bytes_per_batch": per_batch, "wire_bytes_per_batch": wire,
           "bits_per_byte": 10, "baud": spec.baud,
           "batch_wire_ms": {"3 Mbaud": wire * 10 / 3e6 * 1e3, "1 Mbaud": wire * 10 / 1e6 * 1e3},
           "cosim_seconds": round(seconds, 1)}
    rows = [[f"board link bytes/batch ({name})", f"B {batch}, {samples} samples",
             f"{wire:,.0f} B, {out['batch_wire_ms']['3 Mbaud']:.2f} ms at 3 Mbaud",
             f"{out['batch_wire_ms']['1 Mbaud']:.2f} ms at 1 Mbaud", 3.0]]
    return out, rows


def bench_dma(quick, fmax_mhz=None):
    """Read utilisation of the row DMA with a 32-cycle memory, per width and row size."""
    from hotline.sim.bench_row_dma import bench_sweep  # lazy: (see bench_cam)

    widths, sizes, rows = ((64,), (64, 256), 256) if quick else ((64, 128, 256), (64, 256), 2048)
    mhz = fmax_mhz or 100.0
    out = {"latency": 32, "rows": rows, "clock_mhz": mhz,
           "clock": "accelerator Fmax (synthesis section)" if fmax_mhz else "100 MHz target",
           "runs": []}
    table_rows = []
    for w in widths:
        for r in bench_sweep(w, list(sizes), latency=32, rows=rows):
            r["gathered_gb_per_s"] = r["read_utilization"] * (w // 8) * mhz * 1e6 / 1e9
            out["runs"].append(r)
            table_rows.append([f"DMA {r['row_bytes']} B rows", f"{w}-bit AXI, latency 32",
                               f"{r['read_utilization']:.3f} beats/cycle "
                               f"({r['gathered_gb_per_s']:.2f} GB/s)", "peak 1.0", r["read_utilization"]])
    return out, table_rows


def bench_gather(quick):
    """The accelerator top gathering and scattering a real stream (Verilator)."""
    from hotline.sim.accelerator_run import gather_run  # lazy: (see bench_cam)

    files = [p for p in real_data_files() if "train_head1999" in p.name]
    spec = str(files[0]) if files else "synth:criteo-kaggle:2000"
    with tempfile.TemporaryDirectory() as tmp:
        r = gather_run(open_data(spec), 1024, 256, dim=16, backend="verilator",
                       build_dir=tmp, max_samples=300 if quick else None, verify=True)
    r.pop("counters", None)
    return r, [["gather+scatter (top)", r["data"][:40],
                f"{r['rows_gathered']:,} rows, {r['mismatched_rows']} wrong",
                "numpy gather/scatter", r["bus_utilization"]],
               ["top co-simulation", "verilator + cocotb",
                f"{r['simulated_cycles_per_second']:,.0f} cycles/s", "-", 0.0]]


LINK_ROW_BYTES = 32


def bench_link(quick):
    """Wire bytes per batch on a board's link: serial:// to the accelerator RTL served in listen
    mode (Verilator) with the ULX3S-85F configuration and link limits, so the frames are a
    board's, memory-window mirroring included; B = 256 (the board's most) on the generator's
    stream, rows renumbered densely. The server's input queue is unbounded: a board's ring drains
    into the accelerator at a word per cycle, far faster than a UART fills it, so it does not
    answer BUSY (a simulated one would, and its resends would count). The result beats travel
    in the whole bytes of their widths;
    the same beats at 16 bytes each (the format before) are the same-run reference. Seconds per
    batch on the wire (10 bits a byte, 8N1) at 1 and 3 Mbaud. And the requests of the hot set's
    load (``hot_capacity`` keys in bulk) beside the one-register-access-per-request path."""
    from hotline.sim.device_server import serve_in_background  # lazy: (see bench_cam)

    board = BOARDS["ulx3s-85f"]
    config, batch = board.config, board.config.max_batch_samples
    batches = 2 if quick else 8
    ds = open_data(f"synth:criteo-kaggle:{batch * batches}").dense_rows()
    hot = exact_hot_set(ds.keys, config.hot_capacity).keys
    window = 1 << 21
    with tempfile.TemporaryDirectory() as tmp, \
            serve_in_background(config, Path(tmp) / "window.bin", window, Path(tmp) / "build",
                                max_request=board.max_request) as url, \
            HostMemory(window, Path(tmp) / "host.bin") as mem, \
            hotline.open(url, config=config, memory=mem, timeout=120) as dev:
        _register_tables(dev, mem, ds, config, LINK_ROW_BYTES)
        s = dev.link_stats
        requests, fetches = s["requests"], s["fetches"]
        placement = dev.load_hot_set(hot)
        hot_requests, hot_fetches = s["requests"] - requests, s["fetches"] - fetches
        before = (s["bytes_out"], s["bytes_in"], dict(s["result_beats"]), s["idle_fetch_bytes"])
        _run_batches(dev, ds, batch)
        layouts = stream_layouts(config)
        beats = {n: s["result_beats"][n] - before[2][n] for n in RESULT_STREAMS}
        out_bytes, in_bytes = s["bytes_out"] - before[0], s["bytes_in"] - before[1]
        idle = s["idle_fetch_bytes"] - before[3]
    wide_in = in_bytes + sum(beats[n] * (16 - result_beat_bytes(layouts[n].size))
                             for n in RESULT_STREAMS)
    per = {"to_device": out_bytes / batches, "from_device": in_bytes / batches,
           "from_device_16_byte_beats": wide_in / batches}
    wire = per["to_device"] + per["from_device"]
    wire16 = per["to_device"] + per["from_device_16_byte_beats"]
    out = {"data": ds.name, "board": board.name, "batch_size": batch, "batches": batches,
           "lookups_per_batch": ds.num_lookups / batches, "row_bytes": LINK_ROW_BYTES,
           "bytes_per_batch": per, "result_beats_per_batch":
               {n: v / batches for n, v in beats.items()},
           "ratio_vs_16_byte_beats": wire / wire16,
           # the polls that brought nothing: their count follows the simulator's speed, so
           # the bytes without them are the figure that does not
           "idle_fetch_bytes_per_batch": idle / batches,
           "bytes_per_batch_without_idle_fetches": (out_bytes + in_bytes - idle) / batches,
           "seconds_per_batch": {f"{baud // 10**6}M": 10 * wire / baud
                                 for baud in (1_000_000, 3_000_000)},
           "seconds_per_batch_16_byte_beats_1M": 10 * wire16 / 1_000_000,
           "busy_answers": s["busy"], "resends": s["resends"],
           # the register path: CAM_CMD + CAM_RESP for the clear, then per insert CAM_KEY,
           # CAM_CMD, CAM_RESP and a CAM_MOVE read per relocation (one request each)
           # the fetches are how often the host asked before the simulated CAM was done (a
           # board's CAM is done in microseconds, within the first fetch or two); both sides
           # leave polls out: the register path re-reads CAM_RESP while an insert runs
           "hot_set": {"keys": int(len(hot)), "requests": hot_requests,
                       "requests_besides_fetches": hot_requests - hot_fetches,
                       "register_path_requests": 2 + sum(3 + len(moves) for _, _, moves
                                                         in placement.responses)}}
    h = out["hot_set"]
    return out, [["link bytes per batch (board)", f"{ds.name[:24]} B={batch}",
                  f"{wire:,.0f} B ({out['bytes_per_batch_without_idle_fetches']:,.0f} without "
                  f"idle polls), {out['seconds_per_batch']['3M'] * 1e3:.0f} ms at 3 Mbaud",
                  f"{wire16:,.0f} B with 16-byte beats", out["ratio_vs_16_byte_beats"]],
                 ["hot set load requests (board)", f"{h['keys']:,} keys",
                  f"{h['requests_besides_fetches']} requests + "
                  f"{h['requests'] - h['requests_besides_fetches']} RESULTS",
                  f"{h['register_path_requests']:,} by registers, polls apart",
                  h["requests_besides_fetches"] / h["register_path_requests"]]]


TRAIN_RUNS = (("baseline", {}), ("hotline", {}),
              ("hotline-learn", {"hot_set": "learn", "refresh": "auto"}), ("device-only", {}))


def _train_config(mode, **kw) -> TrainConfig:
    """`make train`'s configuration: B 1024, the hot set 10% of the rows, one epoch."""
    return TrainConfig(mode=mode, batch_size=1024, hot_fraction=0.1, epochs=1,
                       max_ind_range=1_000_000, **kw)


def bench_train(quick):
    """Samples/s of each training mode on `make train`'s data at 1 and 2 torch threads
    (model:// device): baseline, hotline with the exact hot set, hotline learning it while
    training (--hot-set learn --refresh auto) and device-only, with host->device bytes,
    overlap and the final losses (which must agree)."""
    samples = 20_000 if quick else 500_000
    spec = f"synth:criteo-kaggle:{samples}"
    data = prepare_data(open_data(spec, max_ind_range=1_000_000), 0.1, 1_000_000)
    out = {"data": f"{spec} (--max-ind-range 1000000)", "batch_size": 1024,
           "hot_fraction": 0.1, "threads": {}}
    rows = []
    for threads in (1, 2):
        runs = out["threads"][str(threads)] = {}
        for name, kw in TRAIN_RUNS:
            r = train(data, _train_config(name.split("-learn")[0], threads=threads, **kw))
            runs[name] = {k: r.get(k) for k in (
                "samples_per_s", "train_logloss", "test_auc", "bytes_host_to_device",
                "popular_fraction", "hot_lookup_fraction", "hot_rows", "device_busy_seconds",
                "device_wait_seconds", "overlap", "device_other_seconds", "refreshes",
                "train_seconds", "host_rows_seconds", "speedup_bound")}
            if r.get("hot_loads"):
                runs[name]["learned_coverage_ratio"] = r["hot_loads"][0]["coverage_ratio"]
        base = runs["baseline"]
        for name, r in runs.items():
            r["ratio_vs_baseline"] = r["samples_per_s"] / base["samples_per_s"]
            r["bytes_host_to_device_vs_baseline"] = (r["bytes_host_to_device"]
                                                     / base["bytes_host_to_device"])
            r["same_losses_as_baseline"] = r["train_logloss"] == base["train_logloss"]
            rows.append([f"train ({name}, {threads} thr)", out["data"][:40],
                         f"{r['samples_per_s']:,.0f} samples/s",
                         f"{base['samples_per_s']:,.0f} samples/s baseline",
                         r["ratio_vs_baseline"]])
        # Amdahl: hotline can at most remove baseline's host row work from its steps
        rows.append([f"train (hotline bound, {threads} thr)", out["data"][:40],
                     f"{base['host_rows_seconds']:.1f} s host row work",
                     f"{base['train_seconds']:.1f} s baseline steps", base["speedup_bound"]])
    return out, rows


def bench_drift(quick):
    """The hot-lookup share under drift (the generator's drift=0.1, 326x the rate measured on
    Criteo Kaggle): hotline with the exact set of the first window and --refresh off, and with
    --refresh auto, beside the oracle that re-plans every window exactly (the exact top-K of
    the window before; `hotline.data.drift.hot_share_decay`), per learner window."""
    samples = 60_000 if quick else 500_000
    spec = f"synth:criteo-kaggle:{samples}:0:drift=0.1"
    data = prepare_data(open_data(spec, max_ind_range=1_000_000), 0.1, 1_000_000)
    out = {"data": f"{spec} (--max-ind-range 1000000)", "batch_size": 1024,
           "hot_fraction": 0.1, "profile_fraction": 0.1, "runs": {}}
    rows = []
    for refresh in ("off", "auto"):
        r = train(data, _train_config("hotline", profile_fraction=0.1, refresh=refresh,
                                      threads=1))
        w = r["learn_window_steps"] or max(1, int(0.1 * data.n_train) // 1024)
        share = np.asarray(r["step_hot_share"])
        windows = [float(share[i:i + w].mean()) for i in range(0, len(share), w)]
        out["runs"][refresh] = {"window_steps": w, "window_hot_share": windows,
                                "refreshes": r["refreshes"], "samples_per_s": r["samples_per_s"],
                                "train_logloss": r["train_logloss"]}
    w = out["runs"]["auto"]["window_steps"]
    n_train = data.n_train
    oracle = hot_share_decay(data.keys[:data.offsets[n_train]], data.offsets[:n_train + 1],
                             1024, w, int(0.1 * int(data.table_sizes.sum()))).oracle
    out["oracle_window_hot_share"] = oracle.tolist()
    out["plot"] = _plot_drift(out, Path("build/bench/drift.png"))
    for refresh, r in out["runs"].items():
        got = np.asarray(r["window_hot_share"][1:])
        r["max_points_below_oracle"] = float(100 * (oracle[1:len(got) + 1] - got).max())
        rows.append([f"drift: refresh {refresh}", out["data"][:40],
                     f"last window {r['window_hot_share'][-1]:.3f} hot",
                     f"{oracle[-1]:.3f} oracle", r["window_hot_share"][-1] / oracle[-1]])
    return out, rows


def _plot_drift(res, path) -> str:
    """PNG of `bench_drift`: the hot-lookup share per window, refresh off / auto / oracle."""
    import matplotlib  # lazy: only this section plots
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: (see above)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(res["oracle_window_hot_share"], "k--", label="oracle (exact top-K of the window before)")
    for refresh, r in res["runs"].items():
        ax.plot(r["window_hot_share"], marker="o", label=f"--refresh {refresh} "
                                                         f"({r['refreshes']} refreshes)")
    ax.set(xlabel=f"window ({res['runs']['auto']['window_steps']} steps)",
           ylabel="hot-lookup share", title=res["data"])
    ax.legend()
    ax.grid(True, alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
    return str(path)


def bench_dist(quick):
    """Data-parallel `hotline train --nproc N` (N = 1, 2, 4; one torch thread per rank) in
    baseline and hotline mode on `make train`'s data (500k samples, K = 10% of the rows):
    samples/s, the share of the step time in collectives, payload bytes per step per rank
    (dense gradients, hot rows, cold rows), and the final loss."""
    samples = 20_000 if quick else 500_000
    spec = f"synth:criteo-kaggle:{samples}"
    out = {"data": f"{spec} (--max-ind-range 1000000)", "batch_size": 1024, "hot_fraction": 0.1,
           "cpus": os.cpu_count(), "runs": {}}
    rows = []
    with tempfile.TemporaryDirectory(prefix="hotline-bench-dist-") as tmp:
        for mode in ("baseline", "hotline"):
            runs = out["runs"][mode] = {}
            for nproc in (1, 2, 4):
                path = Path(tmp) / f"{mode}-{nproc}.json"
                subprocess.run([sys.executable, "-m", "hotline", "train", spec, "--max-ind-range",
                                "1000000", "--mode", mode, "--batch-size", "1024",
                                "--hot-fraction", "0.1", "--threads", "1", "--nproc", str(nproc),
                                "--json", str(path)], check=True, stdout=subprocess.DEVNULL)
                r = json.loads(path.read_text())
                runs[str(nproc)] = {k: r[k] for k in (
                    "world_size", "samples_per_s", "train_seconds", "collective_seconds",
                    "collective_share", "collective_bytes_per_step", "hot_exchanges",
                    "train_logloss")}
                one = runs["1"]
                runs[str(nproc)]["ratio_vs_one_rank"] = r["samples_per_s"] / one["samples_per_s"]
                b = r["collective_bytes_per_step"]
                rows.append([f"train --nproc {nproc} ({mode})", out["data"][:40],
                             f"{r['samples_per_s']:,.0f} samples/s, {r['collective_share']:.0%} "
                             f"in collectives, {(b['dense'] + b['hot'] + b['cold']) / 2**20:.2f} "
                             f"MiB/step/rank", f"{one['samples_per_s']:,.0f} samples/s 1 rank",
                             runs[str(nproc)]["ratio_vs_one_rank"]])
    return out, rows


def bench_formal(quick):
    """Each formal property's verdict, depth and proof time (no mutants: `make formal`)."""
    from hotline.sim.formal.properties import PROPERTIES  # lazy: (see bench_cam)
    from hotline.sim.formal.runner import prove

    out, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        # --quick: one small property, a smoke run of this section (make test proves every
        # one at the reduced depths, tests/test_formal.py; the DMA window's takes 33 s there)
        chosen = {QUICK_FORMAL: PROPERTIES[QUICK_FORMAL]} if quick else PROPERTIES
        for name, spec in chosen.items():
            r = prove(spec.wrapper(), name, spec.reduced_depth if quick else spec.depth,
                      induction=spec.induction, workdir=tmp)
            out.append({"property": name, "status": r.status, "depth": r.depth,
                        "seconds": r.seconds})
            engine = "k-induction" if r.status == "proved" else "BMC"
            rows.append([f"formal {name}", f"{engine} depth {r.depth}",
                         f"{r.status} in {r.seconds:.1f} s", "-", "-"])
    return out, rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hotline.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="bench/results.json")
    p.add_argument("--only", nargs="*", choices=SECTIONS)
    p.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    args = p.parse_args(argv)
    want = args.only or [s for s in SECTIONS if not (args.quick and s in SLOW_SECTIONS)]
    results = {}
    if args.only and Path(args.out).exists():
        # A partial run updates its sections of an earlier full run.
        results = json.loads(Path(args.out).read_text())
    results.update({"machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                                "cpus": os.cpu_count()},
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
    rows = []
    if "fragment_model" in want:
        r = results["fragment_model"] = bench_fragment_model(20_000 if args.quick else 1_000_000)
        rows.append(["fragment (model)", r["data"], f"{r['lookups_per_s'] / 1e6:.1f} M lookups/s",
                     f"{r['reference_lookups_per_s'] / 1e6:.1f} M/s np.unique", r["ratio_vs_reference"]])
    if "criteo_parse" in want:
        r = results["criteo_parse"] = bench_criteo_parse(args.quick)
        rows.append(["Criteo CSV parse", r["data"][:40], f"{r['mb_per_s']:.1f} MB/s",
                     f"{r['reference_mb_per_s']:.1f} MB/s csv.reader", r["ratio_vs_reference"]])
    if "convert" in want:
        r = results["convert"] = bench_convert(args.quick)
        rows.append(["data convert --shards", r["data"][:40], f"{r['fast']['mb_per_s']:.1f} MB/s",
                     f"{r['legacy']['mb_per_s']:.1f} MB/s reference parser", r["ratio_vs_legacy"]])
    for name, fn in (("hashing", bench_hashing), ("fragment_rtl", bench_fragment_rtl),
                     ("cam", bench_cam),
                     ("learner", bench_learner), ("synthesis", bench_synthesis),
                     ("dma", None), ("gather", bench_gather), ("link", bench_link),
                     ("boards", bench_boards), ("board_link", bench_board_link),
                     ("train", bench_train), ("drift", bench_drift), ("dist", bench_dist),
                     ("formal", bench_formal), ("embedding", bench_embedding),
                     ("peer", lambda quick: bench_peer(quick, _train_config))):
        if name in want:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            if name == "dma":
                acc = [r for r in results.get("synthesis") or []
                       if isinstance(r, dict) and r.get("block") == "accelerator"]
                results[name], more = bench_dma(args.quick, acc[0].get("fmax_mhz") if acc else None)
            else:
                results[name], more = fn(args.quick)
            seconds = results.setdefault("section_seconds", {})[name] = time.perf_counter() - t0
            print(f"bench: {name} took {seconds:.0f} s", file=sys.stderr, flush=True)
            rows += more
    write_json(args.out, results)
    print(table(rows, ["benchmark", "data", "result", "same-run reference", "ratio"]))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
