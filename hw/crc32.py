"""CRC-32 (IEEE 802.3, reflected, as zlib) one byte per cycle, for the host link.

`crc32_update(state, byte)` is the combinational next state (an XOR network of the 32 state
and 8 data bits); start from `CRC32_INIT`, and the CRC of the bytes seen is ``~state``.
"""
from amaranth import Cat, Const, Value

from hotline.contract.link import CRC32_INIT, CRC32_POLY as _POLY

__all__ = ["CRC32_INIT", "crc32_update"]


def crc32_update(state, byte):
    """Next CRC-32 state after ``byte`` (8 bits); ``state`` is a 32-bit Value."""
    state = Value.cast(state)
    byte = Value.cast(byte)
    # Each output bit is the XOR of the input bits a bit-serial LFSR would fold into it; the
    # map is computed symbolically (sets of input bit indices) so the netlist is minimal.
    bits = [{i} for i in range(32)]
    for j in range(8):
        fb = bits[0] ^ {32 + j}
        bits = [bits[i + 1] ^ (fb if (_POLY >> i) & 1 else set()) for i in range(31)] + \
               [fb.copy()]
    inputs = Cat(state, byte)
    out = []
    for terms in bits:
        v = Const(0, 1)
        for t in sorted(terms):
            v = v ^ inputs[t]
        out.append(v)
    return Cat(*out)
