"""RowDMA testbench: scenarios, their model expectation, the cocotb driver / AXI memories and
their runner.

A *scenario* (`Scenario`) is the memory image plus an ordered list of steps: descriptor writes,
staging-window settings, batches (direction, bank, keys), host writes into memory, counter
snapshots and clear strobes. `expect` runs it through `RowDMAModel` (hotline.model.dma_model);
`run` exports the RTL and runs scenarios on it under cocotb (`TB`), returning what each saw:
every AR and AW (address, len), the done records, counter snapshots, the final counters and
memory, cycle statistics. tests/test_row_dma.py compares the two (and the memory with naive
references); sim/bench_row_dma.py measures the statistics.

Batches are presented back to back (the engine overlaps them); every other step first waits
until all earlier batches are done, like a host driver would. Descriptor writes are followed
by ``RowDMA.DESC_LATENCY`` quiet cycles.

Memories on the ``bus`` port (one kind per cocotb test, chosen by the scenario's ``ram``):
- ``"axiram"``: cocotbext-axi ``AxiRam`` (bound with ``AxiBus.from_prefix(dut, "bus",
  bus_separator="__")``), random pauses on all five channels through its pause generators,
  injected errors as SLVERR (its read/write hooks raise for addresses in an error range).
- ``"latency"``: `LatencyRam` below, a cycle-driven AXI4 slave with a fixed or random read and
  write-response latency (in order, many bursts outstanding), random valid/ready stalls on all
  five channels, and SLVERR/DECERR injection; it also counts beats for the throughput bench.
In both, a bus monitor checks every AR/AW handshake: inside a usable registered window (a table
window, or a staging window of a batch not yet done, that passes the engine's own checks; a
staging step with ``after_keys`` rewrites the window while a batch runs), no 4 KiB crossing,
1 <= beats <= max_burst_beats, full-width INCR, ID 0; `LatencyRam` also checks ``wlast`` and
full strobes. Violations are recorded in the scenario's results and fail the cocotb test after
all scenarios ran; a scenario that stops making progress is recorded as a hang, and the next
one starts after a reset.
"""
import json
import mmap
import random
import time
import warnings
from collections import deque
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from hotline.model.dma_model import RowDMAModel
from hotline.sim.runner import CocotbFailure, handoff, run_cocotb

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi")
from cocotbext.axi import AxiBus, AxiRam  # noqa: E402

RESET_CYCLES = 3
DESC_QUIET = 6          # >= RowDMA.DESC_LATENCY
COUNTERS = RowDMAModel.COUNTERS
CHANNELS = ("ar", "r", "aw", "w", "b")
RESP = {"slverr": 2, "decerr": 3}


