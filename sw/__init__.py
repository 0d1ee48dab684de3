"""Hotline host runtime. ``hotline.open(url, config=..., memory=...)`` opens the accelerator
(see `hotline.device`); the CLI is `hotline.cli`."""


def open(url="model://", *, config=None, memory=None, **options):  # noqa: A001 (the API name)
    """Open the accelerator at ``url`` (``model://``, later ``sim://...``, ``serial://...``);
    returns a `hotline.device.Device`. Imported lazily so ``import hotline`` stays cheap."""
    from .device import open as _open
    return _open(url, config=config, memory=memory, **options)
