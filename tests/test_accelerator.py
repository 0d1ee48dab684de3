"""The HotlineAccelerator top in co-simulation: real host tables gathered and scattered by the
RTL's AXI4 master, every stream beat and counter against the model, every row against numpy;
and the sim:// device backend against model:// through the same Device API."""
import pytest

from helpers import real_file
from hotline.data import open_data
from hotline.sim.accelerator_run import gather_run


@pytest.mark.parametrize("simulator,data,width,banks,busy,lanes", [
    ("verilator", "criteo_kaggle/train_head1999.csv.gz", 64, 2, 0.0, 1),
    ("icarus", "synth:criteo-kaggle:200:3", 128, 1, 0.3, 1),
    # the top with lane beats (hotline gather --lanes); 2 lanes also run in the default tier
    # through sim:// (test_sim_device_learner)
    pytest.param("verilator", "criteo_kaggle/train_head1999.csv.gz", 64, 2, 0.3, 4,
                 marks=pytest.mark.slow),
])
def test_gather_scatter_against_numpy_and_model(tmp_path, simulator, data, width, banks, busy,
                                                 lanes, simulator_or_skip):
    simulator_or_skip(simulator)
    ds = open_data(data if data.startswith("synth:") else str(real_file(data)))
    res = gather_run(ds, 256, 64, dim=16 if width == 64 else 8, backend=simulator,
                     data_width=width, banks=banks, busy=busy, build_dir=tmp_path,
                     max_samples=320, verify=True, lanes=lanes)
    assert res["lanes"] == lanes and res["verified"] and res["mismatched_rows"] == 0 and res["mismatched_table_rows"] == 0
    assert res["rows_gathered"] == res["rows_scattered"] == res["counters"]["cold_rows"] > 0
    assert res["errors"] == 0
    assert 0 < res["bus_utilization"] <= 1.0


@pytest.mark.slow
@pytest.mark.ci
def test_soft_reset_mid_gather_leaves_a_fresh_device(tmp_path, simulator_or_skip):
    """CONTROL.soft_reset written while an abandoned session's gather has bursts in flight
    (another hot set loaded, the learner counting, a batch cut in half): the gate lets those
    bursts finish, every counter, CONFIG, STATUS and ERROR_CAUSE reads 0 afterwards, and the
    run that follows matches the model stream for stream and numpy row for row (a CAM, cold
    set, fragmenter or DMA that kept anything, or a burst cut short, would show there)."""
    simulator_or_skip("verilator")
    ds = open_data("synth:criteo-kaggle:200:5")
    res = gather_run(ds, 256, 64, backend="verilator", build_dir=tmp_path, verify=True,
                     soft_reset_first=True)
    assert res["verified"] and res["mismatched_rows"] == 0
    assert set(res["after_reset"].values()) == {0}, res["after_reset"]
    assert res["r_beats_after_request"] > 0, "no burst was in flight at the soft reset"
