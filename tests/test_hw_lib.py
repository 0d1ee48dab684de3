"""The hw/lib primitives against plain Python references, exhaustive over small widths
(Amaranth's simulator)."""
import ast
import random
from pathlib import Path

import pytest
from amaranth.hdl import C, Module, Signal
from amaranth.sim import Simulator

from hotline.hw.lib.lagged_counter import lagged_count
from hotline.hw.lib.onehot import (binary_select, compact, lowest_index, lowest_one_hot,
                                   one_hot_select, popcount, shift_in)
from hotline.hw.lib.up_down import up_down
from helpers import simulate

WIDTHS = range(1, 7)


def comb_table(inputs, build, cases):
    """The values of the outputs for each case of ``cases`` (a tuple per ``inputs`` signal):
    ``build(m)`` adds the combinational logic under test to a module and returns its outputs
    (a list of values)."""
    m = Module()
    outputs = build(m)
    sim = Simulator(m)
    got = []

    async def bench(ctx):
        for case in cases:
            for sig, value in zip(inputs, case):
                ctx.set(sig, value)
            got.append(tuple(ctx.get(o) for o in outputs))
    sim.add_testbench(bench)
    sim.run()
    return got


def lowest_bit(v):
    """Index of the lowest set bit of ``v`` > 0: the trailing zeros."""
    n = 0
    while not v >> n & 1:
        n += 1
    return n


@pytest.mark.parametrize("as_list", [False, True], ids=["value", "list"])
@pytest.mark.parametrize("n", WIDTHS)
def test_lowest_one_hot_index_and_popcount(n, as_list):
    x = Signal(n)
    arg = [x[i] for i in range(n)] if as_list else x
    any_, index = lowest_index(arg)
    # as wide as an index of n things: 0 bits at n = 1 (a spare bit shifted what a Cat put
    # after it, e.g. a 1-way CAM's slot)
    assert index.shape() == Signal(range(n)).shape(), n
    outs = [lowest_one_hot(arg), any_, index, popcount([x[i] for i in range(n)])]
    got = comb_table([x], lambda m: outs, [(v,) for v in range(1 << n)])
    for v, (one_hot, found, idx, count) in enumerate(got):
        low = lowest_bit(v) if v else None
        assert one_hot == (0 if v == 0 else 1 << low), (n, v)
        assert (found, idx) == ((0, 0) if v == 0 else (1, low)), (n, v)
        assert count == bin(v).count("1"), (n, v)


@pytest.mark.parametrize("n", range(1, 5))
def test_one_hot_select_and_compact(n):
    """``one_hot_select`` by each one-hot (and none); ``compact`` for every select mask:
    the selected values in order, then zeros, and their count."""
    rng = random.Random(n)
    values = [rng.getrandbits(8) for _ in range(n)]
    sel = Signal(n)
    bits = [sel[i] for i in range(n)]

    def build(m):
        consts = [C(v, 8) for v in values]
        entries, total = compact(m, bits, consts, "c")
        return [one_hot_select(bits, consts), total, *entries]
    got = comb_table([sel], build, [(v,) for v in range(1 << n)])
    for v, (one, total, *packed) in enumerate(got):
        chosen = [values[j] for j in range(n) if v >> j & 1]
        if len(chosen) <= 1:   # a one-hot or none
            assert one == (chosen[0] if chosen else 0), (n, v)
        assert total == len(chosen), (n, v)
        assert packed == chosen + [0] * (n - len(chosen)), (n, v)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 64])
def test_binary_select_reads_every_index(n):
    """``binary_select`` at every index of 1..64 values (odd counts too): the value there;
    with an index past the last (a 3-bit index over 5 values), one of the values."""
    rng = random.Random(n)
    values = [rng.getrandbits(14) for _ in range(n)]
    index = Signal(max(1, (n - 1).bit_length()))
    got = comb_table([index], lambda m: [binary_select([C(v, 14) for v in values], index)],
                     [(i,) for i in range(1 << len(index))])
    assert [g for g, in got[:n]] == values
    assert all(g in values for g, in got[n:])


def test_up_down_is_value_plus_up_minus_down():
    value, up, down = Signal(3), Signal(), Signal()
    cases = [(v, u, d) for v in range(8) for u in (0, 1) for d in (0, 1)]
    got = comb_table([value, up, down], lambda m: [up_down(value, up, down)[:3]], cases)
    assert [g for g, in got] == [(v + u - d) % 8 for v, u, d in cases]


@pytest.mark.parametrize("keep", [False, True])
def test_shift_in_puts_the_arrivals_in_front(keep):
    """4 latest 1-bit entries, up to 3 arrivals a cycle: the latest arrival first, then what was
    held (each ANDed with ``keep`` when something arrived and ``keep`` is given)."""
    rng = random.Random(keep)
    latest = [Signal(name=f"latest{j}") for j in range(4)]
    arrivals = [Signal(name=f"arrival{j}") for j in range(3)]
    count, keep_sig = Signal(range(4)), Signal()
    m = Module()
    shift_in(m, latest, arrivals, count, keep_sig if keep else None)
    steps = [([rng.getrandbits(1) for _ in range(3)], rng.randrange(4), rng.getrandbits(1))
             for _ in range(200)]
    seen = []

    async def bench(ctx):
        for arr, n, k in steps:
            for sig, bit in zip(arrivals, arr):
                ctx.set(sig, bit)
            ctx.set(count, n)
            ctx.set(keep_sig, k)
            await ctx.tick()
            seen.append([ctx.get(s) for s in latest])
    simulate(m, bench)
    held = [0] * 4
    for (arr, n, k), got in zip(steps, seen):
        if n:
            old = [h & k for h in held] if keep else held
            held = (arr[:n][::-1] + old)[:4]
        assert got == held


def test_lagged_count_counts_each_event_once_a_cycle_late():
    """The counter, read in cycle s, is the sum of the increments of cycles c .. s - 2, where c
    is the last clear up to s - 2 (the clearing cycle's event counts after the clear)."""
    rng = random.Random(7)
    counter, inc, clear = Signal(6), Signal(3), Signal()
    m = Module()
    lagged_count(m, counter, inc, clear, "n")
    steps = [(rng.randrange(8), int(rng.random() < 0.1)) for _ in range(300)]
    seen = []

    async def bench(ctx):
        for i, c in steps:
            seen.append(ctx.get(counter))
            ctx.set(inc, i)
            ctx.set(clear, c)
            await ctx.tick()
    simulate(m, bench)
    for s, got in enumerate(seen):
        last_clear = max((c for c in range(s - 1) if steps[c][1]), default=0)
        assert got == sum(i for i, _ in steps[last_clear:max(s - 1, 0)]) % 64, s


def test_lib_imports_no_block():
    """hw/lib/ stands below the blocks: its modules import Amaranth and each other only."""
    for path in sorted((Path(__file__).resolve().parents[1] / "hw" / "lib").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1, f"{path.name}:{node.lineno} imports from outside hw/lib"
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith("hotline") for n in names), f"{path.name}:{node.lineno}"
