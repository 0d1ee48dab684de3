"""The ``device-only`` placement's storage (`DeviceTables`): every table in one tensor on the
torch device (when it fits); `placement.UniqueRows` trains on it."""
import numpy as np
import torch

from .host_tables import global_rows
from .rows import check_fits, init_table


class DeviceTables:
    """Every table in one tensor on the torch device, for the run ``run`` (the `Trainer`)."""

    collective_reads = False

    def __init__(self, run):
        self.run = run

    def setup(self) -> None:
        run = self.run
        d, lay = run.data, run.lay
        total = int(d.table_sizes.sum())
        check_fits(f"{run.dev.type} device memory", total * lay.nbytes, run.device_limit(), d)
        self.row_base = np.r_[0, np.cumsum(d.table_sizes)[:-1]].astype(np.int64)
        run.phase(f"initialising {total:,} table rows")
        host = np.empty((total, lay.floats), np.float32)
        for t in range(d.num_tables):
            init_table(run.cfg.seed, t, int(d.table_sizes[t]),
                       lay, host[self.row_base[t]:self.row_base[t] + int(d.table_sizes[t])])
        self.table = torch.from_numpy(host).to(run.dev)
        run.bytes_h2d += total * lay.nbytes

    def global_rows(self, keys) -> np.ndarray:
        return global_rows(self.row_base, keys)

    def gather(self, uniq, count=True) -> torch.Tensor:
        return self.table[torch.from_numpy(uniq).to(self.run.dev)]

    def update_shared(self, uniq, grad) -> None:
        """Data-parallel: every rank holds every table, so each row any rank touched gets the
        gradient summed over the ranks on every rank (`Ranks.all_sum`)."""
        ids, g = self.run.ranks.all_sum(uniq, grad.cpu(), universe=len(self.table))
        rows = self.gather(ids, count=False)
        self.run.update_rows(rows, g.to(self.run.dev))
        self.put(ids, rows)

    def put(self, uniq, rows) -> None:
        self.table[torch.from_numpy(uniq).to(self.run.dev)] = rows

    def tables(self) -> list[np.ndarray]:
        host = self.table.cpu().numpy()
        return [host[b:b + int(r)].copy()
                for b, r in zip(self.row_base, self.run.data.table_sizes)]

    def load_tables(self, tables) -> None:
        self.table.copy_(torch.from_numpy(np.concatenate(tables)))

    def close(self) -> None:
        self.table = None
