#!/usr/bin/env python3
"""Where our kernels' warps stall, instruction by instruction, with Nsight Compute (benchmarks/stall_sites.py).

  python -m benchmarks.bench_stall_sites --target sm_90 --workload w1 --workload w2 --workload w3 --workload w4 \\
      --out results/h100/stall-sites-float16.json

For each workload, runs `ncu --section SourceCounters --section WarpStateStats ...` on one call of our kernel (the
driver of benchmarks.dram_bytes: tuned, else default, else generic kernel), exports the per-instruction page and
writes, per kernel: the headline metrics (DRAM and SM throughput, tensor pipe, issue rate, warps an SM), the share
of warp-state samples by instruction class with their top stall reasons, and the hottest instructions. JSON and a
.md report beside it; --keep-source keeps each source page (CSV) beside them. Needs ncu and access to the GPU's
performance counters, as python -m benchmarks.bench_dram_bytes.
"""
import argparse
import datetime
import json
import os
import sys

from benchmarks import commit_id
from flashgemm.cli.usage import ArgumentParser


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

    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    dram_bytes.add_workload_args(ap, timeout_s=1800)
    ap.add_argument("--out", required=True, help="JSON path (the .md report is written beside it)")
    ap.add_argument("--keep-source", action="store_true", help="keep each kernel's ncu source page (CSV) beside it")
    args = ap.parse_args(argv)
    target, workloads = dram_bytes.cuda_workloads(ap, args, "stall_sites.py")

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
        ap.error(str(err))
    result = {"date": datetime.date.today().isoformat(), "commit": commit_id(), "env": dram_bytes._env(ncu),
              "command": " ".join(["python -m benchmarks.bench_stall_sites"] + (argv if argv is not None else sys.argv[1:])),
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
