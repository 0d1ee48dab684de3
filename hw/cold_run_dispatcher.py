"""ColdRunDispatcher: a lane beat's cold lookups to the ColdKeySet, in runs across beats."""
from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .lib.banked_ring import BankedRing
from .lib.onehot import compact, popcount, shift_in

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

    Timing: an entry is on ``o`` ``LATENCY`` (4) cycles after its write at the earliest. The
    entries written pass two register stages in front of the queue, where their repeats are
    found (the key matches with the entries before them in the first stage and the last L that
    left it, then the latest match): a repeat is a property of the sequence, not of the runs,
    so the run choice compares no keys. The run is chosen from a window of L registered
    entries, and the window is refilled from the queue (LUT RAM) in the cycle a run leaves.
    ``w_room`` is registered from the queue and the stages alone, keeping room for the write in
    that cycle and the next (timing: the write count comes late, and the entries leaving the
    queue would bring in the run choice), so up to 2 L entries of the ``depth`` (>= 3 L) may be
    left unused.
    """

    LATENCY = 4   # cycles from an entry's write to its run on ``o``, at the earliest

    def __init__(self, key_width, part_width, lanes, depth):
        if depth < 3 * lanes:
            raise ValueError(f"ColdRunDispatcher depth {depth} is below 3 x {lanes} lanes: "
                             "it keeps room for two writes of L entries")
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
        rb = bits_for(L)
        queued_layout = data.StructLayout({**self.entry_layout.members, "repeat": rb})
        m.submodules.queue = queue = BankedRing(queued_layout, self.depth, L, reads=L)

        # Two stages in front of the queue find the repeats. Entry k repeats the latest equal
        # key among the L cold lookups before it in its batch: the entries before it in the
        # first stage, then the last L that left that stage (``hist``, latest first; none
        # after a batch end). The first stage registers which of them match (``matches``),
        # the second picks the latest (timing: the key compares and the pick, then the
        # queue's bank select, were one path into the queue's LUT RAM).
        s_count = Signal(range(L + 1))
        stage = [Signal(self.entry_layout, name=f"stage{k}") for k in range(L)]
        hist_key = [Signal.like(stage[0].key, name=f"hist_key{j}") for j in range(L)]
        hist_valid = Signal(L)
        written = Mux(self.w_room, self.w_count, 0)
        m.d.sync += [s_count.eq(written), *(stage[k].eq(self.w_data[k]) for k in range(L))]
        close = [stage[k].close & (s_count > k) for k in range(L)]
        m_count = Signal(range(L + 1))
        matched = [Signal(self.entry_layout, name=f"matched{k}") for k in range(L)]
        matches = [Signal(L, name=f"matches{k}") for k in range(L)]   # bit d - 1: d back
        m.d.sync += [m_count.eq(s_count), *(matched[k].eq(stage[k]) for k in range(L))]
        for k in range(L):
            for d in range(1, L + 1):
                if d <= k:   # in the stage: valid if no batch end from it up to k
                    key, valid = (stage[k - d].key,
                                  ~stage[k - d].dummy & ~Cat(close[k - d:k]).any())
                else:
                    key, valid = (hist_key[d - k - 1],
                                  hist_valid[d - k - 1] & ~Cat(close[:k]).any())
                m.d.sync += matches[k][d - 1].eq(~stage[k].dummy & valid & (key == stage[k].key))
        queued = []
        for k in range(L):
            distance = C(0, rb)
            for d in reversed(range(1, L + 1)):
                distance = Mux(matches[k][d - 1], d, distance)
            entry = Signal(queued_layout, name=f"queued{k}")
            m.d.comb += [entry.eq(matched[k]), entry.repeat.eq(distance)]
            queued.append(entry)
        m.d.comb += [queue.w_count.eq(m_count), *(queue.w_data[k].eq(queued[k])
                                                  for k in range(L))]
        # The history takes the stage's keys; an entry at or before a batch end in the stage
        # is not valid, nor what the history held.
        shift_in(m, hist_key, [e.key for e in stage], s_count)
        shift_in(m, list(hist_valid), [~stage[k].dummy & ~Cat(close[k:]).any()
                                       for k in range(L)], s_count, keep=~Cat(close).any())

        # The queue's read positions rp + k, each its own register (timing: no adder between
        # them and the LUT RAM's read address).
        rp = [Signal(range(self.depth), name=f"rp{k}", init=k) for k in range(L)]
        level = Signal(range(self.depth + 1))
        win = [Signal(queued_layout, name=f"win{k}") for k in range(L)]
        win_n = Signal(range(L + 1))
        copies = [win[k].repeat != 0 for k in range(L)]
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
                         o.answers.repeat[k].eq(Mux(accept[k], win[k].repeat, 0))]

        # The window shifts by the run that left and refills from the queue's head.
        fire = self.o.valid & self.o.ready
        taken = Mux(fire, count, 0)
        remain = Signal(range(L + 1))
        fill = Signal(range(L + 1))
        # What depends on the run is a select among values computed from registers alone
        # (timing: the run choice, then a compare and adders, was the path into rp and level).
        below = Array(level < j for j in range(L + 1))          # level < j
        m.d.comb += [remain.eq(win_n - taken),
                     fill.eq(Mux(below[L - remain], level, L - remain))]
        for k in range(L):
            m.d.comb += queue.r_pos[k].eq(rp[k])
        padded = win + [C(0, queued_layout.size)] * L
        heads = [queue.r_data[k] for k in range(L)]
        for k in range(L):
            from_win = Array(padded[k:k + L + 1])[taken]
            from_queue = Array(heads[:k + 1])[(k - remain)[:bits_for(L)]] if k else heads[0]
            m.d.sync += win[k].eq(Mux(k < remain, from_win, from_queue))
        ahead = [rp[0] + j for j in range(2 * L)]
        m.d.sync += [*(rp[k].eq(Array(ahead[k:k + L + 1])[fill]) for k in range(L)),
                     level.eq(Array(level + m_count - f for f in range(L + 1))[fill]),
                     win_n.eq(remain + fill)]
        # Room for the stages and two writes (the one in this cycle, whose count is not added:
        # it comes late, through the caller's hit / miss split; and the next one).
        m.d.sync += self.w_room.eq(level + s_count + m_count <= self.depth - 2 * L)
        return m
