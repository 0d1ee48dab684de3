"""BoardTop (UART in domain ``uart``, bridge + accelerator + window in ``sync``, AsyncFIFOs
between) in Amaranth's simulator with unrelated clocks, against the host-link reference.

The host drives ``rx`` in absolute time at exactly the baud (a third clock), every frame's
bytes back to back and two requests in a row without a gap; frames are encoded with
`hotline.contract.link.encode`. The ``tx`` pin is sampled every ``uart`` cycle, checked bit by
bit (test_uart's strict decoder: every bit exactly ``divisor`` cycles) and decoded with
`hotline.host.link.FrameReader`; the response bytes must equal the reference's encoding of
the expected responses exactly. A small configuration of the board's design keeps the
simulation short; the UART, the crossing, the bridge and the window are the boards' own.
"""
import random
import struct
from dataclasses import replace

import pytest
from helpers import two_clock_simulator

from hotline.contract.link import INFO, encode
from hotline.contract.regmap import ID_VALUE
from hotline.fpga.board_top import BoardTop
from hotline.fpga.boards import BOARDS
from hotline.host.link import FrameReader
from test_uart import decode

# No PLL: the nominal clocks only set the divisor (8) and INFO's clock_hz; the simulated
# periods below are what the test varies.
SPEC = replace(BOARDS["icebreaker"], name="sim", osc_hz=8_000_000, core_hz=8_000_000,
               uart_hz=8_000_000, baud=1_000_000, window_bytes=1024, max_request=64,
               result_depth=16)
UART_S = 10e-9


def session(seed):
    """(request bytes, expected response bytes, groups): groups of requests sent back to back,
    each group waiting for its responses."""
    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(16))
    nonce = rng.randrange(1 << 32)
    groups = [
        [("OPEN", 1, struct.pack("<I", nonce), ("DATA", struct.pack("<I", nonce)))],
        # two requests in a row: the second's bytes follow the first's with no gap
        [("INFO", 2, b"", ("DATA", INFO.pack(SPEC.window_bytes, SPEC.max_request,
                                              SPEC.core_hz, SPEC.baud))),
         ("READ32", 3, struct.pack("<I", 0), ("DATA", struct.pack("<I", ID_VALUE)))],
        [("MEM_WRITE", 4, struct.pack("<II", 128, 0) + data, ("ACK", b""))],
        [("MEM_READ", 5, struct.pack("<II", 128, len(data)), ("DATA", data))],
    ]
    return [[(encode(kind, seq, payload), encode(rkind, seq, rpayload))
             for kind, seq, payload, (rkind, rpayload) in group] for group in groups]


def run_board(sync_ratio, sync_phase, seed):
    dut = BoardTop(SPEC)
    divisor = SPEC.divisor
    bit_s = divisor * UART_S
    groups = session(seed)
    wave = []
    reader = FrameReader()
    got_frames = []

    async def host(ctx):
        ctx.set(dut.rx, 1)
        await ctx.delay(5 * bit_s)
        for group in groups:
            for request, _ in group:
                for byte in request:
                    for level in [0, *((byte >> k) & 1 for k in range(8)), 1]:
                        ctx.set(dut.rx, level)
                        await ctx.delay(bit_s)
            want = len(got_frames) + len(group)
            while len(got_frames) < want:
                await ctx.delay(bit_s)
        await ctx.delay(12 * bit_s)  # the last stop bit leaves the pin

    async def pins(ctx):
        # tx per uart cycle; frames decoded as they complete tell the host when to go on
        pos = 0
        async for _, _, tx in ctx.tick("uart").sample(dut.tx):
            wave.append(tx)
            while pos < len(wave) and wave[pos]:
                pos += 1
            if len(wave) - pos >= 10 * divisor:
                (_, byte), = decode(wave[pos:pos + 10 * divisor], divisor)
                pos += 10 * divisor
                reader.feed(bytes([byte]))
                while (frame := reader.next()) is not None:
                    got_frames.append(frame)

    sim = two_clock_simulator(dut, UART_S, sync_ratio, sync_phase)
    sim.add_testbench(host)
    sim.add_process(pins)
    sim.run()
    frames = decode(wave, divisor)
    sent = b"".join(response for group in groups for _, response in group)
    return bytes(b for _, b in frames), sent, frames


# sync period / uart period: the UART faster (1.37, 2.9), slower (0.61)
@pytest.mark.parametrize("ratio, phase", [(1.37, 0.3), (0.61, 0.8),
                                          pytest.param(2.9, 0.5, marks=pytest.mark.slow)])
def test_frames_through_board_top_match_the_reference(ratio, phase):
    got, want, frames = run_board(ratio, phase, seed=round(ratio * 100))
    assert got == want
    reader = FrameReader()
    reader.feed(got)
    kinds = []
    while (frame := reader.next()) is not None:
        kinds.append(frame[:2])
    assert kinds == [("DATA", 1), ("DATA", 2), ("DATA", 3), ("ACK", 4), ("DATA", 5)]
    # the bridge sends at one byte per sync cycle: a response's bytes leave back to back
    starts = [c for c, _ in frames]
    assert sum(b - a == 10 * SPEC.divisor for a, b in zip(starts, starts[1:])) >= len(frames) - 6
