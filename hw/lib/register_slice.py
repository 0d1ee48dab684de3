"""RegisterSlice: a stream pipeline register whose ready, valid and payload are flip-flops."""
from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisterSlice"]


class RegisterSlice(wiring.Component):
    """``i`` -> ``o`` (payload ``shape``), in order, one beat per cycle sustained.

    A skid buffer: ``o.valid``, ``o.payload`` and ``i.ready`` are registers, so neither side's
    logic reaches the other's (timing: it cuts a long path at a block boundary, and a block RAM
    read without its output register ends here). Latency: a beat taken in cycle t is on ``o``
    in cycle t + 1. Backpressure: while ``o`` is stalled, one more beat is held (in the skid
    register); ``i.ready`` falls in the cycle after that.
    """

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        skid = Signal.like(self.i.payload, name="skid", reset_less=True)
        skid_valid = Signal()
        payload = Signal.like(self.o.payload, name="payload", reset_less=True)
        m.d.comb += self.o.payload.eq(payload)
        load = ~self.o.valid | self.o.ready        # the output register takes a beat
        m.d.comb += self.i.ready.eq(~skid_valid)
        with m.If(load):
            m.d.sync += [self.o.valid.eq(skid_valid | self.i.valid),
                         payload.eq(Mux(skid_valid, skid, self.i.payload)),
                         skid_valid.eq(0)]
        with m.Elif(self.i.valid & ~skid_valid):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
