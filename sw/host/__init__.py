"""The host runtime: the Device API (``hotline.open``) and its backends, host memory, CSR
access.

- `hotline.host.device`: `Device`, ``open``, the ``model://`` backend (`ModelDevice`);
- `hotline.host.link_device`: the Device API over the host link, whatever carries the bytes;
  `hotline.host.sim_device` (``sim://``: the RTL in a co-simulation process) and
  `hotline.host.serial_device` (``serial://``: a board, or the board co-simulation);
- `hotline.host.host_memory`: `HostMemory`, the file-backed region the DMA reads and writes;
- `hotline.host.registers`: the driver's view of the CSR map;
- `hotline.host.link`: the frame reader; `hotline.host.simulators`: which simulators run here.

It imports the contract, the models and the data layer, never the gateware, the co-simulation
or the FPGA flow.
"""
from .device import BatchResult, Device, HotPlacement, open, register_backend
from .host_memory import HostMemory, Window
from .link import LinkError

__all__ = ["open", "register_backend", "Device", "BatchResult", "HotPlacement", "HostMemory",
           "Window", "LinkError"]
