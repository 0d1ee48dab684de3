"""BatchKeyMerge: the Fragmenter's ``cold_keys`` and ``batches`` streams as one ordered stream.

The Fragmenter writes a batch's cold keys into ``cold_keys`` no later than the batch's summary
into ``batches``, but the two FIFOs drain independently. A DMA engine needs the keys *and* the
batch boundary in order, before the batch's key count is known (waiting for the count would need
a batch-sized buffer). The rule: a key at the head of ``cold_keys`` belongs to the batch whose
summary is at the head of ``batches`` while fewer than its ``cold`` keys have been forwarded; with
no summary waiting, it belongs to the batch still being fragmented. So keys pass as soon as they
arrive, and a summary passes once its keys have. This needs a summary to become visible no
later than any key written after it: the Fragmenter writes a batch's first new cold key no
earlier than the previous batch's summary (its answers with new keys wait for it), and its
two equal ``SyncFIFOBuffered`` have the same write-to-read latency and no read bubbles while
data is queued (with lanes, the keys' packer and funnel only add latency).
`tests/test_fragmenter.py` checks the order directly.

``o`` carries {end, key, popular, non_popular, cold, overflow}: ``end = 0`` beats are cold
keys (the summary fields are 0), ``end = 1`` beats close a batch with its summary (``key`` is
0). Combinational path from the inputs to ``o``; one beat per cycle; full backpressure.
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.streams import batch_keys_layout

__all__ = ["BatchKeyMerge"]


class BatchKeyMerge(wiring.Component):
    """Parameters: ``key_layout`` and ``batch_layout`` (the Fragmenter's ``cold_keys`` and
    ``batches`` payload layouts; ``batch_layout`` has a ``cold`` count field)."""

    def __init__(self, key_layout, batch_layout):
        self.out_layout = batch_keys_layout(key_layout, batch_layout)
        super().__init__({
            "keys": In(stream.Signature(key_layout)),
            "batches": In(stream.Signature(batch_layout)),
            "o": Out(stream.Signature(self.out_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        forwarded = Signal.like(self.batches.payload.cold)
        summary = self.batches.payload
        keys_left = ~self.batches.valid | (forwarded != summary.cold)
        o = self.o.payload
        # Fields that do not belong to the beat are 0, not the other FIFO's (maybe undefined)
        # output.
        for name in self.keys.payload.shape().members:
            m.d.comb += getattr(o, name).eq(Mux(keys_left, getattr(self.keys.payload, name), 0))
        for name in summary.shape().members:
            m.d.comb += getattr(o, name).eq(Mux(keys_left, 0, getattr(summary, name)))
        with m.If(keys_left):
            m.d.comb += [self.o.valid.eq(self.keys.valid), self.keys.ready.eq(self.o.ready)]
            with m.If(self.keys.valid & self.o.ready):
                m.d.sync += forwarded.eq(forwarded + 1)
        with m.Else():
            m.d.comb += [o.end.eq(1), self.o.valid.eq(1), self.batches.ready.eq(self.o.ready)]
            with m.If(self.o.ready):
                m.d.sync += forwarded.eq(0)
        return m
