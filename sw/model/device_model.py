"""Reference model of the accelerator's mini-batch fragmentation (docs/design.md semantics).

Given a placed hot set (key -> hot slot), each mini-batch of consecutive samples is split into
a popular micro-batch (samples all of whose lookups are hot) and a non-popular one, both in
input order; every lookup is remapped to its hot slot, or to its cold slot = index of its key
among the batch's unique cold keys in order of first appearance; and the counters the CSR
block exposes are accumulated. The hot slot is whatever the placement says (the CAM's physical
entry address for the hardware placement); `HotIndex` only caches key -> slot.

Everything is vectorised per batch; the per-lookup work is a handful of numpy passes.
"""
from dataclasses import dataclass, field

import numpy as np

from hotline.contract.config import AcceleratorConfig, repeat_window
from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_TABLES, ROW_BITS
from hotline.contract.beats import lane_groups, lookup_beats

from .cold_key_set import ColdKeySetModel, first_appearance
from .compiled import compiled
from .popularity_cam import PopularityCAMModel

# Dense mode holds two int32 arrays (key -> slot, dedup scratch) over every table row: 8 bytes
# per row. Beyond this many rows, binary search instead.
DENSE_INDEX_LIMIT = 1 << 28


class HotIndex:
    """Vectorised key -> hot slot lookup (-1 = miss) over a placed hot set.

    With ``table_sizes`` (rows of tables 0, 1, ...; 0: no such table) whose sum is at most
    `DENSE_INDEX_LIMIT`, a dense array indexed by global row answers in one gather (a second
    one is the cold-key dedup's scratch). A batch with a key outside those rows (a table beyond
    them, or a row beyond its table) takes the binary search over the sorted hot keys, as
    every batch does without table sizes: both give the same answers.
    """

    def __init__(self, keys, slots, table_sizes=None):
        keys = np.asarray(keys, np.uint32)
        slots = np.asarray(slots, np.int64)
        if keys.shape != slots.shape:
            raise ValueError("keys and slots differ in length")
        if len(np.unique(keys)) != len(keys):
            raise HotlineError("hot set has duplicate keys")
        if len(np.unique(slots)) != len(slots) or (slots.size and slots.min() < 0):
            raise HotlineError("hot slots must be distinct and non-negative")
        self.keys, self.slots = keys, slots
        order = np.argsort(keys)
        self.sorted_keys, self.sorted_slots = keys[order], slots[order].astype(np.int32)
        self.offsets = None
        if table_sizes is not None and int(np.sum(table_sizes)) <= DENSE_INDEX_LIMIT:
            sizes = np.zeros(MAX_TABLES, np.int64)
            sizes[:len(table_sizes)] = table_sizes
            self.offsets = np.concatenate([[0], np.cumsum(sizes)])
            # a key's global row = key + delta[table] (one gather, one add); the key is inside
            # the tables iff that is below its table's end
            self.delta = self.offsets[:-1] - (np.arange(MAX_TABLES, dtype=np.int64) << ROW_BITS)
            self.end = self.offsets[1:]
            self.dense = np.full(int(self.offsets[-1]), -1, np.int32)
            # written now (np.full writes, np.empty/zeros map lazily): no batch pays for the
            # first touch of its pages
            self.scratch = np.full(int(self.offsets[-1]), 0, np.int32)
            self._seen = None   # `distinct_keys`' bitmap, made on first use
            rows, inside = self._rows(keys)
            self.dense[rows[inside]] = slots[inside]
            # a bit per table row, set where it is hot (`cold_lookups`)
            self.hot_bits = np.packbits(self.dense >= 0, bitorder="little")
        else:
            self.delta = None

    def _rows(self, keys):
        """(global row of each key, int64; the key is inside the tables), dense mode only."""
        keys = keys.astype(np.int64)
        table = keys >> ROW_BITS
        rows = keys + self.delta.take(table)
        return rows, rows < self.end.take(table)

    def dense_rows(self, keys):
        """The global rows of ``keys`` (uint32) when the dense mode covers all of them, else None."""
        if self.delta is None or not keys.size:
            return None
        rows, inside = self._rows(keys)
        return rows if inside.all() else None

    def distinct_keys(self, rows):
        """The distinct keys of global ``rows`` (`dense_rows`), ascending (uint32): marked in a
        bitmap of the tables' rows and collected, O(rows + table rows); at 1.75M lookups in
        5.6M rows 3-7x the speed of a sort."""
        if self._seen is None:
            self._seen = np.full(int(self.offsets[-1]), False)   # written now (see scratch)
        self._seen[rows] = True
        d = np.flatnonzero(self._seen)
        self._seen[d] = False
        # each table's run of the ascending rows: one shift per run, not a search per row
        runs = np.diff(np.searchsorted(d, self.offsets))
        return (d - np.repeat(self.delta, runs)).astype(np.uint32)

    def lookup(self, keys):
        return self.lookup_rows(keys)[0]

    def cold_lookups(self, keys):
        """(how many of ``keys`` miss the hot set, their `dense_rows` or None). In the dense
        mode one compiled pass over `hot_bits`, an eighth of a byte per row against the 4 bytes
        `lookup_rows` gathers (213,000 Zipf keys over 6.8M rows: 0.5 against 1.5 ms)."""
        keys = np.asarray(keys, np.uint32)
        if self.delta is not None and keys.size:
            rows = np.empty(len(keys), np.int64)
            cold = _cold_rows_kernel(keys, self.delta, self.end, self.hot_bits, rows)
            if cold >= 0:
                return cold, rows
        return int(np.count_nonzero(self.lookup(keys) < 0)), None

    def lookup_rows(self, keys):
        """(hot slot of each key or -1, `dense_rows` of the keys)."""
        keys = np.asarray(keys, np.uint32)
        rows = self.dense_rows(keys)
        if rows is not None:
            return self.dense.take(rows), rows
        if not self.sorted_keys.size:
            return np.full(keys.shape, -1, np.int32), None
        pos = np.minimum(np.searchsorted(self.sorted_keys, keys), len(self.sorted_keys) - 1)
        return (np.where(self.sorted_keys[pos] == keys, self.sorted_slots[pos], -1)
                .astype(np.int32), None)

    def first_appearance(self, keys, rows=None):
        """(cold slot of every key, unique keys in first-appearance order) for one batch;
        ``rows``: their `dense_rows` if known."""
        g = self.dense_rows(keys) if rows is None else rows
        if g is None:
            rank, uniq = first_appearance(keys)
            return rank.astype(np.int32), uniq
        pos = np.arange(len(keys), dtype=np.int32)
        self.scratch[g] = len(keys)
        np.minimum.at(self.scratch, g, pos)
        first = self.scratch.take(g)
        is_first = first == pos
        slot_of_first = np.cumsum(is_first, dtype=np.int32) - 1
        return slot_of_first[first], keys[is_first]


