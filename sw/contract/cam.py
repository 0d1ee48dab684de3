"""The popularity CAM's command port codes (contract): the RTL's ``cmd.op`` / ``resp.status``
fields, the model's return values and the ``CAM_CMD.op`` / ``CAM_RESP.status`` register fields.

Plain Python ``IntEnum``s, so the model, the register map and the host need no Amaranth; the
gateware takes the same codes as Amaranth enumerations from `hotline.contract.shapes`.
"""
import enum

__all__ = ["CAMOp", "CAMStatus"]


class CAMOp(enum.IntEnum):
    INSERT = 0
    DELETE = 1
    CLEAR = 2


class CAMStatus(enum.IntEnum):
    OK = 0
    EXISTS = 1
    FULL = 2
    NOT_FOUND = 3
