"""Host-link framing against a hand-built frame, corruption detection and resynchronisation."""
import struct
import zlib

import pytest

from hotline.contract.link import encode, pack_results, result_beat_bytes, unpack_results
from hotline.host.link import FrameError, FrameReader


def test_frame_layout_by_hand():
    payload = b"\x10\x00\x00\x00\x2a\x00\x00\x00"
    hcrc = zlib.crc32(struct.pack("<BHI", 1, 7, len(payload))) & 0xFFFF
    body = bytes([0xA5, 1]) + struct.pack("<HIH", 7, len(payload), hcrc) + payload
    want = body + struct.pack("<I", zlib.crc32(body[1:]))
    assert encode("WRITE32", 7, payload) == want


def test_stream_of_frames_in_odd_chunks():
    frames = [encode("READ32", i, i.to_bytes(4, "little")) for i in range(50)]
    data = b"".join(frames)
    r, got = FrameReader(), []
    for i in range(0, len(data), 7):
        r.feed(data[i:i + 7])
        while (f := r.next()) is not None:
            got.append(f)
    assert got == [("READ32", i, i.to_bytes(4, "little")) for i in range(50)]


@pytest.mark.parametrize("pos", [1, 2, 3, 5, 7, 9, 12, 14, -1])
def test_any_flipped_bit_is_detected_then_resynchronised(pos):
    bad = bytearray(encode("WRITE32", 3, b"\x01\x02\x03\x04\x05\x06\x07\x08"))
    bad[pos] ^= 0x10
    good = encode("READ32", 4, b"\x00\x01\x00\x00")
    r = FrameReader()
    r.feed(bytes(bad) + good)
    errors, frames = 0, []
    for _ in range(100):
        try:
            f = r.next()
        except FrameError:
            errors += 1
            continue
        if f is None:
            break
        frames.append(f)
    assert errors >= 1
    assert frames[-1] == ("READ32", 4, b"\x00\x01\x00\x00")
    assert all(f[0] != "WRITE32" or f[2] == b"\x01\x02\x03\x04\x05\x06\x07\x08" for f in frames)


def test_dropped_byte_is_detected():
    frame = bytearray(encode("LOOKUPS", 9, bytes(range(32))))
    del frame[10]
    r = FrameReader()
    r.feed(bytes(frame) + encode("ACK", 10))
    seen = []
    for _ in range(100):
        try:
            f = r.next()
        except FrameError:
            seen.append("error")
            continue
        if f is None:
            break
        seen.append(f[0])
    assert "LOOKUPS" not in seen and "error" in seen


def test_results_take_the_whole_bytes_of_each_width():
    streams = [[0, 1, (1 << 127) | 5], [], [2 ** 64 + 3], [0x1FFF, 7], [0xFF]]
    widths = [128, 8, 72, 13, 8]
    payload = pack_results(streams, widths)
    assert unpack_results(payload, widths) == streams
    # hand-computed layout: count u32 then each beat in (width + 7) // 8 bytes
    assert payload == (b"".join([(3).to_bytes(4, "little"), bytes(16), (1).to_bytes(16, "little"),
                                 ((1 << 127) | 5).to_bytes(16, "little"), bytes(4),
                                 (1).to_bytes(4, "little"), (2 ** 64 + 3).to_bytes(9, "little"),
                                 (2).to_bytes(4, "little"), b"\xff\x1f", b"\x07\x00",
                                 (1).to_bytes(4, "little"), b"\xff"]))
    assert [result_beat_bytes(w) for w in (1, 8, 9, 13, 16, 33, 128)] == [1, 1, 2, 2, 2, 5, 16]
    with pytest.raises(ValueError, match="its counts account for"):
        unpack_results(payload + b"\0", widths)
    with pytest.raises(ValueError, match="1 to 128 bits"):
        result_beat_bytes(129)


def test_needed_asks_for_exactly_the_rest_of_a_frame():
    frames = [encode("DATA", 5, bytes(range(40))), encode("ACK", 6), encode("NAK", 7, b"x")]
    data, at, r = b"".join(frames), 0, FrameReader()
    for frame in frames:
        while (got := r.next()) is None:
            n = r.needed()
            r.feed(data[at:at + n])
            at += n
        assert encode(got[0], got[1], got[2]) == frame and not r.buf  # never past the frame
    assert at == len(data)
