"""HostLinkBridge + WindowRAM against the host-link reference (`hotline.contract.link`, zlib CRC-32).

The bridge is driven with frames encoded by `hotline.contract.link.encode` a byte per cycle (as the
UART receiver delivers them) and its bytes are decoded with `hotline.host.link.FrameReader`; the CSR
bus is a Python register file, the memory window is checked against a bytearray, the
lookup/scatter streams and result streams against the beats sent. Corrupted, truncated,
repeated and oversized frames and a full ring are covered.
"""
import random
import struct

import pytest
from amaranth import Module
from amaranth.hdl import Elaboratable
from amaranth.sim import Simulator

from hotline.hw.host_link import ERROR_MESSAGES, HostLinkBridge
from hotline.hw.window_ram import WindowRAM
from hotline.contract.link import encode, pack_u64, unpack_results
from hotline.host.link import FrameError, FrameReader

WINDOW = 4096
RESULTS = {"remap": 20, "wide": 100}
WIDTHS = list(RESULTS.values())
CSR_LIMIT = 0x800  # the register model answers SLVERR at and above this address


async def csr_registers(ctx, bus, regs):
    """An AXI4-Lite register file on ``bus`` (a testbench process): writes go into ``regs``
    (a dict), reads come from it; addresses at and above CSR_LIMIT answer SLVERR."""
    while True:
        ctx.set(bus.awready, 1)
        ctx.set(bus.wready, 1)
        ctx.set(bus.arready, 1)
        _, _, awv, wv, arv, addr, data, raddr = await ctx.tick().sample(
            bus.awvalid, bus.wvalid, bus.arvalid, bus.awaddr, bus.wdata, bus.araddr)
        if awv and wv:
            ctx.set(bus.awready, 0)
            ctx.set(bus.wready, 0)
            ctx.set(bus.bvalid, 1)
            ctx.set(bus.bresp, 2 if addr >= CSR_LIMIT else 0)
            if addr < CSR_LIMIT:
                regs[addr] = data
            await ctx.tick().until(bus.bready)
            ctx.set(bus.bvalid, 0)
        elif arv:
            ctx.set(bus.arready, 0)
            ctx.set(bus.rvalid, 1)
            ctx.set(bus.rdata, regs.get(raddr, 0))
            ctx.set(bus.rresp, 2 if raddr >= CSR_LIMIT else 0)
            await ctx.tick().until(bus.rready)
            ctx.set(bus.rvalid, 0)


class Harness(Elaboratable):
    def __init__(self, **kw):
        self.bridge = HostLinkBridge(RESULTS, window_bytes=WINDOW, timeout=400, **kw)
        self.window = WindowRAM(WINDOW)

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge, m.submodules.window = self.bridge, self.window
        b, w = self.bridge, self.window
        m.d.comb += [w.port.addr.eq(b.mem.addr), w.port.wdata.eq(b.mem.wdata),
                     w.port.write.eq(b.mem.write), w.port.read.eq(b.mem.read),
                     b.mem.ready.eq(w.port.ready), b.mem.rdata.eq(w.port.rdata),
                     b.mem.rvalid.eq(w.port.rvalid)]
        return m


