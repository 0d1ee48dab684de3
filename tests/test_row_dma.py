"""RowDMA (GatherDMA / ScatterDMA): model semantics, and the RTL under cocotb (Verilator, Icarus)
compared with the model (AR/AW sequences, done records, counters, memory) and with naive
references (tests/reference.py) on real Criteo index streams; fuzzing of windows, stalls,
latency and injected AXI errors.

Each (simulator, data width) group is built once and runs all its scenarios in one cocotb run
(the module-scoped `group_run` fixture); the tests then check their share of the results.
"""
from pathlib import Path

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator
from helpers import CRITEO_CSV, DATA, param

import reference as ref
from hotline.data import load_dataset
from hotline.contract.dma import CAUSES, CHECK_ORDER
from hotline.model.dma_model import RowDMAModel
from hotline.hw import row_window_check
from hotline.hw.axi import AXI4LiteSignature, AXI4Signature, AXIResp
from hotline.hw.row_dma import GatherDMA, RowDMA, ScatterDMA
from hotline.sim import bench_row_dma, tb_row_dma as tb

ROW_BYTES = 64
TABLE_BASE = 0x0100_0000
CHANNELS = tb.CHANNELS + ("cmd", "keys", "done")


def params_of(dma):
    return {"direction": dma.direction, "data_width": dma.data_width,
            "addr_width": dma.addr_width, "num_tables": dma.num_tables,
            "row_bits": dma.row_bits, "max_burst_beats": dma.max_burst_beats,
            "framing": dma.framing, "counter_width": dma.counter_width}


# ---- interface and model ----------------------------------------------------------------------

def test_axi_signatures():
    sig = AXI4Signature(32, 64)
    names = set(sig.members)
    for ch, fields in {"aw": "id addr len size burst cache prot valid ready",
                       "ar": "id addr len size burst cache prot valid ready",
                       "w": "data strb last valid ready", "b": "id resp valid ready",
                       "r": "id data resp last valid ready"}.items():
        assert {ch + f for f in fields.split()} <= names
    assert sig.members["wstrb"].shape == 8 and sig.members["rdata"].flow == wiring.In
    assert sig.members["awvalid"].flow == wiring.Out and sig.members["bready"].flow == wiring.Out
    lite = AXI4LiteSignature(12)
    assert set(lite.members) == {"awaddr", "awprot", "awvalid", "awready", "wdata", "wstrb",
                                 "wvalid", "wready", "bresp", "bvalid", "bready", "araddr",
                                 "arprot", "arvalid", "arready", "rdata", "rresp", "rvalid",
                                 "rready"}
    assert [e.value for e in AXIResp] == [0, 1, 2, 3]
    assert AXI4Signature(32, 64) == AXI4Signature(32, 64) != AXI4Signature(32, 128)


@pytest.mark.parametrize("bad", [dict(data_width=48), dict(data_width=1024),
                                 dict(max_burst_beats=0),
                                 dict(max_burst_beats=256, data_width=256),
                                 dict(fifo_beats=8), dict(num_tables=33), dict(addr_width=8)])
def test_rejects_bad_parameters(bad):
    with pytest.raises(ValueError):
        RowDMA(**bad)
    with pytest.raises(ValueError):
        RowDMA("sideways")


def test_model_check_priority_and_bounds():
    m = RowDMAModel(data_width=64, addr_width=32)
    assert m.check(5, 0, 0) == "table"                      # nothing registered
    m.write_descriptor(1, 0x1000, 10, 64)
    m.set_staging(0x10000, 64, 4, 2)
    k = ref.key(1, 9)
    assert m.check(k, 3, 1) == (0x1000 + 9 * 64, 0x10000 + 7 * 64, 64)
    assert m.check(ref.key(1, 10), 0, 0) == "row"            # row == rows
    assert m.check(ref.key(1, 10), 4, 0) == "row"            # row before slot
    assert m.check(k, 4, 0) == "slot"
    m.write_descriptor(1, 0x1004, 10, 64)
    assert m.check(ref.key(1, 10), 0, 0) == "row" and m.check(k, 4, 0) == "desc"
    m.write_descriptor(1, 0x1000, 10, 72)                    # row_bytes > stride
    assert m.check(k, 0, 0) == "desc"
    m.write_descriptor(1, 2**32 - 640, 10, 64)               # ends exactly at the top
    assert m.check(k, 0, 0) == (2**32 - 64, 0x10000, 64)
    m.write_descriptor(1, 2**32 - 632, 10, 64)
    assert m.check(k, 0, 0) == "desc"
    m.set_staging(2**32 - 512, 64, 4, 2)                     # staging ends at the top
    m.write_descriptor(1, 0x1000, 10, 64)
    assert m.check(k, 3, 1) == (0x1000 + 9 * 64, 2**32 - 64, 64)
    m.set_staging(2**32 - 504, 64, 4, 2)
    assert m.check(k, 0, 0) == "slot"
    m.write_descriptor(1, 0, 0, 64)                          # rows = 0 invalidates
    assert m.check(k, 0, 0) == "table"
    m.write_descriptor(40, 0, 10, 64)                        # ignored, like the port
    assert 40 not in m.descriptors
    assert CHECK_ORDER[0] == "table" and set(CHECK_ORDER) < set(CAUSES)


def test_model_chunks_cover_rows_without_page_crossing():
    rng = np.random.default_rng(0)
    for dw in (64, 128, 256):
        m = RowDMAModel(data_width=dw, max_burst_beats=int(rng.choice([1, 4, 16])))
        b = dw // 8
        for _ in range(2000):
            src, dst = (int(x) * b for x in rng.integers(0, 2**20, 2))
            n = b * int(rng.integers(1, 600))
            parts = m.chunks(src, dst, n)
            assert sum(p[2] for p in parts) == n
            for s, d, c in parts:
                assert c % b == 0 and 0 < c <= m.max_burst_beats * b
                assert s // 4096 == (s + c - 1) // 4096 and d // 4096 == (d + c - 1) // 4096
            assert [p[0] - src for p in parts] == [p[1] - dst for p in parts]


