"""LinkDevice's request loop against a scripted far end: BUSY fetches RESULTS and resends under
a new seq, NAK / a corrupt response resend the same seq, stale duplicates are skipped, silence
and ERROR raise LinkError, and stream beats are split at max_request."""
import time

import pytest

from hotline.contract.link import encode, pack_results, unpack_u64
from hotline.host.link import FrameReader, LinkError
from hotline.contract.config import AcceleratorConfig
from hotline.contract.streams import RESULT_STREAMS, stream_layouts
from hotline.host.link_device import LinkDevice


class Scripted(LinkDevice):
    """A LinkDevice whose far end is ``answer(kind, seq, payload) -> bytes``; ``sent`` logs
    every request frame that reached it."""

    def __init__(self, answer, timeout=1.0, retries=2):
        super().__init__("test://", None, None, timeout, retries)
        self.answer, self.sent, self.inbox = answer, [], bytearray()

    def _send(self, data):
        r = FrameReader()
        r.feed(data)
        frame = r.next()
        self.sent.append(frame)
        self.inbox += self.answer(*frame)

    def _recv(self, n):
        if not self.inbox:
            time.sleep(0.01)
        data = bytes(self.inbox[:n])
        del self.inbox[:n]
        return data


def results(seq, remap=()):
    widths = [stream_layouts(AcceleratorConfig())[n].size for n in RESULT_STREAMS]
    return encode("DATA", seq, pack_results([list(remap)] + [[]] * (len(RESULT_STREAMS) - 1),
                                            widths))


def test_busy_fetches_results_then_resends_under_a_new_seq():
    def answer(kind, seq, payload):
        if kind == "RESULTS":
            return results(seq, [7, 8])
        busy = sum(k == "LOOKUPS" for k, _, _ in dev.sent) == 1
        return encode("BUSY" if busy else "ACK", seq)

    dev = Scripted(answer)
    assert dev.request("LOOKUPS", b"\x01" * 16) == ("ACK", b"")
    assert [k for k, _, _ in dev.sent] == ["LOOKUPS", "RESULTS", "LOOKUPS"]
    seqs = [s for _, s, _ in dev.sent]
    assert len(set(seqs)) == 3 and seqs == sorted(seqs)
    assert dev.sent[0][2] == dev.sent[2][2] == b"\x01" * 16
    assert dev.pending["remap"] == [7, 8]
    stats = dev.link_stats
    assert (stats["busy"], stats["resends"]) == (1, 0)
    assert stats["result_beats"] == {**dict.fromkeys(RESULT_STREAMS, 0), "remap": 2}
    # three requests of 16, 0 and 16 payload bytes, 14 bytes of framing each; the answers:
    # BUSY and ACK (14 each) and DATA with a count per stream and two 2-byte remap beats
    assert (stats["bytes_out"], stats["bytes_in"]) == (3 * 14 + 32,
                                                       3 * 14 + 4 * len(RESULT_STREAMS) + 4)
    assert (stats["idle_fetches"], stats["idle_fetch_bytes"]) == (0, 0)


