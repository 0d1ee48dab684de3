"""Hotline: the package (``hotline`` = sw/, ``hotline.hw`` = hw/, ``hotline.sim`` = sim/,
``hotline.fpga`` = fpga/). Its layers and their import direction are in docs/design.md:
`hotline.contract`, `hotline.model`, `hotline.data`, `hotline.host` (the Device API, whose
entry point is ``hotline.open``), `hotline.train`, `hotline.cli`, `hotline.bench`."""
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .host.device import Device


def open(url="model://", *, config=None, memory=None,  # noqa: A001 (the API name)
         **options) -> "Device":
    """Open the accelerator at ``url`` (``model://``, ``sim://...``, ``serial://...``) and
    return its `hotline.host.device.Device` (see `hotline.host.device.open`)."""
    # lazy: `import hotline.contract` (what the gateware imports) must not load the host runtime
    from .host.device import open as _open
    return _open(url, config=config, memory=memory, **options)
