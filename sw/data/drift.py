"""How fast a stream's hot set goes stale: the hot-lookup share of a fixed hot set and of one
re-planned every window.

`hot_share_decay` cuts a key stream into consecutive windows of ``window_batches`` batches
and measures, on every window, the share of its lookups whose key is in
- ``off``: the exact top-K keys of window 0 (a hot set planned once, never refreshed);
- ``oracle``: the exact top-K keys of the previous window (a planner that re-plans exactly
  at every window boundary; window 0 uses its own top-K);
- ``own``: the window's own top-K keys (the best any K-key set can do on that window).
On a stationary stream the three stay level (``own`` a little above the others, as it is
fitted in-sample); with drift ``off`` falls away from ``oracle``.

`two_window_decay` compares two windows of one stream (say, samples far apart in a log):
per table and pooled, the overlap of their top-K sets and the share of the second window's
lookups that the first window's top-K covers, against its own top-K. `calibrate_drift` fits
the generator's drift rate (`hotline.data.generator.drift_ranks`) to two windows of the real
Criteo Kaggle log; ``python -m hotline.data.drift A.csv.gz B.csv.gz`` prints it.
"""
import argparse
import csv
import json
import math
import sys
from dataclasses import dataclass

import numpy as np

from hotline.contract.errors import HotlineError

from .generator import (CRITEO_KAGGLE_CARDINALITIES, DRIFT_HELP, DRIFT_UNIT, _bijection,
                        drift_tables, synth_criteo)
from .readers import _open_text, write_atomic

__all__ = ["FRACTIONS", "HotShareDecay", "calibrate_drift", "hot_share_decay", "top_keys",
           "two_window_decay", "VALUE_BITS"]

FRACTIONS = (0.01, 0.05, 0.10)
VALUE_BITS = 32  # `two_window_decay` keys: (table << VALUE_BITS) | value


def top_keys(keys, k) -> np.ndarray:
    """The ``k`` most frequent keys of ``keys``, sorted by key (ties broken by the smaller
    key, so the set is exact and deterministic)."""
    uniq, counts = np.unique(np.asarray(keys), return_counts=True)
    order = np.lexsort((uniq, -counts))[:k]
    return np.sort(uniq[order])


def _share(keys, hot) -> float:
    if keys.size == 0:
        return float("nan")
    pos = np.minimum(np.searchsorted(hot, keys), max(hot.size - 1, 0))
    return float(np.mean(hot[pos] == keys)) if hot.size else 0.0


@dataclass
class HotShareDecay:
    """Per window: ``start`` (first sample), ``off``, ``oracle``, ``own`` (shares, float64)."""
    start: np.ndarray
    off: np.ndarray
    oracle: np.ndarray
    own: np.ndarray

    def as_dict(self) -> dict:
        return {f: getattr(self, f).tolist() for f in ("start", "off", "oracle", "own")}


def hot_share_decay(keys, offsets, batch_size, window_batches, k) -> HotShareDecay:
    """The hot-lookup share on consecutive windows of ``window_batches`` batches of
    ``batch_size`` samples of a stream (see the module doc).

    ``keys``: uint32 [L], every lookup's key in stream order (`Dataset.keys`);
    ``offsets``: int64 [N + 1], sample n's lookups are ``keys[offsets[n]:offsets[n + 1]]``
    (`Dataset.sample_offsets`); ``k``: the hot-set size in keys. A trailing partial window is
    kept as the last window."""
    keys, offsets = np.asarray(keys), np.asarray(offsets, np.int64)
    for name, v in (("batch_size", batch_size), ("window_batches", window_batches), ("k", k)):
        if int(v) != v or v <= 0:
            raise HotlineError(f"hot_share_decay: {name} must be a positive integer, not {v}")
    if offsets.ndim != 1 or offsets.size < 2 or offsets[-1] != keys.size:
        raise HotlineError(f"hot_share_decay: offsets must be [N + 1] ending at len(keys) = "
                           f"{keys.size}")
    samples = offsets.size - 1
    width = int(batch_size) * int(window_batches)
    starts = np.arange(0, samples, width)
    windows = [keys[offsets[s]:offsets[min(s + width, samples)]] for s in starts]
    tops = [top_keys(w, int(k)) for w in windows]
    off = np.array([_share(w, tops[0]) for w in windows])
    oracle = np.array([_share(w, tops[max(i - 1, 0)]) for i, w in enumerate(windows)])
    own = np.array([_share(w, t) for w, t in zip(windows, tops)])
    return HotShareDecay(starts, off, oracle, own)


