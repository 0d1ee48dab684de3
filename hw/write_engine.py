"""WriteEngine: the row DMA's AXI write channels and its batch completion.

Ports:

- ``beats`` In `read_beat_layout`, always ready: read data into the read-data FIFO
  (``fifo_beats`` deep; the producer never sends a beat it has no ``credit`` for).
- ``credit`` Out(1): a beat left the read-data FIFO (the `ReadEngine`'s credit).
- ``aw`` In `burst_layout`, ``wlen`` In(8), ``events`` In `RowEvent`: from the `RowChunker`.
- ``bus`` Out(`axi_write_signature`): AW, W, B. AW: ID 0, INCR, full-width beats,
  ``AWCACHE`` = 0b0011. W: the read-data beats in order, cut into bursts by ``wlen`` (``wlast``
  from that count), ``wstrb`` = 0 for a beat read with an error. ``bid`` is not used.
- ``done`` Out {rows: 16, errors: 16}: per batch, when its last event (``eob``) completes:
  rows copied (``row_end``) and refused (``refused``) since the previous batch. ``errors``
  saturates at 65535 (a batch closed by an ``end`` beat has no length limit; the counters
  count every refused row); ``rows`` cannot exceed 65535 (one per staging slot < 2**16 - 1).
- ``started`` In(1): a batch began (`RowCommandFront.started`). ``busy``: a batch began whose
  ``done`` was not taken (from the cycle after ``started``). ``drained``: every batch begun
  has completed its last event (a register: one cycle late).
- ``row_done``, ``refused`` (with ``cause``), ``write_ok`` (a W beat with strobes),
  ``write_err`` (an error write response), ``rlast_err`` (a read beat whose ``rlast`` is not
  where the engine's own count ends the burst: early or late): strobes for the counters.

Events complete in order: one that needs a write response takes the next B, the others
complete without one. An ``eob`` event waits until ``done`` is free. B passes a
`RegisterSlice` first (``bready`` is its registered room: high while it holds no response).

Timing: a beat taken on ``beats`` in cycle t is on W in t + ``R_TO_W``: the read-data FIFO,
then a W register and a W FIFO. The data FIFO's block RAM has no output register, so its data
goes straight into the W register with no logic between (timing: a select there was the whole
accelerator's critical path); the W FIFO's registered room says when a beat may leave the
data FIFO. One beat per cycle while ``wready``. The beat's ``rlast`` is checked in the W
register (registers only; ``rlast_err`` is a register, one cycle later); the data is written
as counted, so a slave's wrong ``rlast`` is counted but never shifts a row. AW bursts pass
through as they come. A B handshake in cycle t that completes an ``eob`` event makes ``done``
valid in t + 2 (the slice, then the done register); an event that needs no response
completes in the cycle it is offered (``done`` free).
"""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hotline.contract.streams import dma_done_layout

from .axi import AXIBurst, AXIResp
from .lib.buffered_fifo import BufferedFIFO
from .lib.fifo_room import fifo_room
from .lib.register_slice import RegisterSlice
from .row_dma_layouts import RowEvent, axi_write_signature, burst_layout, read_beat_layout

__all__ = ["WriteEngine"]