def _cold_rows(keys, delta, end, hot_bits, rows):
    """`HotIndex.cold_lookups`' pass (compiled): each key's global row into ``rows``; the count
    of those not set in ``hot_bits``, or -1 at the first key outside its table."""
    cold = 0
    for i in range(len(keys)):
        k = np.int64(keys[i])
        t = k >> ROW_BITS
        r = k + delta[t]
        if r >= end[t]:
            return -1
        rows[i] = r
        cold += 1 - ((hot_bits[r >> 3] >> (r & 7)) & 1)
    return cold


_cold_rows_kernel = compiled(_cold_rows)


@dataclass
class HotPlacement:
    """Where the CAM put a hot set: the keys it holds, their slots, the keys it refused, and
    the response (status, slot, moves) of every insert, in order."""
    keys: np.ndarray
    slots: np.ndarray
    failed: np.ndarray
    responses: list


def place_hot_set(hot_keys, config: AcceleratorConfig, cam=None) -> HotPlacement:
    """Insert ``hot_keys`` (rank order) into the CAM model exactly as the host will; more keys
    than ``config.hot_capacity`` is an error (`AcceleratorConfig.check_hot_set`). ``cam``: the
    `PopularityCAMModel` to fill (default a new, empty one)."""
    hot_keys = np.asarray(hot_keys, np.uint32)
    config.check_hot_set(hot_keys.size)
    cam = PopularityCAMModel(**config.cam_kwargs()) if cam is None else cam
    responses = cam.insert_many(hot_keys)
    hit, slot = cam.lookup(hot_keys)
    return HotPlacement(hot_keys[hit], slot[hit], hot_keys[~hit], responses)


