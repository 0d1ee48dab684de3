"""The Fragmenter's stages one by one (`LookupSplit`, `AnswerRing`, `BeatCollector`,
`SampleClassifier`), in the Amaranth simulator at 1, 2 and 4 lanes, each against a reference
written here from its docstring: every handshake checked, random stalls on every side, and
each stage's documented latency. (The whole Fragmenter against the model: test_fragmenter.)
"""
import random

import pytest
from amaranth.lib import data
from helpers import simulate

from hotline.contract.streams import fragmenter_layouts, sample_widths
from hotline.hw.cold_key_set import ColdKeySet
from hotline.hw.cold_run_dispatcher import answer_layout
from hotline.hw.fragmenter import AnswerRing, BeatCollector, Fragmenter, LookupSplit, \
    SampleClassifier, beat_layout, classified_layout, marks_layout, tally_layout
from hotline.hw.popularity_cam import PopularityCAM

KW, HOT_W, MAX_SAMPLES, MAX_KEYS = 8, 4, 6, 12
LANES = [1, 2, 4]


def cold_set(lanes):
    """A small ColdKeySet (the stages take its ports and hashes)."""
    cold = ColdKeySet(64, ways=2, stash=1, max_keys=MAX_KEYS, key_width=KW, lanes=lanes,
                      partitions=lanes,
                      **({"user_width": answer_layout(lanes).size} if lanes > 1 else {}))
    cold._MustUse__silence = True  # inspected, never elaborated
    return cold


def layouts(lanes):
    return fragmenter_layouts(hot_slot_width=HOT_W, cold_slot_width=cold_set(lanes).slot_width,
                              max_batch_samples=MAX_SAMPLES, cold_max_keys=MAX_KEYS,
                              key_width=KW, lanes=lanes)


def entries(beat, fields):
    """A lane beat's entries [(field values)], ``beat`` a sampled payload."""
    return [tuple(getattr(beat, f)[k] for f in fields) for k in range(beat.last + 1)]


def lane_beats(rng, lanes, n):
    """``n`` lookup beats of random batches [{valid, empty, eos, eob, ...}]: lanes 0 ..
    last valid, an empty lane closes its sample, a batch ends at a beat's last lane with eos
    (a fifth of them): batches of random length, some beyond MAX_SAMPLES samples."""
    beats = []
    for _ in range(n):
        last = rng.randrange(lanes)
        empty = [int(j <= last and rng.random() < 0.15) for j in range(lanes)]
        eos = [int(j <= last and (empty[j] or rng.random() < 0.4)) for j in range(lanes)]
        eob = int(eos[last] and rng.random() < 0.2)
        beats.append({"valid": [int(j <= last) for j in range(lanes)], "empty": empty,
                      "eos": eos, "eob": eob, "hit": [rng.randrange(2) for _ in range(lanes)]})
    beats[-1]["eos"][beats[-1]["valid"].count(1) - 1] = beats[-1]["eob"] = 1
    return beats


def bits(values):
    return sum(v << j for j, v in enumerate(values))


# ---- SampleClassifier ---------------------------------------------------------------------

def classify_reference(beats, lanes):
    """The four outputs' beats of classified ``beats`` and the counters (the docstring's
    rules; indices and counts wrap at the streams' widths)."""
    index_bits, count_bits = sample_widths(MAX_SAMPLES)
    out = {n: [] for n in SampleClassifier.OUTPUTS}
    counts = dict.fromkeys(SampleClassifier.COUNTS, 0)
    all_hot, sample, pop_n, non_n = True, 0, 0, 0
    for b in beats:
        remap, pop, non = [], [], []
        for j in range(lanes):
            if not b["valid"][j]:
                continue
            if not b["empty"][j]:
                remap.append((b["hit"][j], b["slot"][j]))
                all_hot &= bool(b["hit"][j])
            if b["eos"][j]:
                (pop if all_hot else non).append(sample % (1 << index_bits))
                sample, all_hot = sample + 1, True
        for name, got in (("remap", remap), ("popular", pop), ("non_popular", non)):
            if got:
                out[name].append(got if name == "remap" else [(s,) for s in got])
        pop_n, non_n = pop_n + len(pop), non_n + len(non)
        counts["lookups"] += len(remap)
        counts["hits"] += sum(h for h, _ in remap)
        counts["samples"] += len(pop) + len(non)
        counts["popular_samples"] += len(pop)
        if b["eob"]:
            mask = (1 << count_bits) - 1
            out["batches"].append((pop_n & mask, non_n & mask, b["cold"],
                                   int(b["overflow"] or sample > MAX_SAMPLES)))
            counts["batches"] += 1
            counts["oversized_batches"] += sample > MAX_SAMPLES
            all_hot, sample, pop_n, non_n = True, 0, 0, 0
    return out, counts


