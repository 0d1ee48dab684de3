"""The sharded index-stream format: a directory of fixed-size shards of ``.npy`` arrays and a
small JSON index (docs/design.md, "Sharded index streams"), written in bounded memory from
any reader's chunks (`write_shards`) and read one shard at a time (`ShardedDataset`).

A directory ``OUT/`` holds ``index.json`` and, for shard ``i`` (``shard-%05d``), the files
``shard-%05d.indices.npy`` (row ids, sample-major then feature-major), ``.lengths.npy``
(int32 [n, F]; absent when every sample is single-hot), ``.dense.npy`` (float32 [n, D], raw
values: no log1p), ``.label.npy`` (float32 [n]; absent without labels). Every shard holds
``shard_samples`` samples except the last.
"""
import hashlib
import json
import os
import re
import shutil
import zlib
from collections import OrderedDict
from pathlib import Path

import numpy as np

from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, ROW_BITS

from .readers import Dataset, fold_sizes, fsync_dir, write_failed, write_synced

FORMAT = "hotline-shards/1"
INDEX = "index.json"
DEFAULT_SHARD_SAMPLES = 1 << 18   # ~40 MB of Criteo samples a shard
MIN_SHARD_SAMPLES = 1 << 12       # a shard holds at least one evaluation chunk of the trainer
_SHARD_FILE = re.compile(r"shard-\d{5,}\.(indices|lengths|dense|label)\.npy")


def shard_file(root, i, field) -> Path:
    return Path(root) / f"shard-{i:05d}.{field}.npy"


def is_shard_index(path) -> bool:
    """Whether ``path`` is a shard directory (holding ``index.json``) or its index file."""
    path = Path(path)
    return (path / INDEX).is_file() if path.is_dir() else path.name == INDEX


def _crc(arrays) -> int:
    h = 0
    for a in arrays:
        h = zlib.crc32(np.ascontiguousarray(a).view(np.uint8), h)
    return h


