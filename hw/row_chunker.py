"""RowChunker: the row DMA's checked rows -> AXI bursts that never cross a 4 KiB page.

Ports:

- ``ops`` In `row_op_layout`: rows to copy, refused rows, null beats (batch ends).
- ``ar``, ``aw`` Out `burst_layout`: one read and one write burst per chunk (same length).
- ``wlen`` Out(8): per chunk, its AXI length (beats - 1), for the write data.
- ``events`` Out `RowEvent`: per chunk (``need_b``; ``row_end`` on a row's last chunk), per
  refused row (``refused``, ``cause``) and per null beat, with ``eob`` on the batch's last.

A row of ``rem`` bytes from ``src`` to ``dst`` is copied in chunks of ``min(remaining, 4096 -
src % 4096, 4096 - dst % 4096, max_burst_beats * bus_bytes)`` bytes, in order.

Timing: ``ops.ready`` is a register (`fifo_room`). An op taken in cycle t enters a 6-entry op
FIFO (the bytes to the next page on either side are computed on the way in) and is loaded in
t + 2; its first chunk's size is decided when it is loaded, and that chunk is written to the
output FIFOs in t + 3, so it is on ``ar``/``aw`` in t + 5 (``LATENCY``). A row that needs
more chunks spends two more cycles deciding each further one (compares, then the select). So
one single-chunk row per cycle, one chunk per 3 cycles within a multi-chunk row. A refused
row or null beat is one event, one per cycle. The output FIFOs hold 4 bursts each on ``ar``
and ``aw`` and ``max_chunks`` on ``wlen`` and ``events``; the chunker waits while any of them
could be full.
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hotline.contract.dma import PAGE

from .lib.buffered_fifo import BufferedFIFO
from .lib.fifo_room import fifo_has_room, fifo_room
from .row_dma_layouts import RowEvent, burst_layout, row_op_layout

__all__ = ["RowChunker"]


class RowChunker(wiring.Component):
    """Parameters: ``addr_width``, ``data_width``, ``max_burst_beats``, ``max_chunks`` (the
    ``wlen`` and ``events`` FIFOs' entries)."""
    LATENCY = 5   # op handshake -> its first chunk on ``ar`` / ``aw`` (outputs ready)

    def __init__(self, *, addr_width, data_width, max_burst_beats, max_chunks):
        self.addr_width, self.data_width = addr_width, data_width
        self.max_burst_beats, self.max_chunks = max_burst_beats, max_chunks
        super().__init__({
            "ops": In(stream.Signature(row_op_layout(addr_width))),
            "ar": Out(stream.Signature(burst_layout(addr_width))),
            "aw": Out(stream.Signature(burst_layout(addr_width))),
            "wlen": Out(stream.Signature(8)),
            "events": Out(stream.Signature(RowEvent)),
        })

    def elaborate(self, platform):
        m = Module()
        aw = self.addr_width
        bus_bytes = self.data_width // 8
        shift = exact_log2(bus_bytes)

        # The FIFO decouples the key pipeline's enable from the issue logic: its registered
        # room (`fifo_room`) is ``ops.ready``, so the window check's enable is one gate of
        # flip-flops (timing).
        op_layout = data.StructLayout({"src": aw, "dst": aw, "rem": 16, "room_src": 13,
                                       "room_dst": 13, "row": 1, "refused": 1, "cause": 2,
                                       "eob": 1})
        m.submodules.op_fifo = op_fifo = BufferedFIFO(width=op_layout.size, depth=6)
        op_in = Signal(op_layout)
        src, dst = self.ops.payload.src, self.ops.payload.dst
        m.d.comb += [
            self.ops.ready.eq(fifo_room(m, op_fifo, "op")),
            op_fifo.w_en.eq(self.ops.valid & self.ops.ready),
            op_in.src.eq(src), op_in.dst.eq(dst), op_in.rem.eq(self.ops.payload.rem),
            op_in.room_src.eq(PAGE - src[:12]), op_in.room_dst.eq(PAGE - dst[:12]),
            op_in.row.eq(self.ops.payload.row), op_in.refused.eq(self.ops.payload.refused),
            op_in.cause.eq(self.ops.payload.cause), op_in.eob.eq(self.ops.payload.eob),
            op_fifo.w_data.eq(op_in),
        ]

        beat_layout = burst_layout(aw)
        # The chunker sees registered FIFO room (`fifo_room`: the last 2 entries unused), so
        # the FIFOs are 2 deeper than the entries they hold (timing: a FIFO level through
        # the issue and load logic into the op FIFO's read was a critical path).
        m.submodules.ar_fifo = ar_fifo = BufferedFIFO(width=beat_layout.size, depth=6)
        m.submodules.aw_fifo = aw_fifo = BufferedFIFO(width=beat_layout.size, depth=6)
        m.submodules.wlen_fifo = wlen_fifo = BufferedFIFO(width=8, depth=self.max_chunks + 2)
        m.submodules.ev_fifo = ev_fifo = BufferedFIFO(width=RowEvent.size,
                                                      depth=self.max_chunks + 2)
        for fifo, out in ((ar_fifo, self.ar), (aw_fifo, self.aw), (wlen_fifo, self.wlen),
                          (ev_fifo, self.events)):
            m.d.comb += [out.valid.eq(fifo.r_rdy), out.payload.eq(fifo.r_data),
                         fifo.r_en.eq(out.ready)]

        maxb = self.max_burst_beats * bus_bytes

        pick_layout = data.StructLayout({"last": 1, "src": 1, "dst": 1})

        def compare(op):
            """Which bound ends ``op``'s next chunk (the row: ``last``; else the source page,
            the destination page, or the burst limit): parallel compares."""
            s_le_d, s_le_m, d_le_m = (op.room_src <= op.room_dst, op.room_src <= maxb,
                                      op.room_dst <= maxb)
            return pick_layout(Cat(
                (op.rem <= op.room_src) & (op.rem <= op.room_dst) & (op.rem <= maxb),
                s_le_d & s_le_m, ~s_le_d & d_le_m))

        def select(op, pick):
            """The next chunk's bytes, from ``compare``'s result."""
            return Mux(pick.last, op.rem, Mux(pick.src, op.room_src,
                                              Mux(pick.dst, op.room_dst, maxb)))

        head = op_layout(op_fifo.r_data)
        cur = Signal(op_layout, reset_less=True)   # cur_valid says whether it holds one
        cur_valid = Signal()
        decided = Signal()
        compared = Signal()   # of a further chunk: its compares are in ``picked``
        picked = Signal(pick_layout, reset_less=True)
        chunk = Signal(13)
        last = Signal()
        # AXI length of the decided chunk, from its register (timing: computed per candidate
        # before the select, Yosys shared the four decrements after it, on the compares' path)
        burst_len = ((chunk >> shift) - 1)[:8]
        ev_room = fifo_room(m, ev_fifo, "ev")
        # one register for the four: the AND of four rooms was two gates of the critical path
        issue_ok = fifo_room(m, [ar_fifo, aw_fifo, wlen_fifo, ev_fifo], "issue")
        issue_row = cur_valid & cur.row & decided & issue_ok
        # ``cur`` is done with in this cycle (its mark, or its row's last chunk, issued): a
        # register, computed with the two rooms' next values (timing: from ``cur_valid``,
        # ``decided``, ``last`` and the rooms, ``load`` reached the enables of all of ``cur``,
        # 9.9 ns). ``mark``: ``cur`` is a mark; ``row_last``: a row whose last chunk is decided.
        mark, row_last, finished = Signal(), Signal(), Signal()
        issue_mark = mark & ev_room
        load = op_fifo.r_rdy & (~cur_valid | finished)
        m.d.comb += op_fifo.r_en.eq(load)
        head_pick = compare(head)
        mark_next, row_last_next = Signal(), Signal()
        m.d.comb += [mark_next.eq(mark & ~finished), row_last_next.eq(row_last & ~finished)]
        with m.If(load):
            m.d.comb += [mark_next.eq(~head.row), row_last_next.eq(head.row & head_pick.last)]
        with m.Elif(cur_valid & ~decided & compared):
            m.d.comb += row_last_next.eq(picked.last)
        m.d.sync += [mark.eq(mark_next), row_last.eq(row_last_next),
                     finished.eq((mark_next & fifo_has_room(ev_fifo))
                                 | (row_last_next & fifo_has_room([ar_fifo, aw_fifo, wlen_fifo,
                                                                   ev_fifo])))]

        def room_after(room):
            return Mux(room == chunk, PAGE, room - chunk)

        with m.If(load):
            m.d.sync += [cur.eq(head), cur_valid.eq(1), decided.eq(1),
                         chunk.eq(select(head, head_pick)), last.eq(head_pick.last)]
        with m.Elif(finished):
            m.d.sync += cur_valid.eq(0)
        with m.Elif(issue_row):
            # more chunks: advance; compare in the next cycle and select in the one after
            # (timing: compares and select in one cycle from ``cur``, whose many users spread
            # it out, made a critical path; such chunks are max_burst_beats long except around
            # a page boundary, so the bus still sets the pace)
            m.d.sync += [cur.src.eq(cur.src + chunk), cur.dst.eq(cur.dst + chunk),
                         cur.rem.eq(cur.rem - chunk), cur.room_src.eq(room_after(cur.room_src)),
                         cur.room_dst.eq(room_after(cur.room_dst)), decided.eq(0),
                         compared.eq(0)]
        with m.Elif(cur_valid & ~decided & ~compared):
            m.d.sync += [picked.eq(compare(cur)), compared.eq(1)]
        with m.Elif(cur_valid & ~decided):
            m.d.sync += [chunk.eq(select(cur, picked)), last.eq(picked.last), decided.eq(1)]

        ev_in = Signal(RowEvent)
        m.d.comb += [
            ar_fifo.w_en.eq(issue_row), aw_fifo.w_en.eq(issue_row), wlen_fifo.w_en.eq(issue_row),
            ar_fifo.w_data.eq(Cat(cur.src, burst_len)),
            aw_fifo.w_data.eq(Cat(cur.dst, burst_len)),
            wlen_fifo.w_data.eq(burst_len),
            ev_fifo.w_en.eq(issue_row | issue_mark),
            ev_in.need_b.eq(cur.row), ev_in.row_end.eq(cur.row & last),
            ev_in.refused.eq(cur.refused), ev_in.cause.eq(cur.cause),
            ev_in.eob.eq(cur.eob & (last | ~cur.row)),
            ev_fifo.w_data.eq(ev_in),
        ]
        return m
