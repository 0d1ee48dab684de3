"""`train`: one run of a mode over the data: epochs of steps, evaluation after each epoch,
checkpoints, the stop after --max-steps, resume, and the JSON report."""
import math
import time

import numpy as np

from hotline.contract.errors import HotlineError
from hotline.nn.hot_set import HotSetSchedule

from .checkpoint import (RESUME_FIELDS, Progress, data_fingerprint, load_checkpoint,
                         remove_stale_partials, restore, save_checkpoint)
from .config import lead_rank
from .report import build_report

TRAINING = "training"  # `train`'s last phase: the steps start


def train(data, cfg, progress=None, keep=False, phase=None, started=None) -> dict | tuple:
    """Train ``data`` (a `TrainData`) as ``cfg`` (a `TrainConfig`) says. Returns the JSON
    report; with ``keep``, (report, trainer) and the caller closes the trainer (tests read its
    tables). ``progress(samples, loss)`` is called after every step; ``phase(text)`` as each
    setup phase starts, and with `TRAINING` before the first step. ``started``: the
    `time.time` the run began (default: now), from which the report's setup_seconds and
    wall_seconds count."""
    started = time.time() if started is None else started
    phase = phase or (lambda text: None)
    cfg.check()
    notes = remove_stale_partials(cfg) if lead_rank() else []
    if cfg.resume:
        phase("loading the checkpoint")
    ckpt = load_checkpoint(cfg.resume, cfg, data) if cfg.resume else None
    phase("building the model")
    # lazy: the trainer imports torch (seconds); `hotline --help` and the CLI's checks need none
    from .trainer import Trainer
    trainer = Trainer(data, cfg, notes)
    trainer.phase = phase
    if ckpt is not None and ckpt["hot_keys"] is not None:
        trainer.embedding.hot_keys = ckpt["hot_keys"].numpy().astype(np.uint32)
    if ckpt is not None and ckpt.get("hot_schedule") is not None:
        trainer.embedding.schedule = HotSetSchedule.from_state(ckpt["hot_schedule"])
    try:
        trainer.setup()
        report = _run(trainer, data, cfg, ckpt, progress, notes, phase, started)
    except BaseException:
        trainer.close()
        raise
    if keep:
        return report, trainer
    trainer.close()
    return report


def _run(trainer, data, cfg, ckpt, progress, notes, phase, started):
    nb = trainer.num_batches()
    if ckpt is None:
        run = Progress()
    else:
        restore(trainer, ckpt)
        run = Progress.from_checkpoint(ckpt)
        notes.append(f"resumed from {cfg.resume} at epoch {run.epoch + 1}, step {run.batch + 1}")
    fp = data_fingerprint(data) if trainer.lead else None  # only rank 0 saves; it reads it all
    cfg_saved = {k: getattr(cfg, k) for k in RESUME_FIELDS}
    step = run.epoch * nb + run.batch
    trainer.step = step
    trainer.embedding.resume_at(step)
    schedule = getattr(trainer.embedding, "schedule", None)
    if schedule is not None:
        schedule.resume_at(step)
    stop = cfg.max_steps

    def save(position):
        totals = trainer.totals()
        trainer.quiesce()
        tables = trainer.checkpoint_tables()
        if trainer.lead:
            save_checkpoint(cfg.checkpoint, trainer,
                            {"config": cfg_saved, "data": fp, **run.state(position)}, totals,
                            tables)

    stopped = False
    phase(TRAINING)
    training_started = time.time()
    while run.epoch < cfg.epochs and not stopped:
        for j in range(run.batch, nb):
            last = j == nb - 1
            halt = stop is not None and step + 1 >= stop
            due = bool(cfg.checkpoint) and (last or halt or (cfg.checkpoint_every > 0 and
                                                              (step + 1) % cfg.checkpoint_every == 0))
            t0, (busy0, wait0) = time.perf_counter(), trainer.device_time()
            c0 = trainer.collective_seconds()
            loss = trainer.train_batch(j, prefetch=not (due or halt))
            dt, (busy1, wait1) = time.perf_counter() - t0, trainer.device_time()
            trainer.step_collective_seconds += trainer.collective_seconds() - c0
            if not math.isfinite(loss):
                raise HotlineError(f"the loss is {loss} at epoch {run.epoch + 1}, step {j + 1}; "
                                   f"lower --lr (now {cfg.lr})")
            s0, s1 = trainer.batch_range(j)
            run.add_step(loss, s1 - s0, dt, (busy1 - busy0, wait1 - wait0))
            step += 1
            if progress is not None:
                progress(s1 - s0, loss)
            if due and not last:
                save((run.epoch, j + 1))
            if halt and not last:
                stopped = True
                break
        if stopped:
            break
        run.end_epoch(*trainer.evaluate(), steps=nb)
        if cfg.checkpoint:
            save((run.epoch, 0))
        if stop is not None and step >= stop:
            stopped = True
    if stopped and run.epoch < cfg.epochs:
        notes.append(f"stopped after {step} steps (--max-steps)")
        if run.epoch_acc["samples"]:  # cut mid-epoch: the report's figures over its steps
            run.history.append({**run.epoch_entry(*trainer.evaluate(), steps=j + 1),
                                "partial": True})
    if cfg.mode == "hotline":
        trainer.sync(count=True)
    return build_report(trainer, data, cfg, run, notes,
                        {"setup_seconds": training_started - started,
                         "wall_seconds": time.time() - started})
