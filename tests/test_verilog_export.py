"""`hotline.sim.runner.export_verilog`: Verilog that starts right under Icarus -g2012 too."""
import re

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hotline.sim.runner import export_verilog


class _Renamed(wiring.Component):
    """Two registers named ``x``: Yosys writes the second as the escaped ``\\x$N``."""
    i: In(1)
    o: Out(2)

    def elaborate(self, platform):
        m = Module()
        a, b = Signal(name="x", init=1), Signal(name="x")
        m.d.sync += [a.eq(self.i), b.eq(a)]
        m.d.comb += self.o.eq(Cat(a, b))
        return m


def test_no_register_keeps_a_declaration_initialiser(tmp_path):
    """Under -g2012 a `reg x = v;` initialiser makes no event, so `always @*` logic reading
    only such registers stays X until an input changes (issue 44: the cold set's output
    valid, X through reset, under Icarus only). Escaped names end at a blank (`\\x$5  = 0`),
    Yosys's own time-zero trigger of `always @*` blocks among them."""
    text = export_verilog(_Renamed(), "top", tmp_path / "top.v").read_text()
    decls = [line.split(";")[0] for line in text.splitlines() if re.match(r"\s*reg\b", line)]
    assert any("\\x$" in d for d in decls), decls
    assert not [d for d in decls if "=" in d], decls
    assert re.search(r"initial \\x\$\d+ +=", text) and re.search(r"initial \\\$auto\S* +=", text)
