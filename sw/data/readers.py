"""Embedding index streams: the `Dataset` container and readers for real data files.

A dataset is N samples over F sparse features; feature f looks up table f. Lookups are stored
flat in sample-major, feature-major order (`indices`), with `lengths[n, f]` lookups of feature f
in sample n (1 everywhere for single-hot data). Keys follow `hotline.contract.keys`:
``key = (table << ROW_BITS) | row``, 32 bits.

Readers (chosen by content, or forced with ``fmt``):
- ``criteo-csv``: Criteo Kaggle CSV with header ``Id,Label,I1..I13,C1..C26`` in any order (test
  files may lack Label); a header missing any other of them is refused;
- ``criteo-tsv``: raw Criteo TSV (label, 13 ints, 26 hex categoricals, no header; the 1TB logs too);
- ``arff``: Weka ARFF of Criteo columns (``?`` = missing);
- ``npz``: index stream with ``sparse`` [N, F] or ``indices`` + ``lengths`` [N, F], ``table_sizes`` [F],
  optional ``dense`` [N, D] and ``label`` [N];
- ``user-items``: ``user item item ...`` per line; one two-feature sample (user, item) per pair;
- ``recbole``: RecBole atomic ``.inter`` TSV (user_id, item_id[, rating]); label = rating >= 4;
- ``alimama``: PaddleRec DMR Alimama CSV (267 integer columns, three multi-hot histories).
Categorical values become per-table row ids in order of first appearance (an empty field is a
value of its own), or ``int(hex) % max_ind_range`` as in the DLRM reference. Text is read in
chunks of ``chunk_samples`` lines, so memory stays bounded by the chunk and the vocabularies.
"""
import gzip
import io
import math
import operator
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hotline.contract.errors import HotlineError
from hotline.contract.keys import KEY_BITS, MAX_ROWS, MAX_TABLES, ROW_BITS, make_keys

from .criteo_fast import Refused, criteo_batches

FORMATS = ("criteo-csv", "criteo-tsv", "arff", "npz", "user-items", "recbole", "alimama")
DEFAULT_CHUNK = 1 << 16

_MAX_HEX_DIGITS = 15
_EMPTY = np.uint64(1 << 63)  # the empty cell: above every value of at most 15 hex digits


def shared_data_dir() -> Path:
    """The real data folder: $HOTLINE_DATA, else ../shared/data beside the checkout, else
    /work/shared/data. It may not exist; callers skip real-data work then."""
    if os.environ.get("HOTLINE_DATA"):
        return Path(os.environ["HOTLINE_DATA"])
    beside = Path(__file__).resolve().parents[3] / "shared" / "data"  # sw/data/readers.py
    return beside if beside.exists() else Path("/work/shared/data")


def real_data_files() -> list:
    """Every data file under `shared_data_dir` that the readers support (empty if absent)."""
    root = shared_data_dir()
    if not root.exists():
        return []
    return [p for p in sorted(root.glob("*/*.gz")) if not p.name.endswith((".user.gz", ".item.gz"))]


def fold_sizes(table_sizes, max_ind_range) -> tuple[np.ndarray, int | None]:
    """``--max-ind-range M`` on row ids: (table sizes min(size, M), the modulo M to apply to
    row ids, or None when M is None or no table exceeds it). The one definition of the fold
    of .npz, shard, generator and non-hex inputs and of training (Criteo hex values are
    hashed ``int(hex) % M`` as they are read, as in the DLRM reference)."""
    sizes = np.asarray(table_sizes, np.int64)
    if max_ind_range is None:
        return sizes, None
    if max_ind_range <= 0:
        raise HotlineError(f"--max-ind-range must be positive, not {max_ind_range}")
    if not np.any(sizes > max_ind_range):
        return sizes, None
    return np.minimum(sizes, max_ind_range), int(max_ind_range)


