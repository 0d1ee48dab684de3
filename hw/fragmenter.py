"""Fragmenter: splits mini-batches into popular / non-popular micro-batches on the fly.

``lookups`` carries ``lanes`` (L) lookups per beat, samples and batches in order (lane beats,
`hotline.contract.streams`): per lane {key, eos (last lookup of its sample), empty (the lane
stands for a sample with no lookups; set eos too)}, per beat {eob (the beat closes its batch),
last (the beat's last lane)}. All L lookups of a beat are looked up in the PopularityCAM at
once (hot slot = CAM entry address). Cold lookups go through the ColdKeySet, which numbers
the batch's distinct cold keys in order of first appearance (with lanes, a ColdKeySet of
``AcceleratorConfig.cold_partitions`` partitions taking up to L keys per cycle, and a cold
lookup that repeats one of the L before it in its batch taking the latest one's slot without
reaching the set: `hotline.contract.config.repeat_window`); a beat without cold lookups passes
it by. Outputs, each a stream behind its own FIFO, at most one beat per
``lookups`` beat:

- ``remap``: {hot, slot} per non-empty lookup, in input order (hot slot if hot, else cold
  slot), a lane beat;
- ``popular`` / ``non_popular``: {sample} = batch-local sample index of the samples the beat
  closes, in input order, a lane beat; a sample is popular iff all its lookups are hot (an
  empty sample is popular);
- ``cold_keys``: {key} the batch's distinct cold keys in first-appearance order, a lane beat
  of L keys from the batch's first (the last beat holds what is left; `BatchLanePacker`);
- ``batches``: {popular, non_popular, cold, overflow} per batch, after its last beats, so the
  host knows how many entries of each stream belong to the batch. ``overflow``: the cold set
  flagged a key of the batch, or the batch has more than ``max_batch_samples`` samples (the
  sample indices beyond that wrap, and the counts at twice it).

``cmd`` / ``resp`` / ``moves`` are the CAM's command ports (load the hot set between batches).
``counters`` count lookups, hits, samples, popular samples, cold rows, batches, cold-set
overflows and oversized batches (more than ``max_batch_samples`` samples) since reset or ``clear_counters`` (48 bits, wrapping; ``lagged_count``: they lag the
output beats, and a beat in the clearing cycle is counted after the clear).

Timing: one ``lookups`` beat per cycle sustained while the cold set keeps up: it takes one
cold-set beat per cycle, at one lane a beat's cold lookup (a batch's last beat without one
takes a non-insert beat), with lanes a run of up to L queued cold lookups in distinct
partitions, across beat boundaries within a batch, a repeat of one of the L cold lookups
before it taking none (`ColdRunDispatcher`); and ``cold_keys``
takes one new key per cycle at one lane, up to L with lanes. With lanes, bursts of cold lookups are absorbed while at most
``GROUP_DEPTH`` beats wait for their cold slots (the schedule is
`hotline.sim.fragmenter_run.beat_cycles`). Also across
batch boundaries (the cold set needs no clearing pass between batches, except one pass of
``min(capacity // (2 * ways * partitions), 2048)`` cycles every ``2**epoch_bits - 1``
batches, `ColdKeySet.clear_cycles`: 2048 cycles every 255 batches in the product
configuration, every 1023 at 4 lanes). Latency ``LATENCY`` cycles from a ``lookups``
handshake to the FIFO write through the cold set (``cam.LATENCY + 3`` without cold lookups),
plus the FIFOs' own. An output whose FIFO holds more than ``fifo_depth - 3`` entries stalls
the pipeline only when the beat at its end needs that FIFO (a beat that closes a sample
needs both sample FIFOs); nothing is lost or duplicated.
Read all output streams concurrently.

Stages (``Fragmenter.STAGES``), each a ``wiring.Component`` whose docstring states its latency,
throughput and backpressure: the PopularityCAM; `LookupSplit` (each beat into the beat FIFO, its cold
lookups to the cold set: a register at one lane, a `ColdRunDispatcher` with lanes); the
ColdKeySet; `AnswerRing` (the answers, their batch tallies, the new keys into ``cold_keys``);
`BeatCollector` (the head beat with all its answers, one register); `SampleClassifier` (the
per-sample classification into the other four output FIFOs). The lane-count differences
live in `LookupSplit` and `AnswerRing`.
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from hotline.contract.config import PRODUCT
from hotline.contract.keys import KEY_BITS
from hotline.contract.regmap import FRAGMENTER_COUNTERS
from hotline.contract.streams import fragmenter_layouts, lookup_layout

from .batch_lane_packer import BatchLanePacker
from .cold_key_set import ColdKeySet
from .cold_run_dispatcher import ColdRunDispatcher, answer_layout
from .lib.banked_ring import BankedRing
from .lib.buffered_fifo import BufferedFIFO
from .lib.fifo_room import fifo_has_room, fifo_room
from .lib.lagged_counter import lagged_count
from .lib.onehot import binary_select, compact, popcount, shift_in
from .lib.register_slice import RegisterSlice
from .lib.replica import replica
from .popularity_cam import PopularityCAM

__all__ = ["Fragmenter", "COUNTERS", "LookupSplit", "AnswerRing", "BeatCollector",
           "SampleClassifier", "AnswerTake"]

COUNTERS = FRAGMENTER_COUNTERS
COUNTER_BITS = 48


def _lane(value, lanes, j):
    """Lane ``j`` of a per-lane field (the field itself at one lane)."""
    return value if lanes == 1 else value[j]


def _counters(names):
    """A stage's ``counters`` port: the `COUNTERS` ``names``, each ``COUNTER_BITS`` wide."""
    return Out(data.StructLayout({n: COUNTER_BITS for n in names}))


