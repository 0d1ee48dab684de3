"""RowDMA at 48- and 64-bit bus addresses (issue 44, "Memory a real model needs"), in Amaranth's
simulator against `RowDMAModel`: tables and staging windows above 4 GiB, rows across the
2**33 boundary and 4 KiB pages, windows ending exactly at 2**48 and high above it on a 64-bit
bus; gathers then scatters, every AR/AW, done record, counter and memory byte exact; and the
refusal of a base at or above 2**addr_width. The memory is a sparse page map
(`SparseMemory`): a flat array cannot hold such addresses.

And RowDMA on 64- to 512-bit data buses (issue 44, "Widen the DMA data bus"): rows of 1, 3
and 33 beats, 64 B and 512 B, rows and staging slots across pages, row sizes and bases off
the bus word (refused), gathers then scatters, against the model and hand-counted totals.
"""
import numpy as np
import pytest
from helpers import simulate

import reference as ref
from hotline.contract.dma import CAUSES, PAGE
from hotline.hw.row_dma import RowDMA
from hotline.model.dma_model import RowDMAModel

DW, B = 64, 8
GiB = 1 << 30


class SparseMemory:
    """Bytes at any address below ``2**width``, zero until written, kept by 4 KiB page; sliced
    like the model's memory array (``m[a:b]``, ``m[a:b] = data``; ``size`` bytes).""" 

    def __init__(self, width):
        self.size, self.pages = 1 << width, {}

    def __getitem__(self, s):
        out = bytearray()
        a = s.start
        while a < s.stop:
            n = min(s.stop, (a // PAGE + 1) * PAGE) - a
            page = self.pages.get(a // PAGE)
            out += page[a % PAGE:a % PAGE + n] if page else bytes(n)
            a += n
        return bytes(out)

    def __setitem__(self, s, content):
        content = content if isinstance(content, bytes) else np.asarray(content, np.uint8).tobytes()
        assert len(content) == s.stop - s.start
        a, i = s.start, 0
        while i < len(content):
            n = min(len(content) - i, PAGE - a % PAGE)
            page = self.pages.setdefault(a // PAGE, bytearray(PAGE))
            page[a % PAGE:a % PAGE + n] = content[i:i + n]
            a, i = a + n, i + n

    def nonzero_pages(self):
        return {k: bytes(v) for k, v in self.pages.items() if any(v)}


def scenario(aw, seed=0):
    """(descriptors [(table, base, rows, row_bytes)], steps [("staging", base, stride, slots,
    banks) | ("write", addr, bytes) | ("batch", direction, bank, keys)], initial memory
    [(addr, bytes)]) at ``aw`` address bits."""
    rng = np.random.default_rng(seed)
    top = 1 << aw
    rb72 = 72   # a multiple of the bus width that is not a power of two: rows straddle pages
    tables = [
        (0, 5 * GiB + 0x28, 80, 64),                 # above 4 GiB; row 63 straddles a page
        (1, (1 << 33) - 2 * 64 - 0x18, 6, 64),       # row 2 straddles 2**33 (a carry at bit 33)
        (2, top - 8 * rb72, 8, rb72),                # ends exactly at the top
        # 48: at the top, refused (desc); 64: far above 48 bits
        (3, top if aw == 48 else (1 << 62) + PAGE - 0x30, 8, rb72),
        (4, top - 4 * rb72 + B, 4, rb72),            # ends past the top: refused (desc)
    ]
    init = [(base, rng.integers(0, 256, rows * r, dtype=np.uint8))
            for t, base, rows, r in tables if base + rows * r <= top]
    low = 5 * GiB + 0x10_0000 - 0x58                 # staging slots straddle a page
    high = top - 2 * PAGE - 0x28                     # below table 2
    gather_keys = ([ref.key(0, r) for r in (63, 0, 79, 17)] + [ref.key(1, r) for r in range(6)]
                   + [ref.key(2, r) for r in (7, 0, 3)] + [ref.key(3, 1), ref.key(4, 0),
                                                           ref.key(0, 80), ref.key(5, 0)])
    steps = []
    for base in (low, high):
        steps += [("staging", base, 80, 12, 2), ("batch", "gather", 1, gather_keys[:12]),
                  ("batch", "gather", 0, gather_keys[12:]),
                  ("write", base, rng.integers(0, 256, 24 * 80, dtype=np.uint8)),
                  ("batch", "scatter", 1, gather_keys[:12]),
                  ("batch", "scatter", 0, gather_keys[12:])]
    if aw < 64:   # a 64-bit base cannot be at 2**64
        steps += [("staging", top, 80, 12, 2), ("batch", "gather", 0, gather_keys[:2])]
    steps += [("staging", top - 12 * 80 + B, 80, 12, 1), ("batch", "gather", 0, gather_keys[:2])]
    return tables, steps, init


def expect(aw, tables, steps, init, dw=DW):
    """The model's AR/AW (per batch), done records, counters, error_cause and memory, on a
    ``dw``-bit bus."""
    model = RowDMAModel(data_width=dw, addr_width=aw)
    mem = SparseMemory(aw)
    for addr, content in init:
        mem[addr:addr + len(content)] = content
    for t in tables:
        model.write_descriptor(*t)
    out = {"ar": [], "aw": [], "done": []}
    for s in steps:
        if s[0] == "staging":
            model.set_staging(*s[1:])
        elif s[0] == "write":
            mem[s[1]:s[1] + len(s[2])] = s[2]
        else:
            _, direction, bank, keys = s
            bursts = model.bursts(direction, keys, bank)
            out["ar"] += [(src, n // model.bus_bytes - 1) for src, _, n in bursts]
            out["aw"] += [(dst, n // model.bus_bytes - 1) for _, dst, n in bursts]
            # a never-true fault predicate: the per-beat path, which takes any memory object
            d = model.run(mem, direction, keys, bank, read_error=lambda a: False)
            out["done"].append((d["rows"], d["errors"]))
    out.update(counters=model.counters(), error_cause=model.error_cause, memory=mem)
    return out


def run_rtl(aw, tables, steps, init, dw=DW):
    """Drive a RowDMA(addr_width=aw, data_width=dw) through the scenario with an AXI slave on
    a `SparseMemory` (reads taken when the AR is accepted, one beat a cycle, writes applied at
    the burst's last W beat); returns what `expect` returns."""
    dut = RowDMA(None, addr_width=aw, data_width=dw)
    b = dw // 8
    mem = SparseMemory(aw)
    for addr, content in init:
        mem[addr:addr + len(content)] = content
    bus = dut.bus
    out = {"ar": [], "aw": [], "done": []}

    async def bench(ctx):
        for t, base, rows, rb in tables:
            for sig, v in ((dut.desc_we, 1), (dut.desc_table, t), (dut.desc_base, base),
                           (dut.desc_rows, rows), (dut.desc_row_bytes, rb)):
                ctx.set(sig, v)
            await ctx.tick()
        ctx.set(dut.desc_we, 0)
        await ctx.tick().repeat(dut.DESC_LATENCY)
        for sig in (bus.arready, bus.awready, bus.wready, dut.done.ready):
            ctx.set(sig, 1)
        for s in steps:
            if s[0] == "staging":
                for name, v in zip(("base", "stride", "slots", "banks"), s[1:]):
                    ctx.set(getattr(dut, f"staging_{name}"), v)
                continue
            if s[0] == "write":
                mem[s[1]:s[1] + len(s[2])] = s[2]
                continue
            _, direction, bank, keys = s
            keys, cmd_on = list(keys), True
            r_beats, aw_q, w_beats, b_due = [], [], [], 0
            ctx.set(dut.cmd.payload, {"count": len(keys), "bank": bank,
                                      "scatter": direction == "scatter"})
            for _ in range(2000):
                ctx.set(dut.cmd.valid, cmd_on)
                ctx.set(dut.keys.valid, bool(keys))
                if keys:
                    ctx.set(dut.keys.payload.key, keys[0])
                r_on, b_on = bool(r_beats), b_due > 0
                ctx.set(bus.rvalid, r_on)
                if r_on:
                    ctx.set(bus.rdata, r_beats[0][0])
                    ctx.set(bus.rlast, r_beats[0][1])
                ctx.set(bus.bvalid, b_on)
                if cmd_on and ctx.get(dut.cmd.ready):
                    cmd_on = False
                if keys and ctx.get(dut.keys.ready):
                    keys.pop(0)
                if ctx.get(bus.arvalid):
                    a, ln = ctx.get(bus.araddr), ctx.get(bus.arlen)
                    out["ar"].append((a, ln))
                    r_beats += [(int.from_bytes(mem[a + i * b:a + (i + 1) * b], "little"),
                                 i == ln) for i in range(ln + 1)]
                if r_on and ctx.get(bus.rready):
                    r_beats.pop(0)
                if ctx.get(bus.awvalid):
                    aw_q.append((ctx.get(bus.awaddr), ctx.get(bus.awlen)))
                    out["aw"].append(aw_q[-1])
                if ctx.get(bus.wvalid):
                    assert ctx.get(bus.wstrb) == (1 << b) - 1
                    w_beats.append(ctx.get(bus.wdata))
                    if ctx.get(bus.wlast):
                        a, ln = aw_q.pop(0)
                        assert len(w_beats) == ln + 1
                        for i, word in enumerate(w_beats):
                            mem[a + i * b:a + (i + 1) * b] = word.to_bytes(b, "little")
                        w_beats, b_due = [], b_due + 1
                if b_on and ctx.get(bus.bready):
                    b_due -= 1
                if ctx.get(dut.done.valid):
                    p = ctx.get(dut.done.payload)
                    out["done"].append((p.rows, p.errors))
                    await ctx.tick().repeat(3)   # counters settle
                    break
                await ctx.tick()
            else:
                raise AssertionError(f"no done for {s[:3]}: {len(keys)} keys left, cmd {cmd_on}, {len(out['ar'])} AR, {len(out['aw'])} AW, {len(r_beats)} R, {b_due} B")
        out.update(counters={n: ctx.get(getattr(dut, n)) for n in RowDMAModel.COUNTERS},
                   error_cause=int(ctx.get(dut.error_cause).as_value().value))

    simulate(dut, bench)
    out["memory"] = mem
    return out


@pytest.mark.parametrize("aw", [48, 64])
def test_rtl_wide_addresses_match_model(aw):
    tables, steps, init = scenario(aw)
    want = expect(aw, tables, steps, init)
    got = run_rtl(aw, tables, steps, init)
    assert got["ar"] == want["ar"] and got["aw"] == want["aw"]
    assert got["done"] == want["done"]
    assert got["counters"] == want["counters"] and got["error_cause"] == want["error_cause"]
    assert got["memory"].nonzero_pages() == want["memory"].nonzero_pages()
    # the scenario reaches what it is about (not only refusals), each way: bursts between
    # 4 and 8 GiB, one ending exactly at the top, and at 64 bits some above 2**62
    for k in ("ar", "aw"):
        ends = [a + (ln + 1) * B for a, ln in got[k]]
        assert any(1 << 32 < e <= 1 << 33 for e in ends) and max(ends) == 1 << aw, k
        assert aw == 48 or any(1 << 62 < e < 1 << 63 for e in ends), k
    copied = sum(r for r, _ in want["done"])
    assert copied >= 40 and want["counters"]["rows"] == copied


def test_model_wide_refusals():
    """The scenario's refusals, by hand: at 48 bits tables 3 (base = 2**48) and 4 (end past
    2**48) are desc, row 80 of table 0 is row, table 5 is table; staging at 2**48 and staging
    ending past it are slot; at 64 bits table 3 (above 2**62) is copied, table 4 (end past
    2**64) refused."""
    tables, steps, init = scenario(48)
    want = expect(48, tables, steps, init)
    assert want["done"][:2] == [(12, 0), (1, 4)]
    assert want["done"][-2:] == [(0, 2), (0, 2)]
    assert want["error_cause"] == sum(1 << CAUSES.index(c) for c in ("table", "row", "desc", "slot"))
    wide = expect(64, *scenario(64))
    assert wide["done"][:2] == [(12, 0), (2, 3)] and wide["done"][-1] == (0, 2)


def test_model_batch_path_with_windows_past_int64():
    """On a 64-bit bus a window may lie above 2**63, where the vectorised batch path's int64
    addresses cannot go (it raised OverflowError for any batch once such a descriptor was
    registered): batches on other tables copy as before, a row there is refused or reported
    outside the memory array like any row beyond it, a base at 2**64 - 8 with rows past the
    top is refused."""
    m = RowDMAModel(data_width=DW, addr_width=64)
    m.write_descriptor(0, 0x1000, 8, 64)
    m.write_descriptor(1, (1 << 63) + 0x1000, 8, 64)
    m.write_descriptor(2, (1 << 64) - 8, 8, 64)
    m.set_staging(0x8000, 64, 8, 1)
    mem = np.arange(1 << 16, dtype=np.uint64).astype(np.uint8)
    before = mem.copy()
    assert m.run(mem, "gather", [ref.key(0, 1), ref.key(2, 0), ref.key(0, 2)], 0) == \
        {"rows": 2, "errors": 1}
    assert (mem[0x8000:0x8040] == before[0x1040:0x1080]).all()
    assert (mem[0x8080:0x80C0] == before[0x1080:0x10C0]).all()
    assert m.error_causes == {"desc"}
    with pytest.raises(ValueError, match="outside the memory array"):
        m.run(mem, "gather", [ref.key(1, 0)], 0)
    m.set_staging((1 << 63) + 0x40_0000, 64, 8, 1)
    assert m.check(ref.key(0, 3), 2, 0) == (0x10C0, (1 << 63) + 0x40_0080, 64)
    with pytest.raises(ValueError, match="outside the memory array"):
        m.run(mem, "gather", [ref.key(0, 3)], 0)


# ---- data width: 64 .. 512-bit buses (issue 44, "Widen the DMA data bus") ------------------

BUS_WIDTHS = [64, 128, 256, 512]
BUS_AW = 40
BUS_SLOTS = 8   # per bank, 2 banks


def bus_scenario(dw, seed=1):
    """`scenario`'s format on a ``dw``-bit bus at `BUS_AW` address bits: rows of one beat, 3
    beats (one across a page), 33 beats (three bursts of at most 16 beats, the table ending
    at 2**BUS_AW), 64 B and 512 B (dim 16 and 128 fp32; across pages where a beat is smaller),
    1.5 beats (refused: not a multiple of the bus word) and a base half a beat off (refused);
    staging slots across pages; each batch gathered then scattered from two staging windows,
    then two windows off the bus word (refused: slot)."""
    b = dw // 8
    top = 1 << BUS_AW
    stride = max(34 * b, 512)
    tables = [
        (0, 5 * GiB, 40, b),
        (1, 6 * GiB + PAGE - 4 * b, 12, 3 * b),
        (2, top - 6 * 33 * b, 6, 33 * b),
        (3, 7 * GiB, 4, 3 * b // 2),
        (4, 8 * GiB + PAGE - 64 - b, 8, 64),
        (5, 9 * GiB + PAGE - 512 - b, 5, 512),
        (6, 10 * GiB + b // 2, 4, 2 * b),
    ]
    rng = np.random.default_rng(seed)
    init = [(base, rng.integers(0, 256, rows * r, dtype=np.uint8)) for _, base, rows, r in tables]
    first = [ref.key(0, 0), ref.key(0, 39), ref.key(0, 5), ref.key(1, 1), ref.key(1, 0),
             ref.key(1, 11), ref.key(2, 5), ref.key(2, 0)]
    second = [ref.key(2, 2), ref.key(3, 0), ref.key(4, 1), ref.key(4, 0), ref.key(5, 1),
              ref.key(5, 4), ref.key(6, 0), ref.key(0, 40)]
    low = 11 * GiB + PAGE - b
    high = tables[2][1] - 2 * BUS_SLOTS * stride - PAGE // 2
    steps = []
    for base in (low, high):
        steps += [("staging", base, stride, BUS_SLOTS, 2), ("batch", "gather", 1, first),
                  ("batch", "gather", 0, second),
                  ("write", base, rng.integers(0, 256, 2 * BUS_SLOTS * stride, dtype=np.uint8)),
                  ("batch", "scatter", 1, first), ("batch", "scatter", 0, second)]
    steps += [("staging", low + b // 2, stride, BUS_SLOTS, 2), ("batch", "gather", 1, first),
              ("staging", low, stride + b // 2, BUS_SLOTS, 2), ("batch", "scatter", 0, first)]
    return tables, steps, init


@pytest.mark.parametrize("dw", BUS_WIDTHS)
def test_rtl_wide_data_bus_matches_model(dw):
    scene = bus_scenario(dw)
    want = expect(BUS_AW, *scene, dw=dw)
    got = run_rtl(BUS_AW, *scene, dw=dw)
    assert got["ar"] == want["ar"] and got["aw"] == want["aw"]
    assert got["done"] == want["done"]
    assert got["counters"] == want["counters"] and got["error_cause"] == want["error_cause"]
    assert got["memory"].nonzero_pages() == want["memory"].nonzero_pages()
    # by hand: per window and direction the first batch copies its 8 rows (1 + 3 + 3 + 2 x 33
    # beats = 78 b bytes), the second 5 (33 b + 2 x 64 + 2 x 512 bytes) and refuses 3 (desc
    # twice, row); the windows off the bus word refuse all 8 (slot)
    b = dw // 8
    assert want["done"] == [(8, 0), (5, 3)] * 4 + [(0, 8)] * 2
    per_round = 78 * b + 33 * b + 2 * 64 + 2 * 512
    assert want["counters"] == {"rows": 52, "window_errors": 28, "axi_errors": 0,
                                "bytes_read": 4 * per_round, "bytes_written": 4 * per_round}
    assert want["error_cause"] == sum(1 << CAUSES.index(c) for c in ("row", "desc", "slot"))
    # it reaches what it is about: full 16-beat bursts, a burst ending at the top, and rows
    # split at a page boundary (the next burst of the row starts where one ended)
    for k in ("ar", "aw"):
        ends = [a + (ln + 1) * b for a, ln in got[k]]
        assert max(ln for _, ln in got[k]) == 15 and max(ends) == 1 << BUS_AW, k
        assert any(e % PAGE == 0 and nxt[0] == e for e, nxt in zip(ends, got[k][1:])), k
