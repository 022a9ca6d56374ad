#!/usr/bin/env python3
"""Where our kernels' warps stall, instruction by instruction, with Nsight Compute (benchmarks/stall_sites.py).

  scripts/stall_sites.py --target sm_90 --workload w1 --workload w2 --workload w3 --workload w4 \\
      --out results/h100/stall-sites-float16.json

For each workload, runs `ncu --section SourceCounters --section WarpStateStats ...` on one call of our kernel (the
driver of benchmarks.dram_bytes: tuned, else default, else generic kernel), exports the per-instruction page and
writes, per kernel: the headline metrics (DRAM and SM throughput, tensor pipe, issue rate, warps an SM), the share
of warp-state samples by instruction class with their top stall reasons, and the hottest instructions. JSON and a
.md report beside it; --keep-source keeps each source page (CSV) beside them. Needs ncu and access to the GPU's
performance counters, as scripts/dram_bytes.py.
"""
import argparse
import datetime
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def report(result: dict) -> str:
    from benchmarks import stall_sites  # noqa: PLC0415
    env = result["env"]
    lines = [f"# Stall sites of our kernels ({result['date']})", "",
             f"GPU: {env.get('gpu')}, driver {env.get('driver')}; {env.get('ncu')}; commit {result['commit']}.",
             f"Command: `{result['command']}`. ncu profiles one call at base clocks with cold caches, so its "
             "durations are longer than the benchmarks' warm ones; the shares are of ncu's warp-state samples "
             "(a warp's state charged to the instruction it waits at; 'selected' = issuing).", ""]
    for row in result["rows"]:
        lines += [f"## {row['workload']} ({row['spec']})", "", f"Kernel: {row.get('which')}.", ""]
        for i, k in enumerate(row["kernels"]):
            lines += [stall_sites.metrics_markdown(k["metrics"]),
                      stall_sites.markdown(k["summary"], f"kernel {i}: {k['summary']['kernel'][:60]}")]
    return "\n".join(lines)


def main(argv=None) -> int:
    from benchmarks import dram_bytes, stall_sites  # noqa: PLC0415  (no torch, no GPU at import)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto", help="sm_80|sm_89|sm_90|auto (a CUDA target)")
    ap.add_argument("--workload", action="append", required=True, help="preset (w1..w4, bert-large, ...) or spec")
    ap.add_argument("--dtype", default=None, choices=["float16", "bfloat16", "both"],
                    help="default: the preset's own (float16; bfloat16 for lm-head)")
    ap.add_argument("--db", default=None, help="tuning database root (default: the repo's tuning_db)")
    ap.add_argument("--out", required=True, help="JSON path (the .md report is written beside it)")
    ap.add_argument("--keep-source", action="store_true", help="keep each kernel's ncu source page (CSV) beside it")
    ap.add_argument("--ncu", default=None, help="path of ncu (default: $NCU, then PATH)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per ncu run")
    args = ap.parse_args(argv)

    from schedules import targets  # noqa: PLC0415
    try:
        target = targets.resolve(args.target)
    except targets.TargetError as err:
        ap.error(str(err))
    if not targets.is_cuda(target):
        ap.error(f"stall_sites.py profiles GPU kernels with Nsight Compute: --target {args.target} resolves to "
                 f"{target}; run it on a GPU machine with --target sm_80|sm_89|sm_90|auto")
    from tir_kernels.workloads import parse  # noqa: PLC0415
    dtypes = ["float16", "bfloat16"] if args.dtype == "both" else [args.dtype]
    try:
        workloads = [parse(w, d) for w in args.workload for d in dtypes]
    except ValueError as err:
        ap.error(str(err))

    out_dir = os.path.dirname(os.path.abspath(args.out))
    rows = []
    try:
        ncu = dram_bytes.find_ncu(args.ncu)
        for wl in workloads:
            print(f"{wl.dir_name}: profiling ...", flush=True)
            rows.append(stall_sites.profile(wl, target, args.db, ncu, args.timeout,
                                            out_dir if args.keep_source else None))
            top = rows[-1]["kernels"][0]["summary"]["classes"][:3]
            print("  " + "; ".join(f"{c['class']} {c['share']:.0%}" for c in top), flush=True)
    except (dram_bytes.NcuError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    result = {"date": datetime.date.today().isoformat(), "commit": dram_bytes._commit(), "env": dram_bytes._env(ncu),
              "command": " ".join(["scripts/stall_sites.py"] + (argv if argv is not None else sys.argv[1:])),
              "rows": rows}
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    md = report(result)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as fh:
        fh.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
