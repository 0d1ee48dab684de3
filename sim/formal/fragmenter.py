"""Property 5 (issue 43), its fragmenter part, on `Fragmenter` at one lane: a fragmenter's
output counts equal its input counts per batch. When the ``batches`` beat of a batch leaves:

- its ``popular + non_popular`` is the batch's sample count (empty samples included);
- ``remap`` has given exactly one beat per non-empty lookup of every batch up to this one;
- ``popular`` and ``non_popular`` together exactly one beat per sample of those batches;
- ``cold_keys`` exactly the ``cold`` count of those batches' summaries.

So no output beat is lost, duplicated or moved into another batch. Checked for one watched
batch (the ``watch``-th: a free input held from step 0, so every batch is the watched one in
some trace) with counts of the wrapper's own, from the streams.

Assumptions: no reset; ``lookups`` follows the stream rule, a batch's last beat (``eob``)
closes its sample and an empty sample is one beat with ``eos``, at most ``max_batch_samples``
samples per batch (an oversized batch's counts wrap, by design, and are flagged); no CAM
commands (the CAM stays empty, so every non-empty sample is non-popular and every lookup
cold: the hot path's counts are the CAM lookup pipeline's, not exercised here); the outputs
never stall (their FIFOs' no-loss under stalls is the stream proofs', property 5; a stall
only delays). Geometry: 4-bit keys, CAM 2 x 2 x 2 + a stash of 1, cold-key set 2 x 2 x 2 + a
stash of 1 with 6 slots, batches of up to 4 samples, 4-entry output FIFOs.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover

import hotline.hw.fragmenter as block

from .runner import free_inputs, held_choice
from .streams import stream_rules

__all__ = ["FragmenterProperty", "MUTATIONS"]

MAX_SAMPLES = 4
GEOMETRY = dict(cam=dict(entries=8, ways=2, stash=1, max_kicks=2),
                cold=dict(capacity=8, ways=2, stash=1, max_keys=6, epoch_bits=2),
                max_batch_samples=MAX_SAMPLES, fifo_depth=4, key_width=4, lanes=1)
COUNT = 6   # the wrapper's running counts: more than the depth can reach

MUTATIONS = {
    # the summary misses the non-popular samples of the batch's last beat
    "summary_misses_last": ("summary.non_popular.eq(non_popular + ends_non_popular)",
                            "summary.non_popular.eq(non_popular)"),
    # the remap entry of a batch's last lookup is lost
    "last_remap_lost": ('needs = {"remap": cls.needs_remap,',
                        'needs = {"remap": cls.needs_remap & ~cls.eob,'),
}


class FragmenterProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.fragmenter` or a mutant of it."""

    def __init__(self, module=block):
        self.dut = module.Fragmenter(**GEOMETRY)
        self.watch = Signal(2)
        self.ports = free_inputs(self.dut) + [self.watch]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        m.d.comb += Assume(~ResetSignal())
        held_choice(m, self.watch)
        m.d.comb += [Assume(~dut.cmd.valid), Assume(~dut.clear_counters)]
        for name in ("remap", "popular", "non_popular", "cold_keys", "batches"):
            m.d.comb += Assume(getattr(dut, name).ready)

        # ---- the input: each batch's lookups and samples --------------------------------
        i, p = dut.lookups, dut.lookups.payload
        stream_rules(m, i, "lookups", assume=True)
        with m.If(i.valid):
            m.d.comb += [Assume(~p.eob | p.eos), Assume(~p.empty | p.eos)]
        fire = i.valid & i.ready
        lookups, samples = Signal(COUNT), Signal(COUNT)    # so far, every batch
        batch_samples = Signal(range(MAX_SAMPLES + 1))       # of the batch coming in
        batch_in = Signal(3)                                  # batches taken whole
        watched_lookups, watched_samples = Signal(COUNT), Signal(COUNT)  # through the watched
        watched_own = Signal(COUNT)                           # the watched batch's samples
        with m.If(fire):
            m.d.comb += Assume(batch_samples + p.eos <= MAX_SAMPLES)
            m.d.sync += [lookups.eq(lookups + ~p.empty), samples.eq(samples + p.eos),
                         batch_samples.eq(Mux(p.eob, 0, batch_samples + p.eos))]
            with m.If(p.eob):
                m.d.sync += batch_in.eq(batch_in + 1)
                with m.If(batch_in == self.watch):
                    m.d.sync += [watched_lookups.eq(lookups + ~p.empty),
                                 watched_samples.eq(samples + p.eos),
                                 watched_own.eq(batch_samples + p.eos)]
        m.d.comb += Assume(~batch_in[-1])   # the depth is too short for the count to wrap

        # ---- the outputs: beats so far (this cycle's included) -------------------------
        def out_count(name):
            s = getattr(dut, name)
            count = Signal(COUNT, name=f"{name}_out")
            m.d.sync += count.eq(count + s.valid)
            return count + s.valid

        remap, popular, non_popular, cold_keys = (out_count(n) for n in
                                                  ("remap", "popular", "non_popular", "cold_keys"))
        b = dut.batches
        batch_out = Signal(3)
        cold_sum = Signal(COUNT)    # the summaries' cold counts so far
        with m.If(b.valid):
            m.d.sync += [batch_out.eq(batch_out + 1), cold_sum.eq(cold_sum + b.payload.cold)]
            m.d.comb += Assert(batch_out < batch_in)   # no summary of a batch not taken
            with m.If(batch_out == self.watch):
                m.d.comb += [
                    Assert(b.payload.popular + b.payload.non_popular == watched_own),
                    Assert(remap == watched_lookups),
                    Assert(popular + non_popular == watched_samples),
                    Assert(cold_keys == cold_sum + b.payload.cold),
                ]
        # not vacuous: the watched batch's summary, of two samples or more
        m.d.comb += Cover(b.valid & (batch_out == self.watch) & (watched_own >= 2))
        return m
