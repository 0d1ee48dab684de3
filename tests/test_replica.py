"""Register replicas (`hotline.hw.lib.replica`) stay separate flip-flops through the project's
synthesis flow; plain copies of a register are merged into one."""
import pytest
from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hotline.fpga.synth import synth_report
from hotline.hw.lib.replica import replica

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


def xor_tree_registers(bits):
    """Registers of PinTop's output XOR tree over ``bits`` bits (4-input folds)."""
    count = 0
    while bits > 1:
        bits = -(-bits // 4)
        count += bits
    return count


def test_replicas_survive_synthesis(tmp_path):
    ff = {replicas: synth_report(Copies(replicas), "ice40-up5k", name=f"copies{replicas:d}",
                                 freq_mhz=30, build_dir=tmp_path)["ff"]
          for replicas in (True, False)}
    # The harness adds WIDTH input register bits, a register per output bit, its XOR tree
    # over those and the input chain's last bit, and the output pin's flip-flop. Replicas:
    # all of those plus the copies.
    assert ff[True] == WIDTH + 1 + 2 * COPIES * WIDTH + xor_tree_registers(1 + COPIES * WIDTH)
    # Plain copies merge into one, and so do the output registers of identical values.
    assert ff[False] <= ff[True] - 2 * (COPIES - 1) * WIDTH
