"""Property 2 (issue 43), its write-channel part, on `WriteEngine`, the row DMA's AW, W and B:

- as many write beats as requested: the W bursts, delimited by ``wlast``, have the lengths
  the ``wlen`` stream asked for, in order (burst k: ``wlen[k] + 1`` beats, ``wlast`` on the
  last and only there);
- no beat lost, duplicated or reordered: W carries the read-data beats in the order they
  came (each read beat is tagged with its sequence number in its data);
- a read beat with an error is written with ``wstrb`` = 0, the others with every strobe;
- a refused row (a row beyond its table, a slot beyond staging: the window check's verdict)
  raises the ``refused`` strobe with its cause exactly once, when its event completes (the
  error counters count these strobes); a copied row raises ``row_done`` once;
- the AXI master rules: AWVALID and WVALID held until ready with AWADDR / AWLEN and WDATA /
  WSTRB / WLAST stable; AW carries the ``aw`` stream's bursts unchanged;
- each write response taken retires one event that awaits one, in the order taken, with the
  ``write_err`` strobe exactly when its BRESP is not OKAY: none lost, none invented, none
  used before it was taken (BREADY is the B register slice's room: at most two are held).

Checked for one watched burst (the ``watch``-th ``wlen`` entry: a free input held from step
0, so every burst is the watched one in some trace). Free: read beats (within the credit the
engine gives: the `ReadEngine`'s contract), ``aw`` / ``wlen`` / ``events`` (stream rule),
AWREADY, WREADY, B (BVALID held until BREADY, the slave's rule), ``started``, ``done.ready``.
Assumptions: no reset. Geometry: 12-bit addresses, 32-bit data, a 4-beat read-data FIFO.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover

import hotline.hw.write_engine as block

from .runner import free_inputs, held_choice
from .streams import stream_rules

__all__ = ["WriteEngineProperty", "MUTATIONS"]

GEOMETRY = dict(addr_width=12, data_width=32, fifo_beats=4)
TAG = 5   # low bits of a read beat's data: its sequence number

MUTATIONS = {
    # wlast one beat early
    "early_wlast": ("w_last = wbeat == self.wlen.payload",
                    "w_last = wbeat + 1 >= self.wlen.payload"),
    # an errored read beat written with its strobes
    "strobes_on_error": ("bus.wstrb.eq(Mux(w_out.err, 0, (1 << bus_bytes) - 1))",
                         "bus.wstrb.eq((1 << bus_bytes) - 1)"),
    # an event retired by the slave's response before the B slice took it
    "b_before_slice": ("(~ev.need_b | b.valid)", "(~ev.need_b | bus.bvalid)"),
    # the error strobe at the slave's handshake, not when the response retires its event
    "err_at_handshake": ("self.write_err.eq(b_fire & (b.payload != AXIResp.OKAY))",
                         "self.write_err.eq(bus.bvalid & bus.bready & (bus.bresp != AXIResp.OKAY))"),
}


class WriteEngineProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.write_engine` or a mutant of it."""

    def __init__(self, module=block):
        self.dut = module.WriteEngine(**GEOMETRY)
        self.watch = Signal(3)
        self.ports = free_inputs(self.dut) + [self.watch]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        bus = dut.bus
        m.d.comb += Assume(~ResetSignal())
        held_choice(m, self.watch)
        for name in ("aw", "wlen", "events"):
            stream_rules(m, getattr(dut, name), name, assume=True)

        # ---- read beats: within the credit, tagged with their sequence number ----------
        credit = Signal(range(GEOMETRY["fifo_beats"] + 1), init=GEOMETRY["fifo_beats"])
        sent = Signal(TAG)
        m.d.sync += credit.eq(credit - dut.beats.valid + dut.credit)
        with m.If(dut.beats.valid):
            m.d.comb += [Assume(credit != 0), Assume(dut.beats.payload.data[:TAG] == sent)]
            m.d.sync += sent.eq(sent + 1)

        # ---- B: the slave holds BVALID with BRESP until BREADY ----------------------------
        b_wait, bresp_q = Signal(), Signal.like(bus.bresp)
        m.d.sync += [b_wait.eq(bus.bvalid & ~bus.bready), bresp_q.eq(bus.bresp)]
        with m.If(b_wait):
            m.d.comb += Assume(bus.bvalid & (bus.bresp == bresp_q))
        # the responses taken and not yet used, oldest first (a queue of two)
        held, q0, q1 = Signal(2), Signal.like(bus.bresp), Signal.like(bus.bresp)
        b_in = bus.bvalid & bus.bready
        b_use = dut.events.valid & dut.events.ready & dut.events.payload.need_b
        m.d.comb += [Assert(~b_use | (held != 0)),
                     Assert(dut.write_err == (b_use & (q0 != 0))),
                     Assert(held <= 2), Assert(~b_in | (held < 2))]
        with m.If(b_use):
            m.d.sync += q0.eq(Mux(held == 2, q1, bus.bresp))
            m.d.sync += held.eq(held - 1 + b_in)
            with m.If((held == 2) & b_in):
                m.d.sync += q1.eq(bus.bresp)
        with m.Elif(b_in):
            m.d.sync += held.eq(held + 1)
            with m.If(held == 0):
                m.d.sync += q0.eq(bus.bresp)
            with m.Else():
                m.d.sync += q1.eq(bus.bresp)

        # ---- AW and W: held until ready, stable -------------------------------------------
        for valid, ready, payload, name in (
                (bus.awvalid, bus.awready, Cat(bus.awaddr, bus.awlen), "awbus"),
                (bus.wvalid, bus.wready, Cat(bus.wdata, bus.wstrb, bus.wlast), "wbus")):
            stalled, last = Signal(name=f"{name}_stalled"), Signal(len(payload))
            m.d.sync += [stalled.eq(valid & ~ready), last.eq(payload)]
            with m.If(stalled):
                m.d.comb += Assert(valid & (payload == last))
        with m.If(bus.awvalid):
            m.d.comb += Assert(dut.aw.valid & (bus.awaddr == dut.aw.payload.addr)
                               & (bus.awlen == dut.aw.payload.len))
        m.d.comb += Assert((bus.awvalid & bus.awready) == (dut.aw.valid & dut.aw.ready))

        # ---- W: the read beats in order; the watched burst's length --------------------
        written = Signal(TAG)
        w_fire = bus.wvalid & bus.wready
        with m.If(bus.wvalid):
            m.d.comb += Assert(bus.wdata[:TAG] == written)
        with m.If(w_fire):
            m.d.sync += written.eq(written + 1)
        asked, length = Signal(len(self.watch) + 1), Signal(8)   # wlen entries taken
        # an entry is served while it is offered (taken with its last beat): its length is
        # recorded from its first offer (stable until taken)
        with m.If(dut.wlen.valid & (asked == self.watch)):
            m.d.sync += length.eq(dut.wlen.payload)
        with m.If(dut.wlen.valid & dut.wlen.ready):
            m.d.sync += asked.eq(asked + 1)
        m.d.comb += Assume(~asked[-1])   # the depth is too short for the count to wrap
        burst, beat = Signal(len(asked)), Signal(9)   # W's burst and beat within it
        with m.If(w_fire):
            m.d.sync += beat.eq(Mux(bus.wlast, 0, beat + 1))
            with m.If(bus.wlast):
                m.d.sync += burst.eq(burst + 1)
        with m.If(bus.wvalid):
            # no W beat of a burst not asked for (taken, or offered now)
            m.d.comb += Assert((burst < asked) | ((burst == asked) & dut.wlen.valid))
            with m.If(burst == self.watch):
                m.d.comb += [Assert(beat <= length), Assert(bus.wlast == (beat == length))]
        # not vacuous: the watched burst of 2 beats or more ends
        m.d.comb += Cover(w_fire & bus.wlast & (burst == self.watch) & (beat != 0))

        # ---- the counters' strobes: one per completed event of that kind ---------------
        ev, done_ev = dut.events.payload, dut.events.valid & dut.events.ready
        m.d.comb += [Assert(dut.refused == (done_ev & ev.refused)),
                     Assert(dut.row_done == (done_ev & ev.row_end)),
                     Assert(~dut.refused | (dut.cause == ev.cause))]

        # ---- strobes: none for an errored read beat --------------------------------------
        errs = Signal(1 << TAG)   # which read beats (by sequence number) had an error
        with m.If(dut.beats.valid):
            m.d.sync += errs.bit_select(sent, 1).eq(dut.beats.payload.err)
        with m.If(bus.wvalid):
            full = (1 << (GEOMETRY["data_width"] // 8)) - 1
            m.d.comb += Assert(bus.wstrb == Mux(errs.bit_select(written, 1), 0, full))
        return m