class Scenario:
    """One run: engine geometry, memory image, steps, and how the memory behaves.

    ``params``: the DUT's RowDMA parameters that the TB needs (direction, data_width,
    addr_width, num_tables, row_bits, max_burst_beats). ``stalls``: probability of a stall
    cycle per channel (``ar r aw w b`` and ``cmd keys done``). ``latency``: (lo, hi) read and
    write-response latency in cycles (latency RAM only). ``read_errors`` / ``write_errors``:
    [(lo, hi, "slverr"|"decerr")] address ranges answered with an error. ``rlast_errors``:
    [(lo, hi)] read beats whose ``rlast`` the slave inverts (latency RAM only).
    ``params["framing"]`` ("count" by default, or "end") and ``params["counter_width"]`` (48 by
    default): as the DUT's.
    """

    def __init__(self, name, params, *, ram="latency", latency=(1, 1), stalls=None,
                 read_errors=(), write_errors=(), rlast_errors=(), seed=0, compare_memory=True,
                 max_cycles=None, max_reads=64):
        self.name, self.params, self.ram = name, dict(params), ram
        self.latency, self.stalls = tuple(latency), dict(stalls or {})
        self.read_errors, self.write_errors = list(read_errors), list(write_errors)
        self.rlast_errors = list(rlast_errors)
        self.seed, self.compare_memory, self.max_cycles = seed, compare_memory, max_cycles
        self.max_reads = max_reads
        self.steps = []
        self.init = []       # (addr, uint8 array): memory contents before the run
        self.regions = []    # (addr, nbytes): compared after the run

    @property
    def bus_bytes(self):
        return self.params["data_width"] // 8

    def memory(self, addr, content):
        content = np.asarray(content, np.uint8).ravel()
        self.init.append((int(addr), content))
        self.regions.append((int(addr), len(content)))
        return self

    def region(self, addr, nbytes):
        """Compare [addr, addr + nbytes) after the run (initially zero)."""
        self.regions.append((int(addr), int(nbytes)))
        return self

    def desc(self, table, base, rows, row_bytes):
        self.steps.append(("desc", int(table), int(base), int(rows), int(row_bytes)))
        return self

    def staging(self, base, stride, slots, banks, after_keys=None):
        """Set the staging window once earlier batches are done; with ``after_keys`` (>= 1),
        as soon as that many key beats of the preceding batch were taken, while it runs (the
        engine latched its window at the command: the new one is for later batches)."""
        self.steps.append(("staging", int(base), int(stride), int(slots), int(banks),
                           None if after_keys is None else int(after_keys)))
        return self

    def batch(self, direction, bank, keys):
        self.steps.append(("batch", direction, int(bank), np.asarray(keys, np.int64)))
        return self

    def write(self, addr, content, stride=None):
        """Host write at this point (after earlier batches are done). With ``stride``,
        ``content`` is a 2-D array whose row i goes to ``addr + i * stride``."""
        content = np.asarray(content, np.uint8)
        if stride is None:
            content, stride = content.reshape(1, -1), 0
        self.steps.append(("write", int(addr), content, int(stride)))
        return self

    def barrier(self):
        """Wait until every earlier batch is done."""
        self.steps.append(("barrier",))
        return self

    def snapshot(self):
        self.steps.append(("snapshot",))
        return self

    def dump(self, addr, nbytes):
        """Read [addr, addr + nbytes) back at this point (after earlier batches are done)."""
        self.steps.append(("dump", int(addr), int(nbytes)))
        return self

    def clear(self, counters=True, errors=True):
        self.steps.append(("clear", bool(counters), bool(errors)))
        return self

    def keys_total(self):
        return sum(len(s[3]) for s in self.steps if s[0] == "batch")

    def cycle_budget(self):
        """Generous: every chunk may wait out the whole latency; stalls may triple the rest."""
        if self.max_cycles:
            return self.max_cycles
        model = self.model()
        chunks = beats = 0
        for s in self.steps:
            if s[0] == "desc":
                model.write_descriptor(*s[1:])
            elif s[0] == "staging":
                model.set_staging(*s[1:5])
            elif s[0] == "batch":
                bursts = model.bursts(s[1], s[3], s[2])
                chunks += len(bursts)
                beats += sum(n for _, _, n in bursts) // self.bus_bytes
        stall = 1 + 4 * max([0.0, *self.stalls.values()]) / max(1e-9, 1 - max([0.0, *self.stalls.values()]))
        return int(2000 + 30 * len(self.steps) + stall * (4 * beats + 20 * self.keys_total()
                                                         + chunks * (self.latency[1] + 8)))

    def model(self):
        p = self.params
        return RowDMAModel(data_width=p["data_width"], addr_width=p["addr_width"],
                           num_tables=p["num_tables"], row_bits=p["row_bits"],
                           max_burst_beats=p["max_burst_beats"],
                           counter_width=p.get("counter_width", 48))


def error_predicate(ranges):
    if not ranges:
        return None
    return lambda a: any(lo <= a < hi for lo, hi, *_ in ranges)


