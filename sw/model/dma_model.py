"""Bit-exact model of the row DMA engine (hw/row_dma.py: GatherDMA / ScatterDMA / RowDMA).

The RTL is compared with this model transaction by transaction (the AR and AW address/length
sequences), batch by batch (the ``done`` records) and counter by counter; the host runtime's
``model://`` device uses it as its DMA. Pure numpy/Python: no amaranth import.

Semantics (the same as the RTL's docstring):

- A key is ``(table << row_bits) | row``. Batch slot = index of the key within its batch.
- Window check, in this priority order (the first failing check names the cause):
  ``table``: table >= num_tables, or no valid descriptor (rows == 0);
  ``row``:   row >= rows;
  ``desc``:  row_bytes == 0, row_bytes not a multiple of the bus width in bytes, row_bytes >
             staging stride, table base not bus-aligned, base >= 2**addr_width, or base + rows *
             row_bytes > 2**addr_width;
  ``slot``:  bank >= staging banks, slot >= staging slots, staging base or stride not
             bus-aligned, staging base >= 2**addr_width, or staging base + banks * slots *
             stride > 2**addr_width.
  Bases are kept with all their ``BASE_BITS`` (the BASE_LO/BASE_HI registers): one at or above
  2**addr_width is refused, never truncated to an alias in low memory.
- The staging window a batch uses is the one set before the batch (the RTL latches it at the
  batch's command): `run` and `bursts` take it whole, so `set_staging` between batches
  affects only the later ones.
  A refused row issues no transaction, counts one ``window_errors`` and sets its cause bit.
- A row is copied in chunks: ``min(remaining, 4096 - src % 4096, 4096 - dst % 4096,
  max_burst_beats * bus_bytes)`` bytes, each one INCR read burst (AR) and one INCR write burst
  (AW), full-width beats. Gather: table row -> staging slot; scatter: staging slot -> table row.
- A read beat answered with an error (``read_error(addr)``) is written with no byte strobe and
  counts one ``axi_errors``; a write burst with an error response counts one ``axi_errors``.
  The memory model of the slaves used in tests: a read-error beat returns no data; a write beat
  at an address with ``write_error(addr)`` is dropped and makes its burst's response an error.
  A read beat at an address with ``rlast_error(addr)`` comes with the wrong ``rlast`` (set
  before its burst's last beat, or missing on it): it counts one ``axi_errors`` and sets
  ``axi_rlast``; its data is still copied where the engine's own beat count puts it.
- ``bytes_read`` counts the bytes of read beats answered OKAY, ``bytes_written`` the bytes of
  write beats sent with strobes (before their response is known). ``rows`` counts copied rows
  (whatever their AXI responses). All counters wrap at ``2**counter_width``; a wrap sets the
  ``overflow`` cause. A done record's ``errors`` saturates at ``DONE_MAX`` (65535); a batch's
  slot numbers saturate there too, beyond every staging window (the engine's ``end``-framed
  batches have no length limit).
- Copies are applied in issue order; the hardware overlaps the read of one chunk with the write
  of earlier ones, so the memory result is exact only when table and staging windows do not
  overlap (the address sequences and counters always are).
"""
from dataclasses import dataclass

import numpy as np

from hotline.contract.dma import BASE_BITS, CAUSES, DIRECTIONS, PAGE
from hotline.contract.keys import KEY_BITS, ROW_BITS

__all__ = ["TableDescriptor", "StagingWindow", "RowDMAModel"]

_INT64_MAX = (1 << 63) - 1   # the vectorised batch path's addresses are int64


@dataclass
class TableDescriptor:
    base: int
    rows: int
    row_bytes: int


@dataclass
class StagingWindow:
    base: int = 0
    stride: int = 0
    slots: int = 0
    banks: int = 0


