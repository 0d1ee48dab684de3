"""Where a run's embedding rows live, one placement per mode (`Placement`): the trainer
(`hotline.train.trainer.Trainer`) holds one and asks it, per step, for the batch's rows
(`StepRows`) and gives it the rows' gradients back (`Placement.finish`: the fused sparse
update and the write-back).

- ``baseline``: `UniqueRows` over `hotline.nn`'s `HostStore` (host memory, the CPU gathers);
- ``device-only``: `UniqueRows` over `hotline.nn`'s `DeviceStore` (one tensor on the device);
- ``hotline``: `hotline.HotlinePlacement` (hot rows on the device at their CAM slots, cold rows
  through the accelerator; the rows' master copy in a `HostStore`).
"""
import abc
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from hotline.nn.stores import DeviceStore, HostStore

from .rows import check_fits, init_table


@dataclass
class StepRows:
    """One step's rows. The batch trains on R = [``first`` | rest] (``lookup_row``: each of
    this rank's lookups' row of R); ``rest()`` gives the rows still in flight (a leaf tensor;
    None: there are none). ``early``, ``late``: the samples trained on ``first`` alone before
    ``rest`` is waited for, and the others (split micro-batches; None: one pass over the
    batch). ``state``: the placement's own, for `Placement.finish`."""
    first: torch.Tensor
    lookup_row: np.ndarray
    rest: Callable[[], torch.Tensor] | None = None
    early: np.ndarray | None = None
    late: np.ndarray | None = None
    state: Any = None
    second: torch.Tensor | None = None   # ``rest()``, once waited for

    def whole(self) -> torch.Tensor:
        """R: ``first``, then the rows in flight (waited for here, once)."""
        if self.rest is None:
            return self.first
        if self.second is None:
            self.second = self.rest()
        return torch.cat([self.first, self.second])


class Placement(abc.ABC):
    """A mode's embedding storage for the run ``run`` (the `Trainer`: data, config, row
    layout, torch device, ranks, the sparse optimizer and the run's traffic counters)."""

    def __init__(self, run):
        self.run = run

    @abc.abstractmethod
    def setup(self) -> None:
        """Allocate and initialise the tables (and open the device)."""

    @abc.abstractmethod
    def rows(self, j, a, b, prefetch) -> StepRows:
        """The rows of batch ``j`` (this rank's samples [a, b)) as leaves that collect their
        gradients. ``prefetch``: the next batch may be started now."""

    @abc.abstractmethod
    def finish(self, step: StepRows, loss_sum: float) -> float:
        """After the step's backward: the sparse update of its rows (their gradients summed
        over the ranks) and the write-back. Returns ``loss_sum`` summed over the ranks."""

    @abc.abstractmethod
    def eval_rows(self, keys) -> tuple[torch.Tensor, np.ndarray]:
        """(rows tensor, lookup -> row index) for evaluation, from wherever rows live now."""

    @abc.abstractmethod
    def tables(self) -> list[np.ndarray]:
        """The current tables, one float32 array [rows, layout floats] per table (copies)."""

    @abc.abstractmethod
    def load_tables(self, tables) -> None:
        """Replace the tables (a checkpoint's)."""

    def begin_epoch(self, first_batch) -> None:
        pass

    @property
    def collective_reads(self) -> bool:
        """Whether reading rows takes every rank (host tables split over nodes)."""
        return False

    def quiesce(self) -> None:
        """Every rank's writes to host memory done (data-parallel: a collective)."""
        if self.run.ranks is not None:
            self.run.ranks.barrier()

    def sync(self, count=False) -> None:
        """Make `tables` / `eval_rows` see the latest rows (hotline: hot rows back to host)."""

    def device_time(self) -> tuple[float, float]:
        """The accelerator's (busy, waited-for) seconds since the run (re)started."""
        return 0.0, 0.0

    def device_counters(self) -> dict:
        return {}

    def close(self) -> None:
        pass


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


class UniqueRows(Placement):
    """``baseline`` (``kind`` "host") and ``device-only`` ("device"): per batch the unique
    rows are gathered from a `hotline.nn` store (`HostStore`, `DeviceStore`) into one tensor,
    trained on as one batch, updated and written back (`RowStore.update`)."""

    def __init__(self, run, kind):
        super().__init__(run)
        self.kind, self.store = kind, None

    def setup(self) -> None:
        self.store = host_store(self.run) if self.kind == "host" else device_store(self.run)

    def _traffic(self, rows) -> int:
        """Bytes of ``rows`` rows between host memory and the torch device (device-only: 0)."""
        return rows * self.run.lay.nbytes if self.kind == "host" else 0

    def rows(self, j, a, b, prefetch) -> StepRows:
        run = self.run
        t0 = time.perf_counter()
        keys, _ = run.batch_arrays(a, b)
        uniq, inv = np.unique(keys, return_inverse=True)
        k = torch.from_numpy(uniq.astype(np.int64))
        rows = self.store.gather(k).requires_grad_(True)
        run.bytes_h2d += self._traffic(len(k))
        # what an accelerator takes off the host: finding, gathering and putting back rows
        run.host_rows_seconds += time.perf_counter() - t0
        return StepRows(rows, inv, state=k)

    def finish(self, step, loss_sum) -> float:
        run, rows, k = self.run, step.first, step.state
        if run.ranks is None:
            run.update_rows(rows.data, rows.grad)
            t = time.perf_counter()
            self.store.scatter(k, rows.data)
            written = len(k)
        else:   # the gradients summed over the ranks, in the store
            t = time.perf_counter()
            grad = rows.grad if rows.grad is not None else torch.zeros_like(rows)
            written = self.store.update(k, rows.data, grad[:, :run.cfg.dim], run.sparse)
        run.bytes_d2h += self._traffic(written)
        run.host_rows_seconds += time.perf_counter() - t
        # the loss's all-reduce also ends the step: every rank's row writes are done
        return run.sum_over_ranks(loss_sum)

    def eval_rows(self, keys) -> tuple[torch.Tensor, np.ndarray]:
        uniq, inv = np.unique(keys, return_inverse=True)
        return self.store.gather(torch.from_numpy(uniq.astype(np.int64))), inv

    def tables(self) -> list[np.ndarray]:
        return read_tables(self.store)

    def load_tables(self, tables) -> None:
        write_tables(self.store, tables)

    @property
    def collective_reads(self) -> bool:
        return getattr(self.store, "split_rows", False)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
