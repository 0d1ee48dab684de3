"""Where a run's embedding rows live (`Placement`): the trainer
(`hotline.train.trainer.Trainer`) holds one and asks it, per step, for the batch's rows
(`StepRows`) and gives it the rows' gradients back (`Placement.finish`: the fused sparse
update and the write-back). The modes are `hotline.nn` stores:

- ``baseline``: `HostStore` (host memory, the CPU gathers; `host_store`);
- ``device-only``: `DeviceStore` (one tensor on the device; `device_store`);
- ``hotline``: `HotlineStore` (hot rows on the device at their CAM slots, cold rows through
  the accelerator; `hotline.hotline_store`).
"""
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hotline.nn.stores import DeviceStore, HostStore

from .rows import check_fits, init_table


@dataclass
class StepRows:
    """One step's rows: ``rows`` (leaves that collect their gradients; ``lookup_row``: each of
    this rank's lookups' row). ``early``, ``late``: the samples trained first and the others
    (split micro-batches; None: one pass over the batch). ``state``: the placement's own, for
    `Placement.finish`."""
    rows: torch.Tensor
    lookup_row: np.ndarray
    early: np.ndarray | None = None
    late: np.ndarray | None = None
    state: Any = None


def host_store(run, extra_bytes=0) -> HostStore:
    """The run's tables in host memory (and ``extra_bytes`` after them), DLRM-initialised
    (`init_table`) by each node's first rank."""
    d, lay = run.data, run.lay
    check_fits("host memory", HostStore.bytes_needed(d.table_sizes, lay, extra_bytes),
               run.host_limit(), d)
    store = HostStore(d.table_sizes, lay, run.dev, extra_bytes=extra_bytes, ranks=run.ranks)
    if store.writer:
        run.phase(f"initialising {int(d.table_sizes.sum()):,} table rows in host memory")
        for t in range(d.num_tables):
            init_table(run.cfg.seed, t, int(d.table_sizes[t]), lay, store.table_view(t),
                       store.node_part(t))
    if run.ranks is not None:
        run.ranks.barrier()
    return store


def device_store(run) -> DeviceStore:
    """The run's tables in one tensor on the torch device, DLRM-initialised (`init_table`)."""
    d, lay = run.data, run.lay
    total = int(d.table_sizes.sum())
    check_fits(f"{run.dev.type} device memory", total * lay.nbytes, run.device_limit(), d)
    store = DeviceStore(d.table_sizes, lay, run.dev, ranks=run.ranks)
    run.phase(f"initialising {total:,} table rows")
    for t in range(d.num_tables):
        rows = np.empty((int(d.table_sizes[t]), lay.floats), np.float32)
        init_table(run.cfg.seed, t, len(rows), lay, rows)
        store.write_table(t, torch.from_numpy(rows))
    run.bytes_h2d += total * lay.nbytes
    return store


def read_tables(store) -> list[np.ndarray]:
    """Every table of ``store`` (split over nodes: a collective, rank 0's)."""
    return [store.read_table(t).numpy() for t in range(len(store.table_rows))]


def write_tables(store, tables) -> None:
    """Replace every table of ``store`` (data parallel: every rank, the same tables)."""
    for t, a in enumerate(tables):
        store.write_table(t, torch.from_numpy(np.ascontiguousarray(a)))


