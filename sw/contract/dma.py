"""The row DMA's facts (contract) shared by the RTL (`hotline.hw.row_dma`), its model
(`hotline.model.dma_model`) and the register map (``ERROR_CAUSE``)."""

__all__ = ["BASE_BITS", "CAUSES", "TOP_CAUSES", "CHECK_ORDER", "DIRECTIONS", "PAGE",
           "WATCHDOG_CYCLES"]

# error_cause bit order (axi_rlast: a read beat's rlast not where its burst ends; overflow:
# one of the row DMA's counters wrapped)
CAUSES = ("table", "row", "slot", "desc", "axi_read", "axi_write", "axi_rlast", "overflow")
# ERROR_CAUSE bits the top adds after the row DMA's (the watchdog's)
TOP_CAUSES = ("timeout",)
CHECK_ORDER = ("table", "row", "desc", "slot")                      # window-check priority
DIRECTIONS = ("gather", "scatter")
PAGE = 4096  # no burst crosses a 4 KiB boundary
# Bits of a table or staging base as the registers hold it (BASE_LO, BASE_HI). A base with a bit
# set at or above the bus's address width is refused (cause desc / slot), never truncated.
BASE_BITS = 64
# The watchdog's default timeout in cycles (the top's ``watchdog_cycles``): far above any legal
# gap it watches (a gap in a scatter's keys while a gather's key waits behind it: a few
# cycles of the key source's stalls; an AXI4 response while a soft reset waits: the memory's
# latency, 20..40 cycles in the co-simulation, some hundreds for a DRAM controller).
WATCHDOG_CYCLES = 4096
