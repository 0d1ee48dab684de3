"""Bit-exact model of the ColdKeySet block (hw/cold_key_set.py): batch-local dedup of keys.

Within a batch, the k-th distinct inserted key gets slot k (first-appearance order) unless it
overflows: no free way in either of its two buckets and no free stash entry, or ``max_keys``
slots already used. An overflowed key is not stored, so each later beat of it is new again.
With ``partitions`` P > 1 a key belongs to one partition (`partition_of`: hash
``COLD_PARTITION_SEED``), each with its own two tables of ``capacity // (2 * ways * P)``
buckets and its own stash; the slots (and ``max_keys``) stay global, in order of first
appearance. Placement never changes a slot, so `batch` answers from the vectorised first-appearance ranks
whenever overflow is impossible (every key has a bucket that at most ``ways`` of the batch's
keys hash to) and replays the exact insertion sequence otherwise: for distinct keys (a batch
pushed as its unique keys) vectorised, by iterating every key's placement to its fixed point
(`placements`), else key by key.
"""
import math

import numpy as np

from hotline.contract.config import COLD_PARTITION_SEED, COLD_SEEDS, PRODUCT
from hotline.contract.hashing import bucket_hash


def first_appearance(keys):
    """(rank of each key among the distinct keys in order of first appearance, those keys)."""
    keys = np.asarray(keys)
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(uniq), np.int64)
    rank[order] = np.arange(len(uniq))
    return rank[inverse], uniq[order]


def _earlier_in_group(order, first_of_group, mask):
    """For each element: how many elements before it in its group have ``mask`` set, where
    ``order`` sorts the elements by group, stably, and ``first_of_group[j]`` is the position
    in that order of the group start of its j-th element."""
    ms = mask[order].astype(np.int32)
    before = np.cumsum(ms, dtype=np.int32) - ms
    out = np.empty(len(mask), np.int32)
    out[order] = before - before[first_of_group]
    return out