def classified_beats(rng, lanes, n, slot_width):
    beats = lane_beats(rng, lanes, n)
    for b in beats:
        b["slot"] = [rng.randrange(1 << slot_width) for _ in range(lanes)]
        b["cold"], b["overflow"] = rng.randrange(2 * MAX_KEYS), int(rng.random() < 0.2)
        b["needs_remap"] = int(any(v and not e for v, e in zip(b["valid"], b["empty"])))
        b["needs_samples"] = int(any(v and e for v, e in zip(b["valid"], b["eos"])))
    return beats


@pytest.mark.parametrize("lanes", LANES)
def test_sample_classifier(lanes):
    """Beats offered only when the room (sampled the cycle before, as the collector registers
    it) has their FIFOs, outputs read with random stalls: every output beat as the reference,
    nothing lost; a beat is written to its FIFOs in its own cycle; the counters."""
    rng = random.Random(lanes)
    lay = layouts(lanes)
    classified = classified_layout(lanes, max(HOT_W, cold_set(lanes).slot_width),
                                   lay["batches"].members["cold"])
    dut = SampleClassifier(classified, lay, MAX_SAMPLES, 4, lanes)
    beats = classified_beats(rng, lanes, 300, max(HOT_W, cold_set(lanes).slot_width))
    want, want_counts = classify_reference(beats, lanes)
    assert want_counts["oversized_batches"] and want_counts["popular_samples"]
    fields = {"remap": ("hot", "slot"), "popular": ("sample",), "non_popular": ("sample",)}
    got = {n: [] for n in SampleClassifier.OUTPUTS}
    counters, fired, seen = {}, [], {}

    async def main(ctx):
        room = ctx.get(dut.room)
        at, cycle = 0, 0
        while cycle < 5000 and any(len(got[n]) < len(want[n]) for n in got):
            b = beats[at] if at < len(beats) else None
            fits = b and ((not b["needs_remap"] or room.remap)
                          and (not b["needs_samples"] or room.samples)
                          and (not b["eob"] or room.batches))
            fire = bool(fits and rng.random() < 0.7)
            ctx.set(dut.i.valid, fire)
            if b:
                ctx.set(dut.i.payload, {f: bits(v) if isinstance(v, list) and f != "slot" else v
                                        for f, v in b.items()})
            for n in SampleClassifier.OUTPUTS:
                port = getattr(dut, n)
                ready = rng.random() < 0.6
                ctx.set(port.ready, ready)
                if ctx.get(port.valid):
                    seen.setdefault(n, cycle)
                if ready and ctx.get(port.valid):
                    p = ctx.get(port.payload)
                    got[n].append(entries(p, fields[n]) if n in fields else
                                  (p.popular, p.non_popular, p.cold, p.overflow))
            if fire:
                fired.append(cycle)
                at += 1
            room = ctx.get(dut.room)
            await ctx.tick()
            cycle += 1
        ctx.set(dut.i.valid, 0)
        await ctx.tick().repeat(3)
        counters.update({n: ctx.get(getattr(dut.counters, n)) for n in dut.COUNTS})

    simulate(dut, main)
    assert got == want
    assert counters == want_counts
    # latency: the first beat is written to its FIFOs in its cycle, on their outputs 2 later
    first = {n: next(i for i, b in enumerate(beats) if b[need]) for n, need in
             (("remap", "needs_remap"), ("batches", "eob"))}
    assert {n: seen[n] for n in first} == {n: fired[i] + 2 for n, i in first.items()}


# ---- AnswerRing ---------------------------------------------------------------------------

