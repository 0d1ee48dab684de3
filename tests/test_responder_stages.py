"""The Responder's stages one by one (`ResponseServer`, `ResponseFramer`, `MemReader`,
`ResultReader`) against what their docstrings promise; the whole Responder is checked in
test_host_link_stages.py."""
import random
import struct

from helpers import simulate
from test_host_link import CSR_LIMIT, csr_registers
from test_host_link_stages import decode_frames

from hotline.contract.link import TYPES, pack_results
from hotline.hw.link_layouts import ERROR_MESSAGES, WINDOW, Request
from hotline.hw.responder import (MemReader, ResponseFramer, ResponseServer, ResultReader,
                                  _ERRMSG, _INFO, _MEM, _NONE, _RESULTS, _VALUE)

T = TYPES


def test_server_answers_and_caches():
    """Each request's response (kind, seq, source, replay) and the cycle it is offered: in the
    take cycle for a bad frame, the cycle after for the rest (after the CSR response for a
    READ32); the cache answers a repeated seq; the next request is taken the cycle after
    ``done``, not before."""
    dut = ResponseServer(window_bytes=512, csr_addr_width=12)
    regs = {0x10: 0x1234}
    got = []

    async def main(ctx):
        cycle = 0
        for kind, seq, extra in (("LOOKUPS", 1, {"good": 0}), ("INFO", 2, {}),
                                 ("INFO", 2, {}), ("READ32", 3, {"addr": 0x10}),
                                 ("READ32", 4, {"addr": CSR_LIMIT}),
                                 ("MEM_READ", 5, {"addr": 8, "value": 16}),
                                 ("MEM_READ", 6, {"addr": 4, "value": 8})):
            ctx.set(dut.requests.payload, Request.const({
                "good": extra.get("good", 1), "kind": T[kind], "seq": seq,
                "addr": extra.get("addr", 0), "value": extra.get("value", 0), "reject": 0}))
            ctx.set(dut.requests.valid, 1)
            taken = None
            while True:
                if taken is None and ctx.get(dut.requests.ready):
                    taken = cycle
                if ctx.get(dut.response.valid):
                    r = ctx.get(dut.response.payload)
                    got.append((r.kind, r.seq, r.src, r.replay, cycle - taken))
                    got.append((ctx.get(dut.value), ctx.get(dut.err), ctx.get(dut.addr),
                                ctx.get(dut.len)))
                    break
                await ctx.tick()
                cycle += 1
                ctx.set(dut.requests.valid, 0)
            await ctx.tick()
            ctx.set(dut.requests.valid, 1)            # the framer at work: nothing is taken
            for _ in range(3):
                assert not ctx.get(dut.requests.ready)
                await ctx.tick()
            ctx.set(dut.done, 1)
            assert not ctx.get(dut.requests.ready)
            await ctx.tick()
            ctx.set(dut.done, 0)
            assert ctx.get(dut.requests.ready)
            ctx.set(dut.requests.valid, 0)
            cycle += 5

    async def csr(ctx):
        await csr_registers(ctx, dut.csr, regs)
    simulate(dut, main, csr)
    ack, data_, nak, error = (T[k] for k in ("ACK", "DATA", "NAK", "ERROR"))
    assert got[::2] == [(nak, 1, _NONE, 0, 0), (data_, 2, _INFO, 0, 1), (data_, 2, _INFO, 1, 1),
                        (data_, 3, _VALUE, 0, 3), (error, 4, _ERRMSG, 0, 3),
                        (data_, 5, _MEM, 0, 1), (error, 6, _ERRMSG, 0, 1)]
    assert got[7][0] == 0x1234 and got[11][2:] == (8, 16) and got[13][1] == WINDOW


def _framer_run(src, value=0, err=0, words=(), length=0, tx_ready=1.0, seed=0):
    """A ResponseFramer sending one response from ``src``; ``words`` (data, n) come from a
    stub source (``mem`` or ``results``) that is valid at random. Returns (bytes, cycle the
    response was taken, cycles of the bytes, cycle of done)."""
    dut = ResponseFramer(window_bytes=512, max_request=64, clock_hz=1234, baud=56)
    rng = random.Random(seed)
    out, log = bytearray(), {"cycles": [], "done": None}
    source = dut.mem if src == _MEM else dut.results
    pending = list(words)

    async def main(ctx):
        ctx.set(dut.value, value)
        ctx.set(dut.err, err)
        ctx.set(dut.len, length)
        ctx.set(dut.results.length, length)
        ctx.set(dut.response.payload, {"kind": T["DATA"], "seq": 77, "src": src, "replay": 0})
        ctx.set(dut.response.valid, 1)
        await ctx.tick()
        ctx.set(dut.response.valid, 0)
        for cycle in range(1, 400):
            ctx.set(dut.tx.ready, rng.random() < tx_ready)
            offer = bool(pending) and rng.random() < 0.5
            ctx.set(source.word.valid, offer)
            if pending:
                ctx.set(source.word.payload, {"data": pending[0][0], "n": pending[0][1]})
            tx_valid, tx_ready_, byte = (ctx.get(dut.tx.valid), ctx.get(dut.tx.ready),
                                         ctx.get(dut.tx.payload))
            if offer and ctx.get(source.word.ready):
                pending.pop(0)
            if ctx.get(dut.done):
                log["done"] = cycle
            await ctx.tick()
            if tx_valid and tx_ready_:
                out.append(byte)
                log["cycles"].append(cycle)
            if log["done"] is not None:
                break
    simulate(dut, main)
    return bytes(out), log


