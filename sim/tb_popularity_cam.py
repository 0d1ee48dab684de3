"""PopularityCAM testbench: scripts, their expected outputs, a cycle stepper, the cocotb test
and its runner.

A *script* is an ordered list of operations: lookup (key, user), command (op, key) or reset.
`expect` runs it through the bit-exact model. `Stepper` turns a script into per-cycle port
values with random valid/ready stalls and records every handshake; `Stepper.check` compares
them with the expectation. The same Stepper drives the Amaranth simulator (`run_amaranth`)
and cocotb (`run`, which exports the CAM and runs the cocotb test `run_scripts` below on
Verilator or Icarus).

Lanes: a CAM with ``lanes`` > 1 takes a run of consecutive lookups ``lanes`` at a time, one
beat each (`lookup_beats`); the last beat of a run may be short, its spare lanes repeat its
first key and their results are not recorded. A beat's user bits are its first lookup's, and
`expect` gives each of its lookups those.

Ordering: a command is presented only after every earlier lookup beat was accepted, and a beat
is presented while the last command before it is still waiting (the CAM must then hold the beat
back), so script order is the order the CAM sees. A reset is asserted once everything before
it was accepted; outputs still in flight are lost, so each pre-reset stream must be a prefix of
its expectation, and the stream after the last reset must match it exactly.
"""
import json
import time
from pathlib import Path

import cocotb
import numpy as np
from amaranth import ResetInserter, Signal
from amaranth.sim import Simulator
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from hotline.contract.cam import CAMOp
from hotline.model.popularity_cam import PopularityCAMModel
from hotline.sim.runner import handoff, run_cocotb

LOOKUP, COMMAND, RESET = 0, 1, 2
INSERT, DELETE, CLEAR = CAMOp.INSERT, CAMOp.DELETE, CAMOp.CLEAR
STREAMS = ("result", "resp", "moves")
RESET_CYCLES = 2


def script(kind, arg, key):
    """Script arrays (``arg`` is the user bits of a lookup or the op of a command)."""
    return {"kind": np.asarray(kind, np.int64), "arg": np.asarray(arg, np.int64),
            "key": np.asarray(key, np.int64)}


def concat(*scripts):
    return {name: np.concatenate([s[name] for s in scripts]) for name in ("kind", "arg", "key")}


def lookups(keys, user_width, rng):
    keys = np.asarray(keys, np.int64)
    return script(np.full(len(keys), LOOKUP), rng.integers(0, 1 << user_width, len(keys)), keys)


def commands(op, keys):
    keys = np.asarray(keys, np.int64)
    return script(np.full(len(keys), COMMAND), np.full(len(keys), op), keys)


def reset():
    return script([RESET], [0], [0])


def mixed(pool, n, user_width, rng, clear_rate=0.002):
    """Random lookups, inserts and deletes over a key pool, in runs of random length."""
    parts = []
    while sum(len(p["kind"]) for p in parts) < n:
        run = int(rng.integers(1, 40))
        keys = rng.choice(pool, run)
        roll = rng.random()
        if roll < clear_rate:
            parts.append(commands(CLEAR, [0]))
        elif roll < 0.5:
            parts.append(lookups(keys, user_width, rng))
        else:
            ops = np.where(rng.random(run) < 0.7, INSERT, DELETE)
            parts.append(script(np.full(run, COMMAND), ops, keys))
    return concat(*parts)


def hot_first(keys):
    """Distinct keys by descending count, ties by key ascending (the exact hot-set order)."""
    uniq, count = np.unique(np.asarray(keys, np.int64), return_counts=True)
    return uniq[np.lexsort((uniq, -count))]


def colliding(model, n, rng, both=False):
    """``n`` distinct random keys that share the table-0 bucket (and the table-1 one if ``both``)."""
    found = np.zeros(0, np.int64)
    target = None
    while len(found) < n:
        cand = rng.integers(0, 1 << model.key_width, 1 << 16, dtype=np.int64)
        h = np.stack([model.hash(0, cand), model.hash(1, cand)], 1)
        target = h[0] if target is None else target
        same = (h[:, 0] == target[0]) & ((h[:, 1] == target[1]) | (not both))
        found = np.unique(np.concatenate([found, cand[same]]))
    return rng.permutation(found)[:n]


