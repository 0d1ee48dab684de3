"""AccessLearner: model semantics (Space-Saving and the hazard rule, from first principles),
RTL == model (Amaranth simulator, cocotb), learned coverage on real Criteo files."""
import numpy as np
import pytest

from helpers import param
from amaranth.back import verilog
from amaranth.hdl import Cat, Const, Elaboratable, Module, Signal
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from hotline.model.access_learner import AccessLearnerModel, top_k
from hotline.hw.access_learner import READ_LATENCY, WINDOW, AccessLearner, BucketTable
from hotline.contract.hashing import bucket_hash
from hotline.sim import tb_access_learner
from hotline.sim.bench_access_learner import coverage_ratio, criteo_files, load_keys

SMALL = dict(buckets=8, ways=4, count_bits=5, seed=3)


def colliding_keys(n, rng, buckets, seed, bucket=0):
    """``n`` distinct random keys that all hash to ``bucket``."""
    keys = rng.integers(0, 2**32, 64 * n * buckets, dtype=np.uint64)
    hit = keys[bucket_hash(seed, 32, buckets.bit_length() - 1).np(keys) == bucket]
    return np.unique(hit)[:n].astype(np.uint32)


def kept(keys, buckets, seed=0, window=WINDOW):
    """The hazard rule from its definition: key i is kept unless one of keys i-window..i-1
    has its bucket and a different key."""
    keys = np.asarray(keys, dtype=np.uint64)
    b = bucket_hash(seed, 32, buckets.bit_length() - 1).np(keys)
    hazard = np.zeros(len(keys), dtype=bool)
    for d in range(1, window + 1):
        hazard[d:] |= (b[d:] == b[:-d]) & (keys[d:] != keys[:-d])
    return ~hazard


def fillers(rng, params, avoid=0):
    """One key in each bucket except ``avoid``: repeating them never triggers the rule."""
    return [int(colliding_keys(1, rng, params["buckets"], params["seed"], b)[0])
            for b in range(params["buckets"]) if b != avoid]


def schedule(keys, rng, gap=0.0, ops=None):
    """Per-cycle inputs (valid, key, start, stop, clear): the window opens in cycle 0, keys
    follow with random idle cycles, ``ops`` maps a key index to extra pulses on its cycle."""
    ops = ops or {}
    cycles = [(0, 0, 1, 0, 0)]
    for i, key in enumerate(keys):
        while rng.random() < gap:
            cycles.append((0, int(rng.integers(2**32)), 0, 0, 0))
        start, stop, clear = (int(op in ops.get(i, ())) for op in ("start", "stop", "clear"))
        cycles.append((1, int(key), start, stop, clear))
    return cycles


def simulate(params, cycles):
    """Run ``cycles`` through the RTL, then read every entry back. Returns the per-address
    (keys, counts), the model fed with the keys the RTL reported as counted, and the
    hardware (``counted``, ``dropped``) registers."""
    dut = AccessLearner(**params)
    model = AccessLearnerModel(**{k: v for k, v in params.items() if k != "primitive"})
    capacity = params["buckets"] * params["ways"]
    out = {}

    async def bench(ctx):
        window = False
        for valid, key, start, stop, clear in cycles:
            ctx.set(dut.lookups.valid, valid)
            ctx.set(dut.lookups.payload, key)
            ctx.set(dut.start, start)
            ctx.set(dut.stop, stop)
            ctx.set(dut.clear, clear)
            assert ctx.get(dut.lookups.ready) == 1
            assert ctx.get(dut.active) == (window and not ctx.get(dut.clearing))
            if valid and ctx.get(dut.active):
                model.update([key])
            if clear:
                model.clear()
            window = not stop and (start or window)
            await ctx.tick()
        ctx.set(dut.lookups.valid, 0)
        ctx.set(dut.start, 0)
        ctx.set(dut.clear, 0)
        ctx.set(dut.stop, 1)
        await ctx.tick()
        ctx.set(dut.stop, 0)
        for _ in range(params["buckets"] + 4):
            if ctx.get(dut.idle):
                break
            await ctx.tick()
        assert ctx.get(dut.idle)
        rows = []
        # After the tick that ends cycle t we observe cycle t + 1: the entry of cycle t - 1.
        for addr in range(capacity + READ_LATENCY - 1):
            ctx.set(dut.read_addr, addr % capacity)
            await ctx.tick()
            if addr >= READ_LATENCY - 1:
                rows.append((ctx.get(dut.read_data.valid), ctx.get(dut.read_data.key),
                             ctx.get(dut.read_data.count)))
        out["rows"] = np.array(rows, dtype=np.uint64).reshape(-1, 3)
        out["counters"] = ctx.get(dut.counted), ctx.get(dut.dropped)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    rows = out["rows"]
    assert np.array_equal(rows[:, 0], rows[:, 2] > 0), "valid must mean count != 0"
    return rows[:, 1], rows[:, 2], model, out["counters"]


