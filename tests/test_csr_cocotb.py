"""CSRBank under cocotb on Verilator and Icarus: every register's access semantics, driven from
the register map, through cocotbext-axi's ``AxiLiteMaster``. The testbench, its cocotb tests
and their pytest entry in one file, as cocotbext-axi's own tests are: pytest
(`test_cocotb_csr_bank`) exports the bank and runs this module's cocotb tests in the simulator.

``TB`` plays the AXI4-Lite master and the top around the bank (``HOTLINE_REGISTERS`` built
with ``CONSTANTS``): it drives the ``ro`` inputs, serves each ``rc`` register from a FIFO it
pops on ``_rstb`` (at the clock edge after the strobe, as a show-ahead FIFO would), and records
every ``_stb`` / ``_rstb`` pulse with the cycle it was seen in. The directed tests run once
per combination of idle cycles on the master's AW, W and AR channels and backpressure on its B
and R channels.
"""
import itertools
import random
import warnings
from collections import deque

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hotline.contract.regmap import HOTLINE_REGISTERS
from hotline.host.simulators import SIMULATORS
from hotline.hw.csr import CSRBank
from hotline.sim.runner import run_cocotb

warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi")
from cocotbext.axi import AxiLiteBus, AxiLiteMaster  # noqa: E402

CONSTANTS = {"CAM_ENTRIES": 16384, "COLD_MAX_KEYS": 32768, "ROW_BITS": 27}
SEED = 1
STRESS_OPS = {"verilator": 300, "icarus": 150}   # per direction and pause level

OKAY, SLVERR = 0, 2
TIMEOUT_US = 2000


def lane_mask(strb):
    return sum(0xFF << 8 * i for i in range(4) if strb >> i & 1)


def contiguous(strb):
    """(first byte, length) if the set bits of ``strb`` are contiguous and non-empty, else None."""
    if not strb:
        return None
    lo = (strb & -strb).bit_length() - 1
    n = bin(strb).count("1")
    return (lo, n) if strb >> lo == (1 << n) - 1 else None


def pauses(rng, p):
    while True:
        yield rng.random() < p


