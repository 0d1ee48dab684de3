"""Checkpoints: atomic save (the previous checkpoint stays until the new one is complete and
on disk), removal of the partial file a killed write left, load with the checks that a resumed
run is the same run (settings, data, position) and that the file is the one written (its
sha256), and the restore of a trainer from one."""
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hotline.contract.errors import HotlineError
from hotline.data.readers import partial_path, write_atomic

from hotline.data.report import fmt_bytes

CHECKPOINT_FORMAT = "hotline-train-checkpoint/2"  # /2: with "sha256" (`content_digest`)
# Fields of TrainConfig that must match between a checkpoint and the run resuming it.
RESUME_FIELDS = ("mode", "batch_size", "hot_rows", "hot_bytes", "hot_fraction", "seed",
                 "optimizer", "lr", "dim", "bottom", "top", "test_fraction", "profile_fraction",
                 "max_ind_range", "hot_set", "refresh", "learn_window")


def data_fingerprint(data) -> dict:
    """What identifies the training data: name, sizes and a CRC of keys, labels, dense."""
    return {"name": data.name, "samples": data.num_samples, "n_train": data.n_train,
            "table_sizes": [int(x) for x in data.table_sizes], "crc32": data.crc32()}


def save_checkpoint(path, trainer, state, totals, tables) -> None:
    """Write ``state`` (the run's progress) with the trainer's model, optimizer, ``tables``,
    hot keys, counters and run ``totals`` (`Trainer.totals`) to ``path``, atomically and
    durably."""
    import torch  # lazy: torch takes seconds to import; the CLI's checks before a run need none
    obj = dict(state)
    obj["format"] = CHECKPOINT_FORMAT
    obj["model"] = trainer.model.state_dict()
    obj["optimizer"] = trainer.opt.state_dict()
    obj["tables"] = [torch.from_numpy(t) for t in tables]
    hot_keys = getattr(trainer.embedding, "hot_keys", None)
    obj["hot_keys"] = None if hot_keys is None else torch.from_numpy(hot_keys.astype(np.int64))
    schedule = getattr(trainer.embedding, "schedule", None)
    obj["hot_schedule"] = schedule.state() if schedule is not None else None
    obj["counters"] = totals["counters"]
    obj["bytes"] = [totals["bytes_h2d"], totals["bytes_d2h"]]
    obj["host_rows_seconds"] = totals["host_rows_seconds"]
    obj["device_seconds"], obj["device_wait_seconds"] = trainer.device_time()
    obj["sha256"] = content_digest(obj)
    # The previous checkpoint stays in place until the new one is complete and on disk.
    write_atomic(path, lambda f: torch.save(obj, f))


def content_digest(obj) -> str:
    """sha256 (hex) of a checkpoint's content as `torch.load` gives it back: every tensor's
    dtype, shape and bytes and every other value, in order. A byte changed anywhere in the
    file changes it (or makes the file unreadable)."""
    import torch  # lazy: (see save_checkpoint)
    h = hashlib.sha256()

    def walk(x):
        if isinstance(x, torch.Tensor):
            h.update(f"T{x.dtype}{tuple(x.shape)}".encode())
            t = x.detach().cpu().contiguous().reshape(-1)
            if t.stride(0) != 1:  # an expanded scalar or an empty tensor counts as contiguous
                t = torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)
            h.update(t.view(torch.uint8).numpy())
        elif isinstance(x, dict):
            h.update(f"D{len(x)}".encode())
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, (list, tuple)):
            h.update(f"L{len(x)}".encode())
            for v in x:
                walk(v)
        else:
            h.update(f"{type(x).__name__}:{x!r};".encode())
    walk(obj)
    return h.hexdigest()


def remove_stale_partial(path, notes) -> None:
    """Delete the temporary file of a checkpoint write that was killed (`write_atomic` removes
    it itself on any error it sees); ``path`` itself, if present, is the last complete one."""
    tmp = partial_path(path)
    if tmp.exists() and not tmp.is_file():
        raise HotlineError(f"{tmp}: not a file, and in the way of checkpoint writes to {path}")
    if tmp.is_file():
        size = tmp.stat().st_size
        try:
            tmp.unlink()
        except OSError as e:
            raise HotlineError(f"{tmp}: cannot remove this stale partial checkpoint "
                               f"({e.strerror})") from None
        notes.append(f"removed {tmp} ({fmt_bytes(size)}), left by an interrupted checkpoint "
                     f"write; {path} is the last complete checkpoint"
                     if Path(path).is_file() else
                     f"removed {tmp} ({fmt_bytes(size)}), left by an interrupted checkpoint write")


def remove_stale_partials(cfg) -> list[str]:
    """`remove_stale_partial` for the run's --checkpoint and --resume; the notes it made."""
    notes = []
    for path in dict.fromkeys(p for p in (cfg.checkpoint, cfg.resume) if p):
        remove_stale_partial(path, notes)
    return notes