@dataclass
class Dataset:
    """N samples x F features of embedding lookups, plus optional dense features and labels."""
    lengths: np.ndarray          # int32 [N, F]
    indices: np.ndarray          # int64 [sum(lengths)], row ids, sample-major then feature-major
    table_sizes: np.ndarray      # int64 [F]
    dense: np.ndarray | None = None   # float32 [N, D]
    label: np.ndarray | None = None   # float32 [N]
    name: str = "dataset"

    @property
    def num_samples(self):
        return self.lengths.shape[0]

    @property
    def num_features(self):
        return self.lengths.shape[1]

    @property
    def num_lookups(self):
        return self.indices.shape[0]

    @property
    def single_hot(self):
        return bool(np.all(self.lengths == 1))

    @property
    def sample_offsets(self):
        """int64 [N + 1]: lookups of sample n are ``offsets[n]:offsets[n + 1]``."""
        off = np.zeros(self.num_samples + 1, np.int64)
        np.cumsum(self.lengths.sum(axis=1, dtype=np.int64), out=off[1:])
        return off

    @property
    def tables(self):
        """int64 [L]: the table of every lookup."""
        feats = np.broadcast_to(np.arange(self.num_features), self.lengths.shape)
        return np.repeat(feats.ravel(), self.lengths.ravel())

    @property
    def keys(self):
        """uint32 [L]: the key of every lookup, in stream order."""
        return make_keys(self.tables, self.indices)

    def head(self, n):
        """The first ``n`` samples."""
        n = min(n, self.num_samples)
        end = int(self.lengths[:n].sum())
        return Dataset(self.lengths[:n], self.indices[:end], self.table_sizes,
                       None if self.dense is None else self.dense[:n],
                       None if self.label is None else self.label[:n], self.name)

    def dense_rows(self):
        """The same access pattern with each table's rows renumbered densely (0 .. distinct - 1,
        in row-id order), so that every table holds just the rows this stream touches."""
        tables, indices = self.tables, self.indices.copy()
        sizes = np.ones(self.num_features, np.int64)
        for t in range(self.num_features):
            rows, indices[tables == t] = np.unique(indices[tables == t], return_inverse=True)
            sizes[t] = max(1, len(rows))
        return Dataset(self.lengths, indices, sizes, self.dense, self.label, self.name)

    def drop(self, n):
        """Without the first ``n`` samples."""
        start = int(self.lengths[:n].sum())
        return Dataset(self.lengths[n:], self.indices[start:], self.table_sizes,
                       None if self.dense is None else self.dense[n:],
                       None if self.label is None else self.label[n:], self.name)

    def fold(self, max_ind_range):
        """The stream with every table folded to at most ``max_ind_range`` rows (row id
        modulo M, `fold_sizes`); itself when None or when no table is larger."""
        sizes, modulo = fold_sizes(self.table_sizes, max_ind_range)
        if modulo is None:
            return self
        return Dataset(self.lengths, self.indices % modulo, sizes, self.dense, self.label,
                       self.name)

    def validate(self, where=None):
        """Raise HotlineError if shapes, table sizes or row ids break the contract."""
        where = where or self.name
        n, f = self.lengths.shape
        if f == 0:
            raise HotlineError(f"{where}: no sparse features")
        if f > MAX_TABLES:
            raise HotlineError(f"{where}: {f} sparse features, at most {MAX_TABLES} fit the "
                               f"{KEY_BITS}-bit key with ROW_BITS={ROW_BITS}")
        if self.table_sizes.shape != (f,):
            raise HotlineError(f"{where}: table_sizes has shape {self.table_sizes.shape}, "
                               f"expected ({f},)")
        if np.any(self.lengths < 0):
            raise HotlineError(f"{where}: field 'lengths' has a negative entry")
        big = np.nonzero(self.table_sizes > MAX_ROWS)[0]
        if big.size:
            t = int(big[0])
            raise HotlineError(f"{where}: table {t} has {int(self.table_sizes[t])} rows, more "
                               f"than 2^{ROW_BITS}; hash it with --max-ind-range")
        if int(self.lengths.sum()) != self.indices.shape[0]:
            raise HotlineError(f"{where}: sum(lengths) = {int(self.lengths.sum())} but "
                               f"'indices' has {self.indices.shape[0]} entries")
        bad = (self.indices < 0) | (self.indices >= self.table_sizes[self.tables])
        if bad.any():
            i = int(np.argmax(bad))
            sample = int(np.searchsorted(self.sample_offsets, i, side="right") - 1)
            t = int(self.tables[i])
            raise HotlineError(f"{where}: sample {sample}, feature {t}: row id {int(self.indices[i])} "
                               f"is outside table {t} (size {int(self.table_sizes[t])})")
        for field, arr, ndim in (("dense", self.dense, 2), ("label", self.label, 1)):
            if arr is not None and (arr.ndim != ndim or arr.shape[0] != n):
                raise HotlineError(f"{where}: field '{field}' has shape {arr.shape}, "
                                   f"expected {n} rows")
        return self

    def save(self, path):
        """Write the dataset as an index-stream .npz (single-hot as ``sparse``)."""
        arrays = {"table_sizes": self.table_sizes.astype(np.int64)}
        if self.single_hot:
            arrays["sparse"] = self.indices.reshape(self.lengths.shape).astype(np.int64)
        else:
            arrays["indices"], arrays["lengths"] = self.indices.astype(np.int64), self.lengths
        if self.dense is not None:
            arrays["dense"] = self.dense.astype(np.float32)
        if self.label is not None:
            arrays["label"] = self.label.astype(np.float32)
        write_atomic(path, lambda f: np.savez(f, **arrays))

    @staticmethod
    def concat(parts, name):
        parts = list(parts)
        if not parts:
            raise HotlineError(f"{name}: no samples")
        opt = lambda attr: (None if getattr(parts[0], attr) is None
                            else np.concatenate([getattr(p, attr) for p in parts]))
        return Dataset(np.concatenate([p.lengths for p in parts]),
                       np.concatenate([p.indices for p in parts]),
                       parts[-1].table_sizes, opt("dense"), opt("label"), name)


