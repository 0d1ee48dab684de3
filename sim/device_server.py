"""The simulated device: the HotlineAccelerator RTL under cocotb, served over the host link.

``python -m hotline.sim.device_server SPEC.json`` builds the top for the spec's configuration
and runs this module's cocotb test, which serves `hotline.contract.link` frames: CSR accesses go
through ``AxiLiteMaster`` on ``axil``, lookup batches and scatter keys into the ``lookups`` /
``scatter_keys`` streams (in order, one feeder each), and every output stream is collected
continuously and handed out on ``RESULTS``. The AXI4 master reads and writes the memory file
(``AxiRam`` over an mmap of it), which is also the window of ``INFO``, ``MEM_WRITE`` and
``MEM_READ``.

By default the server connects to the host's loopback port ``spec["port"]``, and the memory is
the host's own `HostMemory` file (`hotline.host.sim_device.SimDevice`). With ``"listen": true`` it
listens on ``spec["port"]`` (0: any; the port is written to the file ``spec["ready"]``) and
serves one connection after another until a ``QUIT``, as a board serves its UART: a
`hotline.host.serial_device.SerialDevice` reaches it at ``serial://socket://127.0.0.1:PORT`` and
mirrors its host memory into the server's separate file (`serve_in_background`). Optional
spec entries: ``max_request`` (bytes, default `MAX_PAYLOAD`; larger requests are an
``ERROR``) and ``input_beats`` (a stream request that would queue more beats than this is
answered ``BUSY``, as a board's full input buffer is; unbounded by default).
"""
import contextlib
import json
import os
import select
import socket
import struct
import sys
import time
from collections import deque
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles

from hotline.contract.config import AcceleratorConfig
from hotline.contract.link import INFO, MAX_PAYLOAD, encode, pack_results, unpack_beats
from hotline.contract.streams import RESULT_STREAMS
from hotline.host.link import FrameError, FrameReader, LinkError
from hotline.host.sim_device import kill_server, spawn_server
from hotline.hw.accelerator import HotlineAccelerator

from .runner import run_cocotb
from .tb_accelerator import TB

POLL_CYCLES = 8
MAX_WINDOW = (1 << 32) - 1   # INFO's window_bytes and the MEM_* addresses are u32


class Feeder:
    """Sends queued beat lists into one stream source, in order; ``queued``: beats not sent."""

    def __init__(self, source):
        self.source, self.queue, self.busy, self.queued = source, deque(), False, 0
        self.sending = 0   # beats of the list being sent

    def push(self, beats):
        self.queue.append(beats)
        self.queued += len(beats)
        if not self.busy:
            self.busy = True
            cocotb.start_soon(self._run())

    def drop(self):
        """Forget the queued beats and end the list being sent (a new session)."""
        self.queue.clear()
        self.queued = self.sending
        self.source.abort()

    async def _run(self):
        while self.queue:
            beats = self.queue.popleft()
            self.sending = len(beats)
            await self.source.send(beats)
            self.queued -= len(beats)
            self.sending = 0
        self.busy = False


