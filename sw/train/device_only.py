"""``device-only`` mode: every table in one tensor on the torch device (when it fits)."""
import numpy as np
import torch

from .baseline import UniqueRowsTrainer
from .rows import check_fits, init_table


class DeviceOnlyTrainer(UniqueRowsTrainer):
    """Every table in one tensor on the torch device."""

    def setup(self) -> None:
        d, lay = self.data, self.lay
        total = int(d.table_sizes.sum())
        check_fits(f"{self.dev.type} device memory", total * lay.nbytes, self.device_limit(), d)
        self.row_base = np.r_[0, np.cumsum(d.table_sizes)[:-1]].astype(np.int64)
        self.phase(f"initialising {total:,} table rows")
        host = np.empty((total, lay.floats), np.float32)
        for t in range(d.num_tables):
            init_table(self.cfg.seed, t, int(d.table_sizes[t]),
                       lay, host[self.row_base[t]:self.row_base[t] + int(d.table_sizes[t])])
        self.table = torch.from_numpy(host).to(self.dev)
        self.bytes_h2d += total * lay.nbytes

    def gather(self, uniq, count=True) -> torch.Tensor:
        return self.table[torch.from_numpy(uniq).to(self.dev)]

    def update_shared_rows(self, uniq, grad) -> None:
        """Data-parallel: every rank holds every table, so each row any rank touched gets the
        gradient summed over the ranks on every rank (`Ranks.all_sum`)."""
        ids, g = self.ranks.all_sum(uniq, grad.cpu(), universe=len(self.table))
        rows = self.gather(ids, count=False)
        self.update_rows(rows, g.to(self.dev))
        self.put(ids, rows)

    def put(self, uniq, rows) -> None:
        self.table[torch.from_numpy(uniq).to(self.dev)] = rows

    def tables(self) -> list[np.ndarray]:
        host = self.table.cpu().numpy()
        return [host[b:b + int(r)].copy() for b, r in zip(self.row_base, self.data.table_sizes)]

    def load_tables(self, tables) -> None:
        self.table.copy_(torch.from_numpy(np.concatenate(tables)))
