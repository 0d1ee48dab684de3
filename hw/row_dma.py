"""Row DMA: gathers embedding-table rows into a staging buffer, or scatters them back (AXI4 master).

``GatherDMA`` (table row -> staging slot) and ``ScatterDMA`` (staging slot -> table row) are
``RowDMA`` with the direction fixed; ``RowDMA(None)`` takes the direction per command (a
``scatter`` bit in ``cmd``), so one AXI master serves both.

Parameters and ports: `RowDMA`'s docstring (one numpydoc template for the three classes).

Window check (per key, in hardware, before any transaction; first failing check names the
cause): ``table``: table >= num_tables or descriptor invalid; ``row``: row >= rows; ``desc``:
row_bytes zero, not a multiple of the bus width in bytes, or > staging_stride, base not
bus-aligned, or base + rows * row_bytes > 2**addr_width (a base with a bit at or above
addr_width among them: never truncated); ``slot``: bank >= staging_banks, slot >=
staging_slots, staging base or stride not bus-aligned, or staging window end (base + banks *
slots * stride) > 2**addr_width. The staging window is the one latched at the batch's command
(``RowCommandFront``), carried by each key through the check's stages. A refused row issues
no transaction, counts one ``window_errors``, sets its cause bit and still counts in its
batch's ``done``. So no access leaves [base, base + rows * row_bytes) of a table or the staging
window of its batch.

Ordering: batches in the same direction overlap (the next batch's keys enter while earlier
rows are still on the bus). With ``direction=None``, a command whose direction differs from the
previous one is accepted only after every earlier batch has completed (all write responses in),
so a gather after a scatter reads the rows written back, and a scatter after a gather reads the
staging slots just filled. Within a batch and across batches of one direction, reads are not
ordered after earlier writes: table and staging windows must not overlap.

Bursts: a row is copied in chunks of ``min(remaining, 4096 - src % 4096, 4096 - dst % 4096,
max_burst_beats * bus_bytes)`` bytes, each one AR burst and one AW burst (same length), issued
in row order. An R beat with an error response is still written (the beat count is kept) with
``wstrb`` = 0; write-data beat counts and ``wlast`` come from the engine's own bookkeeping
(``rready`` is low when no beat is due). An R beat whose ``rlast`` is not where that count
ends its burst (early or late) counts one ``axi_errors`` and sets ``axi_rlast``; the data is
still placed by the count, so rows never shift. Nothing waits on an error.

Organisation: ``RowDMA`` only instantiates and connects its stages, each a component with its
own file, docstring (ports, latency, throughput, backpressure) and tests
(tests/test_row_dma_stages.py); the stream payloads between them are in ``row_dma_layouts``.

    cmd, keys -> RowCommandFront -> RowWindowCheck -> RowChunker -+-> ar -> ReadEngine
                                                                  +-> aw, wlen, events ---+
    ReadEngine -> beats (credits back) -> WriteEngine <-----------------------------------+
    ReadEngine, WriteEngine -> event strobes -> RowDMACounters

- ``RowCommandFront`` (row_command_front.py): commands and keys -> one beat per key with its
  staging slot, batch end and direction; holds a change of direction until ``drained``;
  latches the staging window per command.
- ``RowWindowCheck`` (row_window_check.py): the descriptor RAM and the window check, a key
  pipeline of one key per cycle that stalls as a whole: S1 descriptor RAM read; S2 checks and
  multiplier inputs; S3 partial products (17 x 16 bits: one ECP5 DSP each); S4 products; S5
  addresses and cause. Descriptor writes go through the same kind of pipeline (products and
  bound check precomputed once per descriptor).
- ``RowChunker`` (row_chunker.py): an op FIFO (6 entries, 4 used: its room is registered)
  decouples the key pipeline's enable from the chunk sizing, and computes the bytes to the next
  4 KiB page of source and destination. An op's first chunk is decided when it is loaded
  (parallel compares, one select, registered; the AXI length is derived from that register); a
  row that needs more chunks spends two more cycles per further chunk deciding it. So one
  single-chunk row per cycle, one chunk per 3 cycles within a multi-chunk row (which has >=
  max_burst_beats beats per chunk except around a page boundary). Chunks go into four FIFOs:
  AR, AW, W lengths, events (per chunk: needs a write response, last chunk of a row; per
  refused row; per batch end).
- ``ReadEngine`` (read_engine.py): reads are credit-based: an AR is issued only when the
  read-data FIFO (``fifo_beats`` beats, in the write engine, which returns a credit per beat it
  takes out) has room for all its beats counting every beat still in flight, so R data always
  lands and ``rready`` never depends on the W channel. Up to ``fifo_beats`` beats are
  outstanding (default 128, i.e. 16 bursts of 8 beats). The read channel stays saturated while
  ``fifo_beats`` >= read latency + about 7 cycles (so the default hides ~120 cycles); below
  that, utilisation is about ``fifo_beats / (latency + 7)``.
- ``WriteEngine`` (write_engine.py): the read-data FIFO; W beats stream from it as soon as they
  arrive; AW bursts are issued as soon as the chunker creates them. Write responses retire
  events in order; a batch's ``done`` is emitted with the event of its last row. It also
  counts the batches in flight (``busy``, and ``drained`` for the front). ``max_chunks``
  bounds the chunks between the chunker and their write responses: it must cover (read
  latency + write-response latency) / beats per chunk (default 128).
- ``RowDMACounters`` (row_dma_counters.py): the counters and sticky causes, from the engines'
  event strobes.

Timing (``CMD_TO_KEY``, ``KEY_TO_AR``, ``R_TO_W``, ``B_TO_DONE``, checked by the tests):
cmd handshake -> first key handshake: 7 cycles (the staging-window check settles; the next
batch's command is taken in the cycle after its predecessor's last key, so batches in flight
hide it). Key handshake -> ARVALID (and AWVALID): 10 cycles (S1..S5, op FIFO, chunker,
AR/AW FIFO: ``RowWindowCheck.LATENCY`` + ``RowChunker.LATENCY``). R handshake -> WVALID: 5
cycles (data FIFO, W register, W FIFO). B handshake -> done valid: 3 cycles (the B register
slice, the done register, the done register slice). Descriptor write -> usable: ``DESC_LATENCY`` cycles. Throughput: one key
per cycle through the checks, one chunk per cycle from the chunker, one beat per cycle on R
and W. Measured with a 32-cycle memory (sim/bench_row_dma.py, 2048 rows): read-channel
utilisation 0.98-1.00 for 64 B and 256 B rows at 64, 128 and 256-bit data width (the rest is
the first read's latency and the last write response); at 512 bits a 64 B row is one beat, one
row per cycle (1,024 rows: their beats + 70 cycles at every width).
"""
from types import SimpleNamespace

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.dma import CAUSES, DIRECTIONS, PAGE
from hotline.contract.keys import KEY_BITS, ROW_BITS
from hotline.contract.streams import dma_done_layout, dma_keys_layout

