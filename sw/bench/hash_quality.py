"""How full the hash tables get on structured keys: the measurements behind the hash family and
the CAM geometry (``python -m hotline.bench --only hashing``; tests/test_hashing.py).

Everything runs the bit-exact models, so a figure here is what the RTL does:
- ``cam_first_refusal``: PopularityCAM occupancy (table and stash) when the first insert is
  refused, inserting a key pool in a given order;
- ``cold_first_overflow``: ColdKeySet occupancy of its capacity at the first overflowed key;
- ``key_families``: the key pools, random and structured: dense rows ``(table << ROW_BITS) | row``
  of one table and of 26 tables, each in random order and in rank order (row ids ascending,
  which is the order of popularity when rows are numbered by first appearance).
"""
import numpy as np

from hotline.contract.cam import CAMStatus
from hotline.contract.keys import ROW_BITS
from hotline.data.readers import load_dataset
from hotline.model.cold_key_set import ColdKeySetModel
from hotline.model.popularity_cam import PopularityCAMModel

__all__ = ["key_families", "file_families", "cam_first_refusal", "cold_first_overflow",
           "GEOMETRIES"]

# (hash family, CAM ways): before this measurement, the linear hash; the tabulation hash with
# the old 2 x 4 buckets; the product geometry (2 x 8).
GEOMETRIES = (("h3", 4), ("tabulation", 4), ("tabulation", 8))


def _dense(tables, rows):
    """Keys of ``rows`` dense rows in each of ``tables`` tables, in rank order: row r of every
    table before row r + 1 (each table's rows by id)."""
    row = np.arange(rows, dtype=np.uint64)
    table = np.arange(3, 3 + tables, dtype=np.uint64)
    return ((table[None, :] << np.uint64(ROW_BITS)) | row[:, None]).ravel()


def key_families(n, seed=0):
    """``{name: keys}``: ``n`` distinct keys per family, random-order families shuffled."""
    rng = np.random.default_rng(seed)
    one, many = _dense(1, n), _dense(26, -(-n // 26))[:n]
    return {
        "random": rng.choice(1 << 32, n, replace=False).astype(np.uint64),
        "dense 1 table, random order": rng.permutation(one),
        "dense 1 table, rank order": one,
        "dense 26 tables, random order": rng.permutation(many),
        "dense 26 tables, rank order": many,
    }


def file_families(path, seed=0):
    """The distinct keys of a data file in rank order (most accessed first, ties by key) and
    in random order."""
    keys = load_dataset(path).keys.astype(np.uint64)
    uniq, counts = np.unique(keys, return_counts=True)
    ranked = uniq[np.lexsort((uniq, -counts))]
    return {"rank order": ranked,
            "random order": np.random.default_rng(seed).permutation(ranked)}


def cam_first_refusal(keys, entries, ways=8, hash_family="tabulation"):
    """Occupancy (fraction of ``entries``) when the first insert of ``keys`` (in order) is
    refused; None when every key fits."""
    cam = PopularityCAMModel(entries, ways=ways, hash_family=hash_family)
    for key in keys.tolist():
        if cam.insert(key)[0] == CAMStatus.FULL:
            return cam.occupancy() / entries
    return None


def cold_first_overflow(keys, capacity, hash_family="tabulation", **geometry):
    """Occupancy of a ColdKeySet of ``capacity`` at its first overflowed key, when ``keys``
    (distinct) arrive as one batch; None when none overflows."""
    model = ColdKeySetModel(capacity, max_keys=capacity, hash_family=hash_family, **geometry)
    over = model.batch(np.asarray(keys, np.uint64))[2]
    hits = np.flatnonzero(over)
    return int(hits[0]) / capacity if hits.size else None
