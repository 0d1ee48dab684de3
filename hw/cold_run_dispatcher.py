"""ColdRunDispatcher: a lane beat's cold lookups to the ColdKeySet, in runs across beats."""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .banked_ring import BankedRing
from .onehot import compact, popcount, shift_in

__all__ = ["ColdRunDispatcher", "answer_layout"]


def answer_layout(lanes):
    """A run's answers {count, repeat}: see `ColdRunDispatcher`."""
    return data.StructLayout({"count": range(lanes + 1),
                              "repeat": data.ArrayLayout(bits_for(lanes), lanes)})


class ColdRunDispatcher(wiring.Component):
    """Queues cold lookups and sends them on in runs of up to ``lanes`` (L) whose keys lie in
    distinct partitions of the cold-key set, a key repeated from the L cold lookups before it
    taking no partition.

    ``w_count`` (0 .. L) entries ``w_data[0 .. w_count - 1]`` {key, part, close, dummy} are
    written in one cycle, in order, while ``w_room`` is high (a register: room for L). An
    entry is a cold lookup (``key`` in partition ``part``) or, with ``dummy``, a batch end that
    has none; ``close`` marks a batch's last entry. A cold lookup whose key equals one of the L
    cold lookups before it in its batch is a repeat (`hotline.contract.config.repeat_window`):
    it takes the answer of the latest of them. ``o`` {key, insert, eob, answers} (key and
    insert per lane) is a ColdKeySet beat: per cycle the longest run of the queue's first L
    entries, in order, whose keys other than repeats lie in distinct partitions, ending at a
    ``close`` entry. Its keys other than repeats in lanes 0 .. (``insert``); ``eob`` = it ends
    with a ``close`` entry; ``answers`` {count, repeat} (`answer_layout`): ``count`` = its
    entries (each takes one answer, a dummy too), and per entry ``repeat`` = how many cold
    lookups back its copy is (1 .. L), 0 for an entry that takes the next lane's answer. Runs
    cross beat boundaries, not batch boundaries, so a beat's keys that share a partition cost
    a cycle only when the next keys cannot fill it. What a run holds depends on when its
    entries arrived; the keys reach the cold set in order, and repeats are found, either way.

    Timing: an entry can leave one cycle after its write at the earliest; the run is chosen
    from a window of L registered entries and the last L keys sent, and the window is
    refilled from the queue (LUT RAM) in the cycle a run leaves.
    """

    def __init__(self, key_width, part_width, lanes, depth):
        self.lanes, self.depth = lanes, depth
        self.entry_layout = data.StructLayout({"key": key_width, "part": part_width,
                                               "close": 1, "dummy": 1})
        self.answer_layout = answer_layout(lanes)
        super().__init__({
            "w_count": In(range(lanes + 1)),
            "w_data": In(data.ArrayLayout(self.entry_layout, lanes)),
            "w_room": Out(1, init=1),
            "o": Out(stream.Signature(data.StructLayout({
                "key": data.ArrayLayout(key_width, lanes), "insert": lanes, "eob": 1,
                "answers": self.answer_layout}))),
        })

    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        m.submodules.queue = queue = BankedRing(self.entry_layout, self.depth, L, reads=L)
        rp = Signal(range(self.depth))
        level = Signal(range(self.depth + 1))
        win = [Signal(self.entry_layout, name=f"win{k}") for k in range(L)]
        win_n = Signal(range(L + 1))
        # The batch's last L cold lookups sent, latest first.
        sent_key = [Signal.like(win[0].key, name=f"sent_key{j}") for j in range(L)]
        sent_valid = Signal(L)

        # Entry k repeats the latest equal key among the L cold lookups before it: the window's
        # entries before it, then the ones sent. (A dummy or a batch end before it in the
        # window ends the run first.)
        repeat, copies = [], []
        for k in range(L):
            before = [(win[k - d].key, C(1, 1)) if d <= k else
                      (sent_key[d - k - 1], sent_valid[d - k - 1]) for d in range(1, L + 1)]
            equal = [valid & (key == win[k].key) for key, valid in before]
            distance = C(0, bits_for(L))
            for d in reversed(range(1, L + 1)):
                distance = Mux(equal[d - 1], d, distance)
            rep = Signal(bits_for(L), name=f"repeat{k}")
            m.d.comb += rep.eq(Mux(win[k].dummy, 0, distance))
            repeat.append(rep)
            copies.append(rep != 0)
        # The run: entry k joins while the ones before it do not close the batch and it is a
        # dummy, a repeat, or its key's partition differs from the others' that take one.
        accept = []
        for k in range(L):
            ok = win_n > k
            if k:
                clash = Cat(~copies[i] & (win[i].part == win[k].part) for i in range(k)).any()
                ok = accept[-1] & ok & ~win[k - 1].close & (win[k].dummy | copies[k] | ~clash)
            accept.append(ok)
        count = Signal(range(L + 1))
        m.d.comb += count.eq(popcount(accept))
        lanes = [accept[k] & ~copies[k] & ~win[k].dummy for k in range(L)]
        keys, n_keys = compact(m, lanes, [win[k].key for k in range(L)], "lane_key")
        o = self.o.payload
        m.d.comb += [self.o.valid.eq(accept[0]), o.answers.count.eq(count),
                     o.eob.eq(Cat(accept[k] & win[k].close for k in range(L)).any())]
        for k in range(L):
            m.d.comb += [o.key[k].eq(keys[k]), o.insert[k].eq(n_keys > k),
                         o.answers.repeat[k].eq(Mux(accept[k], repeat[k], 0))]

        # The window shifts by the run that left and refills from the queue's head; the run's
        # keys become the latest sent (none after a batch end).
        fire = self.o.valid & self.o.ready
        taken = Mux(fire, count, 0)
        shift_in(m, sent_key, [w.key for w in win], taken)
        shift_in(m, list(sent_valid), [~w.dummy for w in win], taken)
        with m.If(fire & o.eob):
            m.d.sync += sent_valid.eq(0)
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
