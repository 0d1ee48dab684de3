"""ColdRunDispatcher: a lane beat's cold lookups to the ColdKeySet, in runs across beats."""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .banked_ring import BankedRing

__all__ = ["ColdRunDispatcher"]


class ColdRunDispatcher(wiring.Component):
    """Queues cold lookups and sends them on in runs of up to ``lanes`` (L) whose keys lie in
    distinct partitions of the cold-key set.

    ``w_count`` (0 .. L) entries ``w_data[0 .. w_count - 1]`` {key, part, close, dummy} are
    written in one cycle, in order, while ``w_room`` is high (a register: room for L). An
    entry is a cold lookup (``key`` in partition ``part``) or, with ``dummy``, a batch end that
    has none; ``close`` marks a batch's last entry. ``o`` {key, insert, eob, count} (key and
    insert per lane) is a ColdKeySet beat: per cycle the longest run of the queue's first L
    entries, in order, whose keys' partitions are distinct, ending at a ``close`` entry; the
    run's keys in lanes 0 .. (``insert``), ``eob`` = it ends with a ``close`` entry, ``count``
    = its entries (a dummy counts: the batch end still takes one answer). Runs cross beat
    boundaries, not batch boundaries, so a beat's keys that share a partition cost a cycle only
    when the next keys cannot fill it. What a run holds depends on when its entries arrived;
    the keys reach the cold set in order either way.

    Timing: an entry can leave one cycle after its write at the earliest; the run is chosen
    from a window of L registered entries, refilled from the queue (LUT RAM) in the cycle a
    run leaves.
    """

    def __init__(self, key_width, part_width, lanes, depth):
        self.lanes, self.depth = lanes, depth
        self.entry_layout = data.StructLayout({"key": key_width, "part": part_width,
                                               "close": 1, "dummy": 1})
        super().__init__({
            "w_count": In(range(lanes + 1)),
            "w_data": In(data.ArrayLayout(self.entry_layout, lanes)),
            "w_room": Out(1, init=1),
            "o": Out(stream.Signature(data.StructLayout({
                "key": data.ArrayLayout(key_width, lanes), "insert": lanes, "eob": 1,
                "count": range(lanes + 1)}))),
        })

    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        m.submodules.queue = queue = BankedRing(self.entry_layout, self.depth, L, reads=L)
        rp = Signal(range(self.depth))
        level = Signal(range(self.depth + 1))
        win = [Signal(self.entry_layout, name=f"win{k}") for k in range(L)]
        win_n = Signal(range(L + 1))

        # The run: entry k joins while the ones before it do not close the batch and its key's
        # partition differs from theirs (a dummy has no key, and comes last in its batch).
        accept = []
        for k in range(L):
            ok = win_n > k
            if k:
                clash = Cat(win[i].part == win[k].part for i in range(k)).any()
                ok = accept[-1] & ok & ~win[k - 1].close & (win[k].dummy | ~clash)
            accept.append(ok)
        count = Signal(range(L + 1))
        m.d.comb += count.eq(sum(accept, C(0, bits_for(L))))
        o = self.o.payload
        m.d.comb += [self.o.valid.eq(accept[0]), o.count.eq(count),
                     o.eob.eq(Cat(accept[k] & win[k].close for k in range(L)).any())]
        for k in range(L):
            m.d.comb += [o.key[k].eq(win[k].key), o.insert[k].eq(accept[k] & ~win[k].dummy)]

        # The window shifts by the run that left and refills from the queue's head.
        taken = Mux(self.o.valid & self.o.ready, count, 0)
        remain = Signal(range(L + 1))
        fill = Signal(range(L + 1))
        m.d.comb += [remain.eq(win_n - taken),
                     fill.eq(Mux(level < L - remain, level, L - remain))]
        for k in range(L):
            m.d.comb += queue.r_pos[k].eq(rp + k)
        padded = win + [C(0, self.entry_layout.size)] * L
        heads = [queue.r_data[k] for k in range(L)]
        for k in range(L):
            from_win = Array(padded[k:k + L + 1])[taken]
            from_queue = Array(heads[:k + 1])[(k - remain)[:bits_for(L)]] if k else heads[0]
            m.d.sync += win[k].eq(Mux(k < remain, from_win, from_queue))
        written = Mux(self.w_room, self.w_count, 0)
        after = level + written - fill
        m.d.comb += [queue.w_count.eq(written), queue.w_data.eq(self.w_data)]
        m.d.sync += [rp.eq(rp + fill), level.eq(after), win_n.eq(remain + fill),
                     self.w_room.eq(after <= self.depth - L)]
        return m
