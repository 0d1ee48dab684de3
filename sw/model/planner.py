"""Hot-set planning: the exact top-K keys of a profiling window (docs/design.md, "The hot set").

The exact hot set is the K keys with the highest access count among the first
``ceil(profile_fraction * N)`` samples, ties broken by key ascending (= (table, row) ascending).
"""
import math
from dataclasses import dataclass

import numpy as np

from hotline.contract.errors import HotlineError


def hot_rows_from_bytes(hot_bytes, dim) -> int:
    """FAE's sizing rule: as many fp32 rows of width ``dim`` as fit in ``hot_bytes``."""
    if dim is None or dim <= 0:
        raise HotlineError(f"--dim must be a positive integer with --hot-bytes, not {dim}")
    if hot_bytes <= 0:
        raise HotlineError(f"--hot-bytes must be positive, not {hot_bytes}")
    return hot_bytes // (4 * dim)


def profile_samples(num_samples, fraction) -> int:
    """Number of samples in the profiling window."""
    if not (0.0 < fraction <= 1.0):
        raise HotlineError(f"--profile-fraction must be in (0, 1], not {fraction}")
    return min(num_samples, math.ceil(fraction * num_samples))


def key_counts(keys) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys ascending as uint32, access counts as int64). ``keys`` with a
    ``chunks()`` method (a sharded stream's `KeyRange`) is counted chunk by chunk, in memory
    bounded by its distinct keys."""
    if not hasattr(keys, "chunks"):
        uniq, counts = np.unique(np.asarray(keys, np.uint32), return_counts=True)
        return uniq, counts.astype(np.int64)
    uniq, counts = np.zeros(0, np.uint32), np.zeros(0, np.int64)
    for chunk in keys.chunks():
        u, c = key_counts(chunk)
        uniq, inverse = np.unique(np.r_[uniq, u], return_inverse=True)
        counts = np.bincount(inverse, np.r_[counts, c], len(uniq)).astype(np.int64)
    return uniq, counts


def rank_by_count(uniq, counts) -> np.ndarray:
    """Order of ``uniq`` by count descending, then key ascending (``uniq`` is ascending)."""
    return np.argsort(-counts, kind="stable")


@dataclass
class HotSet:
    """The planned hot keys in rank order (hottest first) with their profiled counts."""
    keys: np.ndarray           # uint32 [K]
    counts: np.ndarray         # int64 [K]
    requested: int             # K asked for
    distinct: int              # distinct keys in the profiling window
    window_lookups: int        # lookups in the profiling window

    @property
    def size(self):
        return len(self.keys)

    @property
    def clamped(self):
        return self.requested > self.size

    @property
    def coverage(self):
        """Fraction of profiling-window lookups that hit the set."""
        return float(self.counts.sum() / self.window_lookups) if self.window_lookups else 0.0


def exact_hot_set(window_keys, k) -> HotSet:
    """The exact top-``k`` keys of ``window_keys`` (clamped to the distinct keys)."""
    if k is None or k <= 0:
        raise HotlineError(f"--hot-rows must be a positive integer, not {k}")
    uniq, counts = key_counts(window_keys)
    top = rank_by_count(uniq, counts)[:k]
    return HotSet(uniq[top], counts[top], int(k), len(uniq), int(len(window_keys)))


def hit_fraction(keys, hot_keys) -> float:
    """Fraction of ``keys`` that are in ``hot_keys``."""
    keys = np.asarray(keys, np.uint32)
    if keys.size == 0:
        return 0.0
    return float(np.isin(keys, np.asarray(hot_keys, np.uint32)).mean())


def plan(ds, hot_rows, profile_fraction=1.0) -> tuple[HotSet, int, np.ndarray, list]:
    """Exact hot set of dataset ``ds``'s profiling window; returns (HotSet, window samples,
    every key of ``ds``, notes). A ``hot_rows`` with an ``asked`` attribute (how the CLI was
    asked for it) is named so in the notes."""
    if hot_rows is None or hot_rows <= 0:
        raise HotlineError(f"--hot-rows must be a positive integer, not {hot_rows}")
    window = profile_samples(ds.num_samples, profile_fraction)
    keys = ds.keys
    hot = exact_hot_set(keys[:ds.sample_offsets[window]], hot_rows)
    notes = []
    if hot.clamped:
        asked = getattr(hot_rows, "asked", None) or f"--hot-rows {hot_rows}"
        notes.append(f"{asked} exceeds the {hot.distinct} distinct keys in the "
                     f"profiling window; using {hot.size}")
    return hot, window, keys, notes