def ring_batches(rng, lanes, n):
    """``n`` batches of cold-set answers, per entry ("own", key, slot, first, overflow),
    ("rep", back) (a repeat of the cold lookup ``back`` before it, lanes only) or ("dummy",)
    (a batch end without a cold lookup: last)."""
    batches = []
    for _ in range(n):
        batch = []
        for _ in range(rng.randrange(2 * lanes + 3)):
            if lanes > 1 and batch and rng.random() < 0.3:
                batch.append(("rep", rng.randrange(1, min(lanes, len(batch)) + 1)))
            else:
                batch.append(("own", rng.randrange(1 << KW), rng.randrange(1 << 4),
                              int(rng.random() < 0.6), int(rng.random() < 0.1)))
        if not batch or rng.random() < 0.3:
            batch.append(("dummy",))
        batches.append(batch)
    return batches


def ring_reference(batches):
    """Per batch, each entry's answer (slot, cold tally, overflow tally; a dummy's slot None)
    and the new keys."""
    answers, keys = [], []
    for batch in batches:
        cold = overflow = 0
        out, new = [], []
        for e in batch:
            slot = None
            if e[0] == "own":
                slot, cold, overflow = e[2], cold + e[3], overflow | e[4]
                new += [e[1]] if e[3] else []
            elif e[0] == "rep":
                slot = out[len(out) - e[1]][0]
            out.append((slot, cold, overflow))
        answers.append(out)
        keys.append(new)
    return answers, keys


def ring_runs(rng, batches, lanes):
    """The cold set's beats for ``batches`` [(payload, answers)]: runs of 1 .. lanes entries
    within a batch, the run's own entries (a dummy too) in lanes 0 .., a dummy's lane not
    inserted."""
    beats = []
    for batch in batches:
        at = 0
        while at < len(batch):
            run = batch[at:at + rng.randrange(1, lanes + 1)]
            at += len(run)
            own = [e for e in run if e[0] != "rep"]
            lane = {f: [0] * lanes for f in ("key", "slot", "first", "insert", "overflow")}
            for j, e in enumerate(own):
                if e[0] == "own":
                    for f, v in zip(("key", "slot", "first", "overflow"), e[1:]):
                        lane[f][j] = v
                    lane["insert"][j] = 1
                else:   # a dummy's answer lane: garbage the ring must not count
                    lane["slot"][j], lane["first"][j] = rng.randrange(16), 1
            beat = {"eob": int(at == len(batch)), **lane}
            if lanes > 1:
                repeat = [e[1] if e[0] == "rep" else 0 for e in run]
                beat["user"] = answer_layout(lanes).const({
                    "count": len(run), "repeat": repeat + [0] * (lanes - len(run))}).as_value().value
                beats.append((beat, len(run)))
            else:
                beats.append(({f: v[0] if isinstance(v, list) else v for f, v in beat.items()}, 1))
    return beats


def head_takes(rng, batches, lanes):
    """The head beats' takes: per beat (cold lane mask, need, first answer index); a dummy is
    a beat of its own with no cold lane."""
    takes, at = [], 0
    for batch in batches:
        lookups = sum(e[0] != "dummy" for e in batch)
        done = 0
        while done < lookups:
            need = rng.randrange(1, min(lanes, lookups - done) + 1)
            mask = sorted(rng.sample(range(lanes), need))
            takes.append((sum(1 << j for j in mask), need, at))
            at, done = at + need, done + need
        if batch[-1][0] == "dummy":
            takes.append((0, 1, at))
            at += 1
    return takes


