"""`AcceleratorConfig` and the geometry rules shared by the RTL, the models and the host.

- `AcceleratorConfig`: the geometry of the accelerator's blocks (CAM, cold-key set, batch
  size); the RTL top is built from it (`hotline.hw.accelerator.HotlineAccelerator.from_config`),
  the model and every device backend take it. Its defaults are the product configuration.
- `PRODUCT` (= ``AcceleratorConfig()``): the product configuration, defined here once. The
  ECP5 flow synthesises it (`hotline.fpga.blocks`, ``hotline fpga report accelerator``), the
  board configurations are reduced from it (`hotline.fpga.boards`), and the blocks' and
  models' constructor defaults are its values.
- ``CAM_LOAD``: the CAM holds a hot set of at most this fraction of its entries
  (`AcceleratorConfig.hot_capacity`); `AcceleratorConfig.check_hot_set` refuses a larger one.
- `learner_geometry`: the AccessLearner's size for a top-K hot set; ``LEARNER_WINDOW`` its
  hazard window (the RTL pipeline's and the model's).
- `hot_slot_width` / `cold_slot_width`: the bits of a hot slot (CAM entry or stash entry) and
  of a cold slot (index among a batch's unique cold keys).
"""
import math
from dataclasses import dataclass

import numpy as np

from .errors import HotlineError

__all__ = ["AcceleratorConfig", "PRODUCT", "LANES", "COLD_PARTITIONS", "repeat_window", "COLD_SEEDS",
           "COLD_PARTITION_SEED", "pow2_at_least", "hot_slot_width", "cold_slot_width",
           "max_batch_lookups", "learner_geometry", "LEARNER_WINDOW", "ENTRIES_PER_HOT_KEY",
           "ENTRIES_PER_HOT_KEY_BLIND", "MIN_ENTRIES"]


#: The lane counts an accelerator can be built with.
LANES = (1, 2, 4)
# Cold-key set partitions per lane count. One partition numbers one cold lookup per cycle;
# the Fragmenter sends a beat's cold lookups to distinct partitions in the same cycle. Four
# partitions at two lanes as well: with two, a beat's two cold lookups share a partition half
# the time, and MovieLens / Amazon-book (cold fraction ~0.6) fall to 0.94 / 0.93 lookups per
# cycle per lane in the schedule (`beat_cycles`), against 0.999 / 0.98 with four. Eight at
# four lanes: with four, MovieLens' runs of cold lookups in distinct partitions average 2.2
# keys, 0.903 lookups per cycle per lane; with eight, 0.9996.
# Four partitions make the product's tables 512 buckets deep, which `hw/bram.py` maps at
# 512 x 36: two block RAMs per 54-bit entry, the cold-key set 64 DP16KD, not 48. Beyond four,
# a partition's buckets have half the ways and its stash twice the entries per doubling
# (`AcceleratorConfig.cold_kwargs`): the tables stay 512 deep, 64 DP16KD at eight partitions
# (with 4 ways, 256 deep at 512 x 36, 128: more than the 85F has left), and the set's load at
# its first overflow stays at or above the 0.5 it is sized for: 0.50-0.53 on the hashing
# bench's key families with 2 ways and an 8-entry stash (0.44-0.49 with a 4-entry one; 0.65-0.73
# with 4 ways; `python -m hotline.bench --only hashing`).
COLD_PARTITIONS = {1: 1, 2: 4, 4: 8}
# Epoch bits of the cold-key set per lane count, where the configuration leaves them open: one
# clearing pass (up to 2048 cycles, no lookup entering) every ``2**bits - 1`` batches. At four
# lanes a batch takes a quarter of the cycles, so a pass weighs four times as much: in `make
# sim LANES=4`'s one geometry (2048-cycle passes) Amazon-book, two lookups a sample (512
# cycles a B = 1024 batch), spent 1.3% of its cycles in two passes with 8 bits (0.982 lookups
# per cycle per lane in `beat_cycles` and the RTL), 0.989 with 9, 0.996 with 10 (no pass in
# its 590 batches; one every 1023 batches costs <= 0.4%). Free in block RAM beyond one lane:
# the set's 512-deep tables take two 36-bit DP16KD per entry (72 bits for 53-57). At one lane
# its 2048 x 9 tables would take a seventh block RAM per way beyond 54 bits.
COLD_EPOCH_BITS = {1: 8, 2: 8, 4: 10}


