"""StreamFork: one stream in, every beat delivered once on each of several outputs."""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamFork"]


class StreamFork(wiring.Component):
    """``i`` -> ``o0`` .. ``o{n-1}``: each output gets each beat exactly once, in order.

    An output that has taken the current beat waits for the others (a registered flag per
    output), so a stalled output delays the rest by whole beats but never duplicates or drops
    one. ``enable`` (per output, default all on) skips an output: it is treated as having taken
    every beat. Combinational valid/ready paths; one beat per cycle when all outputs are ready.
    """

    def __init__(self, payload_shape, n=2):
        self.n = n
        super().__init__({
            "i": In(stream.Signature(payload_shape)),
            "enable": In(n, init=(1 << n) - 1),
            **{f"o{k}": Out(stream.Signature(payload_shape)) for k in range(n)},
        })

    def elaborate(self, platform):
        m = Module()
        outs = [getattr(self, f"o{k}") for k in range(self.n)]
        taken = Signal(self.n)
        done = Cat(*(taken[k] | ~self.enable[k] | outs[k].ready for k in range(self.n)))
        m.d.comb += self.i.ready.eq(done.all())
        for k, o in enumerate(outs):
            m.d.comb += [o.payload.eq(self.i.payload),
                         o.valid.eq(self.i.valid & self.enable[k] & ~taken[k])]
        with m.If(self.i.valid):
            with m.If(self.i.ready):
                m.d.sync += taken.eq(0)
            with m.Else():
                m.d.sync += taken.eq(taken | Cat(*(o.valid & o.ready for o in outs)))
        return m
