"""The host link's stages one by one (`FrameParser`, `CommitRing`, `Responder`), in the
Amaranth simulator, against references written here from the frame format
(`hotline.contract.link.encode` builds the frames; responses are decoded with `zlib.crc32`
and `struct`, not with the host's reader) and the rules of docs/host-link.md.

Covered: good frames back to back, bad header CRC, bad payload CRC, a length over
`MAX_PAYLOAD`, truncated frames, malformed and refused requests, retransmitted sequence
numbers, a full request register; the ring's commit, rollback, drain order, free space and
sink backpressure; every response kind, the response cache and backpressure on the output
byte stream. Each stage's documented latency is checked too.
"""
import random
import struct
import zlib

import pytest
from helpers import simulate

from hotline.contract.link import (CRC32_INIT, CRC32_POLY, MAGIC, MAX_PAYLOAD, TYPES, encode,
                                   header_crc, pack_results)
from hotline.hw.commit_ring import CommitRing
from hotline.hw.frame_parser import FrameParser
from hotline.hw.link_layouts import (BAD_LENGTH, BUSY, CSR, ERROR_MESSAGES, TOO_LONG, UNKNOWN,
                                     WINDOW, Request, RingTag, RingWord, Served)
from hotline.hw.responder import Responder
from test_host_link import CSR_LIMIT, csr_registers

T = TYPES
MAX_REQUEST, WINDOW_BYTES, RING_WORDS, TIMEOUT = 64, 512, 16, 40


def words_of(kind, payload):
    """The ring words a stored frame's payload becomes (docs/host-link.md, speculative ring)."""
    words = [int.from_bytes(payload[i:i + 8], "little") for i in range(0, len(payload), 8)]
    if kind == "LOOKUPS":
        return [(w, RingTag.LOOKUP) for w in words]
    if kind == "SCATTER_KEYS":
        return [(w, RingTag.SCATTER) for w in words]
    return [(words[0], RingTag.ADDR)] + [(w, RingTag.MEMDATA) for w in words[1:]]


def reference_reject(kind, payload, free_words):
    """The request's reject code by the rules of docs/host-link.md (0: accepted)."""
    n = len(payload)
    fixed = {"WRITE32": 8, "READ32": 4, "MEM_READ": 8, "RESULTS": 0, "INFO": 0, "QUIT": 0}
    if kind in fixed:
        return BAD_LENGTH if n != fixed[kind] else 0
    if kind not in ("LOOKUPS", "SCATTER_KEYS", "MEM_WRITE"):
        return UNKNOWN
    if n % 8 or (kind == "MEM_WRITE" and n == 0):
        return BAD_LENGTH
    if n > MAX_REQUEST:
        return TOO_LONG
    if n // 8 > free_words:
        return BUSY
    if kind == "MEM_WRITE":
        addr = int.from_bytes(payload[:4], "little")
        if addr % 8 or addr + n - 8 > WINDOW_BYTES:
            return WINDOW
    return 0


def args_of(payload):
    head = payload[:8].ljust(8, b"\0")
    return struct.unpack("<II", head)


# ---- FrameParser -------------------------------------------------------------------------