def partial_path(path) -> Path:
    """The temporary file `write_atomic` writes before renaming it to ``path``."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


def output_target(path, option=None) -> tuple[Path, bool]:
    """How an output ``path`` is written: ``(target, straight)``. A new path or a regular file
    is replaced (`write_atomic`); through a symlink, ``target`` is the file it names, so the
    link stays. An existing file that is not regular (a character device such as /dev/null,
    a FIFO, /dev/stdout on a terminal or pipe) is written ``straight`` into, never replaced.
    HotlineError (naming ``option``) for an empty path or a directory."""
    if str(path) == "":
        raise HotlineError(f"{option or 'output'}: empty path")
    path = Path(path).expanduser()
    try:
        mode = os.stat(path).st_mode
    except OSError:  # a new path (or one the write will fail on, with its own message)
        return Path(os.path.realpath(path)), False
    if stat.S_ISDIR(mode):
        raise HotlineError(f"{option + ' ' if option else ''}{path}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        return path, True
    return Path(os.path.realpath(path)), False


def os_error(e) -> OSError | None:
    """The OSError that ``e`` is or was raised while handling (torch reports a failed write
    as a RuntimeError whose context is the OSError)."""
    while e is not None and not isinstance(e, OSError):
        e = e.__cause__ or e.__context__
    return e


def write_failed(path, e, kept) -> HotlineError:
    """The one-line error for a failed write of ``path`` (``kept``: its previous content
    stays)."""
    err = os_error(e)
    reason = (err.strerror or str(err)) if err is not None else str(e).splitlines()[0]
    return HotlineError(f"{path}: cannot write it ({reason})"
                        + ("; the previous one is unchanged" if kept else ""))


def write_synced(path, writer, mode="wb", sync=True) -> None:
    """``writer(file)`` on ``path`` opened with ``mode``, then flushed and (``sync``) fsynced."""
    with open(path, mode) as f:
        writer(f)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def fsync_dir(directory) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path, writer, mode="wb") -> None:
    """Write the output ``path`` with ``writer(file)`` (see `output_target` for where). A
    replaced file is written as `partial_path(target)`, fsynced, renamed over the target and
    the directory fsynced, so the target holds its previous content or the complete new one,
    even after a crash or power loss. Any failed write (a full disk: OSError, or torch's
    RuntimeError around one) removes the temporary file and raises `write_failed`'s one-line
    HotlineError. A process killed mid-write leaves the temporary behind; the next writer
    overwrites it."""
    target, straight = output_target(path)
    tmp = target if straight else partial_path(target)
    kept = not straight and target.is_file()
    try:
        if not straight:
            target.parent.mkdir(parents=True, exist_ok=True)
        write_synced(tmp, writer, mode, sync=not straight)  # a FIFO or device refuses fsync
        if not straight:
            tmp.replace(target)
            fsync_dir(target.parent)
    except (OSError, RuntimeError) as e:
        if os_error(e) is None:  # a RuntimeError of the writer's own, not a failed write
            raise
        raise write_failed(path, e, kept) from None
    finally:
        if not straight:
            tmp.unlink(missing_ok=True)


class Vocabulary:
    """Per-table value -> row id map in first-appearance order; with ``modulo`` set, the
    reader hashes ``int(hex) % modulo`` instead and the table has ``modulo`` rows."""

    def __init__(self, modulo=None):
        self.ids = {}
        self.modulo = modulo

    def __len__(self):
        return self.modulo if self.modulo else len(self.ids)

    def encode(self, values):
        """Row ids (int64) of a 1-D array of values, one vectorised pass per chunk."""
        uniq, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        ids = np.empty(len(uniq), np.int64)
        d = self.ids
        ids[order] = np.fromiter((d.setdefault(v, len(d)) for v in uniq[order].tolist()),
                                 np.int64, len(uniq))
        return ids[inverse]


def _open_text(path):
    path = Path(path)
    if not path.exists():
        raise HotlineError(f"{path}: no such file")
    if path.is_dir():
        raise HotlineError(f"{path}: is a directory, not a data file")
    raw = open(path, "rb")
    if raw.read(2) == b"\x1f\x8b":
        raw.seek(0)
        raw = gzip.GzipFile(fileobj=raw)
    else:
        raw.seek(0)
    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


def _read_lines(f, path, n):
    try:
        return f.readlines(n * 64) if n else []
    except (UnicodeDecodeError, EOFError, OSError, gzip.BadGzipFile) as e:
        raise HotlineError(f"{path}: unreadable ({type(e).__name__}: {str(e).splitlines()[0]})")


def _iter_line_chunks(f, path, chunk, first_line):
    """Yield (int64 array of line numbers, [lines]) for up to ``chunk`` lines at a time, the
    first numbered ``first_line``, with line endings stripped and empty lines left out (as
    the fast reader skips them), so that every error names the line of the file."""
    lineno = first_line
    pending = []
    while True:
        lines = _read_lines(f, path, chunk)
        if not lines and not pending:
            return
        pending.extend(l.rstrip("\r\n") for l in lines)
        while len(pending) >= chunk or (not lines and pending):
            out, pending = pending[:chunk], pending[chunk:]
            keep = [i for i, l in enumerate(out) if l]
            yield lineno + np.asarray(keep, np.int64), [out[i] for i in keep]
            lineno += len(out)
        if not lines:
            return



class _CriteoLayout:
    """Which columns of a delimited Criteo-style row are label, dense and categorical."""

    def __init__(self, sep, ncols, label, dense, cats, missing=("",), hex_cats=True, names=None,
                 binary_label=True):
        self.sep, self.ncols, self.label, self.dense, self.cats = sep, ncols, label, dense, cats
        self.missing, self.hex_cats, self.binary_label = missing, hex_cats, binary_label
        self.names = names or [f"column {i + 1}" for i in range(ncols)]


def _hex_values(path, linenos, name, cells, empty_value):
    """Decode a column of hex strings to uint64 in vectorised passes ('' -> ``empty_value``);
    ``linenos``: each cell's line, for the error."""
    width = cells.dtype.itemsize // 4
    codes = np.ascontiguousarray(cells).view(np.uint32).reshape(len(cells), width)
    digit = (codes >= 48) & (codes <= 57)
    lower = (codes >= 97) & (codes <= 102)
    upper = (codes >= 65) & (codes <= 70)
    pad = codes == 0
    bad = ~(digit | lower | upper | pad).all(axis=1) | ((~pad).sum(axis=1) > _MAX_HEX_DIGITS)
    if bad.any():
        i = int(np.argmax(bad))
        raise HotlineError(f"{path}:{linenos[i]}: field {name} = {str(cells[i])!r} is not a hex "
                           f"categorical value (at most {_MAX_HEX_DIGITS} hex digits)")
    d = np.where(digit, codes - 48, np.where(lower, codes - 87, codes - 55)).astype(np.uint64)
    values = np.zeros(len(cells), np.uint64)
    for c in range(width):
        values = np.where(pad[:, c], values, values * np.uint64(16) + d[:, c])
    values[pad[:, 0]] = empty_value
    return values


