"""up_down: the next value of an up/down counter, with the late handshakes selecting last."""
from amaranth.hdl import Mux

__all__ = ["up_down"]


def up_down(value, up, down):
    """``value + up - down`` (``up``, ``down``: 1 bit each) as a select between ``value`` and
    ``value`` +- 1, both computed from the register alone: the handshakes, which arrive late
    from other blocks, drive only the select, not an adder's carry chain (timing)."""
    return Mux(up == down, value, Mux(up, value + 1, value - 1))
