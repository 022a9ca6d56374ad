#!/usr/bin/env python3
"""DRAM bytes of one call of the fused op with Nsight Compute, against the unfused pair and the floor.

  python -m benchmarks.bench_dram_bytes --target sm_90 --workload w1 --workload w2 --workload w3 --workload w4 \\
      --out results/h100/dram_bytes.json

For each workload and system (ours, torch_pair = bmm + softmax, torch_eager = matmul, * scale, softmax) runs

  ncu --profile-from-start off --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
      --csv --page raw --print-units base --cache-control all --clock-control base --log-file <tmp>/ncu.log
      python -m benchmarks.dram_bytes --driver --workload SPEC --system SYSTEM --target TARGET

(the driver warms the system up, then runs it once inside cudaProfilerStart/Stop), sums the bytes over the kernels
captured, and compares ours with the unfused pair (goal <= 40%) and with the floor A + B + bias + mask + P
(goal <= 1.2x). Writes JSON and a .md table beside it. Needs ncu and access to the GPU's performance counters
(root, or the nvidia module loaded with NVreg_RestrictProfilingToAdminUsers=0).
"""
import argparse
import json
import os
import sys


from flashgemm.cli.usage import ArgumentParser


def main(argv=None) -> int:
    from benchmarks import dram_bytes  # noqa: PLC0415  (no torch, no GPU at import)

    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    dram_bytes.add_workload_args(ap, timeout_s=3600)
    ap.add_argument("--out", default=None, help="JSON path (a .md table is written beside it)")
    ap.add_argument("--systems", default=",".join(dram_bytes.SYSTEMS),
                    help=f"comma-separated, from {', '.join(dram_bytes.SYSTEMS)}")
    ap.add_argument("--cache-control", default="all", choices=["all", "none"],
                    help="ncu's: flush the caches before each kernel (all, the default) or not")
    ap.add_argument("--require-goals", action="store_true", help="exit 3 when a goal is not met or not measured")
    args = ap.parse_args(argv)

    target, workloads = dram_bytes.cuda_workloads(ap, args, "dram_bytes.py")
    systems = [s for s in args.systems.split(",") if s]
    if not systems or set(systems) - set(dram_bytes.SYSTEMS):
        ap.error(f"--systems {args.systems!r} (choose from {', '.join(dram_bytes.SYSTEMS)})")

    try:
        result = dram_bytes.measure(workloads, target, args.db, print, systems=systems, ncu=args.ncu,
                                    cache_control=args.cache_control, timeout_s=args.timeout)
    except dram_bytes.NcuError as err:
        ap.error(str(err))
    md = dram_bytes.markdown(result)
    print(md)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
        with open(os.path.splitext(args.out)[0] + ".md", "w") as fh:
            fh.write(md)
    if args.require_goals and not all(r["goal_unfused_met"] and r["goal_floor_met"] for r in result["rows"]):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
