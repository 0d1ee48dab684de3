"""HotlineAccelerator testbench: the whole top, driven the way the host runtime drives it.

`run` runs a job on the exported top under cocotb (`run_job`) and returns the results. The
job gives the host memory file (mapped by cocotbext-axi ``AxiRam`` on ``bus``: the RTL really
reads and writes the bytes the host wrote), the table descriptors and staging window (written
through ``AxiLiteMaster`` on ``axil``), the hot keys (inserted through the CAM_* registers),
the lookup beats per batch and stall probabilities.

Per batch ``b``, as a double-buffered trainer would (2 staging banks): push batch ``b + 1``'s
lookups, wait for its gather, then "train" batch ``b`` (add ``job['delta']`` to every byte of
its staging rows, modulo 256), scatter them back (SCATTER_CMD + ``scatter_keys``) and wait. The
staging bank of every batch is snapshotted right after its gather. With one bank the next batch
is pushed only after the scatter. Results (every output stream's beats, CAM responses, the
snapshots, the counters read through the CSRs, cycle and bus statistics, bus-window
violations) are what `run` returns; ``hotline.sim.accelerator_run`` compares them.
`gather_enable_mid_batch` is a second job of its own: CONFIG.gather_enable written while a
batch is half way through the fork (tests/test_accelerator.py checks it).
"""
import itertools
import json
import mmap
import time
import warnings
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotb.utils import get_sim_time

from hotline.contract.streams import RESULT_STREAMS, batch_end, batch_key, dma_done_layout, \
    unpack
from hotline.host.registers import ADDR, REGS, decode, encode
from hotline.sim.runner import handoff, run_cocotb
from hotline.sim.tb_streams import StreamSink, StreamSource

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi")
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam  # noqa: E402

DMA_DONE = dma_done_layout(scatter=True)
COUNTER_NAMES = [r.name for r in REGS if r.width == 64]


class BusMonitor:
    """Counts R beats and DMA-active cycles; records AR/AW bursts outside the windows."""

    def __init__(self, dut, windows, bus_bytes):
        self.dut, self.windows, self.bus_bytes = dut, windows, bus_bytes
        self.r_beats = self.w_beats = self.active = 0
        self.outstanding = 0
        self.violations = []

    def _check(self, kind, addr, beats):
        if self.windows is None:
            return
        end = addr + beats * self.bus_bytes
        if not any(lo <= addr and end <= hi for lo, hi in self.windows):
            self.violations.append((kind, addr, beats))
        if addr // 4096 != (end - 1) // 4096:
            self.violations.append((kind + " crosses 4 KiB", addr, beats))

    async def run(self):
        d = self.dut
        while True:
            await ReadOnly()
            if int(d.bus__arvalid.value) and int(d.bus__arready.value):
                self._check("read", int(d.bus__araddr.value), int(d.bus__arlen.value) + 1)
                self.outstanding += 1
            if int(d.bus__awvalid.value) and int(d.bus__awready.value):
                self._check("write", int(d.bus__awaddr.value), int(d.bus__awlen.value) + 1)
                self.outstanding += 1
            if int(d.bus__rvalid.value) and int(d.bus__rready.value):
                self.r_beats += 1
                self.outstanding -= int(d.bus__rlast.value)
            if int(d.bus__wvalid.value) and int(d.bus__wready.value):
                self.w_beats += 1
            if int(d.bus__bvalid.value) and int(d.bus__bready.value):
                self.outstanding -= 1
            self.active += self.outstanding > 0
            await RisingEdge(d.clk)


