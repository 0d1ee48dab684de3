"""``python -m hotline.sim.formal [--depth N] [--out DIR]`` (make formal): every property at
its full depth, then every mutant, which must fail with a counterexample VCD. One line per
run; exit 1 if a property fails or a mutant passes, 2 on bad arguments or a missing tool."""
import argparse
import sys

from .mutation import mutant
from .properties import PROPERTIES
from .runner import FormalToolError, prove


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hotline.sim.formal",
                                     description="Run the formal tier (docs/verification.md).")
    parser.add_argument("--depth", type=int, default=None,
                        help="BMC depth for every property (default: each one's full depth)")
    parser.add_argument("--out", default="build/formal", help="work folder (default %(default)s)")
    args = parser.parse_args(argv)
    if args.depth is not None and args.depth < 1:
        parser.exit(2, f"{parser.prog}: --depth must be at least 1, not {args.depth}\n")
    try:
        return 1 if _run_all(args) else 0
    except FormalToolError as e:
        print(f"{parser.prog}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2


def _run_all(args):
    """Every property, then its mutants; the number of failures (a mutant passing is one)."""
    bad = 0
    for name, spec in PROPERTIES.items():
        r = prove(spec.wrapper(), name, args.depth or spec.depth, cover=True,
                  induction=spec.induction, workdir=args.out)
        print(f"{r.status:8} {r.seconds:7.1f} s  {r.message}", flush=True)
        bad += not r.holds
        for mname, (old, new) in spec.mutations.items():
            r = prove(spec.wrapper(mutant(spec.block, old, new)), f"{name}-{mname}",
                      args.depth or spec.mutant_depth, workdir=args.out)
            caught = r.status == "failed" and r.vcd.exists()
            print(f"{'caught' if caught else 'MISSED':8} {r.seconds:7.1f} s  {r.message}",
                  flush=True)
            bad += not caught
    return bad


if __name__ == "__main__":
    sys.exit(main())
