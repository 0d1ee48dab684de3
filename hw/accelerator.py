"""HotlineAccelerator: the top. CSR slave, AXI4 master, lookup stream in, result streams out.

Blocks: ``Fragmenter`` (PopularityCAM + ColdKeySet + sample classification), ``AccessLearner``
(taps the accepted lookups, never stalls them), one ``RowDMA`` engine shared by the gather and
the scatter (one AXI4 master; batches run one at a time, in the order they are ready), and the
``CSRBank`` generated from ``hotline.contract.regmap.HOTLINE_REGISTERS`` (docs/registers.md).

Streams (payloads are ``data.StructLayout``):
- ``lookups`` In {key, eos, eob, empty}: as ``Fragmenter.lookups``.
- ``remap``, ``popular``, ``non_popular`` Out: as the Fragmenter's.
- ``batch_keys`` Out {end, key, popular, non_popular, cold, overflow}: each batch's distinct
  cold keys in cold-slot order (``end`` = 0), then its summary (``end`` = 1); see
  ``BatchKeyMerge``.
- ``scatter_keys`` In {key, end}: the keys of each scatter batch in cold-slot order, closed by
  an ``end`` beat; one batch per ``SCATTER_CMD`` write (which names the staging bank).
- ``dma_done`` Out {scatter, rows, errors}: one per DMA batch (gathers and scatters in the
  order they ran) after its last write response.
- ``cam_cmds`` In {op, key}: CAM commands, into the same FIFO as CAM_CMD writes.
- ``cam_events`` Out {move, word}: with ``CONFIG.cam_events``, each command's relocations
  (``word`` as CAM_MOVE reads) and then its response (as CAM_RESP reads), instead of the
  CSR FIFOs (a bulk hot-set load needs no register read per command).

Gather: with ``CONFIG.gather_enable`` set (latched per batch: a write applies from the next
batch on ``batch_keys`` whose first beat has not come yet), batch ``n``'s cold rows go to
staging bank ``n mod STAGING_BANKS`` (bank counter reset by ``clear_counters``), slot = cold
slot. The staging and descriptor bases are taken with all 64 bits (refused at or above
ADDR_WIDTH, see ``RowDMA``), and the staging window is latched per DMA batch. Its keys
reach the DMA as soon as the Fragmenter emits them, so the gather overlaps the fragmenting.
A scatter batch waits until no gather batch is running. Read every output stream
concurrently: a full one stalls the lookups behind it (and the gather, which shares them).

CSR side effects: ``CAM_CMD`` pushes {op, CAM_KEY} into a ``CMD_DEPTH``-entry FIFO (write no
more commands than responses taken plus ``CMD_DEPTH``); ``CAM_RESP`` and ``CAM_MOVE`` pop their
FIFOs; ``LEARNER_ADDR`` reads one learner entry (``STATUS.learner_valid`` after
``READ_LATENCY`` + 2 cycles; the learner must be stopped). ``DESC_COMMIT`` writes a table
descriptor. Counters are 64-bit views of the blocks' 48-bit counters (the learner's 32-bit).

Watchdog (``watchdog_cycles``, the WATCHDOG_CYCLES register; default
`hotline.contract.dma.WATCHDOG_CYCLES` = 4096): (1) a scatter batch whose ``scatter_keys`` stop
for that many cycles while a gather batch's key waits at the engine is closed as if its
``end`` beat had come (its ``dma_done`` counts the keys that came; keys sent later belong to
the next scatter batch, so the host should soft-reset); (2) a soft reset whose AXI4 responses
stop for that many cycles gives them up (`AXI4Quiesce`: late ones are taken and dropped by the
gate) and completes. Each counts one TIMEOUTS and sets ERROR_CAUSE.timeout (and STATUS.error);
both live outside the soft reset, so they survive it (CONTROL.clear_counters / clear_errors
zero them).
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.config import AcceleratorConfig
from hotline.contract.dma import CAUSES, WATCHDOG_CYCLES
from hotline.contract.regmap import HOTLINE_REGISTERS
from hotline.contract.streams import CAM_EVENT_LAYOUT, cold_key_layout, dma_done_layout

from .access_learner import READ_LATENCY, AccessLearner
from .axi import AXI4LiteSignature, AXI4Signature
from .axi_quiesce import AXI4Quiesce
from .batch_key_merge import BatchKeyMerge
from .csr import CSRBank
from .fragmenter import Fragmenter
from .lib.buffered_fifo import BufferedFIFO
from .lib.fifo_room import fifo_room
from .lib.funnel_fifo import FunnelFIFO
from .lib.lagged_counter import lagged_count
from .lib.onehot import lowest_one_hot, one_hot_select
from .lib.register_slice import RegisterSlice
from .lib.replica import replica
from .lib.stream_fork import StreamFork
from .lib.up_down import up_down
from .row_dma import RowDMA

__all__ = ["HotlineAccelerator"]

CSR_ADDR_WIDTH = 12


class HotlineAccelerator(wiring.Component):
    """Parameters: ``fragmenter`` (``Fragmenter`` keyword arguments: cam, cold,
    max_batch_samples, fifo_depth), ``learner`` (``AccessLearner`` keyword arguments),
    ``dma`` (``RowDMA`` keyword arguments: addr_width, data_width, num_tables, row_bits, ...),
    ``watchdog_cycles`` (the watchdog's timeout, WATCHDOG_CYCLES; module docstring).
    `from_config` builds it from an `AcceleratorConfig`; its stream payloads are then
    `hotline.contract.streams.stream_layouts` of that configuration.
    """
    CMD_DEPTH = 16
    # The core's parts with a soft reset register each (see elaborate); "glue": the rest. The
    # fragmenter's stages have theirs (`Fragmenter.stage_resets`).
    RESET_GROUPS = ("learner", "dma", "csr", "glue")

    @classmethod
    def from_config(cls, config: AcceleratorConfig, data_width=64, addr_width=32, num_tables=32,
                    learner=None, primitive=None) -> "HotlineAccelerator":
        """The top with ``config``'s fragmenter geometry, a ``data_width`` / ``addr_width``
        AXI4 master, ``num_tables`` table descriptors and ``learner`` (``AccessLearner``
        keyword arguments over ``config.learner_kwargs()``). ``primitive``: the CAM's and the cold-key
        set's ``BucketTable`` primitive (None: inferred block RAM; "ecp5": DP16KD)."""
        return cls(fragmenter=cls.fragmenter_kwargs(config, primitive),
                   learner={**config.learner_kwargs(), **(learner or {})},
                   dma=dict(data_width=data_width, addr_width=addr_width, num_tables=num_tables))

    @staticmethod
    def fragmenter_kwargs(config: AcceleratorConfig, primitive=None) -> dict:
        """`Fragmenter` arguments of ``config``, the CAM's and cold-key set's ``BucketTable``
        ``primitive`` over them (as in `from_config`)."""
        fragmenter = config.fragmenter_kwargs()
        if primitive is not None:
            for block in ("cam", "cold"):
                fragmenter[block] = dict(fragmenter[block], primitive=primitive)
        return fragmenter

    def __init__(self, *, fragmenter=None, learner=None, dma=None,
                 watchdog_cycles=WATCHDOG_CYCLES):
        if watchdog_cycles < 2:
            raise ValueError(f"watchdog_cycles must be >= 2, not {watchdog_cycles}")
        self.watchdog_cycles = watchdog_cycles
        self.fragmenter = Fragmenter(**(fragmenter or {}))
        self.learner = AccessLearner(**(learner or {}))
        self.dma = RowDMA(None, framing="end", **(dma or {}))
        f, d = self.fragmenter, self.dma
        self.merge = BatchKeyMerge(cold_key_layout(f.key_width), f.layouts["batches"])
        self.csr = CSRBank(HOTLINE_REGISTERS, CSR_ADDR_WIDTH, constants={
            "CAM_ENTRIES": f.cam.entries, "COLD_MAX_KEYS": f.cold.max_keys,
            "NUM_TABLES": d.num_tables, "ROW_BITS": d.row_bits, "DATA_WIDTH": d.data_width,
            "ADDR_WIDTH": d.addr_width,
            "LEARNER_ENTRIES": self.learner.buckets * self.learner.ways,
            "MAX_BATCH_SAMPLES": f.max_batch_samples, "LANES": f.lanes,
            "WATCHDOG_CYCLES": watchdog_cycles})
        super().__init__({
            "axil": In(AXI4LiteSignature(CSR_ADDR_WIDTH)),
            "bus": Out(AXI4Signature(d.addr_width, d.data_width)),
            "lookups": In(stream.Signature(f.lookups.payload.shape())),
            **{name: Out(stream.Signature(f.layouts[name]))
               for name in ("remap", "popular", "non_popular")},
            "batch_keys": Out(stream.Signature(self.merge.out_layout)),
            "scatter_keys": In(stream.Signature(d.keys.payload.shape())),
            "dma_done": Out(stream.Signature(dma_done_layout(scatter=True))),
            "cam_cmds": In(stream.Signature(f.cmd.payload.shape())),
            "cam_events": Out(stream.Signature(CAM_EVENT_LAYOUT)),
        })

    def elaborate(self, platform):
        top = Module()
        # ---- soft reset: CONTROL.soft_reset resets everything below, the CSR bank included ----
        # It waits until the AXI4 master has nothing in flight (AXI4Quiesce closes its request
        # channels at their boundaries) and the AXI4-Lite slave has no transaction (counted
        # here) and is offered none, then resets the core for one cycle with both buses closed,
        # then clears the learner's table; the CAM and the cold-key set clear theirs after any
        # reset by themselves.
        d = self.dma
        top.submodules.quiesce = quiesce = AXI4Quiesce(d.addr_width, d.data_width,
                                                       timeout=self.watchdog_cycles)
        wiring.connect(top, quiesce.s, wiring.flipped(self.bus))
        lite = AXI4LiteSignature(CSR_ADDR_WIDTH).create(path=("core_axil",))
        requested, soft_rst, cleared = (Signal(name=n) for n in ("soft_reset_requested",
                                                                 "soft_rst", "soft_cleared"))
        soft = {"request": Signal(), "learner_clear": cleared,
                "busy": Signal(name="soft_reset_busy"),
                **{name: Signal(name=name) for name in ("scatter_timeout", "clear_counters",
                                                        "clear_errors", "timeout_cause")},
                "timeouts": Signal(48, name="timeouts")}
        axil = self.axil
        lite_reads, lite_writes = Signal(2, name="lite_reads"), Signal(2, name="lite_writes")
        ar, aw = axil.arvalid & axil.arready, axil.awvalid & axil.awready
        r, b = axil.rvalid & axil.rready, axil.bvalid & axil.bready
        top.d.sync += [lite_reads.eq(up_down(lite_reads, ar, r)),
                       lite_writes.eq(up_down(lite_writes, aw, b))]
        for name, member in lite.signature.members.items():
            src, dst = (axil, lite) if member.flow == Out else (lite, axil)
            value = getattr(src, name)
            if name in ("awvalid", "wvalid", "arvalid", "awready", "wready", "arready"):
                value = value & ~soft_rst   # no request may be taken in the reset cycle
            top.d.comb += getattr(dst, name).eq(value)
        lite_idle = ((lite_reads == 0) & (lite_writes == 0) & ~axil.awvalid & ~axil.wvalid
                     & ~axil.arvalid)
        # The core's blocks are reset by copies of soft_rst, one each, the fragmenter's one per
        # stage (timing: one register driving the reset of every block had routes across the
        # die, the critical path at seed 2; so was the fragmenter's at 2 lanes).
        resets = {name: replica(1, f"soft_rst_{name}") for name in self.RESET_GROUPS}
        copies = [*resets.values(), *self.fragmenter.stage_resets.values()]
        top.d.sync += [soft_rst.eq(0), cleared.eq(soft_rst), *(r.eq(0) for r in copies)]
        # quiet, registered (timing: the gate's in-flight counts reached the reset decision);
        # once quiet, the gate stays so while it holds, so a cycle late is as good.
        quiet = Signal(name="soft_quiet")
        top.d.sync += quiet.eq(quiesce.quiet)
        with top.If(soft["request"]):
            top.d.sync += requested.eq(1)
        with top.Elif(requested & quiet & lite_idle):
            top.d.sync += [requested.eq(0), soft_rst.eq(1), *(r.eq(1) for r in copies)]
        top.d.comb += [quiesce.hold.eq(requested | soft_rst),
                       soft["busy"].eq(requested | soft_rst | cleared)]
        # The watchdog's count and cause live here, outside the soft reset: a reset that had to
        # give up hung responses must still show it afterwards.
        lagged_count(top, soft["timeouts"], quiesce.expired + soft["scatter_timeout"],
                     soft["clear_counters"], "timeouts")
        top.d.sync += soft["timeout_cause"].eq(Mux(soft["clear_errors"], 0, soft["timeout_cause"])
                                               | quiesce.expired | soft["scatter_timeout"])
        top.submodules.core = self._core(quiesce.m, lite, soft, resets)
        return top

    def _resp_word(self, resp):
        """A CAM response as the CAM_RESP register reads it (valid set)."""
        w = self.fragmenter.cam.slot_width
        return Cat(resp.slot, C(0, 16 - w), resp.moves, C(0, 8 - len(resp.moves)), resp.status,
                   C(0, 5), C(1, 1))

    def _move_word(self, move):
        """A CAM relocation as the CAM_MOVE register reads it (valid set)."""
        w = self.fragmenter.cam.slot_width
        return Cat(move.src, C(0, 15 - w), move.dst, C(0, 15 - w), C(0, 1), C(1, 1))

    def _learner_tap(self, m, learner, tapped, start):
        """The learner counts the non-empty lookups of the ``tapped`` beats. With L > 1 lanes it
        takes one key per cycle, so it counts one beat in L, one lane per cycle: in the b-th
        batch since ``start``, the beats k (from 0 in the batch) with k = b mod L, but not
        one that comes fewer than L beats after the last one taken (at a batch's start), so a
        sampled beat's keys are out before the next one comes. The batch rotates the beats
        taken, so a stream whose samples repeat with a period of L beats still shows the
        learner every lane position (`hotline.contract.beats.learner_sample` is the model's
        rule)."""
        beat, lanes = self.lookups.payload, self.fragmenter.lanes
        if lanes == 1:
            m.d.comb += [learner.lookups.valid.eq(tapped & ~beat.empty),
                         learner.lookups.payload.eq(beat.key)]
            return
        at = Signal(range(lanes))        # the beat's index in its batch, mod L
        batch = Signal(range(lanes))     # batches since start, mod L
        since = Signal(range(lanes), init=lanes - 1)  # beats since the last one taken (max L-1)
        keys = Signal.like(beat.key, reset_less=True)
        left = Signal(lanes)           # the sampled beat's lanes still to count
        lane = lowest_one_hot(left)
        take = tapped & (at == batch) & (since == lanes - 1) & ~start
        m.d.comb += [learner.lookups.valid.eq(left.any()),
                     learner.lookups.payload.eq(one_hot_select(lane, [keys[j] for j in range(lanes)]))]
        with m.If(start):
            m.d.sync += [at.eq(0), batch.eq(0), since.eq(lanes - 1)]
        with m.Elif(tapped):
            m.d.sync += [at.eq(Mux(beat.eob, 0, at + 1)), batch.eq(batch + beat.eob),
                         since.eq(Mux(take, 0, Mux(since == lanes - 1, since, since + 1)))]
        with m.If(take):
            m.d.sync += [keys.eq(beat.key),
                         left.eq(Cat((beat.last >= j) & ~beat.empty[j] for j in range(lanes)))]
        with m.Else():
            m.d.sync += left.eq(left & ~lane)

    def _core(self, bus, axil, soft, resets):
        """Everything the soft reset resets: the blocks, the CSR bank and their glue, on
        ``bus`` (the quiesce gate's master side) and ``axil``; ``soft``: the reset's request
        (out), its learner clear (in) and its busy flag (in, for STATUS.resetting);
        ``resets``: the soft reset of each of `RESET_GROUPS` (the glue: the rest). ``soft`` also
        carries the watchdog's: the scatter timeout strobe and the clear strobes (out), the
        TIMEOUTS count and the timeout cause (in)."""
        core, m = Module(), Module()
        frag, learner, dma, csr = self.fragmenter, self.learner, self.dma, self.csr
        core.submodules.fragmenter = frag   # its stages' resets are its own
        for name, block in (("learner", learner), ("dma", dma), ("csr", csr), ("glue", m)):
            core.submodules[name] = ResetInserter(resets[name])(block)
        m.submodules.merge = merge = self.merge
        m.submodules.fork = fork = StreamFork(self.merge.out_layout, n=2)

        wiring.connect(m, axil, csr.axil)
        wiring.connect(m, dma.bus, bus)
        control = csr.port_of("CONTROL")
        control_stb = csr.control_stb
        config = csr.port_of("CONFIG")
        clear_counters = control_stb & control[0]
        clear_errors = control_stb & control[1]
        m.d.comb += [soft["request"].eq(control_stb & control[5]),
                     soft["clear_counters"].eq(clear_counters),
                     soft["clear_errors"].eq(clear_errors)]
        gather_enable, learner_tap = config[0], config[1]

        # ---- lookups: fragmenter, and the learner's tap on accepted beats ---------------
        wiring.connect(m, wiring.flipped(self.lookups), frag.lookups)
        tapped = self.lookups.valid & self.lookups.ready & learner_tap
        self._learner_tap(m, learner, tapped, control_stb & control[2])
        m.d.comb += [
            learner.start.eq(control_stb & control[2]),
            learner.stop.eq(control_stb & control[3]),
            frag.clear_counters.eq(clear_counters),
        ]
        # The learner's clear is registered first: it resets the learner's write-back
        # registers (timing: the CSR decode in front of them was too long a path).
        m.d.sync += learner.clear.eq((control_stb & control[4]) | soft["learner_clear"])
        for name in ("remap", "popular", "non_popular"):
            wiring.connect(m, getattr(frag, name), wiring.flipped(getattr(self, name)))

        gather, to_dma = self._batch_keys(m, merge, fork, gather_enable)
        self._dma_feed(m, gather, to_dma, soft, clear_counters, clear_errors)
        cmd_f, resp_f, moves_f = self._cam_port(m, config)
        learner_valid = self._learner_readout(m)
        self._status(m, (cmd_f, resp_f, moves_f), learner_valid, soft, clear_counters)
        return core

    def _batch_keys(self, m, merge, fork, gather_enable):
        """Cold keys and batch summaries, to the host (``batch_keys``) and to the gather: returns
        the gather's key stream and the engine's key input (through register slices)."""
        frag, dma = self.fragmenter, self.dma
        keys = frag.cold_keys
        if frag.lanes > 1:
            # The Fragmenter's lane beats of cold keys, one key per cycle: the host and the
            # gather take one row per key anyway.
            m.submodules.cold_keys = funnel = FunnelFIFO(merge.keys.payload.shape(),
                                                         frag.fifo_depth, frag.lanes)
            m.d.comb += [funnel.w_count.eq(Mux(keys.valid & funnel.w_room, keys.payload.last + 1,
                                               0)),
                         keys.ready.eq(funnel.w_room),
                         *(funnel.w_data[k].key.eq(keys.payload.key[k])
                           for k in range(frag.lanes))]
            wiring.connect(m, funnel.r, merge.keys)
        else:
            m.d.comb += [merge.keys.valid.eq(keys.valid), keys.ready.eq(merge.keys.ready),
                         merge.keys.payload.key.eq(keys.payload.key[0])]
        wiring.connect(m, frag.batches, merge.batches)
        # A register slice between the merge and the fork (timing: the merge's key count
        # compare, through the fork's handshake, reached the gather slice's enables, 9.7 ns).
        m.submodules.merged = merged = RegisterSlice(merge.out_layout)
        wiring.connect(m, merge.o, merged.i)
        wiring.connect(m, merged.o, fork.i)
        wiring.connect(m, fork.o0, wiring.flipped(self.batch_keys))
        # CONFIG.gather_enable is latched per batch: sampled while no beat of a batch is at
        # the fork (between an end beat and the next batch's first beat), so a write mid-batch
        # applies from the next batch. Live, clearing it cut a gather's end beat off (the
        # engine waited in GATHER forever) and setting it started a gather mid-batch with
        # its slots numbered from 0.
        gather_on, in_batch = Signal(name="gather_on"), Signal(name="gather_in_batch")
        i_fire = fork.i.valid & fork.i.ready
        m.d.sync += in_batch.eq(Mux(i_fire, ~fork.i.payload.end, in_batch | fork.i.valid))
        with m.If(Mux(i_fire, fork.i.payload.end, ~in_batch & ~fork.i.valid)):
            m.d.sync += gather_on.eq(gather_enable)
        m.d.comb += fork.enable.eq(Cat(1, gather_on))
        # A register slice between the fork and the engine: the merge/fork valid-ready logic and
        # the engine's descriptor lookup sit in different corners of a full die.
        m.submodules.gather_keys = gather_keys = RegisterSlice(dma.keys.payload.shape())
        m.d.comb += [gather_keys.i.payload.end.eq(fork.o1.payload.end),
                     gather_keys.i.payload.key.eq(fork.o1.payload.key),
                     gather_keys.i.valid.eq(fork.o1.valid), fork.o1.ready.eq(gather_keys.i.ready)]
        gather = gather_keys.o
        # And one in front of the engine: the keys' valid, selected by this FSM, reached the
        # enable of the engine's whole key pipeline (timing: from dma_feed's state, 9.8 ns).
        m.submodules.dma_keys = dma_keys = RegisterSlice(dma.keys.payload.shape())
        wiring.connect(m, dma_keys.o, dma.keys)
        to_dma = dma_keys.i
        return gather, to_dma

    def _dma_feed(self, m, gather, to_dma, soft, clear_counters, clear_errors):
        """The DMA engine: gather and scatter batches, one at a time (with the scatter
        watchdog), its done records and its descriptor and staging registers."""
        csr, dma = self.csr, self.dma
        m.submodules.scatter_cmds = scatter_cmds = BufferedFIFO(width=1, depth=self.CMD_DEPTH)
        m.d.comb += [scatter_cmds.w_en.eq(csr.scatter_cmd_stb),
                     scatter_cmds.w_data.eq(csr.field_of("SCATTER_CMD", "bank"))]
        # The engine's done records carry no direction: remember each batch's, in order. Its
        # room is registered (`fifo_room`: 30 batches may await their done records; timing:
        # the FIFO level reached the command handshake and the level itself).
        m.submodules.directions = directions = BufferedFIFO(width=1, depth=32)
        directions_room = fifo_room(m, directions, "directions")
        gather_bank = Signal()
        banks = csr.field_of("STAGING_BANKS", "banks")
        with m.If(clear_counters):
            m.d.sync += gather_bank.eq(0)
        # Scatter watchdog: a scatter batch whose keys stop for watchdog_cycles while a gather's
        # key waits behind it is closed with an end beat of the glue's own (its done record
        # counts the keys that came), a counted error instead of a deadlock through the fork.
        # A gap alone is legal (the host link delivers keys frame by frame); with a gather
        # waiting it is not, for the host sends a batch's lookups after its scatter's keys.
        # Off the key path (timing): starving is a register, the expiry compares registers.
        starving, closing = Signal(name="scatter_starving"), Signal(name="scatter_closing")
        wait_left = Signal(range(self.watchdog_cycles + 1), init=self.watchdog_cycles,
                           name="scatter_wait_left")
        with m.If(~starving | closing):
            m.d.sync += wait_left.eq(self.watchdog_cycles)
        with m.Elif(wait_left != 0):
            m.d.sync += wait_left.eq(wait_left - 1)
        expire = starving & (wait_left == 1) & ~closing
        m.d.comb += soft["scatter_timeout"].eq(expire)
        with m.If(expire):
            m.d.sync += closing.eq(1)
        with m.FSM(name="dma_feed") as feed:
            with m.State("IDLE"):
                with m.If(~directions_room):
                    pass  # 30 batches await their done records: wait for the host to take one
                with m.Elif(gather.valid):
                    m.d.comb += [dma.cmd.valid.eq(1), dma.cmd.payload.bank.eq(gather_bank)]
                    with m.If(dma.cmd.ready):
                        m.next = "GATHER"
                with m.Elif(scatter_cmds.r_rdy):
                    m.d.comb += [dma.cmd.valid.eq(1), dma.cmd.payload.scatter.eq(1),
                                 dma.cmd.payload.bank.eq(scatter_cmds.r_data),
                                 scatter_cmds.r_en.eq(dma.cmd.ready)]
                    with m.If(dma.cmd.ready):
                        m.next = "SCATTER"
            with m.State("GATHER"):
                m.d.comb += [to_dma.valid.eq(gather.valid), gather.ready.eq(to_dma.ready),
                             to_dma.payload.key.eq(gather.payload.key),
                             to_dma.payload.end.eq(gather.payload.end)]
                with m.If(gather.valid & to_dma.ready & gather.payload.end):
                    m.d.sync += gather_bank.eq(~gather_bank & (banks == 2))
                    m.next = "IDLE"
            with m.State("SCATTER"):
                with m.If(closing):
                    m.d.comb += [to_dma.valid.eq(1), to_dma.payload.end.eq(1)]
                    with m.If(to_dma.ready):
                        m.d.sync += closing.eq(0)
                        m.next = "IDLE"
                with m.Else():
                    wiring.connect(m, wiring.flipped(self.scatter_keys), to_dma)
                    with m.If(self.scatter_keys.valid & to_dma.ready
                              & self.scatter_keys.payload.end):
                        m.next = "IDLE"
        m.d.sync += starving.eq(feed.ongoing("SCATTER") & ~self.scatter_keys.valid
                                & gather.valid)
        # A batch's direction is written when its command is taken, dozens of cycles before its
        # done record (RowDMA.CMD_TO_KEY + KEY_TO_AR at least), so it is always there to read:
        # done is not gated by the FIFO's r_rdy (timing: the level reached done's payload).
        # Written a cycle after the command is taken (timing: the command handshake, behind
        # the room register and the engine's ready, reached the FIFO's write logic, 9.7 ns);
        # `fifo_room` leaves two entries for the writes its register has not seen.
        m.d.sync += [directions.w_en.eq(dma.cmd.valid & dma.cmd.ready),
                     directions.w_data.eq(dma.cmd.payload.scatter)]
        m.d.comb += [
            self.dma_done.valid.eq(dma.done.valid),
            dma.done.ready.eq(self.dma_done.ready),
            directions.r_en.eq(dma.done.valid & self.dma_done.ready),
            self.dma_done.payload.rows.eq(dma.done.payload.rows),
            self.dma_done.payload.errors.eq(dma.done.payload.errors),
            self.dma_done.payload.scatter.eq(directions.r_data),
        ]

        m.d.comb += [
            dma.desc_we.eq(csr.desc_commit_stb),
            dma.desc_table.eq(csr.field_of("DESC_TABLE", "table")),
            dma.desc_base.eq(Cat(csr.desc_base_lo, csr.desc_base_hi)),
            dma.desc_rows.eq(csr.desc_rows),
            dma.desc_row_bytes.eq(csr.desc_row_bytes),
            dma.staging_base.eq(Cat(csr.staging_base_lo, csr.staging_base_hi)),
            dma.staging_stride.eq(csr.staging_stride),
            dma.staging_slots.eq(csr.staging_slots),
            dma.staging_banks.eq(banks),
            dma.clear_counters.eq(clear_counters),
            dma.clear_errors.eq(clear_errors),
        ]

    def _cam_port(self, m, config):
        """The CAM command port through the CSRs (and ``cam_cmds`` / ``cam_events``): returns
        the command, response and relocation FIFOs."""
        frag, csr = self.fragmenter, self.csr
        # The response and relocation FIFOs take the engine's beats on a registered room
        # (`fifo_room`), 2 entries deeper so that CMD_DEPTH of them still fit (timing: their
        # levels reached the engine's response logic through its ready inputs).
        fifos = {}
        for name, port, layout in (("cmd", frag.cmd, frag.cmd.payload.shape()),
                                   ("resp", frag.resp, frag.resp.payload.shape()),
                                   ("moves", frag.moves, frag.moves.payload.shape())):
            depth = self.CMD_DEPTH + (2 if name != "cmd" else 0)
            fifos[name] = fifo = BufferedFIFO(width=layout.size, depth=depth)
            m.submodules[f"cam_{name}_fifo"] = fifo
        cmd_f, resp_f, moves_f = fifos["cmd"], fifos["resp"], fifos["moves"]
        resp_room, moves_room = fifo_room(m, resp_f, "cam_resp"), fifo_room(m, moves_f, "cam_moves")
        cmd_word = Signal(frag.cmd.payload.shape())
        # Commands from CAM_CMD writes and from cam_cmds beats share the FIFO (a write first).
        cmds = self.cam_cmds
        m.d.comb += [
            cmd_word.op.eq(csr.field_of("CAM_CMD", "op")), cmd_word.key.eq(csr.cam_key),
            cmds.ready.eq(cmd_f.w_rdy & ~csr.cam_cmd_stb),
            cmd_f.w_data.eq(Mux(csr.cam_cmd_stb, cmd_word, cmds.payload)),
            cmd_f.w_en.eq(csr.cam_cmd_stb | (cmds.valid & cmds.ready)),
            frag.cmd.valid.eq(cmd_f.r_rdy), frag.cmd.payload.eq(cmd_f.r_data),
            cmd_f.r_en.eq(frag.cmd.ready),
        ]
        # Responses and relocations: into the CSR FIFOs, or (CONFIG.cam_events) onto
        # cam_events. The engine offers a command's relocations before its response and the
        # next command's only after that response is taken, so relocations first is the order.
        # Both pass one RegisterSlice, in that order (timing: the glue's ready select reached
        # the engine's response register across the die); after it they go where
        # CONFIG.cam_events says when they leave. CONFIG.cam_events is registered (timing: from
        # the CSR bank); it takes effect a cycle after its write.
        m.submodules.cam_out = out = RegisterSlice(data.StructLayout({
            "move": 1, "resp": frag.resp.payload.shape(), "reloc": frag.moves.payload.shape()}))
        events, to_stream = self.cam_events, Signal(name="cam_events_on")
        m.d.sync += to_stream.eq(config[2])
        beat = out.o.payload
        m.d.comb += [
            out.i.valid.eq(frag.resp.valid | frag.moves.valid),
            out.i.payload.move.eq(frag.moves.valid),
            out.i.payload.resp.eq(frag.resp.payload),
            out.i.payload.reloc.eq(frag.moves.payload),
            frag.moves.ready.eq(out.i.ready),
            frag.resp.ready.eq(out.i.ready & ~frag.moves.valid),
            resp_f.w_data.eq(beat.resp),
            resp_f.w_en.eq(out.o.valid & ~beat.move & ~to_stream & resp_room),
            moves_f.w_data.eq(beat.reloc),
            moves_f.w_en.eq(out.o.valid & beat.move & ~to_stream & moves_room),
            out.o.ready.eq(Mux(to_stream, events.ready, Mux(beat.move, moves_room, resp_room))),
            events.valid.eq(to_stream & out.o.valid),
            events.payload.move.eq(beat.move),
            events.payload.word.eq(Mux(beat.move, self._move_word(beat.reloc),
                                       self._resp_word(beat.resp))),
        ]
        resp = frag.resp.payload.shape()(resp_f.r_data)
        move = frag.moves.payload.shape()(moves_f.r_data)
        # A read pops the entry it sampled in the next cycle (timing: the CSR read strobe
        # reached the FIFOs' read logic across the die). Only an entry there when sampled is
        # popped, and nothing else pops it in between; the next read of the register is at
        # least 3 cycles later.
        resp_pop, move_pop = Signal(), Signal()
        m.d.sync += [resp_pop.eq(csr.cam_resp_rstb & resp_f.r_rdy),
                     move_pop.eq(csr.cam_move_rstb & moves_f.r_rdy)]
        m.d.comb += [
            # Gated: an empty FIFO's read data is undefined (X in a 4-state simulator).
            csr.cam_resp.eq(Mux(resp_f.r_rdy, self._resp_word(resp), 0)),
            resp_f.r_en.eq(resp_pop),
            csr.cam_move.eq(Mux(moves_f.r_rdy, self._move_word(move), 0)),
            moves_f.r_en.eq(move_pop),
        ]
        return cmd_f, resp_f, moves_f

    def _learner_readout(self, m):
        """LEARNER_ADDR reads one learner entry into LEARNER_KEY / LEARNER_COUNT: returns
        STATUS.learner_valid."""
        csr, learner = self.csr, self.learner
        # The address write is registered on its way from the CSRs to the learner (timing).
        read_wait = Signal(range(READ_LATENCY + 2))
        learner_valid = Signal()
        addr_stb, addr = Signal(), Signal.like(csr.learner_addr, reset_less=True)
        m.d.sync += [addr_stb.eq(csr.learner_addr_stb), addr.eq(csr.learner_addr)]
        with m.If(addr_stb):
            m.d.sync += [learner.read_addr.eq(addr), read_wait.eq(READ_LATENCY + 1)]
        with m.Elif(read_wait != 0):
            m.d.sync += read_wait.eq(read_wait - 1)
            with m.If(read_wait == 1):
                m.d.sync += [csr.learner_key.eq(learner.read_data.key),
                             csr.learner_count.eq(learner.read_data.count),
                             learner_valid.eq(1)]
        with m.If(csr.learner_addr_stb):  # last: a new request hides an earlier one's end
            m.d.sync += learner_valid.eq(0)
        return learner_valid

    def _status(self, m, cam_fifos, learner_valid, soft, clear_counters):
        """STATUS, ERROR_CAUSE and the counters; ``cam_fifos``: `_cam_port`'s."""
        csr, dma, frag, learner = self.csr, self.dma, self.fragmenter, self.learner
        cmd_f, resp_f, moves_f = cam_fifos
        running_scatter = Signal()
        with m.If(dma.cmd.valid & dma.cmd.ready):
            m.d.sync += running_scatter.eq(dma.cmd.payload.scatter)
        cause = Signal(len(CAUSES))
        m.d.comb += cause.eq(dma.error_cause.as_value())
        status = {
            "gather_busy": dma.busy & ~running_scatter, "scatter_busy": dma.busy & running_scatter,
            "cam_busy": cmd_f.r_rdy | ~frag.cmd.ready, "cold_clearing": frag.cold.clearing,
            "learner_active": learner.active, "resp_valid": resp_f.r_rdy,
            "move_valid": moves_f.r_rdy, "learner_valid": learner_valid,
            "error": cause.any() | soft["timeout_cause"],
            "resetting": soft["busy"] | learner.clearing | frag.cold.clearing | ~frag.cmd.ready,
        }
        for name, value in status.items():
            m.d.comb += csr.field_of("STATUS", name).eq(value)
        for n, name in enumerate(CAUSES):
            m.d.comb += csr.field_of("ERROR_CAUSE", name).eq(cause[n])
        m.d.comb += csr.field_of("ERROR_CAUSE", "timeout").eq(soft["timeout_cause"])

        cycles = Signal(48)
        gather_rows = Signal(48)
        scatter_rows = Signal(48)
        done = self.dma_done
        done_fire = done.valid & done.ready
        lagged_count(m, cycles, 1, clear_counters, "cycles")
        lagged_count(m, gather_rows, Mux(done_fire & ~done.payload.scatter, done.payload.rows, 0),
                     clear_counters, "gather_rows")
        lagged_count(m, scatter_rows, Mux(done_fire & done.payload.scatter, done.payload.rows, 0),
                     clear_counters, "scatter_rows")
        fc = frag.counters
        counters = {
            "cycles": cycles, "lookups": fc.lookups, "hits": fc.hits, "samples": fc.samples,
            "popular_samples": fc.popular_samples, "cold_rows": fc.cold_rows,
            "batches": fc.batches, "overflows": fc.overflows,
            "oversized_batches": fc.oversized_batches, "gather_rows": gather_rows,
            "scatter_rows": scatter_rows, "dma_bytes_read": dma.bytes_read,
            "dma_bytes_written": dma.bytes_written, "window_errors": dma.window_errors,
            "axi_errors": dma.axi_errors, "learner_dropped": learner.dropped,
            "learner_counted": learner.counted, "timeouts": soft["timeouts"],
        }
        for name, value in counters.items():
            m.d.comb += getattr(csr, name).eq(value)
