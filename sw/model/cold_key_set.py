"""Bit-exact model of the ColdKeySet block (hw/cold_key_set.py): batch-local dedup of keys.

Within a batch, the k-th distinct inserted key gets slot k (first-appearance order) unless it
overflows: no free way in either of its two buckets and no free stash entry, or ``max_keys``
slots already used. An overflowed key is not stored, so each later beat of it is new again.
With ``partitions`` P > 1 a key belongs to one partition (`partition_of`: hash
``COLD_PARTITION_SEED``), each with its own two tables of ``capacity // (2 * ways * P)``
buckets and its own stash; the slots (and ``max_keys``) stay global, in order of first
appearance. Placement never changes a slot, so `batch` answers from the vectorised
first-appearance ranks whenever overflow is impossible (every key has a bucket that at most
``ways`` of the batch's keys hash to) and replays the exact insertion sequence otherwise, key
by key in a loop compiled by numba (`replay`).
"""
import math

import numpy as np

from hotline.contract.config import COLD_PARTITION_SEED, COLD_SEEDS, PRODUCT
from hotline.contract.hashing import bucket_hash

from .compiled import compiled


def first_appearance(keys):
    """(rank of each key among the distinct keys in order of first appearance, those keys)."""
    keys = np.asarray(keys)
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(uniq), np.int64)
    rank[order] = np.arange(len(uniq))
    return rank[inverse], uniq[order]


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
        possible), key by key (`_replay`, compiled). A key equal to one of the ``window`` keys
        before it (the Fragmenter's `hotline.contract.config.repeat_window`) takes the latest
        one's slot and is neither new nor overflowed: it never reaches the set. That differs
        from a lookup in the set only after an overflow, which stores nothing."""
        keys = np.ascontiguousarray(keys, np.uint64)
        n = len(keys)
        slot, first, overflow = np.zeros(n, np.int64), np.zeros(n, bool), np.zeros(n, bool)
        if n:
            h0, h1 = self.buckets_of(keys)
            _replay_kernel(keys, h0.astype(np.int64), h1.astype(np.int64),
                           self.partition_of(keys), latest_copy(keys, window), self.ways,
                           self.stash, self.max_keys, self.buckets * self.partitions,
                           self.partitions, slot, first, overflow)
        return slot, first, overflow


def _replay(keys, h0, h1, part, copy, ways, stash, max_keys, buckets, partitions, slot, first,
            overflow):
    """`ColdKeySetModel.replay`'s loop (compiled by `_replay_kernel`): fills ``slot``,
    ``first`` and ``overflow`` per key. The keys stored so far are looked up in an open-address
    table of twice the keys' count (a key's own hash, not the set's buckets: the set stores
    what the batch's keys are, this table only finds them again)."""
    n = keys.shape[0]
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    mask = (1 << bits) - 1
    table_key = np.zeros(1 << bits, np.uint64)
    table_slot = np.full(1 << bits, -1, np.int64)   # -1: empty
    fill0, fill1 = np.zeros(buckets, np.int64), np.zeros(buckets, np.int64)
    stash_used = np.zeros(partitions, np.int64)
    count = 0
    for i in range(n):
        if copy[i] >= 0:
            slot[i] = slot[copy[i]]
            continue
        k = keys[i]
        at = np.int64((k * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))
        while table_slot[at] >= 0 and table_key[at] != k:
            at = (at + 1) & mask
        if table_slot[at] >= 0:
            slot[i] = table_slot[at]
            continue
        first[i] = True
        if count >= max_keys:
            overflow[i] = True
            continue
        slot[i] = count
        a, b = h0[i], h1[i]
        free0, free1 = ways - fill0[a], ways - fill1[b]
        if free0 > 0 or free1 > 0:
            if free1 > free0:
                fill1[b] += 1
            else:
                fill0[a] += 1
        elif stash_used[part[i]] < stash:
            stash_used[part[i]] += 1
        else:
            overflow[i] = True
        if not overflow[i]:
            table_key[at], table_slot[at] = k, count
        count += 1


_replay_kernel = compiled(_replay)