class TB:
    """Clock, reset, CSR master, host memory, lookup / scatter-key sources, output sinks."""

    def __init__(self, dut, job):
        self.dut, self.job = dut, job
        Clock(dut.clk, 10, unit="ns").start()
        self.memfile = open(job["memory"], "r+b")
        self.mem = mmap.mmap(self.memfile.fileno(), 0)
        self.csr = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "axil", bus_separator="__"),
                                 dut.clk, dut.rst)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "bus", bus_separator="__"), dut.clk, dut.rst,
                          size=len(self.mem), mem=self.mem)
        busy_in, busy_out = job.get("busy_in", 0.0), job.get("busy_out", 0.0)
        self.lookups = StreamSource(dut, "lookups", busy_in, 1)
        self.scatter_keys = StreamSource(dut, "scatter_keys", busy_in, 2)
        self.cam_cmds = StreamSource(dut, "cam_cmds", busy_in, 3)
        self.sinks = {n: StreamSink(dut, n, busy_out, 10 + i) for i, n in enumerate(RESULT_STREAMS)}
        self.monitor = BusMonitor(dut, job.get("windows"), len(dut.bus__rdata) // 8)

    async def reset(self):
        d = self.dut
        d.rst.value = 1
        for _ in range(3):
            await RisingEdge(d.clk)
        d.rst.value = 0
        await RisingEdge(d.clk)
        for sink in self.sinks.values():
            cocotb.start_soon(sink.run())
        cocotb.start_soon(self.monitor.run())

    async def write(self, name, value=None, **fields):
        value = encode(name, **fields) if value is None else value
        await self.csr.write_dword(ADDR.__dict__[name], value & 0xFFFFFFFF)
        if REGS[name].width == 64 or value >> 32:
            raise ValueError(f"{name}: 32-bit writes only")

    async def read(self, name):
        reg = REGS[name]
        lo = await self.csr.read_dword(reg.offset)
        if reg.width == 64:
            return lo | (await self.csr.read_dword(reg.offset + 4)) << 32
        return lo

    async def wait_until(self, cond, what, limit=2_000_000):
        for _ in range(limit):
            if cond():
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"timed out waiting for {what}")

    async def setup(self):
        job = self.job
        for t, (base, rows, row_bytes) in job["tables"].items():
            await self.write("DESC_TABLE", table=t)
            await self.write("DESC_BASE_LO", base & 0xFFFFFFFF)
            await self.write("DESC_BASE_HI", base >> 32)
            await self.write("DESC_ROWS", rows)
            await self.write("DESC_ROW_BYTES", row_bytes)
            await self.write("DESC_COMMIT", 1)
        base, stride, slots, banks = job["staging"]
        await self.write("STAGING_BASE_LO", base & 0xFFFFFFFF)
        await self.write("STAGING_BASE_HI", base >> 32)
        await self.write("STAGING_STRIDE", stride)
        await self.write("STAGING_SLOTS", slots)
        await self.write("STAGING_BANKS", banks=banks)
        await self.write("CONFIG", gather_enable=1, learner_tap=0)

    async def load_hot_set(self, keys):
        """Insert ``keys`` in order; returns [(status, slot, moves)] and the relocations."""
        responses, moves = [], []
        for key in keys:
            await self.write("CAM_KEY", int(key))
            await self.write("CAM_CMD", op="insert")
            while True:
                r = decode("CAM_RESP", await self.read("CAM_RESP"))
                if r["valid"]:
                    break
            for _ in range(r["moves"]):
                mv = decode("CAM_MOVE", await self.read("CAM_MOVE"))
                assert mv["valid"], "CAM_RESP announced a move that CAM_MOVE does not hold"
                moves.append((mv["src"], mv["dst"]))
            responses.append((r["status"], r["slot"], r["moves"]))
        return responses, moves

    def dma_done(self, scatter):
        got = self.sinks["dma_done"].got
        return int(np.count_nonzero(unpack(DMA_DONE, got)["scatter"] == scatter))

    def batch_cold_keys(self, b):
        """Cold keys of batch ``b`` from the ``batch_keys`` stream (needs it complete)."""
        keys, batch = [], 0
        for v in self.sinks["batch_keys"].got:
            if batch_end(v):
                if batch == b:
                    return keys
                batch, keys = batch + 1, []
            elif batch == b:
                keys.append(batch_key(v))
        raise AssertionError(f"batch {b} not complete on batch_keys")

    def batches_closed(self):
        return sum(batch_end(v) for v in self.sinks["batch_keys"].got)

    async def scatter(self, b, bank):
        keys = self.batch_cold_keys(b)
        await self.write("SCATTER_CMD", bank=bank)
        await self.scatter_keys.send([k << 1 for k in keys] + [1])
        want = b + 1
        await self.wait_until(lambda: self.dma_done(1) >= want, f"scatter of batch {b}")
        return keys


def _train(mem, job, bank, n):
    """The stand-in training step: every byte of the first ``n`` slots of ``bank`` += delta."""
    base, stride, slots, _ = job["staging"]
    lo = base + bank * slots * stride
    view = memoryview(mem)[lo:lo + n * stride]
    data = bytes((x + job["delta"]) & 0xFF for x in view)
    mem[lo:lo + n * stride] = data


