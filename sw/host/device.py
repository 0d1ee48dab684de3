"""The Device API: one interface to the accelerator, several backends (docs/device-api.md;
contracts in docs/design.md).

``hotline.open(url, config=..., memory=...)`` returns a `Device`:

- ``model://``: the bit-accurate numpy model (CAM placement, fragmenter, cold-key set) with the
  row DMA model moving real bytes in `HostMemory`. Fast, no tools needed.
- ``sim://...`` and ``serial://...``: the RTL in co-simulation and a board; same interface
  (registered with `register_backend` when they exist).

A session::

    mem = HostMemory(64 << 20)
    with hotline.open("model://", config=AcceleratorConfig(), memory=mem) as dev:
        w = mem.alloc(rows * row_bytes, name="table0")
        dev.set_table(0, w, rows, row_bytes)          # descriptor registers
        dev.set_staging(mem.alloc(2 * slots * row_bytes), row_bytes, slots, banks=2)
        placement = dev.load_hot_set(hot_keys)          # CAM inserts (rank order)
        b = dev.push_batch(keys, lengths)               # fragment + gather into bank b % banks
        r = dev.pull_batch()                            # oldest pushed batch: a BatchResult
        ...train on r; write updated cold rows into staging bank r.bank...
        dev.scatter(r.bank, r.cold_keys)                # staging -> table rows

Several batches may be in flight (double buffering): the device gathers batch i + 1 while the
host trains on batch i. The host must scatter a bank before pushing the batch that reuses it
(batch ``b`` uses bank ``b % banks``); at most ``banks`` batches may be pushed and not pulled.

The device works beside its caller: every backend runs on a worker thread of its own (the
device's *agent*), which takes the calls in the order they were made. ``push_batch`` returns at
once; ``pull_batch`` waits only while its batch is not done; the other calls wait for
everything before them. An error of a pushed batch is raised by the ``pull_batch`` that takes
it. `Device.time` says how long the agent worked and how long the caller waited for it.
"""
import abc
import importlib
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from hotline.contract.beats import learner_sample
from hotline.contract.config import AcceleratorConfig
from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, MAX_TABLES, ROW_BITS
from hotline.contract.regmap import DEVICE_COUNTERS
from hotline.model.cold_key_set import ColdKeySetModel
from hotline.model.access_learner import AccessLearnerModel, top_k
from hotline.model.device_model import (DeviceModel, HotPlacement, place_hot_set,
                                        update_hot_set)
from hotline.model.popularity_cam import PopularityCAMModel
from hotline.model.dma_model import RowDMAModel

from .host_memory import HostMemory, Window, address_bits

__all__ = ["open", "register_backend", "Device", "ModelDevice", "BatchResult", "HotPlacement",
           "LearnerReadout", "TableDescriptor", "StagingDescriptor", "COUNTER_NAMES"]

COUNTER_NAMES = DEVICE_COUNTERS

#: ``model://`` indexes its hot set densely (`hotline.model.device_model.HotIndex`: one gather
#: per lookup; 8 bytes per registered table row, 512 MiB at this limit) while the registered
#: tables hold at most this many rows, and binary-searches it beyond (same results, slower).
MODEL_DENSE_INDEX_ROWS = 1 << 26


def _beyond_32_bits(keys: np.ndarray) -> bool:
    """Whether an integer array holds a value that is no 32-bit key (an unsigned type of at
    most 32 bits holds none: not scanned)."""
    if not keys.size or (keys.dtype.kind == "u" and keys.dtype.itemsize <= 4):
        return False
    return bool(keys.min() < 0 or keys.max() >= 1 << 32)


@dataclass
class BatchResult:
    """What the device returns for one pushed mini-batch.

    ``hot[l]``/``slot[l]``: lookup ``l`` (input order) hit the hot set at hot slot ``slot[l]``,
    or missed and reads cold slot ``slot[l]`` of staging bank ``bank``. ``popular`` /
    ``non_popular``: batch-local sample ids in input order. ``cold_keys``: the key gathered
    into each cold slot (unique unless the cold-key set overflowed, see ``overflow``).
    ``gather``: the gather DMA's completion, ``{"rows", "errors"}``.
    """
    batch_id: int
    bank: int
    samples: int
    hot: np.ndarray
    slot: np.ndarray
    popular: np.ndarray
    non_popular: np.ndarray
    cold_keys: np.ndarray
    overflow: bool
    gather: dict = field(default_factory=lambda: {"rows": 0, "errors": 0})

    @property
    def lookups(self) -> int:
        return len(self.hot)


