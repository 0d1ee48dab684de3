"""The accelerator's streams (contract): payload layouts, their order on the host link, and
beats packed into integers.

The top (`hotline.hw.accelerator.HotlineAccelerator`) has three input streams and six result
streams; `stream_layouts` gives their payload layouts from an `AcceleratorConfig` without
building any gateware, and the blocks build their ports from the same functions:

- ``lookups`` {key, eos, eob, empty}: one beat per lookup, samples and batches in order
  (`lookup_beats`); ``eos`` closes a sample, ``eob`` a batch, ``empty`` stands for a sample
  with no lookup. With L lanes (`AcceleratorConfig.lanes`) a beat carries L of them (see
  "Lane beats" below);
- ``scatter_keys`` {end, key}: a scatter batch's keys, then a beat with ``end`` = 1;
- ``cam_cmds`` {op, key}: CAM commands in bulk, as CAM_CMD writes are (`cam_cmd_layout`);
- ``remap`` {hot, slot}: per lookup, its hot slot or its cold slot;
- ``popular`` / ``non_popular`` {sample}: batch-local sample ids;
- ``batch_keys`` {end, key, popular, non_popular, cold, overflow}: a batch's unique cold keys
  (``end`` = 0), then its summary (``end`` = 1, `batch_end`);
- ``dma_done`` {rows, errors, scatter}: one record per gather or scatter batch;
- ``cam_events`` {move, word} (with CONFIG.cam_events): per CAM command its relocations
  (``move`` = 1, ``word`` as the CAM_MOVE register reads), then its response (``move`` = 0,
  ``word`` as CAM_RESP reads).

Lane beats: with L > 1 lanes, ``lookups``, ``remap``, ``popular`` and ``non_popular`` (and the
Fragmenter's ``cold_keys``, inside the top) carry up to L entries per beat: each per-entry field is an ``ArrayLayout(width, L)`` (entry ``i`` in
lane ``i``), and a field ``last`` (``ceil_log2(L)`` bits) is the index of the beat's last
entry; the other fields belong to the beat (``lookups.eob``: the beat closes its batch). A
``lookups`` beat holds consecutive lookup beats of one batch (`lane_groups`: L per beat, a
batch's first starts a new one). The Fragmenter answers each ``lookups`` beat with at most one
beat per stream: ``remap`` its non-empty lookups, ``popular`` / ``non_popular`` the samples
it closes, in order; a stream with no entry for it gets no beat. ``cold_keys`` holds each batch's
new cold keys L per beat from the batch's first (the last beat what is left). At L = 1 every layout is the
same bits as the single-lookup one (``last`` has no bits). `lane_pack` / `lane_unpack` convert.

``RESULT_STREAMS`` is also the order of the streams in a ``RESULTS`` response of the host
link. A payload is an unsigned integer, the first field in its least significant bits
(`amaranth.lib.data.StructLayout`); `pack` and `unpack` convert whole arrays of beats.
"""
import numpy as np
from amaranth.lib import data
from amaranth.utils import bits_for, ceil_log2

from .beats import lane_groups, lookup_beats
from .config import AcceleratorConfig, cold_slot_width, hot_slot_width
from .keys import KEY_BITS
from .shapes import CAMOp

__all__ = ["INPUT_STREAMS", "RESULT_STREAMS", "STREAMS", "LANE_STREAMS", "pack_lookups",
           "BATCH_END", "DMA_DONE_FIELDS",
           "lookup_layout", "sample_widths", "fragmenter_layouts", "cold_key_layout", "batch_keys_layout", "dma_keys_layout",
           "dma_done_layout", "cam_cmd_layout", "CAM_EVENT_LAYOUT", "stream_layouts", "batch_end",
           "batch_key", "pack", "unpack", "lookup_beats", "lane_layout", "lane_groups", "lane_pack",
           "lane_unpack", "lane_count"]

