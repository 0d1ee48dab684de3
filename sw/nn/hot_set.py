"""When the hotline placement's hot set changes (`HotSetSchedule`, for `hotline train` and
`hotline.nn.hotline_store.HotlineStore`): learned by the device's AccessLearner over the first
steps (``--hot-set learn``) and refreshed when popularity drifts (``--refresh
auto|every:N|off``). Steps are global (over epochs); a window is ``--learn-window`` samples in
whole batches (the store: ``learn_window`` batches).

- ``learn``: the learner counts steps 0 .. W - 1 (trained with an empty hot set: every row
  comes through the DMA, so the trajectory is baseline's); its top-K loads before step W.
- ``every:N``: a new set loads N steps after the last load, learned over the W steps before.
- ``auto``: the learner counts all the time, restarted every window. The hot-lookup share of
  the first window after a load (after the profiling window for an exact set) is the
  reference; when a window's share is more than ``REFRESH_MARGIN`` below it, the learner's set
  of that window loads two steps later (the next step may be in flight already).
"""
from hotline.contract.errors import HotlineError

__all__ = ["HotSetSchedule", "parse_refresh", "REFRESH_MARGIN", "LEARN_FRACTION"]

#: auto: refresh when a window's hot-lookup share falls this far below the reference (the
#: share then stays within about this plus one window's decay of an exact re-plan)
REFRESH_MARGIN = 0.01
#: --hot-set learn: the default learning window, as a fraction of the train samples (FAE
#: profiled 5%; the learner needs a few times its K in lookups)
LEARN_FRACTION = 0.1


def parse_refresh(text) -> tuple[str, int]:
    """``off`` | ``auto`` | ``every:N`` (N steps) -> (kind, N); a one-line error otherwise."""
    t = str(text).strip().lower()
    if t in ("off", "auto"):
        return t, 0
    kind, _, n = t.partition(":")
    if kind == "every" and n.isdigit() and int(n) > 0:
        return "every", int(n)
    raise HotlineError(f"--refresh {text!r}: expected off, auto or every:N (N steps, N > 0)")


class HotSetSchedule:
    """Which steps the learner counts and before which step a new hot set loads.

    The trainer calls `learns(step)` before pushing batch ``step`` (learner_start), `loads`
    before training a step (learner_stop, load; no batch may be in flight then, so it does not
    prefetch a step that `loads`), `observe` after each step with its hit flags, and `loaded`
    after a load. ``window``: the learner window in steps.
    """

    def __init__(self, window, refresh="off", learn_first=False, profiled=0):
        self.window = int(window)
        self.kind, self.every = parse_refresh(refresh)
        if self.kind == "every" and self.every < self.window:
            raise HotlineError(f"--refresh every:{self.every} is shorter than the learner "
                               f"window ({self.window} steps of --learn-window)")
        self.start = self.load = self.last_load = self.reference = None
        self.settle = 0       # auto: no reference from a window ending before this step
        self.acc = [0, 0]     # hits, lookups of the window being watched (auto)
        self.shares = []      # hot-lookup share per step
        self.popular_shares = []  # popular-sample share per step
        self.records = []     # one dict per learned set loaded (the trainer's)
        if learn_first:
            self.start, self.load = 0, self.window
        else:
            self.loaded(0)
            self.settle = profiled   # the exact set's own window is no reference

    def learns(self, step) -> bool:
        return self.start == step

    def loads(self, step) -> bool:
        return self.load == step

    def loaded(self, step) -> None:
        """A hot set loaded before ``step``: plan the next one."""
        self.last_load, self.reference, self.acc = step, None, [0, 0]
        self.start = self.load = None
        self.settle = step
        if self.kind == "every":
            self.start, self.load = step + self.every - self.window, step + self.every
        elif self.kind == "auto":
            self.start = step

    def observe(self, step, hits, lookups, popular, samples) -> None:
        """Step ``step`` trained; ``hits`` of its ``lookups`` were hot, ``popular`` of its
        ``samples`` popular (every lookup hot)."""
        self.shares.append(hits / lookups if lookups else 0.0)
        self.popular_shares.append(popular / samples if samples else 0.0)
        if self.kind != "auto" or self.load is not None or self.last_load is None:
            return
        self.acc[0] += hits
        self.acc[1] += lookups
        if (step + 1 - self.last_load) % self.window:
            return
        share = self.acc[0] / self.acc[1] if self.acc[1] else 0.0
        self.acc = [0, 0]
        # step + 1 may be pushed already (prefetched while this step trained): the learner
        # restarts, or its set loads, before step + 2
        if self.reference is None:
            if step + 1 >= self.settle + self.window:
                self.reference = share
            self.start = step + 2
        elif share < self.reference - REFRESH_MARGIN:
            self.load = step + 2
        else:
            self.start = step + 2

    def resume_at(self, step) -> None:
        """Continue at ``step`` from a checkpoint: a learner window under way restarts there
        (the counts before the checkpoint are not in it), a whole window if it was to load
        now."""
        if self.start is not None and self.start < step:
            self.start = step
            if self.load is not None and self.load <= step:
                self.load = step + self.window

    def state(self) -> dict:
        return {k: getattr(self, k) for k in ("window", "kind", "every", "start", "load",
                                              "last_load", "reference", "acc", "shares",
                                              "popular_shares",
                                              "records", "settle")}

    @classmethod
    def from_state(cls, state) -> "HotSetSchedule":
        s = cls.__new__(cls)
        for k, v in state.items():
            setattr(s, k, list(v) if isinstance(v, list) else v)
        return s
