"""``sim://verilator`` and ``sim://icarus``: the Device API over the RTL in co-simulation.

The device is a separate process (`hotline.sim.device_server`: the HotlineAccelerator top
under cocotb) that connects back to a loopback TCP port this side listens on and speaks the
framed host link (`hotline.contract.link`, driven by `hotline.host.link_device.LinkDevice`). Host memory is
the `HostMemory` file, which the simulated AXI4 master maps: the RTL gathers from and scatters
to the trainer's own tables. A timeout, a dead simulator or a link that stays corrupt raises
`LinkError`, and `close` always ends the process.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from hotline.contract.errors import HotlineError
from hotline.contract.link import encode

from .device import register_backend
from .host_memory import address_bits
from .link import LinkError
from .link_device import LinkDevice
from .simulators import SIMULATORS, simulator_available


def start_server(module, spec, build) -> tuple:
    """Run ``python -m module BUILD/spec.json`` (``spec`` written there) in its own process
    group, so `kill_server` also ends the simulator it starts; its output goes to
    ``BUILD/server.log``. Returns (process, open log file, log path)."""
    build.mkdir(parents=True, exist_ok=True)
    (build / "spec.json").write_text(json.dumps(spec))
    log_path = build / "server.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", module, str(build / "spec.json")],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ),
                            start_new_session=True)
    return proc, log, log_path


def spawn_server(spec, build_dir, config, simulator, data_width, addr_width=32) -> tuple:
    """Start `hotline.sim.device_server` on ``spec`` (plus the build's config, simulator, bus
    widths and directory, one per build) with `start_server`. Returns (process, open log
    file, log path)."""
    tag = "_".join(str(v) for v in config.as_dict().values())
    build = Path(build_dir) / f"{simulator}_{data_width}_a{addr_width}_{tag}"
    spec = {**spec, "config": config.as_dict(), "data_width": data_width,
            "addr_width": addr_width, "simulator": simulator, "build_dir": str(build.resolve())}
    return start_server("hotline.sim.device_server", spec, build)


def kill_server(proc) -> None:
    """End a server's process group at once (the runner and the simulator it started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class SimDevice(LinkDevice):
    """The accelerator RTL in a co-simulation process (see the module docstring).

    Options: ``data_width`` (64), ``addr_width`` (the AXI4 master's address bits, 32..64;
    default: what ``memory`` needs, at least 32), ``build_dir`` (one build per configuration
    and bus widths under it, reused), ``start_timeout`` (s, includes the RTL build),
    ``timeout`` (s per request), ``retries`` (resends of a frame answered NAK or lost).
    """

    backend = "sim"

    def __init__(self, url, config=None, memory=None, data_width=64, addr_width=None,
                 build_dir="build/simdev", start_timeout=900.0, timeout=120.0, retries=3):
        super().__init__(url, config, memory, timeout, retries)
        simulator = url.partition("://")[2] or "verilator"
        if simulator not in SIMULATORS:
            raise HotlineError(f"{url}: unknown simulator {simulator!r} (use "
                               f"{' or '.join('sim://' + s for s in SIMULATORS)})")
        if memory is None:
            raise HotlineError(f"{url}: the simulated device needs a HostMemory (memory=...)")
        self.data_width = int(data_width)
        try:
            self.addr_width = int(address_bits(memory.size) if addr_width is None else addr_width)
        except (TypeError, ValueError):
            self.addr_width = None
        if self.addr_width is None or not 32 <= self.addr_width <= 64:
            raise HotlineError(f"{url}: addr_width must be an integer 32..64, not "
                               f"{addr_width!r}")
        if memory.size > 1 << self.addr_width:
            raise HotlineError(f"{url}: host memory of {memory.size:,} bytes exceeds the "
                               f"{self.addr_width}-bit AXI address space (addr_width)")
        if not simulator_available(simulator):
            raise HotlineError(f"{url}: {simulator} is not available here")
        self.proc = None
        self.log = None
        self.sock = None
        listener = socket.create_server(("127.0.0.1", 0))
        try:
            spec = {"port": listener.getsockname()[1], "memory": str(memory.path)}
            self.proc, self.log, self.log_path = spawn_server(spec, build_dir, self.config,
                                                              simulator, self.data_width,
                                                              self.addr_width)
            listener.settimeout(1.0)
            deadline = time.monotonic() + start_timeout
            while True:
                try:
                    self.sock, _ = listener.accept()
                    break
                except socket.timeout:
                    self._check_alive()
                    if time.monotonic() > deadline:
                        raise LinkError(f"{url}: the simulator did not connect within "
                                        f"{start_timeout:.0f} s; see {self.log_path}")
            self.sock.settimeout(0.5)
            self._open_session()
            self._start()
        except BaseException:
            self._close()
            raise
        finally:
            listener.close()

    # -- transport ------------------------------------------------------------------------
    def _check_alive(self):
        if self.proc is not None and self.proc.poll() is not None:
            raise LinkError(f"{self.url}: the simulator exited with status {self.proc.returncode}"
                            f"; see {self.log_path}")

    def kill(self) -> None:
        """End the simulator process group at once (the runner and the simulator it started)."""
        kill_server(self.proc)

    def _send(self, data):
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise LinkError(f"{self.url}: the link to the simulator failed ({e})") from None

    def _recv(self, n):
        try:
            data = self.sock.recv(n)
        except socket.timeout:
            return b""
        except OSError as e:
            raise LinkError(f"{self.url}: the link to the simulator failed ({e})") from None
        if not data:
            self._check_alive()
            raise LinkError(f"{self.url}: the simulator closed the link")
        return data

    def _close(self):
        try:
            if self.sock is not None:
                try:
                    self.sock.sendall(encode("QUIT", (self.seq + 1) & 0xFFFF))
                except OSError:
                    pass
                self.sock.close()
        finally:
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.kill()
            if self.log is not None:
                self.log.close()


register_backend("sim", SimDevice)
