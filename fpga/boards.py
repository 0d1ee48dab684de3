"""The boards Hotline builds for, and the accelerator configuration each one carries.

A board top (`hotline.fpga.board_top.BoardTop`) holds the HotlineAccelerator, the UART host
link bridge and an on-board block-RAM memory window that stands in for host memory. The
configurations are reduced from the product one (`hotline.contract.config.PRODUCT`) so that
the accelerator, the window and the link buffers fit the part's block RAM together; the UART
runs at ``baud`` from the board clock.
"""
from dataclasses import dataclass, field, replace

from hotline.contract.config import PRODUCT, AcceleratorConfig

__all__ = ["BoardSpec", "BOARDS", "board", "buildable"]


@dataclass(frozen=True)
class BoardSpec:
    """One board: ``platform`` names its amaranth-boards class (module, class), ``device`` a
    key of `hotline.fpga.synth.DEVICES`; ``clock_hz`` is the board oscillator the design runs
    from; ``window_bytes`` the memory window; ``max_request`` the link's request payload limit
    (the bridge's receive buffer); ``result_depth`` the beats each result stream buffers;
    ``does_not_fit`` says why the design cannot fit the part (such a board is left out of
    ``all`` builds; building it alone reports the overflow)."""
    name: str
    platform: tuple
    device: str
    clock_hz: int
    baud: int
    config: AcceleratorConfig
    learner: dict = field(default_factory=dict)
    data_width: int = 64
    num_tables: int = 32
    window_bytes: int = 32768
    max_request: int = 2048
    result_depth: int = 512
    does_not_fit: str = ""

    @property
    def divisor(self):
        """Clock cycles per UART bit."""
        return round(self.clock_hz / self.baud)


# The product's ways, stash and kicks; 12 epoch bits (one clearing pass every 4095 batches),
# as the ECP5 boards were built and measured.
# The learner's geometry is in the configuration (model:// opened with it reads out the same
# entries); ``learner`` adds what only the RTL has (16-bit counts).
_ECP5_CONFIG = replace(PRODUCT, cam_entries=2048, cold_capacity=2048, cold_max_keys=1024,
                       max_batch_samples=256, cold_epoch_bits=12, learner_buckets=256,
                       learner_ways=4)
_ECP5_LEARNER = dict(count_bits=16)

BOARDS = {b.name: b for b in (
    BoardSpec("ulx3s-85f", ("amaranth_boards.ulx3s", "ULX3S_85F_Platform"), "ecp5-85f",
              25_000_000, 1_000_000, _ECP5_CONFIG, _ECP5_LEARNER, window_bytes=65536),
    BoardSpec("orangecrab-85f", ("amaranth_boards.orangecrab_r0_2", "OrangeCrabR0_2_85FPlatform"),
              "ecp5-85f", 48_000_000, 1_000_000, _ECP5_CONFIG, _ECP5_LEARNER,
              window_bytes=65536),
    BoardSpec("icebreaker", ("amaranth_boards.icebreaker", "ICEBreakerPlatform"), "ice40-up5k",
              12_000_000, 1_000_000,
              replace(PRODUCT, cam_entries=256, cold_capacity=256, cold_max_keys=128,
                      max_batch_samples=64, learner_buckets=16, learner_ways=4),
              dict(count_bits=16), num_tables=8,
              window_bytes=4096, max_request=512, result_depth=128,
              does_not_fit="even this smallest configuration needs 17.3k LUT4 and 103 block RAMs "
                           "(the UP5K has 5,280 and 30): the row DMA and the fragmenter alone "
                           "exceed it"),
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
