"""CSRBank: the AXI4-Lite register file generated from a ``RegisterMap`` (see ``regmap.py``).

Ports, per register ``R`` of the map (``r`` = ``R.name.lower()``):

- ``ro``: ``In(R.width)`` named ``r``, driven by the top; none when the register has a
  constant (``R.value`` in the map, or ``constants={"R": value}`` at construction).
- ``rw``: ``Out(R.width)`` named ``r``: the held value, reset 0.
- ``wo``: ``Out(R.width)`` named ``r`` (the last written value, held) and ``Out(1)``
  named ``r_stb``: high for exactly one cycle per write, in the cycle ``r`` first shows the
  new value.
- ``rc``: ``In(R.width)`` named ``r`` (driven by the top) and ``Out(1)`` named ``r_rstb``: high
  for exactly one cycle per read, in the cycle ``r`` is sampled for the read data; the top
  pops at that clock edge (like the read enable of a show-ahead FIFO).
- ``axil``: ``In(AXI4LiteSignature(addr_width))``, the AXI4-Lite slave port.

Ports are whole registers (32 or 64 bits); ``port_of("STATUS")`` and
``field_of("STATUS", "error")`` (a slice: assign to it for ``ro`` / ``rc``, read it for
``rw`` / ``wo``) address them by map names.

Bits outside a register's fields are not stored: they read 0 and are 0 on ``rw`` / ``wo``
outputs. A write honours ``wstrb`` byte lanes: an ``rw`` register keeps the bytes not written;
a ``wo`` value has them 0 (a command never re-fires stale bytes). A write to ``ro`` or ``rc``
changes nothing. A 64-bit ``ro`` register is read as LO (offset) and HI (offset + 4): reading
LO also copies bits 63..32 into a per-register snapshot that HI returns.

Responses: OKAY, or SLVERR for an address not in the map (reads return 0) and for writes to
``ro`` / ``rc`` registers. ``wo`` registers read 0 with OKAY. ``awprot`` / ``arprot`` and
address bits 1..0 are ignored.

Handshake and timing: the write and read paths are independent (a read and a write may run
at the same time; one of each at a time). Each channel has a one-entry holding register and its
``ready`` is simply "holding register empty" (no combinational path from any input to any
output), so AW and W may come in either order or together and no valid/ready pattern can
deadlock. Write: AW and W both held in cycle t -> the register (``rw`` value, ``wo`` value
and ``_stb``) changes at the end of cycle t, visible in t+1, and ``bvalid`` rises in t+1; with
both handshakes in cycle 0 that is t = 1, B in cycle 2. Read: AR held in cycle t -> the value
is sampled (``_rstb`` high) in cycle t and ``rvalid`` rises in t+2 (the read mux has two
registered levels): AR handshake in cycle 0, R in cycle 3. A new transaction of a kind is taken
while the previous one's response waits, so back-to-back writes sustain one per two cycles and
reads one per three.
"""
from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.regmap import RegisterMap

from .axi import AXI4LiteSignature, AXIResp
from .lib.onehot import one_hot_select

__all__ = ["CSRBank", "OKAY", "SLVERR"]

OKAY, SLVERR = AXIResp.OKAY.value, AXIResp.SLVERR.value


