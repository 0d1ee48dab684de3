"""The "hotline" placement (`HotlineStore`): hot rows on the torch device at their CAM slots,
cold rows in `HostMemory` windows that the accelerator gathers and scatters (any Device URL:
``model://``, ``sim://...``, ``serial://...``).

A batch goes to the device when it is announced (`prefetch`, or `gather` for a batch that was
not): the device fragments it and gathers its unique cold rows into a staging bank. `gather`
pulls the result and returns the batch's rows (hot ones from the hot table, cold ones from
staging); `scatter` writes the hot rows into the hot table and the cold ones into staging, and
the device scatters them to host memory while the next batch trains.

The store owns every rule of that pipeline, so `gather` and `scatter` give exactly
`HostStore`'s rows for any sequence of batches:

- a batch prefetched before the last batch's scatter gathered the rows cold in both batches
  before their update: they are taken from the last batch's updated rows (`refresh_stale`);
- when the device's cold-key set overflows, a key sits in several staging slots: every slot
  gets its updated row;
- a batch with more cold lookups than the staging slots is pushed as its unique keys; the
  cold keys beyond the slots are read and written in host memory by the host (the rows
  the batch before's scatter may be writing: their write after it; in place, read from that
  batch's staging rows and updated after it);
- the hot set changes only with nothing in flight (`move_hot_rows` moves the rows): a scheduled
  change is not prefetched across, and a prefetched batch is pulled back and pushed again
  after a change the caller makes (`load`, `refresh`, `write_table`);
- every device error, and every key outside the store's tables, raises `HotlineError`.

The hot set is policy (`HotSetSchedule`): given keys, or the exact top-K of the first
``profile_batches`` batches, or learned by the device's AccessLearner (``hot_set="learn"``),
and refreshed ``off`` / ``auto`` / ``every:N`` batches. `counters` reads the hot and popular
shares, the bytes moved and the device's overlap.
"""
from dataclasses import dataclass

import numpy as np
import torch

from hotline.contract.config import PRODUCT, AcceleratorConfig
from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, ROW_BITS
from hotline.host.device import LearnerReadout
from hotline.host.device import open as open_device
from hotline.model.compiled import compiled
from hotline.model.device_model import HotIndex
from hotline.model.planner import exact_hot_set

from .hot_set import HotSetSchedule, parse_refresh
from .stores import HostStore, RowStore

__all__ = ["HotlineStore", "refresh_stale", "sorted_unique", "move_hot_rows", "merged_readout"]


def refresh_stale(rows, keys, prev) -> None:
    """A batch gathered before the batch before it was scattered (it was pushed while that one
    trained) holds stale copies of the rows cold in both: ``rows`` (of ``keys``, uint32) take
    the updated rows of the batch before, in place: ``prev``, a list of parts (keys, rows) or
    (keys, rows, at: the row of each key in ``rows``), uint32 keys in any order, disjoint
    between parts (a key twice in a part only with the same row). (The hardware gathers ahead
    in the same way.)"""
    for m, updated in stale_rows(keys, prev):
        rows[m] = updated


def stale_rows(keys, prev):
    """Per part of ``prev`` (`refresh_stale`'s) holding some of ``keys``: (which keys it
    holds, their rows in it)."""
    if prev is None or not len(keys):
        return
    keys = np.asarray(keys, np.uint32)
    pos = np.empty(len(keys), np.int64)
    for pk, prow, *at in prev:
        if len(pk) and _positions_kernel(np.asarray(pk, np.uint32), keys, pos):
            m = pos >= 0
            yield m, prow[pos[m] if not at else at[0][pos[m]]]


def _positions(part, keys, out) -> int:
    """`stale_rows`' match (compiled: `_positions_kernel`): each of ``keys``' position in
    ``part`` (uint32 both) into ``out``, -1 where it is not there; returns how many are. An
    open-addressing table of ``part`` (Fibonacci hashing, linear probing, at most half
    full), then a probe per key: at 12,000-25,000 keys 25-30x the sort and binary search it
    replaces (numpy's argsort of the part, then searchsorted)."""
    bits = 1
    while (1 << bits) < 2 * len(part):
        bits += 1
    mask = (1 << bits) - 1
    table_key = np.empty(mask + 1, np.uint32)
    table_pos = np.full(mask + 1, -1, np.int64)
    for i in range(len(part)):
        h = ((np.int64(part[i]) * 0x9E3779B1) & 0xFFFFFFFF) >> (32 - bits)
        while table_pos[h] >= 0:
            h = (h + 1) & mask
        table_key[h], table_pos[h] = part[i], i
    found = 0
    for j in range(len(keys)):
        h = ((np.int64(keys[j]) * 0x9E3779B1) & 0xFFFFFFFF) >> (32 - bits)
        out[j] = -1
        while table_pos[h] >= 0:
            if table_key[h] == keys[j]:
                out[j] = table_pos[h]
                found += 1
                break
            h = (h + 1) & mask
    return found


_positions_kernel = compiled(_positions)


def _lookup_rows(hot, slot, cold_base, hot_base, n, out):
    """`HotlineStore.gather_lookups`' rows (compiled: `_lookup_rows_kernel`): each lookup's
    row of `HotlineStore.rows` into ``out``, ``hot_base`` + its slot where ``hot``, else
    ``cold_base`` + its slot. The lookups are an m x n matrix, row-major, written transposed
    (n = 1: in order). One pass in the output's order: at B = 8192 x 26 lookups 0.4 ms,
    against 2-2.7 for numpy's gather of the bases, add and transposing copy."""
    m = len(slot) // n
    for f in range(n):
        for s in range(m):
            i = s * n + f
            out[f * m + s] = (hot_base if hot[i] else cold_base) + slot[i]


_lookup_rows_kernel = compiled(_lookup_rows)


