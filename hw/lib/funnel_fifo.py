"""FunnelFIFO: a FIFO that takes up to ``lanes`` entries per cycle and gives one."""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .banked_ring import BankedRing

__all__ = ["FunnelFIFO"]


class FunnelFIFO(wiring.Component):
    """``w_count`` (0 .. ``lanes``) entries ``w_data[0 .. w_count - 1]`` are written in one
    cycle, in that order, while ``w_room`` is high (a register: the FIFO has room for
    ``lanes`` entries); ``r`` gives them one per cycle, in order, from the cycle after their
    write (first-word fall-through; ``r.payload`` comes straight from the storage, LUT RAM).
    ``depth`` and ``lanes`` are powers of two, ``depth >= 2 * lanes``.

    Timing: ``w_count`` and ``r.ready`` come from the neighbours' logic, so the next level
    and room are computed for every (written, taken) pair from the ``level`` register and
    then selected by them: they meet a multiplexer, not the adder and compare (the room's
    carry chain from both handshakes was a 2-lane top's late path, 11.7 ns).
    """

    def __init__(self, shape, depth, lanes):
        if depth < 2 * lanes:
            raise ValueError(f"depth ({depth}) must be at least 2 * lanes ({2 * lanes})")
        self.shape, self.depth, self.lanes = shape, depth, lanes
        super().__init__({
            "w_count": In(range(lanes + 1)),
            "w_data": In(data.ArrayLayout(shape, lanes)),
            "w_room": Out(1, init=1),
            "r": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ring = ring = BankedRing(self.shape, self.depth, self.lanes)
        rp = Signal(range(self.depth))
        level = self.level
        taken = self.r.valid & self.r.ready
        written = Mux(self.w_room, self.w_count, 0)
        m.d.comb += [ring.w_count.eq(written), ring.w_data.eq(self.w_data),
                     ring.r_pos[0].eq(rp), self.r.payload.eq(ring.r_data[0]),
                     self.r.valid.eq(level != 0)]
        with m.Switch(Cat(taken, written)):
            for w in range(self.lanes + 1):
                for t in (0, 1):
                    with m.Case(t | w << 1):
                        after = level + w - t
                        m.d.sync += [level.eq(after),
                                     self.w_room.eq(after <= self.depth - self.lanes)]
        m.d.sync += rp.eq(rp + taken)
        return m
