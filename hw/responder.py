"""Responder: the host link's answer stage: checked requests in, response frames out.

It serves one `Request` at a time (the parser holds one more) and then sends the response
frame, ``A5 | type | seq | length | hcrc | payload | crc32``, with both CRCs computed as the
bytes leave.

- A bad frame (``good`` = 0) gets ``NAK``; a ``BUSY`` reject, or a ``MEM_READ`` while
  committed ``MEM_WRITE`` words wait in the ring (``mem_pending``), gets ``BUSY``. Neither is
  cached.
- ``OPEN`` (a new session) is always run: ``open`` strobes (the ring drops its undrained
  words), the result buffers drop their beats, the cache is emptied, and the answer is
  ``DATA`` with the request's nonce.
- The ``seq`` of the last served request gets that request's cached response again, without
  running it again (``RESULTS`` replays the same beats from the `ReplayBuffer`s).
- Otherwise: a reject -> ``ERROR``; ``WRITE32``/``READ32`` -> one AXI4-Lite access on ``csr``
  -> ``ACK``/``DATA`` (``ERROR`` "csr error" on an error response); ``INFO`` -> the constants;
  ``RESULTS`` -> per result stream, count u32 then its buffered beats, each in the whole bytes
  of its payload width (`result_beat_bytes`);
  ``MEM_READ`` -> the window's words (``ERROR`` outside the window); the rest -> ``ACK``.

Ports: ``requests`` In; ``served`` Out (`Served`: the last served ``seq``, for the parser's
commit decision); ``csr`` AXI4-Lite master; ``mem`` window port (reads only); ``mem_idle``
Out (high unless a ``MEM_READ`` answer is using ``mem``); ``mem_pending`` In; ``open`` Out (a
strobe in the cycle an ``OPEN`` is taken); one In stream
per entry of ``results`` (each into a `ReplayBuffer` of ``result_depth`` beats); ``tx`` Out.
A CSR access reads ``addr`` and ``value`` from ``requests.payload`` after taking the request:
the parser's request register holds them until the next frame ends.

Timing: a request is taken the cycle it is offered while idle; its magic byte is offered 2
cycles later (NAK, BUSY), 3 (cached, ERROR, INFO, MEM_READ, ACK), 4 (RESULTS) or 3 after the CSR
response. Then one byte per cycle while ``tx.ready``, with pauses while the send register
refills: 2 cycles per 8-byte word of a ``MEM_READ`` (the window ready at once), at least 1 per
count and per beat of a ``RESULTS``. ``tx.ready`` low stalls the frame; the next request is taken the cycle after the last
CRC byte is accepted.
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.crc import Processor
from amaranth.lib.wiring import In, Out

from hotline.contract.link import MAGIC, TYPES, result_beat_bytes

from .axi import AXI4LiteSignature
from .link_layouts import BUSY, CSR, ERROR_MESSAGES, LINK_CRC32, WINDOW, Request, Served
from .replay_buffer import ReplayBuffer
from .window_ram import WindowPortSignature

__all__ = ["Responder"]

# Payload sources of a response.
_NONE, _VALUE, _INFO, _ERRMSG, _MEM, _RESULTS = range(6)


def _le_bytes(text, n=16):
    return int.from_bytes(text.encode().ljust(n, b"\0"), "little")


class Responder(wiring.Component):
    """Parameters: ``results`` {name: width}; ``result_depth``; ``window_bytes``,
    ``max_request``, ``clock_hz``, ``baud`` (the ``INFO`` answer; ``window_bytes`` also bounds
    ``MEM_READ``); ``csr_addr_width``; ``mem_addr_width`` (window word address bits)."""

    def __init__(self, results, *, result_depth, window_bytes, max_request, clock_hz, baud,
                 csr_addr_width, mem_addr_width):
        self.results = dict(results)
        self.result_depth = result_depth
        self.window_bytes, self.max_request = window_bytes, max_request
        self.clock_hz, self.baud = clock_hz, baud
        super().__init__({
            "requests": In(stream.Signature(Request)),
            "served": Out(Served),
            "csr": Out(AXI4LiteSignature(csr_addr_width)),
            "mem": Out(WindowPortSignature(mem_addr_width)),
            "mem_idle": Out(1),
            "mem_pending": In(1),
            "open": Out(1),
            **{name: In(stream.Signature(width)) for name, width in self.results.items()},
            "tx": Out(stream.Signature(8)),
        })

    def elaborate(self, platform):
        m = Module()
        T = TYPES
        nres = len(self.results)
        buffers = []
        for name, width in self.results.items():
            buf = ReplayBuffer(width, self.result_depth)
            m.submodules[f"replay_{name}"] = buf
            wiring.connect(m, wiring.flipped(getattr(self, name)), buf.i)
            m.d.comb += buf.clear.eq(self.open)
            buffers.append(buf)

        # s_*: the response being sent; c_*: the response of the last served seq (resent when
        # that seq comes again).
        s_kind, s_seq, s_src, s_len = Signal(8), Signal(16), Signal(3), Signal(32)
        c_kind, c_src, c_value, c_err = Signal(8), Signal(3), Signal(32), Signal(4)
        c_addr, c_len = Signal(32), Signal(32)
        last_valid, last_seq = Signal(), Signal(16)
        m.d.comb += [self.served.valid.eq(last_valid), self.served.seq.eq(last_seq)]
        replay = Signal()
        csr, mem, tx = self.csr, self.mem, self.tx
        req = self.requests.payload
        p_addr, p_value = req.addr, req.value
        counts = Array(b.count for b in buffers)
        nbytes = [result_beat_bytes(width) for width in self.results.values()]
        res_bytes = [Signal(32, name=f"res_bytes{i}") for i in range(nres)]
        info = Cat(Const(self.window_bytes, 32), Const(self.max_request, 32),
                   Const(self.clock_hz, 32), Const(self.baud, 32))
        messages = Array(Const(_le_bytes(ERROR_MESSAGES.get(i, "")), 128) for i in range(16))
        msg_len = Array(Const(len(ERROR_MESSAGES.get(i, "")), 5) for i in range(16))

        # The CRC-32 of the bytes sent after the magic byte (up to the previous cycle's).
        m.submodules.crc = crc = Processor(LINK_CRC32(8))
        hcrc_hi = Signal(8)  # the header CRC's second byte
        sh, sh_n = Signal(128), Signal(5)       # send register: bytes leave LSB first
        pay_left, t_idx = Signal(32), Signal(3)
        res_i, res_left, res_count_next = Signal(range(nres + 1)), Signal(32), Signal()
        mem_next, mem_words_left, mem_wait = Signal.like(mem.addr), Signal(32), Signal()
        accepted = tx.valid & tx.ready
        m.d.comb += crc.data.eq(tx.payload)

        def cache(kind_name, src, **extra):
            m.d.sync += [c_kind.eq(T[kind_name]), c_src.eq(src)]
            m.d.sync += [{"value": c_value, "err": c_err}[k].eq(v) for k, v in extra.items()]

        with m.FSM(name="server") as server:
            with m.State("IDLE"):
                m.d.comb += self.requests.ready.eq(1)
                with m.If(self.requests.valid):
                    m.d.sync += [s_seq.eq(req.seq), replay.eq(0)]
                    busy = (req.reject == BUSY) | ((req.kind == T["MEM_READ"])
                                                   & self.mem_pending)
                    with m.If(~req.good | busy):
                        m.d.sync += [s_kind.eq(Mux(req.good, T["BUSY"], T["NAK"])),
                                     s_src.eq(_NONE)]
                        m.next = "START"
                    with m.Elif((req.kind == T["OPEN"]) & (req.reject == 0)):
                        # A new session: forget the cache (this answer is not cached either)
                        # and what the last session left in the ring and the result buffers.
                        m.d.comb += self.open.eq(1)
                        m.d.sync += last_valid.eq(0)
                        cache("DATA", _VALUE, value=p_addr)
                        m.next = "RESPOND"
                    with m.Elif(last_valid & (req.seq == last_seq)):
                        m.d.sync += replay.eq(1)
                        m.next = "RESPOND"
                    with m.Else():
                        m.d.sync += [last_valid.eq(1), last_seq.eq(req.seq),
                                     c_addr.eq(p_addr), c_len.eq(p_value)]
                        with m.If(req.reject != 0):
                            cache("ERROR", _ERRMSG, err=req.reject)
                            m.next = "RESPOND"
                        with m.Elif(req.kind == T["WRITE32"]):
                            m.next = "CSR_WRITE"
                        with m.Elif(req.kind == T["READ32"]):
                            m.next = "CSR_READ"
                        with m.Elif(req.kind == T["INFO"]):
                            cache("DATA", _INFO)
                            m.next = "RESPOND"
                        with m.Elif(req.kind == T["RESULTS"]):
                            cache("DATA", _RESULTS)
                            m.next = "RESPOND"
                        with m.Elif(req.kind == T["MEM_READ"]):
                            end = Signal(33)
                            m.d.comb += end.eq(p_addr + p_value)
                            with m.If((p_addr[:3] != 0) | (p_value[:3] != 0)
                                      | (end > self.window_bytes)):
                                cache("ERROR", _ERRMSG, err=WINDOW)
                            with m.Else():
                                cache("DATA", _MEM)
                            m.next = "RESPOND"
                        with m.Else():  # LOOKUPS, SCATTER_KEYS, MEM_WRITE (committed), QUIT
                            cache("ACK", _NONE)
                            m.next = "RESPOND"
            with m.State("CSR_WRITE"):
                aw_done, w_done = Signal(), Signal()
                m.d.comb += [csr.awaddr.eq(p_addr), csr.awvalid.eq(~aw_done),
                             csr.wdata.eq(p_value), csr.wstrb.eq(0xF), csr.wvalid.eq(~w_done),
                             csr.bready.eq(aw_done & w_done)]
                with m.If(csr.awvalid & csr.awready):
                    m.d.sync += aw_done.eq(1)
                with m.If(csr.wvalid & csr.wready):
                    m.d.sync += w_done.eq(1)
                with m.If(csr.bvalid & aw_done & w_done):
                    m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                    with m.If(csr.bresp == 0):
                        cache("ACK", _NONE)
                    with m.Else():
                        cache("ERROR", _ERRMSG, err=CSR)
                    m.next = "RESPOND"
            with m.State("CSR_READ"):
                ar_done = Signal()
                m.d.comb += [csr.araddr.eq(p_addr), csr.arvalid.eq(~ar_done),
                             csr.rready.eq(ar_done)]
                with m.If(csr.arvalid & csr.arready):
                    m.d.sync += ar_done.eq(1)
                with m.If(csr.rvalid & ar_done):
                    m.d.sync += ar_done.eq(0)
                    with m.If(csr.rresp == 0):
                        cache("DATA", _VALUE, value=csr.rdata)
                    with m.Else():
                        cache("ERROR", _ERRMSG, err=CSR)
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.sync += [s_kind.eq(c_kind), s_src.eq(c_src)]
                with m.If(c_src == _RESULTS):
                    m.d.comb += [b.begin.eq(1) for b in buffers]
                    m.d.comb += [b.replay.eq(replay) for b in buffers]
                    m.next = "SIZE"  # the counts are valid from the next cycle
                with m.Else():
                    m.next = "START"
            with m.State("SIZE"):
                # Each stream's payload bytes in a register of its own, summed in START
                # (timing: a count, its product and the six-way sum in one cycle were the
                # board's critical path, 17.9 ns at the ULX3S's seed 1).
                m.d.sync += [t.eq(b.count * n) for t, b, n in zip(res_bytes, buffers, nbytes)]
                m.next = "START"
            with m.State("START"):
                m.d.sync += [sh_n.eq(0), res_i.eq(0), res_left.eq(0), res_count_next.eq(1),
                             mem_next.eq(c_addr[3:]), mem_words_left.eq(c_len[3:]),
                             mem_wait.eq(0)]
                length_of = {_NONE: 0, _VALUE: 4, _INFO: 16, _ERRMSG: msg_len[c_err], _MEM: c_len,
                             _RESULTS: 4 * nres + sum(res_bytes)}
                preload = {_VALUE: c_value, _INFO: info, _ERRMSG: messages[c_err]}
                with m.Switch(s_src):
                    for src, n in length_of.items():
                        with m.Case(src):
                            m.d.sync += [s_len.eq(n), pay_left.eq(n)]
                            if src in preload:
                                m.d.sync += [sh.eq(preload[src]), sh_n.eq(n)]
                m.next = "MAGIC"
            with m.State("MAGIC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(MAGIC)]
                with m.If(accepted):
                    m.d.comb += crc.start.eq(1)
                    m.d.sync += t_idx.eq(0)
                    m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += [tx.valid.eq(1),
                             tx.payload.eq(Cat(s_kind, s_seq, s_len).word_select(t_idx, 8))]
                with m.If(accepted):
                    m.d.comb += crc.valid.eq(1)
                    m.d.sync += t_idx.eq(t_idx + 1)
                    with m.If(t_idx == 6):
                        m.d.sync += t_idx.eq(0)
                        m.next = "HCRC"
            with m.State("HCRC"):
                # The CRC of the header is in ``crc`` until its first byte is sent.
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(Mux(t_idx[0], hcrc_hi, crc.crc[:8]))]
                with m.If(accepted):
                    m.d.comb += crc.valid.eq(1)
                    m.d.sync += [hcrc_hi.eq(crc.crc[8:16]), t_idx.eq(t_idx + 1)]
                    with m.If(t_idx == 1):
                        m.d.sync += t_idx.eq(0)
                        m.next = "PAYLOAD"
                        with m.If(s_len == 0):
                            m.next = "CRC"
            with m.State("PAYLOAD"):
                m.d.comb += [tx.valid.eq(sh_n != 0), tx.payload.eq(sh[:8])]
                with m.If(accepted):
                    m.d.comb += crc.valid.eq(1)
                    m.d.sync += [sh.eq(sh >> 8), sh_n.eq(sh_n - 1), pay_left.eq(pay_left - 1)]
                    with m.If(pay_left == 1):
                        m.next = "CRC"
                # Refill the send register from the response's source.
                with m.If((sh_n == 0) & (s_src == _MEM)):
                    with m.If(mem_wait):
                        with m.If(mem.rvalid):
                            m.d.sync += [sh.eq(mem.rdata), sh_n.eq(8), mem_wait.eq(0)]
                    with m.Elif(mem_words_left != 0):
                        m.d.comb += [mem.addr.eq(mem_next), mem.read.eq(1)]
                        with m.If(mem.ready):
                            m.d.sync += [mem_next.eq(mem_next + 1), mem_wait.eq(1),
                                         mem_words_left.eq(mem_words_left - 1)]
                with m.If((sh_n == 0) & (s_src == _RESULTS)):
                    with m.If(res_count_next):
                        m.d.sync += [sh.eq(counts[res_i]), sh_n.eq(4),
                                     res_left.eq(counts[res_i]), res_count_next.eq(0)]
                    with m.Elif(res_left == 0):
                        m.d.sync += [res_i.eq(res_i + 1), res_count_next.eq(1)]
                    with m.Else():
                        for i, b in enumerate(buffers):
                            with m.If(res_i == i):
                                m.d.comb += b.o.ready.eq(1)
                                with m.If(b.o.valid):
                                    m.d.sync += [sh.eq(b.o.payload), sh_n.eq(nbytes[i]),
                                                 res_left.eq(res_left - 1)]
            with m.State("CRC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(crc.crc.word_select(t_idx[:2], 8))]
                with m.If(accepted):
                    m.d.sync += t_idx.eq(t_idx + 1)
                    with m.If(t_idx == 3):
                        m.next = "IDLE"

        m.d.comb += self.mem_idle.eq(~server.ongoing("PAYLOAD") | (s_src != _MEM))
        return m
