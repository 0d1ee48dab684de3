"""HostLinkBridge: the host link (`hotline.contract.link` frames) in gateware, between a byte
stream (a UART) and the accelerator's CSR bus, lookup streams, result streams and memory window.

Three stages, wired here:

- `FrameParser` (``frame_parser.py``): bytes in at one per cycle, never stalled (a UART cannot
  be held off); header CRC, length and CRC-32 checks; a request out per frame, and the
  ``LOOKUPS``, ``SCATTER_KEYS``, ``CAM_CMDS`` and ``MEM_WRITE`` payload words into the ring as
  they arrive.
  A frame whose bytes stop for ``timeout`` cycles is dropped. After a bad header it hunts for
  the next magic byte after the header (the header's own bytes are not rescanned, so a stray
  magic byte costs the frame behind it one NAK and resend).
- `CommitRing` (``commit_ring.py``): the payload words, committed only when the frame's CRC is
  good and its ``seq`` is new (so a corrupted or repeated frame never reaches the accelerator
  or memory), drained into ``lookups`` / ``scatter_keys`` / ``cam_cmds`` / the memory port in
  arrival order
  while later frames are served (a batch blocked on full result streams does not block the
  ``RESULTS`` that unblocks it). A ring frame that does not fit its free space is answered
  ``BUSY``.
- `Responder` (``responder.py``): serves one request at a time (one more may wait in the
  parser) and sends its response frame. A bad header or CRC -> ``NAK``; the ``seq`` of the
  last served frame -> its response again (``RESULTS`` replays the same beats from the
  `ReplayBuffer`s); otherwise ``WRITE32``/``READ32`` become AXI4-Lite accesses on ``csr``,
  ``RESULTS`` sends every beat buffered per result stream (count u32, then each beat in the whole
  bytes of its payload width),
  ``MEM_READ`` reads the window (answered ``BUSY`` while committed ``MEM_WRITE`` words are still
  in the ring: waiting could deadlock behind lookups stalled on full result buffers, which only
  the host's next ``RESULTS`` frees), ``INFO`` returns the constants, ``QUIT`` is acknowledged,
  ``OPEN`` starts a session (the cache is emptied, the ring's undrained words and the result
  buffers' beats are dropped; never answered from the cache).
  Malformed requests get ``ERROR`` with a short message.

The memory port is the responder's while it sends a ``MEM_READ`` payload, the ring's
otherwise. The stages' interfaces are in ``link_layouts.py``.

Ports: ``rx`` In / ``tx`` Out byte streams; ``csr`` AXI4-Lite master; ``mem``
`WindowPortSignature` master; ``lookups``, ``scatter_keys`` Out 64-bit streams; one In stream
per entry of ``results`` (name -> payload width, in response order).
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import AXI4LiteSignature
from .commit_ring import CommitRing
from .frame_parser import FrameParser
from .link_layouts import ERROR_MESSAGES
from .responder import Responder
from .window_ram import WindowPortSignature

__all__ = ["HostLinkBridge", "ERROR_MESSAGES"]


class HostLinkBridge(wiring.Component):
    """Parameters: ``results`` {name: width}; ``window_bytes`` (the memory window);
    ``max_request`` (bytes, a multiple of 8: largest ring request payload; the ring holds two);
    ``result_depth`` (beats buffered per result stream); ``clock_hz``/``baud`` (reported by
    ``INFO``); ``timeout`` (cycles of silence that drop a partial frame)."""

    def __init__(self, results, *, window_bytes, max_request=2048, result_depth=512,
                 clock_hz=0, baud=0, timeout=1 << 20, csr_addr_width=12):
        if max_request % 8 or max_request < 16:
            raise ValueError(f"max_request must be a multiple of 8 >= 16, not {max_request}")
        self.results = dict(results)
        self.window_bytes, self.max_request = window_bytes, max_request
        self.ring_words = 1 << (2 * max_request // 8 - 1).bit_length()
        self.result_depth, self.clock_hz, self.baud = result_depth, clock_hz, baud
        self.timeout = timeout
        window_words = window_bytes // 8
        super().__init__({
            "rx": In(stream.Signature(8)),
            "tx": Out(stream.Signature(8)),
            "csr": Out(AXI4LiteSignature(csr_addr_width)),
            "mem": Out(WindowPortSignature(max(1, (window_words - 1).bit_length()))),
            "lookups": Out(stream.Signature(64)),
            "scatter_keys": Out(stream.Signature(64)),
            "cam_cmds": Out(stream.Signature(64)),
            **{name: In(stream.Signature(width)) for name, width in self.results.items()},
        })

    def elaborate(self, platform):
        m = Module()
        mem_bits = len(self.mem.addr)
        m.submodules.parser = parser = FrameParser(
            max_request=self.max_request, window_bytes=self.window_bytes,
            ring_words=self.ring_words, timeout=self.timeout)
        m.submodules.ring = ring = CommitRing(self.ring_words, mem_bits)
        m.submodules.responder = responder = Responder(
            self.results, result_depth=self.result_depth, window_bytes=self.window_bytes,
            max_request=self.max_request, clock_hz=self.clock_hz, baud=self.baud,
            csr_addr_width=len(self.csr.awaddr), mem_addr_width=mem_bits)

        wiring.connect(m, wiring.flipped(self.rx), parser.rx)
        wiring.connect(m, parser.ring, ring.fill)
        wiring.connect(m, parser.requests, responder.requests)
        m.d.comb += [parser.served.eq(responder.served), ring.flush.eq(responder.open)]
        wiring.connect(m, ring.lookups, wiring.flipped(self.lookups))
        wiring.connect(m, ring.scatter_keys, wiring.flipped(self.scatter_keys))
        wiring.connect(m, ring.cam_cmds, wiring.flipped(self.cam_cmds))
        wiring.connect(m, responder.csr, wiring.flipped(self.csr))
        for name in self.results:
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(responder, name))
        wiring.connect(m, responder.tx, wiring.flipped(self.tx))

        # The memory port: the responder's MEM_READ, otherwise the ring's MEM_WRITE words.
        mem = self.mem
        m.d.comb += [responder.mem_pending.eq(ring.mem_pending),
                     ring.mem_grant.eq(responder.mem_idle), mem.addr.eq(responder.mem.addr), mem.read.eq(responder.mem.read),
                     responder.mem.ready.eq(mem.ready), responder.mem.rdata.eq(mem.rdata),
                     responder.mem.rvalid.eq(mem.rvalid), ring.mem.ready.eq(mem.ready)]
        with m.If(responder.mem_idle):
            m.d.comb += [mem.addr.eq(ring.mem.addr), mem.wdata.eq(ring.mem.wdata),
                         mem.write.eq(ring.mem.write)]
        return m
