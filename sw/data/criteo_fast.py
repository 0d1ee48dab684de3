"""The fast Criteo text reader (CSV with header, or raw TSV): pyarrow's CSV reader splits the
text and converts the numbers; a numba kernel decodes the hex categoricals and numbers each
table's values in order of first appearance with an open-addressing hash table
(`HashVocabulary`: 16 bytes a slot, no Python object per value).

Its output equals the reference parser's (`readers._parse_criteo_chunk`) value for value. It
is stricter: whatever it refuses (a malformed row, a number or hex value it does not take,
a missing or non-binary label, a number not finite as float32, bad UTF-8), the reference
parser reads again from the start, so the error names the line
(or the value is read as the reference reads it); nothing is yielded twice.
"""
import functools
from pathlib import Path

import numpy as np

from hotline.contract.errors import HotlineError

BLOCK_BYTES = 1 << 22   # pyarrow's read block: ~16k Criteo rows; bounds the reader's memory
_EMPTY = 1 << 63        # the empty cell's value (as `readers._EMPTY`)
_MAX_HEX_DIGITS = 15
_LOAD = 0.7             # the hash table grows past this load


def _encode(offsets, data, start, n, modulo, keys, ids, bits, count, out):
    """Decode ``n`` hex cells (arrow string offsets/data from cell ``start``) into ``out``:
    ``int(hex) % modulo``, or the first-appearance id from the table ``keys``/``ids`` of
    2^``bits`` slots (-1 = free slot). Stops early to let the caller grow the table. Returns
    (count, cells done, status): status 0 done, 1 grow, 2 cell ``done`` is not a hex value."""
    mask = np.uint64(len(keys) - 1)
    shift = np.uint64(64 - bits)
    limit = int(len(keys) * _LOAD)
    empty = np.uint64(0) if modulo else np.uint64(_EMPTY)
    for i in range(n):
        a, b = offsets[start + i], offsets[start + i + 1]
        if b - a > _MAX_HEX_DIGITS:
            return count, i, 2
        v = empty if a == b else np.uint64(0)
        for p in range(a, b):
            c = data[p]
            if 48 <= c <= 57:
                d = c - 48
            elif 97 <= c <= 102:
                d = c - 87
            elif 65 <= c <= 70:
                d = c - 55
            else:
                return count, i, 2
            v = v * np.uint64(16) + np.uint64(d)
        if modulo:
            out[i] = np.int64(v % np.uint64(modulo))
            continue
        if count >= limit:
            return count, i, 1
        h = (v * np.uint64(0x9E3779B97F4A7C15)) >> shift
        while ids[h] >= 0 and keys[h] != v:
            h = (h + np.uint64(1)) & mask
        if ids[h] < 0:
            keys[h] = v
            ids[h] = count
            count += 1
        out[i] = ids[h]
    return count, n, 0


def _rehash(keys, ids, new_keys, new_ids, bits):
    """Insert every used slot of ``keys``/``ids`` into the empty table of 2^``bits`` slots."""
    mask = np.uint64(len(new_keys) - 1)
    shift = np.uint64(64 - bits)
    for s in range(len(keys)):
        if ids[s] >= 0:
            h = (keys[s] * np.uint64(0x9E3779B97F4A7C15)) >> shift
            while new_ids[h] >= 0:
                h = (h + np.uint64(1)) & mask
            new_keys[h] = keys[s]
            new_ids[h] = ids[s]


@functools.cache
def _kernels():
    """`_encode` and `_rehash` compiled by numba (imported on first use, cached on disk)."""
    import numba  # lazy: numba takes a second to import; only the fast reader needs it
    jit = numba.njit(cache=True, nogil=True)
    return jit(_encode), jit(_rehash)


