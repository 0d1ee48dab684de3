"""RowCommandFront: the row DMA's commands and keys -> one beat per key, numbered by slot.

Ports:

- ``cmd`` In {count: 16, bank: 1[, scatter: 1]} (``framing="count"``) or {bank: 1[,
  scatter: 1]} (``framing="end"``); ``scatter`` only with ``direction=None``.
- ``keys`` In {key} (``framing="count"``: the command's ``count`` keys form its batch) or
  {end, key} (``framing="end"``: the batch is closed by a beat with ``end`` set).
- ``o`` Out `slot_key_layout`: per key its ``slot`` (index in its batch, saturating at
  65535: never wrapped, and refused by every staging window), the batch's
  ``bank`` and ``scatter``, and ``eob`` on the batch's last beat. A batch of ``count`` = 0,
  and the ``end`` beat of ``framing="end"``, is one ``null`` beat (with ``eob``).
- ``started`` Out(1): strobe, a command was taken (a batch began).
- ``drained`` In(1): every batch begun has completed (`WriteEngine.drained`).
- ``staging`` In `staging_layout`: the staging window registers, sampled when a command is
  taken. ``window`` Out: the copy latched then, a register that changes only when a command
  is taken, so a batch's keys all see the window of its command: a register write between
  commands affects only later batches.

Timing: a command is taken in a cycle when the front is idle; its first key is taken
``setup_cycles`` + 2 cycles later (the staging-window check settles on ``window``
meanwhile; a ``count`` = 0 batch's null beat is offered one cycle earlier), then one per cycle while ``o.ready``. ``keys.ready`` is ``o.ready`` while a batch runs, so a stall of
``o`` holds ``keys``. The next command is taken in the cycle after the batch's last beat. A
command whose direction differs from the previous one waits for ``drained``.
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.streams import dma_keys_layout

from .row_dma_layouts import slot_key_layout, staging_layout

__all__ = ["RowCommandFront"]


class RowCommandFront(wiring.Component):
    """Parameters: ``cmd_layout`` (the `RowDMA`'s), ``direction`` ("gather", "scatter" or
    None = per command), ``framing`` ("count" or "end"), ``key_width``, ``setup_cycles``."""

    def __init__(self, cmd_layout, *, direction, framing, key_width, setup_cycles):
        self.direction, self.framing, self.setup_cycles = direction, framing, setup_cycles
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout)),
            "keys": In(stream.Signature(dma_keys_layout(key_width, framing))),
            "o": Out(stream.Signature(slot_key_layout(key_width))),
            "started": Out(1),
            "drained": In(1),
            "staging": In(staging_layout()),
            "window": Out(staging_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        cmd, keys, o = self.cmd, self.keys, self.o
        remaining = Signal(16)
        # One bit more than a slot: it saturates there (framing "end" has no length limit), and
        # a saturated slot is offered as 65535, beyond every staging window (refused, "slot").
        slot = Signal(17)
        batch_bank = Signal()
        batch_scatter = Signal(init=int(self.direction == "scatter"))
        setup = Signal(range(self.setup_cycles + 1))

        # The payload is assigned whole, outside the FSM: a constant part of a payload whose
        # other bits an FSM assigns becomes an ``always @*`` without inputs in the Verilog,
        # which Icarus never runs (X).
        in_null, in_eob = Signal(), Signal()
        cmd_fire = cmd.valid & cmd.ready
        m.d.comb += [self.started.eq(cmd_fire), o.payload.key.eq(keys.payload.key),
                     o.payload.slot.eq(slot[:16] | slot[16].replicate(16)),
                     o.payload.bank.eq(batch_bank),
                     o.payload.scatter.eq(batch_scatter), o.payload.null.eq(in_null),
                     o.payload.eob.eq(in_eob)]

        # reset_less: every batch latches its own copy before its first key.
        window = Signal(staging_layout(), name="window_latched", reset_less=True)
        m.d.comb += self.window.eq(window)
        with m.If(cmd_fire):
            m.d.sync += window.eq(self.staging)

        with m.FSM(name="front"):
            with m.State("IDLE"):
                if self.direction is None:
                    # a change of direction waits until every earlier batch has completed
                    m.d.comb += cmd.ready.eq(self.drained | (cmd.payload.scatter == batch_scatter))
                else:
                    m.d.comb += cmd.ready.eq(1)
                with m.If(cmd_fire):
                    if self.framing == "count":
                        m.d.sync += remaining.eq(cmd.payload.count)
                    m.d.sync += [slot.eq(0),
                                 batch_bank.eq(cmd.payload.bank),
                                 setup.eq(self.setup_cycles)]
                    if self.direction is None:
                        m.d.sync += batch_scatter.eq(cmd.payload.scatter)
                    m.next = "SETUP"
            with m.State("SETUP"):
                with m.If(setup != 0):
                    m.d.sync += setup.eq(setup - 1)
                with m.Elif((remaining == 0) if self.framing == "count" else C(0)):
                    m.d.comb += [o.valid.eq(1), in_null.eq(1), in_eob.eq(1)]
                    with m.If(o.ready):
                        m.next = "IDLE"
                with m.Else():
                    m.next = "RUN"
            with m.State("RUN"):
                if self.framing == "count":
                    last = remaining == 1
                    m.d.comb += in_eob.eq(last)
                else:  # an end beat closes the batch: it carries no key (a null beat)
                    last = keys.payload.end
                    m.d.comb += [in_eob.eq(last), in_null.eq(last)]
                m.d.comb += [o.valid.eq(keys.valid), keys.ready.eq(o.ready)]
                with m.If(keys.valid & o.ready):
                    m.d.sync += [remaining.eq(remaining - 1), slot.eq(slot + ~slot[16])]
                    with m.If(last):
                        m.next = "IDLE"
        return m
