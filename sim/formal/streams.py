"""Property 5 (issue 43): no beat is lost, duplicated or reordered across a `RegisterSlice`, a
`StreamFork` and a `FunnelFIFO` (the cold-key FIFO of the top with lanes), each wrapped
unmodified in its own wrapper with the same scoreboard.

The scoreboard is a tagged-beat abstraction: every beat that enters carries its sequence
number (``Assume``: the input payload is the count of beats in so far, mod 2**`TAG_BITS`),
so each output beat must carry the count of beats out so far. The blocks never look at the
payload (data independence), so a lost beat (the tags skip), a duplicated one (a tag
repeats) or a reordering is seen at the first wrong beat, whatever the data. Asserted:

- an output's payload is its next tag whenever it is valid (not only at the handshake);
- count in == count out + occupancy: the slice holds ``o.valid`` plus its skid
  (``~i.ready``), the FIFO its ``level``, the fork one beat or none per output;
- an output's valid is held until ready, with its payload stable (AXI-stream rule);
- for k-induction (the slice and the fork close; the FIFO's ring contents are memories the
  wrapper cannot name, so it stays bounded), invariants on the block's own state, read by
  name (`runner.internal`): the slice's skid register holds the beat after the output's, the
  fork's ``taken`` flag is set exactly for an output one beat ahead of the input.

Assumptions: no reset; the input follows the stream rule (valid held until ready, payload
stable), as every producer of the top does; the fork's ``enable`` changes only between beats
(``~i.valid``); the FIFO's ``w_count`` is within 0 .. lanes (its documented range). Free:
every valid / ready timing, ``w_count``, ``enable``. Geometry: 4-bit payloads, a 2-way fork,
a FIFO of depth 4 with 2 lanes; no block's logic depends on the payload width, and the tags
exceed every occupancy.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover

import hotline.hw.lib.funnel_fifo as fifo_block
import hotline.hw.lib.register_slice as slice_block
import hotline.hw.lib.stream_fork as fork_block

from .runner import free_inputs, internal

__all__ = ["TAG_BITS", "stream_rules", "SliceProperty", "ForkProperty", "FifoProperty",
           "SLICE_MUTATIONS", "FORK_MUTATIONS", "FIFO_MUTATIONS"]

TAG_BITS = 4

# name -> (source text of the block's module, its replacement)
SLICE_MUTATIONS = {
    # a beat taken while the output is stalled is not kept in the skid register
    "drop_beat": ("m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]",
                  "m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(0)]"),
    # the skid register is not emptied when its beat moves to the output
    "duplicate_beat": ("skid_valid.eq(0)]", "skid_valid.eq(skid_valid)]"),
}
FORK_MUTATIONS = {
    # the input moves on when any output has taken the beat, not all
    "drop_beat": ("self.i.ready.eq(done.all())", "self.i.ready.eq(done.any())"),
    # an output that took the beat is not marked: it takes it again
    "duplicate_beat": ("taken.eq(taken | Cat(*(o.valid & o.ready for o in outs)))",
                       "taken.eq(taken)"),
}
FIFO_MUTATIONS = {
    # the read pointer skips an entry per read
    "drop_beat": ("rp.eq(rp + taken)", "rp.eq(rp + 2 * taken)"),
    # the read pointer does not move on a read
    "duplicate_beat": ("rp.eq(rp + taken)", "rp.eq(rp)"),
}


def stream_rules(m, s, name, *, assume):
    """``s`` (a stream, called ``name``) holds valid until ready, its payload stable: assumed
    for an input, asserted for an output."""
    check = Assume if assume else Assert
    was_stalled = Signal(name=f"{name}_stalled")
    last = Signal(len(Value.cast(s.payload)), name=f"{name}_last")
    m.d.sync += [was_stalled.eq(s.valid & ~s.ready), last.eq(s.payload)]
    with m.If(was_stalled):
        m.d.comb += check(s.valid & (Value.cast(s.payload) == last))


def _tagged_input(m, i):
    """A count of ``i``'s beats, which ``i``'s payload is assumed to be, ``i`` following the
    stream rule; returns the count."""
    count = Signal(TAG_BITS, name="in_count")
    with m.If(i.valid & i.ready):
        m.d.sync += count.eq(count + 1)
    m.d.comb += Assume(i.payload == count)
    stream_rules(m, i, "in", assume=True)
    return count


def _tagged_output(m, o, name):
    """A count of ``o``'s beats; asserts ``o``'s payload is that count whenever valid."""
    count = Signal(TAG_BITS, name=f"{name}_out")
    with m.If(o.valid & o.ready):
        m.d.sync += count.eq(count + 1)
    with m.If(o.valid):
        m.d.comb += Assert(o.payload == count)
    stream_rules(m, o, name, assume=False)
    m.d.comb += Cover((count == 3) & o.valid & o.ready)
    return count


class _Wrapper(Elaboratable):
    """Wraps ``dut``; its inputs are the top's free inputs."""

    def __init__(self, dut):
        self.dut = dut
        self.ports = free_inputs(dut)


