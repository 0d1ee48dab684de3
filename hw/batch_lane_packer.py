"""BatchLanePacker: entries that arrive up to L per cycle, out in lane beats of one batch."""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .lib.banked_ring import BankedRing
from .lib.buffered_fifo import BufferedFIFO
from .lib.fifo_room import fifo_has_room

__all__ = ["BatchLanePacker"]


class BatchLanePacker(wiring.Component):
    """``w_count`` (0 .. ``lanes``) entries ``w_data[0 .. w_count - 1]`` are written in one
    cycle, in order, while ``w_room`` is high (a register); ``w_end`` closes the batch with
    that cycle's entries (a batch may have none). ``o`` gives each batch's entries in lane
    beats {data, count}: ``count`` (1 .. L) entries in ``data[0 ..]``, L per beat from the
    batch's first, the last beat of a batch holding what is left. So the beats do not
    depend on how the entries arrived. A write is latched as it comes and applied in the next
    cycle, so ``w_count`` meets only a register (it came from the writer's own logic, and
    its adder into ``level`` was the 2-lane accelerator's critical path); an entry leaves two
    cycles after its write at the earliest (``o.payload`` from LUT RAM); a batch that is
    still open leaves only in full beats. ``depth`` (a power of two, >= 3 L) entries, of
    which L are kept for the latched write; ``batches`` closed batches whose entries are
    still queued (>= 5); ``count_shape`` holds a batch's entry count.

    Timing: a closed batch's count is loaded from its FIFO into a front register (with
    the entries it already sent while open subtracted) in a cycle that sends nothing, unless
    the batch before it leaves in that cycle: one idle cycle per batch at most. The state
    after a beat (entries left, level, room) is computed for both outcomes from registers
    and chosen by ``o.valid & o.ready``, so no carry chain lies between that handshake and
    a register. (The count arithmetic in one cycle, from the FIFO's output through the
    handshake to ``w_room``, was the 2-lane accelerator's critical path at 19.5 ns.)
    """

    def __init__(self, shape, lanes, depth, count_shape, batches=8):
        if depth < 3 * lanes:
            raise ValueError(f"depth ({depth}) must be at least 3 * lanes ({3 * lanes})")
        if batches < 5:
            raise ValueError(f"batches ({batches}) must be at least 5")
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
        # The entry counts of the closed batches not yet at the front.
        m.submodules.ends = ends = BufferedFIFO(width=Shape.cast(self.count_shape).width,
                                                depth=self.batches)
        rp = Signal(range(self.depth))
        level = Signal(range(self.depth + 1))
        # level >= k for k = 1 .. L, kept beside ``level`` (a register each)
        has = Signal(L + 1, init=1)
        opened = Signal(self.count_shape)   # entries written to the open batch so far
        # the write latched last cycle, applied in this one
        written = Signal.like(self.w_count)
        closing = Signal()
        w_data = Signal.like(self.w_data)
        m.d.sync += [written.eq(Mux(self.w_room, self.w_count, 0)),
                     closing.eq(self.w_room & self.w_end), w_data.eq(self.w_data)]
        m.d.comb += [ring.w_count.eq(written), ring.w_data.eq(w_data),
                     ends.w_en.eq(closing), ends.w_data.eq(opened + written)]
        m.d.sync += opened.eq(Mux(closing, 0, opened + written))

        # The front batch: closed and loaded (``front``, its entries not yet sent in
        # ``left``), else the open one, sent in full beats (``sent`` of them so far).
        front = Signal()
        left = Signal(self.count_shape)
        short = Signal()                    # left < L
        short2 = Signal()                   # left < 2 L
        sent = Signal(self.count_shape)
        want = Signal(range(L + 1))
        with m.If(front):
            m.d.comb += want.eq(Mux(short, left, L))
        with m.Elif(~ends.r_rdy):
            m.d.comb += want.eq(L)
        # (else a closed batch's count is loading: nothing leaves)
        o = self.o.payload
        m.d.comb += [self.o.valid.eq(has.bit_select(want, L.bit_length()) & (want != 0)),
                     o.count.eq(want)]
        for k in range(L):
            m.d.comb += [ring.r_pos[k].eq(rp + k), o.data[k].eq(ring.r_data[k])]
        fire = self.o.valid & self.o.ready

        # With ``short``, a beat takes all that is left; a batch with none leaves by itself.
        done = front & short & (fire | (left == 0))
        load = ends.r_rdy & (~front | done)
        m.d.comb += ends.r_en.eq(load)
        loaded = ends.r_data - sent         # sent is 0 while ``front``
        with m.If(load):
            m.d.sync += [front.eq(1), left.eq(loaded), short.eq(loaded < L),
                         short2.eq(loaded < 2 * L), sent.eq(0)]
        with m.Elif(done):
            m.d.sync += front.eq(0)
        with m.Elif(fire & front):
            m.d.sync += [left.eq(left - L), short.eq(short2), short2.eq(left < 3 * L)]
        with m.Elif(fire):
            m.d.sync += sent.eq(sent + L)

        # The level, its flags and the room after this cycle, without and with a beat. The
        # room leaves space for this cycle's latched write and the next cycle's, and the
        # batch-count FIFO for one end more.
        def flags(after):
            return Cat(C(1, 1), *(after >= k for k in range(1, L + 1)))
        kept, gone = level + written, level + written - want
        m.d.sync += [
            rp.eq(Mux(fire, rp + want, rp)), level.eq(Mux(fire, gone, kept)),
            has.eq(Mux(fire, flags(gone), flags(kept))),
            self.w_room.eq(Mux(fire, gone <= self.depth - 2 * L, kept <= self.depth - 2 * L)
                           & fifo_has_room(ends, writes=3)),
        ]
        return m