class TB:
    """Master + model of the top around one CSRBank; see the module docstring."""

    def __init__(self, dut, seed_offset=0):
        self.dut = dut
        self.regs = HOTLINE_REGISTERS
        self.constants = {r.name: r.value for r in self.regs if r.value is not None}
        self.constants.update(CONSTANTS)
        self.rng = random.Random(SEED * 1000 + seed_offset)
        self.by_access = {a: [r for r in self.regs if r.access == a] for a in ("ro", "rw", "wo", "rc")}
        self.ro_ports = [r for r in self.by_access["ro"] if r.name not in self.constants]
        self.addr_width = len(dut.axil__awaddr)
        Clock(dut.clk, 10, unit="ns").start()
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "axil", bus_separator="__"),
                                  dut.clk, dut.rst)
        self.axil.write_if.log.setLevel("WARNING")
        self.axil.read_if.log.setLevel("WARNING")
        self.cycle = 0
        self.stb = {r.name: [] for r in self.by_access["wo"]}    # (cycle, value)
        self.rstb = {r.name: [] for r in self.by_access["rc"]}   # (cycle, value sampled)
        self.fifo = {r.name: deque() for r in self.by_access["rc"]}
        self.ro_value = {r.name: 0 for r in self.ro_ports}
        self.rw_model = {r.name: 0 for r in self.by_access["rw"]}
        self.wo_model = {r.name: 0 for r in self.by_access["wo"]}

    def port(self, reg, suffix=""):
        return getattr(self.dut, reg.port_name + suffix)

    # ---- the top's side ---------------------------------------------------------------------
    def set_ro(self, reg, value):
        self.ro_value[reg.name] = value
        self.port(reg).value = value

    def _drive_rc(self, name):
        q = self.fifo[name]
        self.port(self.regs[name]).value = q[0] if q else 0

    def push_rc(self, reg, values):
        self.fifo[reg.name].extend(values)
        self._drive_rc(reg.name)

    async def _monitor(self):
        wo, rc = self.by_access["wo"], self.by_access["rc"]
        pop = []
        while True:
            await RisingEdge(self.dut.clk)
            for name in pop:
                if self.fifo[name]:
                    self.fifo[name].popleft()
                self._drive_rc(name)
            await ReadOnly()
            self.cycle += 1
            pop = []
            for r in wo:
                if int(self.port(r, "_stb").value):
                    self.stb[r.name].append((self.cycle, int(self.port(r).value)))
            for r in rc:
                if int(self.port(r, "_rstb").value):
                    self.rstb[r.name].append((self.cycle, int(self.port(r).value)))
                    pop.append(r.name)

    async def reset(self):
        dut = self.dut
        for r in self.ro_ports:
            self.set_ro(r, 0)
        for r in self.by_access["rc"]:
            self._drive_rc(r.name)
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        cocotb.start_soon(self._monitor())

    def set_idle_generator(self, generator=None):
        """Idle cycles on the master's AW, W and AR channels (``generator()`` yields one
        pause flag per cycle), or none."""
        self._pause((self.axil.write_if.aw_channel, self.axil.write_if.w_channel,
                     self.axil.read_if.ar_channel), generator)

    def set_backpressure_generator(self, generator=None):
        """Backpressure on the master's B and R channels (ready low while paused), or none."""
        self._pause((self.axil.write_if.b_channel, self.axil.read_if.r_channel), generator)

    @staticmethod
    def _pause(channels, generator):
        for ch in channels:
            ch.set_pause_generator(generator() if generator else None)
            if not generator:
                ch.pause = False  # clearing the generator leaves the last pause value

    def stall(self, p, seed=None):
        """Random idle cycles and backpressure with probability ``p`` on all five channels."""
        rng = random.Random(seed if seed is not None else self.rng.random())
        gen = (lambda: pauses(random.Random(rng.random()), p)) if p else None
        self.set_idle_generator(gen)
        self.set_backpressure_generator(gen)

    # ---- bus access -------------------------------------------------------------------------
    async def read(self, addr):
        r = await self.axil.read(addr, 4)
        return int.from_bytes(r.data, "little"), int(r.resp)

    async def write(self, addr, value, strb=0xF):
        """Write with any byte strobes (non-contiguous ones go straight to the channels)."""
        span = contiguous(strb)
        if span:
            lo, n = span
            data = (value >> 8 * lo & (1 << 8 * n) - 1).to_bytes(n, "little")
            return int((await self.axil.write(addr + lo, data)).resp)
        return await self.raw_write(addr, value, strb)

    async def raw_write(self, addr, value, strb=0xF, order="aw", gap=0):
        """One write on the AW / W channels directly: ``order`` "aw" or "w" goes first, the
        other ``gap`` cycles later (the master must be idle)."""
        wi = self.axil.write_if
        aw = wi.aw_channel._transaction_obj()
        aw.awaddr, aw.awprot = addr, 0
        w = wi.w_channel._transaction_obj()
        w.wdata, w.wstrb = value, strb
        first, second = (wi.aw_channel, aw), (wi.w_channel, w)
        if order == "w":
            first, second = second, first
        await first[0].send(first[1])
        if gap:
            await ClockCycles(self.dut.clk, gap)
        await second[0].send(second[1])
        b = await wi.b_channel.recv()
        return int(b.bresp)

    # ---- expectations -----------------------------------------------------------------------
    def expected_read(self, addr):
        """(data, resp) a read of ``addr`` must return now (static ro inputs; no rc/64-bit HI)."""
        hit = self.regs.at(addr)
        if hit is None:
            return 0, SLVERR
        r, word = hit
        if r.access == "rw":
            return self.rw_model[r.name], OKAY
        if r.access == "wo":
            return 0, OKAY
        value = self.constants.get(r.name, self.ro_value.get(r.name, 0)) & r.mask
        return value >> 32 * word & 0xFFFFFFFF, OKAY

    def apply_write(self, addr, value, strb):
        """Update the model for a write; return the expected response."""
        hit = self.regs.at(addr)
        if hit is None:
            return SLVERR
        r, _ = hit
        lanes = lane_mask(strb)
        if r.access == "rw":
            old = self.rw_model[r.name]
            self.rw_model[r.name] = (old & ~lanes | value & lanes) & r.mask
            return OKAY
        if r.access == "wo":
            self.wo_model[r.name] = value & lanes & r.mask
            return OKAY
        return SLVERR

    async def check_rw_ports(self):
        await ReadOnly()
        for r in self.by_access["rw"]:
            got = int(self.port(r).value)
            assert got == self.rw_model[r.name], f"{r.name} port {got:#x} != {self.rw_model[r.name]:#x}"
        await RisingEdge(self.dut.clk)

    def strobe_counts(self):
        return ({n: len(v) for n, v in self.stb.items()}, {n: len(v) for n, v in self.rstb.items()})

    def random_value(self, reg):
        return self.rng.getrandbits(reg.width) & reg.mask if reg.fields else self.rng.getrandbits(reg.width)

    def unmapped_words(self):
        return [a for a in range(0, 1 << self.addr_width, 4) if self.regs.at(a) is None]


