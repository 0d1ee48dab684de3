"""The accelerator's CSR map (contract): one Python description, three generated views.

``HOTLINE_REGISTERS`` below is the single source. ``hotline.hw.csr.CSRBank`` builds the RTL
register file from it, ``hotline.host.registers`` builds the host driver's definitions from it,
and ``python -m hotline.contract.regmap --markdown docs/registers.md`` writes the documentation
table (a test checks the checked-in file equals the generated text).

Access types (the hardware side is what ``CSRBank`` exposes):

- ``ro``: the hardware drives the value; host writes answer SLVERR and change nothing. A
  64-bit ``ro`` register occupies LO at ``offset`` and HI at ``offset + 4``: reading LO
  returns bits 31..0 and snapshots bits 63..32, which the following HI read returns, so a
  LO-then-HI read is atomic. A ``value`` makes it a constant (no hardware port).
- ``rw``: the host writes (byte lanes honoured), the hardware reads the held value; reset 0.
- ``wo``: a write strobe for commands: the hardware sees the written value and a one-cycle
  strobe. Reads return 0.
- ``rc``: read with side effect: the hardware drives the value and sees a one-cycle read
  strobe when the host reads it (e.g. pop a FIFO). Writes answer SLVERR.

Bits outside a register's fields (when it has fields) are reserved: they read 0 and ignore
writes.
"""
import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from .cam import CAMOp, CAMStatus
from .dma import CAUSES, TOP_CAUSES

__all__ = ["ACCESS", "Field", "Register", "RegisterMap", "HOTLINE_REGISTERS", "ID_VALUE",
           "VERSION_VALUE", "CAM_OPS", "CAM_STATUSES", "COUNTERS", "FRAGMENTER_COUNTERS",
           "DEVICE_COUNTERS"]

ACCESS = {
    "ro": "read-only: the hardware drives it; writes answer SLVERR",
    "rw": "read/write: the host writes, the hardware reads the held value (reset 0)",
    "wo": "write strobe: the hardware sees the value and a one-cycle strobe; reads return 0",
    "rc": "read with side effect: the hardware sees a one-cycle strobe per read; writes answer SLVERR",
}


@dataclass(frozen=True)
class Field:
    """Bits ``lsb .. lsb + width - 1`` of a register. ``values`` optionally names encodings
    as ``((name, value), ...)``; ``encode`` accepts those names."""
    name: str
    lsb: int
    width: int
    doc: str
    values: tuple = ()

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def value_of(self, value) -> int:
        """The integer for ``value`` (an int or one of the names in ``values``)."""
        if isinstance(value, str):
            names = dict(self.values)
            if value not in names:
                raise ValueError(f"field {self.name}: unknown value {value!r} "
                                 f"(choose from {', '.join(names) or 'integers'})")
            return names[value]
        value = int(value)
        if not 0 <= value < 1 << self.width:
            raise ValueError(f"field {self.name}: {value} does not fit in {self.width} bits")
        return value