def update_hot_set(cam, held, hot_keys, config: AcceleratorConfig) -> HotPlacement:
    """Change the hot set of ``cam`` (a `PopularityCAMModel` holding the keys ``held``) to
    ``hot_keys`` (rank order) as the host does: DELETE each held key that leaves, then INSERT
    each key that enters, in rank order. A key that stays keeps its slot unless an insert
    relocates it. The placement covers every key of ``hot_keys``; ``responses`` are the
    deletes' then the inserts'."""
    hot_keys = np.asarray(hot_keys, np.uint32)
    config.check_hot_set(hot_keys.size)
    held = np.asarray(held, np.uint32)
    responses = [(*r, []) for r in cam.delete_many(held[~np.isin(held, hot_keys)])]
    responses += cam.insert_many(hot_keys[~np.isin(hot_keys, held)])
    hit, slot = cam.lookup(hot_keys)
    return HotPlacement(hot_keys[hit], slot[hit], hot_keys[~hit], responses)


@dataclass
class Counters:
    """The accelerator's event counters (CSR block), accumulated over a run."""
    batches: int = 0
    samples: int = 0
    lookups: int = 0
    hits: int = 0
    popular_samples: int = 0
    cold_rows: int = 0
    overflows: int = 0
    oversized_batches: int = 0

    def as_dict(self):
        return dict(self.__dict__)


