"""Bucket hash functions shared by the RTL blocks and their bit-exact models (contract).

Every table in the accelerator (PopularityCAM, ColdKeySet, AccessLearner) addresses its
buckets with ``bucket_hash(seed, key_bits, out_bits)``: **nibble tabulation hashing**. The key
is cut into 4-bit characters ``c_i``; ``h(key) = T_0[c_0] ^ T_1[c_1] ^ ...`` with 16 random
``out_bits``-wide entries per table ``T_i``. In gateware every output bit of every ``T_i`` is one
LUT4 of its nibble, followed by an XOR tree over the nibbles (one LUT level more than H3, no
multipliers, no memory); combinational, registered by the caller.

Why not H3 (``h(key)`` = parities of ``key & mask_j``), which the blocks used before: H3 is
linear over GF(2). Real keys are dense row ids, ``(table << ROW_BITS) | row`` with ``row`` in
``0..N-1``, so a key set contains whole linear subspaces (all rows below a power of two). A
subspace ``V = A + B`` with ``A`` inside the kernel of ``h_0`` and ``B`` inside the kernel of ``h_1``
puts its ``|A| * |B|`` keys into only ``|B|`` buckets of table 0 and ``|A|`` of table 1: with
``|A| = |B| = 16`` that is 256 keys for 32 buckets of 4 (or 8) ways, and the cuckoo table is
refused long before it fills (67% on one table's rows 0..19,999). Tabulation over 4-bit
characters is not linear (``T[a] ^ T[b] ^ T[c] ^ T[a ^ b ^ c]`` is not 0), and measured on every
key family it fills like random keys do (``python -m hotline.bench --only hashing``).

``H3Hash`` stays as the linear reference that the benchmark and a test set beside it.
All tables and masks come from a seed through splitmix64, so model and RTL agree by construction.
"""
from functools import reduce
from operator import xor
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from amaranth.hdl import Value

__all__ = ["TabulationHash", "H3Hash", "HASH_FAMILIES", "bucket_hash"]

_M64 = (1 << 64) - 1
CHAR_BITS = 4


def _splitmix64(state):
    while True:
        state = (state + 0x9E3779B97F4A7C15) & _M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        yield z ^ (z >> 31)


def _check_widths(key_bits, out_bits):
    if not 0 < key_bits <= 64:
        raise ValueError(f"key_bits must be 1..64, not {key_bits}")
    if not 0 <= out_bits <= 64:
        raise ValueError(f"out_bits must be 0..64, not {out_bits}")


class TabulationHash:
    """Hash number ``seed`` from ``key_bits`` to ``out_bits``: XOR of one 16-entry table per
    4-bit character of the key. ``expr(key)`` is the Amaranth expression, ``np(keys)`` the
    vectorised reference (int64), ``value(key)`` the same for one int."""

    def __init__(self, seed, key_bits, out_bits):
        _check_widths(key_bits, out_bits)
        self.seed, self.key_bits, self.out_bits = seed, key_bits, out_bits
        gen = _splitmix64(0x7AB0_0000 + seed)
        chars = -(-key_bits // CHAR_BITS)
        out_mask = (1 << out_bits) - 1
        self.tables = tuple(tuple(next(gen) & out_mask for _ in range(1 << CHAR_BITS))
                            for _ in range(chars))
        # np: the tables of a byte's two characters merged (entry hi * 16 + lo), half the passes
        nibbles = np.zeros((chars + chars % 2, 1 << CHAR_BITS), np.int64)
        nibbles[:chars] = self.tables
        self._byte_tables = (nibbles[1::2, :, None] ^ nibbles[0::2, None, :]).reshape(-1, 256)

    def expr(self, key: "Value") -> "Value":
        from amaranth.hdl import Cat, Const  # lazy: the models and the host use np / value only
        chars = [key[i:i + CHAR_BITS] for i in range(0, self.key_bits, CHAR_BITS)]
        bits = []
        for j in range(self.out_bits):
            # Output bit j of table i as a 16-entry truth table indexed by character i: a LUT4.
            terms = [Const(sum(((t[v] >> j) & 1) << v for v in range(1 << CHAR_BITS)),
                           1 << CHAR_BITS).bit_select(c, 1) for t, c in zip(self.tables, chars)]
            bits.append(reduce(xor, terms))
        return Cat(*bits)

    def value(self, key: int) -> int:
        h = 0
        for table in self.tables:
            h ^= table[key & 15]
            key >>= CHAR_BITS
        return h

    def np(self, keys) -> np.ndarray:
        keys = np.ascontiguousarray(keys, "<u8")
        key_bytes = keys.view(np.uint8).reshape(keys.shape + (8,))   # least significant first
        out = np.zeros(keys.shape, np.int64)
        for i, table in enumerate(self._byte_tables):
            out ^= table.take(key_bytes[..., i])
        return out


class H3Hash:
    """The linear H3 hash (output bit ``j`` = parity of ``key & masks[j]``); kept as the
    reference that shows what structured keys do to a linear hash (module docstring)."""

    def __init__(self, seed, key_bits, out_bits):
        _check_widths(key_bits, out_bits)
        self.seed, self.key_bits, self.out_bits = seed, key_bits, out_bits
        gen = _splitmix64(0x5EED0000 + seed)
        key_mask = (1 << key_bits) - 1
        masks = []
        while len(masks) < out_bits:
            m = next(gen) & key_mask
            if m:
                masks.append(m)
        self.masks = tuple(masks)

    def expr(self, key: "Value") -> "Value":
        from amaranth.hdl import Cat  # lazy: (see TabulationHash.expr)
        return Cat(*((key & m).xor() for m in self.masks))

    def value(self, key: int) -> int:
        return sum(((key & m).bit_count() & 1) << j for j, m in enumerate(self.masks))

    def np(self, keys) -> np.ndarray:
        keys = np.asarray(keys, np.uint64)
        out = np.zeros(keys.shape, np.int64)
        for j, m in enumerate(self.masks):
            parity = np.bitwise_count(keys & np.uint64(m)) & np.uint8(1)
            out |= parity.astype(np.int64) << j
        return out


HASH_FAMILIES = {"tabulation": TabulationHash, "h3": H3Hash}


def bucket_hash(seed: int, key_bits: int, out_bits: int,
                family: str = "tabulation") -> "TabulationHash | H3Hash":
    """Hash number ``seed`` of ``family`` (``HASH_FAMILIES``): what every block and model uses."""
    try:
        cls = HASH_FAMILIES[family]
    except KeyError:
        raise ValueError(f"hash family must be one of {sorted(HASH_FAMILIES)}, not {family!r}") from None
    return cls(seed, key_bits, out_bits)
