"""cocotb testbench of the AccessLearner (Verilog from ``hotline.sim.runner``).

Configured by environment (see ``hotline.sim.bench_access_learner.cocotb_stream``):
AL_PARAMS (JSON constructor arguments), AL_KEYS (.npy of uint32 keys), AL_GAP (probability of
an idle cycle before each key), AL_OPS (JSON: key index -> list of "start", "stop", "clear",
"check" applied on that key's cycle; "check" reads the whole table back first), AL_SEED,
AL_REPORT (JSON written at the end: lookups driven, lookups per second while streaming),
AL_ENTRIES (.npz of the final readout: keys and counts per entry address).
Every entry read back, and the ``counted`` and ``dropped`` counters, must equal
``AccessLearnerModel`` fed with the keys that the RTL reported as counted (``active`` high in
the transfer cycle).
"""
import json
import os
import random
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from hotline.model.access_learner import AccessLearnerModel
from hotline.hw.access_learner import READ_LATENCY, AccessLearner


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


@cocotb.test()
async def run_stream(dut):
    params = json.loads(os.environ.get("AL_PARAMS", "{}"))
    keys = np.load(os.environ["AL_KEYS"]).tolist()
    ops = {int(k): v for k, v in json.loads(os.environ.get("AL_OPS", "{}")).items()}
    tb = TB(dut, params, seed=int(os.environ.get("AL_SEED", "0")))
    await tb.reset()
    await tb.cycle(start=1)
    t0 = time.perf_counter()
    await tb.stream(keys, float(os.environ.get("AL_GAP", "0")), ops)
    elapsed = time.perf_counter() - t0
    await tb.check()
    if "AL_REPORT" in os.environ:
        with open(os.environ["AL_REPORT"], "w") as f:
            json.dump({"lookups": len(keys), "lookups_per_s": len(keys) / elapsed,
                       "dropped": dut.dropped.value.to_unsigned()}, f)
    if "AL_ENTRIES" in os.environ:
        np.savez(os.environ["AL_ENTRIES"], keys=tb.readout[0], counts=tb.readout[1])
