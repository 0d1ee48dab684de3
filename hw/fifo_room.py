"""fifo_room: a registered "will accept a write next cycle" for a SyncFIFOBuffered."""
from amaranth.hdl import Signal

__all__ = ["fifo_room"]


def fifo_room(m, fifo, name):
    """A register of ``m``, high while ``fifo`` (a ``SyncFIFOBuffered`` of depth >= 4) holds at
    most ``depth - 3`` entries: then a write in the next cycle is accepted, whatever this cycle
    writes. It stands for ``w_rdy`` where the FIFO level would start a long ready path
    (timing); the FIFO's last two entries go unused."""
    if fifo.depth < 4:
        raise ValueError(f"fifo_room needs a FIFO of depth >= 4, not {fifo.depth}")
    room = Signal(init=1, name=f"{name}_room")
    m.d.sync += room.eq(fifo.level <= fifo.depth - 3)
    return room
