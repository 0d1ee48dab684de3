"""The row DMA's stages one by one (`RowCommandFront`, `RowWindowCheck`, `RowChunker`,
`ReadEngine`, `WriteEngine`, `RowDMACounters`), in the Amaranth simulator, against references
written here from the rules of docs/design.md (window check, burst split) and the stages'
docstrings (credits, completion, counters); not against `hotline.model.dma_model`.

Every test drives its stage cycle by cycle with random valid/ready stalls and checks each
handshake; adversarial cases: zero-count and end-framed batches, a change of direction,
every refusal cause (and their priority), rows across 4 KiB pages on either side, refused and
null beats between rows, error responses on R and B, credits returned late. Each stage's
documented latency is checked too.
"""
import random

import pytest
from amaranth.lib import data
from helpers import simulate

from hotline.contract.dma import CAUSES, CHECK_ORDER, PAGE
from hotline.hw.read_engine import ReadEngine
from hotline.hw.row_chunker import RowChunker
from hotline.hw.row_command_front import RowCommandFront
from hotline.hw.row_dma import RowDMA
from hotline.hw.row_dma_counters import RowDMACounters
from hotline.hw.row_window_check import RowWindowCheck
from hotline.hw.write_engine import WriteEngine

AW, DW, BB = 32, 64, 8          # address bits, data bits, bus bytes
RB, KW, TABLES = 20, 24, 6      # row bits, key bits, tables


def key_of(table, row):
    return (table << RB) | row


# ---- RowCommandFront --------------------------------------------------------------------------

def front_reference(batches, framing):
    """The beats a front emits for ``batches`` = [(bank, scatter, keys)]."""
    out = []
    for bank, scatter, keys in batches:
        for slot, key in enumerate(keys):
            out.append(dict(key=key, slot=slot, bank=bank, scatter=scatter, null=0,
                            eob=int(framing == "count" and slot == len(keys) - 1)))
        if framing == "end" or not keys:
            out.append(dict(slot=len(keys), bank=bank, scatter=scatter, null=1, eob=1))
    return out


def staging_at(cycle):
    """The staging window inputs `run_front` sets in ``cycle`` (base bits above 32 set)."""
    return {"base": cycle << 33 | cycle * 8, "stride": cycle * 16, "slots": cycle + 1,
            "banks": cycle % 3}


def run_front(framing, direction, batches, seed, drained_after=None, stalls=True):
    """Drives ``batches`` through a front with random stalls; returns its beats (with the
    ``window`` output beside each), the cycles of the command handshakes and of the first key
    handshake after each, and ``started``. The staging inputs change every cycle: in cycle c
    they are `staging_at` (c)."""
    cmd = {"bank": 1} if framing == "end" else {"count": 16, "bank": 1}
    if direction is None:
        cmd["scatter"] = 1
    dut = RowCommandFront(data.StructLayout(cmd), direction=direction,
                          framing=framing, key_width=KW, setup_cycles=5)
    rng = random.Random(seed)
    beats, cmd_at, key_at, started = [], [], [], []

    async def bench(ctx):
        cmds = list(batches)
        keys = [k for _, _, ks in batches for k in ks + ([0] if framing == "end" else [])]
        ends = [int(i == len(ks)) for _, _, ks in batches
                for i in range(len(ks) + (framing == "end"))]
        ki = 0
        for cycle in range(400):
            ctx.set(dut.drained, drained_after is None or cycle >= drained_after)
            if cmds:
                bank, scatter, ks = cmds[0]
                payload = {"bank": bank, **({"count": len(ks)} if framing == "count" else {}),
                           **({"scatter": scatter} if direction is None else {})}
                ctx.set(dut.cmd.payload, payload)
            ctx.set(dut.cmd.valid, bool(cmds))
            if ki < len(keys):
                ctx.set(dut.keys.payload, {"key": keys[ki], **(
                    {"end": ends[ki]} if framing == "end" else {})})
            ctx.set(dut.keys.valid, ki < len(keys) and (not stalls or rng.random() < 0.8))
            ctx.set(dut.o.ready, not stalls or rng.random() < 0.7)
            ctx.set(dut.staging, staging_at(cycle))
            if ctx.get(dut.started):
                started.append(cycle)
            if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready):
                cmd_at.append(cycle)
                cmds.pop(0)
            if ctx.get(dut.keys.valid) and ctx.get(dut.keys.ready):
                if len(key_at) < len(cmd_at):
                    key_at.append(cycle)
                ki += 1
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                p = ctx.get(dut.o.payload)
                beats.append({f: int(getattr(p, f)) for f in
                              ("key", "slot", "bank", "scatter", "null", "eob")})
                w = ctx.get(dut.window)
                beats[-1]["window"] = {f: int(getattr(w, f)) for f in staging_at(0)}
            await ctx.tick()
    simulate(dut, bench)
    return beats, cmd_at, key_at, started


