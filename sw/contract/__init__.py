"""The contract: the facts gateware, models, host runtime, co-simulation and FPGA tops share.

Each fact is defined here once and imported from here everywhere else. This package imports
nothing else from the project (``tests/test_layers.py`` checks it). Only the modules the
gateware alone needs import Amaranth: `hotline.contract.streams` (payload layouts) and
`hotline.contract.shapes` (enumerations as shapes); the rest, re-exported here, is plain
Python and numpy, so the host runtime's register access and ``model://`` need no Amaranth
(`hotline.contract.regmap` is not re-exported: ``python -m hotline.contract.regmap`` runs it).

- `hotline.contract.keys`: the key format, ``key = (table << ROW_BITS) | row``.
- `hotline.contract.config`: `AcceleratorConfig`, the product configuration `PRODUCT`, and the
  geometry rules (CAM load, learner sizing, slot widths).
- `hotline.contract.cam`: the popularity CAM's command ops and response statuses.
- `hotline.contract.dma`: the row DMA's error causes, check priority and directions.
- `hotline.contract.hashing`: the bucket hash functions (gateware, numpy and int forms).
- `hotline.contract.regmap`: the CSR register map (one source for the RTL bank, the driver and
  docs/registers.md).
- `hotline.contract.link`: the host-link frame format.
- `hotline.contract.streams`: the accelerator's stream payload layouts, their order on the
  host link (``RESULT_STREAMS``), and packing of beats.
- `hotline.contract.errors`: `HotlineError`, the one-line user error.
"""
from .cam import CAMOp, CAMStatus
from .config import PRODUCT, AcceleratorConfig, learner_geometry
from .errors import HotlineError
from .hashing import bucket_hash
from .keys import KEY_BITS, MAX_ROWS, MAX_TABLES, ROW_BITS, make_keys, split_keys

__all__ = ["AcceleratorConfig", "CAMOp", "CAMStatus", "HotlineError", "KEY_BITS", "MAX_ROWS",
           "MAX_TABLES", "PRODUCT", "ROW_BITS", "bucket_hash", "learner_geometry", "make_keys",
           "split_keys"]
