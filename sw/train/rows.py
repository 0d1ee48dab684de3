"""Embedding rows and memory budgets: DLRM's table initialisation (rows laid out as
`hotline.nn.layout.RowLayout` says), and the checks that the tables fit."""
import math

import numpy as np

from hotline.contract.errors import HotlineError
from hotline.data.report import fmt_bytes


def init_table(seed, t, rows, lay, out, keep=None) -> None:
    """DLRM's initialisation of table ``t``: uniform(-1/sqrt(rows), 1/sqrt(rows)) per value,
    state 0; written into ``out`` [rows, lay.floats] in chunks (same values in every mode).
    ``keep`` (lo, hi): write rows [lo, hi) only (a node's part of a table split over nodes)."""
    rng = np.random.default_rng([seed, 1000 + t])
    a = np.float32(1.0 / math.sqrt(rows))
    lo, hi = (0, rows) if keep is None else (max(0, keep[0]), min(rows, keep[1]))
    out[lo:max(lo, hi), lay.dim:] = 0
    step = 1 << 20
    for r0 in range(0, min(rows, hi), step):   # every chunk drawn: the stream stays the same
        r1 = min(rows, r0 + step)
        v = rng.random((r1 - r0, lay.dim), dtype=np.float32) * (2 * a) - a
        w0, w1 = max(r0, lo), min(r1, hi)
        if w0 < w1:
            out[w0:w1, :lay.dim] = v[w0 - r0:w1 - r0]


def check_fits(what, need, limit, data) -> None:
    """A one-line error when the tables' ``need`` bytes exceed ``limit`` bytes of ``what``."""
    if need > limit:
        raise HotlineError(
            f"{data.name}: the tables need {fmt_bytes(need)} of {what}, only {fmt_bytes(limit)} "
            f"available ({int(data.table_sizes.sum()):,} rows); fold them with --max-ind-range M")
