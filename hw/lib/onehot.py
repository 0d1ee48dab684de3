"""One-hot selects built as AND-OR trees (no binary decode in front of the data), binary
selects built as 2:1 mux trees, the lowest-set-bit (priority) encoders, popcount, and the lane
compaction built on them."""
from amaranth.hdl import C, Cat, Const, Mux, Signal, Value
from amaranth.utils import bits_for, ceil_log2

__all__ = ["one_hot_select", "binary_select", "lowest_one_hot", "lowest_index", "popcount",
           "compact", "shift_in"]


def one_hot_select(select, values):
    """OR of ``values[i]`` where one-hot ``select[i]`` is set (0 when none is)."""
    out = Const(0, len(values[0]))
    for i, value in enumerate(values):
        out = out | Mux(select[i], value, 0)
    return out


def binary_select(values, index):
    """``values[index]`` (equal-width values; an index past the last gives one of them) as a
    tree of 2:1 multiplexers, one level per bit of ``index``, lowest bit first. An `Array`
    indexed by a signal becomes a case per entry: a decode of the index, then an OR over
    every entry (with a 64-entry one in the CAM walk's pop, the 1-lane top's estimate after
    placement fell from 96.6 to 68.1 MHz)."""
    level = [Value.cast(v) for v in values]
    for bit in Value.cast(index):
        if len(level) == 1:
            break
        level = [Mux(bit, level[i + 1], level[i]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0]


def _bits(bits):
    """``bits`` (a value, or a list of 1-bit values) as one value."""
    return Cat(*bits) if isinstance(bits, (list, tuple)) else Value.cast(bits)


def lowest_one_hot(bits):
    """One-hot of the lowest set bit of ``bits`` (a value or a list of 1-bit values; 0 when
    none is). Bit i is ``bits[i]`` and none below it: an OR per bit, no adder (a
    ``bits & -bits`` puts a carry chain behind late mask logic)."""
    bits = _bits(bits)
    return Cat(bits[i] & ~bits[:i].any() if i else bits[0] for i in range(len(bits)))


def lowest_index(bits):
    """(any, index): whether one of ``bits`` (a value or a list of 1-bit values) is set, and
    the index of the lowest set one (0 when none is), as wide as ``Signal(range(len(bits)))``:
    0 bits for one bit, so a ``Cat`` of it with more fields (a slot, an address) packs no
    spare bit. A priority chain of muxes, the lowest bit's last."""
    width = ceil_log2(len(bits))
    index = C(0, width)
    for i in reversed(range(len(bits))):
        index = Mux(bits[i], C(i, width), index)
    return _bits(bits).any(), index


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
