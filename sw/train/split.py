"""A `Dataset` made ready for training: tables folded, dense features log-scaled, labels
checked, the last ``test_fraction`` of the samples held out (`prepare_data` -> `TrainData`)."""
import functools
import math
import zlib
from dataclasses import dataclass

import numpy as np

from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, ROW_BITS
from hotline.data.readers import fold_sizes
from hotline.data.shards import ShardedDataset
from hotline.host.host_memory import M_MMAP_THRESHOLD, mallopt


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
    def num_samples(self) -> int:
        return len(self.label)

    @property
    def num_tables(self) -> int:
        return len(self.table_sizes)

    @property
    def n_test(self) -> int:
        return self.num_samples - self.n_train

    def crc32(self) -> int:
        """CRC-32 of the keys, then the labels, then the (log) dense features."""
        h = zlib.crc32(np.ascontiguousarray(self.keys).view(np.uint8))
        h = zlib.crc32(np.ascontiguousarray(self.label).view(np.uint8), h)
        return zlib.crc32(np.ascontiguousarray(self.dense).view(np.uint8), h)


def prepare_data(ds, test_fraction=0.1, max_ind_range=None):
    """`TrainData` from a `Dataset`, or `ShardedTrainData` from a `ShardedDataset` (read shard
    by shard): ``--max-ind-range M`` folds every table to at most M rows (row id modulo M, as
    the DLRM reference hashes); the last ``test_fraction`` of the samples is held out."""
    sharded = isinstance(ds, ShardedDataset)
    if not (ds.has_label if sharded else ds.label is not None):
        raise HotlineError(f"{ds.name}: no labels; training needs a label column")
    sizes, modulo = _fold(ds.name, ds.table_sizes, max_ind_range)
    n = ds.num_samples
    n_test = int(math.floor(test_fraction * n))
    if n - n_test < 1:
        raise HotlineError(f"{ds.name}: {n} samples leave none for training with "
                           f"--test-fraction {test_fraction}")
    if sharded:
        return ShardedTrainData(ds, sizes, modulo, n - n_test)
    ds = ds.fold(modulo).validate()
    dense, label = _dense_label(ds)
    return TrainData(ds.name, dense, label, ds.lengths.astype(np.int32), ds.keys,
                     ds.sample_offsets, sizes, n - n_test, ds.single_hot)


def _fold(name, table_sizes, max_ind_range) -> tuple[np.ndarray, int | None]:
    """(table sizes after ``--max-ind-range`` (`fold_sizes`), the modulo to apply to row ids
    or None); a table still larger than the key's row field is an error."""
    sizes, modulo = fold_sizes(table_sizes, max_ind_range)
    big = np.nonzero(sizes > MAX_ROWS)[0]
    if big.size:
        raise HotlineError(f"{name}: table {int(big[0])} has {int(sizes[big[0]])} rows, more "
                           f"than 2^{ROW_BITS}; use --max-ind-range")
    return sizes, modulo


def _dense_label(ds, where=None) -> tuple[np.ndarray, np.ndarray]:
    """(log1p of the dense features, or one constant column without them; labels), checked."""
    where = where or ds.name
    if ds.dense is not None and ds.dense.shape[1]:
        dense = np.log1p(np.maximum(ds.dense.astype(np.float32), 0.0)).astype(np.float32)
    else:
        dense = np.zeros((ds.num_samples, 1), np.float32)  # no dense features: a constant input
    if not np.all(np.isfinite(dense)):
        raise HotlineError(f"{where}: field 'dense' has a non-finite value")
    label = ds.label.astype(np.float32)
    if not np.all((label == 0) | (label == 1)):
        raise HotlineError(f"{where}: field 'label' must be 0 or 1")
    return dense, label


@functools.cache
def _fix_mmap_threshold() -> None:
    """Keep glibc's mmap threshold at its default 128 KiB. Otherwise it rises to the size of
    the first freed shard array, later shards come from the heap, and the freed ones stay
    resident (measured: +40 MB of RSS over 25 shards of 16k samples)."""
    mallopt(M_MMAP_THRESHOLD, 128 * 1024)


@dataclass
class _Shard:
    """One shard prepared for training (`_dense_label`, keys of the folded row ids)."""
    keys: np.ndarray      # uint32 [l]
    lengths: np.ndarray   # int32 [n, F]
    offsets: np.ndarray   # int64 [n + 1], from 0
    dense: np.ndarray     # float32 [n, D]
    label: np.ndarray     # float32 [n]