@pytest.mark.parametrize("seed", range(3))
def test_front_count_framing_numbers_slots(seed):
    rng = random.Random(seed)
    batches = [(rng.randrange(2), 0, [rng.randrange(1 << KW) for _ in range(n)])
               for n in (3, 0, 1, 5, 0, 2)]
    beats, cmd_at, _, started = run_front("count", "gather", batches, seed)
    want = front_reference(batches, "count")
    assert len(beats) == len(want)
    for got, exp in zip(beats, want):
        assert {k: got[k] for k in exp} == exp
    assert started == cmd_at and len(cmd_at) == len(batches)


@pytest.mark.parametrize("seed", range(3))
def test_front_end_framing_and_change_of_direction(seed):
    rng = random.Random(seed)
    batches = [(0, 0, [rng.randrange(1 << KW) for _ in range(3)]), (1, 0, []),
               (1, 1, [rng.randrange(1 << KW)]), (0, 1, [rng.randrange(1 << KW)] * 2)]
    beats, cmd_at, _, _ = run_front("end", None, batches, seed, drained_after=150)
    want = front_reference(batches, "end")
    assert len(beats) == len(want)
    for got, exp in zip(beats, want):
        assert {k: got[k] for k in exp} == exp
    # the scatter command (a change of direction) waits for drained; the next does not
    assert cmd_at[2] >= 150 and cmd_at[3] < 150 + 60


def test_front_latches_the_staging_window_per_command():
    """Issue 42: the staging registers change every cycle; every beat of a batch carries on
    ``window`` the values of the cycle its command was taken (so a write while keys are in
    flight applies to later batches only)."""
    batches = [(0, 0, [1, 2, 3]), (1, 0, []), (0, 0, [4, 5, 6, 7])]
    beats, cmd_at, _, _ = run_front("count", "gather", batches, seed=4)
    want = [staging_at(c) for c, (_, _, ks) in zip(cmd_at, batches) for _ in ks or [0]]
    assert len(cmd_at) == 3 and [b["window"] for b in beats] == want


def test_front_command_to_first_key_latency():
    """Keys waiting and ``o`` ready: a batch's first key is taken CMD_TO_KEY cycles after its
    command, and the next command in the cycle after the batch's last key."""
    batches = [(0, 0, [1, 2]), (1, 0, [3])]
    beats, cmd_at, key_at, _ = run_front("count", "gather", batches, seed=0, stalls=False)
    assert [k - c for c, k in zip(cmd_at, key_at)] == [RowDMA.CMD_TO_KEY] * 2
    assert cmd_at[1] == key_at[0] + 2          # keys at key_at[0], +1; command one later
    assert [b["key"] for b in beats] == [1, 2, 3]


# ---- RowWindowCheck ---------------------------------------------------------------------------

def check_reference(key, slot, bank, scatter, descs, staging):
    """(verdict, src, dst, rem) by docs/design.md's window check: verdict is "ok" or the cause
    of the first failing check in CHECK_ORDER."""
    table, row = key >> RB, key & ((1 << RB) - 1)
    sbase, stride, slots, banks = staging
    d = descs.get(table) if table < TABLES else None
    fails = {
        "table": d is None or d[1] == 0,
        "row": d is not None and row >= d[1],
        "desc": d is not None and (d[2] == 0 or d[2] % BB or d[2] > stride or d[0] % BB
                                   or d[0] + d[1] * d[2] > 1 << AW),
        "slot": (bank >= banks or slot >= slots or sbase % BB or stride % BB
                 or sbase + banks * slots * stride > 1 << AW),
    }
    for cause in CHECK_ORDER:
        if fails[cause]:
            return cause, None, None, None
    table_addr = d[0] + row * d[2]
    slot_addr = sbase + (bank * slots + slot) * stride
    src, dst = (slot_addr, table_addr) if scatter else (table_addr, slot_addr)
    return "ok", src, dst, d[2]


async def write_descriptor(ctx, dut, table, base, rows, row_bytes):
    """One cycle of ``desc_we`` (the descriptor port of a RowWindowCheck or RowDMA)."""
    for sig, v in ((dut.desc_table, table), (dut.desc_base, base), (dut.desc_rows, rows),
                   (dut.desc_row_bytes, row_bytes), (dut.desc_we, 1)):
        ctx.set(sig, v)
    await ctx.tick()
    ctx.set(dut.desc_we, 0)


