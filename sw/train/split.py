"""A `Dataset` made ready for training: tables folded, dense features log-scaled, labels
checked, the last ``test_fraction`` of the samples held out (`prepare_data` -> `TrainData`)."""
import math
from dataclasses import dataclass

import numpy as np

from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, ROW_BITS
from hotline.data.readers import Dataset


@dataclass
class TrainData:
    """A dataset prepared for training: log-dense features, labels, keys, train/test split."""
    name: str
    dense: np.ndarray          # float32 [N, D]
    label: np.ndarray          # float32 [N]
    lengths: np.ndarray        # int32 [N, F]
    keys: np.ndarray           # uint32 [L]
    offsets: np.ndarray        # int64 [N + 1]
    table_sizes: np.ndarray    # int64 [F]
    n_train: int
    single_hot: bool

    @property
    def num_samples(self) -> int:
        return len(self.label)

    @property
    def num_tables(self) -> int:
        return len(self.table_sizes)

    @property
    def n_test(self) -> int:
        return self.num_samples - self.n_train


def prepare_data(ds, test_fraction=0.1, max_ind_range=None) -> TrainData:
    """`TrainData` from a `Dataset`: ``--max-ind-range M`` folds every table to at most M rows
    (row id modulo M, as the DLRM reference hashes); the last ``test_fraction`` of the samples
    is held out."""
    if ds.label is None:
        raise HotlineError(f"{ds.name}: no labels; training needs a label column")
    indices, sizes = ds.indices, ds.table_sizes.astype(np.int64)
    if max_ind_range is not None:
        if max_ind_range <= 0:
            raise HotlineError(f"--max-ind-range must be positive, not {max_ind_range}")
        if np.any(sizes > max_ind_range):
            indices = indices % max_ind_range
            sizes = np.minimum(sizes, max_ind_range)
    big = np.nonzero(sizes > MAX_ROWS)[0]
    if big.size:
        raise HotlineError(f"{ds.name}: table {int(big[0])} has {int(sizes[big[0]])} rows, more "
                           f"than 2^{ROW_BITS}; use --max-ind-range")
    ds = Dataset(ds.lengths, indices, sizes, ds.dense, ds.label, ds.name).validate()
    n = ds.num_samples
    n_test = int(math.floor(test_fraction * n))
    if n - n_test < 1:
        raise HotlineError(f"{ds.name}: {n} samples leave none for training with "
                           f"--test-fraction {test_fraction}")
    if ds.dense is not None and ds.dense.shape[1]:
        dense = np.log1p(np.maximum(ds.dense.astype(np.float32), 0.0)).astype(np.float32)
    else:
        dense = np.zeros((n, 1), np.float32)  # no dense features: a constant input
    if not np.all(np.isfinite(dense)):
        raise HotlineError(f"{ds.name}: field 'dense' has a non-finite value")
    label = ds.label.astype(np.float32)
    if not np.all((label == 0) | (label == 1)):
        raise HotlineError(f"{ds.name}: field 'label' must be 0 or 1")
    return TrainData(ds.name, dense, label, ds.lengths.astype(np.int32), ds.keys,
                     ds.sample_offsets, sizes, n - n_test, ds.single_hot)
