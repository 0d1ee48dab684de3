"""The host driver's view of the accelerator's CSRs, generated from ``hotline.contract.regmap``.

``REGS`` is the register map (the same object the RTL register file is built from), ``ADDR``
its byte offsets by name (``ADDR.CONTROL == 0x040``). ``encode`` / ``decode`` pack and unpack
field values. ``RegisterFile`` gives named access over any transport that provides
``read32(addr) -> int`` and ``write32(addr, value)`` (the device model, the co-simulation
socket, the UART bridge to a board).
"""
from types import SimpleNamespace

from hotline.contract.regmap import HOTLINE_REGISTERS, ID_VALUE, VERSION_VALUE, Register

__all__ = ["REGS", "ADDR", "ID_VALUE", "VERSION_VALUE", "encode", "decode", "register",
           "RegisterFile"]

REGS = HOTLINE_REGISTERS
ADDR = SimpleNamespace(**{r.name: r.offset for r in REGS})


def register(reg) -> Register:
    """The ``Register`` for a name or a Register."""
    return reg if isinstance(reg, Register) else REGS[reg]


def encode(reg, **fields) -> int:
    """Register value with the given fields set (ints or value names, e.g. ``op="insert"``)."""
    return register(reg).encode(**fields)


def decode(reg, value) -> dict:
    """Dict of field values of a register value (``{name_lower: value}`` without fields)."""
    return register(reg).decode(value)


class RegisterFile:
    """Named register access over ``read32(addr)`` / ``write32(addr, value)``.

    ``read(name)`` returns an int; a 64-bit counter is read LO then HI (the hardware snapshots
    HI when LO is read, so the pair is atomic). ``write(name, value)`` or
    ``write(name, **fields)`` (unnamed fields are 0). ``fields(name)`` reads and decodes.
    """

    def __init__(self, read32, write32, regmap=REGS):
        self.read32, self.write32, self.regs = read32, write32, regmap

    def _reg(self, name):
        return name if isinstance(name, Register) else self.regs[name]

    def read(self, name) -> int:
        r = self._reg(name)
        if r.access == "wo":
            raise ValueError(f"{r.name} is write-only")
        lo = int(self.read32(r.offset)) & 0xFFFFFFFF
        if r.words == 1:
            return lo
        return lo | (int(self.read32(r.offset + 4)) & 0xFFFFFFFF) << 32

    def fields(self, name) -> dict:
        r = self._reg(name)
        return r.decode(self.read(r))

    def write(self, name, value=None, **fields) -> None:
        r = self._reg(name)
        if r.access in ("ro", "rc"):
            raise ValueError(f"{r.name} is {r.access}: it cannot be written")
        if value is not None and fields:
            raise ValueError("give either a value or fields, not both")
        if value is None:
            value = r.encode(**fields)
        value = int(value)
        if not 0 <= value < 1 << 32:
            raise ValueError(f"{r.name}: {value:#x} does not fit in 32 bits")
        self.write32(r.offset, value)

    def modify(self, name, **fields) -> int:
        """Read-modify-write the named fields of an ``rw`` register."""
        r = self._reg(name)
        if r.access != "rw":
            raise ValueError(f"{r.name} is {r.access}: only rw registers can be modified")
        value = self.read(r)
        for fname, fvalue in fields.items():
            f = r.field(fname)
            value = value & ~f.mask | f.value_of(fvalue) << f.lsb
        self.write(r, value)
        return value

    def write64(self, lo_name, value) -> None:
        """Write a 64-bit address split over ``<X>_LO`` / ``<X>_HI`` (give either name or X)."""
        base = lo_name.removesuffix("_LO").removesuffix("_HI")
        self.write(f"{base}_LO", int(value) & 0xFFFFFFFF)
        self.write(f"{base}_HI", int(value) >> 32 & 0xFFFFFFFF)
