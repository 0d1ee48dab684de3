"""hotline.nn: an embedding-bag collection whose storage is placed (docs/nn.md).

The names below load on first use, so that importing a torch-free submodule
(``hotline.nn.hot_set``, ``hotline.nn.layout``) keeps ``hotline train --help`` free of torch.
"""
import importlib

_HOME = {"EmbeddingBagCollection": "collection", "TableConfig": "collection",
         "RowLayout": "layout", "OPTIMIZERS": "optim", "RowOptimizer": "optim",
         "RowStore": "stores", "HostStore": "stores", "DeviceStore": "stores"}
__all__ = list(_HOME)


def __getattr__(name):
    if name not in _HOME:
        raise AttributeError(f"module 'hotline.nn' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