def test_model_run_counts_and_errors():
    m = RowDMAModel(data_width=64)
    mem = np.arange(1 << 16, dtype=np.uint64).astype(np.uint8)
    m.write_descriptor(0, 0x1000, 8, 32)
    m.set_staging(0x8000, 32, 4, 1)
    before = mem.copy()
    done = m.run(mem, "gather", [ref.key(0, 1), ref.key(0, 8), ref.key(0, 2)], 0,
                 read_error=lambda a: a == 0x1000 + 2 * 32 + 8)
    assert done == {"rows": 2, "errors": 1}
    assert (mem[0x8000:0x8020] == before[0x1020:0x1040]).all()
    row = mem[0x8040:0x8060]
    assert (row[8:16] == before[0x8048:0x8050]).all()           # error beat: not written
    assert (row[:8] == before[0x1040:0x1048]).all() and (row[16:] == before[0x1050:0x1060]).all()
    assert (m.rows, m.window_errors, m.axi_errors) == (2, 1, 1)
    assert (m.bytes_read, m.bytes_written) == (56, 56)
    assert m.error_causes == {"row", "axi_read"}
    m.run(mem, "scatter", [ref.key(0, 7)], 0, write_error=lambda a: a >= 0x10F0)
    assert m.axi_errors == 2 and "axi_write" in m.error_causes
    assert (mem[0x10E0:0x10F0] == mem[0x8000:0x8010]).all()
    m.clear_errors()
    m.clear_counters()
    assert m.error_cause == 0 and m.counters() == dict.fromkeys(m.COUNTERS, 0)


@pytest.mark.parametrize("staging", [(0x8004, 32, 4, 1), (0x8000, 36, 4, 1), (2**32 - 64, 32, 4, 1),
                                     (0x8000, 32, 4, 0)])
def test_model_refuses_bad_staging_windows(staging):
    """Every row of a batch is refused with 'slot' (regression: the vectorised batch path
    once used a remainder as a mask)."""
    m = RowDMAModel(data_width=128)
    m.write_descriptor(0, 0x1000, 8, 32)
    m.set_staging(*staging)
    mem = np.zeros(1 << 16, np.uint8)
    assert m.run(mem, "gather", [ref.key(0, r) for r in range(3)], 0) == {"rows": 0, "errors": 3}
    assert m.error_causes == {"slot"} and not mem.any()


def test_pipelined_multiplier_amaranth_sim():
    """`row_window_check._mul`: two register stages, exact for full-width operands."""
    m = Module()
    a, b, en = Signal(27), Signal(16), Signal(init=1)
    out = row_window_check._mul(m, a, b, en, "p")
    sim = Simulator(m)
    sim.add_clock(1e-8)
    rng = np.random.default_rng(1)
    cases = [(2**27 - 1, 2**16 - 1), (0, 5), (2**17, 3)] + [
        (int(x), int(y)) for x, y in zip(rng.integers(0, 2**27, 40), rng.integers(0, 2**16, 40))]

    async def bench(ctx):
        seen = []
        for x, y in cases + [(0, 0)] * 2:
            ctx.set(a, x)
            ctx.set(b, y)
            await ctx.tick()
            seen.append(ctx.get(out))
        assert seen[1:len(cases) + 1] == [x * y for x, y in cases]

    sim.add_testbench(bench)
    sim.run()


def test_latencies_amaranth_sim():
    """The documented cycle counts, with an AXI slave that answers at once (Amaranth sim)."""
    dma = RowDMA(None, data_width=64)
    bus = dma.bus
    sim = Simulator(dma)
    sim.add_clock(1e-8)
    at = {}

    async def bench(ctx):
        ctx.set(dma.desc_we, 1)
        ctx.set(dma.desc_table, 2)
        ctx.set(dma.desc_base, 0x1000)
        ctx.set(dma.desc_rows, 10)
        ctx.set(dma.desc_row_bytes, 16)
        await ctx.tick()
        ctx.set(dma.desc_we, 0)
        for sig, v in ((dma.staging_base, 0x8000), (dma.staging_stride, 16),
                       (dma.staging_slots, 4), (dma.staging_banks, 1)):
            ctx.set(sig, v)
        await ctx.tick().repeat(dma.DESC_LATENCY)
        ctx.set(dma.cmd.payload, {"count": 1, "bank": 0, "scatter": 1})
        ctx.set(dma.cmd.valid, 1)
        ctx.set(dma.keys.payload.key, ref.key(2, 3))
        ctx.set(dma.keys.valid, 1)
        for s in ("arready", "awready", "wready", "bready"):
            if s != "bready":
                ctx.set(getattr(bus, s), 1)
        ctx.set(dma.done.ready, 1)
        r_left = b_pending = 0
        for cycle in range(80):
            ctx.set(bus.rvalid, r_left > 0)
            ctx.set(bus.rlast, r_left == 1)
            ctx.set(bus.bvalid, b_pending > 0)
            vals = {}
            for name, sig in (("cmd", dma.cmd.ready), ("key", dma.keys.ready),
                              ("ar", bus.arvalid), ("aw", bus.awvalid), ("rr", bus.rready),
                              ("w", bus.wvalid), ("wlast", bus.wlast), ("br", bus.bready),
                              ("done", dma.done.valid)):
                vals[name] = ctx.get(sig)
            if vals["cmd"] and "cmd" not in at:
                at["cmd"] = cycle
            if vals["key"] and "key" not in at and "cmd" in at:
                at["key"] = cycle
            for name in ("ar", "aw", "w", "done"):
                if vals[name] and name not in at:
                    at[name] = cycle
            if vals["ar"]:
                assert (ctx.get(bus.araddr), ctx.get(bus.arlen)) == (0x8000, 1)
                r_left = 2
            elif r_left and vals["rr"]:
                at.setdefault("r", cycle)
                r_left -= 1
            if vals["w"] and vals["wlast"]:
                b_pending += 1
            if b_pending and vals["br"] and ctx.get(bus.bvalid):
                at["b"] = cycle
                b_pending -= 1
            await ctx.tick()
            ctx.set(dma.cmd.valid, 0)
            if "key" in at:
                ctx.set(dma.keys.valid, 0)

    sim.add_testbench(bench)
    sim.run()
    assert {"cmd", "key", "ar", "aw", "r", "w", "b", "done"} <= set(at), at
    assert at["key"] - at["cmd"] == dma.CMD_TO_KEY
    assert at["ar"] - at["key"] == dma.KEY_TO_AR and at["aw"] == at["ar"]
    assert at["w"] - at["r"] == dma.R_TO_W
    assert at["done"] - at["b"] == dma.B_TO_DONE