def lookup_beats(kind, lanes):
    """The lookups of a script in beats: (pos, beat), the script index of each lookup and its
    beat's number. A beat holds up to ``lanes`` consecutive lookups and no command or reset."""
    pos = np.flatnonzero(kind == LOOKUP)
    run_starts = np.diff(pos, prepend=-2) != 1
    run_start = pos[run_starts][np.cumsum(run_starts) - 1]
    return pos, np.cumsum((pos - run_start) % lanes == 0) - 1


def expect(model, s, lanes=1):
    """Expected outputs per stream: int64 rows, column 0 the epoch (resets seen so far).

    result rows, one per lookup: (epoch, hit, slot, user), ``user`` the arg of the first
    lookup of its beat of ``lanes``; resp: (epoch, status, slot, moves, moves accepted in this
    epoch before the response); moves: (epoch, src, dst).
    """
    model.reset()
    rows = {name: [] for name in STREAMS}
    kind, key = s["kind"], s["key"]
    pos, beat = lookup_beats(kind, lanes)
    arg = s["arg"].copy()
    arg[pos] = arg[pos[np.searchsorted(beat, beat)]]
    epoch = moved = 0
    starts = np.flatnonzero(np.diff(kind, prepend=-1) != 0)
    for start, stop in zip(starts, np.append(starts[1:], len(kind))):
        if kind[start] == LOOKUP:
            hit, slot = model.lookup(key[start:stop])
            rows["result"].append(np.stack([np.full(stop - start, epoch), hit, slot, arg[start:stop]], 1))
            continue
        for i in range(start, stop):
            if kind[i] == RESET:
                model.reset()
                epoch, moved = epoch + 1, 0
                continue
            moves = []
            if arg[i] == INSERT:
                status, slot, moves = model.insert(key[i])
            elif arg[i] == DELETE:
                status, slot = model.delete(key[i])
            else:
                model.clear()
                status, slot = 0, 0
            rows["moves"] += [np.array([[epoch, src, dst]]) for src, dst in moves]
            moved += len(moves)
            rows["resp"].append(np.array([[epoch, int(status), slot, len(moves), moved]]))
    width = {"result": 4, "resp": 5, "moves": 3}
    return {name: np.concatenate(rows[name]).astype(np.int64) if rows[name]
            else np.zeros((0, width[name]), np.int64) for name in STREAMS}


def model_for(cam):
    """The bit-exact model with ``cam``'s geometry."""
    return PopularityCAMModel(cam.entries, ways=cam.ways, key_width=cam.key_width,
                              stash=cam.stash, max_kicks=cam.max_kicks, seeds=cam.seeds,
                              hash_family=cam.hash_family)


def widths(cam):
    return {"key_width": cam.key_width, "user_width": cam.user_width, "slot_width": cam.slot_width,
            "lanes": cam.lanes}


def _save(path, s, expected, widths, stall=0.0, seed=0):
    """Write a script, its expectation and the port widths for the cocotb test."""
    np.savez(path, **s, **{f"exp_{k}": v for k, v in expected.items()},
             stall=stall, seed=seed, **widths)
    return Path(path)


def _load(path):
    with np.load(path) as f:
        s = {name: f[name] for name in ("kind", "arg", "key")}
        expected = {name: f[f"exp_{name}"] for name in STREAMS}
        meta = {name: int(f[name]) for name in ("key_width", "user_width", "slot_width", "lanes",
                                                "seed")}
        return s, expected, meta, float(f["stall"])