def check_exact(params, cycles):
    keys, counts, model, counters = simulate(params, cycles)
    want_keys, want_counts = model.entries()
    assert np.array_equal(keys, want_keys)
    assert np.array_equal(counts, want_counts)
    assert counters == (model.counted, model.dropped)
    return model


# --- model semantics, checked against first principles -----------------------------------

@pytest.mark.parametrize("window", [0, WINDOW])
def test_model_exact_when_everything_fits(window):
    """Every kept lookup is counted exactly; the dropped ones are the rule's."""
    rng = np.random.default_rng(1)
    keys = rng.choice(rng.integers(0, 2**32, 300, dtype=np.uint64), 5000)
    model = AccessLearnerModel(buckets=256, ways=8, window=window)
    model.update(keys[:1234])
    model.update(keys[1234:])               # the hazard history spans update() calls
    stored, counts = model.entries()
    keep = kept(keys, 256, window=window)
    uniq, true = np.unique(keys[keep], return_counts=True)
    got = dict(zip(stored[counts > 0].tolist(), counts[counts > 0].tolist()))
    assert got == dict(zip(uniq.tolist(), true.tolist()))
    assert model.counted == len(keys) and model.dropped == np.count_nonzero(~keep)
    assert (model.dropped > 0) == (window > 0)


def test_model_space_saving_bounds():
    """Counts never underestimate the kept lookups; in each bucket they sum to the bucket's
    kept lookups."""
    rng = np.random.default_rng(2)
    keys = (rng.zipf(1.2, 20000) % 5000).astype(np.uint32)
    model = AccessLearnerModel(buckets=16, ways=4)
    model.update(keys)
    stored, counts = model.entries()
    keys = keys[kept(keys, 16)]
    uniq, true = np.unique(keys, return_counts=True)
    truth = dict(zip(uniq.tolist(), true.tolist()))
    for k, c in zip(stored[counts > 0].tolist(), counts[counts > 0].tolist()):
        assert c >= truth[k]
    buckets = bucket_hash(0, 32, 4).np(keys)
    per_bucket = np.bincount(buckets.astype(np.int64), minlength=16)
    assert np.array_equal(counts.reshape(16, 4).sum(axis=1), per_bucket)


def test_model_hazard_rule_window_and_clear():
    model = AccessLearnerModel(buckets=1, ways=2)
    model.update([5, 5] + [9] * (WINDOW + 1))   # 9 needs WINDOW 9s before it
    assert model.entries()[0].tolist() == [5, 9] and model.entries()[1].tolist() == [2, 1]
    assert model.dropped == WINDOW and model.counted == WINDOW + 3
    model.update([5])                        # 9s only in its window: dropped
    model.clear()
    model.update([7, 7, 8])                  # the cleared history does not count
    assert model.entries()[0].tolist() == [7, 0] and model.entries()[1].tolist() == [2, 0]
    assert model.dropped == 1 and model.counted == 3


