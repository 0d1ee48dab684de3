"""Drift in the calibrated generator (``synth:...:drift=RATE``), the hot-share analysis and the
calibration on the real Criteo Kaggle log.

Where the margins come from:
- rank level: with drift R, a hot rank's row changes within tau samples with probability
  ``1 - (1 - R) ** (tau / 100,000)`` (the unit); 50,000 independent lanes give a binomial
  count, asserted within 4 standard deviations;
- stream level (the five tables of at least 1M rows, where a replaced row comes from a rank
  >= 137k below, never hot): a window-w lookup of a drifting hot rank hits window 0's hot
  set only if its row was there in window 0, so at most if the row did not move after
  window 0 ended, and at least if it never moved. Of the share the hot set would have
  without drift (the same seed draws the same ranks), the part kept on window w therefore
  lies in [S((w + 1) W), S((w - 1) W)], S(tau) = (1 - R) ** (tau / 100,000), W = window
  length; the oracle (previous window's hot set) keeps at least S(2 W). Asserted with 4
  binomial standard deviations of the window's share.
"""
import hashlib

import numpy as np
import pytest

from helpers import real_file
from hotline.contract.errors import HotlineError
from hotline.data import open_data
from hotline.data.drift import calibrate_drift, hot_share_decay, top_keys, two_window_decay
from hotline.data.generator import (CRITEO_KAGGLE_CARDINALITIES as CARDS, DRIFT_CRITEO_KAGGLE,
                                    DRIFT_LANE, DRIFT_MIN_ROWS, _bijection, drift_ranks,
                                    drift_tables, synth_criteo)
from hotline.data.spec import parse_synth

# sha256 of synth_criteo(20000, seed=3)'s indices, lengths, dense, label and table sizes,
# taken from the generator before drift existed (commit 1f8cf7e).
STATIONARY_20000_3 = "b325bfbd1d6abf00464aa581c664ee1b69ba1b1e0bb609581113c519b4daf2d8"


def digest(ds):
    h = hashlib.sha256()
    for a in (ds.indices, ds.lengths, ds.dense, ds.label, ds.table_sizes):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def test_rate_zero_is_the_stationary_stream_bit_for_bit():
    assert digest(synth_criteo(20000, 3)) == STATIONARY_20000_3
    assert digest(synth_criteo(20000, 3, drift=0.0)) == STATIONARY_20000_3
    assert digest(open_data("synth:criteo-kaggle:20000:3:drift=0")) == STATIONARY_20000_3


def test_drift_is_deterministic_by_seed_and_moves_only_the_drifting_ranks():
    a, b = synth_criteo(20000, 3, drift=0.3), synth_criteo(20000, 3, drift=0.3)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert a.name == "synth-criteo-20000-drift0.3"
    a.validate()
    still = synth_criteo(20000, 3).indices.reshape(20000, -1)
    moved = a.indices.reshape(20000, -1)
    for t, card in enumerate(CARDS):
        mult, add = _bijection(card, t)
        if card < DRIFT_MIN_ROWS:
            np.testing.assert_array_equal(moved[:, t], still[:, t])
            continue
        # The same ranks are drawn; the top value and the empty value keep their rows.
        for fixed in (add, ((card - 1) * mult + add) % card):
            np.testing.assert_array_equal(moved[:, t] == fixed, still[:, t] == fixed)
        assert (moved[:, t] != still[:, t]).any()
    # The lanes are keyed by the seed: the same ranks at the same times move differently.
    ranks, times = np.arange(1, 50001), np.full(50000, 10 ** 6)
    assert not np.array_equal(drift_ranks(ranks, times, 10 ** 7, 2, 0.3, 1),
                              drift_ranks(ranks, times, 10 ** 7, 2, 0.3, 2))


