"""Host memory as the accelerator sees it: one flat, byte-addressed region on the host bus.

`HostMemory` is backed by a file mapped with ``np.memmap``, so a simulator process can map the
very same bytes later (``sim://`` backends) and the DMA really reads the tables the trainer
updates. Bus address 0 is the region's first byte. Windows are carved out with a bump
allocator; `view` gives zero-copy numpy arrays over a window (``torch.from_numpy`` on such a
view shares the memory too).

The default file lives in RAM (``/dev/shm``) where it has room: a file on a disk would send
every row the trainer writes through the page cache's writeback, which (measured on this
project's 2-core VM, `make bench`'s multi-hot configuration) made the in-place kernel about
2x slower and its timing swing with the disk.
"""
import ctypes
import ctypes.util
import mmap
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hotline.contract.errors import HotlineError
from hotline.data.report import fmt_bytes


def address_bits(size) -> int:
    """The bus address bits that reach every byte of a ``size``-byte memory, at least 32:
    the default ``addr_width`` of a device over such a memory."""
    return max(32, (int(size) - 1).bit_length())


@dataclass(frozen=True)
class Window:
    """A byte range of host memory: bus address ``base``, ``size`` bytes, a name for messages."""
    base: int
    size: int
    name: str = ""

    @property
    def end(self) -> int:
        return self.base + self.size


#: where a default host memory file goes when it fits (a tmpfs: RAM)
RAM_DIR = Path("/dev/shm")
PREFIX = "hotline-hostmem-"


# glibc's mallopt options (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def mallopt(option, value) -> bool:
    """glibc's ``mallopt(option, value)`` for this process (how its malloc keeps and maps
    memory); False where the C library has none (nothing changed) or refuses the value."""
    try:
        fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "mallopt", None)
    except OSError:
        return False
    return bool(fn is not None and fn(option, value))


