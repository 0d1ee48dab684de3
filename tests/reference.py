"""Independent, deliberately naive references (plain Python, one lookup at a time).

They share no code with the package: tests compare the vectorised implementations to these.
"""
import collections
import csv
import gzip
import math

ROW_BITS = 27


def key(table, row):
    return (table << ROW_BITS) | row


def exact_top_k(keys, k):
    counts = collections.Counter(int(x) for x in keys)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [kv[0] for kv in ranked[:k]]


def fragment(samples, slot_of, batch_size):
    """``samples``: list of lists of keys. ``slot_of``: dict hot key -> slot.

    Returns a list of batches: dict(popular, non_popular, remap, cold_keys) where remap is a
    list per sample of ('hot', slot) / ('cold', slot).
    """
    batches = []
    for b0 in range(0, len(samples), batch_size):
        popular, non_popular, remap, cold = [], [], [], {}
        for i, sample in enumerate(samples[b0:b0 + batch_size]):
            entry, all_hot = [], True
            for k in sample:
                if k in slot_of:
                    entry.append(("hot", slot_of[k]))
                else:
                    all_hot = False
                    if k not in cold:
                        cold[k] = len(cold)
                    entry.append(("cold", cold[k]))
            (popular if all_hot else non_popular).append(i)
            remap.append(entry)
        batches.append({"popular": popular, "non_popular": non_popular, "remap": remap,
                        "cold_keys": list(cold)})
    return batches


def read_criteo_csv(path):
    """(samples as key lists, dense rows, labels) of a Criteo Kaggle CSV, vocab by first sight."""
    with gzip.open(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    cats = [header.index(f"C{i}") for i in range(1, 27)]
    vocab = [dict() for _ in cats]
    samples = []
    for r in rows[1:]:
        samples.append([key(t, vocab[t].setdefault(r[j], len(vocab[t]))) for t, j in enumerate(cats)])
    return samples


def coverage(keys, hot):
    hot = set(hot)
    return sum(1 for k in keys if k in hot) / len(keys) if len(keys) else 0.0


def window(n, fraction):
    return min(n, math.ceil(fraction * n))


# ---- row DMA (gather / scatter of table rows by key) ----------------------------------------

def unique_in_order(keys):
    """Distinct keys in order of first appearance (a batch's cold slots)."""
    seen, out = set(), []
    for k in keys:
        k = int(k)
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out


def table_rows(image, base, rows, row_bytes):
    """A table as a list of row byte strings, cut out of a byte image."""
    return [bytes(image[base + r * row_bytes: base + (r + 1) * row_bytes]) for r in range(rows)]


def gather(tables, keys, row_bits=ROW_BITS):
    """Rows of ``keys`` (``tables``: dict table -> list of row bytes), one per key, in order."""
    out = []
    for k in keys:
        t, r = int(k) >> row_bits, int(k) & ((1 << row_bits) - 1)
        out.append(tables[t][r])
    return out


def scatter(tables, keys, rows, row_bits=ROW_BITS):
    """Write ``rows`` back to the rows of ``keys``, one at a time, in order (in place)."""
    for k, row in zip(keys, rows):
        t, r = int(k) >> row_bits, int(k) & ((1 << row_bits) - 1)
        tables[t][r] = bytes(row)
    return tables
