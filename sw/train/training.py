"""DLRM training in three modes (DESIGN.md, "Training"); `hotline train` is `add_parser` / `cmd_train`.

- ``baseline``: every table in host memory (`HostMemory` float32 views). Per mini-batch the CPU
  finds the unique rows, gathers them and ships them to the torch device; after the optimizer
  step the updated rows go back (Intel-optimised hybrid DLRM style).
- ``hotline``: the hot rows live in a device-resident hot table at their CAM slots; the
  accelerator (`hotline.open(url)`) fragments each mini-batch and gathers its unique cold rows
  into a staging bank; the popular micro-batch (hot rows only) and the non-popular one are
  computed separately and their gradients summed, so one optimizer step covers the whole
  mini-batch; updated cold rows are written into staging and scattered back by the device.
  The next batch is pushed (fragmented and gathered) before the current one trains.
- ``device-only``: every table on the torch device (when it fits).

All three follow the same SGD trajectory: same seed and data give the same per-step losses up
to float reordering, and the same final tables (hotline writes its hot rows back at the end).

Rows carry their optimizer state: a row is ``dim`` floats, plus one row-wise Adagrad
accumulator with ``--optimizer adagrad``, padded to a multiple of 8 bytes (the DMA bus word),
so moving a row between host memory, staging and the hot table moves its state with it.
"""
import abc
import argparse
import math
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from hotline.contract.config import AcceleratorConfig, max_batch_lookups
from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, ROW_BITS
from hotline.data.options import EPILOG_DATA, check_out, fraction, positive_int, say
from hotline.data.readers import FORMATS, Dataset, partial_path, write_atomic
from hotline.data.report import table, write_json
from hotline.data.spec import open_data
from hotline.host.device import Device
from hotline.host.device import open as open_device
from hotline.host.host_memory import HostMemory, Window
from hotline.model.planner import exact_hot_set, profile_samples

MODES = ("baseline", "hotline", "device-only")
OPTIMIZERS = ("sgd", "adagrad")
DEFAULT_LR = {"sgd": 0.1, "adagrad": 0.005}
ADAGRAD_EPS = 1e-8
CHECKPOINT_FORMAT = "hotline-train-checkpoint/1"
# Fields of TrainConfig that must match between a checkpoint and the run resuming it.
RESUME_FIELDS = ("mode", "batch_size", "hot_rows", "seed", "optimizer", "lr", "dim", "bottom",
                 "top", "test_fraction", "profile_fraction", "max_ind_range")


