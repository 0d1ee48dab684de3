"""The Device API over the framed host link (`hotline.contract.link`), whatever carries the bytes.

`LinkDevice` drives the accelerator as a board driver does: register writes and reads, lookup
and scatter-key beats, and the output streams fetched with ``RESULTS``. A subclass supplies the
transport (``_send``, ``_recv``, optionally ``_check_alive``): `hotline.host.sim_device.SimDevice`
(a co-simulation process over a loopback socket) and `hotline.host.serial_device.SerialDevice` (a
pyserial port: a board's UART, or a TCP socket to a co-simulation).

Requests: a NAK, a corrupt response or silence for ``timeout`` seconds resends the same frame
(``retries`` times; the device answers a repeated ``seq`` from its cache); ``BUSY`` (the device
did not take the request) fetches ``RESULTS`` and sends the request again under a new ``seq``
until ``timeout``; ``ERROR`` raises `LinkError`. Stream beats go out in frames of at most
``max_request`` bytes.

The hot set goes to the CAM in bulk (``CAM_CMDS`` beats; each command's relocations and
response come back on the ``cam_events`` result stream) with the slot bookkeeping kept in the
object (``load_hot_set`` starts it, ``update_hot_set`` continues it); the access learner
through CONTROL / CONFIG.learner_tap and its readout registers (docs/device-api.md).
"""
import abc
import dataclasses
import secrets
import struct
import time

import numpy as np

from hotline.contract.cam import CAMOp, CAMStatus
from hotline.contract.link import MAX_PAYLOAD, beat_words, encode, pack_beats, unpack_results
from hotline.contract.streams import LANE_STREAMS, RESULT_STREAMS, batch_end, lane_unpack, pack, \
    pack_lookups, stream_layouts, unpack
from hotline.model.device_model import HotPlacement

from .device import COUNTER_NAMES, BatchResult, Device, LearnerReadout
from .link import FrameError, FrameReader, LinkError
from .registers import ID_VALUE, RegisterFile, decode