@dataclass
class LearnerReadout:
    """The access learner's table read out (`Device.learner_stop`): each entry's key and
    count by entry address (count 0: empty), and the lookups it counted and dropped (the
    hazard rule) since its start."""
    keys: np.ndarray
    counts: np.ndarray
    counted: int
    dropped: int

    def top(self, k) -> np.ndarray:
        """The learned hot set: the ``k`` keys with the highest counts (ties by key)."""
        return top_k(self.keys, self.counts, k)


@dataclass(frozen=True)
class TableDescriptor:
    window: Window
    rows: int
    row_bytes: int


@dataclass(frozen=True)
class StagingDescriptor:
    window: Window
    stride: int
    slots: int
    banks: int

    def address(self, bank, slot) -> int:
        return self.window.base + (bank * self.slots + slot) * self.stride


class Device(abc.ABC):
    """The accelerator, whatever implements it. Backends override the abstract methods; the
    descriptor bookkeeping and argument checks live here so every backend agrees on them."""

    #: bus data width in bits (DMA beats), address width in bits
    data_width = 64
    addr_width = 32
    #: table descriptors: tables 0 .. num_tables - 1 (a backend sets its device's count)
    num_tables = MAX_TABLES
    #: descriptor register field limits (16-bit row_bytes / stride / slots, 2-bit banks)
    max_row_bytes = 0xFFFF
    max_stride = 0xFFFF
    max_slots = 0xFFFF
    max_banks = 3

    def __init__(self, url, config=None, memory=None):
        self.url = url
        self.config = config or AcceleratorConfig()
        if not isinstance(self.config, AcceleratorConfig):
            raise HotlineError(f"config must be an AcceleratorConfig, not {type(config).__name__}")
        self.memory = memory
        self.tables = {}
        self.staging = None
        self.placement = None
        self._next_batch = 0
        self._in_flight = deque()  # the agent's futures of the pushed batches, oldest first
        self._scatters = deque()   # (bank, future) of the scatters not waited for
        self._learning = None      # the future of learner_start while the learner counts
        self._closed = False
        self._agent = ThreadPoolExecutor(1, thread_name_prefix="hotline-device")
        self._busy = self._waited = 0.0

    # -- the agent ----------------------------------------------------------------------
    def _agent_submit(self, call, *args):
        """``call(*args)`` on the agent, after every call submitted before it: a Future."""
        def timed():
            t0 = time.perf_counter()
            try:
                return call(*args)
            finally:
                self._busy += time.perf_counter() - t0
        return self._agent.submit(timed)

    def _agent_result(self, future):
        """The result of ``future`` (its error raised here); the wait counts in `time`."""
        t0 = time.perf_counter()
        try:
            return future.result()
        finally:
            self._waited += time.perf_counter() - t0

    def _agent_call(self, call, *args):
        """``call(*args)`` on the agent, in order, waiting for its result."""
        return self._agent_result(self._agent_submit(call, *args))

    @property
    def time(self) -> dict:
        """``busy_seconds``: the agent's time in the backend; ``wait_seconds``: the callers'
        time waiting for it; ``overlap``: the share of the busy time the callers did not wait
        for (1.0 when the device is never waited for, 0.0 when it works synchronously)."""
        busy, waited = self._busy, self._waited
        return {"busy_seconds": busy, "wait_seconds": waited,
                "overlap": max(0.0, 1.0 - waited / busy) if busy else 1.0}

    # -- capabilities -------------------------------------------------------------------
    @property
    def bus_bytes(self) -> int:
        return self.data_width // 8

    def info(self) -> dict:
        """Capabilities: accelerator geometry and DMA parameters."""
        return {"url": self.url, "backend": self.backend, "data_width": self.data_width,
                "addr_width": self.addr_width, "num_tables": self.num_tables,
                "row_bits": ROW_BITS,
                "max_rows": MAX_ROWS, "hot_slots": self.config.hot_slots,
                "max_batch_samples": self.config.max_batch_samples,
                "max_cold_keys": self.config.cold_max_keys, "max_row_bytes": self.max_row_bytes,
                "max_staging_stride": self.max_stride, "max_staging_slots": self.max_slots,
                "max_staging_banks": self.max_banks, **{
                    f"accelerator_{k}": v for k, v in self.config.as_dict().items()}}

    # -- descriptor registers -----------------------------------------------------------
    def set_table(self, table, window, rows, row_bytes) -> None:
        """Register table ``table``: ``rows`` rows of ``row_bytes`` at ``window.base``."""
        self._check_open()
        table, rows, row_bytes = int(table), int(rows), int(row_bytes)
        if not 0 <= table < self.num_tables:
            raise HotlineError(f"table {table}: the device has {self.num_tables} tables, "
                               f"tables 0..{self.num_tables - 1}")
        if not 0 < rows <= MAX_ROWS:
            raise HotlineError(f"table {table}: {rows} rows; the device takes 1..2^{ROW_BITS}")
        if row_bytes <= 0 or row_bytes % self.bus_bytes or row_bytes > self.max_row_bytes:
            raise HotlineError(f"table {table}: row_bytes {row_bytes} is not a positive multiple "
                               f"of the {self.bus_bytes}-byte bus word up to {self.max_row_bytes}")
        if rows * row_bytes > window.size:
            raise HotlineError(f"table {table}: {rows} rows x {row_bytes} bytes do not fit its "
                               f"window '{window.name}' ({window.size:,} bytes)")
        if window.base % self.bus_bytes:
            raise HotlineError(f"table {table}: base {window.base:#x} is not bus-word aligned")
        self._check_window(window)
        if self.staging is not None and row_bytes > self.staging.stride:
            raise HotlineError(f"table {table}: row_bytes {row_bytes} exceed the staging stride "
                               f"{self.staging.stride}")
        d = TableDescriptor(window, rows, row_bytes)
        self._agent_call(self._write_table, table, d)
        self.tables[table] = d

    def set_staging(self, window, stride, slots, banks=2) -> None:
        """Register the staging buffer: ``banks`` banks of ``slots`` rows, ``stride`` bytes apart."""
        self._check_open()
        stride, slots, banks = int(stride), int(slots), int(banks)
        if stride <= 0 or stride % self.bus_bytes or stride > self.max_stride:
            raise HotlineError(f"staging stride {stride} is not a positive multiple of the "
                               f"{self.bus_bytes}-byte bus word up to {self.max_stride}")
        if not 0 < slots <= self.max_slots or not 0 < banks <= self.max_banks:
            raise HotlineError(f"staging: {slots} slots x {banks} banks; the device takes "
                               f"1..{self.max_slots} slots and 1..{self.max_banks} banks")
        if banks * slots * stride > window.size:
            raise HotlineError(f"staging: {banks} banks x {slots} slots x {stride} bytes do not "
                               f"fit window '{window.name}' ({window.size:,} bytes)")
        if window.base % self.bus_bytes:
            raise HotlineError(f"staging: base {window.base:#x} is not bus-word aligned")
        self._check_window(window)
        wide = [t for t, d in self.tables.items() if d.row_bytes > stride]
        if wide:
            raise HotlineError(f"staging stride {stride} is smaller than table {wide[0]}'s "
                               f"row_bytes {self.tables[wide[0]].row_bytes}")
        if self._in_flight:
            raise HotlineError("staging cannot change while batches are in flight")
        d = StagingDescriptor(window, stride, slots, banks)
        self._agent_call(self._write_staging, d)
        self.staging = d

    def _check_window(self, window):
        if self.memory is None:
            raise HotlineError("this device was opened without host memory (memory=...)")
        if window.base < 0 or window.end > self.memory.size:
            raise HotlineError(f"window '{window.name}' [{window.base:#x}, {window.end:#x}) is "
                               f"outside host memory ({self.memory.size:#x} bytes)")
        if window.end > 1 << self.addr_width:
            raise HotlineError(f"window '{window.name}' ends at {window.end:#x}, beyond the "
                               f"device's {self.addr_width}-bit address space")

    # -- hot set ------------------------------------------------------------------------
    def load_hot_set(self, keys) -> HotPlacement:
        """Clear the CAM and insert ``keys`` (rank order, hottest first); the `HotPlacement`
        says which slot each key got and which keys the CAM refused (they stay cold). More keys
        than ``config.hot_capacity`` is refused before any insert, on every backend."""
        self.placement = self._agent_call(self._load_hot_set, self._hot_keys(keys))
        return self.placement

    def update_hot_set(self, keys) -> HotPlacement:
        """Change the hot set to ``keys`` (rank order) in place: DELETE the held keys that
        leave, then INSERT those that enter. A key that stays keeps its slot unless an insert
        relocates it; the `HotPlacement` gives every key's slot now. Same checks as
        `load_hot_set`."""
        keys = self._hot_keys(keys)
        held = self.placement.keys if self.placement is not None else np.zeros(0, np.uint32)
        self.placement = self._agent_call(self._update_hot_set, held, keys)
        return self.placement

    def _hot_keys(self, keys) -> np.ndarray:
        self._check_open()
        if self._in_flight:
            raise HotlineError("the hot set cannot change while batches are in flight")
        keys = np.asarray(keys)
        if keys.ndim != 1:
            raise HotlineError("hot keys must be a 1-D array")
        if _beyond_32_bits(keys):
            raise HotlineError("hot keys must be 32-bit keys (table << ROW_BITS | row)")
        keys = keys.astype(np.uint32)
        if len(np.unique(keys)) != len(keys):
            raise HotlineError("hot keys must be distinct")
        self.config.check_hot_set(len(keys))
        return keys

    # -- access learner -----------------------------------------------------------------
    def learner_start(self) -> None:
        """Empty the access learner and count every lookup of the batches pushed after this
        call (a batch pushed before it is not counted). Returns at once; an error is raised
        by `learner_stop`."""
        self._check_open()
        self._learning = self._agent_submit(self._learner_start)

    def learner_stop(self) -> LearnerReadout:
        """Stop counting after the batches pushed so far and read the learner out (waits for
        them): a `LearnerReadout`, whose ``top(k)`` is the learned hot set."""
        self._check_open()
        if self._learning is None:
            raise HotlineError("learner_stop: the learner was not started (learner_start)")
        started, self._learning = self._learning, None
        self._agent_result(started)
        return self._agent_call(self._learner_stop)

    # -- batches ------------------------------------------------------------------------
    def push_batch(self, keys, lengths) -> int:
        """Fragment one mini-batch and gather its unique cold rows into staging bank
        ``batch_id % banks``; returns the batch id. ``keys`` uint32 [L] in sample order,
        ``lengths`` the lookups per sample ([n] or [n, F], summed over features)."""
        self._check_open()
        keys = np.asarray(keys)
        lengths = np.asarray(lengths)
        if lengths.ndim == 2:
            lengths = lengths.sum(axis=1)
        if lengths.ndim != 1 or keys.ndim != 1:
            raise HotlineError("push_batch takes keys [L] and lengths [n] or [n, F]")
        n = len(lengths)
        if n == 0:
            raise HotlineError("push_batch: empty batch")
        if np.any(lengths < 0) or int(lengths.sum()) != len(keys):
            raise HotlineError(f"push_batch: lengths sum to {int(lengths.sum())}, but there are "
                               f"{len(keys)} keys")
        if n > self.config.max_batch_samples:
            raise HotlineError(f"push_batch: {n} samples; the device takes at most "
                               f"{self.config.max_batch_samples} per batch")
        if _beyond_32_bits(keys):
            raise HotlineError("push_batch: keys must be 32-bit (table << ROW_BITS | row)")
        if self.staging is not None and len(self._in_flight) >= self.staging.banks:
            raise HotlineError(f"push_batch: {len(self._in_flight)} batches in flight already "
                               f"(one per staging bank); pull_batch first")
        batch_id = self._next_batch
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        keys = keys.astype(np.uint32)
        # The agent also collects the batch's results, so a pull waits for this batch alone,
        # not for the batches pushed after it.
        pushed = self._agent_submit(self._push_pull, batch_id, keys, offsets)
        self._next_batch += 1
        self._in_flight.append(pushed)
        return batch_id

    def pull_batch(self) -> BatchResult:
        """The `BatchResult` of the oldest pushed batch (waits while it is not done). Raises
        the error of a scatter not waited for that has finished with one."""
        self._check_open()
        if not self._in_flight:
            raise HotlineError("pull_batch: no batch in flight")
        result = self._agent_result(self._in_flight.popleft())
        self._check_scatters(wait=False)
        return result

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def scatter(self, bank, cold_keys, *, wait=True) -> dict | None:
        """Write staging bank ``bank``'s slots 0..len(cold_keys)-1 back to the rows of
        ``cold_keys``; returns the DMA completion ``{"rows", "errors"}``. It runs after the
        gathers of every batch pushed before it (a batch pushed next sees the rows it wrote;
        one already pushed does not). With ``wait=False`` it returns None at once: the bank
        must not be written again before a batch pushed after it is pulled (or `drain`), and
        DMA errors are raised (HotlineError) by a later `pull_batch`, `counters` or `drain`."""
        self._check_open()
        if self.staging is None:
            raise HotlineError("scatter: no staging buffer registered (set_staging)")
        if not 0 <= int(bank) < self.staging.banks:
            raise HotlineError(f"scatter: bank {bank} is not one of 0..{self.staging.banks - 1}")
        cold_keys = np.asarray(cold_keys).astype(np.uint32)
        if wait:
            return self._agent_call(self._scatter, int(bank), cold_keys)
        self._scatters.append((int(bank),
                               self._agent_submit(self._scatter, int(bank), cold_keys)))
        return None

    def _check_scatters(self, wait):
        """Raise the first error of the scatters not waited for: of those finished, or (``wait``)
        of all of them."""
        while self._scatters and (wait or self._scatters[0][1].done()):
            bank, future = self._scatters.popleft()
            done = self._agent_result(future)
            if done["errors"]:
                raise HotlineError(f"{self.url}: scatter of staging bank {bank} reported "
                                   f"{done['errors']} DMA errors")

    def wait_scatters(self) -> None:
        """Wait for the scatters not waited for (``wait=False``), raising the first one's DMA
        error; the calls made after them (a batch pushed next) may still run."""
        self._check_open()
        self._check_scatters(wait=True)

    def drain(self) -> None:
        """Wait for every call made so far (the batches in flight stay to be pulled); raises
        the error of a scatter not waited for."""
        self._check_open()
        self._agent_call(self._nothing)
        self._check_scatters(wait=True)

    # -- misc ---------------------------------------------------------------------------
    def counters(self) -> dict:
        """Event counters (see `COUNTER_NAMES`)."""
        self._check_open()
        counters = self._agent_call(self._counters)
        self._check_scatters(wait=True)
        return counters

    def close(self) -> None:
        """Close the device: the calls already made finish first (their errors are dropped:
        a batch not pulled has no one to report to)."""
        if not self._closed:
            self._closed = True
            try:
                self._agent_call(self._close)
            finally:
                self._agent.shutdown()

    def _check_open(self):
        if self._closed:
            raise HotlineError(f"{self.url}: device is closed")

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc):
        self.close()

    # -- what a backend implements ------------------------------------------------------
    backend = "abstract"

    @abc.abstractmethod
    def _write_table(self, table, descriptor): ...

    @abc.abstractmethod
    def _write_staging(self, descriptor): ...

    @abc.abstractmethod
    def _load_hot_set(self, keys): ...

    @abc.abstractmethod
    def _push(self, batch_id, keys, offsets): ...

    def _pull(self, result):
        return result

    def _push_pull(self, batch_id, keys, offsets):
        return self._pull(self._push(batch_id, keys, offsets))

    def _nothing(self):
        pass

    def _update_hot_set(self, held, keys):
        raise HotlineError(f"{self.url}: the {self.backend} backend cannot update the hot set "
                           f"in place")

    def _learner_start(self):
        raise HotlineError(f"{self.url}: the {self.backend} backend has no access learner")

    def _learner_stop(self):
        raise HotlineError(f"{self.url}: the {self.backend} backend has no access learner")

    @abc.abstractmethod
    def _scatter(self, bank, cold_keys): ...

    @abc.abstractmethod
    def _counters(self): ...

    def _close(self):
        pass