def test_model_replaces_lowest_way_minimum_and_saturates():
    model = AccessLearnerModel(buckets=1, ways=2, count_bits=2, window=0)
    model.update([5, 5, 5, 5, 5, 9])        # 5 saturates at 3; 9 takes the empty way
    assert model.entries()[0].tolist() == [5, 9] and model.entries()[1].tolist() == [3, 1]
    model.update([7])                       # miss: replaces 9 (count 1) with count 2
    assert model.entries()[0].tolist() == [5, 7] and model.entries()[1].tolist() == [3, 2]
    model.update([8, 6])                    # 8 evicts 7 (2 + 1); 6 ties: way 0 goes
    assert model.entries()[0].tolist() == [6, 8] and model.entries()[1].tolist() == [3, 3]
    model = AccessLearnerModel(buckets=1, ways=2, window=0)
    model.update([0, 0])                    # key 0 is a real key, not an empty entry
    assert model.entries()[0].tolist() == [0, 0] and model.entries()[1].tolist() == [2, 0]


def test_top_k_order():
    keys = np.array([40, 10, 30, 20, 0], dtype=np.uint32)
    counts = np.array([2, 5, 5, 1, 0], dtype=np.uint64)
    assert top_k(keys, counts, 3).tolist() == [10, 30, 40]
    assert top_k(keys, counts, 10).tolist() == [10, 30, 40, 20]


# --- RTL == model on adversarial streams (Amaranth simulator) ----------------------------

def test_repeated_key_back_to_back_saturates():
    check_exact(SMALL, schedule([0xDEADBEEF] * 40 + [7] * 3 + [0xDEADBEEF] * 2,
                                np.random.default_rng(0)))


def test_all_distinct_keys():
    rng = np.random.default_rng(3)
    check_exact(SMALL, schedule(rng.integers(0, 2**32, 150, dtype=np.uint64), rng, gap=0.2))


def test_one_bucket_collisions():
    """Replacement in one overfull bucket: colliding keys WINDOW apart (fillers between)."""
    rng = np.random.default_rng(4)
    pool = colliding_keys(7, rng, SMALL["buckets"], SMALL["seed"])
    pad = fillers(rng, SMALL)[:WINDOW]
    keys = [k for key in rng.choice(pool, 150) for k in [key] + pad]
    params = dict(SMALL, count_bits=8)     # unsaturated, so every eviction matters
    model = check_exact(params, schedule(keys, rng, gap=0.1))
    counts = model.entries()[1]
    assert np.count_nonzero(counts[:SMALL["ways"]]) == SMALL["ways"]        # bucket 0 full
    assert np.count_nonzero(counts) == SMALL["ways"] + len(pad) and model.dropped == 0


def test_same_key_forwarded_from_every_distance():
    """A key repeated d keys later (d = 1..WINDOW + 1, other buckets between) counts exactly:
    its update in flight is forwarded from each result stage in turn."""
    rng = np.random.default_rng(9)
    hot = int(colliding_keys(1, rng, SMALL["buckets"], SMALL["seed"])[0])
    pad = fillers(rng, SMALL)
    keys = []
    for d in list(range(1, WINDOW + 2)) * 3:
        keys += [hot] + pad[:d - 1]
    for gap in (0.0, 0.4):
        model = check_exact(SMALL, schedule(keys, np.random.default_rng(10), gap=gap))
        stored, counts = model.entries()
        assert counts[stored == hot].tolist() == [keys.count(hot)] and model.dropped == 0


def test_same_bucket_other_key_within_the_window():
    """Colliding keys d keys apart: dropped up to d = WINDOW, counted beyond; with and without
    idle cycles between (the rule counts keys, not cycles)."""
    rng = np.random.default_rng(11)
    a, b = colliding_keys(2, rng, SMALL["buckets"], SMALL["seed"]).tolist()
    pad = fillers(rng, SMALL)
    keys = []
    for d in range(1, WINDOW + 3):
        keys += [a] + pad[:d - 1] + [b] + pad[:WINDOW]
    keys += [a, a, b, b, a, b] + pad[:3] + [a]
    assert np.count_nonzero(~kept(keys, SMALL["buckets"], SMALL["seed"])) >= WINDOW
    for gap in (0.0, 0.5):
        model = check_exact(SMALL, schedule(keys, np.random.default_rng(12), gap=gap))
        assert model.dropped == np.count_nonzero(~kept(keys, SMALL["buckets"], SMALL["seed"]))