class Link:
    """The host side: frames in, responses out; background processes model the bus ends."""

    def __init__(self, h, seed=0, tx_busy=0.3):
        self.h, self.b = h, h.bridge
        self.rng = random.Random(seed)
        self.tx_busy = tx_busy
        self.reader = FrameReader()
        self.regs = {}
        self.got = {"lookups": [], "scatter_keys": [], "cam_cmds": []}
        self.sink_ready = True
        self.results = {n: [] for n in RESULTS}

    def add_to(self, sim):
        for proc in (self._tx, self._csr, self._sink("lookups"), self._sink("scatter_keys"),
                     self._sink("cam_cmds"),
                     *(self._source(n) for n in RESULTS)):
            sim.add_testbench(proc, background=True)

    async def _tx(self, ctx):
        while True:
            ctx.set(self.b.tx.ready, self.rng.random() >= self.tx_busy)
            _, _, valid, ready, byte = await ctx.tick().sample(self.b.tx.valid, self.b.tx.ready,
                                                               self.b.tx.payload)
            if valid and ready:
                self.reader.feed(bytes([byte]))

    async def _csr(self, ctx):
        await csr_registers(ctx, self.b.csr, self.regs)

    def _sink(self, name):
        async def run(ctx):
            s = getattr(self.b, name)
            while True:
                ctx.set(s.ready, self.sink_ready)
                _, _, valid, ready, payload = await ctx.tick().sample(s.valid, s.ready, s.payload)
                if valid and ready:
                    self.got[name].append(payload)
        return run

    def _source(self, name):
        async def run(ctx):
            s = getattr(self.b, name)
            while True:
                if self.results[name]:
                    ctx.set(s.valid, 1)
                    ctx.set(s.payload, self.results[name][0])
                    _, _, ready = await ctx.tick().sample(s.ready)
                    if ready:
                        self.results[name].pop(0)
                else:
                    ctx.set(s.valid, 0)
                    await ctx.tick()
        return run

    async def send(self, ctx, data, gap=0):
        for byte in data:
            ctx.set(self.b.rx.valid, 1)
            ctx.set(self.b.rx.payload, byte)
            await ctx.tick()
            ctx.set(self.b.rx.valid, 0)
            if gap:
                await ctx.tick().repeat(gap)

    async def response(self, ctx, limit=20000):
        for _ in range(limit):
            frame = self.reader.next()
            if frame is not None:
                return frame
            await ctx.tick()
        raise AssertionError("no response")

    async def request(self, ctx, kind, seq, payload=b"", gap=0):
        await self.send(ctx, encode(kind, seq, payload), gap)
        return await self.response(ctx)

    async def silent(self, ctx, cycles=1500):
        await ctx.tick().repeat(cycles)
        assert self.reader.next() is None and not self.reader.buf


def run(bench, seed=0, **kw):
    h = Harness(**kw)
    link = Link(h, seed)
    sim = Simulator(h)
    sim.add_clock(1e-8)
    link.add_to(sim)

    async def main(ctx):
        await bench(ctx, link)
    sim.add_testbench(main)
    sim.run()
    return link


def test_csr_access_and_info():
    async def bench(ctx, link):
        payload = struct.pack("<II", 0x10, 0xDEADBEEF)
        assert await link.request(ctx, "WRITE32", 1, payload) == ("ACK", 1, b"")
        assert link.regs == {0x10: 0xDEADBEEF}
        assert await link.request(ctx, "READ32", 2, struct.pack("<I", 0x10)) == \
            ("DATA", 2, struct.pack("<I", 0xDEADBEEF))
        assert await link.request(ctx, "WRITE32", 3, struct.pack("<II", CSR_LIMIT, 1)) == \
            ("ERROR", 3, b"csr error")
        assert await link.request(ctx, "INFO", 4) == \
            ("DATA", 4, struct.pack("<IIII", WINDOW, 2048, 0, 0))
        assert await link.request(ctx, "QUIT", 5) == ("ACK", 5, b"")
    run(bench)


@pytest.mark.parametrize("gap", [0, 3])
def test_streams_in_order_and_once(gap):
    rng = random.Random(gap)
    lookups = [rng.getrandbits(64) for _ in range(300)]
    keys = [rng.getrandbits(64) for _ in range(40)]
    cmds = [rng.getrandbits(64) for _ in range(17)]

    async def bench(ctx, link):
        seq = 1
        for chunk in (lookups[:100], lookups[100:256]):
            assert await link.request(ctx, "LOOKUPS", seq, pack_u64(chunk), gap) == \
                ("ACK", seq, b"")
            seq += 1
        assert await link.request(ctx, "SCATTER_KEYS", seq, pack_u64(keys), gap) == \
            ("ACK", seq, b"")
        # The same frame again (its ACK was "lost"): answered, not delivered twice.
        assert await link.request(ctx, "SCATTER_KEYS", seq, pack_u64(keys), gap) == \
            ("ACK", seq, b"")
        seq += 1
        assert await link.request(ctx, "CAM_CMDS", seq, pack_u64(cmds), gap) == ("ACK", seq, b"")
        seq += 1
        assert await link.request(ctx, "LOOKUPS", seq, pack_u64(lookups[256:]), gap) == \
            ("ACK", seq, b"")
        await ctx.tick().repeat(50)
        assert link.got == {"lookups": lookups, "scatter_keys": keys, "cam_cmds": cmds}
    run(bench, seed=gap)


