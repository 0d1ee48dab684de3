"""Row DMA: gathers embedding-table rows into a staging buffer, or scatters them back (AXI4 master).

``GatherDMA`` (table row -> staging slot) and ``ScatterDMA`` (staging slot -> table row) are
``RowDMA`` with the direction fixed; ``RowDMA(None)`` takes the direction per command (a
``scatter`` bit in ``cmd``), so one AXI master serves both.

Ports (streams carry ``data.StructLayout`` payloads):

- ``cmd`` In {count: 16, bank: 1[, scatter: 1]}: the next ``count`` keys on ``keys`` form one
  batch for staging bank ``bank``; slot = index of the key in its batch. ``count`` = 0 is legal.
- ``keys`` In {key: key_width}: key = (table << row_bits) | row.
- With ``framing="end"`` the batch length is in band instead: ``cmd`` is {bank[, scatter]}
  and ``keys`` is {end, key}; the batch's keys follow its command, closed by one beat with
  ``end`` set (its key is ignored). A source that learns a batch's length only after its
  keys (the Fragmenter's cold keys) can then stream them without buffering the batch.
- ``done`` Out {rows: 16, errors: 16}: one per command, in order, after the last write response
  of its batch: rows copied, rows refused by the window check.
- descriptor port ``desc_we``, ``desc_table``, ``desc_base`` (addr_width), ``desc_rows``
  (row_bits + 1), ``desc_row_bytes`` (16): writes the table's descriptor when ``desc_we`` is
  high (a table id >= num_tables is ignored); rows = 0 invalidates it. All descriptors are
  invalid after reset. A write takes effect ``DESC_LATENCY`` cycles after ``desc_we``; do not
  rewrite a descriptor that a batch in flight uses.
- staging window ``staging_base`` (addr_width), ``staging_stride`` (16, bytes per slot),
  ``staging_slots`` (16, slots per bank), ``staging_banks`` (2): slot (bank, s) is at
  ``staging_base + (bank * staging_slots + s) * staging_stride``. They must be stable from a
  ``cmd`` handshake until ``busy`` falls (they may change in the cycle of the handshake).
- ``bus`` Out(AXI4Signature(addr_width, data_width)): ID 0 only, INCR bursts of full-width
  beats (``AxSIZE`` = log2(data_width / 8)), ``AxCACHE`` = 0b0011, ``AxPROT`` = 0.
- ``busy``: a command was accepted whose ``done`` has not been taken yet.
- counters (``counter_width`` bits, wrapping; ``clear_counters`` zeroes them): ``rows`` copied,
  ``window_errors`` (refused rows), ``axi_errors`` (error read beats + error write responses),
  ``bytes_read`` (bytes of OKAY read beats), ``bytes_written`` (bytes of write beats sent with
  strobes). Sticky ``error_cause`` {table, row, slot, desc, axi_read, axi_write}
  (``clear_errors`` zeroes it; events in the same cycle are kept). Counters follow their events
  by two cycles, so they are final one cycle after the batch's ``done`` is valid.

Window check (per key, in hardware, before any transaction; first failing check names the
cause): ``table``: table >= num_tables or descriptor invalid; ``row``: row >= rows; ``desc``:
row_bytes zero, not a multiple of the bus width in bytes, or > staging_stride, base not
bus-aligned, or base + rows * row_bytes > 2**addr_width; ``slot``: bank >= staging_banks,
slot >= staging_slots, staging base or stride not bus-aligned, or staging window end
(base + banks * slots * stride) > 2**addr_width. A refused row issues no transaction, counts
one ``window_errors``, sets its cause bit and still counts in its batch's ``done``. So no
access leaves [base, base + rows * row_bytes) of a table or the staging window.

Ordering: batches in the same direction overlap (the next batch's keys enter while earlier
rows are still on the bus). With ``direction=None``, a command whose direction differs from the
previous one is accepted only after every earlier batch has completed (all write responses in),
so a gather after a scatter reads the rows written back, and a scatter after a gather reads the
staging slots just filled. Within a batch and across batches of one direction, reads are not
ordered after earlier writes: table and staging windows must not overlap.

Bursts: a row is copied in chunks of ``min(remaining, 4096 - src % 4096, 4096 - dst % 4096,
max_burst_beats * bus_bytes)`` bytes, each one AR burst and one AW burst (same length), issued
in row order. An R beat with an error response is still written (the beat count is kept) with
``wstrb`` = 0; write-data beat counts and ``wlast`` come from the engine's own bookkeeping
(``rlast`` is ignored, ``rready`` is low when no beat is due). Nothing waits on an error.

Organisation:
- key pipeline (one key per cycle, stalls as a whole): S1 descriptor RAM read; S2 checks and
  multiplier inputs; S3 partial products (17 x 16 bits: one ECP5 DSP each); S4 products;
  S5 addresses, cause -> chunker. Descriptor writes go through the same kind of pipeline
  (products and bound check precomputed once per descriptor).
- op FIFO (6 entries, 4 used: its room is registered): decouples the key pipeline's enable from
  the chunker, and computes the bytes to the next 4 KiB page of source and destination.
- chunker: the size of an op's first chunk is decided when the op is loaded (parallel compares,
  one select, registered; the AXI length is derived from that register); a row that needs more
  chunks spends two more cycles per further chunk deciding it (compares, then the select). So
  one single-chunk row per cycle, one chunk per 3 cycles within a multi-chunk row (which has
  >= max_burst_beats beats per chunk except around a page boundary). Chunks go into four
  FIFOs: AR, AW, W lengths, events (per chunk: needs a write response, last chunk of a row; per
  refused row; per batch end).
- reads are credit-based: an AR is issued only when the read-data FIFO (``fifo_beats`` beats)
  has room for all its beats counting every beat still in flight, so R data always lands and
  ``rready`` never depends on the W channel. Many reads are outstanding: up to ``fifo_beats``
  beats (default 128, i.e. 16 bursts of 8 beats). The read channel stays saturated while
  ``fifo_beats`` >= read latency + about 7 cycles (so the default hides ~120 cycles); below
  that, utilisation is about ``fifo_beats / (latency + 7)``. ``max_chunks`` bounds the chunks
  between the chunker and their write responses: it must cover (read latency + write-response
  latency) / beats per chunk (default 128).
- W beats stream from the read-data FIFO as soon as they arrive; AW bursts are issued as soon
  as the chunker creates them. Write responses retire events in order; a batch's ``done``
  is emitted with the event of its last row.

Timing (``CMD_TO_KEY``, ``KEY_TO_AR``, ``R_TO_W``, ``B_TO_DONE``, checked by the tests):
cmd handshake -> first key handshake: 7 cycles (the staging-window check settles; the next
batch's command is taken in the cycle after its predecessor's last key, so batches in flight
hide it). Key handshake -> ARVALID (and AWVALID): 10 cycles (S1..S5, op FIFO, chunker,
AR/AW FIFO). R handshake -> WVALID: 5 cycles (data FIFO, W register, W FIFO). B handshake ->
done valid: 1 cycle. Descriptor write -> usable: ``DESC_LATENCY`` cycles. Throughput: one key
per cycle through the checks, one chunk per cycle from the chunker, one beat per cycle on R
and W. Measured with a 32-cycle memory (sim/bench_row_dma.py, 2048 rows): read-channel
utilisation 0.98-1.00 for 64 B and 256 B rows at 64, 128 and 256-bit data width (the rest is
the first read's latency and the last write response).
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from hotline.contract.dma import CAUSES, DIRECTIONS, PAGE
from hotline.contract.keys import KEY_BITS, ROW_BITS
from hotline.contract.streams import dma_done_layout, dma_keys_layout

from .axi import AXI4Signature, AXIBurst, AXIResp
from .buffered_fifo import BufferedFIFO
from .fifo_room import fifo_room
from .lagged_counter import lagged_count

__all__ = ["RowDMA", "GatherDMA", "ScatterDMA"]


def _mul(m, a, b, en, name):
    """``a * b`` (b <= 17 bits), two register stages: 17-bit slices of ``a`` times ``b``
    (one DSP each), then their sum. Registers load when ``en``."""
    parts = []
    for i, lo in enumerate(range(0, len(a), 17)):
        piece = a[lo:lo + 17]
        p = Signal(len(piece) + len(b), name=f"{name}_p{i}", reset_less=True)
        with m.If(en):
            m.d.sync += p.eq(piece * b)
        parts.append((lo, p))
    out = Signal(len(a) + len(b), name=name, reset_less=True)
    total = parts[0][1]
    for lo, p in parts[1:]:
        total = total + (p << lo)
    with m.If(en):
        m.d.sync += out.eq(total)
    return out


class RowDMA(wiring.Component):
    """Gather/scatter of table rows by key (AXI4 master). See the module docstring.

    Parameters: ``direction`` ("gather", "scatter", or None = per command), ``addr_width``,
    ``data_width`` (64, 128, 256; 32 works too), ``num_tables``, ``row_bits``, ``key_width``,
    ``max_burst_beats`` (<= 256, one burst within 4 KiB), ``fifo_beats`` (read-data FIFO depth =
    read beats outstanding), ``max_chunks`` (chunks in flight between chunker and write
    response), ``counter_width``.
    """
    SETUP_CYCLES = 5   # staging-window check pipeline depth
    DESC_LATENCY = 5   # desc_we -> the descriptor is used by a key accepted this many cycles later
    CMD_TO_KEY = 7     # cmd handshake -> first key handshake (keys waiting)
    KEY_TO_AR = 10     # key handshake -> ARVALID / AWVALID (credits and FIFOs free)
    R_TO_W = 5         # R handshake -> WVALID of that beat (data FIFO, W register, W FIFO)
    B_TO_DONE = 1      # last B handshake of a batch -> done valid

    def __init__(self, direction=None, *, addr_width=32, data_width=64, num_tables=32,
                 row_bits=ROW_BITS, key_width=KEY_BITS, max_burst_beats=16, fifo_beats=128,
                 max_chunks=128, counter_width=48, framing="count"):
        if direction not in (None, *DIRECTIONS):
            raise ValueError(f"direction must be 'gather', 'scatter' or None, not {direction!r}")
        if data_width not in (32, 64, 128, 256):
            raise ValueError(f"data_width must be 32, 64, 128 or 256, not {data_width}")
        if not 13 <= addr_width <= 64:
            raise ValueError(f"addr_width must be 13..64, not {addr_width}")
        if not 1 <= row_bits < key_width or num_tables < 1 \
                or num_tables > 1 << (key_width - row_bits):
            raise ValueError("need 1 <= row_bits < key_width and "
                             "1 <= num_tables <= 2**(key_width - row_bits)")
        bus_bytes = data_width // 8
        if not 1 <= max_burst_beats <= 256 or max_burst_beats * bus_bytes > PAGE:
            raise ValueError(f"max_burst_beats must be 1..256 and at most 4096 bytes, "
                             f"not {max_burst_beats}")
        if fifo_beats < max_burst_beats or max_chunks < 2:
            raise ValueError("need fifo_beats >= max_burst_beats and max_chunks >= 2")
        self.direction = direction
        self.addr_width, self.data_width, self.num_tables = addr_width, data_width, num_tables
        self.row_bits, self.key_width, self.max_burst_beats = row_bits, key_width, max_burst_beats
        self.fifo_beats, self.max_chunks, self.counter_width = fifo_beats, max_chunks, counter_width
        self.bus_bytes = bus_bytes
        if framing not in ("count", "end"):
            raise ValueError(f"framing must be 'count' or 'end', not {framing!r}")
        self.framing = framing
        cmd = {"count": 16, "bank": 1} if framing == "count" else {"bank": 1}
        if direction is None:
            cmd["scatter"] = 1
        self.cmd_layout = data.StructLayout(cmd)
        self.cause_layout = data.StructLayout({c: 1 for c in CAUSES})
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "keys": In(stream.Signature(dma_keys_layout(key_width, framing))),
            "done": Out(stream.Signature(dma_done_layout())),
            "desc_we": In(1),
            "desc_table": In(range(num_tables)),
            "desc_base": In(addr_width),
            "desc_rows": In(row_bits + 1),
            "desc_row_bytes": In(16),
            "staging_base": In(addr_width),
            "staging_stride": In(16),
            "staging_slots": In(16),
            "staging_banks": In(2),
            "bus": Out(AXI4Signature(addr_width, data_width)),
            "busy": Out(1),
            "rows": Out(counter_width),
            "window_errors": Out(counter_width),
            "axi_errors": Out(counter_width),
            "bytes_read": Out(counter_width),
            "bytes_written": Out(counter_width),
            "error_cause": Out(self.cause_layout),
            "clear_errors": In(1),
            "clear_counters": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        aw, rb = self.addr_width, self.row_bits
        bus_bytes, shift = self.bus_bytes, exact_log2(self.bus_bytes)
        top = 1 << aw
        bus = self.bus

        def aligned(value):
            return value[:shift] == 0 if shift else C(1)

        # ---- descriptor RAM and its write pipeline -------------------------------------
        entry = data.StructLayout({"base": aw, "rows": rb + 1, "row_bytes": 16, "ok": 1})
        desc_mem = Memory(shape=entry, depth=self.num_tables, init=[])
        m.submodules.desc_mem = desc_mem
        desc_wr = desc_mem.write_port()
        desc_rd = desc_mem.read_port()
        desc_valid = Signal(self.num_tables)  # rows > 0; flip-flops so that reset clears them

        # Only the write enables are reset: the data needs none (fewer loads on the reset net).
        dw = data.StructLayout({"table": len(self.desc_table), "base": aw, "rows": rb + 1,
                                "row_bytes": 16})
        d1, d2, d3, d4 = (Signal(dw, name=f"desc{i}", reset_less=True) for i in range(1, 5))
        we = Signal(4, name="desc_we_pipe")  # of d1 .. d4
        m.d.sync += [
            we.eq(Cat(self.desc_we, we[:3])), d1.table.eq(self.desc_table),
            d1.base.eq(self.desc_base), d1.rows.eq(self.desc_rows),
            d1.row_bytes.eq(self.desc_row_bytes), d2.eq(d1), d3.eq(d2), d4.eq(d3),
        ]
        span = _mul(m, d1.rows, d1.row_bytes, C(1), "desc_span")       # valid with d3
        desc_end = Signal(aw + rb + 18, reset_less=True)
        m.d.sync += desc_end.eq(d3.base + span)                         # valid with d4
        m.d.comb += [
            desc_wr.addr.eq(d4.table),
            desc_wr.en.eq(we[3] & (d4.table < self.num_tables)),
            desc_wr.data.base.eq(d4.base),
            desc_wr.data.rows.eq(d4.rows),
            desc_wr.data.row_bytes.eq(d4.row_bytes),
            desc_wr.data.ok.eq((d4.row_bytes != 0) & aligned(d4.row_bytes) & aligned(d4.base)
                               & (desc_end <= top)),
        ]
        with m.If(we[3] & (d4.table < self.num_tables)):
            m.d.sync += desc_valid.bit_select(d4.table, 1).eq(d4.rows != 0)

        # ---- staging-window check (free running; settles in SETUP_CYCLES) --------------
        # The stride is registered here too: the multiplier's inputs come from flip-flops
        # next to it, not from the CSRs (timing).
        st_slots_x_banks, st_stride = Signal(18, reset_less=True), Signal(16, reset_less=True)
        m.d.sync += [st_slots_x_banks.eq(Mux(self.staging_banks[0], self.staging_slots, 0)
                                         + Mux(self.staging_banks[1], self.staging_slots << 1, 0)),
                     st_stride.eq(self.staging_stride)]
        st_span = _mul(m, st_slots_x_banks, st_stride, C(1), "staging_span")
        st_end = Signal(aw + 35, reset_less=True)
        m.d.sync += st_end.eq(self.staging_base + st_span)
        staging_ok = Signal()
        m.d.sync += staging_ok.eq((st_end <= top) & aligned(self.staging_base)
                                  & aligned(self.staging_stride))

        # ---- command front: batches of keys --------------------------------------------
        remaining = Signal(16)
        slot = Signal(16)
        batch_bank = Signal()
        batch_scatter = Signal(init=int(self.direction == "scatter"))
        setup = Signal(range(self.SETUP_CYCLES + 1))
        pending = Signal(16)  # commands accepted whose done was not taken yet

        adv = Signal()  # the key pipeline moves
        in_valid, in_null, in_eob = Signal(), Signal(), Signal()

        inflight = Signal(16)  # commands accepted whose last event has not completed
        batch_end = Signal()    # the tail completes a batch's last event (below)

        cmd_fire = self.cmd.valid & self.cmd.ready
        done_fire = self.done.valid & self.done.ready
        m.d.sync += [pending.eq(pending + cmd_fire - done_fire),
                     inflight.eq(inflight + cmd_fire - batch_end)]
        # inflight == 0, a cycle late (timing: the compare was in the loop through cmd.ready
        # and the top's command FIFOs). It only delays a change of direction by that cycle: the
        # front spends SETUP_CYCLES outside IDLE after every command.
        drained = Signal(init=1)
        m.d.sync += drained.eq(inflight == 0)
        m.d.comb += self.busy.eq(pending != 0)

        with m.FSM(name="front"):
            with m.State("IDLE"):
                if self.direction is None:
                    # a change of direction waits until every earlier batch has completed
                    m.d.comb += self.cmd.ready.eq(
                        drained | (self.cmd.payload.scatter == batch_scatter))
                else:
                    m.d.comb += self.cmd.ready.eq(1)
                with m.If(cmd_fire):
                    if self.framing == "count":
                        m.d.sync += remaining.eq(self.cmd.payload.count)
                    m.d.sync += [slot.eq(0),
                                 batch_bank.eq(self.cmd.payload.bank),
                                 setup.eq(self.SETUP_CYCLES)]
                    if self.direction is None:
                        m.d.sync += batch_scatter.eq(self.cmd.payload.scatter)
                    m.next = "SETUP"
            with m.State("SETUP"):
                with m.If(setup != 0):
                    m.d.sync += setup.eq(setup - 1)
                with m.Elif((remaining == 0) if self.framing == "count" else C(0)):
                    m.d.comb += [in_valid.eq(1), in_null.eq(1), in_eob.eq(1)]
                    with m.If(adv):
                        m.next = "IDLE"
                with m.Else():
                    m.next = "RUN"
            with m.State("RUN"):
                if self.framing == "count":
                    last = remaining == 1
                    m.d.comb += in_eob.eq(last)
                else:  # an end beat closes the batch: it carries no key (a null beat)
                    last = self.keys.payload.end
                    m.d.comb += [in_eob.eq(last), in_null.eq(last)]
                m.d.comb += [in_valid.eq(self.keys.valid), self.keys.ready.eq(adv)]
                with m.If(self.keys.valid & adv):
                    m.d.sync += [remaining.eq(remaining - 1), slot.eq(slot + 1)]
                    with m.If(last):
                        m.next = "IDLE"

        # ---- key pipeline S1..S5 -------------------------------------------------------
        key = self.keys.payload.key
        in_table = key[rb:self.key_width]
        in_row = key[:rb]
        tag = data.StructLayout({"valid": 1, "null": 1, "eob": 1, "scatter": 1})
        t1, t2, t3, t4, t5 = (Signal(tag, name=f"tag{i}") for i in range(1, 6))
        table_addr_bits = max(1, ceil_log2(self.num_tables))
        m.d.comb += [desc_rd.addr.eq(in_table[:table_addr_bits]), desc_rd.en.eq(adv)]

        # S1: descriptor RAM output; staging slot index
        row1 = Signal(rb, reset_less=True)
        table_ok1 = Signal()
        slot_ok1 = Signal()
        index1 = Signal(17, reset_less=True)
        with m.If(adv):
            m.d.sync += [
                t1.valid.eq(in_valid), t1.null.eq(in_null), t1.eob.eq(in_eob),
                t1.scatter.eq(batch_scatter),
                row1.eq(in_row),
                table_ok1.eq((in_table < self.num_tables)
                             & desc_valid.bit_select(in_table[:table_addr_bits], 1)),
                slot_ok1.eq((slot < self.staging_slots) & (batch_bank < self.staging_banks)
                            & staging_ok),
                index1.eq(slot + Mux(batch_bank, self.staging_slots, 0)),
            ]
        d = desc_rd.data

        # S2: checks; multiplier inputs
        ok2 = data.StructLayout({"table": 1, "row": 1, "desc": 1, "slot": 1})
        chk2 = Signal(ok2)
        base2 = Signal(aw, reset_less=True)
        row2 = Signal(rb, reset_less=True)
        row_bytes2 = Signal(16, reset_less=True)
        index2 = Signal(17, reset_less=True)
        stride2 = Signal(16, reset_less=True)
        with m.If(adv):
            m.d.sync += [
                t2.eq(t1),
                chk2.table.eq(table_ok1), chk2.row.eq(row1 < d.rows),
                chk2.desc.eq(d.ok & (d.row_bytes <= self.staging_stride)),
                chk2.slot.eq(slot_ok1),
                base2.eq(d.base), row2.eq(row1), row_bytes2.eq(d.row_bytes),
                index2.eq(index1), stride2.eq(self.staging_stride),
            ]

        # S3, S4: products
        row_off = _mul(m, row2, row_bytes2, adv, "row_off")          # valid with S4
        slot_off = _mul(m, index2, stride2, adv, "slot_off")         # valid with S4
        chk3, chk4 = Signal(ok2), Signal(ok2)
        base3, base4 = Signal(aw, reset_less=True), Signal(aw, reset_less=True)
        nbytes3, nbytes4 = Signal(16, reset_less=True), Signal(16, reset_less=True)
        with m.If(adv):
            m.d.sync += [t3.eq(t2), t4.eq(t3), chk3.eq(chk2), chk4.eq(chk3),
                         base3.eq(base2), base4.eq(base3),
                         nbytes3.eq(row_bytes2), nbytes4.eq(nbytes3)]

        # S5: addresses and the verdict
        src5, dst5 = Signal(aw, reset_less=True), Signal(aw, reset_less=True)
        rem5 = Signal(16, reset_less=True)
        refused5 = Signal()
        cause5 = Signal(2)  # index into CAUSES
        table_addr = (base4 + row_off)[:aw]
        staging_addr = (self.staging_base + slot_off)[:aw]
        cause4 = Mux(~chk4.table, CAUSES.index("table"),
                     Mux(~chk4.row, CAUSES.index("row"),
                         Mux(~chk4.desc, CAUSES.index("desc"), CAUSES.index("slot"))))
        with m.If(adv):
            m.d.sync += [
                t5.eq(t4),
                src5.eq(Mux(t4.scatter, staging_addr, table_addr)),
                dst5.eq(Mux(t4.scatter, table_addr, staging_addr)),
                rem5.eq(nbytes4),
                refused5.eq(~t4.null & ~(chk4.table & chk4.row & chk4.desc & chk4.slot)),
                cause5.eq(cause4),
            ]

        # ---- S5 -> op FIFO -> chunker ----------------------------------------------------
        # The FIFO decouples the key pipeline's enable from the chunker's issue logic: its
        # registered room (`fifo_room`) moves the pipeline, so ``adv`` (the enable of every
        # stage, and ``keys.ready``) is one gate of flip-flops (timing). The bytes to the next
        # 4 KiB page on either side are computed on the way in.
        op_layout = data.StructLayout({"src": aw, "dst": aw, "rem": 16, "room_src": 13,
                                       "room_dst": 13, "row": 1, "refused": 1, "cause": 2,
                                       "eob": 1})
        m.submodules.op_fifo = op_fifo = BufferedFIFO(width=op_layout.size, depth=6)
        op_in = Signal(op_layout)
        m.d.comb += [
            adv.eq(~t5.valid | fifo_room(m, op_fifo, "op")),
            op_fifo.w_en.eq(t5.valid & adv),   # not w_rdy: a held S5 beat is written once
            op_in.src.eq(src5), op_in.dst.eq(dst5), op_in.rem.eq(rem5),
            op_in.room_src.eq(PAGE - src5[:12]), op_in.room_dst.eq(PAGE - dst5[:12]),
            op_in.row.eq(~t5.null & ~refused5), op_in.refused.eq(refused5),
            op_in.cause.eq(cause5), op_in.eob.eq(t5.eob),
            op_fifo.w_data.eq(op_in),
        ]

        beat_layout = data.StructLayout({"addr": aw, "len": 8})
        ev_layout = data.StructLayout({"need_b": 1, "row_end": 1, "refused": 1, "cause": 2,
                                       "eob": 1})
        # The chunker sees registered FIFO room (`fifo_room`: the last 2 entries unused), so
        # the FIFOs are 2 deeper than the entries they hold (timing: a FIFO level through
        # the issue and load logic into the op FIFO's read was a critical path).
        m.submodules.ar_fifo = ar_fifo = BufferedFIFO(width=beat_layout.size, depth=6)
        m.submodules.aw_fifo = aw_fifo = BufferedFIFO(width=beat_layout.size, depth=6)
        m.submodules.wlen_fifo = wlen_fifo = BufferedFIFO(width=8, depth=self.max_chunks + 2)
        m.submodules.ev_fifo = ev_fifo = BufferedFIFO(width=ev_layout.size,
                                                          depth=self.max_chunks + 2)
        m.submodules.data_fifo = data_fifo = BufferedFIFO(width=self.data_width + 1,
                                                              depth=self.fifo_beats)

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
        issue_mark = cur_valid & ~cur.row & ev_room
        finished = issue_mark | (issue_row & last)
        load = op_fifo.r_rdy & (~cur_valid | finished)
        m.d.comb += op_fifo.r_en.eq(load)
        head_pick = compare(head)

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

        ev_in = Signal(ev_layout)
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

        # ---- AR: credit-based read issue ------------------------------------------------
        ar_head = beat_layout(ar_fifo.r_data)
        aw_head = beat_layout(aw_fifo.r_data)
        # free = data FIFO beats not yet promised to a read (FIFO contents + beats in flight)
        free = Signal(range(self.fifo_beats + 1), init=self.fifo_beats)
        r_due = Signal(range(self.fifo_beats + 1))     # read beats requested, not yet received
        m.d.comb += [
            bus.arvalid.eq(ar_fifo.r_rdy & (free > ar_head.len)),
            bus.araddr.eq(ar_head.addr), bus.arlen.eq(ar_head.len),
            bus.arsize.eq(shift), bus.arburst.eq(AXIBurst.INCR), bus.arcache.eq(0b0011),
            bus.arprot.eq(0), bus.arid.eq(0),
        ]
        ar_fire = bus.arvalid & bus.arready
        m.d.comb += ar_fifo.r_en.eq(ar_fire)
        ar_beats = Mux(ar_fire, ar_head.len + 1, 0)

        # ---- R -> data FIFO --------------------------------------------------------------
        m.d.comb += bus.rready.eq(r_due != 0)
        r_fire = bus.rvalid & bus.rready
        r_err = r_fire & (bus.rresp != AXIResp.OKAY)
        m.d.comb += [data_fifo.w_en.eq(r_fire),
                     data_fifo.w_data.eq(Cat(bus.rdata, bus.rresp != AXIResp.OKAY))]
        m.d.sync += r_due.eq(r_due + ar_beats - r_fire)

        # ---- W: data FIFO -> W register -> W FIFO -> W -------------------------------------
        # The data FIFO's block RAM has no output register (5.8 ns clock-to-out): its data
        # goes straight into the W register, no logic between (timing: a select there was
        # the whole accelerator's critical path). The W FIFO's registered room says when a
        # beat may leave the data FIFO: the W register always finds room one cycle later.
        w_layout = data.StructLayout({"data": self.data_width, "err": 1, "last": 1})
        # 8 deep: at one beat per cycle it holds about 3, and its room needs <= depth - 3
        m.submodules.w_fifo = w_fifo = BufferedFIFO(width=w_layout.size, depth=8)
        wbeat = Signal(8)
        w_reg, w_reg_valid = Signal(w_layout, reset_less=True), Signal()
        w_last = wbeat == wlen_fifo.r_data
        pop = data_fifo.r_rdy & wlen_fifo.r_rdy & fifo_room(m, w_fifo, "w")
        w_out = w_layout(w_fifo.r_data)
        m.d.sync += [w_reg.eq(Cat(data_fifo.r_data, w_last)), w_reg_valid.eq(pop)]
        m.d.comb += [
            data_fifo.r_en.eq(pop), wlen_fifo.r_en.eq(pop & w_last),
            w_fifo.w_en.eq(w_reg_valid), w_fifo.w_data.eq(w_reg),
            bus.wvalid.eq(w_fifo.r_rdy), bus.wdata.eq(w_out.data),
            bus.wstrb.eq(Mux(w_out.err, 0, (1 << bus_bytes) - 1)), bus.wlast.eq(w_out.last),
            w_fifo.r_en.eq(bus.wready),
        ]
        with m.If(pop):
            m.d.sync += wbeat.eq(Mux(w_last, 0, wbeat + 1))
        m.d.sync += free.eq(Mux(ar_fire, free - ar_head.len - 1, free) + pop)

        # ---- AW --------------------------------------------------------------------------
        m.d.comb += [
            bus.awvalid.eq(aw_fifo.r_rdy),
            bus.awaddr.eq(aw_head.addr), bus.awlen.eq(aw_head.len),
            bus.awsize.eq(shift), bus.awburst.eq(AXIBurst.INCR), bus.awcache.eq(0b0011),
            bus.awprot.eq(0), bus.awid.eq(0),
            aw_fifo.r_en.eq(bus.awvalid & bus.awready),
        ]

        # ---- B and events -> done ------------------------------------------------------
        ev = ev_layout(ev_fifo.r_data)
        can_emit = ~self.done.valid | self.done.ready
        free = ~ev.eob | can_emit
        complete = ev_fifo.r_rdy & (~ev.need_b | bus.bvalid) & free
        m.d.comb += [bus.bready.eq(ev_fifo.r_rdy & ev.need_b & free), ev_fifo.r_en.eq(complete)]
        b_fire = bus.bvalid & bus.bready
        b_err = b_fire & (bus.bresp != AXIResp.OKAY)

        batch_rows, batch_errors = Signal(16), Signal(16)
        add_row = complete & ev.row_end
        add_err = complete & ev.refused
        with m.If(done_fire):
            m.d.sync += self.done.valid.eq(0)
        m.d.comb += batch_end.eq(complete & ev.eob)
        with m.If(complete & ev.eob):
            m.d.sync += [self.done.valid.eq(1),
                         self.done.payload.rows.eq(batch_rows + add_row),
                         self.done.payload.errors.eq(batch_errors + add_err),
                         batch_rows.eq(0), batch_errors.eq(0)]
        with m.Else():
            m.d.sync += [batch_rows.eq(batch_rows + add_row),
                         batch_errors.eq(batch_errors + add_err)]

        # ---- counters and sticky error causes -------------------------------------------
        # lagged: keeps the data FIFO's block-RAM output and the AXI inputs off the adders
        def count(counter, inc):
            lagged_count(m, counter, inc, self.clear_counters, counter.name)

        count(self.rows, add_row)
        count(self.window_errors, add_err)
        count(self.axi_errors, r_err + b_err)
        count(self.bytes_read, Mux(r_fire & ~r_err, bus_bytes, 0))
        count(self.bytes_written, Mux(bus.wvalid & bus.wready & ~w_out.err, bus_bytes, 0))

        causes = Signal(len(CAUSES))
        set_bits = (Mux(add_err, C(1, 4) << ev.cause, 0)
                    | Mux(r_err, 1 << CAUSES.index("axi_read"), 0)
                    | Mux(b_err, 1 << CAUSES.index("axi_write"), 0))
        m.d.sync += causes.eq(Mux(self.clear_errors, 0, causes) | set_bits)
        m.d.comb += self.error_cause.eq(causes)
        return m


class GatherDMA(RowDMA):
    """RowDMA copying table rows into staging slots (the cold-row gather)."""

    def __init__(self, **kwargs):
        super().__init__("gather", **kwargs)


class ScatterDMA(RowDMA):
    """RowDMA copying staging slots back to table rows (the updated-row scatter)."""

    def __init__(self, **kwargs):
        super().__init__("scatter", **kwargs)