def available_ram() -> int:
    """Bytes of RAM available now (MemAvailable; all of it where /proc/meminfo is missing)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _ram_file(size) -> tuple[int, Path] | None:
    """A new file of ``size`` bytes in `RAM_DIR`, its blocks reserved (a tmpfs that fills up
    later would otherwise kill the process with SIGBUS at a page's first touch), already
    unlinked where ``/proc`` names open files (so no crash leaves RAM behind): (its open
    descriptor, a path other processes of this user can map it by). None where there is no
    such directory, no room in it, or more than half the available RAM would go (a tmpfs
    reports its size limit, not the RAM left, and its pages, unlike a disk file's, are never
    paged out without swap)."""
    if not sys.platform.startswith("linux") or not RAM_DIR.is_dir() or size > available_ram() // 2:
        return None
    try:
        st = os.statvfs(RAM_DIR)
        if st.f_bavail * st.f_frsize < size:
            return None
        fd, name = tempfile.mkstemp(prefix=PREFIX, suffix=".bin", dir=RAM_DIR)
    except OSError:
        return None
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:   # no room after all, or no fallocate on this file system
        os.close(fd)
        os.unlink(name)
        return None
    proc = Path(f"/proc/{os.getpid()}/fd/{fd}")
    if not proc.exists():
        return fd, Path(name)
    os.unlink(name)
    return fd, proc


class HostMemory:
    """``size`` bytes of file-backed host memory. ``path``: the backing file (made, or mapped
    if it exists); default a new file in RAM (`RAM_DIR`, reserved) where it fits and
    ``in_ram``, else a sparse temporary file (pages cost nothing until touched), either
    removed by `close`. Use as a context manager or call `close`."""

    def __init__(self, size, path=None, *, in_ram=True):
        size = int(size)
        if size <= 0:
            raise HotlineError(f"host memory size must be positive, not {size}")
        self.size = size
        self._owned = path is None
        self._fd = None   # a RAM file's descriptor, held while mapped
        ram = _ram_file(size) if path is None and in_ram else None
        self._unlinked = ram is not None and ram[1].parts[:2] == ("/", "proc")
        if ram is not None:
            self._fd, path = ram
        elif path is None:
            fd, name = tempfile.mkstemp(prefix=PREFIX, suffix=".bin")
            os.close(fd)
            path = name
        self.path = Path(path)
        try:
            if ram is None:
                with open(self.path, "r+b" if self.path.exists() else "w+b") as f:
                    f.truncate(size)
            self._mm = np.memmap(self.path, np.uint8, "r+", shape=(size,))
        except OSError as e:
            self._remove()
            raise HotlineError(f"{self.path}: cannot map {fmt_bytes(size)} of host memory "
                               f"({e.strerror or e})") from None
        # A plain ndarray over the mapping: slicing a np.memmap costs a Python-level
        # __array_finalize__ per slice, which the DMA model does per row.
        self.array = self._mm.view(np.ndarray)
        self._next = 0
        self.windows = []

    def alloc(self, nbytes, align=4096, name=None) -> Window:
        """A new `Window` of ``nbytes`` at the next multiple of ``align`` (any positive
        number, e.g. lcm(4096, row_bytes) to start on a row boundary of a whole-memory view)."""
        nbytes, align = int(nbytes), int(align)
        name = name or f"window{len(self.windows)}"
        if nbytes <= 0:
            raise HotlineError(f"{name}: window size must be positive, not {nbytes}")
        if align <= 0:
            raise HotlineError(f"{name}: alignment must be positive, not {align}")
        base = -(-self._next // align) * align
        if base + nbytes > self.size:
            raise HotlineError(f"{name}: {fmt_bytes(nbytes)} do not fit in host memory "
                               f"({fmt_bytes(self.size - min(base, self.size))} free of "
                               f"{fmt_bytes(self.size)})")
        w = Window(base, nbytes, name)
        self._next = base + nbytes
        self.windows.append(w)
        return w

    @property
    def used(self) -> int:
        return self._next

    def view(self, window, dtype=np.uint8, shape=None) -> np.ndarray:
        """Zero-copy array of ``dtype`` and ``shape`` (default: as many items as fit) over
        ``window``; writes go straight to host memory."""
        self._check_open()
        dtype = np.dtype(dtype)
        if window.base < 0 or window.end > self.size:
            raise HotlineError(f"{window.name}: window [{window.base:#x}, {window.end:#x}) is "
                               f"outside host memory ({self.size:#x} bytes)")
        if shape is None:
            shape = (window.size // dtype.itemsize,)
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes > window.size:
            raise HotlineError(f"{window.name}: a {dtype.name} view of shape {shape} needs "
                               f"{nbytes:,} bytes, the window has {window.size:,}")
        if window.base % dtype.alignment:
            raise HotlineError(f"{window.name}: base {window.base:#x} is not aligned for {dtype.name}")
        return self.array[window.base:window.base + nbytes].view(dtype).reshape(shape)

    def populate(self, window) -> None:
        """Map ``window``'s pages now, writable (Linux's MADV_POPULATE_WRITE; elsewhere
        nothing): a process that maps memory another one filled then pays no page fault per
        first touch of a row (about 2x on a batch's random rows). It allocates the window's
        blocks of a sparse file."""
        self._check_open()
        start = window.base - window.base % mmap.PAGESIZE
        try:
            self._mm._mmap.madvise(getattr(mmap, "MADV_POPULATE_WRITE", 23), start,
                                   min(window.end, self.size) - start)
        except (AttributeError, OSError, ValueError):
            pass   # an older kernel, or no madvise: the pages map on first touch instead

    def flush(self) -> None:
        if self.array is not None:
            self._mm.flush()

    def _check_open(self):
        if self.array is None:
            raise HotlineError("host memory is closed")

    def close(self) -> None:
        """Unmap; remove the backing file if it is our temporary one. Views die with it."""
        if getattr(self, "array", None) is None:
            return
        mm = getattr(self._mm, "_mmap", None)
        self.array = self._mm = None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # live views still reference it; the OS unmaps when they go
        self._remove()

    def _remove(self) -> None:
        """Our own file goes (a RAM file's descriptor closed; unlinked unless it was already)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._owned and not self._unlinked:
            self.path.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return f"HostMemory({fmt_bytes(self.size)} at {self.path}, {len(self.windows)} windows)"