def _float_or_nan(text) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _number_problem(text, binary) -> str | None:
    """What is wrong with the cell ``text`` as a float32 number (a label 0 or 1 when
    ``binary``), or None."""
    try:
        value = float(text)
    except ValueError:
        return "is not a number"
    with np.errstate(over="ignore"):
        value = np.float32(value)
    if not np.isfinite(value):
        return "is not a finite number"
    return "is not a label (0 or 1)" if binary and value not in (0, 1) else None


def _parse_criteo_chunk(path, linenos, lines, layout, vocabs):
    """(sparse, dense, label) of the non-empty ``lines`` (file lines ``linenos``). A number
    that is not finite as float32 is an error, as is a Criteo label (``binary_label``) that
    is missing or other than 0 or 1: the error names the first such line of the column."""
    n = len(lines)
    seps = np.fromiter(map(operator.methodcaller("count", layout.sep), lines), np.int64, n)
    if np.any(seps != layout.ncols - 1):
        i = int(np.argmax(seps != layout.ncols - 1))
        raise HotlineError(f"{path}:{linenos[i]}: {seps[i] + 1} columns, expected {layout.ncols}")
    cells = np.array(layout.sep.join(lines).split(layout.sep)).reshape(n, layout.ncols)
    missing = np.isin(cells, layout.missing) if layout.missing != ("",) else cells == ""

    def numbers(j, binary=False):
        a = np.where(missing[:, j], "0", cells[:, j])
        with np.errstate(over="ignore"):  # too large for float32: inf, refused below
            try:
                values = a.astype(np.float32)
            except ValueError:  # cell by cell: what is not a number becomes NaN
                values = np.array([_float_or_nan(v) for v in a.tolist()], np.float32)
        bad = ~np.isfinite(values)
        if binary:
            bad |= missing[:, j] | ((values != 0) & (values != 1))
        for i in np.flatnonzero(bad).tolist():
            if binary and missing[i, j]:
                raise HotlineError(f"{path}:{linenos[i]}: field {layout.names[j]} is missing "
                                   f"(a label is 0 or 1)")
            why = _number_problem(a[i], binary)
            if why:
                raise HotlineError(f"{path}:{linenos[i]}: field {layout.names[j]} = "
                                   f"{str(a[i])!r} {why}")
        return values

    label = numbers(layout.label, layout.binary_label) if layout.label is not None else None
    dense = (np.stack([numbers(j) for j in layout.dense], axis=1) if layout.dense
             else np.zeros((n, 0), np.float32))
    sparse = np.empty((n, len(layout.cats)), np.int64)
    for t, j in enumerate(layout.cats):
        a = np.where(missing[:, j], "", cells[:, j])
        if layout.hex_cats:
            modulo = vocabs[t].modulo
            values = _hex_values(path, linenos, layout.names[j], a, 0 if modulo else _EMPTY)
            sparse[:, t] = (values % np.uint64(modulo)).astype(np.int64) if modulo else vocabs[t].encode(values)
        else:
            sparse[:, t] = vocabs[t].encode(a)
    return sparse, dense, label


