"""Property 4 (issue 43) on `ColdKeySet` at one lane (one partition), unmodified, in a small
geometry (`GEOMETRY`: 2 tables x 2 buckets x 2 ways, a stash of 1, 6 slots per batch,
4-bit keys, 2-bit epochs), seen from its streams:

- each beat comes out in order, its key, insert, eob and user as they went in, ``LATENCY``
  cycles after it was taken;
- each distinct inserted key of a batch is numbered once, in first-appearance order: the
  first beat of a key gets ``first`` and the batch's next slot; a later beat of a key that
  was stored gets its slot again, not ``first``, no overflow; a beat that is not an insert
  gets slot 0, not ``first``, no overflow;
- numbering restarts at each batch (the beat after ``eob`` starts from slot 0 and knows no
  key);
- overflow is reported, never silent: a new key beyond ``max_keys`` is flagged, slot 0; a
  new key that cannot be stored is flagged (it still takes the next slot); a key that was
  flagged is not stored, so a later beat of it is new again (never a silent wrong slot).

A reference of its own, from the output stream: per batch, the slots numbered so far and the
stored keys with their slots. Overflow of a stored-key place (both of its buckets and the
stash full) is the block's to decide; the reference only requires that a new key is flagged
or numbered next and stored, and that every unflagged answer is exact.

Assumptions: no reset after the start; ``o.ready`` high (the consumer never stalls: the
output queue's no-loss / no-duplication is a stream property, 5). Free: every key, insert,
eob, user and ``i.valid`` timing.

Why the small geometry stands for the product's (16384 entries, 4 ways, stash 4, 8192 slots,
32-bit keys, 8-bit epochs): the set's logic is generated per way, per stash entry and per
forwarded beat (``FORWARD`` = 6, the same at every geometry), so the small set has every
path of the product's (forwarding from each of the 6 beats ahead, the way choice, the
stash, both overflows) at widths that change no control path. 4-bit keys: six keys that
share both buckets exist (with 3-bit ones a place-full overflow is unreachable). Not reached
within the depth: the epoch wrap and its clearing pass (3 batches, then 2 cycles: step 24).
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover

import hotline.hw.cold_key_set as block

from .runner import free_inputs

__all__ = ["ColdKeySetProperty", "GEOMETRY", "MUTATIONS"]

GEOMETRY = dict(capacity=8, ways=2, stash=1, max_keys=6, key_width=4, user_width=2,
                epoch_bits=2)

# name -> (source text of hw/cold_key_set.py, its replacement)
MUTATIONS = {
    # the beat just ahead's insert is not forwarded: a key twice in a row numbered twice
    "no_forward_last": ("last_hit = sd.same_key[0] & hist[0].stored", "last_hit = C(0)"),
    # the beats 2 .. FORWARD ahead are not forwarded
    "no_forward_window": ("hit = sm.same_key[1 + j] & hist[j].stored", "hit = C(0)"),
    # the count does not restart at a batch's end
    "no_restart": ("m.d.sync += [count.eq(0), *(v.eq(0) for v in stash_valid)]",
                   "m.d.sync += [*(v.eq(0) for v in stash_valid)]"),
    # entries of earlier batches count as this batch's
    "stale_epoch": ("live = word[w].epoch == sc.epoch", "live = C(1)"),
    # a new key beyond max_keys is numbered, not flagged
    "no_max_keys": ("room_keys = [count < self.max_keys]", "room_keys = [C(1)]"),
    # a new key that finds no place is not flagged (and not stored)
    "silent_overflow": ("overflow = new & ~(to_table | to_stash)",
                        "overflow = new & ~(to_table | to_stash | room_keys[p])"),
}


class ColdKeySetProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.cold_key_set` or a mutant of it."""

    def __init__(self, module=block):
        self.dut = module.ColdKeySet(**GEOMETRY)
        self.ports = free_inputs(self.dut)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        g = GEOMETRY
        m.d.comb += [Assume(~ResetSignal()), Assume(dut.o.ready)]

        # ---- in order, unchanged, LATENCY cycles later (o.ready is high) ----------------
        ip, op = dut.i.payload, dut.o.payload
        beat = Cat(dut.i.valid & dut.i.ready, ip.key, ip.insert, ip.eob, ip.user)
        delayed = beat
        for j in range(dut.LATENCY):
            stage = Signal(len(beat), name=f"in_beat{j + 1}")
            m.d.sync += stage.eq(delayed)
            delayed = stage
        m.d.comb += Assert(dut.o.valid == delayed[0])
        with m.If(dut.o.valid):
            m.d.comb += Assert(Cat(op.key, op.insert, op.eob, op.user) == delayed[1:])

        # ---- the reference numbering, per batch ------------------------------------------
        keys = g["max_keys"]
        numbered = Signal(range(keys + 1))
        stored_v = Signal(keys)         # by slot: that slot's key is stored
        stored_k = Array(Signal(g["key_width"], name=f"slot{i}_key") for i in range(keys))
        hits = Cat(stored_v[i] & (stored_k[i] == op.key) for i in range(keys))
        seen = hits.any()
        seen_slot = Signal(range(keys))
        for i in reversed(range(keys)):
            with m.If(hits[i]):
                m.d.comb += seen_slot.eq(i)
        room = numbered < keys
        with m.If(dut.o.valid):
            with m.If(~op.insert):
                m.d.comb += [Assert(~op.first), Assert(~op.overflow), Assert(op.slot == 0)]
            with m.Elif(seen):
                m.d.comb += [Assert(~op.first), Assert(~op.overflow),
                             Assert(op.slot == seen_slot)]
            with m.Else():
                m.d.comb += Assert(op.first)
                with m.If(room):
                    m.d.comb += Assert(op.slot == numbered)
                    m.d.sync += numbered.eq(numbered + 1)
                    with m.If(~op.overflow):
                        m.d.sync += [stored_v.bit_select(numbered, 1).eq(1),
                                     stored_k[numbered].eq(op.key)]
                with m.Else():
                    m.d.comb += [Assert(op.overflow), Assert(op.slot == 0)]
            with m.If(op.eob):
                m.d.sync += [numbered.eq(0), stored_v.eq(0)]

        # not vacuous: a key found again in a second batch, and both overflows
        later = Signal()
        with m.If(dut.o.valid & op.eob):
            m.d.sync += later.eq(1)
        m.d.comb += [Cover(dut.o.valid & op.insert & seen & later),
                     Cover(dut.o.valid & op.overflow & ~room),
                     Cover(dut.o.valid & op.overflow & room)]
        return m
