#!/usr/bin/env python3
"""Accuracy table of the fused op: max abs / max rel error of P per dtype and variant against the FP64 NumPy
reference and against ONNX Runtime's FP32 run of the unfused graph, with the seed's and the tests' tolerances.

  python -m benchmarks.bench_accuracy           # target auto (llvm without a GPU), both dtypes, all cases
  python -m benchmarks.bench_accuracy --target sm_90 --out results/h100/accuracy.json    # also writes accuracy.md
  python -m benchmarks.bench_accuracy --target llvm --dtype float16 --case plain --case masked-rows

The protocol (inputs, which kernel, error definitions) is benchmarks/accuracy.py's docstring; it is also written
into the JSON ("tolerances"). The exit status is 1 when a case fails the tests' tolerance or errors, 0 otherwise
(the seed tolerance is reported, not enforced: bf16 cannot meet it).
"""
import argparse
import json
import os
import sys


from flashgemm.cli.usage import ArgumentParser


def main(argv=None) -> int:
    from benchmarks import accuracy  # noqa: PLC0415

    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto", help="auto | llvm | sm_80 | sm_89 | sm_90 (default auto)")
    ap.add_argument("--dtype", default="both", choices=["float16", "bfloat16", "both"])
    ap.add_argument("--case", action="append", default=None, metavar="NAME",
                    help=f"only these cases (repeatable): {', '.join(accuracy.CASE_NAMES)}")
    ap.add_argument("--db", default=None, help="tuning database root (default: the committed flashgemm/databases/)")
    ap.add_argument("--out", default=None, help="JSON path (a .md table is written beside it)")
    args = ap.parse_args(argv)

    from flashgemm import targets  # noqa: PLC0415
    with ap.errors(targets.TargetError, what="--target"):
        target = targets.resolve(args.target)
    dtypes = list(accuracy.DTYPES) if args.dtype == "both" else [args.dtype]
    with ap.errors(ValueError, what="--case"):
        cases = accuracy.default_cases(dtypes, args.case)

    result = accuracy.accuracy_table(target, cases, log=print, db_root=args.db)
    md = accuracy.markdown(result)
    print(md)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1, allow_nan=False)  # non-finite numbers are strings already
        md_path = os.path.splitext(args.out)[0] + ".md"
        with open(md_path, "w") as fh:
            fh.write(md)
        print(f"wrote {args.out} and {md_path}")
    failed = [f"{r['dtype']} {r['case']}" for r in result["rows"]
              if "error" in r or not r["vs_fp64"]["test_pass"]]
    if failed:
        print(f"FAILED the tests' tolerance: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
