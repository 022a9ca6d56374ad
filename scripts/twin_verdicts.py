#!/usr/bin/env python3
"""Record, per tuned workload, whether its bundle ships the fixed-batch twin, from a GPU benchmark that timed both.

  scripts/bench.py --target sm_90 --suite --also tuned_any_batch --out results/bench.json   # on the GPU
  scripts/twin_verdicts.py results/bench.json [--db tuning_db/]                              # anywhere

The twin is left out of the bundle (build.py) where it was more than --slower-limit slower than the plain
any-batch kernel; the verdict goes into the workload's provenance.json and holds until its best record changes.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from scripts._cli import ArgumentParser, number  # noqa: E402


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_json", nargs="+", help="scripts/bench.py --out results (with --also tuned_any_batch)")
    ap.add_argument("--db", default=None, help="tuning database root (default: the repo's tuning_db/)")
    ap.add_argument("--slower-limit", type=number(0.0), default=None,
                    help="leave the twin out when it is slower than this fraction (default 0.03)")
    args = ap.parse_args(argv)
    from tuning_db import database, twins  # noqa: PLC0415
    limit = twins.SLOWER_LIMIT if args.slower_limit is None else args.slower_limit
    with ap.errors(database.DatabaseError):
        twins.apply(args.bench_json, args.db, limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
