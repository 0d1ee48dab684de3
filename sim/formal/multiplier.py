"""The multiplier lemma (issue 43), on `row_window_check._mul`, the products property 1
abstracts (a table's bytes: rows x row size; the staging window's: slots x banks x stride):
two register stages give ``a * b`` of the inputs two enabled cycles before, for every
``a`` and ``b``.

`_mul` splits ``a`` into 17-bit slices (one DSP each), multiplies each by ``b`` and adds
them shifted: the lemma is that decomposition (distributivity), whose structure does not
depend on ``b``'s width or on how many slices there are. Proved here for a 3-slice ``a``
(36 bits: two whole slices and a partial one) and a 3-bit ``b``, against the solver's own
multiplication; the product geometry's (64-bit base + 34-bit products of a 16-bit size)
multiplies are too wide for the bit-vector solvers to compare directly.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover

import hotline.hw.row_window_check as block

__all__ = ["MultiplierProperty", "MUTATIONS"]

A_BITS, B_BITS = 36, 3

MUTATIONS = {
    # the slices' sum with a wrong shift
    "slice_shift": ("total = total + (p << lo)", "total = total + (p << (lo - 1))"),
}


class MultiplierProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.row_window_check` or a mutant of it."""

    def __init__(self, module=block):
        self.module = module
        self.a, self.b, self.en = Signal(A_BITS), Signal(B_BITS), Signal()
        self.ports = [self.a, self.b, self.en]

    def elaborate(self, platform):
        m = Module()
        m.d.comb += Assume(~ResetSignal())
        out = self.module._mul(m, self.a, self.b, self.en, "product")
        # the reference: the inputs of the last two enabled cycles
        want = [Signal(A_BITS + B_BITS, name=f"want{i}") for i in range(2)]
        loaded = Signal(2)
        with m.If(self.en):
            m.d.sync += [want[0].eq(self.a * self.b), want[1].eq(want[0]),
                         loaded.eq(Cat(1, loaded[0]))]
        with m.If(loaded[1]):
            m.d.comb += Assert(out == want[1])
        m.d.comb += Cover(loaded[1] & (out >> 34 != 0))   # a product using the third slice
        return m