class ParserRun:
    """Feeds bytes (None = an idle cycle) to a FrameParser; records every request taken, the
    ring words committed and the cycle of every request, commit and rollback."""

    def __init__(self, free=RING_WORDS, served=(0, 0), ready=lambda cycle: True):
        self.dut = FrameParser(max_request=MAX_REQUEST, window_bytes=WINDOW_BYTES,
                               ring_words=RING_WORDS, timeout=TIMEOUT)
        self.free, self.served, self.ready = free, served, ready
        self.requests, self.committed, self.spec = [], [], []
        self.commits, self.rollbacks, self.mem_words = [], [], []
        self.cycle = 0

    async def _watch(self, ctx):
        d = self.dut
        while True:
            ctx.set(d.requests.ready, self.ready(self.cycle))
            ctx.set(d.ring.free, self.free)
            ctx.set(d.served, Served.const({"valid": self.served[0], "seq": self.served[1]}))
            await ctx.delay(1e-9)
            if ctx.get(d.requests.valid) and ctx.get(d.requests.ready):
                p = d.requests.payload
                self.requests.append((self.cycle, ctx.get(p.good), ctx.get(p.kind),
                                      ctx.get(p.seq), ctx.get(p.addr), ctx.get(p.value),
                                      ctx.get(p.reject)))
            if ctx.get(d.ring.words.valid):
                w = ctx.get(d.ring.words.payload)
                self.spec.append((w.word, w.tag))
            if ctx.get(d.ring.commit):
                self.commits.append(self.cycle)
                self.committed += self.spec
                self.mem_words.append(ctx.get(d.ring.mem_words))
                self.spec = []
            if ctx.get(d.ring.rollback):
                self.rollbacks.append(self.cycle)
                self.spec = []
            assert not (ctx.get(d.ring.commit) and ctx.get(d.ring.rollback))
            await ctx.tick()
            self.cycle += 1

    def run(self, stream, tail=5):
        async def main(ctx):
            for byte in stream:
                ctx.set(self.dut.rx.valid, byte is not None)
                ctx.set(self.dut.rx.payload, byte or 0)
                assert ctx.get(self.dut.rx.ready)  # never stalls
                await ctx.tick()
            ctx.set(self.dut.rx.valid, 0)
            await ctx.tick().repeat(tail)
        simulate(self.dut, main, self._watch)
        return self