def repeat_window(lanes: int) -> int:
    """Cold lookups back that a repeated key is matched against before it takes a partition:
    with lanes, a cold lookup whose key equals one of the previous L cold lookups of its batch
    takes the answer of the latest of them (its slot; not a new key, no overflow) instead of
    going to the cold set (on Amazon-book a user's key repeats in consecutive samples). One
    lane: 0, none."""
    return lanes if lanes > 1 else 0
# Hash seeds of the cold-key set: its two tables', and the partition's.
COLD_SEEDS = (11, 12)
COLD_PARTITION_SEED = 13


def pow2_at_least(n) -> int:
    """The smallest power of two >= ``n`` (1 for ``n`` <= 1)."""
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _bits_for(n):
    # amaranth.utils.bits_for for n >= 0, without importing Amaranth into the host runtime
    return max(1, int(n).bit_length())


def hot_slot_width(entries: int, stash: int) -> int:
    """Bits of a hot slot: CAM entries ``0 .. entries - 1``, then stash entries
    ``entries .. entries + stash - 1``."""
    return _bits_for(entries + stash - 1)


def cold_slot_width(max_keys: int) -> int:
    """Bits of a cold slot: ``0 .. max_keys - 1`` (a batch's unique cold keys)."""
    return _bits_for(max_keys - 1)


def max_batch_lookups(sample_offsets, batch_size, samples=None) -> int:
    """The most lookups any batch of ``batch_size`` consecutive samples (of the first
    ``samples``; default all) has. ``sample_offsets`` [N + 1]: an array, or anything an int
    indexes (a streamed dataset's offsets), read at the batch boundaries only."""
    n = len(sample_offsets) - 1 if samples is None else samples
    ends = np.r_[np.arange(0, n, batch_size), n]
    if isinstance(sample_offsets, np.ndarray):
        at = sample_offsets[ends]
    else:
        at = np.array([sample_offsets[int(e)] for e in ends], np.int64)
    return int(np.diff(at).max()) if len(ends) > 1 else 0