def run(dut, job, *, build_dir, simulator="verilator", testcase="run_job"):
    """Run ``job`` on the accelerator top ``dut`` (exported as ``hotline_accelerator``) under
    cocotb; returns the result dict (see the module docstring). Raises `CocotbFailure` if the
    run fails (a timeout waiting for a gather, scatter or batch among them). ``testcase``:
    the cocotb test that runs it, `run_job` or `gather_enable_mid_batch` (its own job).

    ``job``: ``memory`` (the host memory file, read and written in place), ``tables``
    ({table: (base, rows, row_bytes)}), ``staging`` ((base, stride, slots, banks)), ``windows``
    ([(lo, hi)] that every burst must fall in; None: unchecked), ``hot_keys``, ``batches``
    (lookup-beat payloads per batch), ``delta``, ``busy_in`` / ``busy_out`` (stall
    probabilities), ``soft_reset_first`` (run `abandon_and_soft_reset` before the job),
    ``faults_first`` (run `watchdog_faults` before the job). ``build_dir``
holds the build, ``job.json`` and ``result.json``.
    """
    build_dir = Path(build_dir).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    job_path, result_path = build_dir / "job.json", build_dir / "result.json"
    job_path.write_text(json.dumps({**job, "result": str(result_path)}))
    result_path.unlink(missing_ok=True)
    run_cocotb(dut, "hotline_accelerator", __name__, build_dir, simulator, testcase=testcase,
               handoff=job_path)
    result = json.loads(result_path.read_text())
    result["snapshots"] = [bytes.fromhex(s) for s in result["snapshots"]]
    for name in ("responses", "moves", "violations"):
        result[name] = [tuple(x) for x in result.get(name, ())]
    return result


