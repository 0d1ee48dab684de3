"""``serial://PORT``: the Device API over the host link on a pyserial port.

``PORT`` is anything ``serial.serial_for_url`` opens: ``serial:///dev/ttyUSB1`` (a board's
UART), ``serial://socket://127.0.0.1:5555`` (a co-simulation serving the link on a TCP port,
e.g. `hotline.sim.device_server` in listen mode). Options: ``baud`` (3000000, the ECP5 boards'
link rate, `hotline.contract.link.LINK_BAUD`; ignored by ``socket://``), ``timeout`` (s
per request and per wait for a batch), ``retries`` (resends of a frame answered NAK or lost).
Opening starts a session (``OPEN``: the device's link forgets the last session's cached
response and drops the input words and result beats it left; the answer carries this
session's nonce), asks ``INFO`` (memory window, largest request), checks the ID register,
soft-resets the accelerator (CONTROL.soft_reset: CAM, cold-key set, learner, streams,
counters and registers to their power-on state), checks that the device's CAM_ENTRIES,
COLD_MAX_KEYS, MAX_BATCH_SAMPLES and LANES match ``config``, and takes the bus widths from
DATA_WIDTH / ADDR_WIDTH (the boards' tops are 32-bit). So nothing of an earlier session (a host that died mid-batch
included) reaches this one.

Memory: the device's DMA reaches its own memory window, not the host's RAM. The window mirrors
`HostMemory` at the same addresses (so the host memory must fit in it: at most 4 GiB - 1, as
``INFO`` and the ``MEM_*`` frames carry 32-bit sizes and addresses), and this backend
copies bytes at the points of the Hotline usage protocol, and only there:

- ``set_table`` uploads the table's rows. The host fills a table before registering it and
  afterwards changes it only through staging and ``scatter`` (or registers it again).
- ``pull_batch`` downloads the batch's staging slots (``0 .. len(cold_keys) - 1`` of its
  bank, whole strides) once its gather is done.
- ``scatter`` uploads the bank's slots ``0 .. len(cold_keys) - 1`` (the host's trained rows),
  and once the scatter is done downloads the scattered table rows.

Anything else the host writes stays on the host, and the device's other bytes are never copied
back. Spans are widened to 8-byte words (the ``MEM_*`` unit). Every byte is sent, zeros too: a
board's window keeps what an earlier session left there.
"""
import struct

import numpy as np
import serial

from hotline.contract.errors import HotlineError
from hotline.contract.keys import split_keys
from hotline.contract.link import INFO, INFO_FIELDS, LINK_BAUD

from .device import register_backend
from .link import LinkError
from .link_device import LinkDevice

READ_WAIT = 0.05  # s a port read blocks with nothing arriving (the request loop's poll)
PORT_ERRORS = (serial.SerialException, OSError)
CHECKED = (("CAM_ENTRIES", "cam_entries"), ("COLD_MAX_KEYS", "cold_max_keys"),
           ("MAX_BATCH_SAMPLES", "max_batch_samples"), ("LANES", "lanes"))


def _words(lo, hi):
    return lo // 8 * 8, -(-hi // 8) * 8


