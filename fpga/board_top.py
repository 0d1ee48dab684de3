"""A board's design: HotlineAccelerator + UART host link + on-board memory window.

`BoardTop(spec)` is the whole design behind two pins, ``rx`` and ``tx`` (8N1 at
``spec.baud``): the `HostLinkBridge` turns link frames into CSR accesses (AXI4-Lite into the
accelerator's CSR bank), lookup and scatter-key beats, result responses and memory-window
accesses; the accelerator's AXI4 master reads and writes a `WindowRAM` of
``spec.window_bytes`` standing in for host memory (bus addresses ``0 .. window_bytes``; beyond
it every access answers SLVERR and touches nothing). The board co-simulation runs exactly this
component; `BoardBuild` puts it on the board's pins.

On a PCIe board the window goes away: the accelerator's ``bus`` (AXI4 master) connects to the
PCIe core's AXI slave bridge (DMA into host memory, as verilog-pcie's or the vendor's), the
CSR bank hangs off a BAR through an AXI4-Lite master, and the streams are fed by the host's
DMA queues instead of the UART bridge.
"""
from amaranth import *
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.streams import RESULT_STREAMS
from hotline.hw.accelerator import HotlineAccelerator
from hotline.hw.host_link import HostLinkBridge
from hotline.hw.uart import UARTRx, UARTTx
from hotline.hw.window_ram import WindowRAM

__all__ = ["BoardTop", "BoardBuild", "uart_pins"]


class BoardTop(wiring.Component):
    """``rx`` In (UART from the host), ``tx`` Out (UART to the host); runs in ``sync``.
    ``timeout``: cycles of line silence that drop a partial frame (default 10 ms)."""

    def __init__(self, spec, timeout=None):
        self.spec = spec
        self.accelerator = HotlineAccelerator.from_config(spec.config, spec.data_width, 32,
                                                          spec.num_tables, learner=spec.learner)
        acc = self.accelerator
        self.bridge = HostLinkBridge(
            {name: Shape.cast(getattr(acc, name).payload.shape()).width
             for name in RESULT_STREAMS},
            window_bytes=spec.window_bytes, max_request=spec.max_request,
            result_depth=spec.result_depth, clock_hz=spec.clock_hz, baud=spec.baud,
            timeout=timeout or spec.clock_hz // 100)
        self.window = WindowRAM(spec.window_bytes, 32, spec.data_width)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        acc, bridge, window = self.accelerator, self.bridge, self.window
        m.submodules.accelerator = acc
        m.submodules.bridge = bridge
        m.submodules.window = window
        m.submodules.uart_rx = urx = UARTRx(self.spec.divisor)
        m.submodules.uart_tx = utx = UARTTx(self.spec.divisor)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]
        wiring.connect(m, urx.o, bridge.rx)
        wiring.connect(m, bridge.tx, utx.i)
        wiring.connect(m, bridge.csr, acc.axil)
        wiring.connect(m, acc.bus, window.bus)
        wiring.connect(m, bridge.mem, window.port)
        for src, dst in ((bridge.lookups, acc.lookups), (bridge.scatter_keys, acc.scatter_keys),
                         (bridge.cam_cmds, acc.cam_cmds)):
            width = Shape.cast(dst.payload.shape()).width
            m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready),
                         dst.payload.eq(src.payload[:width])]
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


class BoardBuild(Elaboratable):
    """`BoardTop` on a platform's pins: UART resource ``uart`` 0, the default clock."""

    def __init__(self, spec):
        self.spec = spec

    def elaborate(self, platform):
        m = Module()
        m.submodules.top = top = BoardTop(self.spec)
        rx, tx = uart_pins(m, platform)
        m.d.comb += [top.rx.eq(rx), tx.eq(top.tx)]
        return m