class Placement:
    """A run's rows in a `hotline.nn` store (`store`, made by `setup`), for the run ``run``
    (the `Trainer`: data, config, row layout, torch device, ranks, the sparse optimizer and
    the run's traffic counters). Per batch the unique rows are gathered into one tensor,
    trained on as one batch, updated and written back (`RowStore.update`). ``kind``: "host"
    (``baseline``), "device" (``device-only``) or "hotline" (the store is told each batch's
    lookups, and the next batch's ahead, so the accelerator fragments and gathers it while
    this one trains; with split micro-batches the popular samples train first)."""

    hot_keys = schedule = None   # hotline: the hot set and its schedule (set on a resume)

    def __init__(self, run, kind):
        self.run, self.kind, self.store = run, kind, None
        self.announced = None    # hotline: the batch given to the store ahead
        self.split = False       # hotline: the popular micro-batch first
        self.seen = (0, 0, 0)    # hotline: the store's bytes and loads already counted

    def setup(self) -> None:
        """Allocate and initialise the tables (and open the device)."""
        run = self.run
        if self.kind == "hotline":
            from .hotline import hotline_store  # lazy: the Device API, for this mode only
            self.store = hotline_store(run, self.hot_keys, self.schedule)
            self.schedule, self.hot_keys = self.store.schedule, self.store.hot_keys
            self.split = run.cfg.micro_batches == "split"
            self._count_store()
        else:
            self.store = host_store(run) if self.kind == "host" else device_store(run)

    def resume_at(self, step) -> None:
        """The run goes on at global step ``step`` (a resume)."""
        if self.kind == "hotline":
            self.store.step = step

    def _traffic(self, rows) -> int:
        """Bytes of ``rows`` rows between host memory and the torch device, where the trainer
        moves them itself (baseline)."""
        return rows * self.run.lay.nbytes if self.kind == "host" else 0

    def _announce(self, keys, lengths) -> None:
        """Hotline: give the store a batch's lookups (``keys``, sample by sample, as
        `Trainer.batch_arrays` gives them, with ``lengths``): the learner counts lookups, the
        popular split samples."""
        self.store.prefetch(torch.from_numpy(np.asarray(keys, np.int64)), lengths.sum(axis=1))

    def rows(self, j, a, b, prefetch) -> StepRows:
        """The rows of batch ``j`` (this rank's samples [a, b)) as leaves that collect their
        gradients. ``prefetch``: the next batch may be started now."""
        run = self.run
        t0 = time.perf_counter()
        keys, lengths = run.batch_arrays(a, b)
        if self.kind == "hotline" and self.announced != j:
            self._announce(keys, lengths)
        uniq, inv = np.unique(keys, return_inverse=True)
        k = torch.from_numpy(uniq.astype(np.int64))
        rows = self.store.gather(k).requires_grad_(True)
        step = StepRows(rows, inv, state=k)
        if self.kind != "hotline":
            run.bytes_h2d += self._traffic(len(k))
            # what an accelerator takes off the host: finding, gathering and putting back rows
            run.host_rows_seconds += time.perf_counter() - t0
            return step
        if self.split:
            step.early = self.store.popular
            step.late = np.setdiff1d(np.arange(b - a), step.early, assume_unique=True)
        # Double buffering: the device fragments and gathers batch j + 1 while j trains (the
        # store does not send it across a hot-set change)
        self.announced = None
        if prefetch and j + 1 < run.num_batches():
            self._announce(*run.batch_arrays(*run.my_range(*run.batch_range(j + 1))))
            self.announced = j + 1
        return step

    def finish(self, step, loss_sum) -> float:
        """After the step's backward: the sparse update of its rows (their gradients summed
        over the ranks) and the write-back. Returns ``loss_sum`` summed over the ranks."""
        run, rows, k = self.run, step.rows, step.state
        grad = rows.grad if rows.grad is not None else torch.zeros_like(rows)
        if run.ranks is None:
            run.update_rows(rows.data, grad)
            t = time.perf_counter()
            self.store.scatter(k, rows.data)
            written = len(k)
        else:   # the gradients summed over the ranks, in the store
            t = time.perf_counter()
            written = self.store.update(k, rows.data, grad[:, :run.cfg.dim], run.sparse)
        if self.kind == "hotline":
            self._count_store()
        else:
            run.bytes_d2h += self._traffic(written)
            run.host_rows_seconds += time.perf_counter() - t
        # the loss's all-reduce also ends the step: every rank's row writes are done
        return run.sum_over_ranks(loss_sum)

    def _count_store(self) -> None:
        """Hotline: the store's traffic since the last count into the run's, and the learned
        sets it loaded into the JSON's ``hot_loads`` (with their coverage)."""
        from .hotline import coverage_record  # lazy: (see setup)
        t, (h2d, d2h, loads) = self.store.totals, self.seen
        self.run.bytes_h2d += t["bytes_h2d"] - h2d
        self.run.bytes_d2h += t["bytes_d2h"] - d2h
        for load in self.store.loads[loads:]:
            if load["source"] == "learned":
                self.schedule.records.append(coverage_record(self.run, load))
        self.seen = (t["bytes_h2d"], t["bytes_d2h"], len(self.store.loads))
        self.hot_keys = self.store.hot_keys

    def eval_rows(self, keys) -> tuple[torch.Tensor, np.ndarray]:
        """(rows tensor, lookup -> row index) for evaluation, from wherever rows live now."""
        uniq, inv = np.unique(keys, return_inverse=True)
        return self.store.read(torch.from_numpy(uniq.astype(np.int64))), inv

    def tables(self) -> list[np.ndarray]:
        """The current tables, one float32 array [rows, layout floats] per table (copies)."""
        return read_tables(self.store)

    def load_tables(self, tables) -> None:
        """Replace the tables (a checkpoint's)."""
        write_tables(self.store, tables)
        if self.kind == "hotline":   # a reload, not traffic
            self.seen = (self.store.totals["bytes_h2d"], *self.seen[1:])

    @property
    def collective_reads(self) -> bool:
        """Whether reading rows takes every rank (host tables split over nodes)."""
        host = self.store.host if self.kind == "hotline" else self.store
        return getattr(host, "split_rows", False)

    def quiesce(self) -> None:
        """Every rank's writes to host memory done (data parallel: a collective)."""
        if self.kind == "hotline":
            self.store.dev.drain()
        if self.run.ranks is not None:
            self.run.ranks.barrier()

    def sync(self, count=False) -> None:
        """Hotline: the device's scatters done; ``count``: the hot rows' write-back to host
        memory at the end of the run counts as traffic (evaluation and checkpoints read them
        from the hot table)."""
        if self.kind == "hotline":
            self.store.dev.drain()
            if count and self.run.lead:
                self.run.bytes_d2h += len(self.store.placement.keys) * self.run.lay.nbytes

    def device_time(self) -> tuple[float, float]:
        """The accelerator's (busy, waited-for) seconds since the run (re)started."""
        if self.kind != "hotline":
            return 0.0, 0.0
        live = self.store.dev.time
        return live["busy_seconds"], live["wait_seconds"]

    def device_counters(self) -> dict:
        """The device's counters (data parallel: summed over the ranks' devices)."""
        if self.kind != "hotline":
            return {}
        c = self.store.dev.counters()
        if self.run.ranks is not None:
            c = dict(zip(c, (int(v) for v in self.run.ranks.sum(list(c.values())))))
        return c

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
