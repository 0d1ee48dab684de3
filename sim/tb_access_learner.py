"""cocotb testbench of the AccessLearner, and its runner `run`.

`run` exports an AccessLearner, streams keys into it under cocotb (`run_stream`) and returns
the report. Every entry read back, and the ``counted`` and ``dropped`` counters, must equal
``AccessLearnerModel`` fed with the keys that the RTL reported as counted (``active`` high in
the transfer cycle).
"""
import json
import random
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from hotline.model.access_learner import AccessLearnerModel
from hotline.hw.access_learner import READ_LATENCY, AccessLearner
from hotline.sim.runner import handoff, run_cocotb


class TB:
    """Clock, reset, lookup driver with random valid gaps, readout and model comparison."""

    def __init__(self, dut, params, seed=0):
        self.dut = dut
        shape = AccessLearner(**params)
        self.capacity = shape.buckets * shape.ways
        self.key_bits, self.count_bits = shape.key_bits, shape.count_bits
        self.model = AccessLearnerModel(**params)
        self.rng = random.Random(seed)
        self.window = False
        self.counted = []

    async def reset(self):
        dut = self.dut
        Clock(dut.clk, 10, unit="ns").start()
        for port in (dut.lookups__valid, dut.lookups__payload, dut.start, dut.stop, dut.clear,
                     dut.read_addr):
            port.value = 0
        dut.rst.value = 1
        for _ in range(2):
            await RisingEdge(dut.clk)
        dut.rst.value = 0
        # Block RAM keeps its contents over a reset: start every test from a cleared table.
        await self.cycle(clear=1)
        await self.wait_idle()

    async def cycle(self, valid=0, key=0, start=0, stop=0, clear=0):
        """Drive one clock cycle and record whether its key was counted."""
        dut = self.dut
        await RisingEdge(dut.clk)
        dut.lookups__valid.value = valid
        dut.lookups__payload.value = key
        dut.start.value = start
        dut.stop.value = stop
        dut.clear.value = clear
        await ReadOnly()
        assert int(dut.lookups__ready.value) == 1, "the learner stalled the lookup stream"
        active = int(dut.active.value)
        assert active == (self.window and not int(dut.clearing.value))
        if valid and active:
            self.counted.append(key)
        if clear:
            self.counted.clear()
            self.model.clear()
        self.window = not stop and (start or self.window)

    async def stream(self, keys, gap=0.0, ops=None):
        """Drive ``keys`` with a random idle cycle before each key with probability ``gap``."""
        ops = ops or {}
        for i, key in enumerate(keys):
            todo = ops.get(i, ())
            if "check" in todo:
                await self.check()
            while self.rng.random() < gap:
                await self.cycle(key=self.rng.getrandbits(self.key_bits))
            await self.cycle(1, key, *(int(op in todo) for op in ("start", "stop", "clear")))

    async def wait_idle(self, limit=None):
        for _ in range(limit or self.capacity + 8):
            await self.cycle()
            if int(self.dut.idle.value):
                return
        raise AssertionError("the learner never became idle")

    async def read_entries(self):
        """(keys, counts) of every entry address, one read per cycle, pipelined."""
        dut = self.dut
        rows = []
        for addr in range(self.capacity + READ_LATENCY):
            await RisingEdge(dut.clk)
            dut.read_addr.value = addr % self.capacity
            await ReadOnly()
            if addr >= READ_LATENCY:
                rows.append(dut.read_data.value.to_unsigned())
        rows = np.array(rows, dtype=object)
        valid = (rows & 1).astype(np.uint8)
        keys = ((rows >> 1) & ((1 << self.key_bits) - 1)).astype(np.uint64)
        counts = (rows >> (1 + self.key_bits)).astype(np.uint64)
        assert np.array_equal(valid, counts > 0), "valid must mean count != 0"
        return keys, counts

    async def check(self):
        """Close the window, drain, compare every entry with the model; reopen if open."""
        reopen = self.window
        await self.cycle(stop=1)
        await self.wait_idle()
        self.model.update(self.counted)
        self.counted = []
        keys, counts = await self.read_entries()
        want_keys, want_counts = self.model.entries()
        bad = np.nonzero((keys != want_keys) | (counts != want_counts))[0]
        assert not bad.size, (f"{bad.size} entries differ, first at address {bad[0]}: "
                              f"rtl ({keys[bad[0]]:#x}, {counts[bad[0]]}) model "
                              f"({want_keys[bad[0]]:#x}, {want_counts[bad[0]]})")
        assert self.dut.counted.value.to_unsigned() == self.model.counted
        assert self.dut.dropped.value.to_unsigned() == self.model.dropped
        self.readout = keys, counts
        if reopen:
            await self.cycle(start=1)


def run(keys, *, build_dir, simulator="verilator", params=None, gap=0.0, ops=None, seed=1):
    """Stream ``keys`` into ``AccessLearner(**params)`` under cocotb, the RTL checked against
    the model entry by entry (a difference raises `CocotbFailure`).

    ``gap``: the probability of an idle cycle (random key, valid low) before each key, drawn
    from ``seed``. ``ops`` maps a key index to a list of "start", "stop", "clear" (pulsed on
    that key's cycle) and "check" (read the whole table back first). Returns the report:
    ``lookups`` driven, ``lookups_per_s`` while streaming, ``dropped`` keys, and ``entries`` =
    the final readout (keys, counts) of the RTL. ``build_dir`` holds the build, the keys
    (``keys.npy``), the job (``job.json``), ``report.json`` and ``entries.npz``.
    """
    params = params or {}
    build_dir = Path(build_dir).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    np.save(build_dir / "keys.npy", np.asarray(keys, dtype=np.uint32))
    report = build_dir / "report.json"
    report.unlink(missing_ok=True)
    job = build_dir / "job.json"
    job.write_text(json.dumps({"params": params, "keys": str(build_dir / "keys.npy"), "gap": gap,
                               "ops": {str(k): v for k, v in (ops or {}).items()}, "seed": seed,
                               "report": str(report), "entries": str(build_dir / "entries.npz")}))
    run_cocotb(AccessLearner(**params), "access_learner", __name__, build_dir,
               simulator=simulator, handoff=job)
    out = json.loads(report.read_text())
    with np.load(build_dir / "entries.npz") as z:
        out["entries"] = (z["keys"], z["counts"])
    return out


@cocotb.test()
async def run_stream(dut):
    """Stream the keys of the handoff (written by `run`) with its gaps and ops."""
    job = json.loads(handoff().read_text())
    keys = np.load(job["keys"]).tolist()
    ops = {int(k): v for k, v in job["ops"].items()}
    tb = TB(dut, job["params"], seed=job["seed"])
    await tb.reset()
    await tb.cycle(start=1)
    t0 = time.perf_counter()
    await tb.stream(keys, job["gap"], ops)
    elapsed = time.perf_counter() - t0
    await tb.check()
    Path(job["report"]).write_text(json.dumps({
        "lookups": len(keys), "lookups_per_s": len(keys) / elapsed,
        "dropped": dut.dropped.value.to_unsigned()}))
    np.savez(job["entries"], keys=tb.readout[0], counts=tb.readout[1])