INPUT_STREAMS = ("lookups", "scatter_keys", "cam_cmds")
# The streams in lane beats (L entries per beat with L lanes).
LANE_STREAMS = ("lookups", "remap", "popular", "non_popular")
RESULT_STREAMS = ("remap", "popular", "non_popular", "batch_keys", "dma_done", "cam_events")
STREAMS = INPUT_STREAMS + RESULT_STREAMS

# The batch_keys field that closes a batch; it is the layout's first field, bit 0 of a beat.
BATCH_END = "end"
DMA_DONE_FIELDS = {"rows": 16, "errors": 16}


def lane_layout(entry: dict, lanes: int) -> data.StructLayout:
    """A lane beat's layout: each ``entry`` field {name: width} as ``ArrayLayout(width,
    lanes)``, then ``last`` (the last entry's lane). At one lane it has the bits of
    ``entry``. (`lookup_layout` spells its own: its beat field ``eob`` sits between entry
    fields, where the one-lane lookup has always had it.)"""
    fields = {name: data.ArrayLayout(width, lanes) for name, width in entry.items()}
    return data.StructLayout({**fields, "last": ceil_log2(lanes)})


def lookup_layout(key_width: int = KEY_BITS, lanes: int = 1) -> data.StructLayout:
    """The ``lookups`` payload (of ``lanes`` lookups; at one lane {key, eos, eob, empty})."""
    if lanes == 1:
        return data.StructLayout({"key": key_width, "eos": 1, "eob": 1, "empty": 1})
    return data.StructLayout({"key": data.ArrayLayout(key_width, lanes),
                              "eos": data.ArrayLayout(1, lanes), "eob": 1,
                              "empty": data.ArrayLayout(1, lanes), "last": ceil_log2(lanes)})


def sample_widths(max_batch_samples: int) -> tuple[int, int]:
    """(batch-local sample index, per-batch sample count) widths of the Fragmenter's streams
    for batches of up to ``max_batch_samples`` samples (a larger batch's values wrap)."""
    return bits_for(max_batch_samples - 1), bits_for(max_batch_samples)


def fragmenter_layouts(*, hot_slot_width: int, cold_slot_width: int, max_batch_samples: int,
                       cold_max_keys: int, key_width: int = KEY_BITS, lanes: int = 1) -> dict:
    """The Fragmenter's output payloads: ``remap``, ``popular``, ``non_popular``,
    ``cold_keys`` (lane beats of ``lanes`` entries) and ``batches`` (a batch's summary)."""
    sample_width, count_width = sample_widths(max_batch_samples)
    return {
        "remap": lane_layout({"hot": 1, "slot": max(hot_slot_width, cold_slot_width)}, lanes),
        "popular": lane_layout({"sample": sample_width}, lanes),
        "non_popular": lane_layout({"sample": sample_width}, lanes),
        "cold_keys": lane_layout(dict(cold_key_layout(key_width).members), lanes),
        "batches": data.StructLayout({"popular": count_width, "non_popular": count_width,
                                      "cold": bits_for(cold_max_keys * 2), "overflow": 1}),
    }


def cold_key_layout(key_width: int = KEY_BITS) -> data.StructLayout:
    """One cold key {key}: an entry of the Fragmenter's ``cold_keys``, and the key fields of
    ``batch_keys``."""
    return data.StructLayout({"key": key_width})


def batch_keys_layout(key_layout: data.StructLayout,
                      batch_layout: data.StructLayout) -> data.StructLayout:
    """``batch_keys``: the ``end`` flag, then the cold-key fields, then the summary fields."""
    return data.StructLayout({BATCH_END: 1, **dict(key_layout.members),
                              **dict(batch_layout.members)})


def dma_keys_layout(key_width: int = KEY_BITS, framing: str = "end") -> data.StructLayout:
    """The row DMA's key stream: {key} (``framing="count"``: the command says how many), or
    {end, key} (``"end"``: a beat with ``end`` closes the batch; the top's ``scatter_keys``)."""
    return data.StructLayout({"key": key_width} if framing == "count"
                             else {"end": 1, "key": key_width})


