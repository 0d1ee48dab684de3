"""BufferedFIFO: Amaranth's SyncFIFOBuffered without the read/write collision logic."""
from amaranth.lib.fifo import SyncFIFOBuffered

__all__ = ["BufferedFIFO"]


class BufferedFIFO(SyncFIFOBuffered):
    """``SyncFIFOBuffered`` (same ports, latency and throughput) whose storage is marked
    ``no_rw_check``: its read and write never address the same word in one cycle (that needs
    an empty or a full FIFO, and then one of them is off), so Yosys need not emulate the
    collision with a bypass mux behind the RAM. That mux put a LUT between a block RAM's
    5.8 ns clock-to-out and the next register (timing)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        if self.depth > 1:          # depth 1 is a register, without storage
            m.submodules.storage.attrs["no_rw_check"] = 1
        return m