CRITEO_CSV_COLUMNS = ("Id", "Label", *(f"I{i}" for i in range(1, 14)),
                      *(f"C{i}" for i in range(1, 27)))


def _check_criteo_header(path, names):
    """A Criteo CSV has every standard column (Label may be absent: test files), each once,
    and no other. Subsets are refused rather than trained as fewer tables without a word
    (ARFF files name their attributes and may be subsets: Weka filters columns out)."""
    missing = [c for c in CRITEO_CSV_COLUMNS if c not in names and c != "Label"]
    extra = [c for c in dict.fromkeys(names) if c not in CRITEO_CSV_COLUMNS]
    twice = [c for c in dict.fromkeys(names) if names.count(c) > 1]
    problems = ([f"lacks {', '.join(missing)}"] if missing else []) + \
               ([f"has unknown column{'s' * (len(extra) > 1)} {', '.join(map(repr, extra))}"]
                if extra else []) + \
               ([f"repeats {', '.join(twice)}"] if twice else [])
    if problems:
        raise HotlineError(f"{path}:1: the Criteo CSV header {'; '.join(problems)} (expected "
                           f"Id,Label,I1..I13,C1..C26; Label may be absent)")


def _numbered(names, prefix):
    """Positions of the columns ``prefix``1, ``prefix``2, ... present in ``names``, in the
    order of their numbers (I1 is dense feature 0 and C1 table 0 wherever they stand)."""
    found = [(int(c[len(prefix):]), i) for i, c in enumerate(names)
             if re.fullmatch(prefix + r"\d+", c)]
    return [i for _, i in sorted(found)]


def _criteo_layout(path, first):
    """Infer the layout from the first line; returns (layout, lines to skip)."""
    if first.startswith("@") or first.startswith("%"):
        return None, 0
    fields = first.split(",")
    if len(fields) > 1 and any(f in CRITEO_CSV_COLUMNS for f in fields):
        names = fields
        _check_criteo_header(path, names)
        label = names.index("Label") if "Label" in names else None
        dense, cats = _numbered(names, "I"), _numbered(names, "C")
        return _CriteoLayout(",", len(names), label, dense, cats, names=names), 1
    tabs = first.split("\t")
    if len(tabs) != 40:
        raise HotlineError(f"{path}:1: {len(tabs)} tab-separated columns, a raw Criteo row has 40 "
                           f"(label, 13 integer, 26 categorical)")
    return _CriteoLayout("\t", 40, 0, list(range(1, 14)), list(range(14, 40)),
                         names=CRITEO_CSV_COLUMNS[1:]), 0  # Label, I1..I13, C1..C26


