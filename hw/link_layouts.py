"""The interfaces between the host link's stages (`FrameParser` -> `CommitRing`, `FrameParser`
-> `Responder`) and the codes they carry.

- `Request`: one received frame, as the parser hands it to the responder: ``good`` (header
  and CRC-32 checked), ``kind``, ``seq``, ``addr``/``value`` (the first 8 payload bytes, 0
  past the payload's end) and ``reject`` (0, or the error code the answer must carry; `BUSY`:
  answer ``BUSY`` and forget the frame).
- `RingWord`: one 64-bit payload word and its `RingTag` (where the word drains to).
- `Served`: the ``seq`` of the last request the responder served (``valid`` once one was).
- `RingFillSignature`: the parser's side of the commit ring (speculative words, commit,
  rollback, free space).
- `LINK_CRC32`: the frames' CRC-32 as an `amaranth.lib.crc.Algorithm`, built from the
  contract's ``CRC32_POLY`` and ``CRC32_INIT`` (the definition the host uses), so the two
  cannot drift apart; it is ``amaranth.lib.crc.catalog.CRC32_ETHERNET``, zlib's CRC-32.
"""
from amaranth import signed
from amaranth.lib import crc, data, stream, wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.link import CRC32_INIT, CRC32_POLY

__all__ = ["ERROR_MESSAGES", "BAD_LENGTH", "TOO_LONG", "UNKNOWN", "WINDOW", "CSR", "BUSY",
           "RingTag", "Request", "RingWord", "Served", "RingFillSignature", "LINK_CRC32"]



def _reflect32(word):
    return int(f"{word:032b}"[::-1], 2)


# The contract's CRC is the reflected (LSB-first) shift register of zlib: its polynomial and
# state are bit-reversed against the Williams model's, and the CRC is the final state's
# complement.
LINK_CRC32 = crc.Algorithm(crc_width=32, polynomial=_reflect32(CRC32_POLY),
                           initial_crc=_reflect32(CRC32_INIT), reflect_input=True,
                           reflect_output=True, xor_output=0xFFFFFFFF)

# ERROR payloads by code (at most 16 bytes: they leave through the 16-byte send register).
ERROR_MESSAGES = {1: "bad length", 2: "request too long", 3: "unknown request",
                  4: "outside window", 5: "csr error"}
BAD_LENGTH, TOO_LONG, UNKNOWN, WINDOW, CSR = 1, 2, 3, 4, 5
BUSY = 15  # reject code: answer BUSY, forget the frame


class RingTag:
    """Where a ring word drains to: ``lookups``, ``scatter_keys``, the memory address
    register (a ``MEM_WRITE``'s first word), the memory window (its data words),
    ``cam_cmds``."""
    LOOKUP, SCATTER, ADDR, MEMDATA, CAM = 0, 1, 2, 3, 4
    BITS = 3


Request = data.StructLayout({"good": 1, "kind": 8, "seq": 16, "addr": 32, "value": 32,
                             "reject": 4})
RingWord = data.StructLayout({"word": 64, "tag": RingTag.BITS})
Served = data.StructLayout({"valid": 1, "seq": 16})


class RingFillSignature(wiring.Signature):
    """The writer's side of a `CommitRing` of ``2 ** (ring_bits - 1)`` words.

    - ``words``: speculative words, one per ``valid`` cycle (never refused: the writer
      checks ``free`` before it starts a frame's words).
    - ``commit``: the speculative words written so far become drainable; ``mem_words`` (in
      the same cycle) counts the ``MEM_WRITE`` data words among them.
    - ``rollback``: the speculative words are forgotten.
    - ``free``: words the ring can take (not yet committed and undrained).
    """

    def __init__(self, ring_bits):
        super().__init__({
            "words": Out(stream.Signature(RingWord, always_ready=True)),
            "commit": Out(1), "mem_words": Out(ring_bits), "rollback": Out(1),
            "free": In(signed(ring_bits + 1)),
        })
