"""UARTLink: the UART in domain ``uart``, its bytes crossing to ``sync`` through AsyncFIFOs, in
Amaranth's simulator with unrelated clocks (periods that are no integer multiples of each
other, the UART's faster and slower, phases offset). The host's line is driven in absolute
time at exactly the baud (a third clock), bytes back to back; the tx pin is checked bit by
bit with test_uart's strict decoder. Every byte must arrive once, in order, with no overrun;
a ``sync`` clock below `min_sync_hz` must overrun (the bound is real), and the overrun is
reported."""
import random

import pytest
from helpers import two_clock_simulator

from hotline.hw.uart_link import UARTLink, min_sync_hz
from test_uart import decode

UART_NS = 10.0  # the uart clock's period; the others are multiples of it


def bits(byte):
    return [0, *((byte >> k) & 1 for k in range(8)), 1]


def run_link(divisor, sync_ratio, rx_data, tx_data, *, rx_depth=4, tx_busy=0.0, seed=0,
             sync_phase=0.37, host_skew=1.0):
    """Simulate a UARTLink; ``sync_ratio``: sync period / uart period; the host sends
    ``rx_data`` back to back at the baud times ``host_skew`` while ``tx_data`` is offered on
    ``i`` (random gaps with probability ``tx_busy``). Returns (bytes out of ``o``, tx pin per
    uart cycle, overrun pulses)."""
    dut = UARTLink(divisor, rx_depth=rx_depth)
    rng = random.Random(seed)
    uart_s = UART_NS * 1e-9
    bit_s = divisor * uart_s * host_skew
    got, wave, overruns = [], [], []
    # enough uart cycles for every byte each way, plus slack for the crossings
    cycles = (max(len(rx_data), len(tx_data)) + 4) * 10 * divisor + 200
    done = {"host": False}

    async def host(ctx):
        await ctx.delay(3.3 * bit_s)
        for byte in rx_data:
            for level in bits(byte):
                ctx.set(dut.rx, level)
                await ctx.delay(bit_s)
        done["host"] = True

    async def consumer(ctx):  # the bridge: always ready
        ctx.set(dut.o.ready, 1)
        async for _, _, valid, payload in ctx.tick("sync").sample(dut.o.valid, dut.o.payload):
            if valid:
                got.append(payload)

    async def producer(ctx):
        for byte in tx_data:
            while rng.random() < tx_busy:
                await ctx.tick("sync")
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, byte)
            await ctx.tick("sync").until(dut.i.ready)
            ctx.set(dut.i.valid, 0)

    async def pins(ctx):
        for _ in range(cycles):
            *_, tx, ov = await ctx.tick("uart").sample(dut.tx, dut.overrun)
            wave.append(tx)
            overruns.append(ov)

    sim = two_clock_simulator(dut, uart_s, sync_ratio, sync_phase)
    sim.add_testbench(host)
    sim.add_process(consumer)
    sim.add_testbench(producer, background=True)
    sim.add_testbench(pins)
    sim.run()
    assert done["host"]
    return got, wave, sum(overruns)


# (divisor, sync period / uart period): the UART faster (1.37, 3.3), slower (0.61), equal
# frequency at a phase offset (1.0); divisors of the boards (20, 16) and the smallest (8).
RATIOS = [(16, 1.37), (16, 0.61), (20, 3.3), (8, 1.0), (8, 0.61), (20, 1.37)]


@pytest.mark.parametrize("divisor, ratio", RATIOS)
def test_bytes_cross_both_ways_back_to_back(divisor, ratio):
    rng = random.Random(divisor * 100 + round(ratio * 100))
    rx_data = [0x00, 0xFF, 0xA5, 0x5A] + [rng.randrange(256) for _ in range(24)]
    tx_data = [0xFF, 0x00, 0x5A] + [rng.randrange(256) for _ in range(25)]
    got, wave, overruns = run_link(divisor, ratio, rx_data, tx_data, seed=divisor)
    assert got == rx_data and overruns == 0
    frames = decode(wave, divisor)
    assert [b for _, b in frames] == tx_data
    # the transmitter never starves: each start bit right after the previous stop bit
    starts = [c for c, _ in frames]
    assert {b - a for a, b in zip(starts, starts[1:])} == {10 * divisor}


@pytest.mark.parametrize("skew", [0.97, 1.03])
def test_host_off_baud_and_a_slow_producer(skew):
    rng = random.Random(7)
    data = [rng.randrange(256) for _ in range(20)]
    got, wave, overruns = run_link(16, 1.37, data, data, tx_busy=0.95, seed=3, host_skew=skew)
    assert got == data and overruns == 0
    assert [b for _, b in decode(wave, 16)] == data


def test_min_sync_hz_is_the_bound():
    """Back-to-back bytes into a 4-byte rx FIFO: a sync clock just at `min_sync_hz` never
    overruns; one that reads a byte in two byte times cannot keep up, and every lost byte
    shows as an overrun pulse."""
    divisor, depth = 8, 4
    uart_hz = 1 / (UART_NS * 1e-9)
    limit_ratio = uart_hz / min_sync_hz(uart_hz, divisor, depth)  # slowest sync period / uart
    rng = random.Random(11)
    data = [rng.randrange(256) for _ in range(40)]
    got, _, overruns = run_link(divisor, limit_ratio * 0.999, data, [], rx_depth=depth)
    assert got == data and overruns == 0
    got, _, overruns = run_link(divisor, 2 * 10 * divisor, data, [], rx_depth=depth)
    assert overruns > 0 and len(got) + overruns <= len(data)  # the last few may still be queued
    it = iter(data)
    assert all(any(b == d for d in it) for b in got)  # what arrives is in order, unaltered