def test_few_keys_few_buckets_fuzz():
    """Dense hazards: every mix of repeats, collisions and drops within the window."""
    rng = np.random.default_rng(13)
    pool = np.concatenate([colliding_keys(3, rng, SMALL["buckets"], SMALL["seed"], b)
                           for b in range(3)])
    weights = np.linspace(3, 1, len(pool))
    for gap in (0.0, 0.3):
        keys = rng.choice(pool, 600, p=weights / weights.sum())
        model = check_exact(SMALL, schedule(keys, rng, gap=gap))
        assert 0 < model.dropped < len(keys)


def test_window_and_clear_mid_stream():
    rng = np.random.default_rng(5)
    keys = rng.choice(colliding_keys(6, rng, 8, 3).tolist() + list(range(40)), 400)
    ops = {20: ("stop",), 45: ("start",), 60: ("clear",), 61: ("clear",), 90: ("stop", "start"),
           130: ("clear", "start"), 200: ("stop",), 210: ("clear",), 230: ("start",)}
    check_exact(SMALL, schedule(keys, rng, gap=0.3, ops=ops))


def test_clear_wipes_every_bucket_and_counter():
    rng = np.random.default_rng(6)
    keys = rng.integers(0, 2**32, 120, dtype=np.uint64)
    model = check_exact(SMALL, schedule(keys, rng, ops={119: ("clear",)}))
    assert not model.entries()[1].any() and model.counted == 0


def test_zipf_stream_with_gaps():
    rng = np.random.default_rng(7)
    keys = (rng.zipf(1.3, 1500) % 200).astype(np.uint32)
    check_exact(dict(buckets=16, ways=8, count_bits=8, seed=0), schedule(keys, rng, gap=0.25))


# --- learned hot set quality on the real Criteo samples ----------------------------------

@pytest.mark.realdata
@pytest.mark.parametrize("path", criteo_files(), ids=lambda p: p.name)
def test_coverage_on_criteo(path):
    keys = load_keys(path)
    model = AccessLearnerModel()
    model.update(keys)
    for fraction in (0.05, 0.10):
        assert coverage_ratio(keys, model, fraction) >= 0.98, fraction
    assert model.dropped <= 0.02 * len(keys)


# --- cocotb regressions (default-size learner, Verilog) ----------------------------------

def adversarial_stream(rng, buckets=2048, seed=0):
    """Keys and ops: a repeated key, one overfull bucket, all-distinct keys, window and
    clear pulses mid-stream, with a full readout check after each phase."""
    parts = [np.full(64, 0x0BADCAFE, dtype=np.uint32),
             rng.choice(colliding_keys(12, rng, buckets, seed), 600),
             rng.integers(0, 2**32, 600, dtype=np.uint64).astype(np.uint32)]
    keys = np.concatenate(parts)
    a, b = len(parts[0]), len(parts[0]) + len(parts[1])
    ops = {a: ["check"], a + 100: ["stop"], a + 150: ["start"], a + 300: ["clear"],
           a + 301: ["clear"], b: ["check"], b + 200: ["stop", "start"], b + 400: ["clear"],
           b + 450: ["stop"], b + 500: ["start"]}
    return keys, ops


@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
def test_cocotb_adversarial(simulator, tmp_path, simulator_or_skip):
    keys, ops = adversarial_stream(np.random.default_rng(8))
    report = tb_access_learner.run(keys, build_dir=tmp_path, simulator=simulator_or_skip(simulator),
                                   gap=0.3, ops=ops)
    assert report["lookups"] == len(keys)


def real_file_cases():
    files = criteo_files()
    return [param(p, slow=i > 0) for i, p in enumerate(files)]  # the first file in make test


