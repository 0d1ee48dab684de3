"""ReadEngine: the row DMA's AXI read channels, issued against credits for the read data.

Ports:

- ``ar`` In `burst_layout`: the read bursts, in order.
- ``bus`` Out(`axi_read_signature`): AR and R. AR: ID 0, INCR, full-width beats,
  ``ARCACHE`` = 0b0011. ``rid`` is not used; the engine counts the beats itself, and passes
  ``rlast`` on for the `WriteEngine` to check against that count.
- ``beats`` Out `read_beat_layout`, always ready: each R beat, in the cycle it is taken, with
  ``err`` for a response other than OKAY and ``last`` = ``rlast``.
- ``credit`` In(1): one beat of the consumer's buffer was freed.
- ``read_ok``, ``read_err`` Out(1): strobes, an R beat was taken with an OKAY / an error
  response.

Credits: the consumer buffers ``fifo_beats`` beats. An AR is issued only when its beats fit
in the buffer counting every beat still in flight (``free``: buffer beats neither holding data
nor promised to a read), so R data always lands and ``rready`` never waits on the consumer; it
is high exactly while beats are due. Up to ``fifo_beats`` beats are outstanding.

Timing: ``arvalid`` in the cycle a burst is on ``ar`` with enough credit (a credit returned
counts from the next cycle); an R beat is on ``beats`` in its own handshake cycle; one beat
per cycle.
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from .axi import AXIBurst, AXIResp
from .row_dma_layouts import axi_read_signature, burst_layout, read_beat_layout

__all__ = ["ReadEngine"]


class ReadEngine(wiring.Component):
    """Parameters: ``addr_width``, ``data_width``, ``fifo_beats`` (the consumer's buffer)."""

    def __init__(self, *, addr_width, data_width, fifo_beats):
        self.addr_width, self.data_width, self.fifo_beats = addr_width, data_width, fifo_beats
        super().__init__({
            "ar": In(stream.Signature(burst_layout(addr_width))),
            "bus": Out(axi_read_signature(addr_width, data_width)),
            "beats": Out(stream.Signature(read_beat_layout(data_width), always_ready=True)),
            "credit": In(1),
            "read_ok": Out(1),
            "read_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus, head = self.bus, self.ar.payload
        free = Signal(range(self.fifo_beats + 1), init=self.fifo_beats)
        r_due = Signal(range(self.fifo_beats + 1))     # read beats requested, not yet received
        m.d.comb += [
            bus.arvalid.eq(self.ar.valid & (free > head.len)),
            bus.araddr.eq(head.addr), bus.arlen.eq(head.len),
            bus.arsize.eq(exact_log2(self.data_width // 8)), bus.arburst.eq(AXIBurst.INCR),
            bus.arcache.eq(0b0011), bus.arprot.eq(0), bus.arid.eq(0),
        ]
        ar_fire = bus.arvalid & bus.arready
        m.d.comb += self.ar.ready.eq(ar_fire)
        ar_beats = Mux(ar_fire, head.len + 1, 0)

        m.d.comb += bus.rready.eq(r_due != 0)
        r_fire = bus.rvalid & bus.rready
        r_err = r_fire & (bus.rresp != AXIResp.OKAY)
        m.d.comb += [self.beats.valid.eq(r_fire),
                     self.beats.payload.eq(Cat(bus.rdata, bus.rresp != AXIResp.OKAY, bus.rlast)),
                     self.read_ok.eq(r_fire & ~r_err), self.read_err.eq(r_err)]
        m.d.sync += [r_due.eq(r_due + ar_beats - r_fire),
                     free.eq(Mux(ar_fire, free - head.len - 1, free) + self.credit)]
        return m