def test_named_blocks_fix_the_direction():
    g, s, both = GatherDMA(data_width=128), ScatterDMA(), RowDMA(None)
    assert (g.direction, s.direction, both.direction) == ("gather", "scatter", None)
    assert "scatter" not in g.cmd_layout.members and "scatter" in both.cmd_layout.members
    assert g.bus.signature == AXI4Signature(32, 128)


# ---- scenario builders --------------------------------------------------------------------------

def real_scenario(path, params, *, batch_samples=256, max_batches=None, ram="latency",
                  stalls=None, latency=(1, 1), seed=0):
    """Real Criteo tables in memory; per batch: gather its distinct keys, read the staging bank
    back, overwrite the staging rows, scatter them. Returns (scenario, info for the checks)."""
    ds = load_dataset(path)
    keys, off = ds.keys.astype(np.int64), ds.sample_offsets
    rng = np.random.default_rng(seed)
    sc = tb.Scenario(f"real_{Path(path).name.split('.')[0]}", params, ram=ram, stalls=stalls,
                     latency=latency, seed=seed)
    tables, bases = {}, {}
    addr = TABLE_BASE
    for t, n in enumerate(ds.table_sizes):
        # only 32-byte aligned: 64-byte rows straddle 4 KiB pages (split bursts)
        addr = (addr + 31) // 32 * 32 + 32 * (t % 3)
        image = rng.integers(0, 256, (int(n), ROW_BYTES), dtype=np.uint8)
        image[:, :4] = np.frombuffer(np.asarray(ref.key(t, np.arange(n)), "<u4").tobytes(),
                                     np.uint8).reshape(-1, 4)  # rows are distinct
        sc.desc(t, addr, n, ROW_BYTES).memory(addr, image)
        tables[t] = [bytes(r) for r in image]
        bases[t] = addr
        addr += int(n) * ROW_BYTES
    starts = range(0, ds.num_samples, batch_samples)
    batches = [ref.unique_in_order(keys[off[s]:off[min(s + batch_samples, ds.num_samples)]])
               for s in starts][:max_batches]
    slots = max(len(u) for u in batches)
    stride = 96  # > row_bytes, a multiple of every bus width, not a power of two
    sbase = (addr + 4095) // 4096 * 4096 + 4096 + 32
    sc.staging(sbase, stride, slots, 2).region(sbase, 2 * slots * stride)
    new_rows = []
    for i, u in enumerate(batches):
        bank = i % 2
        bank_base = sbase + bank * slots * stride
        sc.batch("gather", bank, u).dump(bank_base, len(u) * stride)
        rows = rng.integers(0, 256, (len(u), ROW_BYTES), dtype=np.uint8)
        sc.write(bank_base, rows, stride=stride)
        sc.batch("scatter", bank, u)
        new_rows.append(rows)
    sc.snapshot()
    return sc, {"tables": tables, "bases": bases, "sizes": ds.table_sizes, "batches": batches,
                "new_rows": new_rows, "stride": stride}


