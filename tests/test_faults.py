"""Bad input and faults through the real CLI (issue 42): outputs into devices, FIFOs and
symlinks, a full disk under every output writer, a corrupt checkpoint, unreadable .npz members,
foreign files in a shard directory, a closed stdout. Each is one line and exit 2 (141 for a
closed stdout), with the previous output kept."""
import errno
import io
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from hotline.cli import main
from hotline.data import readers

HOTLINE = [sys.executable, "-m", "hotline.cli"]
PROFILE = ["profile", "synth:criteo-kaggle:300", "--hot-rows", "10"]
TRAIN = ["train", "synth:criteo-kaggle:300", "--max-ind-range", "100", "--mode", "baseline",
         "--batch-size", "64", "--dim", "4", "--bottom", "8", "--top", "8"]


def one_line_error(capsys, *words):
    """The single stderr line of a failed run besides its notes, checked for ``words``."""
    err = [x for x in capsys.readouterr().err.strip().splitlines()
           if not x.startswith("hotline: note: ")]
    assert len(err) == 1 and err[0].startswith("hotline: error: "), err
    for w in words:
        assert w in err[0], err[0]
    return err[0]


# ---- outputs that are not regular files ------------------------------------------------------

def _mknod_or_skip(path, minor):
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("mknod is not permitted here (the FIFO case covers straight writes)")


def test_json_into_a_device_is_written_not_replaced(tmp_path, capsys):
    """Like /dev/null and /dev/full, made in tmp_path: the node stays a device; the full one
    is one line, exit 2."""
    null, full = tmp_path / "null", tmp_path / "full"
    _mknod_or_skip(null, 3)
    _mknod_or_skip(full, 7)
    assert main([*PROFILE, "--json", str(null)]) == 0
    assert main([*PROFILE, "--json", str(full)]) == 2
    one_line_error(capsys, str(full), "No space left on device")
    for dev in (null, full):
        assert stat.S_ISCHR(dev.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "null"]


def test_json_into_a_fifo_and_through_a_symlink(tmp_path, capsys):
    """A FIFO gets the JSON and stays a FIFO; a symlink stays a link to the replaced file."""
    ref = tmp_path / "ref.json"
    assert main([*PROFILE, "--json", str(ref)]) == 0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # The reader is open before the run (the JSON fits the pipe's buffer), so a run that
    # replaced the FIFO instead leaves it empty rather than hanging.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert main([*PROFILE, "--json", str(fifo)]) == 0
        got = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert json.loads(got) == json.loads(ref.read_text())
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target.name)
    assert main([*PROFILE, "--json", str(link)]) == 0
    assert link.is_symlink() and json.loads(target.read_text()) == json.loads(ref.read_text())


def test_json_empty_path_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*PROFILE, "--json", ""]) == 2
    assert one_line_error(capsys).endswith("--json: empty path")
    assert not list(tmp_path.iterdir())


# ---- a full disk under every writer ----------------------------------------------------------

class _FullRaw(io.RawIOBase):
    """A file on a disk with ``free[0]`` bytes left (shared by every file on it): a write
    takes what fits, then raises ENOSPC, as a full disk does."""

    def __init__(self, path, mode, free):
        super().__init__()
        self._f = open(path, mode.replace("b", "").replace("t", "") + "b", buffering=0)
        self._free = free

    def writable(self):
        return True

    def write(self, data):
        n = min(len(data), self._free[0])
        if n == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._free[0] -= n
        return self._f.write(bytes(memoryview(data)[:n]))

    def fileno(self):
        return self._f.fileno()

    def close(self):
        self._f.close()
        super().close()


