"""Bit-exact model of the AccessLearner (hashed, bucketized Space-Saving with a hazard rule).

Written from the algorithm, not from the RTL: a key hashes (``bucket_hash``) to a bucket of ``ways``
(key, count) entries; a key in its bucket counts + 1, a new key replaces the minimum-count
entry (lowest way on ties, empty = count 0) with count = minimum + 1; counts saturate.
Hazard rule: a key is dropped (no update) when one of the ``window`` keys counted just before
it, dropped or not, has the same bucket and a different key; ``clear`` forgets that history.
Entry address = bucket * ways + way, as in the hardware readout.
"""

import numpy as np

from hotline.contract.config import LEARNER_WINDOW
from hotline.contract.hashing import bucket_hash

from .compiled import compiled

__all__ = ["AccessLearnerModel", "top_k"]


def top_k(keys, counts, k) -> np.ndarray:
    """The ``k`` valid (count > 0) keys with the highest counts, ties by key ascending."""
    keys = np.asarray(keys, dtype=np.uint32)
    counts = np.asarray(counts, dtype=np.uint64)
    valid = counts > 0
    keys, counts = keys[valid], counts[valid]
    order = np.lexsort((keys, -counts.astype(np.int64)))
    return keys[order[:k]]


class AccessLearnerModel:
    """Same parameters and entry contents as ``hotline.hw.access_learner.AccessLearner``.

    ``update(keys)`` counts keys (all of them inside the profiling window), ``clear()``
    empties the table, ``entries()`` returns per-address ``(keys, counts)`` arrays (count 0 =
    empty entry, key 0), ``top(k)`` the learned hot set, ``counted`` the keys counted since
    the last clear and ``dropped`` those of them the hazard rule dropped (both mod 2**32, like
    the hardware counters). ``window`` is the hardware's (``LEARNER_WINDOW``); 0 gives plain
    Space-Saving (no key is dropped). Its size for a top-K hot set is
    `hotline.contract.config.learner_geometry`.
    """

    def __init__(self, *, buckets=2048, ways=8, key_bits=32, count_bits=32, seed=0,
                 window=LEARNER_WINDOW, hash_family="tabulation"):
        if buckets & (buckets - 1) or ways & (ways - 1):
            raise ValueError("buckets and ways must be powers of two")
        self.buckets, self.ways = buckets, ways
        self.key_bits, self.count_bits = key_bits, count_bits
        self.window = window
        self.hash = bucket_hash(seed, key_bits, buckets.bit_length() - 1, hash_family)
        self._max = 2**count_bits - 1
        self.clear()

    def clear(self):
        self._keys = np.zeros((self.buckets, self.ways), np.uint64)
        self._counts = np.zeros((self.buckets, self.ways), np.uint64)
        # the hazard history: the last ``window`` (bucket, key) pairs counted, as a ring
        self._history = np.zeros((2, self.window), np.uint64)
        self._ring = np.zeros(2, np.int64)   # entries held, next write position
        self.counted = self.dropped = 0

    def update(self, keys):
        keys = np.asarray(keys, dtype=np.uint64)
        if keys.size and int(keys.max()) >> self.key_bits:
            raise ValueError(f"keys must fit in {self.key_bits} bits")
        buckets = self.hash.np(keys).astype(np.int64)
        dropped = _count_kernel(keys, buckets, self._keys, self._counts, self._history,
                                self._ring, np.uint64(self._max))
        self.counted = (self.counted + keys.size) % 2**32
        self.dropped = (self.dropped + int(dropped)) % 2**32

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        return self._keys.reshape(-1).astype(np.uint32), self._counts.reshape(-1).copy()

    def top(self, k) -> np.ndarray:
        return top_k(*self.entries(), k)


def _count(keys, buckets, table_keys, table_counts, history, ring, cap):
    """Count ``keys`` (bucket ``buckets``) into the tables in order; the number dropped.
    Sequential: each replacement depends on every earlier lookup in its bucket."""
    window, ways = history.shape[1], table_keys.shape[1]
    dropped = 0
    for i in range(keys.shape[0]):
        key, b = keys[i], buckets[i]
        hazard = False
        for j in range(ring[0]):
            if history[0, j] == b and history[1, j] != key:
                hazard = True
                break
        if window:
            history[0, ring[1]], history[1, ring[1]] = b, key
            ring[1] = (ring[1] + 1) % window
            ring[0] = min(ring[0] + 1, window)
        if hazard:
            dropped += 1
            continue
        way = -1
        for w in range(ways):
            if table_counts[b, w] != 0 and table_keys[b, w] == key:
                way = w
                break
        if way < 0:
            way = 0                      # the minimum count, the lowest way on ties
            for w in range(1, ways):
                if table_counts[b, w] < table_counts[b, way]:
                    way = w
            table_keys[b, way] = key
        if table_counts[b, way] < cap:
            table_counts[b, way] += 1
    return dropped


_count_kernel = compiled(_count)
