"""Every property of the formal tier, with its depths and mutants (`PROPERTIES`): read by
``python -m hotline.sim.formal`` (make formal), tests/test_formal.py and the bench."""
import types
from typing import NamedTuple

from . import (cold_key_set, csr, fragmenter, frame_parser, multiplier, popularity_cam,
               row_chunker, row_command_front, row_window_check, streams, write_engine)

__all__ = ["Spec", "PROPERTIES"]


class Spec(NamedTuple):
    """One property: its wrapper class, the block's module (mutants are made of it), the BMC
    depth of `make formal` and of its mutants, the same two for the reduced tier (`make
    test`, `make bench --quick`), its mutations, and ``induction``: the depth is also that of
    a k-induction run, which closes (verdict "proved"). Depths and times:
    docs/verification.md."""
    wrapper: type
    block: types.ModuleType
    depth: int
    mutant_depth: int
    reduced_depth: int
    reduced_mutant_depth: int
    mutations: dict
    induction: bool = False


PROPERTIES = {
    # a descriptor write, the staging window settling and a key through the five stages
    # take 12 steps; the mutants fail by step 12
    "row_window_check": Spec(row_window_check.RowWindowProperty, row_window_check.block,
                             16, 15, 15, 14, row_window_check.MUTATIONS),
    # property 1's latch: a command, the setup (5 cycles) and a two-key batch end by step 10
    "row_command_front": Spec(row_command_front.FrontProperty, row_command_front.block,
                              12, 12, 12, 12, row_command_front.MUTATIONS, induction=True),
    # the multiplier lemma: a product two enabled cycles after its inputs (a state of
    # the two register stages is flushed by two enables)
    "multiplier": Spec(multiplier.MultiplierProperty, multiplier.block, 6, 4, 4, 4,
                       multiplier.MUTATIONS),
    # a write, its B, a read of the same word and its R take 7 steps
    "csr": Spec(csr.CSRProperty, csr.block, 11, 10, 8, 8, csr.MUTATIONS),
    # property 5: the slice and the fork close by induction (the cover needs 4 beats out);
    # the FIFO fills (4 entries) and wraps its ring twice within 12 steps
    "stream_slice": Spec(streams.SliceProperty, streams.slice_block, 8, 8, 6, 6,
                         streams.SLICE_MUTATIONS, induction=True),
    "stream_fork": Spec(streams.ForkProperty, streams.fork_block, 8, 8, 6, 6,
                        streams.FORK_MUTATIONS, induction=True),
    "stream_fifo": Spec(streams.FifoProperty, streams.fifo_block, 22, 16, 12, 8,
                        streams.FIFO_MUTATIONS),
    # property 7: a READ32 frame is 18 bytes (its request at step 18), a WRITE32 frame 22;
    # with free gaps the solver's time grows 10x per step past 19, so WRITE32 is reached
    # with a byte every cycle. The mutants fail on a READ32 frame.
    "frame_parser": Spec(frame_parser.FrameParserProperty, frame_parser.block, 20, 19, 19, 19,
                         {"skip_crc": frame_parser.MUTATIONS["skip_crc"]}),
    "frame_parser_back_to_back": Spec(frame_parser.BackToBackProperty, frame_parser.block,
                                      27, 19, 23, 19, frame_parser.MUTATIONS),
    # property 2's bursts: an op's first chunk is on ar / aw 5 steps after it is taken, each
    # further chunk of its row 3 later; a page-cut burst (the cover) by step 10
    "row_chunker": Spec(row_chunker.ChunkerProperty, row_chunker.block, 13, 10, 10, 10,
                        row_chunker.MUTATIONS),
    # property 5's fragmenter counts: a batch's summary leaves 23 steps after its first
    # lookup at the earliest (the cover: step 23); depth 30 took 5.5 min under load
    "fragmenter": Spec(fragmenter.FragmenterProperty, fragmenter.block, 26, 24, 24, 24,
                       fragmenter.MUTATIONS),
    # property 1 on the AXI addresses, property 2's beat count: a row's second burst is on
    # aw 8 steps after the row is taken (the cover: step 8); depth 10 takes 5 min under load
    "row_chunker_tiling": Spec(row_chunker.ChunkerTilingProperty, row_chunker.block, 9, 9,
                               9, 9, row_chunker.TILING_MUTATIONS),
    # property 2's W channel: a read beat is on W 5 steps after it came; a 2-beat burst
    # ends by step 7
    "write_engine": Spec(write_engine.WriteEngineProperty, write_engine.block, 13, 10, 10, 10,
                         write_engine.MUTATIONS),
    # property 3: the reset's clear takes 2 steps, an insert 12, a delete behind it 12 more
    # and its check one (the delete cover: step 25); a lookup's result 7 after it
    "popularity_cam": Spec(popularity_cam.CAMProperty, popularity_cam.block, 34, 28, 26, 27,
                           popularity_cam.MUTATIONS),
    # property 4: the reset's clear takes 2 steps, six keys and a repeat 7, the output 8
    # more (a place-full overflow: step 15; the first overflow beyond max_keys: 16)
    "cold_key_set": Spec(cold_key_set.ColdKeySetProperty, cold_key_set.block, 22, 20, 18, 18,
                         cold_key_set.MUTATIONS),
}
