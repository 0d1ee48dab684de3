"""The row layout shared by every placement and by `hotline train`: a row's embedding floats,
then its optimizer state, padded to the DMA bus word."""
from dataclasses import dataclass


@dataclass(frozen=True)
class RowLayout:
    """``dim`` embedding floats, then ``state`` optimizer floats, padded to 8 bytes."""
    dim: int
    state: int

    @property
    def floats(self) -> int:
        return -(-(self.dim + self.state) // 2) * 2

    @property
    def nbytes(self) -> int:
        return 4 * self.floats
