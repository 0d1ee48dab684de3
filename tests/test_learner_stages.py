"""The AccessLearner's stages alone (hw/access_learner.py), in the Amaranth simulator, each
against its slice of the model (`AccessLearnerModel`: the hazard rule, the Space-Saving update)
or a Python reference of its port contract: `LearnerFront`, `LearnerCompare`,
`LearnerUpdate`, `LearnerReadout`. The whole learner against the model is
tests/test_access_learner.py.
"""
import random

import numpy as np
import pytest
from helpers import simulate

from hotline.contract.hashing import bucket_hash
from hotline.hw.access_learner import (READ_LATENCY, WINDOW, LearnerCompare, LearnerFront,
                                       LearnerReadout, LearnerUpdate)
from hotline.model.access_learner import AccessLearnerModel, _count

KEY_BITS, BUCKETS = 32, 8


def run(dut, inputs, outputs):
    """Drive ``inputs`` (one list of (signal, value) per cycle) into ``dut``; per cycle, the
    values of ``outputs`` (name -> signal) once the inputs of that cycle are applied."""
    got = []

    async def bench(ctx):
        for cycle in inputs:
            for sig, value in cycle:
                ctx.set(sig, value)
            got.append({name: ctx.get(sig) for name, sig in outputs.items()})
            await ctx.tick()
    simulate(dut, bench)
    return got


def lowest_bit(value):
    """One-hot of the lowest set bit of ``value`` (0 when none is)."""
    return value & -value


def test_front_against_hazard_rule_and_latency():
    """`LearnerFront`: the verdict of each key is the model's hazard rule (clear forgets the
    history), ``o`` 3 cycles after the key, the read port the key's bucket 2 cycles after it
    (else the host's bucket of the cycle before), ``counted`` a cycle after each key (in s1),
    ``dropped`` after its verdict."""
    h = bucket_hash(3, KEY_BITS, 3)
    dut = LearnerFront(h, ways=2)
    rng = random.Random(1)
    pool = [rng.getrandbits(KEY_BITS) for _ in range(12)]   # 8 buckets: collisions galore
    n = 2500
    cyc = [dict(valid=int(rng.random() < 0.8), key=rng.choice(pool),
                active=int(rng.random() < 0.95), clear=int(rng.random() < 0.01),
                host=rng.randrange(BUCKETS)) for _ in range(n)]
    ins = [[(dut.lookups.valid, c["valid"]), (dut.lookups.payload, c["key"]),
            (dut.active, c["active"]), (dut.clear, c["clear"]), (dut.host_bucket, c["host"])]
           for c in cyc]
    outs = dict(ready=dut.lookups.ready, valid=dut.o.valid, key=dut.o.key, bucket=dut.o.bucket,
                drop=dut.o.drop, counted=dut.counted, dropped=dut.dropped, busy=dut.busy,
                **{f"read{w}": a for w, a in enumerate(dut.read_bucket)})
    got = run(dut, ins, outs)
    model = AccessLearnerModel(buckets=BUCKETS, ways=2, seed=3)
    counted = dropped = 0
    seen = {"drop": 0, "keep": 0}

    def entered(t):   # the key of cycle t went into s1 (and on, unless a clear cancels it)
        return t >= 0 and cyc[t]["valid"] and cyc[t]["active"] and not cyc[t]["clear"]
    for t, g in enumerate(got):
        assert g["ready"] == 1
        if t and cyc[t - 1]["clear"]:
            model.clear()
        valid = entered(t - 3) and not cyc[t - 2]["clear"] and not cyc[t - 1]["clear"]
        assert g["valid"] == valid, t
        if valid:
            before = model.dropped
            model.update([cyc[t - 3]["key"]])
            drop = model.dropped != before
            seen["drop" if drop else "keep"] += 1
            assert (g["key"], g["bucket"], g["drop"]) == (
                cyc[t - 3]["key"], h.value(cyc[t - 3]["key"]), drop), t
        # the read port: s1's bucket in the cycle before (the key of t - 2), else the host's
        read = h.value(cyc[t - 2]["key"]) if entered(t - 2) else (cyc[t - 1]["host"] if t else 0)
        assert [g[f"read{w}"] for w in range(2)] == [read] * 2, t
        s1, s2 = entered(t - 1), entered(t - 2) and not cyc[t - 1]["clear"]
        assert g["busy"] == (s1 or s2 or valid), t
        assert (g["counted"], g["dropped"]) == (counted, dropped), t
        c = cyc[t]
        counted = 0 if c["clear"] else counted + s1   # counted from s1
        dropped = 0 if c["clear"] else dropped + (valid and g["drop"])
    assert min(seen.values()) > 50, seen