@pytest.mark.parametrize("lanes", LANES)
def test_answer_ring(lanes):
    """Cold-set beats (runs with repeats at lanes, dummy batch ends) offered with random
    stalls, the head taking 1 .. L answers at random cycles, summaries written late: ``held``
    exact every cycle (an answer counts the cycle after its handshake), each take's slots and
    tally as the reference, an answer with new keys never taken while a batch end waits for
    its summary, ``cold_keys`` the new keys (lane beats of one batch), the counters."""
    rng = random.Random(10 + lanes)
    dut = AnswerRing(cold_set(lanes), layouts(lanes), 8, 4, lanes)
    batches = ring_batches(rng, lanes, 60)
    answers, new_keys = ring_reference(batches)
    flat = [a for batch in answers for a in batch]
    beats = ring_runs(rng, batches, lanes)
    takes = head_takes(rng, batches, lanes)
    want_keys = [[(k,) for k in keys[i:i + lanes]] for keys in new_keys
                 for i in range(0, len(keys), lanes)]
    got_keys, counters = [], {}

    async def main(ctx):
        at = took = written = held_count = unsummarized = pending = 0
        for cycle in range(20_000):
            if took == len(takes) and len(got_keys) == len(want_keys):
                break
            beat, count = beats[at] if at < len(beats) else (None, 0)
            offer = bool(beat) and rng.random() < 0.7
            ctx.set(dut.answers.valid, offer)
            if beat:
                ctx.set(dut.answers.payload, beat)
            summarize = pending and rng.random() < 0.3
            ctx.set(dut.summarized, summarize)
            held = ctx.get(dut.take.held)
            assert held == sum(1 << k for k in range(lanes) if held_count >= k + 1), cycle
            take = takes[took] if took < len(takes) else None
            go = bool(take) and held_count >= take[1] and rng.random() < 0.6
            if take:
                ctx.set(dut.take.cold, take[0]), ctx.set(dut.take.need, take[1])
            ctx.set(dut.take.take, go)
            if go:
                mask, need, first = take
                lanes_cold = [j for j in range(lanes) if mask >> j & 1]
                assert [ctx.get(dut.take.slot[j]) for j in lanes_cold] == \
                    [flat[first + i][0] for i in range(len(lanes_cold))]
                tally = ctx.get(dut.take.tally)
                assert (tally.cold, tally.overflow) == flat[first + need - 1][1:]
                took += 1
            ready = rng.random() < 0.6
            ctx.set(dut.cold_keys.ready, ready)
            if ready and ctx.get(dut.cold_keys.valid):
                got_keys.append(entries(ctx.get(dut.cold_keys.payload), ("key",)))
            taken = 0
            if offer and ctx.get(dut.answers.ready):
                first = any(f & i for f, i in zip(*(beat[n] if lanes > 1 else [beat[n]]
                                                     for n in ("first", "insert"))))
                assert not (first and unsummarized), f"new keys taken before a summary ({cycle})"
                taken = count
                unsummarized += beat["eob"]
                at += 1
            unsummarized -= summarize
            pending = unsummarized
            held_count += taken - (take[1] if go else 0)
            await ctx.tick()
        ctx.set(dut.answers.valid, 0)
        await ctx.tick().repeat(3)
        counters.update({n: ctx.get(getattr(dut.counters, n)) for n in dut.COUNTS},
                        took=took)

    simulate(dut, main)
    assert counters.pop("took") == len(takes) and got_keys == want_keys
    assert counters == {"cold_rows": sum(map(len, new_keys)),
                        "overflows": sum(e[0] == "own" and e[4] for b in batches for e in b)}


# ---- BeatCollector ------------------------------------------------------------------------

def fits(beat, room):
    """The FIFOs a beat may write have room (``room`` a sampled `ROOM_LAYOUT`)."""
    return ((not beat["needs_remap"] or room.remap) and (not beat["needs_samples"] or room.samples)
            and (not beat["eob"] or room.batches))


