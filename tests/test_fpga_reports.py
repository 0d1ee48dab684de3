"""Reading nextpnr's reports (`hotline.fpga.synth`), on hand-made reports: no synthesis."""
from hotline.fpga.synth import _late_endpoints


def test_late_endpoints_leave_out_untimed_reset_paths():
    """Set/reset inputs, and arrivals later than nextpnr's own critical path, come from the
    reset pin, which nextpnr does not time: only the other late register inputs are listed."""
    clk = "posedge clk"

    def endpoint(cell, port, arrival):
        return {"cell": cell, "port": port, "delay": [0.0, arrival], "event": clk}
    rep = {
        "fmax": {"clk": {"achieved": 120.0, "constraint": 125.0}},
        "critical_paths": [
            {"from": clk, "to": clk, "path": [{"delay": 0.5}, {"delay": 7.8}]},
            {"from": "<async>", "to": clk, "path": [{"delay": 11.0}]},
        ],
        "detailed_net_timings": [{"event": clk, "endpoints": [
            endpoint("a_TRELLIS_FF_Q_1", "DI", 8.3), endpoint("a_TRELLIS_FF_Q_2", "DI", 8.1),
            endpoint("b_TRELLIS_FF_Q", "LSR", 9.0), endpoint("c_TRELLIS_FF_Q", "DI", 10.5),
            endpoint("d_TRELLIS_FF_Q", "DI", 7.9)]}],
    }
    assert _late_endpoints(rep) == {"late_endpoints": 2,
                                    "worst_late": [{"register": "a", "arrival_ns": 8.3}]}
