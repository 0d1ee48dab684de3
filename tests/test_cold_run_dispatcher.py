"""ColdRunDispatcher against a Python reference: the runs it sends from a full queue are the
greedy maximal runs (up to L entries, distinct partitions but for repeats of one of the L
keys before, ending at a batch end), and while entries arrive and the cold set stalls at
random, every run still obeys the rule, every repeat is found, and the entries leave in
order. Keys: dense row ids of one table and of 26 tables, a single partition, one-entry
batches and dummy batch ends, user-item pairs, and a real Criteo file's cold lookups."""
import random

import numpy as np
import pytest
from amaranth.utils import ceil_log2

from hotline.contract.config import COLD_PARTITIONS
from hotline.contract.keys import make_keys
from hotline.data.readers import load_dataset
from hotline.hw.cold_run_dispatcher import ColdRunDispatcher
from hotline.model.cold_key_set import ColdKeySetModel

from helpers import real_file, simulate

KEY_BITS = 32


def entries_of(keys, batch, dummies=(), partitions=4):
    """[(key, part, close, dummy)]: ``keys`` in batches of ``batch``, the batches numbered in
    ``dummies`` ending with a dummy entry instead of closing at their last key."""
    part = ColdKeySetModel(partitions=partitions).partition_of(keys).tolist()
    out = []
    for b, start in enumerate(range(0, len(keys), batch)):
        chunk = [(int(k), p, 0, 0) for k, p in zip(keys[start:start + batch],
                                                     part[start:start + batch])]
        if b in dummies:   # its key, which means nothing, that of the lookup before it
            chunk.append((chunk[-1][0], 0, 1, 1))
        else:
            chunk[-1] = chunk[-1][:2] + (1, 0)
        out += chunk
    return out


def repeats_of(entries, lanes):
    """Per entry: how many cold lookups back the latest copy of its key is, within its batch
    and the L before it (0: none, or a dummy)."""
    out, batch = [], []
    for key, _, close, dummy in entries:
        back = next((d for d in range(1, min(lanes, len(batch)) + 1) if batch[-d] == key), 0)
        out.append(0 if dummy else back)
        batch = [] if close else batch + [key]
    return out


def reference_runs(entries, lanes):
    """The greedy maximal runs of ``entries`` (all waiting): [(count, keys, eob, repeats)]."""
    repeats = repeats_of(entries, lanes)
    runs, i = [], 0
    while i < len(entries):
        seen, keys, k = set(), [], 0
        while i + k < len(entries) and k < lanes:
            key, part, close, dummy = entries[i + k]
            if not dummy and not repeats[i + k]:
                if part in seen:
                    break
                seen.add(part)
                keys.append(key)
            k += 1
            if close:
                break
        runs.append((k, keys, entries[i + k - 1][2], repeats[i:i + k]))
        i += k
    return runs


def check_runs(runs, entries, lanes):
    """The rule every run obeys, whatever reached the window; every repeat found."""
    repeats = repeats_of(entries, lanes)
    at = 0
    for count, got, got_repeats in runs:
        assert 1 <= count <= lanes and len(got) == count
        assert got_repeats == repeats[at:at + count]
        parts = [e[1] for e, r in zip(got, got_repeats) if not e[3] and not r]
        assert len(parts) == len(set(parts)), f"partitions repeat in {got}"
        assert not any(e[2] or e[3] for e in got[:-1]), "a batch end inside a run"
        at += count


def drive(dut, entries, *, write_first, busy, rng):
    """Write ``entries`` (0 .. L per cycle while w_room; all before any read with
    ``write_first``) while reading ``o`` with ready low a ``busy`` share of the cycles;
    returns the runs [(count, [entry], [repeat])]."""
    L = dut.lanes
    runs = []

    async def main(ctx):
        at, waiting = 0, []
        while len(runs) < 10_000 and (at < len(entries) or waiting or ctx.get(dut.o.valid)):
            count = 0
            if ctx.get(dut.w_room) and at < len(entries):
                count = min(rng.randrange(L + 1), len(entries) - at)
            words = entries[at:at + count]
            ctx.set(dut.w_count, count)
            for k in range(L):
                key, part, close, dummy = words[k] if k < count else (0, 0, 0, 0)
                ctx.set(dut.w_data[k], {"key": key, "part": part, "close": close,
                                        "dummy": dummy})
            reading = not (write_first and at + count < len(entries))
            ready = reading and rng.random() >= busy
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.o.valid) and ready:
                o = ctx.get(dut.o.payload)
                n = o.answers.count
                got = waiting[:n]
                del waiting[:n]
                repeats = [o.answers.repeat[k] for k in range(n)]
                # the lanes hold the run's keys but repeats, in order, inserts exactly those
                keys = [e[0] for e, r in zip(got, repeats) if not e[3] and not r]
                assert [o.key[k] for k in range(len(keys))] == keys
                assert [(o.insert >> k) & 1 for k in range(L)] == [1] * len(keys) + [0] * (L - len(keys))
                assert o.eob == got[-1][2]
                runs.append((n, got, repeats))
            waiting += words
            at += count
            await ctx.tick()
            if not count and at == len(entries) and not waiting:
                break
    simulate(dut, main)
    return runs