def set_staging(ctx, dut, staging):
    for sig, v in zip((dut.staging_base, dut.staging_stride, dut.staging_slots,
                       dut.staging_banks), staging):
        ctx.set(sig, v)


def window_cases():
    descs = {0: (0x10000, 100, 64), 1: (0x8, 10, 64), 2: (0x20000, 50, 12),
             3: (0x40000, 7, 4096 + 8), 4: ((1 << AW) - 64 * 9, 10, 64), 5: (0x0, 0, 64)}
    stagings = [(0x100000, 256, 16, 2), (0x100004, 256, 16, 2), (0x100000, 260, 16, 2),
                ((1 << AW) - 256 * 16, 256, 16, 2), (0x100000, 8192, 4, 3), (0x100000, 64, 8, 0)]
    return descs, stagings


@pytest.mark.parametrize("seed", range(3))
def test_window_check_causes_and_addresses(seed):
    rng = random.Random(seed)
    dut = RowWindowCheck(addr_width=AW, data_width=DW, num_tables=TABLES, row_bits=RB,
                         key_width=KW)
    descs, stagings = window_cases()
    seen = set()

    async def bench(ctx):
        for table, desc in descs.items():
            await write_descriptor(ctx, dut, table, *desc)
        for staging in stagings:
            set_staging(ctx, dut, staging)
            await ctx.tick().repeat(max(dut.SETUP_CYCLES, dut.DESC_LATENCY))
            sent, got = [], []
            cycle = 0
            while len(got) < 60:
                if len(sent) < 60:
                    table = rng.choice([0, 1, 2, 3, 4, 5, TABLES, 7])
                    beat = dict(key=key_of(table, rng.choice([0, 1, 6, 9, 10, 49, 99, 100])),
                                slot=rng.choice([0, 3, 15, 16, 200]), bank=rng.randrange(2),
                                scatter=rng.randrange(2), null=int(rng.random() < 0.1),
                                eob=rng.randrange(2))
                    ctx.set(dut.keys.payload, beat)
                valid = len(sent) < 60 and rng.random() < 0.8
                ctx.set(dut.keys.valid, valid)
                ctx.set(dut.ops.ready, rng.random() < 0.6)
                if valid and ctx.get(dut.keys.ready):
                    sent.append(beat)
                if ctx.get(dut.ops.valid) and ctx.get(dut.ops.ready):
                    got.append(ctx.get(dut.ops.payload))
                await ctx.tick()
                cycle += 1
                assert cycle < 2000
            for beat, op in zip(sent, got):
                assert op.eob == beat["eob"]
                if beat["null"]:
                    assert (op.row, op.refused) == (0, 0)
                    continue
                verdict, src, dst, rem = check_reference(beat["key"], beat["slot"],
                                                         beat["bank"], beat["scatter"],
                                                         descs, staging)
                seen.add(verdict)
                if verdict == "ok":
                    assert (op.row, op.refused) == (1, 0)
                    assert (op.src, op.dst, op.rem) == (src, dst, rem), beat
                else:
                    assert (op.row, op.refused, CAUSES[op.cause]) == (0, 1, verdict), beat
    simulate(dut, bench)
    assert seen == {"ok", *CHECK_ORDER}


def test_window_check_latency_and_descriptor_latency():
    """A key taken in cycle t is on ``ops`` in t + LATENCY; a descriptor written in cycle t is
    used by a key taken in t + DESC_LATENCY (and not by one taken a cycle earlier)."""
    dut = RowWindowCheck(addr_width=AW, data_width=DW, num_tables=TABLES, row_bits=RB,
                         key_width=KW)

    async def bench(ctx):
        set_staging(ctx, dut, (0x100000, 64, 16, 1))
        ctx.set(dut.ops.ready, 1)
        await ctx.tick().repeat(dut.SETUP_CYCLES)
        await write_descriptor(ctx, dut, 2, 0x1000, 4, 64)
        ctx.set(dut.keys.payload, dict(key=key_of(2, 3), slot=1, bank=0, scatter=0, null=0,
                                       eob=1))
        ops = []
        for cycle in range(1, 20):
            ctx.set(dut.keys.valid, cycle in (dut.DESC_LATENCY - 1, dut.DESC_LATENCY))
            if ctx.get(dut.ops.valid):
                ops.append((cycle, ctx.get(dut.ops.payload)))
            await ctx.tick()
        (c1, early), (c2, ok) = ops
        assert (c1, c2) == (dut.DESC_LATENCY - 1 + dut.LATENCY, dut.DESC_LATENCY + dut.LATENCY)
        assert early.refused and CAUSES[early.cause] == "table"
        assert ok.row and (ok.src, ok.dst, ok.rem) == (0x1000 + 3 * 64, 0x100000 + 64, 64)
    simulate(dut, bench)