class ShardedTrainData:
    """`TrainData`'s interface over a shard stream, in bounded memory: a shard is read,
    checked and prepared when a sample of it is first touched, and at most ``cache_shards``
    stay in memory. A process that touches only samples [s0, s1) (a data-parallel rank)
    reads only the shards holding them.

    ``dense[s0:s1]``, ``label[s0:s1]``, ``lengths[s0:s1]``, ``offsets[i]`` and
    ``offsets[a:b]`` give arrays; ``keys[l0:l1]`` gives an array up to ``slice_limit``
    lookups and a `KeyRange` (read shard by shard by `exact_hot_set`; ``np.asarray``
    materialises it) beyond. `crc32` streams."""

    def __init__(self, ds, table_sizes, modulo, n_train, cache_shards=2):
        _fix_mmap_threshold()
        self.source, self.modulo = ds, modulo
        self.name, self.table_sizes, self.n_train = ds.name, table_sizes, n_train
        self.n_test = ds.num_samples - n_train
        self.num_samples, self.num_tables = ds.num_samples, len(table_sizes)
        self.single_hot = ds.single_hot
        self.cache_shards = cache_shards
        self._cache = {}
        self.sample_starts = np.minimum(ds.shard_starts[:ds.num_shards + 1], self.num_samples)
        per_shard = [s["lookups"] for s in ds.index["shards"][:ds.num_shards]]
        if ds.num_shards and self.sample_starts[-1] < ds.shard_starts[ds.num_shards]:
            per_shard[-1] = int(self._shard(ds.num_shards - 1).offsets[-1])  # cut by a limit
        self.lookup_starts = np.r_[0, np.cumsum(per_shard, dtype=np.int64)]
        self.slice_limit = max(int(max(per_shard)), 1 << 20)
        width = ds.dense_features or 1
        self.dense = _Column(self, "dense", (self.num_samples, width))
        self.label = _Column(self, "label", (self.num_samples,))
        self.lengths = _Column(self, "lengths", (self.num_samples, self.num_tables))
        self.offsets = _Offsets(self)
        self.keys = _Keys(self)

    def _shard(self, i) -> _Shard:
        if i in self._cache:
            self._cache[i] = self._cache.pop(i)   # most recent last
            return self._cache[i]
        ds = self.source.read_shard(i)
        n = int(min(self.source.shard_starts[i + 1], self.num_samples) - self.source.shard_starts[i])
        ds = ds.head(n)
        ds = ds.fold(self.modulo)
        dense, label = _dense_label(ds, f"{self.source.root}: shard {i}")
        shard = _Shard(ds.keys, ds.lengths.astype(np.int32), ds.sample_offsets, dense, label)
        self._cache[i] = shard
        while len(self._cache) > self.cache_shards:
            del self._cache[next(iter(self._cache))]
        return shard

    def _pieces(self, starts, a, b):
        """(shard, local start, local end) covering positions [a, b) of ``starts``."""
        i = max(int(np.searchsorted(starts, a, side="right")) - 1, 0)
        while a < b and i < len(starts) - 1:
            lo, hi = max(a, starts[i]), min(b, starts[i + 1])
            if lo < hi:
                yield i, int(lo - starts[i]), int(hi - starts[i])
            if starts[i + 1] >= b:
                return
            i += 1

    def sample_slice(self, field, s0, s1) -> np.ndarray:
        parts = [getattr(self._shard(i), field)[a:b]
                 for i, a, b in self._pieces(self.sample_starts, s0, s1)]
        if not parts:
            return getattr(self._shard(0), field)[:0]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def key_slice(self, l0, l1) -> np.ndarray:
        parts = [self._shard(i).keys[a:b] for i, a, b in self._pieces(self.lookup_starts, l0, l1)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, np.uint32)

    def key_chunks(self, l0, l1):
        """The keys of lookups [l0, l1), one array a shard."""
        for i, a, b in self._pieces(self.lookup_starts, l0, l1):
            yield self._shard(i).keys[a:b]

    def crc32(self) -> int:
        """`TrainData.crc32` of the same data, shard by shard."""
        h = 0
        for field in ("keys", "label", "dense"):
            for i in range(len(self.sample_starts) - 1):
                h = zlib.crc32(np.ascontiguousarray(getattr(self._shard(i), field)).view(np.uint8), h)
        return h


def _bounds(key, length) -> tuple[int, int]:
    if not isinstance(key, slice) or key.step not in (None, 1):
        raise TypeError("a sharded stream takes contiguous slices only")
    a, b, _ = key.indices(length)
    return a, max(a, b)


class _Column:
    """A per-sample array of a `ShardedTrainData` (``shape``, contiguous slices)."""

    def __init__(self, data, field, shape):
        self.data, self.field, self.shape = data, field, shape

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        return self.data.sample_slice(self.field, *_bounds(key, self.shape[0]))

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self[:], dtype)


class _Offsets:
    """Global sample offsets [N + 1] of a `ShardedTrainData` (single-hot: computed)."""

    def __init__(self, data):
        self.data = data
        self.shape = (data.num_samples + 1,)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        d, F = self.data, self.data.num_tables
        if isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if key < 0 else 0)
            if d.single_hot or i == d.num_samples:
                return np.int64(i * F if d.single_hot else d.lookup_starts[-1])
            s = int(np.searchsorted(d.sample_starts, i, side="right")) - 1
            return d.lookup_starts[s] + d._shard(s).offsets[i - d.sample_starts[s]]
        a, b = _bounds(key, len(self))
        if d.single_hot:
            return np.arange(a, b, dtype=np.int64) * F
        parts = [d.lookup_starts[s] + d._shard(s).offsets[lo:hi]
                 for s, lo, hi in d._pieces(d.sample_starts, a, min(b, d.num_samples))]
        if b == len(self) and a < b:
            parts.append(d.lookup_starts[-1:])
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


class _Keys:
    """The uint32 key of every lookup of a `ShardedTrainData`, or of lookups [start, stop)
    (a `KeyRange`)."""
    dtype = np.dtype(np.uint32)

    def __init__(self, data, start=0, stop=None):
        self.data, self.start = data, start
        self.shape = ((int(data.lookup_starts[-1]) if stop is None else stop) - start,)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        a, b = _bounds(key, len(self))
        a, b = self.start + a, self.start + b
        return self.data.key_slice(a, b) if b - a <= self.data.slice_limit else KeyRange(self.data, a, b)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.data.key_slice(self.start, self.start + len(self)), dtype)

    def chunks(self):
        """The keys, one array a shard."""
        return self.data.key_chunks(self.start, self.start + len(self))


class KeyRange(_Keys):
    """Keys of lookups [start, stop) of a `ShardedTrainData`, not read yet."""