def write_shards(chunks, out, shard_samples=DEFAULT_SHARD_SAMPLES, name=None) -> dict:
    """Write the `Dataset` chunks (`readers.iter_chunks`' form: each chunk's ``table_sizes``
    is the size so far) as a shard directory ``out``; returns the index. Memory holds one
    shard. The directory appears complete or not at all: it is built beside ``out``, fsynced
    and renamed over it (an earlier shard directory there is replaced, unless it holds a file
    this function did not write: refused). A failed write (a full disk) leaves ``out`` as it
    was and raises a one-line HotlineError."""
    out = Path(out)
    if shard_samples < MIN_SHARD_SAMPLES:
        raise HotlineError(f"--shard-samples must be at least {MIN_SHARD_SAMPLES}, not "
                           f"{shard_samples}")
    if out.exists() and not is_shard_index(out) and (not out.is_dir() or any(out.iterdir())):
        raise HotlineError(f"{out}: exists and is not a shard directory; refusing to replace it")
    foreign = _foreign(out) if out.is_dir() else None
    if foreign is not None:
        raise HotlineError(f"{out}: holds {foreign.name}, which 'data convert' did not write; "
                           f"refusing to replace the directory (move that out first)")
    tmp = out.with_name(f".{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        index = _write(chunks, tmp, shard_samples, name or out.name)
        fsync_dir(tmp)
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            out.rename(old)
        try:
            tmp.rename(out)
        except OSError:
            if old.exists():
                old.rename(out)
            raise
        fsync_dir(out.parent)
        shutil.rmtree(old, ignore_errors=True)
        return index
    except OSError as e:
        raise write_failed(out, e, is_shard_index(out)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write(chunks, root, shard_samples, name) -> dict:
    shards, pending, held, first, single = [], [], 0, None, True

    def flush(ds):
        i = len(shards)
        arrays = {"indices": ds.indices.astype(np.int32), "lengths": ds.lengths.astype(np.int32),
                  "dense": ds.dense, "label": ds.label}
        crc = {}
        for field, a in arrays.items():
            if a is not None:
                write_synced(shard_file(root, i, field), lambda f, a=a: _save_npy(f, a))
                crc[field] = _crc([a])
        shards.append({"samples": ds.num_samples, "lookups": ds.num_lookups, "crc32": crc})

    for ds in chunks:
        if ds.num_samples == 0:
            continue
        ds.validate()
        first = first or ds
        if ds.num_features != first.num_features or (ds.dense is None) != (first.dense is None) \
                or (ds.label is None) != (first.label is None):
            raise HotlineError(f"{name}: the chunks disagree on features, dense or labels")
        single = single and ds.single_hot
        pending.append(ds)
        held += ds.num_samples
        while held >= shard_samples:
            whole = Dataset.concat(pending, name)
            flush(whole.head(shard_samples))
            rest = whole.drop(shard_samples)
            pending, held = [rest], rest.num_samples
    if first is None:
        raise HotlineError(f"{name}: no samples")
    if held:
        flush(Dataset.concat(pending, name))
    sizes = ds.table_sizes
    big = np.nonzero(sizes > MAX_ROWS)[0]
    if big.size:
        raise HotlineError(f"{name}: table {int(big[0])} has {int(sizes[big[0]])} rows, more "
                           f"than 2^{ROW_BITS}; hash it with --max-ind-range")
    if single:  # every length is 1: the lengths are implied
        for i, s in enumerate(shards):
            shard_file(root, i, "lengths").unlink()
            del s["crc32"]["lengths"]
    index = {"format": FORMAT, "name": name, "samples": sum(s["samples"] for s in shards),
             "lookups": sum(s["lookups"] for s in shards), "tables": first.num_features,
             "dense_features": 0 if first.dense is None else first.dense.shape[1],
             "table_sizes": [int(x) for x in sizes], "single_hot": single,
             "shard_samples": shard_samples, "fields": list(shards[0]["crc32"]),
             "dtypes": {"indices": "int32", "lengths": "int32", "dense": "float32",
                        "label": "float32"},
             "dense_transform": "none", "shards": shards}
    index["fingerprint"] = _fingerprint(index)
    write_synced(root / INDEX, lambda f: f.write(json.dumps(index, indent=1) + "\n"), "w")
    return index


def _save_npy(f, a) -> None:
    """``np.save(f, a)``, written through ``f.write``: numpy writes a real file with fwrite,
    whose error on a full disk has lost its errno."""
    a = np.ascontiguousarray(a)
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(a))
    f.write(a.reshape(-1).view(np.uint8).data)


def _foreign(out) -> Path | None:
    """An entry of the directory ``out`` that `write_shards` does not write, if any."""
    return next((p for p in sorted(out.iterdir())
                 if not p.is_file() or not (p.name == INDEX or _SHARD_FILE.fullmatch(p.name))),
                None)


def _fingerprint(index) -> str:
    """sha256 of the index without its fingerprint: sizes, dtypes and every array's CRC."""
    body = {k: v for k, v in index.items() if k != "fingerprint"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class ShardedDataset:
    """A shard directory opened for reading: sizes from the index, samples one shard at a
    time (`shard`, `samples`), each shard checked (files, shapes, CRC, row ids) when first
    read and kept in a cache of ``cache_shards``. Any other `Dataset` attribute (``keys``,
    ``indices``, ``save``, ...) reads the whole stream into memory, for the commands that
    need it; `hotline train` streams instead (`hotline.train.split`). ``max_ind_range``
    folds every shard as it is read (`Dataset.fold`; ``table_sizes`` are the folded ones)."""

    def __init__(self, path, limit=None, cache_shards=2, max_ind_range=None):
        path = Path(path)
        self.root = path if path.is_dir() else path.parent
        self.index = _read_index(self.root / INDEX)
        ix = self.index
        self.name = ix["name"]
        self.max_ind_range = max_ind_range
        self.table_sizes = fold_sizes(ix["table_sizes"], max_ind_range)[0]
        counts = np.array([s["samples"] for s in ix["shards"]], np.int64)
        self.shard_starts = np.r_[0, np.cumsum(counts)]
        self.num_samples = int(self.shard_starts[-1]) if limit is None else min(limit, int(self.shard_starts[-1]))
        self.single_hot = bool(ix["single_hot"])
        self.has_label = "label" in ix["fields"]
        self.dense_features = int(ix["dense_features"]) if "dense" in ix["fields"] else 0
        self.cache_shards = cache_shards
        self._cache = OrderedDict()
        self._whole = None
        for i in range(len(ix["shards"])):
            for field in ix["fields"]:
                if not shard_file(self.root, i, field).is_file():
                    raise HotlineError(f"{shard_file(self.root, i, field)}: shard file missing")

    @property
    def num_features(self) -> int:
        return len(self.table_sizes)

    @property
    def num_shards(self) -> int:
        return int(np.searchsorted(self.shard_starts, self.num_samples, side="left")) \
            if self.num_samples else 0

    def head(self, n) -> "ShardedDataset":
        """The first ``n`` samples (no shard is read)."""
        return ShardedDataset(self.root, min(n, self.num_samples), self.cache_shards,
                              self.max_ind_range)

    def shard(self, i) -> Dataset:
        """Shard ``i``, checked, through the cache."""
        if i in self._cache:
            self._cache.move_to_end(i)
            return self._cache[i]
        ds = self.read_shard(i)
        self._cache[i] = ds
        while len(self._cache) > self.cache_shards:
            self._cache.popitem(last=False)
        return ds

    def read_shard(self, i) -> Dataset:
        """Shard ``i`` from disk, checked (files, shapes, dtypes, CRC, row ids); not cached."""
        info, F = self.index["shards"][i], self.num_features
        n = info["samples"]
        arrays = {}
        for field in self.index["fields"]:
            f = shard_file(self.root, i, field)
            try:
                a = np.load(f, allow_pickle=False)
            except FileNotFoundError:
                raise HotlineError(f"{f}: shard file missing") from None
            except (ValueError, OSError, EOFError) as e:
                raise HotlineError(f"{f}: not a readable .npy ({type(e).__name__})") from None
            if _crc([a]) != info["crc32"][field]:
                raise HotlineError(f"{f}: corrupt shard (CRC mismatch with {INDEX})")
            arrays[field] = a
        lengths = arrays.get("lengths")
        if lengths is None:  # single-hot: a read-only view, no memory per sample
            lengths = np.broadcast_to(np.ones(1, np.int32), (n, F))
        expect = {"indices": (info["lookups"],), "lengths": (n, F),
                  "dense": (n, self.dense_features), "label": (n,)}
        for field, a in arrays.items():
            if a.shape != expect[field] or a.dtype != np.dtype(self.index["dtypes"][field]):
                raise HotlineError(f"{shard_file(self.root, i, field)}: shape {a.shape} "
                                   f"{a.dtype}, the index says {expect[field]} "
                                   f"{self.index['dtypes'][field]}")
        ds = Dataset(lengths, arrays["indices"].astype(np.int64),
                     np.asarray(self.index["table_sizes"], np.int64), arrays.get("dense"),
                     arrays.get("label"), self.name)
        try:
            return ds.validate().fold(self.max_ind_range)
        except HotlineError as e:
            raise HotlineError(f"{self.root / f'shard-{i:05d}'}: {e}") from None

    def samples(self, s0, s1) -> Dataset:
        """Samples [s0, s1) as one `Dataset` (reads the shards they lie in)."""
        s1 = min(s1, self.num_samples)
        first = int(np.searchsorted(self.shard_starts, s0, side="right")) - 1
        parts = []
        i = first
        while i < len(self.index["shards"]) and self.shard_starts[i] < s1:
            ds = self.shard(i)
            a, b = max(s0, self.shard_starts[i]) - self.shard_starts[i], min(s1, self.shard_starts[i + 1]) - self.shard_starts[i]
            parts.append(ds.head(int(b)).drop(int(a)))
            i += 1
        return Dataset.concat(parts, self.name)

    def iter_shards(self):
        """Every shard in order, cut at the limit."""
        for i in range(self.num_shards):
            yield self.samples(int(self.shard_starts[i]), int(self.shard_starts[i + 1]))

    def load(self) -> Dataset:
        """The whole stream in memory (validated)."""
        if self._whole is None:
            self._whole = Dataset.concat(list(self.iter_shards()), self.name).validate()
        return self._whole

    def __getattr__(self, name):
        if name.startswith("_") or name in ("index", "root"):
            raise AttributeError(name)
        return getattr(self.load(), name)


def _read_index(path) -> dict:
    if not path.is_file():
        raise HotlineError(f"{path}: no such shard index")
    try:
        ix = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise HotlineError(f"{path}: not a JSON shard index ({type(e).__name__})") from None
    if not isinstance(ix, dict) or ix.get("format") != FORMAT:
        raise HotlineError(f"{path}: format {ix.get('format') if isinstance(ix, dict) else None!r}, "
                           f"expected {FORMAT!r}")
    if ix.get("fingerprint") != _fingerprint(ix):
        raise HotlineError(f"{path}: the index does not match its fingerprint (edited or torn)")
    return ix
