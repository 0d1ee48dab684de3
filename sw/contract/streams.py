"""The accelerator's streams (contract): payload layouts, their order on the host link, and
beats packed into integers.

The top (`hotline.hw.accelerator.HotlineAccelerator`) has three input streams and six result
streams; `stream_layouts` gives their payload layouts from an `AcceleratorConfig` without
building any gateware, and the blocks build their ports from the same functions:

- ``lookups`` {key, eos, eob, empty}: one beat per lookup, samples and batches in order
  (`lookup_beats`); ``eos`` closes a sample, ``eob`` a batch, ``empty`` stands for a sample
  with no lookup;
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

``RESULT_STREAMS`` is also the order of the streams in a ``RESULTS`` response of the host
link. A payload is an unsigned integer, the first field in its least significant bits
(`amaranth.lib.data.StructLayout`); `pack` and `unpack` convert whole arrays of beats.
"""
import numpy as np
from amaranth.lib import data
from amaranth.utils import bits_for

from .config import AcceleratorConfig, cold_slot_width, hot_slot_width
from .keys import KEY_BITS
from .shapes import CAMOp

__all__ = ["INPUT_STREAMS", "RESULT_STREAMS", "STREAMS", "BATCH_END", "DMA_DONE_FIELDS",
           "lookup_layout", "fragmenter_layouts", "batch_keys_layout", "dma_keys_layout",
           "dma_done_layout", "cam_cmd_layout", "CAM_EVENT_LAYOUT", "stream_layouts", "batch_end",
           "batch_key", "pack", "unpack", "lookup_beats"]

INPUT_STREAMS = ("lookups", "scatter_keys", "cam_cmds")
RESULT_STREAMS = ("remap", "popular", "non_popular", "batch_keys", "dma_done", "cam_events")
STREAMS = INPUT_STREAMS + RESULT_STREAMS

# The batch_keys field that closes a batch; it is the layout's first field, bit 0 of a beat.
BATCH_END = "end"
DMA_DONE_FIELDS = {"rows": 16, "errors": 16}


def lookup_layout(key_width: int = KEY_BITS) -> data.StructLayout:
    """The ``lookups`` payload."""
    return data.StructLayout({"key": key_width, "eos": 1, "eob": 1, "empty": 1})


def fragmenter_layouts(*, hot_slot_width: int, cold_slot_width: int, max_batch_samples: int,
                       cold_max_keys: int, key_width: int = KEY_BITS) -> dict:
    """The Fragmenter's output payloads: ``remap``, ``popular``, ``non_popular``,
    ``cold_keys`` and ``batches`` (a batch's summary)."""
    sample_width = bits_for(max_batch_samples - 1)
    count_width = bits_for(max_batch_samples)
    return {
        "remap": data.StructLayout({"hot": 1, "slot": max(hot_slot_width, cold_slot_width)}),
        "popular": data.StructLayout({"sample": sample_width}),
        "non_popular": data.StructLayout({"sample": sample_width}),
        "cold_keys": data.StructLayout({"key": key_width}),
        "batches": data.StructLayout({"popular": count_width, "non_popular": count_width,
                                      "cold": bits_for(cold_max_keys * 2), "overflow": 1}),
    }


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
                           cold_max_keys=config.cold_max_keys, key_width=key_width)
    return {"lookups": lookup_layout(key_width), "scatter_keys": dma_keys_layout(key_width),
            "cam_cmds": cam_cmd_layout(key_width),
            "remap": f["remap"], "popular": f["popular"], "non_popular": f["non_popular"],
            "batch_keys": batch_keys_layout(f["cold_keys"], f["batches"]),
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