def dma_done_layout(scatter: bool = False) -> data.StructLayout:
    """The row DMA's done record {rows, errors}; with ``scatter`` the top's ``dma_done``, which
    also says whether the batch was a scatter."""
    return data.StructLayout({**DMA_DONE_FIELDS, **({"scatter": 1} if scatter else {})})


def cam_cmd_layout(key_width: int = KEY_BITS) -> data.StructLayout:
    """A CAM command {op: `CAMOp`, key}: the CAM's command port and the top's ``cam_cmds``."""
    return data.StructLayout({"op": CAMOp, "key": key_width})


# A CAM event: a relocation (``move`` = 1) or a response, ``word`` encoded as the CAM_MOVE or
# CAM_RESP register reads it (valid bit set).
CAM_EVENT_LAYOUT = data.StructLayout({"move": 1, "word": 32})


def stream_layouts(config: AcceleratorConfig, key_width: int = KEY_BITS) -> dict:
    """{stream: payload layout} of the top built from ``config``, for every name in
    ``STREAMS`` (no gateware is built)."""
    f = fragmenter_layouts(hot_slot_width=hot_slot_width(config.cam_entries, config.cam_stash),
                           cold_slot_width=cold_slot_width(config.cold_max_keys),
                           max_batch_samples=config.max_batch_samples,
                           cold_max_keys=config.cold_max_keys, key_width=key_width,
                           lanes=config.lanes)
    return {"lookups": lookup_layout(key_width, config.lanes),
            "scatter_keys": dma_keys_layout(key_width),
            "cam_cmds": cam_cmd_layout(key_width),
            "remap": f["remap"], "popular": f["popular"], "non_popular": f["non_popular"],
            "batch_keys": batch_keys_layout(cold_key_layout(key_width), f["batches"]),
            "dma_done": dma_done_layout(scatter=True), "cam_events": CAM_EVENT_LAYOUT}


def batch_end(beat: int) -> bool:
    """True for a ``batch_keys`` beat that closes its batch (its `BATCH_END` bit)."""
    return bool(int(beat) & 1)


def batch_key(beat: int, key_width: int = KEY_BITS) -> int:
    """The cold key of a ``batch_keys`` beat that does not close its batch (the field after
    `BATCH_END`)."""
    return (int(beat) >> 1) & ((1 << key_width) - 1)


def _fields(layout):
    """(name, offset, width) of a flat struct layout, least-significant first."""
    return [(name, f.offset, f.width) for name, f in layout]


def pack(layout: data.StructLayout, **arrays) -> np.ndarray:
    """Vectorised struct packing into uint64 (payloads up to 64 bits); fields not given are 0."""
    n = len(next(iter(arrays.values())))
    out = np.zeros(n, np.uint64)
    for name, offset, width in _fields(layout):
        if name in arrays:
            out |= (np.asarray(arrays[name]).astype(np.uint64) & np.uint64((1 << width) - 1)) \
                << np.uint64(offset)
    return out


def unpack(layout: data.StructLayout, values) -> dict:
    """{field: int64 array} of packed payloads (layouts wider than 64 bits take Python ints)."""
    if layout.size > 64:
        values = [int(v) for v in values]
        return {name: np.array([(v >> offset) & ((1 << width) - 1) for v in values], np.int64)
                for name, offset, width in _fields(layout)}
    values = np.asarray(values, np.uint64)
    return {name: ((values >> np.uint64(offset)) & np.uint64((1 << width) - 1)).astype(np.int64)
            for name, offset, width in _fields(layout)}