def _ranked(keys) -> tuple:
    """(distinct keys by falling count, ties by key; their counts)."""
    uniq, counts = np.unique(keys, return_counts=True)
    order = np.lexsort((uniq, -counts))
    return uniq[order], counts[order]


def _compare(a, b, frac) -> tuple:
    """(K, top-K overlap, share of b in a's top-K, share of b in b's top-K) for two
    `_ranked` windows."""
    (ua, _), (ub, cb) = a, b
    if ua.size == 0 or ub.size == 0:
        return 0, float("nan"), float("nan"), float("nan")
    k = math.ceil(frac * ua.size)
    top_a = np.sort(ua[:k])
    in_a = np.isin(ub, top_a, assume_unique=True)
    total = cb.sum()
    return (k, int(in_a[:k].sum()) / k, float(cb[in_a].sum() / total),
            float(cb[:k].sum() / total))


def two_window_decay(keys_a, keys_b, fractions=FRACTIONS) -> dict:
    """How much of window a's hot set is still hot in window b.

    ``keys_a``, ``keys_b``: int [L] keys ``(table << VALUE_BITS) | value`` of each window's
    lookups, a value numbered the same in both windows by a number that does not depend on
    either window (a raw hashed value, a generator row id; not first-appearance order, which
    would bias the ties at the top-K boundary), empty cells left out. For every fraction
    f and every table (and for all tables pooled), K = ceil(f * distinct keys of a) and:
    ``overlap`` = |top-K(a) & top-K(b)| / K; ``share_off`` = share of b's lookups in
    top-K(a); ``share_own`` = share of b's lookups in top-K(b). Top-K sets are exact, ties
    broken by the smaller key. Returns ``{f: {"k", "overlap", "share_off", "share_own":
    [per table], "pooled": {...}}}`` (tables 0..max; one with no lookups in a or b gives K 0
    and NaN)."""
    keys_a, keys_b = np.asarray(keys_a, np.int64), np.asarray(keys_b, np.int64)
    ta, tb = keys_a >> VALUE_BITS, keys_b >> VALUE_BITS
    tables = range(int(max(ta.max(initial=-1), tb.max(initial=-1))) + 1)
    ranked = [(_ranked(keys_a[ta == t]), _ranked(keys_b[tb == t])) for t in tables]
    pooled = _ranked(keys_a), _ranked(keys_b)
    names = ("k", "overlap", "share_off", "share_own")
    out = {}
    for f in fractions:
        per = [_compare(a, b, f) for a, b in ranked]
        out[f] = {name: list(v) for name, v in zip(names, zip(*per))}
        out[f]["pooled"] = dict(zip(names, _compare(*pooled, f)))
    return out


# --- Drift calibration on two windows of the real log --------------------------------------

KAGGLE_ID_BASE = 10_000_000  # Criteo Kaggle train ``Id`` = 10,000,000 + row index in train.txt
_DRIFT_GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0)
_DRIFT_STATS = ("overlap", "retained")


def _read_window(path) -> tuple:
    """(stream positions from the Id column, [26 int64 arrays of the categorical cells as
    `two_window_decay` keys, empty cells left out]). A Criteo cell is a 32-bit hashed value
    in hex, and that value is its key: equal values get equal keys in both windows (the
    readers number each file's values by first appearance, which cannot be compared)."""
    with _open_text(path) as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    if "Id" not in header or any(f"C{i}" not in header for i in range(1, 27)):
        raise HotlineError(f"{path}: expected a Criteo Kaggle CSV with Id and C1..C26 columns")
    try:
        ids = np.array([int(r[header.index("Id")]) for r in body], np.int64) - KAGGLE_ID_BASE
    except ValueError as e:
        raise HotlineError(f"{path}: an Id is not an integer ({e})") from None
    cols = []
    for t in range(26):
        j = header.index(f"C{t + 1}")
        values = []
        for r in body:
            if r[j]:
                try:
                    v = int(r[j], 16)
                except ValueError:
                    v = -1
                if not 0 <= v < 1 << VALUE_BITS:
                    raise HotlineError(f"{path}: C{t + 1} = {r[j]!r} is not a 32-bit hex "
                                       f"hashed value")
                values.append((t << VALUE_BITS) | v)
        cols.append(np.array(values, np.int64))
    return ids, cols


