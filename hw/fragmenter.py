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
configuration). Latency ``LATENCY`` cycles from a ``lookups``
handshake to the FIFO write through the cold set (``cam.LATENCY + 3`` without cold lookups),
plus the FIFOs' own. An output whose FIFO holds more than ``fifo_depth - 3`` entries stalls
the pipeline only when the beat at its end needs that FIFO (a beat that closes a sample
needs both sample FIFOs); nothing is lost or duplicated.
Read all output streams concurrently.
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

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
from .lib.onehot import compact, popcount, shift_in
from .lib.register_slice import RegisterSlice
from .popularity_cam import PopularityCAM

__all__ = ["Fragmenter", "COUNTERS"]

COUNTERS = FRAGMENTER_COUNTERS
COUNTER_BITS = 48


def _lane(value, lanes, j):
    """Lane ``j`` of a per-lane field (the field itself at one lane)."""
    return value if lanes == 1 else value[j]


class Fragmenter(wiring.Component):
    """PopularityCAM + ColdKeySet + per-sample classification. See the module docstring.

    Parameters: ``cam`` (PopularityCAM keyword arguments), ``cold`` (ColdKeySet keyword
    arguments: capacity, ways, stash, max_keys, ...), ``max_batch_samples``, ``fifo_depth``
    (>= 4 entries per output FIFO), ``lanes`` (lookups per beat: 1, 2 or 4). The geometry
    defaults (the blocks' own, and ``max_batch_samples``) are the product configuration's
    (`hotline.contract.config.PRODUCT`).
    """
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
        # The beat's keys and marks ride through the CAM as its sideband.
        self.marks_layout = data.StructLayout({"key": data.ArrayLayout(key_width, L), "eos": L,
                                               "empty": L, "valid": L, "eob": 1})
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
            "counters": Out(data.StructLayout({n: COUNTER_BITS for n in COUNTERS})),
            "clear_counters": In(1),
        }
        ports.update({n: Out(stream.Signature(l)) for n, l in self.layouts.items()})
        super().__init__(ports)

    @staticmethod
    def cycles_to_cold(lanes):
        """Cycles from a beat leaving the CAM to its cold lookups reaching the cold set at the
        earliest: with lanes, the dispatcher's stage, queue and window, then a register slice
        (4); one lane, its register (1)."""
        return 4 if lanes > 1 else 1

    def elaborate(self, platform):
        m = Module()
        L, kw = self.lanes, self.key_width
        m.submodules.cam = cam = self.cam
        m.submodules.cold = cold = self.cold
        wiring.connect(m, wiring.flipped(self.cmd), cam.cmd)
        wiring.connect(m, cam.resp, wiring.flipped(self.resp))
        wiring.connect(m, cam.moves, wiring.flipped(self.moves))
        fifos = {}
        for name, layout in self.layouts.items():
            port = getattr(self, name)
            if name == "cold_keys" and L > 1:
                # The cold set answers up to L new keys per cycle; they leave in beats of
                # L from the batch's first, whatever the cold set's runs were.
                fifos[name] = fifo = BatchLanePacker(
                    self.key_width, L, self.fifo_depth * L,
                    self.layouts["batches"].members["cold"])
                out = fifo.o.payload
                m.d.comb += [port.valid.eq(fifo.o.valid), fifo.o.ready.eq(port.ready),
                             port.payload.last.eq(out.count - 1),
                             *(port.payload.key[k].eq(out.data[k]) for k in range(L))]
            else:
                fifos[name] = fifo = BufferedFIFO(width=layout.size, depth=self.fifo_depth)
                m.d.comb += [port.valid.eq(fifo.r_rdy), port.payload.eq(fifo.r_data),
                             fifo.r_en.eq(port.ready)]
            m.submodules[f"{name}_fifo"] = fifo

        # ---- lookups -> CAM, the marks as sideband ----------------------------------------
        beat = self.lookups.payload
        marks = Signal(self.marks_layout)
        last = beat.last if L > 1 else C(0, 1)
        m.d.comb += [
            Value.cast(marks.key).eq(Value.cast(beat.key)), marks.eos.eq(Value.cast(beat.eos)), marks.empty.eq(Value.cast(beat.empty)),
            marks.valid.eq(Cat(last >= j for j in range(L))), marks.eob.eq(beat.eob),
            # No lookup enters while the cold set clears (after reset, or every
            # 2**epoch_bits - 1 batches), so the pipeline does not fill up behind it.
            cam.lookup.valid.eq(self.lookups.valid & ~cold.clearing),
            self.lookups.ready.eq(cam.lookup.ready & ~cold.clearing),
            Value.cast(cam.lookup.payload.key).eq(Value.cast(beat.key)),
            cam.lookup.payload.user.eq(marks),
        ]

        # ---- CAM -> beats waiting for their cold slots, and the dispatcher ----------------
        res = cam.result.payload
        rmarks = self.marks_layout(res.user)
        hits = Value.cast(res.hit)
        hot_slots = Value.cast(res.slot)
        # need: the answers the beat takes from the ring (one per cold lookup, or its
        # non-insert beat's), counted on the way in (timing: counted at the FIFO's output, it
        # was on the path of the FIFO's read enable).
        group = data.StructLayout({"hit": L, "hot_slot": data.ArrayLayout(self.cam.slot_width, L),
                                   "eos": L, "empty": L, "valid": L, "eob": 1, "cold": L,
                                   "need": bits_for(L)})
        m.submodules.groups = groups = BufferedFIFO(width=group.size, depth=self.GROUP_DEPTH)
        cold_mask = rmarks.valid & ~hits & ~rmarks.empty
        entering = Signal(group)
        m.d.comb += [
            entering.hit.eq(hits), Value.cast(entering.hot_slot).eq(hot_slots),
            entering.eos.eq(rmarks.eos), entering.empty.eq(rmarks.empty),
            entering.valid.eq(rmarks.valid), entering.eob.eq(rmarks.eob),
            entering.cold.eq(cold_mask),
            entering.need.eq(popcount(cold_mask) | (rmarks.eob & ~cold_mask.any())),
        ]

        # The dispatcher feeds the cold set. One lane: a beat has at most one cold lookup, sent
        # as one cold-set beat (a batch's last beat without one sends a non-insert beat, so the
        # cold set still sees every batch end). With lanes, the beats' cold lookups (and such
        # batch ends, as dummy entries) queue in a ColdRunDispatcher, which sends per cycle the
        # longest run of them in distinct partitions, across beat boundaries, so a burst of
        # cold lookups does not stall the lookups behind it while the beat FIFO has room. Each
        # key's partition is hashed on the way into the queue.
        needs_cold = cold_mask.any() | rmarks.eob
        ci = cold.i.payload
        if L > 1:
            pbits = len(self.cold.partition_hash.expr(C(0, kw)))
            # Twice the entries the beat FIFO's beats can hold: the queue's room is counted
            # without the entries leaving it (`ColdRunDispatcher`), and never holds a beat back.
            m.submodules.dispatch = disp = ColdRunDispatcher(kw, pbits, L,
                                                             2 * self.GROUP_DEPTH * L)
            part = [self.cold.partition_hash.expr(rmarks.key[j]) for j in range(L)]
            cold_lanes, n_cold = compact(m, cold_mask, [Cat(rmarks.key[j], part[j])
                                                         for j in range(L)], "cold_lane")
            dummy = rmarks.eob & ~cold_mask.any()
            m.d.comb += cam.result.ready.eq(groups.w_rdy & (~needs_cold | disp.w_room))
            taken = cam.result.valid & cam.result.ready
            m.d.comb += disp.w_count.eq(Mux(taken & needs_cold, Mux(dummy, 1, n_cold), 0))
            last = Mux(dummy, 0, n_cold - 1)    # the entry that closes a batch
            for k, lane in enumerate(cold_lanes):
                entry = disp.w_data[k]
                m.d.comb += [entry.key.eq(lane[:kw]), entry.part.eq(lane[kw:]),
                             entry.close.eq(rmarks.eob & (last == k))]
            m.d.comb += disp.w_data[0].dummy.eq(dummy)
            # A register stage between the dispatcher's run choice and the cold set's
            # partition select (timing: the two made a 17.97 ns path at 2 lanes).
            m.submodules.dispatched = dispatched = RegisterSlice(disp.o.payload.shape())
            wiring.connect(m, disp.o, dispatched.i)
            d = dispatched.o.payload
            m.d.comb += [cold.i.valid.eq(dispatched.o.valid), dispatched.o.ready.eq(cold.i.ready),
                         ci.eob.eq(d.eob), ci.user.eq(d.answers),
                         *(ci.key[k].eq(d.key[k]) for k in range(L)),
                         *(ci.insert[k].eq(d.insert[k]) for k in range(L))]
        else:
            ser_keys = Signal(data.ArrayLayout(kw, 1), reset_less=True)
            ser_mask = Signal()
            ser_eob = Signal()     # the dispatched beat closes its batch
            ser_dummy = Signal()   # ... and has no cold lookup: one non-insert beat
            sending = ser_mask | ser_dummy
            sent_keys, _ = compact(m, [ser_mask], [ser_keys[0]], "cold_in")
            m.d.comb += [cold.i.valid.eq(sending), ci.eob.eq(ser_eob), ci.key.eq(sent_keys[0]),
                         ci.insert.eq(ser_mask)]
            ser_free = ~sending | cold.i.ready
            m.d.comb += cam.result.ready.eq(groups.w_rdy & (~needs_cold | ser_free))
            taken = cam.result.valid & cam.result.ready
            with m.If(cold.i.valid & cold.i.ready):
                m.d.sync += [ser_mask.eq(0), ser_dummy.eq(0)]
            with m.If(taken & needs_cold):
                m.d.sync += [ser_keys.eq(rmarks.key), ser_mask.eq(cold_mask),
                             ser_eob.eq(rmarks.eob), ser_dummy.eq(rmarks.eob & ~cold_mask)]
        m.d.comb += [groups.w_en.eq(taken), groups.w_data.eq(entering)]

        # ---- answers: the cold set's, in a ring the head beat takes all of its own from ------
        # The ring takes the answers of a cycle (one per key sent, or the non-insert beat's)
        # whatever the head beat is, and the head beat takes its c answers at once: a beat
        # with c cold lookups costs the collector one cycle, not c, so bursts of cold lookups
        # are absorbed. Its answers are those of the beats in the beat FIFO, at most one per
        # lane each: the ring never fills. Each answer also records its batch's cold-key
        # count and overflow so far (the tallies): the batch summary comes from the last
        # answer of the batch's last beat (its last cold lookup, or its non-insert beat).
        o = cold.o.payload
        tally_layout = data.StructLayout({"cold": self.layouts["batches"].members["cold"],
                                          "overflow": 1})
        depth = self.GROUP_DEPTH * L
        m.submodules.slots = slots = BankedRing(self.cold.slot_width, depth, L, reads=L)
        m.submodules.tallies = tallies = BankedRing(tally_layout, depth, L)
        rp = Signal(range(depth))
        held = Signal(range(depth + 1))     # answers in the ring
        batch_cold = Signal(tally_layout.members["cold"])   # this batch's, so far
        batch_overflow = Signal()
        inserted = [_lane(o.insert, L, k) for k in range(L)]
        new_key = [_lane(o.first, L, k) & inserted[k] for k in range(L)]
        overflowed = [_lane(o.overflow, L, k) for k in range(L)]
        # BatchKeyMerge (in the top) needs a batch's summary written no later than the next
        # batch's first cold key. The summary is written when the batch's last beat is
        # classified, after the batch's last answer (and later while the outputs stall), so
        # an answer with new keys waits while a batch whose last answer was taken has no
        # summary yet: ``unsummarized`` such batches (``keys_wait``: nonzero, a register).
        unsummarized = Signal(range(self.GROUP_DEPTH + 2))
        keys_wait = Signal()
        any_new = Cat(*new_key).any()
        if L > 1:
            # a batch end, with or without new keys, is written to the packer too
            m.d.comb += cold.o.ready.eq((~any_new | ~keys_wait)
                                        & (~(any_new | o.eob) | fifos["cold_keys"].w_room))
        else:
            keys_room = fifo_room(m, fifos["cold_keys"], "cold_keys")
            m.d.comb += cold.o.ready.eq(~any_new | (keys_room & ~keys_wait))
        answer = cold.o.valid & cold.o.ready
        new_keys, n_new = compact(m, Cat(*new_key), [_lane(o.key, L, k) for k in range(L)],
                                   "new_key")
        if L > 1:
            m.d.comb += [fifos["cold_keys"].w_count.eq(Mux(answer, n_new, 0)),
                         fifos["cold_keys"].w_end.eq(answer & o.eob),
                         *(fifos["cold_keys"].w_data[k].eq(new_keys[k]) for k in range(L))]
        else:
            m.d.comb += [fifos["cold_keys"].w_en.eq(answer & new_key[0]),
                         fifos["cold_keys"].w_data.eq(o.key)]
        tally = [Signal(tally_layout, name=f"tally{k}") for k in range(L)]
        if L > 1:
            # The run's answers: an entry takes the next lane's, or (a repeat) the answer of
            # its copy, earlier in the run or among the last L written (``recent``).
            run = answer_layout(L)(o.user)
            answers = run.count
            own = [run.repeat[k] == 0 for k in range(L)]
            lane_of = [popcount(own[:k]) if k else C(0, 1) for k in range(L)]
            new_before = [popcount(new_key[:i]) for i in range(L + 1)]
            over_before = [Cat(C(0, 1), *overflowed[:i]).any() for i in range(L + 1)]
            recent = [Signal(self.cold.slot_width, name=f"recent_slot{j}") for j in range(L)]
            index = bits_for(L)
            run_slots = []
            for k in range(L):
                back = run.repeat[k]
                copy = Array(recent)[(back - k - 1)[:index]]
                if k:
                    copy = Mux(back <= k, Array(run_slots)[(k - back)[:index]], copy)
                value = Signal(self.cold.slot_width, name=f"answer_slot{k}")
                m.d.comb += value.eq(Mux(own[k], Array(o.slot)[lane_of[k]], copy))
                run_slots.append(value)
                upto = lane_of[k] + own[k]
                m.d.comb += [tally[k].cold.eq(batch_cold + Array(new_before)[upto]),
                             tally[k].overflow.eq(batch_overflow | Array(over_before)[upto]),
                             slots.w_data[k].eq(value), tallies.w_data[k].eq(tally[k])]
        else:
            # one per key sent, or the non-insert beat's
            answers = Mux(Cat(*inserted).any(), popcount(inserted), 1)
            for k in range(L):
                m.d.comb += [tally[k].cold.eq(batch_cold + popcount(new_key[:k + 1])),
                             tally[k].overflow.eq(batch_overflow
                                                  | Cat(*overflowed[:k + 1]).any()),
                             slots.w_data[k].eq(_lane(o.slot, L, k)),
                             tallies.w_data[k].eq(tally[k])]
        written = Mux(answer, answers, 0)
        if L > 1:
            shift_in(m, recent, run_slots, written)
        m.d.comb += [slots.w_count.eq(written), tallies.w_count.eq(written)]
        with m.If(answer):
            with m.If(o.eob):
                m.d.sync += [batch_cold.eq(0), batch_overflow.eq(0)]
            with m.Else():
                m.d.sync += [batch_cold.eq(tally[-1].cold), batch_overflow.eq(tally[-1].overflow)]

        # ---- classification stage: one whole beat with its slots --------------------------
        head = group(groups.r_data)
        need = head.need
        # held >= k for k = 1..L, registered (from held's next value): the head's test is then
        # a select of one of them (timing: the FIFO's read enable waited for the compare).
        held_ge = Signal(L, name="held_ge")
        complete = groups.r_rdy & Cat(C(1, 1), held_ge).bit_select(need, 1)
        for j in range(L):
            m.d.comb += slots.r_pos[j].eq(rp + (popcount(head.cold[:j]) if j else 0))
        m.d.comb += tallies.r_pos[0].eq(rp + need - 1)
        ready_layout = data.StructLayout({
            "hit": L, "slot": data.ArrayLayout(max(self.cam.slot_width, self.cold.slot_width), L),
            "eos": L, "empty": L, "valid": L, "eob": 1,
            "cold": len(batch_cold), "overflow": 1,
            # the output FIFOs the beat may write: the room check needs only these registers
            "needs_remap": 1, "needs_samples": 1})
        cls = Signal(ready_layout, reset_less=True)
        cls_valid = Signal()
        cls_fire = Signal()
        # The output FIFOs have room for what cls holds: a register, from cls's and the rooms'
        # next values (timing: the room check sat in front of the beat FIFO's read enable).
        fire_ok = Signal()
        load = complete & (~cls_valid | fire_ok)
        m.d.comb += groups.r_en.eq(load)
        held_next = Signal.like(held)
        m.d.comb += held_next.eq(held + written - Mux(load, need, 0))
        m.d.sync += [held.eq(held_next), held_ge.eq(Cat(held_next >= k for k in range(1, L + 1)))]
        # the output FIFOs the head beat may write (cls keeps them: the room check needs only
        # these registers)
        head_needs_remap = (head.valid & ~head.empty).any()
        head_needs_samples = (head.valid & head.eos).any()
        with m.If(load):
            m.d.sync += [
                cls.hit.eq(head.hit), cls.eos.eq(head.eos), cls.empty.eq(head.empty),
                cls.valid.eq(head.valid), cls.eob.eq(head.eob),
                cls.needs_remap.eq(head_needs_remap), cls.needs_samples.eq(head_needs_samples),
                cls.cold.eq(tallies.r_data[0].cold), cls.overflow.eq(tallies.r_data[0].overflow),
                rp.eq(rp + need),
            ]
            for j in range(L):
                m.d.sync += cls.slot[j].eq(Mux(head.hit[j], head.hot_slot[j],
                                               slots.r_data[j]))
            m.d.sync += cls_valid.eq(1)
        with m.Elif(cls_fire):
            m.d.sync += cls_valid.eq(0)

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
        # Registered FIFO room, checked against registered needs (timing: the FIFO levels
        # through w_rdy, then the sample classification in front of the beat FIFO's read
        # enable, were critical paths). A beat that closes a sample waits for room in both
        # sample FIFOs, since which one it writes comes out of the classification.
        m.d.comb += cls_fire.eq(cls_valid & fire_ok)
        room_next = {name: fifo_has_room(fifos[name]) for name in needs}   # fifo_room's

        def rooms_for(needs_remap, needs_samples, eob):
            return ((~needs_remap | room_next["remap"])
                    & (~needs_samples | (room_next["popular"] & room_next["non_popular"]))
                    & (~eob | room_next["batches"]))
        # fire_ok's next value: the rooms' next values, for the beat cls holds next.
        m.d.sync += fire_ok.eq(Mux(
            load,
            rooms_for(head_needs_remap, head_needs_samples, head.eob),
            rooms_for(cls.needs_remap, cls.needs_samples, cls.eob)))
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

        # Lagged counters: the fire drives a few increment flip-flops, not the 336 counter
        # bits' enables (timing: that fan-out, 5.6 ns of route, was the critical path).
        c = self.counters
        hit_lookups = [look[j] & cls.hit[j] for j in range(L)]
        incs = {"lookups": (cls_fire, popcount(look)), "hits": (cls_fire, popcount(hit_lookups)),
                "samples": (cls_fire, popcount(ends)),
                "popular_samples": (cls_fire, ends_popular),
                "cold_rows": (answer, n_new), "batches": (cls_fire, cls.eob),
                "overflows": (answer, popcount(overflowed)),
                "oversized_batches": (cls_fire, cls.eob & oversized_now)}
        for name, (fire, inc) in incs.items():
            lagged_count(m, getattr(c, name), Mux(fire, inc, 0), self.clear_counters, name)
        unsummarized_next = unsummarized + (answer & o.eob) - (cls_fire & cls.eob)
        m.d.sync += [unsummarized.eq(unsummarized_next), keys_wait.eq(unsummarized_next != 0)]
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
