"""Property 1 (issue 43) on `RowWindowCheck`: every row it lets through (``ops.row``) has its
table address and its staging address, each with the row's bytes, inside the window that
was registered for the key's table and inside the staging window the key was taken under;
and both windows end within ``2**addr_width``.

`RowWindowProperty` wraps the unmodified block. Free inputs: descriptor writes (any table,
base with all `BASE_BITS`, rows, at any cycle, also while keys of that table are in
flight), the staging base, slots and banks (changed at any cycle, also while keys are in
flight), keys (any key, slot, bank, scatter, null) and ``ops.ready``.
A scoreboard independent of the block's pipeline:

- a shadow descriptor per table, written ``DESC_LATENCY - 1`` cycles after ``desc_we``
  (the block's documented contract: a key taken ``DESC_LATENCY`` cycles after a write or
  later uses it);
- at each key taken, that table's shadow window and the staging window as the inputs hold
  it, carried down a ``LATENCY``-deep shift register that moves when the block does
  (``keys.ready``, which is the block's "pipeline moves");
- at ``ops``: the inclusion assertions.

Assumptions (``Assume``), and why:

- no reset (the check starts from the initial state, all registers at their init values);
- ``desc_row_bytes == ROW_BYTES`` and ``staging_stride == STRIDE``, powers of two with
  ROW_BYTES <= STRIDE: the abstraction of the multipliers. With symbolic 16-bit sizes the
  bit-vector solvers give no result (issue 43: nothing in 300 s); the products' arithmetic
  (`_mul`) is checked in simulation against Python's ``*`` (tests/test_row_dma_stages.py),
  not here;
- a key (not a null beat) is taken only when the staging inputs have held for
  ``SETUP_CYCLES`` cycles: the block's documented contract, which `RowCommandFront` meets
  by latching the host's staging registers once per batch (proved: sim/formal/
  row_command_front.py). Changes while keys are in flight are free.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover
from amaranth.utils import exact_log2

import hotline.hw.row_window_check as block
from hotline.contract.dma import BASE_BITS

from .runner import free_inputs

__all__ = ["RowWindowProperty", "GEOMETRY", "ROW_BYTES", "STRIDE", "MUTATIONS"]

GEOMETRY = dict(addr_width=12, data_width=32, num_tables=2, row_bits=3, key_width=5)
ROW_BYTES = 8
STRIDE = 16

# name -> (source text of hw/row_window_check.py, its replacement): each breaks one check.
MUTATIONS = {
    "no_row_bound": ("chk2.row.eq(row1 < d.rows)", "chk2.row.eq(1)"),
    "no_slot_bound": ("slot_ok1.eq((k.slot < self.staging_slots) & ",
                      "slot_ok1.eq(C(1) & "),
    "no_staging_end": ("staging_ok.eq((st_end <= top) & ", "staging_ok.eq(C(1) & "),
    "no_table_end": ("& d4.fits & (desc_end <= top))", "& d4.fits)"),
    # the escape issue 43's first bounded check found: the staging base read at the
    # address stage instead of the one the key was checked against
    "staging_base_late": ("staging_addr = (sbase4 + slot_off)[:aw]",
                          "staging_addr = (self.staging_base[:aw] + slot_off)[:aw]"),
}


class RowWindowProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.row_window_check` or a mutant of it."""

    def __init__(self, module=block):
        self.dut = module.RowWindowCheck(**GEOMETRY)
        self.ports = free_inputs(self.dut)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        g = GEOMETRY
        aw, rb, nt = g["addr_width"], g["row_bits"], g["num_tables"]
        wide = BASE_BITS + 20   # no wrap-around in the scoreboard's sums
        top = 1 << aw
        m.d.comb += [Assume(~ResetSignal()),
                     Assume(dut.desc_row_bytes == ROW_BYTES),
                     Assume(dut.staging_stride == STRIDE)]

        # ---- staging inputs held for SETUP_CYCLES before a key is taken ----------------
        window = Cat(dut.staging_base, dut.staging_stride, dut.staging_slots, dut.staging_banks)
        prev = Signal(len(window))
        held = Signal(range(dut.SETUP_CYCLES + 1))
        m.d.sync += prev.eq(window)
        with m.If(window != prev):
            m.d.sync += held.eq(0)
        with m.Elif(held < dut.SETUP_CYCLES):
            m.d.sync += held.eq(held + 1)
        # a null beat (a batch end) copies no row: free at any time
        taken = dut.keys.valid & dut.keys.ready & ~dut.keys.payload.null
        m.d.comb += Assume(~taken | ((window == prev) & (held == dut.SETUP_CYCLES)))

        # ---- shadow descriptors ---------------------------------------------------------
        desc = Cat(dut.desc_we, dut.desc_table, dut.desc_base, dut.desc_rows)
        delayed = desc
        for i in range(dut.DESC_LATENCY - 1):
            stage = Signal(len(desc), name=f"shadow_desc{i}")
            m.d.sync += stage.eq(delayed)
            delayed = stage
        w_we = delayed[0]
        w_table = delayed[1:1 + len(dut.desc_table)]
        w_base = delayed[1 + len(dut.desc_table):1 + len(dut.desc_table) + BASE_BITS]
        w_rows = delayed[1 + len(dut.desc_table) + BASE_BITS:]
        lo = Array(Signal(wide, name=f"table{t}_lo") for t in range(nt))
        hi = Array(Signal(wide, name=f"table{t}_hi") for t in range(nt))  # 0: no window
        with m.If(w_we & (w_table < nt)):
            m.d.sync += [lo[w_table].eq(w_base),
                         hi[w_table].eq(w_base + (w_rows << exact_log2(ROW_BYTES)))]

        # ---- the scoreboard: the windows each key was taken under -----------------------
        key = dut.keys.payload
        table = key.key[rb:]
        record = [Signal(wide, name="t_lo"), Signal(wide, name="t_hi"),
                  Signal(wide, name="s_lo"), Signal(wide, name="s_hi"), Signal(name="scatter")]
        in_map = table < nt
        m.d.comb += [
            record[0].eq(Mux(in_map, lo[table], 1)),     # an empty window off the map
            record[1].eq(Mux(in_map, hi[table], 0)),
            record[2].eq(dut.staging_base),
            record[3].eq(dut.staging_base
                         + ((dut.staging_slots * dut.staging_banks) << exact_log2(STRIDE))),
            record[4].eq(key.scatter),
        ]
        stages = [Cat(*record)]
        for i in range(dut.LATENCY):
            s = Signal(len(stages[0]), name=f"board{i + 1}")
            with m.If(dut.keys.ready):
                m.d.sync += s.eq(stages[-1])
            stages.append(s)
        out = stages[-1]
        widths = [len(r) for r in record]
        fields, pos = [], 0
        for w in widths:
            fields.append(out[pos:pos + w])
            pos += w
        t_lo, t_hi, s_lo, s_hi, scatter = fields

        op = dut.ops.payload
        table_addr = Mux(scatter, op.dst, op.src)
        staging_addr = Mux(scatter, op.src, op.dst)
        with m.If(dut.ops.valid & op.row):
            m.d.comb += [
                Assert(t_hi <= top), Assert(t_lo <= table_addr),
                Assert(table_addr + op.rem <= t_hi),
                Assert(s_hi <= top), Assert(s_lo <= staging_addr),
                Assert(staging_addr + op.rem <= s_hi),
                Assert(op.rem == ROW_BYTES),
            ]
        # the property is not vacuous: a row does get through
        m.d.comb += Cover(dut.ops.valid & op.row)
        return m
