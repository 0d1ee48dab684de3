"""Property 2 (issue 43), its burst part, on `RowChunker`, where the row DMA's AXI bursts are
made (the `ReadEngine` and `WriteEngine` pass ``ar`` / ``aw`` through to ARADDR / ARLEN and
AWADDR / AWLEN unchanged): every burst on ``ar`` and on ``aw``

- stays within one 4 KiB page (``addr % 4096 + (len + 1) * bus_bytes <= 4096``);
- has at most ``max_burst_beats`` beats;
- lies inside its row: the bursts on ``ar`` tile ``[src, src + rem)`` of the rows taken, in
  order, without gap or overlap, those on ``aw`` tile ``[dst, dst + rem)``, and the lengths
  on ``wlen`` add up to each row's ``rem`` (as many write beats as the row needs). With
  property 1 (every row let through lies in its windows) this is property 1 for the AXI
  addresses themselves: the engines pass ``ar`` / ``aw`` to ARADDR / AWADDR unchanged;
- and ``ar``, ``aw``, ``wlen`` and ``events`` hold valid until ready with a stable payload.

The scoreboard is independent of the chunker's op FIFO and registers: byte offsets into the
stream of rows taken and into each channel's stream of bursts, and one watched row (a free
choice, so every row is checked in some trace).

Assumptions: no reset; the ops as `RowWindowCheck` lets them through: a row's ``src``,
``dst`` and ``rem`` are multiples of the bus width and ``rem`` is not 0 (its descriptor and
staging checks), and a row is not ``refused``; the ops stream follows the stream rule.
Free: every address, length, op kind and valid / ready timing. Geometry: 14-bit addresses
(four pages), 32-bit data, bursts of at most 4 beats (16 bytes: the solver meets page ends
with few steps), 4 chunks in flight.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import data
from amaranth.utils import exact_log2

import hotline.hw.row_chunker as block
from hotline.contract.dma import PAGE

from .runner import free_inputs, held_choice
from .streams import stream_rules

__all__ = ["ChunkerProperty", "ChunkerTilingProperty", "GEOMETRY", "MUTATIONS", "TILING_MUTATIONS"]

GEOMETRY = dict(addr_width=14, data_width=32, max_burst_beats=4, max_chunks=4)
TILE_ROW_BYTES = 64   # the tiling proof's rows: up to 4 bursts, across page ends anywhere
TOTAL_BITS = 12      # the scoreboard's byte offsets: more than the depth's rows can add up to

MUTATIONS = {
    # the source's page boundary ignored: a read burst may cross it
    "no_src_page": ("op_in.room_src.eq(PAGE - src[:12])", "op_in.room_src.eq(PAGE)"),
    # bursts up to twice the limit
    "burst_limit_doubled": ("maxb = self.max_burst_beats * bus_bytes",
                            "maxb = 2 * self.max_burst_beats * bus_bytes"),
}


TILING_MUTATIONS = {
    # a row's further read bursts start one bus word too far
    "src_skips": ("cur.src.eq(cur.src + chunk)", "cur.src.eq(cur.src + chunk + 4)"),
    # a row's further write bursts rewrite its first chunk
    "dst_stuck": ("cur.dst.eq(cur.dst + chunk)", "cur.dst.eq(cur.dst)"),
}


class ChunkerProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.row_chunker` or a mutant of it. The bursts'
    bounds and the stream rule; `ChunkerTilingProperty` adds the tiling."""
    TILING = False

    def __init__(self, module=block):
        self.dut = module.RowChunker(**GEOMETRY)
        self.watch = Signal(4)   # more rows than the depth can take
        self.ports = free_inputs(self.dut) + [self.watch]

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
        if self.TILING:
            self.tiling(m, low)
        # not vacuous: a read burst cut short by a page boundary
        ar = dut.ar.payload
        m.d.comb += Cover(dut.ar.valid & (ar.addr[:12] + ((ar.len + 1) << low) == PAGE)
                          & (ar.len + 1 < GEOMETRY["max_burst_beats"]))
        return m

    def tiling(self, m, low):
        """Each channel's bursts, laid end to end, must be the rows taken, laid end to end:
        a channel's burst at offset ``total`` of its stream belongs to the row whose bytes
        hold that offset, lies inside it and has its address. Checked for one watched row
        (the ``watch``-th row taken; ``watch`` a free input held from step 0, so every row is
        the watched one in some trace)."""
        dut, aw = self.dut, GEOMETRY["addr_width"]
        watch = self.watch
        held_choice(m, watch)
        # the outputs never stall here (the stall paths are `ChunkerProperty`'s: the tiling
        # is the chunk arithmetic, which a stall only delays)
        m.d.comb += Assume(dut.ar.ready & dut.aw.ready & dut.wlen.ready & dut.events.ready)
        # short rows (TILE_ROW_BYTES): the chunker's arithmetic is the same for every size;
        # a long row adds only more chunks of the same kind, beyond the depth
        with m.If(dut.ops.valid & dut.ops.payload.row):
            m.d.comb += Assume(dut.ops.payload.rem <= TILE_ROW_BYTES)
        row = Signal(data.StructLayout({"src": aw, "dst": aw, "rem": 16}), name="watched_row")
        start = Signal(TOTAL_BITS, name="watched_start")   # its offset in the row stream
        seen = Signal(name="watched_taken")
        taken = Signal(len(watch) + 1, name="rows_taken")
        taken_bytes = Signal(TOTAL_BITS, name="taken_bytes")
        op = dut.ops.payload
        with m.If(dut.ops.valid & dut.ops.ready & op.row):
            m.d.sync += [taken.eq(taken + 1), taken_bytes.eq(taken_bytes + op.rem)]
            with m.If(taken == watch):
                m.d.sync += [row.src.eq(op.src), row.dst.eq(op.dst), row.rem.eq(op.rem),
                             start.eq(taken_bytes), seen.eq(1)]
        for name, field in (("ar", "src"), ("aw", "dst"), ("wlen", None)):
            s = getattr(dut, name)
            total = Signal(TOTAL_BITS, name=f"{name}_total")   # bytes of its bursts so far
            beats = (s.payload if field is None else s.payload.len) + 1
            nbytes = beats << low
            inside = seen & (total >= start) & (total < start + row.rem)
            with m.If(s.valid):
                m.d.comb += Assert(total + nbytes <= taken_bytes)   # no burst of no row
                with m.If(inside):
                    m.d.comb += Assert(total + nbytes <= start + row.rem)
                    if field is not None:
                        m.d.comb += Assert(s.payload.addr == (row[field] + total - start)[:aw])
            with m.If(s.valid & s.ready):
                m.d.sync += total.eq(total + nbytes)
            if name == "aw":   # not vacuous: the watched row's last burst, not its first
                m.d.comb += Cover(s.valid & s.ready & inside & (total != start)
                                  & (total + nbytes == start + row.rem))


class ChunkerTilingProperty(ChunkerProperty):
    """`ChunkerProperty` with the tiling scoreboard (a separate proof: its byte offsets make
    each step several times slower)."""
    TILING = True
