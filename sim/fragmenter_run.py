"""Run the Fragmenter RTL (PopularityCAM + ColdKeySet) over a whole index stream.

`FragmenterSim(config, backend)` builds the RTL once (Verilator or Icarus through the
file-driven `StreamHarness`, or the Amaranth simulator); `run(...)` loads the hot set through
the CAM command port (insert commands in hot-set rank order, exactly as the model places it),
streams every lookup with sample/batch marks, and returns the decoded output streams and the
cycle count of the lookup phase. `compare` checks them beat by beat against a `FragmentRun`
of the bit-accurate model.
"""
import functools
import time
from pathlib import Path

import numpy as np
from amaranth.sim import Simulator

from hotline.contract.cam import CAMOp
from hotline.contract.config import repeat_window
from hotline.contract.streams import LANE_STREAMS, lane_unpack, pack, pack_lookups, \
    sample_widths, unpack
from hotline.hw.cold_key_set import ColdKeySet
from hotline.hw.fragmenter import COUNTERS, Fragmenter
from hotline.hw.popularity_cam import PopularityCAM
from hotline.model.cold_key_set import ColdKeySetModel, latest_copy

from . import streams
from .harness import StreamHarness

OUTPUTS = ("resp", "moves", "remap", "popular", "non_popular", "cold_keys", "batches")
# The outputs in lane beats (their entries carry "beat"): the top's, and cold_keys.
LANE_OUTPUTS = LANE_STREAMS[1:] + ("cold_keys",)
BACKENDS = ("verilator", "icarus", "amaranth")


class RTLMismatch(AssertionError):
    """The RTL disagrees with the model; the message names the stream and the first beat."""


