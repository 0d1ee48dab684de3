"""H3 hash functions shared by the RTL blocks and their bit-exact models.

An H3 hash maps a ``key_bits`` key to ``out_bits`` bits; output bit ``j`` is the parity of
``key & masks[j]``. In hardware that is one XOR tree per output bit (no multipliers, one LUT
level per 4 inputs, registered once), and it is universal, so a few independent seeds give
independent hash functions for cuckoo/d-left tables and sketches.
The masks are derived from a seed with splitmix64, so model and RTL agree by construction.
"""
import numpy as np
from amaranth.hdl import Cat, Value

__all__ = ["h3_masks", "h3_hash", "h3_hash_np"]

_M64 = (1 << 64) - 1


def _splitmix64(state):
    while True:
        state = (state + 0x9E3779B97F4A7C15) & _M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        yield z ^ (z >> 31)


def h3_masks(seed, key_bits, out_bits):
    """The ``out_bits`` masks (each ``key_bits`` wide) of H3 hash number ``seed``."""
    if not 0 < key_bits <= 64:
        raise ValueError(f"key_bits must be 1..64, not {key_bits}")
    gen = _splitmix64(0x5EED0000 + seed)
    key_mask = (1 << key_bits) - 1
    masks = []
    while len(masks) < out_bits:
        m = next(gen) & key_mask
        if m:
            masks.append(m)
    return tuple(masks)


def h3_hash(key: Value, masks):
    """Amaranth expression: the H3 hash of ``key`` (purely combinational)."""
    return Cat(*((key & m).xor() for m in masks))


def h3_hash_np(keys, masks):
    """Vectorised reference: H3 hash of an integer array ``keys`` (returns uint64)."""
    keys = np.asarray(keys, dtype=np.uint64)
    out = np.zeros(keys.shape, dtype=np.uint64)
    for j, m in enumerate(masks):
        parity = np.bitwise_count(keys & np.uint64(m)) & np.uint8(1)
        out |= parity.astype(np.uint64) << np.uint64(j)
    return out
