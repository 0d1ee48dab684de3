"""CSR map (sw/contract/regmap.py), host definitions (sw/host/registers.py), docs, and CSRBank RTL
in the Amaranth simulator (exact timing); the full semantics under cocotb on Verilator and Icarus
are in test_csr_cocotb.py."""
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth.sim import Simulator

from hotline.host import registers
from hotline.hw.csr import OKAY, SLVERR, CSRBank
from hotline.contract.regmap import HOTLINE_REGISTERS, Field, Register, RegisterMap
from hotline.host.registers import ADDR, RegisterFile, decode, encode

ROOT = Path(__file__).resolve().parents[1]
CONSTANTS = {"CAM_ENTRIES": 16384, "COLD_MAX_KEYS": 32768, "ROW_BITS": 27}


# ---- the map ---------------------------------------------------------------------------------

@pytest.mark.parametrize("regs, message", [
    ([Register("A", 0x0, "rw", "a"), Register("B", 0x0, "rw", "b")], "overlaps"),
    ([Register("A", 0x8, "ro", "a", width=64), Register("B", 0xC, "ro", "b")], "overlaps"),
    ([Register("A", 0x2, "rw", "a")], "aligned"),
    ([Register("A", 0x4, "ro", "a", width=64)], "aligned"),
    ([Register("A", 0x0, "rw", "a"), Register("A", 0x4, "rw", "b")], "twice"),
    ([Register("A", 0x0, "xx", "a")], "access"),
    ([Register("A", 0x0, "rw", "a", width=64)], "only ro"),
    ([Register("A", 0x0, "rw", "a", width=16)], "32 or 64"),
    ([Register("A", 0x0, "rw", "a", fields=(Field("f", 30, 4, "f"),))], "do not fit"),
    ([Register("A", 0x0, "rw", "a", fields=(Field("f", 0, 4, "f"), Field("g", 3, 2, "g")))],
     "overlaps another field"),
    ([Register("A", 0x0, "rw", "a", fields=(Field("f", 0, 1, "f"), Field("f", 1, 1, "g")))],
     "repeated"),
    ([Register("A", 0x0, "rw", "a", fields=(Field("f", 0, 1, "f", values=(("x", 2),)),))],
     "does not fit"),
    ([Register("A", 0x0, "ro", "a", value=1 << 32)], "does not fit"),
    ([Register("A", 0x0, "rw", "a", value=1)], "constant"),
    ([Register("a", 0x0, "rw", "a")], "upper-case"),
])
def test_map_rejects(regs, message):
    with pytest.raises(ValueError, match=message):
        RegisterMap(regs)


def test_map_lookup_and_order():
    m = RegisterMap([Register("B", 0x10, "ro", "b", width=64), Register("A", 0x0, "rw", "a")])
    assert [r.name for r in m] == ["A", "B"] and len(m) == 2 and "B" in m
    assert m["B"] is m.B and m.at(0x14) == (m.B, 1) and m.at(0x12) == (m.B, 0)
    assert m.at(0x4) is None and m.span == 0x18
    with pytest.raises(KeyError):
        m["C"]


def test_hotline_map_contents():
    m = HOTLINE_REGISTERS
    assert m.ID.value.to_bytes(4, "big") == b"HOTL" and m.VERSION.value == (1 << 16 | 5)
    for name in ("CAM_ENTRIES", "COLD_MAX_KEYS", "NUM_TABLES", "ROW_BITS", "DATA_WIDTH",
                 "ADDR_WIDTH", "LEARNER_ENTRIES", "MAX_BATCH_SAMPLES", "STATUS", "ERROR_CAUSE",
                 "LEARNER_KEY", "LEARNER_COUNT"):
        assert m[name].access == "ro", name
    counters = [r.name for r in m if r.width == 64]
    assert counters == ["CYCLES", "LOOKUPS", "HITS", "SAMPLES", "POPULAR_SAMPLES", "COLD_ROWS",
                        "BATCHES", "OVERFLOWS", "GATHER_ROWS", "SCATTER_ROWS", "DMA_BYTES_READ",
                        "DMA_BYTES_WRITTEN", "WINDOW_ERRORS", "AXI_ERRORS", "LEARNER_DROPPED",
                        "LEARNER_COUNTED", "OVERSIZED_BATCHES", "TIMEOUTS"]
    assert all(m[c].access == "ro" for c in counters)
    assert {r.access for r in m} == {"ro", "rw", "wo", "rc"}
    assert (m.CAM_RESP.access, m.CAM_MOVE.access, m.CAM_CMD.access) == ("rc", "rc", "wo")
    assert {f.name for f in m.ERROR_CAUSE.fields} == {"table", "row", "slot", "desc", "axi_read",
                                                       "axi_write", "axi_rlast", "overflow",
                                                       "timeout"}
    assert m.WATCHDOG_CYCLES.access == "ro" and m.TIMEOUTS.width == 64
    assert m.span <= 1 << 12
    for r in m:
        assert r.doc and all(f.doc for f in r.fields), r.name