class FragmenterSim:
    """The Fragmenter RTL on one backend; build once, run many streams."""

    def __init__(self, config, backend="verilator", build_dir="build/rtl", waves=False):
        if backend not in BACKENDS:
            raise ValueError(f"unknown RTL backend {backend!r}")
        self.config, self.backend = config, backend
        self.dut = Fragmenter(**config.fragmenter_kwargs())
        self.layouts = {n: getattr(self.dut, n).payload.shape() for n in ("lookups", "cmd") + OUTPUTS}
        tag = "_".join(str(v) for v in config.as_dict().values()) + ("_waves" if waves else "")
        # Absolute: the harness runs the simulator in a directory of its own.
        self.build_dir = Path(build_dir).resolve() / f"fragmenter_{backend}_{tag}"
        self.harness = None
        if backend != "amaranth":
            self.harness = StreamHarness(self.dut, ["cmd", "lookups"], list(OUTPUTS), self.build_dir,
                                         backend, phases=[["cmd"], ["lookups"]],
                                         drain=4 * config.cam_max_kicks + 64, waves=waves)

    @property
    def waves_file(self):
        """The waveform of the last run (harness backends built with ``waves``)."""
        return self.harness.run_dir / "waves.vcd" if self.harness else None

    @property
    def build_seconds(self):
        return self.harness.build_seconds if self.harness else 0.0

    @property
    def build_reused(self):
        """Whether the simulator build came from the cache (`hotline.sim.runner.cached_build`)."""
        return bool(self.harness and self.harness.build_reused)

    def run(self, insert_keys, keys, sample_offsets, batch_size, busy_in=0.0, busy_out=0.0,
            progress=None, expect=None, stamps=None, counters=None, timeout=None):
        """Returns ({stream: decoded fields}, lookup-phase cycles, wall seconds).

        ``expect`` ({stream: beat count}) is needed by the Amaranth backend only; there,
        ``stamps`` (a dict) gets {stream: the cycle of each of its beats}, and ``counters``
        (a dict) the Fragmenter's counters after the last beat. ``timeout``: seconds the HDL
        simulator may run (`HarnessError` past them).
        """
        cmd = pack(self.layouts["cmd"], op=np.full(len(insert_keys), CAMOp.INSERT.value),
                   key=np.asarray(insert_keys, np.uint64))
        lookups = pack_lookups(self.layouts["lookups"], keys, sample_offsets, batch_size)
        if self.harness:
            raw, cycles, seconds = self.harness.run(
                {"cmd": cmd.tolist(), "lookups": lookups}, busy_in, busy_out,
                progress=progress, watch="remap", timeout=timeout)
        else:
            raw, cycles, seconds = self._run_amaranth(cmd.tolist(), lookups, expect,
                                                      busy_in, busy_out, stamps, counters)
        return {n: decode(self.layouts[n], raw[n], n) for n in OUTPUTS}, cycles, seconds

    def _run_amaranth(self, cmd, lookups, expect, busy_in, busy_out, stamps=None,
                      counters=None):
        dut = self.dut
        sim = Simulator(dut)
        sim.add_clock(1e-8)
        raw = {n: [] for n in OUTPUTS}
        clock = {"now": 0, "start": 0}
        limit = 40 * (len(cmd) + len(lookups)) + 4 * self.config.cold_capacity + 10_000

        async def phases(ctx):
            await streams.put(ctx, dut.cmd, cmd, busy_in, seed=1)
            while len(raw["resp"]) < len(cmd):
                await ctx.tick()
            clock["start"] = clock["now"]
            await streams.put(ctx, dut.lookups, lookups, busy_in, seed=2)

        async def count_cycles(ctx):
            async for _ in ctx.tick():
                clock["now"] += 1

        async def read_counters(ctx):
            while any(len(raw[n]) < expect[n] for n in OUTPUTS):
                await ctx.tick()
            await ctx.tick().repeat(4)   # the counters lag their events (lagged_count)
            counters.update({n: ctx.get(getattr(dut.counters, n)) for n in COUNTERS})

        sim.add_testbench(phases)
        sim.add_process(count_cycles)
        if counters is not None:
            sim.add_testbench(read_counters)
        stamps = {} if stamps is None else stamps
        for i, name in enumerate(OUTPUTS):
            sim.add_testbench(functools.partial(
                streams.get, stream=getattr(dut, name), count=expect[name], busy=busy_out,
                seed=10 + i, out=raw[name], deadline=limit, at=stamps.setdefault(name, [])))
        t0 = time.perf_counter()
        sim.run()
        raw = {n: [p.as_value().value for p in v] for n, v in raw.items()}
        return raw, clock["now"] - clock["start"], time.perf_counter() - t0


def decode(layout, beats, stream):
    """{field: array} of ``stream``'s beats; a lane stream's per entry, with "beat"."""
    if stream not in LANE_OUTPUTS:
        return unpack(layout, beats)
    fields, beat = lane_unpack(layout, beats)
    return {**fields, "beat": beat}


def expected_streams(run, responses, lanes=1):
    """The output streams the RTL must produce for model run ``run``, after inserts whose
    model responses were ``responses`` [(status, slot, moves)], with ``lanes`` lanes (the
    lane streams' entries with their "beat"). A batch beyond ``run.max_batch_samples``
    samples wraps the sample indices and counts at their fields' widths."""
    nb = run.num_batches
    popular, non_popular = [], []
    for b in range(nb):
        bt = run.batch(b)
        popular.append(bt["popular"])
        non_popular.append(bt["non_popular"])
    pop_n, non_n, cold_n = run.batch_sizes()
    if run.max_batch_samples is not None:
        index_bits, count_bits = sample_widths(run.max_batch_samples)
        popular = [s & ((1 << index_bits) - 1) for s in popular]
        non_popular = [s & ((1 << index_bits) - 1) for s in non_popular]
        pop_n, non_n = pop_n & ((1 << count_bits) - 1), non_n & ((1 << count_bits) - 1)
    beats = run.lane_beats(lanes)
    want = {
        "resp": {"status": np.array([s for s, _, _ in responses], np.int64),
                 "slot": np.array([sl for _, sl, _ in responses], np.int64),
                 "moves": np.array([len(mv) for _, _, mv in responses], np.int64)},
        "moves": {"src": np.array([a for _, _, mv in responses for a, _ in mv], np.int64),
                  "dst": np.array([d for _, _, mv in responses for _, d in mv], np.int64)},
        "remap": {"hot": run.hot.astype(np.int64), "slot": run.slot.astype(np.int64)},
        "popular": {"sample": np.concatenate(popular) if nb else np.zeros(0, np.int64)},
        "non_popular": {"sample": np.concatenate(non_popular) if nb else np.zeros(0, np.int64)},
        "cold_keys": {"key": run.cold_keys.astype(np.int64)},
        "batches": {"popular": pop_n, "non_popular": non_n, "cold": cold_n,
                    "overflow": run.overflow.astype(np.int64)},
    }
    for name in LANE_OUTPUTS:
        want[name]["beat"] = beats[name]
    return want


