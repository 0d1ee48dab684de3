"""The host link's frame format (contract): the bytes the host runtime, the co-simulation
server and the gateware bridge (`hotline.hw.host_link`) exchange.

One frame: ``A5 | type u8 | seq u16 | length u32 | hcrc u16 | payload | crc32 u32`` (little
endian). ``hcrc`` (`header_crc`: the low half of the CRC-32 of type, seq and length) lets a
receiver reject a corrupted length at once instead of waiting for bytes that never come; the
CRC-32 (`crc32`: zlib's, IEEE 802.3 reflected, polynomial ``CRC32_POLY``, initial state
``CRC32_INIT``, final complement) covers everything after the magic byte. The host sends a
request and waits for the response with the same ``seq``; a frame whose CRC or header is bad
is answered ``NAK`` and the host resends it; a request whose ``seq`` was already served gets
the cached response again (so a lost response is recovered by resending, and nothing is
executed twice). The same bytes run over a loopback TCP socket to the co-simulation
(``sim://``) and over a UART to a board.

Requests: ``WRITE32`` {addr u32, value u32}, ``READ32`` {addr u32} -> ``DATA`` {value u32},
``LOOKUPS`` {beats: the accelerator's ``lookups`` payloads, each in `beat_words` u64 words,
low word first: one word at one lane (`pack_beats`)},
``SCATTER_KEYS`` {beats: u64 each, ``scatter_keys`` payloads}, ``CAM_CMDS`` {beats: u64 each,
``cam_cmds`` payloads: CAM commands in bulk, in order with the other stream beats}, ``RESULTS`` -> ``DATA`` {per
result stream, in `hotline.contract.streams.RESULT_STREAMS` order: count u32 then the beats,
each in `result_beat_bytes` of its payload width (the whole bytes that hold it, little endian;
payloads up to 128 bits), every beat collected since the last RESULTS}, ``QUIT``, ``INFO`` -> ``DATA`` {window_bytes u32, max_request u32, clock_hz u32,
baud u32} (`INFO`), ``MEM_WRITE`` {addr u32, 0 u32, bytes (a multiple of 8)} -> ``ACK``,
``MEM_READ`` {addr u32, length u32} -> ``DATA`` {bytes}, ``OPEN`` {nonce u32} -> ``DATA``
{nonce u32}: a session starts; the device forgets its cached response (so no later request is
answered from another session's cache), drops the input words and result beats an earlier
session left buffered, and echoes the nonce (so the host tells its answer from a stale one).
``OPEN`` is never answered from the cache: a resent one runs again.
Responses: ``ACK``, ``DATA``, ``NAK``, ``ERROR`` {utf-8 message}, ``BUSY`` (the request was
not taken because the device's input buffer is full: fetch ``RESULTS``, then resend).

The memory requests reach the device's own memory window (a board's block RAM standing in for
host memory: bus addresses ``0 .. window_bytes``; ``addr`` and lengths are multiples of 8). A
request payload is at most ``max_request`` bytes (``INFO``); ``clock_hz``/``baud`` are 0 where
there is no UART (co-simulation over a socket). A board answers ``INFO``; the co-simulation
server too, with its host memory as the window.
"""
import struct
import zlib

import numpy as np

__all__ = ["MAGIC", "HEADER", "TYPES", "NAMES", "MAX_PAYLOAD", "CRC32_POLY", "CRC32_INIT",
           "MAX_RESULT_BITS", "LINK_BAUD", "INFO", "INFO_FIELDS", "crc32", "header_crc", "encode",
           "pack_u64", "unpack_u64", "beat_words", "pack_beats", "unpack_beats", "result_beat_bytes", "pack_results", "unpack_results"]

MAGIC = 0xA5
HEADER = struct.Struct("<BBHIH")  # magic, type, seq, length, hcrc
TYPES = {"WRITE32": 1, "READ32": 2, "LOOKUPS": 3, "SCATTER_KEYS": 4, "RESULTS": 5, "QUIT": 6,
         "INFO": 7, "MEM_WRITE": 8, "MEM_READ": 9, "OPEN": 10, "CAM_CMDS": 11,
         "ACK": 0x81, "DATA": 0x82, "NAK": 0x83, "ERROR": 0x84, "BUSY": 0x85}