def key_sets():
    rng = np.random.default_rng(3)
    one_table = make_keys(np.zeros(400, int), np.arange(400))
    tables = make_keys(np.arange(400) % 26, np.arange(400) // 26)
    part = ColdKeySetModel(partitions=4).partition_of(tables)
    one_partition = tables[part == 0]
    return {
        "one table, batches of 64": entries_of(one_table, 64, dummies={2}),
        "26 tables, batches of 7": entries_of(tables, 7, dummies={1, 5, 9}),
        "one partition": entries_of(one_partition, 30),
        "one-key batches": entries_of(rng.integers(0, 2**32, 40, dtype=np.uint64), 1,
                                      dummies=set(range(0, 40, 3))),
        "repeated keys": entries_of(np.repeat(tables[:60], 3), 50),
        "user-item pairs": entries_of(np.stack([np.repeat(tables[:10], 6),
                                                tables[100:160]], 1).ravel(), 32),
    }


@pytest.mark.parametrize("lanes", [2, 4])
@pytest.mark.parametrize("name", list(key_sets()))
def test_runs_from_a_full_queue_are_the_greedy_ones(lanes, name):
    entries = key_sets()[name]
    dut = ColdRunDispatcher(KEY_BITS, 2, lanes, depth=1024)
    runs = drive(dut, entries, write_first=True, busy=0.3, rng=random.Random(lanes))
    assert summarize(runs) == reference_runs(entries, lanes)


def summarize(runs):
    """The runs as `reference_runs` gives them."""
    return [(n, [e[0] for e, r in zip(es, rs) if not e[3] and not r], es[-1][2], rs)
            for n, es, rs in runs]


@pytest.mark.parametrize("lanes", [2, 4])
@pytest.mark.parametrize("busy", [0.0, 0.5, 0.9])
def test_runs_obey_the_rule_while_entries_arrive(lanes, busy):
    entries = [e for es in key_sets().values() for e in es]
    dut = ColdRunDispatcher(KEY_BITS, 2, lanes, depth=4 * lanes)
    runs = drive(dut, entries, write_first=False, busy=busy, rng=random.Random(7))
    check_runs(runs, entries, lanes)
    assert [e for _, es, _ in runs for e in es] == entries
    if busy == 0.9:   # the window full most of the time: the runs are long
        assert len(runs) < 0.8 * len(entries)


def test_real_cold_lookups():
    """The cold lookups of a Criteo file (keys outside its 2,600 most frequent) in batches
    of 256: greedy runs from a full queue."""
    ds = load_dataset(real_file("criteo_kaggle/train_random4584.csv.gz"), limit=2000)
    keys, counts = np.unique(ds.keys, return_counts=True)
    hot = keys[np.argsort(-counts, kind="stable")[:2600]]
    cold = ds.keys[~np.isin(ds.keys, hot)][:3000]
    partitions = COLD_PARTITIONS[4]
    entries = entries_of(cold, 256, partitions=partitions)
    dut = ColdRunDispatcher(KEY_BITS, ceil_log2(partitions), 4, depth=4096)
    runs = drive(dut, entries, write_first=True, busy=0.2, rng=random.Random(1))
    assert summarize(runs) == reference_runs(entries, 4)


@pytest.mark.filterwarnings("ignore:.*created but never used")
@pytest.mark.parametrize("lanes", [2, 4])
def test_a_queue_without_room_for_two_writes_is_refused(lanes):
    """``w_room`` keeps room for the write in its cycle and the next: 3 L entries at least."""
    with pytest.raises(ValueError, match=f"below 3 x {lanes} lanes"):
        ColdRunDispatcher(KEY_BITS, 2, lanes, depth=3 * lanes - 1)
    ColdRunDispatcher(KEY_BITS, 2, lanes, depth=3 * lanes)


@pytest.mark.parametrize("lanes", [2, 4])
def test_an_entry_leaves_latency_cycles_after_its_write(lanes):
    """`ColdRunDispatcher.LATENCY` (which `Fragmenter.cycles_to_cold` is built on): a lone
    entry written into an empty dispatcher is on ``o`` that many cycles later."""
    dut = ColdRunDispatcher(KEY_BITS, 2, lanes, depth=4 * lanes)
    seen = []

    async def main(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.w_count, 1)
        ctx.set(dut.w_data[0], {"key": 5, "part": 1, "close": 1, "dummy": 0})
        await ctx.tick()
        ctx.set(dut.w_count, 0)
        for cycle in range(1, 10):
            if ctx.get(dut.o.valid):
                seen.append(cycle)
            await ctx.tick()
    simulate(dut, main)
    assert seen == [ColdRunDispatcher.LATENCY]
