"""Property 6 (issue 43) on `CSRBank` with the product's map (`HOTLINE_REGISTERS`), seen from
its AXI4-Lite port, for one watched word ``watch`` (a free input held from step 0: the
proof holds for every word, mapped or not):

- a read of an ``rw`` word returns what the writes to it left (``wstrb`` lanes honoured,
  bits outside its fields 0; reset value 0), with OKAY;
- a read or a write of an address outside the map answers SLVERR (a read returns 0) and
  changes no ``rw`` register (the watched word's shadow follows only its own writes);
- a write answers OKAY exactly for ``rw`` and ``wo`` words;
- ``rc`` (clear on read: the top pops at the strobe): a read of an ``rc`` word raises its
  strobe exactly once before R, and R returns the port's value of that cycle; a read of any
  other word raises no ``rc`` strobe.

Assumptions: no reset; a host that issues one AW and one W per write and one AR per read,
waits for B / R before the next of its kind, and does not read while a write is
outstanding or write while a read is (the host link does so: one request at a time).
Free: every address, data, strobe, valid / ready timing and every ``ro`` / ``rc`` value.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover

import hotline.hw.csr as block
from hotline.contract.regmap import HOTLINE_REGISTERS

from .runner import free_inputs, held_choice

__all__ = ["CSRProperty", "ADDR_WIDTH", "MUTATIONS"]

ADDR_WIDTH = 11   # the map spans 0x290 bytes: a bit more leaves unmapped words above it too

MUTATIONS = {
    "rw_not_stored": ("m.d.sync += port.eq((port & ~lanes | w_data & lanes) & r.mask)",
                      "m.d.sync += port.eq(port)"),
    "unmapped_write_okay": ("bresp.eq(Mux(aw_hit.any(), OKAY, SLVERR))", "bresp.eq(OKAY)"),
    "unmapped_read_okay": ("rresp.eq(Mux(read_err, SLVERR, OKAY))", "rresp.eq(OKAY)"),
    "rc_no_strobe": ('m.d.comb += getattr(self, f"{r.port_name}_rstb").eq(1)',
                     'm.d.comb += getattr(self, f"{r.port_name}_rstb").eq(0)'),
}


class CSRProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.csr` or a mutant of it."""

    def __init__(self, module=block):
        self.dut = module.CSRBank(HOTLINE_REGISTERS, ADDR_WIDTH)
        self.watch = Signal(ADDR_WIDTH - 2)
        self.ports = free_inputs(self.dut) + [self.watch]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        bus, regs = dut.axil, HOTLINE_REGISTERS
        m.d.comb += Assume(~ResetSignal())

        held_choice(m, self.watch)
        watch = self.watch

        # ---- the host's discipline ----------------------------------------------------
        aw_hs, w_hs = bus.awvalid & bus.awready, bus.wvalid & bus.wready
        ar_hs = bus.arvalid & bus.arready
        b_hs, r_hs = bus.bvalid & bus.bready, bus.rvalid & bus.rready
        aw_done, w_done, ar_done = Signal(), Signal(), Signal()
        m.d.comb += [Assume(~(aw_hs & aw_done)), Assume(~(w_hs & w_done)),
                     Assume(~(ar_hs & ar_done)),
                     Assume(~((aw_hs | w_hs) & (ar_done | ar_hs))),
                     Assume(~(ar_hs & (aw_done | w_done)))]
        waddr, wdata, wstrb = Signal(ADDR_WIDTH), Signal(32), Signal(4)
        raddr = Signal(ADDR_WIDTH)
        with m.If(aw_hs):
            m.d.sync += [aw_done.eq(1), waddr.eq(bus.awaddr)]
        with m.If(w_hs):
            m.d.sync += [w_done.eq(1), wdata.eq(bus.wdata), wstrb.eq(bus.wstrb)]
        with m.If(b_hs):
            m.d.sync += [aw_done.eq(0), w_done.eq(0)]
        with m.If(ar_hs):
            m.d.sync += [ar_done.eq(1), raddr.eq(bus.araddr)]
        with m.If(r_hs):
            m.d.sync += ar_done.eq(0)

        # ---- the watched word: its kind and mask from the map ---------------------------
        kind = {name: Signal(name=f"watch_{name}") for name in ("rw", "wo", "ro", "rc", "none")}
        mask = Signal(32)
        strobe, value = Signal(), Signal(32)      # the watched rc register's
        m.d.comb += kind["none"].eq(1)
        with m.Switch(watch):
            for r in regs:
                for i in range(r.words):
                    with m.Case((r.offset >> 2) + i):
                        m.d.comb += [kind["none"].eq(0), kind[r.access].eq(1),
                                     mask.eq((r.mask >> (32 * i)) & 0xffffffff)]
                        if r.access == "rc":
                            m.d.comb += [strobe.eq(getattr(dut, f"{r.port_name}_rstb")),
                                         value.eq(getattr(dut, r.port_name) & r.mask)]

        # ---- scoreboard -------------------------------------------------------------------
        shadow = Signal(32)
        lanes = Cat(wstrb[i].replicate(8) for i in range(4))
        with m.If(b_hs):
            with m.If(waddr[2:] == watch):
                m.d.comb += Assert(bus.bresp == Mux(kind["rw"] | kind["wo"], 0, 2))
                with m.If(kind["rw"]):
                    m.d.sync += shadow.eq((shadow & ~lanes | wdata & lanes) & mask)

        strobes, sampled = Signal(2), Signal(32)
        reading_watch = ar_done & (raddr[2:] == watch)
        with m.If(ar_hs):
            m.d.sync += strobes.eq(0)
        with m.If(strobe):
            m.d.comb += Assert(reading_watch | ar_hs & (bus.araddr[2:] == watch))
            m.d.sync += [strobes.eq(strobes + 1), sampled.eq(value)]
        with m.If(r_hs & reading_watch):
            m.d.comb += Assert(bus.rresp == Mux(kind["none"], 2, 0))
            with m.If(kind["none"]):
                m.d.comb += Assert(bus.rdata == 0)
            with m.If(kind["rw"]):
                m.d.comb += Assert(bus.rdata == shadow)
            with m.If(kind["rc"]):
                m.d.comb += [Assert(strobes == 1), Assert(bus.rdata == sampled)]
        m.d.comb += Cover(r_hs & reading_watch & kind["rw"] & (bus.rdata != 0))
        return m
