"""Lookup beats as numpy arrays, without Amaranth (the host runtime and the models use them):
one beat per lookup with its sample and batch marks (`lookup_beats`), and the lane beat each
belongs to with L lanes (`lane_groups`). `hotline.contract.streams` packs them into payloads.
"""
import numpy as np

__all__ = ["lookup_beats", "lane_groups", "learner_sample"]


def lookup_beats(keys, sample_offsets,
                 batch_size) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(key, eos, eob, empty) arrays: one beat per lookup, one ``empty`` beat per empty sample."""
    n = len(sample_offsets) - 1
    lengths = np.diff(sample_offsets)
    beats = np.maximum(lengths, 1)
    ends = np.cumsum(beats) - 1
    total = int(beats.sum())
    key = np.zeros(total, np.uint64)
    empty = np.zeros(total, bool)
    empty[ends[lengths == 0]] = True
    key[~empty] = np.asarray(keys, np.uint64)
    eos = np.zeros(total, bool)
    eos[ends] = True
    eob = np.zeros(total, bool)
    eob[ends[np.r_[np.arange(batch_size - 1, n, batch_size), n - 1]]] = True
    return key, eos, eob, empty


def lane_groups(eob, lanes: int) -> np.ndarray:
    """The lane beat of each of a stream's beats (``eob``: each beat closes its batch):
    ``lanes`` consecutive beats per lane beat, and a batch's first beat starts a new one."""
    eob = np.asarray(eob, bool)
    n = len(eob)
    if not n:
        return np.zeros(0, np.int64)
    starts = np.r_[0, np.nonzero(eob[:-1])[0] + 1]
    pos = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.cumsum(pos % lanes == 0) - 1


def learner_sample(keys, sample_offsets, lanes: int, state=None):
    """(the keys the access learner counts of one batch, the state after it) on an accelerator
    with ``lanes`` lanes: every non-empty lookup at one lane. Else (the learner takes one key
    per cycle) the lookups of one lane beat in L: in the b-th batch since the learner started,
    the beats k (from 0 in the batch) with k = b mod L, except one that comes fewer than L
    beats after the last beat taken. ``state`` (None at the learner's start): (b mod L, beats
    since the last beat taken, at most L - 1)."""
    if lanes == 1:   # every beat is taken; the state stays (0, 0)
        return np.asarray(keys), (0, 0)
    batch, since = state if state is not None else (0, lanes - 1)
    _, _, eob, empty = lookup_beats(keys, sample_offsets, len(sample_offsets) - 1)
    group = lane_groups(eob, lanes)
    beats = int(group[-1]) + 1 if len(group) else 0
    taken = np.arange(batch, beats, lanes)
    if taken.size and since + taken[0] < lanes - 1:
        taken = taken[1:]
    since = min(lanes - 1, beats - 1 - int(taken[-1]) if taken.size else since + beats)
    # taken: every L-th beat from taken[0] (the beats are 0 .. beats - 1)
    take = ((group >= taken[0]) & ((group - taken[0]) % lanes == 0) if taken.size
            else np.zeros(len(group), bool))[~empty]
    return np.asarray(keys)[take], ((batch + (beats > 0)) % lanes, since)
