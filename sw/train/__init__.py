"""DLRM training in three modes (baseline, hotline, device-only): docs/design.md, "Training".

- `config`: `TrainConfig`, the modes and optimizers;
- `split`: `prepare_data`, a `Dataset` made ready for training (`TrainData`, the held-out split);
- `run`: `train`, the epochs, checkpoints and the report of one run;
- `trainer`: a run's step (`Trainer`: DLRM, dense optimizer, evaluation; it imports torch, so
  `run` imports it when a run starts); `placement`: where the rows live (`Placement`, held by
  the trainer, over the mode's `hotline.nn` store: `HostStore`, `DeviceStore`, or the
  `HotlineStore` that `hotline.hotline_store` sizes and plans for the run);
- `rows`: the row layout, table initialisation, memory budgets;
- `checkpoint`: atomic save, resume and its checks, partial-file cleanup;
- `metrics`: AUC and the planned hot fractions; `report`: the JSON report and its summary;
- `plots`: the ``--plot`` PNG; `dlrm`: the DLRM model (PyTorch).

The `hotline train` command (options, progress bar, printing) is `hotline.cli.train_command`;
this package imports the layers below the command line, never `hotline.cli`.
"""
from .config import MODES, OPTIMIZERS, TrainConfig
from .metrics import auc
from .run import train
from .split import TrainData, prepare_data

__all__ = ["MODES", "OPTIMIZERS", "TrainConfig", "TrainData", "auc", "prepare_data", "train"]
