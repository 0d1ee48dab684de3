"""Fragmenter RTL against the bit-accurate model, beat by beat, on real and adversarial streams.

Verilator and Icarus run the file-driven harness (random valid/ready stalls on every stream);
a cocotb regression and an Amaranth-simulator run cover the same block on short streams.
"""
import dataclasses

import numpy as np
import pytest

from helpers import param, real_file
from hotline.model.device_model import model_fragment
from hotline.data import Dataset, load_dataset
from hotline.contract.config import AcceleratorConfig, max_batch_lookups
from hotline.contract.errors import HotlineError
from hotline.model.planner import exact_hot_set
from hotline.contract.streams import lookup_beats, pack
from hotline.sim.fragmenter_run import FragmenterSim, beat_counts, beat_cycles, compare, \
    expected_streams

# One geometry for the real streams (one build per simulator), one tiny one that overflows.
REAL = AcceleratorConfig(cam_entries=4096, cold_capacity=16384, cold_max_keys=8192,
                         max_batch_samples=1024)
TINY = AcceleratorConfig(cam_entries=64, cam_stash=2, cam_max_kicks=8, cold_capacity=64,
                         cold_stash=2, cold_max_keys=48, max_batch_samples=64)


@pytest.fixture(scope="module")
def rtl(tmp_path_factory, simulator_or_skip):
    """``rtl(config, simulator)``: the Fragmenter RTL of ``config``, built once per module."""
    sims = {}

    def get(config, simulator):
        key = (config, simulator_or_skip(simulator))
        if key not in sims:
            sims[key] = FragmenterSim(config, simulator, tmp_path_factory.mktemp("rtl"))
        return sims[key]
    return get


def check(sim, keys, offsets, batch_size, hot_keys, busy_in=0.2, busy_out=0.3, timeout=None):
    placement, run = model_fragment(keys, offsets, batch_size, hot_keys, sim.config)
    want = expected_streams(run, placement.responses, sim.config.lanes)
    got, cycles, _ = sim.run(hot_keys, keys, offsets, batch_size, busy_in, busy_out,
                             expect=beat_counts(want), timeout=timeout)
    compare(got, want)
    return run, cycles


REAL_STREAMS = [  # (file, batch size, samples used)
    ("criteo_kaggle/train_random4584.csv.gz", 256, None),
    ("criteo_kaggle/train_head1999.csv.gz", 256, None),
    ("criteo_kaggle/test_head1999.csv.gz", 256, None),
    ("criteo_kaggle/train_rows0-206k_sub1pct.csv.gz", 256, None),
    ("criteo_kaggle/train_rows39.80M-39.99M_sub1pct.csv.gz", 256, None),
    ("criteo_kaggle/train_random45840_7cat.arff.gz", 1024, 20000),
    ("alimama/dmr_alimama_sampled_train500.csv.gz", 32, None),
    ("movielens/ml-100k.inter.gz", 1024, 30000),
    ("amazon_book/ngcf_test.txt.gz", 1024, 30000),
]


