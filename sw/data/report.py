"""Human output: aligned summary tables, JSON files written atomically, PNG plots."""
import json

import numpy as np

from .readers import write_atomic


def table(rows, headers) -> str:
    """Render ``rows`` (lists of cells) as an aligned plain-text table."""
    cells = [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def fmt_bytes(n) -> str:
    """``n`` bytes for people: 512 B, 18.0 MiB, 1,024.0 TiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:,.1f}"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    return str(v)


def write_json(path, obj) -> None:
    """Write ``obj`` as indented JSON, atomically (no partial file on failure)."""
    text = json.dumps(obj, indent=1, default=_jsonable)
    write_atomic(path, lambda f: f.write(text + "\n"), mode="w")


def _jsonable(v):
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


def plot_stream(path, title, key_counts_sorted, batches, hot_rows) -> None:
    """PNG: popularity CDF of the stream, and per-batch popular/non-popular/unique-cold sizes."""
    import matplotlib  # lazy: matplotlib takes a second to import; only plots need it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: (see above)

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    cdf = np.cumsum(key_counts_sorted) / key_counts_sorted.sum()
    ranks = np.arange(1, len(cdf) + 1)
    a.semilogx(ranks, cdf)
    if 0 < hot_rows <= len(cdf):
        a.axvline(hot_rows, color="tab:red", ls="--", label=f"hot set K={hot_rows:,}")
        a.legend(loc="lower right")
    a.set(xlabel="keys ranked by access count", ylabel="fraction of lookups",
          title="popularity CDF", ylim=(0, 1))
    a.grid(True, which="both", alpha=0.3)
    x = np.arange(len(batches))
    pop = np.array([bt["popular"] for bt in batches])
    non = np.array([bt["non_popular"] for bt in batches])
    cold = np.array([bt["unique_cold_rows"] for bt in batches])
    b.plot(x, pop, label="popular samples")
    b.plot(x, non, label="non-popular samples")
    b.plot(x, cold, label="unique cold rows")
    b.set(xlabel="batch", ylabel="count", title="per-batch fragments")
    b.legend()
    b.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
