"""fifo_room: a registered "will accept a write next cycle" for SyncFIFOBuffered FIFOs."""
from amaranth.hdl import Cat, Signal

__all__ = ["fifo_room", "fifo_has_room"]


def fifo_has_room(fifos, writes=2):
    """The value `fifo_room` registers: each of ``fifos`` holds at most ``depth - 1 - writes``
    entries, so ``writes`` more writes still fit (for a register that a caller computes from
    it together with other next values: 2 = this cycle's and the next one's)."""
    fifos = fifos if isinstance(fifos, (list, tuple)) else [fifos]
    return Cat(fifo.level <= fifo.depth - 1 - writes for fifo in fifos).all()


def fifo_room(m, fifos, name):
    """A register of ``m``, high while each of ``fifos`` (a ``SyncFIFOBuffered`` of depth >= 4,
    or a list of them) holds at most ``depth - 3`` entries: then a write in the next cycle is
    accepted, whatever this cycle writes. It stands for ``w_rdy`` (of all of them) where the
    FIFO levels would start a long ready path (timing); the FIFOs' last two entries go
    unused."""
    fifos = fifos if isinstance(fifos, (list, tuple)) else [fifos]
    for fifo in fifos:
        if fifo.depth < 4:
            raise ValueError(f"fifo_room needs a FIFO of depth >= 4, not {fifo.depth}")
    room = Signal(init=1, name=f"{name}_room")
    m.d.sync += room.eq(fifo_has_room(fifos))
    return room
