"""A `hotline.data.Dataset`'s batches in FBGEMM's input layout (what
`EmbeddingBagCollection.forward(indices, offsets)` takes)."""
import numpy as np
import torch


def fbgemm_layout(lengths: np.ndarray, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Lookups of B samples (``lengths`` [B, F], ``indices`` sample-major then feature-major,
    as `Dataset` holds them) -> (indices, offsets [F * B + 1]) feature-major, int64."""
    lengths = np.asarray(lengths, np.int64)
    n, f = lengths.shape
    feature = np.repeat(np.tile(np.arange(f), n), lengths.ravel())
    order = np.argsort(feature, kind="stable")
    offsets = np.zeros(n * f + 1, np.int64)
    np.cumsum(lengths.T.ravel(), out=offsets[1:])
    return torch.from_numpy(np.ascontiguousarray(indices[order], np.int64)), torch.from_numpy(offsets)


def batches(dataset, batch_size: int):
    """(indices, offsets) of each full batch of ``batch_size`` samples, in order."""
    starts = dataset.sample_offsets
    for s0 in range(0, dataset.num_samples - batch_size + 1, batch_size):
        s1 = s0 + batch_size
        yield fbgemm_layout(dataset.lengths[s0:s1], dataset.indices[starts[s0]:starts[s1]])
