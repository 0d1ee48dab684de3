"""Fixtures shared by the test modules, and the test tiers.

Tiers (markers in pyproject.toml):

- ``rtl``: the test runs the gateware outside Python: Verilator or Icarus (cocotb, the stream
  harness, the sim:// and board servers) or the Yosys/nextpnr flow. A test that requests the
  `simulator_or_skip` fixture, directly or through another fixture, is marked ``rtl`` at
  collection; a test that reaches those tools another way carries ``@pytest.mark.rtl`` (or its
  module's ``pytestmark``). Any other test that starts one of them fails (rtl_guard.py), so a
  new cocotb test cannot land in the fast tier unmarked.
- ``slow``: long regressions, outside `make test` (`make test-full`; CI runs the ``slow and ci``
  ones).

`make test-fast` runs ``-m "not slow and not rtl"`` without test_readme.py (the README's commands
have `make test-readme`): contract, models, host runtime, CLI and the Amaranth-simulator tests
of the gateware. `make test` (``-m "not slow"``, on two pytest-xdist processes) is the CI gate.
Plain helpers (the real data files, `helpers.param`) are in helpers.py.
"""
import pytest

import rtl_guard

RTL_FIXTURES = {"simulator_or_skip"}


@pytest.fixture(scope="session")
def simulator_or_skip():
    """``simulator_or_skip(name)``: ``name`` if that HDL simulator ("verilator", "icarus") can
    run here, else skip the test. Requesting this fixture marks the test ``rtl``."""
    from hotline.host.simulators import simulator_available

    def check(name):
        if not simulator_available(name):
            pytest.skip(f"{name} is not installed")
        return name
    return check


# ---- the rtl marker and its guard ------------------------------------------------------------

def pytest_configure(config):
    rtl_guard.install()


def pytest_collection_modifyitems(items):
    for item in items:
        if RTL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.rtl)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("rtl") is None:
        rtl_guard.arm()      # before any fixture, module- and session-scoped ones included


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        rtl_guard.disarm()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A refused launch fails the phase it happened in, even if the code under test caught
    the exception (or the launch was in a child process)."""
    report = yield
    refused = rtl_guard.refused()
    if refused and not report.failed:
        report.outcome, report.longrepr = "failed", refused
    return report