@pytest.mark.parametrize("lanes", LANES)
def test_beat_collector(lanes):
    """Beats offered with random stalls, answers arriving 0 .. L a cycle behind a ring
    modelled here, the FIFOs' room random: every cycle, the head is taken exactly when it is
    offered, the ring holds its answers (``held``) and the register is free or firing; a beat
    is on ``o`` the cycle after it was taken, and fires exactly when the room sampled in the
    cycle before has its FIFOs; each classified beat as the reference."""
    rng = random.Random(20 + lanes)
    cold_w = cold_set(lanes).slot_width
    tallies = tally_layout(layouts(lanes)["batches"].members["cold"])
    dut = BeatCollector(beat_layout(lanes, HOT_W), HOT_W, cold_w, tallies, lanes)
    beats = lane_beats(rng, lanes, 300)
    for b in beats:
        b["hot_slot"] = [rng.randrange(1 << HOT_W) for _ in range(lanes)]
        b["cold"] = [v & ~h & ~e & 1 for v, h, e in zip(b["valid"], b["hit"], b["empty"])]
        b["need"] = sum(b["cold"]) or b["eob"]
        b["needs_remap"] = int(any(v and not e for v, e in zip(b["valid"], b["empty"])))
        b["needs_samples"] = int(any(v and e for v, e in zip(b["valid"], b["eos"])))
    ring = [(rng.randrange(1 << cold_w), rng.randrange(2 * MAX_KEYS), rng.randrange(2))
            for _ in range(sum(b["need"] for b in beats))]
    want, got = [], []
    for b in beats:
        rp = len(want) and want[-1][1]
        slots = [b["hot_slot"][j] if b["hit"][j] else
                 ring[rp + sum(b["cold"][:j])][0] if b["cold"][j] else None for j in range(lanes)]
        want.append(((slots, ring[rp + b["need"] - 1][1:] if b["need"] else None), rp + b["need"]))
    fields = ("hit", "eos", "empty", "valid", "eob", "cold", "need")

    async def main(ctx):
        at = written = rp = 0
        pending, room = None, ctx.get(dut.room)
        for cycle in range(5000):
            if len(got) == len(beats):
                break
            b = beats[at] if at < len(beats) else None
            offer = bool(b) and rng.random() < 0.7
            ctx.set(dut.beats.valid, offer)
            if b:
                ctx.set(dut.beats.payload, {f: bits(b[f]) if isinstance(b[f], list) else b[f]
                                            for f in fields} | {"hot_slot": b["hot_slot"]})
            held = written - rp
            ctx.set(dut.answers.held, sum(1 << k for k in range(lanes) if held >= k + 1))
            cold, need = ctx.get(dut.answers.cold), ctx.get(dut.answers.need)
            if b:
                assert (cold, need) == (bits(b["cold"]), b["need"])
            for j in range(lanes):
                at_j = rp + bin(cold & ((1 << j) - 1)).count("1")
                ctx.set(dut.answers.slot[j], ring[at_j][0] if at_j < written else 0)
            last = rp + need - 1
            ctx.set(dut.answers.tally, {"cold": ring[last][1], "overflow": ring[last][2]}
                    if need and last < written else {"cold": 0, "overflow": 0})
            fire = pending is not None and fits(pending, room)
            assert ctx.get(dut.o.valid) == fire, cycle
            if fire:
                o = ctx.get(dut.o.payload)
                slots, tally = want[len(got)][0]
                assert [o.slot[j] for j in range(lanes) if slots[j] is not None] == \
                    [s for s in slots if s is not None]
                if tally:
                    assert (o.cold, o.overflow) == tally
                assert (o.eob, o.needs_remap, o.needs_samples) == \
                    (pending["eob"], pending["needs_remap"], pending["needs_samples"])
                got.append(o)
                pending = None
            load = offer and held >= b["need"] and pending is None
            assert ctx.get(dut.beats.ready) == load and ctx.get(dut.answers.take) == load, cycle
            if load:
                pending, rp, at = b, rp + b["need"], at + 1
            ctx.set(dut.room.as_value(), rng.randrange(8))
            room = ctx.get(dut.room)
            # 0 .. L answers a cycle while the ring holds fewer than a random 0 .. 2L - 1:
            # the head often waits for some of its answers
            if written - rp < rng.randrange(2 * lanes):
                written = min(len(ring), written + rng.randrange(lanes + 1))
            await ctx.tick()

    simulate(dut, main)
    assert len(got) == len(beats)


# ---- LookupSplit --------------------------------------------------------------------------

def split_reference(beats, lanes):
    """The cold set's entries of result ``beats``: per batch end or cold lookup, in order,
    (key, back, close) with ``back`` how many cold lookups back in its batch, within the
    ``lanes`` before it, its latest copy is (0: none, or one lane), or ("dummy", 0, 1)."""
    out, batch = [], []
    for b in beats:
        keys = [b["key"][j] for j in range(lanes) if b["cold"][j]]
        for i, key in enumerate(keys):
            back = next((d for d in range(1, min(lanes, len(batch)) + 1) if batch[-d] == key),
                        0) if lanes > 1 else 0
            out.append((key, back, int(b["eob"] and i == len(keys) - 1)))
            batch.append(key)
        if b["eob"]:
            out += [] if keys else [("dummy", 0, 1)]
            batch = []
    return out