def test_encode_decode_hand_computed():
    # Values worked out by hand from the bit positions in docs/registers.md.
    assert encode("CAM_CMD", op="delete") == 1 and encode("CAM_CMD", op=2) == 2
    assert encode("CONTROL", clear_errors=1, learner_stop=1) == 0b1010
    assert encode("SCATTER_CMD", bank=1) == 0x0001_0000
    assert encode("CONFIG", gather_enable=1, learner_tap=1) == 3
    assert decode("CAM_RESP", 0x8203_0123) == {"slot": 0x123, "moves": 3, "status": 2, "valid": 1}
    assert decode("CAM_MOVE", (5 << 15) | 9 | 1 << 31) == {"src": 9, "dst": 5, "valid": 1}
    assert decode("STATUS", 0x0001_0421) == {
        "gather_busy": 1, "scatter_busy": 0, "cam_busy": 0, "cold_clearing": 0,
        "learner_active": 0, "resetting": 1, "resp_valid": 0, "move_valid": 0,
        "learner_valid": 1, "error": 1}
    assert encode("CONTROL", soft_reset=1) == 1 << 5
    assert decode("VERSION", 0x0001_0002) == {"minor": 2, "major": 1}
    assert decode("CAM_KEY", 0xDEADBEEF) == {"cam_key": 0xDEADBEEF}
    with pytest.raises(KeyError):          # no count: the end beat is the batch's length
        encode("SCATTER_CMD", count=3)
    with pytest.raises(ValueError):
        encode("CAM_CMD", op="lookup")
    with pytest.raises(KeyError):
        encode("CAM_CMD", opp=1)
    assert (ADDR.ID, ADDR.CONTROL, ADDR.CYCLES) == (0x000, 0x040, 0x200)
    assert registers.REGS is HOTLINE_REGISTERS


def test_register_file():
    mem, log = {}, []

    def read32(addr):
        log.append(("r", addr))
        return mem.get(addr, 0)

    def write32(addr, value):
        log.append(("w", addr, value))
        mem[addr] = value

    rf = RegisterFile(read32, write32)
    mem[ADDR.HITS], mem[ADDR.HITS + 4] = 0x89ABCDEF, 0x01234567
    assert rf.read("HITS") == 0x01234567_89ABCDEF
    assert log == [("r", ADDR.HITS), ("r", ADDR.HITS + 4)]  # LO first: it snapshots HI
    rf.write("CAM_CMD", op="clear")
    assert mem[ADDR.CAM_CMD] == 2
    rf.write("SCRATCH", 0xFFFFFFFF)
    rf.write64("DESC_BASE", 0x12_3456789A)
    assert (mem[ADDR.DESC_BASE_LO], mem[ADDR.DESC_BASE_HI]) == (0x3456789A, 0x12)
    mem[ADDR.CONFIG] = 1
    assert rf.modify("CONFIG", learner_tap=1) == 3 and rf.fields("CONFIG")["learner_tap"] == 1
    for bad in (lambda: rf.write("STATUS", 1), lambda: rf.write("CAM_RESP", 1),
                lambda: rf.read("CONTROL"), lambda: rf.write("SCRATCH", 1, x=1),
                lambda: rf.write("SCRATCH", 1 << 32), lambda: rf.modify("CONTROL", clear_errors=1)):
        with pytest.raises(ValueError):
            bad()


def test_docs_match_the_map():
    path = ROOT / "docs" / "registers.md"
    assert path.read_text() == HOTLINE_REGISTERS.to_markdown(), \
        "docs/registers.md is stale: run python -m hotline.contract.regmap --markdown docs/registers.md"


def test_regmap_main_writes_markdown(tmp_path):
    out = tmp_path / "regs.md"
    subprocess.run([sys.executable, "-m", "hotline.contract.regmap", "--markdown", str(out)], check=True)
    text = out.read_text()
    assert text == HOTLINE_REGISTERS.to_markdown()
    assert "| `0x040` | [CONTROL](#control) | `wo` |" in text and "### CAM_RESP" in text