def load_checkpoint(path, cfg, data) -> dict:
    """The checkpoint at ``path``, after checking that its content matches its sha256 and
    that it was taken by a run with the same `RESUME_FIELDS`, on the same data, and not past
    ``cfg.epochs``."""
    import torch  # lazy: (see save_checkpoint)
    p = Path(path)
    if not p.is_file():
        raise HotlineError(f"{path}: no such checkpoint")
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:
        raise HotlineError(f"{path}: not a readable checkpoint ({type(e).__name__})") from None
    if isinstance(obj, dict) and obj.get("format") == "hotline-train-checkpoint/1":
        raise HotlineError(f"{path}: checkpoint of an earlier hotline, without a checksum; "
                           f"train again without --resume")
    if not isinstance(obj, dict) or obj.get("format") != CHECKPOINT_FORMAT:
        raise HotlineError(f"{path}: not a hotline training checkpoint")
    if obj.pop("sha256", None) != content_digest(obj):
        raise HotlineError(f"{path}: corrupt checkpoint (its content does not match its sha256)")
    saved = obj["config"]
    for k in RESUME_FIELDS:
        a, b = saved.get(k), getattr(cfg, k)
        if isinstance(a, list):
            a = tuple(a)
        if a != b:
            raise HotlineError(f"{path}: checkpoint has --{k.replace('_', '-')} {a}, this run {b}")
    if obj["data"] != data_fingerprint(data):
        raise HotlineError(f"{path}: checkpoint was taken on other data ({obj['data']['name']}, "
                           f"{obj['data']['samples']} samples)")
    if obj["position"][0] > cfg.epochs or (obj["position"][0] == cfg.epochs and obj["position"][1]):
        raise HotlineError(f"{path}: checkpoint is past --epochs {cfg.epochs}")
    return obj


def restore(trainer, ckpt) -> None:
    """Load a checkpoint's model, optimizer, tables, counters and traffic into ``trainer``
    (set up already; the hot keys went in before `setup`)."""
    trainer.model.load_state_dict(ckpt["model"])
    trainer.opt.load_state_dict(ckpt["optimizer"])
    trainer.load_tables([t.numpy() for t in ckpt["tables"]])
    trainer.counters_base = dict(ckpt["counters"])
    if trainer.lead:  # run totals: the report sums them over the ranks
        trainer.bytes_h2d += ckpt["bytes"][0]
        trainer.bytes_d2h += ckpt["bytes"][1]
        trainer.host_rows_seconds += ckpt.get("host_rows_seconds", 0.0)
        trainer.device_time_base = (ckpt["device_seconds"],
                                    ckpt.get("device_wait_seconds", 0.0))


@dataclass
class Progress:
    """How far a run is: the position (epoch, next batch) and what the report is made of so
    far. A checkpoint holds it beside the trainer's state; a resumed run continues from it."""
    epoch: int = 0
    batch: int = 0
    losses: list = field(default_factory=list)
    history: list = field(default_factory=list)
    step_seconds: list = field(default_factory=list)
    # per step, the device's busy seconds and the trainer's seconds waiting for it
    step_device: list = field(default_factory=list)
    seconds: float = 0.0
    samples: int = 0
    epoch_acc: dict = field(default_factory=lambda: {"loss": 0.0, "samples": 0, "seconds": 0.0})

    @classmethod
    def from_checkpoint(cls, ckpt) -> "Progress":
        epoch, batch = ckpt["position"]
        return cls(epoch, batch, list(ckpt["losses"]), list(ckpt["history"]),
                   list(ckpt["step_seconds"]), [list(d) for d in ckpt.get("step_device", [])],
                   ckpt["seconds"], ckpt["samples"], dict(ckpt["epoch_acc"]))

    def add_step(self, loss, samples, seconds, device=(0.0, 0.0)) -> None:
        """Account one training step of ``samples`` samples; ``device``: (busy, waited-for)
        seconds of the accelerator in it."""
        self.losses.append(loss)
        self.step_seconds.append(seconds)
        self.step_device.append(list(device))
        self.seconds += seconds
        self.samples += samples
        acc = self.epoch_acc
        acc["loss"] += loss * samples
        acc["samples"] += samples
        acc["seconds"] += seconds

    def epoch_entry(self, test_logloss, test_auc, steps) -> dict:
        """The `history` entry of the epoch so far, its ``steps`` steps."""
        acc = self.epoch_acc
        return {"epoch": self.epoch + 1, "train_logloss": acc["loss"] / acc["samples"],
                "test_logloss": test_logloss, "test_auc": test_auc,
                "samples_per_s": acc["samples"] / acc["seconds"] if acc["seconds"] else 0.0,
                "seconds": acc["seconds"], "steps": steps}

    def end_epoch(self, test_logloss, test_auc, steps) -> None:
        """Close the epoch: its `history` entry; the position moves to the next epoch."""
        self.history.append(self.epoch_entry(test_logloss, test_auc, steps))
        self.epoch_acc = {"loss": 0.0, "samples": 0, "seconds": 0.0}
        self.epoch, self.batch = self.epoch + 1, 0

    def state(self, position) -> dict:
        """The checkpoint's progress fields, at ``position`` (epoch, next batch)."""
        return {"position": list(position), "losses": self.losses, "history": self.history,
                "step_seconds": self.step_seconds, "step_device": self.step_device,
                "seconds": self.seconds,
                "samples": self.samples, "epoch_acc": self.epoch_acc}
