"""The PNG of `hotline train --plot`: per-step loss and throughput."""
import numpy as np

from hotline.data.readers import write_atomic


def plot_training(path, res) -> None:
    """PNG: per-step training loss (and its running mean), throughput per step window."""
    import matplotlib  # lazy: matplotlib takes a second to import; only --plot needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: (see above)
    losses = np.asarray(res["losses"])
    secs = np.asarray(res["step_seconds"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
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
    fig.suptitle(f"{res['data']}: {res['mode']}, {res['optimizer']}, dim {res['dim']}")
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
