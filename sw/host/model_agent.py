"""``model://?agent=process``: the bit-accurate model in a process of its own.

`ModelDevice` runs the models on a worker thread of the caller's process, so their Python time
competes with the caller's for the interpreter lock, as no accelerator does. Here the same
`ModelDevice` runs in a child Python process (``python -m hotline.host.model_agent FD``) over
the same `HostMemory` file, which both processes map: the DMA model reads and writes the very
pages the caller trains on.

Calls are pipelined over one socket, with no thread on the caller's side: a call is sent when
it is made (``push_batch`` returns once its keys are sent) and its reply is read when the
caller asks for it (``pull_batch``), so the caller's interpreter is never woken up by the
device. The child takes the calls in order and a sender thread of its own queues the replies,
so neither side blocks the other on a full socket. The caller pays the pickling of the keys and
results (tens of microseconds per batch) and, where the child is slower than the caller, the
wait for it.

Same results as ``model://`` bit for bit (the same code runs); `Device.time`'s busy seconds
are the child's own time in the calls. Starting the process costs about 0.3 s.
"""
import queue
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

from hotline.contract.errors import HotlineError

from .device import Device, ModelDevice
from .host_memory import HostMemory

__all__ = ["ProcessModelDevice"]

#: `Device`'s abstract backend calls, which the caller's side defines as waits on the child
REMOTE = ("_write_table", "_write_staging", "_load_hot_set", "_update_hot_set", "_learner_start",
          "_learner_stop", "_push", "_scatter", "_counters")
#: every call the child takes by name (`Device` submits the last three itself)
CALLS = REMOTE + ("_push_pull", "_nothing", "_close")
CLOSE_TIMEOUT = 10.0
SOCKET_BUFFER = 4 << 20


class _Reply:
    """The future of one call sent to the child (`Device._agent_submit`'s)."""

    def __init__(self, device, seq):
        self.device, self.seq = device, seq

    def done(self) -> bool:
        return self.device._receive(self.seq, block=False)

    def result(self):
        self.device._receive(self.seq, block=True)
        ok, value = self.device._replies.pop(self.seq)
        if not ok:
            raise value
        return value


def _remote(name):
    def call(self, *args):
        return self._agent_submit(call, *args).result()
    call.__name__ = name
    call.__doc__ = f"`ModelDevice.{name}`, run in the child process (waits for it)."
    return call


class ProcessModelDevice(Device):
    """`ModelDevice` (same options) in a child process; see the module docstring."""

    backend = "model"
    _write_table, _write_staging, _load_hot_set, _update_hot_set, _learner_start, \
        _learner_stop, _push, _scatter, _counters = (_remote(name) for name in REMOTE)

    def __init__(self, url, config=None, memory=None, **options):
        super().__init__(url, config, memory)
        self._conn = self._proc = None
        self._sent = self._got = 0
        self._replies = {}       # seq -> (ok, value) received and not yet taken
        ours, theirs = socket.socketpair()
        for s in (ours, theirs):     # a batch's keys or results in one write (the OS may cap it)
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                s.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "hotline.host.model_agent", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except OSError as e:
            ours.close()
            raise HotlineError(f"{url}: cannot start the model agent process ({e})") from None
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        memory_spec = None if memory is None else (str(memory.path), memory.size)
        try:
            geometry = self._agent_call(_remote("open"), url, self.config, memory_spec, options)
        except HotlineError:
            self._stop()
            raise
        for k, v in geometry.items():
            setattr(self, k, v)

    def _agent_submit(self, call, *args):
        """Send ``call(*args)`` to the child now; a future of its reply."""
        self._sent += 1
        self._io(self._conn.send, (call.__name__, args))
        return _Reply(self, self._sent)

    def _receive(self, seq, block) -> bool:
        """Read replies up to ``seq`` (all of them, or, not ``block``, those already here);
        whether ``seq``'s has come."""
        while self._got < seq and (block or self._io(self._conn.poll)):
            ok, value, seconds = self._io(self._conn.recv)
            self._got += 1
            self._replies[self._got] = (ok, value)
            self._busy += seconds
        return self._got >= seq

    def _io(self, op, *args):
        try:
            return op(*args)
        except (EOFError, OSError):
            status = self._proc.poll()
            how = "stopped answering" if status is None else f"exited with status {status}"
            raise HotlineError(f"{self.url}: the model agent process {how}") from None

    def info(self) -> dict:
        return {**super().info(), "max_burst_beats": self.max_burst_beats, "agent": "process"}

    def close(self) -> None:
        """`Device.close`; a child already gone was reported by the call that found it."""
        try:
            super().close()
        except HotlineError:
            if self._proc.poll() is None:
                raise
        finally:
            self._stop()

    def _stop(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.wait(CLOSE_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


class _Agent:
    """The child's side: one `ModelDevice`, which `serve` calls by name."""

    def __init__(self):
        self.dev = self.memory = None

    def open(self, url, config, memory_spec, options):
        if memory_spec is not None:
            path, size = memory_spec
            self.memory = HostMemory(size, path=path)   # not ours: closing leaves the file
        self.dev = ModelDevice(url, config=config, memory=self.memory, **options)
        return {k: getattr(self.dev, k) for k in ("num_tables", "addr_width", "data_width",
                                                  "max_burst_beats")}

    def _write_table(self, table, d):
        self.dev._write_table(table, d)
        self.dev.tables[table] = d
        self._populate(d.window)

    def _write_staging(self, d):
        self.dev._write_staging(d)
        self.dev.staging = d        # `ModelDevice._push` picks the bank by it
        self._populate(d.window)

    def _populate(self, window):
        """The DMA's windows mapped now, not a page fault per row at its first touch."""
        if self.memory is not None and window.end <= self.memory.size:
            self.memory.populate(window)

    def _close(self):
        if self.dev is not None:
            self.dev.close()
        if self.memory is not None:
            self.memory.close()

    def __getattr__(self, name):
        if name not in CALLS:
            raise AttributeError(f"model agent: no call {name!r}")
        return getattr(self.dev, name)


def serve(fd) -> None:
    """Take calls from the socket ``fd`` in order until ``_close`` or the caller goes away;
    a thread sends the replies (ok, value or error, seconds)."""
    conn, agent, replies = Connection(fd), _Agent(), queue.SimpleQueue()

    def send():
        while (reply := replies.get()) is not None:
            try:
                conn.send(reply)
            except OSError:
                return      # the caller went away
            except Exception as e:  # noqa: BLE001 (an error that does not pickle: its line)
                conn.send((False, HotlineError(f"model agent: {type(e).__name__}: {e}"),
                           reply[2]))

    sender = threading.Thread(target=send, name="hotline-model-agent-send")
    sender.start()
    name = None
    while name != "_close":
        try:
            name, args = conn.recv()
        except (EOFError, OSError):
            name, args = "_close", ()
        t0 = time.perf_counter()
        try:
            reply = (True, getattr(agent, name)(*args))
        except Exception as e:  # noqa: BLE001 (any error goes back to the caller, raised there)
            reply = (False, e)
        replies.put((*reply, time.perf_counter() - t0))
    replies.put(None)
    sender.join()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