@dataclass(frozen=True)
class AcceleratorConfig:
    """Geometry of the accelerator's blocks, shared by the model and the RTL backends.

    The defaults are the product configuration (`PRODUCT`): a 16384-entry CAM (2 x 8 ways,
    4-entry stash, 64 kicks) holding 14,745 hot rows; a 16384-entry cold-key set (2 x 4 ways,
    4-entry stash) numbering up to 8192 cold keys per batch, with 8 epoch bits (one clearing
    pass every 255 batches; ``cold_epoch_bits`` None: `COLD_EPOCH_BITS` by lanes); batches of
    up to 1024 samples; a 16384-entry access learner (2048 buckets x 8 ways); one lookup lane
    (``lanes``: lookups per ``lookups`` beat and per cycle, 1, 2 or 4;
    `hotline.contract.streams` has the lane beats).
    `for_workload` sizes the CAM, the cold-key set and the batch for one workload instead.
    """
    cam_entries: int = 16384
    cam_ways: int = 8
    cam_stash: int = 4
    cam_max_kicks: int = 64
    cold_capacity: int = 16384
    cold_ways: int = 4
    cold_stash: int = 4
    cold_max_keys: int = 8192
    cold_epoch_bits: int | None = None
    max_batch_samples: int = 1024
    learner_buckets: int = 2048
    learner_ways: int = 8
    lanes: int = 1

    def __post_init__(self):
        if self.lanes not in LANES:
            raise HotlineError(f"lanes must be one of {', '.join(map(str, LANES))}, not "
                               f"{self.lanes}")

    # The CAM holds the hot set at <= 90% occupancy: its first refused insert came at >= 96%
    # on every key family and real file measured (`python -m hotline.bench --only hashing`).
    # The cold set is sized at 2x the most distinct cold keys a batch can have, where overflow
    # takes 5+ keys in both of a key's buckets and a full stash; ``cold_epoch_bits`` bits mean
    # one clearing pass (``min(cold_capacity // (2 * cold_ways * partitions), 2048)`` cycles:
    # every block-RAM bank at once, `hotline.hw.cold_key_set.ColdKeySet.clear_cycles`) every
    # ``2**cold_epoch_bits - 1`` batches.
    # The product's cold set: with 16384 hot rows and B = 1024 Criteo samples, the distinct
    # cold keys per batch measured 4,211 mean / 4,368 max on the built-in generator (196
    # batches) and 1,983 / 2,480 on the real ``train_random4584`` (``hotline fragment``), so
    # 8192 slots leave 1.9x headroom; a batch beyond them is flagged ``overflow``. A 32768 /
    # 16384 set took 96 of the ECP5-85F's 208 block RAMs and, at 93% block-RAM use, every
    # table's address routes crossed the die.
    CAM_LOAD = 0.9

    @property
    def hot_capacity(self) -> int:
        """The hot rows this CAM holds: ``CAM_LOAD`` of its table entries."""
        return int(self.cam_entries * self.CAM_LOAD)

    def check_hot_set(self, keys: int) -> None:
        """Refuse a hot set of ``keys`` keys larger than `hot_capacity` (`HotlineError`):
        every device backend, and the model's placement, apply this before any insert."""
        if keys > self.hot_capacity:
            raise HotlineError(f"a hot set of {keys} rows does not fit this accelerator: its "
                               f"CAM ({self.cam_entries} entries) holds at most "
                               f"{self.hot_capacity} hot rows")

    @property
    def hot_slots(self) -> int:
        """Hot slots: the CAM's entries, then its stash (slot ``cam_entries + i``)."""
        return self.cam_entries + self.cam_stash

    @classmethod
    def for_workload(cls, hot_rows, batch_size, max_batch_lookups, learn=False,
                     distinct_keys=None, lanes=1) -> "AcceleratorConfig":
        """The geometry for ``hot_rows`` hot keys and batches of ``batch_size`` samples with up
        to ``max_batch_lookups`` lookups: the CAM at <= ``CAM_LOAD``, the cold-key set at 2x the
        lookups; with ``learn``, an access learner sized by `learner_geometry` to learn the
        ``hot_rows`` (``distinct_keys``: of the stream it watches), else the product's;
        ``lanes`` lookup lanes."""
        max_keys = max(16, int(max_batch_lookups))
        buckets, ways = (learner_geometry(max(1, hot_rows), distinct_keys) if learn
                         else (cls.learner_buckets, cls.learner_ways))
        return cls(cam_entries=max(64, pow2_at_least(math.ceil(hot_rows / cls.CAM_LOAD))),
                   cold_capacity=max(64, pow2_at_least(2 * max_keys)), cold_max_keys=max_keys,
                   max_batch_samples=max(2, pow2_at_least(batch_size)),
                   learner_buckets=buckets, learner_ways=ways, lanes=lanes)

    def cam_kwargs(self) -> dict:
        return dict(entries=self.cam_entries, ways=self.cam_ways, stash=self.cam_stash,
                    max_kicks=self.cam_max_kicks)

    @property
    def cold_partitions(self) -> int:
        """Partitions of the cold-key set: 1, 4, 8 at 1, 2, 4 lanes (`COLD_PARTITIONS`)."""
        return COLD_PARTITIONS[self.lanes]

    def cold_kwargs(self) -> dict:
        """The cold-key set's geometry as built (`ColdKeySet`, `ColdKeySetModel`): beyond 4
        partitions, ``cold_ways`` halved and ``cold_stash`` doubled per doubling
        (`COLD_PARTITIONS`)."""
        spread = max(1, self.cold_partitions // 4)
        return dict(capacity=self.cold_capacity, ways=max(1, self.cold_ways // spread),
                    stash=self.cold_stash * spread, max_keys=self.cold_max_keys,
                    epoch_bits=(COLD_EPOCH_BITS[self.lanes] if self.cold_epoch_bits is None
                                else self.cold_epoch_bits),
                    partitions=self.cold_partitions)

    def learner_kwargs(self) -> dict:
        return dict(buckets=self.learner_buckets, ways=self.learner_ways)

    @property
    def learner_entries(self) -> int:
        return self.learner_buckets * self.learner_ways

    def fragmenter_kwargs(self) -> dict:
        return dict(cam=self.cam_kwargs(), cold=self.cold_kwargs(),
                    max_batch_samples=self.max_batch_samples, lanes=self.lanes)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def report(self) -> dict:
        """`as_dict` and, as ``cold_set``, the cold-key set's geometry as built (`cold_kwargs`),
        for the commands' JSON reports."""
        return {**self.as_dict(), "cold_set": self.cold_kwargs()}


#: The product configuration (see the module docstring): `AcceleratorConfig`'s defaults.
PRODUCT = AcceleratorConfig()


# ---- AccessLearner -----------------------------------------------------------------------
# Hazard window: a counted key is dropped when one of the LEARNER_WINDOW keys counted just
# before it has the same bucket and another key. In the RTL these are the keys in flight
# between a key's bucket read and its write-back (the window may not be shorter).
LEARNER_WINDOW = 7

# Sizing (measured on every shared file, ``hotline.sim.bench_access_learner``): a hashed,
# bucketized Space-Saving table must hold several times K on flat streams, because a key
# enters with the bucket's minimum + 1, so late tail keys outrank true top-K keys until the
# minimum is well below the K-th key's count. At 16,384 fixed entries Amazon-book (135,268
# distinct keys) kept 0.67 of the exact top-K coverage; capacity, not the hash or the hazard
# rule, was the gap (plain fully associative Space-Saving of the same size: 0.73).
ENTRIES_PER_HOT_KEY = 8        # entries >= 8 K, and >= half the distinct keys when known
ENTRIES_PER_HOT_KEY_BLIND = 16  # entries >= 16 K when the distinct-key count is not known
MIN_ENTRIES = 4096             # >= 512 buckets: the hazard rule drops <= ~1% of the lookups


def learner_geometry(k, distinct_keys=None, ways=8) -> tuple[int, int]:
    """``(buckets, ways)`` of an AccessLearner that learns a top-``k`` hot set.

    entries = buckets * ways = the next power of two >= max(8 k, distinct_keys / 2), at most
    the next power of two >= 2 * distinct_keys (the table then holds every key), at least
    ``MIN_ENTRIES``; without ``distinct_keys``, >= 16 k. Measured on every shared file at
    K = 5% and 10% of the distinct keys (and K/D from 3% to 20%): >= 0.98 of the exact top-K
    coverage on Criteo, >= 0.95 on MovieLens and Amazon-book.
    """
    if k < 1:
        raise ValueError(f"k must be positive, not {k}")
    if distinct_keys:
        entries = min(pow2_at_least(max(ENTRIES_PER_HOT_KEY * k, distinct_keys / 2)),
                      pow2_at_least(2 * distinct_keys))
    else:
        entries = pow2_at_least(ENTRIES_PER_HOT_KEY_BLIND * k)
    entries = max(entries, MIN_ENTRIES, ways)
    return entries // ways, ways
