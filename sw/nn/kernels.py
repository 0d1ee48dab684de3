"""FBGEMM's CPU TBE kernels over rows the caller owns (`TBEKernel`): the pooled forward and
the backward with the optimizer fused, as TorchRec's DMP runs them on a CPU, updating the
caller's row tensor in place; at no more lookups than bags the backward is our own exact SGD
(`_sgd_rows`), which does not sort.

The "hotline" placement gives it host memory as one tensor (`HotlineStore.rows`: the tables,
the staging banks with the batch's cold rows, the hot table) and each lookup's row in it, so
the host neither deduplicates a batch's keys (the accelerator did) nor copies a row."""
import numpy as np
import torch

from hotline.contract.errors import HotlineError
from hotline.model.compiled import compiled


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
    layout; ``indices`` are rows of ``rows``, a row looked up by one table only); the output's
    backward updates ``rows`` in place (w -= lr * the row's gradient summed over the batch),
    once per row, bit for bit as FBGEMM's: sum pooling without weights at no more lookups
    than bags (single-hot) by `_sgd_rows`, which finds each row's lookups through a hash
    table instead of FBGEMM's radix sort (at dim 16, B = 1024: 1.17-1.27x TBE's embedding
    path with FBGEMM's backward, 0.91-1.06x with it, paired); otherwise by FBGEMM's. Indices
    are not bounds-checked here: the caller's are rows it made."""

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
        self._anchor = torch.zeros(0, requires_grad=True)

        self.lr = lr

    def set_lr(self, lr: float) -> None:
        """Follow the optimizer's learning rate (a scheduler may change it)."""
        if lr != self.lr:
            self.tbe.set_learning_rate(lr)
            self.lr = lr

    def __call__(self, indices, offsets, per_sample_weights=None) -> torch.Tensor:
        if per_sample_weights is not None or self.mean or not torch.is_grad_enabled() \
                or len(indices) >= len(offsets):   # more lookups than bags: FBGEMM's sums
            return self.tbe(indices, offsets, per_sample_weights=per_sample_weights)
        return _SortFreeSGD.apply(self._anchor, self, indices, offsets)

    def update(self, indices, offsets, grad) -> None:
        """The backward of a sum-pooled forward without weights: `_sgd_rows`."""
        grad = grad.detach().to(torch.float32).contiguous()
        _sgd_rows_kernel(indices.numpy(), offsets.numpy(), grad.numpy(), self.features,
                         float(self.lr), self.rows.numpy(), np.empty(len(indices), np.int64))


class _SortFreeSGD(torch.autograd.Function):
    """FBGEMM's pooled forward, then `TBEKernel.update` for its backward. The ``anchor`` (an
    empty tensor that requires grad) makes autograd call backward."""

    @staticmethod
    def forward(ctx, anchor, kernel, indices, offsets):
        ctx.kernel, ctx.indices, ctx.offsets = kernel, indices, offsets
        return kernel.tbe(indices, offsets)

    @staticmethod
    def backward(ctx, grad):
        ctx.kernel.update(ctx.indices, ctx.offsets, grad)
        return None, None, None, None


def _sgd_rows(index, offsets, grad, features, lr, rows, ids) -> int:
    """The exact SGD update of a sum-pooled batch, as FBGEMM's CPU backward makes it
    (compiled: `_sgd_rows_kernel`): each row's gradient summed over its lookups in order
    (feature by feature, bag by bag, from zero, in float32), then ``rows[r] -= lr * g``
    (``lr`` as a float32, the product and difference exact before one rounding: FBGEMM's
    fused multiply-add). ``index``: each lookup's row (FBGEMM's layout: ``offsets``
    [``features`` * B + 1]), a row looked up by one table's features only (a key's, as
    `HotlineStore` gives them: FBGEMM would update a row of two tables once per table);
    ``grad`` [B, features * dim]; ``ids``: scratch, a slot per lookup. Returns the rows
    updated.

    Why not FBGEMM's backward: it radix-sorts each table's lookups to find each row's, in as
    many 8-bit passes as the table's rows need. The rows here are all of host memory
    (millions: 3 passes a table, where TBE's small tables take 1 or 2), and the accelerator
    has already made them one per key. Here they are numbered through an open-addressing
    table (Fibonacci hashing, linear probing, at most half full), summed, then written once.
    The sums are one array, written at random: at one lookup per bag it stays in the caches
    (`TBEKernel` uses this there); at MLPerf's multi-hot batches it does not, and FBGEMM's
    sorted sums were 1.3-1.7x as fast."""
    n = len(index)
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    mask = (1 << bits) - 1
    table = np.full(mask + 1, -1, np.int64)   # the row's number, -1: empty
    first = np.empty(n, np.int64)             # each number's row
    u = 0
    for i in range(n):
        r = index[i]
        h = ((r * 0x9E3779B1) & 0xFFFFFFFF) >> (32 - bits)
        while table[h] >= 0 and first[table[h]] != r:
            h = (h + 1) & mask
        if table[h] < 0:
            table[h], first[u] = u, r
            u += 1
        ids[i] = table[h]
    width = rows.shape[1]
    acc = np.zeros((u, width), np.float32)
    batch = (len(offsets) - 1) // features if features else 0
    for f in range(features):
        for s in range(batch):
            for i in range(offsets[f * batch + s], offsets[f * batch + s + 1]):
                k = ids[i]
                for d in range(width):
                    acc[k, d] += grad[s, f * width + d]
    rate = np.float64(np.float32(lr))
    for k in range(u):
        r = first[k]
        for d in range(width):
            rows[r, d] = np.float64(rows[r, d]) - rate * np.float64(acc[k, d])
    return u


_sgd_rows_kernel = compiled(_sgd_rows)
