"""The run configuration of `hotline.train.train`: modes, optimizers, `TrainConfig` and its check."""
import os
from dataclasses import dataclass

from hotline.contract.errors import HotlineError
from hotline.nn.hot_set import LEARN_FRACTION, parse_refresh

MODES = ("baseline", "hotline", "device-only")
OPTIMIZERS = ("sgd", "adagrad")
MICRO_BATCHES = ("auto", "split", "fused")
HOT_SETS = ("exact", "learn")
DEFAULT_LR = {"sgd": 0.1, "adagrad": 0.005}
ADAGRAD_EPS = 1e-8
# The default hot set (hotline mode, no --hot-rows / --hot-bytes / --hot-fraction): this share
# of the torch device's memory, as FAE sizes its hot embeddings to a GPU memory budget.
HOT_MEMORY_SHARE = 0.25


@dataclass
class TrainConfig:
    """One training run. Field names are the `hotline train` options' (``--batch-size`` is
    ``batch_size``); `check` validates them and fills in the default ``lr``."""
    mode: str = "hotline"
    batch_size: int = 1024
    hot_rows: int | None = None      # the hot set: at most one of these three
    hot_bytes: int | None = None
    hot_fraction: float | None = None  # of the tables' rows
    device_url: str = "model://"
    epochs: int = 1
    seed: int = 0
    optimizer: str = "sgd"
    lr: float | None = None
    dim: int = 16
    bottom: tuple = (512, 256, 64)
    top: tuple = (512, 256)
    test_fraction: float = 0.1
    profile_fraction: float | None = None  # default 1.0 (exact) or LEARN_FRACTION (learn)
    hot_set: str = "exact"           # hotline: planned exactly, or learned by the device
    refresh: str = "off"             # hotline: off | auto | every:N (steps)
    learn_window: int | None = None  # samples the learner counts per refresh (default: the
    #                                   profiling window)
    micro_batches: str = "auto"      # hotline: fused (one pass); split: popular samples first
    max_ind_range: int | None = None
    checkpoint: str | None = None
    checkpoint_every: int = 0        # steps; 0: at the end of each epoch only
    resume: str | None = None
    max_steps: int | None = None     # stop after this many steps in all (resume continues)
    host_memory: int | None = None   # bytes; default: available RAM
    device_memory: int | None = None  # bytes; default: free device memory (RAM for cpu)
    torch_device: str | None = None  # default: cuda if available else cpu
    threads: int | None = None       # torch intra-op threads (default: torch's choice)
    nproc: int = 1                   # data-parallel ranks started on this node (`dist.launch`)
    dist_timeout: float = 300.0      # seconds a collective waits for the other ranks

    def check(self) -> "TrainConfig":
        """Validate (one-line `HotlineError`), set the default ``lr``; returns self."""
        if self.mode not in MODES:
            raise HotlineError(f"--mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.optimizer not in OPTIMIZERS:
            raise HotlineError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, not {self.optimizer!r}")
        if self.micro_batches not in MICRO_BATCHES:
            raise HotlineError(f"--micro-batches must be one of {', '.join(MICRO_BATCHES)}, "
                               f"not {self.micro_batches!r}")
        if self.batch_size is None or self.batch_size <= 0:
            raise HotlineError(f"--batch-size must be a positive integer, not {self.batch_size}")
        given = [f"--{k.replace('_', '-')}" for k in ("hot_rows", "hot_bytes", "hot_fraction")
                 if getattr(self, k) is not None]
        if len(given) > 1:
            raise HotlineError(f"give one of --hot-rows, --hot-bytes, --hot-fraction, not "
                               f"{' and '.join(given)}")
        if self.hot_rows is not None and self.hot_rows <= 0:
            raise HotlineError(f"--hot-rows must be a positive integer, not {self.hot_rows}")
        if self.hot_bytes is not None and self.hot_bytes <= 0:
            raise HotlineError(f"--hot-bytes must be positive, not {self.hot_bytes}")
        if self.hot_fraction is not None and not 0.0 < self.hot_fraction <= 1.0:
            raise HotlineError(f"--hot-fraction must be in (0, 1], not {self.hot_fraction}")
        if self.hot_set not in HOT_SETS:
            raise HotlineError(f"--hot-set must be one of {', '.join(HOT_SETS)}, not "
                               f"{self.hot_set!r}")
        parse_refresh(self.refresh)
        if self.mode != "hotline" and (self.hot_set != "exact" or self.refresh != "off"):
            raise HotlineError(f"--hot-set {self.hot_set} and --refresh {self.refresh} are for "
                               f"--mode hotline, not {self.mode}")
        if self.learn_window is not None and self.learn_window < self.batch_size:
            raise HotlineError(f"--learn-window {self.learn_window} samples is shorter than one "
                               f"batch (--batch-size {self.batch_size})")
        if self.profile_fraction is None:
            self.profile_fraction = LEARN_FRACTION if self.hot_set == "learn" else 1.0
        if self.epochs <= 0:
            raise HotlineError(f"--epochs must be a positive integer, not {self.epochs}")
        if self.dim <= 0:
            raise HotlineError(f"--dim must be a positive integer, not {self.dim}")
        if not 0.0 <= self.test_fraction < 1.0:
            raise HotlineError(f"--test-fraction must be in [0, 1), not {self.test_fraction}")
        if self.lr is None:
            self.lr = DEFAULT_LR[self.optimizer]
        if not self.lr > 0:
            raise HotlineError(f"--lr must be positive, not {self.lr}")
        if self.nproc < 1:
            raise HotlineError(f"--nproc must be a positive integer, not {self.nproc}")
        if not self.dist_timeout > 0:
            raise HotlineError(f"--dist-timeout must be positive, not {self.dist_timeout}")
        self.bottom, self.top = tuple(self.bottom), tuple(self.top)
        return self


TORCH_DEVICES = ("cpu", "cuda")  # the device types the trainers know (memory, copies, NCCL)


def parse_torch_device(text) -> str:
    """``text`` if it names a device type the trainers support (``cpu``, ``cuda``,
    ``cuda:N``); a one-line `HotlineError` otherwise. Needs no torch (the CLI's argument check)."""
    kind, colon, index = text.partition(":")
    if kind not in TORCH_DEVICES or (colon and not (index.isdigit() and kind == "cuda")):
        raise HotlineError(f"--torch-device {text!r}: expected cpu, cuda or cuda:N")
    return text


def torch_device(name):
    """The `torch.device` of --torch-device ``name`` (None: cuda if available, else cpu),
    checked against this torch build and machine: a one-line `HotlineError` for a device it
    does not have."""
    import torch  # lazy: torch takes seconds to import; `hotline --help` needs none
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(parse_torch_device(name))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch was built without CUDA" if torch.version.cuda is None
                   else "no CUDA GPU is visible")
            raise HotlineError(f"--torch-device {name}: {why} (torch {torch.__version__}); "
                               f"use --torch-device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise HotlineError(f"--torch-device {name}: this machine has "
                               f"{torch.cuda.device_count()} CUDA GPU(s)")
    return dev


def lead_rank() -> bool:
    """Whether this process is rank 0 of a launch (or not launched): it writes shared files."""
    return int(os.environ.get("RANK", "0")) == 0


def world_size() -> int:
    """The ranks a launcher (torchrun) started, from the environment; 1 without one."""
    return int(os.environ.get("WORLD_SIZE", "1"))
