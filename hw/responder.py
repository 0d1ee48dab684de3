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

Stages (each a `wiring.Component`): `ResponseServer` (the request, the CSR access and the
response cache) hands a `Response` to the `ResponseFramer` (header, CRCs, payload bytes), which
takes its payload words from a `MemReader` (``MEM_READ``) or a `ResultReader` (``RESULTS``,
the `ReplayBuffer`s), each through a `PayloadSourceSignature`.

Timing: a request is taken the cycle it is offered while idle; its magic byte is offered 2
cycles later (NAK, BUSY), 3 (cached, ERROR, INFO, MEM_READ, ACK), 4 (RESULTS) or 3 after the CSR
response. Then one byte per cycle while ``tx.ready``, with pauses while the send register
refills: 2 cycles per 8-byte word of a ``MEM_READ`` (the window ready at once), at least 1 per
count and per beat of a ``RESULTS``. ``tx.ready`` low stalls the frame; the next request is
taken the cycle after the last CRC byte is accepted.
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.crc import Processor
from amaranth.lib.wiring import In, Out

from hotline.contract.link import MAGIC, TYPES, result_beat_bytes

from .axi import AXI4LiteSignature
from .link_layouts import BUSY, CSR, ERROR_MESSAGES, LINK_CRC32, WINDOW, Request, Served
from .replay_buffer import ReplayBuffer
from .window_ram import WindowPortSignature

__all__ = ["Responder", "ResponseServer", "ResponseFramer", "MemReader", "ResultReader",
           "Response", "PayloadSourceSignature"]

# Payload sources of a response.
_NONE, _VALUE, _INFO, _ERRMSG, _MEM, _RESULTS = range(6)

# A response to send: its type, seq, payload source and whether its RESULTS beats are the
# previous response's again.
Response = data.StructLayout({"kind": 8, "seq": 16, "src": 3, "replay": 1})

# A payload word: its ``n`` bytes, lowest first, in ``data``.
_WORD = data.StructLayout({"data": 128, "n": 5})


def _le_bytes(text, n=16):
    return int.from_bytes(text.encode().ljust(n, b"\0"), "little")


class PayloadSourceSignature(wiring.Signature):
    """The framer's side of a payload source: ``start`` (a strobe in the cycle before the
    frame's magic byte is offered: restart), ``active`` (high while the frame's payload bytes,
    taken from this source, are being sent) and ``word`` (In stream: a word is taken in the
    cycle its ``valid`` meets ``ready``, which is high while ``active`` and the framer's send
    register is empty, and stays high until a word is taken). With ``results``, a
    `ResultReader`'s, also: ``begin`` and ``replay`` (its `ReplayBuffer`s'), ``size`` (a strobe
    in the cycle after ``begin``) and ``length`` (the payload bytes, from the cycle after
    ``size``)."""

    def __init__(self, results=False):
        members = {"start": Out(1), "active": Out(1), "word": In(stream.Signature(_WORD))}
        if results:
            members |= {"begin": Out(1), "replay": Out(1), "size": Out(1), "length": In(32)}
        super().__init__(members)