class RowDMAModel:
    """The row DMA: descriptors, staging window, window check, burst split, counters."""

    COUNTERS = ("rows", "window_errors", "axi_errors", "bytes_read", "bytes_written")
    DONE_MAX = 0xFFFF  # a done record's fields saturate here (16 bits)

    def __init__(self, data_width=64, addr_width=32, num_tables=32, row_bits=ROW_BITS,
                 max_burst_beats=16, key_width=KEY_BITS, counter_width=48):
        if data_width % 8 or data_width & (data_width - 1):
            raise ValueError(f"data_width must be a power of two, not {data_width}")
        if not 1 <= max_burst_beats <= 256 or max_burst_beats * data_width // 8 > PAGE:
            raise ValueError(f"max_burst_beats must be 1..256 and fit a 4 KiB page, "
                             f"not {max_burst_beats}")
        self.data_width, self.addr_width = data_width, addr_width
        self.num_tables, self.row_bits, self.key_width = num_tables, row_bits, key_width
        self.max_burst_beats, self.counter_width = max_burst_beats, counter_width
        self.bus_bytes = data_width // 8
        self.descriptors = {}   # changed by write_descriptor and reset only (_table_arrays)
        self._tables = self._tables_state = None
        self.staging = StagingWindow()
        self.error_cause = 0
        self.clear_counters()

    # ---- configuration -----------------------------------------------------------------

    def write_descriptor(self, table, base, rows, row_bytes):
        """Register table ``table``'s window (values truncated to the port widths, like the
        RTL's descriptor port; a table id >= num_tables is ignored). rows = 0 invalidates."""
        if not 0 <= table < self.num_tables:
            return
        self._tables = None
        self.descriptors[table] = TableDescriptor(base & ((1 << BASE_BITS) - 1),
                                                  rows & ((1 << (self.row_bits + 1)) - 1),
                                                  row_bytes & 0xFFFF)

    def set_staging(self, base, stride, slots, banks):
        self.staging = StagingWindow(base & ((1 << BASE_BITS) - 1), stride & 0xFFFF,
                                     slots & 0xFFFF, banks & 3)

    def reset(self):
        """Power-on state: no valid descriptor, counters and error bits zero."""
        self.descriptors = {}
        self._tables = None
        self.error_cause = 0
        self.clear_counters()

    def clear_counters(self):
        self.rows = self.window_errors = self.axi_errors = 0
        self.bytes_read = self.bytes_written = 0

    def clear_errors(self):
        self.error_cause = 0

    def counters(self):
        return {name: getattr(self, name) for name in self.COUNTERS}

    @property
    def error_causes(self):
        """The sticky error_cause bits that are set, by name."""
        return {c for i, c in enumerate(CAUSES) if self.error_cause >> i & 1}

    # ---- address computation -----------------------------------------------------------

    def split(self, key):
        key = int(key) & ((1 << self.key_width) - 1)
        return key >> self.row_bits, key & ((1 << self.row_bits) - 1)

    def check(self, key, slot, bank):
        """(table address, staging address, bytes) of the row ``key`` into staging ``(bank,
        slot)``, or the refusal cause ('table', 'row', 'desc' or 'slot')."""
        st = self.staging
        table, row = self.split(key)
        d = self.descriptors.get(table)
        if table >= self.num_tables or d is None or d.rows == 0:
            return "table"
        if row >= d.rows:
            return "row"
        if not self._desc_ok(d):
            return "desc"
        if bank >= st.banks or slot >= st.slots or not self._staging_ok():
            return "slot"
        return (d.base + row * d.row_bytes, st.base + (bank * st.slots + slot) * st.stride,
                d.row_bytes)

    def _desc_ok(self, d):
        """Descriptor ``d`` passes the ``desc`` checks (with the current staging stride)."""
        b, top = self.bus_bytes, 1 << self.addr_width
        return not (d.row_bytes == 0 or d.row_bytes % b or d.row_bytes > self.staging.stride
                    or d.base % b or d.base >= top or d.base + d.rows * d.row_bytes > top)

    def _staging_ok(self):
        """The staging window passes its own checks (alignment, inside 2**addr_width)."""
        st, b, top = self.staging, self.bus_bytes, 1 << self.addr_width
        return not (st.base % b or st.stride % b or st.base >= top
                    or st.base + st.banks * st.slots * st.stride > top)

    def chunks(self, src, dst, nbytes):
        """A row copy as (src, dst, bytes) chunks: no 4 KiB crossing, <= max_burst_beats."""
        out = []
        limit = self.max_burst_beats * self.bus_bytes
        while nbytes:
            n = min(nbytes, PAGE - src % PAGE, PAGE - dst % PAGE, limit)
            out.append((src, dst, n))
            src, dst, nbytes = src + n, dst + n, nbytes - n
        return out

    def _rows(self, direction, keys, bank):
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        for slot, key in enumerate(keys):
            r = self.check(key, slot, bank)
            if isinstance(r, str):
                yield r
            else:
                table_addr, staging_addr, n = r
                yield ((table_addr, staging_addr, n) if direction == "gather"
                       else (staging_addr, table_addr, n))

    def bursts(self, direction, keys, bank):
        """Every chunk (src, dst, bytes) of the batch in issue order: the AR sequence is
        (src, bytes // bus_bytes - 1), the AW sequence (dst, bytes // bus_bytes - 1)."""
        out = []
        for r in self._rows(direction, keys, bank):
            if not isinstance(r, str):
                out += self.chunks(*r)
        return out

    # ---- execution ----------------------------------------------------------------------

    def _wrap(self, value):
        """``value`` at the counters' width; a wrap sets the ``overflow`` cause."""
        if value >> self.counter_width:
            self.error_cause |= 1 << CAUSES.index("overflow")
        return value & ((1 << self.counter_width) - 1)

    def _table_arrays(self):
        """(base, rows, row_bytes, desc check failed, window past int64) per table id, table
        ``num_tables`` standing for every id beyond; cached until a descriptor or the staging
        stride changes. A base that is refused, or whose window int64 cannot hold (a 64-bit
        bus), is 0 here."""
        if self._tables is None or self._tables_state != self.staging.stride:
            n = self.num_tables
            base, nrows, rb = (np.zeros(n + 1, np.int64) for _ in range(3))
            bad, wide = np.ones(n + 1, bool), np.zeros(n + 1, bool)
            for t, d in self.descriptors.items():
                bad[t] = not self._desc_ok(d)
                wide[t] = not bad[t] and d.base + d.rows * d.row_bytes > _INT64_MAX
                base[t] = 0 if bad[t] or wide[t] else d.base
                nrows[t], rb[t] = d.rows, d.row_bytes
            self._tables_state, self._tables = self.staging.stride, (base, nrows, rb, bad, wide)
        return self._tables

    def _fast_copies(self, direction, keys, bank):
        """(src, dst, row_bytes, causes) of a whole batch, vectorised, when every copy can be
        done as one fancy-indexed assignment with the sequential loop's result: all accepted
        rows have one size and no source range meets a destination range. None otherwise."""
        keys = np.asarray(keys, np.int64) & ((1 << self.key_width) - 1)
        if keys.size == 0:
            return None
        st = self.staging
        base, nrows, rb, bad, wide = self._table_arrays()
        table = np.minimum(keys >> self.row_bits, self.num_tables)
        staging_bad = bank >= st.banks or not self._staging_ok()
        if wide.take(table).any() or (
                not staging_bad and st.base + st.banks * st.slots * st.stride > _INT64_MAX):
            return None   # addresses past int64: the per-row path, in Python integers
        row = keys & ((1 << self.row_bits) - 1)
        rows_of = nrows.take(table)
        slot = np.arange(len(keys))
        cause = np.full(len(keys), -1, np.int64)
        # (a table without rows fails the row check too: one pass tells whether any row fails)
        if (staging_bad or len(keys) > st.slots or bad.take(table).any()
                or (row >= rows_of).any()):
            for name, refused in (("slot", staging_bad | (slot >= st.slots)),
                                  ("desc", bad.take(table)), ("row", row >= rows_of),
                                  ("table", rows_of == 0)):
                cause[refused] = CAUSES.index(name)   # the last assignment is the first check
            ok = cause < 0
            table, row, slot = table[ok], row[ok], slot[ok]
        sizes = rb.take(table)
        if sizes.size and (sizes != sizes[0]).any():
            return None
        size = int(sizes[0]) if sizes.size else 0
        table_addr = base.take(table) + row * size
        staging_addr = (0 if staging_bad else st.base) + (bank * st.slots + slot) * st.stride
        src, dst = ((table_addr, staging_addr) if direction == "gather"
                    else (staging_addr, table_addr))
        if src.size:
            ascending = bool((dst[1:] > dst[:-1]).all())    # a gather's targets: distinct
            ordered = dst if ascending else np.sort(dst)
            if not (src.max() + size <= ordered[0] or ordered[-1] + size <= src.min()):
                return None
            if not ascending and (ordered[1:] == ordered[:-1]).any():
                return None   # repeated targets: the loop's order matters
        return src, dst, size, cause

    def run(self, memory, direction, keys, bank, read_error=None, write_error=None,
            rlast_error=None):
        """Copy one batch in ``memory`` (uint8, index = bus address: a 1-D array, or with a
        fault predicate any object with ``size`` and byte slices); update the counters and
        error bits; return the batch's done record {rows, errors}. ``read_error``,
        ``write_error``, ``rlast_error``: address predicates of the slave's faults (module
        docstring)."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        fast = None
        faults = (read_error, write_error, rlast_error)
        if faults == (None, None, None):
            fast = self._fast_copies(direction, keys, bank)
        if fast is not None:
            src, dst, size, cause = fast
            if src.size and max(src.max(), dst.max()) + size > memory.size:
                raise ValueError(f"a copy reaches beyond the memory array ({memory.size} bytes)")
            if src.size:
                copy_rows(memory, src, dst, size)
            refused = cause[cause >= 0]
            errors = len(refused)
            for c in np.flatnonzero(np.bincount(refused)).tolist():
                self.error_cause |= 1 << c
            self.window_errors = self._wrap(self.window_errors + errors)
            self.bytes_read = self._wrap(self.bytes_read + src.size * size)
            self.bytes_written = self._wrap(self.bytes_written + src.size * size)
            self.rows = self._wrap(self.rows + src.size)
            return {"rows": int(src.size), "errors": min(errors, self.DONE_MAX)}
        b = self.bus_bytes
        rows = errors = 0
        for r in self._rows(direction, keys, bank):
            if isinstance(r, str):
                errors += 1
                self.window_errors = self._wrap(self.window_errors + 1)
                self.error_cause |= 1 << CAUSES.index(r)
                continue
            src, dst, n = r
            if max(src, dst) + n > memory.size:
                raise ValueError(f"copy {src:#x} -> {dst:#x} ({n} bytes) is outside the memory "
                                 f"array ({memory.size} bytes)")
            for csrc, cdst, cn in self.chunks(src, dst, n):
                if faults == (None, None, None):
                    memory[cdst:cdst + cn] = memory[csrc:csrc + cn]
                    self.bytes_read = self._wrap(self.bytes_read + cn)
                    self.bytes_written = self._wrap(self.bytes_written + cn)
                    continue
                burst_error = False
                for off in range(0, cn, b):
                    a, d = csrc + off, cdst + off
                    if rlast_error is not None and rlast_error(a):
                        self.axi_errors = self._wrap(self.axi_errors + 1)
                        self.error_cause |= 1 << CAUSES.index("axi_rlast")
                    if read_error is not None and read_error(a):
                        self.axi_errors = self._wrap(self.axi_errors + 1)
                        self.error_cause |= 1 << CAUSES.index("axi_read")
                        continue
                    self.bytes_read = self._wrap(self.bytes_read + b)
                    self.bytes_written = self._wrap(self.bytes_written + b)
                    if write_error is not None and write_error(d):
                        burst_error = True
                        continue
                    memory[d:d + b] = memory[a:a + b]
                if burst_error:
                    self.axi_errors = self._wrap(self.axi_errors + 1)
                    self.error_cause |= 1 << CAUSES.index("axi_write")
            rows += 1
            self.rows = self._wrap(self.rows + 1)
        return {"rows": rows, "errors": min(errors, self.DONE_MAX)}


def copy_rows(memory, src, dst, size):
    """``memory[d:d + size] = memory[s:s + size]`` for each (s, d) of ``src``, ``dst`` in
    order, every source read before the first write. In a 1-D byte array the rows are those of
    a strided view (row i = bytes i .. i + size - 1): one row copy each, not one index a byte."""
    if memory.ndim == 1 and memory.dtype == np.uint8 and memory.flags.c_contiguous:
        # each row one ``size``-byte item (numpy copies an item whole, not byte by byte:
        # 1.5-3x faster than a strided uint8 view at 512-byte rows)
        rows = np.ndarray((len(memory) - size + 1,), np.dtype((np.void, size)), buffer=memory,
                          strides=(1,))
        rows[dst] = rows[src]
        return
    lane = np.arange(size, dtype=np.int64)
    memory[(dst[:, None] + lane).ravel()] = memory[(src[:, None] + lane).ravel()]


def as_memory(size):
    """A zeroed uint8 memory of ``size`` bytes (pages are only allocated when touched)."""
    return np.zeros(size, np.uint8)