async def abandon_and_soft_reset(tb, job):
    """Leave the top as a host that died mid-gather would (another hot set, the learner
    counting, batch 0 and half of batch 1 sent, the gather under way), write CONTROL.soft_reset
    while the gather's bursts are in flight, and wait for STATUS.resetting to fall. Returns
    what the registers read right after (every counter but CYCLES, STATUS, CONFIG and
    ERROR_CAUSE, and the non-empty entries among 256 learner entries, must be 0) and the R
    beats the gate let finish after the request. The output
    beats and bus statistics of this phase are then forgotten."""
    batches = job["batches"]
    await tb.setup()
    await tb.load_hot_set(job["hot_keys"][::-1][:len(job["hot_keys"]) // 2])
    await tb.write("CONFIG", gather_enable=1, learner_tap=1)
    await tb.write("CONTROL", learner_start=1)
    feeding = cocotb.start_soon(tb.lookups.send(batches[0] + batches[1][:len(batches[1]) // 2]))
    await tb.wait_until(lambda: tb.monitor.r_beats > 4, "the abandoned gather's first reads")
    await tb.write("CONTROL", soft_reset=1)
    r_at_request = tb.monitor.r_beats
    tb.lookups.abort()
    await feeding
    polls = 0
    while decode("STATUS", await tb.read("STATUS"))["resetting"]:
        polls += 1
    after = {name: await tb.read(name) for name in COUNTER_NAMES if name != "CYCLES"}
    after.update({name: await tb.read(name) for name in ("STATUS", "CONFIG", "ERROR_CAUSE")})
    # 256 learner entries spread over the table (it counted the abandoned lookups): all empty
    entries = await tb.read("LEARNER_ENTRIES")
    learned = 0
    for addr in range(0, entries, max(1, entries // 256)):
        await tb.write("LEARNER_ADDR", addr)
        while not decode("STATUS", await tb.read("STATUS"))["learner_valid"]:
            pass
        learned += (await tb.read("LEARNER_COUNT")) != 0
    after["learner_entries_counted"] = learned
    drained = tb.monitor.r_beats - r_at_request
    for sink in tb.sinks.values():
        sink.got.clear()
    tb.monitor.r_beats = tb.monitor.w_beats = 0
    return {"after_reset": after, "r_beats_after_request": drained, "resetting_polls": polls}


async def watchdog_faults(tb, job):
    """Two faults the watchdog must turn into counted errors, then a recovery. (1) A scatter
    whose ``end`` beat never comes (two keys of an unregistered table, then nothing) while
    batch 0's gather waits behind it: the scatter must be closed (done record: 0 rows, 2
    errors) and the gather must complete. (2) A one-row scatter whose write response the
    memory holds back, and CONTROL.soft_reset: the reset must complete; the held response is
    released afterwards (the gate must drop it). The row scattered is table 0's row 0, from
    a staging slot that holds a copy of it, so the memory the run after reads is unchanged.
    Returns TIMEOUTS, ERROR_CAUSE and STATUS.error after each, the DMA done records of (1) and
    the cycles the reset took. The output beats and bus statistics of this phase are then
    forgotten."""
    batches = job["batches"]
    await tb.setup()
    row_bits = await tb.read("ROW_BITS")
    missing = (await tb.read("NUM_TABLES") - 1) << row_bits   # a table without a descriptor
    assert missing >> row_bits not in job["tables"]
    out = {}
    await tb.write("SCATTER_CMD", bank=0)
    await tb.scatter_keys.send([missing << 1, (missing + 1) << 1])      # no end beat
    feeding = cocotb.start_soon(tb.lookups.send(batches[0]))
    await tb.wait_until(lambda: tb.dma_done(0) >= 1, "the gather behind the unfinished scatter",
                        limit=20 * (await tb.read("WATCHDOG_CYCLES")) + 200_000)
    await feeding
    done = unpack(DMA_DONE, tb.sinks["dma_done"].got)
    out["scatter_done"] = [(int(r), int(e)) for r, e, sc in
                           zip(done["rows"], done["errors"], done["scatter"]) if sc]

    async def errors():
        return {"timeouts": await tb.read("TIMEOUTS"),
                "timeout_cause": decode("ERROR_CAUSE", await tb.read("ERROR_CAUSE"))["timeout"],
                "status_error": decode("STATUS", await tb.read("STATUS"))["error"]}
    out["after_scatter"] = await errors()
    b_channel = tb.ram.write_if.b_channel
    b_channel.set_pause_generator(itertools.repeat(True))
    table_base, _, row_bytes = job["tables"][0]
    staging_base = job["staging"][0]
    tb.mem[staging_base:staging_base + row_bytes] = tb.mem[table_base:table_base + row_bytes]
    w_before = tb.monitor.w_beats
    await tb.write("SCATTER_CMD", bank=0)
    await tb.scatter_keys.send([0 << 1, 1])                     # table 0, row 0; end
    await tb.wait_until(lambda: tb.monitor.w_beats > w_before, "the scatter's write burst")
    await tb.write("CONTROL", soft_reset=1)
    t0 = get_sim_time("ns")
    for _ in range(100_000):     # a STATUS read takes 5 cycles: far beyond the watchdog
        if not decode("STATUS", await tb.read("STATUS"))["resetting"]:
            break
    else:
        raise AssertionError("the soft reset did not complete")
    out["reset_cycles"] = int((get_sim_time("ns") - t0) // 10)   # a 10 ns clock
    b_channel.set_pause_generator(None)       # the held response comes now, after the reset
    b_channel.pause = False                   # (the generator's last value would stay)
    for _ in range(200):
        await RisingEdge(tb.dut.clk)
    out["after_reset"] = await errors()
    for sink in tb.sinks.values():
        sink.got.clear()
    tb.monitor.r_beats = tb.monitor.w_beats = 0
    return {"faults": out}


@cocotb.test()
async def run_job(dut):
    """Run the job of the handoff (written by `run`) and save its results."""
    job = json.loads(handoff().read_text())
    job["tables"] = {int(t): tuple(v) for t, v in job["tables"].items()}  # JSON keys are strings
    tb = TB(dut, job)
    await tb.reset()
    t0 = time.perf_counter()
    abandoned = await abandon_and_soft_reset(tb, job) if job.get("soft_reset_first") else {}
    if job.get("faults_first"):
        abandoned.update(await watchdog_faults(tb, job))
    await tb.setup()
    responses, moves = await tb.load_hot_set(job["hot_keys"])
    await tb.write("CONTROL", clear_counters=1)
    base, stride, slots, banks = job["staging"]
    batches = job["batches"]  # list of lookup-beat payload lists
    snapshots = []
    pushing = None

    def push(b):
        return cocotb.start_soon(tb.lookups.send(batches[b]))

    async def gathered(b):
        await tb.wait_until(lambda: tb.dma_done(0) >= b + 1, f"gather of batch {b}")
        await tb.wait_until(lambda: tb.batches_closed() >= b + 1, f"batch {b} summary")
        n = len(tb.batch_cold_keys(b))
        lo = base + (b % banks) * slots * stride
        snapshots.append(bytes(tb.mem[lo:lo + n * stride]))
        return n

    cycles_t0 = tb.monitor.active
    if batches:
        pushing = push(0)
        n = await gathered(0)
    for b in range(len(batches)):
        if banks == 2 and b + 1 < len(batches):
            await pushing
            pushing = push(b + 1)
            n_next = await gathered(b + 1)
        _train(tb.mem, job, b % banks, n)
        await tb.scatter(b, b % banks)
        if banks == 1 and b + 1 < len(batches):
            await pushing
            pushing = push(b + 1)
            n_next = await gathered(b + 1)
        if b + 1 < len(batches):
            n = n_next
    total = sum(len(x) for x in batches)
    for _ in range(50):
        await RisingEdge(dut.clk)
    counters = {name: await tb.read(name) for name in COUNTER_NAMES}
    status = decode("STATUS", await tb.read("STATUS"))
    cause = decode("ERROR_CAUSE", await tb.read("ERROR_CAUSE"))
    result = {
        "streams": {n: s.got for n, s in tb.sinks.items()},
        "responses": responses, "moves": moves, "snapshots": [s.hex() for s in snapshots],
        "counters": counters, "status": status, "error_cause": cause,
        "r_beats": tb.monitor.r_beats, "w_beats": tb.monitor.w_beats,
        "dma_active_cycles": tb.monitor.active - cycles_t0,
        "violations": tb.monitor.violations, "lookup_beats": total,
        "wall_seconds": time.perf_counter() - t0, **abandoned,
    }
    tb.mem.flush()
    Path(job["result"]).write_text(json.dumps(result))


@cocotb.test()
async def gather_enable_mid_batch(dut):
    """CONFIG.gather_enable written while a batch is half way through ``batch_keys`` (the
    stream held after the batch's first 4 beats, so that the write lands mid-batch). The job:
    ``tables``, ``staging``, ``batches`` (lookup beats, every key cold), ``windows``,
    ``writes`` (per batch: the value written before it and the one written mid-batch, None:
    no write), ``gathers`` (the gather done records to wait for, at most 20,000 cycles); the
    result: every output stream, the staging banks at the end, the counters and ERROR_CAUSE."""
    job = json.loads(handoff().read_text())
    job["tables"] = {int(t): tuple(v) for t, v in job["tables"].items()}
    tb = TB(dut, job)
    await tb.reset()
    await tb.setup()
    await tb.write("CONTROL", clear_counters=1)
    sink = tb.sinks["batch_keys"]
    for b, (before, mid) in enumerate(job["writes"]):
        if before is not None:
            await tb.write("CONFIG", gather_enable=before)
        start = len(sink.got)
        feeding = cocotb.start_soon(tb.lookups.send(job["batches"][b]))
        if mid is not None:
            await tb.wait_until(lambda: len(sink.got) >= start + 4, f"batch {b}'s keys")
            sink.busy = 1.0      # batch_keys held: the rest of the batch waits at the fork
            await tb.write("CONFIG", gather_enable=mid)
            sink.busy = 0.0
        await feeding
        await tb.wait_until(lambda: tb.batches_closed() >= b + 1, f"batch {b} summary")
    # unlatched, clearing it mid-batch left the engine waiting for an end beat: no done record
    await tb.wait_until(lambda: tb.dma_done(0) >= job["gathers"], "the gathers", limit=20_000)
    for _ in range(200):     # a late or extra gather would show in the streams
        await RisingEdge(dut.clk)
    base, stride, slots, banks = job["staging"]
    staging = bytes(tb.mem[base:base + banks * slots * stride])
    result = {
        "streams": {n: s.got for n, s in tb.sinks.items()}, "snapshots": [staging.hex()],
        "counters": {name: await tb.read(name) for name in COUNTER_NAMES},
        "error_cause": decode("ERROR_CAUSE", await tb.read("ERROR_CAUSE")),
        "violations": tb.monitor.violations,
    }
    tb.mem.flush()
    Path(job["result"]).write_text(json.dumps(result))