def test_memory_window():
    rng = random.Random(5)
    ref = bytearray(WINDOW)

    async def bench(ctx, link):
        seq = 0
        for _ in range(6):
            addr = rng.randrange(0, WINDOW // 8) * 8
            n = rng.randrange(1, min(200, (WINDOW - addr) // 8) + 1) * 8
            data = rng.randbytes(n)
            seq += 1
            assert await link.request(ctx, "MEM_WRITE", seq, struct.pack("<II", addr, 0) + data) \
                == ("ACK", seq, b"")
            ref[addr:addr + n] = data
            await ctx.tick().repeat(n // 8 + 4)  # the ring drains into the window
            a = rng.randrange(0, WINDOW // 8) * 8
            length = rng.randrange(0, (WINDOW - a) // 8 + 1) * 8
            seq += 1
            assert await link.request(ctx, "MEM_READ", seq, struct.pack("<II", a, length)) == \
                ("DATA", seq, bytes(ref[a:a + length]))
        bad = [("MEM_WRITE", struct.pack("<II", WINDOW - 8, 0) + bytes(16)),
               ("MEM_WRITE", struct.pack("<II", 4, 0) + bytes(8)),
               ("MEM_READ", struct.pack("<II", WINDOW - 8, 16)),
               ("MEM_READ", struct.pack("<II", 0xFFFFFFF8, 16))]
        for kind, payload in bad:
            seq += 1
            assert await link.request(ctx, kind, seq, payload) == ("ERROR", seq, b"outside window")
        seq += 1
        assert await link.request(ctx, "MEM_READ", seq, struct.pack("<II", 0, WINDOW)) == \
            ("DATA", seq, bytes(ref))
    run(bench)


def test_results_replayed_until_acknowledged():
    rng = random.Random(9)
    beats = {n: [rng.getrandbits(w) for _ in range(37)] for n, w in RESULTS.items()}

    async def bench(ctx, link):
        link.results["remap"].extend(beats["remap"][:20])
        link.results["wide"].extend(beats["wide"][:5])
        await ctx.tick().repeat(40)
        first = await link.request(ctx, "RESULTS", 1)
        assert first[0] == "DATA"
        assert unpack_results(first[2], WIDTHS) == [beats["remap"][:20], beats["wide"][:5]]
        link.results["remap"].extend(beats["remap"][20:])
        await ctx.tick().repeat(40)
        # A repeated seq gets the same beats, not the new ones.
        assert await link.request(ctx, "RESULTS", 1) == first
        link.results["wide"].extend(beats["wide"][5:])
        await ctx.tick().repeat(60)
        second = await link.request(ctx, "RESULTS", 2)
        assert unpack_results(second[2], WIDTHS) == [beats["remap"][20:], beats["wide"][5:]]
        assert unpack_results((await link.request(ctx, "RESULTS", 3))[2], WIDTHS) == [[], []]
    run(bench)


def test_result_buffer_holds_unacknowledged_beats():
    """A full buffer back-pressures its stream; acknowledging (the next RESULTS) frees it."""
    beats = list(range(1, 41))

    async def bench(ctx, link):
        link.results["remap"].extend(beats)
        await ctx.tick().repeat(60)
        first = unpack_results((await link.request(ctx, "RESULTS", 1))[2], WIDTHS)[0]
        assert first == beats[:16]  # result_depth
        await ctx.tick().repeat(60)
        # Still held: the first 16 are not acknowledged yet.
        assert len(link.results["remap"]) == 24
        # RESULTS 2 frees them; the beats that then enter go out with RESULTS 3.
        assert unpack_results((await link.request(ctx, "RESULTS", 2))[2], WIDTHS)[0] == []
        await ctx.tick().repeat(60)
        assert unpack_results((await link.request(ctx, "RESULTS", 3))[2], WIDTHS)[0] == beats[16:32]
    run(bench, result_depth=16)


def test_corrupt_truncated_and_malformed_frames():
    keys = list(range(100, 132))

    async def bench(ctx, link):
        frame = bytearray(encode("LOOKUPS", 1, pack_u64(keys)))
        frame[40] ^= 0x10                                   # payload bit flip -> NAK
        await link.send(ctx, frame)
        assert (await link.response(ctx))[0] == "NAK"
        head = bytearray(encode("WRITE32", 2, bytes(8)))
        head[4] ^= 1                                        # length bit flip -> header NAK
        await link.send(ctx, head)
        assert (await link.response(ctx))[0] == "NAK"
        await link.silent(ctx)                              # the rest of it is skipped quietly
        await link.send(ctx, encode("LOOKUPS", 3, pack_u64(keys))[:30])  # truncated
        await link.silent(ctx)                              # ... dropped after the timeout
        assert await link.request(ctx, "LOOKUPS", 4, pack_u64(keys)) == ("ACK", 4, b"")
        await link.send(ctx, b"\x00\x17")                   # line noise before a frame
        assert await link.request(ctx, "READ32", 5, bytes(4)) == ("DATA", 5, bytes(4))
        # A stray magic byte makes the frame behind it a bad header: NAK, and the resend works.
        await link.send(ctx, b"\xa5")
        assert (await link.request(ctx, "READ32", 55, bytes(4)))[0] == "NAK"
        await link.silent(ctx)
        assert await link.request(ctx, "READ32", 55, bytes(4)) == ("DATA", 55, bytes(4))
        msg = {k: v.encode() for k, v in ERROR_MESSAGES.items()}
        for seq, (kind, payload, code) in enumerate([
                ("WRITE32", bytes(4), 1), ("LOOKUPS", bytes(12), 1), ("RESULTS", bytes(8), 1),
                ("LOOKUPS", bytes(2056), 2), ("ACK", b"", 3)], start=6):
            assert await link.request(ctx, kind, seq, payload) == ("ERROR", seq, msg[code])
        await ctx.tick().repeat(50)
        assert link.got["lookups"] == keys                  # only frame 4's keys arrived
    run(bench)


def test_busy_when_the_ring_is_full():
    """The ring holds 512 words; a frame that does not fit its free space is refused whole."""
    rng = random.Random(3)
    sizes = {1: 256, 2: 240, 3: 24, 4: 16, 6: 24}
    keys = {seq: [rng.getrandbits(64) for _ in range(n)] for seq, n in sizes.items()}

    async def bench(ctx, link):
        link.sink_ready = False
        for seq in (1, 2):
            assert await link.request(ctx, "LOOKUPS", seq, pack_u64(keys[seq])) == ("ACK", seq, b"")
        # 18 words free (16, and the drain holds two words taken from the ring: the one
        # offered and the one read behind it): 24 do not fit, 16 do, 2 more do, 1 more not.
        assert await link.request(ctx, "LOOKUPS", 3, pack_u64(keys[3])) == ("BUSY", 3, b"")
        assert await link.request(ctx, "LOOKUPS", 4, pack_u64(keys[4])) == ("ACK", 4, b"")
        assert await link.request(ctx, "LOOKUPS", 5, pack_u64(keys[4][:2])) == ("ACK", 5, b"")
        assert await link.request(ctx, "LOOKUPS", 6, pack_u64(keys[4][:1])) == ("BUSY", 6, b"")
        link.sink_ready = True
        await ctx.tick().repeat(700)
        assert await link.request(ctx, "LOOKUPS", 7, pack_u64(keys[6])) == ("ACK", 7, b"")
        await ctx.tick().repeat(100)
        assert link.got["lookups"] == keys[1] + keys[2] + keys[4] + keys[4][:2] + keys[6]
    run(bench)


def test_memory_read_behind_stalled_lookups_is_busy_not_stuck():
    """A MEM_READ may not overtake a MEM_WRITE still in the ring behind lookups that wait for
    the host to drain results; it is answered BUSY (not held, which would deadlock)."""
    data = bytes(range(64))

    async def bench(ctx, link):
        link.sink_ready = False
        assert await link.request(ctx, "LOOKUPS", 1, pack_u64(range(8))) == ("ACK", 1, b"")
        assert await link.request(ctx, "MEM_WRITE", 2, struct.pack("<II", 64, 0) + data) == \
            ("ACK", 2, b"")
        read = struct.pack("<II", 64, 64)
        assert await link.request(ctx, "MEM_READ", 3, read) == ("BUSY", 3, b"")
        assert await link.request(ctx, "READ32", 4, bytes(4)) == ("DATA", 4, bytes(4))
        link.sink_ready = True
        await ctx.tick().repeat(50)
        assert await link.request(ctx, "MEM_READ", 5, read) == ("DATA", 5, data)
    run(bench)


def test_reference_decoder_rejects_what_the_bridge_sends_corrupted():
    """Guard for the harness itself: the reference decoder catches a flipped response bit."""
    r = FrameReader()
    data = bytearray(encode("DATA", 1, b"abcd"))
    data[-6] ^= 1
    r.feed(bytes(data))
    with pytest.raises(FrameError):
        r.next()


def test_open_starts_a_fresh_session():
    """OPEN drops what the last session left: the ring's undrained words (a MEM_WRITE too, so
    MEM_READ is no longer BUSY) and the result beats not yet handed out; it empties the cache,
    so a request under the last session's seq runs; it is never answered from the cache
    itself, even under the cached seq, and it echoes its nonce."""
    data = bytes(range(64))
    nonce = struct.pack("<I", 0x1234_5678)

    async def bench(ctx, link):
        link.sink_ready = False
        assert await link.request(ctx, "LOOKUPS", 1, pack_u64(range(8))) == ("ACK", 1, b"")
        assert await link.request(ctx, "MEM_WRITE", 2, struct.pack("<II", 64, 0) + data) == \
            ("ACK", 2, b"")
        link.results["remap"].extend([5, 6, 7])
        await ctx.tick().repeat(40)
        assert await link.request(ctx, "WRITE32", 7, struct.pack("<II", 0x10, 1)) == \
            ("ACK", 7, b"")
        assert await link.request(ctx, "OPEN", 3, nonce) == ("DATA", 3, nonce)
        assert await link.request(ctx, "OPEN", 3, nonce) == ("DATA", 3, nonce)  # a resend
        assert await link.request(ctx, "WRITE32", 7, struct.pack("<II", 0x10, 2)) == \
            ("ACK", 7, b"")
        assert link.regs[0x10] == 2, "a request under the last session's seq was not run"
        link.sink_ready = True
        await ctx.tick().repeat(50)
        assert link.got["lookups"] == []
        assert await link.request(ctx, "MEM_READ", 4, struct.pack("<II", 64, 64)) == \
            ("DATA", 4, bytes(64))
        assert unpack_results((await link.request(ctx, "RESULTS", 5))[2], WIDTHS) == [[], []]
        other = struct.pack("<I", 0xCAFE)
        assert await link.request(ctx, "OPEN", 5, other) == ("DATA", 5, other)  # cached seq
        assert await link.request(ctx, "LOOKUPS", 8, pack_u64(range(3))) == ("ACK", 8, b"")
        link.results["remap"].append(9)
        await ctx.tick().repeat(50)
        assert link.got["lookups"] == [0, 1, 2]
        assert unpack_results((await link.request(ctx, "RESULTS", 9))[2], WIDTHS) == [[9], []]
        assert await link.request(ctx, "OPEN", 10, bytes(8)) == ("ERROR", 10, b"bad length")
    run(bench)