@dataclass(frozen=True)
class Register:
    """One register: ``offset`` in bytes, ``access`` in ``ACCESS``, ``width`` 32 or 64
    (64 only for ``ro``), optional ``fields`` and, for constant ``ro`` registers, ``value``."""
    name: str
    offset: int
    access: str
    doc: str
    fields: tuple = ()
    width: int = 32
    value: int = None

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))

    @property
    def words(self) -> int:
        """Number of 32-bit words (1, or 2 for a 64-bit counter)."""
        return self.width // 32

    @property
    def size(self) -> int:
        return 4 * self.words

    @property
    def mask(self) -> int:
        """Implemented bits: the union of the fields, or every bit when there are none."""
        if not self.fields:
            return (1 << self.width) - 1
        mask = 0
        for f in self.fields:
            mask |= f.mask
        return mask

    @property
    def port_name(self) -> str:
        """The CSRBank port (and host attribute) name: the register name in lower case."""
        return self.name.lower()

    def field(self, name) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}")

    def encode(self, **values) -> int:
        """Pack field values (ints or value names) into the register value."""
        word = 0
        for name, value in values.items():
            f = self.field(name)
            word |= f.value_of(value) << f.lsb
        return word

    def decode(self, word) -> dict:
        """Split a register value into a dict of field values (``{name: word}`` without fields)."""
        word = int(word)
        if not self.fields:
            return {self.name.lower(): word & self.mask}
        return {f.name: (word >> f.lsb) & ((1 << f.width) - 1) for f in self.fields}

    def check(self) -> None:
        """Raise ValueError if the register is malformed."""
        if not self.name.isidentifier() or self.name.upper() != self.name:
            raise ValueError(f"register name {self.name!r} must be an upper-case identifier")
        if self.access not in ACCESS:
            raise ValueError(f"{self.name}: access {self.access!r} is not one of {', '.join(ACCESS)}")
        if self.width not in (32, 64):
            raise ValueError(f"{self.name}: width must be 32 or 64, not {self.width}")
        if self.width == 64 and self.access != "ro":
            raise ValueError(f"{self.name}: only ro registers may be 64 bits wide")
        if self.offset < 0 or self.offset % self.size:
            raise ValueError(f"{self.name}: offset {self.offset:#x} is not aligned to {self.size} bytes")
        if self.value is not None:
            if self.access != "ro":
                raise ValueError(f"{self.name}: only ro registers may have a constant value")
            if self.value < 0 or self.value & ~self.mask:
                raise ValueError(f"{self.name}: constant {self.value:#x} does not fit its bits")
        seen, used = set(), 0
        for f in self.fields:
            if not f.name.isidentifier() or f.name in seen:
                raise ValueError(f"{self.name}: field name {f.name!r} is invalid or repeated")
            seen.add(f.name)
            if f.width < 1 or f.lsb < 0 or f.msb >= self.width:
                raise ValueError(f"{self.name}.{f.name}: bits {f.msb}..{f.lsb} do not fit "
                                 f"in {self.width} bits")
            if used & f.mask:
                raise ValueError(f"{self.name}.{f.name}: overlaps another field")
            used |= f.mask
            for vname, v in f.values:
                if not 0 <= v < 1 << f.width:
                    raise ValueError(f"{self.name}.{f.name}: value {vname}={v} does not fit")