def sorted_unique(keys) -> np.ndarray:
    """The distinct values of ``keys`` (1-D), ascending. A sort and a compare: numpy 2.4's
    ``np.unique`` hashes first, about 30x slower on a batch's 200,000 keys."""
    s = np.sort(keys)
    keep = np.ones(len(s), bool)
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def move_hot_rows(hot_table, old, new, read, write, read_always=False) -> tuple[int, int]:
    """The rows of a hot-set change from placement ``old`` to ``new`` (`HotPlacement`s), so
    the trajectory is unchanged: rows that leave are written back (``write(keys, rows)``, rows
    a numpy array), rows the CAM relocated move between slots of ``hot_table``, rows that enter
    are read (``read(keys)``: a tensor); other slots are untouched. ``read_always``: call
    ``read`` even when no key enters (a collective). Returns (rows left, rows entered)."""
    dev = hot_table.device
    index = lambda a: torch.from_numpy(np.asarray(a, np.int64)).to(dev)
    leave = ~np.isin(old.keys, new.keys)
    if leave.any():
        write(old.keys[leave], hot_table[index(old.slots[leave])].cpu().numpy())
    was = HotIndex(old.keys, old.slots).lookup(new.keys)   # each key's slot before; -1: it enters
    held = was >= 0
    src, dst = was[held].astype(np.int64), new.slots[held]
    moved = src != dst
    if moved.any():   # gathered first: a source slot may be another row's destination
        hot_table[index(dst[moved])] = hot_table[index(src[moved])]
    if (~held).any() or read_always:
        hot_table[index(new.slots[~held])] = read(new.keys[~held])
    return int(leave.sum()), int((~held).sum())


def merged_readout(ranks, readout) -> LearnerReadout:
    """Data parallel: the learners of every rank (each counted its shards) as one: counts
    summed per key, on every rank, so every rank loads the same set (a collective)."""
    valid = readout.counts > 0
    keys, counts = ranks.all_sum(
        readout.keys[valid].astype(np.int64),
        torch.from_numpy(readout.counts[valid].astype(np.float64)[:, None]))
    counted, dropped = ranks.sum([readout.counted, readout.dropped])
    return LearnerReadout(keys.astype(np.uint32), counts[:, 0].numpy().astype(np.uint64),
                          int(counted), int(dropped))


@dataclass
class _Batch:
    """A batch announced to the store: its lookups (uint32, batch order), lookups per sample;
    what was pushed for it while it is in flight on the device."""
    step: int
    lookups: np.ndarray
    lengths: np.ndarray
    in_flight: bool = False
    pushed: np.ndarray | None = None      # the keys pushed (lookups, or unique keys)
    host_key: np.ndarray | None = None   # per unique key: beyond the slots, the host's
    unique: np.ndarray | None = None     # the lookups' unique keys (the caller's, or the push's)


@dataclass
class _Gathered:
    """A gathered batch waiting for its scatter."""
    keys: np.ndarray        # uint32, sorted unique
    hot_pos: torch.Tensor   # positions of the hot keys in ``keys``
    hot_slots: torch.Tensor
    cold_pos: torch.Tensor
    cold_keys: np.ndarray   # keys[cold_pos]
    bank: int
    slot_keys: np.ndarray   # the key of each staging slot used (the device's cold_keys)
    extra: np.ndarray       # bool per cold key: read and written by the host
    cold_slots: np.ndarray  # the staging slot of each cold key not ``extra``
    counts: tuple           # (hot lookups, lookups, popular samples, samples) on the device
    popular: np.ndarray     # the samples whose every lookup is hot (the device's split)


@dataclass
class _Fused:
    """A batch gathered by `HotlineStore.gather_lookups`, waiting for `scatter_lookups`."""
    bank: int
    slot_keys: np.ndarray   # the key of each staging slot used (the device's cold_keys)
    canon: np.ndarray | None  # after an overflow: each slot's first slot of the same key
    cold_rows: int          # unique cold keys
    counts: tuple           # (hot lookups, lookups, popular samples, samples) on the device
    popular: np.ndarray
    host_keys: np.ndarray   # cold keys beyond the slots (ascending): updated in their tables
    host_ids: np.ndarray    # their rows of `rows`


