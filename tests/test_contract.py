"""The contract layer (`hotline.contract`): each fact defined once and the same everywhere."""
import dataclasses
import subprocess
import sys
import warnings

import numpy as np
import pytest
from amaranth.hdl import UnusedElaboratable

from hotline.contract import cam, config, keys, link, streams
from hotline.contract.beats import learner_sample
from hotline.contract.config import AcceleratorConfig, max_batch_lookups
from hotline.contract.errors import HotlineError
from hotline.hw.accelerator import HotlineAccelerator

CONFIGS = [AcceleratorConfig(),
           AcceleratorConfig(cam_entries=2048, cold_capacity=2048, cold_max_keys=1024,
                             max_batch_samples=256),
           AcceleratorConfig.for_workload(300, 100, 2600),
           AcceleratorConfig(lanes=2), AcceleratorConfig.for_workload(300, 100, 2600, lanes=4)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["product", "board", "workload", "lanes2", "lanes4"])
def test_stream_layouts_are_the_tops_ports(cfg):
    """`stream_layouts` (no gateware built) = the payload shapes of the top built from the same
    configuration, for every stream the host sees."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        top = HotlineAccelerator.from_config(cfg)
    layouts = streams.stream_layouts(cfg)
    assert tuple(layouts) == streams.STREAMS
    for name, layout in layouts.items():
        assert getattr(top, name).payload.shape() == layout, name


def test_pack_unpack_and_batch_end():
    layout = streams.stream_layouts(AcceleratorConfig())["batch_keys"]
    assert list(layout.members)[0] == streams.BATCH_END
    beats = streams.pack(layout, end=[0, 0, 1], key=[7, 0xFFFFFFFF, 0], cold=[0, 0, 2])
    assert [streams.batch_end(b) for b in beats] == [False, False, True]
    assert [streams.batch_key(b) for b in beats[:2]] == [7, 0xFFFFFFFF]
    f = streams.unpack(layout, beats)
    assert f["key"].tolist() == [7, 0xFFFFFFFF, 0] and f["cold"].tolist() == [0, 0, 2]


def test_lane_beats_group_a_batch_and_round_trip():
    """Lane beats hold up to L consecutive lookups of one batch; packing and unpacking give
    the entries back, with their beat; at one lane the bits are the one-lookup layout's; on
    the link a beat takes whole u64 words."""
    key, eos, eob, empty = streams.lookup_beats([5, 6, 7, 8, 9], [0, 2, 2, 3, 5], 3)
    # samples: [5, 6] [] [7] | [8, 9]; batches of 3 samples: the first closes at 7
    assert streams.lane_groups(eob, 4).tolist() == [0, 0, 0, 0, 1, 1]
    assert streams.lane_groups(eob, 2).tolist() == [0, 0, 1, 1, 2, 2]
    assert streams.lane_groups(eob, 1).tolist() == list(range(6))
    rng = np.random.default_rng(0)
    for lanes in config.LANES:
        layout = streams.lookup_layout(32, lanes)
        k = rng.integers(0, 1 << 32, 500)
        e, s, b = rng.random(500) < 0.1, rng.random(500) < 0.3, rng.random(500) < 0.02
        group = streams.lane_groups(b, lanes)
        beats = streams.lane_pack(layout, group, key=k, eos=s, eob=b, empty=e)
        assert len(beats) == group[-1] + 1 and max(beats) < 1 << layout.size
        fields, beat = streams.lane_unpack(layout, beats)
        assert (fields["key"] == k).all() and (fields["empty"] == e).all()
        assert (beat == group).all()
        assert link.unpack_beats(link.pack_beats(beats, layout.size), layout.size) == beats
        if lanes == 1:
            assert beats == streams.pack(layout, key=k, eos=s, eob=b, empty=e).tolist()
    assert streams.lane_layout({"hot": 1, "slot": 15}, 1).size == 16
    with pytest.raises(ValueError, match="more than 2 entries"):
        streams.lane_pack(streams.lookup_layout(32, 2), [0, 0, 0], key=[1, 2, 3])
    with pytest.raises(HotlineError, match="lanes must be one of 1, 2, 4, not 3"):
        AcceleratorConfig(lanes=3)


def test_the_learner_samples_one_lane_beat_in_l_rotating_per_batch():
    keys = np.arange(10, 20)
    offsets = np.r_[0, np.arange(1, 11)]          # 10 one-lookup samples, one batch
    assert learner_sample(keys, offsets, 1)[0].tolist() == keys.tolist()
    got, state = learner_sample(keys, offsets, 2)  # beats [10 11] [12 13] ...: 0, 2, 4
    assert got.tolist() == [10, 11, 14, 15, 18, 19] and state == (1, 0)
    got, state = learner_sample(keys, offsets, 2, state)  # the second batch: beats 1, 3
    assert got.tolist() == [12, 13, 16, 17] and state == (0, 1)
    # 4 lanes, third batch (beats of 4, 4, 2): beat 2, but it comes 2 beats after the last
    # beat taken (1 beat between): skipped
    assert learner_sample(keys, offsets, 4, (2, 0))[0].size == 0
    assert learner_sample(keys, offsets, 4, (2, 1))[0].tolist() == [18, 19]
    assert learner_sample(keys, offsets, 4, (1, 3))[0].tolist() == [14, 15, 16, 17]


@pytest.mark.parametrize("lanes", [2, 4])
def test_the_learner_sees_every_lane_position_of_a_periodic_stream(lanes):
    """Samples of L x L lookups: every sample starts a lane beat at lane 0, so a fixed beat
    phase would show the learner the same features in every batch. Over batches it sees every
    feature about equally, and never two taken beats closer than L beats."""
    features = lanes * lanes
    n, batch = 64, 16
    keys = np.tile(np.arange(features), n)     # key = feature position in its sample
    offsets = np.arange(n + 1) * features
    seen, state, last = np.zeros(features, int), None, None
    for b in range(0, n, batch):
        o = offsets[b:b + batch + 1] - offsets[b]
        counted, state = learner_sample(keys[offsets[b]:offsets[b + batch]], o, lanes, state)
        seen += np.bincount(counted, minlength=features)
    assert (seen > 0).all() and seen.max() <= 2 * seen.min()
    # spacing: the beats taken over a whole stream of ragged batches
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 2 * lanes, 400)
    offsets = np.r_[0, np.cumsum(lengths)]
    keys = np.arange(offsets[-1])
    state, taken, base = None, [], 0
    for b in range(0, 400, 7):
        o = offsets[b:b + 8] - offsets[b]
        batch_keys = keys[offsets[b]:offsets[min(b + 7, 400)]]
        counted, state = learner_sample(batch_keys, o, lanes, state)
        _, _, eob, empty = streams.lookup_beats(batch_keys, o, len(o) - 1)
        group = streams.lane_groups(eob, lanes) + base
        taken += np.unique(group[~empty][np.isin(batch_keys, counted)]).tolist()
        base = int(group[-1]) + 1
    assert np.diff(taken).min() >= lanes
    assert 0.7 / lanes < len(taken) / base <= 1 / lanes


def test_lookup_beats_mark_samples_and_batches():
    key, eos, eob, empty = streams.lookup_beats([5, 6, 7], [0, 2, 2, 3], 2)
    assert key.tolist() == [5, 6, 0, 7] and empty.tolist() == [False, False, True, False]
    assert eos.tolist() == [False, True, True, True]
    assert eob.tolist() == [False, False, True, True]


def test_keys_round_trip():
    t, r = np.array([0, 3, keys.MAX_TABLES - 1]), np.array([0, 12345, keys.MAX_ROWS - 1])
    k = keys.make_keys(t, r)
    assert k.dtype == np.uint32 and (k[1] == (3 << keys.ROW_BITS | 12345))
    tt, rr = keys.split_keys(k)
    assert tt.tolist() == t.tolist() and rr.tolist() == r.tolist()


def test_slot_widths_match_the_blocks():
    from hotline.hw.cold_key_set import ColdKeySet
    from hotline.hw.popularity_cam import PopularityCAM
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        for entries, stash in ((64, 4), (1024, 4), (16384, 4), (16384, 1)):
            assert PopularityCAM(entries, stash=stash).slot_width == \
                config.hot_slot_width(entries, stash)
        for max_keys in (1, 2, 1024, 8192, 8193):
            assert ColdKeySet(1024, max_keys=max_keys).slot_width == \
                config.cold_slot_width(max_keys)


def test_cam_codes_are_one_definition():
    from hotline.contract.regmap import HOTLINE_REGISTERS
    from hotline.contract.shapes import CAMOp, CAMStatus
    for plain, shaped in ((cam.CAMOp, CAMOp), (cam.CAMStatus, CAMStatus)):
        assert [(m.name, int(m)) for m in plain] == [(m.name, int(m)) for m in shaped]
    assert dict(HOTLINE_REGISTERS.CAM_RESP.field("status").values)["full"] == cam.CAMStatus.FULL


def test_host_runtime_needs_no_amaranth_for_model_and_registers():
    """The register view and the model:// device import no Amaranth (serial:// and sim://
    import only `amaranth.lib.data` for the stream layouts, never build gateware)."""
    code = ("import sys, numpy as np, hotline, hotline.host.registers\n"
            "from hotline.contract import AcceleratorConfig\n"
            "from hotline.host import HostMemory\n"
            "cfg = AcceleratorConfig(cam_entries=256, cold_capacity=256, cold_max_keys=64,\n"
            "                        max_batch_samples=16)\n"
            "with HostMemory(1 << 16) as mem, hotline.open('model://', config=cfg, memory=mem) as d:\n"
            "    d.load_hot_set(np.arange(4, dtype=np.uint32))\n"
            "    d.push_batch(np.arange(8, dtype=np.uint32), np.ones(8, int))\n"
            "    assert d.pull_batch().hot.sum() == 4\n"
            "assert 'amaranth' not in sys.modules, 'amaranth imported'\n"
            "import hotline.host.serial_device\n"
            "assert 'hotline.hw' not in sys.modules and 'hotline.sim' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_product_configuration_is_one_definition():
    """`PRODUCT` is `AcceleratorConfig()`, and every other place that states the product's
    geometry takes it from there: the ECP5 flow's accelerator and cold-key set
    (`hotline.fpga.blocks`), and the constructor defaults of the gateware blocks and of the
    models."""
    from hotline.fpga.blocks import BLOCKS
    from hotline.hw.cold_key_set import ColdKeySet
    from hotline.hw.fragmenter import Fragmenter
    from hotline.hw.popularity_cam import PopularityCAM
    from hotline.model.cold_key_set import ColdKeySetModel
    from hotline.model.popularity_cam import PopularityCAMModel

    def geometry(frag):
        cam, cold = frag.cam, frag.cold
        return AcceleratorConfig(cam.entries, cam.ways, cam.stash, cam.max_kicks, cold.capacity,
                                 cold.ways, cold.stash, cold.max_keys, cold.epoch_bits,
                                 frag.max_batch_samples)

    assert config.PRODUCT == AcceleratorConfig()
    # the epoch bits left open resolve by lane count: the product's as built
    built = dataclasses.replace(config.PRODUCT,
                                cold_epoch_bits=config.PRODUCT.cold_kwargs()["epoch_bits"])
    assert built.cold_epoch_bits == config.COLD_EPOCH_BITS[config.PRODUCT.lanes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        top = BLOCKS["accelerator"]("ecp5-85f")
        assert geometry(top.fragmenter) == built
        assert (top.dma.data_width, top.dma.num_tables) == (64, 32)
        cold = BLOCKS["cold-key-set"]("ecp5-85f")
        assert (cold.capacity, cold.max_keys, cold.epoch_bits) == \
            (config.PRODUCT.cold_capacity, config.PRODUCT.cold_max_keys,
             config.PRODUCT.cold_kwargs()["epoch_bits"])
        assert BLOCKS["cam"]("ecp5-85f").entries == config.PRODUCT.cam_entries
        assert geometry(Fragmenter()) == built
        c = ColdKeySet()
        assert (c.capacity, c.ways, c.stash, c.max_keys, c.epoch_bits, c.partitions) == tuple(
            config.PRODUCT.cold_kwargs().values())
        m = PopularityCAM()
        assert (m.entries, m.ways, m.stash, m.max_kicks) == tuple(
            config.PRODUCT.cam_kwargs().values())
    c = ColdKeySetModel()
    assert (c.capacity, c.ways, c.stash, c.max_keys, c.partitions) == tuple(
        v for k, v in config.PRODUCT.cold_kwargs().items() if k != "epoch_bits")
    m = PopularityCAMModel()
    assert (m.entries, m.ways, m.stash_size, m.max_kicks) == tuple(
        config.PRODUCT.cam_kwargs().values())


def test_max_batch_lookups_from_an_array_or_an_indexable_and_a_prefix():
    """Against every batch counted by hand; a streamed dataset's offsets (indexable by an int
    only) give the same; ``samples`` limits it to the first samples (the train split)."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 40, 1001)
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)

    class IntOnly:
        def __len__(self):
            return len(offsets)

        def __getitem__(self, i):
            assert isinstance(i, int)
            return offsets[i]

    for batch in (1, 7, 64, 1000, 5000):
        for samples in (None, 1, 500, 1001):
            n = 1001 if samples is None else samples
            want = max(int(lengths[s:min(s + batch, n)].sum()) for s in range(0, n, batch))
            assert max_batch_lookups(offsets, batch, samples) == want
            assert max_batch_lookups(IntOnly(), batch, samples) == want
    assert max_batch_lookups(offsets[:1], 4) == 0
