"""RowWindowCheck: the row DMA's descriptor store and window check, one key per cycle.

Ports:

- descriptor port ``desc_we``, ``desc_table``, ``desc_base`` (`BASE_BITS`), ``desc_rows``
  (row_bits + 1), ``desc_row_bytes`` (16): as `RowDMA`'s; a write is used by a key taken
  ``DESC_LATENCY`` cycles after ``desc_we`` or later. All descriptors are invalid after reset.
  A base with a bit set at or above addr_width fails the descriptor's checks (cause desc).
- staging window ``staging_base`` (`BASE_BITS`), ``staging_stride``, ``staging_slots``,
  ``staging_banks``: as `RowDMA`'s (there `RowCommandFront`'s per-batch copy). A key is
  checked against the window as it is in the cycle the key is taken, which must have held for
  ``SETUP_CYCLES`` cycles before (its own checks: alignment, no bit at or above addr_width,
  end within 2**addr_width); the key carries that window's stride and base down the
  pipeline, so a change affects only the keys taken after it.
- ``keys`` In `slot_key_layout`: the keys, numbered by staging slot.
- ``ops`` Out `row_op_layout`: per key, its source and destination byte addresses (table row
  and staging slot, swapped when ``scatter``), the row's bytes, and the verdict: ``row`` (to
  copy) or ``refused`` with the first failing check's ``cause`` (table, row, desc, slot: the
  contract's order). A null key gives a beat with neither.

Timing: a pipeline of five stages (S1 descriptor RAM read; S2 checks and multiplier inputs;
S3, S4 17 x 16-bit partial products and their sums, one ECP5 DSP each; S5 addresses and
cause) that moves as a whole: a key taken in cycle t is on ``ops`` in cycle t + ``LATENCY``.
``keys.ready`` is ``~ops.valid | ops.ready`` (one gate: ``ops.ready`` should be a register),
so one key per cycle while ``ops`` is ready, and a bubble in ``keys`` fills a stall.
Descriptor writes go through a pipeline of the same kind, so that a key's checks need no
multiplication of their own for the table's bound.
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from hotline.contract.dma import BASE_BITS, CAUSES

from .row_dma_layouts import row_op_layout, slot_key_layout

__all__ = ["RowWindowCheck", "window_ports"]


def window_ports(addr_width, num_tables, row_bits):
    """The descriptor port and the staging window (inputs), as `RowDMA` has them too."""
    return {
        "desc_we": In(1),
        "desc_table": In(range(num_tables)),
        "desc_base": In(BASE_BITS),
        "desc_rows": In(row_bits + 1),
        "desc_row_bytes": In(16),
        "staging_base": In(BASE_BITS),
        "staging_stride": In(16),
        "staging_slots": In(16),
        "staging_banks": In(2),
    }


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


class RowWindowCheck(wiring.Component):
    """Parameters: ``addr_width``, ``data_width`` (the bus: addresses and sizes must be
    multiples of its bytes), ``num_tables``, ``row_bits``, ``key_width``."""
    LATENCY = 5        # key handshake -> its op on ``ops``
    SETUP_CYCLES = 5   # staging-window change -> its checks settled
    DESC_LATENCY = 6   # desc_we -> the descriptor is used by a key taken this many cycles later

    def __init__(self, *, addr_width, data_width, num_tables, row_bits, key_width):
        self.addr_width, self.data_width, self.num_tables = addr_width, data_width, num_tables
        self.row_bits, self.key_width = row_bits, key_width
        super().__init__({
            "keys": In(stream.Signature(slot_key_layout(key_width))),
            "ops": Out(stream.Signature(row_op_layout(addr_width))),
            **window_ports(addr_width, num_tables, row_bits),
        })

    def elaborate(self, platform):
        m = Module()
        aw, rb = self.addr_width, self.row_bits
        shift = exact_log2(self.data_width // 8)
        top = 1 << aw

        def aligned(value):
            return value[:shift] == 0 if shift else C(1)

        def fits(base):
            """No bit of ``base`` at or above addr_width (such a base is refused, not cut)."""
            return base[aw:] == 0 if aw < BASE_BITS else C(1)

        # ---- descriptor RAM and its write pipeline -------------------------------------
        entry = data.StructLayout({"base": aw, "rows": rb + 1, "row_bytes": 16, "ok": 1})
        desc_mem = Memory(shape=entry, depth=self.num_tables, init=[])
        m.submodules.desc_mem = desc_mem
        desc_wr = desc_mem.write_port()
        desc_rd = desc_mem.read_port()
        desc_valid = Signal(self.num_tables)  # rows > 0; flip-flops so that reset clears them

        # Only the write enables are reset: the data needs none (fewer loads on the reset net).
        dw = data.StructLayout({"table": len(self.desc_table), "base": aw, "fits": 1,
                                "rows": rb + 1, "row_bytes": 16})
        d1, d2, d3, d4, d5 = (Signal(dw, name=f"desc{i}", reset_less=True) for i in range(1, 6))
        we = Signal(5, name="desc_we_pipe")  # of d1 .. d5
        m.d.sync += [
            we.eq(Cat(self.desc_we, we[:4])), d1.table.eq(self.desc_table),
            d1.base.eq(self.desc_base[:aw]), d1.fits.eq(fits(self.desc_base)),
            d1.rows.eq(self.desc_rows),
            d1.row_bytes.eq(self.desc_row_bytes), d2.eq(d1), d3.eq(d2), d4.eq(d3), d5.eq(d4),
        ]
        span = _mul(m, d1.rows, d1.row_bytes, C(1), "desc_span")       # valid with d3
        desc_end = Signal(aw + rb + 18, reset_less=True)
        m.d.sync += desc_end.eq(d3.base + span)                         # valid with d4
        # The verdict in a register of its own (timing: the end's compare and the alignment
        # checks, five LUT levels into the descriptor LUT RAM, made a 9.8 ns path).
        desc_ok = Signal()                                              # valid with d5
        m.d.sync += desc_ok.eq((d4.row_bytes != 0) & aligned(d4.row_bytes) & aligned(d4.base)
                               & d4.fits & (desc_end <= top))
        m.d.comb += [
            desc_wr.addr.eq(d5.table),
            desc_wr.en.eq(we[4] & (d5.table < self.num_tables)),
            desc_wr.data.base.eq(d5.base),
            desc_wr.data.rows.eq(d5.rows),
            desc_wr.data.row_bytes.eq(d5.row_bytes),
            desc_wr.data.ok.eq(desc_ok),
        ]
        with m.If(we[4] & (d5.table < self.num_tables)):
            m.d.sync += desc_valid.bit_select(d5.table, 1).eq(d5.rows != 0)

        # ---- staging-window check (free running; settles in SETUP_CYCLES) --------------
        # The stride is registered here too: the multiplier's inputs come from flip-flops
        # next to it, not from the CSRs (timing).
        st_slots_x_banks, st_stride = Signal(18, reset_less=True), Signal(16, reset_less=True)
        m.d.sync += [st_slots_x_banks.eq(Mux(self.staging_banks[0], self.staging_slots, 0)
                                         + Mux(self.staging_banks[1], self.staging_slots << 1, 0)),
                     st_stride.eq(self.staging_stride)]
        st_span = _mul(m, st_slots_x_banks, st_stride, C(1), "staging_span")
        st_end = Signal(aw + 35, reset_less=True)
        m.d.sync += st_end.eq(self.staging_base[:aw] + st_span)
        staging_ok = Signal()
        m.d.sync += staging_ok.eq((st_end <= top) & aligned(self.staging_base)
                                  & fits(self.staging_base) & aligned(self.staging_stride))

        # ---- key pipeline S1..S5 -------------------------------------------------------
        adv = Signal()  # the pipeline moves
        k = self.keys.payload
        in_table = k.key[rb:self.key_width]
        in_row = k.key[:rb]
        tag = data.StructLayout({"valid": 1, "null": 1, "eob": 1, "scatter": 1})
        t1, t2, t3, t4, t5 = (Signal(tag, name=f"tag{i}") for i in range(1, 6))
        table_addr_bits = max(1, ceil_log2(self.num_tables))
        m.d.comb += [desc_rd.addr.eq(in_table[:table_addr_bits]), desc_rd.en.eq(adv),
                     self.keys.ready.eq(adv)]

        # S1: descriptor RAM output; staging slot index
        row1 = Signal(rb, reset_less=True)
        table_ok1 = Signal()
        slot_ok1 = Signal()
        index1 = Signal(17, reset_less=True)
        # The window's stride and base travel with the key (registers only, nothing on the
        # key's address path), so keys in flight keep the window they were checked against.
        stride1, sbase1 = Signal(16, reset_less=True), Signal(aw, reset_less=True)
        with m.If(adv):
            m.d.sync += [
                t1.valid.eq(self.keys.valid), t1.null.eq(k.null), t1.eob.eq(k.eob),
                t1.scatter.eq(k.scatter),
                row1.eq(in_row),
                table_ok1.eq((in_table < self.num_tables)
                             & desc_valid.bit_select(in_table[:table_addr_bits], 1)),
                slot_ok1.eq((k.slot < self.staging_slots) & (k.bank < self.staging_banks)
                            & staging_ok),
                index1.eq(k.slot + Mux(k.bank, self.staging_slots, 0)),
                stride1.eq(self.staging_stride), sbase1.eq(self.staging_base[:aw]),
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
        sbase2 = Signal(aw, reset_less=True)
        with m.If(adv):
            m.d.sync += [
                t2.eq(t1),
                chk2.table.eq(table_ok1), chk2.row.eq(row1 < d.rows),
                chk2.desc.eq(d.ok & (d.row_bytes <= stride1)),
                chk2.slot.eq(slot_ok1),
                base2.eq(d.base), row2.eq(row1), row_bytes2.eq(d.row_bytes),
                index2.eq(index1), stride2.eq(stride1), sbase2.eq(sbase1),
            ]

        # S3, S4: products
        row_off = _mul(m, row2, row_bytes2, adv, "row_off")          # valid with S4
        slot_off = _mul(m, index2, stride2, adv, "slot_off")         # valid with S4
        chk3, chk4 = Signal(ok2), Signal(ok2)
        base3, base4 = Signal(aw, reset_less=True), Signal(aw, reset_less=True)
        sbase3, sbase4 = Signal(aw, reset_less=True), Signal(aw, reset_less=True)
        nbytes3, nbytes4 = Signal(16, reset_less=True), Signal(16, reset_less=True)
        with m.If(adv):
            m.d.sync += [t3.eq(t2), t4.eq(t3), chk3.eq(chk2), chk4.eq(chk3),
                         base3.eq(base2), base4.eq(base3), sbase3.eq(sbase2), sbase4.eq(sbase3),
                         nbytes3.eq(row_bytes2), nbytes4.eq(nbytes3)]

        # S5: addresses and the verdict
        src5, dst5 = Signal(aw, reset_less=True), Signal(aw, reset_less=True)
        rem5 = Signal(16, reset_less=True)
        refused5 = Signal()
        cause5 = Signal(2)  # index into CAUSES
        table_addr = (base4 + row_off)[:aw]
        staging_addr = (sbase4 + slot_off)[:aw]
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

        op = self.ops.payload
        m.d.comb += [
            adv.eq(~t5.valid | self.ops.ready),
            self.ops.valid.eq(t5.valid),
            op.src.eq(src5), op.dst.eq(dst5), op.rem.eq(rem5),
            op.row.eq(~t5.null & ~refused5), op.refused.eq(refused5),
            op.cause.eq(cause5), op.eob.eq(t5.eob),
        ]
        return m
