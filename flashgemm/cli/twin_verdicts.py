#!/usr/bin/env python3
"""Record, per tuned workload, whether its bundle ships the fixed-batch twin, from a GPU benchmark that timed both.

  python -m benchmarks.bench --target sm_90 --suite --also tuned_any_batch --out bench.json   # on the GPU
  flashgemm-twin-verdicts bench.json [--db flashgemm/databases/]                              # anywhere

The twin is left out of the bundle (flashgemm-build) where it was more than --slower-limit slower than the plain
any-batch kernel; the verdict goes into the workload's provenance.json and holds until its best record changes.
"""
import argparse
import os
import sys


from flashgemm.cli.usage import ArgumentParser, number


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_json", nargs="+",
                    help="python -m benchmarks.bench --out results (with --also tuned_any_batch)")
    ap.add_argument("--db", default=None, help="tuning database root (default: the repo's flashgemm/databases/)")
    ap.add_argument("--slower-limit", type=number(0.0), default=None,
                    help="leave the twin out when it is slower than this fraction (default 0.03)")
    args = ap.parse_args(argv)
    from flashgemm.tune import database  # noqa: PLC0415
    from flashgemm.bundle import twins
    limit = twins.SLOWER_LIMIT if args.slower_limit is None else args.slower_limit
    with ap.errors(database.DatabaseError):
        twins.apply(args.bench_json, args.db, limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
