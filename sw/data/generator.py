"""Calibrated synthetic index streams: Criteo-Kaggle-shaped data that needs no download.

Each table t has the public Criteo Kaggle cardinality C_t. A lookup is the empty value with
probability ``empty_t`` and the top row with probability ``head_t`` (both measured on the real files),
otherwise the row of popularity rank ``1 + floor(X)``, X drawn from the bounded power law with
density proportional to ``(x + q_t) ** -alpha_t``. Ranks map to row ids through a per-table affine
bijection, so hot rows are scattered over the table as in real hashed vocabularies.
``(alpha_t, q_t)`` were fitted by `fit_table` so that a sample the size of
``criteo_kaggle/train_random4584.csv.gz`` (a uniform sample of all 7 days) has that file's
per-table distinct count and top-1% / top-10% key coverage; `table_stats` is the statistic.
Dense features are log-normal counts fitted to the same file; labels come from a logistic
model of the dense features and per-row effects, at Criteo's ~26% click rate.

Drift (``drift`` > 0, ``synth:LIKE:SAMPLES[:SEED][:drift=RATE]``): in the tables of at least
`DRIFT_MIN_ROWS` rows the rows move between popularity ranks over the stream (`drift_ranks`),
so that a fraction RATE of the hot rows is replaced per `DRIFT_UNIT` = 100,000 samples; the
popularity curve, the top value and the empty value stay as they are. `DRIFT_CRITEO_KAGGLE`
is the rate measured on the real log (`hotline.data.drift.calibrate_drift`). Drift 0 is the
stationary stream, bit for bit.
"""
import math

import numpy as np

from hotline.contract.errors import HotlineError

from .readers import Dataset, _open_text, detect_format, load_dataset

CRITEO_KAGGLE_CARDINALITIES = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
    14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)

# Per table: (empty fraction, top-value share, alpha, q), from `fit_table` on train_random4584.csv.gz
# (`hotline data calibrate` prints them again).
CRITEO_KAGGLE_SKEW = (
    (0.0, 0.4932, 1.6, 1),  # C1
    (0.0, 0.1169, 1.6, 16),  # C2
    (0.0336, 0.0212, 1.05, 8),  # C3
    (0.0336, 0.0336, 1.15, 8),  # C4
    (0.0, 0.668, 2.7, 2),  # C5
    (0.1233, 0.3909, 0.5, 256),  # C6
    (0.0, 0.0242, 0.95, 16),  # C7
    (0.0, 0.5851, 2.2, 2),  # C8
    (0.0, 0.9071, 0.2, 0.05),  # C9
    (0.0, 0.2273, 1.05, 16),  # C10
    (0.0, 0.0351, 1.0, 16),  # C11
    (0.0336, 0.0212, 1.05, 4),  # C12
    (0.0, 0.0351, 1.05, 16),  # C13
    (0.0, 0.3558, 3.0, 2),  # C14
    (0.0, 0.0135, 1.4, 64),  # C15
    (0.0336, 0.0212, 1.1, 8),  # C16
    (0.0, 0.4612, 2.5, 0.5),  # C17
    (0.0, 0.0316, 1.25, 16),  # C18
    (0.4402, 0.3455, 1.05, 2),  # C19
    (0.4402, 0.1918, 0.2, 0.05),  # C20
    (0.0336, 0.0212, 1.05, 4),  # C21
    (0.7653, 0.1307, 2.2, 0.05),  # C22
    (0.0, 0.4418, 2.85, 4),  # C23
    (0.0336, 0.0528, 1.2, 4),  # C24
    (0.4402, 0.1536, 2.75, 0.5),  # C25
    (0.4402, 0.0419, 1.1, 4),  # C26
)

# Per dense feature I1..I13: (missing fraction, mean, std) of log1p(value) for value >= 0.
CRITEO_KAGGLE_DENSE = (
    (0.4566, 0.9132, 0.9976),  # I1
    (0.0, 2.0696, 2.1116),  # I2
    (0.214, 2.1222, 1.1864),  # I3
    (0.2227, 1.6861, 0.9029),  # I4
    (0.0233, 7.238, 2.9203),  # I5
    (0.2258, 3.3588, 1.7512),  # I6
    (0.0441, 1.6618, 1.3838),  # I7
    (0.0002, 2.0262, 1.1572),  # I8
    (0.0441, 3.5298, 1.63),  # I9
    (0.4566, 0.4094, 0.4031),  # I10
    (0.0441, 0.9418, 0.7815),  # I11
    (0.7677, 0.2812, 0.6001),  # I12
    (0.2227, 1.7023, 0.9681),  # I13
)

