#!/usr/bin/env python3
"""Benchmark the fused op against its peers on one GPU, in one run (benchmarks/ does the work).

  python -m benchmarks.bench --target sm_90 --workload w1 --workload w2 --dtype both --out results/h100/bench.json
  python -m benchmarks.bench --target sm_90 --suite --dtype both --out results/h100/bench.json --compare OLD.json

Systems (--systems, default all): ours = what a bundle built with --workload serves (the best record of
flashgemm/databases/<target>/<workload> when tuned, else the tensor-core space's default schedule, else the generic
kernel; sm_90: the tensor-core kernel of K first in its range of N, and where only the generic kernel would serve;
--also default,tensor_core,generic measures those too, tuned_any_batch the tuned kernel without its fixed-batch twin);
triton = this project's Triton version of the fused op (benchmarks/triton_fused.py, autotuned); torch eager (matmul +
softmax) and torch.compile of it; ort_cuda = ONNX Runtime's CUDA EP on the MatMul + Softmax graph with IOBinding;
ms_default_unfused = Meta-Schedule's default schedules of the unfused op (flashgemm-tune-ms-default). Floors:
HBM = (A + B + bias + mask + P bytes) / the device-to-device copy rate measured in this run; tensor-core =
2·B·M·N·K / the GPU's published dense peak.

Timing protocol (also written into the JSON): inputs random normal (never zeros), every system's output checked
against an FP32 torch reference first (a wrong answer is reported, not timed); 10 warm-up calls, then --reps calls
in groups of 10 back-to-back calls between two CUDA events on the current stream; median and 10th/90th percentiles
of the group means. Systems slower than ~3 s per --reps calls get 1 warm-up and groups of one call (at least 3).
L2 is not flushed between calls. --rounds R times every system R times, alternating, and keeps each system's
median round (all rounds in the JSON): a GPU whose clock drifts within a run (the LM head's does, by up to 20 %)
then weighs on every system alike, where one pass in order would favour the systems timed first.
Output: JSON + markdown + bar chart + roofline (python -m benchmarks.bench_report regenerates them from the JSON);
--compare OLD.json flags our numbers that got more than 5 % slower and exits 1.
"""
import argparse
import datetime
import json
import os
import platform
import sys


from benchmarks.peers import SYSTEMS  # (light: no torch or TVM at import)
from flashgemm.cli.usage import ArgumentParser, count, number

