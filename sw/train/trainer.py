"""One training run's step (`Trainer`): the DLRM and its dense optimizer, batches and their
lookups, evaluation; the embedding rows live in the mode's placement (`placement.Placement`,
one per mode) and are updated by `hotline.nn`'s fused row optimizers (FBGEMM's math).

Rows carry their optimizer state (`RowLayout`): ``dim`` floats, plus one row-wise Adagrad
accumulator with ``--optimizer adagrad``, padded to a multiple of 8 bytes (the DMA bus word),
so moving a row between host memory, staging and the hot table moves its state with it.
"""
import functools

import numpy as np
import torch

from hotline.contract.errors import HotlineError
from hotline.data.report import fmt_bytes
from hotline.host.host_memory import available_ram
from hotline.nn.dist import Ranks
from hotline.nn.layout import RowLayout

from .config import ADAGRAD_EPS, HOT_MEMORY_SHARE, torch_device
from .dlrm import DLRM
from .metrics import auc
from .placement import Placement


class Trainer:
    """A run's step: the DLRM, its dense optimizer, batches and their lookups, evaluation;
    the rows in ``embedding`` (the mode's `Placement`), updated by ``sparse`` (a fused row
    optimizer of `hotline.nn.optim`). The run over epochs is `hotline.train.run`'s."""

    # told each setup phase as it starts (the CLI's progress label; `hotline.train.train`)
    phase = staticmethod(lambda text: None)

    def __init__(self, data, cfg, notes):
        self.data, self.cfg, self.notes = data, cfg, notes
        self.lay = RowLayout(cfg.dim, 1 if cfg.optimizer == "adagrad" else 0)
        self.dev = torch_device(cfg.torch_device)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        self.model = DLRM(data.dense.shape[1], data.num_tables, cfg.dim, cfg.bottom, cfg.top).to(self.dev)
        params = list(self.model.parameters())
        if cfg.optimizer == "sgd":
            self.opt = torch.optim.SGD(params, lr=cfg.lr)
        else:
            self.opt = torch.optim.Adagrad(params, lr=cfg.lr, eps=ADAGRAD_EPS)
        # the fused row optimizer of the run's collection: (hotline.nn name, options)
        self.sparse = ("sgd", {}) if cfg.optimizer == "sgd" else \
            ("rowwise_adagrad", {"eps": ADAGRAD_EPS})
        self.F = data.num_tables
        # data-parallel: this process's place among the ranks (None: one process)
        self.ranks = Ranks.current()
        if self.ranks is not None:
            self.ranks.broadcast_params(self.model)
        self.step_collective_seconds = 0.0  # of this process's steps (the report's)
        self.bytes_h2d = 0
        self.bytes_d2h = 0
        self.host_rows_seconds = 0.0  # baseline, device-only: the steps' host row work
        self.counters_base = {}
        self.step = 0   # the global step (over epochs) train_batch trains next
        # the device's busy and waited-for seconds before a resume (hotline mode)
        self.device_time_base = (0.0, 0.0)
        kind = {"baseline": "host", "device-only": "device"}.get(cfg.mode, cfg.mode)
        self.embedding = Placement(self, kind)

    def collective_seconds(self) -> float:
        """Seconds this rank has spent in collectives (0 in one process)."""
        return 0.0 if self.ranks is None else self.ranks.seconds

    def totals(self) -> dict:
        """The run's traffic, host row work and device counters, summed over the ranks
        (data-parallel: a collective, every rank calls it)."""
        v = [self.bytes_h2d, self.bytes_d2h, self.host_rows_seconds]
        if self.ranks is not None:
            v = self.ranks.sum(v)
        return {"bytes_h2d": int(v[0]), "bytes_d2h": int(v[1]), "host_rows_seconds": float(v[2]),
                "counters": self.device_counters()}

    def device_time(self) -> tuple[float, float]:
        """(busy, waited-for) seconds of the accelerator over the run, resumes included: the
        time its agent worked, and the time the trainer waited for it (`Device.time`)."""
        busy, wait = self.embedding.device_time()
        return self.device_time_base[0] + busy, self.device_time_base[1] + wait

    # -- sizes --------------------------------------------------------------------------
    def num_batches(self) -> int:
        return -(-self.data.n_train // self.cfg.batch_size)

    def batch_range(self, j) -> tuple[int, int]:
        """Samples [s0, s1) of batch ``j``."""
        s0 = j * self.cfg.batch_size
        return s0, min(s0 + self.cfg.batch_size, self.data.n_train)

    def my_range(self, s0, s1) -> tuple[int, int]:
        """This rank's shard of samples [s0, s1) (all of them in one process)."""
        return (s0, s1) if self.ranks is None else self.ranks.shard(s0, s1)

    @property
    def world(self) -> int:
        """The ranks of the run (1: one process)."""
        return 1 if self.ranks is None else self.ranks.world

    @property
    def node_first(self) -> bool:
        """Whether this process is the first rank of its node (or the only process): it
        makes the node's memory file and writes the node's part of shared rows."""
        return self.ranks is None or self.ranks.local_rank == 0

    @property
    def lead(self) -> bool:
        """Whether this process is rank 0 (or the only one): it writes shared state."""
        return self.ranks is None or self.ranks.rank == 0

    def device_limit(self) -> int:
        if self.cfg.device_memory is not None:
            return self.cfg.device_memory
        if self.dev.type == "cuda":
            return torch.cuda.mem_get_info(self.dev)[0]
        return available_ram()

    @functools.cached_property
    def hot_budget(self) -> dict | None:
        """The hot set the run asks for: {"rows", "bytes", "source"}. From --hot-rows,
        --hot-bytes (whole rows of this run's layout) or --hot-fraction (of the tables' rows);
        without them, in hotline mode, ``HOT_MEMORY_SHARE`` of the torch device's memory
        (None in the other modes). At most every table row. Taken once, before the stores
        exist (the memory they take is not free memory any more), and reported as taken."""
        cfg, row_bytes = self.cfg, self.lay.nbytes
        total = int(self.data.table_sizes.sum())
        # one reading of the device's free memory, for the default and the check alike
        limit = self.device_limit() if cfg.mode == "hotline" else None
        if cfg.hot_rows is not None:
            rows, source = cfg.hot_rows, f"--hot-rows {cfg.hot_rows}"
        elif cfg.hot_bytes is not None:
            rows, source = cfg.hot_bytes // row_bytes, f"--hot-bytes {cfg.hot_bytes}"
            if rows == 0:
                raise HotlineError(f"--hot-bytes {cfg.hot_bytes} holds no row of {row_bytes} "
                                   f"bytes")
        elif cfg.hot_fraction is not None:
            rows = max(1, int(cfg.hot_fraction * total))
            source = f"--hot-fraction {cfg.hot_fraction} of {total:,} rows"
        elif cfg.mode == "hotline":
            rows = max(1, int(HOT_MEMORY_SHARE * limit) // row_bytes)
            source = (f"default: {HOT_MEMORY_SHARE:.0%} of the {self.dev.type} device's "
                      f"{fmt_bytes(limit)}")
        else:
            return None
        if limit is not None and rows * row_bytes > limit:
            raise HotlineError(f"the hot set ({source}: {fmt_bytes(rows * row_bytes)}) exceeds "
                               f"the {self.dev.type} device's memory ({fmt_bytes(limit)}"
                               f"{', --device-memory' if cfg.device_memory else ''})")
        rows = min(rows, total)
        return {"rows": rows, "bytes": rows * row_bytes, "row_bytes": row_bytes,
                "source": source}

    def host_limit(self) -> int:
        return self.cfg.host_memory if self.cfg.host_memory is not None else available_ram()

    # -- per-batch helpers --------------------------------------------------------------
    def batch_arrays(self, s0, s1) -> tuple[np.ndarray, np.ndarray]:
        """(keys, lengths) of samples [s0, s1)."""
        d = self.data
        l0, l1 = d.offsets[s0], d.offsets[s1]
        return d.keys[l0:l1], d.lengths[s0:s1]

    def tensors(self, s0, s1) -> tuple[torch.Tensor, torch.Tensor]:
        """(dense, label) tensors of samples [s0, s1)."""
        return (torch.from_numpy(np.ascontiguousarray(self.data.dense[s0:s1])).to(self.dev),
                torch.from_numpy(np.ascontiguousarray(self.data.label[s0:s1])).to(self.dev))

    def loss_sum(self, emb, dense, label) -> torch.Tensor:
        """Summed BCE of the samples of ``dense`` with pooled embeddings ``emb`` [n, F, dim]."""
        return torch.nn.functional.binary_cross_entropy_with_logits(
            self.model(dense, emb), label, reduction="sum")

    def dense_step(self) -> None:
        """The dense optimizer step, on the gradients summed over the ranks."""
        if self.ranks is not None:
            self.ranks.all_reduce_grads(self.model.parameters())
        self.opt.step()

    def sum_over_ranks(self, loss_sum) -> float:
        """A loss summed over this rank's samples, summed over the ranks."""
        return float(loss_sum) if self.ranks is None else float(self.ranks.sum([loss_sum])[0])

    # -- a step -------------------------------------------------------------------------
    def setup(self) -> None:
        """Allocate and initialise the tables (and open the device)."""
        self.embedding.setup()

    def train_batch(self, j, prefetch) -> float:
        """One optimizer step on batch ``j``; its mean loss. ``prefetch``: the next batch may
        be started now."""
        s0, s1 = self.batch_range(j)
        a, b = self.my_range(s0, s1)
        self.opt.zero_grad(set_to_none=True)
        emb, batch = self.embedding.forward(j, a, b, prefetch)
        dense, label = self.tensors(a, b)
        if batch.early is None:
            loss = self.loss_sum(emb, dense, label)
        else:   # split micro-batches: the popular samples' MLP first, then the others'
            parts = [torch.from_numpy(sel) for sel in (batch.early, batch.late) if len(sel)]
            loss = sum(self.loss_sum(emb[sel], dense[sel], label[sel])
                       for sel in parts or [torch.arange(b - a)])
        (loss / (s1 - s0)).backward()   # the rows are updated here (the collection's)
        self.dense_step()
        total = self.embedding.finish(float(loss.detach()))
        self.step += 1
        return total / (s1 - s0)

    def tables(self) -> list[np.ndarray]:
        """The current tables, one float32 array [rows, layout floats] per table (copies)."""
        return self.embedding.tables()

    def load_tables(self, tables) -> None:
        """Replace the tables (a checkpoint's)."""
        self.embedding.load_tables(tables)

    @property
    def collective_reads(self) -> bool:
        """Whether reading rows takes every rank (host tables split over nodes)."""
        return self.embedding.collective_reads

    def checkpoint_tables(self) -> list[np.ndarray] | None:
        """`tables` for rank 0's checkpoint (None on the other ranks, which take part when
        reading rows is a collective)."""
        tables = self.tables() if self.lead or self.collective_reads else None
        return tables if self.lead else None

    def quiesce(self) -> None:
        """Every rank's writes to host memory done (data-parallel: a collective)."""
        self.embedding.quiesce()

    def sync(self, count=False) -> None:
        """Make `tables` and evaluation see the latest rows (hotline: hot rows back to host)."""
        self.embedding.sync(count)

    def device_counters(self) -> dict:
        """The accelerator's counters over the run (resumes included; rank 0's report)."""
        base = self.counters_base if self.lead else {}
        return {k: v + base.get(k, 0) for k, v in self.embedding.device_counters().items()}

    def close(self) -> None:
        self.embedding.close()

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self) -> tuple[float | None, float | None]:
        """(logloss, AUC) on the held-out split (None, None if there is none)."""
        d = self.data
        if d.n_test == 0:
            return None, None
        self.quiesce()
        if not self.lead and not self.collective_reads:  # rank 0 evaluates for every rank
            return None, None
        self.sync()
        scores, total = [], 0.0
        chunk = max(self.cfg.batch_size, 4096)
        self.model.eval()
        with torch.no_grad():
            for s0 in range(d.n_train, d.num_samples, chunk):
                s1 = min(s0 + chunk, d.num_samples)
                dense, label = self.tensors(s0, s1)
                logits = self.model(dense, self.embedding.pooled(s0, s1))
                total += float(torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, label, reduction="sum"))
                scores.append(logits.cpu().numpy())
        self.model.train()
        return total / d.n_test, auc(d.label[d.n_train:], np.concatenate(scores))
