"""The interfaces between the row DMA's stages (`RowCommandFront` -> `RowWindowCheck` ->
`RowChunker` -> `ReadEngine` / `WriteEngine`, both -> `RowDMACounters`).

- `slot_key_layout`: a key and where it goes (``slot`` and ``bank`` in the staging window,
  ``scatter``), ``null`` (a beat that carries no key: the end of a batch) and ``eob`` (the
  batch's last beat).
- `row_op_layout`: one checked beat: ``src``/``dst`` byte addresses and ``rem`` bytes to copy,
  ``row`` (a row to copy), ``refused`` (with its ``cause``, an index into
  ``hotline.contract.dma.CAUSES``), ``eob``. A null beat has neither ``row`` nor ``refused``.
- `staging_layout`: the staging window as its registers hold it (``base`` with all its
  `BASE_BITS`, ``stride``, ``slots``, ``banks``); `RowCommandFront` latches one per batch.
- `burst_layout`: one AXI burst: ``addr`` and ``len`` (beats - 1).
- `RowEvent`: what the write side does with one chunk or marker, in issue order: wait for a
  write response (``need_b``), count a copied row (``row_end``), count a refused row
  (``refused``, ``cause``), close the batch (``eob``).
- `read_beat_layout`: one read-data beat, whether its response was an error, and its
  ``rlast`` as the slave gave it (checked against the engine's own count by the `WriteEngine`).
- `axi_read_signature`, `axi_write_signature`: the AR + R and the AW + W + B members of
  `AXI4Signature` (master view), for the engine that drives each half of the bus.
"""
from amaranth.lib import data, wiring

from hotline.contract.dma import BASE_BITS

from .axi import AXI4Signature

__all__ = ["slot_key_layout", "row_op_layout", "staging_layout", "burst_layout", "RowEvent",
           "read_beat_layout", "axi_read_signature", "axi_write_signature"]

CAUSE_BITS = 2  # the window check's causes: table, row, slot, desc


def slot_key_layout(key_width):
    return data.StructLayout({"key": key_width, "slot": 16, "bank": 1, "scatter": 1,
                              "null": 1, "eob": 1})


def row_op_layout(addr_width):
    return data.StructLayout({"src": addr_width, "dst": addr_width, "rem": 16, "row": 1,
                              "refused": 1, "cause": CAUSE_BITS, "eob": 1})


def staging_layout():
    return data.StructLayout({"base": BASE_BITS, "stride": 16, "slots": 16, "banks": 2})


def burst_layout(addr_width):
    return data.StructLayout({"addr": addr_width, "len": 8})


RowEvent = data.StructLayout({"need_b": 1, "row_end": 1, "refused": 1, "cause": CAUSE_BITS,
                              "eob": 1})


def read_beat_layout(data_width):
    return data.StructLayout({"data": data_width, "err": 1, "last": 1})


def _axi_part(addr_width, data_width, channels):
    members = AXI4Signature(addr_width, data_width).members
    return wiring.Signature({name: member for name, member in members.items()
                             if name.startswith(channels)})


def axi_read_signature(addr_width, data_width):
    return _axi_part(addr_width, data_width, ("ar", "r"))


def axi_write_signature(addr_width, data_width):
    return _axi_part(addr_width, data_width, ("aw", "w", "b"))