def random_frames(rng, n, seq0=1):
    kinds = ["WRITE32", "READ32", "LOOKUPS", "SCATTER_KEYS", "RESULTS", "QUIT", "INFO",
             "MEM_WRITE", "MEM_READ"]
    out = []
    for i in range(n):
        kind = rng.choice(kinds)
        if kind == "MEM_WRITE":
            addr = rng.choice([rng.randrange(0, WINDOW_BYTES // 8),
                               rng.randrange(WINDOW_BYTES // 8 - 4, WINDOW_BYTES // 8 + 2)]) * 8
            addr += 4 if rng.random() < .1 else 0
            payload = struct.pack("<II", addr, 0) + rng.randbytes(8 * rng.randrange(0, 4))
        elif kind in ("LOOKUPS", "SCATTER_KEYS"):
            payload = rng.randbytes(8 * rng.randrange(0, 10))
        else:
            size = {"WRITE32": 8, "READ32": 4, "MEM_READ": 8}.get(kind, 0)
            payload = rng.randbytes(size if rng.random() < .85 else rng.randrange(0, 20))
        out.append((kind, (seq0 + i) & 0xFFFF, payload))
    return out


def test_parser_back_to_back_frames_against_the_reference():
    """Good frames with no gap between them: one request each, 1 cycle after the last byte;
    the stored payloads are committed in order, with the reference's reject codes."""
    rng = random.Random(1)
    frames = random_frames(rng, 60)
    stream, ends = [], []
    for kind, seq, payload in frames:
        stream += encode(kind, seq, payload)
        ends.append(len(stream) - 1)
    r = ParserRun(free=5).run(stream)
    want_words, want_requests = [], []
    for (kind, seq, payload), end in zip(frames, ends):
        reject = reference_reject(kind, payload, 5)
        want_requests.append((end + 1, 1, T[kind], seq, *args_of(payload), reject))
        if reject == 0 and kind in ("LOOKUPS", "SCATTER_KEYS", "MEM_WRITE") and payload:
            want_words += words_of(kind, payload)
    assert r.requests == want_requests
    assert r.committed == want_words
    # Every frame is decided in the cycle of its last byte: commit (stored and accepted) or
    # rollback (everything else).
    assert sorted(r.commits + r.rollbacks) == ends
    assert {BAD_LENGTH, TOO_LONG, BUSY, WINDOW, 0} <= {q[-1] for q in r.requests}


def test_parser_mem_write_counts_its_data_words():
    payload = struct.pack("<II", 64, 0) + bytes(range(24))
    r = ParserRun().run(encode("MEM_WRITE", 3, payload))
    assert r.committed == words_of("MEM_WRITE", payload)
    assert r.mem_words == [3]


def _no_magic(rng, n):
    return bytes(b if b != MAGIC else 0 for b in rng.randbytes(n))


@pytest.mark.parametrize("where", ["hcrc", "length", "kind", "seq"])
def test_parser_bad_header_crc(where):
    """A corrupted header gives a bad request right after the header, stores nothing, and
    the receiver hunts again from the byte after the header."""
    rng = random.Random(2)
    payload = _no_magic(rng, 32)
    bad = bytearray(encode("LOOKUPS", 5, payload))
    bad[{"kind": 1, "seq": 2, "length": 4, "hcrc": 9}[where]] ^= 0x04
    good = encode("LOOKUPS", 6, payload)
    r = ParserRun().run(bytes(bad) + good)
    assert [q[:2] for q in r.requests] == [(10, 0), (len(bad) + len(good), 1)]
    assert r.committed == words_of("LOOKUPS", payload)  # the good frame's only
    assert r.rollbacks[0] == 9


def test_parser_length_over_max_payload():
    """A header whose CRC is right but whose length is over MAX_PAYLOAD is a bad header."""
    length = MAX_PAYLOAD + 8
    head = struct.pack("<BBHIH", MAGIC, T["LOOKUPS"], 9, length,
                       header_crc(T["LOOKUPS"], 9, length))
    r = ParserRun().run(head + encode("READ32", 10, bytes(4)))
    assert [q[1:4] for q in r.requests] == [(0, T["LOOKUPS"], 9), (1, T["READ32"], 10)]
    assert r.requests[0][0] == len(head)


@pytest.mark.parametrize("kind", ["LOOKUPS", "WRITE32"])
def test_parser_bad_payload_crc(kind):
    """A bad CRC-32 gives a bad request after the last byte; the words written are rolled
    back, never committed."""
    payload = bytes(range(8, 24)) if kind == "LOOKUPS" else bytes(8)
    frame = bytearray(encode(kind, 4, payload))
    frame[12] ^= 0x80
    r = ParserRun().run(bytes(frame) + encode("QUIT", 5))
    assert [q[1:4] for q in r.requests] == [(0, T[kind], 4), (1, T["QUIT"], 5)]
    assert r.committed == [] and r.commits == []
    assert r.rollbacks[0] == len(frame) - 1


@pytest.mark.parametrize("cut", [1, 6, 11, 20, 30])
def test_parser_truncated_frame_times_out(cut):
    """A frame whose bytes stop is dropped after `timeout` idle cycles: no request, its
    words rolled back; the next frame is parsed normally."""
    payload = bytes(range(1, 33))
    frame = encode("LOOKUPS", 7, payload)[:cut]
    r = ParserRun().run(list(frame) + [None] * (TIMEOUT + 2) + list(encode("LOOKUPS", 8, payload)))
    assert [q[1:4] for q in r.requests] == [(1, T["LOOKUPS"], 8)]
    assert r.committed == words_of("LOOKUPS", payload)
    if cut > 1:  # the silence dropped a partial frame
        assert r.rollbacks[0] == cut - 1 + TIMEOUT + 1


def test_parser_retransmitted_seq_is_not_committed_again():
    """A frame with the served seq is handed on (the responder answers from its cache), but
    its payload is rolled back."""
    payload = bytes(range(16))
    r = ParserRun(served=(1, 21)).run(encode("LOOKUPS", 21, payload) + encode("LOOKUPS", 22,
                                                                              payload))
    assert [q[1:4] for q in r.requests] == [(1, T["LOOKUPS"], 21), (1, T["LOOKUPS"], 22)]
    assert r.committed == words_of("LOOKUPS", payload)  # once: frame 22's
    r = ParserRun(served=(0, 21)).run(encode("LOOKUPS", 21, payload))  # no seq served yet
    assert r.committed == words_of("LOOKUPS", payload)


def test_parser_full_request_register_drops_the_frame():
    """While a request waits (ready low), a frame that ends is dropped and rolled back."""
    a, b = bytes(range(16)), bytes(range(16, 32))
    first, second = encode("LOOKUPS", 1, a), encode("LOOKUPS", 2, b)
    stall = len(first) + len(second) + 3
    r = ParserRun(ready=lambda cycle: cycle >= stall).run(first + second, tail=10)
    assert [q[:4] for q in r.requests] == [(stall, 1, T["LOOKUPS"], 1)]
    assert r.committed == words_of("LOOKUPS", a)
    assert r.rollbacks == [len(first) + len(second) - 1]


# ---- CommitRing --------------------------------------------------------------------------

class RingRun:
    """Writes frames of words into a CommitRing (respecting ``free``), commits or rolls
    each back, and drains it into sinks and a memory port with random readiness."""

    def __init__(self, seed, ready=0.5, grant=0.7):
        self.dut = CommitRing(RING_WORDS, 6)
        self.rng = random.Random(seed)
        self.ready, self.grant = ready, grant
        self.got = {"lookups": [], "scatter_keys": [], "mem": []}

    async def _sinks(self, ctx):
        d, rng = self.dut, self.rng
        while True:
            for name in ("lookups", "scatter_keys"):
                ctx.set(getattr(d, name).ready, rng.random() < self.ready)
            ctx.set(d.mem.ready, rng.random() < self.ready)
            ctx.set(d.mem_grant, rng.random() < self.grant)
            await ctx.delay(1e-9)
            for name in ("lookups", "scatter_keys"):
                s = getattr(d, name)
                if ctx.get(s.valid) and ctx.get(s.ready):
                    self.got[name].append(ctx.get(s.payload))
            if ctx.get(d.mem.write) and ctx.get(d.mem.ready) and ctx.get(d.mem_grant):
                self.got["mem"].append((ctx.get(d.mem.addr), ctx.get(d.mem.wdata)))
            await ctx.tick()


def test_ring_commits_drains_in_order_and_rolls_back():
    r = RingRun(seed=3)
    rng = random.Random(4)
    want = {"lookups": [], "scatter_keys": [], "mem": []}
    d = r.dut

    async def main(ctx):
        kept = 0
        for _ in range(150):
            n = rng.randrange(1, 6)
            kind = rng.choice(["LOOKUPS", "SCATTER_KEYS", "MEM_WRITE"])
            payload = (struct.pack("<II", 8 * rng.randrange(0, 40), 0) if kind == "MEM_WRITE"
                       else b"") + rng.randbytes(8 * n)
            words = words_of(kind, payload)
            while ctx.get(d.fill.free) < len(words):
                await ctx.tick()
            for word, tag in words:
                ctx.set(d.fill.words.valid, 1)
                ctx.set(d.fill.words.payload, RingWord.const({"word": word, "tag": tag}))
                await ctx.tick()
            ctx.set(d.fill.words.valid, 0)
            commit = rng.random() < 0.7
            mem_words = len(words) - 1 if kind == "MEM_WRITE" else 0
            ctx.set(d.fill.commit if commit else d.fill.rollback, 1)
            ctx.set(d.fill.mem_words, mem_words if commit else 0)
            await ctx.tick()
            ctx.set(d.fill.commit, 0)
            ctx.set(d.fill.rollback, 0)
            ctx.set(d.fill.mem_words, 0)
            if commit:
                kept += 1
                if kind == "MEM_WRITE":
                    base = words[0][0] // 8
                    want["mem"] += [(base + i, w) for i, (w, _) in enumerate(words[1:])]
                else:
                    want[kind.lower()] += [w for w, _ in words]
        for _ in range(400):
            await ctx.tick()
        assert kept > 90
        assert ctx.get(d.fill.free) == RING_WORDS and not ctx.get(d.mem_pending)
    simulate(d, main, r._sinks)
    assert r.got == want


def test_ring_timing_free_space_and_mem_pending():
    """A word is offered 3 cycles after its commit strobe; ``free`` counts committed words
    not yet read from the block RAM; ``mem_pending`` holds until the last MEMDATA word is written."""
    d = CommitRing(RING_WORDS, 6)
    seen = []

    async def main(ctx):
        ctx.set(d.lookups.ready, 0)
        ctx.set(d.mem.ready, 1)
        for word, tag in [(1, RingTag.LOOKUP), (2, RingTag.LOOKUP), (3, RingTag.LOOKUP)]:
            ctx.set(d.fill.words.valid, 1)
            ctx.set(d.fill.words.payload, RingWord.const({"word": word, "tag": tag}))
            await ctx.tick()
        ctx.set(d.fill.words.valid, 0)
        assert ctx.get(d.fill.free) == RING_WORDS  # speculative words take no space yet
        ctx.set(d.fill.commit, 1)
        await ctx.tick()
        ctx.set(d.fill.commit, 0)
        assert not ctx.get(d.lookups.valid)
        assert ctx.get(d.fill.free) == RING_WORDS - 3
        await ctx.tick()
        assert not ctx.get(d.lookups.valid)  # the block RAM's read
        await ctx.tick()
        assert ctx.get(d.lookups.valid) and ctx.get(d.lookups.payload) == 1  # 3 cycles
        for _ in range(5):  # a stalled sink holds the word
            await ctx.tick()
            assert ctx.get(d.lookups.valid) and ctx.get(d.lookups.payload) == 1
        ctx.set(d.lookups.ready, 1)
        for want in (1, 2, 3):  # then one word per cycle
            assert ctx.get(d.lookups.valid) and ctx.get(d.lookups.payload) == want
            seen.append(want)
            await ctx.tick()
        assert not ctx.get(d.lookups.valid) and ctx.get(d.fill.free) == RING_WORDS
        # A MEM_WRITE: the data waits while the grant is low.
        ctx.set(d.mem_grant, 0)
        for word, tag in [(80, RingTag.ADDR), (7, RingTag.MEMDATA), (8, RingTag.MEMDATA)]:
            ctx.set(d.fill.words.valid, 1)
            ctx.set(d.fill.words.payload, RingWord.const({"word": word, "tag": tag}))
            await ctx.tick()
        ctx.set(d.fill.words.valid, 0)
        ctx.set(d.fill.commit, 1)
        ctx.set(d.fill.mem_words, 2)
        await ctx.tick()
        ctx.set(d.fill.commit, 0)
        ctx.set(d.fill.mem_words, 0)
        await ctx.tick().repeat(6)
        assert ctx.get(d.mem_pending) and ctx.get(d.mem.write) and ctx.get(d.mem.addr) == 10
        ctx.set(d.mem_grant, 1)
        await ctx.tick().repeat(2)
        assert not ctx.get(d.mem_pending)
    simulate(d, main)
    assert seen == [1, 2, 3]


# ---- Responder ---------------------------------------------------------------------------

RESULTS = {"remap": 20, "wide": 100}


def decode_frames(data_bytes):
    """Responses from raw bytes, checked with zlib.crc32 and struct (independently of
    hotline.host.link)."""
    out, at = [], 0
    while at < len(data_bytes):
        magic, kind, seq, length, hcrc = struct.unpack_from("<BBHIH", data_bytes, at)
        assert magic == MAGIC
        assert hcrc == zlib.crc32(data_bytes[at + 1:at + 8]) & 0xFFFF
        end = at + 10 + length
        (crc,) = struct.unpack_from("<I", data_bytes, end)
        assert crc == zlib.crc32(data_bytes[at + 1:end])
        out.append((kind, seq, bytes(data_bytes[at + 10:end])))
        at = end + 4
    return out


class ResponderRun:
    """A Responder with a CSR register file, a memory window, result sources and a byte
    sink whose ``ready`` is random with probability ``tx_ready``."""

    def __init__(self, seed=0, tx_ready=1.0):
        self.dut = Responder(RESULTS, result_depth=8, window_bytes=WINDOW_BYTES,
                             max_request=MAX_REQUEST, clock_hz=1234, baud=56,
                             csr_addr_width=12, mem_addr_width=6)
        self.rng = random.Random(seed)
        self.tx_ready = tx_ready
        self.tx = bytearray()
        self.tx_cycles = []
        self.regs = {}
        self.memory = [self.rng.getrandbits(64) for _ in range(WINDOW_BYTES // 8)]
        self.results = {n: [] for n in RESULTS}
        self.cycle = 0

    def background(self):
        return [self._tx, self._csr, self._mem, *(self._source(n) for n in RESULTS)]

    async def _tx(self, ctx):
        tx = self.dut.tx
        while True:
            ctx.set(tx.ready, self.rng.random() < self.tx_ready)
            _, _, valid, ready, byte = await ctx.tick().sample(tx.valid, tx.ready, tx.payload)
            if valid and ready:
                self.tx.append(byte)
                self.tx_cycles.append(self.cycle)
            self.cycle += 1

    async def _csr(self, ctx):
        await csr_registers(ctx, self.dut.csr, self.regs)

    async def _mem(self, ctx):
        mem = self.dut.mem
        while True:
            ready = self.rng.random() < 0.6
            ctx.set(mem.ready, ready)
            _, _, read, addr = await ctx.tick().sample(mem.read, mem.addr)
            if read and ready:
                ctx.set(mem.rvalid, 1)
                ctx.set(mem.rdata, self.memory[addr])
            else:
                ctx.set(mem.rvalid, 0)

    def _source(self, name):
        async def run(ctx):
            s = getattr(self.dut, name)
            while True:
                ctx.set(s.valid, bool(self.results[name]))
                if self.results[name]:
                    ctx.set(s.payload, self.results[name][0])
                _, _, valid, ready = await ctx.tick().sample(s.valid, s.ready)
                if valid and ready:
                    self.results[name].pop(0)
        return run

    async def request(self, ctx, kind, seq, addr=0, value=0, good=1, reject=0):
        """Offer one request; return the cycle it was taken and the response decoded."""
        d = self.dut
        ctx.set(d.requests.payload, Request.const({"good": good, "kind": T.get(kind, kind),
                                                   "seq": seq, "addr": addr, "value": value,
                                                   "reject": reject}))
        ctx.set(d.requests.valid, 1)
        await ctx.tick().until(d.requests.ready)
        taken = self.cycle - 1
        ctx.set(d.requests.valid, 0)
        start = len(self.tx)
        for _ in range(5000):
            frames = decode_frames(self.tx[start:]) if self._complete(start) else []
            if frames:
                return taken, start, frames[0]
            await ctx.tick()
        raise AssertionError("no response")

    def _complete(self, start):
        b = self.tx[start:]
        return len(b) >= 10 and len(b) >= 14 + struct.unpack_from("<I", b, 4)[0]


def _responder_script(run):
    """Every response kind; returns the responses as (kind, seq, payload)."""
    got = []

    async def main(ctx):
        async def ask(*args, **kw):
            got.append((await run.request(ctx, *args, **kw))[2])
        await ask("INFO", 1)
        await ask("WRITE32", 2, addr=0x10, value=0xDEADBEEF)
        await ask("READ32", 3, addr=0x10)
        await ask("WRITE32", 4, addr=CSR_LIMIT, value=1)                  # SLVERR
        await ask("READ32", 5, addr=CSR_LIMIT)                            # SLVERR
        await ask("LOOKUPS", 6, good=0)                                   # NAK
        await ask("LOOKUPS", 6, reject=BUSY)                              # BUSY
        for code in (BAD_LENGTH, TOO_LONG, UNKNOWN, WINDOW):
            await ask("LOOKUPS", 10 + code, reject=code)                  # ERROR
        await ask("MEM_READ", 20, addr=40, value=48)
        await ask("MEM_READ", 21, addr=WINDOW_BYTES - 8, value=16)        # outside
        await ask("MEM_READ", 22, addr=4, value=8)                        # unaligned
        ctx.set(run.dut.mem_pending, 1)
        await ask("MEM_READ", 23, addr=0, value=8)                        # BUSY
        ctx.set(run.dut.mem_pending, 0)
        await ask("QUIT", 24)
        await ask("QUIT", 24)                                             # cached ACK
        await ask("READ32", 3, addr=0x10)                                 # seq 3 again: new
        await ask("READ32", 3, addr=0x10)                                 # cached
        run.results["remap"] += [5, 6, 7]
        run.results["wide"] += [1 << 99, 3]
        await ctx.tick().repeat(10)
        await ask("RESULTS", 30)
        run.results["remap"] += [8]
        await ctx.tick().repeat(10)
        await ask("RESULTS", 30)                                          # the same beats
        await ask("RESULTS", 31)                                          # the new one
        await ask("LOOKUPS", 31, good=0)                                  # NAK, not cached
        await ask("RESULTS", 31)                                          # cached after NAK
    simulate(run.dut, main, *run.background())
    return got


def _expected(run):
    mem = b"".join(w.to_bytes(8, "little") for w in run.memory)
    err = {c: ERROR_MESSAGES[c].encode() for c in ERROR_MESSAGES}
    ack, data_, nak, error, busy = (T[k] for k in ("ACK", "DATA", "NAK", "ERROR", "BUSY"))
    first = pack_results([[5, 6, 7], [1 << 99, 3]], list(RESULTS.values()))
    second = pack_results([[8], []], list(RESULTS.values()))
    return [
        (data_, 1, struct.pack("<IIII", WINDOW_BYTES, MAX_REQUEST, 1234, 56)),
        (ack, 2, b""), (data_, 3, struct.pack("<I", 0xDEADBEEF)),
        (error, 4, err[CSR]), (error, 5, err[CSR]), (nak, 6, b""), (busy, 6, b""),
        *((error, 10 + c, err[c]) for c in (BAD_LENGTH, TOO_LONG, UNKNOWN, WINDOW)),
        (data_, 20, mem[40:88]), (error, 21, err[WINDOW]), (error, 22, err[WINDOW]),
        (busy, 23, b""), (ack, 24, b""), (ack, 24, b""),
        (data_, 3, struct.pack("<I", 0xDEADBEEF)), (data_, 3, struct.pack("<I", 0xDEADBEEF)),
        (data_, 30, first), (data_, 30, first), (data_, 31, second), (nak, 31, b""),
        (data_, 31, second),
    ]


def test_responder_answers_every_kind():
    run = ResponderRun()
    assert _responder_script(run) == _expected(run)


def test_responder_backpressure_on_the_byte_stream():
    """A sink that is ready a third of the time gets the same bytes."""
    fast, slow = ResponderRun(seed=5), ResponderRun(seed=5, tx_ready=0.33)
    assert _responder_script(slow) == _responder_script(fast) == _expected(fast)
    assert bytes(slow.tx) == bytes(fast.tx)


def test_responder_latency():
    """NAK: the magic byte 2 cycles after the request is taken; cached/INFO: 3; then one
    byte per cycle; the next request is taken the cycle after the last CRC byte."""
    run = ResponderRun()
    log = []

    async def main(ctx):
        for kind, kw in (("LOOKUPS", {"good": 0}), ("INFO", {}), ("QUIT", {})):
            taken, start, _ = await run.request(ctx, kind, 1 + len(log), **kw)
            log.append((taken, run.tx_cycles[start:]))
    simulate(run.dut, main, *run.background())
    for (taken, cycles), delay in zip(log, (2, 3, 3)):
        assert cycles[0] == taken + delay
        assert cycles == list(range(cycles[0], cycles[0] + len(cycles)))
    for (_, cycles), (nxt, _) in zip(log, log[1:]):
        assert nxt == cycles[-1] + 1


# ---- the CRC: contract, host and gateware agree ------------------------------------------

def test_contract_crc_is_zlibs():
    """The contract's CRC-32 parameters are zlib's (bit-serial reference)."""
    rng = random.Random(7)
    for n in (0, 1, 7, 64):
        data_bytes = rng.randbytes(n)
        state = CRC32_INIT
        for byte in data_bytes:
            state ^= byte
            for _ in range(8):
                state = (state >> 1) ^ (CRC32_POLY if state & 1 else 0)
        assert state ^ 0xFFFFFFFF == zlib.crc32(data_bytes)


def test_gateware_crc_is_the_contracts():
    """The stages' CRC (`LINK_CRC32`, built from the contract's constants) is the library's
    CRC32_ETHERNET, and its byte-wide Processor computes zlib's CRC-32, as the host does."""
    from amaranth.lib.crc import Processor, catalog
    from hotline.hw.link_layouts import LINK_CRC32
    want = catalog.CRC32_ETHERNET
    for name in ("crc_width", "polynomial", "initial_crc", "reflect_input", "reflect_output",
                 "xor_output"):
        assert getattr(LINK_CRC32, name) == getattr(want, name), name
    rng = random.Random(8)
    messages = [b"", b"\xa5", rng.randbytes(9), rng.randbytes(40)]
    dut = Processor(LINK_CRC32(8))
    got = []

    async def main(ctx):
        for message in messages:
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            for byte in message:
                ctx.set(dut.valid, 1)
                ctx.set(dut.data, byte)
                await ctx.tick()
            ctx.set(dut.valid, 0)
            got.append(ctx.get(dut.crc))
    simulate(dut, main)
    assert got == [zlib.crc32(m) for m in messages]
    assert LINK_CRC32(8).compute(messages[3]) == zlib.crc32(messages[3])
