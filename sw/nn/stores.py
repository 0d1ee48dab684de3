"""Placements: where a collection's rows live (`RowStore`), with the "host" and "device"
placements (`HostStore`, `DeviceStore`). The "hotline" placement is `hotline_store.HotlineStore`.

A row is float32[width]: the embedding weights, then the optimizer state (`layout.RowLayout`),
so a row's state moves with it. Keys follow `hotline.contract.keys`: ``table << ROW_BITS | row``,
as int64 tensors.

Data parallel (``ranks``, a `dist.Ranks`): each rank gathers the rows of its shard of the
batch; `RowStore.update` sums the gradients over the ranks, so every row any rank touched gets
one update per step. `HostStore`: one host memory file per node, shared by its ranks; a row is
updated by its owner rank. `DeviceStore`: a replica per rank, every replica updated alike.
"""
import abc
import math

import numpy as np
import torch

from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, ROW_BITS
from hotline.host.host_memory import HostMemory, Window

from .layout import RowLayout


class RowStore(abc.ABC):
    """Where every table's rows live (all tables of one collection). A row: float32[width] =
    weights then optimizer state. Keys: hotline.contract.keys layout (table << ROW_BITS | row),
    int64 tensors."""
    width: int              # floats per row (RowLayout.floats)
    device: torch.device    # where gather() returns rows and scatter() takes them
    #: whether `prefetch` wants every batch's lookups, sample by sample (the collection then
    #: announces a batch that was not prefetched before gathering it)
    counts_lookups = False

    def prefetch(self, keys: torch.Tensor, lengths=None) -> None:
        """The NEXT batch's keys (all lookups, batch order, duplicates kept) and, optionally,
        its lookups per sample; default: nothing."""

    @abc.abstractmethod
    def gather(self, keys: torch.Tensor) -> torch.Tensor:
        """This batch's unique keys (sorted ascending) -> their rows [n, width], a copy the
        caller may modify."""

    def read(self, keys: torch.Tensor) -> torch.Tensor:
        """The current rows of unique ``keys`` (ascending), with no other effect (evaluation);
        default: `gather`, where that has none."""
        return self.gather(keys)

    @abc.abstractmethod
    def scatter(self, keys: torch.Tensor, rows: torch.Tensor) -> None:
        """The keys of the last gather and their updated rows; called once per gather, before
        the next gather."""

    def update(self, keys: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor,
               optimizer) -> int:
        """The backward of the last gather: ``optimizer`` (a `RowOptimizer`) steps ``rows``
        (of ``keys``) by their gradients ``grad`` [n, dim], and the rows go back (`scatter`).
        Returns the rows this rank wrote. A data-parallel store sums the gradients over the
        ranks first."""
        optimizer.apply(rows, grad)
        self.scatter(keys, rows)
        return len(keys)

    @abc.abstractmethod
    def read_table(self, table: int) -> torch.Tensor:
        """[rows_t, width] on the CPU: the current full table (hot rows written back)."""

    @abc.abstractmethod
    def write_table(self, table: int, rows: torch.Tensor) -> None:
        """Replace the whole table (state_dict loading)."""

    def close(self) -> None:
        """Release what the store holds (a device, host memory); default: nothing."""

    def _check_table(self, table: int, rows=None) -> int:
        """``table`` as an index of ``table_rows``; ``rows`` (if given) must fill it."""
        n = len(self.table_rows)
        if not 0 <= int(table) < n:
            raise HotlineError(f"table {table}: the store has tables 0..{n - 1}")
        t = int(table)
        if rows is not None and tuple(rows.shape) != (int(self.table_rows[t]), self.width):
            raise HotlineError(f"table {t}: rows of shape {tuple(rows.shape)} given, the table "
                               f"holds ({int(self.table_rows[t])}, {self.width})")
        return t


