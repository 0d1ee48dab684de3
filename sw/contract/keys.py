"""The key format (docs/design.md, "Keys and slots"): ``key = (table << ROW_BITS) | row``,
32 bits.

Feature ``f`` looks up table ``f``; a key names one embedding row. The accelerator, its
models, the DMA descriptors (``ROW_BITS`` register) and the host runtime all split keys here.
"""
import numpy as np

__all__ = ["KEY_BITS", "ROW_BITS", "MAX_TABLES", "MAX_ROWS", "make_keys", "split_keys"]

KEY_BITS = 32
ROW_BITS = 27
MAX_TABLES = 1 << (KEY_BITS - ROW_BITS)
MAX_ROWS = 1 << ROW_BITS


def make_keys(tables, rows) -> np.ndarray:
    """Keys ``(table << ROW_BITS) | row`` as uint32."""
    return ((np.asarray(tables, np.uint32) << np.uint32(ROW_BITS))
            | np.asarray(rows).astype(np.uint32))


def split_keys(keys) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of `make_keys`: (tables, rows) as int64 arrays."""
    keys = np.asarray(keys, np.uint32)
    return ((keys >> np.uint32(ROW_BITS)).astype(np.int64),
            (keys & np.uint32(MAX_ROWS - 1)).astype(np.int64))