def _arff_layout(path, f):
    """Read the ARFF header up to @data; return (layout, line number of the first data row)."""
    names, lineno = [], 0
    while True:
        line = f.readline()
        lineno += 1
        if not line:
            raise HotlineError(f"{path}: ARFF header has no @data line")
        low = line.strip().lower()
        if low.startswith("@attribute"):
            names.append(line.split()[1].strip("'\""))
        elif low.startswith("@data"):
            break
    label = names.index("Label") if "Label" in names else None
    dense, cats = _numbered(names, "I"), _numbered(names, "C")
    if not cats:
        raise HotlineError(f"{path}: ARFF has no categorical attributes C1..C26")
    return _CriteoLayout(",", len(names), label, dense, cats, missing=("?",), names=names), lineno + 1


def detect_format(path) -> str:
    """Guess the format of ``path`` from its name and first line."""
    path = Path(path)
    if path.suffix == ".npz":
        return "npz"
    with _open_text(path) as f:
        first = _read_lines(f, path, 1)[:1]
    if not first:
        raise HotlineError(f"{path}: empty file")
    first = first[0].rstrip("\r\n")
    if first.startswith("@") or first.startswith("%"):
        return "arff"
    if ":token" in first or ":float" in first:
        return "recbole"
    if "\t" in first and first.count("\t") == 39:
        return "criteo-tsv"
    if first.count(",") and any(f in CRITEO_CSV_COLUMNS for f in first.split(",")):
        return "criteo-csv"  # a header naming Criteo columns (checked by the reader)
    if first.count(",") == 266:
        return "alimama"
    if re.fullmatch(r"\d+( \d+)*\s*", first):
        return "user-items"
    raise HotlineError(f"{path}:1: unrecognised format (expected Criteo CSV/TSV, ARFF, .npz, "
                       f"RecBole .inter, Alimama CSV or 'user item ...' lists)")


def iter_chunks(path, fmt=None, max_ind_range=None, chunk_samples=DEFAULT_CHUNK, limit=None,
                engine="fast"):
    """Yield `Dataset` chunks of ``path`` in order, sharing one vocabulary per table.

    ``limit`` stops after that many samples. Every chunk's ``table_sizes`` is the vocabulary
    size so far (the last chunk's is final). ``max_ind_range`` hashes Criteo hex values
    ``int(hex) % M`` as they are read and folds the row ids of every other format
    (`Dataset.fold`). ``engine="legacy"`` reads Criteo CSV/TSV with the reference parser
    instead of the fast reader (same output; for comparisons).
    """
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise HotlineError(f"unknown data format {fmt!r} (choose from {', '.join(FORMATS)})")
    fold_sizes((), max_ind_range)  # refuses M <= 0 before any reading
    if fmt == "npz":
        ds = load_npz(path).fold(max_ind_range)
        yield ds if limit is None else ds.head(limit)
        return
    reader = {"criteo-csv": _criteo_chunks, "criteo-tsv": _criteo_chunks, "arff": _criteo_chunks,
              "user-items": _user_item_chunks, "recbole": _recbole_chunks,
              "alimama": _alimama_chunks}[fmt]
    seen = 0
    name = Path(path).name
    chunks = (_criteo_chunks(path, fmt, max_ind_range, chunk_samples, engine)
              if reader is _criteo_chunks else
              (ds.fold(max_ind_range) for ds in reader(path, fmt, max_ind_range, chunk_samples)))
    for ds in chunks:
        ds.name = name
        if limit is not None and seen + ds.num_samples >= limit:
            yield ds.head(limit - seen)
            return
        seen += ds.num_samples
        yield ds


def load_dataset(path, fmt=None, max_ind_range=None, limit=None,
                 chunk_samples=DEFAULT_CHUNK) -> "Dataset":
    """Read a whole data file (any supported format) into one validated `Dataset`."""
    parts = list(iter_chunks(path, fmt, max_ind_range, chunk_samples, limit))
    ds = Dataset.concat([p for p in parts if p.num_samples], Path(path).name) if parts else None
    if ds is None or ds.num_samples == 0:
        raise HotlineError(f"{path}: no samples")
    return ds.validate(str(path))