def cycle_pause():
    return itertools.cycle([1, 1, 1, 0])


async def start(dut, seed_offset, idle=None, backpressure=None):
    tb = TB(dut, seed_offset)
    await tb.reset()
    tb.set_idle_generator(idle)
    tb.set_backpressure_generator(backpressure)
    return tb


def csr_test(fn):
    return cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")(fn)


def idle_and_backpressure(fn):
    """The cocotb test factory: ``fn(dut, idle, backpressure)`` once per combination of no
    pauses and `cycle_pause` on each side."""
    return cocotb.parametrize(idle=[None, cycle_pause], backpressure=[None, cycle_pause])(fn)


@csr_test
@idle_and_backpressure
async def ro_inputs_and_constants(dut, idle, backpressure):
    """ro reads reflect the top's inputs (LO then HI) or the constants; writes answer SLVERR
    and change nothing."""
    tb = await start(dut, 1, idle, backpressure)
    for _ in range(3):
        for r in tb.ro_ports:
            tb.set_ro(r, tb.rng.getrandbits(r.width))
        await RisingEdge(dut.clk)
        for r in tb.by_access["ro"]:
            for w in range(r.words):
                got = await tb.read(r.offset + 4 * w)
                exp = tb.expected_read(r.offset + 4 * w)
                assert got == exp, f"{r.name} word {w}: got {got}, expected {exp}"
    before = tb.strobe_counts()
    for r in tb.by_access["ro"]:
        for w in range(r.words):
            assert await tb.write(r.offset + 4 * w, 0xFFFFFFFF) == SLVERR, r.name
            lo = await tb.read(r.offset)
            assert lo == tb.expected_read(r.offset), f"{r.name} changed by a write"
    assert tb.strobe_counts() == before
    assert all(v == 0 for v in tb.rw_model.values())
    await tb.check_rw_ports()


@csr_test
@idle_and_backpressure
async def rw_byte_strobes(dut, idle, backpressure):
    """rw: every strobe pattern (contiguous or not, or none) writes exactly its byte lanes;
    the held value shows on the port and reads back; reserved bits stay 0."""
    tb = await start(dut, 2, idle, backpressure)
    strobes = list(range(16))
    for r in tb.by_access["rw"]:
        tb.rng.shuffle(strobes)
        for strb in [0xF] + strobes:
            value = tb.rng.getrandbits(32)
            assert await tb.write(r.offset, value, strb) == tb.apply_write(r.offset, value, strb) == OKAY
            assert await tb.read(r.offset) == (tb.rw_model[r.name], OKAY), \
                f"{r.name} strb {strb:04b}: got {(await tb.read(r.offset))[0]:#x}, expected {tb.rw_model[r.name]:#x}"
        await tb.check_rw_ports()
    # Independent registers: each kept its own value.
    for r in tb.by_access["rw"]:
        assert await tb.read(r.offset) == (tb.rw_model[r.name], OKAY), r.name
    assert tb.strobe_counts() == ({n: 0 for n in tb.stb}, {n: 0 for n in tb.rstb})


