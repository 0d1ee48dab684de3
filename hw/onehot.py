"""One-hot selects built as AND-OR trees (no binary decode in front of the data)."""
from amaranth.hdl import Const, Mux

__all__ = ["one_hot_select", "lowest_one_hot"]


def one_hot_select(select, values):
    """OR of ``values[i]`` where one-hot ``select[i]`` is set (0 when none is)."""
    out = Const(0, len(values[0]))
    for i, value in enumerate(values):
        out = out | Mux(select[i], value, 0)
    return out


def lowest_one_hot(mask):
    """One-hot of the lowest set bit of ``mask`` (0 when none is)."""
    return (mask & (~mask + 1))[:len(mask)]
