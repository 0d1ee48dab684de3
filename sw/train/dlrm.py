"""DLRM (Naumov et al. 2019) in PyTorch, with the embedding storage kept outside the model.

The model is bottom MLP (dense features -> ``dim``), one pooled embedding vector per sparse
feature, dot interaction (pairwise dot products of the F + 1 vectors, strictly lower triangle,
concatenated with the bottom output) and top MLP (-> 1 logit). The default is the Criteo
Kaggle configuration of the DLRM reference: dim 16, bottom 13-512-256-64-16, top 512-256-1.

The embedding tables are *not* parameters of the module: the trainer's
`hotline.nn.EmbeddingBagCollection` (its placement holds the rows where the training mode puts
them) pools each bag and passes the pooled vectors [B, F, dim]; their backward updates the
rows in the collection (a fused optimizer).
"""
import math

import torch
from torch import nn

CRITEO_BOTTOM = (512, 256, 64)
CRITEO_TOP = (512, 256)


def mlp(sizes, final_relu):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = nn.Linear(a, b)
        # DLRM reference initialisation: normal weights scaled by fan-in + fan-out.
        nn.init.normal_(lin.weight, 0.0, math.sqrt(2.0 / (a + b)))
        nn.init.normal_(lin.bias, 0.0, math.sqrt(1.0 / b))
        layers.append(lin)
        if i < len(sizes) - 2 or final_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """``num_dense`` dense inputs, ``num_sparse`` embedding bags of width ``dim``; ``bottom`` and
    ``top`` are the hidden layer widths (the bottom MLP ends at ``dim``, the top at 1)."""

    def __init__(self, num_dense, num_sparse, dim=16, bottom=CRITEO_BOTTOM, top=CRITEO_TOP):
        super().__init__()
        self.num_dense, self.num_sparse, self.dim = num_dense, num_sparse, dim
        self.bottom = mlp([num_dense, *bottom, dim], final_relu=True)
        n = num_sparse + 1
        self.num_pairs = n * (n - 1) // 2
        self.top = mlp([dim + self.num_pairs, *top, 1], final_relu=False)
        li, lj = torch.tril_indices(n, n, offset=-1)
        # the pairs as flat indices into [n * n]: `index_select`'s backward (index_add) costs
        # half of what ``z[:, li, lj]``'s (an accumulating index_put) does, same values
        self.register_buffer("pairs", li * n + lj, persistent=False)

    def interact(self, x, emb):
        """Dot interaction: x [B, dim], emb [B, F, dim] -> [B, dim + pairs]."""
        t = torch.cat([x.unsqueeze(1), emb], dim=1)
        z = torch.bmm(t, t.transpose(1, 2))
        return torch.cat([x, z.flatten(1).index_select(1, self.pairs)], dim=1)

    def forward(self, dense, emb):
        """Logits [B] from dense [B, num_dense] and pooled embeddings [B, F, dim]."""
        return self.top(self.interact(self.bottom(dense), emb)).squeeze(1)