def _lane_fields(layout):
    """(entry fields [(name, offset, element width)], beat fields [(name, offset, width)],
    lanes) of a `lane_layout`."""
    entry, beat, lanes = [], [], 1
    for name, f in layout:
        if isinstance(f.shape, data.ArrayLayout):
            entry.append((name, f.offset, f.width // f.shape.length))
            lanes = f.shape.length
        elif name != "last":
            beat.append((name, f.offset, f.width))
    return entry, beat, lanes


def lane_count(layout: data.StructLayout) -> int:
    """The lanes of a lane beat layout (1 for a one-lane `lookup_layout`)."""
    return _lane_fields(layout)[2]


def _last_offset(layout):
    """The offset of ``last`` (None in the one-lane `lookup_layout`, which has none)."""
    return next((f.offset for name, f in layout if name == "last"), None)


def lane_pack(layout: data.StructLayout, group, **arrays) -> list:
    """Pack entries into lane beats of ``layout`` (a `lane_layout`, or `lookup_layout` at any
    lane count): ``group`` [N], non-decreasing, the beat of each entry (at most L entries per
    beat); ``arrays`` the fields per entry. A beat field takes its beat's last entry's value.
    Returns one int per beat that has entries."""
    group = np.asarray(group, np.int64)
    entry, beat, lanes = _lane_fields(layout)
    n = len(group)
    if not n:
        return []
    new = np.r_[True, group[1:] != group[:-1]]
    beat_of = np.cumsum(new) - 1
    starts = np.nonzero(new)[0]
    lane = np.arange(n) - starts[beat_of]
    if lane.max() >= lanes:
        raise ValueError(f"more than {lanes} entries in a lane beat")
    kind, word = _word_kind(layout)
    out = np.zeros(len(starts), kind)
    cells = np.zeros((len(starts), lanes), kind)   # one field of each lane of each beat
    for name, offset, width in entry:
        if name in arrays:
            cells[beat_of, lane] = np.asarray(arrays[name]).astype(np.int64) & ((1 << width) - 1)
            shifts = np.array([word(offset + k * width) for k in range(lanes)], kind)
            out += (cells << shifts).sum(axis=1, dtype=kind)
    last_entry = np.r_[starts[1:], n] - 1
    for name, offset, width in beat:
        if name in arrays:
            v = np.asarray(arrays[name]).astype(np.int64)[last_entry] & ((1 << width) - 1)
            out += v.astype(kind) << word(offset)
    last_offset = _last_offset(layout)
    if last_offset is not None:
        out += (lane[last_entry]).astype(kind) << word(last_offset)
    return out.tolist()


def pack_lookups(layout: data.StructLayout, keys, sample_offsets, batch_size) -> list:
    """The ``lookups`` beats (of ``layout``, at its lane count) of a stream: `lookup_beats`
    packed into lane beats."""
    key, eos, eob, empty = lookup_beats(keys, sample_offsets, batch_size)
    return lane_pack(layout, lane_groups(eob, lane_count(layout)), key=key, eos=eos, eob=eob,
                     empty=empty)


def lane_unpack(layout: data.StructLayout, values) -> tuple[dict, np.ndarray]:
    """({field: int64 array per entry}, the beat of each entry) of lane beats ``values``; a
    beat field is repeated for each entry of its beat."""
    entry, beat, lanes = _lane_fields(layout)
    kind, word = _word_kind(layout)
    v = np.array([int(x) for x in values] + [0], kind)[:-1]

    def field(offset, width):
        return ((v >> word(offset)) & word((1 << width) - 1)).astype(np.int64)
    last_offset = _last_offset(layout)
    count = (field(last_offset, ceil_log2(lanes)) + 1
             if last_offset is not None and len(v) else np.ones(len(v), np.int64))
    take = np.arange(lanes)[None, :] < count[:, None]
    cols = {}
    for name, offset, width in entry:
        per_lane = [field(offset + k * width, width) for k in range(lanes)]
        cols[name] = np.stack(per_lane, axis=1)[take] if len(v) else np.zeros(0, np.int64)
    for name, offset, width in beat:
        cols[name] = np.repeat(field(offset, width), count)
    return cols, np.repeat(np.arange(len(v)), count)


def _word_kind(layout):
    """(the numpy type that holds a whole beat of ``layout``, its scalar type): uint64 (fast)
    up to 64 bits, else Python ints."""
    return (np.uint64, np.uint64) if layout.size <= 64 else (object, int)
