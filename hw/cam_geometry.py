"""The PopularityCAM's shape, shared by its stages (`CAMLookupPipeline`, `CAMCommandEngine`).

Two hash tables ``t`` in {0, 1} of ``buckets`` buckets of ``ways`` entries (valid bit + key),
and ``stash`` flip-flop entries. Slots are the contract's (docs/design.md, hot slots):
``slot = t * entries // 2 + bucket * ways + way`` for table entries, ``entries + i`` for stash
entry ``i``, ``hot_slot_width(entries, stash)`` bits.
"""
from amaranth import C, Cat
from amaranth.lib import data
from amaranth.utils import ceil_log2

from hotline.contract.config import hot_slot_width
from hotline.contract.hashing import bucket_hash

__all__ = ["CAMGeometry"]


class CAMGeometry:
    """Tables, slots, hashes and entry layouts of a PopularityCAM (see the module docstring).

    Parameters as `PopularityCAM`'s: ``entries`` and ``ways`` powers of two, ``entries`` >=
    2 * ``ways``; ``stash`` >= 1; ``max_kicks`` >= 1; two distinct ``seeds``.
    """

    def __init__(self, entries, ways, key_width, stash, max_kicks, seeds, hash_family):
        for name, value in (("entries", entries), ("ways", ways)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if entries < 2 * ways:
            raise ValueError(f"entries ({entries}) must be at least 2 * ways ({2 * ways})")
        if stash < 1 or max_kicks < 1 or len(seeds) != 2 or seeds[0] == seeds[1]:
            raise ValueError("need stash >= 1, max_kicks >= 1 and two distinct seeds")
        self.entries, self.ways, self.key_width = entries, ways, key_width
        self.stash, self.max_kicks, self.seeds = stash, max_kicks, tuple(seeds)
        self.hash_family = hash_family
        self.buckets = entries // (2 * ways)
        self.bucket_bits, self.way_bits = ceil_log2(self.buckets), ceil_log2(ways)
        self.slot_width = hot_slot_width(entries, stash)
        self.hashes = [bucket_hash(seed, key_width, self.bucket_bits, hash_family)
                       for seed in seeds]
        self.entry_layout = data.StructLayout({"valid": 1, "key": key_width})
        self.bucket_layout = data.ArrayLayout(self.entry_layout, ways)
        # A place in the tables, laid out as its slot number (way, bucket, table from the LSB).
        self.place_layout = data.StructLayout({"way": self.way_bits, "bucket": self.bucket_bits,
                                               "table": 1})

    def slot(self, table, bucket, way):
        """The slot of entry ``way`` of ``bucket`` in ``table`` (ints or Values)."""
        return Cat(C(way, self.way_bits) if isinstance(way, int) else way,
                   bucket, C(table, 1) if isinstance(table, int) else table)

    def stash_slot(self, i):
        return C(self.entries + i, self.slot_width)

    def hash(self, table, key):
        """Bucket of ``key`` in ``table`` (a Value)."""
        return self.hashes[table].expr(key)

    def stash_match(self, valid, keys, key):
        """Per stash entry: valid and holding ``key``."""
        return [valid[i] & (keys[i] == key) for i in range(self.stash)]
