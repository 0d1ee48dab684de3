"""The JSON report of a run (docs/cli.md, "hotline train"), its summary table rows, and
another run's report read back and compared with it (--compare)."""
import json
import numbers
import resource
import sys

import numpy as np

from hotline.contract.errors import HotlineError
from hotline.data.report import fmt_bytes

from .config import MODES
from .metrics import planned_fractions


def build_report(trainer, data, cfg, run, notes, clock) -> dict:
    """The JSON report of a finished (or stopped) run: ``run`` is its `Progress`, ``clock``
    this process's {"setup_seconds", "wall_seconds"}."""
    losses, history, seconds, samples = run.losses, run.history, run.seconds, run.samples
    counters = trainer.device_counters()
    totals = trainer.totals()
    world, coll, step_seconds = 1, np.zeros(4), seconds
    if trainer.ranks is not None:
        r = trainer.ranks
        world = r.world
        # per rank, averaged over the ranks: time in the steps' collectives (waits for slower
        # ranks included), payload bytes sent by kind, and the steps' time (the share's
        # denominator: a rank that reaches a step first waits longer in it than rank 0 steps)
        *coll, step_seconds = r.sum([trainer.step_collective_seconds, r.bytes["dense"],
                                     r.bytes["hot"], r.bytes["cold"], seconds]) / world
    # The device over the training steps (setup, such as the hot-set load, and the drains
    # before evaluation and checkpoints are outside them: device_other_seconds).
    busy, wait = (float(sum(v)) for v in zip(*run.step_device)) if run.step_device else (0.0, 0.0)
    other = trainer.device_time()[0] - busy
    budget = trainer.hot_budget
    out = {
        "mode": cfg.mode,
        "device_url": cfg.device_url if cfg.mode == "hotline" else None,
        "torch_device": str(trainer.dev),
        "data": data.name,
        "samples": data.num_samples,
        "train_samples": data.n_train,
        "test_samples": data.n_test,
        "tables": data.num_tables,
        "table_rows": int(data.table_sizes.sum()),
        "epochs": cfg.epochs,
        "batch_size": cfg.batch_size,
        "steps": len(losses),
        "optimizer": cfg.optimizer,
        "lr": cfg.lr,
        "dim": cfg.dim,
        "row_bytes": trainer.lay.nbytes,
        "seed": cfg.seed,
        "hot_rows_requested": budget["rows"] if budget else None,
        "hot_budget": budget,
        "world_size": world,
        "collective_seconds": float(coll[0]),
        "collective_share": float(coll[0] / step_seconds) if step_seconds else 0.0,
        "collective_bytes_per_step": {k: float(v / max(1, len(losses)))
                                      for k, v in zip(("dense", "hot", "cold"), coll[1:])},
        # how the hot rows' gradients were exchanged: touched slots gathered, or dense
        "hot_exchanges": dict(trainer.ranks.exchanges) if trainer.ranks else None,
        "samples_per_s": samples / seconds if seconds else 0.0,
        "train_seconds": seconds,
        # this invocation: from the command's start to the first step, and to this report
        **clock,
        # hotline: the accelerator works beside the trainer (its agent thread); over the steps,
        # busy: its time in the backend, wait: the trainer's time waiting for it, overlap: the
        # share of the busy time hidden behind training.
        "device_busy_seconds": busy,
        "device_wait_seconds": wait,
        "overlap": (max(0.0, 1.0 - wait / busy) if busy else None),
        "device_other_seconds": other,
        "samples_per_s_without_device": (samples / (seconds - wait) if seconds > wait else 0.0),
        # baseline, device-only: the steps' host work on rows (unique, gather, put back), and
        # the speedup an accelerator doing all of it for free would give (Amdahl)
        # (data-parallel: summed over the ranks, so the bound is per rank on average)
        "host_rows_seconds": totals["host_rows_seconds"],
        "speedup_bound": (seconds / (seconds - totals["host_rows_seconds"] / world)
                          if cfg.mode != "hotline" and seconds > totals["host_rows_seconds"] / world
                          else None),
        "train_logloss": history[-1]["train_logloss"] if history else None,
        "test_logloss": history[-1]["test_logloss"] if history else None,
        "test_auc": history[-1]["test_auc"] if history else None,
        "bytes_host_to_device": totals["bytes_h2d"],
        "bytes_device_to_host": totals["bytes_d2h"],
        "peak_rss_bytes": peak_rss_bytes(),
        "history": history,
        "losses": losses,
        "step_seconds": run.step_seconds,
        # per step: [device busy seconds, seconds the trainer waited for the device]
        "step_device_seconds": run.step_device,
        "counters": counters,
        "notes": notes,
    }
    if cfg.mode == "hotline":
        c = counters
        emb = trainer.embedding
        out.update(hot_rows=int(len(emb.store.placement.keys)),
                   hot_lookup_fraction=c["hits"] / c["lookups"] if c["lookups"] else 0.0,
                   popular_fraction=(c["popular_samples"] / c["samples"] if c["samples"] else 0.0),
                   device=emb.store.dev.info())
        sched = emb.schedule
        loads = sched.records
        out.update(hot_set=cfg.hot_set, refresh=cfg.refresh,
                   learn_window_steps=(sched.window if cfg.hot_set == "learn"
                                       or cfg.refresh != "off" else None),
                   # every learned set loaded: its step, window and coverage of the window
                   # beside the exact top-K's
                   hot_loads=loads,
                   refreshes=len(loads) - (cfg.hot_set == "learn" and len(loads) > 0),
                   step_hot_share=sched.shares, step_popular_share=sched.popular_shares)
    elif budget:
        hot, pop = planned_fractions(data, cfg, budget["rows"])
        out.update(hot_rows=None, hot_lookup_fraction=hot, popular_fraction=pop)
    else:
        out.update(hot_rows=None, hot_lookup_fraction=None, popular_fraction=None)
    return out


