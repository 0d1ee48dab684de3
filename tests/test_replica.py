"""Register replicas (`hotline.hw.replica`) stay separate flip-flops through the project's
synthesis flow; plain copies of a register are merged into one."""
import pytest
from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hotline.fpga.synth import synth_report
from hotline.hw.replica import replica

pytestmark = pytest.mark.rtl  # synthesis with Yosys

COPIES, WIDTH = 4, 8


class Copies(wiring.Component):
    """``COPIES`` registers of input ``a``, one per output: replicas, or plain signals."""

    def __init__(self, replicas):
        self.replicas = replicas
        super().__init__({"a": In(WIDTH), **{f"o{i}": Out(WIDTH) for i in range(COPIES)}})

    def elaborate(self, platform):
        m = Module()
        for i in range(COPIES):
            reg = replica(WIDTH, f"copy{i}") if self.replicas else Signal(WIDTH, name=f"copy{i}")
            m.d.sync += reg.eq(self.a)
            m.d.comb += getattr(self, f"o{i}").eq(reg)
        return m


@pytest.mark.parametrize("replicas", [True, False])
def test_replicas_survive_synthesis(replicas, tmp_path):
    r = synth_report(Copies(replicas), "ice40-up5k", name="copies", freq_mhz=30,
                     build_dir=tmp_path)
    # The harness adds WIDTH input register bits, the output pin's flip-flop and a register
    # per output. Replicas: all of those plus the copies. Plain copies merge into one, and
    # the output registers of identical values fold away in the harness's XOR (x ^ x = 0).
    want = WIDTH + 1 + (2 * COPIES * WIDTH if replicas else 0)
    assert r["ff"] == want
