"""Command-line options shared by `hotline` (`hotline.cli`) and `hotline train`
(`hotline.cli.train_command`): the DATA help text, argparse number types, and the check that
an output path can be written before any work starts. Every error is a one-line
`HotlineError` or an argparse error."""
import argparse
import os
import sys
import tempfile
from pathlib import Path

from hotline.contract.errors import HotlineError

from .readers import output_target

__all__ = ["EPILOG_DATA", "positive_int", "seed_int", "fraction", "say", "check_out"]

EPILOG_DATA = """DATA is a Criteo Kaggle CSV, raw Criteo TSV, Weka ARFF, index-stream .npz,
RecBole .inter, Alimama DMR CSV or 'user item item ...' list (optionally .gz), a shard
directory written by 'hotline data convert --shards' (or its index.json), or
synth:criteo-kaggle:SAMPLES[:SEED][:drift=RATE] for the built-in calibrated generator
(drift: the fraction of the hot rows replaced per 100,000 samples, or 'real')."""


def _integer(text) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text) -> int:
    """argparse type: an integer > 0."""
    v = _integer(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {v}")
    return v


def seed_int(text) -> int:
    """argparse type: a random seed, an integer >= 0 (numpy's generators take no other)."""
    v = _integer(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {v}")
    return v


def fraction(text, low_open=True) -> float:
    """A float in (0, 1] (``low_open``) or [0, 1) (for a held-out share)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if low_open and not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], not {v}")
    if not low_open and not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), not {v}")
    return v


def say(msg) -> None:
    """A note or progress line for the user, on stderr."""
    print(msg, file=sys.stderr)


def _nearest_existing(path):
    """``path`` or its nearest existing ancestor."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _probe_writable(directory):
    """True when a file can be created in the existing ``directory`` (tried, not guessed:
    os.access says yes to root on read-only mounts and in /proc)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".hotline-probe-", dir=directory)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def check_out(path, option=None, directory=False) -> None:
    """Fail (HotlineError, one line) before any work if the output ``path`` cannot be written:
    it names a directory (a file is wanted) or a file (a directory is wanted), a component of
    its parent is a file, or the nearest existing directory is not writable. Nothing is
    created. A file goes where `output_target` says: an existing device or FIFO, written
    straight into, needs write permission on itself only."""
    shown = f"{option} {path}" if option else str(path)
    if str(path) == "":
        raise HotlineError(f"{option or 'output'}: empty path")
    p = Path(path).expanduser().absolute()
    if not directory:
        p, straight = output_target(path, option)
        if straight:
            if not os.access(p, os.W_OK):
                raise HotlineError(f"{shown}: cannot write it (permission denied)")
            return
    if p.exists():
        if directory and not p.is_dir():
            raise HotlineError(f"{shown}: is a file, not a directory")
        if not directory and p.is_dir():
            raise HotlineError(f"{shown}: is a directory, not a file")
        if not _probe_writable(p if p.is_dir() else p.parent):
            raise HotlineError(f"{shown}: cannot write here (permission denied)")
        return
    near = _nearest_existing(p.parent)
    if not near.is_dir():
        raise HotlineError(f"{shown}: cannot create it: {near} is a file, not a directory")
    if not _probe_writable(near):
        raise HotlineError(f"{shown}: cannot create it: {near} is not writable")
