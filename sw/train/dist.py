"""Data-parallel training over torch.distributed (docs/distributed.md).

A run of N ranks (`launch`, or ``torchrun ... -m hotline train``) splits every global batch of
B samples into N contiguous shards (`Ranks.shard`, `hotline.nn.dist`); each rank trains its
shard, and:

- the dense MLPs' gradients are summed over the ranks in one flat all-reduce
  (`Ranks.all_reduce_grads`), so every rank takes the same optimizer step;
- embedding rows in host memory (one shared file per node) are updated once, by their owner
  rank (``row % N``), with the gradient summed over the ranks (`Ranks.owner_sum`: counts, ids
  and gradients through ``all_to_all_single``, which gloo has);
- replicated rows (the hot table, device-only tables) get the summed gradient of every row
  any rank touched, on every rank (`Ranks.all_sum`: an all-gather of the touched rows), so the
  replicas stay identical.

Rank 0 writes the JSON, the plot and the checkpoints; a checkpoint holds no rank state, so a
run saved with N ranks resumes with M. A collective that fails (a rank died, or timed out
after ``--dist-timeout``) ends the rank with one line naming it.
"""
import datetime
import logging
import os
import signal
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from hotline.contract.errors import HotlineError
from hotline.nn.dist import Ranks, first_line

DEFAULT_TIMEOUT = 300.0  # seconds a collective may wait for the other ranks


def init_from_env(timeout=DEFAULT_TIMEOUT) -> Ranks | None:
    """Join the process group a launcher (`launch`, torchrun) described in the environment
    (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): gloo on CPU, NCCL with CUDA. None when
    there is no launcher or one rank."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    except (RuntimeError, ValueError, dist.DistError) as e:
        raise HotlineError(f"rank {os.environ.get('RANK', '?')}: cannot join the process group "
                           f"({first_line(e)})") from None
    return Ranks()


def shutdown(finished=True) -> None:
    """Leave the process group. After a finished run, every rank first waits for the others,
    so no rank's exit takes away the rendezvous store (hosted by one node's launcher) while
    another still uses it; after an error, at once (the others may be in any collective)."""
    if dist.is_initialized():
        try:
            if finished:
                Ranks().barrier()
        finally:
            dist.destroy_process_group()


def launch(entry, args, nproc, timeout=DEFAULT_TIMEOUT):
    """Run ``entry(*args)`` on ``nproc`` local ranks through torch's elastic launcher (what
    torchrun uses): a rendezvous on a free local port, no restarts. Returns rank 0's result.
    A rank that fails ends the others; the error names the first rank that failed and its
    message (``entry`` writes it to ``$HOTLINE_ERROR_DIR/rank<R>``)."""
    # (the agent's module loggers set their own level: "Received 2 death signal" on Ctrl-C)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.multiprocessing")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    # A rank killed by a signal cannot release its semaphores, and the resource tracker that
    # notices would warn on stderr after the one-line error; the trackers (started by the
    # launcher and the ranks) read their warning filters from the environment.
    warnings_before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [
        warnings_before, "ignore:resource_tracker:UserWarning"]))
    with tempfile.TemporaryDirectory(prefix="hotline-ranks-") as errors:
        os.environ["HOTLINE_ERROR_DIR"] = errors
        cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id="hotline",
                           rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0,
                           monitor_interval=0.1, start_method="spawn",
                           rdzv_configs={"timeout": int(timeout)})
        try:
            return elastic_launch(cfg, entry)(*args)[0]
        except ChildFailedError as e:
            raise HotlineError(_failure(e, errors)) from None
        except SignalException as e:
            # the agent turned a signal into this after stopping the ranks: Ctrl-C ends the
            # run as in one process (KeyboardInterrupt); another signal, after the clean-up
            # below, ends this process as it would have ended it
            if e.sigval == signal.SIGINT:
                raise KeyboardInterrupt from None
            killed_by = e.sigval
        finally:
            os.environ.pop("HOTLINE_ERROR_DIR", None)
            if warnings_before is None:
                os.environ.pop("PYTHONWARNINGS", None)
            else:
                os.environ["PYTHONWARNINGS"] = warnings_before
    signal.signal(killed_by, signal.SIG_DFL)
    os.kill(os.getpid(), killed_by)


def _failure(e, errors) -> str:
    """One line on the first rank that failed."""
    rank, f = min(e.failures.items(), key=lambda kv: kv[1].timestamp)
    path = os.path.join(errors, f"rank{rank}")
    if os.path.exists(path):
        with open(path) as fh:
            return fh.read().strip()
    if f.exitcode < 0:
        return f"rank {rank} died (signal {f.signal_name()})"
    return f"rank {rank} exited with code {f.exitcode}"


def record_error(message) -> None:
    """Leave ``message`` for `launch` (a rank's one-line error)."""
    d = os.environ.get("HOTLINE_ERROR_DIR")
    if d:
        with open(os.path.join(d, f"rank{os.environ.get('RANK', '0')}"), "w") as fh:
            fh.write(message)
