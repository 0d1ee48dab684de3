"""The PNG of `hotline train --plot`: per-step loss, throughput and (hotline) the device
timeline and the hot-lookup share with the hot-set loads."""
import numpy as np

from hotline.data.readers import write_atomic


def plot_training(path, res) -> None:
    """PNG: per-step training loss (and its running mean), throughput per step window and, in
    hotline mode, the timeline: per step, training time, time waiting for the device, and the
    device's busy time beside them."""
    import matplotlib  # lazy: matplotlib takes a second to import; only --plot needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: (see above)
    losses = np.asarray(res["losses"])
    secs = np.asarray(res["step_seconds"])
    dev = np.asarray(res.get("step_device_seconds") or [], float).reshape(-1, 2)
    timeline = res["mode"] == "hotline" and len(dev) == len(secs) > 0
    share = np.asarray(res.get("step_hot_share") or [], float)
    if timeline:
        fig, grid = plt.subplots(2, 2, figsize=(14, 8))
        axes = grid.ravel()
    else:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    a, b = axes[:2]
    x = np.arange(1, len(losses) + 1)
    a.plot(x, losses, lw=0.6, alpha=0.5, label="step loss")
    w = max(1, len(losses) // 50)
    if len(losses) >= w:
        run = np.convolve(losses, np.ones(w) / w, mode="valid")
        a.plot(x[w - 1:], run, label=f"mean of {w}")
    for h in res["history"]:
        if h["test_logloss"] is not None:
            a.axhline(h["test_logloss"], color="tab:red", ls=":", lw=0.8)
    a.set(xlabel="step", ylabel="logloss", title="training loss (dotted: test logloss per epoch)")
    a.legend()
    a.grid(True, alpha=0.3)
    bs = res["batch_size"]
    if len(secs):
        w = max(1, len(secs) // 50)
        k = len(secs) // w
        tput = (bs * w) / secs[:k * w].reshape(k, w).sum(1) if k else np.array([])
        b.plot((np.arange(k) + 1) * w, tput)
    b.set(xlabel="step", ylabel="samples / s", title=f"throughput ({res['mode']}, B={bs})")
    b.set_ylim(bottom=0)
    b.grid(True, alpha=0.3)
    if timeline:
        w = max(1, len(secs) // 50)
        k = len(secs) // w

        def per_step_ms(v):
            return v[:k * w].reshape(k, w).mean(1) * 1e3
        x = (np.arange(k) + 1) * w
        c = axes[2]
        step_ms = per_step_ms(secs)
        c.stackplot(x, per_step_ms(secs - dev[:, 1]), per_step_ms(dev[:, 1]),
                    labels=["training", "waiting for the device"], alpha=0.7)
        c.set_ylim(0, 1.45 * step_ms.max())  # room for the legend above the steps
        c.plot(x, per_step_ms(dev[:, 0]), color="k", lw=1, label="device busy (beside)")
        c.set(xlabel="step", ylabel="ms per step",
              title=f"timeline (overlap {res['overlap']:.2f})")
        c.legend(loc="upper right", ncols=2, fontsize="small")
        c.grid(True, alpha=0.3)
        h = axes[3]
        h.plot(np.arange(1, len(share) + 1), share, lw=0.8, label="hot-lookup share")
        for i, load in enumerate(res.get("hot_loads") or []):
            h.axvline(load["step"] + 0.5, color="tab:red", ls="--", lw=0.8,
                      label="learned set loaded" if i == 0 else None)
        h.set(xlabel="step", ylabel="share of lookups hot", ylim=(0, 1.05),
              title=f"hot set ({res['hot_set']}, refresh {res['refresh']}: "
                    f"{res['refreshes']} refreshes)")
        h.legend(loc="lower right", fontsize="small")
        h.grid(True, alpha=0.3)
    fig.suptitle(f"{res['data']}: {res['mode']}, {res['optimizer']}, dim {res['dim']}")
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
