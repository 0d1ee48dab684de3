"""The host side of the host link: the frame reader and the link's errors.

The frame format is `hotline.contract.link`; `hotline.host.link_device.LinkDevice` drives a
device with it over any transport.
"""
from hotline.contract.errors import HotlineError
from hotline.contract.link import HEADER, MAGIC, MAX_PAYLOAD, NAMES, crc32, header_crc

__all__ = ["LinkError", "FrameError", "FrameReader"]


class LinkError(HotlineError):
    """The link failed: timeout, closed peer, or a frame that stayed corrupt after retries."""


class FrameError(Exception):
    """A frame with a bad header or CRC (the receiver answers NAK)."""


class FrameReader:
    """Incremental decoder: feed bytes, take (kind, seq, payload) frames or FrameErrors.

    After a bad frame it resynchronises on the next magic byte."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data) -> None:
        self.buf += data

    def needed(self) -> int:
        """Bytes still missing from the frame at the head of the buffer (at least 1); meant
        after `next` returned None, so a reader can ask a port for exactly one frame."""
        if len(self.buf) < HEADER.size:
            return HEADER.size - len(self.buf)
        length = HEADER.unpack_from(self.buf)[3]
        return max(1, HEADER.size + length + 4 - len(self.buf))

    def next(self) -> tuple[str, int, bytes] | None:
        """The next complete frame, None if more bytes are needed; raises FrameError."""
        while self.buf and self.buf[0] != MAGIC:
            del self.buf[0]
        if len(self.buf) < HEADER.size:
            return None
        _, kind, seq, length, hcrc = HEADER.unpack_from(self.buf)
        if hcrc != header_crc(kind, seq, length) or length > MAX_PAYLOAD or kind not in NAMES:
            del self.buf[0]
            raise FrameError(f"bad header (type {kind:#x}, length {length})")
        end = HEADER.size + length + 4
        if len(self.buf) < end:
            return None
        frame = bytes(self.buf[:end])
        del self.buf[:end]
        crc = int.from_bytes(frame[end - 4:end], "little")
        if crc32(frame[1:end - 4]) != crc:
            raise FrameError(f"CRC mismatch in a {NAMES[kind]} frame (seq {seq})")
        return NAMES[kind], seq, frame[HEADER.size:end - 4]