# W1-W4 (shared/baselines.md = the seed models' presets), two model sites with a bias, and the corner cases.
SUITE = ["w1", "w2", "w3", "w4",
         "a=16x12x197x64,b=16x12x197x64,transB=1,scale=0.125,bias=16x1x197x197,name=vit-b16-m197n197k64",
         "a=8x16x512x64,b=8x16x512x64,transB=1,scale=0.125,bias=8x1x512x512,name=bert-large-padmask",
         "decode-m1", "k1", "long-row-n65536"]


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto")
    ap.add_argument("--workload", action="append", default=[], help="preset or spec; repeatable")
    ap.add_argument("--suite", action="store_true", help="the standard set: " + ", ".join(SUITE[:4]) +
                    ", two model sites with a bias, decode-m1, k1, long-row-n65536")
    ap.add_argument("--dtype", default=None, choices=["float16", "bfloat16", "both"],
                    help="default: each workload's own (lm-head: bfloat16, others float16)")
    ap.add_argument("--db", default=None, help="tuning database root (default flashgemm/databases/)")
    ap.add_argument("--ms-db", default=None,
                    help="Meta-Schedule default databases (default flashgemm/databases/ms_default)")
    ap.add_argument("--reps", type=count(1), default=100)
    ap.add_argument("--rounds", type=count(1), default=1,
                    help="time every system this many times, alternating (each row: its median round); for GPUs "
                         "whose clock drifts within a run")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help="comma-separated subset of the systems")
    ap.add_argument("--also", default="",
                    help="comma-separated kernels to measure beside ours: tuned,tuned_any_batch,default,"
                         "tensor_core,generic")
    ap.add_argument("--peak-tflops", type=number(positive=True), default=None,
                    help="override the GPU's published tensor-core peak")
    ap.add_argument("--out", default=None, help="JSON path (.md and plots written beside it)")
    ap.add_argument("--compare", default=None, metavar="OLD.json", help="flag our numbers >5%% slower than OLD's")
    args = ap.parse_args(argv)

    import benchmarks  # noqa: PLC0415
    from benchmarks import peers, report  # noqa: PLC0415
    from flashgemm import targets  # noqa: PLC0415
    from flashgemm.op.workloads import parse  # noqa: PLC0415

    with ap.errors(targets.TargetError, what="--target"):
        target = targets.resolve(args.target)
    if not targets.is_cuda(target):
        ap.error(f"--target {args.target} is {target}: benchmarks.bench measures GPU kernels",
                 fix="run it on a GPU machine with --target sm_80|sm_89|sm_90|auto")
    specs = (SUITE if args.suite else []) + args.workload
    if not specs:
        ap.error("no workloads", fix="name them with --workload (repeatable) or --suite")
    dtypes = ["float16", "bfloat16"] if args.dtype == "both" else [args.dtype]
    with ap.errors(ValueError, what="--workload"):
        workloads = [parse(w, d) for w in specs for d in dtypes]
    also = [k for k in args.also.split(",") if k]
    if set(also) - set(peers.KINDS):
        ap.error(f"--also: unknown kernel kinds {sorted(set(also) - set(peers.KINDS))}",
                 fix=f"choose from {', '.join(peers.KINDS)}")
    systems = [s for s in args.systems.split(",") if s]
    if set(systems) - set(peers.SYSTEMS):
        ap.error(f"--systems: unknown {sorted(set(systems) - set(peers.SYSTEMS))}",
                 fix=f"choose from {', '.join(peers.SYSTEMS)}")
    old = None
    if args.compare:
        try:
            with open(args.compare) as fh:
                old = json.load(fh)
        except (OSError, ValueError) as err:
            ap.error(f"--compare {args.compare}: {err}", fix="give a JSON that python -m benchmarks.bench --out wrote")

    env = peers.gpu_info()
    if old is not None and old.get("env", {}).get("gpu") != env["gpu"]:
        ap.error(f"--compare {args.compare}: taken on {old.get('env', {}).get('gpu')!r}, this is {env['gpu']!r}",
                 fix="compare results from the same GPU model")
    rate = peers.copy_rate_bytes_per_s()
    peak, source = (args.peak_tflops, "--peak-tflops") if args.peak_tflops else peers.peak_tflops(env["gpu"])
    print(f"{env['gpu']} driver {env.get('driver')}: device copy {rate / 1e12:.2f} TB/s (read + write), "
          f"tensor-core peak {peak or 'unknown'} TFLOP/s")
    import tvm  # noqa: PLC0415
    versions = {"tvm": tvm.__version__}
    for mod in ("onnxruntime", "triton"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    rows = []
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "target": target, "commit": benchmarks.commit_id(), "host": platform.node(),
              "env": {**env, **versions, "copy_rate_TBps": rate / 1e12, "peak_tflops": peak,
                      "peak_source": f"published dense peak for {source}" if source else None},
              "protocol": {"warmup": peers.WARMUP, "reps": args.reps, "calls_per_event_pair": peers.INNER,
                           "rounds": args.rounds,
                           "timer": "CUDA events around 10 back-to-back calls; median (p10, p90) of the groups "
                                    "(slow systems: 1 warm-up, groups of 1 call; per row in the JSON)",
                           "l2_flush": False, "inputs": "random normal; bool masks 80% keep",
                           "correctness": "max abs error vs an FP32 torch reference < 0.05, else not timed"},
              "rows": rows}
    for wl in workloads:
        print(f"{wl.dir_name} {wl.spec()}", flush=True)
        rows.append(peers.bench_workload(wl, target, args.db, args.reps, rate, peak, print, also, systems,
                                         ms_db=args.ms_db, rounds=args.rounds))
        if args.out:  # after every workload: a run cut short (timeout, lost machine) keeps what it measured
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as fh:
                json.dump({**result, "partial": True}, fh, indent=1)
    if args.out:
        md, cmp = report.write(result, args.out, old)
    else:
        cmp = report.compare(result, old) if old else None
        md = report.markdown(result, cmp)
    print(md)
    if cmp and cmp["regressed"]:
        print(f"{len(cmp['regressed'])} of our numbers got more than 5 % slower than {args.compare}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
