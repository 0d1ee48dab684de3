"""The PNG of `hotline train --plot`: throughput and loss (beside a baseline run's, with
--compare: which is faster, at what accuracy), and in hotline mode the device timeline and
the hot-lookup and popular-sample shares per step. `moving_throughput` and `moving_mean` are
its smoothed curves."""
import math

import numpy as np

from hotline.data.readers import write_atomic

from .report import comparison, fmt_or_dash

CURVE_POINTS = 25  # a moving mean over about 1/25 of the steps: the trend, not the step noise
SAME_LOSS = 1e-5   # the modes' losses agree per step to this (relative): the lines coincide
STYLES = {"this": ("tab:blue", "-"), "base": ("dimgray", "--")}  # (the runs may coincide)


def smoothing_window(steps) -> int:
    """Steps per moving mean for a run of ``steps`` steps (1: too short to smooth)."""
    return max(1, steps // CURVE_POINTS)


def moving_mean(values, w) -> tuple[np.ndarray, np.ndarray]:
    """(1-based step at each window's end, mean of ``values`` over the ``w`` steps to it)."""
    v = np.asarray(values, float)
    if len(v) < w:
        return np.zeros(0), np.zeros(0)
    return np.arange(w, len(v) + 1), np.convolve(v, np.ones(w) / w, mode="valid")


def step_samples(res) -> np.ndarray:
    """Samples of each step of a report (every batch full but each epoch's last)."""
    nb = -(-res["train_samples"] // res["batch_size"])
    last = res["train_samples"] - (nb - 1) * res["batch_size"]
    steps = np.arange(len(res["step_seconds"]))
    return np.where(steps % nb == nb - 1, last, res["batch_size"])


def moving_throughput(res, w) -> tuple[np.ndarray, np.ndarray]:
    """(1-based step at each window's end, samples / s over the ``w`` steps to it: the
    window's samples over its seconds)."""
    x, samples = moving_mean(step_samples(res), w)
    _, seconds = moving_mean(res["step_seconds"], w)
    return x, samples / np.maximum(seconds, 1e-12)


def _base_label(base, res) -> str:
    """The compared run's name in the legends: its mode ("(compared)" added when it is this
    run's too)."""
    return base["mode"] + (" (compared)" if base["mode"] == res["mode"] else "")


def _headline(res, base, cmp) -> str:
    """The figure's title: the answer at a glance."""
    if base is None:
        return (f"{res['data']}: {res['mode']}, {res['samples_per_s']:,.0f} samples/s, test AUC "
                f"{fmt_or_dash(res['test_auc'], '.4f')} ({res['optimizer']}, dim {res['dim']}, "
                f"B={res['batch_size']})")
    other = "" if cmp["same_data"] else f" (compared run: {base['data']})"
    auc, base_auc, delta = (fmt_or_dash(v, spec) for v, spec in (
        (res["test_auc"], ".4f"), (base["test_auc"], ".4f"), (cmp["test_auc_delta"], "+.4f")))
    return (f"{res['data']}: {res['mode']} {fmt_or_dash(cmp['speedup'], '.2f')}x the "
            f"samples/s of {_base_label(base, res)} ({res['samples_per_s']:,.0f} vs "
            f"{base['samples_per_s']:,.0f}); test AUC {auc} vs {base_auc} ({delta}){other}")


def _bars(ax, runs, key, spec, title, unit=""):
    """Horizontal bars of ``key`` for ``runs`` [(label, report, color)], values written in."""
    vals = [r[key] for _, r, _ in runs]
    shown = [v if v is not None else 0.0 for v in vals]
    y = np.arange(len(runs))
    ax.barh(y, shown, color=[color for _, _, (color, _) in runs], height=0.6)
    ax.set_yticks(y, [label for label, _, _ in runs])
    ax.invert_yaxis()
    for i, v in enumerate(vals):
        ax.text(0.02, i, f" {fmt_or_dash(v, spec)}{unit}", va="center", ha="left", color="white",
                fontweight="bold", transform=ax.get_yaxis_transform())
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)


def plot_training(path, res, base=None) -> None:
    """Write `training_figure` as a PNG to ``path``."""
    import matplotlib.pyplot as plt  # lazy: matplotlib takes a second to import
    fig = training_figure(res, base)
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)


