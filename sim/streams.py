"""Stream drivers for Amaranth-simulator testbenches, with random valid/ready stalls.

`put` drives an ``amaranth.lib.stream`` input with a list of payloads; `get` collects a given
number of payloads from an output. Each runs as its own ``sim.add_testbench`` coroutine, so
producer and consumer stall independently; ``busy`` is the probability of a stall cycle before
each beat. Payloads are whatever ``ctx.set`` accepts for the payload shape (ints, or dicts for
struct layouts); collected payloads are returned as ints (``as_value``) for exact comparison.
"""
import functools
import random

from amaranth.sim import Simulator


async def put(ctx, stream, payloads, busy=0.0, seed=0, deadline=None):
    rng = random.Random(seed)
    raw = stream.payload.as_value() if hasattr(stream.payload, "as_value") else stream.payload
    cycles = 0
    for n, payload in enumerate(payloads):
        while busy and rng.random() < busy:
            ctx.set(stream.valid, 0)
            await ctx.tick()
        ctx.set(stream.valid, 1)
        ctx.set(raw if isinstance(payload, int) else stream.payload, payload)
        while True:
            *_, ready = await ctx.tick().sample(stream.ready)
            cycles += 1
            if ready:
                break
            if deadline is not None and cycles > deadline:
                raise AssertionError(f"deadline of {deadline} cycles passed: sent {n} "
                                     f"of {len(payloads)} beats")
    ctx.set(stream.valid, 0)


async def get(ctx, stream, count, busy=0.0, seed=1, out=None, deadline=None, at=None):
    """Collect ``count`` payloads of ``stream`` into ``out`` (and return it), ``busy`` the
    stall probability before each; ``at``: a list that gets each beat's cycle, counted from
    this call's start (the same for every `get` started with the simulation)."""
    rng = random.Random(seed)
    out = [] if out is None else out
    cycles = 0

    async def tick():
        nonlocal cycles
        cycles += 1
        if deadline is not None and cycles > deadline:
            raise AssertionError(f"deadline of {deadline} cycles passed: collected {len(out)} "
                                 f"of {count} beats")
        return await ctx.tick().sample(stream.valid, stream.payload)

    while len(out) < count:
        while busy and rng.random() < busy:
            ctx.set(stream.ready, 0)
            await tick()
        ctx.set(stream.ready, 1)
        while True:
            _, _, valid, payload = await tick()
            if valid:
                break
        out.append(payload)
        if at is not None:
            at.append(cycles)
    ctx.set(stream.ready, 0)
    return out


def run(dut, producers, consumers, deadline_cycles, clock=1e-8):
    """Simulate ``dut`` with ``producers`` [(stream, payloads, busy)] and ``consumers``
    [(stream, count, busy)]; returns one list of collected payloads per consumer.

    Fails if a producer has waited or a consumer has not collected everything after
    ``deadline_cycles``.
    """
    sim = Simulator(dut)
    sim.add_clock(clock)
    results = [[] for _ in consumers]
    for n, (stream, payloads, busy) in enumerate(producers):
        sim.add_testbench(functools.partial(put, stream=stream, payloads=payloads, busy=busy, seed=n,
                                            deadline=deadline_cycles))
    for n, (stream, count, busy) in enumerate(consumers):
        sim.add_testbench(functools.partial(get, stream=stream, count=count, busy=busy,
                                            seed=100 + n, out=results[n], deadline=deadline_cycles))
    sim.run()
    return [[p.as_value().value if hasattr(p, "as_value") else int(p) for p in r] for r in results]
