#!/usr/bin/env python3
"""Build the runtime bundle of a target: best tuned kernels + generic kernels -> one .so, a manifest,
and the ONNX Runtime custom-op library, in build/<target>/ (or --out).

  scripts/build.py --target llvm
  scripts/build.py --target sm_90 --db tuning_db/

Then: ort_integration.session_options("build/llvm") registers the op library on a SessionOptions.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto", help="auto | llvm | sm_80 | sm_89 | sm_90 (default: auto)")
    ap.add_argument("--db", default=None, help="tuning database root (default: the repo's tuning_db/)")
    ap.add_argument("--out", default=None, help="bundle directory (default: build/<target>)")
    ap.add_argument("--no-native", action="store_true", help="skip building the custom-op library")
    args = ap.parse_args(argv)

    from ort_integration import kernel_library, native  # noqa: PLC0415
    from schedules import targets  # noqa: PLC0415
    from tuning_db import best, database  # noqa: PLC0415

    try:
        target = targets.resolve(args.target)
        out = args.out or os.path.join(ROOT, "build", target)
        tuned = best.load_all(target, args.db)
        kernel_library.export_bundle(out, target, tuned)
        if not args.no_native:
            native.build_custom_op_library(out, with_cuda=targets.is_cuda(target))
    except (database.DatabaseError, targets.TargetError, ValueError) as err:
        print(f"build.py: error: {err}", file=sys.stderr)
        return 2
    print(f"[build] bundle ready in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