def training_figure(res, base=None):
    """The figure of run ``res`` (its JSON report), beside ``base`` (another run's report) if
    given: samples/s and test AUC side by side, both runs' throughput and training loss
    (moving means over the steps stated in the legends), and in hotline mode the device
    timeline and the hot-lookup and popular-sample shares per step."""
    import matplotlib  # lazy: matplotlib takes a second to import; only --plot needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: (see above)
    runs = [(res["mode"], res, STYLES["this"])]
    if base is not None:
        runs.append((_base_label(base, res), base, STYLES["base"]))
    dev = np.asarray(res.get("step_device_seconds") or [], float).reshape(-1, 2)
    timeline = res["mode"] == "hotline" and len(dev) == len(res["step_seconds"]) > 0
    panels = (["speed", "auc"] if base is not None else []) + ["throughput", "loss"]
    panels += ["timeline", "shares"] if timeline else []
    cols = 3 if len(panels) > 4 else 2
    rows = math.ceil(len(panels) / cols)
    fig, grid = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.6 * rows), squeeze=False)
    axes = dict(zip(panels, grid.ravel()))
    if base is not None:
        _bars(axes["speed"], runs, "samples_per_s", ",.0f", "samples / s over the steps "
              "(higher is faster)")
        _bars(axes["auc"], runs, "test_auc", ".4f", "test AUC (same or higher: as accurate)")
        axes["auc"].set_xlim(0.5, 1.0)   # 0.5: a random model
    _throughput(axes["throughput"], runs)
    _loss(axes["loss"], runs, comparison(res, base) if base is not None else None)
    if timeline:
        _timeline(axes["timeline"], res, dev)
        _shares(axes["shares"], res)
    fig.suptitle(_headline(res, base, comparison(res, base) if base is not None else None),
                 fontsize="large", fontweight="bold")
    fig.tight_layout()
    return fig


def _window_text(w) -> str:
    return f"moving mean over {w} steps" if w > 1 else "per step"


def _throughput(ax, runs):
    for label, r, (color, ls) in runs:
        w = smoothing_window(len(r["step_seconds"]))
        x, y = moving_throughput(r, w)
        ax.plot(x, y, color=color, ls=ls, lw=1.2, label=f"{label}, {_window_text(w)}")
        ax.axhline(r["samples_per_s"], color=color, ls=":", lw=1,
                   label=f"{label}, whole run: {r['samples_per_s']:,.0f}")
    ax.set(xlabel="step", ylabel="samples / s",
           title=f"throughput (B={runs[0][1]['batch_size']})")
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.45)   # room for the legend above
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(True, alpha=0.3)


def _loss(ax, runs, cmp):
    for i, (label, r, (color, ls)) in enumerate(runs):
        w = smoothing_window(len(r["losses"]))
        if w > 1 and i == 0:   # this run's steps, faint, under the trends
            ax.plot(np.arange(1, len(r["losses"]) + 1), r["losses"], color=color, lw=0.5,
                    alpha=0.25)
        x, y = moving_mean(r["losses"], w)
        ax.plot(x, y, color=color, ls=ls, lw=1.2, label=f"{label} train, {_window_text(w)}")
        tests = [(end, h["test_logloss"]) for end, h in
                 zip(np.cumsum([h["steps"] for h in r["history"]]), r["history"])
                 if h["test_logloss"] is not None]
        if tests:
            ax.plot(*zip(*tests), "o", color=color, mec="k", ms=6,
                    label=f"{label} test (at each epoch's end)")
    same = cmp is not None and cmp["loss_max_rel_diff"] is not None and \
        cmp["loss_max_rel_diff"] <= SAME_LOSS
    ax.set(xlabel="step", ylabel="logloss",
           title=f"loss: {runs[0][0]} = {runs[1][0]} at every step (to {SAME_LOSS:g}, relative)"
           if same else "loss")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(True, alpha=0.3)


def _timeline(ax, res, dev):
    secs = np.asarray(res["step_seconds"], float)
    w = smoothing_window(len(secs))
    x, step_ms = moving_mean(secs * 1e3, w)
    _, wait_ms = moving_mean(dev[:, 1] * 1e3, w)
    _, busy_ms = moving_mean(dev[:, 0] * 1e3, w)
    ax.stackplot(x, step_ms - wait_ms, wait_ms, labels=["training", "waiting for the device"],
                 alpha=0.7)
    ax.plot(x, busy_ms, color="k", lw=1, label="device busy (beside the training)")
    ax.set_ylim(0, 1.45 * max(step_ms.max(initial=0), busy_ms.max(initial=0), 1e-9))
    ax.set(xlabel="step", ylabel="ms per step",
           title=f"device timeline, {_window_text(w)} "
                 f"(overlap {fmt_or_dash(res['overlap'], '.2f')})")
    ax.legend(loc="upper right", ncols=2, fontsize="small")
    ax.grid(True, alpha=0.3)


def _shares(ax, res):
    hot = res.get("step_hot_share") or []
    pop = res.get("step_popular_share") or []
    w = smoothing_window(len(hot))
    for values, run_value, color, name in (
            (hot, res["hot_lookup_fraction"], "tab:orange", "hot lookups"),
            (pop, res["popular_fraction"], "tab:green", "popular samples")):
        x, y = moving_mean(values, w)
        ax.plot(x, y, color=color, lw=1.2, label=f"{name}, {_window_text(w)} (whole run "
                                                 f"{fmt_or_dash(run_value, '.2f')})")
    for i, load in enumerate(res.get("hot_loads") or []):
        ax.axvline(load["step"] + 0.5, color="tab:red", ls="--", lw=0.8,
                   label="learned set loaded" if i == 0 else None)
    refresh = "" if res["refresh"] == "off" else f", refresh {res['refresh']}"
    ax.set(xlabel="step", ylabel="share per step", ylim=(0, 1.05),
           title=f"hot set: {res['hot_rows']:,} rows ({res['hot_set']}{refresh})")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(True, alpha=0.3)