def _criteo_chunks(path, fmt, max_ind_range, chunk, engine="fast"):
    """Criteo CSV/TSV through the fast reader (`criteo_fast`); ARFF, ``engine="legacy"``,
    and whatever the fast reader refuses through the reference parser (`_legacy_chunks`),
    which then skips the samples the fast reader yielded."""
    if fmt == "arff" or engine == "legacy":
        yield from _legacy_chunks(path, fmt, max_ind_range, chunk)
        return
    with _open_text(path) as f:
        layout, skip = _text_layout(path, f)
    try:
        for sparse, dense, label, sizes in criteo_batches(path, layout, skip, max_ind_range, chunk):
            yield Dataset(np.ones(sparse.shape, np.int32), sparse.ravel(), sizes, dense, label)
    except Refused as r:
        skip_samples = r.samples
        for ds in _legacy_chunks(path, fmt, max_ind_range, chunk):
            if skip_samples < ds.num_samples:
                yield ds.drop(skip_samples)
            skip_samples = max(0, skip_samples - ds.num_samples)


def _text_layout(path, f):
    """(layout, header lines) of the Criteo CSV/TSV open as ``f``, from its first line."""
    first = _read_lines(f, path, 1)
    if not first:
        raise HotlineError(f"{path}: empty file")
    layout, skip = _criteo_layout(path, first[0].rstrip("\r\n"))
    if layout is None:
        raise HotlineError(f"{path}:1: looks like ARFF; use --format arff")
    return layout, skip


def _legacy_chunks(path, fmt, max_ind_range, chunk):
    with _open_text(path) as f:
        if fmt == "arff":
            layout, lineno = _arff_layout(path, f)
        else:
            layout, skip = _text_layout(path, f)
            f.seek(0)
            if skip:
                f.readline()
            lineno = 1 + skip
        vocabs = [Vocabulary(max_ind_range) for _ in layout.cats]
        for linenos, lines in _iter_line_chunks(f, path, chunk, lineno):
            if not lines:
                continue
            sparse, dense, label = _parse_criteo_chunk(path, linenos, lines, layout, vocabs)
            yield Dataset(np.ones(sparse.shape, np.int32), sparse.ravel(),
                          np.array([len(v) for v in vocabs], np.int64), dense, label)


def _user_item_chunks(path, fmt, max_ind_range, chunk):
    vocabs = [Vocabulary(), Vocabulary()]
    with _open_text(path) as f:
        for linenos, lines in _iter_line_chunks(f, path, chunk, 1):
            toks = [l.split() for l in lines]
            for i, t in enumerate(toks):
                bad = [x for x in t if not x.isdigit()]
                if bad:
                    raise HotlineError(f"{path}:{linenos[i]}: {bad[0]!r} is not an integer id")
            counts = np.fromiter((max(len(t) - 1, 0) for t in toks), np.int64, len(toks))
            users = np.repeat(np.asarray([t[0] if t else "" for t in toks]), counts)
            items = np.asarray([x for t in toks for x in t[1:]])
            if not users.size:
                continue
            sparse = np.stack([vocabs[0].encode(users), vocabs[1].encode(items)], axis=1)
            yield Dataset(np.ones(sparse.shape, np.int32), sparse.ravel(),
                          np.array([len(v) for v in vocabs], np.int64))


def _recbole_chunks(path, fmt, max_ind_range, chunk):
    with _open_text(path) as f:
        header = f.readline()
        names = [h.split(":")[0] for h in header.rstrip("\r\n").split("\t")]
        if "user_id" not in names or "item_id" not in names:
            raise HotlineError(f"{path}:1: RecBole header lacks user_id/item_id columns")
        rating = names.index("rating") if "rating" in names else None
        layout = _CriteoLayout("\t", len(names), rating, [], [names.index("user_id"),
                               names.index("item_id")], hex_cats=False, names=names,
                               binary_label=False)
        vocabs = [Vocabulary(), Vocabulary()]
        for linenos, lines in _iter_line_chunks(f, path, chunk, 2):
            if not lines:
                continue
            sparse, _, rating_v = _parse_criteo_chunk(path, linenos, lines, layout, vocabs)
            label = None if rating_v is None else (rating_v >= 4).astype(np.float32)
            yield Dataset(np.ones(sparse.shape, np.int32), sparse.ravel(),
                          np.array([len(v) for v in vocabs], np.int64), None, label)


# PaddleRec DMR layout (models/rank/dmr/net.py): three 50-long histories (0 = padding),
# masks, then 14 single-valued ids, price, pid, label.
_ALIMAMA_HIST = (0, 50, 100)
_ALIMAMA_SINGLE = tuple(range(250, 264)) + (265,)