class SerialDevice(LinkDevice):
    """The accelerator behind a pyserial port (see the module docstring)."""

    backend = "serial"

    def __init__(self, url, config=None, memory=None, baud=LINK_BAUD, timeout=10.0, retries=3):
        super().__init__(url, config, memory, timeout, retries)
        port = url.partition("://")[2]
        if not port:
            raise HotlineError(f"{url}: no port (e.g. serial:///dev/ttyUSB1 or "
                               f"serial://socket://HOST:PORT)")
        if memory is None:
            raise HotlineError(f"{url}: the device mirrors a HostMemory (memory=...)")
        try:
            self.port = serial.serial_for_url(port, baudrate=baud, timeout=READ_WAIT)
        except (ValueError, *PORT_ERRORS) as e:
            raise LinkError(f"{url}: cannot open {port} ({e})") from None
        try:
            self._handshake()
        except BaseException:
            self.port.close()
            raise

    def _handshake(self):
        # Bytes of an earlier session still on their way are skipped by the reader (OPEN's
        # answer carries this session's nonce); those already in the port's buffer go now.
        self.port.reset_input_buffer()
        self._open_session()
        _, payload = self.request("INFO")
        if len(payload) < INFO.size:
            raise LinkError(f"{self.url}: INFO answered {len(payload)} bytes, not {INFO.size}")
        self.link_info = dict(zip(INFO_FIELDS, INFO.unpack_from(payload)))
        window, max_request = self.link_info["window_bytes"], self.link_info["max_request"]
        if max_request < 16:
            raise LinkError(f"{self.url}: the device takes requests of {max_request} bytes at "
                            f"most; the link needs 16")
        self.max_request = max_request
        if self.memory.size > window:
            raise HotlineError(f"{self.url}: host memory of {self.memory.size:,} bytes does not "
                               f"fit the device's {window:,}-byte memory window")
        self._start()
        wrong = [f"{reg} is {got}, config.{attr} {getattr(self.config, attr)}"
                 for reg, attr in CHECKED
                 if (got := self.regs.read(reg)) != getattr(self.config, attr)]
        if wrong:
            raise HotlineError(f"{self.url}: the device was built for another configuration: "
                               f"{'; '.join(wrong)}")
        self.data_width, self.addr_width = self.regs.read("DATA_WIDTH"), self.regs.read("ADDR_WIDTH")

    def info(self) -> dict:
        return {**super().info(), **self.link_info}

    # -- transport ------------------------------------------------------------------------
    def _send(self, data):
        try:
            self.port.write(data)
        except PORT_ERRORS as e:
            raise LinkError(f"{self.url}: the link failed ({e})") from None

    def _recv(self, n):
        try:
            return self.port.read(n)
        except PORT_ERRORS as e:
            raise LinkError(f"{self.url}: the link failed ({e})") from None

    def _close(self):
        self.port.close()

    # -- memory mirroring -----------------------------------------------------------------
    def _upload(self, addr, n):
        """Host memory [addr, addr + n) to the device window (``MEM_WRITE`` chunks)."""
        lo, hi = _words(addr, addr + n)
        step = (self.max_request - 8) // 8 * 8
        for at in range(lo, hi, step):
            end = min(at + step, hi)
            self.request("MEM_WRITE", struct.pack("<II", at, 0)
                         + self.memory.array[at:end].tobytes())

    def _download(self, addr, n):
        """The device window [addr, addr + n) into host memory (``MEM_READ`` chunks)."""
        lo, hi = _words(addr, addr + n)
        step = self.max_request // 8 * 8
        for at in range(lo, hi, step):
            end = min(at + step, hi)
            _, data = self.request("MEM_READ", struct.pack("<II", at, end - at))
            if len(data) != end - at:
                raise LinkError(f"{self.url}: MEM_READ of {end - at} bytes at {at:#x} answered "
                                f"{len(data)}")
            self.memory.array[at:end] = np.frombuffer(data, np.uint8)

    def _row_spans(self, keys):
        """Merged [lo, hi) byte ranges of the rows of ``keys`` in registered tables (the
        device refuses the others)."""
        spans = []
        for t, r in zip(*(a.tolist() for a in split_keys(np.unique(keys)))):
            d = self.tables.get(t)
            if d is not None and r < d.rows:
                spans.append((d.window.base + r * d.row_bytes, d.row_bytes))
        merged = []
        for lo, n in sorted(spans):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], lo + n)
            else:
                merged.append([lo, lo + n])
        return merged

    def _write_table(self, table, d):
        self._upload(d.window.base, d.rows * d.row_bytes)
        super()._write_table(table, d)

    def _pull(self, p):
        r = super()._pull(p)
        if self.staging is not None and len(r.cold_keys):
            n = min(len(r.cold_keys), self.staging.slots)
            self._download(self.staging.address(r.bank, 0), n * self.staging.stride)
        return r

    def _scatter(self, bank, cold_keys):
        n = min(len(cold_keys), self.staging.slots)
        self._upload(self.staging.address(bank, 0), n * self.staging.stride)
        done = super()._scatter(bank, cold_keys)
        for lo, hi in self._row_spans(cold_keys):
            self._download(lo, hi - lo)
        return done


register_backend("serial", SerialDevice)