@dataclass
class TrainConfig:
    mode: str = "hotline"
    batch_size: int = 1024
    hot_rows: int | None = None
    device_url: str = "model://"
    epochs: int = 1
    seed: int = 0
    optimizer: str = "sgd"
    lr: float | None = None
    dim: int = 16
    bottom: tuple = (512, 256, 64)
    top: tuple = (512, 256)
    test_fraction: float = 0.1
    profile_fraction: float = 1.0
    max_ind_range: int | None = None
    checkpoint: str | None = None
    checkpoint_every: int = 0        # steps; 0: at the end of each epoch only
    resume: str | None = None
    max_steps: int | None = None     # stop after this many steps in all (resume continues)
    host_memory: int | None = None   # bytes; default: available RAM
    device_memory: int | None = None  # bytes; default: free device memory (RAM for cpu)
    torch_device: str | None = None  # default: cuda if available else cpu
    threads: int | None = None       # torch intra-op threads (default: torch's choice)

    def check(self):
        if self.mode not in MODES:
            raise HotlineError(f"--mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.optimizer not in OPTIMIZERS:
            raise HotlineError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, not {self.optimizer!r}")
        if self.batch_size is None or self.batch_size <= 0:
            raise HotlineError(f"--batch-size must be a positive integer, not {self.batch_size}")
        if self.mode == "hotline" and (self.hot_rows is None or self.hot_rows <= 0):
            raise HotlineError("--mode hotline needs --hot-rows K (a positive integer)")
        if self.epochs <= 0:
            raise HotlineError(f"--epochs must be a positive integer, not {self.epochs}")
        if self.dim <= 0:
            raise HotlineError(f"--dim must be a positive integer, not {self.dim}")
        if not 0.0 <= self.test_fraction < 1.0:
            raise HotlineError(f"--test-fraction must be in [0, 1), not {self.test_fraction}")
        if self.lr is None:
            self.lr = DEFAULT_LR[self.optimizer]
        if not self.lr > 0:
            raise HotlineError(f"--lr must be positive, not {self.lr}")
        self.bottom, self.top = tuple(self.bottom), tuple(self.top)
        return self


# ----------------------------------------------------------------------------------------
# data


@dataclass
class TrainData:
    """A dataset prepared for training: log-dense features, labels, keys, train/test split."""
    name: str
    dense: np.ndarray          # float32 [N, D]
    label: np.ndarray          # float32 [N]
    lengths: np.ndarray        # int32 [N, F]
    keys: np.ndarray           # uint32 [L]
    offsets: np.ndarray        # int64 [N + 1]
    table_sizes: np.ndarray    # int64 [F]
    n_train: int
    single_hot: bool

    @property
    def num_samples(self):
        return len(self.label)

    @property
    def num_tables(self):
        return len(self.table_sizes)

    @property
    def n_test(self):
        return self.num_samples - self.n_train


def prepare_data(ds, test_fraction=0.1, max_ind_range=None):
    """`TrainData` from a `Dataset`: ``--max-ind-range M`` folds every table to at most M rows
    (row id modulo M, as the DLRM reference hashes); the last ``test_fraction`` of the samples
    is held out."""
    if ds.label is None:
        raise HotlineError(f"{ds.name}: no labels; training needs a label column")
    indices, sizes = ds.indices, ds.table_sizes.astype(np.int64)
    if max_ind_range is not None:
        if max_ind_range <= 0:
            raise HotlineError(f"--max-ind-range must be positive, not {max_ind_range}")
        if np.any(sizes > max_ind_range):
            indices = indices % max_ind_range
            sizes = np.minimum(sizes, max_ind_range)
    big = np.nonzero(sizes > MAX_ROWS)[0]
    if big.size:
        raise HotlineError(f"{ds.name}: table {int(big[0])} has {int(sizes[big[0]])} rows, more "
                           f"than 2^{ROW_BITS}; use --max-ind-range")
    ds = Dataset(ds.lengths, indices, sizes, ds.dense, ds.label, ds.name).validate()
    n = ds.num_samples
    n_test = int(math.floor(test_fraction * n))
    if n - n_test < 1:
        raise HotlineError(f"{ds.name}: {n} samples leave none for training with "
                           f"--test-fraction {test_fraction}")
    if ds.dense is not None and ds.dense.shape[1]:
        dense = np.log1p(np.maximum(ds.dense.astype(np.float32), 0.0)).astype(np.float32)
    else:
        dense = np.zeros((n, 1), np.float32)  # no dense features: a constant input
    if not np.all(np.isfinite(dense)):
        raise HotlineError(f"{ds.name}: field 'dense' has a non-finite value")
    label = ds.label.astype(np.float32)
    if not np.all((label == 0) | (label == 1)):
        raise HotlineError(f"{ds.name}: field 'label' must be 0 or 1")
    return TrainData(ds.name, dense, label, ds.lengths.astype(np.int32), ds.keys,
                     ds.sample_offsets, sizes, n - n_test, ds.single_hot)


# ----------------------------------------------------------------------------------------
# rows, memory budgets


@dataclass(frozen=True)
class RowLayout:
    """``dim`` embedding floats, then ``state`` optimizer floats, padded to 8 bytes."""
    dim: int
    state: int

    @property
    def floats(self):
        return -(-(self.dim + self.state) // 2) * 2

    @property
    def nbytes(self):
        return 4 * self.floats


def available_ram():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def init_table(seed, t, rows, lay, out):
    """DLRM's initialisation of table ``t``: uniform(-1/sqrt(rows), 1/sqrt(rows)) per value,
    state 0; written into ``out`` [rows, lay.floats] in chunks (same values in every mode)."""
    rng = np.random.default_rng([seed, 1000 + t])
    a = np.float32(1.0 / math.sqrt(rows))
    out[:, lay.dim:] = 0
    step = 1 << 20
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        out[r0:r1, :lay.dim] = rng.random((r1 - r0, lay.dim), dtype=np.float32) * (2 * a) - a


def auc(labels, scores):
    """Area under the ROC curve (ties get the average rank); None with one class only."""
    labels = np.asarray(labels, np.float64)
    pos = labels.sum()
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return None
    order = np.argsort(scores, kind="mergesort")
    s = np.asarray(scores)[order]
    ranks = np.empty(len(s), np.float64)
    # average ranks over runs of equal scores
    edges = np.r_[0, np.flatnonzero(np.diff(s)) + 1, len(s)]
    for a, b in zip(edges[:-1], edges[1:]):
        ranks[a:b] = (a + b + 1) / 2.0
    r = np.empty(len(s), np.float64)
    r[order] = ranks
    return float((r[labels == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


# ----------------------------------------------------------------------------------------
# the trainers


def _torch():
    import torch  # lazy: torch takes seconds to import; `hotline --help` and the CLI need none
    return torch


class _Trainer(abc.ABC):
    """What every mode shares: the DLRM, its dense optimizer, the sparse row update, the loop
    over batches, evaluation, checkpoints. Subclasses supply where rows live and `train_batch`."""

    def __init__(self, data, cfg, notes):
        torch = _torch()
        from .dlrm import DLRM  # lazy: imports torch
        self.data, self.cfg, self.notes = data, cfg, notes
        self.lay = RowLayout(cfg.dim, 1 if cfg.optimizer == "adagrad" else 0)
        self.dev = torch.device(cfg.torch_device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        self.model = DLRM(data.dense.shape[1], data.num_tables, cfg.dim, cfg.bottom, cfg.top).to(self.dev)
        params = list(self.model.parameters())
        if cfg.optimizer == "sgd":
            self.opt = torch.optim.SGD(params, lr=cfg.lr)
        else:
            self.opt = torch.optim.Adagrad(params, lr=cfg.lr, eps=ADAGRAD_EPS)
        self.F = data.num_tables
        self.bytes_h2d = 0
        self.bytes_d2h = 0
        self.counters_base = {}
        self.device_seconds = 0.0  # time inside accelerator calls (hotline mode)

    # -- sizes --------------------------------------------------------------------------
    def num_batches(self):
        return -(-self.data.n_train // self.cfg.batch_size)

    def batch_range(self, j):
        s0 = j * self.cfg.batch_size
        return s0, min(s0 + self.cfg.batch_size, self.data.n_train)

    def device_limit(self):
        torch = _torch()
        if self.cfg.device_memory is not None:
            return self.cfg.device_memory
        if self.dev.type == "cuda":
            return torch.cuda.mem_get_info(self.dev)[0]
        return available_ram()

    def host_limit(self):
        return self.cfg.host_memory if self.cfg.host_memory is not None else available_ram()

    # -- per-batch helpers --------------------------------------------------------------
    def batch_arrays(self, s0, s1):
        d = self.data
        l0, l1 = d.offsets[s0], d.offsets[s1]
        return d.keys[l0:l1], d.lengths[s0:s1]

    def tensors(self, s0, s1, sel=None):
        torch = _torch()
        dense, label = self.data.dense[s0:s1], self.data.label[s0:s1]
        if sel is not None:
            dense, label = dense[sel], label[sel]
        return (torch.from_numpy(np.ascontiguousarray(dense)).to(self.dev),
                torch.from_numpy(np.ascontiguousarray(label)).to(self.dev))

    def select(self, lengths, sel):
        """(lookup index into the batch, bag id per lookup or None) of samples ``sel``."""
        F = self.F
        if self.data.single_hot:
            return (sel[:, None] * F + np.arange(F)).ravel(), None
        bag_len = lengths.ravel().astype(np.int64)
        bag_off = np.zeros(len(bag_len) + 1, np.int64)
        np.cumsum(bag_len, out=bag_off[1:])
        bags = (sel[:, None] * F + np.arange(F)).ravel()
        ls = bag_len[bags]
        starts = bag_off[bags]
        total = int(ls.sum())
        excl = np.cumsum(ls) - ls
        idx = np.repeat(starts - excl, ls) + np.arange(total)
        return idx, np.repeat(np.arange(len(bags)), ls)

    def loss_sum(self, rows, lookup_row, bags, dense, label):
        """Summed BCE of a (micro-)batch whose lookups read ``rows[lookup_row]``."""
        torch = _torch()
        from .dlrm import pool  # lazy: imports torch
        n = len(label)
        idx = torch.from_numpy(lookup_row).to(self.dev)
        b = None if bags is None else torch.from_numpy(bags).to(self.dev)
        emb = pool(rows, idx, n * self.F, b, self.cfg.dim).view(n, self.F, self.cfg.dim)
        logits = self.model(dense, emb)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, label, reduction="sum")

    def update_rows(self, rows, grad):
        """The sparse optimizer step on gathered rows (in place): SGD, or row-wise Adagrad
        with the accumulator in the row's state float."""
        torch = _torch()
        d = self.cfg.dim
        with torch.no_grad():
            g = grad[:, :d]
            if self.cfg.optimizer == "sgd":
                rows[:, :d].sub_(self.cfg.lr * g)
            else:
                s = rows[:, d] + (g * g).mean(dim=1)
                rows[:, d] = s
                rows[:, :d].sub_(self.cfg.lr * g / (s.sqrt() + ADAGRAD_EPS).unsqueeze(1))

    def leaf(self, t):
        return t.detach().requires_grad_(True)

    # -- what a mode provides ---------------------------------------------------------
    @abc.abstractmethod
    def setup(self): ...

    @abc.abstractmethod
    def train_batch(self, j, prefetch): ...

    @abc.abstractmethod
    def eval_rows(self, keys):
        """(rows tensor, lookup -> row index) for evaluation, from wherever rows live now."""

    @abc.abstractmethod
    def tables(self):
        """The current tables, one float32 array [rows, layout floats] per table (copies)."""

    @abc.abstractmethod
    def load_tables(self, tables): ...

    def begin_epoch(self, first_batch):
        pass

    def sync(self, count=False):
        """Make `tables` / `eval_rows` see the latest rows (hotline: hot rows back to host)."""

    def device_counters(self):
        return {}

    def close(self):
        pass

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self):
        """(logloss, AUC) on the held-out split (None, None if there is none)."""
        torch = _torch()
        d = self.data
        if d.n_test == 0:
            return None, None
        self.sync()
        scores, total = [], 0.0
        chunk = max(self.cfg.batch_size, 4096)
        self.model.eval()
        with torch.no_grad():
            for s0 in range(d.n_train, d.num_samples, chunk):
                s1 = min(s0 + chunk, d.num_samples)
                keys, lengths = self.batch_arrays(s0, s1)
                rows, lookup_row = self.eval_rows(keys)
                idx, bags = self.select(lengths, np.arange(s1 - s0))
                dense, label = self.tensors(s0, s1)
                from .dlrm import pool  # lazy: imports torch
                n = s1 - s0
                b = None if bags is None else torch.from_numpy(bags).to(self.dev)
                emb = pool(rows, torch.from_numpy(lookup_row[idx]).to(self.dev), n * self.F, b,
                           self.cfg.dim).view(n, self.F, self.cfg.dim)
                logits = self.model(dense, emb)
                total += float(torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, label, reduction="sum"))
                scores.append(logits.cpu().numpy())
        self.model.train()
        return total / d.n_test, auc(d.label[d.n_train:], np.concatenate(scores))


class _UniqueRowsTrainer(_Trainer):
    """baseline and device-only: per batch, the unique rows are gathered into one tensor,
    trained on as one batch, and written back. Only the storage differs."""

    def global_rows(self, keys):
        t = (keys >> np.uint32(ROW_BITS)).astype(np.int64)
        return self.row_base[t] + (keys & np.uint32(MAX_ROWS - 1)).astype(np.int64)

    def train_batch(self, j, prefetch):
        s0, s1 = self.batch_range(j)
        keys, lengths = self.batch_arrays(s0, s1)
        uniq, inv = np.unique(self.global_rows(keys), return_inverse=True)
        rows = self.leaf(self.gather(uniq))
        dense, label = self.tensors(s0, s1)
        self.opt.zero_grad(set_to_none=True)
        bags = None if self.data.single_hot else self.select(lengths, np.arange(s1 - s0))[1]
        loss = self.loss_sum(rows, inv, bags, dense, label)
        (loss / (s1 - s0)).backward()
        self.opt.step()
        self.update_rows(rows.data, rows.grad)
        self.put(uniq, rows.data)
        return float(loss.detach()) / (s1 - s0)

    def eval_rows(self, keys):
        uniq, inv = np.unique(self.global_rows(keys), return_inverse=True)
        return self.gather(uniq, count=False), inv


class BaselineTrainer(_UniqueRowsTrainer):
    """Tables in host memory; the CPU gathers each batch's unique rows and ships them."""

    def setup(self, staging_bytes=0):
        d, lay = self.data, self.lay
        # Tables start on row boundaries of one [rows, floats] view of the whole memory, so a
        # batch's gather is a single fancy index; 4 KiB alignment as DMA-friendly bases.
        self.align = math.lcm(4096, lay.nbytes)
        need = sum(-(-int(r) * lay.nbytes // self.align) * self.align for r in d.table_sizes)
        need += -(-staging_bytes // self.align) * self.align
        check_fits("host memory", need, self.host_limit(), d)
        self.memory = HostMemory(need)
        self.windows = [self.memory.alloc(int(r) * lay.nbytes, self.align, name=f"table{t}")
                        for t, r in enumerate(d.table_sizes)]
        nrows = self.memory.size // lay.nbytes
        self.host_rows = self.memory.view(Window(0, nrows * lay.nbytes, "rows"), np.float32,
                                          (nrows, lay.floats))
        self.row_base = np.array([w.base // lay.nbytes for w in self.windows], np.int64)
        for t in range(d.num_tables):
            init_table(self.cfg.seed, t, int(d.table_sizes[t]), lay, self.table_view(t))

    def table_view(self, t):
        r = int(self.data.table_sizes[t])
        return self.host_rows[self.row_base[t]:self.row_base[t] + r]

    def gather(self, uniq, count=True):
        torch = _torch()
        if count:
            self.bytes_h2d += len(uniq) * self.lay.nbytes
        return torch.from_numpy(np.asarray(self.host_rows[uniq])).to(self.dev)

    def put(self, uniq, rows):
        self.bytes_d2h += len(uniq) * self.lay.nbytes
        self.host_rows[uniq] = rows.cpu().numpy()

    def tables(self):
        return [np.array(self.table_view(t)) for t in range(self.data.num_tables)]

    def load_tables(self, tables):
        for t, a in enumerate(tables):
            self.table_view(t)[:] = a

    def close(self):
        self.host_rows = None
        if getattr(self, "memory", None) is not None:
            self.memory.close()


class DeviceOnlyTrainer(_UniqueRowsTrainer):
    """Every table in one tensor on the torch device."""

    def setup(self):
        torch = _torch()
        d, lay = self.data, self.lay
        total = int(d.table_sizes.sum())
        check_fits(f"{self.dev.type} device memory", total * lay.nbytes, self.device_limit(), d)
        self.row_base = np.r_[0, np.cumsum(d.table_sizes)[:-1]].astype(np.int64)
        host = np.empty((total, lay.floats), np.float32)
        for t in range(d.num_tables):
            init_table(self.cfg.seed, t, int(d.table_sizes[t]),
                       lay, host[self.row_base[t]:self.row_base[t] + int(d.table_sizes[t])])
        self.table = torch.from_numpy(host).to(self.dev)
        self.bytes_h2d += total * lay.nbytes

    def gather(self, uniq, count=True):
        torch = _torch()
        return self.table[torch.from_numpy(uniq).to(self.dev)]

    def put(self, uniq, rows):
        torch = _torch()
        self.table[torch.from_numpy(uniq).to(self.dev)] = rows

    def tables(self):
        host = self.table.cpu().numpy()
        return [host[b:b + int(r)].copy() for b, r in zip(self.row_base, self.data.table_sizes)]

    def load_tables(self, tables):
        torch = _torch()
        self.table.copy_(torch.from_numpy(np.concatenate(tables)))


def check_fits(what, need, limit, data):
    if need > limit:
        raise HotlineError(
            f"{data.name}: the tables need {fmt_bytes(need)} of {what}, only {fmt_bytes(limit)} "
            f"available ({int(data.table_sizes.sum()):,} rows); fold them with --max-ind-range M")


class HotlineTrainer(BaselineTrainer):
    """Hot rows on the torch device at their CAM slots; cold rows through the accelerator."""

    hot_keys = None  # rank-order hot keys; set from a checkpoint on resume

    def setup(self):
        torch = _torch()
        d, cfg, lay = self.data, self.cfg, self.lay
        if self.hot_keys is None:
            window = profile_samples(d.n_train, cfg.profile_fraction)
            hot = exact_hot_set(d.keys[:d.offsets[window]], cfg.hot_rows)
            if hot.clamped:
                self.notes.append(f"--hot-rows {cfg.hot_rows} exceeds the {hot.distinct} distinct "
                                  f"keys in the profiling window; using {hot.size}")
            self.hot_keys = hot.keys
        self.acc_config = AcceleratorConfig.for_workload(
            len(self.hot_keys), cfg.batch_size,
            max_batch_lookups(d.offsets[:d.n_train + 1], cfg.batch_size))
        self.slots = self.acc_config.cold_max_keys
        self.banks = 2
        if self.slots > Device.max_slots:
            raise HotlineError(f"--batch-size {cfg.batch_size}: a batch has up to {self.slots:,} "
                               f"lookups, more than the {Device.max_slots:,} staging slots of a "
                               f"bank; use a smaller --batch-size")
        staging_bytes = self.banks * self.slots * lay.nbytes
        hot_bytes = self.acc_config.cam_entries * lay.nbytes
        check_fits(f"{self.dev.type} device memory (hot table + staging copies)",
                   hot_bytes + staging_bytes, self.device_limit(), d)
        super().setup(staging_bytes)
        w = self.memory.alloc(staging_bytes, self.align, name="staging")
        self.staging_row0 = w.base // lay.nbytes
        self.device = open_device(cfg.device_url, config=self.acc_config, memory=self.memory)
        for t, tw in enumerate(self.windows):
            self.device.set_table(t, tw, int(d.table_sizes[t]), lay.nbytes)
        self.device.set_staging(w, lay.nbytes, self.slots, self.banks)
        self.placement = self.device.load_hot_set(self.hot_keys)
        if self.placement.failed.size:
            self.notes.append(f"the CAM refused {self.placement.failed.size} of "
                              f"{len(self.hot_keys)} hot keys; they are trained as cold rows")
        self.hot_table = torch.zeros(self.acc_config.cam_entries, lay.floats, device=self.dev)
        self.load_hot_rows()
        self.queue = []       # batch indices pushed and not yet pulled, oldest first
        self.next_push = 0
        self.prev = None      # (sorted cold keys, their updated rows) of the last trained batch

    def load_hot_rows(self):
        torch = _torch()
        p = self.placement
        rows = np.asarray(self.host_rows[self.global_rows(p.keys)])
        self.hot_table[torch.from_numpy(p.slots.astype(np.int64)).to(self.dev)] = \
            torch.from_numpy(rows).to(self.dev)
        self.bytes_h2d += len(p.keys) * self.lay.nbytes

    def load_tables(self, tables):
        super().load_tables(tables)
        self.bytes_h2d -= len(self.placement.keys) * self.lay.nbytes  # a reload, not traffic
        self.load_hot_rows()

    def sync(self, count=False):
        """Hot rows back into the host tables (the master copy for eval and checkpoints)."""
        p = self.placement
        if not len(p.keys):
            return
        torch = _torch()
        rows = self.hot_table[torch.from_numpy(p.slots.astype(np.int64)).to(self.dev)]
        self.host_rows[self.global_rows(p.keys)] = rows.cpu().numpy()
        if count:
            self.bytes_d2h += len(p.keys) * self.lay.nbytes

    def tables(self):
        self.sync()
        return super().tables()

    def begin_epoch(self, first_batch):
        self.next_push, self.prev = first_batch, None

    def staging(self, bank):
        r0 = self.staging_row0 + bank * self.slots
        return self.host_rows[r0:r0 + self.slots]

    def push(self, j):
        s0, s1 = self.batch_range(j)
        keys, lengths = self.batch_arrays(s0, s1)
        t0 = time.perf_counter()
        self.device.push_batch(keys, lengths)
        self.device_seconds += time.perf_counter() - t0
        self.queue.append(j)
        self.next_push = j + 1

    def train_batch(self, j, prefetch):
        torch = _torch()
        if self.next_push == j:
            self.push(j)
        # Double buffering: the device fragments and gathers batch j + 1 before batch j trains.
        if prefetch and j + 1 < self.num_batches() and self.next_push == j + 1:
            self.push(j + 1)
        t0 = time.perf_counter()
        r = self.device.pull_batch()
        self.device_seconds += time.perf_counter() - t0
        if self.queue.pop(0) != j:
            raise AssertionError("device batch order")
        if r.gather["errors"]:
            raise HotlineError(f"{self.cfg.device_url}: gather of batch {j} reported "
                               f"{r.gather['errors']} DMA errors")
        s0, s1 = self.batch_range(j)
        n = s1 - s0
        _, lengths = self.batch_arrays(s0, s1)
        st = self.staging(r.bank)
        ck = r.cold_keys
        U = len(ck)
        if self.prev is not None and U:
            # Batch j was gathered before batch j - 1 was scattered (it was pushed while j - 1
            # trained), so the rows cold in both batches are stale in this bank: take them from
            # batch j - 1's updated rows. (The hardware gathers ahead in the same way.)
            pk, prow = self.prev
            if len(pk):
                pos = np.minimum(np.searchsorted(pk, ck), len(pk) - 1)
                m = pk[pos] == ck
                if m.any():
                    st[:U][m] = prow[pos[m]]
        # Rows for this batch: R = [unique hot slots used (H) | cold slots (C)].
        hot, slot = r.hot, r.slot
        hu, hinv = np.unique(slot[hot], return_inverse=True)
        nh = len(hu)
        src = cmap = None
        if r.overflow and len(np.unique(ck)) < U:
            # The cold-key set overflowed: a key may sit in several slots. Train on one copy
            # (gradients summed) and write the result into every slot it occupies.
            _, src, cmap = np.unique(ck, return_index=True, return_inverse=True)
        lookup_row = np.empty(len(hot), np.int64)
        lookup_row[hot] = hinv
        cold_slot = slot[~hot].astype(np.int64)
        lookup_row[~hot] = nh + (cold_slot if cmap is None else cmap[cold_slot])
        H = self.leaf(self.hot_table[torch.from_numpy(hu.astype(np.int64)).to(self.dev)])
        self.opt.zero_grad(set_to_none=True)
        total = 0.0
        # The popular micro-batch needs hot rows only: it can run while the cold rows are
        # still being gathered / copied.
        if len(r.popular):
            idx, bags = self.select(lengths, r.popular)
            dense, label = self.tensors(s0, s1, r.popular)
            loss = self.loss_sum(H, lookup_row[idx], bags, dense, label)
            (loss / n).backward()
            total += float(loss.detach())
        cold = st[:U] if src is None else st[src]
        C = self.leaf(torch.from_numpy(np.array(cold)).to(self.dev))
        self.bytes_h2d += len(C) * self.lay.nbytes
        if len(r.non_popular):
            idx, bags = self.select(lengths, r.non_popular)
            dense, label = self.tensors(s0, s1, r.non_popular)
            loss = self.loss_sum(torch.cat([H, C]), lookup_row[idx], bags, dense, label)
            (loss / n).backward()
            total += float(loss.detach())
        self.opt.step()
        if nh and H.grad is not None:
            self.update_rows(H.data, H.grad)
            self.hot_table[torch.from_numpy(hu.astype(np.int64)).to(self.dev)] = H.data
        if len(C):
            if C.grad is not None:
                self.update_rows(C.data, C.grad)
            new = C.data.cpu().numpy()
            self.bytes_d2h += len(C) * self.lay.nbytes
            st[:U] = new if cmap is None else new[cmap]
            t0 = time.perf_counter()
            done = self.device.scatter(r.bank, ck)
            self.device_seconds += time.perf_counter() - t0
            if done["errors"]:
                raise HotlineError(f"{self.cfg.device_url}: scatter of batch {j} reported "
                                   f"{done['errors']} DMA errors")
            if cmap is None:
                order = np.argsort(ck, kind="stable")
                self.prev = (ck[order], new[order])
            else:
                self.prev = (np.unique(ck), new)
        else:
            self.prev = None
        return total / n

    def device_counters(self):
        c = self.device.counters()
        return {k: v + self.counters_base.get(k, 0) for k, v in c.items()}

    def close(self):
        if getattr(self, "device", None) is not None:
            self.device.close()
        super().close()


TRAINERS = {"baseline": BaselineTrainer, "hotline": HotlineTrainer, "device-only": DeviceOnlyTrainer}


# ----------------------------------------------------------------------------------------
# the run: epochs, checkpoints, report


def data_fingerprint(data):
    h = zlib.crc32(np.ascontiguousarray(data.keys).view(np.uint8))
    h = zlib.crc32(np.ascontiguousarray(data.label).view(np.uint8), h)
    h = zlib.crc32(np.ascontiguousarray(data.dense).view(np.uint8), h)
    return {"name": data.name, "samples": data.num_samples, "n_train": data.n_train,
            "table_sizes": [int(x) for x in data.table_sizes], "crc32": h}


def save_checkpoint(path, trainer, state):
    torch = _torch()
    obj = dict(state)
    obj["format"] = CHECKPOINT_FORMAT
    obj["model"] = trainer.model.state_dict()
    obj["optimizer"] = trainer.opt.state_dict()
    obj["tables"] = [torch.from_numpy(t) for t in trainer.tables()]
    obj["hot_keys"] = (None if getattr(trainer, "hot_keys", None) is None
                       else torch.from_numpy(trainer.hot_keys.astype(np.int64)))
    obj["counters"] = trainer.device_counters()
    obj["bytes"] = [trainer.bytes_h2d, trainer.bytes_d2h]
    obj["device_seconds"] = trainer.device_seconds
    # The previous checkpoint stays in place until the new one is complete and on disk.
    try:
        write_atomic(path, lambda f: torch.save(obj, f), durable=True)
    except OSError as e:
        raise HotlineError(f"{path}: cannot write the checkpoint ({e.strerror or e}); the "
                           f"previous one, if any, is unchanged") from None


def remove_stale_partial(path, notes):
    """Delete the temporary file of a checkpoint write that was killed (`write_atomic` removes
    it itself on any error it sees); ``path`` itself, if present, is the last complete one."""
    tmp = partial_path(path)
    if tmp.exists() and not tmp.is_file():
        raise HotlineError(f"{tmp}: not a file, and in the way of checkpoint writes to {path}")
    if tmp.is_file():
        size = tmp.stat().st_size
        try:
            tmp.unlink()
        except OSError as e:
            raise HotlineError(f"{tmp}: cannot remove this stale partial checkpoint "
                               f"({e.strerror})") from None
        notes.append(f"removed {tmp} ({fmt_bytes(size)}), left by an interrupted checkpoint "
                     f"write; {path} is the last complete checkpoint"
                     if Path(path).is_file() else
                     f"removed {tmp} ({fmt_bytes(size)}), left by an interrupted checkpoint write")


def load_checkpoint(path, cfg, data):
    torch = _torch()
    p = Path(path)
    if not p.is_file():
        raise HotlineError(f"{path}: no such checkpoint")
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:
        raise HotlineError(f"{path}: not a readable checkpoint ({type(e).__name__})") from None
    if not isinstance(obj, dict) or obj.get("format") != CHECKPOINT_FORMAT:
        raise HotlineError(f"{path}: not a hotline training checkpoint")
    saved = obj["config"]
    for k in RESUME_FIELDS:
        a, b = saved.get(k), getattr(cfg, k)
        if isinstance(a, list):
            a = tuple(a)
        if a != b:
            raise HotlineError(f"{path}: checkpoint has --{k.replace('_', '-')} {a}, this run {b}")
    if obj["data"] != data_fingerprint(data):
        raise HotlineError(f"{path}: checkpoint was taken on other data ({obj['data']['name']}, "
                           f"{obj['data']['samples']} samples)")
    if obj["position"][0] > cfg.epochs or (obj["position"][0] == cfg.epochs and obj["position"][1]):
        raise HotlineError(f"{path}: checkpoint is past --epochs {cfg.epochs}")
    return obj


def train(data, cfg, progress=None, keep=False):
    """Train ``data`` (a `TrainData`) as ``cfg`` says. Returns the JSON report; with ``keep``,
    (report, trainer) and the caller closes the trainer (tests read its tables)."""
    torch = _torch()
    cfg.check()
    notes = []
    for path in dict.fromkeys(p for p in (cfg.checkpoint, cfg.resume) if p):
        remove_stale_partial(path, notes)
    ckpt = load_checkpoint(cfg.resume, cfg, data) if cfg.resume else None
    trainer = TRAINERS[cfg.mode](data, cfg, notes)
    if ckpt is not None and ckpt["hot_keys"] is not None:
        trainer.hot_keys = ckpt["hot_keys"].numpy().astype(np.uint32)
    try:
        trainer.setup()
        report = _run(trainer, data, cfg, ckpt, progress, notes, torch)
    except BaseException:
        trainer.close()
        raise
    if keep:
        return report, trainer
    trainer.close()
    return report


def _run(trainer, data, cfg, ckpt, progress, notes, torch):
    nb = trainer.num_batches()
    losses, history, step_seconds = [], [], []
    epoch, batch, seconds, samples = 0, 0, 0.0, 0
    acc = {"loss": 0.0, "samples": 0, "seconds": 0.0}
    if ckpt is not None:
        trainer.model.load_state_dict(ckpt["model"])
        trainer.opt.load_state_dict(ckpt["optimizer"])
        trainer.load_tables([t.numpy() for t in ckpt["tables"]])
        losses, history, step_seconds = list(ckpt["losses"]), list(ckpt["history"]), list(ckpt["step_seconds"])
        epoch, batch = ckpt["position"]
        seconds, samples, acc = ckpt["seconds"], ckpt["samples"], dict(ckpt["epoch_acc"])
        trainer.counters_base = dict(ckpt["counters"])
        trainer.bytes_h2d += ckpt["bytes"][0]
        trainer.bytes_d2h += ckpt["bytes"][1]
        trainer.device_seconds += ckpt["device_seconds"]
        notes.append(f"resumed from {cfg.resume} at epoch {epoch + 1}, step {batch + 1}")
    fp = data_fingerprint(data)
    cfg_saved = {k: getattr(cfg, k) for k in RESUME_FIELDS}
    step = epoch * nb + batch
    stop = cfg.max_steps

    def state(position):
        return {"config": cfg_saved, "data": fp, "position": list(position), "losses": losses,
                "history": history, "step_seconds": step_seconds, "seconds": seconds,
                "samples": samples, "epoch_acc": acc}

    stopped = False
    while epoch < cfg.epochs and not stopped:
        trainer.begin_epoch(batch)
        for j in range(batch, nb):
            last = j == nb - 1
            halt = stop is not None and step + 1 >= stop
            due = bool(cfg.checkpoint) and (last or halt or (cfg.checkpoint_every > 0 and
                                                              (step + 1) % cfg.checkpoint_every == 0))
            t0 = time.perf_counter()
            loss = trainer.train_batch(j, prefetch=not (due or halt))
            dt = time.perf_counter() - t0
            if not math.isfinite(loss):
                raise HotlineError(f"the loss is {loss} at epoch {epoch + 1}, step {j + 1}; "
                                   f"lower --lr (now {cfg.lr})")
            s0, s1 = trainer.batch_range(j)
            losses.append(loss)
            step_seconds.append(dt)
            seconds += dt
            samples += s1 - s0
            acc["loss"] += loss * (s1 - s0)
            acc["samples"] += s1 - s0
            acc["seconds"] += dt
            step += 1
            if progress is not None:
                progress(s1 - s0, loss)
            if due and not last:
                save_checkpoint(cfg.checkpoint, trainer, state((epoch, j + 1)))
            if halt and not last:
                stopped = True
                break
        if stopped:
            break
        test_loss, test_auc = trainer.evaluate()
        history.append({"epoch": epoch + 1, "train_logloss": acc["loss"] / acc["samples"],
                        "test_logloss": test_loss, "test_auc": test_auc,
                        "samples_per_s": acc["samples"] / acc["seconds"] if acc["seconds"] else 0.0,
                        "seconds": acc["seconds"], "steps": nb})
        acc = {"loss": 0.0, "samples": 0, "seconds": 0.0}
        epoch, batch = epoch + 1, 0
        if cfg.checkpoint:
            save_checkpoint(cfg.checkpoint, trainer, state((epoch, 0)))
        if stop is not None and step >= stop:
            stopped = True
    if stopped and epoch < cfg.epochs:
        notes.append(f"stopped after {step} steps (--max-steps)")
    if cfg.mode == "hotline":
        trainer.sync(count=True)
    return _report(trainer, data, cfg, losses, history, step_seconds, seconds, samples, notes)


def _report(trainer, data, cfg, losses, history, step_seconds, seconds, samples, notes):
    counters = trainer.device_counters()
    out = {
        "mode": cfg.mode,
        "device_url": cfg.device_url if cfg.mode == "hotline" else None,
        "torch_device": str(trainer.dev),
        "data": data.name,
        "samples": data.num_samples,
        "train_samples": data.n_train,
        "test_samples": data.n_test,
        "tables": data.num_tables,
        "table_rows": int(data.table_sizes.sum()),
        "epochs": cfg.epochs,
        "batch_size": cfg.batch_size,
        "steps": len(losses),
        "optimizer": cfg.optimizer,
        "lr": cfg.lr,
        "dim": cfg.dim,
        "row_bytes": trainer.lay.nbytes,
        "seed": cfg.seed,
        "hot_rows_requested": cfg.hot_rows,
        "samples_per_s": samples / seconds if seconds else 0.0,
        "train_seconds": seconds,
        # hotline: time spent inside the accelerator calls (push / pull / scatter). The model
        # device runs in the training thread; hardware fragments and moves rows beside it.
        "device_seconds": trainer.device_seconds,
        "samples_per_s_without_device": (samples / (seconds - trainer.device_seconds)
                                         if seconds > trainer.device_seconds else 0.0),
        "train_logloss": history[-1]["train_logloss"] if history else None,
        "test_logloss": history[-1]["test_logloss"] if history else None,
        "test_auc": history[-1]["test_auc"] if history else None,
        "bytes_host_to_device": trainer.bytes_h2d,
        "bytes_device_to_host": trainer.bytes_d2h,
        "history": history,
        "losses": losses,
        "step_seconds": step_seconds,
        "counters": counters,
        "notes": notes,
    }
    if cfg.mode == "hotline":
        c = counters
        out.update(hot_rows=int(len(trainer.placement.keys)),
                   hot_lookup_fraction=c["hits"] / c["lookups"] if c["lookups"] else 0.0,
                   popular_fraction=(c["popular_samples"] / c["samples"] if c["samples"] else 0.0),
                   device=trainer.device.info())
    elif cfg.hot_rows:
        hot, pop = planned_fractions(data, cfg)
        out.update(hot_rows=None, hot_lookup_fraction=hot, popular_fraction=pop)
    else:
        out.update(hot_rows=None, hot_lookup_fraction=None, popular_fraction=None)
    return out


def planned_fractions(data, cfg):
    """hot_lookup_fraction and popular_fraction of the training split under the exact hot set
    (what hotline mode would see, CAM refusals aside), for the modes that use no device."""
    n = data.n_train
    keys = data.keys[:data.offsets[n]]
    window = profile_samples(n, cfg.profile_fraction)
    hot = exact_hot_set(keys[:data.offsets[window]], cfg.hot_rows)
    is_hot = np.isin(keys, hot.keys)
    starts = data.offsets[:n]
    nonempty = np.diff(data.offsets[:n + 1]) > 0
    popular = np.ones(n, bool)
    if nonempty.any():
        popular[nonempty] = np.logical_and.reduceat(is_hot, starts[nonempty])
    return float(is_hot.mean()) if len(keys) else 0.0, float(popular.mean())


# ----------------------------------------------------------------------------------------
# the command line


def _size(text):
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in units and t[-1:] else ""
    try:
        v = float(t[:-1] if unit else t) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 4G, 512M, 1048576)") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return int(v)


def _widths(text):
    try:
        v = tuple(int(x) for x in text.split("-") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of widths like 512-256-64") from None
    if not v or min(v) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: widths must be positive integers")
    return v


def _test_fraction(text):
    return fraction(text, low_open=False)


EXAMPLE = """example:
  hotline train synth:criteo-kaggle:100000 --max-ind-range 200000 --mode hotline \\
      --batch-size 1024 --hot-rows 16384 --epochs 1 --json train.json --plot train.png
  hotline train ../shared/data/criteo_kaggle/train_random4584.csv.gz --mode baseline \\
      --batch-size 128 --hot-rows 2600 --optimizer adagrad --json base.json

modes: baseline (tables in host memory, the CPU gathers and ships each batch's rows),
hotline (hot rows on the torch device, cold rows gathered/scattered by the accelerator at
--device-url, popular and non-popular micro-batches, double-buffered), device-only (all
tables on the torch device). Same --seed and data: the same losses in every mode."""


def add_parser(sub):
    """Register `hotline train` on the CLI's subparsers (called by `hotline.cli`)."""
    p = sub.add_parser("train", help="train DLRM in baseline, hotline or device-only mode",
                       epilog=EPILOG_DATA + "\n\n" + EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", metavar="DATA", help="input data (see below)")
    p.add_argument("--format", dest="fmt", choices=FORMATS, help="force the input format")
    p.add_argument("--max-ind-range", type=positive_int, metavar="M",
                   help="fold every table to at most M rows (row id modulo M; for Criteo text "
                        "int(hex) %% M, as the DLRM reference); the generator's 26 tables have "
                        "33.8M rows without it")
    p.add_argument("--max-samples", type=positive_int, metavar="N",
                   help="read only the first N samples")
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--batch-size", type=positive_int, required=True, metavar="B")
    p.add_argument("--hot-rows", type=positive_int, metavar="K",
                   help="hot-set size (required for hotline; with the other modes it only "
                        "reports the hot fractions)")
    p.add_argument("--profile-fraction", type=fraction, default=1.0, metavar="F",
                   help="plan the hot set on the first ceil(F x train samples) (default 1.0)")
    p.add_argument("--device-url", default="model://", metavar="URL",
                   help="the accelerator for hotline mode (default model://)")
    p.add_argument("--epochs", type=positive_int, default=1)
    p.add_argument("--max-steps", type=positive_int, metavar="N",
                   help="stop after N steps in all (a later --resume continues)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd",
                   help="sgd, or adagrad (row-wise for the embeddings: the accumulator travels "
                        "in the row)")
    p.add_argument("--lr", type=float, metavar="LR",
                   help=f"learning rate (default {DEFAULT_LR['sgd']} for sgd, "
                        f"{DEFAULT_LR['adagrad']} for adagrad)")
    p.add_argument("--dim", type=positive_int, default=16, help="embedding dimension (16)")
    p.add_argument("--bottom", type=_widths, default=(512, 256, 64), metavar="W-W-...",
                   help="bottom MLP hidden widths (default 512-256-64; it ends at --dim)")
    p.add_argument("--top", type=_widths, default=(512, 256), metavar="W-W-...",
                   help="top MLP hidden widths (default 512-256; it ends at 1)")
    p.add_argument("--test-fraction", type=_test_fraction, default=0.1, metavar="F",
                   help="hold out the last F of the samples for test_auc (default 0.1)")
    p.add_argument("--checkpoint", metavar="PATH",
                   help="write a checkpoint here at every epoch end (to a hidden .partial "
                        "file first, renamed when complete: PATH stays the last complete one)")
    p.add_argument("--checkpoint-every", type=positive_int, default=0, metavar="N",
                   help="also every N steps")
    p.add_argument("--resume", metavar="PATH", help="continue from this checkpoint (bit-identical)")
    p.add_argument("--host-memory", type=_size, metavar="SIZE",
                   help="host memory budget for the tables (default: available RAM)")
    p.add_argument("--device-memory", type=_size, metavar="SIZE",
                   help="torch device memory budget (default: free device memory; RAM on cpu)")
    p.add_argument("--torch-device", metavar="DEV", help="torch device (default cuda if available, else cpu)")
    p.add_argument("--threads", type=positive_int, metavar="N",
                   help="torch CPU threads (default: torch's, one per core; on shared or busy "
                        "cores 1 is often much faster; two runs with the same count, the default "
                        "included, are bit-identical)")
    p.add_argument("--plot", metavar="PNG", help="write loss and throughput curves here")
    p.add_argument("--json", metavar="OUT", required=True, help="write the JSON report here")
    p.set_defaults(func=cmd_train)
    return p


def cmd_train(args):
    check_out(args.json)
    for path in (args.plot, args.checkpoint):
        if path:
            check_out(path)
    cfg = TrainConfig(mode=args.mode, batch_size=args.batch_size, hot_rows=args.hot_rows,
                      device_url=args.device_url, epochs=args.epochs, seed=args.seed,
                      optimizer=args.optimizer, lr=args.lr, dim=args.dim, bottom=args.bottom,
                      top=args.top, test_fraction=args.test_fraction,
                      profile_fraction=args.profile_fraction, max_ind_range=args.max_ind_range,
                      checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
                      resume=args.resume, max_steps=args.max_steps, host_memory=args.host_memory,
                      device_memory=args.device_memory, torch_device=args.torch_device,
                      threads=args.threads).check()
    if cfg.mode == "hotline":
        scheme = cfg.device_url.partition("://")
        if not scheme[1]:
            raise HotlineError(f"--device-url {cfg.device_url!r} has no scheme (e.g. model://)")
    early = []  # before any work: a stale partial checkpoint in the way is an error
    for path in dict.fromkeys(p for p in (cfg.checkpoint, cfg.resume) if p):
        remove_stale_partial(path, early)
    for n in early:
        say(f"hotline: note: {n}")
    ds = open_data(args.data, args.fmt, args.max_ind_range, args.max_samples)
    data = prepare_data(ds, cfg.test_fraction, cfg.max_ind_range)
    nb = -(-data.n_train // cfg.batch_size)
    with tqdm(total=data.n_train * cfg.epochs, desc=f"train ({cfg.mode})", unit="sample",
              unit_scale=True, disable=None, leave=False) as bar:
        def progress(n, loss):
            bar.update(n)
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        res = train(data, cfg, progress)
    for n in res["notes"]:
        say(f"hotline: note: {n}")
    if args.plot:
        plot_training(args.plot, res)
        res["plot"] = args.plot
    write_json(args.json, res)
    rows = [("data", res["data"]), ("mode", res["mode"] + (f" ({res['device_url']})"
                                                           if res["device_url"] else "")),
            ("torch device", res["torch_device"]),
            ("train / test samples", f"{res['train_samples']:,} / {res['test_samples']:,}"),
            ("tables / rows", f"{res['tables']} / {res['table_rows']:,}"),
            ("epochs x steps", f"{res['epochs']} x {nb}"),
            ("optimizer", f"{res['optimizer']} lr={res['lr']:g}"),
            ("samples / s", f"{res['samples_per_s']:,.0f}"),
            ("train logloss", res["train_logloss"]),
            ("test logloss", res["test_logloss"] if res["test_logloss"] is not None else "-"),
            ("test AUC", res["test_auc"] if res["test_auc"] is not None else "-"),
            ("bytes host -> device", fmt_bytes(res["bytes_host_to_device"])),
            ("hot-lookup fraction", res["hot_lookup_fraction"]
             if res["hot_lookup_fraction"] is not None else "-"),
            ("popular samples", res["popular_fraction"]
             if res["popular_fraction"] is not None else "-")]
    if res["mode"] == "hotline":
        c = res["counters"]
        rows += [("time in the device (model)", f"{res['device_seconds']:.1f} s of "
                                                 f"{res['train_seconds']:.1f} s"),
                 ("samples / s without it", f"{res['samples_per_s_without_device']:,.0f}"),
                 ("hot rows (CAM)", res["hot_rows"]),
                 ("DMA rows gathered / scattered", f"{c['gather_rows']:,} / {c['scatter_rows']:,}"),
                 ("DMA errors", c["window_errors"] + c["axi_errors"])]
    print(table(rows, ["", "value"]))
    return 0


def plot_training(path, res):
    """PNG: per-step training loss (and its running mean), throughput per step window."""
    import matplotlib  # lazy: matplotlib takes a second to import; only --plot needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: (see above)
    losses = np.asarray(res["losses"])
    secs = np.asarray(res["step_seconds"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    x = np.arange(1, len(losses) + 1)
    a.plot(x, losses, lw=0.6, alpha=0.5, label="step loss")
    w = max(1, len(losses) // 50)
    if len(losses) >= w:
        run = np.convolve(losses, np.ones(w) / w, mode="valid")
        a.plot(x[w - 1:], run, label=f"mean of {w}")
    for h in res["history"]:
        if h["test_logloss"] is not None:
            a.axhline(h["test_logloss"], color="tab:red", ls=":", lw=0.8)
    a.set(xlabel="step", ylabel="logloss", title="training loss (dotted: test logloss per epoch)")
    a.legend()
    a.grid(True, alpha=0.3)
    bs = res["batch_size"]
    if len(secs):
        w = max(1, len(secs) // 50)
        k = len(secs) // w
        tput = (bs * w) / secs[:k * w].reshape(k, w).sum(1) if k else np.array([])
        b.plot((np.arange(k) + 1) * w, tput)
    b.set(xlabel="step", ylabel="samples / s", title=f"throughput ({res['mode']}, B={bs})")
    b.set_ylim(bottom=0)
    b.grid(True, alpha=0.3)
    fig.suptitle(f"{res['data']}: {res['mode']}, {res['optimizer']}, dim {res['dim']}")
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