def _grouping(groups):
    """(`_earlier_in_group`'s ``order`` and ``first_of_group``) for ``groups``."""
    # numpy sorts 16-bit and narrower integers by radix: bucket and partition numbers fit
    small = np.min_scalar_type(int(groups.max())) if len(groups) else np.uint8
    order = np.argsort(groups.astype(small, copy=False), kind="stable")
    g = groups[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    return order, np.repeat(starts, np.diff(np.r_[starts, len(g)]))


def latest_copy(keys, window):
    """Per key, the index of the latest equal key among the ``window`` keys before it, or -1."""
    keys = np.asarray(keys)
    out = np.full(len(keys), -1, np.int64)
    for d in range(window, 0, -1):     # the nearest copy last, so it wins
        same = np.nonzero(keys[d:] == keys[:-d])[0] + d
        out[same] = same - d
    return out


class ColdKeySetModel:
    """Same parameters and defaults (the product configuration's) as
    ``hotline.hw.cold_key_set.ColdKeySet``, the timing ones (``epoch_bits``, ...) excepted."""

    def __init__(self, capacity=PRODUCT.cold_capacity, *, ways=PRODUCT.cold_ways,
                 stash=PRODUCT.cold_stash, max_keys=PRODUCT.cold_max_keys, key_width=32,
                 seeds=COLD_SEEDS, hash_family="tabulation", partitions=1, **_timing):
        self.capacity, self.ways, self.stash, self.max_keys = capacity, ways, stash, max_keys
        self.partitions = partitions
        self.buckets = capacity // (2 * ways * partitions)   # per table and partition
        self.hashes = [bucket_hash(s, key_width, int(math.log2(self.buckets)), hash_family)
                       for s in seeds]
        self.partition_hash = bucket_hash(COLD_PARTITION_SEED, key_width,
                                          int(math.log2(partitions)), hash_family)

    def partition_of(self, keys):
        """The partition of each key (0 with one partition)."""
        if self.partitions == 1:   # the 0-bit hash
            return np.zeros(np.shape(keys), np.int64)
        return self.partition_hash.np(np.asarray(keys, np.uint64)).astype(np.int64)

    def buckets_of(self, keys):
        """Per table, each key's bucket numbered across partitions (partition * buckets +
        bucket in its partition's table)."""
        keys = np.ascontiguousarray(keys, "<u8")   # converted once for every hash
        if self.partitions == 1:
            return [h.np(keys) for h in self.hashes]
        base = self.partition_of(keys) * self.buckets
        return [base + h.np(keys) for h in self.hashes]

    def overflow_impossible(self, uniq):
        """Sufficient condition for a batch with distinct keys ``uniq`` to place every key."""
        if len(uniq) > self.max_keys:
            return False
        h0, h1 = self.buckets_of(uniq)
        return bool(((np.bincount(h0)[h0] <= self.ways) | (np.bincount(h1)[h1] <= self.ways))
                    .all())

    def batch(self, keys, window=0):
        """(slot, first, overflow) per key of one batch's inserted keys, in order; ``window``
        as in `replay`."""
        keys = np.asarray(keys, np.uint64)
        rank, uniq = first_appearance(keys)
        if self.overflow_impossible(uniq):
            first = np.zeros(len(keys), bool)
            first[np.unique(rank, return_index=True)[1]] = True
            return rank, first, np.zeros(len(keys), bool)
        return self.replay(keys, window)

    def replay(self, keys, window=0):
        """The exact insertion sequence of one batch (what `batch` does when overflow is
        possible). A key equal to one of the ``window`` keys before it (the Fragmenter's
        `hotline.contract.config.repeat_window`) takes the latest one's slot and is neither
        new nor overflowed: it never reaches the set. That differs from a lookup in the set
        only after an overflow, which stores nothing."""
        s = np.sort(keys)
        if not (s[1:] == s[:-1]).any():   # distinct keys: each is inserted once
            placed = self.placements(keys[:self.max_keys])
            if placed is not None:
                n, m = len(keys), len(placed)
                slot, overflow = np.zeros(n, np.int64), np.ones(n, bool)
                slot[:m], overflow[:m] = np.arange(m), placed == self.OVERFLOW
                return slot, np.ones(n, bool), overflow
        # Python lists and ints throughout: the loop is the model's cost (numpy scalars
        # cost several times more per key)
        h0, h1 = (h.tolist() for h in self.buckets_of(keys))
        part = self.partition_of(keys).tolist()
        ways, stash, max_keys = self.ways, self.stash, self.max_keys
        buckets = self.buckets * self.partitions
        fill0, fill1 = [0] * buckets, [0] * buckets
        stash_used = [0] * self.partitions
        stored, count = {}, 0
        n = len(keys)
        slot, first, overflow = [0] * n, [False] * n, [False] * n
        copy = latest_copy(keys, window).tolist()
        for i, k in enumerate(keys.tolist()):
            if copy[i] >= 0:
                slot[i] = slot[copy[i]]
                continue
            s = stored.get(k)
            if s is not None:
                slot[i] = s
                continue
            first[i] = True
            if count >= max_keys:
                overflow[i] = True
                continue
            slot[i] = count
            a, b = h0[i], h1[i]
            free0, free1 = ways - fill0[a], ways - fill1[b]
            if free0 or free1:
                if free1 > free0:
                    fill1[b] += 1
                else:
                    fill0[a] += 1
            elif stash_used[part[i]] < stash:
                stash_used[part[i]] += 1
            else:
                overflow[i] = True
            if not overflow[i]:
                stored[k] = count
            count += 1
        slot, first, overflow = (np.array(slot, np.int64), np.array(first, bool),
                                 np.array(overflow, bool))
        return slot, first, overflow

    TABLE0, TABLE1, STASH, OVERFLOW = range(4)
    FIXED_POINT_PASSES = 64   # then the key-by-key loop (a real batch settles in about 5)

    def placements(self, keys):
        """Where each of distinct ``keys`` (at most ``max_keys``), inserted in order into an
        empty set, lands: `TABLE0`, `TABLE1`, `STASH` or `OVERFLOW` (int8), as `replay`'s loop
        places them; None if the iteration did not settle. A key's place depends only on the
        keys before it (its buckets' fills, its partition's stash), so the iteration "each
        key placed by the places of the keys before it in the last pass" has exactly one
        fixed point, the sequential placement, and reaches it within len(keys) + 1 passes."""
        keys = np.ascontiguousarray(keys, np.uint64)
        if not len(keys):
            return np.zeros(0, np.int8)
        h0, h1 = self.buckets_of(keys)
        g0, g1, gp = _grouping(h0), _grouping(h1), _grouping(self.partition_of(keys))
        place = np.zeros(len(keys), np.int8)
        for _ in range(self.FIXED_POINT_PASSES):
            free0 = self.ways - _earlier_in_group(*g0, place == self.TABLE0)
            free1 = self.ways - _earlier_in_group(*g1, place == self.TABLE1)
            stashed = _earlier_in_group(*gp, place == self.STASH)
            new = np.where((free0 > 0) | (free1 > 0),
                           np.where(free1 > free0, self.TABLE1, self.TABLE0),
                           np.where(stashed < self.stash, self.STASH, self.OVERFLOW)).astype(np.int8)
            if np.array_equal(new, place):
                return place
            place = new
        return None