@pytest.mark.realdata
@pytest.mark.parametrize("path", real_file_cases(), ids=lambda p: p.name)
def test_cocotb_real_stream(path, tmp_path, simulator_or_skip):
    keys = load_keys(path)
    ops = {len(keys) // 2: ["check"]}
    report = tb_access_learner.run(keys, build_dir=tmp_path, simulator=simulator_or_skip("verilator"),
                                   gap=0.1, ops=ops)
    assert report["lookups"] == len(keys)


class DP16KDModel(Elaboratable):
    """The DP16KD configurations BucketTable uses, from the ECP5 memory guide (TN1264): 9-bit
    ports address 2048 words with pins 3..13, 18-bit ports 1024 words with pins 4..13, 36-bit
    (pseudo-dual-port) 512 words with pins 5..13; the write port's pins below those are its
    byte enables (x18: 0-1, x36: 0-3), all set. Port A writes when WEA (at x36 DIA then DIB);
    port B reads (at x36 onto DOA then DOB), its data registered once in the array and once
    more in the output register (at x36 both halves', REGMODE_A and REGMODE_B)."""

    def __init__(self, **ports):
        self.ports = ports

    def elaborate(self, platform):
        p = self.ports
        width = p["p_DATA_WIDTH_A"]
        assert width in (9, 18, 36) and (p["p_DATA_WIDTH_B"], p["p_REGMODE_B"]) == (width, "OUTREG")
        assert (p["i_WEB"], p["i_CEA"], p["i_CEB"], p["i_OCEB"]) == (0, 1, 1, 1)
        lsb, depth, enables = {9: (3, 2048, 0), 18: (4, 1024, 2), 36: (5, 512, 4)}[width]
        assert all(p[f"i_ADA{i}"] == int(i < enables) for i in range(lsb))
        assert all(p[f"i_ADB{i}"] == 0 for i in range(lsb))
        pins = lambda prefix, lo, hi: Cat(Const(v, 1) if isinstance(v, int) else v
                                          for v in (p[f"{prefix}{i}"] for i in range(lo, hi)))
        data_in, data_out = pins("i_DIA", 0, min(width, 18)), pins("o_DOB", 0, min(width, 18))
        if width == 36:
            assert p["p_REGMODE_A"] == "OUTREG" and p["i_OCEA"] == 1
            data_in = Cat(data_in, pins("i_DIB", 0, 18))
            data_out = Cat(pins("o_DOA", 0, 18), data_out)
        m = Module()
        m.submodules.array = array = Memory(shape=width, depth=depth, init=[])
        wr, rd = array.write_port(), array.read_port()
        out = Signal(width)
        m.d.comb += [wr.addr.eq(pins("i_ADA", lsb, 14)), wr.en.eq(p["i_WEA"]),
                     wr.data.eq(data_in), rd.addr.eq(pins("i_ADB", lsb, 14)),
                     data_out.eq(out)]
        m.d.sync += out.eq(rd.data)
        return m


def test_ecp5_table_exact(monkeypatch):
    """The DP16KD variant (entries of 37 bits: 5 blocks per lane, the last holding 1 bit) on
    the dense-hazard and window/clear streams."""
    monkeypatch.setattr(BucketTable, "dp16kd", DP16KDModel)
    params = dict(SMALL, primitive="ecp5")
    rng = np.random.default_rng(16)
    pool = np.concatenate([colliding_keys(3, rng, SMALL["buckets"], SMALL["seed"], b)
                           for b in range(3)])
    keys = rng.choice(pool.tolist() + list(range(40)), 500)
    ops = {50: ("stop",), 80: ("start",), 200: ("clear",), 300: ("stop", "start")}
    check_exact(params, schedule(keys, rng, gap=0.2, ops=ops))


def test_ecp5_table_structure():
    text = verilog.convert(AccessLearner(primitive="ecp5"), name="top", emit_src=False)
    assert text.count("DP16KD #(") == 8 * 8                      # 64-bit entries, 9-bit blocks
    assert text.count('.REGMODE_B("OUTREG")') == 64
    with pytest.raises(ValueError):
        BucketTable(depth=4096, ways=8, width=64, primitive="ecp5")


def test_tiny_table_clear_cancels_keys_in_flight():
    """A clear shorter than the pipeline (2 buckets) still cancels every key in flight."""
    params = dict(buckets=2, ways=2, count_bits=4, seed=1)
    keys = np.random.default_rng(14).integers(0, 4, 200).astype(np.uint32)
    ops = {i: ("clear",) for i in (30, 31, 60, 100, 103, 150, 199)}
    check_exact(params, schedule(keys, np.random.default_rng(15), ops=ops))