def _count(m, counters, clear, incs):
    """`lagged_count` each of ``counters`` by ``incs`` {name: (fire, increment)}."""
    for name, (fire, inc) in incs.items():
        lagged_count(m, getattr(counters, name), Mux(fire, inc, 0), clear, name)


def marks_layout(key_width, lanes):
    """A lookup beat's keys and marks, its sideband through the CAM (``valid``: per lane)."""
    return data.StructLayout({"key": data.ArrayLayout(key_width, lanes), "eos": lanes,
                              "empty": lanes, "valid": lanes, "eob": 1})


def beat_layout(lanes, hot_slot_width):
    """A lookup beat waiting for its cold slots (`LookupSplit.beats`): per lane its CAM
    ``hit`` and ``hot_slot``, its marks, ``cold`` (a cold lookup); ``need``: the answers the
    beat takes from the `AnswerRing` (one per cold lookup, or its non-insert beat's)."""
    return data.StructLayout({"hit": lanes, "hot_slot": data.ArrayLayout(hot_slot_width, lanes),
                              "eos": lanes, "empty": lanes, "valid": lanes, "eob": 1,
                              "cold": lanes, "need": bits_for(lanes)})


def tally_layout(cold_count):
    """An answer's tallies: its batch's cold-key count (shape ``cold_count``) and overflow so
    far, the answer included."""
    return data.StructLayout({"cold": cold_count, "overflow": 1})


def classified_layout(lanes, slot_width, cold_count):
    """A beat with its slots (`BeatCollector.o`): per lane ``hit``, ``slot`` (hot or cold),
    marks; its batch's tallies so far (``cold``, ``overflow``); the output FIFOs it may write
    (``needs_remap``, ``needs_samples``)."""
    return data.StructLayout({
        "hit": lanes, "slot": data.ArrayLayout(slot_width, lanes),
        "eos": lanes, "empty": lanes, "valid": lanes, "eob": 1,
        "cold": cold_count, "overflow": 1, "needs_remap": 1, "needs_samples": 1})


#: Registered room of the output FIFOs (`SampleClassifier.room`): the sample FIFOs together.
ROOM_LAYOUT = data.StructLayout({"remap": 1, "samples": 1, "batches": 1})


class AnswerTake(wiring.Signature):
    """The head beat's side of an `AnswerRing` (members as the head drives them): ``cold``
    (its cold lanes), ``need`` (answers it takes), ``take`` (it takes them at this edge); back
    ``held`` (bit k - 1: the ring holds at least k answers; a register), ``slot`` (per lane j,
    the slot of the head's answer ``popcount(cold[:j])``) and ``tally`` (of its last
    answer, ``need - 1``)."""

    def __init__(self, lanes, slot_width, tallies):
        super().__init__({
            "cold": Out(lanes), "need": Out(bits_for(lanes)), "take": Out(1),
            "held": In(lanes), "slot": In(data.ArrayLayout(slot_width, lanes)),
            "tally": In(tallies),
        })


