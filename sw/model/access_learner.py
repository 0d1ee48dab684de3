"""Bit-exact model of the AccessLearner (hashed, bucketized Space-Saving with a hazard rule).

Written from the algorithm, not from the RTL: a key hashes (``bucket_hash``) to a bucket of ``ways``
(key, count) entries; a key in its bucket counts + 1, a new key replaces the minimum-count
entry (lowest way on ties, empty = count 0) with count = minimum + 1; counts saturate.
Hazard rule: a key is dropped (no update) when one of the ``window`` keys counted just before
it, dropped or not, has the same bucket and a different key; ``clear`` forgets that history.
Entry address = bucket * ways + way, as in the hardware readout.
"""
from collections import deque

import numpy as np

from hotline.contract.config import LEARNER_WINDOW
from hotline.contract.hashing import bucket_hash

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
        if getattr(self, "_touched", None) is None:
            self._keys = [[0] * self.ways for _ in range(self.buckets)]
            self._counts = [[0] * self.ways for _ in range(self.buckets)]
        else:  # only the buckets written since the last clear (a big table, short windows)
            for b in self._touched:
                self._keys[b] = [0] * self.ways
                self._counts[b] = [0] * self.ways
        self._touched = set()
        self._history = deque(maxlen=self.window)
        self.counted = self.dropped = 0

    def update(self, keys):
        keys = np.asarray(keys, dtype=np.uint64)
        if keys.size and int(keys.max()) >> self.key_bits:
            raise ValueError(f"keys must fit in {self.key_bits} bits")
        buckets = self.hash.np(keys).tolist()
        self._touched.update(buckets)
        ways, cap = self.ways, self._max
        table_keys, table_counts = self._keys, self._counts
        history, dropped = self._history, 0
        # A sequential loop: each replacement depends on every earlier lookup in its bucket.
        for key, b in zip(keys.tolist(), buckets):
            hazard = any(hb == b and hk != key for hb, hk in history)
            if self.window:
                history.append((b, key))
            if hazard:
                dropped += 1
                continue
            bk, bc = table_keys[b], table_counts[b]
            for way in range(ways):
                if bc[way] and bk[way] == key:
                    break
            else:
                way = bc.index(min(bc))
                bk[way] = key
            if bc[way] < cap:
                bc[way] += 1
        self.counted = (self.counted + keys.size) % 2**32
        self.dropped = (self.dropped + dropped) % 2**32

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        keys = np.zeros((self.buckets, self.ways), np.uint32)
        counts = np.zeros((self.buckets, self.ways), np.uint64)
        touched = np.fromiter(self._touched, np.int64, len(self._touched))
        if touched.size:
            keys[touched] = [self._keys[b] for b in touched.tolist()]
            counts[touched] = [self._counts[b] for b in touched.tolist()]
        return keys.reshape(-1), counts.reshape(-1)

    def top(self, k) -> np.ndarray:
        return top_k(*self.entries(), k)