class ModelDevice(Device):
    """``model://``: the accelerator's bit-accurate models. Fragmentation is
    `hotline.model.device_model` (CAM placement, cold-key set with its overflow behaviour); bytes
    move with `hotline.model.dma_model.RowDMAModel` over ``memory``, address checks included.
    Options: ``addr_width`` (default: what ``memory`` needs, at least 32), ``data_width`` (64),
    ``max_burst_beats`` (16), ``num_tables`` (32; fewer models a board with fewer tables)."""

    backend = "model"

    def __init__(self, url, config=None, memory=None, addr_width=None, data_width=64,
                 max_burst_beats=16, num_tables=MAX_TABLES):
        super().__init__(url, config, memory)
        if not 0 < int(num_tables) <= MAX_TABLES:
            raise HotlineError(f"num_tables {num_tables}: the key format has tables "
                               f"0..{MAX_TABLES - 1}")
        self.num_tables = int(num_tables)
        if addr_width is None:
            addr_width = address_bits(memory.size if memory is not None else 1)
        self.addr_width, self.data_width = int(addr_width), int(data_width)
        if self.data_width % 8 or self.data_width <= 0:
            raise HotlineError(f"data_width {data_width} is not a whole number of bytes")
        self.dma = RowDMAModel(data_width=self.data_width, addr_width=self.addr_width,
                               num_tables=self.num_tables, row_bits=ROW_BITS,
                               max_burst_beats=max_burst_beats)
        self.max_burst_beats = max_burst_beats
        self._model = self._cam = None
        self._learner = None    # AccessLearnerModel, made at the first learner_start
        self._counting = False
        self._c = dict.fromkeys(COUNTER_NAMES, 0)
        self._index_stale = False
        self._load_hot_set(np.zeros(0, np.uint32))

    def info(self) -> dict:
        return {**super().info(), "max_burst_beats": self.max_burst_beats}

    def _write_table(self, table, d):
        old = self.dma.descriptors.get(table)
        self.dma.write_descriptor(table, d.window.base, d.rows, d.row_bytes)
        # the hot index covers the registered rows: rebuilt before the next batch
        self._index_stale |= old is None or old.rows != self.dma.descriptors[table].rows

    def _table_sizes(self):
        """Rows of the registered tables 0 .. the last (0: not registered), or None when
        there are none or more than `MODEL_DENSE_INDEX_ROWS` rows (the hot index then
        binary-searches)."""
        self._index_stale = False
        rows = {t: d.rows for t, d in self.dma.descriptors.items() if d.rows}
        if not rows or sum(rows.values()) > MODEL_DENSE_INDEX_ROWS:
            return None
        sizes = np.zeros(max(rows) + 1, np.int64)
        sizes[list(rows)] = list(rows.values())
        return sizes

    def _write_staging(self, d):
        self.dma.set_staging(d.window.base, d.stride, d.slots, d.banks)

    def _load_hot_set(self, keys):
        self._cam = PopularityCAMModel(**self.config.cam_kwargs())
        placement = place_hot_set(keys, self.config, self._cam)
        self._model = DeviceModel(placement.keys, placement.slots, self._table_sizes(),
                                  ColdKeySetModel(**self.config.cold_kwargs()))
        return placement

    def _update_hot_set(self, held, keys):
        placement = update_hot_set(self._cam, held, keys, self.config)
        # lookups see what the CAM holds (a key not deleted still hits); the cold-key set is
        # not touched by CAM commands (its epoch goes on)
        self._model = DeviceModel(*self._cam.contents(), self._table_sizes(),
                                  self._model.cold_set)
        return placement

    def _learner_start(self):
        if self._learner is None:
            self._learner = AccessLearnerModel(**self.config.learner_kwargs())
        else:
            self._learner.clear()
        self._counting = True
        self._learner_state = None  # learner_sample's, from the start

    def _learner_stop(self):
        self._counting = False
        keys, counts = self._learner.entries()
        return LearnerReadout(keys, counts, self._learner.counted, self._learner.dropped)

    def _push(self, batch_id, keys, offsets):
        if self._counting:
            counted, self._learner_state = learner_sample(keys, offsets, self.config.lanes,
                                                          self._learner_state)
            self._learner.update(counted)
        if self._index_stale:
            self._model.set_table_sizes(self._table_sizes())
        run = self._model.fragment(keys, offsets, len(offsets) - 1)
        for k, v in run.counters.as_dict().items():   # this batch's counts
            self._c[k] += v
        b = run.batch(0)
        bank = batch_id % self.staging.banks if self.staging is not None else 0
        gather = {"rows": 0, "errors": 0}
        if self.staging is not None and len(b["cold_keys"]):
            gather = self._dma("gather", b["cold_keys"], bank)
            self._c["gather_rows"] += gather["rows"]
        # the run's arrays are this batch's own (nothing else holds them): no copies
        return BatchResult(batch_id, bank, len(offsets) - 1, b["hot"], b["slot"],
                           b["popular"], b["non_popular"], b["cold_keys"],
                           bool(run.overflow[0]), gather)

    def _scatter(self, bank, cold_keys):
        if not len(cold_keys):
            return {"rows": 0, "errors": 0}
        done = self._dma("scatter", cold_keys, bank)
        self._c["scatter_rows"] += done["rows"]
        return done

    def _dma(self, direction, keys, bank):
        if self.memory is None or self.memory.array is None:
            raise HotlineError(f"{self.url}: no host memory to {direction} from")
        try:
            done = self.dma.run(self.memory.array, direction, keys, bank)
        except ValueError as e:
            raise HotlineError(f"{self.url}: {direction}: {e}") from None
        return {"rows": int(done["rows"]), "errors": int(done["errors"])}

    def _counters(self):
        c = dict(self._c)
        d = self.dma.counters()
        c.update(dma_bytes_read=int(d["bytes_read"]), dma_bytes_written=int(d["bytes_written"]),
                 window_errors=int(d["window_errors"]), axi_errors=int(d["axi_errors"]))
        return c