@pytest.fixture(params=["tmpfs", "injected"])
def full_disk(request, tmp_path, monkeypatch):
    """``(directory, fill)``: ``fill(room)`` leaves about ``room`` bytes free in the
    directory. ``tmpfs``: a real 16 MiB tmpfs, filled with a file (skipped where mounting is
    not permitted); ``injected``: the files the output writers open there (through
    `readers.open`) share a budget of ``room`` bytes, then raise ENOSPC."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if request.param == "tmpfs":
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)],
                           capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        request.addfinalizer(lambda: subprocess.run(["umount", str(disk)], check=True))

        def fill(room):
            st = os.statvfs(disk)
            left = st.f_bavail * st.f_frsize - room
            fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while left > 0:
                    left -= os.write(fd, b"\0" * min(left, 1 << 16))
            except OSError as e:
                assert e.errno == errno.ENOSPC
            finally:
                os.close(fd)
    else:
        def fill(room):
            free = [room]

            def full_open(path, mode="r", *args, **kw):
                inside = Path(os.path.abspath(path)).is_relative_to(disk)
                if not inside or not set(mode) & set("wax+"):
                    return open(path, mode, *args, **kw)
                f = io.BufferedWriter(_FullRaw(path, mode, free))
                return f if "b" in mode else io.TextIOWrapper(f, encoding="utf-8")
            monkeypatch.setattr(readers, "open", full_open, raising=False)
    return disk, fill


def _tree(path):
    """{relative path: bytes} of every file under ``path`` (or of ``path`` itself)."""
    if path.is_file():
        return {".": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))}


FULL_DISK_CASES = {
    "profile --json": (None, [*PROFILE, "--json", "OUT"]),
    "data stats --json": (None, ["data", "stats", "synth:criteo-kaggle:300", "--json", "OUT"]),
    "data synth --out": (None, ["data", "synth", "--samples", "300", "--out", "OUT"]),
    "data convert --out": (None, ["data", "convert", "synth:criteo-kaggle:300", "--out", "OUT"]),
    "data convert --shards": (["data", "convert", "synth:criteo-kaggle:4096", "--shards", "OUT",
                               "--shard-samples", "4096"],
                              ["data", "convert", "synth:criteo-kaggle:8192", "--shards", "OUT",
                               "--shard-samples", "4096"]),
    "train --json": (None, [*TRAIN, "--max-steps", "2", "--json", "OUT"]),
    "train --plot": (None, [*TRAIN, "--max-steps", "2", "--plot", "OUT", "--json", "ELSEWHERE"]),
    # The previous checkpoint is taken at step 2; the run resumed from it fails at step 3.
    # Tables of 256 KB: the disk runs out inside one, which torch writes past the file's
    # buffer; torch.save then raises a RuntimeError (the OSError is its context).
    "train --checkpoint": ([*TRAIN, "--max-ind-range", "16000", "--max-steps", "2",
                            "--checkpoint", "OUT", "--json", "ELSEWHERE"],
                           [*TRAIN, "--max-ind-range", "16000", "--resume", "OUT",
                            "--checkpoint", "OUT", "--checkpoint-every", "1", "--json",
                            "ELSEWHERE"]),
}


@pytest.mark.parametrize("case", list(FULL_DISK_CASES))
def test_full_disk_one_line_previous_output_kept(case, full_disk, capsys):
    disk, fill = full_disk
    out = disk / "out"
    before, args = FULL_DISK_CASES[case]
    sub = lambda a: [{"OUT": str(out), "ELSEWHERE": str(disk.parent / "r.json")}.get(x, x)
                     for x in a]
    if before:
        assert main(sub(before)) == 0
    else:
        out.write_bytes(b"the previous output\n")
    previous = _tree(out)
    # Half the previous output's size fits: the write runs out of space part-way (in
    # torch.save for a checkpoint, whose first records fit and a table then does not).
    fill(sum(len(b) for b in previous.values()) // 2)
    capsys.readouterr()
    assert main(sub(args)) == 2
    one_line_error(capsys, str(out), "No space left on device", "the previous one is unchanged")
    assert _tree(out) == previous
    assert sorted(p.name for p in disk.iterdir()) in (["out"], ["filler", "out"])


# ---- a corrupt checkpoint --------------------------------------------------------------------

def _flip_member_bytes(path, count, name=None, at=0.5):
    """Invert ``count`` bytes of the stored member ``name`` (default: the largest, a torch
    checkpoint's largest tensor) of the zip file ``path``, starting at fraction ``at`` of it."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name) if name else max(z.infolist(), key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len + int((info.file_size - count) * at)
    raw[start:start + count] = bytes(b ^ 0xFF for b in raw[start:start + count])
    path.write_bytes(raw)


def test_corrupt_checkpoint_is_refused(tmp_path, capsys):
    ck = tmp_path / "ck.pt"
    assert main([*TRAIN, "--max-steps", "2", "--checkpoint", str(ck),
                 "--json", str(tmp_path / "first.json")]) == 0
    _flip_member_bytes(ck, 256)
    capsys.readouterr()
    out = tmp_path / "resumed.json"
    assert main([*TRAIN, "--resume", str(ck), "--json", str(out)]) == 2
    one_line_error(capsys, str(ck), "corrupt checkpoint")
    assert not out.exists()


# ---- unreadable .npz members -----------------------------------------------------------------

def _bad_crc_npz(path):
    np.savez(path, sparse=np.arange(600).reshape(300, 2) % 7, table_sizes=np.array([7, 7]),
             label=(np.arange(300) % 2).astype(np.float32))
    _flip_member_bytes(path, 1, "sparse.npy", at=1.0)  # a row id: the header still parses


def _object_npz(path):
    np.savez(path, sparse=np.array([[0, 1], [1, 0]], dtype=object), table_sizes=np.array([2, 2]),
             label=np.array([0.0, 1.0], np.float32))


NPZ_COMMANDS = {
    "profile": ["profile", "DATA", "--hot-rows", "2", "--json", "OUT"],
    "fragment": ["fragment", "DATA", "--hot-rows", "2", "--batch-size", "8", "--json", "OUT"],
    "gather": ["gather", "DATA", "--hot-rows", "2", "--batch-size", "8", "--json", "OUT"],
    "data stats": ["data", "stats", "DATA", "--json", "OUT"],
    "data convert": ["data", "convert", "DATA", "--out", "OUT"],
    "train": ["train", "DATA", "--mode", "baseline", "--batch-size", "8", "--json", "OUT"],
}


@pytest.mark.parametrize("command", list(NPZ_COMMANDS))
@pytest.mark.parametrize("make, reason", [(_bad_crc_npz, "Bad CRC-32"),
                                          (_object_npz, "Object arrays cannot be loaded")])
def test_unreadable_npz_member_one_line(tmp_path, capsys, command, make, reason):
    data, out = tmp_path / "in.npz", tmp_path / "out.npz"
    make(data)
    args = [{"DATA": str(data), "OUT": str(out)}.get(a, a) for a in NPZ_COMMANDS[command]]
    assert main(args) == 2
    one_line_error(capsys, str(data), "field 'sparse'", reason)
    assert not out.exists()


# ---- a shard directory holding a user's file -------------------------------------------------

def test_convert_shards_keeps_a_foreign_file(tmp_path, capsys):
    shards = tmp_path / "shards"
    convert = ["data", "convert", "synth:criteo-kaggle:4096", "--shards", str(shards),
               "--shard-samples", "4096"]
    assert main(convert) == 0
    (shards / "notes.txt").write_text("mine")
    before = _tree(shards)
    assert main(convert) == 2
    one_line_error(capsys, "notes.txt", "refusing")
    assert _tree(shards) == before
    (shards / "notes.txt").unlink()
    assert main(convert) == 0  # only its own files there: replaced


# ---- a closed stdout -------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["data", "stats", "synth:criteo-kaggle:300"],
                                     [*PROFILE]])
def test_closed_stdout_is_a_quiet_exit_141(tmp_path, command):
    """``hotline ... | head -1`` where the reader is gone before the table is printed; the
    JSON, written before the table, is complete."""
    out = tmp_path / "out.json"
    p = subprocess.Popen(HOTLINE + command + ["--json", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait() == 141 and err == ""
    assert json.loads(out.read_text())["samples"] == 300