from .axi import AXI4Signature
from .lib.register_slice import RegisterSlice
from .read_engine import ReadEngine
from .row_chunker import RowChunker
from .row_command_front import RowCommandFront
from .row_dma_counters import RowDMACounters
from .row_window_check import RowWindowCheck, window_ports
from .write_engine import WriteEngine

__all__ = ["RowDMA", "GatherDMA", "ScatterDMA"]


def _bus_part(bus, signature):
    """The members of the interface ``bus`` that ``signature`` names, as an interface of
    that signature (to connect one engine to its half of the AXI bus)."""
    return SimpleNamespace(signature=signature,
                           **{name: getattr(bus, name) for name in signature.members})


class RowDMA(wiring.Component):
    # One template for RowDMA, GatherDMA and ScatterDMA (as amaranth.lib.fifo's FIFOInterface):
    # they differ only in the direction parameter and cmd's scatter bit.
    _doc_template = """
    {description}

    Parameters
    ----------
{direction}    addr_width : int
        Bus address bits, 13..64.
    data_width : int
        Bus data bits: 64, 128, 256 or 512 (32 works too).
    num_tables : int
        Table descriptors, 1 .. ``2 ** (key_width - row_bits)``.
    row_bits, key_width : int
        The key layout: key = (table << row_bits) | row.
    max_burst_beats : int
        Beats per burst, 1..256, at most 4 KiB.
    fifo_beats : int
        Read-data FIFO depth: the read beats outstanding (>= max_burst_beats).
    max_chunks : int
        Chunks in flight between the chunker and their write responses.
    counter_width : int
        Bits of each counter (wrapping).
    framing : ``"count"`` or ``"end"``
        Where a batch's length is: in ``cmd``, or in band on ``keys``.

    Attributes
    ----------
    cmd : In stream
        framing "count": {{count: 16, bank: 1{scatter}}}: the next ``count`` keys on ``keys``
        form one batch for staging bank ``bank``; slot = index of the key in its batch;
        ``count`` = 0 is legal. framing "end": {{bank: 1{scatter}}}, the batch's keys follow
        it, closed by one beat with ``end`` set (its key is ignored): a source that learns a
        batch's length only after its keys (the Fragmenter's cold keys) streams them without
        buffering the batch; such a batch has no length limit: a key at index >= 65535 gets
        slot 65535 (saturated, never wrapped), beyond every staging window, so it is refused
        (cause ``slot``).{scatter_doc}
    keys : In stream
        {{key: key_width}} (framing "end": {{end, key}}); key = (table << row_bits) | row.
    done : Out stream
        {{rows: 16, errors: 16}}: one per command, in order, after the last write response of
        its batch: rows copied, rows refused by the window check (saturating at 65535; the
        ``window_errors`` counter counts them all).
    desc_we, desc_table, desc_base, desc_rows, desc_row_bytes : In
        Descriptor write port (base: 64 bits, as DESC_BASE_LO/HI hold it; rows: row_bits + 1,
        row_bytes: 16 bits). A write when ``desc_we`` is high sets the table's descriptor (a
        table id >= num_tables is ignored); rows = 0 invalidates it. All are invalid after
        reset. A write takes effect ``DESC_LATENCY`` cycles after ``desc_we``; do not rewrite
        a descriptor that a batch in flight uses. A base with a bit set at or above
        ``addr_width`` is refused (cause ``desc``), never truncated.
    staging_base, staging_stride, staging_slots, staging_banks : In
        The staging window (64, 16, 16, 2 bits): slot (bank, s) is at
        ``staging_base + (bank * staging_slots + s) * staging_stride``. Latched when a ``cmd``
        is taken (the values of that cycle): every key of the batch uses that copy, so a
        change at any time applies to the later commands only. A base with a bit set at or
        above ``addr_width`` fails the window's checks (cause ``slot``, nothing issued).
    bus : Out(AXI4Signature(addr_width, data_width))
        ID 0 only, INCR bursts of full-width beats (AxSIZE = log2(data_width / 8)),
        AxCACHE = 0b0011, AxPROT = 0.
    busy : Out
        A command was accepted whose ``done`` has not been taken yet.
    rows, window_errors, axi_errors, bytes_read, bytes_written : Out
        Counters (``clear_counters`` zeroes them): rows copied, rows refused, error read beats
        + error write responses + read beats with a wrong ``rlast``, bytes of OKAY read
        beats, bytes of write beats sent with strobes. They follow their events by two
        cycles, so they are final when the batch's ``done`` is valid.
    error_cause : Out
        Sticky {{table, row, slot, desc, axi_read, axi_write, axi_rlast, overflow}}
        (``overflow``: a counter wrapped; ``clear_errors`` zeroes it; events in the same
        cycle are kept).

    Behaviour (window check, ordering, bursts) and timing are in the module docstring.
    """
    __doc__ = _doc_template.format(
        description="Gather/scatter of table rows by key (AXI4 master), direction per command "
                    "or fixed.",
        direction="""    direction : ``"gather"``, ``"scatter"`` or None
        None: per command (``cmd.scatter``), so one AXI master serves both.
""",
        scatter=", scatter: 1", scatter_doc=" ``scatter`` (direction None only) chooses the "
        "direction.")

    SETUP_CYCLES = RowWindowCheck.SETUP_CYCLES  # staging-window check pipeline depth
    # desc_we -> the descriptor is used by a key accepted this many cycles later
    DESC_LATENCY = RowWindowCheck.DESC_LATENCY
    CMD_TO_KEY = SETUP_CYCLES + 2  # cmd handshake -> first key handshake (keys waiting)
    # key handshake -> ARVALID / AWVALID (credits and FIFOs free)
    KEY_TO_AR = RowWindowCheck.LATENCY + RowChunker.LATENCY
    R_TO_W = WriteEngine.R_TO_W        # R handshake -> WVALID of that beat
    B_TO_DONE = WriteEngine.B_TO_DONE + 1  # last B handshake of a batch -> done valid

    def __init__(self, direction=None, *, addr_width=32, data_width=64, num_tables=32,
                 row_bits=ROW_BITS, key_width=KEY_BITS, max_burst_beats=16, fifo_beats=128,
                 max_chunks=128, counter_width=48, framing="count"):
        if direction not in (None, *DIRECTIONS):
            raise ValueError(f"direction must be 'gather', 'scatter' or None, not {direction!r}")
        if data_width not in (32, 64, 128, 256, 512):
            raise ValueError(f"data_width must be 32, 64, 128, 256 or 512, not {data_width}")
        if not 13 <= addr_width <= 64:
            raise ValueError(f"addr_width must be 13..64, not {addr_width}")
        if not 1 <= row_bits < key_width or num_tables < 1 \
                or num_tables > 1 << (key_width - row_bits):
            raise ValueError("need 1 <= row_bits < key_width and "
                             "1 <= num_tables <= 2**(key_width - row_bits)")
        bus_bytes = data_width // 8
        if not 1 <= max_burst_beats <= 256 or max_burst_beats * bus_bytes > PAGE:
            raise ValueError(f"max_burst_beats must be 1..256 and at most 4096 bytes, "
                             f"not {max_burst_beats}")
        if fifo_beats < max_burst_beats or max_chunks < 2:
            raise ValueError("need fifo_beats >= max_burst_beats and max_chunks >= 2")
        self.direction = direction
        self.addr_width, self.data_width, self.num_tables = addr_width, data_width, num_tables
        self.row_bits, self.key_width, self.max_burst_beats = row_bits, key_width, max_burst_beats
        self.fifo_beats, self.max_chunks, self.counter_width = fifo_beats, max_chunks, counter_width
        self.bus_bytes = bus_bytes
        if framing not in ("count", "end"):
            raise ValueError(f"framing must be 'count' or 'end', not {framing!r}")
        self.framing = framing
        cmd = {"count": 16, "bank": 1} if framing == "count" else {"bank": 1}
        if direction is None:
            cmd["scatter"] = 1
        self.cmd_layout = data.StructLayout(cmd)
        self.cause_layout = data.StructLayout({c: 1 for c in CAUSES})
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "keys": In(stream.Signature(dma_keys_layout(key_width, framing))),
            "done": Out(stream.Signature(dma_done_layout())),
            **window_ports(addr_width, num_tables, row_bits),
            "bus": Out(AXI4Signature(addr_width, data_width)),
            "busy": Out(1),
            "rows": Out(counter_width),
            "window_errors": Out(counter_width),
            "axi_errors": Out(counter_width),
            "bytes_read": Out(counter_width),
            "bytes_written": Out(counter_width),
            "error_cause": Out(self.cause_layout),
            "clear_errors": In(1),
            "clear_counters": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        shapes = dict(addr_width=self.addr_width, data_width=self.data_width)
        m.submodules.front = front = RowCommandFront(
            self.cmd_layout, direction=self.direction, framing=self.framing,
            key_width=self.key_width, setup_cycles=self.SETUP_CYCLES)
        m.submodules.check = check = RowWindowCheck(
            **shapes, num_tables=self.num_tables, row_bits=self.row_bits,
            key_width=self.key_width)
        m.submodules.chunker = chunker = RowChunker(
            **shapes, max_burst_beats=self.max_burst_beats, max_chunks=self.max_chunks)
        m.submodules.read = read = ReadEngine(**shapes, fifo_beats=self.fifo_beats)
        m.submodules.write = write = WriteEngine(**shapes, fifo_beats=self.fifo_beats)
        m.submodules.counters = counters = RowDMACounters(
            counter_width=self.counter_width, bus_bytes=self.bus_bytes)

        wiring.connect(m, wiring.flipped(self.cmd), front.cmd)
        wiring.connect(m, wiring.flipped(self.keys), front.keys)
        wiring.connect(m, front.o, check.keys)
        wiring.connect(m, check.ops, chunker.ops)
        wiring.connect(m, chunker.ar, read.ar)
        wiring.connect(m, chunker.aw, write.aw)
        wiring.connect(m, chunker.wlen, write.wlen)
        wiring.connect(m, chunker.events, write.events)
        wiring.connect(m, read.beats, write.beats)
        # done leaves through a RegisterSlice (timing: the consumer's ready reached the write
        # engine's event retire and its registers' enables, the 1-lane top's critical path)
        m.submodules.done = done = RegisterSlice(write.done.payload.shape())
        wiring.connect(m, write.done, done.i)
        wiring.connect(m, done.o, wiring.flipped(self.done))
        for engine in (read, write):
            wiring.connect(m, engine.bus,
                           wiring.flipped(_bus_part(self.bus, engine.bus.signature)))

        def pass_on(src, dst, names):
            m.d.comb += [getattr(dst, name).eq(getattr(src, name)) for name in names]

        pass_on(self, check, ("desc_we", "desc_table", "desc_base", "desc_rows",
                              "desc_row_bytes"))
        # The staging window: latched per batch by the front, so that the host may rewrite
        # the registers while keys are in flight (a write applies to later commands).
        for name in ("base", "stride", "slots", "banks"):
            m.d.comb += [getattr(front.staging, name).eq(getattr(self, f"staging_{name}")),
                         getattr(check, f"staging_{name}").eq(getattr(front.window, name))]
        m.d.comb += [read.credit.eq(write.credit), write.started.eq(front.started),
                     front.drained.eq(write.drained),
                     self.busy.eq(write.busy | done.o.valid)]
        pass_on(read, counters, ("read_ok", "read_err"))
        pass_on(write, counters, ("row_done", "refused", "cause", "write_ok", "write_err",
                                  "rlast_err"))
        pass_on(self, counters, ("clear_errors", "clear_counters"))
        pass_on(counters, self, ("rows", "window_errors", "axi_errors", "bytes_read",
                                 "bytes_written", "error_cause"))
        return m


class GatherDMA(RowDMA):
    __doc__ = RowDMA._doc_template.format(
        description="RowDMA copying table rows into staging slots (the cold-row gather).",
        direction="", scatter="", scatter_doc="")

    def __init__(self, **kwargs):
        super().__init__("gather", **kwargs)


class ScatterDMA(RowDMA):
    __doc__ = RowDMA._doc_template.format(
        description="RowDMA copying staging slots back to table rows (the updated-row scatter).",
        direction="", scatter="", scatter_doc="")

    def __init__(self, **kwargs):
        super().__init__("scatter", **kwargs)
