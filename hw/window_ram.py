"""WindowRAM: block RAM that answers an AXI4 master as host memory, plus a word port for the
host link. A board top uses it as the memory window the accelerator's row DMA reads and
writes (bus addresses ``0 .. size``).

``bus`` (AXI4 slave, 64-bit data): one burst at a time, INCR only; a read returns one beat per
cycle after a 2-cycle start, a write takes one beat per cycle, ``wstrb`` honoured byte by byte.
A burst that reaches outside ``0 .. size`` touches nothing: its beats answer ``SLVERR`` (reads
return zero data). ``port`` (`WindowPortSignature`): word accesses, accepted (``ready``) only
while no burst runs; read data arrive with ``rvalid`` the cycle after acceptance.
"""
from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature, AXIResp

__all__ = ["WindowPortSignature", "WindowRAM"]


class WindowPortSignature(wiring.Signature):
    """A master's word port: ``addr`` (word index), ``write``/``read`` requests, ``ready`` when
    taken, ``rdata``/``rvalid`` one cycle after a read is taken."""

    def __init__(self, addr_width, data_width=64):
        super().__init__({"addr": Out(addr_width), "wdata": Out(data_width), "write": Out(1),
                          "read": Out(1), "ready": In(1), "rdata": In(data_width),
                          "rvalid": In(1)})


class WindowRAM(wiring.Component):
    """``size`` bytes (a power of two, >= 8) behind a ``bus_addr_width``-bit AXI4 slave."""

    def __init__(self, size, bus_addr_width=32, data_width=64):
        if size < 8 or size & (size - 1):
            raise ValueError(f"window size must be a power of two >= 8 bytes, not {size}")
        self.size, self.data_width = size, data_width
        self.words = size // (data_width // 8)
        super().__init__({
            "bus": In(AXI4Signature(bus_addr_width, data_width)),
            "port": In(WindowPortSignature(max(1, (self.words - 1).bit_length()), data_width)),
        })

    def elaborate(self, platform):
        m = Module()
        bus, port = self.bus, self.port
        nbytes = self.data_width // 8
        shift = (nbytes - 1).bit_length()
        m.submodules.mem = mem = Memory(shape=self.data_width, depth=self.words, init=[])
        wr = mem.write_port(granularity=8)
        rd = mem.read_port()

        addr = Signal(len(port.addr))        # current beat's word
        left = Signal(9)                     # beats still to issue
        bad = Signal()                       # the burst reaches outside the window
        rid = Signal.like(bus.arid)
        r_valid, r_last, r_bad = Signal(), Signal(), Signal()
        last_word = self.words - 1

        def outside(byte_addr, length):
            # first word or last word beyond the window (the AXI address may be wider).
            first = byte_addr >> shift
            return (first > last_word) | (first + length > last_word)

        m.d.comb += [
            bus.rdata.eq(Mux(r_bad, 0, rd.data)), bus.rvalid.eq(r_valid), bus.rlast.eq(r_last),
            bus.rresp.eq(Mux(r_bad, AXIResp.SLVERR, AXIResp.OKAY)), bus.rid.eq(rid),
            port.rdata.eq(rd.data),
        ]
        with m.If(bus.rready):
            m.d.sync += r_valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += port.ready.eq(1)
                m.d.comb += [wr.addr.eq(port.addr), wr.data.eq(port.wdata),
                             wr.en.eq(Mux(port.write, (1 << nbytes) - 1, 0)),
                             rd.addr.eq(port.addr), rd.en.eq(port.read)]
                m.d.sync += port.rvalid.eq(port.read)
                with m.If(~port.read & ~port.write):
                    m.d.comb += bus.arready.eq(1)
                    with m.If(bus.arvalid):
                        m.d.sync += [addr.eq(bus.araddr >> shift), left.eq(bus.arlen + 1),
                                     bad.eq(outside(bus.araddr, bus.arlen)), rid.eq(bus.arid)]
                        m.next = "READ"
                    with m.Else():
                        m.d.comb += bus.awready.eq(1)
                        with m.If(bus.awvalid):
                            m.d.sync += [addr.eq(bus.awaddr >> shift),
                                         bad.eq(outside(bus.awaddr, bus.awlen)),
                                         rid.eq(bus.awid)]
                            m.next = "WRITE"
            with m.State("READ"):
                m.d.sync += port.rvalid.eq(0)
                # The read port holds its output while disabled, so a stalled beat stays put.
                issue = (left != 0) & (~r_valid | bus.rready)
                m.d.comb += [rd.addr.eq(addr), rd.en.eq(issue)]
                with m.If(issue):
                    m.d.sync += [addr.eq(addr + 1), left.eq(left - 1), r_valid.eq(1),
                                 r_last.eq(left == 1), r_bad.eq(bad)]
                with m.Elif((left == 0) & (~r_valid | bus.rready)):
                    m.next = "IDLE"
            with m.State("WRITE"):
                m.d.sync += port.rvalid.eq(0)
                m.d.comb += [bus.wready.eq(1), wr.addr.eq(addr), wr.data.eq(bus.wdata),
                             wr.en.eq(Mux(bus.wvalid & ~bad, bus.wstrb, 0))]
                with m.If(bus.wvalid):
                    m.d.sync += addr.eq(addr + 1)
                    with m.If(bus.wlast):
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [bus.bvalid.eq(1), bus.bid.eq(rid),
                             bus.bresp.eq(Mux(bad, AXIResp.SLVERR, AXIResp.OKAY))]
                with m.If(bus.bready):
                    m.next = "IDLE"
        return m
