"""`hotline train`: its options (`add_parser`, registered by `hotline.cli`) and `cmd_train`,
which runs `hotline.train.train` with a progress bar, writes the JSON report (and the plot)
and prints the summary. The training itself is `hotline.train`'s; it never imports the CLI."""
import argparse
import os
import signal
import sys
import time
from dataclasses import fields

from tqdm import tqdm

from hotline.contract.errors import HotlineError
from hotline.data.options import EPILOG_DATA, fraction, positive_int, say, seed_int
from hotline.data.readers import FORMATS
from hotline.data.report import table, write_json
from hotline.data.spec import open_data
from hotline.nn.hot_set import LEARN_FRACTION, REFRESH_MARGIN
from hotline.train import MODES, OPTIMIZERS, TrainConfig, prepare_data, train
from hotline.train.checkpoint import remove_stale_partials
from hotline.train.config import (DEFAULT_LR, HOT_MEMORY_SHARE, HOT_SETS, parse_torch_device,
                                  torch_device, world_size)
from hotline.train.plots import plot_training
from hotline.train.run import TRAINING
from hotline.train.report import comparison, read_report, summary_rows


def _size(text) -> int:
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in units and t[-1:] else ""
    try:
        v = float(t[:-1] if unit else t) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 4G, 512M, 1048576)") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return int(v)


