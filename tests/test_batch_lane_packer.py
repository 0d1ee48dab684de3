"""BatchLanePacker against a Python reference: each batch's entries in beats of L from its
first, whatever the write counts per cycle; empty and one-entry batches, many batches closed
while their entries wait (the batch-count FIFO full), random read stalls."""
import random

import pytest

from hotline.hw.batch_lane_packer import BatchLanePacker

from helpers import simulate


def reference_beats(batches, lanes):
    return [b[i:i + lanes] for b in batches for i in range(0, len(b), lanes)]


def run(lanes, batches, busy, seed, depth=None):
    """Write ``batches`` (lists of entries) at random counts per cycle; the beats read."""
    dut = BatchLanePacker(16, lanes, depth or 4 * lanes, 12, batches=5)
    rng = random.Random(seed)
    beats = []
    total = sum(len(b) for b in batches)

    async def main(ctx):
        pending = [list(b) for b in batches]
        read, idle = 0, 0
        while (pending or read < total) and idle < 200:
            room = ctx.get(dut.w_room)
            count, end, words = 0, 0, []
            if room and pending:
                head = pending[0]
                count = min(rng.randrange(lanes + 1), len(head))
                words = head[:count]
                del head[:count]
                end = int(not head and rng.random() < 0.7)
                if end:
                    pending.pop(0)
            ctx.set(dut.w_count, count)
            ctx.set(dut.w_data, words + [0] * (lanes - count))
            ctx.set(dut.w_end, end)
            ready = rng.random() >= busy
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.o.valid) and ready:
                o = ctx.get(dut.o.payload)
                beats.append([o.data[k] for k in range(o.count)])
                read += o.count
                idle = 0
            else:
                idle += 1
            await ctx.tick()
    simulate(dut, main)
    return beats


def batch_sets(rng):
    value = iter(range(1, 1 << 16))
    sizes = {
        "random sizes": [rng.randrange(0, 20) for _ in range(60)],
        "empty and one-entry batches": [rng.choice([0, 0, 1, 1, 2, 5]) for _ in range(80)],
        "one long batch": [300],
    }
    return {name: [[next(value) for _ in range(s)] for s in ss] for name, ss in sizes.items()}


@pytest.mark.parametrize("lanes", [2, 4])
@pytest.mark.parametrize("busy", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("name", ["random sizes", "empty and one-entry batches", "one long batch"])
def test_beats_are_each_batch_in_lanes(lanes, busy, name):
    batches = batch_sets(random.Random(5))[name]
    beats = run(lanes, batches, busy, seed=lanes * 7 + int(busy * 10))
    assert beats == reference_beats(batches, lanes)


@pytest.mark.parametrize("lanes", [2, 4])
def test_a_ring_without_room_for_the_latched_write_is_refused(lanes):
    """Below 3 L entries an open batch short of a beat could leave no room to close it."""
    with pytest.raises(ValueError, match="at least 3 \\* lanes"):
        BatchLanePacker(16, lanes, 2 * lanes, 12)