class ResponseServer(wiring.Component):
    """The request side of the `Responder`: ``requests`` -> ``response`` (see the module
    docstring for what each request gets).

    A request is taken in any cycle the server is idle. A bad or ``BUSY`` one gets its
    ``response`` offered in that same cycle (not cached); every other one in the cycle after
    it (or after the CSR response, for ``WRITE32``/``READ32``), from the cache. ``response``
    is always taken at once (the framer is idle whenever the server is); ``value``, ``err``,
    ``addr`` and ``len`` (the cached response's payload: the value, the error code, a
    ``MEM_READ``'s window address and length) hold still until ``done`` (a strobe: the
    response's last byte left), and the next request is taken in the cycle after ``done``.
    One request at a time: no pipelining.
    """

    def __init__(self, *, window_bytes, csr_addr_width):
        self.window_bytes = window_bytes
        super().__init__({
            "requests": In(stream.Signature(Request)),
            "served": Out(Served),
            "csr": Out(AXI4LiteSignature(csr_addr_width)),
            "mem_pending": In(1),
            "open": Out(1),
            "response": Out(stream.Signature(Response)),
            "value": Out(32), "err": Out(4), "addr": Out(32), "len": Out(32),
            "done": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        T = TYPES
        # c_*: the response of the last served seq (resent when that seq comes again).
        c_kind, c_src, c_value, c_err = Signal(8), Signal(3), Signal(32), Signal(4)
        c_addr, c_len = Signal(32), Signal(32)
        s_seq, replay = Signal(16), Signal()
        last_valid, last_seq = Signal(), Signal(16)
        m.d.comb += [self.served.valid.eq(last_valid), self.served.seq.eq(last_seq),
                     self.value.eq(c_value), self.err.eq(c_err), self.addr.eq(c_addr),
                     self.len.eq(c_len)]
        csr, out = self.csr, self.response
        req = self.requests.payload
        p_addr, p_value = req.addr, req.value

        def cache(kind_name, src, **extra):
            m.d.sync += [c_kind.eq(T[kind_name]), c_src.eq(src)]
            m.d.sync += [{"value": c_value, "err": c_err}[k].eq(v) for k, v in extra.items()]

        with m.FSM(name="server"):
            with m.State("IDLE"):
                m.d.comb += self.requests.ready.eq(1)
                with m.If(self.requests.valid):
                    m.d.sync += [s_seq.eq(req.seq), replay.eq(0)]
                    busy = (req.reject == BUSY) | ((req.kind == T["MEM_READ"])
                                                   & self.mem_pending)
                    with m.If(~req.good | busy):
                        m.d.comb += [out.valid.eq(1), out.payload.seq.eq(req.seq),
                                     out.payload.kind.eq(Mux(req.good, T["BUSY"], T["NAK"])),
                                     out.payload.src.eq(_NONE)]
                        m.next = "SEND"
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
                m.d.comb += [out.valid.eq(1), out.payload.kind.eq(c_kind),
                             out.payload.seq.eq(s_seq), out.payload.src.eq(c_src),
                             out.payload.replay.eq(replay)]
                m.next = "SEND"
            with m.State("SEND"):
                with m.If(self.done):
                    m.next = "IDLE"
        return m


class ResponseFramer(wiring.Component):
    """``response`` -> the frame's bytes on ``tx``: ``A5 | type | seq | length | hcrc |
    payload | crc32``, both CRCs computed as the bytes leave. The payload: nothing, ``value``
    (4 bytes), the ``INFO`` constants (16), error ``err``'s message, or the words of ``mem``
    (``len`` bytes, a ``MEM_READ``) or ``results`` (``length`` bytes, a ``RESULTS``).

    ``response.ready`` is high while idle. The magic byte is offered 2 cycles after a response
    is taken (3 for ``RESULTS``: ``results.begin`` strobes with the take, ``results.size`` in
    the cycle after, and ``results.length`` is read in the next). Then one byte per cycle
    while ``tx.ready``, with pauses while the send register waits for a payload word.
    ``done`` strobes in the cycle the last CRC byte is taken; idle from the next.
    ``value`` and ``err`` must hold still until ``done``.
    """

    def __init__(self, *, window_bytes, max_request, clock_hz, baud):
        self.info = Cat(Const(window_bytes, 32), Const(max_request, 32), Const(clock_hz, 32),
                        Const(baud, 32))
        super().__init__({
            "response": In(stream.Signature(Response)),
            "value": In(32), "err": In(4), "len": In(32),
            "done": Out(1),
            "mem": Out(PayloadSourceSignature()),
            "results": Out(PayloadSourceSignature(results=True)),
            "tx": Out(stream.Signature(8)),
        })

    def elaborate(self, platform):
        m = Module()
        tx, got = self.tx, self.response.payload
        s_kind, s_seq, s_src, s_len = Signal(8), Signal(16), Signal(3), Signal(32)
        messages = Array(Const(_le_bytes(ERROR_MESSAGES.get(i, "")), 128) for i in range(16))
        msg_len = Array(Const(len(ERROR_MESSAGES.get(i, "")), 5) for i in range(16))
        sources = {_MEM: self.mem, _RESULTS: self.results}

        # The CRC-32 of the bytes sent after the magic byte (up to the previous cycle's).
        m.submodules.crc = crc = Processor(LINK_CRC32(8))
        hcrc_hi = Signal(8)  # the header CRC's second byte
        sh, sh_n = Signal(128), Signal(5)       # send register: bytes leave LSB first
        pay_left, t_idx = Signal(32), Signal(3)
        accepted = tx.valid & tx.ready
        m.d.comb += crc.data.eq(tx.payload)

        with m.FSM(name="framer"):
            with m.State("IDLE"):
                m.d.comb += self.response.ready.eq(1)
                with m.If(self.response.valid):
                    m.d.sync += [s_kind.eq(got.kind), s_seq.eq(got.seq), s_src.eq(got.src)]
                    with m.If(got.src == _RESULTS):
                        m.d.comb += [self.results.begin.eq(1),
                                     self.results.replay.eq(got.replay)]
                        m.next = "SIZE"  # the counts are valid from the next cycle
                    with m.Else():
                        m.next = "START"
            with m.State("SIZE"):
                m.d.comb += self.results.size.eq(1)
                m.next = "START"
            with m.State("START"):
                m.d.sync += sh_n.eq(0)
                m.d.comb += [source.start.eq(1) for source in sources.values()]
                length_of = {_NONE: 0, _VALUE: 4, _INFO: 16, _ERRMSG: msg_len[self.err],
                             _MEM: self.len, _RESULTS: self.results.length}
                preload = {_VALUE: self.value, _INFO: self.info, _ERRMSG: messages[self.err]}
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
                for src, source in sources.items():
                    word = source.word
                    m.d.comb += [source.active.eq(s_src == src),
                                 word.ready.eq((s_src == src) & (sh_n == 0))]
                    with m.If(word.valid & word.ready):
                        m.d.sync += [sh.eq(word.payload.data), sh_n.eq(word.payload.n)]
            with m.State("CRC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(crc.crc.word_select(t_idx[:2], 8))]
                with m.If(accepted):
                    m.d.sync += t_idx.eq(t_idx + 1)
                    with m.If(t_idx == 3):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
        return m


class MemReader(wiring.Component):
    """A ``MEM_READ`` answer's payload source: the window words from byte ``addr`` (8-aligned)
    on, ``len`` bytes (a multiple of 8), read through ``mem`` one word at a time. ``addr`` and
    ``len`` are taken at ``source.start``. A word is read only while ``source.word.ready``
    (the send register is empty): the read is issued while ``mem.ready``, and its data,
    arriving with ``mem.rvalid``, are the word (8 bytes). So one word per 2 cycles at best;
    ``mem_idle`` is low while ``source.active`` (the port is this source's)."""

    def __init__(self, mem_addr_width):
        super().__init__({
            "source": In(PayloadSourceSignature()),
            "addr": In(32), "len": In(32),
            "mem": Out(WindowPortSignature(mem_addr_width)),
            "mem_idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        mem, word = self.mem, self.source.word
        mem_next, mem_words_left, mem_wait = Signal.like(mem.addr), Signal(32), Signal()
        m.d.comb += [self.mem_idle.eq(~self.source.active),
                     word.payload.data.eq(mem.rdata), word.payload.n.eq(8)]
        with m.If(self.source.start):
            m.d.sync += [mem_next.eq(self.addr[3:]), mem_words_left.eq(self.len[3:]),
                         mem_wait.eq(0)]
        with m.If(word.ready):
            with m.If(mem_wait):
                m.d.comb += word.valid.eq(mem.rvalid)
                with m.If(mem.rvalid):
                    m.d.sync += mem_wait.eq(0)
            with m.Elif(mem_words_left != 0):
                m.d.comb += [mem.addr.eq(mem_next), mem.read.eq(1)]
                with m.If(mem.ready):
                    m.d.sync += [mem_next.eq(mem_next + 1), mem_wait.eq(1),
                                 mem_words_left.eq(mem_words_left - 1)]
        return m


class ResultReader(wiring.Component):
    """A ``RESULTS`` answer's payload source, and the result streams' `ReplayBuffer`s (one of
    ``result_depth`` beats per entry of ``results`` {name: width}, fed by the In stream of that
    name; ``clear`` empties them all).

    ``source.begin`` (with ``source.replay``) starts a response in every buffer;
    ``source.size``, in the cycle after, registers each stream's payload bytes, so that
    ``source.length`` (4 bytes of count per stream, plus its beats' bytes) is valid from the
    next cycle. From ``source.start`` on, the words are: per stream, in order, its count (u32)
    and then its beats, each in the whole bytes of its width (`result_beat_bytes`). One word
    per cycle while beats are ready, plus a cycle between streams.
    """

    def __init__(self, results, result_depth):
        self.results, self.result_depth = dict(results), result_depth
        super().__init__({
            "source": In(PayloadSourceSignature(results=True)),
            "clear": In(1),
            **{name: In(stream.Signature(width)) for name, width in self.results.items()},
        })

    def elaborate(self, platform):
        m = Module()
        src = self.source
        nres = len(self.results)
        buffers = []
        for name, width in self.results.items():
            buf = ReplayBuffer(width, self.result_depth)
            m.submodules[f"replay_{name}"] = buf
            wiring.connect(m, wiring.flipped(getattr(self, name)), buf.i)
            m.d.comb += [buf.clear.eq(self.clear), buf.begin.eq(src.begin),
                         buf.replay.eq(src.replay)]
            buffers.append(buf)
        counts = Array(b.count for b in buffers)
        nbytes = [result_beat_bytes(width) for width in self.results.values()]

        # Each stream's payload bytes in a register of its own, summed in the framer's START
        # (timing: a count, its product and the six-way sum in one cycle were the board's
        # critical path, 17.9 ns at the ULX3S's seed 1).
        res_bytes = [Signal(32, name=f"res_bytes{i}") for i in range(nres)]
        with m.If(src.size):
            m.d.sync += [t.eq(b.count * n) for t, b, n in zip(res_bytes, buffers, nbytes)]
        m.d.comb += src.length.eq(4 * nres + sum(res_bytes))

        res_i, res_left, res_count_next = Signal(range(nres + 1)), Signal(32), Signal()
        word = src.word
        with m.If(src.start):
            m.d.sync += [res_i.eq(0), res_left.eq(0), res_count_next.eq(1)]
        with m.If(word.ready):
            with m.If(res_count_next):
                m.d.comb += [word.valid.eq(1), word.payload.data.eq(counts[res_i]),
                             word.payload.n.eq(4)]
                m.d.sync += [res_left.eq(counts[res_i]), res_count_next.eq(0)]
            with m.Elif(res_left == 0):
                m.d.sync += [res_i.eq(res_i + 1), res_count_next.eq(1)]
            with m.Else():
                for i, b in enumerate(buffers):
                    with m.If(res_i == i):
                        m.d.comb += [b.o.ready.eq(1), word.valid.eq(b.o.valid),
                                     word.payload.data.eq(b.o.payload),
                                     word.payload.n.eq(nbytes[i])]
                        with m.If(b.o.valid):
                            m.d.sync += res_left.eq(res_left - 1)
        return m


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
        self.csr_addr_width, self.mem_addr_width = csr_addr_width, mem_addr_width
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
        m.submodules.server = server = ResponseServer(window_bytes=self.window_bytes,
                                                      csr_addr_width=self.csr_addr_width)
        m.submodules.framer = framer = ResponseFramer(
            window_bytes=self.window_bytes, max_request=self.max_request,
            clock_hz=self.clock_hz, baud=self.baud)
        m.submodules.mem_reader = mem_reader = MemReader(self.mem_addr_width)
        m.submodules.result_reader = result_reader = ResultReader(self.results,
                                                                  self.result_depth)
        wiring.connect(m, wiring.flipped(self.requests), server.requests)
        wiring.connect(m, server.csr, wiring.flipped(self.csr))
        wiring.connect(m, server.response, framer.response)
        wiring.connect(m, framer.mem, mem_reader.source)
        wiring.connect(m, framer.results, result_reader.source)
        wiring.connect(m, mem_reader.mem, wiring.flipped(self.mem))
        wiring.connect(m, framer.tx, wiring.flipped(self.tx))
        for name in self.results:
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(result_reader, name))
        m.d.comb += [self.served.eq(server.served), server.mem_pending.eq(self.mem_pending),
                     self.open.eq(server.open), result_reader.clear.eq(server.open),
                     server.done.eq(framer.done), self.mem_idle.eq(mem_reader.mem_idle),
                     framer.value.eq(server.value), framer.err.eq(server.err),
                     framer.len.eq(server.len), mem_reader.addr.eq(server.addr),
                     mem_reader.len.eq(server.len)]
        return m
