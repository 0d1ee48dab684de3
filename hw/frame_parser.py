"""FrameParser: the host link's receive stage: bytes in, checked requests out.

It takes one byte per cycle and never stalls (``rx.ready`` is 1: a UART cannot be held off).
It hunts for the magic byte, checks the header CRC after the header (a bad one, or a length
over `MAX_PAYLOAD`, ends the frame at once), then checks the request's length against its type
and the ring's free space, and the CRC-32 after the payload. After a bad header it hunts again
from the byte after the header (the header's own bytes are not rescanned). A frame whose
bytes stop for ``timeout`` cycles is dropped without an answer.

Ports:

- ``rx`` In: the byte stream.
- ``ring`` Out (`RingFillSignature`): a ``LOOKUPS``, ``SCATTER_KEYS``, ``CAM_CMDS`` or
  ``MEM_WRITE`` payload
  is written into the `CommitRing` as it arrives, one word per 8 bytes, in the cycle of its
  last byte. The frame's words are committed in the cycle of its last CRC byte when the frame
  is good, its ``seq`` is not ``served.seq``, it is not rejected and no request is waiting;
  otherwise they are rolled back (also on a bad header or a timeout).
- ``requests`` Out (`Request`): every frame that ends (good or with a bad header or CRC; a
  timed-out one is not a frame), one cycle after its last byte. The request register holds
  one frame; a frame that ends while it is full is dropped (its words are rolled back and the
  host resends it after its timeout).
- ``served`` In (`Served`): the responder's last served ``seq``.
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.crc import Processor
from amaranth.lib.wiring import In, Out

from hotline.contract.link import MAGIC, MAX_PAYLOAD, TYPES

from .link_layouts import (BAD_LENGTH, BUSY, LINK_CRC32, TOO_LONG, UNKNOWN, WINDOW, Request,
                           RingFillSignature, RingTag, Served)

__all__ = ["FrameParser"]


class FrameParser(wiring.Component):
    """Parameters: ``max_request`` (bytes: the longest ring payload), ``window_bytes`` (a
    ``MEM_WRITE`` must fit the window), ``ring_words`` (the `CommitRing`'s depth), ``timeout``
    (cycles of silence that drop a partial frame)."""

    def __init__(self, *, max_request, window_bytes, ring_words, timeout):
        self.max_request, self.window_bytes = max_request, window_bytes
        self.ring_bits = (ring_words - 1).bit_length() + 1
        self.timeout = timeout
        super().__init__({
            "rx": In(stream.Signature(8)),
            "ring": Out(RingFillSignature(self.ring_bits)),
            "requests": Out(stream.Signature(Request)),
            "served": In(Served),
        })

    def elaborate(self, platform):
        m = Module()
        T = TYPES
        ring = self.ring
        byte = self.rx.payload
        got = self.rx.valid
        m.d.comb += self.rx.ready.eq(1)
        # The CRC-32 of the bytes after the magic byte: ``crc.crc`` is that of the bytes up to
        # the previous cycle's.
        m.submodules.crc = crc = Processor(LINK_CRC32(8))
        m.d.comb += crc.data.eq(byte)
        kind, seq, length = Signal(8), Signal(16), Signal(32)
        hcrc_exp, hcrc_lo = Signal(16), Signal(8)
        idx = Signal(32)
        args = Signal(64)
        word = Signal(64)
        crc_got = Signal(24)
        reject = Signal(4)
        store = Signal()
        silence = Signal(range(self.timeout + 1))

        # The request register (one frame waits here while the responder is busy).
        pend = Signal()
        p_good, p_kind, p_seq = Signal(), Signal(8), Signal(16)
        p_args, p_reject = Signal(64), Signal(4)
        r = self.requests
        m.d.comb += [r.valid.eq(pend), r.payload.good.eq(p_good), r.payload.kind.eq(p_kind),
                     r.payload.seq.eq(p_seq), r.payload.addr.eq(p_args[:32]),
                     r.payload.value.eq(p_args[32:]), r.payload.reject.eq(p_reject)]
        with m.If(r.ready):
            m.d.sync += pend.eq(0)

        header_len = Cat(length[8:32], byte)  # the length once its last byte is in

        def deliver(good):
            with m.If(~pend):
                m.d.sync += [pend.eq(1), p_good.eq(good), p_kind.eq(kind), p_seq.eq(seq),
                             p_args.eq(args), p_reject.eq(reject)]
            new = (~pend & good & store & (reject == 0)
                   & ~(self.served.valid & (seq == self.served.seq)))
            with m.If(new):
                m.d.comb += ring.commit.eq(1)
                with m.If(kind == T["MEM_WRITE"]):
                    m.d.comb += ring.mem_words.eq(length[3:] - 1)
            with m.Else():
                m.d.comb += ring.rollback.eq(1)

        m.d.sync += silence.eq(Mux(got, 0, Mux(silence == self.timeout, silence, silence + 1)))

        def drop_if_stale():
            with m.Elif(silence == self.timeout):  # the rest of the frame is not coming
                m.d.comb += ring.rollback.eq(1)
                m.next = "HUNT"
        with m.FSM(name="rx_fsm"):
            with m.State("HUNT"):
                with m.If(got & (byte == MAGIC)):
                    m.d.comb += crc.start.eq(1)
                    m.d.sync += idx.eq(0)
                    m.next = "HEADER"
            with m.State("HEADER"):
                with m.If(got):
                    m.d.comb += crc.valid.eq(1)
                    m.d.sync += idx.eq(idx + 1)
                    with m.Switch(idx):
                        with m.Case(0):
                            m.d.sync += kind.eq(byte)
                        with m.Case(1, 2):
                            m.d.sync += seq.word_select(idx[1], 8).eq(byte)
                        with m.Case(3, 4, 5):
                            m.d.sync += length.eq(Cat(length[8:32], byte))
                        with m.Case(6):
                            m.d.sync += length.eq(header_len)
                        with m.Case(7):  # the CRC of the 7 bytes type, seq and length is in
                            m.d.sync += [hcrc_lo.eq(byte), hcrc_exp.eq(crc.crc[:16])]
                        with m.Case(8):
                            with m.If((Cat(hcrc_lo, byte) != hcrc_exp) | (length > MAX_PAYLOAD)):
                                m.d.sync += [reject.eq(0), store.eq(0)]
                                deliver(Const(0))
                                m.next = "HUNT"
                            with m.Else():
                                m.d.sync += [idx.eq(0), store.eq(0), reject.eq(0), args.eq(0)]
                                self._check_header(m, kind, length, ring.free, reject, store)
                                m.next = "PAYLOAD"
                                with m.If(length == 0):
                                    m.next = "CRC"
                drop_if_stale()
            with m.State("PAYLOAD"):
                with m.If(got):
                    m.d.comb += crc.valid.eq(1)
                    m.d.sync += [idx.eq(idx + 1), word.word_select(idx[:3], 8).eq(byte)]
                    with m.If(idx < 8):
                        m.d.sync += args.word_select(idx[:3], 8).eq(byte)
                    full = Cat(word[:56], byte)
                    tag = Signal(RingTag.BITS)
                    m.d.comb += tag.eq(Mux(kind == T["LOOKUPS"], RingTag.LOOKUP,
                                       Mux(kind == T["SCATTER_KEYS"], RingTag.SCATTER,
                                           Mux(kind == T["CAM_CMDS"], RingTag.CAM,
                                               Mux(idx < 8, RingTag.ADDR, RingTag.MEMDATA)))))
                    with m.If((idx[:3] == 7) & store):
                        m.d.comb += [ring.words.payload.eq(Cat(full, tag)),
                                     ring.words.valid.eq(1)]
                        with m.If((kind == T["MEM_WRITE"]) & (idx == 7)):
                            addr = full[:32]
                            with m.If((addr[:3] != 0) |
                                      (addr + (length - 8) > self.window_bytes)):
                                m.d.sync += [reject.eq(WINDOW), store.eq(0)]
                    with m.If(idx == length - 1):
                        m.d.sync += idx.eq(0)
                        m.next = "CRC"
                drop_if_stale()
            with m.State("CRC"):
                with m.If(got):
                    m.d.sync += [idx.eq(idx + 1), crc_got.word_select(idx[:2], 8).eq(byte)]
                    with m.If(idx == 3):
                        deliver(Cat(crc_got, byte) == crc.crc)
                        m.next = "HUNT"
                drop_if_stale()
        return m

    def _check_header(self, m, kind, length, free_words, reject, store):
        """Decide, from a good header, whether the payload is stored and what to answer."""
        T = TYPES
        fixed = {T["WRITE32"]: 8, T["READ32"]: 4, T["MEM_READ"]: 8, T["RESULTS"]: 0,
                 T["INFO"]: 0, T["QUIT"]: 0, T["OPEN"]: 4}
        with m.Switch(kind):
            for k, n in fixed.items():
                with m.Case(k):
                    with m.If(length != n):
                        m.d.sync += reject.eq(BAD_LENGTH)
            with m.Case(T["LOOKUPS"], T["SCATTER_KEYS"], T["CAM_CMDS"], T["MEM_WRITE"]):
                with m.If((length[:3] != 0) | ((kind == T["MEM_WRITE"]) & (length == 0))):
                    m.d.sync += reject.eq(BAD_LENGTH)
                with m.Elif(length > self.max_request):
                    m.d.sync += reject.eq(TOO_LONG)
                with m.Elif(length[3:] > free_words):
                    m.d.sync += reject.eq(BUSY)
                with m.Else():
                    m.d.sync += store.eq(1)
            with m.Default():
                m.d.sync += reject.eq(UNKNOWN)
