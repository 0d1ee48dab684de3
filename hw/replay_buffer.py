"""ReplayBuffer: a FIFO whose reads can be replayed until the reader acknowledges them.

The host link hands out result beats in responses that may be lost; a lost response is asked
for again under the same sequence number and must carry the same beats. So beats leave the
buffer only when the *next* response starts.

- ``i`` In stream: beats enter while fewer than ``depth`` are held (sent-but-unacknowledged
  beats count).
- ``begin`` (strobe) starts a response: with ``replay`` = 0 the previous response's beats are
  freed and the response takes every beat held now; with ``replay`` = 1 it takes the previous
  response's beats again. ``count`` (valid from the cycle after ``begin``) is its beat count.
- ``o`` Out stream: the response's beats, in order; ``o.valid`` drops after ``count`` beats.
  Latency: 2 cycles from ``begin`` to the first beat, then one beat per cycle.
- ``clear`` (strobe, not with ``begin``): every beat held is dropped (a new session).
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["ReplayBuffer"]


class ReplayBuffer(wiring.Component):
    def __init__(self, width, depth):
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two >= 2, not {depth}")
        self.width, self.depth = width, depth
        bits = depth.bit_length()  # one extra bit tells full from empty
        super().__init__({
            "i": In(stream.Signature(width)),
            "begin": In(1), "replay": In(1), "clear": In(1), "count": Out(bits),
            "o": Out(stream.Signature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        bits = self.depth.bit_length()
        m.submodules.mem = mem = Memory(shape=self.width, depth=self.depth, init=[])
        wr, rd = mem.write_port(), mem.read_port()
        head = Signal(bits)   # next write
        start = Signal(bits)  # first beat not yet acknowledged (the last response's first)
        end = Signal(bits)    # one past the last response's last beat
        cursor = Signal(bits)

        m.d.comb += [self.i.ready.eq((head - start)[:bits] != self.depth),
                     wr.addr.eq(head[:-1]), wr.data.eq(self.i.payload),
                     wr.en.eq(self.i.valid & self.i.ready),
                     self.count.eq(end - start)]
        with m.If(wr.en):
            m.d.sync += head.eq(head + 1)

        # Read: the port holds its output while disabled, so a stalled beat stays put.
        o_valid = Signal()
        issue = (cursor != end) & (~o_valid | self.o.ready)
        m.d.comb += [rd.addr.eq(cursor[:-1]), rd.en.eq(issue),
                     self.o.payload.eq(rd.data), self.o.valid.eq(o_valid)]
        with m.If(self.o.ready):
            m.d.sync += o_valid.eq(0)
        with m.If(issue):
            m.d.sync += [cursor.eq(cursor + 1), o_valid.eq(1)]
        with m.If(self.begin):
            m.d.sync += o_valid.eq(0)
            with m.If(self.replay):
                m.d.sync += cursor.eq(start)
            with m.Else():
                m.d.sync += [start.eq(end), end.eq(head), cursor.eq(end)]
        with m.If(self.clear):
            m.d.sync += [o_valid.eq(0), start.eq(head + wr.en), end.eq(head + wr.en),
                         cursor.eq(head + wr.en)]
        return m