LIKE = ("criteo-kaggle",)

# Drift (`drift_ranks`): a rate is the fraction of the hot rows (any top-K with K below a
# table's lane count) that are replaced per DRIFT_UNIT samples of the stream.
DRIFT_UNIT = 100_000
DRIFT_LANE = 16
# Only tables of at least this many rows drift: in the two real Kaggle windows 39.8M samples
# apart, each of the 14 such tables shares less of its top-5% set than the generator without
# drift does at the same positions; of the 12 smaller category fields, C1, C5 and C8 keep
# their whole top-5% set (C2 and C25 do not). No table's top value drifts: it is the same
# in both windows in 23 tables (not in C2, a tie, C14 and C25).
DRIFT_MIN_ROWS = 2000
_DRIFT_CHUNK = 1 << 14
DRIFT_HELP = "the fraction of the hot rows replaced per 100,000 samples"
# The rate measured between two windows of the Criteo Kaggle train log 39.8M samples apart
# (train_rows0-206k_sub1pct vs train_rows39.80M-39.99M_sub1pct, `hotline.data.drift.
# calibrate_drift`; ``python -m hotline.data.drift A B`` prints it): in the 14 tables of at
# least 2,000 rows, the share of window b's lookups that window a's top-K values cover, over
# that of b's own top-K, is 0.888 / 0.836 / 0.802 at K = 1% / 5% / 10% of the distinct values
# against 0.951 / 0.914 / 0.876 for the generator without drift at the same sample
# positions; the generator matches them at survival exponents x = 0.131 / 0.129 / 0.122, so
# a hot row keeps its rank over 39.8M samples with probability exp(-0.129) = 0.879. (The
# mean top-K overlap, 0.631 / 0.541 / 0.494 against 0.708 / 0.684 / 0.602, fits x = 0.162 /
# 0.257 / 0.219: the real top-K sets churn faster at their cold edge.) Per 100,000 samples:
DRIFT_CRITEO_KAGGLE = 0.000323


def table_stats(rows) -> tuple:
    """(distinct, top-1% coverage, top-10% coverage) of one table's lookups."""
    _, counts = np.unique(rows, return_counts=True)
    counts = np.sort(counts)[::-1]
    total = counts.sum()
    top = lambda frac: counts[:math.ceil(frac * len(counts))].sum() / total
    return len(counts), float(top(0.01)), float(top(0.10))


def _powerlaw_ranks(rng, n, card, alpha, q):
    """floor(X), X ~ density (x + q)^-alpha on [0, card)."""
    u = rng.random(n)
    if abs(alpha - 1.0) < 1e-9:
        x = q * np.exp(u * math.log((card + q) / q)) - q
    else:
        a = 1.0 - alpha
        lo, hi = q ** a, (card + q) ** a
        x = (lo + u * (hi - lo)) ** (1.0 / a) - q
    return np.minimum(np.floor(x).astype(np.int64), card - 1)


def _bijection(card, t):
    """An affine permutation of range(card), different per table."""
    rng = np.random.default_rng(1000 + t)
    mult = int(rng.integers(1, max(card, 2)))
    while math.gcd(mult, card) != 1:
        mult += 1
    return mult % card if card > 1 else 0, int(rng.integers(0, card))


def drift_hazard(rate) -> float:
    """The per-sample hazard of a drift ``rate`` (the fraction of the hot rows replaced per
    `DRIFT_UNIT` samples): a row keeps its rank for ``tau`` samples with probability
    ``exp(-hazard * tau) = (1 - rate) ** (tau / DRIFT_UNIT)``."""
    return -math.log1p(-rate) / DRIFT_UNIT