class HostStore(RowStore):
    """The "host" placement: every table in host memory, one `HostMemory` file; each table a
    window on row boundaries of one float32 [rows, width] view (a batch's gather is one
    index), its base 4 KiB-aligned for the DMA; ``extra_bytes`` after the tables (the
    "hotline" placement's staging banks). `gather` returns rows on ``device``.

    Data parallel (``ranks``): one file per node, made by the node's first rank and mapped by
    the others; over several nodes each node's file holds its part of the rows (the rest is
    never touched: a sparse file), and a gather of another node's rows asks its owner (a
    collective: every rank gathers). `update` writes a row once, by its owner rank, with the
    gradients summed over the ranks (`Ranks.owner_sum`), then waits for every rank's writes.
    """

    def __init__(self, table_rows, layout: RowLayout, device="cpu", *, extra_bytes=0,
                 ranks=None):
        self.width, self.layout = layout.floats, layout
        self.device = torch.device(device)
        self.table_rows = [int(n) for n in table_rows]
        self.ranks = ranks
        nb = layout.nbytes
        self.align = self.alignment(layout)
        need = self.bytes_needed(self.table_rows, layout, extra_bytes)
        self.writer = ranks is None or ranks.local_rank == 0   # writes this node's shared rows
        # over several nodes a node's file is mostly never touched: sparse, not in RAM
        whole = ranks is None or ranks.nodes == 1
        self.memory = HostMemory(need, in_ram=whole) if self.writer else None
        if ranks is not None:
            path = ranks.node_lead(str(self.memory.path) if self.writer else None)
            self.memory = self.memory or HostMemory(need, path)
        self.windows = [self.memory.alloc(n * nb, self.align, name=f"table{t}")
                        for t, n in enumerate(self.table_rows)]
        nrows = self.memory.size // nb
        self.host_rows = self.memory.view(Window(0, nrows * nb, "rows"), np.float32,
                                          (nrows, self.width))
        self.rows = torch.from_numpy(self.host_rows)   # the same memory
        self.row_base = np.array([w.base // nb for w in self.windows], np.int64)
        self._row_base = torch.from_numpy(self.row_base)
        self.split_rows = ranks is not None and ranks.nodes > 1
        if self.split_rows:
            ranks.row_space = nrows
        # rows gathered to ``device`` and written back by this rank (`hotline train`'s traffic)
        self.moved = {"read": 0, "written": 0}

    @staticmethod
    def alignment(layout: RowLayout) -> int:
        """Window alignment: whole rows of one view, 4 KiB (DMA-friendly bases)."""
        return math.lcm(4096, layout.nbytes)

    @classmethod
    def bytes_needed(cls, table_rows, layout: RowLayout, extra_bytes=0) -> int:
        """The host memory a store of these tables takes (windows rounded to their alignment)."""
        align = cls.alignment(layout)
        up = lambda n: -(-int(n) // align) * align
        return sum(up(int(n) * layout.nbytes) for n in table_rows) + up(extra_bytes)

    # -- rows by id (a row's place in the one view) -------------------------------------
    def rows_of(self, keys) -> np.ndarray:
        """The row id (in the one view) of each key (numpy)."""
        keys = np.asarray(keys)
        t = (keys >> ROW_BITS).astype(np.int64)
        return self.row_base[t] + (keys & (MAX_ROWS - 1)).astype(np.int64)

    def read_rows(self, ids) -> torch.Tensor:
        """Rows ``ids`` (numpy int64) of this node's memory, a CPU copy."""
        return torch.from_numpy(self.host_rows[ids])

    def read_ids(self, ids) -> torch.Tensor:
        """Rows ``ids`` (numpy int64), a CPU copy; split over nodes, from their owners (a
        collective)."""
        if self.split_rows:
            return self.ranks.fetch(ids, self.read_rows)
        return self.read_rows(ids)

    def write_rows(self, ids, rows) -> None:
        """Rows ``ids`` (numpy int64) of this node's memory from ``rows`` (a tensor)."""
        self.host_rows[ids] = rows.detach().cpu().numpy()

    def write_replicated(self, ids, rows) -> None:
        """Rows ``ids`` that every rank holds alike (a replica's) into host memory: by one
        rank (rank 0; split over nodes, each node's first rank its part). Not a collective."""
        if not self.split_rows:
            if self.ranks is None or self.ranks.rank == 0:
                self.host_rows[ids] = rows
        elif self.writer:
            lo, hi = self.ranks.node_rows()
            mine = (ids >= lo) & (ids < hi)
            self.host_rows[ids[mine]] = rows[mine]

    def node_part(self, t) -> tuple[int, int] | None:
        """Rows [lo, hi) of table ``t`` in this node's memory (None: all of them)."""
        if not self.split_rows:
            return None
        lo, hi = self.ranks.node_rows()
        return lo - int(self.row_base[t]), hi - int(self.row_base[t])

    def table_view(self, t) -> np.ndarray:
        """Table ``t`` in host memory (a numpy view; writes go straight in)."""
        return self.host_rows[self.row_base[t]:self.row_base[t] + self.table_rows[t]]

    # -- RowStore -----------------------------------------------------------------------
    def _ids(self, keys: torch.Tensor) -> torch.Tensor:
        keys = keys.to("cpu")
        return self._row_base[keys >> ROW_BITS] + (keys & (MAX_ROWS - 1))

    def gather(self, keys):
        self.moved["read"] += len(keys)
        return self.read(keys)

    def read(self, keys):
        if self.split_rows:
            return self.read_ids(self._ids(keys).numpy()).to(self.device)
        return self.rows.index_select(0, self._ids(keys)).to(self.device)

    def scatter(self, keys, rows):
        self.moved["written"] += len(keys)
        self.rows.index_copy_(0, self._ids(keys), rows.detach().to("cpu"))

    def update(self, keys, rows, grad, optimizer) -> int:
        if self.ranks is None:
            return super().update(keys, rows, grad, optimizer)
        # the owner reads its rows back: it may not have gathered them
        ids, g = self.ranks.owner_sum(self._ids(keys).numpy(), grad.detach().cpu())
        mine = self.read_rows(ids)
        optimizer.apply(mine, g)
        self.write_rows(ids, mine)
        self.moved["written"] += len(ids)
        self.ranks.barrier()   # every owner's rows written before any rank gathers again
        return len(ids)

    def read_table(self, table):
        """Split over nodes: a collective; rank 0 gets the table, the others no rows."""
        t = self._check_table(table)
        if not self.split_rows:
            return torch.from_numpy(np.array(self.table_view(t)))
        ids = (self.row_base[t] + np.arange(self.table_rows[t]) if self.ranks.rank == 0
               else np.zeros(0, np.int64))
        return self.ranks.fetch(ids, self.read_rows)

    def write_table(self, table, rows):
        """Data parallel: every rank calls it with the same rows (a collective)."""
        t = self._check_table(table, rows)
        if self.writer:   # each node's first rank: the node's part
            lo, hi = self.node_part(t) or (0, self.table_rows[t])
            lo, hi = max(lo, 0), min(hi, self.table_rows[t])
            if lo < hi:
                self.table_view(t)[lo:hi] = rows[lo:hi].detach().cpu().numpy()
        if self.ranks is not None:
            self.ranks.barrier()

    def close(self):
        self.rows = self.host_rows = None
        if self.memory is not None:
            self.memory.close()
            self.memory = None


class DeviceStore(RowStore):
    """The "device" placement: every table in one tensor on ``torch_device``. Data parallel
    (``ranks``): a replica per rank; `update` gives each row any rank touched the gradient
    summed over the ranks, on every rank (`Ranks.all_sum`)."""

    def __init__(self, table_rows, layout: RowLayout, torch_device, *, ranks=None):
        self.width, self.device, self.ranks = layout.floats, torch.device(torch_device), ranks
        self.table_rows = [int(n) for n in table_rows]
        self.starts = np.r_[0, np.cumsum(self.table_rows)].astype(np.int64)
        self._starts = torch.from_numpy(self.starts[:-1]).to(self.device)
        self.rows = torch.zeros(int(self.starts[-1]), self.width, device=self.device)

    def _ids(self, keys: torch.Tensor) -> torch.Tensor:
        keys = keys.to(self.device)
        return self._starts[keys >> ROW_BITS] + (keys & (MAX_ROWS - 1))

    def gather(self, keys):
        return self.rows.index_select(0, self._ids(keys))

    def scatter(self, keys, rows):
        self.rows.index_copy_(0, self._ids(keys), rows.detach().to(self.device))

    def update(self, keys, rows, grad, optimizer) -> int:
        if self.ranks is None:
            return super().update(keys, rows, grad, optimizer)
        ids, g = self.ranks.all_sum(self._ids(keys).cpu().numpy(), grad.detach().cpu(),
                                    universe=len(self.rows))
        idx = torch.from_numpy(ids).to(self.device)
        touched = self.rows.index_select(0, idx)
        optimizer.apply(touched, g.to(self.device))
        self.rows.index_copy_(0, idx, touched)
        return len(ids)

    def _table(self, t) -> torch.Tensor:
        return self.rows[int(self.starts[t]):int(self.starts[t + 1])]

    def read_table(self, table):
        return self._table(self._check_table(table)).to("cpu", copy=True)

    def write_table(self, table, rows):
        self._table(self._check_table(table, rows)).copy_(rows.detach())

    def close(self):
        self.rows = None
