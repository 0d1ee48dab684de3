"""A board's design: HotlineAccelerator + UART host link + on-board memory window, and its clocks.

`BoardTop(spec)` is the whole design behind two pins, ``rx`` and ``tx`` (8N1 at
``spec.baud``), in two clock domains: ``uart`` (``spec.uart_hz``, the UART alone) and
``sync`` (``spec.core_hz``, everything else); a `UARTLink` carries the bytes between them
through two AsyncFIFOs. The `HostLinkBridge` turns link frames into CSR accesses (AXI4-Lite into the
accelerator's CSR bank), lookup and scatter-key beats, result responses and memory-window
accesses; the accelerator's AXI4 master reads and writes a `WindowRAM` of
``spec.window_bytes`` standing in for host memory (bus addresses ``0 .. window_bytes``; beyond
it every access answers SLVERR and touches nothing).

`BoardClocks(spec)` makes both domains from the oscillator: the board's EHXPLLL
(`hotline.fpga.ecp5_pll`), CLKOP -> ``sync``, CLKOS -> ``uart``, each domain held in reset
until the PLL locks (a `ResetSynchronizer` per domain). `BoardSim` (oscillator pin + clocks +
top) is what the board co-simulation runs, with a behavioural EHXPLLL; `BoardBuild` puts the
same on the board's pins.

On a PCIe board the window goes away: the accelerator's ``bus`` (AXI4 master) connects to the
PCIe core's AXI slave bridge (DMA into host memory, as verilog-pcie's or the vendor's), the
CSR bank hangs off a BAR through an AXI4-Lite master, and the streams are fed by the host's
DMA queues instead of the UART bridge.
"""
from amaranth import *
from amaranth.lib import io, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from hotline.contract.streams import RESULT_STREAMS
from hotline.hw.accelerator import HotlineAccelerator
from hotline.hw.host_link import HostLinkBridge
from hotline.hw.lib.register_slice import RegisterSlice
from hotline.hw.uart_link import UARTLink, min_sync_hz
from hotline.hw.window_ram import WindowRAM

from .ecp5_pll import ECP5PLL

__all__ = ["BoardTop", "BoardClocks", "BoardSim", "BoardBuild", "uart_pins"]


class BoardTop(wiring.Component):
    """``rx`` In (UART from the host), ``tx`` Out (UART to the host), both in domain ``uart``;
    the rest runs in ``sync``. ``timeout``: ``sync`` cycles of line silence that drop a partial
    frame (default 10 ms)."""

    def __init__(self, spec, timeout=None):
        if spec.core_hz < min_sync_hz(spec.uart_hz, spec.divisor, spec.rx_depth):
            raise ValueError(f"{spec.name}: the accelerator clock is too slow to drain the UART")
        if spec.config.lanes != 1:
            # The bridge's input streams are one link word per beat (HostLinkBridge).
            raise ValueError(f"{spec.name}: a board top takes one lookup lane, not "
                             f"{spec.config.lanes}")
        self.spec = spec
        self.accelerator = HotlineAccelerator.from_config(spec.config, spec.data_width, 32,
                                                          spec.num_tables, learner=spec.learner)
        acc = self.accelerator
        self.bridge = HostLinkBridge(
            {name: Shape.cast(getattr(acc, name).payload.shape()).width
             for name in RESULT_STREAMS},
            window_bytes=spec.window_bytes, max_request=spec.max_request,
            result_depth=spec.result_depth, clock_hz=spec.core_hz, baud=spec.baud,
            timeout=timeout or spec.core_hz // 100)
        self.window = WindowRAM(spec.window_bytes, 32, spec.data_width)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        acc, bridge, window = self.accelerator, self.bridge, self.window
        m.submodules.accelerator = acc
        m.submodules.bridge = bridge
        m.submodules.window = window
        m.submodules.uart = uart = UARTLink(self.spec.divisor, rx_depth=self.spec.rx_depth)
        m.d.comb += [uart.rx.eq(self.rx), self.tx.eq(uart.tx)]
        wiring.connect(m, uart.o, bridge.rx)
        wiring.connect(m, bridge.tx, uart.i)
        wiring.connect(m, bridge.csr, acc.axil)
        wiring.connect(m, acc.bus, window.bus)
        wiring.connect(m, bridge.mem, window.port)
        # A register slice between the bridge's request ring and each accelerator input: the
        # ring's block RAM read (no output register) decided, through the accelerator's ready,
        # whether the ring advanced (21 ns at the ULX3S's seed 1: the sync domain's critical
        # path, through the CAM pipeline's room).
        for name in ("lookups", "scatter_keys", "cam_cmds"):
            src, dst = getattr(bridge, name), getattr(acc, name)
            width = Shape.cast(dst.payload.shape()).width
            m.submodules[f"{name}_slice"] = cut = RegisterSlice(width)
            m.d.comb += [cut.i.valid.eq(src.valid), src.ready.eq(cut.i.ready),
                         cut.i.payload.eq(src.payload[:width])]
            wiring.connect(m, cut.o, dst)
        for name in RESULT_STREAMS:
            src, dst = getattr(acc, name), getattr(bridge, name)
            m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready),
                         dst.payload.eq(src.payload)]
        return m


