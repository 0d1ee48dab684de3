"""Amaranth shapes of contract facts, derived from their plain-Python definitions: the
gateware's view. `hotline.contract.cam`'s codes as Amaranth enumerations (2-bit shape,
`EnumView` on signals), so that the RTL's ``cmd.op`` / ``resp.status`` fields are typed and
named in the netlist. Only the gateware needs this module (and Amaranth)."""
from amaranth.lib import enum

from . import cam

__all__ = ["CAMOp", "CAMStatus"]


def _amaranth_enum(codes, shape) -> enum.EnumType:
    """An Amaranth ``IntEnum`` of ``shape`` with the name and members of the plain ``IntEnum``
    ``codes`` (so both compare equal member by member)."""
    kwargs = dict(shape=shape, view_class=enum.EnumView)
    bases = (enum.IntEnum,)
    namespace = enum.EnumType.__prepare__(codes.__name__, bases, **kwargs)
    namespace["__module__"], namespace["__qualname__"] = __name__, codes.__qualname__
    for member in codes:
        namespace[member.name] = member.value
    return enum.EnumType(codes.__name__, bases, namespace, **kwargs)


CAMOp = _amaranth_enum(cam.CAMOp, 2)
CAMStatus = _amaranth_enum(cam.CAMStatus, 2)
