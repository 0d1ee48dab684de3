"""Where a run's embedding rows live, one placement per mode (`Placement`): the trainer
(`hotline.train.trainer.Trainer`) holds one and asks it, per step, for the batch's rows
(`StepRows`) and gives it the rows' gradients back (`Placement.finish`: the fused sparse
update and the write-back).

- ``baseline``: `UniqueRows` over `host_tables.HostTables` (host memory, the CPU gathers);
- ``device-only``: `UniqueRows` over `device_only.DeviceTables` (one tensor on the device);
- ``hotline``: `hotline.HotlinePlacement` (hot rows on the device at their CAM slots, cold rows
  through the accelerator).
"""
import abc
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch


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


class UniqueRows(Placement):
    """``baseline`` and ``device-only``: per batch the unique rows are gathered from
    ``tables`` (`host_tables.HostTables` or `device_only.DeviceTables`) into one tensor,
    trained on as one batch, updated and written back."""

    def __init__(self, run, tables):
        super().__init__(run)
        self.store = tables

    def setup(self) -> None:
        self.store.setup()

    def rows(self, j, a, b, prefetch) -> StepRows:
        t0 = time.perf_counter()
        keys, _ = self.run.batch_arrays(a, b)
        uniq, inv = np.unique(self.store.global_rows(keys), return_inverse=True)
        rows = self.store.gather(uniq).detach().requires_grad_(True)
        # what an accelerator takes off the host: finding, gathering and putting back rows
        self.run.host_rows_seconds += time.perf_counter() - t0
        return StepRows(rows, inv, state=uniq)

    def finish(self, step, loss_sum) -> float:
        run, rows, uniq = self.run, step.first, step.state
        if run.ranks is None:
            run.update_rows(rows.data, rows.grad)
            t = time.perf_counter()
            self.store.put(uniq, rows.data)
        else:
            t = time.perf_counter()
            self.store.update_shared(uniq, rows.grad if rows.grad is not None
                                     else torch.zeros_like(rows))
        run.host_rows_seconds += time.perf_counter() - t
        # the loss's all-reduce also ends the step: every rank's row writes are done
        return run.sum_over_ranks(loss_sum)

    def eval_rows(self, keys) -> tuple[torch.Tensor, np.ndarray]:
        uniq, inv = np.unique(self.store.global_rows(keys), return_inverse=True)
        return self.store.gather(uniq, count=False), inv

    def tables(self) -> list[np.ndarray]:
        return self.store.tables()

    def load_tables(self, tables) -> None:
        self.store.load_tables(tables)

    @property
    def collective_reads(self) -> bool:
        return self.store.collective_reads

    def close(self) -> None:
        self.store.close()
