"""The row DMA's facts (contract) shared by the RTL (`hotline.hw.row_dma`), its model
(`hotline.model.dma_model`) and the register map (``ERROR_CAUSE``)."""

__all__ = ["CAUSES", "CHECK_ORDER", "DIRECTIONS", "PAGE"]

CAUSES = ("table", "row", "slot", "desc", "axi_read", "axi_write")  # error_cause bit order
CHECK_ORDER = ("table", "row", "desc", "slot")                      # window-check priority
DIRECTIONS = ("gather", "scatter")
PAGE = 4096  # no burst crosses a 4 KiB boundary