def test_framer_frames_each_source():
    """The frame of each payload source decodes (zlib CRCs, struct) to its payload; the magic
    byte 2 cycles after the take, then a byte a cycle; ``done`` with the last CRC byte."""
    mem = [0x0102030405060708, 0x1112131415161718]
    cases = [
        (dict(src=_NONE), b""),
        (dict(src=_VALUE, value=0xDEADBEEF), struct.pack("<I", 0xDEADBEEF)),
        (dict(src=_INFO), struct.pack("<IIII", 512, 64, 1234, 56)),
        (dict(src=_ERRMSG, err=WINDOW), ERROR_MESSAGES[WINDOW].encode()),
        (dict(src=_MEM, words=[(w, 8) for w in mem], length=16),
         b"".join(w.to_bytes(8, "little") for w in mem)),
        (dict(src=_RESULTS, words=[(2, 4), (0xABC, 2), (0x5, 2)], length=8),
         bytes([2, 0, 0, 0, 0xBC, 0x0A, 5, 0])),
    ]
    for kw, payload in cases:
        data, log = _framer_run(**kw)
        assert decode_frames(data) == [(T["DATA"], 77, payload)], kw
        if kw["src"] not in (_MEM, _RESULTS):       # no word waits: one byte per cycle
            assert log["cycles"] == list(range(2, 2 + len(data)))
        assert log["done"] == log["cycles"][-1]
    slow, _ = _framer_run(src=_VALUE, value=7, tx_ready=0.3, seed=3)
    assert slow == _framer_run(src=_VALUE, value=7)[0]


def test_mem_reader_reads_the_window_words_in_order():
    """``len`` bytes from ``addr``, one word per read, a read only while ``word.ready``, with a
    port that is ready at random; ``mem_idle`` is low exactly while ``active``."""
    rng = random.Random(1)
    memory = [rng.getrandbits(64) for _ in range(64)]
    dut = MemReader(6)
    got = []

    async def main(ctx):
        src = dut.source
        ctx.set(dut.addr, 40)
        ctx.set(dut.len, 48)
        ctx.set(src.start, 1)
        await ctx.tick()
        ctx.set(src.start, 0)
        rvalid, rdata, want = 0, 0, False
        for _ in range(200):
            # ``ready`` (with ``active``) stays high until a word is taken, as the framer's
            want = want or rng.random() < 0.5
            active = want or rng.random() < 0.5
            port_ready = rng.random() < 0.6
            ctx.set(src.active, active)
            ctx.set(src.word.ready, want)
            ctx.set(dut.mem.ready, port_ready)
            ctx.set(dut.mem.rvalid, rvalid)
            ctx.set(dut.mem.rdata, rdata)
            assert ctx.get(dut.mem_idle) == (not active)
            ready = ctx.get(src.word.ready)
            read = ctx.get(dut.mem.read)
            assert ready or not read
            if ctx.get(src.word.valid):
                assert ready and ctx.get(src.word.payload.n) == 8
                got.append(ctx.get(src.word.payload.data))
                want = False
            rvalid, rdata = (1, memory[ctx.get(dut.mem.addr)]) if read and port_ready else (0, 0)
            await ctx.tick()
    simulate(dut, main)
    assert got == memory[5:11]


def test_result_reader_words_and_replay():
    """The words of a RESULTS payload (per stream: count, then its beats in whole bytes) make
    the bytes `pack_results` makes; ``length`` is their total; a replay gives the same beats
    again, and the next response only the beats that came since."""
    widths = {"a": 12, "b": 100}
    dut = ResultReader(widths, 8)
    beats = {"a": [1, 0xFFF, 7], "b": [1 << 99]}
    got = []

    async def feed(ctx, name, values):
        s = getattr(dut, name)
        for v in values:
            ctx.set(s.valid, 1)
            ctx.set(s.payload, v)
            await ctx.tick().until(s.ready)
        ctx.set(s.valid, 0)

    async def respond(ctx, replay):
        src = dut.source
        ctx.set(src.begin, 1)
        ctx.set(src.replay, replay)
        await ctx.tick()
        ctx.set(src.begin, 0)
        ctx.set(src.size, 1)
        await ctx.tick()
        ctx.set(src.size, 0)
        length = ctx.get(src.length)
        ctx.set(src.start, 1)
        await ctx.tick()
        ctx.set(src.start, 0)
        ctx.set(src.word.ready, 1)
        data = bytearray()
        while len(data) < length:
            if ctx.get(src.word.valid):
                w = ctx.get(src.word.payload)
                data += w.data.to_bytes(16, "little")[:w.n]
            await ctx.tick()
        ctx.set(src.word.ready, 0)
        got.append((length, bytes(data)))

    async def main(ctx):
        for name, values in beats.items():
            await feed(ctx, name, values)
        await respond(ctx, 0)
        await feed(ctx, "a", [9])
        await respond(ctx, 1)
        await respond(ctx, 0)
    simulate(dut, main)
    first = pack_results([beats["a"], beats["b"]], list(widths.values()))
    second = pack_results([[9], []], list(widths.values()))
    assert got == [(len(first), first), (len(first), first), (len(second), second)]
