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

from hotline.device_model import pow2_at_least
from hotline.hw.access_learner import WINDOW
from hotline.hw.hashing import bucket_hash

__all__ = ["AccessLearnerModel", "top_k", "learner_geometry", "ENTRIES_PER_HOT_KEY",
           "MIN_ENTRIES"]

# Sizing (measured on every shared file, ``hotline.sim.bench_access_learner``): a hashed,
# bucketized Space-Saving table must hold several times K on flat streams, because a key
# enters with the bucket's minimum + 1, so late tail keys outrank true top-K keys until the
# minimum is well below the K-th key's count. At 16,384 fixed entries Amazon-book (135,268
# distinct keys) kept 0.67 of the exact top-K coverage; capacity, not the hash or the hazard
# rule, was the gap (plain fully associative Space-Saving of the same size: 0.73).
ENTRIES_PER_HOT_KEY = 8        # entries >= 8 K, and >= half the distinct keys when known
ENTRIES_PER_HOT_KEY_BLIND = 16  # entries >= 16 K when the distinct-key count is not known
MIN_ENTRIES = 4096             # >= 512 buckets: the hazard rule drops <= ~1% of the lookups


def top_k(keys, counts, k):
    """The ``k`` valid (count > 0) keys with the highest counts, ties by key ascending."""
    keys = np.asarray(keys, dtype=np.uint32)
    counts = np.asarray(counts, dtype=np.uint64)
    valid = counts > 0
    keys, counts = keys[valid], counts[valid]
    order = np.lexsort((keys, -counts.astype(np.int64)))
    return keys[order[:k]]


def learner_geometry(k, distinct_keys=None, ways=8):
    """``(buckets, ways)`` of an AccessLearner that learns a top-``k`` hot set.

    entries = buckets * ways = the next power of two >= max(8 k, distinct_keys / 2), at most
    the next power of two >= 2 * distinct_keys (the table then holds every key), at least
    ``MIN_ENTRIES``; without ``distinct_keys``, >= 16 k. Measured on every shared file at
    K = 5% and 10% of the distinct keys (and K/D from 3% to 20%): >= 0.98 of the exact top-K
    coverage on Criteo, >= 0.95 on MovieLens and Amazon-book.
    """
    if k < 1:
        raise ValueError(f"k must be positive, not {k}")
    if distinct_keys:
        entries = min(pow2_at_least(max(ENTRIES_PER_HOT_KEY * k, distinct_keys / 2)),
                      pow2_at_least(2 * distinct_keys))
    else:
        entries = pow2_at_least(ENTRIES_PER_HOT_KEY_BLIND * k)
    entries = max(entries, MIN_ENTRIES, ways)
    return entries // ways, ways


class AccessLearnerModel:
    """Same parameters and entry contents as ``hotline.hw.access_learner.AccessLearner``.

    ``update(keys)`` counts keys (all of them inside the profiling window), ``clear()``
    empties the table, ``entries()`` returns per-address ``(keys, counts)`` arrays (count 0 =
    empty entry, key 0), ``top(k)`` the learned hot set, ``counted`` the keys counted since
    the last clear and ``dropped`` those of them the hazard rule dropped (both mod 2**32, like
    the hardware counters). ``window`` is the hardware's ``WINDOW``; 0 gives plain
    Space-Saving (no key is dropped).
    """

    def __init__(self, *, buckets=2048, ways=8, key_bits=32, count_bits=32, seed=0,
                 window=WINDOW, hash_family="tabulation"):
        if buckets & (buckets - 1) or ways & (ways - 1):
            raise ValueError("buckets and ways must be powers of two")
        self.buckets, self.ways = buckets, ways
        self.key_bits, self.count_bits = key_bits, count_bits
        self.window = window
        self.hash = bucket_hash(seed, key_bits, buckets.bit_length() - 1, hash_family)
        self._max = 2**count_bits - 1
        self.clear()

    def clear(self):
        self._keys = [[0] * self.ways for _ in range(self.buckets)]
        self._counts = [[0] * self.ways for _ in range(self.buckets)]
        self._history = deque(maxlen=self.window)
        self.counted = self.dropped = 0

    def update(self, keys):
        keys = np.asarray(keys, dtype=np.uint64)
        if keys.size and int(keys.max()) >> self.key_bits:
            raise ValueError(f"keys must fit in {self.key_bits} bits")
        buckets = self.hash.np(keys).tolist()
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

    def entries(self):
        keys = np.array(self._keys, dtype=np.uint32).reshape(-1)
        counts = np.array(self._counts, dtype=np.uint64).reshape(-1)
        return keys, counts

    def top(self, k):
        return top_k(*self.entries(), k)