@csr_test
@idle_and_backpressure
async def wo_strobes(dut, idle, backpressure):
    """wo: each write strobes exactly once, in the cycle the port shows the written bytes
    (unwritten lanes 0); the value is held afterwards; reads return 0 and strobe nothing."""
    tb = await start(dut, 3, idle, backpressure)
    for r in tb.by_access["wo"]:
        for strb in (0xF, 0x1, 0x6, 0x9, 0x0, 0xF):
            value = tb.random_value(r) | tb.rng.getrandbits(32)
            n = len(tb.stb[r.name])
            assert await tb.write(r.offset, value, strb) == tb.apply_write(r.offset, value, strb) == OKAY
            await ClockCycles(dut.clk, 2)
            assert len(tb.stb[r.name]) == n + 1, f"{r.name}: {len(tb.stb[r.name]) - n} strobes"
            assert tb.stb[r.name][-1][1] == tb.wo_model[r.name], r.name
            await ReadOnly()
            assert int(tb.port(r).value) == tb.wo_model[r.name], f"{r.name} not held"
            await RisingEdge(dut.clk)
        counts = tb.strobe_counts()
        assert await tb.read(r.offset) == (0, OKAY), r.name
        await ClockCycles(dut.clk, 2)
        assert tb.strobe_counts() == counts, f"reading {r.name} strobed"
    # Nothing else strobed: one strobe per write in total.
    assert all(len(v) == 6 for v in tb.stb.values())


@csr_test
@idle_and_backpressure
async def rc_pops(dut, idle, backpressure):
    """rc: each read returns the current head and strobes once in the cycle it was sampled (the
    top pops it); writes answer SLVERR and pop nothing."""
    tb = await start(dut, 4, idle, backpressure)
    items = {}
    for r in tb.by_access["rc"]:
        items[r.name] = [tb.rng.getrandbits(32) for _ in range(8)]
        tb.push_rc(r, items[r.name])
    await RisingEdge(dut.clk)
    for i in range(8):
        for r in tb.by_access["rc"]:  # interleaved: each register pops only its own FIFO
            data, resp = await tb.read(r.offset)
            assert resp == OKAY
            assert data == items[r.name][i] & r.mask, f"{r.name} item {i}: {data:#x}"
            assert len(tb.rstb[r.name]) == i + 1
            assert tb.rstb[r.name][-1][1] & r.mask == data
    await ClockCycles(dut.clk, 2)
    for r in tb.by_access["rc"]:
        tb.push_rc(r, [0x12345678])
        assert await tb.write(r.offset, 0xFFFFFFFF) == SLVERR
        await ClockCycles(dut.clk, 3)
        assert len(tb.rstb[r.name]) == 8 and len(tb.fifo[r.name]) == 1, f"writing {r.name} popped"
        assert (await tb.read(r.offset))[0] == 0x12345678 & r.mask


@csr_test
async def counter_snapshot(dut):
    """64-bit ro: reading LO snapshots HI (per register), so LO-then-HI is atomic, even for a
    counter running across a carry into HI, with the bus stalling randomly."""
    tb = await start(dut, 5)
    wide = [r for r in tb.ro_ports if r.width == 64]
    if not wide:
        return
    a, b = wide[0], wide[-1]
    tb.set_ro(a, 0x11111111_22222222)
    tb.set_ro(b, 0x33333333_44444444)
    await RisingEdge(dut.clk)
    assert await tb.read(a.offset) == (0x22222222, OKAY)
    tb.set_ro(a, 0x55555555_66666666)
    assert await tb.read(b.offset) == (0x44444444, OKAY)  # another counter's LO in between
    tb.set_ro(b, 0x77777777_88888888)
    assert await tb.read(a.offset + 4) == (0x11111111, OKAY)
    assert await tb.read(a.offset + 4) == (0x11111111, OKAY)  # HI again: same snapshot
    assert await tb.read(b.offset + 4) == (0x33333333, OKAY)
    assert await tb.read(a.offset) == (0x66666666, OKAY)
    assert await tb.read(a.offset + 4) == (0x55555555, OKAY)

    # A counter incrementing every cycle, read across the 2**32 carries.
    state = {"value": (7 << 32) - 300}

    async def count():
        while True:
            tb.port(a).value = state["value"]
            await RisingEdge(dut.clk)
            state["value"] += 1

    task = cocotb.start_soon(count())
    tb.stall(0.3, seed=5)
    last = 0
    for _ in range(60):
        before = state["value"]
        lo, _ = await tb.read(a.offset)
        hi, _ = await tb.read(a.offset + 4)
        after = state["value"]
        got = hi << 32 | lo
        assert before <= got <= after and got >= last, \
            f"non-atomic 64-bit read {got:#x} not in [{before:#x}, {after:#x}]"
        last = got
    task.cancel()
    assert last > 7 << 32, "the reads did not cross the carry"


