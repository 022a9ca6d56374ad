#!/usr/bin/env python3
"""Regenerate a benchmark's markdown table and plots from its committed JSON (python -m benchmarks.bench's output).

  python -m benchmarks.bench_report results/h200/proof-2026-11-29/bench-w1.json [--compare OLD.json]

Writes <name>.md, <name>-bars.png and <name>-roofline.png beside the JSON; with --compare, also flags our
numbers more than 5 % slower than the old file's (exit status 1 when any are).
"""
import argparse
import json
import os
import sys


from flashgemm.cli.usage import ArgumentParser


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", help="a python -m benchmarks.bench JSON")
    ap.add_argument("--compare", default=None, metavar="OLD.json")
    args = ap.parse_args(argv)
    from benchmarks import report  # noqa: PLC0415
    loaded = []
    fix = "give a JSON that python -m benchmarks.bench --out wrote"
    for path in [args.result] + ([args.compare] if args.compare else []):
        with ap.errors(OSError, ValueError, what=path, fix=fix):
            with open(path) as fh:
                loaded.append(json.load(fh))
        if not (isinstance(loaded[-1], dict) and isinstance(loaded[-1].get("rows"), list) and "env" in loaded[-1]):
            ap.error(f"{path} is not a benchmark result (no rows and env)", fix=fix)
    try:
        md, cmp = report.write(loaded[0], args.result, loaded[1] if args.compare else None)
    except ValueError as err:
        ap.error(str(err))
    print(md)
    return 1 if cmp and cmp["regressed"] else 0


if __name__ == "__main__":
    sys.exit(main())
