"""Figures of a run that need no trainer: test AUC, and the hot fractions the exact hot set
would give (reported by the modes that use no device)."""
import numpy as np

from hotline.model.planner import exact_hot_set, profile_samples


def auc(labels, scores) -> float | None:
    """Area under the ROC curve (ties get the average rank); None with one class only."""
    labels = np.asarray(labels, np.float64)
    pos = labels.sum()
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return None
    order = np.argsort(scores, kind="mergesort")
    s = np.asarray(scores)[order]
    ranks = np.empty(len(s), np.float64)
    # average ranks over runs of equal scores
    edges = np.r_[0, np.flatnonzero(np.diff(s)) + 1, len(s)]
    for a, b in zip(edges[:-1], edges[1:]):
        ranks[a:b] = (a + b + 1) / 2.0
    r = np.empty(len(s), np.float64)
    r[order] = ranks
    return float((r[labels == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def planned_fractions(data, cfg, hot_rows, chunk=1 << 14) -> tuple[float, float]:
    """hot_lookup_fraction and popular_fraction of the training split under the exact hot set
    of ``hot_rows`` (what hotline mode would see, CAM refusals aside), for the modes that use
    no device. Reads ``chunk`` samples at a time (a sharded stream stays bounded)."""
    n = data.n_train
    window = profile_samples(n, cfg.profile_fraction)
    hot = exact_hot_set(data.keys[:data.offsets[window]], hot_rows)
    hits = popular = 0
    for s0 in range(0, n, chunk):
        s1 = min(n, s0 + chunk)
        offsets = np.asarray(data.offsets[s0:s1 + 1])
        is_hot = np.isin(data.keys[offsets[0]:offsets[-1]], hot.keys)
        hits += int(is_hot.sum())
        nonempty = np.diff(offsets) > 0
        popular += int((~nonempty).sum())
        if nonempty.any():
            popular += int(np.logical_and.reduceat(is_hot, offsets[:-1][nonempty] - offsets[0]).sum())
    lookups = int(data.offsets[n])
    return hits / lookups if lookups else 0.0, popular / n