@pytest.mark.parametrize("rel,batch,limit", REAL_STREAMS, ids=[r[0].split("/")[1] for r in REAL_STREAMS])
def test_real_streams_verilator(rel, batch, limit, rtl):
    ds = load_dataset(real_file(rel), limit=limit)
    keys = ds.keys
    hot = exact_hot_set(keys, min(3600, max(1, len(np.unique(keys)) // 10)))
    sim = rtl(REAL, "verilator")
    run, _ = check(sim, keys, ds.sample_offsets, batch, hot.keys)
    assert run.counters.lookups == len(keys)


@pytest.mark.slow
@pytest.mark.parametrize("lanes", [2, 4])
@pytest.mark.parametrize("rel,batch,limit", REAL_STREAMS, ids=[r[0].split("/")[1] for r in REAL_STREAMS])
def test_real_streams_in_lanes_verilator(rel, batch, limit, lanes, rtl):
    ds = load_dataset(real_file(rel), limit=limit)
    hot = exact_hot_set(ds.keys, min(3600, max(1, len(np.unique(ds.keys)) // 10)))
    check(rtl(dataclasses.replace(REAL, lanes=lanes), "verilator"), ds.keys, ds.sample_offsets,
          batch, hot.keys)


# 4 lanes in the slow tier (the README's --lanes 4 command runs in CI)
@pytest.mark.parametrize("lanes", [1, 2, param(4, slow=True)])
def test_lanes_keep_their_schedule_and_095_lookups_per_lane(lanes, rtl):
    """On Criteo batches of 1024 without stalls (a quarter of the lookups cold), the RTL keeps
    its schedule (`beat_cycles`: one beat per cycle while the cold set, a run of cold lookups
    in distinct partitions per cycle, keeps up, with the beat FIFO absorbing bursts), and L lanes give >= 0.95 L lookups
    per cycle."""
    ds = load_dataset(real_file("criteo_kaggle/train_random4584.csv.gz"))
    hot = exact_hot_set(ds.keys, 2600)
    sim = rtl(dataclasses.replace(REAL, lanes=lanes), "verilator")
    run, cycles = check(sim, ds.keys, ds.sample_offsets, 1024, hot.keys, busy_in=0.0,
                        busy_out=0.0)
    assert cycles <= beat_cycles(run, ds.keys, sim.config) * 1.002 + 64
    assert len(ds.keys) / cycles >= 0.95 * lanes


def test_the_schedule_counts_the_cold_sets_clearing_passes(rtl):
    """With 2 epoch bits the cold set clears its tables after every 3 batches (128 cycles
    here), and no lookup enters meanwhile: the RTL's cycles are the schedule's, within 1%,
    clearing passes included (they are a tenth of the cycles)."""
    ds = load_dataset(real_file("criteo_kaggle/train_random4584.csv.gz"), limit=1600)
    config = dataclasses.replace(REAL, cold_capacity=1024, cold_max_keys=512, cold_epoch_bits=2,
                                 max_batch_samples=64)
    run, cycles = check(rtl(config, "verilator"), ds.keys, ds.sample_offsets, 16,
                        exact_hot_set(ds.keys, 1500).keys, busy_in=0.0, busy_out=0.0)
    assert run.counters.overflows == 0
    assert abs(cycles / beat_cycles(run, ds.keys, config) - 1) < 0.01


def test_four_lanes_clear_the_cold_set_four_times_less_often():
    """A batch takes a quarter of the cycles at 4 lanes, so the cold set's clearing pass
    (2048 cycles at this capacity) would weigh four times as much: the 4-lane geometry has
    10 epoch bits (a pass every 1023 batches), one lane 8 (every 255). On 300 small batches
    of two-lookup samples the schedule has one pass at 8 bits and none at the default (the
    RTL keeps the schedule: the tests above)."""
    rng = np.random.default_rng(5)
    ds = Dataset(np.ones((300 * 64, 2), np.int32), rng.integers(0, 1 << 20, 300 * 128),
                 np.array([1 << 20, 1 << 20]))
    wide = dataclasses.replace(REAL, cold_capacity=262144, cold_max_keys=131072, lanes=4)
    assert wide.cold_kwargs()["epoch_bits"] == 10
    assert dataclasses.replace(wide, lanes=1).cold_kwargs()["epoch_bits"] == 8
    cycles = {}
    for bits in (8, None):
        config = dataclasses.replace(wide, cold_epoch_bits=bits)
        _, run = model_fragment(ds.keys, ds.sample_offsets, 64, np.zeros(0, np.uint32), config)
        cycles[bits] = beat_cycles(run, ds.keys, config)
    assert cycles[8] - cycles[None] >= 2048


def multi_hot(rng, n, f, max_len, rows, empty_rate=0.0):
    lengths = rng.integers(0, max_len + 1, (n, f)).astype(np.int32)
    if empty_rate:
        lengths[rng.random(n) < empty_rate] = 0
    return Dataset(lengths, rng.integers(0, rows, int(lengths.sum())), np.full(f, rows, np.int64))


def adversarial_cases(rng):
    distinct = Dataset(np.ones((300, 2), np.int32), np.arange(600), np.array([1000, 1000]))
    repeated = Dataset(np.ones((200, 3), np.int32), np.zeros(600, np.int64), np.array([5, 5, 5]))
    return {
        # (dataset, batch size, hot keys chosen as: "none" | "all" | int K)
        "all_cold_distinct": (distinct, 16, "none"),
        "all_hot": (repeated, 7, "all"),
        "one_key_repeated_cold": (repeated, 50, "none"),
        "one_sample_batches": (multi_hot(rng, 120, 3, 2, 20), 1, 10),
        "max_length_multi_hot": (multi_hot(rng, 40, 2, 30, 500), 1, 40),
        "empty_samples": (multi_hot(rng, 150, 2, 2, 30, empty_rate=0.3), 13, 8),
        "cold_set_overflow": (Dataset(np.ones((64, 1), np.int32), rng.integers(0, 1 << 20, 64),
                                      np.array([1 << 20])), 64, "none"),
        # overflowed keys repeated at once and a little later: with lanes such a repeat takes
        # its copy's answer, one lane gives it a new slot
        "cold_set_overflow_repeats": (Dataset(np.ones((64, 2), np.int32), np.repeat(
            rng.integers(0, 1 << 20, 64), 2)[np.argsort(np.arange(128) + 3 * (np.arange(128) % 2),
                                                        kind="stable")],
            np.array([1 << 20, 1 << 20])), 64, "none"),
    }


def hot_keys_for(ds, choice):
    keys = ds.keys
    if choice == "none":
        return np.zeros(0, np.uint32)
    uniq = np.unique(keys)
    return exact_hot_set(keys, len(uniq) if choice == "all" else choice).keys


@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
def test_adversarial_batches(simulator, rtl):
    sim = rtl(TINY, simulator)
    rng = np.random.default_rng(0)
    for name, (ds, batch, choice) in adversarial_cases(rng).items():
        hot = hot_keys_for(ds, choice)
        for busy in ((0.0, 0.0), (0.3, 0.5)):
            try:
                run, cycles = check(sim, ds.keys, ds.sample_offsets, batch, hot, *busy)
            except AssertionError as e:
                raise AssertionError(f"{name} busy={busy}: {e}") from None
        if name.startswith("cold_set_overflow"):
            assert run.counters.overflows > 0
        if name == "all_hot":
            assert run.counters.popular_samples == ds.num_samples


def test_workload_geometry_on_icarus(rtl):
    """The geometry `hotline fragment` builds (`AcceleratorConfig.for_workload`, as in
    bench-quick's fragment_rtl) on Icarus, which starts registers X: a register whose
    declaration initialiser the export left in place kept the cold set's output valid X
    through reset, and the remap stream stopped after a few beats or hung (issue 44)."""
    ds = multi_hot(np.random.default_rng(3), 60, 3, 3, 200)
    hot = exact_hot_set(ds.keys, 40).keys
    batch = 16
    config = AcceleratorConfig.for_workload(hot.size, batch,
                                            max_batch_lookups(ds.sample_offsets, batch))
    check(rtl(config, "icarus"), ds.keys, ds.sample_offsets, batch, hot, timeout=30)


@pytest.mark.parametrize("lanes", [2, param(4, slow=True)])
def test_adversarial_batches_in_lanes(lanes, rtl):
    """Lane beats: partial last beats of a batch, empty lanes, all-cold beats (the cold set
    serializes them), one-sample batches and overflow, with and without stalls."""
    sim = rtl(dataclasses.replace(TINY, lanes=lanes), "verilator")
    rng = np.random.default_rng(lanes)
    for name, (ds, batch, choice) in adversarial_cases(rng).items():
        hot = hot_keys_for(ds, choice)
        for busy in ((0.0, 0.0), (0.3, 0.5)):
            try:
                check(sim, ds.keys, ds.sample_offsets, batch, hot, *busy)
            except AssertionError as e:
                raise AssertionError(f"{name} busy={busy}: {e}") from None


def test_hot_set_at_cam_capacity_is_held_and_larger_is_refused(rtl):
    """A hot set of ``hot_capacity`` keys fills the tiny CAM to its bound, every key held
    (with relocations) and the RTL equal to the model; one more key is a one-line error."""
    ds = multi_hot(np.random.default_rng(1), 100, 2, 3, 200)
    hot = exact_hot_set(ds.keys, 200).keys
    with pytest.raises(HotlineError, match="holds at most"):
        model_fragment(ds.keys, ds.sample_offsets, 10, hot, TINY)
    hot = hot[:TINY.hot_capacity]
    placement, run = model_fragment(ds.keys, ds.sample_offsets, 10, hot, TINY)
    assert placement.failed.size == 0 and placement.keys.size == TINY.hot_capacity
    assert any(moves for _, _, moves in placement.responses)
    check(rtl(TINY, "verilator"), ds.keys, ds.sample_offsets, 10, hot)


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_amaranth_simulator_short_stream(lanes):
    ds = multi_hot(np.random.default_rng(2), 24, 2, 3, 15, empty_rate=0.1)
    hot = exact_hot_set(ds.keys, 6).keys
    sim = FragmenterSim(dataclasses.replace(TINY, lanes=lanes), "amaranth")
    check(sim, ds.keys, ds.sample_offsets, 5, hot, busy_in=0.2, busy_out=0.2)


@pytest.mark.parametrize("lanes", [1, 2])
def test_batch_beyond_max_batch_samples_is_flagged_and_counted(lanes):
    """TINY takes batches of up to 64 samples (6-bit sample indices, 7-bit counts): batches of
    150 wrap both, so their summaries are flagged overflow and each is counted once in
    oversized_batches; a last batch of 40 is not. Streams beat for beat against the model."""
    ds = multi_hot(np.random.default_rng(12), 340, 2, 1, 20, empty_rate=0.1)
    hot = np.arange(10, dtype=np.uint64)   # the cold set sees at most 10 keys a batch
    sim = FragmenterSim(dataclasses.replace(TINY, lanes=lanes), "amaranth")
    placement, run = model_fragment(ds.keys, ds.sample_offsets, 150, hot, sim.config)
    assert run.overflow.tolist() == [True, True, False] and run.counters.overflows == 0
    assert run.counters.oversized_batches == 2
    want = expected_streams(run, placement.responses, lanes)
    assert max(want["popular"]["sample"].max(), want["non_popular"]["sample"].max()) < 64
    counters = {}
    got, _, _ = sim.run(hot, ds.keys, ds.sample_offsets, 150, 0.2, 0.2,
                        expect=beat_counts(want), counters=counters)
    compare(got, want)
    assert got["batches"]["overflow"].tolist() == [1, 1, 0]
    assert counters["oversized_batches"] == 2 and counters["samples"] == 340


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_summary_leaves_before_the_next_batchs_keys(lanes):
    """BatchKeyMerge's premise (hw/batch_key_merge.py): with the outputs never stalled, a
    batch's summary leaves ``batches`` no later than the next batch's first key leaves
    ``cold_keys``. Directed at the race: one-sample batches that end with a cold lookup, the
    next batch's first lookup a new cold key (a cold key is written at the cold set's answer,
    the summary only after the batch's last beat is classified), some hot lookups between."""
    rng = np.random.default_rng(9)
    hot = np.arange(1, 7, dtype=np.uint64)
    samples, keys = [], []
    for n in range(60):
        lookups = [1000 + len(keys) + i for i in range(int(rng.integers(1, 4)))]
        if n % 3 == 1:
            lookups.insert(0, int(rng.choice(hot)))
        samples.append(len(lookups))
        keys += lookups
    keys, offsets = np.array(keys, np.uint64), np.concatenate([[0], np.cumsum(samples)])
    sim = FragmenterSim(dataclasses.replace(TINY, lanes=lanes), "amaranth")
    placement, run = model_fragment(keys, offsets, 1, hot, sim.config)
    want = expected_streams(run, placement.responses, lanes)
    stamps = {}
    got, _, _ = sim.run(hot, keys, offsets, 1, expect=beat_counts(want), stamps=stamps)
    compare(got, want)
    # The cycle each batch's first cold-key beat left (a lane beat holds one batch's keys).
    first_key_at = {}
    beat = 0
    for b, count in enumerate(np.diff(run.cold_offsets)):
        if count:
            first_key_at[b] = stamps["cold_keys"][beat]
            beat += -(-int(count) // lanes)
    assert beat == len(stamps["cold_keys"])
    summary_at = stamps["batches"]
    late = [b for b, t in first_key_at.items() if b and t < summary_at[b - 1]]
    assert len(summary_at) == len(samples) and not late, late[:5]


def test_cocotb_regression(tmp_path, simulator_or_skip):
    """The same block under cocotb (Verilator): CAM load phase, then a real stream with stalls."""
    simulator_or_skip("verilator")
    from hotline.hw.fragmenter import Fragmenter
    from hotline.contract.cam import CAMOp
    from hotline.sim import tb_streams
    from hotline.sim.fragmenter_run import OUTPUTS

    ds = load_dataset(real_file("criteo_kaggle/train_head1999.csv.gz"), limit=120)
    keys, offsets, batch = ds.keys, ds.sample_offsets, 32
    hot = exact_hot_set(keys, 50).keys
    config = TINY
    placement, run = model_fragment(keys, offsets, batch, hot, config)
    want = expected_streams(run, placement.responses)
    dut = Fragmenter(**config.fragmenter_kwargs())
    layout = lambda n: getattr(dut, n).payload.shape()
    key, eos, eob, empty = lookup_beats(keys, offsets, batch)
    inputs = {"cmd": pack(layout("cmd"), op=np.full(len(hot), CAMOp.INSERT.value), key=hot).tolist(),
              "lookups": pack(layout("lookups"), key=key, eos=eos, eob=eob, empty=empty).tolist()}
    outputs = {n: pack(layout(n), **want[n]).tolist() for n in OUTPUTS}
    res = tb_streams.run(dut, "fragmenter", inputs, outputs, build_dir=tmp_path,
                         simulator="verilator", busy_in=0.2, busy_out=0.3,
                         phases=[["cmd"], ["lookups"]], quiet_cycles=200)
    assert res["beats"]["remap"] == len(keys)
