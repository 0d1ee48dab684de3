"""BucketTable: a block-RAM table of bucket words (``ways`` entry lanes side by side), shared by
the AccessLearner and the PopularityCAM.
"""
from amaranth.hdl import Cat, ClockSignal, Const, Elaboratable, Instance, Module, Mux, Signal
from amaranth.lib.memory import Memory

__all__ = ["BucketTable"]


# DP16KD port width -> lowest word-address pin (TN1264): x9 words on pins 3..13, x18 on 4..13,
# x36 on 5..13, where pins 0-1 (x18) or 0-3 (x36) are the write port's byte enables.
_DP16KD_ADDR_LSB = {9: 3, 18: 4, 36: 5}
_DP16KD_BYTE_ENABLES = {9: 0, 18: 2, 36: 4}


def _dp16kd_addr(port, addr, width, write=False):
    """DP16KD address pins of ``port`` for a ``width``-bit word address (all bytes written)."""
    lsb = _DP16KD_ADDR_LSB[width]
    pins = Cat(addr, Const(0, 14))[:14 - lsb]
    enables = _DP16KD_BYTE_ENABLES[width] if write else 0
    return {f"i_AD{port}{i}": pins[i - lsb] if i >= lsb else int(i < enables)
            for i in range(14)}


class BucketTable(Elaboratable):
    """The bucket words: ``depth`` words of ``ways`` entries of ``width`` bits, one write port
    and one read port, both in ``sync``; with ``read_ports=2``, a second read port on the
    write port's block-RAM port.

    Write: ``write_addr``, ``write_en`` (one bit per entry lane), ``write_data`` (one entry,
    written to every enabled lane) take effect at the end of the cycle. Read, every cycle:
    ``read_data`` in cycle t+LATENCY is word ``read_addr`` of cycle t, from a register. A
    read of the word being written in cycle t returns undefined data in the written lanes
    (with ``primitive="ecp5"`` the other lanes are separate block RAMs and read correctly).
    The second read port, ``read2_addr`` -> ``read2_data``, has the same latency; it reads
    while nothing is written: a cycle with any ``write_en`` lane set reads ``write_addr``
    there instead (only in the written lanes with ``primitive="ecp5"``), so its data is then
    undefined. A true dual-port block RAM holds both ports: no more block RAMs than one.
    ``primitive``: None infers a Memory followed by two registers; "ecp5" instantiates DP16KD
    block RAMs (depth <= 2048: 2048 x 9, 1024 x 18 for depth <= 1024, or with one read port
    512 x 36 for depth <= 512, the pseudo-dual-port width) whose output register is the first
    of them, with a 0.95 ns clock-to-out instead of 5.8 ns (Yosys does not infer it). The last register is
    in the fabric, so the block RAMs' long routes end at flip-flops, not at logic.
    """
    LATENCY = 3

    def __init__(self, *, depth, ways, width, primitive=None, read_ports=1):
        if primitive not in (None, "ecp5"):
            raise ValueError(f"primitive must be None or 'ecp5', not {primitive!r}")
        if primitive == "ecp5" and depth > 2048:
            raise ValueError(f"the ECP5 table holds at most 2048 buckets, not {depth}")
        if read_ports not in (1, 2):
            raise ValueError(f"read_ports must be 1 or 2, not {read_ports}")
        self.depth, self.ways, self.width, self.primitive = depth, ways, width, primitive
        self.read_ports = read_ports
        self.write_addr = Signal(range(depth))
        self.write_en = Signal(ways)
        self.write_data = Signal(width)
        self.read_addr = Signal(range(depth))
        self.read_data = Signal(ways * width, reset_less=True)
        if read_ports == 2:
            self.read2_addr = Signal(range(depth))
            self.read2_data = Signal(ways * width, reset_less=True)

    @staticmethod
    def dp16kd(**ports):
        """One DP16KD block RAM (the tests substitute a model: Instances do not simulate)."""
        return Instance("DP16KD", **ports)

    def _shared_addr(self, m, writing, name):
        """The write port's address: ``read2_addr`` while not ``writing``."""
        addr = Signal.like(self.write_addr, name=name)
        m.d.comb += addr.eq(Mux(writing, self.write_addr, self.read2_addr))
        return addr

    def elaborate(self, platform):
        m = Module()
        dual = self.read_ports == 2
        if self.primitive == "ecp5":
            # One DP16KD per 9 (or 18) bits of an entry lane: port A writes, port B reads; with
            # two read ports, port A also reads (REGMODE_A as B's, for the same latency).
            # The widest port that is deep enough: a shallow table needs half the blocks. The
            # 36-bit width takes both ports (A writes, B reads DOA:DOB), so not with two reads.
            block = (36 if self.depth <= 512 and not dual else 18 if self.depth <= 1024 else 9)
            reads = [("B", self.read_data, "dout")]
            if dual:
                reads.append(("A", self.read2_data, "dout_a"))
            for lane in range(self.ways):
                # Selected by the lane's own write enable, a register: one LUT level in front
                # of the block RAM.
                addr_a = (self._shared_addr(m, self.write_en[lane], f"addr_a_{lane}") if dual
                          else self.write_addr)
                for lsb in range(0, self.width, block):
                    bits = min(block, self.width - lsb)
                    outputs = {}
                    for port, data, name in reads:
                        dout = Signal(block, name=f"{name}_{lane}_{lsb}")
                        pins = ([f"o_DO{p}{i}" for p in "AB" for i in range(18)] if block == 36
                                else [f"o_DO{port}{i}" for i in range(block)])
                        outputs.update(zip(pins, dout))
                        m.d.sync += data[lane * self.width + lsb:][:bits].eq(dout)
                    din = [self.write_data[lsb + i] if i < bits else 0 for i in range(36)]
                    m.submodules[f"bram_{lane}_{lsb}"] = self.dp16kd(
                        p_DATA_WIDTH_A=block, p_DATA_WIDTH_B=block,
                        p_REGMODE_A="OUTREG" if dual or block == 36 else "NOREG",
                        p_REGMODE_B="OUTREG", p_WRITEMODE_A="NORMAL", p_WRITEMODE_B="NORMAL",
                        p_RESETMODE="SYNC", p_CSDECODE_A="0b000", p_CSDECODE_B="0b000",
                        p_GSR="DISABLED",
                        i_CLKA=ClockSignal(), i_CEA=1, i_OCEA=1, i_RSTA=0,
                        i_WEA=self.write_en[lane], i_CSA0=0, i_CSA1=0, i_CSA2=0,
                        **_dp16kd_addr("A", addr_a, block, write=True),
                        **{f"i_DIA{i}": din[i] for i in range(18)},
                        i_CLKB=ClockSignal(), i_CEB=1, i_OCEB=1, i_RSTB=0, i_WEB=0,
                        i_CSB0=0, i_CSB1=0, i_CSB2=0,
                        **_dp16kd_addr("B", self.read_addr, block),
                        **{f"i_DIB{i}": din[18 + i] if block == 36 else 0 for i in range(18)},
                        **outputs)
        else:
            m.submodules.memory = memory = Memory(
                shape=self.width * self.ways, depth=self.depth, init=[],
                # Read-during-write data is don't-care: without this Yosys emulates old-data
                # reads with a bypass mux behind the block-RAM output.
                attrs={"no_rw_check": 1})
            wr = memory.write_port(granularity=self.width)
            # The second read port shares the write port's address signal, so Yosys can map
            # both onto one port of a true dual-port block RAM.
            addr_a = (self._shared_addr(m, self.write_en.any(), "addr_a") if dual
                      else self.write_addr)
            m.d.comb += [
                wr.addr.eq(addr_a),
                wr.en.eq(self.write_en),
                wr.data.eq(self.write_data.replicate(self.ways)),
            ]
            reads = [(self.read_addr, self.read_data)]
            if dual:
                reads.append((addr_a, self.read2_data))
            for addr, data in reads:
                rd = memory.read_port()
                array_out = Signal.like(rd.data, reset_less=True)
                m.d.comb += rd.addr.eq(addr)
                m.d.sync += [array_out.eq(rd.data), data.eq(array_out)]
        return m