@csr_test
@idle_and_backpressure
async def unmapped_addresses(dut, idle, backpressure):
    """Every unmapped word reads 0 with SLVERR; writes there answer SLVERR and change nothing."""
    tb = await start(dut, 6, idle, backpressure)
    for r in tb.by_access["rw"]:
        value = tb.rng.getrandbits(32)
        tb.apply_write(r.offset, value, 0xF)
        await tb.write(r.offset, value)
    holes = tb.unmapped_words()
    for addr in holes:
        assert await tb.read(addr) == (0, SLVERR), f"read {addr:#x}"
    before = tb.strobe_counts()
    for addr in tb.rng.sample(holes, min(64, len(holes))):
        assert await tb.write(addr, 0xFFFFFFFF) == SLVERR, f"write {addr:#x}"
    assert tb.strobe_counts() == before
    for r in tb.by_access["rw"]:
        assert await tb.read(r.offset) == (tb.rw_model[r.name], OKAY), r.name
    # Sub-word addresses select the containing word (a one-byte read of byte 3).
    r = tb.by_access["rw"][0]
    got = await tb.axil.read(r.offset + 3, 1)
    assert (got.data[0], int(got.resp)) == (tb.rw_model[r.name] >> 24, OKAY)


@csr_test
async def channel_orderings(dut):
    """AW before W, W before AW (with gaps), both together, and a read during a half-done write."""
    tb = await start(dut, 7)
    r = tb.by_access["rw"][0]
    for order, gap in (("aw", 0), ("w", 0), ("aw", 7), ("w", 7), ("w", 1)):
        value = tb.rng.getrandbits(32)
        tb.apply_write(r.offset, value, 0xF)
        assert await tb.raw_write(r.offset, value, 0xF, order=order, gap=gap) == OKAY
        assert await tb.read(r.offset) == (tb.rw_model[r.name], OKAY), (order, gap)
    # A read is served while a write waits for its W beat (independent paths).
    old = tb.rw_model[r.name]
    wi = tb.axil.write_if
    aw = wi.aw_channel._transaction_obj()
    aw.awaddr, aw.awprot = r.offset, 0
    await wi.aw_channel.send(aw)
    await ClockCycles(dut.clk, 3)
    assert await tb.read(r.offset) == (old, OKAY)
    w = wi.w_channel._transaction_obj()
    w.wdata, w.wstrb = 0xCAFEF00D, 0xF
    await wi.w_channel.send(w)
    assert int((await wi.b_channel.recv()).bresp) == OKAY
    tb.apply_write(r.offset, 0xCAFEF00D, 0xF)
    assert await tb.read(r.offset) == (tb.rw_model[r.name], OKAY)
    await tb.check_rw_ports()


