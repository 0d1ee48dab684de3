"""The ColdKeySet's stage components alone (`ColdInput`, `ColdLaneAnswers`), in the Amaranth
simulator at 1, 2 and 4 partitions, against references written here from their docstrings:
every cycle's handshake and registers, random stalls, clearing passes and epoch wraps. (The
whole set against the model: test_cold_key_set.)
"""
import random

import pytest
from helpers import simulate

from hotline.hw.cold_key_set import ColdInput, ColdKeySet, ColdLaneAnswers

KW = 8
GEOMETRIES = [(1, 1), (2, 2), (4, 2), (4, 4)]   # (partitions, lanes)


def cold_set(partitions, lanes):
    """A small set with 2 epoch bits (a wrap every 3 batches) and 2 banks per table."""
    ColdKeySet.BANK_DEPTH = 4 if partitions == 1 else 2
    cold = ColdKeySet(16 * partitions, ways=2, stash=1, max_keys=12, key_width=KW,
                      user_width=3, epoch_bits=2, partitions=partitions, lanes=lanes)
    cold._MustUse__silence = True  # only its geometry, ports and hashes are used
    return cold


@pytest.fixture(autouse=True)
def bank_depth():
    """`cold_set` narrows BANK_DEPTH; put it back."""
    depth = ColdKeySet.BANK_DEPTH
    yield
    ColdKeySet.BANK_DEPTH = depth


def lane_beat(rng, cold):
    """A random beat whose inserted keys lie in distinct partitions (the sender's duty)."""
    keys, inserts, used = [], [], set()
    for _ in range(cold.lanes):
        key = rng.randrange(1 << KW)
        part = cold.partition_hash.value(key)
        insert = int(rng.random() < 0.7 and part not in used)
        used |= {part} if insert else set()
        keys.append(key)
        inserts.append(insert)
    return keys, inserts


@pytest.mark.parametrize("partitions,lanes", GEOMETRIES)
def test_cold_input(partitions, lanes):
    """Beats offered at random, ``room`` random, a clearing pass now and then: ``i.ready``
    exactly as documented (the wait after the last epoch's batch included), each taken beat's
    key in its partition's ``s1`` with its lane, epoch, eob, user and buckets 1 cycle later
    (2 with partitions), the read addresses its buckets' low bits in every bank, ``fed``."""
    rng = random.Random(partitions * 10 + lanes)
    cold = cold_set(partitions, lanes)
    dut = ColdInput(cold)
    _, low_bits, banks = cold.banks()
    delay = 1 if partitions == 1 else 2
    log = {"taken": [], "wraps": 0, "checked": 0}

    async def main(ctx):
        epoch, wrap_wait, clearing, due = 1, False, 0, {}
        for cycle in range(1500):
            if clearing == 0 and rng.random() < 0.05:
                clearing = rng.randrange(1, 6)
            keys, inserts = lane_beat(rng, cold)
            eob, user, room = int(rng.random() < 0.2), rng.randrange(8), rng.random() < 0.8
            offer = rng.random() < 0.8
            ctx.set(dut.i.valid, offer)
            ctx.set(dut.i.payload, {"key": keys if lanes > 1 else keys[0],
                                    "insert": inserts if lanes > 1 else inserts[0],
                                    "eob": eob, "user": user})
            ctx.set(dut.room, room)
            ctx.set(dut.clearing, bool(clearing))
            ready = room and not clearing and not wrap_wait
            assert ctx.get(dut.i.ready) == ready, cycle
            taken = offer and ready
            assert ctx.get(dut.fed) == (taken if partitions == 1 else cycle - 1 in log["taken"])
            for p, want in due.pop(cycle, {}).items():
                got = ctx.get(dut.s1[p])
                assert {f: got[f] for f in want if f != "bucket"} == \
                    {f: v for f, v in want.items() if f != "bucket"}, (cycle, p)
                for t in (0, 1):
                    assert got.bucket[t] == want["bucket"][t]
                    assert [ctx.get(dut.rd_addr[p][t][b]) for b in banks] == \
                        [want["bucket"][t] & ((1 << low_bits) - 1)] * len(banks)
                log["checked"] += 1
            if taken:
                log["taken"].append(cycle)
                parts = [cold.partition_hash.value(k) if partitions > 1 else 0 for k in keys]
                for p in range(partitions):
                    lane = next((j for j in range(lanes) if inserts[j] and parts[j] == p), None)
                    key = keys[0] if partitions == 1 else keys[lane] if lane is not None else 0
                    due.setdefault(cycle + delay, {})[p] = {
                        "key": key, "insert": inserts[0] if partitions == 1 else int(lane is not None),
                        "lane": lane or 0, "eob": eob, "user": user, "epoch": epoch,
                        "bucket": [cold.hashes[t].value(key) for t in (0, 1)]}
                if eob:
                    wrap_wait |= epoch == 3
                    log["wraps"] += epoch == 3
                    epoch = 1 if epoch == 3 else epoch + 1
            if clearing:
                wrap_wait, clearing = False, clearing - 1
            await ctx.tick()

    simulate(dut, main)
    assert log["wraps"] >= 3 and log["checked"] > 300 * partitions, log["checked"]