class LookupSplit(wiring.Component):
    """CAM results -> the beats waiting for their cold slots, and the cold set's input.

    ``result`` In: the PopularityCAM ``cam``'s result beats, their marks (``marks``,
    `marks_layout`) in ``user``. ``beats`` Out (`beat_layout`): every result beat, in order, through a FIFO of
    ``depth`` beats. ``cold`` Out (the ``ColdKeySet`` ``cold_set``'s input): the beats' cold
    lookups, in order. One lane: one cold-set beat per result beat that has a cold lookup or
    closes its batch (a non-insert beat then, so the cold set sees every batch end), from a
    register. With lanes: the cold lookups (and such batch ends, as dummy entries; each key's
    partition hashed on the way in) queue in a `ColdRunDispatcher` of ``2 * depth * lanes``
    entries, which sends a run of up to ``lanes`` in distinct partitions per cycle, across
    beat boundaries, through a `RegisterSlice`.

    Latency: a result taken in cycle t is on ``beats`` in cycle t + 2 (an empty FIFO's); its
    cold lookups are on ``cold`` in cycle t + ``Fragmenter.cycles_to_cold(lanes)`` at the
    earliest. Throughput: one result per cycle. Backpressure: ``result.ready`` is low while
    the FIFO is full, or, for a result with cold lookups or a batch end, while the way to the
    cold set has no room (one lane: its register holds a beat ``cold`` does not take; lanes:
    the dispatcher's registered ``w_room``). The dispatcher's queue never holds a beat back
    while the FIFO has room: twice the entries the FIFO's beats can hold.
    """

    def __init__(self, marks, cam, cold_set, depth, lanes):
        self.marks_layout, self.depth, self.lanes = marks, depth, lanes
        self.key_width = cold_set.key_width
        self.partition_hash = cold_set.partition_hash
        self.beat_layout = beat_layout(lanes, cam.slot_width)
        super().__init__({
            "result": In(cam.result.signature),
            "beats": Out(stream.Signature(self.beat_layout)),
            "cold": Out(cold_set.i.signature.flip()),
        })

    def elaborate(self, platform):
        m = Module()
        res = self.result.payload
        rmarks = self.marks_layout(res.user)
        m.submodules.groups = groups = BufferedFIFO(width=self.beat_layout.size,
                                                    depth=self.depth)
        m.d.comb += [self.beats.valid.eq(groups.r_rdy), self.beats.payload.eq(groups.r_data),
                     groups.r_en.eq(self.beats.ready)]
        cold_mask = rmarks.valid & ~Value.cast(res.hit) & ~rmarks.empty
        entering = Signal(self.beat_layout)
        m.d.comb += [
            entering.hit.eq(Value.cast(res.hit)), Value.cast(entering.hot_slot).eq(res.slot),
            entering.eos.eq(rmarks.eos), entering.empty.eq(rmarks.empty),
            entering.valid.eq(rmarks.valid), entering.eob.eq(rmarks.eob),
            entering.cold.eq(cold_mask),
            # counted on the way in (timing: counted at the FIFO's output, it was on the
            # path of the FIFO's read enable)
            entering.need.eq(popcount(cold_mask) | (rmarks.eob & ~cold_mask.any())),
        ]
        needs_cold = cold_mask.any() | rmarks.eob
        send = Signal()   # the result's cold lookups (or batch end) go on at this edge
        to_cold = self._runs if self.lanes > 1 else self._register
        room = to_cold(m, rmarks, cold_mask, send)
        m.d.comb += self.result.ready.eq(groups.w_rdy & (~needs_cold | room))
        taken = self.result.valid & self.result.ready
        m.d.comb += [send.eq(taken & needs_cold), groups.w_en.eq(taken),
                     groups.w_data.eq(entering)]
        return m

    def _register(self, m, rmarks, cold_mask, send):
        """One lane: the cold-set beat in a register; returns its room."""
        ci = self.cold.payload
        ser_key = Signal(self.key_width, reset_less=True)
        ser_mask = Signal()
        ser_eob = Signal()     # the dispatched beat closes its batch
        ser_dummy = Signal()   # ... and has no cold lookup: one non-insert beat
        sending = ser_mask | ser_dummy
        m.d.comb += [self.cold.valid.eq(sending), ci.eob.eq(ser_eob), ci.key.eq(ser_key),
                     ci.insert.eq(ser_mask)]
        with m.If(self.cold.valid & self.cold.ready):
            m.d.sync += [ser_mask.eq(0), ser_dummy.eq(0)]
        with m.If(send):
            # 0 for a dummy beat, masked on the way in (timing: masked on the way out, in front
            # of the cold set's bucket hashes, it was a 9.58 ns path)
            m.d.sync += [ser_key.eq(Mux(cold_mask, rmarks.key[0], 0)), ser_mask.eq(cold_mask),
                         ser_eob.eq(rmarks.eob), ser_dummy.eq(rmarks.eob & ~cold_mask)]
        return ~sending | self.cold.ready

    def _runs(self, m, rmarks, cold_mask, send):
        """Lanes: the cold lookups through a ColdRunDispatcher; returns its room."""
        L, kw, ci = self.lanes, self.key_width, self.cold.payload
        pbits = len(self.partition_hash.expr(C(0, kw)))
        m.submodules.dispatch = disp = ColdRunDispatcher(kw, pbits, L, 2 * self.depth * L)
        part = [self.partition_hash.expr(rmarks.key[j]) for j in range(L)]
        cold_lanes, n_cold = compact(m, cold_mask, [Cat(rmarks.key[j], part[j])
                                                     for j in range(L)], "cold_lane")
        dummy = rmarks.eob & ~cold_mask.any()
        m.d.comb += disp.w_count.eq(Mux(send, Mux(dummy, 1, n_cold), 0))
        last = Mux(dummy, 0, n_cold - 1)    # the entry that closes a batch
        for k, lane in enumerate(cold_lanes):
            entry = disp.w_data[k]
            m.d.comb += [entry.key.eq(lane[:kw]), entry.part.eq(lane[kw:]),
                         entry.close.eq(rmarks.eob & (last == k))]
        m.d.comb += disp.w_data[0].dummy.eq(dummy)
        # A register stage between the dispatcher's run choice and the cold set's partition
        # select (timing: the two made a 17.97 ns path at 2 lanes).
        m.submodules.dispatched = dispatched = RegisterSlice(disp.o.payload.shape())
        wiring.connect(m, disp.o, dispatched.i)
        d = dispatched.o.payload
        m.d.comb += [self.cold.valid.eq(dispatched.o.valid),
                     dispatched.o.ready.eq(self.cold.ready),
                     ci.eob.eq(d.eob), ci.user.eq(d.answers),
                     *(ci.key[k].eq(d.key[k]) for k in range(L)),
                     *(ci.insert[k].eq(d.insert[k]) for k in range(L))]
        return disp.w_room


