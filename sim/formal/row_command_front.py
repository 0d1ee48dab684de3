"""Property 1 (issue 43), its staging-window part, on `RowCommandFront`: the assumption the
`RowWindowCheck` proof rests on (a key is taken only when the staging window has held for
``SETUP_CYCLES`` cycles) is met by the front the row DMA puts before it, whatever the host
writes to the staging registers and when. Also the batches themselves:

- ``window`` changes only in the cycle after a command is taken, to the staging registers
  as they were in that cycle (a register write between commands affects only later batches);
- every key beat on ``o`` (not a ``null`` one, which copies no row) comes when ``window``
  has held for ``SETUP_CYCLES`` cycles (so with
  property 1 on the window check, every row the DMA copies lies in the staging window of
  its own batch's command: the composition `RowDMA` wires, front.window -> check.staging_*);
- a ``count`` = N command gives exactly N beats, numbered 0 .. N - 1 by ``slot``, each with
  its key, ``eob`` on the last and only there; N = 0 gives one ``null`` beat with ``eob``;
  each carries its command's ``bank`` and ``scatter``;
- ``o`` holds valid until ready with a stable payload (a null beat's ``key`` excepted: it
  carries none).

Free: commands (count, bank, scatter), keys, the staging registers (any value at any
cycle, also while a batch runs), ``drained`` and ``o.ready``. Assumptions: no reset; the
inputs follow the stream rule. Geometry: the row DMA's own (``framing="count"``, direction
per command, 5-bit keys), ``setup_cycles`` = `RowWindowCheck.SETUP_CYCLES`.
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import data

import hotline.hw.row_command_front as block
from hotline.hw.row_window_check import RowWindowCheck

from .runner import free_inputs, internal
from .streams import stream_rules

__all__ = ["FrontProperty", "MUTATIONS"]

SETUP = RowWindowCheck.SETUP_CYCLES
CMD = data.StructLayout({"count": 16, "bank": 1, "scatter": 1})

MUTATIONS = {
    # the window followed the registers (the escape before issue 42's latch)
    "window_unlatched": ("with m.If(cmd_fire):\n            m.d.sync += window.eq(self.staging)",
                         "with m.If(1):\n            m.d.sync += window.eq(self.staging)"),
    # keys offered one cycle before the window check settles
    "short_setup": ("setup.eq(self.setup_cycles)]", "setup.eq(self.setup_cycles - 1)]"),
    # a batch of N keys closed after N - 1
    "early_eob": ("last = remaining == 1", "last = remaining == 2"),
}


class FrontProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.row_command_front` or a mutant of it."""

    def __init__(self, module=block):
        self.dut = module.RowCommandFront(CMD, direction=None, framing="count", key_width=5,
                                          setup_cycles=SETUP)
        self.ports = free_inputs(self.dut)

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        state, remaining, slot, setup, latched, batch_bank, batch_scatter = internal(
            m, dut, platform, "front_state", "remaining", "slot", "setup", "window_latched",
            "batch_bank", "batch_scatter")
        stream_rules(m, dut.cmd, "cmd", assume=True)
        stream_rules(m, dut.keys, "keys", assume=True)
        cmd, o = dut.cmd, dut.o
        # o's stream rule; a null beat's key is no data (it is the key input's, which may
        # change while the null beat waits)
        p = o.payload
        beat = Cat(p.slot, p.bank, p.scatter, p.null, p.eob, Mux(p.null, 0, p.key))
        stalled, beat_q = Signal(), Signal.like(beat)
        m.d.sync += [stalled.eq(o.valid & ~o.ready), beat_q.eq(beat)]
        with m.If(stalled):
            m.d.comb += Assert(o.valid & (beat == beat_q))
        cmd_fire = cmd.valid & cmd.ready

        # ---- the window: latched at a command, then held SETUP cycles before a beat ------
        window, staging = Value.cast(dut.window), Value.cast(dut.staging)
        window_q, staging_q, fired_q = Signal.like(window), Signal.like(staging), Signal()
        started = Signal()
        m.d.sync += [window_q.eq(window), staging_q.eq(staging), fired_q.eq(cmd_fire),
                     started.eq(1)]
        with m.If(started & ~fired_q):
            m.d.comb += Assert(window == window_q)
        with m.If(fired_q):
            m.d.comb += Assert(window == staging_q)
        held = Signal(range(SETUP + 1))
        with m.If(window != window_q):
            m.d.sync += held.eq(0)
        with m.Elif(held < SETUP):
            m.d.sync += held.eq(held + 1)
        # (a null beat copies no row: the front offers it before the check settles)
        with m.If(o.valid & ~o.payload.null):
            m.d.comb += Assert(started & (window == window_q) & (held == SETUP))

        # ---- the batch: its command's count, bank and scatter; slots 0 .. N - 1 --------
        count, bank, scatter = Signal(16), Signal(), Signal()
        beats = Signal(16)   # beats of the running batch given so far
        running = Signal()
        with m.If(cmd_fire):
            m.d.sync += [count.eq(cmd.payload.count), bank.eq(cmd.payload.bank),
                         scatter.eq(cmd.payload.scatter), beats.eq(0), running.eq(1)]
        with m.If(o.valid):
            m.d.comb += [Assert(running), Assert(p.bank == bank), Assert(p.scatter == scatter),
                         Assert(p.null == (count == 0)),
                         Assert(p.eob == ((count == 0) | (beats + 1 == count)))]
            with m.If(count != 0):
                m.d.comb += [Assert(p.slot == beats), Assert(dut.keys.valid),
                             Assert(p.key == dut.keys.payload.key)]
        with m.If(o.valid & o.ready):
            m.d.sync += beats.eq(beats + 1)
            with m.If(p.eob):
                m.d.sync += running.eq(0)
        # no command is taken while a batch runs (its window would change under it)
        with m.If(cmd_fire):
            m.d.comb += Assert(~running)
        # a key is consumed exactly when it leaves as a beat
        with m.If(dut.keys.valid & dut.keys.ready):
            m.d.comb += Assert(o.valid & (count != 0) & o.ready)
        # ---- invariants (k-induction): the scoreboard against the front's own state ----
        # (the FSM's states in their order: IDLE, SETUP, RUN)
        idle, in_setup, run = state == 0, state == 1, state == 2
        m.d.comb += [
            Assert(state <= 2), Assert(held <= SETUP), Assert(running == ~idle),
            Assert(idle | ((batch_bank == bank) & (batch_scatter == scatter))),
            Assert(~in_setup | ((remaining == count) & (beats == 0) & (slot == 0))),
            Assert(~run | ((remaining + beats == count) & (slot == beats) & (remaining != 0))),
            Assert(~in_setup | (setup == SETUP) | fired_q | (held >= SETUP - 1 - setup)),
            Assert(~in_setup | ((setup == SETUP) == fired_q)),
            Assert(~run | ((held == SETUP) & (window == window_q))),
            Assert(~in_setup | fired_q | (window == window_q)),
            Assert(idle | started),
            Assert(~fired_q | in_setup & (setup == SETUP)),
            Assert(latched == window),
        ]
        # not vacuous: a two-key batch ends while the registers changed during it
        m.d.comb += Cover(o.valid & o.ready & p.eob & (count == 2) & (staging != window))
        return m