async def stress(tb, p, n):
    """Back-to-back mixed reads and writes (reads run concurrently with writes) under pause
    probability ``p`` on every channel; return the cycles taken."""
    regs = tb.regs
    tb.stall(p)
    for r in tb.ro_ports:
        tb.set_ro(r, tb.rng.getrandbits(r.width))
    rc_items = {}
    for r in tb.by_access["rc"]:
        rc_items[r.name] = [tb.rng.getrandbits(32) for _ in range(n)]
        tb.fifo[r.name].clear()
        tb.push_rc(r, rc_items[r.name])
    await RisingEdge(tb.dut.clk)
    holes = tb.unmapped_words()
    writable = tb.by_access["rw"] + tb.by_access["wo"]
    others = tb.by_access["ro"] + tb.by_access["rc"]
    stb_before = {k: len(v) for k, v in tb.stb.items()}
    rstb_before = {k: len(v) for k, v in tb.rstb.items()}
    writes, reads = [], []
    expect_stb = {k: [] for k in tb.stb}
    for _ in range(n):
        roll = tb.rng.random()
        if roll < 0.8:
            r = tb.rng.choice(writable)
            addr = r.offset
        elif roll < 0.9:
            r = tb.rng.choice(others)
            addr = r.offset + 4 * tb.rng.randrange(r.words)
        else:
            addr = tb.rng.choice(holes)
        lo = tb.rng.randrange(4)
        length = tb.rng.randint(1, 4 - lo)
        value = tb.rng.getrandbits(32)
        strb = ((1 << length) - 1) << lo
        resp = tb.apply_write(addr, value, strb)
        hit = regs.at(addr)
        if hit and hit[0].access == "wo":
            expect_stb[hit[0].name].append(tb.wo_model[hit[0].name])
        data = (value >> 8 * lo & (1 << 8 * length) - 1).to_bytes(length, "little")
        writes.append((addr, resp, cocotb.start_soon(tb.axil.write(addr + lo, data))))
    rc_reads = {k: 0 for k in tb.rstb}
    # Reads of registers whose value does not depend on the concurrent writes.
    readable = [r for r in regs if r.access in ("ro", "rc", "wo") and r.words == 1]
    for _ in range(n):
        if tb.rng.random() < 0.85:
            r = tb.rng.choice(readable)
            addr = r.offset
        else:
            addr = tb.rng.choice(holes)
        hit = regs.at(addr)
        if hit and hit[0].access == "rc":
            exp = (rc_items[hit[0].name][rc_reads[hit[0].name]] & hit[0].mask, OKAY)
            rc_reads[hit[0].name] += 1
        else:
            exp = tb.expected_read(addr)
        reads.append((addr, exp, cocotb.start_soon(tb.axil.read(addr, 4))))
    tb.dut._log.info("stress p=%s: issued", p)
    start = tb.cycle
    deadline = tb.cycle + 100 * n + 1000
    while not all(t.done() for _, _, t in writes + reads):
        if tb.cycle > deadline:
            d = tb.dut
            raise AssertionError(
                f"stalled (p={p}): {sum(t.done() for _, _, t in writes)}/{n} writes, "
                f"{sum(t.done() for _, _, t in reads)}/{n} reads done; " + ", ".join(
                    f"{s}={int(getattr(d, 'axil__' + s).value)}" for s in (
                        "awvalid", "awready", "wvalid", "wready", "bvalid", "bready",
                        "arvalid", "arready", "rvalid", "rready")))
        await RisingEdge(tb.dut.clk)
    for addr, resp, ev in writes:
        got = int((await ev).resp)
        assert got == resp, f"write {addr:#x}: resp {got}, expected {resp}"
    for addr, exp, ev in reads:
        result = await ev
        got = (int.from_bytes(result.data, "little"), int(result.resp))
        assert got == exp, f"read {addr:#x}: got {got}, expected {exp}"
    cycles = tb.cycle - start
    tb.dut._log.info("stress p=%s: done in %d cycles", p, cycles)
    tb.stall(0)
    await ClockCycles(tb.dut.clk, 3)
    for k in tb.stb:
        got = [v for _, v in tb.stb[k][stb_before[k]:]]
        assert got == expect_stb[k], f"{k} strobes {got} != {expect_stb[k]}"
    for k in tb.rstb:
        assert len(tb.rstb[k]) - rstb_before[k] == rc_reads[k], k
    for r in tb.by_access["rw"]:
        assert await tb.read(r.offset) == (tb.rw_model[r.name], OKAY), r.name
    await tb.check_rw_ports()
    return cycles


@csr_test
async def random_stalls_back_to_back(dut):
    """Mixed back-to-back traffic with random valid/ready stalls on all channels: right data,
    responses, strobes and pops; no deadlock (the test times out otherwise)."""
    tb = await start(dut, 8)
    n = STRESS_OPS["icarus" if "icarus" in cocotb.SIM_NAME.lower() else "verilator"]
    cycles = await stress(tb, 0.0, n)
    # Unstalled: reads and writes overlap; writes take 2 cycles each, reads 3.
    assert cycles <= 3 * n + 20, f"{n} writes + {n} reads back-to-back took {cycles} cycles"
    for p in (0.2, 0.5, 0.8):
        await stress(tb, p, n)


# ---- pytest: build the bank and run the tests above ------------------------------------------

@pytest.mark.parametrize("simulator", SIMULATORS)
def test_cocotb_csr_bank(simulator, tmp_path, simulator_or_skip):
    bank = CSRBank(HOTLINE_REGISTERS, constants=CONSTANTS)
    run_cocotb(bank, "csr_bank", __name__, tmp_path, simulator=simulator_or_skip(simulator))
