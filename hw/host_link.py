"""HostLinkBridge: the host link (`hotline.contract.link` frames) in gateware, between a byte
stream (a UART) and the accelerator's CSR bus, lookup streams, result streams and memory window.

Receive: frames are parsed at one byte per cycle and never stall (a UART cannot be held off).
The header CRC is checked after the header; the CRC-32 at the end. ``LOOKUPS``,
``SCATTER_KEYS`` and ``MEM_WRITE`` payloads go into a ring of 64-bit words speculatively and
are committed only when the frame's CRC is good and its ``seq`` is new, so a corrupted or
repeated frame never reaches the accelerator or memory; committed words drain into
``lookups`` / ``scatter_keys`` / the memory port in arrival order while later frames are
served (a batch blocked on full result streams does not block the ``RESULTS`` that unblocks
it). A ring frame that does not fit the ring's free space is answered ``BUSY``. Bytes stop
arriving mid-frame for ``timeout`` cycles: the frame is dropped. After a bad header the
receiver hunts for the next magic byte after it (the header's own bytes are not rescanned, so
a stray magic byte costs the frame behind it one NAK and resend).

Serve: one frame at a time (one more may wait). A bad header or CRC -> ``NAK``; the ``seq``
of the last served frame -> its response again (``RESULTS`` replays the same beats from the
`ReplayBuffer`s); otherwise ``WRITE32``/``READ32`` become AXI4-Lite accesses on ``csr``,
``RESULTS`` sends every beat buffered per result stream (count u32, then 16 bytes per beat),
``MEM_READ`` reads the window (answered ``BUSY`` while committed ``MEM_WRITE`` words are still
in the ring: waiting could deadlock behind lookups stalled on full result buffers, which only
the host's next ``RESULTS`` frees), ``INFO`` returns the constants,
``QUIT`` is acknowledged. Malformed requests get ``ERROR`` with a short message.

Ports: ``rx`` In / ``tx`` Out byte streams; ``csr`` AXI4-Lite master; ``mem``
`WindowPortSignature` master; ``lookups``, ``scatter_keys`` Out 64-bit streams; one In stream
per entry of ``results`` (name -> payload width, in response order).
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hotline.contract.link import MAGIC, MAX_PAYLOAD, TYPES

from .axi import AXI4LiteSignature
from .crc32 import CRC32_INIT, crc32_update
from .replay_buffer import ReplayBuffer
from .window_ram import WindowPortSignature

__all__ = ["HostLinkBridge", "ERROR_MESSAGES"]

# ERROR payloads (at most 16 bytes: they leave through the 16-byte send register).
ERROR_MESSAGES = {1: "bad length", 2: "request too long", 3: "unknown request",
                  4: "outside window", 5: "csr error"}
_BAD_LENGTH, _TOO_LONG, _UNKNOWN, _WINDOW, _CSR = 1, 2, 3, 4, 5
_BUSY = 15  # reject code: answer BUSY, forget the frame

# Ring word tags.
_LOOKUP, _SCATTER, _ADDR, _MEMDATA = 0, 1, 2, 3
# Payload sources of a response.
_NONE, _VALUE, _INFO, _ERRMSG, _MEM, _RESULTS = range(6)


def _le_bytes(text, n=16):
    return int.from_bytes(text.encode().ljust(n, b"\0"), "little")


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
            **{name: In(stream.Signature(width)) for name, width in self.results.items()},
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
            buffers.append(buf)

        # ---- ring of committed request words -------------------------------------------
        ring_bits = (self.ring_words - 1).bit_length() + 1
        m.submodules.ring = ring = Memory(shape=66, depth=self.ring_words, init=[])
        ring_wr, ring_rd = ring.write_port(), ring.read_port()
        wspec = Signal(ring_bits)    # next speculative write
        wcommit = Signal(ring_bits)  # end of committed words
        rptr = Signal(ring_bits)     # next word to drain

        # ---- receiver --------------------------------------------------------------------
        byte = self.rx.payload
        got = self.rx.valid
        m.d.comb += self.rx.ready.eq(1)
        rx_crc = Signal(32)
        crc_next = crc32_update(rx_crc, byte)
        kind, seq, length = Signal(8), Signal(16), Signal(32)
        hcrc_exp, hcrc_lo = Signal(16), Signal(8)
        idx = Signal(32)
        args = Signal(64)
        word = Signal(64)
        crc_got = Signal(24)
        reject = Signal(4)
        store = Signal()
        silence = Signal(range(self.timeout + 1))

        # The frame handed to the server (one may wait while another response is sent).
        pend = Signal()
        p_good, p_kind, p_seq = Signal(), Signal(8), Signal(16)
        p_args, p_reject = Signal(64), Signal(4)
        last_valid, last_seq = Signal(), Signal(16)

        free_words = self.ring_words - (wcommit - rptr)[:ring_bits]
        header_len = Cat(length[8:32], byte)  # the length once its last byte is in

        mem_pending = Signal(ring_bits)    # committed MEM_WRITE data words not yet written
        mem_committed = Signal(ring_bits)  # data words of the MEM_WRITE committed this cycle
        mem_written = Signal()

        def deliver(good):
            with m.If(~pend):
                m.d.sync += [pend.eq(1), p_good.eq(good), p_kind.eq(kind), p_seq.eq(seq),
                             p_args.eq(args), p_reject.eq(reject)]
            new = ~pend & good & store & (reject == 0) & ~(last_valid & (seq == last_seq))
            with m.If(new):
                m.d.sync += wcommit.eq(wspec)
                with m.If(kind == T["MEM_WRITE"]):
                    m.d.comb += mem_committed.eq(length[3:] - 1)
            with m.Else():
                m.d.sync += wspec.eq(wcommit)

        m.d.sync += silence.eq(Mux(got, 0, Mux(silence == self.timeout, silence, silence + 1)))

        def drop_if_stale():
            with m.Elif(silence == self.timeout):  # the rest of the frame is not coming
                m.d.sync += wspec.eq(wcommit)
                m.next = "HUNT"
        with m.FSM(name="rx_fsm"):
            with m.State("HUNT"):
                with m.If(got & (byte == MAGIC)):
                    m.d.sync += [rx_crc.eq(CRC32_INIT), idx.eq(0)]
                    m.next = "HEADER"
            with m.State("HEADER"):
                with m.If(got):
                    m.d.sync += [rx_crc.eq(crc_next), idx.eq(idx + 1)]
                    with m.Switch(idx):
                        with m.Case(0):
                            m.d.sync += kind.eq(byte)
                        with m.Case(1, 2):
                            m.d.sync += seq.word_select(idx[1], 8).eq(byte)
                        with m.Case(3, 4, 5):
                            m.d.sync += length.eq(Cat(length[8:32], byte))
                        with m.Case(6):
                            m.d.sync += [length.eq(header_len), hcrc_exp.eq(~crc_next[:16])]
                        with m.Case(7):
                            m.d.sync += hcrc_lo.eq(byte)
                        with m.Case(8):
                            with m.If((Cat(hcrc_lo, byte) != hcrc_exp) | (length > MAX_PAYLOAD)):
                                m.d.sync += [reject.eq(0), store.eq(0)]
                                deliver(Const(0))
                                m.next = "HUNT"
                            with m.Else():
                                m.d.sync += [idx.eq(0), store.eq(0), reject.eq(0), args.eq(0)]
                                self._check_header(m, kind, length, free_words, reject, store)
                                m.next = "PAYLOAD"
                                with m.If(length == 0):
                                    m.next = "CRC"
                drop_if_stale()
            with m.State("PAYLOAD"):
                with m.If(got):
                    m.d.sync += [rx_crc.eq(crc_next), idx.eq(idx + 1),
                                 word.word_select(idx[:3], 8).eq(byte)]
                    with m.If(idx < 8):
                        m.d.sync += args.word_select(idx[:3], 8).eq(byte)
                    full = Cat(word[:56], byte)
                    tag = Signal(2)
                    m.d.comb += tag.eq(Mux(kind == T["LOOKUPS"], _LOOKUP,
                                       Mux(kind == T["SCATTER_KEYS"], _SCATTER,
                                           Mux(idx < 8, _ADDR, _MEMDATA))))
                    with m.If((idx[:3] == 7) & store):
                        m.d.comb += [ring_wr.addr.eq(wspec[:-1]), ring_wr.data.eq(Cat(full, tag)),
                                     ring_wr.en.eq(1)]
                        m.d.sync += wspec.eq(wspec + 1)
                        with m.If((kind == T["MEM_WRITE"]) & (idx == 7)):
                            addr = full[:32]
                            with m.If((addr[:3] != 0) |
                                      (addr + (length - 8) > self.window_bytes)):
                                m.d.sync += [reject.eq(_WINDOW), store.eq(0)]
                    with m.If(idx == length - 1):
                        m.d.sync += idx.eq(0)
                        m.next = "CRC"
                drop_if_stale()
            with m.State("CRC"):
                with m.If(got):
                    m.d.sync += [idx.eq(idx + 1), crc_got.word_select(idx[:2], 8).eq(byte)]
                    with m.If(idx == 3):
                        deliver(Cat(crc_got, byte) == ~rx_crc)
                        m.next = "HUNT"
                drop_if_stale()

        # ---- ring drain ------------------------------------------------------------------
        d_valid = Signal()
        d_word, d_tag = ring_rd.data[:64], ring_rd.data[64:]
        mem_word = Signal.like(self.mem.addr)
        drain_mem = Signal()  # the drain owns the memory port (the sender is not reading)
        consume = Signal()
        with m.Switch(d_tag):
            with m.Case(_LOOKUP):
                m.d.comb += [self.lookups.valid.eq(d_valid), self.lookups.payload.eq(d_word),
                             consume.eq(self.lookups.ready)]
            with m.Case(_SCATTER):
                m.d.comb += [self.scatter_keys.valid.eq(d_valid),
                             self.scatter_keys.payload.eq(d_word),
                             consume.eq(self.scatter_keys.ready)]
            with m.Case(_ADDR):
                m.d.comb += consume.eq(1)
            with m.Case(_MEMDATA):
                m.d.comb += consume.eq(drain_mem & self.mem.ready)
        take = d_valid & consume
        issue = (rptr != wcommit) & (~d_valid | take)
        m.d.comb += [ring_rd.addr.eq(rptr[:-1]), ring_rd.en.eq(issue)]
        with m.If(take):
            m.d.sync += d_valid.eq(0)
            with m.If(d_tag == _ADDR):
                m.d.sync += mem_word.eq(d_word[3:32])
            with m.If(d_tag == _MEMDATA):
                m.d.sync += mem_word.eq(mem_word + 1)
        with m.If(issue):
            m.d.sync += [rptr.eq(rptr + 1), d_valid.eq(1)]
        m.d.comb += mem_written.eq(take & (d_tag == _MEMDATA))
        m.d.sync += mem_pending.eq(mem_pending + mem_committed - mem_written)

        # ---- server: request -> response, then the response's bytes ----------------------
        # s_*: the response being sent; c_*: the response of the last served seq (resent when
        # that seq comes again).
        s_kind, s_seq, s_src, s_len = Signal(8), Signal(16), Signal(3), Signal(32)
        c_kind, c_src, c_value, c_err = Signal(8), Signal(3), Signal(32), Signal(4)
        c_addr, c_len = Signal(32), Signal(32)
        replay = Signal()
        csr, mem, tx = self.csr, self.mem, self.tx
        p_addr, p_value = p_args[:32], p_args[32:]
        counts = Array(b.count for b in buffers)
        info = Cat(Const(self.window_bytes, 32), Const(self.max_request, 32),
                   Const(self.clock_hz, 32), Const(self.baud, 32))
        messages = Array(Const(_le_bytes(ERROR_MESSAGES.get(i, "")), 128) for i in range(16))
        msg_len = Array(Const(len(ERROR_MESSAGES.get(i, "")), 5) for i in range(16))

        tx_crc, hcrc = Signal(32), Signal(16)
        sh, sh_n = Signal(128), Signal(5)       # send register: bytes leave LSB first
        pay_left, t_idx = Signal(32), Signal(3)
        res_i, res_left, res_count_next = Signal(range(nres + 1)), Signal(32), Signal()
        mem_next, mem_words_left, mem_wait = Signal.like(mem.addr), Signal(32), Signal()
        accepted = tx.valid & tx.ready
        tx_crc_next = crc32_update(tx_crc, tx.payload)

        def cache(kind_name, src, **extra):
            m.d.sync += [c_kind.eq(T[kind_name]), c_src.eq(src)]
            m.d.sync += [{"value": c_value, "err": c_err}[k].eq(v) for k, v in extra.items()]

        with m.FSM(name="server") as server:
            with m.State("IDLE"):
                with m.If(pend):
                    m.d.sync += [pend.eq(0), s_seq.eq(p_seq), replay.eq(0)]
                    busy = (p_reject == _BUSY) | ((p_kind == T["MEM_READ"]) & (mem_pending != 0))
                    with m.If(~p_good | busy):
                        m.d.sync += [s_kind.eq(Mux(p_good, T["BUSY"], T["NAK"])),
                                     s_src.eq(_NONE)]
                        m.next = "START"
                    with m.Elif(last_valid & (p_seq == last_seq)):
                        m.d.sync += replay.eq(1)
                        m.next = "RESPOND"
                    with m.Else():
                        m.d.sync += [last_valid.eq(1), last_seq.eq(p_seq),
                                     c_addr.eq(p_addr), c_len.eq(p_value)]
                        with m.If(p_reject != 0):
                            cache("ERROR", _ERRMSG, err=p_reject)
                            m.next = "RESPOND"
                        with m.Elif(p_kind == T["WRITE32"]):
                            m.next = "CSR_WRITE"
                        with m.Elif(p_kind == T["READ32"]):
                            m.next = "CSR_READ"
                        with m.Elif(p_kind == T["INFO"]):
                            cache("DATA", _INFO)
                            m.next = "RESPOND"
                        with m.Elif(p_kind == T["RESULTS"]):
                            cache("DATA", _RESULTS)
                            m.next = "RESPOND"
                        with m.Elif(p_kind == T["MEM_READ"]):
                            end = Signal(33)
                            m.d.comb += end.eq(p_addr + p_value)
                            with m.If((p_addr[:3] != 0) | (p_value[:3] != 0)
                                      | (end > self.window_bytes)):
                                cache("ERROR", _ERRMSG, err=_WINDOW)
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
                        cache("ERROR", _ERRMSG, err=_CSR)
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
                        cache("ERROR", _ERRMSG, err=_CSR)
                    m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.sync += [s_kind.eq(c_kind), s_src.eq(c_src)]
                with m.If(c_src == _RESULTS):
                    m.d.comb += [b.begin.eq(1) for b in buffers]
                    m.d.comb += [b.replay.eq(replay) for b in buffers]
                    m.next = "START"  # the counts are valid from the next cycle
                with m.Else():
                    m.next = "START"
            with m.State("START"):
                m.d.sync += [sh_n.eq(0), res_i.eq(0), res_left.eq(0), res_count_next.eq(1),
                             mem_next.eq(c_addr[3:]), mem_words_left.eq(c_len[3:]),
                             mem_wait.eq(0)]
                length_of = {_NONE: 0, _VALUE: 4, _INFO: 16, _ERRMSG: msg_len[c_err],
                             _MEM: c_len, _RESULTS: 4 * nres + 16 * sum(b.count for b in buffers)}
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
                    m.d.sync += [tx_crc.eq(CRC32_INIT), t_idx.eq(0)]
                    m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += [tx.valid.eq(1),
                             tx.payload.eq(Cat(s_kind, s_seq, s_len).word_select(t_idx, 8))]
                with m.If(accepted):
                    m.d.sync += [tx_crc.eq(tx_crc_next), t_idx.eq(t_idx + 1)]
                    with m.If(t_idx == 6):
                        m.d.sync += [hcrc.eq(~tx_crc_next[:16]), t_idx.eq(0)]
                        m.next = "HCRC"
            with m.State("HCRC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(hcrc.word_select(t_idx[0], 8))]
                with m.If(accepted):
                    m.d.sync += [tx_crc.eq(tx_crc_next), t_idx.eq(t_idx + 1)]
                    with m.If(t_idx == 1):
                        m.d.sync += t_idx.eq(0)
                        m.next = "PAYLOAD"
                        with m.If(s_len == 0):
                            m.next = "CRC"
            with m.State("PAYLOAD"):
                m.d.comb += [tx.valid.eq(sh_n != 0), tx.payload.eq(sh[:8])]
                with m.If(accepted):
                    m.d.sync += [tx_crc.eq(tx_crc_next), sh.eq(sh >> 8), sh_n.eq(sh_n - 1),
                                 pay_left.eq(pay_left - 1)]
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
                                    m.d.sync += [sh.eq(b.o.payload), sh_n.eq(16),
                                                 res_left.eq(res_left - 1)]
            with m.State("CRC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq((~tx_crc).word_select(t_idx[:2], 8))]
                with m.If(accepted):
                    m.d.sync += t_idx.eq(t_idx + 1)
                    with m.If(t_idx == 3):
                        m.next = "IDLE"

        # The memory port: the MEM_READ sender, otherwise the ring drain's MEM_WRITE words.
        m.d.comb += drain_mem.eq(~server.ongoing("PAYLOAD") | (s_src != _MEM))
        with m.If(drain_mem):
            m.d.comb += [mem.addr.eq(mem_word), mem.wdata.eq(d_word),
                         mem.write.eq(d_valid & (d_tag == _MEMDATA))]
        return m

    def _check_header(self, m, kind, length, free_words, reject, store):
        """Decide, from a good header, whether the payload is stored and what to answer."""
        T = TYPES
        fixed = {T["WRITE32"]: 8, T["READ32"]: 4, T["MEM_READ"]: 8, T["RESULTS"]: 0,
                 T["INFO"]: 0, T["QUIT"]: 0}
        with m.Switch(kind):
            for k, n in fixed.items():
                with m.Case(k):
                    with m.If(length != n):
                        m.d.sync += reject.eq(_BAD_LENGTH)
            with m.Case(T["LOOKUPS"], T["SCATTER_KEYS"], T["MEM_WRITE"]):
                with m.If((length[:3] != 0) | ((kind == T["MEM_WRITE"]) & (length == 0))):
                    m.d.sync += reject.eq(_BAD_LENGTH)
                with m.Elif(length > self.max_request):
                    m.d.sync += reject.eq(_TOO_LONG)
                with m.Elif(length[3:] > free_words):
                    m.d.sync += reject.eq(_BUSY)
                with m.Else():
                    m.d.sync += store.eq(1)
            with m.Default():
                m.d.sync += reject.eq(_UNKNOWN)