class HotlineStore(RowStore):
    """Placement "hotline". ``table_rows``: rows per table; ``layout``: the `RowLayout`.

    Hot set: ``hot_keys`` (rank order, hottest first) loaded at once; else with ``hot_set``
    ``"exact"`` the exact top-``hot_rows`` of the first ``profile_batches`` batches (trained all
    cold) loads before the next; with ``"learn"`` the device's AccessLearner counts the first
    ``learn_window`` batches and its top-``hot_rows`` loads before the next. ``refresh``:
    ``"off"``, ``"auto"`` or ``"every:N"`` (batches; learned over ``learn_window``).

    Sizing: ``batch_lookups`` lookups per batch at most fit the staging slots (a larger batch
    still works, see the module docstring); ``batch_size`` samples per batch at most count in
    the popular share (`prefetch` ``lengths``). ``device_options``: passed to
    `hotline.host.device.open`."""

    counts_lookups = True   # the learner counts lookups, the popular split samples
    takes_positions = True  # `gather` takes each announced lookup's position in its keys

    def __init__(self, table_rows, layout, *, device_url="model://", torch_device="cpu",
                 hot_rows=None, hot_keys=None, hot_set="exact", profile_batches=None,
                 learn_window=None, refresh="off", batch_lookups=PRODUCT.cold_max_keys,
                 batch_size=PRODUCT.max_batch_samples, banks=2, device_options=None,
                 ranks=None, host=None, config=None, schedule=None, step=0):
        self.width, self.device = layout.floats, torch.device(torch_device)
        self.ranks = ranks
        self.totals = dict.fromkeys(("lookups", "hot_lookups", "samples", "popular_samples",
                                     "cold_rows", "host_rows", "bytes_h2d", "bytes_d2h"), 0)
        self.layout, self.url = layout, device_url
        self.table_rows = np.asarray([int(r) for r in table_rows], np.int64)
        if hot_set not in ("exact", "learn"):
            raise HotlineError(f"hot_set {hot_set!r}: expected 'exact' or 'learn'")
        kind, _ = parse_refresh(refresh)
        given = None if hot_keys is None else self._keys(hot_keys, "hot_keys")
        if given is not None and len(np.unique(given)) != len(given):
            raise HotlineError("hot_keys: the keys must be distinct")
        self.hot_rows = int(hot_rows if hot_rows is not None else
                            len(given) if given is not None else 0)
        if self.hot_rows < 0 or (self.hot_rows == 0 and (hot_set == "learn" or kind != "off")):
            raise HotlineError(f"hot_rows {hot_rows}: a learned or refreshed hot set needs "
                               f"hot_rows > 0")
        self.profile_batches = None
        if given is None and hot_set == "exact" and self.hot_rows:
            if not profile_batches or profile_batches < 1:
                raise HotlineError("hot_set 'exact' needs hot_keys or profile_batches >= 1 "
                                   "(the batches whose exact top hot_rows keys become hot)")
            self.profile_batches = int(profile_batches)
            if ranks is not None:
                raise HotlineError("hot_set 'exact' from profile_batches is per rank; under "
                                   "several ranks give hot_keys (planned from every rank's "
                                   "lookups) or hot_set 'learn'")
        learns = hot_set == "learn" or kind != "off"
        window = int(learn_window or profile_batches or 0)
        if learns and window < 1:
            raise HotlineError("a learned or refreshed hot set needs learn_window >= 1 batches")
        self.config = config or AcceleratorConfig.for_workload(
            max(self.hot_rows, len(given) if given is not None else 0), batch_size,
            batch_lookups, learn=learns, distinct_keys=window * batch_lookups if learns else None)
        self.slots, self.banks = self.config.cold_max_keys, int(banks)
        self._host(layout, host)
        self.dev = open_device(device_url, config=self.config, memory=self.memory,
                               **(device_options or {}))
        try:
            for t, w in enumerate(self.windows):
                self.dev.set_table(t, w, int(self.table_rows[t]), layout.nbytes)
            self.dev.set_staging(self.staging_window, layout.nbytes, self.slots, self.banks)
            self.hot_keys = given if given is not None else np.zeros(0, np.uint32)
            self.placement = self.dev.load_hot_set(self.hot_keys)
        except BaseException:
            self.close()
            raise
        # in place (`gather_lookups`): an in-place kernel's rows are host memory itself (the
        # CPU's: tables, staging banks, the hot table at row ``hot_row0``); else none
        hot_n = self.dev.info()["hot_slots"]
        self.rows, self.hot_row0 = None, 0
        if self.in_place:
            self.rows, self.hot_row0 = self.host.rows, self.hot_window.base // layout.nbytes
            if hot_n * layout.nbytes > self.hot_window.size:
                self.close()
                raise HotlineError(f"hot table: the device has {hot_n} hot slots, host memory "
                                   f"holds {self.hot_window.size // layout.nbytes}")
            self.hot_table = self.rows[self.hot_row0:self.hot_row0 + hot_n]
        else:
            self.hot_table = torch.zeros(hot_n, self.width, device=self.device)
        if host is not None:   # tables already there: their hot rows to the hot table
            p = self.placement
            self.hot_table[self._index_tensor(p.slots)] = self._read(p.keys)
        self.step = int(step)          # batches scattered (the global step on a resume)
        self.prev = None               # the last batch's updated cold rows (`refresh_stale`)
        self._next = None              # the announced batch not gathered yet (`_Batch`)
        self._cur = None               # the gathered batch not scattered yet (`_Gathered`)
        self._learning = False
        self._index = None             # HotIndex of the placement (`_hot_index`)
        self._looked_up = None         # (lookups, cold lookups, dense rows): `_cold_lookups`
        self._profile = [] if self.profile_batches else None
        self.schedule = schedule
        if schedule is None and hot_set == "learn":
            self.schedule = HotSetSchedule(window, refresh, learn_first=True)
        elif schedule is None and self._profile is None:
            self.schedule = HotSetSchedule(window or 1, refresh)
        self.refresh_text, self.window = refresh, window
        self.loads = []                # one record per hot set loaded after the first

    # -- host memory --------------------------------------------------------------------
    @staticmethod
    def trains_in_place(torch_device, ranks) -> bool:
        """Whether host memory is the torch device's memory (`in_place`): one process (no
        ``ranks``) on the CPU. Its hot table then lies in host memory too."""
        return torch.device(torch_device).type == "cpu" and ranks is None

    @classmethod
    def staging_bytes(cls, config, layout, banks=2, ranks=None, torch_device="cpu") -> int:
        """The host memory after the tables that the staging banks take (a bank set per rank
        of ``ranks``), and the hot table where it lies in host memory (`trains_in_place`)."""
        align = HostStore.alignment(layout)
        up = lambda n: -(-n // align) * align
        world = 1 if ranks is None else ranks.world
        hot = config.hot_slots * layout.nbytes if cls.trains_in_place(torch_device, ranks) else 0
        return up(banks * config.cold_max_keys * layout.nbytes) * world + up(hot)

    def _host(self, layout, host) -> None:
        """The tables in a `HostStore` (``host``, or a new one) and the staging banks after
        them, in the same host memory (the device's DMA reaches both)."""
        staging = self.banks * self.slots * layout.nbytes
        world, rank = (1, 0) if self.ranks is None else (self.ranks.world, self.ranks.rank)
        align = HostStore.alignment(layout)
        self.host = host or HostStore(self.table_rows, layout, self.device, ranks=self.ranks,
                                      extra_bytes=self.staging_bytes(
                                          self.config, layout, self.banks, self.ranks,
                                          self.device))
        self.memory, self.windows = self.host.memory, self.host.windows
        # data parallel: a staging window per rank, each rank's device gathers into its own
        self.staging_window = [self.memory.alloc(staging, align, name=f"staging{r}")
                               for r in range(world)][rank]
        # one process on the CPU: the hot table in host memory too (no DMA window: the device
        # never reaches it), so an in-place kernel's rows are host memory itself
        self.in_place = self.trains_in_place(self.device, self.ranks)
        if self.in_place:
            self.hot_window = self.memory.alloc(self.config.hot_slots * layout.nbytes, align,
                                                name="hot")
        self.host_rows, self.row_base = self.host.host_rows, self.host.row_base
        self.staging_row0 = self.staging_window.base // layout.nbytes

    def _rows_of(self, keys) -> np.ndarray:
        return self.host.rows_of(np.asarray(keys, np.uint32))

    def _read(self, keys) -> torch.Tensor:
        self.totals["bytes_h2d"] += len(keys) * self.layout.nbytes
        return self.host.read_ids(self._rows_of(keys)).to(self.device)

    def _write(self, keys, rows) -> None:
        """Rows every rank holds alike (hot rows leaving, a batch's host rows) to host memory."""
        self.totals["bytes_d2h"] += len(keys) * self.layout.nbytes
        self.host.write_replicated(self._rows_of(keys), rows)

    def _read_beyond(self, keys) -> np.ndarray:
        """The rows of a batch's cold ``keys`` beyond the staging slots, read by the host
        (stale ones fixed)."""
        rows = self.host_rows[self._rows_of(keys)]
        refresh_stale(rows, keys, self.prev)
        return rows

    def _write_beyond(self, keys, rows) -> None:
        """Those rows written back by the host, after the batch before's scatter (it may
        still write one of them)."""
        self.dev.wait_scatters()
        self._write(keys, rows)
        self.totals["host_rows"] += len(keys)

    def _staging(self, bank) -> np.ndarray:
        r0 = self.staging_row0 + bank * self.slots
        return self.host_rows[r0:r0 + self.slots]

    def _index_tensor(self, a) -> torch.Tensor:
        return torch.from_numpy(np.asarray(a, np.int64)).to(self.device)

    # -- keys ---------------------------------------------------------------------------
    def _keys(self, keys, what, unique=False, tables=True) -> np.ndarray:
        """``keys`` (tensor or array) as uint32, checked against the tables (``tables``;
        else only as 32-bit keys); one line naming the first bad key otherwise."""
        k = keys.detach().cpu().numpy() if torch.is_tensor(keys) else np.asarray(keys)
        if k.ndim != 1 or (k.size and k.dtype.kind not in "iu"):
            raise HotlineError(f"{what}: keys must be a 1-D integer tensor, not {k.dtype} "
                               f"{tuple(k.shape)}")
        k = k.astype(np.int64)
        if not k.size:
            return k.astype(np.uint32)
        if k.min() < 0 or k.max() >= 1 << 32:
            bad = int(k[(k < 0) | (k >= 1 << 32)][0])
            raise HotlineError(f"{what}: key {bad} is not a 32-bit key (table << {ROW_BITS} | row)")
        if tables:
            self._in_tables(k, what)
        if unique and np.any(k[1:] <= k[:-1]):
            raise HotlineError(f"{what}: keys must be unique and sorted ascending")
        return k.astype(np.uint32)

    def _in_tables(self, k, what) -> None:
        """Raise unless every key of ``k`` (int64, 32-bit) names a row of the store's tables."""
        t, r = k >> ROW_BITS, k & (MAX_ROWS - 1)
        n = len(self.table_rows)
        if t.max() >= n:
            i = int(np.argmax(t >= n))
            raise HotlineError(f"{what}: key {int(k[i]):#x} names table {int(t[i])}; the store "
                               f"has tables 0..{n - 1}")
        beyond = r >= self.table_rows[t]
        if beyond.any():
            i = int(np.argmax(beyond))
            raise HotlineError(f"{what}: key {int(k[i]):#x}: row {int(r[i])} is beyond table "
                               f"{int(t[i])}'s {int(self.table_rows[t[i]])} rows")

    # -- the hot-set policy -------------------------------------------------------------
    def _loads(self, step) -> bool:
        """Whether the hot set changes before batch ``step`` (nothing may be in flight)."""
        if self._profile is not None:
            return step == self.profile_batches
        return self.schedule is not None and self.schedule.loads(step)

    def plan(self, keys=None) -> np.ndarray:
        """The exact top-``hot_rows`` keys (rank order) of ``keys`` (lookups), or of the
        profiling window's batches so far."""
        if keys is None:
            if not self._profile:
                raise HotlineError("plan: no keys given and no profiling window recorded")
            keys = np.concatenate(self._profile)
        keys = self._keys(keys, "plan")
        return exact_hot_set(keys, self.hot_rows).keys if len(keys) else keys

    def load(self, keys) -> None:
        """Make ``keys`` (rank order) the hot set now, between batches (a prefetched batch is
        pulled back and pushed again); rows move so the trajectory is unchanged. Ends a
        profiling window; a refresh schedule counts from here."""
        self._between("load")
        keys = self._keys(keys, "load")
        self._recall()
        self._migrate(keys, "given")
        self._profile = None
        if self.schedule is None:
            self.schedule = HotSetSchedule(self.window or 1, self.refresh_text)
        self.schedule.loaded(self.step)

    def refresh(self) -> None:
        """Load the access learner's top-``hot_rows`` now (it counts since its window
        started), between batches."""
        self._between("refresh")
        if not self._learning:
            raise HotlineError("refresh: the access learner is not counting (a store with "
                               "refresh 'auto' or 'every:N', or in its learning window, has it)")
        self._recall()
        self._load_learned(self.step)

    def _between(self, what) -> None:
        if self._cur is not None:
            raise HotlineError(f"{what}: a batch is gathered and not scattered; change the hot "
                               f"set between batches")

    def _recall(self) -> None:
        """Pull back the prefetched batch: it goes to the device again when it is gathered."""
        b = self._next
        if b is not None and b.in_flight:
            self.dev.pull_batch()
            b.in_flight = False

    def _load_scheduled(self, step) -> None:
        if self._profile is not None:
            keys = self.plan()
            self._profile = None
            self._migrate(keys, "exact")
            self.schedule = HotSetSchedule(self.window or 1, self.refresh_text)
            self.schedule.loaded(step)
        else:
            self._load_learned(step)

    def _load_learned(self, step) -> None:
        readout = self.dev.learner_stop()
        if self.ranks is not None:
            readout = merged_readout(self.ranks, readout)
        self._learning = False
        start = self.schedule.start
        self._migrate(readout.top(self.hot_rows), "learned")
        self.loads[-1].update(window_steps=[start, step], learner_counted=readout.counted,
                              learner_dropped=readout.dropped)
        self.schedule.loaded(step)

    def _migrate(self, keys, source) -> None:
        """Change the hot set to ``keys`` with nothing in flight."""
        self.dev.drain()   # every scatter done: host memory holds every cold row
        if self.ranks is not None:
            self.ranks.barrier()   # every rank's
        old = self.placement
        new = self.dev.update_hot_set(keys)
        left, entered = move_hot_rows(self.hot_table, old, new, self._read, self._write,
                                      read_always=self.host.split_rows)
        if self.ranks is not None:
            self.ranks.barrier()   # the rows that left are in host memory before any gather
        self.loads.append({"step": self.step, "source": source, "keys": int(len(keys)),
                           "held": int(len(new.keys)), "left": left, "entered": entered})
        self.placement, self.prev, self._index, self._looked_up = new, None, None, None
        self.hot_keys = np.asarray(keys, np.uint32)

    # -- batches ------------------------------------------------------------------------
    def prefetch(self, keys, lengths=None, *, checked=False, unique=None) -> None:
        """Announce the next batch to be gathered: its lookups (batch order, duplicates kept)
        and, optionally, ``lengths`` (lookups per sample, for the popular share). The device
        fragments and gathers it now, while the current batch trains. ``checked``: the caller
        has checked that every key names a row of the store's tables and gives ``lengths``
        (if any) as an int64 array that sums to the lookups (the collection does);
        ``unique``: the lookups' unique keys (ascending), if the caller has them (a batch of
        more lookups than the staging slots is pushed as them; `gather` checks them and drops
        the batch if they are not)."""
        if self._next is not None:
            raise HotlineError("prefetch: the batch prefetched before was not gathered yet")
        # checked (the collection's): only converted, not scanned again
        k = np.asarray(keys, np.uint32) if checked else self._keys(keys, "prefetch")
        b = self._batch(k, lengths, self.step + (self._cur is not None), checked)
        if unique is not None:
            b.unique = self._keys(unique, "prefetch: unique", unique=True, tables=not checked)
        self._next = b
        if not self._loads(b.step):
            self._push(b)

    def _batch(self, lookups, lengths, step, checked=False) -> _Batch:
        """``checked``: ``lengths`` are the caller's int64 array, known to fit ``lookups``."""
        if lengths is None or len(lengths) > self.config.max_batch_samples:
            lengths, checked = [len(lookups)], False   # counted as one sample
        if checked:
            return _Batch(step, lookups, lengths)
        lengths = np.asarray(lengths.detach().cpu() if torch.is_tensor(lengths) else lengths,
                             np.int64)
        if lengths.ndim != 1 or lengths.sum() != len(lookups) or (lengths < 0).any():
            raise HotlineError(f"prefetch: lengths sum to {int(lengths.sum())}, but there are "
                               f"{len(lookups)} keys")
        return _Batch(step, lookups, lengths)

    def _push(self, b) -> None:
        """Push batch ``b`` (the learner starts before it when the schedule says so)."""
        if self.schedule is not None and self.schedule.learns(b.step):
            self.dev.learner_start()
            self._learning = True
        if not len(b.lookups):
            return
        pushed, lengths = b.lookups, b.lengths
        b.host_key = None   # a batch pushed again (after a hot-set change) is split anew
        if len(pushed) > self.slots and \
                self._cold_lookups(pushed)[0] > self.slots:
            # more cold lookups than staging slots: the unique keys, and the host's beyond
            # the slots
            if b.unique is None:   # the lookups' rows are known (`_cold_lookups` above)
                rows = self._cold_lookups(pushed)[1]
                b.unique = sorted_unique(pushed) if rows is None else \
                    self._hot_index().distinct_keys(rows)
            pushed = b.unique
            lengths = [len(pushed)]
            beyond = np.flatnonzero(self._hot_index().lookup(pushed) < 0)[self.slots:]
            if len(beyond):
                b.host_key = np.zeros(len(pushed), bool)
                b.host_key[beyond] = True
                pushed = pushed[~b.host_key]
                lengths = [len(pushed)]
        self.dev.push_batch(pushed, lengths)
        b.pushed, b.in_flight = pushed, True

    def gather(self, keys, positions=None) -> torch.Tensor:
        """`RowStore.gather`; ``positions`` (optional): each lookup of the prefetched batch
        (in the order announced) as its position in ``keys``, e.g. a unique's inverse: checked,
        they spare a search."""
        b = self._next
        try:   # a prefetched batch's keys are checked as the lookups (checked) they must be
            k = self._keys(keys, "gather", unique=True, tables=b is None)
            if self._cur is not None:
                raise HotlineError("gather: the batch gathered before was not scattered")
            at = np.arange(len(k)) if b is None else self._position(k, b.lookups, positions)
            if b is not None and b.unique is not None and not np.array_equal(b.unique, k):
                self._recall()
                self._next = None
                raise HotlineError("gather: the unique keys given to prefetch were not the "
                                   "lookups' (the batch is dropped: prefetch it again)")
        except HotlineError:
            self._keys(keys, "gather", unique=True)   # a key outside the tables is named first
            raise
        if b is None:
            b = self._batch(k, None, self.step)
            b.unique = k
        self._take(b)
        return self._pull(b, k, at)

    def _take(self, b) -> None:
        """Batch ``b`` is gathered now: the hot set loads first where the schedule says so,
        the profiling window sees its lookups, and it goes to the device if it is not there."""
        self._next = None
        if self._loads(b.step):
            self._load_scheduled(b.step)
        if self._profile is not None:
            self._profile.append(b.lookups)
        if not b.in_flight:
            self._push(b)

    @classmethod
    def _position(cls, keys, lookups, at=None) -> np.ndarray:
        """Each lookup's position in ``keys``, which must be the lookups' unique keys (``at``:
        the positions claimed; searched for when they are not these)."""
        if at is not None:
            at = at.detach().cpu().numpy() if torch.is_tensor(at) else np.asarray(at)
            if at.shape == lookups.shape and (not at.size or (
                    at.dtype.kind in "iu" and at.min() >= 0 and at.max() < len(keys))) \
                    and cls._covers(keys, lookups, at):
                return at
        at = np.minimum(np.searchsorted(keys, lookups), len(keys) - 1)
        if not cls._covers(keys, lookups, at):
            raise HotlineError("gather: the keys are not the prefetched batch's unique keys "
                               "(prefetch the batch gathered next)")
        return at

    @staticmethod
    def _covers(keys, lookups, at) -> bool:
        """Whether ``keys[at]`` is ``lookups`` and every key is one of them."""
        seen = np.zeros(len(keys), bool)
        seen[at[at >= 0]] = True
        return seen.all() and (not len(lookups) or (len(keys) > 0
                                                    and np.array_equal(keys[at], lookups)))

    def _pull_result(self, b):
        """(batch ``b``'s device result, None if nothing was pushed; its counts (hot lookups,
        lookups, popular samples, samples), added to the totals). The staging rows of its
        cold keys are current: far rows fetched, stale rows fixed (`refresh_stale`)."""
        r, counts = None, (0, 0) + (len(b.lengths),) * 2
        if b.in_flight:
            r = self.dev.pull_batch()
            b.in_flight = False
            if r.gather["errors"]:
                raise HotlineError(f"{self.url}: the gather of batch {b.step} reported "
                                   f"{r.gather['errors']} DMA errors (rows outside their "
                                   f"table's window)")
            if len(r.cold_keys) > self.slots:
                raise HotlineError(f"{self.url}: batch {b.step} has {len(r.cold_keys)} cold "
                                   f"slots, more than the {self.slots} staging slots")
            counts = (int(np.count_nonzero(r.hot)), r.lookups, len(r.popular), r.samples)
            st = self._staging(r.bank)[:len(r.cold_keys)]
            if self.host.split_rows:
                self._fetch_far_rows(st, r.cold_keys)
            refresh_stale(st, r.cold_keys, self.prev)
        for name, v in zip(("hot_lookups", "lookups", "popular_samples", "samples"), counts):
            self.totals[name] += v
        return r, counts

    def _pull(self, b, keys, at) -> torch.Tensor:
        """Batch ``b``'s rows for its unique ``keys`` (``at``: each lookup's position in them)."""
        n = len(keys)
        hot, slot = np.zeros(n, bool), np.zeros(n, np.int64)
        bank, slot_keys = 0, np.zeros(0, np.uint32)
        popular = np.arange(len(b.lengths))   # no lookups: every sample is popular
        host_key = np.zeros(n, bool) if b.host_key is None else b.host_key
        r, counts = self._pull_result(b)
        if r is not None:
            if b.pushed is not b.lookups:   # the unique keys (``keys``) but the host's
                at = np.flatnonzero(~host_key)
            # a key in several cold slots (an overflow) reads any: each holds its row
            hot[at], slot[at] = r.hot, r.slot
            bank, slot_keys, popular = r.bank, r.cold_keys, r.popular
        hp, cp = np.flatnonzero(hot), np.flatnonzero(~hot)
        cold_keys = keys[cp]
        extra = host_key[cp]
        st = self._staging(bank)
        cold_slots = slot[cp[~extra]]
        by_host = None   # the rows of the host's keys
        if extra.any():
            by_host = self._read_beyond(cold_keys[extra])
        g = _Gathered(keys, self._index_tensor(hp), self._index_tensor(slot[hp]),
                      self._index_tensor(cp), cold_keys, bank, slot_keys, extra, cold_slots,
                      counts, popular)
        out = torch.empty(n, self.width, device=self.device)
        if len(hp):
            out[g.hot_pos] = self.hot_table.index_select(0, g.hot_slots)
        if len(cp):
            on_cpu = self.device.type == "cpu"
            # on the CPU the cold rows go straight into ``out``; else into one array, copied once
            cold = out.numpy() if on_cpu else np.empty((len(cp), self.width), np.float32)
            to = cp if on_cpu else np.arange(len(cp))
            cold[to[~extra]] = st[cold_slots]
            if by_host is not None:
                cold[to[extra]] = by_host
            if not on_cpu:
                cold = torch.from_numpy(cold)
                if self.device.type == "cuda":   # the host goes on while the copy runs
                    cold = cold.pin_memory()
                out[g.cold_pos] = cold.to(self.device, non_blocking=True)
            self.totals["bytes_h2d"] += len(cp) * self.layout.nbytes
        self._cur = g
        return out

    def _fetch_far_rows(self, rows, keys) -> None:
        """Tables split over nodes: this rank's device gathered from its node's memory only;
        the rows other nodes hold come from their owners (`Ranks.fetch`, a collective), as
        they stand after the last step."""
        g = self._rows_of(keys)
        lo, hi = self.ranks.node_rows()
        far = np.flatnonzero((g < lo) | (g >= hi))
        rows[far] = self.ranks.fetch(g[far], self.host.read_rows).numpy()

    # -- batches for an in-place kernel ---------------------------------------------------
    def _cold_lookups(self, lookups) -> tuple[int, np.ndarray | None]:
        """(how many of a batch's ``lookups`` are cold, their dense rows or None), one pass
        per batch (`HotIndex.cold_lookups`): the push and `gather_lookups` share it."""
        c = self._looked_up
        if c is None or c[0] is not lookups:
            self._looked_up = c = (lookups, *self._hot_index().cold_lookups(lookups))
        return c[1], c[2]

    def _hot_index(self) -> HotIndex:
        """The placement's `HotIndex`, dense over the store's tables."""
        if self._index is None:
            self._index = HotIndex(self.placement.keys, self.placement.slots, self.table_rows)
        return self._index

    def gather_lookups(self, grid=None, *, deferred=False) -> torch.Tensor:
        """The prefetched batch for a kernel that updates rows in place (FBGEMM's TBE): each
        lookup, in the order announced, as its row of `rows`, which is host memory itself
        (one process on the CPU: `in_place`): hot rows at their slots of the hot table, cold
        rows at their staging slots (stale rows fixed; after a cold-key set overflow every
        lookup of a key gets the key's first slot), the cold keys beyond the staging slots at
        their table rows, after the batch before's scatter, which may write them. With
        ``deferred`` the caller promises to call `update_lookups` before it updates the rows:
        the rows that scatter may be writing are copied to their tables from that batch's
        staging rows instead (the same bytes), and `update_lookups` waits for it. Nothing else
        is copied. The kernel updates `rows`; `scatter_lookups` hands the cold rows back to
        the device.

        ``grid`` (n, m): the lookups announced are an m x n matrix, row-major (e.g. m samples
        of n single-hot features); they come back transposed (FBGEMM's feature-major order),
        in the same pass."""
        b = self._next
        if b is None:
            raise HotlineError("gather_lookups: no batch prefetched (prefetch it first)")
        if self._cur is not None:
            raise HotlineError("gather_lookups: the batch gathered before was not scattered")
        if not self.in_place:
            raise HotlineError("gather_lookups: in-place batches need one process on the CPU "
                               "(data parallel sums each row's gradient over the ranks first; "
                               "another torch device holds copies): use gather")
        if grid is not None and grid[0] * grid[1] != len(b.lookups):
            # (the kernel would leave rows unwritten, which FBGEMM would then read unchecked)
            raise HotlineError(f"gather_lookups: grid {tuple(grid)} does not cover the batch's "
                               f"{len(b.lookups)} lookups")
        self._take(b)
        r, counts = self._pull_result(b)
        none, no_ids = np.zeros(0, np.uint32), np.zeros(0, np.int64)
        if r is None:   # no lookups: every sample is popular
            self._cur = _Fused(0, none, None, 0, counts, np.arange(len(b.lengths)), none, no_ids)
            return torch.zeros(0, dtype=torch.int64)
        keys, n = r.cold_keys, len(r.cold_keys)
        canon, unique, slot = None, n, r.slot
        if r.overflow:
            _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            canon, unique = first[inverse], len(first)
            cold = np.flatnonzero(~r.hot)
            slot = slot.copy()
            slot[cold] = canon[slot[cold]]
        # each lookup's row (int64: host memory may pass 2**31 rows), transposed in the same
        # pass where the lookups are
        pushed_whole = b.pushed is b.lookups
        index = np.empty(len(slot), np.int64)
        _lookup_rows_kernel(np.asarray(r.hot, bool), slot,
                            self.staging_row0 + r.bank * self.slots, self.hot_row0,
                            grid[0] if grid is not None and pushed_whole else 1, index)
        host_keys, host_ids = none, no_ids
        if not pushed_whole:   # its unique keys: each lookup through its key
            index, host_keys, host_ids = self._unique_rows(b, index)
            if grid is not None:
                index = index.reshape(grid[::-1]).T.ravel()
        if len(host_keys) and deferred:
            # updated in their tables, which the batch before's scatter (not waited for) may be
            # writing: the rows it left in staging are copied there now, the bytes it writes
            staged = [p for p in self.prev or () if p[1] is not self.host_rows]
            for m, updated in stale_rows(host_keys, staged):
                self.host_rows[host_ids[m]] = updated
        elif len(host_keys):
            self.dev.wait_scatters()
        self.totals["bytes_h2d"] += (n + len(host_keys)) * self.layout.nbytes
        self._cur = _Fused(r.bank, keys, canon, unique + len(host_keys), counts, r.popular,
                           host_keys, host_ids)
        return torch.from_numpy(index)

    def _unique_rows(self, b, pushed_rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Batch ``b``, pushed as its unique keys less the host's: (each lookup's row of
        `rows`, the host's keys, their rows: in their tables) from each pushed key's row
        ``pushed_rows``."""
        host = np.zeros(len(b.unique), bool) if b.host_key is None else b.host_key
        host_keys = b.unique[host]
        row = np.empty(len(b.unique), np.int64)
        row[~host] = pushed_rows
        row[host] = host_ids = self._rows_of(host_keys)
        _, dense = self._cold_lookups(b.lookups)
        if dense is None:
            return row[np.searchsorted(b.unique, b.lookups)], host_keys, host_ids
        index = self._hot_index()   # its scratch, a row per table row: one scatter, one gather
        index.scratch[index.dense_rows(b.unique)] = row
        return index.scratch.take(dense), host_keys, host_ids

    def update_lookups(self) -> None:
        """The caller is about to update the batch of `gather_lookups` in place: its keys
        beyond the staging slots are updated in their tables, where the batch before's
        scatter may still be writing (``deferred``); it finishes first."""
        g = self._cur
        if not isinstance(g, _Fused):
            raise HotlineError("update_lookups: no batch gathered by gather_lookups")
        if len(g.host_keys):
            self.dev.wait_scatters()

    def scatter_lookups(self) -> None:
        """The batch of `gather_lookups` is done (its rows updated in place, or not): the
        device scatters its staging slots to host memory while the next batch trains (after a
        cold-key set overflow every slot of a key first takes the row its lookups updated);
        the keys beyond the slots were updated in their tables."""
        g = self._cur
        if not isinstance(g, _Fused):
            raise HotlineError("scatter_lookups: no batch gathered by gather_lookups")
        n, m = len(g.slot_keys), len(g.host_keys)
        prev, st = [], self._staging(g.bank)   # the rows were updated where they lie
        if m:   # the keys beyond the slots: in their tables already
            self.totals["host_rows"] += m
            self.totals["bytes_d2h"] += m * self.layout.nbytes
            prev.append((g.host_keys, self.host_rows, g.host_ids))
        if g.canon is not None:   # every slot of a key gets the row its lookups updated
            st[:n] = st[g.canon]
        # the next batch's stale rows are fixed from this bank before the device gathers into
        # it again (batch b uses bank b % banks): with one bank, from a copy
        new = st[:n] if self.banks > 1 else st[:n].copy()
        if n:
            # not waited for (as `scatter`)
            self.dev.scatter(g.bank, g.slot_keys, wait=False)
            self.totals["bytes_d2h"] += n * self.layout.nbytes
        self.totals["cold_rows"] += g.cold_rows
        # (a key in several slots, after an overflow, has the same row in each)
        self._done(g, prev + [(g.slot_keys, new)])

    def read(self, keys) -> torch.Tensor:
        """The current rows of ``keys`` (unique, ascending) without the device's pipeline
        (evaluation): hot rows from the hot table, the others from host memory after the
        device's scatters. Split over nodes: a collective."""
        k = self._keys(keys, "read", unique=True)
        self.dev.drain()
        out = self.host.read_ids(self._rows_of(k)).to(self.device)
        slot = self._hot_index().lookup(k)
        hot = np.flatnonzero(slot >= 0)
        if len(hot):
            out[self._index_tensor(hot)] = self.hot_table.index_select(
                0, self._index_tensor(slot[hot]))
        return out

    @property
    def popular(self) -> np.ndarray:
        """The samples of the batch gathered last whose every lookup is hot (the device's
        popular micro-batch), in sample order."""
        return self._cur.popular if self._cur is not None else np.zeros(0, np.int64)

    def _gathered(self, what, keys, rows) -> "_Gathered":
        """The batch gathered last, checked against the ``keys`` and ``rows`` given back."""
        g = self._cur
        if g is None:
            raise HotlineError(f"{what}: no batch gathered")
        if isinstance(g, _Fused):
            raise HotlineError(f"{what}: the batch was gathered by gather_lookups; give it back "
                               f"with scatter_lookups")
        k = keys.detach().cpu().numpy() if torch.is_tensor(keys) else np.asarray(keys)
        if len(k) != len(g.keys) or not np.array_equal(k, g.keys):
            raise HotlineError(f"{what}: the keys are not the last gather's")
        if tuple(rows.shape) != (len(g.keys), self.width):
            raise HotlineError(f"{what}: rows of shape {tuple(rows.shape)} for "
                               f"{len(g.keys)} keys of width {self.width}")
        return g

    def scatter(self, keys, rows) -> None:
        g = self._gathered("scatter", keys, rows)
        rows = rows.detach().to(self.device)
        if len(g.hot_pos):
            self.hot_table.index_copy_(0, g.hot_slots, rows.index_select(0, g.hot_pos))
        new = rows.index_select(0, g.cold_pos).cpu().numpy() if len(g.cold_keys) else \
            np.zeros((0, self.width), np.float32)
        if g.extra.any():
            self._write_beyond(g.cold_keys[g.extra], new[g.extra])
        if len(g.slot_keys):
            st = self._staging(g.bank)
            if len(g.slot_keys) == len(g.cold_slots):   # a slot per key: each key's own
                st[g.cold_slots] = new[~g.extra]
            else:   # every slot of a key (several after a cold-key set overflow) gets its row
                st[:len(g.slot_keys)] = new[np.searchsorted(g.cold_keys, g.slot_keys)]
            # not waited for: the device scatters while the next batch trains; a DMA error is
            # raised by a later pull or drain
            self.dev.scatter(g.bank, g.slot_keys, wait=False)
            self.totals["bytes_d2h"] += len(g.slot_keys) * self.layout.nbytes
        self.totals["cold_rows"] += len(g.cold_keys)
        self._done(g, [(g.cold_keys, new)])

    def update(self, keys, rows, grad, optimizer) -> int:
        """Data parallel: the hot replicas get the gradient of every slot any rank touched,
        summed over the ranks (`Ranks.all_sum`); each cold row is updated once, by its owner
        (`Ranks.owner_sum`; the row travels with its gradient), which writes it through its
        device's scatter (waited for: no rank gathers an older row after); every rank keeps
        the step's updated cold rows for `refresh_stale`. One optimizer step for both."""
        if self.ranks is None:
            return super().update(keys, rows, grad, optimizer)
        g, r = self._gathered("update", keys, rows), self.ranks
        rows, grad, d = rows.detach(), grad.detach(), grad.shape[1]
        hot_grad = grad.index_select(0, g.hot_pos.to(grad.device)).cpu()
        slots, hot_grad = r.all_sum(g.hot_slots.cpu().numpy(), hot_grad,
                                    universe=len(self.hot_table))
        cp = g.cold_pos.to(grad.device)
        cold = torch.cat([grad.index_select(0, cp), rows.index_select(0, cp)], 1).cpu()
        mine, both = r.owner_sum(g.cold_keys.astype(np.int64), cold,
                                 first=slice(d, d + self.width), where=self._rows_of(g.cold_keys))
        hot_idx = self._index_tensor(slots)
        stepped = torch.cat([self.hot_table.index_select(0, hot_idx), both[:, d:].to(self.device)])
        optimizer.apply(stepped, torch.cat([hot_grad, both[:, :d]]).to(self.device))
        self.hot_table.index_copy_(0, hot_idx, stepped[:len(slots)])
        new = stepped[len(slots):].cpu().numpy()
        for lo in range(0, len(mine), self.slots):   # this rank's rows, a bank at a time
            part = mine[lo:lo + self.slots].astype(np.uint32)
            self._staging(g.bank)[:len(part)] = new[lo:lo + self.slots]
            self.dev.scatter(g.bank, part, wait=True)
        self.totals["bytes_d2h"] += len(mine) * self.layout.nbytes
        self.totals["cold_rows"] += len(g.cold_keys)
        k, rows_all = r.all_sum(mine, torch.from_numpy(new), kind="cold")
        self._done(g, [(k.astype(np.uint32), rows_all.numpy())])
        return len(mine)

    def _done(self, g, prev) -> None:
        """A batch's write-back is done: ``prev`` (its cold rows, `refresh_stale`'s parts) fixes
        the next batch's stale rows; the hot-set schedule sees the batch (data parallel: every
        rank's)."""
        self.prev, self._cur = prev, None
        if self.schedule is not None:
            counts = g.counts if self.ranks is None else \
                tuple(int(v) for v in self.ranks.sum(list(g.counts)))
            self.schedule.observe(self.step, *counts)
        self.step += 1

    # -- tables -------------------------------------------------------------------------
    def _hot_of(self, table) -> tuple[np.ndarray, np.ndarray]:
        """(rows, hot slots) of table ``table``'s hot keys."""
        p = self.placement
        mine = (p.keys >> np.uint32(ROW_BITS)) == table
        return (p.keys[mine] & np.uint32(MAX_ROWS - 1)).astype(np.int64), p.slots[mine]

    def _table_index(self, table) -> int:
        if not 0 <= int(table) < len(self.table_rows):
            raise HotlineError(f"table {table}: the store has tables 0..{len(self.table_rows) - 1}")
        return int(table)

    def read_table(self, table) -> torch.Tensor:
        """Data parallel with the tables split over nodes: a collective; rank 0 gets the
        table, the others no rows."""
        t = self._table_index(table)
        self.dev.drain()
        out = self.host.read_table(t)
        rows, slots = self._hot_of(t)
        if len(rows) and len(out):
            out[torch.from_numpy(rows)] = self.hot_table[self._index_tensor(slots)].cpu()
        return out

    def write_table(self, table, rows) -> None:
        t = self._table_index(table)
        if tuple(rows.shape) != (int(self.table_rows[t]), self.width):
            raise HotlineError(f"table {t}: rows of shape {tuple(rows.shape)} given, the table "
                               f"holds ({int(self.table_rows[t])}, {self.width})")
        self._between("write_table")
        self._recall()   # the prefetched batch gathered the rows before
        self.dev.drain()
        rows = rows.detach().to("cpu", torch.float32)
        self.host.write_table(t, rows)
        r, slots = self._hot_of(t)
        if len(r):
            self.hot_table[self._index_tensor(slots)] = rows[torch.from_numpy(r)].to(self.device)
        self.prev = None

    # -- counters -----------------------------------------------------------------------
    def counters(self) -> dict:
        """What the store did: lookups and hot lookups (``hot_share``), samples and popular
        samples (``popular_share``), cold rows (``host_rows``: beyond the staging slots), bytes
        to and from the torch device, the hot keys held, the hot sets loaded (``loads``), the
        device's time and ``overlap`` (its busy time the caller did not wait for)."""
        t = dict(self.totals)
        t["hot_share"] = t["hot_lookups"] / t["lookups"] if t["lookups"] else 0.0
        t["popular_share"] = t["popular_samples"] / t["samples"] if t["samples"] else 0.0
        t.update(steps=self.step, hot_keys=int(len(self.placement.keys)), loads=list(self.loads),
                 **self.dev.time)
        return t

    def __enter__(self) -> "HotlineStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the device (after its last scatters: their errors raise) and host memory."""
        dev, self.dev = getattr(self, "dev", None), None
        host, self.host = getattr(self, "host", None), None
        try:
            if dev is not None:
                dev.drain()
        finally:
            if dev is not None:
                dev.close()
            if host is not None:
                self.memory = self.host_rows = None
                host.close()
