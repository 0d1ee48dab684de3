"""The whole HotlineAccelerator co-simulated on a real index stream, every output checked.

`AcceleratorSim` exports the top, and runs `hotline.sim.tb_accelerator` under cocotb with the
job `gather_job` builds: real host tables in a file-backed `HostMemory` (the RTL's AXI4 master
reads and writes that very file through cocotbext-axi ``AxiRam``), the hot set inserted through
the CSRs, the stream in batches, each batch gathered, "trained" (+delta on every byte of its
staging rows) and scattered back. `check_gather` compares the result with the bit-accurate
model (every stream beat, the CAM responses, the counters) and with a plain numpy gather and
scatter of the same tables (every staging snapshot, the final tables).
"""
import time
from pathlib import Path

import numpy as np

from hotline.contract.config import AcceleratorConfig, max_batch_lookups
from hotline.contract.errors import HotlineError
from hotline.contract.keys import split_keys
from hotline.contract.streams import BATCH_END, LANE_STREAMS, lane_count, lane_groups, \
    lookup_beats, pack_lookups, stream_layouts, unpack
from hotline.host.host_memory import HostMemory, address_bits
from hotline.host.simulators import simulator_available
from hotline.hw.accelerator import HotlineAccelerator
from hotline.model.device_model import model_fragment
from hotline.model.planner import plan

from . import tb_accelerator
from .fragmenter_run import RTLMismatch, compare, decode, expected_streams
from .runner import CocotbFailure

