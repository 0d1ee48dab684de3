"""RowDMA throughput bench: AXI read/write channel utilisation behind a fixed-latency memory.

The memory is `tb_row_dma.LatencyRam` (cocotbext-axi's AxiRam has no latency knob): every read
burst's first beat comes ``latency`` cycles after its AR handshake, every write response
``latency`` cycles after the burst's last W beat; bursts are pipelined (up to 64 reads
outstanding), never stalled otherwise. One batch gathers ``rows`` distinct random rows of one
table (``row_bytes`` each, 4 KiB-aligned base) into staging slots, then scatters them back.

``read_utilization`` = R beats / cycles from the first AR handshake to the last B handshake
(1.0 = the read channel busy every cycle); ``write_utilization`` likewise for W beats. Every
run is checked against `RowDMAModel` (addresses, done records, counters, memory).

``python -m hotline.sim.bench_row_dma [--json OUT]`` measures 64 B and 256 B rows at 64, 128
and 256-bit data width (one Verilator build per width).
"""
import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from hotline.hw.row_dma import RowDMA
from hotline.sim import tb_row_dma as tb

TABLE = 0x0010_0000
STAGING = 0x0400_0000


def scenario(params, row_bytes, rows, latency, direction, seed=0):
    rng = np.random.default_rng(seed)
    table_rows = 4 * rows
    sc = tb.Scenario(f"bench_{direction}_{params['data_width']}_{row_bytes}", params,
                     latency=(latency, latency), seed=seed)
    sc.desc(0, TABLE, table_rows, row_bytes)
    sc.memory(TABLE, rng.integers(0, 256, table_rows * row_bytes, dtype=np.uint8))
    sc.staging(STAGING, row_bytes, rows, 1).region(STAGING, rows * row_bytes)
    keys = rng.choice(table_rows, rows, replace=False)
    sc.batch(direction, 0, keys)
    return sc


def _measure(sc, res):
    exp = tb.expect(sc)
    if (res["ar"], res["aw"], res["done"]) != (exp["ar"], exp["aw"], exp["done"]) \
            or res["memory"] != exp["memory"] or res["violations"]:
        raise AssertionError(f"{sc.name}: the RTL disagrees with the model")
    st = res["stats"]
    span = st["last_b"] - st["first_ar"] + 1
    rows = exp["done"][0][0]
    return {"cycles": span, "rows": rows, "r_beats": st["r_beats"], "w_beats": st["w_beats"],
            "read_utilization": st["r_beats"] / span, "write_utilization": st["w_beats"] / span,
            "bursts": len(res["ar"]), "cycles_per_row": span / rows,
            "sim_cycles_per_s": res["cycles"] / res["wall_s"]}


def bench_sweep(data_width, row_bytes_list, latency=32, rows=2048, directions=("gather",),
                build_dir=None, simulator="verilator", **engine):
    """One build of RowDMA(data_width); one measurement per (row_bytes, direction)."""
    dma = RowDMA(None, data_width=data_width, **engine)
    params = {"direction": None, "data_width": data_width, "addr_width": dma.addr_width,
              "num_tables": dma.num_tables, "row_bits": dma.row_bits,
              "max_burst_beats": dma.max_burst_beats}
    own = build_dir is None
    tmp = tempfile.TemporaryDirectory(prefix="bench_row_dma_") if own else None
    build_dir = Path(tmp.name if own else build_dir)
    try:
        cases = [(rb, d, scenario(params, rb, rows, latency, d))
                 for rb in row_bytes_list for d in directions]
        results = tb.run(dma, [sc for _, _, sc in cases], build_dir=build_dir, simulator=simulator)
        out = []
        for (rb, d, sc), res in zip(cases, results):
            r = _measure(sc, res)
            out.append({"data_width": data_width, "row_bytes": rb, "direction": d,
                        "latency": latency, **r})
        return out
    finally:
        if own:
            tmp.cleanup()


def bench(data_width, row_bytes, latency=32, rows=2048, **kwargs):
    """Gather ``rows`` rows of ``row_bytes`` at ``data_width``; the measurement dict."""
    return bench_sweep(data_width, [row_bytes], latency=latency, rows=rows, **kwargs)[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--latency", type=int, default=32)
    ap.add_argument("--widths", default="64,128,256")
    ap.add_argument("--row-bytes", default="64,256")
    ap.add_argument("--scatter", action="store_true", help="also measure the scatter direction")
    args = ap.parse_args(argv)
    dirs = ("gather", "scatter") if args.scatter else ("gather",)
    results = []
    for dw in (int(w) for w in args.widths.split(",")):
        results += bench_sweep(dw, [int(r) for r in args.row_bytes.split(",")],
                               latency=args.latency, rows=args.rows, directions=dirs)
    for r in results:
        print(f"{r['data_width']:4d}-bit {r['row_bytes']:4d} B {r['direction']:8s} "
              f"read {r['read_utilization']:.3f} write {r['write_utilization']:.3f} "
              f"({r['rows']} rows, {r['cycles']} cycles, {r['cycles_per_row']:.2f} cycles/row)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"row_dma": results}, indent=1))
    return results


if __name__ == "__main__":
    main()
