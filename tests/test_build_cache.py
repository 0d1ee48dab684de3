"""`hotline.sim.runner.cached_build`, the content-keyed cache of simulator builds: one build per
equal (sources' text, arguments), a new one when either changes, nothing kept of a failed
build, the executable kept without the object files, the newest entries kept, and a fallback
when the cache directory cannot be made. The build functions here only write files."""
import pytest

from hotline.sim import runner


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOTLINE_RTL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def builder(calls):
    def build(entry):
        calls.append(entry)
        (entry / "model").write_text("executable")
        (entry / "obj").mkdir()
        (entry / "obj" / "Vtop__ALL.a").write_text("archive")
        (entry / "Vtop.cpp").write_text("generated")
    return build


def test_one_build_per_equal_sources_and_arguments(tmp_path, cache):
    src = tmp_path / "dut.v"
    src.write_text("module dut; endmodule\n")
    calls = []
    first, reused_first = runner.cached_build(("verilator", "dut"), [src], builder(calls))
    again, reused_again = runner.cached_build(("verilator", "dut"), [src], builder(calls))
    assert (reused_first, reused_again) == (False, True) and first == again and len(calls) == 1
    assert first.parent == cache and (first / "model").read_text() == "executable"
    assert not (first / "Vtop.cpp").exists() and not (first / "obj" / "Vtop__ALL.a").exists()
    src.write_text("module dut; wire x; endmodule\n")
    other_text, r1 = runner.cached_build(("verilator", "dut"), [src], builder(calls))
    other_args, r2 = runner.cached_build(("verilator", "dut", "-O3"), [src], builder(calls))
    renamed = tmp_path / "top.v"
    renamed.write_text(src.read_text())
    other_name, r3 = runner.cached_build(("verilator", "dut", "-O3"), [renamed], builder(calls))
    assert not (r1 or r2 or r3) and len({first, other_text, other_args, other_name}) == 4


def test_a_failed_build_leaves_nothing_cached(tmp_path, cache):
    src = tmp_path / "dut.v"
    src.write_text("module dut; endmodule\n")

    def fails(entry):
        (entry / "half").write_text("")
        raise RuntimeError("the compiler failed")
    with pytest.raises(RuntimeError, match="the compiler failed"):
        runner.cached_build(("icarus", "dut"), [src], fails)
    calls = []
    entry, reused = runner.cached_build(("icarus", "dut"), [src], builder(calls))
    assert not reused and len(calls) == 1 and not (entry / "half").exists()


def test_the_newest_entries_are_kept(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(runner, "BUILD_CACHE_ENTRIES", 3)
    src = tmp_path / "dut.v"
    entries = []
    for i in range(5):
        src.write_text(f"// design {i}\n")
        entries.append(runner.cached_build(("icarus", "dut"), [src], builder([]))[0])
    assert sorted(d.name for d in cache.iterdir() if d.is_dir()) == \
        sorted(d.name for d in entries[2:])
    assert not any((cache / f"{d.name}.lock").exists() for d in entries[:2])


def test_an_unwritable_cache_falls_back_to_the_temporary_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOTLINE_RTL_CACHE", "/proc/hotline-cache")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(runner.tempfile, "tempdir", None)
    src = tmp_path / "dut.v"
    src.write_text("module dut; endmodule\n")
    entry, reused = runner.cached_build(("icarus", "dut"), [src], builder([]))
    assert not reused and entry.parent.parent == tmp_path and (entry / "model").exists()