def test_window_check_keeps_the_window_of_keys_in_flight():
    """Issue 42: a staging window change while keys are in the check's stages (``ops``
    stalled) applies only to keys taken after it: those in flight keep the base, stride and
    slot bound of their own window (the unlatched check took the stride at S2 and the base at
    S5, so they landed outside both windows). A base with a bit at or above addr_width is
    refused (desc for a table, slot for the staging window), not cut."""
    dut = RowWindowCheck(addr_width=AW, data_width=DW, num_tables=TABLES, row_bits=RB,
                         key_width=KW)
    old, new = (0x100000, 64, 16, 1), (0x200000, 128, 4, 1)

    async def send(ctx, slots):
        for slot in slots:
            ctx.set(dut.keys.payload, dict(key=key_of(2, slot), slot=slot, bank=0, scatter=0,
                                           null=0, eob=0))
            ctx.set(dut.keys.valid, 1)
            assert ctx.get(dut.keys.ready)
            await ctx.tick()
        ctx.set(dut.keys.valid, 0)

    async def drain(ctx, n):
        ctx.set(dut.ops.ready, 1)
        got = []
        while len(got) < n:
            if ctx.get(dut.ops.valid):
                got.append(ctx.get(dut.ops.payload))
            await ctx.tick()
        ctx.set(dut.ops.ready, 0)
        return got

    async def bench(ctx):
        await write_descriptor(ctx, dut, 2, 0x1000, 16, 64)
        await write_descriptor(ctx, dut, 3, (1 << AW) + 0x1000, 16, 64)
        set_staging(ctx, dut, old)
        await ctx.tick().repeat(max(dut.SETUP_CYCLES, dut.DESC_LATENCY))
        await send(ctx, [3, 6, 9, 12])               # four keys fill S2..S5 (ops stalled)
        set_staging(ctx, dut, new)
        await ctx.tick().repeat(dut.SETUP_CYCLES)
        got = await drain(ctx, 4)
        assert [(op.row, op.dst) for op in got] == [(1, old[0] + s * old[1]) for s in (3, 6, 9, 12)]
        await send(ctx, [1, 6])
        got = await drain(ctx, 2)
        assert (got[0].row, got[0].dst) == (1, new[0] + new[1])
        assert (got[1].refused, CAUSES[got[1].cause]) == (1, "slot")   # slot 6 >= 4 slots
        ctx.set(dut.keys.payload, dict(key=key_of(3, 0), slot=0, bank=0, scatter=0, null=0,
                                       eob=0))
        ctx.set(dut.keys.valid, 1)
        await ctx.tick()
        ctx.set(dut.keys.valid, 0)
        (op,) = await drain(ctx, 1)
        assert (op.refused, CAUSES[op.cause]) == (1, "desc")
        set_staging(ctx, dut, ((1 << AW) + old[0], *old[1:]))
        await ctx.tick().repeat(dut.SETUP_CYCLES)
        await send(ctx, [0])
        (op,) = await drain(ctx, 1)
        assert (op.refused, CAUSES[op.cause]) == (1, "slot")
    simulate(dut, bench)


# ---- RowChunker -------------------------------------------------------------------------------

MAX_BEATS = 16


def chunk_reference(ops, maxb=MAX_BEATS * BB):
    """Per op: its AR/AW bursts and its events, by the burst rule of docs/design.md."""
    ar, aw, wlen, events = [], [], [], []
    for op in ops:
        if not op["row"]:
            events.append(dict(need_b=0, row_end=0, refused=op["refused"], cause=op["cause"],
                               eob=op["eob"]))
            continue
        src, dst, rem = op["src"], op["dst"], op["rem"]
        while rem:
            n = min(rem, PAGE - src % PAGE, PAGE - dst % PAGE, maxb)
            assert src // PAGE == (src + n - 1) // PAGE and dst // PAGE == (dst + n - 1) // PAGE
            ln = n // BB - 1
            ar.append((src, ln))
            aw.append((dst, ln))
            wlen.append(ln)
            src, dst, rem = src + n, dst + n, rem - n
            events.append(dict(need_b=1, row_end=int(rem == 0), refused=0, cause=op["cause"],
                               eob=op["eob"] & int(rem == 0)))
    return ar, aw, wlen, events


