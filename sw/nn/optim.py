"""Fused row optimizers: the sparse update applied in backward to a batch's unique rows, with
the optimizer state inside the row (`layout.RowLayout`) so that it moves with the row.

The math is FBGEMM's fused optimizers (``OptimType.EXACT_SGD``, ``EXACT_ROWWISE_ADAGRAD``,
``ADAM``): one update per unique row with its gradient summed over the batch's lookups.
"""
import abc

import torch

from hotline.contract.errors import HotlineError


class RowOptimizer(abc.ABC):
    """Updates rows ``[n, width]`` (weights, then state) in place from their gradients
    ``[n, dim]``. ``state_parts(dim)``: the state's named slices, FBGEMM's names; those named
    in ``constants`` are set when a table is written (its own facts, not optimizer state)."""

    constants: tuple[str, ...] = ()

    def __init__(self, lr: float):
        self.lr = lr
        self.step = 0   # batches applied (Adam's bias correction counts them)

    def state_parts(self, dim: int) -> list[tuple[str, int]]:
        """(name, floats) of the state after the weights, in row order; none by default."""
        return []

    def state_floats(self, dim: int) -> int:
        return sum(n for _, n in self.state_parts(dim))

    def apply(self, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """One batch's update of its unique rows (weights and state, in place)."""
        self.step += 1
        with torch.no_grad():
            self._update(rows, grad, grad.shape[1])

    @abc.abstractmethod
    def _update(self, rows, g, d) -> None:
        """The update of ``rows`` (``d`` weights first) by ``g``."""


class SGD(RowOptimizer):
    """``w -= lr * g`` (FBGEMM's EXACT_SGD)."""

    def _update(self, rows, g, d):
        rows[:, :d].sub_(self.lr * g)


class RowwiseAdagrad(RowOptimizer):
    """One accumulator per row: ``G += sum(g * g) / dim; w -= g * (lr / (sqrt(G) + eps))``
    (FBGEMM's EXACT_ROWWISE_ADAGRAD, rounded as its CPU kernel: the sum and the weight update
    in double, the multiplier in float, ``lr / x`` a division, not a reciprocal's product).
    ``row_dims``: rows of tables of several dims share one width (zero-padded); each row then
    carries its table's dim (the constant "row_dim"), the divisor above."""

    def __init__(self, lr: float, eps: float = 1e-8, row_dims: bool = False):
        super().__init__(lr)
        self.eps = eps
        self.constants = ("row_dim",) if row_dims else ()

    def state_parts(self, dim):
        return [("momentum1", 1)] + [(name, 1) for name in self.constants]

    def _update(self, rows, g, d):
        div = rows[:, d + 1].double() if self.constants else d
        s = rows[:, d].double() + (g * g).double().sum(dim=1) / div
        rows[:, d] = s.float()
        # sqrtf, correctly rounded: torch's float32 sqrt on the CPU may be 1 ulp off
        root = s.float().double().sqrt().float()
        multiplier = torch.full_like(root, self.lr).div_(root + self.eps)
        rows[:, :d] = rows[:, :d].double() - g.double() * multiplier.double().unsqueeze(1)


class Adam(RowOptimizer):
    """Per-value moments ``m``, ``v`` updated only for the batch's rows; bias correction by
    the collection's step count (FBGEMM's ADAM, torch's SparseAdam):
    ``w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``."""

    def __init__(self, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__(lr)
        self.betas, self.eps = betas, eps

    def state_parts(self, dim):
        return [("momentum1", dim), ("momentum2", dim)]

    def _update(self, rows, g, d):
        b1, b2 = self.betas
        m, v = rows[:, d:2 * d], rows[:, 2 * d:3 * d]
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        m_hat = m / (1 - b1 ** self.step)
        v_hat = v / (1 - b2 ** self.step)
        rows[:, :d].sub_(self.lr * (m_hat / (v_hat.sqrt() + self.eps)))


OPTIMIZERS = {"sgd": SGD, "rowwise_adagrad": RowwiseAdagrad, "adam": Adam}


def make_optimizer(name: str, lr: float, **options) -> RowOptimizer:
    """The fused optimizer called ``name`` (a key of `OPTIMIZERS`)."""
    if name not in OPTIMIZERS:
        raise HotlineError(f"optimizer {name!r}: expected one of {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name](lr, **options)