class Stepper:
    """Per-cycle stimulus and handshake recorder for one script, lookups in beats of ``lanes``.

    Each cycle: ``inputs()`` gives the port values to drive (payloads as packed integers, None
    for valid low); ``outputs(...)`` takes what the ports showed in the same cycle (before the
    clock edge) and records the transfers.
    """

    def __init__(self, s, expected, *, key_width, user_width, slot_width, lanes=1, stall=0.0,
                 seed=0):
        self.s, self.expected = s, expected
        self.kw, self.uw, self.sw, self.lanes = key_width, user_width, slot_width, lanes
        self.stall = stall
        self.rng = np.random.default_rng(seed)
        kind = s["kind"]
        big = len(kind)
        pos, beat = lookup_beats(kind, lanes)
        # lpos: each beat's first lookup; lanes of each beat holding a lookup
        first = np.searchsorted(beat, np.arange(beat[-1] + 1 if len(beat) else 0))
        self.lpos = np.append(pos[first], big)
        self.beat_lookups = np.diff(np.append(first, len(pos)))
        self.in_flight = []  # lookups per beat accepted and not yet answered, this epoch
        self.cpos = np.append(np.flatnonzero(kind == COMMAND), big)
        self.rpos = np.append(np.flatnonzero(kind == RESET), big)
        self.li = self.ci = self.ri = 0
        self.lookup_on = self.cmd_on = False
        self.in_reset = 0
        self.epoch = 0
        self.got = {name: [] for name in STREAMS}
        self.count = dict.fromkeys(STREAMS, 0)  # transfers in the current epoch
        self.cycles = 0
        self.lookup_cycles = []  # cycle of the first and of the latest lookup handshake
        self.final = {name: int((expected[name][:, 0] == len(self.rpos) - 1).sum()) for name in STREAMS}

    def _go(self):
        return self.stall == 0 or self.rng.random() >= self.stall

    def inputs(self):
        nxt = min(self.lpos[self.li], self.cpos[self.ci])
        reset_at = self.rpos[self.ri]
        if self.in_reset == 0 and reset_at < nxt:
            self.in_reset = RESET_CYCLES
        if self.in_reset:
            self.lookup_on = self.cmd_on = False
            self.in_reset -= 1
            if not self.in_reset:
                self.ri += 1
                self.epoch += 1
                self.count = dict.fromkeys(STREAMS, 0)
                self.in_flight = []
            return {"rst": 1, "lookup": None, "cmd": None, "ready": {n: 0 for n in STREAMS}}
        lpos, cpos = self.lpos[self.li], self.cpos[self.ci]
        if not self.cmd_on and cpos < min(lpos, reset_at):
            self.cmd_on = self._go()
        waiting_cmd = self.cmd_on and self.cpos[self.ci + 1] > lpos
        if not self.lookup_on and lpos < reset_at and (lpos < cpos or waiting_cmd):
            self.lookup_on = self._go()
        lookup = cmd = None
        if self.lookup_on:
            n = self.beat_lookups[self.li]
            keys = self.s["key"][lpos:lpos + n].tolist()
            keys += keys[:1] * (self.lanes - n)
            lookup = sum(int(k) << self.kw * i for i, k in enumerate(keys)) \
                | int(self.s["arg"][lpos]) << self.kw * self.lanes
        if self.cmd_on:
            cmd = int(self.s["arg"][cpos]) | int(self.s["key"][cpos]) << 2
        return {"rst": 0, "lookup": lookup, "cmd": cmd,
                "ready": {n: int(self._go()) for n in STREAMS}}

    def outputs(self, inputs, lookup_ready, cmd_ready, valid, payload):
        """Record this cycle's transfers; ``valid``/``payload`` are dicts keyed by stream."""
        self.cycles += 1
        if inputs["rst"]:
            return
        if self.lookup_on and lookup_ready:
            self.lookup_cycles = [(self.lookup_cycles or [self.cycles])[0], self.cycles]
            self.in_flight.append(self.beat_lookups[self.li])
            self.li += 1
            self.lookup_on = False
        if self.cmd_on and cmd_ready:
            self.ci += 1
            self.cmd_on = False
        smask = (1 << self.sw) - 1
        fire = {n: valid[n] and inputs["ready"][n] for n in STREAMS}
        # resp before moves: a move accepted in the same cycle as its response is an error.
        unpack = {
            "resp": lambda p: [(p & 3, (p >> 2) & smask, p >> (2 + self.sw), self.count["moves"])],
            "moves": lambda p: [(p & smask, p >> self.sw)],
            "result": self._results,
        }
        for name in STREAMS:
            if fire[name]:
                rows = unpack[name](payload[name])
                self.got[name] += [(self.epoch, *row) for row in rows]
                self.count[name] += len(rows)

    def _results(self, p):
        """A result beat's (hit, slot, user) per lane that carried a lookup."""
        lanes, smask = self.lanes, (1 << self.sw) - 1
        user = p >> lanes * (1 + self.sw)
        return [(p >> i & 1, p >> lanes + i * self.sw & smask, user)
                for i in range(self.in_flight.pop(0) if self.in_flight else lanes)]

    @property
    def done(self):
        return (self.ri == len(self.rpos) - 1 and self.li == len(self.lpos) - 1
                and self.ci == len(self.cpos) - 1
                and all(self.count[n] >= self.final[n] for n in STREAMS))

    def stats(self):
        """Cycles, lookups, and lookups per cycle between the first and last lookup handshake."""
        span = self.lookup_cycles[-1] - self.lookup_cycles[0] + 1 if self.lookup_cycles else 0
        lookups = int(self.beat_lookups.sum())
        return {"cycles": self.cycles, "lookups": lookups,
                "lookups_per_cycle": lookups / span if span else 0.0}

    def check(self):
        """Raise AssertionError naming the first output that differs from the expectation."""
        last = len(self.rpos) - 1
        for name in STREAMS:
            got = np.array(self.got[name], np.int64).reshape(-1, self.expected[name].shape[1])
            for epoch in range(last + 1):
                g = got[got[:, 0] == epoch]
                e = self.expected[name][self.expected[name][:, 0] == epoch]
                if len(g) > len(e) or (epoch == last and len(g) != len(e)):
                    raise AssertionError(f"{name} epoch {epoch}: {len(g)} outputs, expected {len(e)}")
                bad = np.flatnonzero((g != e[:len(g)]).any(1))
                if bad.size:
                    i = bad[0]
                    raise AssertionError(f"{name} epoch {epoch} output {i}: got {g[i].tolist()}, "
                                         f"expected {e[i].tolist()}")


