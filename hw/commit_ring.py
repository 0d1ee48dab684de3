"""CommitRing: the host link's request words, written speculatively, drained once committed.

A ring of ``depth`` entries (`RingWord`: a 64-bit word and its `RingTag`) with three
pointers: the next speculative write, the end of the committed words and the next word to
drain. The writer (`FrameParser`, through ``fill``) writes a frame's words as they arrive
and then commits them (the frame was good and new) or rolls them back, so a corrupted or
repeated frame never reaches the accelerator or the memory.

Committed words drain in order: ``LOOKUP`` words into ``lookups``, ``SCATTER`` words into
``scatter_keys``, ``CAM`` words into ``cam_cmds``, an ``ADDR`` word sets the memory address, and ``MEMDATA`` words are written
to consecutive window words through ``mem`` (a write is taken when ``mem_grant`` and
``mem.ready`` are high; ``mem_grant`` is low while the responder reads the window). ``mem_pending`` is high while committed ``MEMDATA`` words wait.
``flush`` (a strobe: a new session) drops every committed word not yet drained, the one
offered included; a frame still being written is not touched.

Timing: a word is offered 3 cycles after the ``commit`` strobe that commits it (the block
RAM's read, then a register), then one word per cycle while its sink takes them; a stalled
sink holds the rest (backpressure only: ``fill`` is never stalled). ``fill.free`` is the
depth minus the committed words not yet read from the block RAM (the word offered and the
one read behind it count as drained).
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .link_layouts import RingFillSignature, RingTag, RingWord
from .window_ram import WindowPortSignature

__all__ = ["CommitRing"]


class CommitRing(wiring.Component):
    """Parameters: ``depth`` (words, a power of two), ``mem_addr_width`` (window word address
    bits)."""

    def __init__(self, depth, mem_addr_width):
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two >= 2, not {depth}")
        self.depth = depth
        self.bits = (depth - 1).bit_length() + 1  # one extra bit tells full from empty
        super().__init__({
            "fill": In(RingFillSignature(self.bits)),
            "lookups": Out(stream.Signature(64)),
            "scatter_keys": Out(stream.Signature(64)),
            "cam_cmds": Out(stream.Signature(64)),
            "mem": Out(WindowPortSignature(mem_addr_width)),
            "mem_grant": In(1),
            "mem_pending": Out(1),
            "flush": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        bits, fill = self.bits, self.fill
        m.submodules.ring = ring = Memory(shape=RingWord, depth=self.depth, init=[])
        ring_wr, ring_rd = ring.write_port(), ring.read_port()
        wspec = Signal(bits)    # next speculative write
        wcommit = Signal(bits)  # end of committed words
        rptr = Signal(bits)     # next word to drain
        m.d.comb += fill.free.eq(self.depth - (wcommit - rptr)[:bits])

        with m.If(fill.words.valid):
            m.d.comb += [ring_wr.addr.eq(wspec[:-1]), ring_wr.data.eq(fill.words.payload),
                         ring_wr.en.eq(1)]
            m.d.sync += wspec.eq(wspec + 1)
        with m.If(fill.commit):
            m.d.sync += wcommit.eq(wspec)
        with m.If(fill.rollback):
            m.d.sync += wspec.eq(wcommit)

        mem_pending = Signal(bits)  # committed MEM_WRITE data words not yet written
        mem_written = Signal()
        # Two stages: the block RAM's read (d_valid) and a register (q_*) that the sinks see,
        # so that nothing but flip-flop inputs hangs on the block RAM's unregistered output
        # (timing: its clock-to-out is 5.8 ns on ECP5, and the tag decode, the sink's ready
        # and the ring's advance behind it were the board's critical path).
        d_valid = Signal()
        q_valid = Signal()
        q_word = Signal.like(ring_rd.data.word, reset_less=True)
        q_tag = Signal.like(ring_rd.data.tag, reset_less=True)
        mem_word = Signal.like(self.mem.addr)
        consume = Signal()
        with m.Switch(q_tag):
            with m.Case(RingTag.LOOKUP):
                m.d.comb += [self.lookups.valid.eq(q_valid), self.lookups.payload.eq(q_word),
                             consume.eq(self.lookups.ready)]
            with m.Case(RingTag.CAM):
                m.d.comb += [self.cam_cmds.valid.eq(q_valid), self.cam_cmds.payload.eq(q_word),
                             consume.eq(self.cam_cmds.ready)]
            with m.Case(RingTag.SCATTER):
                m.d.comb += [self.scatter_keys.valid.eq(q_valid),
                             self.scatter_keys.payload.eq(q_word),
                             consume.eq(self.scatter_keys.ready)]
            with m.Case(RingTag.ADDR):
                m.d.comb += consume.eq(1)
            with m.Case(RingTag.MEMDATA):
                m.d.comb += consume.eq(self.mem_grant & self.mem.ready)
        take = q_valid & consume
        advance = d_valid & (~q_valid | take)      # the read word moves into the register
        issue = (rptr != wcommit) & (~d_valid | advance)
        m.d.comb += [ring_rd.addr.eq(rptr[:-1]), ring_rd.en.eq(issue)]
        with m.If(take):
            m.d.sync += q_valid.eq(0)
            with m.If(q_tag == RingTag.ADDR):
                m.d.sync += mem_word.eq(q_word[3:32])
            with m.If(q_tag == RingTag.MEMDATA):
                m.d.sync += mem_word.eq(mem_word + 1)
        with m.If(advance):
            m.d.sync += [q_valid.eq(1), q_word.eq(ring_rd.data.word), q_tag.eq(ring_rd.data.tag),
                         d_valid.eq(0)]
        with m.If(issue):
            m.d.sync += [rptr.eq(rptr + 1), d_valid.eq(1)]
        m.d.comb += mem_written.eq(take & (q_tag == RingTag.MEMDATA))
        m.d.sync += mem_pending.eq(mem_pending + fill.mem_words - mem_written)
        with m.If(self.flush):
            m.d.sync += [rptr.eq(wcommit), d_valid.eq(0), q_valid.eq(0),
                         mem_pending.eq(fill.mem_words)]
        m.d.comb += [self.mem_pending.eq(mem_pending != 0),
                     self.mem.addr.eq(mem_word), self.mem.wdata.eq(q_word),
                     self.mem.write.eq(q_valid & (q_tag == RingTag.MEMDATA))]
        return m