def test_host_import_needs_no_amaranth():
    code = ("import sys; import hotline.host.registers, hotline.contract.regmap; "
            "assert 'amaranth' not in sys.modules, 'amaranth imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- CSRBank construction and exact timing (Amaranth simulator) ------------------------------

def test_bank_ports():
    bank = CSRBank(HOTLINE_REGISTERS, constants=CONSTANTS)
    bank._MustUse__silence = True  # inspected, never elaborated
    members = bank.signature.members
    assert not hasattr(bank, "id") and "cam_entries" not in members and "version" not in members
    assert members["num_tables"].flow.name == "In" and len(bank.cycles) == 64
    assert members["scratch"].flow.name == "Out"
    assert {"control", "control_stb", "cam_cmd_stb", "desc_commit_stb"} <= set(members)
    assert members["cam_resp"].flow.name == "In" and members["cam_resp_rstb"].flow.name == "Out"
    assert bank.field_of("STATUS", "error") is not None and bank.port_of("ID") is None
    assert bank.constants["ID"] == 0x484F544C and bank.constants["ROW_BITS"] == 27
    for bad in ({"SCRATCH": 1}, {"NOPE": 1}, {"ROW_BITS": 1 << 32}):
        with pytest.raises(ValueError):
            CSRBank(HOTLINE_REGISTERS, constants=bad)
    with pytest.raises(ValueError):
        CSRBank(HOTLINE_REGISTERS, addr_width=8)


def test_bank_timing():
    """AW+W in cycle 0 -> rw value and wo strobe in cycle 2 with B; AR in cycle 0 -> rc strobe in
    cycle 1, R in cycle 3; W before AW works."""
    bank = CSRBank(HOTLINE_REGISTERS, constants=CONSTANTS)
    sim = Simulator(bank)
    sim.add_clock(1e-8)
    bus = bank.axil
    trace = []

    async def bench(ctx):
        ctx.set(bus.bready, 1)
        ctx.set(bus.rready, 1)
        ctx.set(bank.cam_resp, 0x8000_0007)

        async def write(addr, data, w_first=False):
            if w_first:
                ctx.set(bus.wvalid, 1), ctx.set(bus.wdata, data), ctx.set(bus.wstrb, 0xF)
                await ctx.tick()
                ctx.set(bus.wvalid, 0)
            ctx.set(bus.awvalid, 1), ctx.set(bus.awaddr, addr)
            if not w_first:
                ctx.set(bus.wvalid, 1), ctx.set(bus.wdata, data), ctx.set(bus.wstrb, 0xF)
            for cycle in range(6):
                sample = await ctx.tick().sample(bus.bvalid, bus.bresp, bank.scratch,
                                                 bank.control_stb, bank.control)
                ctx.set(bus.awvalid, 0), ctx.set(bus.wvalid, 0)
                trace.append(("w", cycle, *sample[-5:]))

        await write(ADDR.SCRATCH, 0x1234_5678)
        await write(ADDR.CONTROL, 0b11, w_first=True)
        ctx.set(bus.arvalid, 1), ctx.set(bus.araddr, ADDR.CAM_RESP)
        for cycle in range(5):
            sample = await ctx.tick().sample(bus.rvalid, bus.rdata, bus.rresp, bank.cam_resp_rstb)
            ctx.set(bus.arvalid, 0)
            trace.append(("r", cycle, *sample[-4:]))

    sim.add_testbench(bench)
    sim.run()
    # tick().sample() shows the values just before each edge: entry k = cycle k.
    w1, w2, r = trace[:6], trace[6:12], trace[12:]
    assert [t[2] for t in w1] == [0, 0, 1, 0, 0, 0]                 # bvalid in cycle 2
    assert [t[4] for t in w1] == [0, 0] + [0x1234_5678] * 4          # value from cycle 2
    assert w1[2][3] == OKAY
    assert [t[5] for t in w2] == [0, 0, 1, 0, 0, 0]                  # one-cycle strobe, cycle 2
    assert w2[2][6] == 0b11 and [t[2] for t in w2] == [0, 0, 1, 0, 0, 0]
    assert [t[5] for t in r] == [0, 1, 0, 0, 0]                      # rstb while sampled
    assert [t[2] for t in r] == [0, 0, 0, 1, 0] and r[3][3] == 0x8000_0007 and r[3][4] == OKAY


def test_bank_slverr_in_amaranth_sim():
    bank = CSRBank(HOTLINE_REGISTERS, constants=CONSTANTS)
    sim = Simulator(bank)
    sim.add_clock(1e-8)
    bus = bank.axil
    got = []

    async def bench(ctx):
        ctx.set(bus.bready, 1), ctx.set(bus.rready, 1)
        for addr in (0x00C, ADDR.STATUS, ADDR.CAM_RESP):
            ctx.set(bus.awvalid, 1), ctx.set(bus.awaddr, addr)
            ctx.set(bus.wvalid, 1), ctx.set(bus.wstrb, 0xF)
            await ctx.tick()
            ctx.set(bus.awvalid, 0), ctx.set(bus.wvalid, 0)
            await ctx.tick()
            got.append(ctx.get(bus.bresp))
            await ctx.tick()
        ctx.set(bus.arvalid, 1), ctx.set(bus.araddr, 0xFFC)
        await ctx.tick()
        ctx.set(bus.arvalid, 0)
        await ctx.tick().repeat(2)
        got.append((ctx.get(bus.rvalid), ctx.get(bus.rdata), ctx.get(bus.rresp)))

    sim.add_testbench(bench)
    sim.run()
    assert got == [SLVERR, SLVERR, SLVERR, (1, 0, SLVERR)]