class Server:
    """Answers host-link requests on the testbench; feeders and result cursors outlive a
    connection (the RTL does) until an ``OPEN``, the response cache does not."""

    def __init__(self, tb, spec):
        self.tb = tb
        self.max_request = spec.get("max_request", MAX_PAYLOAD)
        self.input_beats = spec.get("input_beats")
        streams = {"LOOKUPS": "lookups", "SCATTER_KEYS": "scatter_keys", "CAM_CMDS": "cam_cmds"}
        self.feeders = {kind: Feeder(getattr(tb, name)) for kind, name in streams.items()}
        self.widths = {kind: len(getattr(tb.dut, f"{name}__payload"))
                       for kind, name in streams.items()}
        self.taken = dict.fromkeys(RESULT_STREAMS, 0)

    def open_session(self, payload):
        """``OPEN``: drop the input beats not yet taken and the result beats not yet handed
        out, as a board's bridge drops its ring and result buffers; echo the nonce."""
        if len(payload) != 4:
            return "ERROR", f"OPEN payload of {len(payload)} bytes (4: the nonce)".encode()
        for feeder in self.feeders.values():
            feeder.drop()
        for name in RESULT_STREAMS:
            self.taken[name] = len(self.tb.sinks[name].got)
        return "DATA", payload

    async def handle(self, kind, payload):
        """The response (kind, payload) to one request."""
        tb = self.tb
        if len(payload) > self.max_request:
            return "ERROR", f"{kind} request of {len(payload)} bytes exceeds max_request " \
                            f"{self.max_request}".encode()
        if kind == "WRITE32":
            addr, value = int.from_bytes(payload[:4], "little"), int.from_bytes(payload[4:8], "little")
            await tb.csr.write_dword(addr, value)
            return "ACK", b""
        if kind == "READ32":
            value = await tb.csr.read_dword(int.from_bytes(payload[:4], "little"))
            return "DATA", int(value).to_bytes(4, "little")
        if kind in self.feeders:
            feeder = self.feeders[kind]
            try:
                beats = unpack_beats(payload, self.widths[kind])
            except ValueError as e:
                return "ERROR", f"{kind}: {e}".encode()
            if self.input_beats is not None and feeder.queued + len(beats) > self.input_beats:
                if len(beats) > self.input_beats:
                    return "ERROR", f"{kind}: {len(beats)} beats exceed the {self.input_beats}" \
                                    f"-beat input buffer".encode()
                return "BUSY", b""
            feeder.push(beats)
            return "ACK", b""
        if kind == "RESULTS":
            out = []
            for name in RESULT_STREAMS:
                got = tb.sinks[name].got
                out.append(got[self.taken[name]:])
                self.taken[name] = len(got)
            return "DATA", pack_results(out, [len(getattr(tb.dut, f"{name}__payload"))
                                              for name in RESULT_STREAMS])
        if kind == "INFO":
            if len(tb.mem) > MAX_WINDOW:
                return "ERROR", f"INFO: a memory window of {len(tb.mem):,} bytes does not fit " \
                                f"its 32-bit window_bytes".encode()
            return "DATA", INFO.pack(len(tb.mem), self.max_request, 0, 0)
        if kind in ("MEM_WRITE", "MEM_READ"):
            return self._memory(kind, payload)
        return "ERROR", f"unexpected {kind} frame".encode()

    def _memory(self, kind, payload):
        if len(payload) < 8:
            return "ERROR", f"{kind} payload of {len(payload)} bytes (at least 8)".encode()
        addr, length = struct.unpack_from("<II", payload)
        if kind == "MEM_WRITE":
            length = len(payload) - 8
        span = f"{kind} [{addr:#x}, {addr + length:#x})"
        if addr % 8 or length % 8:
            return "ERROR", f"{span}: address and length must be multiples of 8".encode()
        if addr + length > len(self.tb.mem):
            return "ERROR", f"{span} is outside the {len(self.tb.mem):#x}-byte memory " \
                            f"window".encode()
        if kind == "MEM_WRITE":
            self.tb.mem[addr:addr + length] = payload[8:]
            return "ACK", b""
        if length > self.max_request:
            return "ERROR", f"{span}: more than max_request {self.max_request} bytes".encode()
        return "DATA", bytes(self.tb.mem[addr:addr + length])

    async def session(self, sock):
        """Serve one connection; True if it ended with QUIT, False when the host went away."""
        dut = self.tb.dut
        sock.setblocking(False)
        reader = FrameReader()
        last_seq, last_response = None, None
        idle = 0

        def send(data):
            sock.setblocking(True)
            sock.sendall(data)
            sock.setblocking(False)

        try:
            while True:
                wait = 0.01 if idle > 1000 else 0
                readable, _, _ = select.select([sock], [], [], wait)
                if readable:
                    data = sock.recv(1 << 20)
                    if not data:
                        return False
                    reader.feed(data)
                    idle = 0
                else:
                    idle += 1
                while True:
                    try:
                        frame = reader.next()
                    except FrameError as e:
                        send(encode("NAK", 0, str(e).encode()))
                        continue
                    if frame is None:
                        break
                    kind, seq, payload = frame
                    if kind == "QUIT":
                        send(encode("ACK", seq))
                        return True
                    if kind == "OPEN":   # never from the cache, and it empties it
                        rkind, rpayload = self.open_session(payload)
                        last_seq = None
                        send(encode(rkind, seq, rpayload))
                        continue
                    if seq != last_seq:
                        rkind, rpayload = await self.handle(kind, payload)
                        last_seq, last_response = seq, encode(rkind, seq, rpayload)
                    send(last_response)
                await ClockCycles(dut.clk, POLL_CYCLES)
        except OSError:
            return False  # the connection broke: as good as closed
        finally:
            sock.close()