class SliceProperty(_Wrapper):
    """`RegisterSlice` (4-bit beats); ``module`` is `hotline.hw.lib.register_slice` or a mutant."""

    def __init__(self, module=slice_block):
        super().__init__(module.RegisterSlice(TAG_BITS))

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        skid, = internal(m, dut, platform, "skid")
        count_in = _tagged_input(m, dut.i)
        count_out = _tagged_output(m, dut.o, "o")
        m.d.comb += Assert((count_in - count_out)[:TAG_BITS] == dut.o.valid + ~dut.i.ready)
        # strengthening (k-induction): a full skid register holds the beat after the output's
        with m.If(~dut.i.ready):
            m.d.comb += [Assert(dut.o.valid), Assert(skid == (count_out + 1)[:TAG_BITS])]
        return m


class ForkProperty(_Wrapper):
    """`StreamFork` with 2 outputs; ``module`` is `hotline.hw.lib.stream_fork` or a mutant."""

    def __init__(self, module=fork_block):
        super().__init__(module.StreamFork(TAG_BITS, 2))

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        taken, = internal(m, dut, platform, "taken")
        count_in = _tagged_input(m, dut.i)
        taken_in = dut.i.valid & dut.i.ready
        enable_last = Signal.like(dut.enable, init=dut.enable.init)
        m.d.sync += enable_last.eq(dut.enable)
        with m.If(dut.i.valid):
            m.d.comb += Assume(dut.enable == enable_last)
        for k in range(dut.n):
            o = getattr(dut, f"o{k}")
            # a disabled output is treated as having taken each beat: its count moves with
            # the input's (its own handshakes are asserted absent)
            count = _tagged_output(m, o, f"o{k}")
            with m.If(~dut.enable[k]):
                m.d.comb += Assert(~o.valid)
                with m.If(taken_in):
                    m.d.sync += count.eq(count + 1)
            # in == out + occupancy: the beat on the input, taken or not yet by this output
            ahead = (count - count_in)[:TAG_BITS]
            m.d.comb += Assert((ahead == 0) | (ahead == 1) & dut.i.valid & ~o.valid)
            # strengthening (k-induction): the fork's taken flag is the beat taken ahead
            m.d.comb += [Assert(taken[k] == (ahead == 1)), Assert(~taken[k] | dut.enable[k])]
        return m


class FifoProperty(_Wrapper):
    """`FunnelFIFO` (depth 4, 2 lanes); ``module`` is `hotline.hw.lib.funnel_fifo` or a mutant.
    The input is ``w_count`` beats per cycle (taken while ``w_room``), lane k tagged
    count_in + k."""

    def __init__(self, module=fifo_block):
        super().__init__(module.FunnelFIFO(TAG_BITS, 4, 2))

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        internal(m, dut, platform)
        m.d.comb += Assume(dut.w_count <= dut.lanes)     # the port's range: 0 .. lanes
        count_in = Signal(TAG_BITS)
        with m.If(dut.w_room):
            m.d.sync += count_in.eq(count_in + dut.w_count)
        for k in range(dut.lanes):
            m.d.comb += Assume(dut.w_data[k] == (count_in + k)[:TAG_BITS])
        count_out = _tagged_output(m, dut.r, "r")
        m.d.comb += Assert((count_in - count_out)[:TAG_BITS] == dut.level)
        return m