def _ratio(a, b):
    return a / b if a is not None and b else None


def _delta(a, b):
    return a - b if a is not None and b is not None else None


def _max_rel_diff(a, b) -> float | None:
    """max |a - b| / |b| over the steps of two equally long loss lists (None otherwise)."""
    if len(a) != len(b) or not a:
        return None
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))


def comparison(res, base) -> dict:
    """How run ``res`` compares with run ``base`` (both JSON reports): the report's
    ``compare`` (docs/cli.md) without its path, and the plot's headline."""
    return {"mode": base["mode"], "data": base["data"], "samples_per_s": base["samples_per_s"],
            "speedup": _ratio(res["samples_per_s"], base["samples_per_s"]),
            "test_auc": base["test_auc"],
            "test_auc_delta": _delta(res["test_auc"], base["test_auc"]),
            "test_logloss": base["test_logloss"],
            "test_logloss_delta": _delta(res["test_logloss"], base["test_logloss"]),
            "loss_max_rel_diff": _max_rel_diff(res["losses"], base["losses"]),
            "same_data": (res["data"], res["train_samples"]) == (base["data"],
                                                                   base["train_samples"])}


def _number(v, none=False) -> bool:
    return (none and v is None) or (isinstance(v, numbers.Real) and not isinstance(v, bool))


# what `comparison` and the plot read from a compared report, and how each must look
_COMPARED = {
    "mode": lambda v: v in MODES,
    "data": lambda v: isinstance(v, str),
    "train_samples": lambda v: isinstance(v, int) and v > 0,
    "batch_size": lambda v: isinstance(v, int) and v > 0,
    "samples_per_s": lambda v: _number(v) and v >= 0,
    "test_auc": lambda v: _number(v, none=True),
    "test_logloss": lambda v: _number(v, none=True),
    "losses": lambda v: isinstance(v, list) and all(_number(x) for x in v),
    "step_seconds": lambda v: isinstance(v, list) and all(_number(x) for x in v),
    "history": lambda v: isinstance(v, list) and all(
        isinstance(h, dict) and isinstance(h.get("steps"), int)
        and _number(h.get("test_logloss"), none=True) for h in v),
}