def _synth_keys(times_a, times_b, seed, drift, tables) -> tuple:
    """The generator's `two_window_decay` keys of ``tables`` at the two windows' stream
    positions (one stream, one seed), the empty value left out as in `_read_window`."""
    n_a = len(times_a)
    ds = synth_criteo(n_a + len(times_b), seed, drift=drift,
                      times=np.concatenate([times_a, times_b]))
    sparse = ds.indices.reshape(ds.num_samples, -1)[:, tables]
    cards = [CRITEO_KAGGLE_CARDINALITIES[t] for t in tables]
    empty = np.array([((c - 1) * m + a) % c for c, (m, a) in
                      zip(cards, (_bijection(c, t) for t, c in zip(tables, cards)))])
    keys = (np.asarray(tables, np.int64) << VALUE_BITS) | sparse
    keep = sparse != empty
    return keys[:n_a][keep[:n_a]], keys[n_a:][keep[n_a:]]


def _drift_stats(decay, tables) -> dict:
    """Per fraction: ``overlap``, the mean over ``tables`` of the top-K overlap, and
    ``retained``, the pooled hot-lookup share of window b in window a's top-K over that in
    b's own top-K."""
    return {f: {"overlap": float(np.mean([d["overlap"][t] for t in tables])),
                "retained": d["pooled"]["share_off"] / d["pooled"]["share_own"]}
            for f, d in decay.items()}


def calibrate_drift(path_a, path_b, samples_apart=None, seeds=range(12)) -> dict:
    """Fit the generator's drift rate to two windows of one real Criteo Kaggle log.

    The windows' cells are compared as raw hashed values (`_read_window`). Stream positions
    come from the Id column; ``samples_apart`` (default: the measured distance between the
    windows' mean positions) moves window b. Measured on the drifting tables
    (`drift_tables`), per K = 1%, 5%, 10% of the distinct values of window a: the mean
    per-table top-K overlap and the retained hot share (`_drift_stats`). The generator is
    drawn at exactly the same positions (the same 1,999 + 1,999 samples, so the same sampling
    noise) for each of ``seeds`` and each survival exponent x on a grid (x = hazard *
    samples apart: a hot row keeps its rank over the distance with probability exp(-x));
    each statistic's fit is the x where the seeds' mean falls to the real value (0 when the
    real decay is no larger than the generator's without drift). The headline ``rate``
    comes from the median x of the three retained-share fits: the share of the lookups a
    hot set keeps is what a hot set is for, and those fits agree across K; the overlap fits
    are returned beside them (the real top-K sets churn more at their cold edge than the
    model's, which replaces rows whatever their popularity). Returns the real per-table
    figures of all tables (``real``: `two_window_decay`), the fits, ``survival`` = exp(-x)
    and ``rate``."""
    times_a, cols_a = _read_window(path_a)
    times_b, cols_b = _read_window(path_b)
    measured = float(times_b.mean() - times_a.mean())
    apart = measured if samples_apart is None else float(samples_apart)
    if apart <= 0:
        raise HotlineError(f"samples_apart must be positive, not {apart:g}")
    times_b = times_b + int(round(apart - measured))
    tables = drift_tables()
    real_decay = two_window_decay(np.concatenate(cols_a), np.concatenate(cols_b))
    real = _drift_stats(two_window_decay(np.concatenate([cols_a[t] for t in tables]),
                                         np.concatenate([cols_b[t] for t in tables])),
                        tables)
    to_rate = lambda x: -math.expm1(-x * DRIFT_UNIT / apart)
    curves = [[_drift_stats(two_window_decay(*_synth_keys(times_a, times_b, s, to_rate(x),
                                                          tables)), tables)
               for s in seeds] for x in _DRIFT_GRID]
    fits = {}
    for f in FRACTIONS:
        for stat in _DRIFT_STATS:
            runs = np.array([[c[f][stat] for c in row] for row in curves])
            mean, sd = runs.mean(axis=1), runs.std(axis=1)
            x = _crossing(_DRIFT_GRID, mean, real[f][stat])
            # The x range over which the real value lies within one seed-to-seed standard
            # deviation of the generator's mean: how precisely one pair of windows pins x.
            band = [_crossing(_DRIFT_GRID, mean - sd, real[f][stat]),
                    _crossing(_DRIFT_GRID, mean + sd, real[f][stat])]
            fits[f"{stat}@{f:g}"] = {"real": real[f][stat], "synth_no_drift": float(mean[0]),
                                     "synth_sd": float(sd[0]), "x": x, "x_band": band,
                                     "rate": to_rate(x)}
    x = float(np.median([fits[f"retained@{f:g}"]["x"] for f in FRACTIONS]))
    return {"files": [str(path_a), str(path_b)], "samples": [len(times_a), len(times_b)],
            "samples_apart": apart, "fractions": list(FRACTIONS), "drift_tables": tables,
            "real": real_decay, "fits": fits, "x": x, "survival": math.exp(-x),
            "rate": to_rate(x), "unit": DRIFT_HELP}


