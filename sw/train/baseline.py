"""``baseline`` mode: every table in host memory (`HostMemory` float32 views). Per mini-batch
the CPU finds the unique rows, gathers them and ships them to the torch device; after the
optimizer step the updated rows go back (Intel-optimised hybrid DLRM style).

`UniqueRowsTrainer` is the step it shares with ``device-only`` (`device_only.py`): only where
the rows are stored differs.
"""
import math
import time

import numpy as np
import torch

from hotline.contract.keys import MAX_ROWS, ROW_BITS
from hotline.host.host_memory import HostMemory, Window

from .rows import check_fits, init_table
from .trainer import Trainer


class UniqueRowsTrainer(Trainer):
    """baseline and device-only: per batch, the unique rows are gathered into one tensor,
    trained on as one batch, and written back. Subclasses supply `gather` and `put`, and
    ``row_base`` (each table's first row in the storage)."""

    def global_rows(self, keys) -> np.ndarray:
        """The storage row of each key."""
        t = (keys >> np.uint32(ROW_BITS)).astype(np.int64)
        return self.row_base[t] + (keys & np.uint32(MAX_ROWS - 1)).astype(np.int64)

    def train_batch(self, j, prefetch) -> float:
        t0 = time.perf_counter()
        s0, s1 = self.batch_range(j)
        a, b = self.my_range(s0, s1)
        keys, lengths = self.batch_arrays(a, b)
        uniq, inv = np.unique(self.global_rows(keys), return_inverse=True)
        rows = self.leaf(self.gather(uniq))
        t1 = time.perf_counter()
        dense, label = self.tensors(a, b)
        self.opt.zero_grad(set_to_none=True)
        bags = None if self.data.single_hot else self.select(lengths, np.arange(b - a))[1]
        loss = self.loss_sum(rows, inv, bags, dense, label)
        (loss / (s1 - s0)).backward()
        self.dense_step()
        if self.ranks is None:
            self.update_rows(rows.data, rows.grad)
            t2 = time.perf_counter()
            self.put(uniq, rows.data)
        else:
            t2 = time.perf_counter()
            self.update_shared_rows(uniq, rows.grad if rows.grad is not None
                                    else torch.zeros_like(rows))
        # what an accelerator takes off the host: finding, gathering and putting back rows
        self.host_rows_seconds += t1 - t0 + time.perf_counter() - t2
        # the loss's all-reduce also ends the step: every rank's row writes are done
        return self.global_loss(loss.detach(), s1 - s0)

    def update_shared_rows(self, uniq, grad) -> None:
        """Data-parallel: each row any rank touched gets one update, with the gradient
        summed over the ranks: by its owner in host memory (`Ranks.owner_sum`)."""
        ids, g = self.ranks.owner_sum(uniq, grad.cpu())
        rows = self.read_rows(ids)
        self.update_rows(rows, g)
        self.put(ids, rows)

    def eval_rows(self, keys) -> tuple[torch.Tensor, np.ndarray]:
        uniq, inv = np.unique(self.global_rows(keys), return_inverse=True)
        return self.gather(uniq, count=False), inv