def alloc(state, nbytes, b, rng, align_only=True):
    """Next free address (bus-aligned, randomly offset inside a page)."""
    addr = state["cursor"] + b * int(rng.integers(0, 4096 // b))
    state["cursor"] = addr + nbytes + b * int(rng.integers(1, 64))
    return addr


def fuzz_scenario(name, params, seed, *, ram="latency", phases=3, max_batches=5, errors=False,
                  hazards=False, stall_max=0.5, max_latency=40):
    """Random windows (valid, invalid, at the top of the address space, overlapping), random
    batches mixing valid and refused keys, random stalls and latency, optional AXI errors."""
    rng = np.random.default_rng(seed)
    b = params["data_width"] // 8
    top = 1 << params["addr_width"]
    rbits, nt = params["row_bits"], params["num_tables"]
    table_ids = 1 << (32 - rbits)
    stalls = {ch: (float(rng.uniform(0, stall_max)) if rng.random() < 0.6 else 0.0)
              for ch in CHANNELS}
    lo = int(rng.integers(1, max_latency))
    latency = (lo, int(rng.integers(lo, max_latency + 1)))
    sc = tb.Scenario(name, params, ram=ram, latency=latency, stalls=stalls, seed=seed)
    state = {"cursor": 0x0040_0000}
    good, broken = {}, []
    kinds = ["good"] * 4 + ["top", "zero_rows", "rb_zero", "rb_unaligned", "rb_huge",
                            "base_unaligned", "overflow", "max_rows"]
    ids = [int(t) for t in rng.permutation(min(nt, table_ids))[:len(kinds)]]
    far_rows = {}
    max_rb = 0
    for t, kind in zip(ids, kinds):
        rows, rb = int(rng.integers(1, 120)), b * int(rng.integers(1, 9))
        if kind == "good" or kind == "top":
            base = top - rows * rb if kind == "top" else alloc(state, rows * rb, b, rng)
            sc.desc(t, base, rows, rb).memory(base, rng.integers(0, 256, rows * rb, dtype=np.uint8))
            good[t] = (base, rows, rb)
            max_rb = max(max_rb, rb)
            continue
        if kind == "max_rows" and rng.random() < 0.5:
            # rows = 2**row_bits, ending at or below the top; keys only hit a small far area
            rb = min(b * 4, top >> rbits) // b * b or b
            if rb and (1 << rbits) * rb <= top:
                r0 = (top // 2 + 0x1000) // rb
                sc.desc(t, 0, 1 << rbits, rb).memory(r0 * rb, rng.integers(0, 256, 32 * rb, dtype=np.uint8))
                good[t] = (0, 1 << rbits, rb)
                far_rows[t] = r0
                max_rb = max(max_rb, rb)
                continue
        base = alloc(state, rows * rb, b, rng)
        if kind == "zero_rows":
            rows = 0
        elif kind == "rb_zero":
            rb = 0
        elif kind == "rb_unaligned":
            rb += 4
        elif kind == "rb_huge":
            rb = 65535 // b * b
        elif kind == "base_unaligned":
            base += 4
        elif kind in ("overflow", "max_rows"):
            base = top - rows * rb + b
        sc.desc(t, base, rows, rb)
        broken.append((t, max(rows, 1)))
    if nt < table_ids and rng.random() < 0.5:
        sc.desc(nt, 0x1000, 4, b)  # beyond num_tables: ignored
    overlap = False
    top_used = any(g[0] + g[1] * g[2] == top and g[0] > 0 for g in good.values())
    for phase in range(phases):
        slots, banks = int(rng.integers(1, 24)), int(rng.choice([1, 2, 2, 2, 3]))
        stride = b * int(rng.integers(max(1, -(-max_rb // b)), -(-max_rb // b) + 4))
        span = banks * slots * stride
        roll = rng.random()
        if roll < 0.05:
            sbase, banks = alloc(state, span, b, rng), 0
        elif roll < 0.10:
            sbase = alloc(state, span, b, rng) + 4
        elif roll < 0.15:
            sbase, stride = alloc(state, span, b, rng), stride + 4
        elif roll < 0.20:
            sbase = top - span + b
        elif roll < 0.30 and not top_used:
            sbase = top - span
            sc.region(sbase, span)
        elif roll < 0.38 and good and not hazards:
            base, rows, rb = good[list(good)[0]]
            if base > 0:
                sbase, overlap = base + b, True   # staging window overlaps a table window
                sc.region(sbase, min(span, top - sbase))
            else:
                sbase = alloc(state, span, b, rng)
                sc.region(sbase, span)
        else:
            sbase = alloc(state, span, b, rng)
            sc.region(sbase, span)
        sc.staging(sbase, stride, slots, banks)
        last_dir = None
        for _ in range(int(rng.integers(1, max_batches + 1))):
            direction = params["direction"] or str(rng.choice(["gather", "scatter"]))
            if direction != last_dir and last_dir is not None and not hazards:
                sc.barrier()
            last_dir = direction
            r = rng.random()
            count = 0 if r < 0.12 else 1 if r < 0.24 else int(rng.integers(2, slots + 4))
            keys = []
            for _ in range(count):
                r = rng.random()
                if good and r < 0.7:
                    t = int(rng.choice(list(good)))
                    rows = good[t][1]
                    row = (far_rows[t] + int(rng.integers(0, 32)) if t in far_rows
                           else int(rng.choice([0, rows - 1, int(rng.integers(0, rows))])))
                elif good and r < 0.8:
                    t = int(rng.choice([t for t in good if t not in far_rows] or list(good)))
                    rows = good[t][1]
                    row = min(rows + int(rng.integers(0, 3)), (1 << rbits) - 1)
                elif broken and r < 0.9:
                    t, rows = broken[int(rng.integers(0, len(broken)))]
                    row = int(rng.integers(0, rows))
                else:
                    free = [t for t in range(table_ids) if t not in good and t not in dict(broken)]
                    t, row = int(rng.choice(free)), int(rng.integers(0, 1 << rbits))
                keys.append((t << rbits) | row)
            sc.batch(direction, int(rng.integers(0, 2)), keys)
        if rng.random() < 0.3:
            sc.snapshot().clear(counters=bool(rng.random() < 0.5), errors=True)
        sc.snapshot()
    if errors:
        codes = ["slverr", "decerr"] if ram == "latency" else ["slverr"]
        wins = list(good.values())
        for lst in (sc.read_errors, sc.write_errors):
            for _ in range(2):
                if wins:
                    base, rows, rb = wins[int(rng.integers(0, len(wins)))]
                    if base == 0:
                        continue
                    n = rows * rb // b
                    lo_ = base + b * int(rng.integers(0, n))
                    lst.append((lo_, lo_ + b * int(rng.integers(1, n // 3 + 2)), str(rng.choice(codes))))
            regs = [r for r in sc.regions if r[0] not in [w[0] for w in wins]]
            if regs:
                a, n = regs[int(rng.integers(0, len(regs)))]
                lo_ = a + b * int(rng.integers(0, max(1, n // b)))
                lst.append((lo_, lo_ + b * int(rng.integers(1, n // b // 2 + 2)), str(rng.choice(codes))))
    sc.compare_memory = not overlap  # direction changes are ordered by the engine itself
    return sc


def ordering_scenario(params):
    """Alternating one-row gathers and scatters through the same staging slot with a slow
    memory: each batch reads what the previous one wrote only if the engine orders a change
    of direction after the earlier batches' write responses."""
    b = params["data_width"] // 8
    rng = np.random.default_rng(6)
    sc = tb.Scenario("ordering", params, latency=(30, 30), seed=6)
    sc.desc(1, 0x10000, 8, 2 * b).memory(0x10000, rng.integers(0, 256, 16 * b, dtype=np.uint8))
    sc.staging(0x20000, 2 * b, 2, 1).region(0x20000, 4 * b)
    for i in range(12):
        sc.batch("gather" if i % 2 == 0 else "scatter", 0, [ref.key(1, (3 * i + 1) % 8)])
    sc.snapshot()
    return sc


def errors_scenario(params, ram="latency"):
    """Read errors on single beats of table rows and write errors on a staging slot (gather),
    then on a table row (scatter): beats kept with no strobe, one error per beat / burst."""
    b = params["data_width"] // 8
    rb = 4 * b
    rng = np.random.default_rng(8)
    code = "decerr" if ram == "latency" else "slverr"
    base, sbase = 0x40000, 0x50000
    sc = tb.Scenario(f"errors_{ram}", params, ram=ram, latency=(4, 9), seed=8,
                     read_errors=[(base + rb + b, base + rb + 2 * b, code),
                                  (base + 3 * rb, base + 3 * rb + b, "slverr")],
                     write_errors=[(sbase + 2 * rb + 3 * b, sbase + 2 * rb + 4 * b, code),
                                   (base + 5 * rb, base + 5 * rb + b, "slverr")])
    sc.read_errors.append((sbase + 4 * rb + 2 * b, sbase + 4 * rb + 3 * b, code))  # scatter
    sc.desc(0, base, 8, rb).memory(base, rng.integers(0, 256, 8 * rb, dtype=np.uint8))
    # non-zero staging contents, so that a beat written when it should not be shows
    sc.staging(sbase, rb, 6, 1).memory(sbase, rng.integers(1, 256, 6 * rb, dtype=np.uint8))
    d = params["direction"]
    keys = [ref.key(0, r) for r in (0, 1, 2, 3, 4, 5)]
    if d in (None, "gather"):
        sc.batch("gather", 0, keys).snapshot()
    if d in (None, "scatter"):
        sc.batch("scatter", 0, keys[::-1]).snapshot()
    return sc


def rlast_scenario(params):
    """A slave whose rlast is wrong: early (on a row's fourth of eight beats) and late
    (missing on a row's last beat), gathered, then scattered back: each such beat is one AXI
    error (``axi_rlast``), and every row still lands whole where it belongs."""
    b = params["data_width"] // 8
    rb = 8 * b                                       # one burst of 8 beats per row
    base, sbase = 0x60000, 0x70000
    sc = tb.Scenario("rlast", params, latency=(2, 6), seed=11,
                     rlast_errors=[(base + rb + 3 * b, base + rb + 4 * b),
                                   (base + 3 * rb - b, base + 3 * rb),
                                   (sbase + rb - b, sbase + rb)])        # scatter: slot 0
    rng = np.random.default_rng(11)
    sc.desc(0, base, 4, rb).memory(base, rng.integers(0, 256, 4 * rb, dtype=np.uint8))
    sc.staging(sbase, rb, 4, 1).memory(sbase, rng.integers(0, 256, 4 * rb, dtype=np.uint8))
    if params["direction"] in (None, "gather"):
        sc.batch("gather", 0, [ref.key(0, r) for r in (0, 1, 2, 3)]).snapshot()
    if params["direction"] in (None, "scatter"):
        sc.batch("scatter", 0, [ref.key(0, r) for r in (3, 2, 1, 0)]).snapshot()
    return sc


def long_batch_scenario(params):
    """One ``end``-framed batch of 65,540 keys into a 4-slot window: only slots 0..3 are
    copied; keys from index 65,536 on must not wrap around to slots 0..3 (they carry rows 4..7,
    so a wrapped copy would show in staging), and the done record's errors saturate."""
    b = params["data_width"] // 8
    base, sbase = 0x80000, 0x90000
    sc = tb.Scenario("long_batch", params, latency=(1, 1), seed=12)
    sc.desc(0, base, 8, b).memory(base, np.arange(8 * b, dtype=np.uint8))
    sc.staging(sbase, b, 4, 1).region(sbase, 8 * b)
    keys = ([ref.key(0, r) for r in range(4)] + [ref.key(0, 7)] * (65536 - 4)
            + [ref.key(0, r) for r in range(4, 8)])
    sc.batch("gather", 0, keys).snapshot()
    return sc


def directed_scenario(params, ram="latency"):
    """Hand-written edge cases: count = 0, one-key batches, row = rows - 1 / rows, rows that
    straddle pages, bursts split by max_burst_beats, slot = slots, bank = banks."""
    b = params["data_width"] // 8
    rb = b * params["max_burst_beats"] * 2 + b       # > 2 bursts per row
    sc = tb.Scenario("directed", params, ram=ram, latency=(3, 3), seed=99)
    rng = np.random.default_rng(5)
    base = 0x20000 - 3 * b                            # rows straddle a page boundary
    sc.desc(3, base, 5, rb).memory(base, rng.integers(0, 256, 5 * rb, dtype=np.uint8))
    sbase = 0x30000 - b
    sc.staging(sbase, rb, 3, 1).region(sbase, 3 * rb)
    d = params["direction"]
    both = [d] if d else ["gather", "scatter"]
    k = lambda row: ref.key(3, row)
    for direction in both:
        sc.batch(direction, 0, [])
        sc.batch(direction, 0, [k(4)])
        sc.batch(direction, 0, [k(5)])                            # row == rows
        sc.batch(direction, 0, [k(0), k(4), k(1), k(2)])          # slot 3 == slots
        sc.batch(direction, 1, [k(2)])                            # bank 1 >= banks
        sc.batch(direction, 0, [ref.key(4, 0)])                   # unregistered table
        sc.batch(direction, 0, [])
        sc.snapshot().barrier()
    return sc


def rewrite_scenario(params, *, stalls=None, name="staging_rewrite"):
    """The host rewrites every staging register while a batch runs (after half of its keys
    were taken, so the rest and the keys in the check's stages are in flight): the batch keeps
    the window latched at its command, the next batch uses the new one. The new window is
    elsewhere, smaller and of another stride, so a key that mixes the two windows' fields
    lands outside both, or is refused."""
    b = params["data_width"] // 8
    rb = 2 * b
    rng = np.random.default_rng(11)
    sc = tb.Scenario(name, params, latency=(4, 12), stalls=stalls, seed=11)
    old, new = (0x40000, 4 * b, 40, 2), (0x80000, 8 * b, 3, 1)
    sc.desc(0, 0x10000, 64, rb).memory(0x10000, rng.integers(0, 256, 64 * rb, dtype=np.uint8))
    sc.memory(old[0], rng.integers(1, 256, old[1] * old[2] * old[3], dtype=np.uint8))
    sc.region(new[0], new[1] * new[2] * new[3])
    d = params["direction"]
    for direction in [d] if d else ["gather", "scatter"]:
        keys = [ref.key(0, int(r)) for r in rng.permutation(64)[:40]]
        sc.staging(*old).batch(direction, 1, keys)
        sc.staging(*new, after_keys=20).batch(direction, 0, keys[:3]).snapshot()
    return sc


def far_base_scenario(params):
    """Table and staging bases with a bit at or above addr_width (DESC_BASE_HI /
    STAGING_BASE_HI != 0 on a 32-bit bus): refused (causes desc, then slot), never cut to the
    low-memory address they alias (which holds data, so that a copy from there would show)."""
    b = params["data_width"] // 8
    rb, top = 2 * b, 1 << params["addr_width"]
    rng = np.random.default_rng(12)
    sc = tb.Scenario("far_base", params, latency=(2, 6), seed=12)
    sc.desc(0, 0x10000, 8, rb).memory(0x10000, rng.integers(0, 256, 8 * rb, dtype=np.uint8))
    sc.desc(2, top + 0x20000, 8, rb).memory(0x20000, rng.integers(0, 256, 8 * rb, dtype=np.uint8))
    sc.staging(0x40000, rb, 8, 1).memory(0x40000, rng.integers(0, 256, 8 * rb, dtype=np.uint8))
    sc.memory(0x60000, rng.integers(0, 256, 8 * rb, dtype=np.uint8))
    d = params["direction"]
    both = [d] if d else ["gather", "scatter"]
    for direction in both:
        sc.batch(direction, 0, [ref.key(0, 1), ref.key(2, 3), ref.key(0, 2), ref.key(2, 0)])
    sc.snapshot().staging(top + 0x60000, rb, 8, 1)
    for direction in both:
        sc.batch(direction, 0, [ref.key(0, 1), ref.key(0, 4)])
    sc.snapshot()
    return sc


# ---- running and checking --------------------------------------------------------------------

def run_group(dma, scenarios, build_dir, simulator):
    """Run ``scenarios`` on ``dma`` in one cocotb build; {scenario name: (scenario, results)}.
    Bus-monitor violations are in the results: the per-scenario checks name them."""
    results = tb.run(dma, scenarios, build_dir=build_dir, simulator=simulator)
    return {sc.name: (sc, res) for sc, res in zip(scenarios, results)}


def check_against_model(sc, res):
    """AR/AW sequences, done records, snapshots, counters, error bits, dumps and memory."""
    exp = tb.expect(sc)
    assert "error" not in res, res.get("error")
    assert not res["violations"], res["violations"][:5]
    for k in ("ar", "aw"):
        got, want = res[k], exp[k]
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"{sc.name}: {k.upper()} #{i}: got {g}, expected {w}"
        assert len(got) == len(want), f"{sc.name}: {len(got)} {k.upper()}, expected {len(want)}"
    assert res["done"] == exp["done"], sc.name
    assert res["snapshots"] == exp["snapshots"], sc.name
    assert {k: res[k] for k in exp["counters"]} == exp["counters"], sc.name
    assert res["error_cause"] == exp["error_cause"] and res["busy"] == 0, sc.name
    if sc.compare_memory:
        assert res["dumps"] == exp["dumps"], sc.name
        for (addr, n), g, w in zip(sc.regions, res["memory"], exp["memory"]):
            if g != w:
                i = next(i for i in range(n) if g[i] != w[i])
                raise AssertionError(f"{sc.name}: memory differs at {addr + i:#x}")
    return exp


def check_real(sc, res, info):
    """The naive references: staging after each gather, tables after all scatters."""
    tables = {t: list(rows) for t, rows in info["tables"].items()}
    stride = info["stride"]
    for u, dump, new in zip(info["batches"], res["dumps"], info["new_rows"]):
        want = ref.gather(tables, u)
        got = [dump[i * stride:i * stride + ROW_BYTES] for i in range(len(u))]
        assert got == want, f"{sc.name}: staging differs from the gather reference"
        ref.scatter(tables, u, [bytes(r) for r in new])
    image = dict(zip([a for a, _ in sc.regions], res["memory"]))
    for t, base in info["bases"].items():
        assert image[base] == b"".join(tables[t]), f"{sc.name}: table {t} differs from the scatter reference"
    n = sum(len(u) for u in info["batches"])
    assert res["rows"] == 2 * n and res["window_errors"] == 0 and res["axi_errors"] == 0
    assert res["done"] == [(len(u), 0) for u in info["batches"] for _ in range(2)]


# ---- groups: (simulator, data width) -> engine, scenarios ------------------------------------

GROUPS = {
    # name: (simulator, RowDMA kwargs, real batches (batch_samples, max_batches), fuzz count)
    # framing "end" (the top's): also a batch past the 16-bit slot range (long_batch_scenario);
    # 12-bit counters, which that batch's refusals and the byte counts wrap (cause overflow)
    "verilator-64": ("verilator", dict(data_width=64, framing="end", counter_width=12),
                     (64, 1), 6),
    "icarus-128": ("icarus", dict(data_width=128, max_burst_beats=8, fifo_beats=32,
                                  max_chunks=16), (32, 1), 3),
    "icarus-256-gather": ("icarus", dict(direction="gather", data_width=256, num_tables=20),
                          None, 3),
    "verilator-128": ("verilator", dict(data_width=128), (256, None), 12),
    "verilator-256": ("verilator", dict(data_width=256, max_burst_beats=4), (256, None), 12),
    "icarus-64-scatter": ("icarus", dict(direction="scatter", data_width=64, fifo_beats=16,
                                         max_chunks=4), None, 4),
    "verilator-64-full": ("verilator", dict(data_width=64), (256, None), 30),
}
SLOW_GROUPS = {"verilator-128", "verilator-256", "icarus-64-scatter", "verilator-64-full"}


def group_params(name):
    sim, kwargs, real, nfuzz = GROUPS[name]
    kwargs = dict(kwargs)
    direction = kwargs.pop("direction", None)
    return sim, RowDMA(direction, **kwargs), real, nfuzz


def group_scenarios(name):
    """(simulator, RowDMA, scenarios, {real scenario name: reference info}) of group ``name``."""
    sim, dma, real, nfuzz = group_params(name)
    params = params_of(dma)
    scenarios, infos = [], {}
    if real and params["direction"] is None and DATA.exists():
        samples, nb = real
        for i, rel in enumerate(CRITEO_CSV):
            if (DATA / rel).exists():
                stalls = {ch: 0.2 for ch in CHANNELS} if i == 1 else None
                sc, info = real_scenario(DATA / rel, params, batch_samples=samples, max_batches=nb,
                                         stalls=stalls, latency=(1, 1) if i != 2 else (20, 40),
                                         seed=i)
                scenarios.append(sc)
                infos[sc.name] = info
    scenarios.append(directed_scenario(params))
    scenarios += [errors_scenario(params), errors_scenario(params, ram="axiram"),
                  rlast_scenario(params)]
    if params["framing"] == "end":
        scenarios.append(long_batch_scenario(params))
    scenarios += [rewrite_scenario(params), far_base_scenario(params),
                  rewrite_scenario(params, stalls={ch: 0.3 for ch in CHANNELS},
                                   name="staging_rewrite_stalls")]
    if params["direction"] is None:
        scenarios.append(ordering_scenario(params))
    for i in range(nfuzz):
        kind = i % 3
        scenarios.append(fuzz_scenario(f"fuzz{i}", params, 1000 * len(name) + i,
                                       errors=kind == 1, hazards=kind == 2 and i % 2 == 0))
    # throughput: 64-byte rows behind a 32-cycle memory (as sim/bench_row_dma.py)
    d = params["direction"] or "gather"
    scenarios.append(bench_row_dma.scenario(params, ROW_BYTES, 1024, 32, d))
    # cocotbext-axi AxiRam: the directed case and one fuzz case with errors and pauses
    scenarios.append(directed_scenario(params, ram="axiram"))
    scenarios[-1].name = "directed_axiram"
    scenarios.append(fuzz_scenario("fuzz_axiram", params, 77 + len(name), ram="axiram",
                                   errors=True, max_batches=3, phases=2))
    return sim, dma, scenarios, infos


@pytest.fixture(scope="module")
def group_run(request, tmp_path_factory, simulator_or_skip):
    """(RowDMA, {scenario name: (scenario, results)}, scenarios, infos) of the group
    ``request.param``: one cocotb build and run per group, shared by the module's tests."""
    name = request.param
    sim, dma, scenarios, infos = group_scenarios(name)
    res = run_group(dma, scenarios, tmp_path_factory.mktemp(f"row_dma_{name}"),
                    simulator_or_skip(sim))
    return dma, res, scenarios, infos


def groups(real_only=False):
    """The groups as indirect parameters of `group_run`, the long ones in the slow tier."""
    return [param(g, slow=g in SLOW_GROUPS, id=g) for g in GROUPS if GROUPS[g][2] or not real_only]


def test_model_long_batch_and_rlast_faults():
    """The model side of the fault scenarios, against hand-computed results."""
    params = params_of(RowDMA(None, framing="end"))
    long_run = tb.expect(long_batch_scenario(params))
    assert long_run["done"] == [(4, 65535)]
    assert long_run["counters"]["window_errors"] == 65536 and long_run["counters"]["rows"] == 4
    assert long_run["error_cause"] == 1 << CAUSES.index("slot")
    wrapped = tb.expect(long_batch_scenario({**params, "counter_width": 12}))
    assert wrapped["counters"]["window_errors"] == 65536 % 4096
    assert wrapped["error_cause"] == 1 << CAUSES.index("slot") | 1 << CAUSES.index("overflow")
    assert long_run["memory"][1] == bytes(range(32)) + bytes(32)   # slots 0..3 = rows 0..3
    rlast = tb.expect(rlast_scenario(params))
    assert rlast["done"] == [(4, 0), (4, 0)]
    assert [s["axi_errors"] for s in rlast["snapshots"]] == [2, 3]
    assert rlast["error_cause"] == 1 << CAUSES.index("axi_rlast")
    assert rlast["counters"]["bytes_read"] == rlast["counters"]["bytes_written"] == 2 * 4 * 64


@pytest.mark.parametrize("group_run", groups(), indirect=True)
def test_rtl_directed_and_fuzz_match_model(group_run):
    _, res, scenarios, _ = group_run
    for sc in scenarios:
        if not sc.name.startswith(("real_", "bench_")):
            check_against_model(sc, res[sc.name][1])


@pytest.mark.realdata
@pytest.mark.parametrize("group_run", groups(real_only=True), indirect=True)
def test_rtl_real_tables_gather_scatter(group_run):
    _, res, scenarios, infos = group_run
    real = [sc for sc in scenarios if sc.name.startswith("real_")]
    if not real:
        pytest.skip("no real data files present")
    for sc in real:
        r = res[sc.name][1]
        check_against_model(sc, r)
        check_real(sc, r, infos[sc.name])


@pytest.mark.parametrize("group_run", groups(), indirect=True)
def test_rtl_read_utilization_64_byte_rows(group_run):
    """>= 0.90 of the read channel's peak for 64-byte rows with a 32-cycle memory latency
    (groups with deliberately small FIFOs only check that the run is right and not stuck)."""
    dma, res, scenarios, _ = group_run
    sc = next(sc for sc in scenarios if sc.name.startswith("bench_"))
    r = bench_row_dma._measure(sc, res[sc.name][1])
    floor = 0.90 if dma.fifo_beats >= 40 and dma.max_chunks >= 32 else 0.25
    assert r["rows"] == 1024 and r["read_utilization"] >= floor, r


def test_fuzz_covers_every_cause():
    """The default fuzz scenarios reach every error cause and every refusal kind in the model."""
    seen, done_kinds = set(), set()
    for name in [g for g in GROUPS if g not in SLOW_GROUPS]:
        _, _, scenarios, _ = group_scenarios(name)
        for sc in scenarios:
            exp = tb.expect(sc)
            for snap in exp["snapshots"] + [{"error_cause": exp["error_cause"]}]:
                seen |= {c for i, c in enumerate(CAUSES) if snap["error_cause"] >> i & 1}
            done_kinds |= {("empty" if d == (0, 0) else "mixed" if d[0] and d[1] else
                            "ok" if d[0] else "refused") for d in exp["done"]}
    assert seen == set(CAUSES), seen
    assert done_kinds == {"empty", "mixed", "ok", "refused"}


def latched_windows(sc):
    """Per burst of ``sc`` in issue order (the model's burst count per batch): the usable
    table windows and the staging window set before the burst's batch (the one its command
    latched), as [(lo, hi)]."""
    model, top = sc.model(), 1 << sc.params["addr_width"]
    tables, staging, out = {}, None, []
    for s in sc.steps:
        if s[0] == "desc":
            model.write_descriptor(*s[1:])
            tables[s[1]] = (s[2], s[2] + s[3] * s[4])
        elif s[0] == "staging":
            model.set_staging(*s[1:5])
            base, stride, slots, banks = s[1:5]
            staging = (base, base + banks * slots * stride)
        elif s[0] == "batch":
            wins = [w for w in (*tables.values(), staging) if w and w[1] <= top]
            out += [wins] * len(model.bursts(s[1], s[3], s[2]))
    return out


@pytest.mark.parametrize("group_run", groups(), indirect=True)
def test_rtl_staging_rewrite_mid_batch_keeps_the_latched_window(group_run):
    """Issue 42: the host rewrites the staging registers while a batch's keys are in flight
    (with and without stalls). Every AR and AW stays inside its batch's table window or the
    staging window latched at its command (the unlatched engine wrote outside every window and
    refused the rest of the batch), and the RTL matches the model, which applies the new window
    from the next batch."""
    _, res, scenarios, _ = group_run
    rewrites = [sc for sc in scenarios if sc.name.startswith("staging_rewrite")]
    assert len(rewrites) == 2
    for sc in rewrites:
        r = res[sc.name][1]
        assert "error" not in r, r.get("error")
        b = sc.bus_bytes
        wins = latched_windows(sc)
        for k in ("ar", "aw"):
            for i, ((addr, ln), ok) in enumerate(zip(r[k], wins)):
                end = addr + (ln + 1) * b
                assert any(lo <= addr and end <= hi for lo, hi in ok), \
                    f"{sc.name}: {k.upper()} #{i} [{addr:#x}, {end:#x}) outside its windows"
            assert len(r[k]) == len(wins), f"{sc.name}: {len(r[k])} {k.upper()}"
        check_against_model(sc, r)


@pytest.mark.parametrize("group_run", groups(), indirect=True)
def test_rtl_refuses_bases_above_addr_width(group_run):
    """Issue 42: a table or staging base with BASE_HI != 0 on a 32-bit bus is refused
    (desc, then slot; counted in the done records, window_errors and error_cause), never cut
    to the low address it aliases: no burst goes there."""
    dma, res, _, _ = group_run
    sc, r = res["far_base"]
    check_against_model(sc, r)
    n = 1 if dma.direction else 2
    assert r["done"] == [(2, 2)] * n + [(0, 2)] * n
    assert r["window_errors"] == 4 * n and r["rows"] == 2 * n
    assert r["error_cause"] == (1 << CAUSES.index("desc")) | (1 << CAUSES.index("slot"))
    rb = 2 * sc.bus_bytes
    for k in ("ar", "aw"):
        for addr, _ in r[k]:
            assert not (0x20000 <= addr < 0x20000 + 8 * rb or 0x60000 <= addr < 0x60000 + 8 * rb)


def test_model_refuses_bases_above_addr_width():
    """The model side: a base at or above 2**addr_width (BASE_HI != 0 on a 32-bit bus) is
    refused, per key and in both batch paths (vectorised, and per beat with an error
    predicate), where it once was cut to the low address it aliases."""
    top = 2**32
    m = RowDMAModel(data_width=64, addr_width=32)
    m.write_descriptor(1, top + 0x1000, 10, 64)
    m.set_staging(0x10000, 64, 4, 2)
    assert m.check(ref.key(1, 0), 0, 0) == "desc"
    m.write_descriptor(1, 0x1000, 10, 64)
    assert m.check(ref.key(1, 0), 0, 0) == (0x1000, 0x10000, 64)
    for base in (top + 0x10000, top):
        m.set_staging(base, 64, 4, 2)
        assert m.check(ref.key(1, 0), 0, 0) == "slot"
    for read_error in (None, lambda a: False):
        m = RowDMAModel(data_width=64, addr_width=32)
        mem = np.arange(1 << 17, dtype=np.uint64).astype(np.uint8)
        before = mem.copy()
        m.write_descriptor(0, 0x1000, 8, 64)
        m.write_descriptor(2, top + 0x2000, 8, 64)
        m.set_staging(0x10000, 64, 4, 1)
        done = m.run(mem, "gather", [ref.key(2, 1), ref.key(0, 1)], 0, read_error=read_error)
        assert done == {"rows": 1, "errors": 1} and m.error_causes == {"desc"}
        assert (mem[0x10040:0x10080] == before[0x1040:0x1080]).all()
        assert (mem[0x10000:0x10040] == before[0x10000:0x10040]).all()
        m.set_staging(top + 0x10000, 64, 4, 1)
        assert m.run(mem, "gather", [ref.key(0, 2)], 0, read_error=read_error) == \
            {"rows": 0, "errors": 1}
        assert m.error_causes == {"desc", "slot"}