def random_entry(rng, pool, count_bits):
    """(key, count, valid) of a random table entry; counts with equal high halves often."""
    count = rng.choice([0, rng.getrandbits(count_bits), rng.getrandbits(count_bits // 2),
                        2**count_bits - 1])
    return rng.choice(pool), count, int(count != 0)


def pack(entries, count_bits):
    """An ArrayLayout(entry_layout) word of (key, count, valid) entries."""
    word = 0
    for w, (key, count, valid) in enumerate(entries):
        word |= (key | count << KEY_BITS | valid << (KEY_BITS + count_bits)) << (
            w * (KEY_BITS + count_bits + 1))
    return word


def least_way(counts):
    """One-hot of the lowest way holding the least count (Space-Saving's victim)."""
    return 1 << counts.index(min(counts))


def test_compare_against_reference():
    """`LearnerCompare`: a key on ``i`` (not dropped) is on ``o`` 4 cycles later with the hits,
    minimum way, counts and full flags of the bucket word (on ``word`` two cycles
    after the key), and ``fwd`` one-hot of the youngest key ahead in its bucket (in s4..s7, or
    ``ahead``, when it was on ``i``); ``clear`` cancels."""
    ways, count_bits = 4, 6
    dut = LearnerCompare(ways, KEY_BITS, count_bits, 3)
    rng = random.Random(2)
    base = rng.getrandbits(KEY_BITS)   # keys that differ from it in one byte each
    pool = [base] + [base ^ rng.randrange(1, 256) << lo for lo in range(0, KEY_BITS, 8)]
    n = 2000
    cyc = []
    for _ in range(n):
        cyc.append(dict(valid=int(rng.random() < 0.8), drop=int(rng.random() < 0.2),
                        key=rng.choice(pool), bucket=rng.randrange(BUCKETS),
                        clear=int(rng.random() < 0.02),
                        ahead=[(rng.getrandbits(1), rng.randrange(BUCKETS)) for _ in range(3)],
                        word=[random_entry(rng, pool, count_bits) for _ in range(ways)]))
    ins = [[(dut.i.valid, c["valid"]), (dut.i.drop, c["drop"]), (dut.i.key, c["key"]),
            (dut.i.bucket, c["bucket"]), (dut.clear, c["clear"]),
            (dut.ahead.valid, sum(v << j for j, (v, _) in enumerate(c["ahead"]))),
            *((dut.ahead.bucket[j], b) for j, (_, b) in enumerate(c["ahead"])),
            (dut.word.as_value(), pack(c["word"], count_bits))] for c in cyc]
    o = dut.o
    got = run(dut, ins, dict(valid=o.valid, key=o.key, bucket=o.bucket, fwd=o.fwd, hits=o.hits,
                             minimum=o.minimum, counts=o.counts, full=o.full, busy=dut.busy))
    def alive(u, t):   # the key on i in cycle u is in s4..s7 in cycle t (no clear between)
        return (u >= 0 and cyc[u]["valid"] and not cyc[u]["drop"]
                and not any(cyc[c]["clear"] for c in range(u, t)))
    hits_seen = fwd_seen = 0
    for t in range(4, n):
        g, u = got[t], t - 4
        assert g["valid"] == alive(u, t), t
        assert g["busy"] == any(alive(t - d, t) for d in (1, 2, 3, 4)), t
        if not alive(u, t):
            continue
        c = cyc[u]
        ahead = [alive(u - d, u) and cyc[u - d]["bucket"] == c["bucket"] for d in (1, 2, 3, 4)]
        ahead += [bool(v) and b == c["bucket"] for v, b in c["ahead"]]
        fwd = lowest_bit(sum(a << j for j, a in enumerate(ahead)))
        word = cyc[u + 2]["word"]
        hits = sum((word[w][2] and word[w][0] == c["key"]) << w for w in range(ways))
        minimum = least_way([word[w][1] for w in range(ways)])
        counts = sum(word[w][1] << (w * count_bits) for w in range(ways))
        full = sum((word[w][1] == 2**count_bits - 1) << w for w in range(ways))
        assert (g["key"], g["bucket"], g["fwd"], g["hits"], g["minimum"], g["counts"],
                g["full"]) == (c["key"], c["bucket"], fwd, hits, minimum, counts, full), t
        hits_seen += hits != 0
        fwd_seen += fwd != 0
    assert hits_seen > 100 and fwd_seen > 100, (hits_seen, fwd_seen)


def test_update_against_model():
    """`LearnerUpdate` played by the model's Space-Saving update (`_count`, no hazard window):
    each key's write (2 cycles after it, its way one-hot, its key, count + 1 saturating) is
    the model's new entry. A key with a key ahead in its bucket (fewer than WINDOW keys before
    it: the same key, as the hazard rule guarantees) gets ``fwd`` and a garbage word, as the
    read misses that update; others get the model's bucket word. A clear: the wipe writes
    bucket b of zeros b + 1 cycles after it, ``clearing`` for ``buckets`` cycles."""
    ways, count_bits = 4, 4         # 4 bits: saturation within the run
    dut = LearnerUpdate(ways, KEY_BITS, count_bits, BUCKETS)
    rng = random.Random(3)
    tk = np.zeros((BUCKETS, ways), np.uint64)
    tc = np.zeros((BUCKETS, ways), np.uint64)
    cap = 2**count_bits - 1
    history = np.zeros((2, 0), np.uint64)
    keys_of = {b: [rng.getrandbits(KEY_BITS) for _ in range(6)] for b in range(BUCKETS)}
    n, cyc, slots, want = 2500, [], [], {}   # slots: (key, bucket) on i per cycle, or None
    quiet_until, clears, next_clear = -1, [], -1
    for t in range(n):
        c = dict(clear=0, valid=0, key=0, bucket=0, fwd=0, hits=0, minimum=0, counts=0, full=0)
        if t == next_clear:   # with no key in the 2 cycles before and the wipe's
            c["clear"] = 1
            clears.append(t)
            tk[:], tc[:] = 0, 0
        elif t > quiet_until and rng.random() < 0.003:
            next_clear, quiet_until = t + 2, t + 2 + BUCKETS
        elif t > quiet_until and rng.random() < 0.85:
            b = rng.choice([rng.randrange(BUCKETS), rng.randrange(2)])   # buckets 0, 1 hot
            ahead = [d for d in range(WINDOW) if t - 1 - d >= 0 and slots[t - 1 - d]
                     and slots[t - 1 - d][1] == b]
            key = slots[t - 1 - ahead[0]][0] if ahead else rng.choice(keys_of[b])
            if ahead:
                c["fwd"] = 1 << ahead[0]
                entries = [(rng.getrandbits(KEY_BITS), rng.getrandbits(count_bits))
                           for _ in range(ways)]
            else:
                entries = [(int(tk[b, w]), int(tc[b, w])) for w in range(ways)]
            c.update(valid=1, key=key, bucket=b,
                     hits=sum((cnt != 0 and k == key) << w for w, (k, cnt) in enumerate(entries)),
                     minimum=least_way([cnt for _, cnt in entries]),
                     counts=sum(cnt << (w * count_bits) for w, (_, cnt) in enumerate(entries)),
                     full=sum((cnt == cap) << w for w, (_, cnt) in enumerate(entries)))
            _count(np.array([key], np.uint64), np.array([b]), tk, tc, history,
                   np.zeros(2, np.int64), np.uint64(cap))
            way = int(np.flatnonzero((tk[b] == key) & (tc[b] != 0))[0])   # the key's entry
            want[t + 2] = (1 << way, b, key, int(tc[b, way]))
        cyc.append(c)
        slots.append((c["key"], c["bucket"]) if c["valid"] else None)
    i = dut.i
    ins = [[(getattr(i, name), c[name]) for name in i.signature.members] + [(dut.clear, c["clear"])]
           for c in cyc]
    got = run(dut, ins, dict(en=dut.write_en, data=dut.write_data.as_value(),
                             clearing=dut.clearing, busy=dut.busy, ahead=dut.ahead.valid,
                             **{f"addr{w}": a for w, a in enumerate(dut.write_bucket)},
                             **{f"ahead{j}": b for j, b in enumerate(dut.ahead.bucket)}))
    wipes = {c + 1 + b: b for c in clears for b in range(BUCKETS)}
    assert len(clears) > 1, clears
    data_mask = (1 << (KEY_BITS + count_bits + 1)) - 1
    for t, g in enumerate(got):
        addrs = {g[f"addr{w}"] for w in range(ways)}
        if t in wipes:
            assert (g["en"], addrs, g["data"] & data_mask) == (2**ways - 1, {wipes[t]}, 0), t
        elif t in want:
            lanes, b, key, count = want[t]
            assert (g["en"], addrs, g["data"]) == (
                lanes, {b}, key | count << KEY_BITS | 1 << (KEY_BITS + count_bits)), t
        else:
            assert g["en"] == 0, t
        assert g["clearing"] == (t in wipes), t
        ahead = [t - d >= 0 and cyc[t - d]["valid"] for d in (1, 2, 3)]
        assert g["ahead"] == sum(a << j for j, a in enumerate(ahead)), t
        assert all(g[f"ahead{j}"] == cyc[t - 1 - j]["bucket"] for j in range(3) if ahead[j]), t
        assert g["busy"] == (ahead[0] or ahead[1]), t
    assert sum(c["fwd"] != 0 for c in cyc) > 200
    assert sum(count == cap for *_, count in want.values()) > 20   # saturated counts seen


def test_readout_latency():
    """`LearnerReadout`: ``entry`` in cycle t + READ_LATENCY is way ``way`` (of cycle t) of the
    word of cycle t + READ_LATENCY - 1."""
    ways, count_bits = 4, 8
    dut = LearnerReadout(ways, KEY_BITS, count_bits)
    rng = random.Random(4)
    pool = [rng.getrandbits(KEY_BITS) for _ in range(8)]
    words = [[random_entry(rng, pool, count_bits) for _ in range(ways)] for _ in range(300)]
    way = [rng.randrange(ways) for _ in words]
    got = run(dut, [[(dut.way, w), (dut.word.as_value(), pack(e, count_bits))]
                    for w, e in zip(way, words)],
              dict(valid=dut.entry.valid, key=dut.entry.key, count=dut.entry.count))
    for t in range(READ_LATENCY, len(words)):
        key, count, valid = words[t - 1][way[t - READ_LATENCY]]
        assert (got[t]["valid"], got[t]["key"], got[t]["count"]) == (valid, key, count), t