def _alimama_chunks(path, fmt, max_ind_range, chunk):
    vocabs = [Vocabulary() for _ in range(len(_ALIMAMA_HIST) + len(_ALIMAMA_SINGLE))]
    with _open_text(path) as f:
        for linenos, lines in _iter_line_chunks(f, path, chunk, 1):
            if not lines:
                continue
            rows = [l.split(",") for l in lines]
            for i, r in enumerate(rows):
                if len(r) != 267:
                    raise HotlineError(f"{path}:{linenos[i]}: {len(r)} columns, expected 267")
            try:
                a = np.array(rows, dtype=np.float64)
            except ValueError:
                i = next(i for i, r in enumerate(rows) if not _all_numbers(r))
                raise HotlineError(f"{path}:{linenos[i]}: non-numeric field") from None
            price = a[:, 264:265].astype(np.float32)
            a = a.astype(np.int64)
            n = len(rows)
            blocks = [a[:, s:s + 50] for s in _ALIMAMA_HIST] + [a[:, j:j + 1] for j in _ALIMAMA_SINGLE]
            lengths = np.stack([(b != 0).sum(1) if b.shape[1] > 1 else np.ones(n, np.int64)
                                for b in blocks], axis=1).astype(np.int32)
            per_feature = [vocabs[t].encode(b[b != 0] if b.shape[1] > 1 else b[:, 0])
                           for t, b in enumerate(blocks)]
            # Interleave feature-major within each sample.
            feat = np.repeat(np.tile(np.arange(len(blocks)), n), lengths.ravel())
            indices = np.empty(int(lengths.sum()), np.int64)
            for t, ids in enumerate(per_feature):
                indices[feat == t] = ids
            yield Dataset(lengths, indices, np.array([len(v) for v in vocabs], np.int64),
                          price, a[:, 266].astype(np.float32))


def _all_numbers(fields):
    try:
        [float(x) for x in fields]
        return True
    except ValueError:
        return False


def load_npz(path):
    """Read an index-stream .npz and validate it against its format (docs/cli.md, "Conventions")."""
    path = Path(path)
    if not path.exists():
        raise HotlineError(f"{path}: no such file")
    z, field = {}, None
    try:
        with np.load(path, allow_pickle=False) as npz:
            files = set(npz.files)
            # Read every field here: a member is read, and its CRC checked, only when indexed.
            for field in files & {"table_sizes", "sparse", "indices", "lengths", "dense", "label"}:
                z[field] = npz[field]
    except Exception as e:  # not a zip; a bad CRC (BadZipFile), an object array (ValueError)
        if field is None:
            raise HotlineError(f"{path}: not a readable .npz ({type(e).__name__})") from None
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise HotlineError(f"{path}: field '{field}' is not readable ({reason})") from None
    if "table_sizes" not in files:
        raise HotlineError(f"{path}: missing field 'table_sizes'")
    sizes = z["table_sizes"]
    if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer):
        raise HotlineError(f"{path}: field 'table_sizes' must be a 1-D integer array")
    if "sparse" in files:
        sparse = z["sparse"]
        if sparse.ndim != 2 or not np.issubdtype(sparse.dtype, np.integer):
            raise HotlineError(f"{path}: field 'sparse' must be a 2-D integer array [N, F]")
        lengths = np.ones(sparse.shape, np.int32)
        indices = sparse.astype(np.int64).ravel()
    elif "indices" in files and "lengths" in files:
        lengths, indices = z["lengths"], z["indices"]
        if lengths.ndim != 2 or not np.issubdtype(lengths.dtype, np.integer):
            raise HotlineError(f"{path}: field 'lengths' must be a 2-D integer array [N, F]")
        if indices.ndim != 1 or not np.issubdtype(indices.dtype, np.integer):
            raise HotlineError(f"{path}: field 'indices' must be a 1-D integer array")
        lengths, indices = lengths.astype(np.int32), indices.astype(np.int64)
    else:
        raise HotlineError(f"{path}: needs field 'sparse', or 'indices' and 'lengths'")
    if lengths.shape[0] == 0:
        raise HotlineError(f"{path}: no samples")
    dense = z["dense"].astype(np.float32) if "dense" in files else None
    label = z["label"].astype(np.float32) if "label" in files else None
    return Dataset(lengths, indices, sizes.astype(np.int64), dense, label, path.name).validate(str(path))