def max_cycles(s, entries_per_clear):
    """Generous cycle budget: stalls, relocations and clear passes included."""
    return 200 * len(s["kind"]) + (2 + (s["kind"] == RESET).sum() + (s["arg"] == CLEAR).sum()) \
        * entries_per_clear + 1000


def run_amaranth(cam, s, *, stall=0.0, seed=0):
    """Run script ``s`` on ``cam`` in the Amaranth simulator; return the checked Stepper
    (its ``wall_s`` is the simulation wall time)."""
    st = Stepper(s, expect(model_for(cam), s, cam.lanes), stall=stall, seed=seed, **widths(cam))
    rst = Signal()
    sim = Simulator(ResetInserter(rst)(cam))
    sim.add_clock(1e-8)
    streams = [getattr(cam, n) for n in STREAMS]
    limit = max_cycles(s, cam.buckets)

    async def bench(ctx):
        while not st.done:
            assert st.cycles < limit, f"no progress after {limit} cycles"
            inp = st.inputs()
            ctx.set(rst, inp["rst"])
            for port, value in ((cam.lookup, inp["lookup"]), (cam.cmd, inp["cmd"])):
                ctx.set(port.valid, value is not None)
                ctx.set(port.payload.as_value(), value or 0)
            for n, port in zip(STREAMS, streams):
                ctx.set(port.ready, inp["ready"][n])
            _, _, lookup_ready, cmd_ready, *out = await ctx.tick().sample(
                cam.lookup.ready, cam.cmd.ready,
                *[x for p in streams for x in (p.valid, p.payload.as_value())])
            st.outputs(inp, lookup_ready, cmd_ready, dict(zip(STREAMS, out[0::2])),
                       dict(zip(STREAMS, out[1::2])))

    sim.add_testbench(bench)
    start = time.perf_counter()
    sim.run()
    st.wall_s = time.perf_counter() - start
    st.check()
    return st


