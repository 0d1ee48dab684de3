"""UART receiver and transmitter: 8 data bits, no parity, 1 stop bit, LSB first.

``divisor`` is the number of clock cycles per bit (``round(clock_hz / baud)``, at least 4).
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["UARTRx", "UARTTx"]


def _check_divisor(divisor):
    if not isinstance(divisor, int) or divisor < 4:
        raise ValueError(f"divisor must be an integer >= 4 (clock cycles per bit), not {divisor!r}")


class UARTRx(wiring.Component):
    """``rx`` pin -> ``o`` bytes.

    ``rx`` is asynchronous: two flip-flops synchronise it (two cycles of latency). A falling
    edge on the idle line starts a frame; each bit is sampled once, ``divisor // 2`` cycles
    into it, counted from the edge. A start bit that is high again at its middle is a glitch
    and ignored. At the stop bit's middle ``o.valid`` rises for exactly one cycle with
    ``o.payload`` (stable until the next frame's first data bit); a UART cannot be held off, so
    ``o.ready`` only decides ``overrun``, a one-cycle pulse when ``o.valid`` meets ``o.ready``
    low (that byte is lost to the consumer). A stop bit of 0 drops the byte and pulses
    ``frame_error`` instead; reception resumes at the next falling edge, so a line held low
    (break) yields one error, not a stream of bytes.

    Baud mismatch: with d = divisor and s = d // 2, a sender bit period c (cycles) is decoded
    for every edge phase when (9d + s + 1) / 10 <= c <= (9d + s) / 9 (the stop bit's sample
    must fall inside it; the edge is seen up to one cycle late): -4.8%..+5.3% at d = 25,
    -4.2%..+5.6% at d = 12, but only -2.5%..+5.6% at d = 4, where one cycle is a quarter bit.
    """

    def __init__(self, divisor):
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({
            "rx": In(1, init=1),
            "o": Out(stream.Signature(8)),
            "overrun": Out(1),
            "frame_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        # init=1: an idle line, so reset produces no false start edge.
        line = Signal(init=1)
        prev = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, line, init=1, stages=2)
        m.d.sync += prev.eq(line)

        timer = Signal(range(self.divisor))
        tick = timer == 0
        with m.If(~tick):
            m.d.sync += timer.eq(timer - 1)
        bits = Signal(range(8))
        shift = Signal(8)
        m.d.sync += [self.o.valid.eq(0), self.frame_error.eq(0)]
        m.d.comb += [self.o.payload.eq(shift), self.overrun.eq(self.o.valid & ~self.o.ready)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(prev & ~line):
                    m.d.sync += timer.eq(self.divisor // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(tick):
                    m.d.sync += [timer.eq(self.divisor - 1), bits.eq(0)]
                    m.next = "IDLE"
                    with m.If(~line):
                        m.next = "DATA"
            with m.State("DATA"):
                with m.If(tick):
                    m.d.sync += [timer.eq(self.divisor - 1), shift.eq(Cat(shift[1:], line)),
                                 bits.eq(bits + 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(tick):
                    # The payload register keeps the byte shifted in; valid marks it new.
                    m.d.sync += [self.o.valid.eq(line), self.frame_error.eq(~line)]
                    m.next = "IDLE"
        return m


class UARTTx(wiring.Component):
    """``i`` bytes -> ``tx`` pin (registered; idle and reset high).

    ``i.ready`` is high while idle and in the last cycle of a stop bit, so a byte offered back
    to back starts its start bit right after the previous stop bit: 10 bit times per byte.
    A taken byte's start bit begins on the next cycle.
    """

    def __init__(self, divisor):
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({
            "i": In(stream.Signature(8)),
            "tx": Out(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        bits = Signal(range(11))       # bits of the frame still to send, incl. the current one
        shift = Signal(9, init=~0)     # data bits then the stop bit; refills with 1 (idle)
        tick = timer == 0
        m.d.comb += self.i.ready.eq((bits == 0) | ((bits == 1) & tick))
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [self.tx.eq(0), shift.eq(Cat(self.i.payload, 1)), bits.eq(10),
                         timer.eq(self.divisor - 1)]
        with m.Elif(bits != 0):
            with m.If(tick):
                m.d.sync += [self.tx.eq(shift[0]), shift.eq(Cat(shift[1:], 1)), bits.eq(bits - 1),
                             timer.eq(self.divisor - 1)]
            with m.Else():
                m.d.sync += timer.eq(timer - 1)
        return m