def beat_cycles(run, keys, config):
    """The cycles the Fragmenter of ``config`` (an `AcceleratorConfig`) needs for ``run``'s
    lookups ``keys`` when no output stalls (its schedule): one ``lookups`` beat per cycle,
    while the cold-key set keeps up, at most ``Fragmenter.GROUP_DEPTH`` beats waiting between
    the CAM and the classification stage for their cold slots; also the cold set's clearing
    pass after every ``2**cold_epoch_bits - 1`` batches, during which no lookup enters.

    The cold set takes one beat per cycle: at one lane a beat's cold lookup (a batch's last
    beat without one: a non-insert beat); with lanes, a ``ColdRunDispatcher`` run: from the
    cold lookups (and such batch ends) that have reached its window, the longest run of up to
    L in distinct partitions (a repeat of one of the L cold lookups before it takes none),
    ending at a batch end. At one lane the ``cold_keys`` FIFO takes
    the cold set's answers while it has room for their new keys, and gives one key per cycle
    (with lanes it gives up to L per cycle and does not hold the cold set back). An answer with
    new keys also waits for the previous batch's summary (`Fragmenter`, for BatchKeyMerge)."""
    lanes = config.lanes
    group, _, eob, empty = run.beat_groups(lanes)
    if not len(group):
        return 0
    n = int(group[-1]) + 1
    cold_group = group[~empty][~run.hot]
    part = ColdKeySetModel(**config.cold_kwargs()).partition_of(np.asarray(keys)[~run.hot])
    # New cold keys (first appearances in their batch): one lane's cold_keys stream takes them
    # one per cycle.
    lookup_batch = (np.searchsorted(run.sample_offsets, np.arange(len(run.hot)), side="right")
                    - 1) // run.batch_size
    batch_key = (lookup_batch[~run.hot].astype(np.uint64) << np.uint64(32)) | \
        np.asarray(keys, np.uint64)[~run.hot]
    new = np.zeros(len(cold_group), bool)
    new[np.unique(batch_key, return_index=True)[1]] = True
    # Repeats of one of the L cold lookups before them in their batch take no partition.
    cold_batch = lookup_batch[~run.hot]
    starts = np.r_[0, np.nonzero(np.diff(cold_batch))[0] + 1, len(cold_batch)]
    for a, b in zip(starts[:-1], starts[1:]):
        repeat = latest_copy(batch_key[a:b], repeat_window(lanes)) >= 0
        part[a:b][repeat] = -2
    closes = np.zeros(n, bool)
    closes[group[eob]] = True
    # The last beat of the batch before each beat's (-1: none).
    close_beats = np.nonzero(closes)[0]
    prev_close = np.r_[-1, close_beats][np.searchsorted(close_beats, np.arange(n))].tolist()
    # Each beat's cold-set entries: (partition, -2 for a repeat, -1 for a batch end without
    # cold lookups; new key; closes the batch).
    entries = [[] for _ in range(n)]
    for g, p, f in zip(cold_group.tolist(), part.tolist(), new.tolist()):
        entries[g].append([p, f, False])
    for g in np.nonzero(closes)[0].tolist():
        if not entries[g]:
            entries[g].append([-1, False, False])
        entries[g][-1][2] = True
    wraps = np.zeros(n, bool)                  # the beats after which the cold set clears
    cold = config.cold_kwargs()
    epochs = (1 << cold["epoch_bits"]) - 1
    wraps[np.nonzero(closes)[0][epochs - 1::epochs]] = True
    clearing = ColdKeySet.clear_cycles(cold["capacity"], cold["ways"], cold["partitions"])
    depth, answer = Fragmenter.GROUP_DEPTH, ColdKeySet.latency(cold["partitions"]) + 1
    to_cold = Fragmenter.cycles_to_cold(lanes)
    # One lane's cold_keys FIFO takes the cold set's answers while it holds at most depth - 3.
    keys_room = Fragmenter.FIFO_DEPTH - 3
    free = drained = -1          # the cold set's next free cycle; the cold_keys FIFO's drain
    waiting = []                 # [arrival, beat, partition, new, closes], in order
    last_send = [-1] * n         # the cold-set beat that carries a beat's last entry

    def send_run():
        """Send the next run from the head of ``waiting``."""
        nonlocal free, drained
        d = max(free, waiting[0][0])
        k, seen, firsts = 0, set(), 0
        while k < len(waiting) and k < lanes and waiting[k][0] <= d:
            _, beat, p, f, close = waiting[k]
            if p >= 0:   # takes a partition
                if p in seen:
                    break
                seen.add(p)
            firsts += f
            k += 1
            if close:
                break
        before = prev_close[waiting[0][1]]
        if firsts and before >= 0:
            # Its answer waits until the previous batch's summary is written (a cycle after
            # that batch's last beat leaves the beat FIFO), and one more (a register).
            leave(before)
            d = max(d, left[before] + 3 - answer)
        if firsts and lanes == 1:   # held back until the cold_keys FIFO has room
            d = max(d, drained - keys_room - answer)
            drained = max(drained, d + answer) + firsts
        for _, beat, *_ in waiting[:k]:
            last_send[beat] = d
        del waiting[:k]
        free = d + 1

    def settle(beat):
        """Send runs until ``beat``'s entries have all gone."""
        while waiting and waiting[0][1] <= beat:
            send_run()

    t_in, left = [0] * n, [0] * n
    prev_in = prev_out = resume = -1
    done = 0                                   # beats with ``left`` known

    def leave(upto):
        nonlocal done, prev_out
        settle(upto)
        while done <= upto:
            ready = t_in[done] + 2
            if entries[done]:
                ready = max(ready, last_send[done] + answer)
            prev_out = max(prev_out + 1, ready)
            left[done] = prev_out
            done += 1

    for i in range(n):
        if i >= depth:
            leave(i - depth)
        t = max(prev_in + 1, left[i - depth] + 1 if i >= depth else 0, resume)
        t_in[i] = prev_in = t
        waiting += [[t + to_cold, i, p, f, c] for p, f, c in entries[i]]
        if wraps[i]:   # the next beat enters the CAM after the clearing pass
            settle(i)
            resume = free - 1 + answer + clearing + PopularityCAM.LATENCY
    leave(n - 1)
    return prev_out + 1


def beat_counts(want):
    """{stream: beats} of expected streams (what the Amaranth backend waits for)."""
    return {n: (int(f["beat"][-1]) + 1 if len(f["beat"]) else 0) if "beat" in f
            else len(next(iter(f.values()))) for n, f in want.items()}


def compare(got, want):
    """Raise `RTLMismatch` at the first beat where the RTL and the model differ."""
    for stream, fields in want.items():
        for field, values in fields.items():
            g = np.asarray(got[stream][field])
            w = np.asarray(values)
            if len(g) != len(w):
                raise RTLMismatch(f"stream {stream}: RTL gave {len(g)} beats, model {len(w)}")
            bad = np.nonzero(g != w)[0]
            if bad.size:
                i = int(bad[0])
                raise RTLMismatch(f"stream {stream} beat {i}: {field} = {int(g[i])} from the RTL, "
                                  f"{int(w[i])} from the model")
