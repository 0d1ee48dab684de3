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

from .compiled import compiled

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
        # each entry's key's bucket in the other table (where a kick sends it)
        self.other = np.zeros((2, self.buckets, self.ways), np.int64)
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

    def insert(self, key):
        """(status, slot, moves): moves are (src, dst) slot copies, applied in list order."""
        return self.insert_many([key])[0]

    def insert_many(self, keys) -> list:
        """`insert` of each of ``keys`` in order (compiled: about 1 us a key); the responses."""
        keys = self._check(np.atleast_1d(keys))
        homes = np.stack([self.hash(0, keys), self.hash(1, keys)], 1).astype(np.int64)
        out = np.zeros((len(keys), 3), np.int64)          # status, slot, moves
        moves = np.zeros((len(keys) * self.max_kicks, 2), np.int64)
        state = np.array([self.kicks], np.int64)
        _insert_kernel(keys, homes, self.keys, self.valid, self.other, self.stash_keys,
                       self.stash_valid, state, self.max_kicks, out, moves)
        self.kicks = int(state[0])
        responses, m = [], 0
        for status, slot, n in out.tolist():
            responses.append((CAMStatus(status), slot, [tuple(mv) for mv in moves[m:m + n].tolist()]))
            m += n
        return responses

    def place(self, keys):
        """Insert ``keys`` in order; final slot per key (after all moves) and failed indices."""
        keys = self._check(keys)
        failed = [i for i, r in enumerate(self.insert_many(keys)) if r[0] == CAMStatus.FULL]
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


def _insert(keys, homes, table_keys, valid, other, stash_keys, stash_valid, state, max_kicks,
            out, moves):
    """INSERT each of ``keys`` (buckets ``homes[i] = (table 0's, table 1's)``) as the RTL does:
    EXISTS if held; else the first free way of its table-0 bucket, then of its table-1 bucket;
    else a kick path (ways tried from the running kick count, a way not twice on the path in
    one bucket) to a free way, whose entries move back along it (moves src -> dst); else the
    first free stash entry; else FULL. ``out[i]``: status, slot, number of moves."""
    ways, buckets = table_keys.shape[2], table_keys.shape[1]
    entries = 2 * buckets * ways
    path = np.zeros((max_kicks, 3), np.int64)
    m = 0
    for i in range(keys.shape[0]):
        key = keys[i]
        status, slot, n = -1, 0, 0
        for t in range(2):                                   # held already?
            b = homes[i, t]
            for w in range(ways):
                if status < 0 and valid[t, b, w] and table_keys[t, b, w] == key:
                    status, slot = 1, (t * buckets + b) * ways + w       # EXISTS
        for j in range(stash_keys.shape[0]):
            if status < 0 and stash_valid[j] and stash_keys[j] == key:
                status, slot = 1, entries + j
        for t in range(2):                                   # a free way at home
            b = homes[i, t]
            for w in range(ways):
                if status < 0 and not valid[t, b, w]:
                    table_keys[t, b, w], valid[t, b, w] = key, True
                    other[t, b, w] = homes[i, 1 - t]
                    status, slot = 0, (t * buckets + b) * ways + w     # OK
        if status < 0:                                       # the kick path
            t, b, length, found = 0, homes[i, 0], 0, -1
            while length < max_kicks and found < 0:
                way = -1
                for r in range(ways):
                    w = (state[0] + r) % ways
                    taken = False
                    for q in range(length):
                        if path[q, 0] == t and path[q, 1] == b and path[q, 2] == w:
                            taken = True
                    if not taken:
                        way = w
                        break
                if way < 0:
                    break
                path[length, 0], path[length, 1], path[length, 2] = t, b, way
                length += 1
                state[0] += 1
                b, t = other[t, b, way], 1 - t
                for w in range(ways):
                    if found < 0 and not valid[t, b, w]:
                        found = w
            if found >= 0:                                   # move the path's keys along it
                tt, tb, tw = t, b, found
                for q in range(length - 1, -1, -1):
                    st, sb, sw = path[q, 0], path[q, 1], path[q, 2]
                    table_keys[tt, tb, tw], valid[tt, tb, tw] = table_keys[st, sb, sw], True
                    other[tt, tb, tw] = sb
                    moves[m + n, 0] = (st * buckets + sb) * ways + sw
                    moves[m + n, 1] = (tt * buckets + tb) * ways + tw
                    n += 1
                    tt, tb, tw = st, sb, sw
                table_keys[tt, tb, tw] = key
                other[tt, tb, tw] = homes[i, 1]
                status, slot = 0, (tt * buckets + tb) * ways + tw
            else:                                            # the stash, or FULL
                status = 2
                for j in range(stash_keys.shape[0]):
                    if status == 2 and not stash_valid[j]:
                        stash_keys[j], stash_valid[j] = key, True
                        status, slot = 0, entries + j
        out[i, 0], out[i, 1], out[i, 2] = status, slot, n
        m += n


_insert_kernel = compiled(_insert)
