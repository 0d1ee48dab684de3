"""The host tables (`HostTables`): every table in host memory (`HostMemory` float32 views),
the storage of the ``baseline`` placement (`placement.UniqueRows`: per mini-batch the CPU
finds the unique rows, gathers them and ships them to the torch device; after the optimizer
step the updated rows go back, Intel-optimised hybrid DLRM style) and the master copy of the
``hotline`` placement's rows.

Data-parallel: one memory file per node, shared by its ranks; over several nodes each node
holds its part of the rows.
"""
import math

import numpy as np
import torch

from hotline.contract.keys import MAX_ROWS, ROW_BITS
from hotline.host.host_memory import HostMemory, Window

from .rows import check_fits, init_table


def global_rows(row_base, keys) -> np.ndarray:
    """The storage row of each key (``row_base``: each table's first row in the storage)."""
    t = (keys >> np.uint32(ROW_BITS)).astype(np.int64)
    return row_base[t] + (keys & np.uint32(MAX_ROWS - 1)).astype(np.int64)


class HostTables:
    """Every table in host memory, laid out as `hotline.nn.layout.RowLayout` says, for the
    run ``run`` (the `Trainer`); ``staging_bytes`` more after the tables (the hotline
    placement's staging banks, one per rank)."""

    def __init__(self, run, staging_bytes=0):
        self.run, self.staging_bytes = run, staging_bytes
        self.memory = self.host_rows = None

    def setup(self) -> None:
        run = self.run
        d, lay = run.data, run.lay
        need = sum(-(-int(r) * lay.nbytes // self.align) * self.align for r in d.table_sizes)
        need += -(-self.staging_bytes // self.align) * self.align
        check_fits("host memory", need, run.host_limit(), d)
        # data-parallel: one memory file per node, made by the node's first rank and mapped
        # by the others; over several nodes each node's file holds its part of the rows (the
        # rest of it is never touched: a sparse file)
        r, first = run.ranks, run.node_first
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
            run.phase(f"initialising {int(d.table_sizes.sum()):,} table rows in host memory")
            for t in range(d.num_tables):
                init_table(run.cfg.seed, t, int(d.table_sizes[t]), lay, self.table_view(t),
                           self.node_part(t))
        if r is not None:
            r.barrier()

    def global_rows(self, keys) -> np.ndarray:
        return global_rows(self.row_base, keys)
    def node_part(self, t) -> tuple[int, int] | None:
        """Rows [lo, hi) of table ``t`` in this node's memory (None: all of them)."""
        if not self.split_rows:
            return None
        lo, hi = self.run.ranks.node_rows()
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
        return math.lcm(4096, self.run.lay.nbytes)

    def table_view(self, t) -> np.ndarray:
        r = int(self.run.data.table_sizes[t])
        return self.host_rows[self.row_base[t]:self.row_base[t] + r]

    def gather(self, uniq, count=True) -> torch.Tensor:
        """The rows ``uniq`` on the torch device (tables split over nodes: from their owners,
        a collective)."""
        run = self.run
        if count:
            run.bytes_h2d += len(uniq) * run.lay.nbytes
        if self.split_rows:
            return run.ranks.fetch(uniq, self.read_rows).to(run.dev)
        return self.read_rows(uniq).to(run.dev)

    def write_replicated(self, ids, rows) -> None:
        """Rows ``ids`` that every rank holds alike (the hot replicas) into host memory: by
        rank 0, or with the tables split over nodes by each node's first rank, its part. Not
        a collective."""
        if not self.split_rows:
            if self.run.lead:
                self.host_rows[ids] = rows
        elif self.run.node_first:
            lo, hi = self.run.ranks.node_rows()
            mine = (ids >= lo) & (ids < hi)
            self.host_rows[ids[mine]] = rows[mine]

    def put(self, uniq, rows) -> None:
        self.run.bytes_d2h += len(uniq) * self.run.lay.nbytes
        self.host_rows[uniq] = rows.cpu().numpy()

    def tables(self) -> list[np.ndarray]:
        run = self.run
        if not self.split_rows:
            return [np.array(self.table_view(t)) for t in range(run.data.num_tables)]
        # split over nodes: rank 0 fetches every row from its owner (a collective)
        sizes = run.data.table_sizes
        ids = (np.concatenate([b + np.arange(int(n)) for b, n in zip(self.row_base, sizes)])
               if run.lead else np.zeros(0, np.int64))
        rows = run.ranks.fetch(ids, self.read_rows).numpy()
        return np.split(rows, np.cumsum(sizes)[:-1]) if run.lead else []

    def load_tables(self, tables) -> None:
        if self.run.node_first:   # each node's first rank: the node's part
            for t, a in enumerate(tables):
                lo, hi = self.node_part(t) or (0, len(a))
                lo, hi = max(lo, 0), min(hi, len(a))
                if lo < hi:
                    self.table_view(t)[lo:hi] = a[lo:hi]
        if self.run.ranks is not None:
            self.run.ranks.barrier()

    def update_shared(self, uniq, grad) -> None:
        """Data-parallel: each row any rank touched gets one update, with the gradient
        summed over the ranks: by its owner in host memory (`Ranks.owner_sum`)."""
        ids, g = self.run.ranks.owner_sum(uniq, grad.cpu())
        rows = self.read_rows(ids)
        self.run.update_rows(rows, g)
        self.put(ids, rows)

    def close(self) -> None:
        self.host_rows = None
        if self.memory is not None:
            self.memory.close()
            self.memory = None
