"""Property 7 (issue 43) on `FrameParser`, the host link's receive stage: a frame with a bad
header CRC, a bad CRC-32 or a bad length never reaches the register bank.

The register bank is reached only through a request the parser hands the responder with
``good`` and no ``reject`` and a ``WRITE32`` or ``READ32`` type (hw/responder.py: one
AXI4-Lite access each). At every such request (the cycle it appears), the wrapper asserts
that the last bytes received (a shift register of the byte stream, independent of the
parser's state machine) are one well-formed frame of docs/host-link.md: the magic byte, that
type, a length of 8 (``WRITE32``: addr, value) or 4 (``READ32``: addr), the header CRC and
the CRC-32 right, and the request's ``seq``, ``addr`` and ``value`` the frame's.

The CRC is abstracted: the reference CRC of a frame's bytes is the parser's CRC unit
(`amaranth.lib.crc.Processor`, read by name), sampled with each byte: it must be 0 (the CRC
of nothing) at the byte after the magic byte, its low 16 bits must equal ``hcrc`` at
``hcrc``'s first byte, and it must equal ``crc32`` at ``crc32``'s first byte. An
independent bit-serial CRC-32 in the wrapper held, but took 159 s at depth 19 (the solver
must prove two XOR networks equal) instead of 5 s; the unit's arithmetic against zlib is
simulated (tests/test_host_link_stages.py), not proved here.

Assumptions: no reset; `BackToBackProperty`: a byte every cycle. Free: every byte, every gap
between bytes (`FrameParserProperty`; timeouts included), the ring's free space, the
responder's ``ready`` and ``served``. Geometry: ``max_request`` 16, ``window_bytes`` 64, a
ring of 4 words, ``timeout`` 3 (the register bank's requests do not depend on them).
Bounded: a ``READ32`` frame is 18 bytes and a ``WRITE32`` frame 22.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover

import hotline.hw.frame_parser as block
from hotline.contract.link import MAGIC, TYPES

from .runner import free_inputs, internal

__all__ = ["FrameParserProperty", "BackToBackProperty", "MUTATIONS", "FRAME_BYTES"]

# the frames that reach the register bank: type -> (payload length, whole frame in bytes)
FRAME_BYTES = {TYPES["WRITE32"]: (8, 22), TYPES["READ32"]: (4, 18)}

MUTATIONS = {
    "skip_crc": ("deliver(Cat(crc_got, byte) == crc.crc)", "deliver(Const(1))"),
    "skip_header_crc": ("(Cat(hcrc_lo, byte) != hcrc_exp) | ", ""),
    "skip_length_check": ("with m.If(length != n):", "with m.If(0):"),
}


def _le(data):
    """The little-endian number of the bytes ``data``."""
    return Cat(*data)


class FrameParserProperty(Elaboratable):
    """The wrapper, bytes with free gaps; ``module`` is `hotline.hw.frame_parser` or a mutant
    of it."""

    GAPS = True

    def __init__(self, module=block):
        self.dut = module.FrameParser(max_request=16, window_bytes=64, ring_words=4, timeout=3)
        self.ports = free_inputs(self.dut)

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        crc_unit, = internal(m, dut, platform, "crc.crc")
        if not self.GAPS:
            m.d.comb += Assume(dut.rx.valid)

        # the last bytes received, hist[0] the latest, each with the CRC unit's value in its
        # cycle (that of the bytes fed to it before)
        size = max(n for _, n in FRAME_BYTES.values())
        hist = [Signal(8, name=f"byte{i}") for i in range(size)]
        crcs = [Signal(32, name=f"crc{i}") for i in range(size)]
        with m.If(dut.rx.valid):
            m.d.sync += [hist[0].eq(dut.rx.payload), crcs[0].eq(crc_unit),
                         *(hist[i].eq(hist[i - 1]) for i in range(1, size)),
                         *(crcs[i].eq(crcs[i - 1]) for i in range(1, size))]

        # a request appears: valid now, and not the one that waited last cycle
        r = dut.requests
        waited = Signal()
        m.d.sync += waited.eq(r.valid & ~r.ready)
        req = r.payload
        reaches_bank = r.valid & ~waited & req.good & (req.reject == 0)
        for kind, (length, n) in FRAME_BYTES.items():
            frame, unit = hist[n - 1::-1], crcs[n - 1::-1]      # in arrival order
            header, hcrc = frame[1:8], frame[8:10]
            payload, crc = frame[10:10 + length], frame[10 + length:]
            with m.If(reaches_bank & (req.kind == kind)):
                m.d.comb += [
                    Assert(frame[0] == MAGIC),
                    Assert(header[0] == kind),
                    Assert(_le(header[3:7]) == length),
                    # the CRC unit: started at the magic byte (the CRC of nothing is 0); what
                    # it gives after the header and after the payload are its CRCs
                    Assert(unit[1] == 0),
                    Assert(_le(hcrc) == unit[8][:16]),
                    Assert(_le(crc) == unit[10 + length]),
                    Assert(req.seq == _le(header[1:3])),
                    Assert(req.addr == _le(payload[:4])),
                ]
                if length == 8:
                    m.d.comb += Assert(req.value == _le(payload[4:8]))
        m.d.comb += Cover(reaches_bank & (req.kind == TYPES["READ32" if self.GAPS else "WRITE32"]))
        return m


class BackToBackProperty(FrameParserProperty):
    """The same, a byte in every cycle: the depth reaches a ``WRITE32`` frame (with gaps the
    solver's time grows about 10x per step past 19)."""

    GAPS = False