def test_busy_until_the_timeout_raises():
    dev = Scripted(lambda kind, seq, payload: results(seq) if kind == "RESULTS"
                   else encode("BUSY", seq), timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(LinkError, match="stayed busy for LOOKUPS"):
        dev.request("LOOKUPS", b"\x00" * 8)
    assert 0.3 <= time.monotonic() - t0 < 2
    assert {k for k, _, _ in dev.sent} == {"LOOKUPS", "RESULTS"} and dev.link_stats["busy"] > 1
    # every fetch brought nothing: each is an idle poll, its request and answer counted
    stats = dev.link_stats
    assert stats["idle_fetches"] == stats["fetches"] > 0
    assert stats["idle_fetch_bytes"] == stats["fetches"] * (14 + 14 + 4 * len(RESULT_STREAMS))


def test_nak_and_corrupt_response_resend_the_same_seq_and_stale_answers_are_skipped():
    def answer(kind, seq, payload):
        n = len(dev.sent)
        if n == 1:
            return encode("NAK", 0)
        if n == 2:
            bad = bytearray(encode("DATA", seq, b"\x11\x22\x33\x44"))
            bad[-6] ^= 0x01
            return bytes(bad)
        return encode("DATA", seq - 1, b"\x99\x99\x99\x99") + encode("DATA", seq, b"\x11\x22\x33\x44")

    dev = Scripted(answer)
    assert dev.request("READ32", b"\x08\x00\x00\x00") == ("DATA", b"\x11\x22\x33\x44")
    assert len({s for _, s, _ in dev.sent}) == 1 and len(dev.sent) == 3
    assert dev.link_stats["resends"] == 2


def test_silence_and_error_raise():
    dev = Scripted(lambda kind, seq, payload: b"", timeout=0.1, retries=2)
    with pytest.raises(LinkError, match="no answer to READ32"):
        dev.request("READ32", b"\x00" * 4)
    assert len(dev.sent) == 3
    dev = Scripted(lambda kind, seq, payload: encode("ERROR", seq, b"window overrun"))
    with pytest.raises(LinkError, match="device error: window overrun"):
        dev.request("MEM_READ", b"\x00" * 8)
    dev = Scripted(lambda kind, seq, payload: encode("NAK", 0), retries=1)
    with pytest.raises(LinkError, match="still corrupt after 1 resends"):
        dev.request("READ32", b"\x00" * 4)


def test_stream_beats_split_at_max_request():
    dev = Scripted(lambda kind, seq, payload: encode("ACK", seq))
    dev.max_request = 23  # two 8-byte beats per frame
    beats = [1, 2 ** 64 - 1, 3, 4, 5]
    dev._send_beats("LOOKUPS", beats)
    assert [len(p) for _, _, p in dev.sent] == [16, 16, 8]
    assert [int(v) for _, _, p in dev.sent for v in unpack_u64(p)] == beats


def _register_file(values):
    """A far end that answers READ32 from ``values`` (register name -> value, else 0) and
    ACKs everything else; with ``Scripted`` it is a LinkDevice over an in-process link."""
    from hotline.host.registers import ADDR
    by_addr = {getattr(ADDR, name): value for name, value in values.items()}

    def answer(kind, seq, payload):
        if kind == "READ32":
            value = by_addr.get(int.from_bytes(payload[:4], "little"), 0)
            return encode("DATA", seq, value.to_bytes(4, "little"))
        if kind == "RESULTS":
            return results(seq)
        return encode("ACK", seq)
    return answer


def test_link_refuses_a_hot_set_beyond_capacity_before_any_frame():
    """load_hot_set with more keys than ``config.hot_capacity``: one HotlineError, as on
    model://, before a single CAM command goes out."""
    import numpy as np

    from hotline.contract.config import AcceleratorConfig
    from hotline.contract.errors import HotlineError

    dev = Scripted(_register_file({}), timeout=0.2, retries=0)
    capacity = AcceleratorConfig().hot_capacity
    with pytest.raises(HotlineError, match=f"holds at most {capacity} hot rows"):
        dev.load_hot_set(np.arange(capacity + 1, dtype=np.uint32))
    assert dev.sent == []


def test_link_set_table_refuses_a_table_beyond_num_tables():
    """The table count is the device's NUM_TABLES register: on an 8-table device table 8 is one
    HotlineError, and no descriptor register is written."""
    from hotline.contract.errors import HotlineError
    from hotline.host.host_memory import HostMemory
    from hotline.host.registers import ID_VALUE

    dev = Scripted(_register_file({"ID": ID_VALUE, "NUM_TABLES": 8}))
    dev._start()
    assert dev.info()["num_tables"] == 8
    with HostMemory(1 << 16) as mem:
        dev.memory = mem
        w = mem.alloc(4096)
        dev.set_table(7, w, 10, 16)
        sent = len(dev.sent)
        with pytest.raises(HotlineError, match="table 8: the device has 8 tables"):
            dev.set_table(8, w, 10, 16)
        assert len(dev.sent) == sent and sorted(dev.tables) == [7]


def test_open_takes_only_the_answer_with_its_nonce():
    """Answers of the last session under the OPEN's seq (a cached response, bytes still on
    the wire) are skipped; the one that echoes the nonce is taken, with no resend. An old
    device that does not know OPEN answers ERROR, which is raised."""
    def answer(kind, seq, payload):
        assert kind == "OPEN" and len(payload) == 4
        stale = bytes(b ^ 0xFF for b in payload)
        return (encode("ACK", seq) + encode("DATA", seq, stale) + encode("DATA", seq, payload))
    dev = Scripted(answer)
    dev._open_session()
    assert [k for k, _, _ in dev.sent] == ["OPEN"] and dev.link_stats["resends"] == 0
    assert dev.inbox == bytearray()

    old = Scripted(lambda kind, seq, payload: encode("ERROR", seq, b"unknown request"))
    with pytest.raises(LinkError, match="device error: unknown request"):
        old._open_session()
