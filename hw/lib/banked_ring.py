"""BankedRing: a ring buffer written up to ``lanes`` entries per cycle, read anywhere."""
from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

__all__ = ["BankedRing"]


class BankedRing(wiring.Component):
    """A ring of ``depth`` entries of ``shape``: ``w_count`` (0 .. ``lanes``) entries
    ``w_data[0 .. w_count - 1]`` go to the positions ``w_ptr ..`` at the clock edge, and
    ``w_ptr`` advances by ``w_count`` (mod ``depth``). ``r_data[i]`` is the entry at position
    ``r_pos[i]``, in the same cycle (combinational reads: a write shows after its edge).

    The user keeps count of what the ring holds: it overwrites without a check. Entry ``pos``
    sits in bank ``pos % lanes``, a memory with one write port and ``reads`` read ports, so
    ``lanes`` writes per cycle need no multi-port memory (at one lane: one memory, a plain
    ring). ``depth`` and ``lanes`` are powers of two, ``depth >= lanes``.
    """

    def __init__(self, shape, depth, lanes=1, reads=1):
        for name, value in (("depth", depth), ("lanes", lanes)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if depth < lanes or reads < 1:
            raise ValueError(f"need depth >= lanes ({depth} < {lanes}?) and reads >= 1")
        self.shape, self.depth, self.lanes, self.reads = shape, depth, lanes, reads
        pos = ceil_log2(depth)
        super().__init__({
            "w_count": In(range(lanes + 1)),
            "w_data": In(data.ArrayLayout(shape, lanes)),
            "w_ptr": Out(pos),
            "r_pos": In(data.ArrayLayout(pos, reads)),
            "r_data": Out(data.ArrayLayout(shape, reads)),
        })

    def elaborate(self, platform):
        m = Module()
        W, lane_bits = self.lanes, ceil_log2(self.lanes)
        wp = self.w_ptr
        reads = [[] for _ in range(self.reads)]   # [read][bank]
        for b in range(W):
            m.submodules[f"bank{b}"] = bank = Memory(shape=self.shape, depth=self.depth // W,
                                                     init=[])
            write = bank.write_port()
            # The bank's entry this cycle is the write's entry k (its position is wp + k).
            k = (C(b, lane_bits) - wp[:lane_bits])[:lane_bits]
            m.d.comb += [write.en.eq(k < self.w_count), write.addr.eq((wp + k) >> lane_bits),
                         write.data.eq(self.w_data[k])]
            for i in range(self.reads):
                port = bank.read_port(domain="comb")
                m.d.comb += port.addr.eq(self.r_pos[i] >> lane_bits)
                reads[i].append(port.data)
        for i in range(self.reads):
            m.d.comb += self.r_data[i].eq(Array(reads[i])[self.r_pos[i][:lane_bits]])
        m.d.sync += wp.eq(wp + self.w_count)
        return m
