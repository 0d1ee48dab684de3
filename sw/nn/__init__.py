"""hotline.nn: an embedding-bag collection whose storage is placed (docs/nn.md)."""
from .collection import EmbeddingBagCollection
from .layout import RowLayout
from .optim import OPTIMIZERS, RowOptimizer
from .stores import DeviceStore, HostStore, RowStore

__all__ = ["EmbeddingBagCollection", "RowLayout", "OPTIMIZERS", "RowOptimizer", "RowStore",
           "HostStore", "DeviceStore"]