class AnswerRing(wiring.Component):
    """The cold set's answers -> a ring the head beat takes all of its own from, and the
    batches' new cold keys.

    ``answers`` In: the ``ColdKeySet`` ``cold_set``'s output. The ring takes the answers of a
    cycle (one per key sent, or the non-insert beat's; with lanes ``user`` says how many and
    which are repeats, `answer_layout`: a repeat takes its copy's slot, earlier in the run or
    among the last ``lanes`` written) whatever the head beat is; ``take`` (`AnswerTake`,
    flipped) gives the head beat its answers all at once, so a beat with c cold lookups costs
    one cycle, not c. Each answer also records its batch's tallies so far (`tally_layout`),
    so the batch summary comes from the last answer of the batch's last beat. ``cold_keys``
    Out: the new keys (first appearances), through a FIFO of ``fifo_depth`` (with lanes a
    `BatchLanePacker` of ``fifo_depth * lanes``: beats of ``lanes`` keys from the batch's
    first). ``summarized`` In: a batch summary is written (BatchKeyMerge, in the top, needs a
    batch's summary no later than the next batch's first cold key, so an answer with new keys
    waits while a batch whose last answer was taken has no summary yet). ``counters``:
    cold_rows, overflows (`lagged_count`).

    Latency: an answer taken in cycle t counts in ``take.held`` and can be taken in cycle
    t + 1; its new key is written to the ``cold_keys`` FIFO in cycle t. Throughput: one
    cold-set beat per cycle. Backpressure: ``answers.ready`` is low for an answer with new
    keys while the FIFO has no room (one lane: a register, `fifo_room`) or a summary is
    missing; with lanes also for a batch end without room. The ring holds ``depth * lanes``
    answers, at most one per lane of the ``depth`` beats waiting: it never fills.
    """
    COUNTS = ("cold_rows", "overflows")

    def __init__(self, cold_set, layouts, depth, fifo_depth, lanes):
        self.depth, self.fifo_depth, self.lanes = depth, fifo_depth, lanes
        self.key_width, self.slot_width = cold_set.key_width, cold_set.slot_width
        self.cold_count = layouts["batches"].members["cold"]
        self.tally_layout = tally_layout(self.cold_count)
        super().__init__({
            "answers": In(cold_set.o.signature),
            "cold_keys": Out(stream.Signature(layouts["cold_keys"])),
            "take": In(AnswerTake(lanes, self.slot_width, self.tally_layout)),
            "summarized": In(1),
            "counters": _counters(self.COUNTS),
            "clear_counters": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        L, o = self.lanes, self.answers.payload
        depth = self.depth * L
        m.submodules.slots = slots = BankedRing(self.slot_width, depth, L, reads=L)
        m.submodules.tallies = tallies = BankedRing(self.tally_layout, depth, L, reads=L)
        batch_cold = Signal(self.cold_count)   # this batch's, so far
        batch_overflow = Signal()
        inserted = [_lane(o.insert, L, k) for k in range(L)]
        new_key = [_lane(o.first, L, k) & inserted[k] for k in range(L)]
        overflowed = [_lane(o.overflow, L, k) for k in range(L)]
        # ``unsummarized`` batches have their last answer taken but no summary yet
        # (``keys_wait``: nonzero, a register).
        unsummarized = Signal(range(self.depth + 2))
        keys_wait = Signal()
        answer = self.answers.valid & self.answers.ready
        new_keys, n_new = compact(m, Cat(*new_key), [_lane(o.key, L, k) for k in range(L)],
                                  "new_key")
        self._keys(m, answer, Cat(*new_key).any(), new_keys, n_new, keys_wait)
        tally = [Signal(self.tally_layout, name=f"tally{k}") for k in range(L)]
        if L > 1:
            answers = self._run_answers(m, answer, new_key, overflowed, tally, slots,
                                        batch_cold, batch_overflow)
        else:
            answers = 1   # one per key sent, or the non-insert beat's
            m.d.comb += [tally[0].cold.eq(batch_cold + new_key[0]),
                         tally[0].overflow.eq(batch_overflow | overflowed[0]),
                         slots.w_data[0].eq(o.slot)]
        written = Mux(answer, answers, 0)
        m.d.comb += [slots.w_count.eq(written), tallies.w_count.eq(written),
                     *(tallies.w_data[k].eq(tally[k]) for k in range(L))]
        with m.If(answer):
            with m.If(o.eob):
                m.d.sync += [batch_cold.eq(0), batch_overflow.eq(0)]
            with m.Else():
                m.d.sync += [batch_cold.eq(tally[-1].cold), batch_overflow.eq(tally[-1].overflow)]
        self._take(m, slots, tallies, written)
        _count(m, self.counters, self.clear_counters,
               {"cold_rows": (answer, n_new), "overflows": (answer, popcount(overflowed))})
        unsummarized_next = unsummarized + (answer & o.eob) - self.summarized
        m.d.sync += [unsummarized.eq(unsummarized_next), keys_wait.eq(unsummarized_next != 0)]
        return m

    def _keys(self, m, answer, any_new, new_keys, n_new, keys_wait):
        """The new keys into the ``cold_keys`` FIFO; ``answers.ready``."""
        L, o, port = self.lanes, self.answers.payload, self.cold_keys
        if L > 1:
            # The cold set answers up to L new keys per cycle; they leave in beats of L from
            # the batch's first, whatever the cold set's runs were.
            m.submodules.cold_keys_fifo = fifo = BatchLanePacker(
                self.key_width, L, self.fifo_depth * L, self.cold_count)
            out = fifo.o.payload
            m.d.comb += [port.valid.eq(fifo.o.valid), fifo.o.ready.eq(port.ready),
                         port.payload.last.eq(out.count - 1),
                         *(port.payload.key[k].eq(out.data[k]) for k in range(L))]
            # a batch end, with or without new keys, is written to the packer too
            m.d.comb += [self.answers.ready.eq((~any_new | ~keys_wait)
                                               & (~(any_new | o.eob) | fifo.w_room)),
                         fifo.w_count.eq(Mux(answer, n_new, 0)), fifo.w_end.eq(answer & o.eob),
                         *(fifo.w_data[k].eq(new_keys[k]) for k in range(L))]
        else:
            m.submodules.cold_keys_fifo = fifo = BufferedFIFO(
                width=port.payload.shape().size, depth=self.fifo_depth)
            m.d.comb += [port.valid.eq(fifo.r_rdy), port.payload.eq(fifo.r_data),
                         fifo.r_en.eq(port.ready)]
            keys_room = fifo_room(m, fifo, "cold_keys")
            m.d.comb += [self.answers.ready.eq(~any_new | (keys_room & ~keys_wait)),
                         fifo.w_en.eq(answer & any_new), fifo.w_data.eq(o.key)]

    def _run_answers(self, m, answer, new_key, overflowed, tally, slots, batch_cold,
                     batch_overflow):
        """Lanes: each entry of the run takes the next lane's answer, or (a repeat) the answer
        of its copy, earlier in the run or among the last L written (``recent``); returns how
        many answers the run has."""
        L, o = self.lanes, self.answers.payload
        run = answer_layout(L)(o.user)
        own = [run.repeat[k] == 0 for k in range(L)]
        lane_of = [popcount(own[:k]) if k else C(0, 1) for k in range(L)]
        new_before = [popcount(new_key[:i]) for i in range(L + 1)]
        over_before = [Cat(C(0, 1), *overflowed[:i]).any() for i in range(L + 1)]
        recent = [Signal(self.slot_width, name=f"recent_slot{j}") for j in range(L)]
        index = bits_for(L)
        run_slots = []
        for k in range(L):
            back = run.repeat[k]
            copy = Array(recent)[(back - k - 1)[:index]]
            if k:
                copy = Mux(back <= k, Array(run_slots)[(k - back)[:index]], copy)
            value = Signal(self.slot_width, name=f"answer_slot{k}")
            m.d.comb += value.eq(Mux(own[k], Array(o.slot)[lane_of[k]], copy))
            run_slots.append(value)
            upto = lane_of[k] + own[k]
            m.d.comb += [tally[k].cold.eq(batch_cold + Array(new_before)[upto]),
                         tally[k].overflow.eq(batch_overflow | Array(over_before)[upto]),
                         slots.w_data[k].eq(value)]
        shift_in(m, recent, run_slots, Mux(answer, run.count, 0))
        return run.count

    def _take(self, m, slots, tallies, written):
        """The read side: the head's answers at ``rp``, and ``held`` of them."""
        L, take = self.lanes, self.take
        depth = self.depth * L
        rp = Signal(range(depth))
        held = Signal(range(depth + 1))     # answers in the ring
        # Both rings are read at the L fixed positions rp .. rp + L - 1, and the answer of each
        # cold key (the j-th: at rp + the cold keys before it) and the batch's tally (at
        # rp + need - 1) are selected among them: the classifier's cold bits and need meet a
        # multiplexer, not an adder into the LUT RAMs' addresses (timing: need through the
        # tally's read into the batch summary was 10.8 ns at two lanes).
        for k in range(L):
            m.d.comb += [slots.r_pos[k].eq(rp + k), tallies.r_pos[k].eq(rp + k)]
        m.d.comb += take.slot[0].eq(slots.r_data[0])
        for j in range(1, L):
            m.d.comb += take.slot[j].eq(binary_select([slots.r_data[k] for k in range(L)],
                                                      popcount(take.cold[:j])))
        m.d.comb += take.tally.eq(binary_select([tallies.r_data[k].as_value() for k in range(L)],
                                                (take.need - 1)[:ceil_log2(L)]))
        held_next = Signal.like(held)
        m.d.comb += held_next.eq(held + written - Mux(take.take, take.need, 0))
        # held >= k for k = 1..L, registered (from held's next value): the head's test is then
        # a select of one of them (timing: the FIFO's read enable waited for the compare).
        m.d.sync += [held.eq(held_next),
                     take.held.eq(Cat(held_next >= k for k in range(1, L + 1)))]
        with m.If(take.take):
            m.d.sync += rp.eq(rp + take.need)


class BeatCollector(wiring.Component):
    """The head beat and its answers -> one classified beat, its slots filled in.

    ``beats`` In (`beat_layout`): the beats waiting for their cold slots; ``answers`` Out
    (`AnswerTake`): the head takes its answers from the `AnswerRing` once the ring holds them
    all. ``o`` Out (`classified_layout`, always ready: the `SampleClassifier` takes every
    beat): each beat with its slots (a hot lookup's CAM slot, a cold one's from the ring) and
    its batch's tallies. ``room`` In (`ROOM_LAYOUT`): the output FIFOs' room for a write in
    the next cycle.

    Latency: a head taken in cycle t is on ``o`` in cycle t + 1 when the FIFOs it may write
    have room. Throughput: one beat per cycle. Backpressure: the beat is held in a register
    while ``room`` lacks a FIFO it may write (the check is a register, from ``room`` and the
    beat's next value: timing, it sat in front of the beat FIFO's read enable); the head waits
    while that register is full, or for its answers.
    """

    def __init__(self, beats, hot_slot_width, cold_slot_width, tallies, lanes):
        self.lanes = lanes
        self.layout = classified_layout(lanes, max(hot_slot_width, cold_slot_width),
                                        tallies.members["cold"])
        super().__init__({
            "beats": In(stream.Signature(beats)),
            "answers": Out(AnswerTake(lanes, cold_slot_width, tallies)),
            "room": In(ROOM_LAYOUT),
            "o": Out(stream.Signature(self.layout, always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        head, take = self.beats.payload, self.answers
        need = head.need
        complete = self.beats.valid & Cat(C(1, 1), take.held).bit_select(need, 1)
        cls = Signal(self.layout, reset_less=True)
        cls_valid = Signal()
        fire_ok = Signal()   # the output FIFOs have room for what cls holds
        cls_fire = cls_valid & fire_ok
        load = complete & (~cls_valid | fire_ok)
        m.d.comb += [take.cold.eq(head.cold), take.need.eq(need), take.take.eq(load),
                     self.beats.ready.eq(load), self.o.valid.eq(cls_fire), self.o.payload.eq(cls)]
        head_needs_remap = (head.valid & ~head.empty).any()
        head_needs_samples = (head.valid & head.eos).any()
        with m.If(load):
            m.d.sync += [
                cls.hit.eq(head.hit), cls.eos.eq(head.eos), cls.empty.eq(head.empty),
                cls.valid.eq(head.valid), cls.eob.eq(head.eob),
                cls.needs_remap.eq(head_needs_remap), cls.needs_samples.eq(head_needs_samples),
                cls.cold.eq(take.tally.cold), cls.overflow.eq(take.tally.overflow),
                *(cls.slot[j].eq(Mux(head.hit[j], head.hot_slot[j], take.slot[j]))
                  for j in range(self.lanes)),
                cls_valid.eq(1),
            ]
        with m.Elif(cls_fire):
            m.d.sync += cls_valid.eq(0)

        def rooms_for(needs_remap, needs_samples, eob):
            # A beat that closes a sample waits for room in both sample FIFOs, since which
            # one it writes comes out of the classification.
            return ((~needs_remap | self.room.remap) & (~needs_samples | self.room.samples)
                    & (~eob | self.room.batches))
        # fire_ok's next value: the rooms' next values, for the beat cls holds next.
        m.d.sync += fire_ok.eq(Mux(
            load,
            rooms_for(head_needs_remap, head_needs_samples, head.eob),
            rooms_for(cls.needs_remap, cls.needs_samples, cls.eob)))
        return m


class SampleClassifier(wiring.Component):
    """Classified beats -> ``remap``, ``popular``, ``non_popular`` and ``batches``.

    ``i`` In (`classified_layout`, always ready): one beat per cycle at most. Per lane, in
    order: a non-empty lookup gives a ``remap`` entry {hot, slot}; a lane that closes a sample
    gives its batch-local index to ``popular`` (every lookup of the sample hot, or none) or
    ``non_popular``; a beat that closes its batch gives its ``batches`` summary {popular,
    non_popular, cold, overflow} (``overflow`` also for a batch of more than
    ``max_batch_samples`` samples, whose indices wrap). Each output is a lane beat (the
    layouts of ``layouts``) through its own FIFO of ``fifo_depth``. ``room`` Out
    (`ROOM_LAYOUT`): a register, each FIFO held at most ``fifo_depth - 4`` entries in the
    cycle before (`fifo_has_room` with 3 writes: the `BeatCollector` registers a decision
    from it). ``counters``: lookups, hits, samples, popular_samples, batches,
    oversized_batches (`lagged_count`).

    Latency: a beat on ``i`` in cycle t is written to its FIFOs in cycle t (on their outputs
    in cycle t + 2). Throughput: one beat per cycle. Backpressure: none here; the collector
    holds a beat until ``room`` has its FIFOs.
    """
    COUNTS = ("lookups", "hits", "samples", "popular_samples", "batches", "oversized_batches")
    OUTPUTS = ("remap", "popular", "non_popular", "batches")

    def __init__(self, classified, layouts, max_batch_samples, fifo_depth, lanes):
        self.layouts = layouts
        self.max_batch_samples, self.fifo_depth, self.lanes = max_batch_samples, fifo_depth, lanes
        super().__init__({
            "i": In(stream.Signature(classified, always_ready=True)),
            **{n: Out(stream.Signature(layouts[n])) for n in self.OUTPUTS},
            "room": Out(ROOM_LAYOUT, init={"remap": 1, "samples": 1, "batches": 1}),
            "counters": _counters(self.COUNTS),
            "clear_counters": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        L, cls, cls_fire = self.lanes, self.i.payload, self.i.valid
        fifos = {}
        for name in self.OUTPUTS:
            port = getattr(self, name)
            m.submodules[f"{name}_fifo"] = fifos[name] = fifo = BufferedFIFO(
                width=self.layouts[name].size, depth=self.fifo_depth)
            m.d.comb += [port.valid.eq(fifo.r_rdy), port.payload.eq(fifo.r_data),
                         fifo.r_en.eq(port.ready)]
        # Registered room, checked in the collector against registered needs (timing: the
        # FIFO levels through w_rdy, then the sample classification in front of the beat
        # FIFO's read enable, were critical paths; then the levels' compares through the
        # collector's decision into its fire_ok, 9.5 ns).
        m.d.sync += [self.room.remap.eq(fifo_has_room(fifos["remap"], writes=3)),
                     self.room.samples.eq(fifo_has_room(fifos["popular"], writes=3)
                                          & fifo_has_room(fifos["non_popular"], writes=3)),
                     self.room.batches.eq(fifo_has_room(fifos["batches"], writes=3))]

        # Per lane, in order: does it close a sample, was that sample all hot?
        all_hot = Signal(init=1)       # every earlier lookup of the current sample was hot
        hot = all_hot
        look, ends, pop, non = [], [], [], []
        for j in range(L):
            v, e = cls.valid[j], cls.empty[j]
            hot_j = hot & (cls.hit[j] | e)
            end_j = v & cls.eos[j]
            look.append(v & ~e)
            ends.append(end_j)
            pop.append(end_j & hot_j)
            non.append(end_j & ~hot_j)
            hot = Mux(end_j, 1, Mux(v, hot_j, hot))
        sample = Signal(range(self.max_batch_samples))
        # A batch of more than max_batch_samples samples: the indices beyond wrap (the
        # streams' sample field), so its summary is flagged overflow and it is counted
        # (oversized_batches). ``spent``: this batch has closed max_batch_samples samples.
        spent = Signal()
        oversized = Signal()   # this batch, so far
        closed = popcount(ends)
        oversized_now = (oversized | (spent & (closed != 0))
                         | (sample + closed > self.max_batch_samples))
        popular = Signal(self.layouts["batches"].members["popular"])
        non_popular = Signal.like(popular)
        samples_at = [sample + popcount(ends[:j]) if j else sample for j in range(L)]
        remap_lanes, n_remap = compact(m, look, [Cat(cls.slot[j], cls.hit[j]) for j in range(L)],
                                       "remap")
        slot_bits = len(cls.slot[0])
        pop_lanes, n_pop = compact(m, pop, [s[:len(sample)] for s in samples_at], "popular")
        non_lanes, n_non = compact(m, non, [s[:len(sample)] for s in samples_at], "non_popular")
        needs = {"remap": cls.needs_remap, "popular": n_pop != 0, "non_popular": n_non != 0,
                 "batches": cls.eob}
        for name, need in needs.items():
            m.d.comb += fifos[name].w_en.eq(cls_fire & need)

        def lane_beat(name, entries, count):
            """The ``name`` lane beat of ``entries`` [{field: value}] and ``count`` of them."""
            out = Signal(self.layouts[name])
            for k, entry in enumerate(entries):
                m.d.comb += [getattr(out, f)[k].eq(v) for f, v in entry.items()]
            if L > 1:
                m.d.comb += out.last.eq(count - 1)
            return out

        ends_popular, ends_non_popular = popcount(pop), popcount(non)
        summary = Signal(self.layouts["batches"])
        m.d.comb += [
            fifos["remap"].w_data.eq(lane_beat(
                "remap", [{"hot": e[slot_bits], "slot": e[:slot_bits]} for e in remap_lanes],
                n_remap)),
            fifos["popular"].w_data.eq(lane_beat(
                "popular", [{"sample": e} for e in pop_lanes], n_pop)),
            fifos["non_popular"].w_data.eq(lane_beat(
                "non_popular", [{"sample": e} for e in non_lanes], n_non)),
            summary.popular.eq(popular + ends_popular),
            summary.non_popular.eq(non_popular + ends_non_popular),
            summary.cold.eq(cls.cold),
            summary.overflow.eq(cls.overflow | oversized_now),
            fifos["batches"].w_data.eq(summary),
        ]
        hit_lookups = [look[j] & cls.hit[j] for j in range(L)]
        _count(m, self.counters, self.clear_counters, {
            "lookups": (cls_fire, popcount(look)), "hits": (cls_fire, popcount(hit_lookups)),
            "samples": (cls_fire, popcount(ends)), "popular_samples": (cls_fire, ends_popular),
            "batches": (cls_fire, cls.eob),
            "oversized_batches": (cls_fire, cls.eob & oversized_now)})
        with m.If(cls_fire):
            m.d.sync += all_hot.eq(hot)
            with m.If(cls.eob):
                m.d.sync += [sample.eq(0), popular.eq(0), non_popular.eq(0), spent.eq(0),
                             oversized.eq(0)]
            with m.Else():
                m.d.sync += [sample.eq(sample + closed), oversized.eq(oversized_now),
                             spent.eq(spent | (sample + closed >= self.max_batch_samples)),
                             popular.eq(popular + ends_popular),
                             non_popular.eq(non_popular + ends_non_popular)]
        return m


class Fragmenter(wiring.Component):
    """PopularityCAM + ColdKeySet + per-sample classification. See the module docstring.

    Parameters: ``cam`` (PopularityCAM keyword arguments), ``cold`` (ColdKeySet keyword
    arguments: capacity, ways, stash, max_keys, ...), ``max_batch_samples``, ``fifo_depth``
    (>= 4 entries per output FIFO), ``lanes`` (lookups per beat: 1, 2 or 4). The geometry
    defaults (the blocks' own, and ``max_batch_samples``) are the product configuration's
    (`hotline.contract.config.PRODUCT`).

    ``stage_resets`` (not ports): a reset per group of `RESET_STAGES`, each a register of its
    own (`replica`) for the owner to drive, e.g. with a soft reset: one register and one net
    for the whole fragmenter spanned the die (the 2-lane top's critical path). Undriven, they
    are 0 (no reset beyond the domain's).
    """
    # The groups of `stage_resets`: the CAM, the cold-key set, the other stages.
    RESET_STAGES = ("cam", "cold", "stages")
    # Its stage components (with the CAM and the cold set): see the module docstring.
    STAGES = (LookupSplit, AnswerRing, BeatCollector, SampleClassifier)
    # Lookup beats between the CAM and the collector: enough to cover the cold set's latency
    # (a beat waits there for its cold slots) at one beat per cycle.
    GROUP_DEPTH = 32
    # Entries of each output FIFO (the default).
    FIFO_DEPTH = 16

    def __init__(self, *, cam=None, cold=None, max_batch_samples=PRODUCT.max_batch_samples,
                 fifo_depth=FIFO_DEPTH, key_width=KEY_BITS, lanes=1):
        self.cam_args = dict(cam or {})
        self.cold_args = dict(cold or {})
        self.key_width = key_width
        if fifo_depth < 4:
            raise ValueError(f"fifo_depth must be at least 4, not {fifo_depth}")
        if lanes not in (1, 2, 4):
            raise ValueError(f"lanes must be 1, 2 or 4, not {lanes}")
        self.fifo_depth = fifo_depth
        self.max_batch_samples = max_batch_samples
        self.lanes = L = lanes
        self.stage_resets = {n: replica(1, f"soft_rst_fragmenter_{n}") for n in self.RESET_STAGES}
        # The beat's keys and marks ride through the CAM as its sideband.
        self.marks_layout = marks_layout(key_width, L)
        self.cam = PopularityCAM(**self.cam_args, key_width=key_width,
                                 user_width=self.marks_layout.size,
                                 lanes=L)
        # With lanes, a cold-set beat carries its run's answers (``user``: how many, and
        # which are repeats; `ColdRunDispatcher`).
        self.cold = ColdKeySet(**self.cold_args, key_width=key_width, lanes=L,
                               **({"user_width": answer_layout(L).size} if L > 1 else {}))
        # CAM, the way to the cold set, cold set, answer ring, classification
        self.LATENCY = self.cam.LATENCY + self.cycles_to_cold(L) + self.cold.LATENCY + 2
        self.layouts = fragmenter_layouts(
            hot_slot_width=self.cam.slot_width, cold_slot_width=self.cold.slot_width,
            max_batch_samples=max_batch_samples, cold_max_keys=self.cold.max_keys,
            key_width=key_width, lanes=L)
        ports = {
            "lookups": In(stream.Signature(lookup_layout(key_width, L))),
            "cmd": In(self.cam.cmd.signature.flip()),
            "resp": Out(self.cam.resp.signature),
            "moves": Out(self.cam.moves.signature),
            "counters": _counters(COUNTERS),
            "clear_counters": In(1),
        }
        ports.update({n: Out(stream.Signature(l)) for n, l in self.layouts.items()})
        super().__init__(ports)

    @staticmethod
    def cycles_to_cold(lanes):
        """Cycles from a beat leaving the CAM to its cold lookups reaching the cold set at the
        earliest: with lanes, the dispatcher's (`ColdRunDispatcher.LATENCY`), then a register
        slice; one lane, its register (1)."""
        return ColdRunDispatcher.LATENCY + 1 if lanes > 1 else 1

    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        rst = self.stage_resets
        cam, cold = self.cam, self.cold
        m.submodules.cam = ResetInserter(rst["cam"])(cam)
        m.submodules.cold = ResetInserter(rst["cold"])(cold)
        wiring.connect(m, wiring.flipped(self.cmd), cam.cmd)
        wiring.connect(m, cam.resp, wiring.flipped(self.resp))
        wiring.connect(m, cam.moves, wiring.flipped(self.moves))
        split = LookupSplit(self.marks_layout, cam, cold, self.GROUP_DEPTH, L)
        ring = AnswerRing(cold, self.layouts, self.GROUP_DEPTH, self.fifo_depth, L)
        collect = BeatCollector(split.beat_layout, cam.slot_width, cold.slot_width,
                                ring.tally_layout, L)
        classify = SampleClassifier(collect.layout, self.layouts, self.max_batch_samples,
                                    self.fifo_depth, L)
        for name, stage in (("split", split), ("answers", ring), ("collect", collect),
                            ("classify", classify)):
            m.submodules[name] = ResetInserter(rst["stages"])(stage)

        # ---- lookups -> CAM, the marks as sideband ----------------------------------------
        beat = self.lookups.payload
        marks = Signal(self.marks_layout)
        last = beat.last if L > 1 else C(0, 1)
        m.d.comb += [
            Value.cast(marks.key).eq(Value.cast(beat.key)), marks.eos.eq(Value.cast(beat.eos)),
            marks.empty.eq(Value.cast(beat.empty)),
            marks.valid.eq(Cat(last >= j for j in range(L))), marks.eob.eq(beat.eob),
            # No lookup enters while the cold set clears (after reset, or every
            # 2**epoch_bits - 1 batches), so the pipeline does not fill up behind it.
            cam.lookup.valid.eq(self.lookups.valid & ~cold.clearing),
            self.lookups.ready.eq(cam.lookup.ready & ~cold.clearing),
            Value.cast(cam.lookup.payload.key).eq(Value.cast(beat.key)),
            cam.lookup.payload.user.eq(marks),
        ]

        # ---- the stages ---------------------------------------------------------------------
        wiring.connect(m, cam.result, split.result)
        wiring.connect(m, split.cold, cold.i)
        wiring.connect(m, cold.o, ring.answers)
        wiring.connect(m, split.beats, collect.beats)
        wiring.connect(m, collect.answers, ring.take)
        wiring.connect(m, collect.o, classify.i)
        m.d.comb += [collect.room.eq(classify.room),
                     ring.summarized.eq(collect.o.valid & collect.o.payload.eob)]
        wiring.connect(m, ring.cold_keys, wiring.flipped(self.cold_keys))
        for name in SampleClassifier.OUTPUTS:
            wiring.connect(m, getattr(classify, name), wiring.flipped(getattr(self, name)))
        for stage in (ring, classify):
            m.d.comb += [stage.clear_counters.eq(self.clear_counters),
                         *(getattr(self.counters, n).eq(getattr(stage.counters, n))
                           for n in stage.COUNTS)]
        return m