@dataclass
class FragmentRun:
    """Fragments of every batch of a stream, stored flat with per-batch offsets."""
    batch_size: int
    sample_offsets: np.ndarray   # int64 [N + 1], lookups of each sample
    hot: np.ndarray              # bool  [L], lookup hit the hot set
    slot: np.ndarray             # int32 [L], hot slot if hot else cold slot
    popular: np.ndarray          # bool  [N]
    cold_keys: np.ndarray        # uint32 [sum U_b], unique cold keys batch after batch
    cold_offsets: np.ndarray     # int64 [nb + 1]
    overflow: np.ndarray         # bool [nb], the cold-key set overflowed in the batch, or the
    #                              batch has more than max_batch_samples samples
    counters: Counters = field(default_factory=Counters)
    max_batch_samples: int | None = None   # the Fragmenter's (None: unbounded)

    @property
    def num_batches(self):
        return len(self.cold_offsets) - 1

    def batch_samples(self, b):
        return b * self.batch_size, min((b + 1) * self.batch_size, len(self.popular))

    def batch(self, b):
        """Dict of one batch: popular / non_popular (batch-local sample ids), hot, slot, cold_keys."""
        s0, s1 = self.batch_samples(b)
        l0, l1 = self.sample_offsets[s0], self.sample_offsets[s1]
        pop = self.popular[s0:s1]
        return {"popular": np.nonzero(pop)[0], "non_popular": np.nonzero(~pop)[0],
                "hot": self.hot[l0:l1], "slot": self.slot[l0:l1],
                "cold_keys": self.cold_keys[self.cold_offsets[b]:self.cold_offsets[b + 1]]}

    def beat_groups(self, lanes):
        """(the ``lookups`` lane beat of each lookup beat, its eos, eob and empty flags) with
        ``lanes`` lanes (`hotline.contract.beats`)."""
        _, eos, eob, empty = lookup_beats(np.zeros(int(self.sample_offsets[-1]), np.uint32),
                                          self.sample_offsets, self.batch_size)
        return lane_groups(eob, lanes), eos, eob, empty

    def lane_beats(self, lanes):
        """With ``lanes`` lookup lanes, the Fragmenter's output beat of each entry:
        {"remap": per non-empty lookup, "popular" / "non_popular": per such sample, in order,
        "cold_keys": per unique cold key}. A ``lookups`` lane beat is answered by at most one
        beat per stream, holding its entries; ``cold_keys`` holds a batch's keys ``lanes`` per
        beat from its first (`hotline.contract.streams`, lane beats)."""
        group, eos, _, empty = self.beat_groups(lanes)
        closing = group[eos]
        beats = {name: np.unique(g, return_inverse=True)[1].astype(np.int64)
                 for name, g in (("remap", group[~empty]), ("popular", closing[self.popular]),
                                 ("non_popular", closing[~self.popular]))}
        sizes = np.diff(self.cold_offsets)
        in_batch = np.arange(self.cold_offsets[-1]) - np.repeat(self.cold_offsets[:-1], sizes)
        beats["cold_keys"] = np.cumsum(in_batch % lanes == 0).astype(np.int64) - 1
        return beats

    def batch_sizes(self):
        """(popular, non_popular, unique_cold_rows) counts per batch, as int64 arrays."""
        starts = np.arange(0, len(self.popular), self.batch_size)
        popular = np.add.reduceat(self.popular.astype(np.int64), starts) if starts.size else starts
        sizes = np.diff(np.append(starts, len(self.popular)))
        return popular, sizes - popular, np.diff(self.cold_offsets)

    def summary(self):
        """The `fragment --json` fields (docs/cli.md)."""
        c = self.counters
        popular, non_popular, cold = self.batch_sizes()
        return {
            "samples": c.samples,
            "lookups": c.lookups,
            "popular_samples": c.popular_samples,
            "popular_fraction": c.popular_samples / c.samples if c.samples else 0.0,
            "hot_lookup_fraction": c.hits / c.lookups if c.lookups else 0.0,
            "unique_cold_rows": c.cold_rows,
            "num_batches": c.batches,
            "counters": c.as_dict(),
            "cold_set_overflows": c.overflows,
            "batches": [{"popular": int(p), "non_popular": int(n), "unique_cold_rows": int(u)}
                        for p, n, u in zip(popular, non_popular, cold)],
        }