def _widths(text) -> tuple[int, ...]:
    try:
        v = tuple(int(x) for x in text.split("-") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of widths like 512-256-64") from None
    if not v or min(v) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: widths must be positive integers")
    return v


def _torch_device(text) -> str:
    try:
        return parse_torch_device(text)
    except HotlineError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--torch-device ")) from None


def _test_fraction(text) -> float:
    return fraction(text, low_open=False)


EXAMPLE = """example:
  hotline train synth:criteo-kaggle:100000 --max-ind-range 200000 --mode hotline \\
      --batch-size 1024 --hot-rows 16384 --epochs 1 --json build/train.json --plot build/train.png
  hotline train ../shared/data/criteo_kaggle/train_random4584.csv.gz --mode baseline \\
      --batch-size 128 --hot-rows 2600 --optimizer adagrad --json build/base.json
  hotline train ../shared/data/criteo_kaggle/train_random4584.csv.gz --mode hotline \\
      --batch-size 128 --hot-rows 2600 --optimizer adagrad --compare build/base.json \\
      --json build/hot.json --plot build/hot.png
  hotline train synth:criteo-kaggle:100000:0:drift=0.5 --max-ind-range 200000 --mode hotline \\
      --batch-size 1024 --hot-fraction 0.1 --hot-set learn --refresh auto --json build/learn.json

modes: baseline (tables in host memory, the CPU gathers and ships each batch's rows),
hotline (hot rows on the torch device, cold rows gathered/scattered by the accelerator at
--device-url, popular and non-popular micro-batches, double-buffered), device-only (all
tables on the torch device). Same --seed and data: the same losses in every mode."""


def add_parser(sub) -> argparse.ArgumentParser:
    """Register `hotline train` on the CLI's subparsers (called by `hotline.cli`)."""
    p = sub.add_parser("train", help="train DLRM in baseline, hotline or device-only mode",
                       epilog=EPILOG_DATA + "\n\n" + EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", metavar="DATA", help="input data (see below)")
    p.add_argument("--format", dest="fmt", choices=FORMATS, help="force the input format")
    p.add_argument("--max-ind-range", type=positive_int, metavar="M",
                   help="fold every table to at most M rows (row id modulo M; for Criteo text "
                        "int(hex) %% M, as the DLRM reference); the generator's 26 tables have "
                        "33.8M rows without it")
    p.add_argument("--max-samples", type=positive_int, metavar="N",
                   help="read only the first N samples")
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--batch-size", type=positive_int, required=True, metavar="B")
    hot = p.add_mutually_exclusive_group()
    hot.add_argument("--hot-rows", type=positive_int, metavar="K",
                     help="hot-set size in rows (with the other modes it only reports the hot "
                          f"fractions). Default in hotline mode: {HOT_MEMORY_SHARE * 100:.0f}%% of the "
                          "torch device's memory (--device-memory), at most every row seen in the profiling "
                          "window; the JSON's hot_budget says which")
    hot.add_argument("--hot-bytes", type=_size, metavar="SIZE",
                     help="hot-set size as device memory (whole rows of this run: dim floats, "
                          "plus one for adagrad)")
    hot.add_argument("--hot-fraction", type=fraction, metavar="F",
                     help="hot-set size as a fraction of the tables' rows (e.g. 0.1)")
    p.add_argument("--micro-batches", choices=("auto", "split", "fused"), default="auto",
                   help="hotline mode: the popular and non-popular micro-batches as two passes "
                        "(split: the device's popular samples first) or as one pass over the "
                        "batch (fused; auto is fused: a second pass through the MLPs costs "
                        "more than it could hide). The same losses either way")
    p.add_argument("--profile-fraction", type=fraction, metavar="F",
                   help="plan (exact) or learn (learn) the hot set on the first ceil(F x train "
                        f"samples) (default 1.0 for exact, {LEARN_FRACTION} for learn)")
    p.add_argument("--hot-set", choices=HOT_SETS, default="exact",
                   help="hotline mode: exact (the exact top-K of the profiling window, planned "
                        "before training) or learn (the device's AccessLearner counts the "
                        "profiling window while it trains with every row cold, then its top-K "
                        "loads; the same losses either way)")
    p.add_argument("--refresh", default="off", metavar="off|auto|every:N",
                   help="hotline mode: re-learn the hot set while training and migrate to it: "
                        "every N steps (learned over the window before), or auto: the learner "
                        "counts every window, and its set loads when a window's hot-lookup share "
                        f"falls {REFRESH_MARGIN * 100:g} point below the share after the last load "
                        "(default off)")
    p.add_argument("--learn-window", type=positive_int, metavar="SAMPLES",
                   help="samples the learner counts before each refresh, in whole batches "
                        "(default: the profiling window); at least one batch")
    p.add_argument("--device-url", default="model://", metavar="URL",
                   help="the accelerator for hotline mode (default model://; "
                        "model://?agent=process runs the model in a process of its own). With several "
                        "ranks each opens its own: one URL for all ({rank} and {local_rank} "
                        "in it are replaced, e.g. serial:///dev/ttyUSB{local_rank}) or a "
                        "comma-separated list, one per rank")
    p.add_argument("--epochs", type=positive_int, default=1)
    p.add_argument("--max-steps", type=positive_int, metavar="N",
                   help="stop after N steps in all (a later --resume continues)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd",
                   help="sgd, or adagrad (row-wise for the embeddings: the accumulator travels "
                        "in the row)")
    p.add_argument("--lr", type=float, metavar="LR",
                   help=f"learning rate (default {DEFAULT_LR['sgd']} for sgd, "
                        f"{DEFAULT_LR['adagrad']} for adagrad)")
    p.add_argument("--dim", type=positive_int, default=16, help="embedding dimension (16)")
    p.add_argument("--bottom", type=_widths, default=(512, 256, 64), metavar="W-W-...",
                   help="bottom MLP hidden widths (default 512-256-64; it ends at --dim)")
    p.add_argument("--top", type=_widths, default=(512, 256), metavar="W-W-...",
                   help="top MLP hidden widths (default 512-256; it ends at 1)")
    p.add_argument("--test-fraction", type=_test_fraction, default=0.1, metavar="F",
                   help="hold out the last F of the samples for test_auc (default 0.1)")
    p.add_argument("--checkpoint", metavar="PATH",
                   help="write a checkpoint here at every epoch end (to a hidden .partial "
                        "file first, renamed when complete: PATH stays the last complete one)")
    p.add_argument("--checkpoint-every", type=positive_int, default=0, metavar="N",
                   help="also every N steps")
    p.add_argument("--resume", metavar="PATH", help="continue from this checkpoint (bit-identical)")
    p.add_argument("--host-memory", type=_size, metavar="SIZE",
                   help="host memory budget for the tables (default: available RAM)")
    p.add_argument("--device-memory", type=_size, metavar="SIZE",
                   help="torch device memory budget (default: free device memory; RAM on cpu)")
    p.add_argument("--torch-device", type=_torch_device, metavar="DEV",
                   help="torch device: cpu, cuda or cuda:N (default cuda if available, else "
                        "cpu); checked against this torch build before any work")
    p.add_argument("--threads", type=positive_int, metavar="N",
                   help="torch CPU threads (default: torch's, one per core; on shared or busy "
                        "cores 1 is often much faster; two runs with the same count, the default "
                        "included, are bit-identical)")
    p.add_argument("--nproc", type=positive_int, default=1, metavar="N",
                   help="data-parallel ranks on this node, started through torch's elastic "
                        "launcher (gloo on CPU, NCCL with CUDA): each trains a contiguous "
                        "1/N of every batch, the same losses as one process; rank 0 writes the "
                        "outputs. Under torchrun, leave it out: WORLD_SIZE says the ranks")
    p.add_argument("--dist-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="how long a collective waits for the other ranks before the run ends "
                        "with an error naming the rank (default 300)")
    p.add_argument("--plot", metavar="PNG", help="write throughput and loss curves here (moving "
                   "means), and in hotline mode the device timeline (training, waits, device busy "
                   "per step) and the hot-lookup and popular-sample shares per step")
    p.add_argument("--compare", metavar="BASELINE.json",
                   help="another run's --json report (e.g. --mode baseline on the same data): "
                        "the plot shows both runs side by side (samples/s, test AUC, throughput "
                        "and loss curves), the summary and the JSON's compare the speed-up and "
                        "the AUC difference")
    p.add_argument("--json", metavar="OUT", required=True, help="write the JSON report here")
    p.set_defaults(func=cmd_train)
    return p


def cmd_train(args) -> int:
    """Run `hotline train` (its output paths were checked by `hotline.cli.main`): in this
    process, as one rank of a torchrun launch, or on --nproc ranks it launches."""
    args.started = time.time()  # the report's setup and wall seconds count from here
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)}).check()
    if cfg.mode == "hotline":
        for url in cfg.device_url.split(","):
            if not url.partition("://")[1]:
                raise HotlineError(f"--device-url {url!r} has no scheme (e.g. model://)")
    if world_size() > 1 and cfg.nproc > 1:
        raise HotlineError(f"--nproc {cfg.nproc} under a launcher that started {world_size()} "
                           f"ranks (WORLD_SIZE); leave --nproc out")
    # before any work: a device this torch or machine lacks, a --compare that is no report, a
    # stale partial checkpoint in the way are errors
    torch_device(cfg.torch_device)
    args.compare_report = read_report(args.compare) if args.compare else None
    for n in remove_stale_partials(cfg):
        say(f"hotline: note: {n}")
    # lazy: torch.distributed imports torch (seconds); the CLI's checks before a run need none
    from hotline.train.dist import launch
    if cfg.nproc > 1:
        return launch(rank_main, (args,), cfg.nproc, cfg.dist_timeout)
    return _train_as_rank(args, cfg)