NAMES = {v: k for k, v in TYPES.items()}
MAX_PAYLOAD = 1 << 28
CRC32_POLY = 0xEDB88320   # reflected IEEE 802.3 polynomial (zlib's CRC-32)
CRC32_INIT = 0xFFFFFFFF   # initial state; the CRC is the complement of the final state
MAX_RESULT_BITS = 128
# The boards' UART rate (8N1): the most the ULX3S's FT231X does; serial:// opens at it.
LINK_BAUD = 3_000_000
INFO = struct.Struct("<IIII")
INFO_FIELDS = ("window_bytes", "max_request", "clock_hz", "baud")


def crc32(data: bytes) -> int:
    """The frame CRC-32 of ``data`` (zlib's)."""
    return zlib.crc32(data)


def header_crc(kind: int, seq: int, length: int) -> int:
    """``hcrc``: the low 16 bits of the CRC-32 of type, seq and length."""
    return crc32(struct.pack("<BHI", kind, seq, length)) & 0xFFFF


def encode(kind: str, seq: int, payload: bytes = b"") -> bytes:
    """The frame of request or response ``kind`` (a key of ``TYPES``)."""
    t = TYPES[kind]
    body = HEADER.pack(MAGIC, t, seq & 0xFFFF, len(payload),
                       header_crc(t, seq & 0xFFFF, len(payload)))
    body += payload
    return body + struct.pack("<I", crc32(body[1:]))


def pack_u64(values) -> bytes:
    """Input-stream beats of up to 64 bits as the ``LOOKUPS`` / ``SCATTER_KEYS`` payload."""
    return np.asarray(values, np.uint64).astype("<u8").tobytes()


def beat_words(width: int) -> int:
    """u64 words an input beat of a ``width``-bit payload takes (a lane beat of lookups may
    be wider than one word)."""
    return max(1, -(-width // 64))


def pack_beats(values, width: int) -> bytes:
    """Input-stream beats of ``width`` bits, each in `beat_words` words, low word first."""
    words = beat_words(width)
    if words == 1:
        return pack_u64(values)
    return b"".join(int(v).to_bytes(8 * words, "little") for v in values)


def unpack_beats(payload: bytes, width: int) -> list:
    """The beats of a `pack_beats` payload (a length not a multiple of a beat is an error)."""
    size = 8 * beat_words(width)
    if len(payload) % size:
        raise ValueError(f"{len(payload)} bytes are not whole {size}-byte beats")
    return [int.from_bytes(payload[i:i + size], "little") for i in range(0, len(payload), size)]


def unpack_u64(payload: bytes) -> np.ndarray:
    return np.frombuffer(payload, "<u8").astype(np.uint64)


def result_beat_bytes(width: int) -> int:
    """Bytes a result beat of a ``width``-bit payload takes in a ``RESULTS`` answer."""
    if not 1 <= width <= MAX_RESULT_BITS:
        raise ValueError(f"result payloads are 1 to {MAX_RESULT_BITS} bits, not {width}")
    return (width + 7) // 8


def pack_results(streams, widths) -> bytes:
    """A ``RESULTS`` payload from a list of beat lists, stream ``i``'s payloads ``widths[i]``
    bits wide."""
    out = []
    for values, width in zip(streams, widths, strict=True):
        out.append(struct.pack("<I", len(values)))
        out.extend(int(v).to_bytes(result_beat_bytes(width), "little") for v in values)
    return b"".join(out)


def unpack_results(payload: bytes, widths) -> list:
    """The beat lists of `pack_results` (one per entry of ``widths``), as Python ints."""
    streams, at = [], 0
    for width in widths:
        (count,) = struct.unpack_from("<I", payload, at)
        at += 4
        b = result_beat_bytes(width)
        streams.append([int.from_bytes(payload[i:i + b], "little")
                        for i in range(at, at + b * count, b)])
        at += b * count
    if at != len(payload):
        raise ValueError(f"a RESULTS payload of {len(payload)} bytes; its counts account for "
                         f"{at}")
    return streams
