"""DLRM training in three modes (baseline, hotline, device-only) and `hotline train`.

- `hotline.train.training`: configuration, data split, trainers, checkpoints, the report and
  the `hotline train` command (`add_parser`, `cmd_train`, which `hotline.cli` registers);
- `hotline.train.dlrm`: the DLRM model (PyTorch; imported only when a trainer is built).

It imports the layers below the command line, never `hotline.cli`.
"""
from .training import MODES, OPTIMIZERS, TrainConfig, TrainData, auc, prepare_data, train

__all__ = ["MODES", "OPTIMIZERS", "TrainConfig", "TrainData", "auc", "prepare_data", "train"]
