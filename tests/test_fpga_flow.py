"""The synthesis flow's guards (`hotline.fpga.synth`): a place and route over its time limit is
an error naming nextpnr and its log, not a hang."""
import pytest

from hotline.fpga.synth import synth_report
from hotline.hw.stream_fork import StreamFork


def test_place_and_route_time_limit(tmp_path):
    with pytest.raises(RuntimeError, match=r"nextpnr did not finish in .* min \(seed 3.*nextpnr\.log"):
        synth_report(StreamFork(8), "ice40-up5k", name="fork", freq_mhz=30, build_dir=tmp_path,
                     seed=3, pnr_timeout=0.01)
    r = synth_report(StreamFork(8), "ice40-up5k", name="fork", freq_mhz=30, build_dir=tmp_path,
                     seed=3, pnr_timeout=300)
    assert r["seed"] == 3 and r["fmax_mhz"] > 30