class RegisterMap:
    """An ordered, checked collection of registers (sorted by offset).

    Checks: valid registers (see ``Register.check``), unique names, no overlapping words.
    Look up by name with ``map["CONTROL"]`` or ``map.CONTROL``; by address with ``at(offset)``.
    """

    def __init__(self, registers, *, name="registers"):
        self.name = name
        regs = sorted(registers, key=lambda r: r.offset)
        names, words = {}, {}
        for r in regs:
            r.check()
            if r.name in names:
                raise ValueError(f"register name {r.name} is used twice")
            names[r.name] = r
            for w in range(r.words):
                addr = r.offset + 4 * w
                if addr in words:
                    raise ValueError(f"{r.name} at {addr:#x} overlaps {words[addr].name}")
                words[addr] = r
        self._regs = tuple(regs)
        self._names = names
        self._words = words

    def __iter__(self):
        return iter(self._regs)

    def __len__(self):
        return len(self._regs)

    def __contains__(self, name):
        return name in self._names

    def __getitem__(self, name) -> Register:
        try:
            return self._names[name]
        except KeyError:
            raise KeyError(f"no register named {name!r}") from None

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._names[name]
        except KeyError:
            raise AttributeError(f"no register named {name!r}") from None

    def at(self, offset) -> tuple | None:
        """(register, word index) of the 32-bit word at byte ``offset``, or None."""
        r = self._words.get(offset & ~3)
        return None if r is None else (r, ((offset & ~3) - r.offset) // 4)

    @property
    def span(self) -> int:
        """Bytes from 0 to the end of the last register."""
        return max((r.offset + r.size for r in self._regs), default=0)

    def to_markdown(self) -> str:
        """The register table and per-register field tables, as Markdown text."""
        out = [
            "# Hotline CSR register map",
            "",
            "<!-- Generated by `python -m hotline.contract.regmap --markdown docs/registers.md`",
            "     from sw/contract/regmap.py; do not edit by hand (tests/test_csr.py checks it). -->",
            "",
            "AXI4-Lite slave, 32-bit data, byte addresses. Unmapped addresses answer SLVERR "
            "(reads return 0).",
            "Bits outside a register's fields read 0 and ignore writes.",
            "",
            "| Access | Meaning |",
            "|---|---|",
        ]
        out += [f"| `{a}` | {text} |" for a, text in ACCESS.items()]
        out += [
            "",
            "64-bit counters occupy two words: LO at the offset, HI at offset + 4. Reading LO "
            "snapshots HI; read LO then HI for an atomic 64-bit value.",
            "",
            "## Registers",
            "",
            "| Offset | Name | Access | Width | Description |",
            "|---|---|---|---|---|",
        ]
        for r in self._regs:
            doc = _cell(r.doc if r.value is None else f"{r.doc} Constant `{r.value:#010x}`.")
            name = f"[{r.name}](#{r.name.lower()})" if r.fields else r.name
            offset = f"`{r.offset:#05x}`" + (f" (HI `{r.offset + 4:#05x}`)" if r.words == 2 else "")
            out.append(f"| {offset} | {name} | `{r.access}` | {r.width} | {doc} |")
        for r in self._regs:
            if not r.fields:
                continue
            out += ["", f"### {r.name}", "", f"`{r.offset:#05x}`, `{r.access}`: {_cell(r.doc)}", "",
                    "| Bits | Field | Description |", "|---|---|---|"]
            for f in sorted(r.fields, key=lambda f: f.lsb):
                bits = f"{f.lsb}" if f.width == 1 else f"{f.msb}:{f.lsb}"
                doc = f.doc
                if f.values:
                    doc = doc.rstrip(".") + ": " + ", ".join(f"{v} = `{n}`" for n, v in f.values) + "."
                out.append(f"| {bits} | `{f.name}` | {_cell(doc)} |")
        return "\n".join(out) + "\n"


def _cell(text):
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _bit(name, lsb, doc):
    return Field(name, lsb, 1, doc)


ID_VALUE = 0x484F544C  # "HOTL"
VERSION_MAJOR, VERSION_MINOR = 1, 5
VERSION_VALUE = VERSION_MAJOR << 16 | VERSION_MINOR
CAM_OPS = tuple((op.name.lower(), int(op)) for op in CAMOp)
CAM_STATUSES = tuple((status.name.lower(), int(status)) for status in CAMStatus)
_CAUSE_DOCS = {
    "table": "A DMA request named a table without a committed descriptor.",
    "row": "A DMA request named a row at or beyond DESC_ROWS.",
    "slot": "A DMA request named a staging slot at or beyond STAGING_SLOTS, or its batch's "
            "staging window fails its checks (alignment, end, STAGING_BASE at or above "
            "2^ADDR_WIDTH).",
    "desc": "A DMA request used a descriptor that fails its checks (row size, alignment, end, "
            "DESC_BASE at or above 2^ADDR_WIDTH).",
    "axi_read": "An AXI4 read answered SLVERR or DECERR.",
    "axi_write": "An AXI4 write answered SLVERR or DECERR.",
    "axi_rlast": "An AXI4 read beat's RLAST was not on its burst's last beat (early or late); "
                 "the data was placed by the DMA's own beat count.",
    "overflow": "One of the row DMA's 48-bit counters wrapped (its rows copied, WINDOW_ERRORS, "
                "AXI_ERRORS, DMA_BYTES_READ or DMA_BYTES_WRITTEN).",
    "timeout": "The watchdog fired (WATCHDOG_CYCLES): a scatter batch was closed without its "
               "end beat while a gather waited, or a soft reset abandoned AXI4 responses that "
               "did not come.",
}

# The 64-bit event counters: (register name, block that counts, meaning), in register order.
COUNTERS = (
    ("CYCLES", "accelerator", "Clock cycles since reset or the last CONTROL.clear_counters."),
    ("LOOKUPS", "fragmenter", "Lookups the fragmenter processed."),
    ("HITS", "fragmenter", "Lookups that hit the popularity CAM."),
    ("SAMPLES", "fragmenter", "Samples the fragmenter processed."),
    ("POPULAR_SAMPLES", "fragmenter", "Samples whose every lookup hit the CAM."),
    ("COLD_ROWS", "fragmenter", "Unique cold keys emitted (summed over batches)."),
    ("BATCHES", "fragmenter", "Batches completed."),
    ("OVERFLOWS", "fragmenter", "Cold keys the cold-key set flagged as overflow."),
    ("GATHER_ROWS", "dma", "Rows the gather DMA copied from host tables to staging."),
    ("SCATTER_ROWS", "dma", "Rows the scatter DMA wrote back from staging to host tables."),
    ("DMA_BYTES_READ", "dma", "Bytes the AXI4 master read."),
    ("DMA_BYTES_WRITTEN", "dma", "Bytes the AXI4 master wrote."),
    ("WINDOW_ERRORS", "dma", "DMA requests refused by the table or staging window checks."),
    ("AXI_ERRORS", "dma", "AXI4 master responses other than OKAY, and read beats whose RLAST "
     "was early or late."),
    ("LEARNER_DROPPED", "learner", "Lookups the access learner could not count."),
    ("LEARNER_COUNTED", "learner", "Lookups the access learner took since its last clear "
     "(with L > 1 lanes those of one lookups beat in L, rotating per batch; wraps at 2^32)."),
    ("OVERSIZED_BATCHES", "fragmenter", "Batches of more than MAX_BATCH_SAMPLES samples: "
     "their summary is flagged overflow (the sample indices beyond it wrap)."),
    ("TIMEOUTS", "accelerator", "Watchdog timeouts (ERROR_CAUSE.timeout). Not zeroed by "
     "CONTROL.soft_reset, which may be what timed out."),
)

# The Fragmenter's counters, as its `counters` port names them.
FRAGMENTER_COUNTERS = tuple(name.lower() for name, block, _ in COUNTERS if block == "fragmenter")
# The counters every Device API backend reports (`Device.counters()`): the fragmenter's and the
# row DMAs'.
DEVICE_COUNTERS = tuple(name.lower() for name, block, _ in COUNTERS
                        if block in ("fragmenter", "dma"))

HOTLINE_REGISTERS = RegisterMap([
    # ---- identity and capabilities: 0x000 - 0x03f ------------------------------------------
    Register("ID", 0x000, "ro", "Identification: ASCII \"HOTL\".", value=ID_VALUE),
    Register("VERSION", 0x004, "ro", "Register-map version.", value=VERSION_VALUE, fields=(
        Field("minor", 0, 16, "Minor version: compatible additions."),
        Field("major", 16, 16, "Major version: incompatible changes."))),
    Register("SCRATCH", 0x008, "rw", "Free for the host: link and byte-lane tests."),
    Register("CAM_ENTRIES", 0x010, "ro", "Popularity CAM entries (hot slots, stash excluded)."),
    Register("COLD_MAX_KEYS", 0x014, "ro", "Unique cold keys (staging slots) per batch the "
             "cold-key set numbers."),
    Register("NUM_TABLES", 0x018, "ro", "Table descriptors (embedding tables) supported."),
    Register("ROW_BITS", 0x01C, "ro", "Row bits of a key: key = (table << ROW_BITS) | row."),
    Register("DATA_WIDTH", 0x020, "ro", "AXI4 master data width in bits."),
    Register("ADDR_WIDTH", 0x024, "ro", "AXI4 master address width in bits."),
    Register("LEARNER_ENTRIES", 0x028, "ro", "Access-learner entries (LEARNER_ADDR range)."),
    Register("MAX_BATCH_SAMPLES", 0x02C, "ro", "Samples per batch the fragmenter buffers."),
    Register("LANES", 0x030, "ro", "Lookup lanes: lookups per `lookups` beat and per cycle "
             "(1, 2 or 4)."),
    Register("WATCHDOG_CYCLES", 0x034, "ro", "The watchdog's timeout in cycles: a scatter "
             "batch whose keys stop for this long while a gather waits is closed, and a soft "
             "reset whose AXI4 responses stop for this long abandons them (ERROR_CAUSE.timeout, "
             "TIMEOUTS)."),
    # ---- control and status: 0x040 - 0x07f ---------------------------------------------------
    Register("CONTROL", 0x040, "wo", "Commands: each set bit acts once.", fields=(
        _bit("clear_counters", 0, "Zero every 64-bit counter."),
        _bit("clear_errors", 1, "Clear ERROR_CAUSE and STATUS.error."),
        _bit("learner_start", 2, "Start counting the lookup stream in the access learner."),
        _bit("learner_stop", 3, "Stop counting (the table keeps its contents)."),
        _bit("learner_clear", 4, "Empty the access-learner table."),
        _bit("soft_reset", 5, "Return every block to its power-on state (docs/hardware.md, "
             "Soft reset): CAM, cold-key set and learner emptied, streams and FIFOs drained, "
             "counters, errors, descriptors and every rw register zeroed (but TIMEOUTS and "
             "ERROR_CAUSE.timeout). The reset waits for the AXI4 master's transactions in "
             "flight (at most WATCHDOG_CYCLES without a response); STATUS.resetting is 1 "
             "until the blocks are ready again."))),
    Register("CONFIG", 0x044, "rw", "Operating modes.", fields=(
        _bit("gather_enable", 0, "Gather each batch's unique cold rows by DMA. Latched per "
             "batch: a write applies from the next batch whose first batch_keys beat has not "
             "come yet."),
        _bit("learner_tap", 1, "Feed the lookup stream to the access learner."),
        _bit("cam_events", 2, "CAM responses and relocations go to the cam_events stream "
             "(in order: a command's relocations, then its response) instead of CAM_RESP and "
             "CAM_MOVE."))),
    Register("STATUS", 0x048, "ro", "Activity and readout state.", fields=(
        _bit("gather_busy", 0, "The gather DMA has work in flight."),
        _bit("scatter_busy", 1, "The scatter DMA has work in flight."),
        _bit("cam_busy", 2, "The CAM is executing a command (insert, delete or clear)."),
        _bit("cold_clearing", 3, "The cold-key set is clearing its tables."),
        _bit("learner_active", 4, "The access learner is counting."),
        _bit("resetting", 5, "A CONTROL.soft_reset is in progress: waiting for the AXI4 "
             "master's transactions, or the tables' clearing passes after it."),
        _bit("resp_valid", 8, "CAM_RESP holds a response."),
        _bit("move_valid", 9, "CAM_MOVE holds a relocation."),
        _bit("learner_valid", 10, "LEARNER_KEY / LEARNER_COUNT hold the requested entry."),
        _bit("error", 16, "Some ERROR_CAUSE bit is set."))),
    Register("ERROR_CAUSE", 0x04C, "ro", "Sticky error causes; CONTROL.clear_errors clears them.",
             fields=tuple(_bit(name, n, _CAUSE_DOCS[name])
                          for n, name in enumerate(CAUSES + TOP_CAUSES))),
    # ---- table descriptors: 0x080 - 0x0bf ----------------------------------------------------
    Register("DESC_TABLE", 0x080, "rw", "Table the staged descriptor is for.", fields=(
        Field("table", 0, 8, "Table index (< NUM_TABLES)."),)),
    Register("DESC_BASE_LO", 0x084, "rw", "Staged descriptor: table base byte address, bits 31..0."),
    Register("DESC_BASE_HI", 0x088, "rw", "Staged descriptor: table base byte address, bits "
             "63..32. A base at or above 2^ADDR_WIDTH (BASE_HI != 0 on a 32-bit bus) is "
             "refused (ERROR_CAUSE.desc), never truncated."),
    Register("DESC_ROWS", 0x08C, "rw", "Staged descriptor: rows in the table (valid rows 0 .. ROWS-1)."),
    Register("DESC_ROW_BYTES", 0x090, "rw", "Staged descriptor: bytes per row (row stride in host memory)."),
    Register("DESC_COMMIT", 0x094, "wo", "Any write copies the staged descriptor into table DESC_TABLE."),
    # ---- staging buffer: 0x0c0 - 0x0ff -------------------------------------------------------
    Register("STAGING_BASE_LO", 0x0C0, "rw", "Staging buffer base byte address, bits 31..0."),
    Register("STAGING_BASE_HI", 0x0C4, "rw", "Staging buffer base byte address, bits 63..32. "
             "A base at or above 2^ADDR_WIDTH is refused (ERROR_CAUSE.slot), never truncated. "
             "The STAGING_* registers are latched when the DMA takes a batch's command: a "
             "write applies to the batches after it."),
    Register("STAGING_STRIDE", 0x0C8, "rw", "Bytes between consecutive cold slots."),
    Register("STAGING_SLOTS", 0x0CC, "rw", "Cold slots per bank (valid slots 0 .. SLOTS-1)."),
    Register("STAGING_BANKS", 0x0D0, "rw", "Banks (double buffering); bank b starts at "
             "base + b * SLOTS * STRIDE.", fields=(
        Field("banks", 0, 2, "Number of banks, 1 or 2."),)),
    # ---- popularity CAM command port: 0x100 - 0x13f ------------------------------------------
    Register("CAM_KEY", 0x100, "rw", "Key for the next CAM_CMD."),
    Register("CAM_CMD", 0x104, "wo", "A write pushes the command {op, CAM_KEY} to the CAM (so "
             "does a cam_cmds beat).", fields=(
        Field("op", 0, 2, "Operation.", values=CAM_OPS),)),
    Register("CAM_RESP", 0x108, "rc", "Oldest command response; a read pops it when valid.", fields=(
        Field("slot", 0, 16, "Hot slot of the key (inserted, existing or deleted)."),
        Field("moves", 16, 8, "Relocations this insert caused (read them from CAM_MOVE)."),
        Field("status", 24, 2, "Outcome.", values=CAM_STATUSES),
        _bit("valid", 31, "A response was present (the other fields are meaningful)."))),
    Register("CAM_MOVE", 0x10C, "rc", "Oldest entry relocation (hot row src moves to dst); a read "
             "pops it when valid.", fields=(
        Field("src", 0, 15, "Hot slot the entry left."),
        Field("dst", 15, 15, "Hot slot the entry moved to."),
        _bit("valid", 31, "A relocation was present."))),
    # ---- access-learner readout: 0x140 - 0x17f -----------------------------------------------
    Register("LEARNER_ADDR", 0x140, "wo", "A write starts the readout of learner entry ADDR "
             "(< LEARNER_ENTRIES); STATUS.learner_valid rises when done."),
    Register("LEARNER_KEY", 0x144, "ro", "Key of the entry read out."),
    Register("LEARNER_COUNT", 0x148, "ro", "Estimated count of the entry read out (0: empty)."),
    # ---- scatter command: 0x180 - 0x1bf ------------------------------------------------------
    Register("SCATTER_CMD", 0x180, "wo", "A write pushes a scatter batch; its keys arrive on the "
             "scatter key stream, closed by a beat with end set (the batch's length).", fields=(
        _bit("bank", 16, "Staging bank the rows are read from."),)),
    # ---- 64-bit counters: 0x200 - 0x2ff ------------------------------------------------------
    *[Register(name, 0x200 + 8 * i, "ro", doc, width=64) for i, (name, _, doc) in enumerate(COUNTERS)],
], name="hotline")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hotline.contract.regmap",
                                     description="Write the Hotline CSR map as Markdown.")
    parser.add_argument("--markdown", metavar="PATH", help="output file ('-' for stdout)")
    args = parser.parse_args(argv)
    text = HOTLINE_REGISTERS.to_markdown()
    if args.markdown in (None, "-"):
        sys.stdout.write(text)
    else:
        path = Path(args.markdown)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