class TB:
    """cocotb driver/monitor around a `Stepper` for one exported PopularityCAM."""

    def __init__(self, dut, clear_cycles):
        self.dut = dut
        self.clear_cycles = clear_cycles

    async def run(self, path):
        s, expected, meta, stall = _load(path)
        st = Stepper(s, expected, stall=stall, **meta)
        dut = self.dut
        await self.reset()
        limit = max_cycles(s, self.clear_cycles)
        start = time.perf_counter()
        ports = {n: (getattr(dut, f"{n}__valid"), getattr(dut, f"{n}__payload"), getattr(dut, f"{n}__ready"))
                 for n in STREAMS}
        while not st.done:
            if st.cycles > limit:
                raise AssertionError(f"{Path(path).name}: no progress after {limit} cycles "
                                     f"(lookup {st.li}, command {st.ci})")
            inp = st.inputs()
            dut.rst.value = inp["rst"]
            dut.lookup__valid.value = inp["lookup"] is not None
            dut.lookup__payload.value = inp["lookup"] or 0
            dut.cmd__valid.value = inp["cmd"] is not None
            dut.cmd__payload.value = inp["cmd"] or 0
            for n in STREAMS:
                ports[n][2].value = inp["ready"][n]
            await ReadOnly()
            valid = {n: bool(ports[n][0].value) for n in STREAMS}
            payload = {n: ports[n][1].value.to_unsigned() if valid[n] else 0 for n in STREAMS}
            st.outputs(inp, bool(dut.lookup__ready.value), bool(dut.cmd__ready.value), valid, payload)
            await RisingEdge(dut.clk)
        wall = time.perf_counter() - start
        st.check()
        Path(path).with_suffix(".json").write_text(json.dumps({**st.stats(), "wall_s": wall}))
        return st

    async def reset(self):
        dut = self.dut
        for name in ("lookup__valid", "cmd__valid", "result__ready", "resp__ready", "moves__ready"):
            getattr(dut, name).value = 0
        dut.rst.value = 1
        for _ in range(RESET_CYCLES):
            await RisingEdge(dut.clk)
        dut.rst.value = 0


def run(cam, scripts, *, build_dir, simulator="verilator"):
    """Run ``scripts`` on ``cam`` exported to Verilog, in one ``simulator`` build under cocotb.

    ``scripts``: (name, script, stall) triples; script ``i`` stalls with probability ``stall``
    drawn from seed ``i``. Every output is checked against the model's expectation in the
    simulator: a difference (or a hang) raises `CocotbFailure`. ``build_dir`` holds the build,
    each script as ``<name>.npz`` and its statistics as ``<name>.json``. Returns each script's
    `Stepper.stats` with ``wall_s`` (the simulation wall time), in order.
    """
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    paths = [_save(build_dir / f"{name}.npz", s, expect(model_for(cam), s, cam.lanes), widths(cam),
                   stall=stall, seed=i)
             for i, (name, s, stall) in enumerate(scripts)]
    job = build_dir / "cam_scripts.json"
    job.write_text(json.dumps({"clear_cycles": cam.buckets, "scripts": [str(p) for p in paths]}))
    run_cocotb(cam, "popularity_cam", __name__, build_dir, simulator=simulator, handoff=job)
    return [json.loads(p.with_suffix(".json").read_text()) for p in paths]


@cocotb.test()
async def run_scripts(dut):
    """Run every script of the handoff (written by `run`) against the DUT."""
    Clock(dut.clk, 10, unit="ns").start()
    job = json.loads(handoff().read_text())
    tb = TB(dut, job["clear_cycles"])
    for path in job["scripts"]:
        st = await tb.run(path)
        dut._log.info("%s: %d cycles, %d results", Path(path).name, st.cycles, len(st.got["result"]))