class DeviceModel:
    """Bit-accurate model of the accelerator's fragmenter over a placed hot set.

    ``slots`` are the hot keys' CAM slots (default: their rank). With ``cold_set`` (a
    `ColdKeySetModel`) the cold-key numbering mirrors the hardware's finite set, overflow
    included, with ``lanes`` lookup lanes (a repeated cold key within
    `hotline.contract.config.repeat_window` takes its copy's slot); without it, the numbering
    is exact first appearance. With ``max_batch_samples``, a larger batch is flagged
    ``overflow`` and counted (``oversized_batches``), as the Fragmenter does.
    """

    def __init__(self, hot_keys, slots=None, table_sizes=None, cold_set=None, lanes=1,
                 max_batch_samples=None):
        hot_keys = np.asarray(hot_keys, np.uint32)
        slots = np.arange(len(hot_keys)) if slots is None else slots
        self.index = HotIndex(hot_keys, slots, table_sizes)
        self.cold_set = cold_set
        self.window = repeat_window(lanes)
        self.max_batch_samples = max_batch_samples
        self.counters = Counters()

    def set_table_sizes(self, table_sizes) -> None:
        """Rebuild the hot index over the same hot set for new ``table_sizes`` (`HotIndex`)."""
        self.index = HotIndex(self.index.keys, self.index.slots, table_sizes)

    @classmethod
    def for_config(cls, hot_keys, slots, config, table_sizes=None) -> "DeviceModel":
        return cls(hot_keys, slots, table_sizes, ColdKeySetModel(**config.cold_kwargs()),
                   config.lanes, config.max_batch_samples)

    def fragment(self, keys, sample_offsets, batch_size, progress=None) -> FragmentRun:
        """Fragment a whole stream: ``keys`` [L] in sample order, ``sample_offsets`` [N + 1].
        ``progress(n)`` is called with the lookups done after each batch."""
        if batch_size is None or batch_size <= 0:
            raise HotlineError(f"--batch-size must be a positive integer, not {batch_size}")
        keys = np.asarray(keys, np.uint32)
        n = len(sample_offsets) - 1
        hot_slot, rows = self.index.lookup_rows(keys)
        cold = hot_slot < 0
        hot = ~cold
        # A sample is popular iff it has no cold lookup (an empty sample is popular). Segments
        # starting at the non-empty samples' offsets cover exactly those samples' lookups.
        starts = np.asarray(sample_offsets[:-1])
        nonempty = np.diff(sample_offsets) > 0
        popular = np.ones(n, bool)
        if nonempty.any():
            popular[nonempty] = ~np.logical_or.reduceat(cold, starts[nonempty])
        slot = hot_slot  # cold entries are overwritten with cold slots below
        cold_keys, cold_offsets, overflow, overflows, oversized = [], [0], [], 0, 0
        for s0 in range(0, n, batch_size):
            s1 = min(s0 + batch_size, n)
            l0, l1 = sample_offsets[s0], sample_offsets[s1]
            cold_pos = l0 + np.flatnonzero(cold[l0:l1])
            batch_keys = keys[cold_pos]
            cold_slot, uniq = self.index.first_appearance(
                batch_keys, None if rows is None else rows[cold_pos])
            over = 0
            if self.cold_set is not None and not self.cold_set.overflow_impossible(uniq):
                cold_slot, first, overflowed = self.cold_set.replay(batch_keys, self.window)
                uniq = batch_keys[first]
                over = int(overflowed.sum())
                overflows += over
            too_many = self.max_batch_samples is not None and s1 - s0 > self.max_batch_samples
            oversized += too_many
            overflow.append(over > 0 or too_many)
            slot[cold_pos] = cold_slot
            cold_keys.append(uniq)
            cold_offsets.append(cold_offsets[-1] + len(uniq))
            if progress is not None:
                progress(int(l1 - l0))
        run = FragmentRun(batch_size, np.asarray(sample_offsets, np.int64), hot, slot, popular,
                          np.concatenate(cold_keys) if cold_keys else np.zeros(0, np.uint32),
                          np.asarray(cold_offsets, np.int64), np.asarray(overflow, bool),
                          max_batch_samples=self.max_batch_samples)
        c = run.counters
        c.batches, c.samples, c.lookups = len(cold_offsets) - 1, n, len(keys)
        c.hits, c.popular_samples, c.cold_rows = int(hot.sum()), int(popular.sum()), cold_offsets[-1]
        c.overflows, c.oversized_batches = overflows, oversized
        for k, v in c.as_dict().items():
            setattr(self.counters, k, getattr(self.counters, k) + v)
        return run


def model_fragment(keys, sample_offsets, batch_size, hot_keys, config, table_sizes=None,
                   progress=None) -> tuple[HotPlacement, FragmentRun]:
    """Place ``hot_keys`` (rank order) in the CAM model and fragment the stream with the
    bit-accurate model of ``config``; returns (HotPlacement, FragmentRun)."""
    placement = place_hot_set(hot_keys, config)
    # A dense key -> slot index costs 8 bytes per table row: worth it for long streams only.
    if table_sizes is not None and int(np.sum(table_sizes)) > 4 * len(keys):
        table_sizes = None
    model = DeviceModel.for_config(placement.keys, placement.slots, config, table_sizes)
    return placement, model.fragment(keys, sample_offsets, batch_size, progress)
