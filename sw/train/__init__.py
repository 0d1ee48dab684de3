"""DLRM training in three modes (baseline, hotline, device-only): docs/design.md, "Training".

- `config`: `TrainConfig`, the modes and optimizers;
- `split`: `prepare_data`, a `Dataset` made ready for training (`TrainData`, the held-out split);
- `run`: `train`, the epochs, checkpoints and the report of one run;
- `trainer`: what every mode shares (`Trainer`: DLRM, the sparse row update, evaluation);
  `baseline`, `device_only`, `hotline`: the modes' trainers (they import torch, so `run`
  imports them when a run starts);
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
