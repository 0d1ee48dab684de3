"""OutputQueue: a stream FIFO whose output is a register, for pipelines that never stall.

Used behind the PopularityCAM's lookup pipeline and the ColdKeySet's: see
`OutputQueue.behind_pipeline`.
"""
from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["OutputQueue"]


class OutputQueue(wiring.Component):
    """Stream FIFO whose output is a register: ``i`` -> ``o`` (payload ``shape``), in order.

    An entry that enters an empty queue is on ``o`` in the next cycle, as behind a plain
    pipeline register; entries behind it wait in ``depth`` words of memory with an
    asynchronous read (LUT RAM on ECP5). It holds ``depth + 1`` entries; ``i.ready`` = not
    full, from registers only. One entry in and one out per cycle sustained.
    """

    def __init__(self, shape, depth):
        self.depth = depth
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    @classmethod
    def behind_pipeline(cls, m, o, depth, taken):
        """An OutputQueue of ``depth`` driving stream ``o``, for a pipeline that never stalls:
        returns (queue, room). ``room`` (a register) is high while fewer than ``depth + 1``
        beats are accepted (``taken``) and not yet delivered on ``o``, so a beat taken while
        it is high always finds space, whatever the pipeline's latency below ``depth``."""
        m.submodules.queue = queue = cls(o.payload.shape(), depth)
        wiring.connect(m, queue.o, wiring.flipped(o))
        capacity = depth + 1
        outstanding = Signal(range(capacity + 1))
        room = Signal(init=1)
        given = o.valid & o.ready
        # One step up or down at a time, with both outcomes computed from registers (timing).
        with m.If(taken & ~given):
            m.d.sync += [outstanding.eq(outstanding + 1), room.eq(outstanding < capacity - 1)]
        with m.Elif(given & ~taken):
            m.d.sync += [outstanding.eq(outstanding - 1), room.eq(1)]
        return queue, room

    def elaborate(self, platform):
        m = Module()
        m.submodules.storage = storage = Memory(shape=self.i.payload.shape(), depth=self.depth,
                                                init=[])
        write, read = storage.write_port(), storage.read_port(domain="comb")
        produce, consume = Signal(range(self.depth)), Signal(range(self.depth))
        stored = Signal(range(self.depth + 1))
        # `stored == 0` and `stored == depth` as registers: compared combinationally, they
        # went into every payload bit's next-state function (ABC9 merged them: 600 LUT4 and
        # 3-level wide-LUT trees for a 70-bit queue, against 100 LUT4 this way).
        empty, full = Signal(init=1), Signal()
        # no reset for the payload: o.valid says whether it holds an entry
        payload = Signal.like(self.o.payload, name="payload", reset_less=True)
        m.d.comb += self.o.payload.eq(payload)
        load = ~self.o.valid | self.o.ready      # the output register takes an entry
        push = self.i.valid & self.i.ready
        pop = load & ~empty
        bypass = load & empty                    # the input goes straight to the output
        m.d.comb += [
            self.i.ready.eq(~self.o.valid | ~full),
            write.addr.eq(produce), write.data.eq(self.i.payload), write.en.eq(push & ~bypass),
            read.addr.eq(consume),
        ]

        def step(pointer):
            return Mux(pointer == self.depth - 1, 0, pointer + 1)

        with m.If(write.en):
            m.d.sync += produce.eq(step(produce))
        with m.If(pop):
            m.d.sync += [consume.eq(step(consume)), payload.eq(read.data)]
        with m.Elif(bypass):
            m.d.sync += payload.eq(self.i.payload)
        with m.If(load):
            m.d.sync += self.o.valid.eq(pop | push)
        # one step up or down at a time, both outcomes compared from registers
        with m.If(write.en & ~pop):
            m.d.sync += [stored.eq(stored + 1), empty.eq(0), full.eq(stored == self.depth - 1)]
        with m.Elif(pop & ~write.en):
            m.d.sync += [stored.eq(stored - 1), empty.eq(stored == 1), full.eq(0)]
        return m
