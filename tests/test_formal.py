"""The formal tier's reduced form (issue 43; full depth: `make formal`): the runner's verdicts
on a design whose truth is known, each property at a reduced depth, and each mutant caught
with its counterexample VCD saved and named. They start Yosys and yosys-smtbmc: marked rtl.
"""
import pytest
from amaranth import *
from amaranth.hdl import Assert, Assume
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

import hotline.hw.row_window_check as row_window_block
from hotline.sim.formal.__main__ import main as formal_main
from hotline.sim.formal.mutation import mutant
from hotline.sim.formal.properties import PROPERTIES
from hotline.sim.formal.runner import prove


class Wrap(Elaboratable):
    """A counter that wraps at ``wrap`` (back to 0); asserted below 10: holds for every depth
    when ``wrap`` <= 9 (1-induction closes), fails at step 10 when ``wrap`` is 10."""

    def __init__(self, wrap):
        self.wrap = wrap

    def elaborate(self, platform):
        m = Module()
        count = Signal(4)
        m.d.comb += Assume(~ResetSignal())
        m.d.sync += count.eq(Mux(count == self.wrap, 0, count + 1))
        m.d.comb += Assert(count < 10)
        return m


@pytest.mark.rtl
def test_runner_verdicts(tmp_path):
    proved = prove(Wrap(9), "wrap9", 4, induction=True, workdir=tmp_path)
    assert proved.status == "proved" and proved.holds
    bounded = prove(Wrap(10), "wrap10_short", 8, workdir=tmp_path)   # fails only at step 10
    assert bounded.status == "bounded"
    failed = prove(Wrap(10), "wrap10", 12, workdir=tmp_path)
    assert failed.status == "failed" and not failed.holds
    assert failed.vcd == tmp_path / "wrap10" / "wrap10.vcd" and failed.vcd.exists()
    assert str(failed.vcd) in failed.message


class RegisterPort(wiring.Component):
    """A stage whose ``q`` Out port is its reset-less register of ``d`` (as `ColdInput.s1`)."""

    def __init__(self):
        super().__init__({"d": In(2), "q": Out(2)})

    def elaborate(self, platform):
        m = Module()
        q = Signal(2, reset_less=True)
        m.d.sync += q.eq(self.d)
        m.d.comb += self.q.eq(q)
        return m


class ConstantIntoRegisterPort(Elaboratable):
    """The stage with its ``d[1]`` tied to 0 by its parent; asserts ``q[1]`` stays 0."""

    def __init__(self):
        self.x = Signal()
        self.ports = [self.x]

    def elaborate(self, platform):
        m = Module()
        m.submodules.stage = stage = RegisterPort()
        m.d.comb += [Assume(~ResetSignal()), stage.d.eq(Cat(self.x, C(0, 1))),
                     Assert(stage.q[1] == 0)]
        return m


@pytest.mark.rtl
def test_constant_bit_of_a_register_port(tmp_path):
    # Yosys gave "Conflicting init values" here (the port and the register both carry init;
    # opt_dff cleared one when it dropped the constant flip-flop): the flow's first opt_clean.
    r = prove(ConstantIntoRegisterPort(), "constant_register_port", 3, workdir=tmp_path)
    assert r.status == "bounded", r.message


@pytest.mark.rtl
@pytest.mark.parametrize("prop", sorted(PROPERTIES))
def test_property_holds(tmp_path, prop):
    spec = PROPERTIES[prop]
    r = prove(spec.wrapper(), prop, spec.reduced_depth, cover=True, induction=spec.induction,
              workdir=tmp_path)
    assert r.status == ("proved" if spec.induction else "bounded"), r.message


@pytest.mark.rtl
@pytest.mark.parametrize("prop,name", [(p, n) for p in sorted(PROPERTIES)
                                       for n in sorted(PROPERTIES[p].mutations)])
def test_mutant_caught(tmp_path, prop, name):
    spec = PROPERTIES[prop]
    old, new = spec.mutations[name]
    r = prove(spec.wrapper(mutant(spec.block, old, new)), name, spec.reduced_mutant_depth,
              workdir=tmp_path)
    assert r.status == "failed", r.message
    assert r.vcd == tmp_path / name / f"{name}.vcd" and r.vcd.stat().st_size > 0
    assert str(r.vcd) in r.message


def test_mutation_must_match_once():
    with pytest.raises(ValueError, match="occurs 0 times"):
        mutant(row_window_block, "no such text", "x")
    with pytest.raises(ValueError, match=r"occurs \d+ times"):
        mutant(row_window_block, "m.d.sync", "m.d.comb")


def test_make_formal_bad_depth(capsys):
    with pytest.raises(SystemExit) as exc:
        formal_main(["--depth", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m hotline.sim.formal: --depth must be at least 1, not 0"]


@pytest.mark.parametrize("quick", [True, False])
def test_bench_formal_section(monkeypatch, quick):
    """`make bench`'s formal section: every property at `make formal`'s depth, with --quick
    `QUICK_FORMAL` at its reduced depth (make test proves every one there); its verdict and
    time as the runner gave them (runner stubbed)."""
    from hotline.bench import benchmarks
    from hotline.sim.formal import runner

    calls = []

    def fake_prove(top, name, depth, **kw):
        Fragment.get(top, None)     # elaborates (the wrapper is used, as prove would)
        calls.append((type(top), name, depth, kw["induction"]))
        return runner.Result(name, "bounded", depth, 1.5 + len(calls))
    monkeypatch.setattr(runner, "prove", fake_prove)
    out, rows = benchmarks.bench_formal(quick)
    want = [(s.wrapper, n, s.reduced_depth if quick else s.depth, s.induction)
            for n, s in PROPERTIES.items() if not quick or n == benchmarks.QUICK_FORMAL]
    assert calls == want
    assert out == [{"property": n, "status": "bounded", "depth": d, "seconds": 2.5 + i}
                   for i, (_, n, d, _) in enumerate(want)]
    assert [r[0] for r in rows] == [f"formal {n}" for _, n, _, _ in want]
