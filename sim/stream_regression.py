"""Run a stream-in / stream-out component under cocotb against expected outputs.

``run(component, toplevel, inputs, outputs, build_dir, simulator)`` exports the component,
writes the spec for ``hotline.sim.tb_streams`` and returns its result dict (cycles, seconds).
Payload lists hold dicts (packed with the port's layout here) or ints.
"""
import json
from pathlib import Path

from .runner import run_cocotb


def pack(port, payloads):
    layout = port.payload.shape()
    if not hasattr(layout, "const"):
        return [int(p) for p in payloads]
    return [p if isinstance(p, int) else layout.const(p).as_value().value for p in payloads]


def run(component, toplevel, inputs, outputs, build_dir, simulator="verilator", busy_in=0.0,
        busy_out=0.0, resets=(), drain_cycles=10000, waves=False, phases=None, quiet_cycles=64):
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "inputs": {n: pack(getattr(component, n), p) for n, p in inputs.items()},
        "outputs": {n: pack(getattr(component, n), p) for n, p in outputs.items()},
        "busy_in": busy_in, "busy_out": busy_out, "resets": list(resets),
        "drain_cycles": drain_cycles, "phases": phases, "quiet_cycles": quiet_cycles,
    }
    spec_path, result_path = build_dir / "spec.json", build_dir / "result.json"
    spec_path.write_text(json.dumps(spec))
    result_path.unlink(missing_ok=True)
    run_cocotb(component, toplevel, "hotline.sim.tb_streams", build_dir, simulator,
               extra_env={"HOTLINE_TB_SPEC": str(spec_path), "HOTLINE_TB_RESULT": str(result_path)},
               waves=waves)
    return json.loads(result_path.read_text())