def _crossing(grid, curve, target) -> float:
    """Where the falling ``curve`` over ``grid`` first reaches ``target`` (linear
    interpolation; the grid's first or last point when it never does)."""
    if target >= curve[0]:
        return float(grid[0])
    for i in range(1, len(grid)):
        if curve[i] <= target:
            lo, hi = curve[i - 1], curve[i]
            w = (lo - target) / (lo - hi) if lo != hi else 1.0
            return float(grid[i - 1] + w * (grid[i] - grid[i - 1]))
    return float(grid[-1])


def _summary(cal) -> str:
    """`calibrate_drift`'s result as a text report."""
    real, tables = cal["real"], cal["drift_tables"]
    lines = [f"{cal['files'][0]} -> {cal['files'][1]}: {cal['samples'][0]:,} + "
             f"{cal['samples'][1]:,} samples, {cal['samples_apart']:,.0f} samples apart",
             "per table, K = 1% / 5% / 10% of window a's distinct values (* = drifting table):",
             f"{'table':>7} {'top-K overlap':>20} {'share of b in a top-K':>24} "
             f"{'in b top-K':>20}"]
    fmt = lambda v: "   nan" if v != v else f"{v:6.3f}"
    row = lambda name, get: (f"{name:>7} " + " ".join(
        " ".join(fmt(get(real[f], s)) for f in cal["fractions"])
        for s in ("overlap", "share_off", "share_own")))
    for t in range(len(real[cal["fractions"][0]]["overlap"])):
        lines.append(row(f"C{t + 1}" + ("*" if t in tables else " "), lambda d, s: d[s][t]))
    lines.append(row("pooled", lambda d, s: d["pooled"][s]))
    lines.append("fits (drifting tables; x = hazard * samples apart, survival exp(-x)):")
    for name, v in cal["fits"].items():
        lines.append(f"  {name:<14} real {v['real']:.3f}  generator without drift "
                     f"{v['synth_no_drift']:.3f} (sd {v['synth_sd']:.3f})  x {v['x']:.3f} "
                     f"[{v['x_band'][0]:.3f}, {v['x_band'][1]:.3f}]  rate {v['rate']:.6f}")
    lines.append(f"rate {cal['rate']:.6f} ({cal['unit']}): a hot row keeps its rank over "
                 f"{cal['samples_apart']:,.0f} samples with probability {cal['survival']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m hotline.data.drift A B [--samples-apart N] [--json OUT]``."""
    p = argparse.ArgumentParser(prog="python -m hotline.data.drift",
                                description="fit the generator's drift rate to two windows "
                                "of one Criteo Kaggle log (CSV with Id and C1..C26)")
    p.add_argument("path_a")
    p.add_argument("path_b")
    p.add_argument("--samples-apart", type=float, help="default: from the Id columns")
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args(argv)
    try:
        cal = calibrate_drift(args.path_a, args.path_b, args.samples_apart)
    except HotlineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(_summary(cal))
    if args.json:
        write_atomic(args.json, lambda f: json.dump(cal, f, indent=1, default=float), mode="w")
    return 0


if __name__ == "__main__":
    sys.exit(main())
