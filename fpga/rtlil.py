"""Normalised RTLIL of a block or a board top: the check that a refactor kept the netlist.

``rtlil_text(target, device)`` elaborates ``target`` (a block of `hotline.fpga.blocks.BLOCKS`
in ``device``'s configuration, e.g. ``accelerator`` = the HotlineAccelerator in the product
configuration on ``ecp5-85f``, or a board of `hotline.fpga.boards.BOARDS`: its `BoardTop`) and
returns its RTLIL without the ``src`` attributes (file and line of every cell and wire, which
move with any edit). Two texts are equal when the netlists are the same, names included:
``hotline fpga rtlil accelerator --out before.il``, change the code, the same to ``after.il``,
then ``diff before.il after.il``.
"""
import re
import warnings

from amaranth.back import rtlil
from amaranth.hdl import UnusedElaboratable

from .blocks import BLOCKS
from .board_top import BoardTop
from .boards import BOARDS, board

__all__ = ["TARGETS", "normalise", "rtlil_text"]

TARGETS = (*BLOCKS, *BOARDS)

_SRC = re.compile(r'^[ \t]*attribute \\src "[^"\n]*"\n', re.M)


def normalise(text: str) -> str:
    """RTLIL ``text`` without its ``src`` attributes."""
    return _SRC.sub("", text)


def _design(target, device):
    if target in BOARDS:
        return [("hotline_" + target.replace("-", "_"), BoardTop(board(target)))]
    if target not in BLOCKS:
        raise ValueError(f"unknown target {target!r} (choose from {', '.join(TARGETS)})")
    made = BLOCKS[target](device)
    parts = made if isinstance(made, tuple) else (made,)
    name = target.replace("+", "_").replace("-", "_")
    return [(f"{name}_{i}" if len(parts) > 1 else name, p) for i, p in enumerate(parts)]


def rtlil_text(target: str, device: str = "ecp5-85f") -> str:
    """The normalised RTLIL of ``target`` (a block in ``device``'s configuration, or a
    board's top; see the module docstring)."""
    out = []
    for name, top in _design(target, device):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnusedElaboratable)
            out.append(normalise(rtlil.convert(top, name=name)))
    return "".join(out)
