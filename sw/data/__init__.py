"""Data in and reports out: the dataset readers and the calibrated generator, and the report
files the commands write.

- `hotline.data.readers`: `Dataset` and the readers of real data files (`load_dataset`);
- `hotline.data.generator`: the calibrated Criteo-Kaggle-shaped generator (``synth:...``);
- `hotline.data.spec`: DATA as the commands take it (`open_data`: a file or ``synth:...``);
- `hotline.data.drift`: how fast a stream's hot set goes stale (`hot_share_decay`), and the
  generator's drift rate fitted to the real log (`calibrate_drift`; not imported here, so
  ``python -m hotline.data.drift`` runs it cleanly);
- `hotline.data.report`: summary tables, JSON files (written atomically), PNG plots;
- `hotline.data.options`: command-line options shared by `hotline` and `hotline train`.

It imports only the contract.
"""
from .readers import (FORMATS, Dataset, load_dataset, real_data_files, shared_data_dir,
                      write_atomic)
from .spec import open_data

__all__ = ["FORMATS", "Dataset", "load_dataset", "open_data", "real_data_files",
           "shared_data_dir", "write_atomic"]