def uart_pins(m, platform):
    """The platform's ``uart`` 0 rx and tx pins (only those: not rts/dtr) as (rx, tx) values."""
    uart = platform.request("uart", 0, dir="-")
    m.submodules.rx_pin = rx_pin = io.Buffer("i", uart.rx)
    m.submodules.tx_pin = tx_pin = io.Buffer("o", uart.tx)
    return rx_pin.i, tx_pin.o


class BoardClocks(wiring.Component):
    """Domains ``sync`` and ``uart`` from ``clkin`` (In: the oscillator). With ``spec.pll``: the
    EHXPLLL of ``spec.pll_settings``; each domain's reset is asserted while the PLL is not
    locked and released synchronously to that domain's clock. Without: both domains run on
    ``clkin`` and are never reset (the FPGA's initial values). ``locked`` Out."""

    def __init__(self, spec):
        self.spec = spec
        super().__init__({"clkin": In(1), "locked": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        m.domains.uart = uart = ClockDomain("uart")
        if self.spec.pll:
            # No clock constraints here: nextpnr derives each output's from the oscillator's
            # and the PLL's dividers, an independent check of them (`build_board` compares).
            m.submodules.pll = pll = ECP5PLL(self.spec.pll_settings)
            m.d.comb += [pll.clkin.eq(self.clkin), sync.clk.eq(pll.clk[0]),
                         uart.clk.eq(pll.clk[1]), self.locked.eq(pll.locked)]
        else:
            m.d.comb += [sync.clk.eq(self.clkin), uart.clk.eq(self.clkin), self.locked.eq(1)]
        # The AsyncFIFOs empty on their write domain's reset; both domains leave reset once
        # the PLL has locked, each in step with its own clock.
        m.submodules.sync_reset = ResetSynchronizer(~self.locked, domain="sync")
        m.submodules.uart_reset = ResetSynchronizer(~self.locked, domain="uart")
        return m


class BoardSim(wiring.Component):
    """`BoardClocks` + `BoardTop` behind three pins: ``clk`` In (the oscillator), ``rx`` In,
    ``tx`` Out. The board co-simulation exports this, with a behavioural EHXPLLL."""

    def __init__(self, spec):
        self.spec = spec
        self.top = BoardTop(spec)
        super().__init__({"clk": In(1), "rx": In(1, init=1), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.clocks = clocks = BoardClocks(self.spec)
        m.submodules.top = top = self.top
        m.d.comb += [clocks.clkin.eq(self.clk), top.rx.eq(self.rx), self.tx.eq(top.tx)]
        return m


class BoardBuild(Elaboratable):
    """`BoardTop` on a platform's pins: UART resource ``uart`` 0; the default clock (the
    oscillator) into `BoardClocks`."""

    def __init__(self, spec):
        self.spec = spec

    def elaborate(self, platform):
        m = Module()
        m.submodules.clocks = clocks = BoardClocks(self.spec)
        m.submodules.top = top = BoardTop(self.spec)
        osc = platform.request(platform.default_clk, dir="-")
        m.submodules.osc_pin = osc_pin = io.Buffer("i", osc)
        m.d.comb += clocks.clkin.eq(osc_pin.i)
        rx, tx = uart_pins(m, platform)
        m.d.comb += [top.rx.eq(rx), tx.eq(top.tx)]
        return m
