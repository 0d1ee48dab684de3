"""The boards Hotline builds for, and the accelerator configuration each one carries.

A board top (`hotline.fpga.board_top.BoardTop`) holds the HotlineAccelerator, the UART host
link bridge and an on-board block-RAM memory window that stands in for host memory. The
configurations are reduced from the product one (`hotline.contract.config.PRODUCT`) so that
the accelerator, the window and the link buffers fit the part's block RAM together.

Clocks (ECP5 boards): one EHXPLLL (`hotline.fpga.ecp5_pll`) makes, from the board oscillator
``osc_hz``, the accelerator's clock ``core_hz`` (domain ``sync``: accelerator, link bridge,
window; chosen below the design's measured Fmax on that board) on CLKOP and the UART's clock
``uart_hz`` (domain ``uart``, an exact multiple of ``baud``) on CLKOS. Both are exact:
``pll_settings`` refuses frequencies the PLL cannot make.
"""
from dataclasses import dataclass, field, replace

from hotline.contract.config import PRODUCT, AcceleratorConfig
from hotline.contract.link import LINK_BAUD

__all__ = ["BoardSpec", "BOARDS", "board", "buildable"]


@dataclass(frozen=True)
class BoardSpec:
    """One board: ``platform`` names its amaranth-boards class (module, class), ``device`` a
    key of `hotline.fpga.synth.DEVICES`; ``osc_hz`` is the board oscillator; ``core_hz`` the
    accelerator's clock (domain ``sync``) and ``uart_hz`` the UART's (domain ``uart``, an
    exact multiple of ``baud``), both from the board's PLL (``pll``; a board without one runs
    everything from the oscillator and both equal ``osc_hz``); ``rx_depth`` the UART's
    receive FIFO (bytes); ``window_bytes`` the memory window; ``max_request`` the link's
    request payload limit (the bridge's receive buffer); ``result_depth`` the beats each result stream buffers;
    ``does_not_fit`` says why the design cannot fit the part (such a board is left out of
    ``all`` builds; building it alone reports the overflow)."""
    name: str
    platform: tuple
    device: str
    osc_hz: int
    core_hz: int
    uart_hz: int
    baud: int
    config: AcceleratorConfig
    learner: dict = field(default_factory=dict)
    data_width: int = 64
    num_tables: int = 32
    window_bytes: int = 32768
    max_request: int = 2048
    result_depth: int = 512
    does_not_fit: str = ""
    pll: bool = True
    rx_depth: int = 4   # bytes of the UART -> sync FIFO (`hotline.hw.uart_link`)

    def __post_init__(self):
        # Cheap checks only: the CLI imports this module and must start fast (no Amaranth, no
        # PLL search); `pll_settings` checks the PLL, `BoardTop` the crossing's bound.
        if self.uart_hz % self.baud or self.uart_hz // self.baud < 8:
            raise ValueError(f"{self.name}: the UART clock {self.uart_hz} Hz is not a multiple "
                             f"(>= 8) of {self.baud} baud")
        if not self.pll and not self.osc_hz == self.core_hz == self.uart_hz:
            raise ValueError(f"{self.name}: without a PLL every clock is the oscillator")

    @property
    def clock_hz(self):
        """The accelerator's clock, as ``INFO`` reports it (= ``core_hz``)."""
        return self.core_hz

    @property
    def divisor(self):
        """UART clock cycles per bit (exact)."""
        return self.uart_hz // self.baud

    @property
    def pll_settings(self):
        """The EHXPLLL setting: CLKOP = ``core_hz``, CLKOS = ``uart_hz`` (None without a PLL);
        ValueError when the PLL cannot make both exactly."""
        if not self.pll:
            return None
        from .ecp5_pll import ecp5_pll  # lazy: Amaranth
        settings = ecp5_pll(self.osc_hz, [self.core_hz, self.uart_hz])
        if not settings.exact:
            got = [f"{float(f) / 1e6:g}" for f in settings.out_hz]
            raise ValueError(f"{self.name}: the PLL makes {', '.join(got)} MHz, not "
                             f"{self.core_hz / 1e6:g}, {self.uart_hz / 1e6:g} MHz")
        return settings


# The product's ways, stash and kicks; 12 epoch bits (one clearing pass every 4095 batches),
# as the ECP5 boards were built and measured.
# The learner's geometry is in the configuration (model:// opened with it reads out the same
# entries); ``learner`` adds what only the RTL has (16-bit counts).
_ECP5_CONFIG = replace(PRODUCT, cam_entries=2048, cold_capacity=2048, cold_max_keys=1024,
                       max_batch_samples=256, cold_epoch_bits=12, learner_buckets=256,
                       learner_ways=4)
_ECP5_LEARNER = dict(count_bits=16)

# The link runs at 3 Mbaud, the most the ULX3S's FT231X does (and the OrangeCrab's external
# adapter must: FT232H, FT231X and CP2102N do). core_hz: the highest PLL step with 5% margin
# below each board's measured Fmax (docs/boards.md: ULX3S 66.46 MHz at a 75 MHz target,
# OrangeCrab 96.28 MHz at 84 MHz, seed 1). uart_hz: 20 and 16 clocks per bit, from the same VCO.

BOARDS = {b.name: b for b in (
    BoardSpec("ulx3s-85f", ("amaranth_boards.ulx3s", "ULX3S_85F_Platform"), "ecp5-85f",
              25_000_000, 60_000_000, 60_000_000, LINK_BAUD, _ECP5_CONFIG, _ECP5_LEARNER,
              window_bytes=65536),
    BoardSpec("orangecrab-85f", ("amaranth_boards.orangecrab_r0_2", "OrangeCrabR0_2_85FPlatform"),
              "ecp5-85f", 48_000_000, 84_000_000, 48_000_000, LINK_BAUD, _ECP5_CONFIG,
              _ECP5_LEARNER, window_bytes=65536),
    # Out of the product; its UART echo image runs from the 12 MHz oscillator (no PLL).
    BoardSpec("icebreaker", ("amaranth_boards.icebreaker", "ICEBreakerPlatform"), "ice40-up5k",
              12_000_000, 12_000_000, 12_000_000, 1_000_000,
              replace(PRODUCT, cam_entries=256, cold_capacity=256, cold_max_keys=128,
                      max_batch_samples=64, learner_buckets=16, learner_ways=4),
              dict(count_bits=16), num_tables=8,
              window_bytes=4096, max_request=512, result_depth=128,
              does_not_fit="even this smallest configuration needs 17.3k LUT4 and 103 block RAMs "
                           "(the UP5K has 5,280 and 30): the row DMA and the fragmenter alone "
                           "exceed it", pll=False),
)}


def board(name):
    """The `BoardSpec` called ``name``; a clear error for an unknown one."""
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r} (choose from {', '.join(BOARDS)})") from None


def buildable():
    """The boards an ``all`` build covers: those whose design fits."""
    return [name for name, b in BOARDS.items() if not b.does_not_fit]
