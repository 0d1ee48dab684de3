"""Bit-exact models of the accelerator, written from its specification (docs/design.md) and
checked beat by beat against the RTL:

- `hotline.model.device_model`: the fragmenter over a placed hot set (`DeviceModel`), CAM
  placement (`place_hot_set`), counters;
- `hotline.model.popularity_cam`, `hotline.model.cold_key_set`,
  `hotline.model.access_learner`, `hotline.model.dma_model`: one model per block;
- `hotline.model.planner`: the exact hot set of a profiling window.

Models import only the contract (and each other).
"""
