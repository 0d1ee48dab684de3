"""One-hot selects built as AND-OR trees (no binary decode in front of the data)."""
from amaranth.hdl import C, Const, Mux, Signal
from amaranth.utils import bits_for

__all__ = ["one_hot_select", "lowest_one_hot", "popcount", "compact", "shift_in"]


def one_hot_select(select, values):
    """OR of ``values[i]`` where one-hot ``select[i]`` is set (0 when none is)."""
    out = Const(0, len(values[0]))
    for i, value in enumerate(values):
        out = out | Mux(select[i], value, 0)
    return out


def lowest_one_hot(mask):
    """One-hot of the lowest set bit of ``mask`` (0 when none is)."""
    return (mask & (~mask + 1))[:len(mask)]


def popcount(bits):
    """The set bits among ``bits`` (a list of 1-bit values)."""
    return sum((b for b in bits), C(0, bits_for(len(bits))))


def compact(m, select, values, name):
    """``values[j]`` of the set bits of ``select``, moved to the front in order: (entries,
    count), the entries signals of ``m`` named ``name0``, ... ``select`` a list of 1-bit
    values, ``values`` a list of equal-width values."""
    n = len(select)
    before = [popcount(select[:j]) if j else C(0, 1) for j in range(n)]
    out = []
    for k in range(n):
        entry = Signal(len(values[0]), name=f"{name}{k}")
        m.d.comb += entry.eq(one_hot_select([select[j] & (before[j] == k) for j in range(n)],
                                            values))
        out.append(entry)
    return out, popcount(select)


def shift_in(m, latest, arrivals, count, keep=None):
    """At the clock edge, the registers ``latest`` (latest first) take the first ``count``
    (0 .. len(arrivals)) of ``arrivals`` (in arrival order) in front of what they held (ANDed
    with ``keep`` when ``count`` > 0: 1-bit registers only)."""
    with m.Switch(count):
        for t in range(1, len(arrivals) + 1):
            with m.Case(t):
                m.d.sync += [reg.eq(arrivals[t - 1 - j] if j < t else
                                    latest[j - t] if keep is None else latest[j - t] & keep)
                             for j, reg in enumerate(latest)]