def rank_main(args) -> int:
    """One rank of `launch` (a new process): `cmd_train`'s run; an error is left for the
    launcher to report (`record_error`), not printed."""
    from hotline.train.dist import record_error  # lazy: (see cmd_train)
    signal.signal(signal.SIGINT, _interrupt_once)
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)}).check()
    try:
        return _train_as_rank(args, cfg)
    except HotlineError as e:
        msg = str(e)
        record_error(msg if msg.startswith("rank ") else f"rank {os.environ['RANK']}: {msg}")
        _exit_at_once(2)
    except KeyboardInterrupt:  # Ctrl-C reaches every rank: the launcher says it, once
        _exit_at_once(130)


def _exit_at_once(code):
    """A failed rank's exit without the interpreter's teardown: an error or an interrupt can
    leave a c10d/gloo thread joinable, and the teardown would then abort in C++ ("terminate
    called without an active exception") with a fatal-error dump on the shared stderr (seen
    once under load after a rank's one-line error)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _interrupt_once(signum, frame):
    """A rank's SIGINT handler: the first raises KeyboardInterrupt, later ones (the launcher
    passes Ctrl-C on to the ranks, which had it from the terminal too) are ignored, so that
    none lands in the clean-up of the first (a finalizer's traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _data(args, cfg):
    ds = open_data(args.data, args.fmt, args.max_ind_range, args.max_samples)
    return prepare_data(ds, cfg.test_fraction, cfg.max_ind_range)


def _train_as_rank(args, cfg) -> int:
    """`_train` in the process group a launcher described (or alone), leaving the group after
    it: waiting for the other ranks when it finished, at once after an error."""
    from hotline.train.dist import init_from_env, shutdown  # lazy: (see cmd_train)
    ranks = init_from_env(cfg.dist_timeout)
    try:
        rc = _train(args, cfg, lead=ranks is None or ranks.rank == 0)
    except BaseException:
        shutdown(finished=False)
        raise
    shutdown()
    return rc


# The bar's ETA shows from this step on: the first steps (warm-up) would mislead it.
ETA_AFTER_STEPS = 5
_SETUP_FORMAT = "{desc} [{elapsed}]"  # a label, no bar: a setup phase's length is unknown
_NO_ETA_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"


class TrainBar:
    """`hotline train`'s progress on stderr (on a terminal; ``tqdm_args`` override): each
    setup phase as the label (`phase`), then the samples trained (`step`), timed from the first
    step, the ETA from step `ETA_AFTER_STEPS` on."""

    def __init__(self, mode, total, **tqdm_args):
        self.label, self.total, self.steps = f"train ({mode})", total, 0
        self.bar = tqdm(desc=f"{self.label}: loading data", unit="sample", unit_scale=True,
                        bar_format=_SETUP_FORMAT, **{"disable": None, "leave": False,
                                                     **tqdm_args})

    def phase(self, text) -> None:
        """A setup phase starts (`hotline.train.train`'s ``phase``)."""
        if text == TRAINING:
            self.bar.bar_format = _NO_ETA_FORMAT
            self.bar.set_description(self.label, refresh=False)
            self.bar.reset(total=self.total)  # its clock restarts: the rate is the steps'
        else:
            self.bar.set_description_str(f"{self.label}: {text}")

    def step(self, n, loss) -> None:
        """A step of ``n`` samples trained (``train``'s ``progress``)."""
        self.steps += 1
        if self.steps == ETA_AFTER_STEPS:
            self.bar.bar_format = None
        self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


def _train(args, cfg, lead) -> int:
    started = getattr(args, "started", None)
    if not lead:  # no bar: tqdm's lock is a semaphore a killed rank would leak
        train(_data(args, cfg), cfg, started=started)
        return 0
    bar = TrainBar(cfg.mode, None)
    try:
        data = _data(args, cfg)
        bar.total = data.n_train * cfg.epochs
        res = train(data, cfg, bar.step, phase=bar.phase, started=started)
    finally:
        bar.close()
    base = args.compare_report
    if base is not None:
        res["compare"] = {"report": args.compare, **comparison(res, base)}
        if not res["compare"]["same_data"]:
            res["notes"].append(f"--compare {args.compare} ran on {base['data']} "
                                f"({base['train_samples']:,} train samples), this run on "
                                f"{res['data']} ({res['train_samples']:,})")
    for n in res["notes"]:
        say(f"hotline: note: {n}")
    if args.plot:
        plot_training(args.plot, res, base)
        res["plot"] = args.plot
    write_json(args.json, res)
    print(table(summary_rows(res), ["", "value"]))
    return 0