def host_layout(table_sizes, row_bytes, slots, banks=2):
    """Bus windows: one per table (4 KiB aligned), then the staging banks."""
    tables, at = {}, 0
    for t, rows in enumerate(np.asarray(table_sizes, np.int64).tolist()):
        tables[t] = (at, int(rows), row_bytes)
        at = -(-(at + max(int(rows), 1) * row_bytes) // 4096) * 4096
    staging = (at, row_bytes, slots, banks)
    return tables, staging, at + banks * slots * row_bytes


def gather_job(keys, sample_offsets, batch_size, insert_keys, config, table_sizes, dim,
               data_width=64, banks=2, delta=1, seed=0, memory_path=None, busy=0.0):
    """(job, HostMemory, initial table bytes of every touched row) for `tb_accelerator`.

    Rows are ``4 * dim`` bytes rounded up to the bus width; only rows the stream touches get
    (random) contents, the rest of the sparse memory file stays zero. ``job["addr_width"]``:
    the bus address bits the tables need (at least 32; `AcceleratorSim` builds the top so).
    """
    bus_bytes = data_width // 8
    row_bytes = -(-4 * dim // bus_bytes) * bus_bytes
    tables, staging, size = host_layout(table_sizes, row_bytes, config.cold_max_keys, banks)
    mem = HostMemory(size, memory_path)
    rng = np.random.default_rng(seed)
    touched = np.unique(np.asarray(keys, np.uint64))
    t_of, r_of = split_keys(touched)
    addr = np.array([tables[int(t)][0] for t in t_of], np.int64) + r_of.astype(np.int64) * row_bytes
    content = rng.integers(0, 256, (len(touched), row_bytes), dtype=np.uint8)
    for a, c in zip(addr.tolist(), content):
        mem.array[a:a + row_bytes] = c
    mem.flush()
    beats = pack_lookups(stream_layouts(config)["lookups"], keys, sample_offsets, batch_size)
    _, _, eob, _ = lookup_beats(keys, sample_offsets, batch_size)
    ends = (lane_groups(eob, config.lanes)[eob] + 1).tolist()
    batches = [beats[a:b] for a, b in zip([0] + ends[:-1], ends)]
    windows = [(b, b + max(r, 1) * rb) for b, r, rb in tables.values()]
    windows.append((staging[0], staging[0] + banks * staging[2] * staging[1]))
    job = {"memory": str(mem.path), "addr_width": address_bits(size), "tables": tables,
           "staging": staging, "windows": windows,
           "hot_keys": [int(k) for k in insert_keys], "batches": batches, "delta": delta,
           "busy_in": busy, "busy_out": busy}
    initial = dict(zip(touched.tolist(), content))
    return job, mem, initial


class AcceleratorSim:
    """The top under cocotb on ``backend`` (verilator or icarus); one build per run, with the
    job's ``addr_width`` (32 without one)."""

    def __init__(self, config, backend="verilator", build_dir="build/accelerator", data_width=64,
                 num_tables=32, learner=None):
        if not simulator_available(backend):
            raise HotlineError(f"{backend} is not available here (see README: simulators)")
        self.config, self.backend, self.data_width = config, backend, data_width
        self.num_tables, self.learner = num_tables, learner
        tag = "_".join(str(v) for v in config.as_dict().values())
        # Absolute: cocotb runs the simulator in the build directory, and the job names files.
        self.build_dir = Path(build_dir).resolve() / f"top_{backend}_{data_width}_{tag}"

    def run(self, job):
        dut = HotlineAccelerator.from_config(self.config, self.data_width,
                                             job.get("addr_width", 32), self.num_tables,
                                             self.learner)
        t0 = time.perf_counter()
        try:
            result = tb_accelerator.run(dut, job, build_dir=self.build_dir, simulator=self.backend)
        except (CocotbFailure, SystemExit) as e:
            raise HotlineError(f"accelerator co-simulation failed ({e}); see "
                               f"{self.build_dir / 'sim.log'}") from None
        result["total_seconds"] = time.perf_counter() - t0
        return result


def reference_gather_scatter(job, initial, cold_keys_per_batch, split):
    """Plain numpy: the staging rows each batch must see and the final row contents, with the
    testbench's order (2 banks: gather b+1 before scatter b) and its +delta training."""
    rows = {k: v.copy() for k, v in initial.items()}
    banks = job["staging"][3]
    snapshots, pending = [], None
    for b, keys in enumerate(cold_keys_per_batch):
        snap = np.array([rows[k] for k in keys], np.uint8).reshape(len(keys), -1)
        snapshots.append(snap)
        if banks == 2 and pending is not None:
            for k, row in pending:
                rows[k] = row
        trained = [(k, (r.astype(np.int64) + job["delta"]).astype(np.uint8) & 0xFF)
                   for k, r in zip(keys, snap)]
        if banks == 2:
            pending = trained
        else:
            for k, row in trained:
                rows[k] = row
    for k, row in pending or []:
        rows[k] = row
    return snapshots, rows


def split_batch_keys(layout, values):
    """The `batch_keys` stream as the Fragmenter's ``cold_keys`` and ``batches`` fields, and
    the cold keys per batch."""
    f = unpack(layout, values)
    end = f[BATCH_END].astype(bool)
    cold = {"key": f["key"][~end]}
    batches = {n: f[n][end] for n in ("popular", "non_popular", "cold", "overflow")}
    per_batch = np.split(f["key"][~end], np.cumsum(batches["cold"])[:-1]) if end.any() else []
    return cold, batches, [p.tolist() for p in per_batch]


def check_gather(result, job, run, placement, initial, dut_layouts, row_bytes, mem):
    """Compare a `tb_accelerator` result with the model and the numpy reference; returns the
    report fields. Raises `RTLMismatch` on the first difference."""
    if result["violations"]:
        raise RTLMismatch(f"bus access outside the registered windows: {result['violations'][:3]}")
    got = {n: decode(dut_layouts[n], result["streams"][n], n) for n in LANE_STREAMS[1:]}
    got["cold_keys"], got["batches"], per_batch = split_batch_keys(dut_layouts["batch_keys"],
                                                                   result["streams"]["batch_keys"])
    got["resp"] = {"status": np.array([r[0] for r in result["responses"]], np.int64),
                   "slot": np.array([r[1] for r in result["responses"]], np.int64),
                   "moves": np.array([r[2] for r in result["responses"]], np.int64)}
    got["moves"] = {"src": np.array([m[0] for m in result["moves"]], np.int64),
                    "dst": np.array([m[1] for m in result["moves"]], np.int64)}
    want = expected_streams(run, placement.responses, lane_count(dut_layouts["remap"]))
    del want["cold_keys"]["beat"]   # the top's batch_keys carry one key per beat
    compare(got, want)

    snapshots, final = reference_gather_scatter(job, initial, per_batch, None)
    mismatched = 0
    for b, (want, raw) in enumerate(zip(snapshots, result["snapshots"])):
        have = np.frombuffer(raw, np.uint8).reshape(len(want), -1)[:, :want.shape[1]] \
            if len(want) else np.zeros((0, row_bytes), np.uint8)
        mismatched += int(np.any(have != want, axis=1).sum()) if len(want) else 0
    tables = job["tables"]
    keys = np.array(sorted(final), np.uint64)
    t_of, r_of = split_keys(keys)
    table_mismatch = 0
    for k, t, r in zip(keys.tolist(), t_of.tolist(), r_of.tolist()):
        a = tables[t][0] + r * row_bytes
        table_mismatch += int(np.any(mem.array[a:a + row_bytes] != final[k]))

    done = unpack(dut_layouts["dma_done"], result["streams"]["dma_done"])
    gathered = int(done["rows"][done["scatter"] == 0].sum())
    scattered = int(done["rows"][done["scatter"] == 1].sum())
    cold_rows = int(run.counters.cold_rows)
    c = result["counters"]
    want_counters = {"LOOKUPS": run.counters.lookups, "HITS": run.counters.hits,
                     "SAMPLES": run.counters.samples, "POPULAR_SAMPLES": run.counters.popular_samples,
                     "COLD_ROWS": cold_rows, "BATCHES": run.counters.batches,
                     "OVERFLOWS": run.counters.overflows, "GATHER_ROWS": cold_rows,
                     "SCATTER_ROWS": cold_rows, "DMA_BYTES_READ": 2 * cold_rows * row_bytes,
                     "DMA_BYTES_WRITTEN": 2 * cold_rows * row_bytes, "WINDOW_ERRORS": 0,
                     "AXI_ERRORS": 0}
    for name, want in want_counters.items():
        if int(c[name]) != int(want):
            raise RTLMismatch(f"counter {name} = {int(c[name])} from the RTL, {int(want)} expected")
    return {"rows_gathered": gathered, "rows_scattered": scattered,
            "mismatched_rows": mismatched, "mismatched_table_rows": table_mismatch,
            "errors": int(c["WINDOW_ERRORS"]) + int(c["AXI_ERRORS"]),
            "counters": {k.lower(): int(v) for k, v in c.items()},
            "bus_utilization": result["r_beats"] / result["dma_active_cycles"]
            if result["dma_active_cycles"] else 0.0,
            "r_beats": result["r_beats"], "w_beats": result["w_beats"],
            "dma_active_cycles": result["dma_active_cycles"],
            "cycles": int(c["CYCLES"])}


def gather_run(ds, hot_rows, batch_size, dim=16, backend="verilator", profile_fraction=1.0,
               data_width=64, banks=2, busy=0.0, build_dir="build/gather", max_samples=None,
               verify=True, seed=0, soft_reset_first=False, lanes=1, faults_first=False):
    """`hotline gather` JSON: the accelerator top co-simulated on ``ds``, gathering each batch's
    cold rows from real host tables and scattering them back; with ``verify`` every result is
    compared with the model and a numpy gather/scatter. A stream or counter that differs from
    the model is always an error; rows that differ from numpy are counted in the report
    (``mismatched_rows``), and an error with ``verify``. ``soft_reset_first``: the run starts
    on a top left mid-gather by an abandoned session and soft-reset while its bursts are in
    flight (`hotline.sim.tb_accelerator.abandon_and_soft_reset`; what the registers read after
    the reset is in ``after_reset``). ``lanes``: the Fragmenter's lookup lanes.
    ``faults_first``: the run starts after `hotline.sim.tb_accelerator.watchdog_faults` (a
    scatter without its end beat, write responses held through a soft reset; its readings
    are in ``faults``)."""
    if banks not in (1, 2):
        raise HotlineError(f"--banks must be 1 or 2, not {banks}")
    if data_width not in (64, 128, 256):
        raise HotlineError(f"--data-width must be 64, 128 or 256, not {data_width}")
    if ds.num_features > 32:
        raise HotlineError(f"{ds.name}: {ds.num_features} tables, the accelerator has 32 "
                           f"descriptors")
    if max_samples is not None and max_samples < ds.num_samples:
        ds = ds.head(max_samples)
    hot, _, keys, notes = plan(ds, hot_rows, profile_fraction)
    offsets = ds.sample_offsets
    config = AcceleratorConfig.for_workload(hot.size, batch_size,
                                            max_batch_lookups(offsets, batch_size), lanes=lanes)
    placement, run = model_fragment(keys, offsets, batch_size, hot.keys, config, ds.table_sizes)
    build_dir = Path(build_dir).resolve()
    sim = AcceleratorSim(config, backend, build_dir, data_width)
    sim.build_dir.mkdir(parents=True, exist_ok=True)
    job, mem, initial = gather_job(keys, offsets, batch_size, hot.keys, config, ds.table_sizes,
                                   dim, data_width, banks, seed=seed,
                                   memory_path=sim.build_dir / "host_memory.bin", busy=busy)
    job["soft_reset_first"], job["faults_first"] = soft_reset_first, faults_first
    try:
        result = sim.run(job)
        layouts = stream_layouts(config)
        row_bytes = job["tables"][0][2]
        out = {"data": ds.name, "backend": backend, "samples": ds.num_samples,
               "lookups": ds.num_lookups, "hot_rows": int(placement.keys.size),
               "batch_size": batch_size, "batches": int(run.num_batches), "dim": dim,
               "lanes": lanes,
               "row_bytes": row_bytes, "data_width": data_width,
               "addr_width": job["addr_width"], "staging_banks": banks,
               "memory_latency": "AxiRam (no added latency)", "notes": notes}
        try:
            out.update(check_gather(result, job, run, placement, initial, layouts, row_bytes, mem))
        except RTLMismatch as e:
            raise HotlineError(f"RTL ({backend}) and reference disagree: {e}") from None
        bad = out["mismatched_rows"] or out["mismatched_table_rows"]
        if bad and verify:
            raise HotlineError(f"{out['mismatched_rows']} staging rows and "
                               f"{out['mismatched_table_rows']} table rows differ from numpy")
        out.update({key: result[key] for key in ("after_reset", "r_beats_after_request",
                                                 "faults") if key in result})
        out.update({"verified": not bad, "sim_seconds": result["wall_seconds"],
                    "total_seconds": result["total_seconds"],
                    "simulated_cycles_per_second": out["cycles"] / result["wall_seconds"]})
        return out
    finally:
        mem.close()