class HashVocabulary:
    """One table's hex value -> row id map, ids in order of first appearance; with
    ``modulo`` set, ``int(hex) % modulo`` instead and the table has ``modulo`` rows."""

    def __init__(self, modulo=None, bits=12):
        self.modulo = modulo or 0
        self.count = 0
        self.bits = bits
        self.keys = np.zeros(1 << bits, np.uint64)
        self.ids = np.full(1 << bits, -1, np.int64)

    def __len__(self):
        return self.modulo or self.count

    def encode(self, column, out) -> int:
        """Fill ``out`` (int64 [len(column)]) from a pyarrow string array; returns -1, or the
        index of the first cell that is not a hex value of at most 15 digits."""
        encode, rehash = _kernels()
        offsets = np.frombuffer(column.buffers()[1], np.int32)
        data = np.frombuffer(column.buffers()[2] or b"", np.uint8)
        start, n = column.offset, len(column)
        while True:
            self.count, done, status = encode(offsets, data, start, n, self.modulo, self.keys,
                                              self.ids, self.bits, self.count, out)
            if status == 2:
                return int(done)
            if status == 0:
                return -1
            self.bits += 1
            keys, ids = np.zeros(1 << self.bits, np.uint64), np.full(1 << self.bits, -1, np.int64)
            rehash(self.keys, self.ids, keys, ids, self.bits)
            self.keys, self.ids = keys, ids
            start, n, out = start + done, n - done, out[done:]


class Refused(Exception):
    """The fast reader does not take this input; ``samples`` were yielded before it."""

    def __init__(self, samples):
        super().__init__(samples)
        self.samples = samples


def criteo_batches(path, layout, skip_lines, max_ind_range, chunk):
    """Yield (sparse int64 [n, T], dense float32 [n, D], label float32 [n] or None, table
    sizes) for ``path`` read with ``layout`` (`readers._CriteoLayout`) after ``skip_lines``
    header lines, at most ``chunk`` rows at a time. Raises `Refused` on input it does not
    take."""
    import pyarrow as pa  # lazy: pyarrow takes a second to import; only Criteo text needs it
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv
    names = [f"c{j}" for j in range(layout.ncols)]
    numeric = ([layout.label] if layout.label is not None else []) + list(layout.dense)
    types = {names[j]: pa.float64() for j in numeric}
    types.update({names[j]: pa.string() for j in layout.cats})
    vocabs = [HashVocabulary(max_ind_range) for _ in layout.cats]
    raw = pa.OSFile(str(path))
    if raw.read(2) == b"\x1f\x8b":
        raw.seek(0)
        raw = pa.CompressedInputStream(raw, "gzip")
    else:
        raw.seek(0)
    done = 0
    try:
        reader = pcsv.open_csv(
            raw,
            read_options=pcsv.ReadOptions(column_names=names, skip_rows=skip_lines,
                                          block_size=BLOCK_BYTES, use_threads=False),
            parse_options=pcsv.ParseOptions(delimiter=layout.sep, quote_char=False,
                                            double_quote=False, escape_char=False),
            convert_options=pcsv.ConvertOptions(
                column_types=types, include_columns=[names[j] for j in numeric + list(layout.cats)],
                null_values=[""], strings_can_be_null=False, quoted_strings_can_be_null=False))
        for whole in reader:
            for s in range(0, whole.num_rows, chunk):
                batch = whole.slice(s, chunk)
                n = batch.num_rows
                number = lambda j: pc.fill_null(batch.column(names[j]), 0.0).to_numpy().astype(np.float32)
                with np.errstate(over="ignore"):  # too large for float32: inf, refused below
                    label = number(layout.label) if layout.label is not None else None
                    dense = (np.stack([number(j) for j in layout.dense], axis=1) if layout.dense
                             else np.zeros((n, 0), np.float32))
                # The reference parser names the line of a missing or non-binary label, or
                # of a number that is not finite as float32.
                if label is not None and (batch.column(names[layout.label]).null_count
                                          or np.any((label != 0) & (label != 1))):
                    raise Refused(done)
                if not np.isfinite(dense).all():
                    raise Refused(done)
                sparse = np.empty((len(layout.cats), n), np.int64)
                for t, j in enumerate(layout.cats):
                    if vocabs[t].encode(batch.column(names[j]), sparse[t]) >= 0:
                        raise Refused(done)
                done += n
                yield sparse.T, dense, label, np.array([len(v) for v in vocabs], np.int64)
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError, OSError, EOFError) as e:
        if isinstance(e, OSError) and not isinstance(e, pa.ArrowException) and not Path(path).exists():
            raise HotlineError(f"{path}: no such file") from None
        raise Refused(done) from None
    finally:
        raw.close()