def _open_model(url, **options) -> Device:
    """``model://[NAME]`` (the agent a thread of this process; NAME, e.g. a rank, only
    labels it) or ``model://[NAME]?agent=process`` (the agent a process of its own:
    `hotline.host.model_agent`)."""
    _, has_query, query = url.partition("://")[2].partition("?")
    agent = options.pop("agent", "thread")
    if has_query:
        key, eq, value = query.partition("=")
        if key != "agent" or not eq or "&" in value:
            raise HotlineError(f"{url}: model:// takes one option, ?agent=thread|process")
        agent = value
    if agent == "thread":
        return ModelDevice(url, **options)
    if agent == "process":
        from .model_agent import ProcessModelDevice   # lazy: it imports this module
        return ProcessModelDevice(url, **options)
    raise HotlineError(f"{url}: unknown model agent {agent!r} (thread or process)")


_BACKENDS = {"model": _open_model}
_SHIPPED = ("model", "sim", "serial")  # the others register on import (hotline.<scheme>_device)


def register_backend(scheme, factory) -> None:
    """Make ``scheme://...`` open ``factory(url, config=..., memory=..., **options)``."""
    _BACKENDS[scheme] = factory


def open(url="model://", *, config=None, memory=None,  # noqa: A001 (the API name)
         **options) -> Device:
    """Open the accelerator at ``url`` (``model://``, ``sim://verilator|icarus``,
    ``serial://PORT``: see the backends' modules). ``config``: the `AcceleratorConfig`; ``memory``: the
    `HostMemory` the DMA reads and writes."""
    url = str(url)
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise HotlineError(f"device URL {url!r} has no scheme (expected e.g. model://)")
    if scheme not in _BACKENDS and scheme.isidentifier():
        # Backends register themselves on import: hotline.host.<scheme>_device (sim_device:
        # its module is imported only when a sim:// device is opened).
        try:
            importlib.import_module(f"{__package__}.{scheme}_device")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{scheme}_device":
                raise
    if scheme not in _BACKENDS:
        raise HotlineError(f"{url}: unknown device scheme {scheme!r} (known: "
                           f"{', '.join(sorted(set(_BACKENDS) | set(_SHIPPED)))})")
    if memory is not None and not isinstance(memory, HostMemory):
        raise HotlineError(f"memory must be a HostMemory, not {type(memory).__name__}")
    return _BACKENDS[scheme](url, config=config, memory=memory, **options)
