"""WindowRAM: AXI4 bursts and word-port accesses against a bytearray, out-of-window bursts
answered SLVERR without touching memory, read backpressure."""
import random

import pytest
from amaranth.sim import Simulator

from hotline.hw.window_ram import WindowRAM

SIZE = 2048


async def axi_write(ctx, bus, addr, beats, strobes):
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.awlen, len(beats) - 1)
    ctx.set(bus.awvalid, 1)
    await ctx.tick().until(bus.awready)
    ctx.set(bus.awvalid, 0)
    for i, (beat, strb) in enumerate(zip(beats, strobes)):
        ctx.set(bus.wdata, beat)
        ctx.set(bus.wstrb, strb)
        ctx.set(bus.wlast, i == len(beats) - 1)
        ctx.set(bus.wvalid, 1)
        await ctx.tick().until(bus.wready)
    ctx.set(bus.wvalid, 0)
    ctx.set(bus.bready, 1)
    *_, resp = await ctx.tick().sample(bus.bresp).until(bus.bvalid)
    ctx.set(bus.bready, 0)
    return resp


async def axi_read(ctx, bus, addr, n, rng, busy):
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arlen, n - 1)
    ctx.set(bus.arvalid, 1)
    await ctx.tick().until(bus.arready)
    ctx.set(bus.arvalid, 0)
    out = []
    while True:
        ready = rng.random() >= busy
        ctx.set(bus.rready, ready)
        _, _, valid, data, resp, last = await ctx.tick().sample(bus.rvalid, bus.rdata,
                                                                 bus.rresp, bus.rlast)
        if valid and ready:
            out.append((data, resp))
            assert last == (len(out) == n)
            if last:
                break
    ctx.set(bus.rready, 0)
    return out


@pytest.mark.parametrize("busy", [0.0, 0.5])
def test_bursts_and_port_against_a_bytearray(busy):
    dut = WindowRAM(SIZE)
    rng = random.Random(int(busy * 10))
    ref = bytearray(SIZE)
    words = SIZE // 8

    async def bench(ctx):
        for _ in range(40):
            n = rng.randrange(1, 20)
            start = rng.randrange(0, words + 8)
            addr = start * 8
            inside = start + n <= words
            op = rng.choice(["write", "read", "port_write", "port_read"])
            if op == "write":
                beats = [rng.getrandbits(64) for _ in range(n)]
                strobes = [rng.getrandbits(8) for _ in range(n)]
                resp = await axi_write(ctx, dut.bus, addr, beats, strobes)
                assert resp == (0 if inside else 2)
                if inside:
                    for i, (beat, strb) in enumerate(zip(beats, strobes)):
                        for b in range(8):
                            if strb >> b & 1:
                                ref[addr + 8 * i + b] = beat >> (8 * b) & 0xFF
            elif op == "read":
                got = await axi_read(ctx, dut.bus, addr, n, rng, busy)
                if inside:
                    assert got == [(int.from_bytes(ref[addr + 8 * i:addr + 8 * i + 8], "little"), 0)
                                   for i in range(n)]
                else:
                    assert got == [(0, 2)] * n
            elif inside:
                word = rng.randrange(words)
                if op == "port_write":
                    value = rng.getrandbits(64)
                    ctx.set(dut.port.addr, word)
                    ctx.set(dut.port.wdata, value)
                    ctx.set(dut.port.write, 1)
                    await ctx.tick().until(dut.port.ready)
                    ctx.set(dut.port.write, 0)
                    ref[8 * word:8 * word + 8] = value.to_bytes(8, "little")
                else:
                    ctx.set(dut.port.addr, word)
                    ctx.set(dut.port.read, 1)
                    await ctx.tick().until(dut.port.ready)
                    ctx.set(dut.port.read, 0)
                    *_, data = await ctx.tick().sample(dut.port.rdata).until(dut.port.rvalid)
                    assert data == int.from_bytes(ref[8 * word:8 * word + 8], "little")
        for start in (words - 3, words, words + 5):  # straddling the end, wholly outside
            assert await axi_write(ctx, dut.bus, start * 8, [2**64 - 1] * 6, [0xFF] * 6) == 2
        # Nothing else changed (an out-of-window burst must not wrap around into the window).
        got = await axi_read(ctx, dut.bus, 0, words, rng, busy)
        assert b"".join(d.to_bytes(8, "little") for d, _ in got) == bytes(ref)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_size_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        WindowRAM(3000)
