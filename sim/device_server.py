"""The simulated device: the HotlineAccelerator RTL under cocotb, served over the host link.

``python -m hotline.sim.device_server SPEC.json`` builds the top for the spec's configuration
and runs this module's cocotb test, which connects to the host's loopback TCP port and serves
`hotline.link` frames: CSR accesses go through ``AxiLiteMaster`` on ``axil``, lookup batches
and scatter keys into the ``lookups`` / ``scatter_keys`` streams (in order, one feeder each),
and every output stream is collected continuously and handed out on ``RESULTS``. The AXI4
master reads and writes the host's memory file (``AxiRam`` over an mmap of it), so the RTL
gathers from and scatters to the very tables the trainer uses. `hotline.sim_device.SimDevice`
is the host side.
"""
import json
import os
import select
import socket
import sys
from collections import deque

import cocotb
from cocotb.triggers import ClockCycles

from hotline.link import FrameError, FrameReader, encode, pack_results, unpack_u64

from .tb_accelerator import OUTPUTS, TB

POLL_CYCLES = 8


class Feeder:
    """Sends queued beat lists into one stream source, in order."""

    def __init__(self, source):
        self.source, self.queue, self.busy = source, deque(), False

    def push(self, beats):
        self.queue.append(beats)
        if not self.busy:
            self.busy = True
            cocotb.start_soon(self._run())

    async def _run(self):
        while self.queue:
            await self.source.send(self.queue.popleft())
        self.busy = False


@cocotb.test()
async def serve(dut):
    spec = json.loads(os.environ["HOTLINE_DEVICE_SPEC"])
    tb = TB(dut, {"memory": spec["memory"]})
    await tb.reset()
    sock = socket.create_connection(("127.0.0.1", spec["port"]))
    sock.setblocking(False)
    reader = FrameReader()
    feeders = {"LOOKUPS": Feeder(tb.lookups), "SCATTER_KEYS": Feeder(tb.scatter_keys)}
    taken = dict.fromkeys(OUTPUTS, 0)
    last_seq, last_response = None, None
    idle = 0

    async def handle(kind, payload):
        if kind == "WRITE32":
            addr, value = int.from_bytes(payload[:4], "little"), int.from_bytes(payload[4:8], "little")
            await tb.csr.write_dword(addr, value)
            return "ACK", b""
        if kind == "READ32":
            value = await tb.csr.read_dword(int.from_bytes(payload[:4], "little"))
            return "DATA", int(value).to_bytes(4, "little")
        if kind in feeders:
            feeders[kind].push([int(v) for v in unpack_u64(payload)])
            return "ACK", b""
        if kind == "RESULTS":
            out = []
            for name in OUTPUTS:
                got = tb.sinks[name].got
                out.append(got[taken[name]:])
                taken[name] = len(got)
            return "DATA", pack_results(out)
        return "ERROR", f"unexpected {kind} frame".encode()

    while True:
        wait = 0.01 if idle > 1000 else 0
        readable, _, _ = select.select([sock], [], [], wait)
        if readable:
            data = sock.recv(1 << 20)
            if not data:
                break  # the host closed the link
            reader.feed(data)
            idle = 0
        else:
            idle += 1
        while True:
            try:
                frame = reader.next()
            except FrameError as e:
                sock.setblocking(True)
                sock.sendall(encode("NAK", 0, str(e).encode()))
                sock.setblocking(False)
                continue
            if frame is None:
                break
            kind, seq, payload = frame
            if kind == "QUIT":
                sock.setblocking(True)
                sock.sendall(encode("ACK", seq))
                sock.close()
                return
            if seq != last_seq:
                rkind, rpayload = await handle(kind, payload)
                last_seq, last_response = seq, encode(rkind, seq, rpayload)
            sock.setblocking(True)
            sock.sendall(last_response)
            sock.setblocking(False)
        await ClockCycles(dut.clk, POLL_CYCLES)


def main(argv=None):
    """Build and run the served top: ``SPEC.json`` has port, memory, config, data_width,
    simulator, build_dir."""
    from hotline.device_model import AcceleratorConfig

    from .accelerator_run import accelerator
    from .runner import run_cocotb

    path = (argv or sys.argv[1:])[0]
    with open(path) as f:
        spec = json.load(f)
    config = AcceleratorConfig(**spec["config"])
    dut = accelerator(config, spec["data_width"], spec.get("addr_width", 32))
    run_cocotb(dut, "hotline_accelerator", "hotline.sim.device_server", spec["build_dir"],
               spec["simulator"], extra_env={"HOTLINE_DEVICE_SPEC": json.dumps(spec)})


if __name__ == "__main__":
    main()
