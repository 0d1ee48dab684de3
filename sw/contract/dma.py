"""The row DMA's facts (contract) shared by the RTL (`hotline.hw.row_dma`), its model
(`hotline.model.dma_model`) and the register map (``ERROR_CAUSE``)."""

__all__ = ["BASE_BITS", "CAUSES", "CHECK_ORDER", "DIRECTIONS", "PAGE"]

CAUSES = ("table", "row", "slot", "desc", "axi_read", "axi_write")  # error_cause bit order
CHECK_ORDER = ("table", "row", "desc", "slot")                      # window-check priority
DIRECTIONS = ("gather", "scatter")
PAGE = 4096  # no burst crosses a 4 KiB boundary
# Bits of a table or staging base as the registers hold it (BASE_LO, BASE_HI). A base with a bit
# set at or above the bus's address width is refused (cause desc / slot), never truncated.
BASE_BITS = 64
