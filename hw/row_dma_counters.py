"""RowDMACounters: the row DMA's event counters and sticky error causes.

Ports:

- event strobes In(1): ``row_done`` (a row copied), ``refused`` (a row refused, with its
  ``cause``, an index into ``hotline.contract.dma.CAUSES``), ``read_ok`` / ``read_err`` (an R
  beat with an OKAY / error response), ``write_ok`` (a W beat sent with strobes),
  ``write_err`` (an error write response), ``rlast_err`` (a read beat with a wrong ``rlast``).
- counters Out(``counter_width``), wrapping: ``rows``, ``window_errors``, ``axi_errors``
  (``read_err`` + ``write_err`` + ``rlast_err``), ``bytes_read`` and ``bytes_written``
  (``bus_bytes`` per ``read_ok`` / ``write_ok``). ``clear_counters`` zeroes them.
- ``error_cause`` Out {table, row, slot, desc, axi_read, axi_write, axi_rlast, overflow}:
  sticky bits; strobes in the cycle of ``clear_errors`` are kept. ``overflow``: a counter
  wrapped (its top bit fell without a ``clear_counters``).

Timing: a counter follows its event by two cycles, and a clear by two (`lagged_count`); a
cause bit is set in the cycle after its event (``overflow`` two cycles after the wrap: it
compares registers only, the counter's top bit with its previous value).
"""
from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.dma import CAUSES

from .lib.lagged_counter import lagged_count
from .row_dma_layouts import RowEvent

__all__ = ["RowDMACounters"]


class RowDMACounters(wiring.Component):
    """Parameters: ``counter_width``, ``bus_bytes`` (bytes per beat)."""

    def __init__(self, *, counter_width, bus_bytes):
        self.bus_bytes = bus_bytes
        super().__init__({
            "row_done": In(1), "refused": In(1), "cause": In(RowEvent.members["cause"]),
            "read_ok": In(1), "read_err": In(1), "write_ok": In(1), "write_err": In(1),
            "rlast_err": In(1),
            "rows": Out(counter_width),
            "window_errors": Out(counter_width),
            "axi_errors": Out(counter_width),
            "bytes_read": Out(counter_width),
            "bytes_written": Out(counter_width),
            "error_cause": Out(data.StructLayout({c: 1 for c in CAUSES})),
            "clear_errors": In(1),
            "clear_counters": In(1),
        })

    def elaborate(self, platform):
        m = Module()

        # lagged: keeps the read-data FIFO's block-RAM output and the AXI inputs off the adders
        def count(counter, inc):
            lagged_count(m, counter, inc, self.clear_counters, counter.name)

        count(self.rows, self.row_done)
        count(self.window_errors, self.refused)
        count(self.axi_errors, self.read_err + self.write_err + self.rlast_err)
        count(self.bytes_read, Mux(self.read_ok, self.bus_bytes, 0))
        count(self.bytes_written, Mux(self.write_ok, self.bus_bytes, 0))

        # A wrap: a top bit that fell, unless the clear made it fall (the counter takes a
        # clear two cycles late, so clear_counters delayed by two marks those cycles).
        counters = (self.rows, self.window_errors, self.axi_errors, self.bytes_read,
                    self.bytes_written)
        top_bits, was = Cat(c[-1] for c in counters), Signal(len(counters), name="top_bits_was")
        clear_d = Signal(2, name="clear_counters_d")
        wrapped = Signal(name="counter_wrapped")
        m.d.sync += [was.eq(top_bits), clear_d.eq(Cat(self.clear_counters, clear_d[0]))]
        m.d.comb += wrapped.eq((was & ~top_bits).any() & ~clear_d[1])

        causes = Signal(len(CAUSES))
        set_bits = (Mux(self.refused, C(1, 4) << self.cause, 0)
                    | Mux(self.read_err, 1 << CAUSES.index("axi_read"), 0)
                    | Mux(self.write_err, 1 << CAUSES.index("axi_write"), 0)
                    | Mux(self.rlast_err, 1 << CAUSES.index("axi_rlast"), 0)
                    | Mux(wrapped, 1 << CAUSES.index("overflow"), 0))
        m.d.sync += causes.eq(Mux(self.clear_errors, 0, causes) | set_bits)
        m.d.comb += self.error_cause.eq(causes)
        return m