@pytest.mark.parametrize("lanes", LANES)
def test_lookup_split(lanes):
    """CAM results (keys from 6 values, so repeats are frequent) with random stalls on all
    three streams: ``beats`` every result beat with its cold lanes and ``need``; ``cold`` the
    cold lookups and batch ends, in order, each repeat (lanes) with its distance, batch ends
    where they belong; the first result's beat is on ``beats`` 2 cycles after its handshake
    and its cold lookup on ``cold`` `Fragmenter.cycles_to_cold` after."""
    rng = random.Random(30 + lanes)
    cold = cold_set(lanes)
    marks = marks_layout(KW, lanes)
    cam = PopularityCAM(16, ways=2, key_width=KW, user_width=marks.size, lanes=lanes)
    cam._MustUse__silence = True  # inspected, never elaborated
    dut = LookupSplit(marks, cam, cold, 8, lanes)
    beats = lane_beats(rng, lanes, 300)
    beats[0]["hit"], beats[0]["empty"] = [0] * lanes, [0] * lanes   # a cold lookup first
    for b in beats:
        b["key"] = [rng.randrange(6) for _ in range(lanes)]
        b["slot"] = [rng.randrange(1 << HOT_W) for _ in range(lanes)]
        b["cold"] = [v & ~h & ~e & 1 for v, h, e in zip(b["valid"], b["hit"], b["empty"])]
    want_cold = split_reference(beats, lanes)
    got_beats, got_cold, stamps = [], [], {}

    async def main(ctx):
        at = 0
        for cycle in range(5000):
            if len(got_beats) == len(beats) and len(got_cold) == len(want_cold):
                break
            warm = cycle < 12        # no stalls while the first beat goes through
            b = beats[at] if at < len(beats) else None
            offer = bool(b) and (warm or rng.random() < 0.7)
            ctx.set(dut.result.valid, offer)
            if b:
                user = marks.const({
                    "key": b["key"], **{f: bits(b[f]) for f in ("eos", "empty", "valid")},
                    "eob": b["eob"]}).as_value().value
                ctx.set(dut.result.payload, {"hit": b["hit"], "slot": b["slot"], "user": user})
            for port, into in ((dut.beats, got_beats), (dut.cold, got_cold)):
                ready = warm or rng.random() < 0.6
                ctx.set(port.ready, ready)
                if ctx.get(port.valid):
                    stamps.setdefault(port, cycle)
                    if ready:
                        into.append(ctx.get(port.payload))
            if offer and ctx.get(dut.result.ready):
                stamps.setdefault(dut.result, cycle)
                at += 1
            await ctx.tick()

    simulate(dut, main)
    assert len(got_beats) == len(beats)
    for b, g in zip(beats, got_beats):
        assert (g.hit, g.eos, g.empty, g.valid, g.eob, g.cold, g.need) == (
            *(bits(b[f]) for f in ("hit", "eos", "empty", "valid")), b["eob"], bits(b["cold"]),
            sum(b["cold"]) or b["eob"])
        assert [g.hot_slot[j] for j in range(lanes)] == b["slot"]
    flat = []
    for g in got_cold:
        if lanes == 1:
            flat.append((g.key if g.insert else "dummy", 0, g.eob))
            continue
        run = data.Const(answer_layout(lanes), g.user)
        inserted = [g.insert[k] for k in range(lanes)]
        keys = [g.key[k] for k in range(lanes) if inserted[k]]
        assert inserted == sorted(inserted, reverse=True)   # the run's own keys in lanes 0 ..
        entries_ = []
        for k in range(run.count):
            back = run.repeat[k]
            entries_.append((entries_[k - back][0] if back and back <= k else
                             flat[len(flat) - back + k][0] if back else
                             keys.pop(0) if keys else "dummy", back, 0))
        entries_[-1] = entries_[-1][:2] + (g.eob,)
        flat += entries_
    assert flat == want_cold
    assert stamps[dut.beats] - stamps[dut.result] == 2
    assert stamps[dut.cold] - stamps[dut.result] == Fragmenter.cycles_to_cold(lanes)
