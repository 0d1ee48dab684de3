"""AXI4 and AXI4-Lite interface signatures (master view) and protocol constants.

Members are flat and named as in the AMBA specification (``awaddr``, ``rdata``, ...), so an
exported component's port ``bus`` becomes ``bus__awaddr`` etc., which cocotbext-axi binds with
``AxiBus.from_prefix(dut, "bus", bus_separator="__")`` (``AxiLiteBus`` likewise). Both
signatures are in the master's direction: a master declares ``Out(AXI4Signature(...))``, a
slave ``In(...)`` (or ``Out(...).flip()``).

``AXI4Signature`` carries only the signals the row DMA needs (no lock/qos/region/user); the
write and read channels have IDs (``id_width`` bits) and ``wlast``/``rlast`` even for a master
that uses a single ID, because cocotbext-axi requires them.
"""
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AXIResp", "AXIBurst", "AXI4Signature", "AXI4LiteSignature"]


class AXIResp(enum.Enum, shape=2):
    """``xRESP`` codes."""
    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


class AXIBurst(enum.Enum, shape=2):
    """``AxBURST`` codes."""
    FIXED = 0
    INCR = 1
    WRAP = 2


def _check(addr_width, data_width, allowed):
    if not 1 <= addr_width <= 64:
        raise ValueError(f"addr_width must be 1..64, not {addr_width}")
    if data_width not in allowed:
        raise ValueError(f"data_width must be one of {allowed}, not {data_width}")


class AXI4Signature(wiring.Signature):
    """AXI4 (full) master interface: AW, W, B, AR, R channels, INCR bursts of up to 256 beats."""

    def __init__(self, addr_width, data_width, id_width=1):
        _check(addr_width, data_width, (8, 16, 32, 64, 128, 256, 512, 1024))
        if id_width < 1:
            raise ValueError(f"id_width must be at least 1, not {id_width}")
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        strb = data_width // 8
        super().__init__({
            # write address
            "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
            "awburst": Out(2), "awcache": Out(4), "awprot": Out(3),
            "awvalid": Out(1), "awready": In(1),
            # write data
            "wdata": Out(data_width), "wstrb": Out(strb), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
            # write response
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            # read address
            "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
            "arburst": Out(2), "arcache": Out(4), "arprot": Out(3),
            "arvalid": Out(1), "arready": In(1),
            # read data
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (type(other) is type(self) and (self.addr_width, self.data_width, self.id_width)
                == (other.addr_width, other.data_width, other.id_width))

    def __hash__(self):
        return hash((type(self), self.addr_width, self.data_width, self.id_width))

    def __repr__(self):
        return f"AXI4Signature({self.addr_width}, {self.data_width}, id_width={self.id_width})"


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite master interface (single-beat transfers, no IDs, no bursts)."""

    def __init__(self, addr_width, data_width=32):
        _check(addr_width, data_width, (32, 64))
        self.addr_width, self.data_width = addr_width, data_width
        super().__init__({
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8),
            "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (type(other) is type(self)
                and (self.addr_width, self.data_width) == (other.addr_width, other.data_width))

    def __hash__(self):
        return hash((type(self), self.addr_width, self.data_width))

    def __repr__(self):
        return f"AXI4LiteSignature({self.addr_width}, {self.data_width})"