def read_report(path, flag="--compare") -> dict:
    """The JSON report of another `hotline train` run at ``path``, checked for what
    `comparison` and the plot read: a one-line `HotlineError` naming ``flag`` otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            res = json.load(f)
    except FileNotFoundError:
        raise HotlineError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise HotlineError(f"{flag} {path}: is a directory, not a JSON report") from None
    except OSError as e:
        raise HotlineError(f"{flag} {path}: cannot read it ({e.strerror})") from None
    except UnicodeDecodeError:
        raise HotlineError(f"{flag} {path}: not JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise HotlineError(f"{flag} {path}: not JSON ({e.msg} at line {e.lineno}, column "
                           f"{e.colno})") from None
    if not isinstance(res, dict):
        raise HotlineError(f"{flag} {path}: not a hotline train report (a JSON "
                           f"{type(res).__name__}, not an object)")
    for key, ok in _COMPARED.items():
        if key not in res:
            raise HotlineError(f"{flag} {path}: not a hotline train report (no {key!r})")
        if not ok(res[key]):
            raise HotlineError(f"{flag} {path}: not a hotline train report ({key!r} is "
                               f"{json.dumps(res[key])[:60]})")
    if len(res["losses"]) != len(res["step_seconds"]):
        raise HotlineError(f"{flag} {path}: not a hotline train report ({len(res['losses'])} "
                           f"losses, {len(res['step_seconds'])} step_seconds)")
    return res


def _or_dash(v):
    return v if v is not None else "-"


def fmt_or_dash(v, spec) -> str:
    """``v`` formatted as ``spec``; "-" for None."""
    return "-" if v is None else format(v, spec)


def peak_rss_bytes() -> int:
    """This process's peak resident set size (`resource.getrusage`; KiB on Linux)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def summary_rows(res) -> list[tuple]:
    """(name, value) rows of the summary `hotline train` prints, from its JSON report."""
    steps = -(-res["train_samples"] // res["batch_size"])
    rows = [("data", res["data"]), ("mode", res["mode"] + (f" ({res['device_url']})"
                                                           if res["device_url"] else "")),
            ("torch device", res["torch_device"]),
            ("train / test samples", f"{res['train_samples']:,} / {res['test_samples']:,}"),
            ("tables / rows", f"{res['tables']} / {res['table_rows']:,}"),
            ("epochs x steps", f"{res['epochs']} x {steps}"),
            ("optimizer", f"{res['optimizer']} lr={res['lr']:g}"),
            ("samples / s", f"{res['samples_per_s']:,.0f}"),
            ("train logloss", res["train_logloss"]),
            ("test logloss", _or_dash(res["test_logloss"])),
            ("test AUC", _or_dash(res["test_auc"])),
            ("bytes host -> device", fmt_bytes(res["bytes_host_to_device"])),
            ("hot-lookup fraction", _or_dash(res["hot_lookup_fraction"])),
            ("popular samples", _or_dash(res["popular_fraction"]))]
    if res.get("compare"):
        c = res["compare"]
        rows.append((f"vs {c['mode']} ({c['report']})",
                     f"{fmt_or_dash(c['speedup'], '.2f')}x samples/s, test AUC "
                     f"{fmt_or_dash(c['test_auc_delta'], '+.4f')}"))
    if res["world_size"] > 1:
        b = res["collective_bytes_per_step"]
        rows += [("ranks (data-parallel)", res["world_size"]),
                 ("collectives per rank", f"{res['collective_seconds']:.1f} s "
                                          f"({res['collective_share']:.0%} of the steps)"),
                 ("sent per step per rank", f"dense {fmt_bytes(b['dense'])}, hot "
                                            f"{fmt_bytes(b['hot'])}, cold {fmt_bytes(b['cold'])}")]
    if res["mode"] == "hotline":
        c = res["counters"]
        rows += [("device busy / waited for", f"{res['device_busy_seconds']:.1f} s / "
                                               f"{res['device_wait_seconds']:.1f} s of "
                                               f"{res['train_seconds']:.1f} s"),
                 ("overlap (device time hidden)", _or_dash(res["overlap"])),
                 ("device outside the steps", f"{res['device_other_seconds']:.1f} s (hot-set "
                                              f"load, drains)"),
                 ("samples / s without the waits", f"{res['samples_per_s_without_device']:,.0f}"),
                 ("hot rows (CAM)", res["hot_rows"]),
                 ("hot budget", f"{res['hot_budget']['rows']:,} rows, "
                                f"{fmt_bytes(res['hot_budget']['bytes'])} "
                                f"({res['hot_budget']['source']})"),
                 ("hot set", res["hot_set"] + (
                     f" (learned: {res['hot_loads'][0]['coverage_ratio']:.3f} of the exact "
                     f"top-K's coverage)" if res["hot_set"] == "learn" and res["hot_loads"]
                     else "")),
                 ("refresh", f"{res['refresh']}: {res['refreshes']} refreshes"),
                 ("DMA rows gathered / scattered", f"{c['gather_rows']:,} / {c['scatter_rows']:,}"),
                 ("DMA errors", c["window_errors"] + c["axi_errors"])]
    elif res["speedup_bound"] is not None:
        rows.append(("host row work (Amdahl bound)",
                     f"{res['host_rows_seconds']:.1f} s of {res['train_seconds']:.1f} s "
                     f"(an accelerator gives <= {res['speedup_bound']:.2f}x)"))
    return rows
