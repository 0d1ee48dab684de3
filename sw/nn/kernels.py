"""FBGEMM's CPU TBE kernels over rows the caller owns (`TBEKernel`): the pooled forward and
the backward with the optimizer fused, as TorchRec's DMP runs them on a CPU, updating the
caller's row tensor in place.

The "hotline" placement gives it host memory as one tensor (`HotlineStore.rows`: the tables,
the staging banks with the batch's cold rows, the hot table) and each lookup's row in it, so
the host neither sorts nor deduplicates a batch's keys (the accelerator did) nor copies a
row."""
import torch

from hotline.contract.errors import HotlineError


def fbgemm_cpu() -> bool:
    """Whether FBGEMM's CPU TBE loads here."""
    try:
        import fbgemm_gpu.split_table_batched_embeddings_ops_training  # noqa: F401  # lazy: seconds
    except Exception:  # noqa: BLE001 (any failure: the torch path)
        return False
    return True


class TBEKernel:
    """FBGEMM's ``SplitTableBatchedEmbeddingBagsCodegen`` (EXACT_SGD, HOST, CPU) over ``rows``
    (float32 [R, dim], contiguous, CPU: the same memory): feature f looks up in FBGEMM's table
    ``feature_table[f]``, and every table's weights are all of ``rows``; ``mean``: mean
    pooling, else sum. (A table per Hotline table, not one for all: FBGEMM's backward sorts
    each table's lookups on its own, and at multi-hot B = 8192, 1.75M lookups, 26 sorts that
    fit the caches take 15% less than one; the result is the same bit for bit, as a key's
    lookups are all in its own table.)

    ``forward(indices, offsets, per_sample_weights=None) -> Tensor[B, F * dim]`` (FBGEMM's
    layout; ``indices`` are rows of ``rows``); the output's backward updates ``rows`` in place
    (w -= lr * the row's gradient summed over the batch), once per row. Indices are not
    bounds-checked here: the caller's are rows it made."""

    def __init__(self, rows: torch.Tensor, feature_table, lr: float, mean: bool = False):
        # lazy (each): fbgemm_gpu loads its operator libraries (seconds), for this kernel only
        from fbgemm_gpu.split_embedding_configs import EmbOptimType  # lazy: (see above)
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (  # lazy: (see above)
            BoundsCheckMode, EmbeddingLocation, PoolingMode)
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (  # lazy: (see above)
            ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)
        if rows.dtype != torch.float32 or rows.device.type != "cpu" or rows.dim() != 2 \
                or not rows.is_contiguous():
            raise HotlineError(f"TBEKernel: rows must be float32 [R, dim], contiguous, on the "
                               f"CPU; got {rows.dtype} {tuple(rows.shape)} on {rows.device}")
        feature_table = [int(t) for t in feature_table]
        self.rows, self.features, self.mean = rows, len(feature_table), mean
        tables = max(feature_table, default=0) + 1
        # made with a row per table, then every table pointed at all of ``rows``: FBGEMM
        # reads and updates ``rows`` (no table of its own), each table's lookups sorted
        # within the right range of rows
        self.tbe = SplitTableBatchedEmbeddingBagsCodegen(
            [(1, rows.shape[1], EmbeddingLocation.HOST, ComputeDevice.CPU)] * tables,
            feature_table_map=feature_table, optimizer=EmbOptimType.EXACT_SGD,
            learning_rate=lr, pooling_mode=PoolingMode.MEAN if mean else PoolingMode.SUM,
            bounds_check_mode=BoundsCheckMode.NONE)
        self.tbe.weights_host = torch.nn.Parameter(rows.view(-1), requires_grad=False)
        self.tbe.weights_offsets.zero_()
        # each feature's table's first row, then the end, as FBGEMM lays tables out
        self.tbe.hash_size_cumsum.copy_(torch.tensor(feature_table + [tables]) * rows.shape[0])

        self.lr = lr

    def set_lr(self, lr: float) -> None:
        """Follow the optimizer's learning rate (a scheduler may change it)."""
        if lr != self.lr:
            self.tbe.set_learning_rate(lr)
            self.lr = lr

    def __call__(self, indices, offsets, per_sample_weights=None) -> torch.Tensor:
        return self.tbe(indices, offsets, per_sample_weights=per_sample_weights)