class WriteEngine(wiring.Component):
    """Parameters: ``addr_width``, ``data_width``, ``fifo_beats`` (read-data FIFO depth)."""
    R_TO_W = 5     # beat in -> WVALID of that beat
    B_TO_DONE = 2  # B handshake completing a batch -> done valid

    def __init__(self, *, addr_width, data_width, fifo_beats):
        self.addr_width, self.data_width, self.fifo_beats = addr_width, data_width, fifo_beats
        super().__init__({
            "beats": In(stream.Signature(read_beat_layout(data_width), always_ready=True)),
            "credit": Out(1),
            "aw": In(stream.Signature(burst_layout(addr_width))),
            "wlen": In(stream.Signature(8)),
            "events": In(stream.Signature(RowEvent)),
            "bus": Out(axi_write_signature(addr_width, data_width)),
            "done": Out(stream.Signature(dma_done_layout())),
            "started": In(1),
            "busy": Out(1),
            "drained": Out(1, init=1),
            "row_done": Out(1),
            "refused": Out(1),
            "cause": Out(RowEvent.members["cause"]),
            "write_ok": Out(1),
            "write_err": Out(1),
            "rlast_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        bus_bytes = self.data_width // 8
        shift = exact_log2(bus_bytes)

        # ---- read-data FIFO -> W register -> W FIFO -> W ---------------------------------
        m.submodules.data_fifo = data_fifo = BufferedFIFO(
            width=read_beat_layout(self.data_width).size, depth=self.fifo_beats)
        m.d.comb += [data_fifo.w_en.eq(self.beats.valid),
                     data_fifo.w_data.eq(self.beats.payload)]
        w_layout = data.StructLayout({"data": self.data_width, "err": 1, "last": 1})
        # the W register also holds the slave's rlast, checked against the count's last
        w_reg_layout = data.StructLayout({"data": self.data_width, "err": 1, "rlast": 1,
                                          "last": 1})
        # 8 deep: at one beat per cycle it holds about 3, and its room needs <= depth - 3
        m.submodules.w_fifo = w_fifo = BufferedFIFO(width=w_layout.size, depth=8)
        wbeat = Signal(8)
        w_reg, w_reg_valid = Signal(w_reg_layout, reset_less=True), Signal()
        w_last = wbeat == self.wlen.payload
        pop = data_fifo.r_rdy & self.wlen.valid & fifo_room(m, w_fifo, "w")
        w_out = w_layout(w_fifo.r_data)
        m.d.sync += [w_reg.eq(Cat(data_fifo.r_data, w_last)), w_reg_valid.eq(pop)]
        m.d.comb += [
            data_fifo.r_en.eq(pop), self.credit.eq(pop), self.wlen.ready.eq(pop & w_last),
            w_fifo.w_en.eq(w_reg_valid),
            w_fifo.w_data.eq(Cat(w_reg.data, w_reg.err, w_reg.last)),
            bus.wvalid.eq(w_fifo.r_rdy), bus.wdata.eq(w_out.data),
            bus.wstrb.eq(Mux(w_out.err, 0, (1 << bus_bytes) - 1)), bus.wlast.eq(w_out.last),
            w_fifo.r_en.eq(bus.wready),
            self.write_ok.eq(bus.wvalid & bus.wready & ~w_out.err),
        ]
        with m.If(pop):
            m.d.sync += wbeat.eq(Mux(w_last, 0, wbeat + 1))
        m.d.sync += self.rlast_err.eq(w_reg_valid & (w_reg.rlast != w_reg.last))

        # ---- AW ----------------------------------------------------------------------------
        m.d.comb += [
            bus.awvalid.eq(self.aw.valid),
            bus.awaddr.eq(self.aw.payload.addr), bus.awlen.eq(self.aw.payload.len),
            bus.awsize.eq(shift), bus.awburst.eq(AXIBurst.INCR), bus.awcache.eq(0b0011),
            bus.awprot.eq(0), bus.awid.eq(0),
            self.aw.ready.eq(bus.awvalid & bus.awready),
        ]

        # ---- B and events -> done ----------------------------------------------------------
        # B through a register slice (timing: the slave's bvalid through the event logic into
        # the done payload was the whole 1-lane accelerator's critical path, 10.5 ns at seed 3)
        m.submodules.b_slice = b_slice = RegisterSlice(AXIResp)
        b = b_slice.o
        m.d.comb += [b_slice.i.valid.eq(bus.bvalid), b_slice.i.payload.eq(bus.bresp),
                     bus.bready.eq(b_slice.i.ready)]
        ev = self.events.payload
        done_fire = self.done.valid & self.done.ready
        can_emit = ~self.done.valid | self.done.ready
        done_free = ~ev.eob | can_emit
        complete = self.events.valid & (~ev.need_b | b.valid) & done_free
        m.d.comb += [b.ready.eq(self.events.valid & ev.need_b & done_free),
                     self.events.ready.eq(complete)]
        b_fire = b.valid & b.ready

        batch_rows, batch_errors = Signal(16), Signal(16)
        add_row = complete & ev.row_end
        add_err = complete & ev.refused
        m.d.comb += [self.row_done.eq(add_row), self.refused.eq(add_err),
                     self.cause.eq(ev.cause),
                     self.write_err.eq(b_fire & (b.payload != AXIResp.OKAY))]
        with m.If(done_fire):
            m.d.sync += self.done.valid.eq(0)
        batch_end = complete & ev.eob
        # The counts + 1 come from their registers alone, the late handshake selects (timing:
        # it was the carry-in of the adders behind the done payload).
        rows_next = Mux(add_row, batch_rows + 1, batch_rows)
        errors_next = Mux(add_err & ~batch_errors.all(), batch_errors + 1, batch_errors)
        with m.If(batch_end):
            m.d.sync += [self.done.valid.eq(1),
                         self.done.payload.rows.eq(rows_next),
                         self.done.payload.errors.eq(errors_next),
                         batch_rows.eq(0), batch_errors.eq(0)]
        with m.Else():
            m.d.sync += [batch_rows.eq(rows_next), batch_errors.eq(errors_next)]

        # ---- batches in flight ---------------------------------------------------------------
        pending = Signal(16)   # batches begun whose done was not taken yet
        inflight = Signal(16)  # batches begun whose last event has not completed
        # pending takes ``started`` a cycle late (timing: the command handshake, behind the
        # top's direction check, reached pending's carry chain, 9.7 ns); a batch's done comes
        # dozens of cycles after it starts, so pending never goes below 0. ``inflight`` takes
        # it at once: ``drained`` must see a batch before its first event.
        started = Signal()
        m.d.sync += [started.eq(self.started), pending.eq(pending + started - done_fire)]
        # inflight +- 1 come from the register alone, the handshakes select (timing: the
        # command handshake into inflight's carry chain was the 1-lane top's critical path at
        # seed 1, 9.52 ns)
        up, down = inflight + 1, inflight - 1
        m.d.sync += inflight.eq(Mux(self.started, Mux(batch_end, inflight, up),
                                    Mux(batch_end, down, inflight)))
        # inflight == 0, a cycle late (timing: the compare was in the loop through cmd.ready
        # and the top's command FIFOs). It only delays a change of direction by that cycle:
        # the front spends its setup cycles outside IDLE after every command.
        m.d.sync += self.drained.eq(inflight == 0)
        m.d.comb += self.busy.eq(pending != 0)
        return m