@pytest.mark.parametrize("m", [5000, 2171, 10_131_225 // 64])
def test_every_lane_is_a_permutation_at_any_time(m):
    ranks = np.arange(1, m + 1)
    for t in (0, 123_457, 10 ** 8):
        out = drift_ranks(ranks, np.full(m, t), m, 7, 0.5, 0)
        np.testing.assert_array_equal(np.sort(out), ranks)


@pytest.mark.parametrize("rate,tau", [(0.2, 100_000), (0.2, 250_000), (0.05, 100_000),
                                      (DRIFT_CRITEO_KAGGLE, 39_793_658)])
def test_rate_is_the_fraction_of_hot_rows_replaced_per_100k_samples(rate, tau):
    m, n = 10_131_225, 50_000  # C3: 633k lanes, so ranks 1..50,000 are 50,000 lanes' heads
    assert n < -(-m // DRIFT_LANE)
    ranks = np.arange(1, n + 1)
    p = 1 - (1 - rate) ** (tau / 100_000)
    for t0 in (0, 1_000_003, 40_000_000):  # stationary: wherever the interval starts
        before = drift_ranks(ranks, np.full(n, t0), m, 2, rate, 5)
        after = drift_ranks(ranks, np.full(n, t0 + tau), m, 2, rate, 5)
        changed = np.mean(before != after)
        assert abs(changed - p) <= 4 * np.sqrt(p * (1 - p) / n), (t0, changed, p)


def big_table_keys(ds, tables):
    sp = ds.indices.reshape(ds.num_samples, -1)[:, tables]
    keys = ((np.asarray(tables, np.uint32) << 27) | sp.astype(np.uint32)).ravel()
    return keys, np.arange(ds.num_samples + 1) * len(tables)


def test_window0_hot_set_decays_as_the_model_says_and_the_oracle_stays_up():
    n, batch, window_batches, rate, seed = 200_000, 1000, 20, 0.2, 1
    width = batch * window_batches
    big = [t for t, c in enumerate(CARDS) if c >= 1_000_000]
    assert min(-(-(CARDS[t] - 2) // DRIFT_LANE) for t in big) > 100_000
    k0, offsets = big_table_keys(synth_criteo(n, seed), big)
    k1, _ = big_table_keys(synth_criteo(n, seed, drift=rate), big)
    k = int(0.1 * np.unique(k0[:offsets[width]]).size)
    still = hot_share_decay(k0, offsets, batch, window_batches, k)
    moved = hot_share_decay(k1, offsets, batch, window_batches, k)
    # The top and empty rows never move; the rest of the share is the drifting part.
    fixed = []
    for t in big:
        mult, add = _bijection(CARDS[t], t)
        fixed += [(t << 27) | add, (t << 27) | ((CARDS[t] - 1) * mult + add) % CARDS[t]]
    fixed = np.array(fixed, np.uint32)
    starts = moved.start
    fixed_share = np.array([np.isin(k0[offsets[s]:offsets[min(s + width, n)]], fixed).mean()
                            for s in starts])
    lookups = np.diff(offsets[np.append(starts, n)])
    S = lambda tau: (1 - rate) ** (np.maximum(tau, 0) / 100_000)
    w = np.arange(len(starts))
    drifting = still.off - fixed_share
    kept = (moved.off - fixed_share) / drifting
    sd = np.sqrt(moved.off * (1 - moved.off) / lookups) / drifting
    assert np.all(kept >= S((w + 1) * width) - 4 * sd), (kept, S((w + 1) * width))
    assert np.all(kept <= S((w - 1) * width) + 4 * sd), (kept, S((w - 1) * width))
    oracle_kept = (moved.oracle - fixed_share) / (still.oracle - fixed_share)
    assert np.all(oracle_kept >= S(2 * width) - 4 * sd), oracle_kept
    # Without drift the window-0 set holds its share (out of sample from window 1 on).
    assert np.ptp(still.off[1:]) <= 8 * sd.max()
    # So on the last window the oracle keeps at least S(2 W) - S((w - 1) W) more (0.21 here).
    gap = S(2 * width) - S((w[-1] - 1) * width)
    assert oracle_kept[-1] - kept[-1] >= gap - 8 * sd[-1] and gap > 0.2


def test_hot_share_decay_on_a_hand_made_stream():
    keys = np.array([1, 1, 2, 3, 4, 4, 1, 5, 4, 6, 6, 6], np.uint32)
    offsets = np.arange(13)
    got = hot_share_decay(keys, offsets, 2, 2, 1)
    np.testing.assert_array_equal(got.start, [0, 4, 8])
    np.testing.assert_allclose(got.off, [0.5, 0.25, 0.0])
    np.testing.assert_allclose(got.oracle, [0.5, 0.25, 0.25])
    np.testing.assert_allclose(got.own, [0.5, 0.5, 0.75])
    np.testing.assert_array_equal(top_keys(keys[:4], 2), [1, 2])  # ties: the smaller key
    with pytest.raises(HotlineError, match="k must be a positive integer"):
        hot_share_decay(keys, offsets, 2, 2, 0)


def test_two_window_decay_per_table_and_pooled():
    a = np.array([(0 << 32) | 7] * 3 + [(0 << 32) | 8, (1 << 32) | 1, (1 << 32) | 1], np.int64)
    b = np.array([(0 << 32) | 8] * 2 + [(0 << 32) | 7, (1 << 32) | 1], np.int64)
    d = two_window_decay(a, b, fractions=(0.5,))[0.5]
    assert d["k"] == [1, 1] and d["overlap"] == [0.0, 1.0]
    assert d["share_off"] == [1 / 3, 1.0] and d["share_own"] == [2 / 3, 1.0]
    assert d["pooled"]["k"] == 2 and d["pooled"]["overlap"] == 0.5


@pytest.mark.parametrize("spec,expected", [
    ("synth:criteo-kaggle:1000", ("criteo-kaggle", 1000, 0, 0.0)),
    ("synth:criteo-kaggle:1000:4", ("criteo-kaggle", 1000, 4, 0.0)),
    ("synth:criteo-kaggle:1000:drift=0.1", ("criteo-kaggle", 1000, 0, 0.1)),
    ("synth:criteo-kaggle:1000:4:drift=real", ("criteo-kaggle", 1000, 4, DRIFT_CRITEO_KAGGLE)),
])
def test_synth_spec_parses(spec, expected):
    assert parse_synth(spec) == expected


@pytest.mark.parametrize("spec,message", [
    ("synth:criteo-kaggle:1000:drift=abc", "drift=abc is not a number"),
    ("synth:criteo-kaggle:1000:drift=-0.1", "drift=-0.1 is negative"),
    ("synth:criteo-kaggle:1000:drift=1", "drift=1 is not below 1"),
    ("synth:criteo-kaggle:1000:drift=nan", "drift=nan is not a number"),
    ("synth:criteo-kaggle:1000:drift=", "drift= is not a number"),
    ("synth:criteo-kaggle:1000:speed=1", "unknown option 'speed'"),
    ("synth:criteo-kaggle:1000:drift=0.1:drift=0.2", "drift is given twice"),
    ("synth:criteo-kaggle:1000:drift=0.1:3", "options (drift=RATE) go after"),
    ("synth:criteo-kaggle:drift=0.1", "expected synth:LIKE:SAMPLES[:SEED][:drift=RATE]"),
    ("synth:criteo-kaggle:1000:1:2", "expected synth:LIKE:SAMPLES[:SEED][:drift=RATE]"),
])
def test_synth_spec_errors_are_one_line(spec, message):
    with pytest.raises(HotlineError) as e:
        open_data(spec)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(spec + ": ")


def test_data_synth_drift_option(tmp_path, capsys):
    from hotline.cli import main
    assert main(["data", "synth", "--samples", "100", "--drift", "abc",
                 "--out", str(tmp_path / "x.npz")]) != 0
    assert "drift=abc is not a number" in capsys.readouterr().err
    out = tmp_path / "d.npz"
    assert main(["data", "synth", "--samples", "3000", "--seed", "2", "--drift", "0.4",
                 "--out", str(out)]) == 0
    np.testing.assert_array_equal(np.load(out)["sparse"].ravel(),
                                  open_data("synth:criteo-kaggle:3000:2:drift=0.4").indices)


def test_calibration_on_the_two_real_windows():
    a = real_file("criteo_kaggle/train_rows0-206k_sub1pct.csv.gz")
    b = real_file("criteo_kaggle/train_rows39.80M-39.99M_sub1pct.csv.gz")
    cal = calibrate_drift(a, b)
    assert cal["samples"] == [1999, 1999]
    assert round(cal["samples_apart"]) == 39_793_658  # mean Id of b minus mean Id of a
    assert cal["drift_tables"] == drift_tables() and len(drift_tables()) == 14
    # The stored constant is what the calibration gives (deterministic: fixed seeds).
    assert round(cal["rate"], 6) == DRIFT_CRITEO_KAGGLE
    for f in cal["fractions"]:
        fit = cal["fits"][f"retained@{f:g}"]
        # The real decay is beyond the sampling noise of 1,999-sample windows...
        assert fit["real"] < fit["synth_no_drift"] - 3 * fit["synth_sd"], fit
        # ...and the fits agree across K (within each other's one-sigma bands).
        assert fit["x_band"][0] <= cal["x"] <= fit["x_band"][1], (f, fit, cal["x"])
    # The small category fields that the drift leaves alone keep their top values.
    for t in (0, 4, 7):  # C1, C5, C8
        assert cal["real"][0.05]["overlap"][t] == 1.0
