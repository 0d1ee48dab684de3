"""Where a run's embedding rows live (`Placement`): the trainer
(`hotline.train.trainer.Trainer`) holds one; per step its `hotline.nn.EmbeddingBagCollection`
(over the mode's store) pools the batch's bags for the DLRM, and the backward updates the rows
(the fused sparse optimizer and the write-back, in the collection). The modes are
`hotline.nn` stores:

- ``baseline``: `HostStore` (host memory, the CPU gathers; `host_store`);
- ``device-only``: `DeviceStore` (one tensor on the device; `device_store`);
- ``hotline``: `HotlineStore` (hot rows on the device at their CAM slots, cold rows through
  the accelerator; `hotline.hotline_store`).
"""
from dataclasses import dataclass

import numpy as np
import torch

from hotline.contract.keys import MAX_ROWS
from hotline.nn.collection import EmbeddingBagCollection, TableConfig
from hotline.nn.inputs import fbgemm_layout
from hotline.nn.stores import DeviceStore, HostStore
from hotline.nn.timing import HostClock

from .rows import check_fits, init_table


@dataclass
class StepBatch:
    """One step's lookups in FBGEMM's layout (``indices``: rows within their tables,
    ``offsets`` [F * B + 1]) for the collection, and, with split micro-batches, the samples
    trained first (``early``: the popular ones) and the others (None: one pass)."""
    indices: torch.Tensor
    offsets: torch.Tensor
    early: np.ndarray | None = None
    late: np.ndarray | None = None


def step_batch(run, a, b) -> StepBatch:
    """Samples [a, b) of ``run`` (a `Trainer`) in FBGEMM's layout."""
    keys, lengths = run.batch_arrays(a, b)
    keys, offsets = fbgemm_layout(lengths, np.asarray(keys))
    return StepBatch(keys & (MAX_ROWS - 1), offsets)


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
    """A run's rows in a `hotline.nn` store (`store`, made by `setup`) and the collection over
    it (`ebc`), for the run ``run`` (the `Trainer`: data, config, row layout, torch device,
    ranks and the run's traffic counters). ``kind``: "host" (``baseline``), "device"
    (``device-only``) or "hotline" (the collection announces each batch's lookups to the store,
    and the next batch's ahead, so the accelerator fragments and gathers it while this one
    trains; with split micro-batches the popular samples train first). The collection's kernel
    is FBGEMM's in place where it applies (hotline, CPU, one process, SGD: `hotline.nn`'s
    ``kernel="auto"``)."""

    hot_keys = schedule = None   # hotline: the hot set and its schedule (set on a resume)

    def __init__(self, run, kind):
        self.run, self.kind, self.store, self.ebc = run, kind, None, None
        self.announced = None    # (j, StepBatch) of the batch given to the collection ahead
        self.split = False       # hotline: the popular micro-batch first
        self.seen = (0, 0, 0)    # hotline: the store's bytes and loads already counted
        self.clock = None        # baseline, device-only: the host's row work (`HostClock`)
        self.moved = (0, 0)      # baseline: the host store's rows read and written, counted

    def setup(self) -> None:
        """Allocate and initialise the tables (and open the device); the collection over
        them."""
        run = self.run
        if self.kind == "hotline":
            from .hotline import hotline_store  # lazy: the Device API, for this mode only
            self.store = hotline_store(run, self.hot_keys, self.schedule)
            self.schedule, self.hot_keys = self.store.schedule, self.store.hot_keys
            self.split = run.cfg.micro_batches == "split"
            self._count_store()
        else:
            self.store = host_store(run) if self.kind == "host" else device_store(run)
        name, options = run.sparse
        tables = [TableConfig(f"t{t}", int(n), run.cfg.dim, [f"f{t}"])
                  for t, n in enumerate(run.data.table_sizes)]
        self.ebc = EmbeddingBagCollection(tables, placement=self.store, optimizer=name,
                                          lr=run.cfg.lr, device=run.dev,
                                          optimizer_options=options)
        if self.kind != "hotline":
            # what an accelerator takes off the host: checking, finding, gathering and
            # putting back rows
            self.clock = HostClock(self.store, self.ebc)

    def resume_at(self, step) -> None:
        """The run goes on at global step ``step`` (a resume)."""
        if self.kind == "hotline":
            self.store.step = step

    def forward(self, j, a, b, prefetch) -> tuple[torch.Tensor, StepBatch]:
        """(the pooled bags [b - a, F, dim] of batch ``j``, this rank's samples [a, b); its
        `StepBatch`). The backward of the bags updates the rows. ``prefetch``: the next batch
        may be started now."""
        run = self.run
        held, self.announced = self.announced, None
        batch = held[1] if held is not None and held[0] == j else step_batch(run, a, b)
        pooled = self.ebc(batch.indices, batch.offsets)
        if self.split:
            batch.early = self.store.popular
            batch.late = np.setdiff1d(np.arange(b - a), batch.early, assume_unique=True)
        if self.kind == "hotline" and prefetch and j + 1 < run.num_batches():
            # Double buffering: the device fragments and gathers batch j + 1 while j trains
            # (the store does not send it across a hot-set change)
            nxt = step_batch(run, *run.my_range(*run.batch_range(j + 1)))
            self.ebc.prefetch(nxt.indices, nxt.offsets)
            self.announced = (j + 1, nxt)
        return pooled.view(b - a, run.F, run.cfg.dim), batch

    def finish(self, loss_sum) -> float:
        """After the step's backward (the rows updated): the traffic counted. Returns
        ``loss_sum`` summed over the ranks."""
        run = self.run
        if self.kind == "hotline":
            self._count_store()
        elif self.kind == "host":
            moved = self.store.moved["read"], self.store.moved["written"]
            run.bytes_h2d += (moved[0] - self.moved[0]) * run.lay.nbytes
            run.bytes_d2h += (moved[1] - self.moved[1]) * run.lay.nbytes
            self.moved = moved
        if self.clock is not None:
            run.host_rows_seconds += self.clock.seconds
            self.clock.seconds = 0.0
        # the loss's all-reduce also ends the step: every rank's row writes are done
        return run.sum_over_ranks(loss_sum)

    def pooled(self, s0, s1) -> torch.Tensor:
        """Evaluation: the pooled bags [s1 - s0, F, dim] of samples [s0, s1) from wherever
        the rows live now (past the accelerator's pipeline; under no_grad)."""
        batch = step_batch(self.run, s0, s1)
        counted = self.clock.seconds if self.clock is not None else 0.0
        out = self.ebc(batch.indices, batch.offsets).view(s1 - s0, self.run.F, self.run.cfg.dim)
        if self.clock is not None:   # not the steps' row work
            self.clock.seconds = counted
        return out

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
