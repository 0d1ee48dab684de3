"""Placements: where a collection's rows live (`RowStore`), with the "host" and "device"
placements (`HostStore`, `DeviceStore`). The "hotline" placement is `hotline_store.HotlineStore`.

A row is float32[width]: the embedding weights, then the optimizer state (`layout.RowLayout`),
so a row's state moves with it. Keys follow `hotline.contract.keys`: ``table << ROW_BITS | row``,
as int64 tensors.
"""
import abc

import torch

from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, ROW_BITS

from .layout import RowLayout


class RowStore(abc.ABC):
    """Where every table's rows live (all tables of one collection). A row: float32[width] =
    weights then optimizer state. Keys: hotline.contract.keys layout (table << ROW_BITS | row),
    int64 tensors."""
    width: int              # floats per row (RowLayout.floats)
    device: torch.device    # where gather() returns rows and scatter() takes them

    def prefetch(self, keys: torch.Tensor) -> None:
        """The NEXT batch's keys (all lookups, batch order, duplicates kept); default: nothing."""

    @abc.abstractmethod
    def gather(self, keys: torch.Tensor) -> torch.Tensor:
        """This batch's unique keys (sorted ascending) -> their rows [n, width], a copy the
        caller may modify."""

    @abc.abstractmethod
    def scatter(self, keys: torch.Tensor, rows: torch.Tensor) -> None:
        """The keys of the last gather and their updated rows; called once per gather, before
        the next gather."""

    @abc.abstractmethod
    def read_table(self, table: int) -> torch.Tensor:
        """[rows_t, width] on the CPU: the current full table (hot rows written back)."""

    @abc.abstractmethod
    def write_table(self, table: int, rows: torch.Tensor) -> None:
        """Replace the whole table (state_dict loading)."""

    def close(self) -> None:
        """Release what the store holds (a device, host memory); default: nothing."""


class HostStore(RowStore):
    """Every table in one float32 tensor on ``device`` (the CPU: the "host" placement);
    gather is one ``index_select``, scatter one ``index_copy_``."""

    def __init__(self, table_rows: list[int], layout: RowLayout, device="cpu"):
        self.width = layout.floats
        self.device = torch.device(device)
        self.table_rows = list(table_rows)
        starts = [0]
        for n in self.table_rows:
            starts.append(starts[-1] + n)
        self.starts = starts
        self._starts = torch.tensor(starts[:-1], dtype=torch.int64, device=self.device)
        self.rows = torch.zeros(starts[-1], self.width, device=self.device)

    def _flat(self, keys: torch.Tensor) -> torch.Tensor:
        """Keys -> row numbers in the one tensor."""
        keys = keys.to(self.device)
        return self._starts[keys >> ROW_BITS] + (keys & (MAX_ROWS - 1))

    def gather(self, keys):
        return self.rows.index_select(0, self._flat(keys))

    def scatter(self, keys, rows):
        self.rows.index_copy_(0, self._flat(keys), rows.to(self.device))

    def _table(self, table: int) -> torch.Tensor:
        return self.rows[self.starts[table]:self.starts[table + 1]]

    def read_table(self, table):
        return self._table(table).to("cpu", copy=True)

    def write_table(self, table, rows):
        if tuple(rows.shape) != (self.table_rows[table], self.width):
            raise HotlineError(f"table {table}: rows of shape {tuple(rows.shape)} given, the table "
                               f"holds ({self.table_rows[table]}, {self.width})")
        self._table(table).copy_(rows)


class DeviceStore(HostStore):
    """The "device" placement: `HostStore`'s one tensor on the torch device."""

    def __init__(self, table_rows: list[int], layout: RowLayout, torch_device):
        super().__init__(table_rows, layout, device=torch_device)
