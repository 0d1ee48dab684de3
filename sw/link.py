"""The host link: a framed byte protocol carrying CSR accesses, lookup batches and results.

One frame: ``A5 | type u8 | seq u16 | length u32 | hcrc u16 | payload | crc32 u32`` (little
endian). ``hcrc`` (low half of the CRC-32 of type, seq and length) lets a receiver reject a
corrupted length at once instead of waiting for bytes that never come; the CRC-32 (zlib)
covers everything after the magic byte. The host sends a request and waits for the
response with the same ``seq``; a frame whose CRC or header is bad is answered ``NAK`` and the
host resends it; a request whose ``seq`` was already served gets the cached response again
(so a lost response is recovered by resending, and nothing is executed twice). The same bytes
run over a loopback TCP socket to the co-simulation (``sim://``) and over a UART to a board.

Requests: ``WRITE32`` {addr u32, value u32}, ``READ32`` {addr u32} -> ``DATA`` {value u32},
``LOOKUPS`` {beats: u64 each, the accelerator's ``lookups`` payloads},
``SCATTER_KEYS`` {beats: u64 each, ``scatter_keys`` payloads}, ``RESULTS`` -> ``DATA`` {per
output stream: count u32 then u64 payloads, every beat collected since the last RESULTS},
``QUIT``, ``INFO`` -> ``DATA`` {window_bytes u32, max_request u32, clock_hz u32, baud u32},
``MEM_WRITE`` {addr u32, 0 u32, bytes (a multiple of 8)} -> ``ACK``, ``MEM_READ`` {addr u32,
length u32} -> ``DATA`` {bytes}. Result beats travel as 16 bytes each (payloads up to 128 bits).
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

from .errors import HotlineError

MAGIC = 0xA5
HEADER = struct.Struct("<BBHIH")
TYPES = {"WRITE32": 1, "READ32": 2, "LOOKUPS": 3, "SCATTER_KEYS": 4, "RESULTS": 5, "QUIT": 6,
         "INFO": 7, "MEM_WRITE": 8, "MEM_READ": 9,
         "ACK": 0x81, "DATA": 0x82, "NAK": 0x83, "ERROR": 0x84, "BUSY": 0x85}
NAMES = {v: k for k, v in TYPES.items()}
MAX_PAYLOAD = 1 << 28


class LinkError(HotlineError):
    """The link failed: timeout, closed peer, or a frame that stayed corrupt after retries."""


class FrameError(Exception):
    """A frame with a bad header or CRC (the receiver answers NAK)."""


def _hcrc(kind, seq, length):
    return zlib.crc32(struct.pack("<BHI", kind, seq, length)) & 0xFFFF


def encode(kind, seq, payload=b""):
    t = TYPES[kind]
    body = HEADER.pack(MAGIC, t, seq & 0xFFFF, len(payload), _hcrc(t, seq & 0xFFFF, len(payload)))
    body += payload
    return body + struct.pack("<I", zlib.crc32(body[1:]))


class FrameReader:
    """Incremental decoder: feed bytes, take (kind, seq, payload) frames or FrameErrors.

    After a bad frame it resynchronises on the next magic byte."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data

    def needed(self):
        """Bytes still missing from the frame at the head of the buffer (at least 1); meant
        after `next` returned None, so a reader can ask a port for exactly one frame."""
        if len(self.buf) < HEADER.size:
            return HEADER.size - len(self.buf)
        length = HEADER.unpack_from(self.buf)[3]
        return max(1, HEADER.size + length + 4 - len(self.buf))

    def next(self):
        """The next complete frame, None if more bytes are needed; raises FrameError."""
        while self.buf and self.buf[0] != MAGIC:
            del self.buf[0]
        if len(self.buf) < HEADER.size:
            return None
        _, kind, seq, length, hcrc = HEADER.unpack_from(self.buf)
        if hcrc != _hcrc(kind, seq, length) or length > MAX_PAYLOAD or kind not in NAMES:
            del self.buf[0]
            raise FrameError(f"bad header (type {kind:#x}, length {length})")
        end = HEADER.size + length + 4
        if len(self.buf) < end:
            return None
        frame = bytes(self.buf[:end])
        del self.buf[:end]
        (crc,) = struct.unpack_from("<I", frame, end - 4)
        if zlib.crc32(frame[1:end - 4]) != crc:
            raise FrameError(f"CRC mismatch in a {NAMES[kind]} frame (seq {seq})")
        return NAMES[kind], seq, frame[HEADER.size:end - 4]


def pack_u64(values):
    return np.asarray(values, np.uint64).astype("<u8").tobytes()


def unpack_u64(payload):
    return np.frombuffer(payload, "<u8").astype(np.uint64)


def pack_results(streams):
    """A list of beat lists (payload ints < 2**128) -> bytes."""
    out = []
    for values in streams:
        out.append(struct.pack("<I", len(values)))
        out.extend(int(v).to_bytes(16, "little") for v in values)
    return b"".join(out)


def unpack_results(payload, n):
    """The ``n`` beat lists of `pack_results`, as Python ints."""
    streams, at = [], 0
    for _ in range(n):
        (count,) = struct.unpack_from("<I", payload, at)
        at += 4
        streams.append([int.from_bytes(payload[i:i + 16], "little")
                        for i in range(at, at + 16 * count, 16)])
        at += 16 * count
    return streams