class LinkDevice(Device):
    """The accelerator behind the host link (see the module docstring). ``timeout``: seconds
    per request and per wait for a batch or scatter; ``retries``: resends of a frame answered
    NAK, corrupt or lost. The stream payload layouts come from ``config``
    (`hotline.contract.streams.stream_layouts`)."""

    #: reads of a status bit (CAM_RESP.valid, STATUS.learner_*) before giving up
    POLLS = 1000

    def __init__(self, url, config, memory, timeout, retries):
        super().__init__(url, config, memory)
        self.timeout, self.retries = timeout, retries
        self.seq = 0
        self.reader = FrameReader()
        self.pending = {n: [] for n in RESULT_STREAMS}
        self.max_request = MAX_PAYLOAD
        #: requests (``fetches`` of them RESULTS), recovery events (frames resent after a NAK,
        #: corruption or silence; BUSY answers),
        #: bytes on the wire each way, and the result beats received per stream;
        #: ``idle_fetches`` / ``idle_fetch_bytes``: RESULTS exchanges that brought no beat (the
        #: host polled while the device worked: their number depends on the device's speed)
        self.link_stats = {"requests": 0, "fetches": 0, "resends": 0, "busy": 0, "bytes_out": 0,
                           "bytes_in": 0, "idle_fetches": 0, "idle_fetch_bytes": 0,
                           "result_beats": dict.fromkeys(RESULT_STREAMS, 0)}
        self.regs = RegisterFile(self._read32, self._write32)
        self.layouts = stream_layouts(self.config)
        # The lane streams' results are kept one entry per item (the one-lane layouts).
        self.entry_layouts = stream_layouts(dataclasses.replace(self.config, lanes=1))
        self._config = {"gather_enable": 0, "learner_tap": 0, "cam_events": 0}  # CONFIG as written
        # The hot set's slot bookkeeping (load_hot_set, update_hot_set): each held key's hot
        # slot and each used slot's key; None until the CAM is cleared in this session.
        self._slot_of = self._at = None

    # -- transport ------------------------------------------------------------------------
    @abc.abstractmethod
    def _send(self, data):
        """Write ``data`` to the link; `LinkError` if the link failed."""

    @abc.abstractmethod
    def _recv(self, n):
        """At most ``n`` bytes from the link, b"" after a short wait with none; `LinkError` if
        the link failed or closed."""

    def _check_alive(self):
        """Raise `LinkError` if the far end is known to be dead (called while waiting)."""

    # -- requests -------------------------------------------------------------------------
    def request(self, kind, payload=b"", expect=None) -> tuple[str, bytes]:
        """Send one request; its response (kind, payload). See the module docstring.
        ``expect``: the only answer payload to accept (others are stale)."""
        deadline = time.monotonic() + self.timeout
        while True:
            rkind, rpayload = self._exchange(kind, payload, expect)
            if rkind != "BUSY":
                return rkind, rpayload
            self.link_stats["busy"] += 1
            # RESULTS is how a BUSY device is drained: BUSY to it cannot clear.
            if kind == "RESULTS" or time.monotonic() > deadline:
                raise LinkError(f"{self.url}: the device stayed busy for {kind} "
                                f"({self.timeout:.0f} s)")
            self._fetch()

    def _exchange(self, kind, payload, expect):
        self.link_stats["requests"] += 1
        self.link_stats["fetches"] += kind == "RESULTS"
        self.seq = (self.seq + 1) & 0xFFFF
        frame = encode(kind, self.seq, payload)
        for attempt in range(self.retries + 1):
            self.link_stats["resends"] += attempt > 0
            self.link_stats["bytes_out"] += len(frame)
            self._send(frame)
            rkind, rpayload = self._answer(time.monotonic() + self.timeout, expect)
            if rkind is not None:
                return rkind, rpayload
            if rpayload == "silent":
                self._check_alive()
        if rpayload == "silent":
            raise LinkError(f"{self.url}: no answer to {kind} within {self.timeout:.0f} s")
        raise LinkError(f"{self.url}: {kind} frame still corrupt after {self.retries} resends")

    def _answer(self, deadline, expect=None):
        """The response to ``self.seq`` as (kind, payload), or (None, why) when the request is
        to be resent: "corrupt" (a NAK or a bad frame) or "silent" (nothing by ``deadline``).
        With ``expect``, an answer other than ``DATA`` ``expect`` (or an ``ERROR``) is stale
        and skipped."""
        corrupt = False
        while time.monotonic() < deadline:
            try:
                resp = self.reader.next()
            except FrameError:
                corrupt = True  # parse what is buffered first: one bad chunk, one resend
                continue
            if resp is None:
                if corrupt:
                    return None, "corrupt"
                data = self._recv(min(self.reader.needed(), 1 << 20))
                if data:
                    self.link_stats["bytes_in"] += len(data)
                    self.reader.feed(data)
                else:
                    self._check_alive()
                continue
            rkind, rseq, rpayload = resp
            if rkind == "NAK":
                corrupt = True
            elif rseq != self.seq or (expect is not None and rkind != "ERROR"
                                      and (rkind, rpayload) != ("DATA", expect)):
                continue  # a stale duplicate, or another session's answer
            elif rkind == "ERROR":
                raise LinkError(f"{self.url}: device error: {rpayload.decode(errors='replace')}")
            else:
                return rkind, rpayload
        return None, "silent"

    def _send_beats(self, kind, beats, width=64):
        # A stream is continuous on the device, so frame boundaries between beats are free.
        data = pack_beats(beats, width)
        size = 8 * beat_words(width)
        step = self.max_request // size * size
        for at in range(0, len(data), step):
            self.request(kind, data[at:at + step])

    def _read32(self, addr):
        _, payload = self.request("READ32", int(addr).to_bytes(4, "little"))
        return int.from_bytes(payload[:4], "little")

    def _write32(self, addr, value):
        self.request("WRITE32", int(addr).to_bytes(4, "little")
                     + (int(value) & 0xFFFFFFFF).to_bytes(4, "little"))

    def _fetch(self):
        _, payload = self.request("RESULTS")
        try:
            streams = unpack_results(payload, [self.layouts[n].size for n in RESULT_STREAMS])
        except (ValueError, struct.error) as e:
            raise LinkError(f"{self.url}: a RESULTS answer that does not parse ({e}): is the "
                            f"device built for this configuration?") from None
        if not any(streams):
            self.link_stats["idle_fetches"] += 1
            self.link_stats["idle_fetch_bytes"] += len(encode("RESULTS", 0, b"")) + len(
                encode("DATA", 0, payload))
        for name, beats in zip(RESULT_STREAMS, streams):
            self.link_stats["result_beats"][name] += len(beats)
            if name in LANE_STREAMS and self.config.lanes > 1:
                beats = pack(self.entry_layouts[name],
                             **lane_unpack(self.layouts[name], beats)[0]).tolist()
            self.pending[name].extend(beats)

    def _take(self, name, n):
        beats, self.pending[name] = self.pending[name][:n], self.pending[name][n:]
        return beats

    def _open_session(self):
        """``OPEN`` with a fresh nonce: the device forgets the last session's cached response
        and drops the input words and result beats that session left. Only the answer with
        this nonce counts, so a stale response of that session (even under the same seq, which
        starts at 0 every session) is skipped."""
        nonce = secrets.token_bytes(4)
        self.request("OPEN", nonce, expect=nonce)

    def _start(self):
        """Once the session is open: check the ID register, soft-reset the accelerator
        (CONTROL.soft_reset: every block, table and counter to its power-on state) and wait
        for STATUS.resetting to fall, drop the result beats that came out before the reset,
        and read the device's table count (NUM_TABLES)."""
        ident = self.regs.read("ID")
        if ident != ID_VALUE:
            raise LinkError(f"{self.url}: the device answered ID {ident:#x}, not {ID_VALUE:#x}")
        self.regs.write("CONTROL", soft_reset=1)
        self._poll("STATUS", "resetting", "the accelerator did not finish its soft reset",
                   until=0)
        self._fetch()
        for beats in self.pending.values():
            beats.clear()
        self.num_tables = self.regs.read("NUM_TABLES")

    # -- Device backend -------------------------------------------------------------------
    def _write_table(self, table, d):
        r = self.regs
        r.write("DESC_TABLE", table=table)
        r.write("DESC_BASE_LO", d.window.base & 0xFFFFFFFF)
        r.write("DESC_BASE_HI", d.window.base >> 32)
        r.write("DESC_ROWS", d.rows)
        r.write("DESC_ROW_BYTES", d.row_bytes)
        r.write("DESC_COMMIT", 1)

    def _write_staging(self, d):
        r = self.regs
        r.write("STAGING_BASE_LO", d.window.base & 0xFFFFFFFF)
        r.write("STAGING_BASE_HI", d.window.base >> 32)
        r.write("STAGING_STRIDE", d.stride)
        r.write("STAGING_SLOTS", d.slots)
        r.write("STAGING_BANKS", banks=d.banks)
        self._set_config(gather_enable=1)

    def _load_hot_set(self, keys):
        ops = [("clear", 0)] + [("insert", k) for k in keys.tolist()]
        return self._hot_placement(keys, self._cam_commands(ops)[1:])

    def _update_hot_set(self, held, keys):
        # nothing loaded in this session: start from an empty CAM
        ops = [("clear", 0)] if self._slot_of is None else []
        leave, enter = held[~np.isin(held, keys)], keys[~np.isin(keys, held)]
        ops += [("delete", k) for k in leave.tolist()] + [("insert", k) for k in enter.tolist()]
        return self._hot_placement(keys, self._cam_commands(ops)[len(ops) - len(leave) - len(enter):])

    def _cam_commands(self, ops):
        """Run the CAM commands ``ops`` [(op name, key)] in bulk: their beats go out in
        ``CAM_CMDS`` frames (CONFIG.cam_events set), and each command's relocations and then its
        response come back on the ``cam_events`` stream, so a hot set costs a few round trips,
        not three or more per key. The slot bookkeeping follows every command in order.
        Returns each command's (status, slot, moves)."""
        if not ops:
            return []
        self._set_config(cam_events=1)
        codes = np.array([int(CAMOp[op.upper()]) for op, _ in ops], np.uint64)
        keys = np.array([key for _, key in ops], np.uint64)
        self._send_beats("CAM_CMDS", pack(self.layouts["cam_cmds"], op=codes, key=keys))
        # Responses among the events so far, counted as they arrive (the wait polls often:
        # re-reading every pending event each time was quadratic in the hot set).
        count = {"events": 0, "responses": 0}

        def responses():
            fresh = self.pending["cam_events"][count["events"]:]
            if fresh:
                moves = int(unpack(self.layouts["cam_events"], fresh)["move"].sum())
                count["events"] += len(fresh)
                count["responses"] += len(fresh) - moves
            return count["responses"]
        self._wait(lambda: responses() >= len(ops), f"{len(ops)} CAM commands")
        out, moves, taken = [], [], 0
        for v in self.pending["cam_events"]:
            taken += 1
            ev = unpack(self.layouts["cam_events"], [v])
            word = int(ev["word"][0])
            if ev["move"][0]:
                mv = decode("CAM_MOVE", word)
                moves.append((mv["src"], mv["dst"]))
                continue
            op, key = ops[len(out)]
            out.append(self._follow(op, key, decode("CAM_RESP", word), moves))
            moves = []
            if len(out) == len(ops):
                break
        self._take("cam_events", taken)
        return out

    def _follow(self, op, key, resp, moves):
        """Apply one CAM command's relocations and response to the slot bookkeeping; its
        (status, slot, moves)."""
        if op == "clear":
            self._slot_of, self._at = {}, {}
        slot_of, at = self._slot_of, self._at
        for src, dst in moves:
            moved = at.pop(src)
            slot_of[moved], at[dst] = dst, moved
        status = CAMStatus(resp["status"])
        if status == CAMStatus.OK and op == "insert":
            slot_of[key], at[resp["slot"]] = resp["slot"], key
        elif status == CAMStatus.OK and op == "delete":
            slot_of.pop(key, None)
            at.pop(resp["slot"], None)
        return status, resp["slot"], moves

    def _hot_placement(self, keys, responses):
        """The `HotPlacement` of hot set ``keys`` from the slot bookkeeping."""
        slot_of = self._slot_of
        held = np.array([k for k in keys.tolist() if k in slot_of], np.uint32)
        failed = np.array([k for k in keys.tolist() if k not in slot_of], np.uint32)
        return HotPlacement(held, np.array([slot_of[k] for k in held.tolist()], np.int64),
                            failed, responses)

    def _poll(self, name, field, what, until=1):
        """Read register ``name`` until its bit ``field`` is ``until``: its fields
        (`LinkError` after ``POLLS`` reads)."""
        for _ in range(self.POLLS):
            value = self.regs.fields(name)
            if value[field] == until:
                return value
        raise LinkError(f"{self.url}: {what}")

    # -- access learner: CONTROL starts, stops and clears it, LEARNER_ADDR reads an entry --
    def _learner_start(self):
        r = self.regs
        self._set_config(learner_tap=1)
        r.write("CONTROL", learner_stop=1, learner_clear=1)
        # Then start: counting begins once the clear (one cycle per bucket) is over, which
        # STATUS.learner_active shows; no lookup is sent before.
        r.write("CONTROL", learner_start=1)
        self._poll("STATUS", "learner_active", "the access learner did not start")

    def _learner_stop(self):
        r = self.regs
        r.write("CONTROL", learner_stop=1)
        self._set_config(learner_tap=0)
        # Its pipeline drained 8 cycles after the last lookup it took, long before these
        # reads: the table and its counters are final.
        counted = r.read("LEARNER_COUNTED")
        dropped = r.read("LEARNER_DROPPED")
        entries = r.read("LEARNER_ENTRIES")
        keys, counts = np.zeros(entries, np.uint32), np.zeros(entries, np.uint64)
        for addr in range(entries):
            r.write("LEARNER_ADDR", addr)
            self._poll("STATUS", "learner_valid", f"learner entry {addr} was not read out")
            keys[addr], counts[addr] = r.read("LEARNER_KEY"), r.read("LEARNER_COUNT")
        return LearnerReadout(keys, counts, counted, dropped)

    def _set_config(self, **bits):
        """Write CONFIG with ``bits`` changed and the other modes kept."""
        self._config.update(bits)
        self.regs.write("CONFIG", **self._config)

    def _push(self, batch_id, keys, offsets):
        n = len(offsets) - 1
        layout = self.layouts["lookups"]
        self._send_beats("LOOKUPS", pack_lookups(layout, keys, offsets, n), layout.size)
        bank = batch_id % self.staging.banks if self.staging is not None else 0
        return {"batch_id": batch_id, "bank": bank, "samples": n, "lookups": len(keys)}

    def _pull(self, p):
        gather = self.staging is not None

        def complete():
            return (len(self.pending["remap"]) >= p["lookups"]
                    and any(batch_end(v) for v in self.pending["batch_keys"])
                    and len(self.pending["popular"]) + len(self.pending["non_popular"])
                    >= p["samples"]
                    and (not gather or any(not self._is_scatter(v)
                                           for v in self.pending["dma_done"])))
        self._wait(complete, f"batch {p['batch_id']}")
        ends = [i for i, v in enumerate(self.pending["batch_keys"]) if batch_end(v)]
        bk = unpack(self.layouts["batch_keys"], self._take("batch_keys", ends[0] + 1))
        summary = {k: int(v[-1]) for k, v in bk.items()}
        entries = self.entry_layouts
        remap = unpack(entries["remap"], self._take("remap", p["lookups"]))
        pop = unpack(entries["popular"], self._take("popular", summary["popular"]))["sample"]
        non = unpack(entries["non_popular"],
                     self._take("non_popular", summary["non_popular"]))["sample"]
        g = {"rows": 0, "errors": 0}
        if gather:
            i = next(i for i, v in enumerate(self.pending["dma_done"]) if not self._is_scatter(v))
            g = self._dma_done(self.pending["dma_done"].pop(i))
        return BatchResult(p["batch_id"], p["bank"], p["samples"], remap["hot"].astype(bool),
                           remap["slot"], pop, non, bk["key"][:-1].astype(np.uint32),
                           bool(summary["overflow"]), g)

    def _is_scatter(self, v):
        return bool(unpack(self.layouts["dma_done"], [v])["scatter"][0])

    def _dma_done(self, v):
        d = unpack(self.layouts["dma_done"], [v])
        return {"rows": int(d["rows"][0]), "errors": int(d["errors"][0])}

    def _scatter(self, bank, cold_keys):
        # The engine runs whichever batch is ready first, so a scatter issued while a pushed
        # batch's keys were still in the fragmenter would overtake its gather. It cannot be:
        # the agent runs a scatter after the jobs before it, and a push's job ends with its
        # gather's done record (_pull).
        self.regs.write("SCATTER_CMD", bank=bank)
        n = len(cold_keys)
        self._send_beats("SCATTER_KEYS", pack(self.layouts["scatter_keys"],
                                              key=np.r_[cold_keys.astype(np.uint64), 0],
                                              end=np.r_[np.zeros(n, np.uint64), 1]))
        self._wait(lambda: any(self._is_scatter(v) for v in self.pending["dma_done"]),
                   "the scatter")
        i = next(i for i, v in enumerate(self.pending["dma_done"]) if self._is_scatter(v))
        return self._dma_done(self.pending["dma_done"].pop(i))

    def _wait(self, ready, what):
        """Fetch results until ``ready()``; `LinkError` after ``timeout`` seconds."""
        deadline = time.monotonic() + self.timeout
        while not ready():
            if time.monotonic() > deadline:
                raise LinkError(f"{self.url}: {what} not done after {self.timeout:.0f} s")
            self._fetch()

    def _counters(self):
        return {n: self.regs.read(n.upper()) for n in COUNTER_NAMES}
