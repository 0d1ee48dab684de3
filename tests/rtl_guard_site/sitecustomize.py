"""Installs tests/rtl_guard.py's audit hook in the Python processes a test not marked ``rtl``
starts (conftest puts this directory on their PYTHONPATH); see that module."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "hotline_tests_rtl_guard", Path(__file__).resolve().parents[1] / "rtl_guard.py")
_guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_guard)
_guard.install()