class CSRBank(wiring.Component):
    """AXI4-Lite register file for ``regmap``; port rules and timing in the module docstring.

    ``addr_width``: AXI address bits (the map must fit in ``2**addr_width`` bytes).
    ``constants``: ``{register name: value}`` for ``ro`` registers that need no port
    (capabilities); constants in the map itself (``Register.value``) are always applied.
    """
    # Words per first-level read mux: 2**READ_GROUP_BITS.
    READ_GROUP_BITS = 3

    def __init__(self, regmap, addr_width=12, *, constants=None):
        if not isinstance(regmap, RegisterMap):
            regmap = RegisterMap(regmap)
        if regmap.span > 1 << addr_width:
            raise ValueError(f"the map spans {regmap.span:#x} bytes; addr_width {addr_width} "
                             f"gives only {1 << addr_width:#x}")
        consts = {r.name: r.value for r in regmap if r.value is not None}
        for name, value in dict(constants or {}).items():
            if name not in regmap:
                raise ValueError(f"constant for unknown register {name!r}")
            r = regmap[name]
            if r.access != "ro":
                raise ValueError(f"constant for {name}, which is {r.access}, not ro")
            if int(value) < 0 or int(value) >> r.width:
                raise ValueError(f"constant {name}={value} does not fit in {r.width} bits")
            consts[name] = int(value) & r.mask
        # Private names: public attributes would collide with ports (ADDR_WIDTH -> addr_width).
        self._regmap, self._addr_width, self._constants = regmap, addr_width, consts

        members = {"axil": In(AXI4LiteSignature(addr_width))}
        for r in regmap:
            n = r.port_name
            ports = {}
            if r.access == "ro":
                if r.name not in consts:
                    ports[n] = In(r.width)
            elif r.access == "rw":
                ports[n] = Out(r.width)
            elif r.access == "wo":
                ports[n] = Out(r.width)
                ports[f"{n}_stb"] = Out(1)
            else:  # rc
                ports[n] = In(r.width)
                ports[f"{n}_rstb"] = Out(1)
            for pname in ports:
                if pname in members:
                    raise ValueError(f"port name {pname!r} of {r.name} collides with another port")
            members.update(ports)
        super().__init__(members)

    @property
    def regmap(self):
        return self._regmap

    @property
    def constants(self):
        """``{register name: value}`` of the ro registers built as constants (no port)."""
        return dict(self._constants)

    def port_of(self, name):
        """The port of register ``name`` (None for a constant)."""
        r = self._regmap[name]
        return None if r.name in self._constants else getattr(self, r.port_name)

    def field_of(self, name, field):
        """The bits of field ``field`` of register ``name``'s port (assign to it for ro/rc)."""
        f = self._regmap[name].field(field)
        return self.port_of(name)[f.lsb:f.lsb + f.width]

    def elaborate(self, platform):
        m = Module()
        bus = self.axil
        aw = self._addr_width
        word = slice(2, aw)

        # One-entry holding registers; ready = empty.
        aw_got, w_got, ar_got = Signal(), Signal(), Signal()
        # data registers have no reset (the reset net reaches the handshake flags only)
        ar_addr = Signal(aw, reset_less=True)
        w_data, w_strb = Signal(32, reset_less=True), Signal(4, reset_less=True)
        bvalid, rvalid = Signal(), Signal()
        bresp, rresp = Signal(2), Signal(2)
        rdata = Signal(32, reset_less=True)
        m.d.comb += [
            bus.awready.eq(~aw_got), bus.wready.eq(~w_got), bus.arready.eq(~ar_got),
            bus.bvalid.eq(bvalid), bus.bresp.eq(bresp),
            bus.rvalid.eq(rvalid), bus.rresp.eq(rresp), bus.rdata.eq(rdata),
        ]
        # The addresses are decoded as they are taken, into one bit per register word: a
        # write or read then enables its registers through one gate (timing: the address
        # compare in front of the clock enables and strobes was too long a path).
        words = sorted({(r.offset >> 2) + i for r in self._regmap for i in range(r.words)})
        aw_hit = Signal(len(words), reset_less=True)
        ar_hit = Signal(len(words), reset_less=True)
        hit = {w: k for k, w in enumerate(words)}
        with m.If(bus.awvalid & ~aw_got):
            m.d.sync += [aw_got.eq(1),
                         aw_hit.eq(Cat(bus.awaddr[word] == w for w in words))]
        with m.If(bus.wvalid & ~w_got):
            m.d.sync += [w_got.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
        with m.If(bus.arvalid & ~ar_got):
            m.d.sync += [ar_got.eq(1), ar_addr.eq(bus.araddr),
                         ar_hit.eq(Cat(bus.araddr[word] == w for w in words))]
        with m.If(bvalid & bus.bready):
            m.d.sync += bvalid.eq(0)
        with m.If(rvalid & bus.rready):
            m.d.sync += rvalid.eq(0)

        do_write = Signal()
        do_read = Signal()
        m.d.comb += do_write.eq(aw_got & w_got & ~bvalid)
        lanes = Cat(*(w_strb[i].replicate(8) for i in range(4)))

        # ---- storage and hardware-side values ---------------------------------------------
        value = {}      # register name -> 32/64-bit value the read mux shows
        snapshot = {}   # 64-bit register name -> HI snapshot
        for r in self._regmap:
            n = r.port_name
            if r.access == "ro":
                value[r.name] = (Const(self._constants[r.name], r.width) if r.name in self._constants
                                 else getattr(self, n) & r.mask)
                if r.words == 2:
                    snapshot[r.name] = Signal(32, name=f"{n}_hi_snapshot")
            elif r.access == "rc":
                value[r.name] = getattr(self, n) & r.mask
                m.d.comb += getattr(self, f"{n}_rstb").eq(0)
            elif r.access == "wo":
                m.d.sync += getattr(self, f"{n}_stb").eq(0)

        # ---- write ------------------------------------------------------------------------
        with m.If(do_write):
            m.d.sync += [aw_got.eq(0), w_got.eq(0), bvalid.eq(1),
                         bresp.eq(Mux(aw_hit.any(), OKAY, SLVERR))]
            for r in self._regmap:
                for i in range(r.words):
                    with m.If(aw_hit[hit[(r.offset >> 2) + i]]):
                        port = getattr(self, r.port_name, None)
                        if r.access == "rw":
                            m.d.sync += port.eq((port & ~lanes | w_data & lanes) & r.mask)
                        elif r.access == "wo":
                            m.d.sync += [port.eq(w_data & lanes & r.mask),
                                         getattr(self, f"{r.port_name}_stb").eq(1)]
                        else:
                            m.d.sync += bresp.eq(SLVERR)

        # ---- read: two registered mux levels (timing: the values come from all over the
        # design, and one 60-way mux of them missed 100 MHz on ECP5 by its routes alone).
        # Cycle t (``do_read``): the word is sampled into its group's first-level register
        # (``rc`` strobes and HI snapshots fire here); t+1: rdata = that group's register.
        readable = {(r.offset >> 2) + i: (r, i) for r in self._regmap for i in range(r.words)}
        groups = sorted({w >> self.READ_GROUP_BITS for w in readable})
        level1 = {g: Signal(32, name=f"read_group{g}", reset_less=True) for g in groups}
        # The second level's select is one-hot, none set on an error (timing: a binary group
        # number decoded in front of the mux was a critical path).
        reading, read_group, read_err = Signal(), Signal(len(groups)), Signal()
        m.d.comb += do_read.eq(ar_got & ~rvalid & ~reading)
        with m.If(do_read):
            m.d.sync += [ar_got.eq(0), reading.eq(1), read_err.eq(~ar_hit.any()),
                         read_group.eq(Cat(Cat(ar_hit[hit[w]] for w in readable
                                               if w >> self.READ_GROUP_BITS == g).any()
                                           for g in groups))]
        # The first level loads every cycle, selected by the held address (a register): the
        # word it loads in cycle t is the one the second level takes in t+1 (timing: an
        # enable from do_read and the address into each group's 32 flip-flops, and their
        # resets for the words that read 0, was the 1-lane top's critical path at seed 1,
        # 9.63 ns).
        words = {g: ([], []) for g in groups}
        for w, (r, i) in readable.items():
            if r.access in ("ro", "rc") and i == 0:
                shown = value[r.name][:32]
                with m.If(do_read & ar_hit[hit[w]]):
                    if r.words == 2:
                        m.d.sync += snapshot[r.name].eq(value[r.name][32:])
                    if r.access == "rc":
                        m.d.comb += getattr(self, f"{r.port_name}_rstb").eq(1)
            elif r.access == "ro":
                shown = snapshot[r.name]
            elif r.access == "rw":
                shown = getattr(self, r.port_name)
            else:  # wo: reads 0
                continue
            select, values = words[w >> self.READ_GROUP_BITS]
            select.append(ar_hit[hit[w]])
            values.append(shown)
        for g, (select, values) in words.items():
            if values:  # a group of wo registers only stays 0
                m.d.sync += level1[g].eq(one_hot_select(Cat(select), values))
        with m.If(reading):
            m.d.sync += [reading.eq(0), rvalid.eq(1), rresp.eq(Mux(read_err, SLVERR, OKAY)),
                         rdata.eq(one_hot_select(read_group, list(level1.values())))]
        return m