class BaselineTrainer(UniqueRowsTrainer):
    """Tables in host memory; the CPU gathers each batch's unique rows and ships them."""

    def setup(self, staging_bytes=0) -> None:
        """Host memory for the tables (and ``staging_bytes`` more after them: hotline's)."""
        d, lay = self.data, self.lay
        need = sum(-(-int(r) * lay.nbytes // self.align) * self.align for r in d.table_sizes)
        need += -(-staging_bytes // self.align) * self.align
        check_fits("host memory", need, self.host_limit(), d)
        # data-parallel: one memory file per node, made by the node's first rank and mapped
        # by the others; over several nodes each node's file holds its part of the rows (the
        # rest of it is never touched: a sparse file)
        r, first = self.ranks, self.node_first
        self.memory = HostMemory(need) if first else None
        if r is not None:
            path = r.node_lead(str(self.memory.path) if first else None)
            self.memory = self.memory or HostMemory(need, path)
        self.windows = [self.memory.alloc(int(r) * lay.nbytes, self.align, name=f"table{t}")
                        for t, r in enumerate(d.table_sizes)]
        nrows = self.memory.size // lay.nbytes
        self.host_rows = self.memory.view(Window(0, nrows * lay.nbytes, "rows"), np.float32,
                                          (nrows, lay.floats))
        self.row_base = np.array([w.base // lay.nbytes for w in self.windows], np.int64)
        self.split_rows = r is not None and r.nodes > 1
        if self.split_rows:
            r.row_space = nrows
        if first:
            self.phase(f"initialising {int(d.table_sizes.sum()):,} table rows in host memory")
            for t in range(d.num_tables):
                init_table(self.cfg.seed, t, int(d.table_sizes[t]), lay, self.table_view(t),
                           self.node_part(t))
        if r is not None:
            r.barrier()

    def node_part(self, t) -> tuple[int, int] | None:
        """Rows [lo, hi) of table ``t`` in this node's memory (None: all of them)."""
        if not self.split_rows:
            return None
        lo, hi = self.ranks.node_rows()
        return lo - int(self.row_base[t]), hi - int(self.row_base[t])

    @property
    def collective_reads(self) -> bool:
        return self.split_rows

    def read_rows(self, ids) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.host_rows[ids]))

    @property
    def align(self) -> int:
        """Window alignment: tables start on row boundaries of one [rows, floats] view of the
        whole memory, so a batch's gather is a single fancy index; 4 KiB as DMA-friendly
        bases."""
        return math.lcm(4096, self.lay.nbytes)

    def table_view(self, t) -> np.ndarray:
        r = int(self.data.table_sizes[t])
        return self.host_rows[self.row_base[t]:self.row_base[t] + r]

    def gather(self, uniq, count=True) -> torch.Tensor:
        """The rows ``uniq`` on the torch device (tables split over nodes: from their owners,
        a collective)."""
        if count:
            self.bytes_h2d += len(uniq) * self.lay.nbytes
        if self.split_rows:
            return self.ranks.fetch(uniq, self.read_rows).to(self.dev)
        return self.read_rows(uniq).to(self.dev)

    def write_replicated(self, ids, rows) -> None:
        """Rows ``ids`` that every rank holds alike (the hot replicas) into host memory: by
        rank 0, or with the tables split over nodes by each node's first rank, its part. Not
        a collective."""
        if not self.split_rows:
            if self.lead:
                self.host_rows[ids] = rows
        elif self.node_first:
            lo, hi = self.ranks.node_rows()
            mine = (ids >= lo) & (ids < hi)
            self.host_rows[ids[mine]] = rows[mine]

    def put(self, uniq, rows) -> None:
        self.bytes_d2h += len(uniq) * self.lay.nbytes
        self.host_rows[uniq] = rows.cpu().numpy()

    def tables(self) -> list[np.ndarray]:
        if not self.split_rows:
            return [np.array(self.table_view(t)) for t in range(self.data.num_tables)]
        # split over nodes: rank 0 fetches every row from its owner (a collective)
        sizes = self.data.table_sizes
        ids = (np.concatenate([b + np.arange(int(n)) for b, n in zip(self.row_base, sizes)])
               if self.lead else np.zeros(0, np.int64))
        rows = self.ranks.fetch(ids, self.read_rows).numpy()
        return np.split(rows, np.cumsum(sizes)[:-1]) if self.lead else []

    def load_tables(self, tables) -> None:
        if self.node_first:   # each node's first rank: the node's part
            for t, a in enumerate(tables):
                lo, hi = self.node_part(t) or (0, len(a))
                lo, hi = max(lo, 0), min(hi, len(a))
                if lo < hi:
                    self.table_view(t)[lo:hi] = a[lo:hi]
        if self.ranks is not None:
            self.ranks.barrier()

    def close(self) -> None:
        self.host_rows = None
        if getattr(self, "memory", None) is not None:
            self.memory.close()
