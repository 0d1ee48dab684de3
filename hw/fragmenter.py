"""Fragmenter: splits mini-batches into popular / non-popular micro-batches on the fly.

``lookups`` carries one beat per embedding lookup, samples and batches in order: {key, eos
(last lookup of its sample), eob (last lookup of its batch; implies eos), empty (the beat
stands for a sample with no lookups; set eos too)}. Each lookup is looked up in the
PopularityCAM (hot slot = CAM entry address); cold lookups go through the ColdKeySet, which
numbers the batch's distinct cold keys in order of first appearance. Outputs, each a stream
behind its own FIFO:

- ``remap``: {hot, slot} per lookup, in input order (hot slot if hot, else cold slot);
- ``popular`` / ``non_popular``: {sample} = batch-local sample index, in input order; a sample
  is popular iff all its lookups are hot (an empty sample is popular);
- ``cold_keys``: {key} the batch's distinct cold keys in first-appearance order;
- ``batches``: {popular, non_popular, cold, overflow} per batch, after its last beats, so the
  host knows how many beats of each stream belong to the batch.

``cmd`` / ``resp`` / ``moves`` are the CAM's command ports (load the hot set between batches).
``counters`` count lookups, hits, samples, popular samples, cold rows, batches and cold-set
overflows since reset or ``clear_counters`` (48 bits, wrapping; ``lagged_count``: they lag the
output beats, and a beat in the clearing cycle is counted after the clear).

Timing: one lookup per cycle sustained, also across batch boundaries (the cold set needs no
clearing pass between batches, except one pass of ``capacity // (2 * ways)`` cycles every
``2**epoch_bits - 1`` batches: 2048 cycles every 255 batches in the product configuration).
Latency ``LATENCY`` cycles from a ``lookups`` handshake to the FIFO write, plus the FIFOs'
own. An output whose FIFO holds more than ``fifo_depth - 3`` entries stalls the pipeline only
when the beat at its end needs that FIFO; nothing is lost or duplicated. Read all output
streams concurrently.
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.config import PRODUCT
from hotline.contract.keys import KEY_BITS
from hotline.contract.regmap import FRAGMENTER_COUNTERS
from hotline.contract.streams import fragmenter_layouts, lookup_layout

from .buffered_fifo import BufferedFIFO
from .cold_key_set import ColdKeySet
from .fifo_room import fifo_room
from .lagged_counter import lagged_count
from .popularity_cam import PopularityCAM

__all__ = ["Fragmenter", "COUNTERS"]

COUNTERS = FRAGMENTER_COUNTERS
COUNTER_BITS = 48


class Fragmenter(wiring.Component):
    """PopularityCAM + ColdKeySet + per-sample classification. See the module docstring.

    Parameters: ``cam`` (PopularityCAM keyword arguments), ``cold`` (ColdKeySet keyword
    arguments: capacity, ways, stash, max_keys, ...), ``max_batch_samples``, ``fifo_depth``
    (>= 4 entries per output FIFO). The geometry defaults (the blocks' own, and
    ``max_batch_samples``) are the product configuration's (`hotline.contract.config.PRODUCT`).
    """

    def __init__(self, *, cam=None, cold=None, max_batch_samples=PRODUCT.max_batch_samples,
                 fifo_depth=16, key_width=KEY_BITS):
        self.cam_args = dict(cam or {})
        self.cold_args = dict(cold or {})
        self.key_width = key_width
        if fifo_depth < 4:
            raise ValueError(f"fifo_depth must be at least 4, not {fifo_depth}")
        self.fifo_depth = fifo_depth
        self.max_batch_samples = max_batch_samples
        self.cam = PopularityCAM(**self.cam_args, key_width=key_width,
                                 user_width=key_width + 3)
        flags = data.StructLayout({"hit": 1, "hot_slot": self.cam.slot_width, "eos": 1,
                                   "empty": 1})
        self.cold = ColdKeySet(**self.cold_args, key_width=key_width, user_width=flags.size)
        self.flags_layout = flags
        self.LATENCY = self.cam.LATENCY + self.cold.LATENCY + 1
        self.layouts = fragmenter_layouts(
            hot_slot_width=self.cam.slot_width, cold_slot_width=self.cold.slot_width,
            max_batch_samples=max_batch_samples, cold_max_keys=self.cold.max_keys,
            key_width=key_width)
        ports = {
            "lookups": In(stream.Signature(lookup_layout(key_width))),
            "cmd": In(self.cam.cmd.signature.flip()),
            "resp": Out(self.cam.resp.signature),
            "moves": Out(self.cam.moves.signature),
            "counters": Out(data.StructLayout({n: COUNTER_BITS for n in COUNTERS})),
            "clear_counters": In(1),
        }
        ports.update({n: Out(stream.Signature(l)) for n, l in self.layouts.items()})
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        m.submodules.cam = cam = self.cam
        m.submodules.cold = cold = self.cold
        wiring.connect(m, wiring.flipped(self.cmd), cam.cmd)
        wiring.connect(m, cam.resp, wiring.flipped(self.resp))
        wiring.connect(m, cam.moves, wiring.flipped(self.moves))

        # lookups -> CAM, carrying the key and the sample/batch marks as sideband.
        beat = self.lookups.payload
        # No lookup enters while the cold set clears (after reset, or every 2**epoch_bits - 1
        # batches), so the pipeline does not fill up behind it.
        m.d.comb += [
            cam.lookup.valid.eq(self.lookups.valid & ~cold.clearing),
            self.lookups.ready.eq(cam.lookup.ready & ~cold.clearing),
            cam.lookup.payload.key.eq(beat.key),
            cam.lookup.payload.user.eq(Cat(beat.key, beat.eos | beat.eob, beat.eob, beat.empty)),
        ]
        # CAM -> cold set: only cold, non-empty lookups are numbered.
        res = cam.result.payload
        key, eos, eob, empty = (res.user[:self.key_width], res.user[self.key_width],
                                res.user[self.key_width + 1], res.user[self.key_width + 2])
        flags = Signal(self.flags_layout)
        m.d.comb += [
            flags.hit.eq(res.hit), flags.hot_slot.eq(res.slot), flags.eos.eq(eos),
            flags.empty.eq(empty),
            cold.i.valid.eq(cam.result.valid),
            cam.result.ready.eq(cold.i.ready),
            cold.i.payload.key.eq(key),
            cold.i.payload.insert.eq(~res.hit & ~empty),
            cold.i.payload.eob.eq(eob),
            cold.i.payload.user.eq(flags),
        ]

        fifos = {}
        for name, layout in self.layouts.items():
            fifos[name] = fifo = BufferedFIFO(width=layout.size, depth=self.fifo_depth)
            m.submodules[f"{name}_fifo"] = fifo
            port = getattr(self, name)
            m.d.comb += [port.valid.eq(fifo.r_rdy), port.payload.eq(fifo.r_data),
                         fifo.r_en.eq(port.ready)]

        # Classification of the beat at the cold set's output.
        o = cold.o.payload
        f = self.flags_layout(o.user)
        all_hot = Signal(init=1)       # every earlier lookup of the current sample was hot
        sample = Signal(range(self.max_batch_samples))
        popular = Signal(self.layouts["batches"].members["popular"])
        non_popular = Signal.like(popular)
        cold_rows = Signal(self.layouts["batches"].members["cold"])
        overflow = Signal()

        sample_hot = all_hot & (f.hit | f.empty)
        new_cold = o.first & o.insert
        needs = {"remap": ~f.empty, "cold_keys": new_cold, "popular": f.eos & sample_hot,
                 "non_popular": f.eos & ~sample_hot, "batches": o.eob}
        # Registered FIFO room (timing: the FIFO levels through w_rdy into the cold set's
        # output queue were the critical path).
        room = Cat(*(~need | fifo_room(m, fifos[name], name)
                     for name, need in needs.items())).all()
        m.d.comb += cold.o.ready.eq(room)
        fire = cold.o.valid & room
        for name, need in needs.items():
            m.d.comb += fifos[name].w_en.eq(fire & need)

        ends_popular = f.eos & sample_hot
        ends_non_popular = f.eos & ~sample_hot
        m.d.comb += [
            fifos["remap"].w_data.eq(Cat(f.hit, Mux(f.hit, f.hot_slot, o.slot))),
            fifos["cold_keys"].w_data.eq(o.key),
            fifos["popular"].w_data.eq(sample),
            fifos["non_popular"].w_data.eq(sample),
        ]
        summary = Signal(self.layouts["batches"])
        m.d.comb += [
            summary.popular.eq(popular + ends_popular),
            summary.non_popular.eq(non_popular + ends_non_popular),
            summary.cold.eq(cold_rows + new_cold),
            summary.overflow.eq(overflow | o.overflow),
            fifos["batches"].w_data.eq(summary),
        ]

        # Lagged counters: `fire` drives 7 increment flip-flops, not the 336 counter bits'
        # enables (timing: that fan-out, 5.6 ns of route, was the critical path).
        c = self.counters
        incs = {"lookups": ~f.empty, "hits": f.hit & ~f.empty, "samples": f.eos,
                "popular_samples": ends_popular, "cold_rows": new_cold, "batches": o.eob,
                "overflows": o.overflow}
        for name, inc in incs.items():
            lagged_count(m, getattr(c, name), fire & inc, self.clear_counters, name)
        with m.If(fire):
            m.d.sync += all_hot.eq(f.eos | sample_hot)
            with m.If(o.eob):
                m.d.sync += [sample.eq(0), popular.eq(0), non_popular.eq(0), cold_rows.eq(0),
                             overflow.eq(0)]
            with m.Else():
                m.d.sync += [sample.eq(sample + f.eos), popular.eq(popular + ends_popular),
                             non_popular.eq(non_popular + ends_non_popular),
                             cold_rows.eq(cold_rows + new_cold), overflow.eq(overflow | o.overflow)]
        return m