def _mix64(x):
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def drift_ranks(ranks, times, m, t, rate, seed) -> np.ndarray:
    """Power-law ranks in ``[1, m]`` of table ``t``, drawn at stream positions ``times``,
    moved to the ranks whose rows hold that popularity at those times.

    The ranks ``1 + i``, ``i < m``, are dealt into ``lanes = ceil(m / DRIFT_LANE)`` lanes
    ``{j, j + lanes, j + 2 * lanes, ...}`` (``j = i % lanes``). Lane ``j`` advances at its
    times ``floor(hazard * speed_j * time + phase_j)``; each advance rotates the lane's rows up
    by one place, so the lane's most popular rank takes the row ``lanes`` ranks below it (a
    cold one in a large table) and its old row drops to the lane's coldest rank. ``phase_j``
    is uniform and ``speed_j`` inverse-gamma(2, 1), hashed from (seed, table, lane): then a
    rank keeps its row over ``tau`` samples with probability ``E[max(0, 1 - hazard * speed *
    tau)] = exp(-hazard * tau)`` wherever the interval starts (up to the hash's 21-bit
    resolution). At any time each lane is a permutation of its ranks, so the popularity
    curve is unchanged. Vectorised: a few passes over ``ranks``, no state."""
    lanes = -(-m // DRIFT_LANE)
    q, j = np.divmod(ranks - 1, lanes)
    key = _mix64(np.array([(seed * 0x9E3779B97F4A7C15 + t + 1) & (2 ** 64 - 1)], np.uint64))
    h = _mix64(j.astype(np.uint64) * np.uint64(0xD1B54A32D192ED03) ^ key)
    # Two 21-bit uniforms (their product's -log is Gamma(2, 1)) and a 22-bit phase.
    u12 = (((h >> np.uint64(43)).astype(np.float64) + 0.5)
           * (((h >> np.uint64(22)) & np.uint64(0x1FFFFF)).astype(np.float64) + 0.5))
    phase = ((h & np.uint64(0x3FFFFF)).astype(np.float64) + 0.5) * 2.0 ** -22
    speed = -1.0 / (np.log(u12) - 42 * math.log(2.0))  # 1 / Gamma(2, 1)
    moves = np.floor(drift_hazard(rate) * speed * times + phase).astype(np.int64)
    # Lane j holds the ranks 1 + j + k * lanes for k <= base - (j > rem).
    base, rem = divmod(m - 1, lanes)
    length = base + 1 - (j > rem)
    return 1 + j + (q + moves) % length * lanes


def draw_rows(rng, n, card, empty, head, alpha, q, t, drift=0.0, times=None,
              seed=0) -> np.ndarray:
    """``n`` row ids of table ``t``: the empty value is the rank-(card-1) row, rank 0 has
    probability ``head``, ranks 1.. follow the power law. With ``drift`` > 0, in a table of
    at least `DRIFT_MIN_ROWS` rows, the rows of ranks 1..card-2 move between ranks over the
    stream positions ``times`` (default 0..n-1; `drift_ranks`, keyed by ``seed``); the top
    value and the empty value keep theirs. Drift takes no numbers from ``rng``, so the ranks
    drawn are the same with and without it, and ``drift`` 0 is the stationary stream."""
    ranks = 1 + _powerlaw_ranks(rng, n, max(card - 2, 1), alpha, q)
    if drift and card >= DRIFT_MIN_ROWS:
        times = np.arange(n) if times is None else times
        for s in range(0, n, _DRIFT_CHUNK):  # in chunks: the temporaries stay in cache
            ranks[s:s + _DRIFT_CHUNK] = drift_ranks(ranks[s:s + _DRIFT_CHUNK],
                                                    times[s:s + _DRIFT_CHUNK], card - 2, t,
                                                    drift, seed)
    u = rng.random(n)
    ranks[u < head + empty] = 0
    ranks[u < empty] = card - 1
    mult, add = _bijection(card, t)
    return (ranks * mult + add) % card


def fit_table(real_rows, card, samples, seeds=(1, 2)) -> tuple:
    """Fit (empty, head, alpha, q) so `draw_rows` reproduces `table_stats` of ``real_rows``.

    ``real_rows`` are row ids with the empty value encoded as -1. The empty and top-value
    shares are measured; (alpha, q) are grid-searched on the coverage figures and, with a
    quarter of the weight, the distinct-key fraction.
    """
    real_rows = np.asarray(real_rows)
    empty = float(np.mean(real_rows < 0))
    present = real_rows[real_rows >= 0]
    head = float(np.bincount(present).max() / len(real_rows)) if present.size else 0.0
    target = np.array(table_stats(real_rows))
    weight = np.array([0.25 / samples, 1.0, 1.0])
    best = (np.inf, 1.0, 1.0)
    for alpha in np.arange(0.2, 3.01, 0.05):
        for q in (0.05, 0.2, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024):
            got = np.mean([table_stats(draw_rows(np.random.default_rng(s), samples, card, empty,
                                                 head, alpha, q, 0)) for s in seeds], axis=0)
            err = float((np.abs(got - target) * weight).sum())
            if err < best[0]:
                best = (err, round(float(alpha), 2), q)
    return empty, head, best[1], best[2]


def calibrate(path) -> dict:
    """Fit the per-table and dense parameters to a real Criteo Kaggle CSV (header
    Id,Label,I1..I13,C1..C26; Label may be absent). Any other file, or a malformed one, is a
    one-line HotlineError, as the readers report it."""
    fmt = detect_format(path)
    if fmt != "criteo-csv":
        raise HotlineError(f"{path}: detected as {fmt}; calibrate needs a Criteo Kaggle CSV "
                           f"(header Id,Label,I1..I13,C1..C26)")
    load_dataset(path, fmt)  # every line checked by the reader; then plain splits suffice
    with _open_text(path) as f:
        rows = [line.split(",") for line in (raw.rstrip("\r\n") for raw in f) if line]
    header, body = rows[0], rows[1:]
    cats = [header.index(f"C{i}") for i in range(1, 27)]
    dense = [header.index(f"I{i}") for i in range(1, 14)]
    skew = []
    for t, j in enumerate(cats):
        vocab = {}
        ids = np.array([-1 if not r[j] else vocab.setdefault(r[j], len(vocab)) for r in body])
        skew.append(fit_table(ids, CRITEO_KAGGLE_CARDINALITIES[t], len(body)))
    dense_params = []
    for j in dense:
        col = np.array([float(r[j]) if r[j] else np.nan for r in body])
        ok = col[~np.isnan(col)]
        logs = np.log1p(np.maximum(ok, 0))
        dense_params.append((round(float(np.isnan(col).mean()), 4), round(float(logs.mean()), 4),
                             round(float(logs.std()), 4)))
    return {"skew": [(round(e, 4), round(h, 4), a, q) for e, h, a, q in skew], "dense": dense_params}


def check_drift(rate) -> float:
    """``rate`` as a float in [0, 1), else a one-line HotlineError."""
    try:
        rate = float(rate)
    except (TypeError, ValueError):
        raise HotlineError(f"drift {rate!r} is not a number ({DRIFT_HELP})") from None
    if not 0.0 <= rate < 1.0:
        raise HotlineError(f"drift must be in [0, 1), not {rate:g} ({DRIFT_HELP})")
    return rate


def synth_criteo(samples, seed=0, cardinalities=CRITEO_KAGGLE_CARDINALITIES, drift=0.0,
                 times=None) -> Dataset:
    """A calibrated Criteo-Kaggle-shaped single-hot `Dataset` of ``samples`` samples.

    ``drift``: the fraction of the hot rows replaced per `DRIFT_UNIT` samples (`drift_ranks`);
    0 gives the stationary stream. ``times``: the stream position of every sample (default
    0, 1, ...); only drift uses them."""
    if samples <= 0:
        raise HotlineError(f"--samples must be a positive integer, not {samples}")
    drift = check_drift(drift)
    if times is not None:
        times = np.asarray(times, np.int64)
        if times.shape != (samples,):
            raise HotlineError(f"times has shape {times.shape}, expected ({samples},)")
    rng = np.random.default_rng(seed)
    sparse = np.empty((samples, len(cardinalities)), np.int64)
    for t, (card, params) in enumerate(zip(cardinalities, CRITEO_KAGGLE_SKEW)):
        sparse[:, t] = draw_rows(rng, samples, card, *params, t, drift, times, seed)
    dense = np.empty((samples, len(CRITEO_KAGGLE_DENSE)), np.float32)
    for d, (missing, mu, sigma) in enumerate(CRITEO_KAGGLE_DENSE):
        v = np.floor(np.expm1(rng.normal(mu, sigma, samples).clip(0)))
        v[rng.random(samples) < missing] = 0
        dense[:, d] = v
    # Labels: logistic in standardised log-dense features plus hashed per-row effects.
    z = np.log1p(dense)
    z = (z - z.mean(0)) / (z.std(0) + 1e-6)
    w = np.random.default_rng(7).normal(0, 0.3, z.shape[1])
    logit = z @ w - 1.65
    for t in range(0, sparse.shape[1], 3):
        h = (sparse[:, t].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
        logit += (h.astype(np.float64) / float(1 << 24) - 0.5) * 1.2
    label = (rng.random(samples) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    name = f"synth-criteo-{samples}" + (f"-drift{drift:g}" if drift else "")
    return Dataset(np.ones(sparse.shape, np.int32), sparse.ravel(),
                   np.asarray(cardinalities, np.int64), dense, label, name)


def synth(like, samples, seed=0, drift=0.0) -> Dataset:
    if like not in LIKE:
        raise HotlineError(f"--like {like!r} is not known (choose from {', '.join(LIKE)})")
    return synth_criteo(samples, seed, drift=drift)


def drift_tables(cardinalities=CRITEO_KAGGLE_CARDINALITIES) -> list:
    """The tables that drift: those of at least `DRIFT_MIN_ROWS` rows."""
    return [t for t, c in enumerate(cardinalities) if c >= DRIFT_MIN_ROWS]