def random_ops(rng, n):
    ops = []
    for _ in range(n):
        kind = rng.random()
        src = rng.choice([0x10000, PAGE - 8, PAGE - 64, 3 * PAGE - 136, 0x20000 + 8 * rng.randrange(512)])
        dst = rng.choice([0x100000, 2 * PAGE - 8, PAGE - 128, 0x200000 + 8 * rng.randrange(512)])
        rem = rng.choice([8, 64, 128, 136, 256, 1024, 4096 + 8, 9000 - 9000 % 8])
        row, refused = (1, 0) if kind < 0.7 else (0, 1) if kind < 0.9 else (0, 0)
        ops.append(dict(src=src, dst=dst, rem=rem, row=row, refused=refused,
                        cause=rng.randrange(4), eob=rng.randrange(2)))
    return ops


@pytest.mark.parametrize("seed", range(4))
def test_chunker_splits_at_pages_and_burst_limit(seed):
    rng = random.Random(seed)
    dut = RowChunker(addr_width=AW, data_width=DW, max_burst_beats=MAX_BEATS, max_chunks=6)
    ops = random_ops(rng, 60)
    want = chunk_reference(ops)
    outs = {"ar": [], "aw": [], "wlen": [], "events": []}

    async def bench(ctx):
        i = 0
        for cycle in range(20000):
            if all(len(got) == len(exp) for got, exp in zip(outs.values(), want)):
                break
            if i < len(ops):
                ctx.set(dut.ops.payload, ops[i])
            ctx.set(dut.ops.valid, i < len(ops) and rng.random() < 0.8)
            for name in outs:
                ctx.set(getattr(dut, name).ready, rng.random() < 0.6)
            if ctx.get(dut.ops.valid) and ctx.get(dut.ops.ready):
                i += 1
            for name, got in outs.items():
                port = getattr(dut, name)
                if ctx.get(port.valid) and ctx.get(port.ready):
                    p = ctx.get(port.payload)
                    if name in ("ar", "aw"):
                        got.append((p.addr, p.len))
                    elif name == "wlen":
                        got.append(p)
                    else:
                        got.append({f: int(getattr(p, f)) for f in
                                    ("need_b", "row_end", "refused", "cause", "eob")})
            await ctx.tick()
    simulate(dut, bench)
    for name, exp in zip(outs, want):
        got = outs[name]
        bad = next((i for i, (g, e) in enumerate(zip(got, exp)) if g != e), None)
        assert bad is None and len(got) == len(exp), (name, bad, len(got), len(exp),
                                                      got[bad or 0:][:3], exp[bad or 0:][:3])
    page_cuts = [a for a, ln in want[0] if ln < MAX_BEATS - 1 and (a + (ln + 1) * BB) % PAGE == 0]
    assert page_cuts and max(len(want[0]), len(want[3])) > len(ops)


def test_chunker_latency_and_throughput():
    """First chunk on ar/aw LATENCY cycles after its op; single-chunk rows at one per cycle;
    a multi-chunk row at one chunk per 3 cycles."""
    dut = RowChunker(addr_width=AW, data_width=DW, max_burst_beats=MAX_BEATS, max_chunks=32)
    singles = [dict(src=0x10000 + 64 * i, dst=0x100000 + 64 * i, rem=64, row=1, refused=0,
                    cause=0, eob=0) for i in range(10)]
    big = dict(src=0x40000, dst=0x80000, rem=4 * MAX_BEATS * BB, row=1, refused=0, cause=0,
               eob=1)

    async def bench(ctx):
        for name in ("ar", "aw", "wlen", "events"):
            ctx.set(getattr(dut, name).ready, 1)
        taken, ar_at = [], []
        todo = singles + [big]
        for cycle in range(60):
            if todo:
                ctx.set(dut.ops.payload, todo[0])
            ctx.set(dut.ops.valid, bool(todo))
            if todo and ctx.get(dut.ops.ready):
                taken.append(cycle)
                todo.pop(0)
            if ctx.get(dut.ar.valid):
                ar_at.append(cycle)
                assert ctx.get(dut.aw.valid)
            await ctx.tick()
        assert ar_at[0] - taken[0] == dut.LATENCY
        assert ar_at[1:10] == list(range(ar_at[0] + 1, ar_at[0] + 10))    # one row per cycle
        big_chunks = ar_at[10:]
        assert len(big_chunks) == 4 and all(b - a == 3 for a, b in zip(big_chunks, big_chunks[1:]))
    simulate(dut, bench)