@cocotb.test()
async def serve(dut):
    spec = json.loads(os.environ["HOTLINE_DEVICE_SPEC"])
    tb = TB(dut, {"memory": spec["memory"]})
    await tb.reset()
    server = Server(tb, spec)
    if not spec.get("listen"):
        await server.session(socket.create_connection(("127.0.0.1", spec["port"])))
        return
    listener = socket.create_server(("127.0.0.1", spec["port"]))
    listener.setblocking(False)
    ready = Path(spec["ready"])
    tmp = ready.with_name(ready.name + ".tmp")
    tmp.write_text(str(listener.getsockname()[1]))
    tmp.replace(ready)  # atomic: the host never reads half a port number
    try:
        while True:
            readable, _, _ = select.select([listener], [], [], 0.01)
            if not readable:
                await ClockCycles(dut.clk, POLL_CYCLES)
            elif await server.session(listener.accept()[0]):
                return
    finally:
        listener.close()


@contextlib.contextmanager
def serve_in_background(config, memory_path, window_bytes, build_dir, simulator="verilator",
                        data_width=64, start_timeout=900.0, addr_width=32, **options):
    """Run a listen-mode server for ``config`` (a top with ``data_width`` / ``addr_width``
    bus) whose memory window is a new zeroed file of ``window_bytes`` at ``memory_path``;
    yields its url (``serial://socket://127.0.0.1:PORT``) and ends the server on exit.
    ``options`` go into the spec (``max_request``, ``input_beats``)."""
    if not 0 < window_bytes <= MAX_WINDOW:
        raise ValueError(f"window_bytes {window_bytes:,}: the link's INFO and MEM_* frames "
                         f"carry 32-bit sizes and addresses (1 .. {MAX_WINDOW:,})")
    memory_path = Path(memory_path)
    with open(memory_path, "wb") as f:
        f.truncate(window_bytes)
    ready = memory_path.with_name(memory_path.name + ".port")
    ready.unlink(missing_ok=True)
    spec = {"listen": True, "port": 0, "ready": str(ready.resolve()),
            "memory": str(memory_path.resolve()), **options}
    proc, log, log_path = spawn_server(spec, build_dir, config, simulator, data_width,
                                       addr_width)
    try:
        deadline = time.monotonic() + start_timeout
        while not ready.exists():
            if proc.poll() is not None:
                raise LinkError(f"the device server exited with status {proc.returncode}; see "
                                f"{log_path}")
            if time.monotonic() > deadline:
                raise LinkError(f"the device server did not listen within {start_timeout:.0f} s;"
                                f" see {log_path}")
            time.sleep(0.2)
        yield f"serial://socket://127.0.0.1:{int(ready.read_text())}"
    finally:
        kill_server(proc)
        log.close()


def main(argv=None):
    """Build and run the served top: ``SPEC.json`` has port, memory, config, data_width,
    simulator, build_dir and the optional entries of the module docstring."""
    path = (argv or sys.argv[1:])[0]
    with open(path) as f:
        spec = json.load(f)
    config = AcceleratorConfig(**spec["config"])
    dut = HotlineAccelerator.from_config(config, spec["data_width"], spec.get("addr_width", 32))
    run_cocotb(dut, "hotline_accelerator", "hotline.sim.device_server", spec["build_dir"],
               spec["simulator"], extra_env={"HOTLINE_DEVICE_SPEC": json.dumps(spec)})


if __name__ == "__main__":
    main()
