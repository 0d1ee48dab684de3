"""BatchLanePacker: entries that arrive up to L per cycle, out in lane beats of one batch."""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .banked_ring import BankedRing
from .buffered_fifo import BufferedFIFO
from .fifo_room import fifo_has_room

__all__ = ["BatchLanePacker"]


class BatchLanePacker(wiring.Component):
    """``w_count`` (0 .. ``lanes``) entries ``w_data[0 .. w_count - 1]`` are written in one
    cycle, in order, while ``w_room`` is high (a register); ``w_end`` closes the batch with
    that cycle's entries (a batch may have none). ``o`` gives each batch's entries in lane
    beats {data, count}: ``count`` (1 .. L) entries in ``data[0 ..]``, L per beat from the
    batch's first, the last beat of a batch holding what is left. So the beats do not
    depend on how the entries arrived. An entry leaves the cycle after its write at the
    earliest (``o.payload`` from LUT RAM); a batch that is still open leaves only in full
    beats. ``depth`` (a power of two, >= 2 L) entries; ``batches`` closed batches whose
    entries are still queued (>= 4); ``count_shape`` holds a batch's entry count.
    """

    def __init__(self, shape, lanes, depth, count_shape, batches=8):
        if depth < 2 * lanes:
            raise ValueError(f"depth ({depth}) must be at least 2 * lanes ({2 * lanes})")
        self.shape, self.lanes, self.depth, self.batches = shape, lanes, depth, batches
        self.count_shape = count_shape
        super().__init__({
            "w_count": In(range(lanes + 1)),
            "w_data": In(data.ArrayLayout(shape, lanes)),
            "w_end": In(1),
            "w_room": Out(1, init=1),
            "o": Out(stream.Signature(data.StructLayout({
                "data": data.ArrayLayout(shape, lanes), "count": range(lanes + 1)}))),
        })

    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        m.submodules.ring = ring = BankedRing(self.shape, self.depth, L, reads=L)
        # The entry counts of the closed batches whose entries are still queued.
        m.submodules.ends = ends = BufferedFIFO(width=Shape.cast(self.count_shape).width,
                                                depth=self.batches)
        rp = Signal(range(self.depth))
        level = Signal(range(self.depth + 1))
        opened = Signal(self.count_shape)   # entries written to the open batch so far
        sent = Signal(self.count_shape)     # entries of the front batch sent so far
        written = Mux(self.w_room, self.w_count, 0)
        closing = self.w_room & self.w_end
        m.d.comb += [ring.w_count.eq(written), ring.w_data.eq(self.w_data),
                     ends.w_en.eq(closing), ends.w_data.eq(opened + written)]
        m.d.sync += opened.eq(Mux(closing, 0, opened + written))

        # The front batch: closed (its count waits in ``ends``), or the open one (full beats).
        left = ends.r_data - sent
        want = Mux(ends.r_rdy & (left < L), left, L)
        o = self.o.payload
        m.d.comb += [self.o.valid.eq((want != 0) & (level >= want)), o.count.eq(want)]
        for k in range(L):
            m.d.comb += [ring.r_pos[k].eq(rp + k), o.data[k].eq(ring.r_data[k])]
        fire = self.o.valid & self.o.ready
        taken = Mux(fire, want, 0)
        # A closed batch leaves with its last beat, or (no entries left) by itself.
        done = ends.r_rdy & (left == taken)
        m.d.comb += ends.r_en.eq(done)
        m.d.sync += sent.eq(Mux(done, 0, sent + taken))
        after = level + written - taken
        m.d.sync += [rp.eq(rp + taken), level.eq(after),
                     self.w_room.eq((after <= self.depth - L) & fifo_has_room(ends))]
        return m