def expect(sc, memory_size=None):
    """What the model says scenario ``sc`` must produce: ar, aw, done, snapshots, counters,
    error_cause, memory (bytes per region), and the model's final memory array."""
    model = sc.model()
    b = sc.bus_bytes
    size = memory_size or (max(a + n for a, n in sc.regions) if sc.regions else 1)
    mem = np.zeros(size, np.uint8)
    for addr, content in sc.init:
        mem[addr:addr + len(content)] = content
    out = {"ar": [], "aw": [], "done": [], "snapshots": [], "dumps": []}
    rerr, werr = error_predicate(sc.read_errors), error_predicate(sc.write_errors)
    lasterr = error_predicate(sc.rlast_errors)
    for s in sc.steps:
        kind = s[0]
        if kind == "desc":
            model.write_descriptor(*s[1:])
        elif kind == "staging":
            model.set_staging(*s[1:5])
        elif kind == "batch":
            _, direction, bank, keys = s
            for src, dst, n in model.bursts(direction, keys, bank):
                out["ar"].append((src, n // b - 1))
                out["aw"].append((dst, n // b - 1))
            d = model.run(mem, direction, keys, bank, read_error=rerr, write_error=werr,
                          rlast_error=lasterr)
            out["done"].append((d["rows"], d["errors"]))
        elif kind == "write":
            _, addr, rows, stride = s
            for i, row in enumerate(rows):
                mem[addr + i * stride:addr + i * stride + len(row)] = row
        elif kind == "snapshot":
            out["snapshots"].append({**model.counters(), "error_cause": model.error_cause})
        elif kind == "dump":
            out["dumps"].append(bytes(mem[s[1]:s[1] + s[2]]))
        elif kind == "clear":
            if s[1]:
                model.clear_counters()
            if s[2]:
                model.clear_errors()
    out["counters"] = model.counters()
    out["error_cause"] = model.error_cause
    out["memory"] = [bytes(mem[a:a + n]) for a, n in sc.regions]
    out["model_memory"] = mem
    return out


# ---------------------------------------------------------------------------------------------
# runner, and the handoff to the cocotb side: JSON, byte strings as hex

def run(dma, scenarios, *, build_dir, simulator="verilator"):
    """Run ``scenarios`` on RowDMA ``dma`` exported to Verilog, in one ``simulator`` build.

    Returns each scenario's results dict (see the module docstring; compare with `expect`), in
    order. Bus-monitor violations and hangs are in the results (``violations``, and ``error``
    for a hang or crash), not raised: the cocotb run fails on them only after every scenario
    ran. Raises `CocotbFailure` if the run stopped before every scenario saved its results.
    ``build_dir`` holds the build and every scenario and result as JSON.
    """
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    files = [(build_dir / f"{i:02d}_{sc.name}.json", build_dir / f"{i:02d}_{sc.name}.result.json")
             for i, sc in enumerate(scenarios)]
    for sc, (path, _) in zip(scenarios, files):
        path.write_text(json.dumps(_scenario_json(sc)))
    job = build_dir / "row_dma_scenarios.json"
    job.write_text(json.dumps([[str(a), str(b)] for a, b in files]))
    try:
        run_cocotb(dma, "row_dma", __name__, build_dir, simulator=simulator, handoff=job)
    except (CocotbFailure, SystemExit) as e:  # cocotb's runner may exit under pytest
        if not all(result.exists() for _, result in files):
            raise CocotbFailure(f"the cocotb run stopped early ({e!r}); see "
                                f"{build_dir / 'sim.log'}") from None
    return [_result_from_json(json.loads(result.read_text())) for _, result in files]


def _scenario_json(sc):
    steps = []
    for s in sc.steps:
        if s[0] == "batch":
            s = (*s[:3], s[3].tolist())
        elif s[0] == "write":
            s = (s[0], s[1], [row.tobytes().hex() for row in s[2]], s[3])
        steps.append(s)
    return {**vars(sc), "init": [(a, c.tobytes().hex()) for a, c in sc.init], "steps": steps}


def _scenario_from_json(d):
    sc = Scenario(d.pop("name"), d.pop("params"))
    vars(sc).update(d)
    sc.latency = tuple(sc.latency)
    for k in ("regions", "read_errors", "write_errors", "rlast_errors"):
        setattr(sc, k, [tuple(x) for x in getattr(sc, k)])
    sc.init = [(a, np.frombuffer(bytes.fromhex(c), np.uint8)) for a, c in sc.init]
    for i, s in enumerate(sc.steps):
        if s[0] == "batch":
            s = (*s[:3], np.asarray(s[3], np.int64))
        elif s[0] == "write":
            s = (s[0], s[1], np.array([np.frombuffer(bytes.fromhex(r), np.uint8) for r in s[2]]), s[3])
        sc.steps[i] = tuple(s)
    return sc


def _result_json(res):
    return {**res, **{k: [b.hex() for b in res[k]] for k in ("dumps", "memory") if k in res}}


def _result_from_json(d):
    d.update({k: [tuple(x) for x in d[k]] for k in ("ar", "aw", "done") if k in d})
    d.update({k: [bytes.fromhex(x) for x in d[k]] for k in ("dumps", "memory") if k in d})
    return d


# ---------------------------------------------------------------------------------------------
# cocotb side

def _u(value):
    """A signal value as an int (1-bit signals give a Logic, wider ones a LogicArray)."""
    return value.to_unsigned() if hasattr(value, "to_unsigned") else int(value)


def _fit(sig, value):
    """``value`` cut to the width of port ``sig``, as a register wired to a narrower port is
    (the 64-bit BASE registers on a port of addr_width bits)."""
    return value & ((1 << len(sig)) - 1)


def _pause_gen(p, seed):
    rng = random.Random(seed)
    while True:
        yield rng.random() < p


class LatencyRam:
    """Cycle-driven AXI4 slave memory (driven from `_Run`'s clock loop, no tasks of its own).

    Reads: up to ``max_reads`` bursts accepted; a burst's data is read when its AR is accepted,
    its first beat is offered ``latency`` cycles later (random in [lo, hi], never before the
    previous burst's beats: single ID, in order); then one beat per cycle. Writes: W beats may come
    before their AW; the B response is offered ``latency`` cycles after the burst's last beat.
    Each scenario calls `start`, then per cycle `drive`, `sample` (at ``ReadOnly``) and `update`
    (after the edge), and at its end `check_quiet`.
    """

    def __init__(self, size):
        self.size = size
        self.mem = mmap.mmap(-1, size)

    def read(self, addr, n):
        return self.mem[addr:addr + n]

    def write(self, addr, content):
        self.mem[addr:addr + len(content)] = bytes(content)

    def start(self, sc, bus_bytes, rng, go, violations, stats):
        """Empty queues for scenario ``sc``: latencies drawn from ``rng``, channel stalls from
        ``go(channel)``; W-beat faults appended to ``violations``, beats counted in ``stats``."""
        self.sc, self.B, self.rng, self.go = sc, bus_bytes, rng, go
        self.violations, self.stats = violations, stats
        self.ar_q = deque()        # [ready_cycle, addr, len, beat, [(resp, word)]]
        self.last_ready = 0
        self.arready = self.rvalid = self.awready = self.wready = self.bvalid = 0
        self.aw_q, self.w_beats = deque(), deque()
        self.b_q = deque()          # (ready_cycle, resp)
        self.rerr = [(lo, hi, RESP[r]) for lo, hi, r in sc.read_errors]
        self.werr = [(lo, hi, RESP[r]) for lo, hi, r in sc.write_errors]

    def _latency(self):
        lo, hi = self.sc.latency
        return lo if lo == hi else self.rng.randint(lo, hi)

    def drive(self, dut, cycle):
        """Offer this cycle's ready signals, R beat and B response."""
        go, B = self.go, self.B
        self.arready = int(len(self.ar_q) < self.sc.max_reads and go("ar"))
        dut.bus__arready.value = self.arready
        if not self.rvalid and self.ar_q and self.ar_q[0][0] <= cycle and go("r"):
            head = self.ar_q[0]
            code, word = head[4][head[3]]
            self.rvalid = 1
            dut.bus__rdata.value = word
            dut.bus__rresp.value = code
            dut.bus__rlast.value = int(head[3] == head[2]) ^ any(
                lo <= head[1] + head[3] * B < hi for lo, hi in self.sc.rlast_errors)
            dut.bus__rvalid.value = 1
        self.awready = int(go("aw"))
        dut.bus__awready.value = self.awready
        self.wready = int(go("w"))
        dut.bus__wready.value = self.wready
        if not self.bvalid and self.b_q and self.b_q[0][0] <= cycle and go("b"):
            self.bvalid = 1
            dut.bus__bresp.value = self.b_q[0][1]
            dut.bus__bvalid.value = 1

    def sample(self, dut):
        """(ar, aw, r, w, b) handshakes of this cycle; a W beat is kept for its burst."""
        fires = (self.arready and bool(dut.bus__arvalid.value),
                 self.awready and bool(dut.bus__awvalid.value),
                 self.rvalid and bool(dut.bus__rready.value),
                 self.wready and bool(dut.bus__wvalid.value),
                 self.bvalid and bool(dut.bus__bready.value))
        if fires[3]:
            self.w_beats.append((dut.bus__wdata.value.to_unsigned(),
                                 dut.bus__wstrb.value.to_unsigned(), int(dut.bus__wlast.value)))
        return fires

    def update(self, dut, cycle, fires, ar, aw):
        """After the edge: take the accepted AR ``ar`` / AW ``aw`` ((addr, len)), retire the R
        beat and B response that were taken, write the bursts whose W beats all came."""
        ar_fire, aw_fire, r_fire, w_fire, b_fire = fires
        B, stats = self.B, self.stats
        if ar_fire:
            self.last_ready = max(self.last_ready, cycle - 1 + self._latency())
            # the memory reads the whole burst when it accepts the request (the latency
            # is on the way back): a later write to these addresses is not seen
            a0, ln = ar
            words = []
            for i in range(ln + 1):
                a = a0 + i * B
                code = _resp_of(self.rerr, a)
                words.append((code, 0 if code else int.from_bytes(self.mem[a:a + B], "little")))
            self.ar_q.append([self.last_ready, a0, ln, 0, words])
            stats["ar_count"] += 1
        if r_fire:
            stats["r_beats"] += 1
            head = self.ar_q[0]
            head[3] += 1
            if head[3] > head[2]:
                self.ar_q.popleft()
            self.rvalid = 0
            dut.bus__rvalid.value = 0
        if aw_fire:
            self.aw_q.append(aw)
        if w_fire:
            stats["w_beats"] += 1
        while self.aw_q and len(self.w_beats) >= self.aw_q[0][1] + 1:
            self._write_burst(cycle, *self.aw_q.popleft())
        if b_fire:
            self.b_q.popleft()
            self.bvalid = 0
            dut.bus__bvalid.value = 0
            stats["last_b"] = cycle - 1

    def _write_burst(self, cycle, addr, ln):
        """Write burst (``addr``, ``ln``) from its W beats; queue its B response."""
        B, code = self.B, 0
        for i in range(ln + 1):
            word, strb, lastbit = self.w_beats.popleft()
            a = addr + i * B
            if lastbit != (i == ln):
                self.violations.append(f"W beat {i} of burst {addr:#x} len {ln}: wlast={lastbit}")
            if strb == 0:
                continue
            if strb != (1 << B) - 1:
                self.violations.append(f"W beat {i} of burst {addr:#x}: partial strobe {strb:#x}")
            c = _resp_of(self.werr, a)
            if c:
                code = code or c
                continue
            self.mem[a:a + B] = word.to_bytes(B, "little")
        self.b_q.append((cycle + self._latency(), code))

    def check_quiet(self):
        """A violation if a read, write, W beat or response is still pending."""
        if self.ar_q or self.aw_q or self.w_beats or self.b_q:
            self.violations.append(
                f"bus not quiet at the end: {len(self.ar_q)} reads, {len(self.aw_q)} writes, "
                f"{len(self.w_beats)} W beats, {len(self.b_q)} responses pending")


def _resp_of(ranges, a):
    """The error response of address ``a`` (0: OKAY)."""
    for lo, hi, code in ranges:
        if lo <= a < hi:
            return code
    return 0


class TB:
    """Clock, reset, memory on ``bus``, stream drivers for ``cmd``/``keys``, ``done`` monitor,
    bus monitor. ``run(scenario)`` returns the results dict (see module docstring)."""

    def __init__(self, dut, kind):
        self.dut, self.kind = dut, kind
        self.addr_width = len(dut.bus__araddr)
        self.data_width = len(dut.bus__rdata)
        self.bus_bytes = self.data_width // 8
        self.size = 1 << self.addr_width
        self.read_errors, self.write_errors = [], []
        Clock(dut.clk, 10, unit="ns").start()
        if kind == "axiram":
            self.ram = AxiRam(AxiBus.from_prefix(dut, "bus", bus_separator="__"), dut.clk,
                              dut.rst, size=self.size)

            async def read_hook(address, length):
                if any(lo <= address < hi for lo, hi, _ in self.read_errors):
                    raise IOError("injected read error")
                return self.ram.read(address, length)

            async def write_hook(address, content):
                if any(lo <= address < hi for lo, hi, _ in self.write_errors):
                    raise IOError("injected write error")
                self.ram.write(address, content)

            self.ram.read_if._read = read_hook
            self.ram.write_if._write = write_hook
        else:
            self.ram = LatencyRam(self.size)
        self.loaded = []

    def _channels(self):
        r = self.ram
        return {"ar": r.read_if.ar_channel, "r": r.read_if.r_channel, "aw": r.write_if.aw_channel,
                "w": r.write_if.w_channel, "b": r.write_if.b_channel}

    async def reset(self, sc):
        dut = self.dut
        for name in ("cmd__valid", "keys__valid", "done__ready", "desc_we", "clear_errors",
                     "clear_counters", "cmd__payload", "keys__payload", "desc_table", "desc_base",
                     "desc_rows", "desc_row_bytes", "staging_base", "staging_stride",
                     "staging_slots", "staging_banks"):
            getattr(dut, name).value = 0
        if self.kind == "latency":
            for name in ("arready", "rvalid", "rdata", "rresp", "rlast", "rid", "awready",
                         "wready", "bvalid", "bresp", "bid"):
                getattr(dut, f"bus__{name}").value = 0
        dut.rst.value = 1
        # memory image: clear what the previous scenario loaded, then load this one
        for addr, n in self.loaded:
            self.ram.write(addr, bytes(n))
        for addr, content in sc.init:
            self.ram.write(addr, content.tobytes())
        self.loaded = list(sc.regions)
        self.read_errors, self.write_errors = sc.read_errors, sc.write_errors
        if self.kind == "axiram":
            for i, (name, ch) in enumerate(self._channels().items()):
                p = sc.stalls.get(name, 0.0)
                ch.set_pause_generator(_pause_gen(p, sc.seed * 10 + i) if p else None)
        for _ in range(RESET_CYCLES):
            await RisingEdge(dut.clk)
        dut.rst.value = 0
        await RisingEdge(dut.clk)

    def _in_window(self, addr, nbytes, tables, stagings):
        """Inside a usable registered window: a table descriptor or one of the ``stagings``
        windows (those of the batches in flight) that passes the engine's own checks (others
        may not be touched at all)."""
        end, b, top = addr + nbytes, self.bus_bytes, self.size
        wins = [(base, base + r * rb) for base, r, rb in tables.values()
                if r > 0 and rb > 0 and rb % b == 0 and base % b == 0 and base + r * rb <= top]
        for base, stride, slots, banks in stagings:
            if base % b == 0 and stride % b == 0 and base + banks * slots * stride <= top:
                wins.append((base, base + banks * slots * stride))
        return any(lo <= addr and end <= hi for lo, hi in wins)

    async def run(self, sc):
        """Reset, then run scenario ``sc``; its results dict (see the module docstring)."""
        await self.reset(sc)
        return await _Run(self, sc).run()

    def _set_staging(self, window):
        dut = self.dut
        for name, value in zip(("base", "stride", "slots", "banks"), window):
            sig = getattr(dut, f"staging_{name}")
            sig.value = _fit(sig, value)

    def read_counters(self):
        dut = self.dut
        out = {name: _u(getattr(dut, name).value) for name in COUNTERS}
        out["error_cause"] = _u(dut.error_cause.value)
        return out


class _Run:
    """One scenario on a `TB`, after its reset: per clock cycle, take the steps that may start
    (`_take_steps`), drive the host streams and descriptor / clear strobes (`_drive`), sample the
    handshakes at ``ReadOnly`` and check every AR / AW (`_sample`, `_monitor`), update after the
    edge (`_update`); a ``"latency"`` scenario's `LatencyRam` takes the same phases. `run`
    returns the results dict (see the module docstring)."""

    def __init__(self, tb, sc):
        self.tb, self.dut, self.sc = tb, tb.dut, sc
        p = sc.params
        self.has_dir = p["direction"] is None
        self.end_framed = p.get("framing", "count") == "end"
        self.max_beats = p["max_burst_beats"]
        self.size_code = tb.bus_bytes.bit_length() - 1
        self.rng = random.Random(sc.seed)
        self.stall = {k: float(sc.stalls.get(k, 0.0)) for k in (*CHANNELS, "cmd", "keys", "done")}
        self.budget = sc.cycle_budget()
        self.res = {"name": sc.name, "ar": [], "aw": [], "done": [], "snapshots": [], "dumps": [],
                    "violations": []}
        self.violations = self.res["violations"]
        # staging windows as (first command that uses it, window): a batch keeps the one of
        # its command, so a burst may use any window of a batch not done yet
        self.tables, self.staging_wins = {}, []
        self.keys_queued = self.keys_taken = self.batch_first_key = 0
        # stream state
        self.si = 0
        self.cmd_q, self.keys_q = deque(), deque()
        self.cmd_on = self.keys_on = False
        self.cmds = self.dones = 0
        self.quiet = self.idle_for = 0
        self.desc_q = deque()
        self.clear_now = None
        self.done_ready = 0
        self.stats = {"first_ar": None, "last_b": None, "r_beats": 0, "w_beats": 0, "ar_count": 0}
        self.cycle = 0
        self.slave = tb.ram if tb.kind == "latency" else None
        if self.slave:
            self.slave.start(sc, tb.bus_bytes, self.rng, self.go, self.violations, self.stats)

    def go(self, name):
        """Whether stream or channel ``name`` may move this cycle (not with its stall chance)."""
        s = self.stall[name]
        return s == 0.0 or self.rng.random() >= s

    async def run(self):
        clk = self.dut.clk
        start = time.perf_counter()
        while not self._take_steps():
            self._drive()
            await ReadOnly()
            fires = self._sample()
            await RisingEdge(clk)
            self.cycle += 1
            self._update(fires)
        return await self._report(time.perf_counter() - start)

    # ---- steps ---------------------------------------------------------------------------

    def _take_steps(self):
        """Start the steps that may start now: batches at once, a mid-batch staging step after
        its keys, every other step once the engine is idle. True when all are done and the
        engine idle; AssertionError past the scenario's cycle budget."""
        idle = (self.cmds == self.dones and not self.cmd_q and not self.keys_q
                and not self.cmd_on and not self.keys_on)
        self.idle_for = self.idle_for + 1 if idle else 0
        idle = self.idle_for > 2  # counters settle two cycles after the last done
        steps = self.sc.steps
        while self.si < len(steps):
            s = steps[self.si]
            if s[0] == "batch":
                self._queue_batch(*s[1:])
                self.si += 1
                idle, self.idle_for = False, 0
                continue
            if s[0] == "staging" and s[5] is not None:  # mid-batch: no wait for idle
                if self.keys_taken < self.batch_first_key + s[5]:
                    break
                self._stage(s[1:5])
                self.si += 1
                continue
            if not idle or self.quiet or self.desc_q or self.clear_now is not None:
                break
            self._idle_step(s)
            self.si += 1
        if self.si == len(steps) and idle and not self.desc_q and self.clear_now is None:
            return True
        if self.cycle > self.budget:
            raise AssertionError(
                f"{self.sc.name}: no progress after {self.budget} cycles (step {self.si}/"
                f"{len(steps)}, {self.dones}/{self.cmds} done, {len(self.keys_q)} keys and "
                f"{len(self.cmd_q)} commands unsent, {len(self.res['ar'])} AR / "
                f"{len(self.res['aw'])} AW so far)")
        return False

    def _queue_batch(self, direction, bank, keys):
        scatter_bit = int(self.has_dir and direction == "scatter")
        self.batch_first_key, queued = self.keys_queued, len(self.keys_q)
        if self.end_framed:   # {bank, scatter}; keys {end, key}, then an end beat
            self.cmd_q.append(bank | scatter_bit << 1)
            self.keys_q.extend(int(k) << 1 for k in keys)
            self.keys_q.append(1)
        else:                 # {count, bank, scatter}; keys {key}
            self.cmd_q.append(len(keys) | bank << 16 | scatter_bit << 17)
            self.keys_q.extend(int(k) for k in keys)
        self.keys_queued += len(self.keys_q) - queued
        self.cmds += 1

    def _stage(self, window):
        self.tb._set_staging(window)
        self.staging_wins.append((self.cmds, window))

    def _idle_step(self, s):
        """A step that waits for the engine to be idle (a barrier does nothing more)."""
        p = self.sc.params
        if s[0] == "desc":
            self.desc_q.append(s[1:])
            if 0 <= s[1] < p["num_tables"]:
                self.tables[s[1]] = (s[2], s[3] & ((1 << (p["row_bits"] + 1)) - 1), s[4] & 0xFFFF)
        elif s[0] == "staging":
            self._stage(s[1:5])
            self.quiet = 2
        elif s[0] == "write":
            for i, row in enumerate(s[2]):
                self.tb.ram.write(s[1] + i * s[3], row.tobytes())
        elif s[0] == "snapshot":
            self.res["snapshots"].append(self.tb.read_counters())
        elif s[0] == "dump":
            self.res["dumps"].append(bytes(self.tb.ram.read(s[1], s[2])))
        elif s[0] == "clear":
            self.clear_now = s[1:]

    # ---- one cycle -----------------------------------------------------------------------

    def _drive(self):
        dut, go = self.dut, self.go
        if self.desc_q:
            t, base, rows, rb = self.desc_q.popleft()
            dut.desc_we.value = 1
            dut.desc_table.value = t & ((1 << len(dut.desc_table)) - 1)
            dut.desc_base.value = _fit(dut.desc_base, base)
            dut.desc_rows.value, dut.desc_row_bytes.value = rows, rb
            self.quiet = DESC_QUIET
        else:
            dut.desc_we.value = 0
        if self.clear_now is not None:
            dut.clear_counters.value = int(self.clear_now[0])
            dut.clear_errors.value = int(self.clear_now[1])
        if self.quiet:
            self.quiet -= 1
        if not self.cmd_on and self.cmd_q and not self.quiet and not self.desc_q and go("cmd"):
            self.cmd_on = True
            dut.cmd__payload.value = self.cmd_q.popleft()
            dut.cmd__valid.value = 1
        if not self.keys_on and self.keys_q and go("keys"):
            self.keys_on = True
            dut.keys__payload.value = self.keys_q.popleft()
            dut.keys__valid.value = 1
        self.done_ready = int(go("done"))
        dut.done__ready.value = self.done_ready
        if self.slave:
            self.slave.drive(dut, self.cycle)

    def _sample(self):
        """This cycle's handshakes (cmd, keys, done, ar, aw, r, w, b); records the done
        records, ARs and AWs."""
        dut, res = self.dut, self.res
        cmd_fire = self.cmd_on and bool(dut.cmd__ready.value)
        key_fire = self.keys_on and bool(dut.keys__ready.value)
        done_fire = self.done_ready and bool(dut.done__valid.value)
        if done_fire:
            v = dut.done__payload.value.to_unsigned()
            res["done"].append((v & 0xFFFF, v >> 16))
        if self.slave:
            bus = self.slave.sample(dut)
        else:
            bus = (bool(dut.bus__arvalid.value) and bool(dut.bus__arready.value),
                   bool(dut.bus__awvalid.value) and bool(dut.bus__awready.value),
                   False, False, False)
        for fire, ch in zip(bus, ("ar", "aw")):
            if fire:
                a = getattr(dut, f"bus__{ch}addr").value.to_unsigned()
                ln = getattr(dut, f"bus__{ch}len").value.to_unsigned()
                res[ch].append((a, ln))
                self._monitor(ch.upper(), a, ln, getattr(dut, f"bus__{ch}size").value.to_unsigned(),
                              getattr(dut, f"bus__{ch}burst").value.to_unsigned(),
                              _u(getattr(dut, f"bus__{ch}id").value))
        return (cmd_fire, key_fire, done_fire, bus)

    def _monitor(self, ch, addr, length, size, burst, ident):
        """Check one AR / AW handshake (see the module docstring)."""
        B, max_beats, violations = self.tb.bus_bytes, self.max_beats, self.violations
        n = (length + 1) * B
        where = f"{ch} addr={addr:#x} len={length} (cycle {self.cycle})"
        if not 1 <= length + 1 <= max_beats:
            violations.append(f"{where}: more than {max_beats} beats")
        if addr % 4096 + n > 4096:
            violations.append(f"{where}: crosses a 4 KiB boundary")
        if size != self.size_code or burst != 1 or ident != 0 or addr % B:
            violations.append(f"{where}: size {size} burst {burst} id {ident} unaligned/narrow")
        wins = self.staging_wins
        live = [w for k, (_, w) in enumerate(wins)
                if k + 1 == len(wins) or wins[k + 1][0] > self.dones]
        if not self.tb._in_window(addr, n, self.tables, live):
            violations.append(f"{where}: outside every registered window")

    def _update(self, fires):
        dut = self.dut
        cmd_fire, key_fire, done_fire, bus = fires
        if self.clear_now is not None:
            dut.clear_counters.value = dut.clear_errors.value = 0
            self.clear_now = None
            self.quiet = 2  # counters read after the clear took effect
        if cmd_fire:
            self.cmd_on = False
            dut.cmd__valid.value = 0
        if key_fire:
            self.keys_taken += 1
            self.keys_on = False
            dut.keys__valid.value = 0
        if done_fire:
            self.dones += 1
        if bus[0] and self.stats["first_ar"] is None:
            self.stats["first_ar"] = self.cycle - 1
        if self.slave:
            self.slave.update(dut, self.cycle, bus, self.res["ar"][-1] if bus[0] else None,
                              self.res["aw"][-1] if bus[1] else None)

    # ---- report --------------------------------------------------------------------------

    async def _report(self, wall):
        res, dut = self.res, self.dut
        if self.slave:
            self.slave.check_quiet()
        await RisingEdge(dut.clk)
        res.update(self.tb.read_counters())
        res["busy"] = int(dut.busy.value)
        res["memory"] = [bytes(self.tb.ram.read(a, n)) for a, n in self.sc.regions]
        res["cycles"] = self.cycle
        res["wall_s"] = wall
        res["stats"] = self.stats
        return res


async def _run_kind(dut, kind):
    scenarios = []
    for path, result in json.loads(handoff().read_text()):
        sc = _scenario_from_json(json.loads(Path(path).read_text()))
        if sc.ram == kind:
            scenarios.append((Path(result), sc))
    if not scenarios:
        return
    tb = TB(dut, kind)
    failures = []
    for path, sc in scenarios:
        try:
            res = await tb.run(sc)
        except Exception as e:  # a hang or a crash: record it, reset, go on with the next one
            res = {"name": sc.name, "error": str(e), "violations": [str(e)]}
            dut._log.error("%s", e)
        path.write_text(json.dumps(_result_json(res)))
        if "error" not in res:
            dut._log.info("%s: %d cycles, %d AR, %d AW, %d done, %.1f s", sc.name, res["cycles"],
                          len(res["ar"]), len(res["aw"]), len(res["done"]), res["wall_s"])
        if res["violations"]:
            failures.append(f"{sc.name}: {res['violations'][:5]}")
    assert not failures, "bus monitor violations or hangs: " + "; ".join(failures)


@cocotb.test()
async def run_latency_scenarios(dut):
    """Scenarios with ram == "latency" (LatencyRam)."""
    await _run_kind(dut, "latency")


@cocotb.test()
async def run_axiram_scenarios(dut):
    """Scenarios with ram == "axiram" (cocotbext-axi AxiRam)."""
    await _run_kind(dut, "axiram")