@pytest.mark.parametrize("partitions,lanes", GEOMETRIES)
def test_cold_lane_answers(partitions, lanes):
    """Random decisions (each lane claimed by at most one partition's inserted key, each a new
    key, a repeat or neither) and counts: one cycle later, ``o`` has each lane's answer from
    its partition (one partition: lane 0 its own, its slot), lanes without one all 0, the
    beat's eob and user, and ``valid``; with partitions a repeat's slot is its
    ``found_slot``, a new key's the count plus the new keys in earlier lanes while that is
    below ``max_keys``, else 0. Mutations caught: the slots numbered in reverse lane order,
    the room compare at <=."""
    rng = random.Random(partitions * 10 + lanes)
    cold = cold_set(partitions, lanes)
    dut = ColdLaneAnswers(cold)
    fields = ("key", "first", "overflow", "insert")
    checked = []

    async def main(ctx):
        want = None
        for cycle in range(600):
            lane_of = rng.sample(range(lanes), min(partitions, lanes)) + [0] * partitions
            decided = []
            for p in range(partitions):
                insert = int(p < lanes and rng.random() < 0.7)
                kind = rng.choice(("new", "found", "none")) if insert else "none"
                answer = ({"slot": rng.randrange(12)} if partitions == 1 else {
                    # a non-insert beat's match is not an answer
                    "found": int(kind == "found" or not insert and rng.random() < 0.5),
                    "found_slot": rng.randrange(12)})
                decided.append({"key": rng.randrange(1 << KW), "overflow": rng.randrange(2),
                                "insert": insert, "lane": lane_of[p],
                                "first": int(kind == "new"), **answer})
            count = rng.randrange(cold.max_keys + partitions)
            valid, eob, user = rng.random() < 0.7, rng.randrange(2), rng.randrange(8)
            ctx.set(dut.decided, decided)
            if partitions > 1:
                ctx.set(dut.count, count)
            ctx.set(dut.valid, valid)
            ctx.set(dut.eob, eob)
            ctx.set(dut.user, user)
            if want is not None:
                o = ctx.get(dut.o.payload)
                assert ctx.get(dut.o.valid) == want[0]
                assert (o.eob, o.user) == want[1:3]
                got = [{f: getattr(o, f) if lanes == 1 else getattr(o, f)[j]
                        for f in fields + ("slot",)} for j in range(lanes)]
                assert got == want[3], cycle
                checked.append(cycle)
            per_lane, new_before = [], 0
            for j in range(lanes):
                if partitions == 1:
                    d = decided[0]
                else:
                    d = next((d for d in decided if d["insert"] and d["lane"] == j), None)
                if d is None:
                    per_lane.append(dict.fromkeys(fields + ("slot",), 0))
                    continue
                slot = (d["slot"] if partitions == 1 else
                        d["found_slot"] if d["found"] else
                        count + new_before if d["first"] and count + new_before < cold.max_keys
                        else 0)
                new_before += d["first"]
                per_lane.append({**{f: d[f] for f in fields}, "slot": slot})
            want = (valid, eob, user, per_lane)
            await ctx.tick()

    simulate(dut, main)
    assert len(checked) == 599
