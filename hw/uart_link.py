"""UARTLink: a UART in its own clock domain, its bytes crossing into the design's ``sync`` domain.

The UART (`UARTRx`, `UARTTx`) runs in domain ``uart``, whose clock is an exact multiple of the
baud (``divisor`` cycles per bit); the consumer and producer of its bytes run in ``sync``, any
unrelated clock. Two `amaranth.lib.fifo.AsyncFIFO`s (Gray-coded pointers, two-flip-flop
synchronisers) carry the bytes across:

- rx: ``uart`` -> ``sync``, ``rx_depth`` bytes. A UART cannot be held off: a byte arriving
  while the FIFO is full is lost (``overrun`` pulses, in ``uart``), and the frame it belonged
  to fails its CRC, so the link's NAK and resend recover it. It cannot happen while the
  reader takes a byte per ``sync`` cycle (the host link bridge does) and ``sync`` is at least
  `min_sync_hz` (4 bytes at 20 clocks per bit: 1/149 of the UART clock).
- tx: ``sync`` -> ``uart``, ``tx_depth`` bytes, with backpressure: the producer fills it at
  its own pace and the transmitter sends back to back (10 bit times per byte) while it holds
  a byte.

Ports: ``rx`` In / ``tx`` Out pins (``uart`` domain; ``rx`` is synchronised inside UARTRx);
``o`` Out byte stream and ``i`` In byte stream (``sync``); ``overrun`` Out (``uart``, one
cycle per lost byte); ``frame_error`` Out (``uart``, a stop bit of 0). Latency: a byte is in
``o`` 3-4 ``sync`` cycles after the stop bit's middle.
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import AsyncFIFO
from amaranth.lib.wiring import In, Out

from .uart import UARTRx, UARTTx

__all__ = ["UARTLink", "min_sync_hz"]


def min_sync_hz(uart_hz, divisor, rx_depth):
    """A ``sync`` clock at least this fast never overflows the rx FIFO of a `UARTLink` whose
    reader is always ready (sufficient, not necessary). A byte holds its slot from its write
    until the write side sees it read: at most 4 ``sync`` cycles (the write pointer's Gray
    register and two-flip-flop synchroniser, the read, a cycle of phase) plus 3 ``uart``
    cycles (the read pointer's way back). Bytes arrive one per 10 * ``divisor`` ``uart``
    cycles, so when 4 Ts + 3 Tu <= (rx_depth - 1) * 10 * divisor * Tu a write never finds
    the FIFO full; the reader also keeps up (Ts <= a byte time)."""
    byte = 10 * divisor
    return uart_hz * max(4 / ((rx_depth - 1) * byte - 3), 1 / byte)


class UARTLink(wiring.Component):
    """See the module docstring. ``divisor``: ``uart`` cycles per bit (UARTRx/UARTTx);
    ``rx_depth``/``tx_depth``: bytes per FIFO (powers of 2)."""

    def __init__(self, divisor, *, rx_depth=4, tx_depth=8):
        self.divisor, self.rx_depth, self.tx_depth = divisor, rx_depth, tx_depth
        super().__init__({
            "rx": In(1, init=1),
            "tx": Out(1, init=1),
            "o": Out(stream.Signature(8)),
            "i": In(stream.Signature(8)),
            "overrun": Out(1),
            "frame_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.uart_rx = urx = DomainRenamer("uart")(UARTRx(self.divisor))
        m.submodules.uart_tx = utx = DomainRenamer("uart")(UARTTx(self.divisor))
        m.submodules.rx_fifo = rxf = AsyncFIFO(width=8, depth=self.rx_depth, exact_depth=True,
                                               w_domain="uart", r_domain="sync")
        m.submodules.tx_fifo = txf = AsyncFIFO(width=8, depth=self.tx_depth, exact_depth=True,
                                               w_domain="sync", r_domain="uart")
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx),
                     self.overrun.eq(urx.overrun), self.frame_error.eq(urx.frame_error)]
        # UARTRx's valid is a one-cycle pulse per byte; its ready only decides `overrun`.
        wiring.connect(m, urx.o, rxf.w_stream)
        wiring.connect(m, rxf.r_stream, wiring.flipped(self.o))
        wiring.connect(m, wiring.flipped(self.i), txf.w_stream)
        wiring.connect(m, txf.r_stream, utx.i)
        return m
