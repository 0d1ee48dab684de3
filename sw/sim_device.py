"""``sim://verilator`` and ``sim://icarus``: the Device API over the RTL in co-simulation.

The device is a separate process (`hotline.sim.device_server`: the HotlineAccelerator top
under cocotb) that connects back to a loopback TCP port this side listens on and speaks the
framed host link (`hotline.link`). Host memory is the `HostMemory` file, which the simulated
AXI4 master maps: the RTL gathers from and scatters to the trainer's own tables. Every
operation is register writes and stream beats, as a driver for a board does; a timeout, a dead
simulator or a link that stays corrupt raises `LinkError`, and `close` always ends the process.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .device import BatchResult, Device, register_backend
from .device_model import HotPlacement
from .errors import HotlineError
from .link import FrameError, FrameReader, LinkError, encode, pack_u64, unpack_results
from .registers import ID_VALUE, RegisterFile, decode

SIMULATORS = ("verilator", "icarus")
RESULT_STREAMS = ("remap", "popular", "non_popular", "batch_keys", "dma_done")


class SimDevice(Device):
    """The accelerator RTL in a co-simulation process (see the module docstring).

    Options: ``data_width`` (64), ``build_dir``, ``start_timeout`` (s, includes the RTL build),
    ``timeout`` (s per request), ``retries`` (resends of a frame answered NAK or lost).
    """

    backend = "sim"

    def __init__(self, url, config=None, memory=None, data_width=64, build_dir="build/simdev",
                 start_timeout=900.0, timeout=120.0, retries=3):
        super().__init__(url, config, memory)
        simulator = url.partition("://")[2] or "verilator"
        if simulator not in SIMULATORS:
            raise HotlineError(f"{url}: unknown simulator {simulator!r} (use "
                               f"{' or '.join('sim://' + s for s in SIMULATORS)})")
        if memory is None:
            raise HotlineError(f"{url}: the simulated device needs a HostMemory (memory=...)")
        from hotline.sim.accelerator_run import stream_layouts
        from hotline.sim.runner import simulator_available
        if not simulator_available(simulator):
            raise HotlineError(f"{url}: {simulator} is not available here")
        self.data_width, self.addr_width = int(data_width), 32
        if memory.size > 1 << 32:
            raise HotlineError(f"{url}: host memory of {memory.size:,} bytes exceeds the 32-bit "
                               f"AXI address space")
        self.layouts = stream_layouts(self.config, self.data_width)
        self.timeout, self.retries = timeout, retries
        self.seq = 0
        self.reader = FrameReader()
        self.pending = {n: [] for n in RESULT_STREAMS}
        self.proc = None
        self.log = None
        listener = socket.create_server(("127.0.0.1", 0))
        try:
            port = listener.getsockname()[1]
            tag = "_".join(str(v) for v in self.config.as_dict().values())
            build = Path(build_dir) / f"{simulator}_{self.data_width}_{tag}"
            build.mkdir(parents=True, exist_ok=True)
            spec = {"port": port, "memory": str(memory.path), "config": self.config.as_dict(),
                    "data_width": self.data_width, "simulator": simulator,
                    "build_dir": str(build.resolve())}
            (build / "spec.json").write_text(json.dumps(spec))
            self.log = open(build / "server.log", "w")
            self.log_path = build / "server.log"
            self.proc = subprocess.Popen([sys.executable, "-m", "hotline.sim.device_server",
                                          str(build / "spec.json")], stdout=self.log,
                                         stderr=subprocess.STDOUT, env=dict(os.environ),
                                         start_new_session=True)  # one group: sim included
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
        except BaseException:
            self._close()
            raise
        finally:
            listener.close()
        self.sock.settimeout(0.5)
        self.regs = RegisterFile(self._read32, self._write32)
        if self.regs.read("ID") != ID_VALUE:
            self._close()
            raise LinkError(f"{url}: the device answered ID {self.regs.read('ID'):#x}, not "
                            f"{ID_VALUE:#x}")
        self.regs.write("CONTROL", clear_counters=1)

    # -- link -----------------------------------------------------------------------------
    def _check_alive(self):
        if self.proc is not None and self.proc.poll() is not None:
            raise LinkError(f"{self.url}: the simulator exited with status {self.proc.returncode}"
                            f"; see {self.log_path}")

    def kill(self):
        """End the simulator process group at once (the runner and the simulator it started)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def request(self, kind, payload=b""):
        """Send one request; its response (kind, payload). Resends on NAK or silence."""
        self.seq = (self.seq + 1) & 0xFFFF
        frame = encode(kind, self.seq, payload)
        for attempt in range(self.retries + 1):
            try:
                self.sock.sendall(frame)
            except OSError as e:
                raise LinkError(f"{self.url}: the link to the simulator failed ({e})") from None
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                try:
                    resp = self.reader.next()
                except FrameError:
                    break  # corrupt response: resend (the device answers from its cache)
                if resp is None:
                    try:
                        data = self.sock.recv(1 << 20)
                    except socket.timeout:
                        self._check_alive()
                        continue
                    except OSError as e:
                        raise LinkError(f"{self.url}: the link to the simulator failed ({e})") \
                            from None
                    if not data:
                        self._check_alive()
                        raise LinkError(f"{self.url}: the simulator closed the link")
                    self.reader.feed(data)
                    continue
                rkind, rseq, rpayload = resp
                if rkind == "NAK":
                    break
                if rseq != self.seq:
                    continue  # a stale duplicate
                if rkind == "ERROR":
                    raise LinkError(f"{self.url}: device error: {rpayload.decode(errors='replace')}")
                return rkind, rpayload
            else:
                self._check_alive()
                if attempt == self.retries:
                    raise LinkError(f"{self.url}: no answer to {kind} within {self.timeout:.0f} s")
        raise LinkError(f"{self.url}: {kind} frame still corrupt after {self.retries} resends")

    def _read32(self, addr):
        _, payload = self.request("READ32", int(addr).to_bytes(4, "little"))
        return int.from_bytes(payload[:4], "little")

    def _write32(self, addr, value):
        self.request("WRITE32", int(addr).to_bytes(4, "little")
                     + (int(value) & 0xFFFFFFFF).to_bytes(4, "little"))

    def _fetch(self):
        _, payload = self.request("RESULTS")
        for name, beats in zip(RESULT_STREAMS, unpack_results(payload, len(RESULT_STREAMS))):
            self.pending[name].extend(beats)

    def _take(self, name, n):
        beats, self.pending[name] = self.pending[name][:n], self.pending[name][n:]
        return beats

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
        r.write("CONFIG", gather_enable=1)

    def _load_hot_set(self, keys):
        r = self.regs
        r.write("CAM_CMD", op="clear")
        self._response()
        slot_of, at, responses = {}, {}, []
        for key in keys.tolist():
            r.write("CAM_KEY", key)
            r.write("CAM_CMD", op="insert")
            resp = self._response()
            moves = []
            for _ in range(resp["moves"]):
                mv = decode("CAM_MOVE", r.read("CAM_MOVE"))
                moves.append((mv["src"], mv["dst"]))
                moved = at.pop(mv["src"])
                slot_of[moved], at[mv["dst"]] = mv["dst"], moved
            if resp["status"] == 0:  # OK
                slot_of[key], at[resp["slot"]] = resp["slot"], key
            responses.append((resp["status"], resp["slot"], moves))
        held = np.array([k for k in keys.tolist() if k in slot_of], np.uint32)
        failed = np.array([k for k in keys.tolist() if k not in slot_of], np.uint32)
        return HotPlacement(held, np.array([slot_of[k] for k in held.tolist()], np.int64),
                            failed, responses)

    def _response(self):
        for _ in range(1000):
            resp = decode("CAM_RESP", self.regs.read("CAM_RESP"))
            if resp["valid"]:
                return resp
        raise LinkError(f"{self.url}: the CAM gave no response to a command")

    def _push(self, batch_id, keys, offsets):
        from hotline.sim.fragmenter_run import lookup_beats, pack
        n = len(offsets) - 1
        key, eos, eob, empty = lookup_beats(keys, offsets, n)
        beats = pack(self.layouts["lookups"], key=key, eos=eos, eob=eob, empty=empty)
        self.request("LOOKUPS", pack_u64(beats))
        bank = batch_id % self.staging.banks if self.staging is not None else 0
        return {"batch_id": batch_id, "bank": bank, "samples": n, "lookups": len(keys)}

    def _pull(self, p):
        from hotline.sim.fragmenter_run import unpack
        gather = self.staging is not None
        deadline = time.monotonic() + self.timeout
        while True:
            ends = [i for i, v in enumerate(self.pending["batch_keys"]) if v & 1]
            done = [v for v in self.pending["dma_done"] if not self._is_scatter(v)]
            if (len(self.pending["remap"]) >= p["lookups"] and ends
                    and len(self.pending["popular"]) + len(self.pending["non_popular"]) >= p["samples"]
                    and (done or not gather)):
                break
            if time.monotonic() > deadline:
                raise LinkError(f"{self.url}: batch {p['batch_id']} incomplete after "
                                f"{self.timeout:.0f} s")
            self._fetch()
        bk = unpack(self.layouts["batch_keys"], self._take("batch_keys", ends[0] + 1))
        summary = {k: int(v[-1]) for k, v in bk.items()}
        remap = unpack(self.layouts["remap"], self._take("remap", p["lookups"]))
        pop = unpack(self.layouts["popular"], self._take("popular", summary["popular"]))["sample"]
        non = unpack(self.layouts["non_popular"],
                     self._take("non_popular", summary["non_popular"]))["sample"]
        g = {"rows": 0, "errors": 0}
        if gather:
            i = next(i for i, v in enumerate(self.pending["dma_done"]) if not self._is_scatter(v))
            v = self.pending["dma_done"].pop(i)
            d = unpack(self.layouts["dma_done"], [v])
            g = {"rows": int(d["rows"][0]), "errors": int(d["errors"][0])}
        return BatchResult(p["batch_id"], p["bank"], p["samples"], remap["hot"].astype(bool),
                           remap["slot"], pop, non, bk["key"][:-1].astype(np.uint32),
                           bool(summary["overflow"]), g)

    def _is_scatter(self, v):
        from hotline.sim.fragmenter_run import unpack
        return bool(unpack(self.layouts["dma_done"], [v])["scatter"][0])

    def _scatter(self, bank, cold_keys):
        from hotline.sim.fragmenter_run import pack
        self.regs.write("SCATTER_CMD", bank=bank)
        n = len(cold_keys)
        beats = pack(self.layouts["scatter_keys"], key=np.r_[cold_keys.astype(np.uint64), 0],
                     end=np.r_[np.zeros(n, np.uint64), 1])
        self.request("SCATTER_KEYS", pack_u64(beats))
        deadline = time.monotonic() + self.timeout
        while True:
            for i, v in enumerate(self.pending["dma_done"]):
                if self._is_scatter(v):
                    self.pending["dma_done"].pop(i)
                    from hotline.sim.fragmenter_run import unpack
                    d = unpack(self.layouts["dma_done"], [v])
                    return {"rows": int(d["rows"][0]), "errors": int(d["errors"][0])}
            if time.monotonic() > deadline:
                raise LinkError(f"{self.url}: scatter not done after {self.timeout:.0f} s")
            self._fetch()

    def _counters(self):
        names = ("lookups", "hits", "samples", "popular_samples", "cold_rows", "batches",
                 "overflows", "gather_rows", "scatter_rows", "dma_bytes_read",
                 "dma_bytes_written", "window_errors", "axi_errors")
        return {n: self.regs.read(n.upper()) for n in names}

    def _close(self):
        try:
            if getattr(self, "sock", None) is not None:
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