# ---- ReadEngine -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_read_engine_credits_never_overrun_the_buffer(seed):
    """A memory answering with random latency and errors, a consumer that frees its buffer at
    random: beats outstanding + beats buffered never exceed ``fifo_beats``; ``rready`` is high
    exactly while beats are due; the beats come out in order with their error flags."""
    rng = random.Random(seed)
    fifo_beats = 24
    dut = ReadEngine(addr_width=AW, data_width=DW, fifo_beats=fifo_beats)
    bursts = [(0x1000 * i + 8 * rng.randrange(8), rng.choice([0, 1, 3, 7, 15])) for i in range(40)]
    expect = [(addr + BB * b, addr // 8 % 5 == 1) for addr, ln in bursts for b in range(ln + 1)]

    async def bench(ctx):
        ars, pending_r, got, buffered = list(bursts), [], [], 0
        due = oks = errs = 0
        for cycle in range(3000):
            if ars:
                ctx.set(dut.ar.payload, dict(addr=ars[0][0], len=ars[0][1]))
            ctx.set(dut.ar.valid, bool(ars))
            ctx.set(dut.bus.arready, rng.random() < 0.7)
            r_on = bool(pending_r) and pending_r[0][0] <= cycle and rng.random() < 0.8
            if r_on:
                _, addr, err = pending_r[0]
                ctx.set(dut.bus.rdata, addr)
                ctx.set(dut.bus.rresp, 2 if err else 0)
            ctx.set(dut.bus.rvalid, r_on)
            credit = buffered > 0 and rng.random() < 0.3
            ctx.set(dut.credit, credit)
            assert ctx.get(dut.bus.rready) == (due > 0)
            if ctx.get(dut.bus.arvalid) and ctx.get(dut.bus.arready):
                addr, ln = ars.pop(0)
                assert (ctx.get(dut.bus.araddr), ctx.get(dut.bus.arlen)) == (addr, ln)
                assert ctx.get(dut.ar.ready)
                lat = cycle + rng.randrange(1, 20)
                pending_r += [(lat, addr + BB * b, addr // 8 % 5 == 1) for b in range(ln + 1)]
                due += ln + 1
            if ctx.get(dut.beats.valid):
                assert r_on and ctx.get(dut.bus.rready)
                p = ctx.get(dut.beats.payload)
                got.append((p.data, bool(p.err)))
                assert (ctx.get(dut.read_ok), ctx.get(dut.read_err)) == (not p.err, bool(p.err))
                oks, errs = oks + (not p.err), errs + bool(p.err)
                pending_r.pop(0)
                due -= 1
                buffered += 1
            else:
                assert not ctx.get(dut.read_ok) and not ctx.get(dut.read_err)
            buffered -= credit
            assert due + buffered <= fifo_beats
            await ctx.tick()
        assert got == expect and not ars
        assert errs == sum(e for _, e in expect) > 0
    simulate(dut, bench)


def test_read_engine_waits_for_credit():
    """With no credit back, a burst larger than the remaining credit is not issued."""
    dut = ReadEngine(addr_width=AW, data_width=DW, fifo_beats=16)

    async def bench(ctx):
        ctx.set(dut.bus.arready, 1)
        ctx.set(dut.ar.payload, dict(addr=0x100, len=9))
        ctx.set(dut.ar.valid, 1)
        assert ctx.get(dut.bus.arvalid)                       # 10 <= 16
        await ctx.tick()
        assert not ctx.get(dut.bus.arvalid)                   # 10 > 6 left
        ctx.set(dut.ar.payload, dict(addr=0x200, len=5))
        assert ctx.get(dut.bus.arvalid)                       # 6 <= 6
        await ctx.tick()
        ctx.set(dut.ar.payload, dict(addr=0x300, len=0))
        assert not ctx.get(dut.bus.arvalid)                   # none left
        ctx.set(dut.credit, 1)
        await ctx.tick()
        ctx.set(dut.credit, 0)
        assert ctx.get(dut.bus.arvalid)                       # one credit back
    simulate(dut, bench)


# ---- WriteEngine ------------------------------------------------------------------------------

def write_reference(batches):
    """batches: [[("row", [chunk beats], b_err) | ("refused", cause)]] -> the W beats
    (data, last, strobed), the done records and the counts of strobes."""
    w, done = [], []
    for batch in batches:
        rows = errors = 0
        for item in batch:
            if item[0] == "row":
                for chunk in item[1]:
                    for i, (data, err) in enumerate(chunk):
                        w.append((data, i == len(chunk) - 1, not err))
                rows += 1
            else:
                errors += 1
        done.append((rows, errors))
    return w, done


@pytest.mark.parametrize("seed", range(4))
def test_write_engine_writes_beats_and_completes_batches(seed):
    rng = random.Random(seed)
    fifo_beats = 16
    dut = WriteEngine(addr_width=AW, data_width=DW, fifo_beats=fifo_beats)
    batches, aws, wlens, events, beats = [], [], [], [], []
    data = 0
    for _ in range(8):
        batch = []
        for _ in range(rng.randrange(0, 5)):
            if rng.random() < 0.25:
                batch.append(("refused", rng.randrange(4)))
                events.append(dict(need_b=0, row_end=0, refused=1, cause=batch[-1][1], eob=0))
                continue
            chunks = []
            for c in range(rng.randrange(1, 4)):
                n = rng.choice([1, 2, 8, 16])
                chunk = [(data + i, rng.random() < 0.1) for i in range(n)]
                data += n
                chunks.append(chunk)
                aws.append(dict(addr=0x1000 * len(aws), len=n - 1))
                wlens.append(n - 1)
                beats += chunk
                events.append(dict(need_b=1, row_end=0, refused=0, cause=0, eob=0))
            events[-1]["row_end"] = 1
            batch.append(("row", chunks, rng.random() < 0.2))
        if not batch or rng.random() < 0.3:
            events.append(dict(need_b=0, row_end=0, refused=0, cause=0, eob=0))
        events[-1]["eob"] = 1
        batches.append(batch)
    b_errs = [err for batch in batches for item in batch if item[0] == "row"
              for err in [item[2]] * len(item[1])]
    want_w, want_done = write_reference(batches)

    async def bench(ctx):
        ev, aq, wq, bq = list(events), list(aws), list(wlens), list(beats)
        got_w, got_aw, got_done, b_due, berrs = [], [], [], [], list(b_errs)
        err_taken = err_counted = 0
        in_fifo = credits = rows = refused = wok = werr = started = 0
        for cycle in range(4000):
            start = cycle < len(batches)
            ctx.set(dut.started, start)
            push = bool(bq) and in_fifo < fifo_beats and rng.random() < 0.7
            if push:
                ctx.set(dut.beats.payload, dict(data=bq[0][0], err=bq[0][1]))
            ctx.set(dut.beats.valid, push)
            for port, q in ((dut.aw, aq), (dut.wlen, wq), (dut.events, ev)):
                if q:
                    ctx.set(port.payload, q[0])
                ctx.set(port.valid, bool(q) and rng.random() < 0.8)
            ctx.set(dut.bus.awready, rng.random() < 0.7)
            ctx.set(dut.bus.wready, rng.random() < 0.7)
            b_on = bool(b_due) and b_due[0] <= cycle and rng.random() < 0.7
            ctx.set(dut.bus.bvalid, b_on)
            ctx.set(dut.bus.bresp, 2 if b_on and berrs[0] else 0)
            ctx.set(dut.done.ready, rng.random() < 0.5)
            # busy counts a start from the cycle after it
            assert ctx.get(dut.busy) == (started - (cycle - 1 < len(batches) and cycle > 0)
                                         > len(got_done))
            if push:
                bq.pop(0)
                in_fifo += 1
            if ctx.get(dut.credit):
                in_fifo -= 1
                credits += 1
            for port, q in ((dut.aw, aq), (dut.wlen, wq), (dut.events, ev)):
                if ctx.get(port.valid) and ctx.get(port.ready):
                    q.pop(0)
            if ctx.get(dut.bus.awvalid) and ctx.get(dut.bus.awready):
                got_aw.append(dict(addr=ctx.get(dut.bus.awaddr), len=ctx.get(dut.bus.awlen)))
            if ctx.get(dut.bus.wvalid) and ctx.get(dut.bus.wready):
                strobed = ctx.get(dut.bus.wstrb) == (1 << BB) - 1
                assert strobed or ctx.get(dut.bus.wstrb) == 0
                got_w.append((ctx.get(dut.bus.wdata), bool(ctx.get(dut.bus.wlast)), strobed))
                if ctx.get(dut.bus.wlast):
                    b_due.append(cycle + rng.randrange(1, 8))
                assert ctx.get(dut.write_ok) == strobed
            if b_on and ctx.get(dut.bus.bready):
                b_due.pop(0)
                err_taken += berrs.pop(0)
            # an error response is counted once, after it was taken (through the B slice)
            err_counted += ctx.get(dut.write_err)
            assert err_counted <= err_taken
            if ctx.get(dut.done.valid) and ctx.get(dut.done.ready):
                p = ctx.get(dut.done.payload)
                got_done.append((p.rows, p.errors))
            rows += ctx.get(dut.row_done)
            refused += ctx.get(dut.refused)
            started += start
            await ctx.tick()
        assert got_w == want_w and got_aw == aws and got_done == want_done
        assert credits == len(beats) and not ev and err_counted == err_taken == sum(b_errs)
        assert rows == sum(d[0] for d in want_done) and refused == sum(d[1] for d in want_done)
        assert ctx.get(dut.drained) and not ctx.get(dut.busy)
    simulate(dut, bench)


def test_write_engine_latencies():
    """A beat taken in cycle t is on W in t + R_TO_W; the B of a batch's last chunk makes
    ``done`` valid one cycle later; ``drained`` follows the completion a cycle late, ``busy`` the
    start."""
    dut = WriteEngine(addr_width=AW, data_width=DW, fifo_beats=16)

    async def bench(ctx):
        ctx.set(dut.started, 1)
        await ctx.tick()
        ctx.set(dut.started, 0)
        assert not ctx.get(dut.busy) and ctx.get(dut.drained)   # both a cycle late
        await ctx.tick()
        assert ctx.get(dut.busy) and not ctx.get(dut.drained)
        ctx.set(dut.wlen.payload, 0)
        ctx.set(dut.wlen.valid, 1)
        ctx.set(dut.events.payload, dict(need_b=1, row_end=1, refused=0, cause=0, eob=1))
        ctx.set(dut.events.valid, 1)
        ctx.set(dut.bus.wready, 1)
        ctx.set(dut.done.ready, 0)
        ctx.set(dut.beats.payload, dict(data=0x1234, err=0))
        ctx.set(dut.beats.valid, 1)
        await ctx.tick()
        ctx.set(dut.beats.valid, 0)
        for cycle in range(1, 10):
            if ctx.get(dut.bus.wvalid):
                break
            await ctx.tick()
        assert cycle == dut.R_TO_W and ctx.get(dut.bus.wdata) == 0x1234 and ctx.get(dut.bus.wlast)
        await ctx.tick()
        ctx.set(dut.bus.bvalid, 1)
        assert ctx.get(dut.bus.bready) and not ctx.get(dut.done.valid)
        await ctx.tick().repeat(dut.B_TO_DONE)
        ctx.set(dut.bus.bvalid, 0)
        assert ctx.get(dut.done.valid) and ctx.get(dut.done.payload.rows) == 1
        assert not ctx.get(dut.drained)
        await ctx.tick()
        assert ctx.get(dut.drained) and ctx.get(dut.busy)    # busy until done is taken
        ctx.set(dut.done.ready, 1)
        await ctx.tick()
        assert not ctx.get(dut.busy)
    simulate(dut, bench)


# ---- RowDMACounters ---------------------------------------------------------------------------

def test_counters_lag_two_cycles_and_causes_stick():
    """Counters against a reference; causes sticky, ``overflow`` when a counter wraps (its
    top bit falls) but not when a clear zeroes it."""
    rng = random.Random(5)
    width = 8
    dut = RowDMACounters(counter_width=width, bus_bytes=BB)
    names = ("row_done", "refused", "read_ok", "read_err", "write_ok", "write_err", "rlast_err")

    async def bench(ctx):
        ref = {"rows": 0, "window_errors": 0, "axi_errors": 0, "bytes_read": 0,
               "bytes_written": 0}
        history, causes, overflows = [], 0, 0
        for cycle in range(600):
            before = dict(ref)
            ev = {n: int(rng.random() < 0.4) for n in names}
            ev["cause"] = rng.randrange(4)
            clear_c, clear_e = rng.random() < 0.01, rng.random() < 0.03   # counters wrap
            for n, v in ev.items():
                ctx.set(getattr(dut, n), v)
            ctx.set(dut.clear_counters, clear_c)
            ctx.set(dut.clear_errors, clear_e)
            history.append((ev, clear_c))
            # the counters now show the events up to two cycles ago
            if len(history) >= 3:
                old, old_clear = history[-3]
                if old_clear:
                    ref = dict.fromkeys(ref, 0)
                ref["rows"] += old["row_done"]
                ref["window_errors"] += old["refused"]
                ref["axi_errors"] += old["read_err"] + old["write_err"] + old["rlast_err"]
                ref["bytes_read"] += BB * old["read_ok"]
                ref["bytes_written"] += BB * old["write_ok"]
                ref = {k: v % (1 << width) for k, v in ref.items()}
            top = 1 << (width - 1)
            wrapped = len(history) >= 3 and not history[-3][1] and any(
                before[k] & top and not ref[k] & top for k in ref)
            overflows += wrapped
            if len(history) >= 3:
                assert {k: ctx.get(getattr(dut, k)) for k in ref} == ref, cycle
            assert ctx.get(dut.error_cause).as_value().value == causes
            causes = (0 if clear_e else causes) | (
                (ev["refused"] << ev["cause"]) | (ev["read_err"] << CAUSES.index("axi_read"))
                | (ev["write_err"] << CAUSES.index("axi_write"))
                | (ev["rlast_err"] << CAUSES.index("axi_rlast"))
                | (wrapped << CAUSES.index("overflow")))
            await ctx.tick()
        assert overflows > 3, overflows
    simulate(dut, bench)
