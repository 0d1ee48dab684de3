"""Property 2 (issue 43), its burst part, on `RowChunker`, where the row DMA's AXI bursts are
made (the `ReadEngine` and `WriteEngine` pass ``ar`` / ``aw`` through to ARADDR / ARLEN and
AWADDR / AWLEN unchanged): every burst on ``ar`` and on ``aw``

- stays within one 4 KiB page (``addr % 4096 + (len + 1) * bus_bytes <= 4096``);
- has at most ``max_burst_beats`` beats;
- and ``ar``, ``aw``, ``wlen`` and ``events`` hold valid until ready with a stable payload.

Assumptions: no reset; the ops as `RowWindowCheck` lets them through: a row's ``src``,
``dst`` and ``rem`` are multiples of the bus width and ``rem`` is not 0 (its descriptor and
staging checks), and a row is not ``refused``; the ops stream follows the stream rule.
Free: every address, length, op kind and valid / ready timing. Geometry: 14-bit addresses
(four pages), 32-bit data, bursts of at most 4 beats (16 bytes: the solver meets page ends
with few steps), 4 chunks in flight.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover
from amaranth.utils import exact_log2

import hotline.hw.row_chunker as block
from hotline.contract.dma import PAGE

from .runner import free_inputs
from .streams import stream_rules

__all__ = ["ChunkerProperty", "GEOMETRY", "MUTATIONS"]

GEOMETRY = dict(addr_width=14, data_width=32, max_burst_beats=4, max_chunks=4)

MUTATIONS = {
    # the source's page boundary ignored: a read burst may cross it
    "no_src_page": ("op_in.room_src.eq(PAGE - src[:12])", "op_in.room_src.eq(PAGE)"),
    # bursts up to twice the limit
    "burst_limit_doubled": ("maxb = self.max_burst_beats * bus_bytes",
                            "maxb = 2 * self.max_burst_beats * bus_bytes"),
}


class ChunkerProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.row_chunker` or a mutant of it."""

    def __init__(self, module=block):
        self.dut = module.RowChunker(**GEOMETRY)
        self.ports = free_inputs(self.dut)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        m.d.comb += Assume(~ResetSignal())
        bus_bytes = GEOMETRY["data_width"] // 8
        low = exact_log2(bus_bytes)
        op = dut.ops.payload
        with m.If(dut.ops.valid & op.row):
            m.d.comb += [Assume(op.src[:low] == 0), Assume(op.dst[:low] == 0),
                         Assume(op.rem[:low] == 0), Assume(op.rem != 0), Assume(~op.refused)]
        stream_rules(m, dut.ops, "ops", assume=True)
        for name in ("ar", "aw"):
            s = getattr(dut, name)
            beats = s.payload.len + 1
            with m.If(s.valid):
                m.d.comb += [
                    Assert(s.payload.addr[:12] + (beats << low) <= PAGE),
                    Assert(beats <= GEOMETRY["max_burst_beats"]),
                ]
        for name in ("ar", "aw", "wlen", "events"):
            stream_rules(m, getattr(dut, name), name, assume=False)
        # not vacuous: a read burst cut short by a page boundary
        ar = dut.ar.payload
        m.d.comb += Cover(dut.ar.valid & (ar.addr[:12] + ((ar.len + 1) << low) == PAGE)
                          & (ar.len + 1 < GEOMETRY["max_burst_beats"]))
        return m
