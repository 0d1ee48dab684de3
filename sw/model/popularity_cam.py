"""Bit-exact numpy model of the PopularityCAM (hw/popularity_cam.py).

Same hashes (``hotline.contract.hashing.bucket_hash``), placement, relocation decisions, slots and
statuses (`hotline.contract.cam.CAMStatus`) as the RTL; the RTL docstring states the rules. Written from that specification, not
from the RTL code.
"""
from typing import NamedTuple

import numpy as np

from hotline.contract.cam import CAMStatus
from hotline.contract.config import PRODUCT
from hotline.contract.hashing import bucket_hash

__all__ = ["Placement", "PopularityCAMModel"]


class Placement(NamedTuple):
    slots: np.ndarray   # int64 final slot per key, -1 where the insert failed
    failed: np.ndarray  # indices (into keys) of the inserts that returned FULL


class PopularityCAMModel:
    """Key -> slot map with the RTL's geometry and insert algorithm.

    ``insert(key) -> (status, slot, moves)`` with ``moves`` the list of (src, dst) slot copies in
    the order the RTL emits them; ``delete(key) -> (status, slot)``; ``clear()`` (also the state
    after reset); vectorised ``lookup(keys) -> (hit, slot)``; ``place(keys) -> Placement``.
    The geometry defaults are the product configuration's (`hotline.contract.config.PRODUCT`).
    """

    def __init__(self, entries=PRODUCT.cam_entries, *, ways=PRODUCT.cam_ways, key_width=32,
                 stash=PRODUCT.cam_stash, max_kicks=PRODUCT.cam_max_kicks, seeds=(1, 2),
                 hash_family="tabulation"):
        self.entries, self.ways, self.key_width = entries, ways, key_width
        self.stash_size, self.max_kicks = stash, max_kicks
        self.buckets = entries // (2 * ways)
        bucket_bits = (self.buckets - 1).bit_length()
        self.hashes = [bucket_hash(seed, key_width, bucket_bits, hash_family) for seed in seeds]
        self.clear()

    def clear(self):
        self.keys = np.zeros((2, self.buckets, self.ways), np.uint64)
        self.valid = np.zeros((2, self.buckets, self.ways), bool)
        self.stash_keys = np.zeros(self.stash_size, np.uint64)
        self.stash_valid = np.zeros(self.stash_size, bool)
        self.kicks = 0

    reset = clear

    def slot(self, table, bucket, way):
        return (table * self.buckets + bucket) * self.ways + way

    def hash(self, table, keys):
        return self.hashes[table].np(keys)

    def _bucket(self, table, key):
        return self.hashes[table].value(int(key))

    def _check(self, keys):
        keys = np.asarray(keys, np.uint64)
        if keys.size and int(keys.max()) >> self.key_width:
            raise ValueError(f"keys must fit in {self.key_width} bits")
        return keys

    def lookup(self, keys):
        """(hit bool array, slot int64 array; 0 where missing) for an array of keys."""
        keys = self._check(keys)
        hit = np.zeros(keys.shape, bool)
        slot = np.zeros(keys.shape, np.int64)
        for t in (0, 1):
            bucket = self.hash(t, keys)
            match = self.valid[t][bucket] & (self.keys[t][bucket] == keys[..., None])
            found = match.any(-1)
            slot = np.where(found, self.slot(t, bucket, match.argmax(-1)), slot)
            hit |= found
        match = self.stash_valid & (self.stash_keys == keys[..., None])
        found = match.any(-1)
        slot = np.where(found, self.entries + match.argmax(-1), slot)
        return hit | found, slot

    def _find(self, key):
        """(table, bucket, way) or ('stash', i) or None."""
        for t in (0, 1):
            b = self._bucket(t, key)
            ways = np.flatnonzero(self.valid[t, b] & (self.keys[t, b] == key))
            if ways.size:
                return t, b, int(ways[0])
        i = np.flatnonzero(self.stash_valid & (self.stash_keys == key))
        return ("stash", int(i[0])) if i.size else None

    def delete(self, key):
        key = np.uint64(self._check(key))
        where = self._find(key)
        if where is None:
            return CAMStatus.NOT_FOUND, 0
        if where[0] == "stash":
            self.stash_valid[where[1]] = False
            return CAMStatus.OK, self.entries + where[1]
        self.valid[where] = False
        return CAMStatus.OK, self.slot(*where)

    def delete_many(self, keys) -> list:
        """`delete` of each of ``keys`` (distinct), vectorised: a delete moves no other key, so
        the order does not matter. The responses, in order."""
        keys = self._check(keys)
        hit, slot = self.lookup(keys)
        table = hit & (slot < self.entries)
        self.valid.reshape(-1)[slot[table]] = False
        self.stash_valid[slot[hit & ~table] - self.entries] = False
        return [(CAMStatus.OK, s) if h else (CAMStatus.NOT_FOUND, 0)
                for h, s in zip(hit.tolist(), slot.tolist())]

    def _free_way(self, t, b):
        free = np.flatnonzero(~self.valid[t, b])
        return int(free[0]) if free.size else None

    def _search(self, key):
        """Victim path [(t, b, w), ...] plus the free slot ending it, or None."""
        path = []
        t, b = 0, self._bucket(0, key)
        while len(path) < self.max_kicks:
            taken = {w for (pt, pb, w) in path if (pt, pb) == (t, b)}
            order = [(self.kicks + r) % self.ways for r in range(self.ways)]
            way = next((w for w in order if w not in taken), None)
            if way is None:
                return None
            path.append((t, b, way))
            self.kicks += 1
            victim = self.keys[t, b, way]
            t = 1 - t
            b = self._bucket(t, victim)
            free = self._free_way(t, b)
            if free is not None:
                return path, (t, b, free)
        return None

    def insert(self, key):
        """(status, slot, moves): moves are (src, dst) slot copies, applied in list order."""
        key = np.uint64(self._check(key))
        where = self._find(key)
        if where is not None:
            slot = self.entries + where[1] if where[0] == "stash" else self.slot(*where)
            return CAMStatus.EXISTS, slot, []
        for t in (0, 1):
            b = self._bucket(t, key)
            w = self._free_way(t, b)
            if w is not None:
                self.keys[t, b, w], self.valid[t, b, w] = key, True
                return CAMStatus.OK, self.slot(t, b, w), []
        found = self._search(key)
        if found is None:
            free = np.flatnonzero(~self.stash_valid)
            if not free.size:
                return CAMStatus.FULL, 0, []
            i = int(free[0])
            self.stash_keys[i], self.stash_valid[i] = key, True
            return CAMStatus.OK, self.entries + i, []
        path, target = found
        moves = []
        for src in reversed(path):
            self.keys[target], self.valid[target] = self.keys[src], True
            moves.append((self.slot(*src), self.slot(*target)))
            target = src
        self.keys[target] = key
        return CAMStatus.OK, self.slot(*target), moves

    def place(self, keys):
        """Insert ``keys`` in order; final slot per key (after all moves) and failed indices."""
        keys = self._check(keys)
        failed = [i for i, k in enumerate(keys) if self.insert(k)[0] == CAMStatus.FULL]
        hit, slot = self.lookup(keys)
        return Placement(np.where(hit, slot, -1), np.asarray(failed, np.int64))

    def contents(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, slots) of every valid entry: the table entries, then the stash's."""
        flat = self.valid.reshape(-1)
        slots = np.concatenate([np.flatnonzero(flat),
                                self.entries + np.flatnonzero(self.stash_valid)])
        keys = np.concatenate([self.keys.reshape(-1)[flat], self.stash_keys[self.stash_valid]])
        return keys.astype(np.uint32), slots.astype(np.int64)

    def occupancy(self):
        return int(self.valid.sum() + self.stash_valid.sum())
