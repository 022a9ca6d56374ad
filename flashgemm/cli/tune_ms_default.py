#!/usr/bin/env python3
"""Tune the peer "Meta-Schedule's default auto-scheduling of the UNFUSED op" (flashgemm/tune/ms_default.py): the op as
two kernels (GEMM with a scale+bias epilogue, then a masked row softmax), each tuned with Meta-Schedule's default
design space for the target, evolutionary search + XGBoost, the trial budget shared by the two (gradient task
scheduler). Compare its best gemm + softmax time with our fused kernel's (flashgemm-tune): that is what our
design space buys.

  flashgemm-tune-ms-default --target sm_90 --workload w2 --workload w1            # on the GPU machine
  flashgemm-tune-ms-default --target llvm --workload demo --trials 16
  flashgemm-tune-ms-default --target sm_90 --workload w2 --check                  # compile-only, any machine
  flashgemm-tune-ms-default --target sm_90 --workload w2 --prune 10                # before committing

Records go to flashgemm/databases/ms_default/<target>/<workload>/ (--db ROOT: ROOT/<target>/<workload>/); running again
continues toward --trials (a total per workload, both kernels together). benchmarks/peers.py
(ms_default_unfused) loads them. --check generates the default space of each kernel and compiles one sampled
candidate with nvcc (through a stub libcuda on a machine without a driver, as flashgemm-build does); nothing runs.
"""
import argparse
import os
import subprocess
import sys


from flashgemm.cli.usage import ArgumentParser, count


def _fused_best(target: str, wl) -> str:
    """Our fused kernel's tuned time for the same workload, from the committed database, when there is one."""
    import json  # noqa: PLC0415
    from flashgemm.tune import database  # noqa: PLC0415
    prov = database.default_root() / target / wl.dir_name / "provenance.json"
    try:
        secs = json.load(open(prov)).get("best_secs")
    except (OSError, ValueError):
        return ""
    return f"; our fused kernel (flashgemm/databases/{target}/{wl.dir_name}): {secs * 1e6:.1f} us" if secs else ""


def main(argv=None) -> int:
    from flashgemm.op.workloads import PRESETS  # noqa: PLC0415  (keep --help fast)

    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto", help="auto | llvm | sm_80 | sm_89 | sm_90 (default: auto)")
    ap.add_argument("--workload", action="append", default=[],
                    help=f"preset ({', '.join(sorted(PRESETS))}, w1..w4) or a spec string; repeatable")
    ap.add_argument("--dtype", default=None, choices=["float16", "bfloat16", "both"],
                    help="override the workload's dtype; 'both' tunes each")
    ap.add_argument("--trials", type=int, default=64,
                    help="total candidates per workload, both kernels together (default 64)")
    ap.add_argument("--db", default=None, help="database root (default: the repo's flashgemm/databases/ms_default)")
    ap.add_argument("--workers", type=count(1), default=None, help="builder processes (default: all cores, at most 16)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="stop after the batch in flight once this much time has passed, per workload (a slice of a "
                         "long run; running again continues). SIGTERM / SIGINT stop the same way; a second aborts")
    ap.add_argument("--prune", type=int, default=None, metavar="K",
                    help="instead of tuning: keep only the K fastest valid records per kernel in each workload's "
                         "database (what gets committed); the trial counts stay, so tuning again still continues "
                         "toward --trials. No device needed")
    ap.add_argument("--check", action="store_true",
                    help="compile-only: generate each kernel's default space and build one sampled candidate; no "
                         "device needed, nothing is measured or written")
    args = ap.parse_args(argv)
    if args.trials < 1:
        ap.error("--trials must be at least 1")
    if args.max_minutes is not None and args.max_minutes <= 0:
        ap.error("--max-minutes must be positive")
    if not args.workload:
        ap.error("give at least one --workload")
    if args.prune is not None and (args.prune < 1 or args.check):
        ap.error("--prune takes K >= 1 and does not go with --check")

    from flashgemm.codegen import cuda_stub  # noqa: PLC0415
    from flashgemm import targets
    from flashgemm.op.workloads import parse  # noqa: PLC0415

    try:
        target = targets.resolve(args.target)
        dtypes = ["float16", "bfloat16"] if args.dtype == "both" else [args.dtype]
        workloads = [parse(w, d) for w in args.workload for d in dtypes]
    except (ValueError, targets.TargetError) as err:
        ap.error(str(err))

    if args.prune is not None:
        from flashgemm.tune import ms_default  # noqa: PLC0415
        bad = 0
        for wl in workloads:
            try:
                ms_default.prune_unfused(wl, target, ms_default.workload_dir(args.db, target, wl.dir_name), args.prune,
                                         log=lambda msg: print(msg, flush=True))
            except (ms_default.TuningError, NotImplementedError, ValueError) as err:
                print(f"flashgemm-tune-ms-default: error: {err}", file=sys.stderr)
                bad += 1
        return 2 if bad else 0

    if targets.is_cuda(target):
        if args.check:
            if not cuda_stub.cuda_codegen_ready() and not os.environ.get(cuda_stub.GUARD):
                # no driver here: TVM would keep CUDA source and never run nvcc; compile in a process with a stub
                stub = cuda_stub.build_stub()
                print(f"[ms-default] no CUDA driver on this machine: compiling {target} candidates with nvcc through "
                      f"a stub libcuda.so.1 ({stub}); nothing runs here", flush=True)
                return subprocess.run([sys.executable, "-m", __spec__.name,
                                       *(argv if argv is not None else sys.argv[1:])],
                                      env=cuda_stub.env_with_stub(stub)).returncode
            try:
                cuda_stub.require_cuda_codegen()
            except cuda_stub.CudaCodegenError as err:
                print(f"flashgemm-tune-ms-default: error: {err}", file=sys.stderr)
                return 2
        else:
            import tvm  # noqa: PLC0415
            try:
                gpu = bool(tvm.cuda(0).exist)
            except Exception:  # noqa: BLE001  (no CUDA runtime in this TVM / no driver)
                gpu = False
            if not gpu or os.environ.get(cuda_stub.GUARD):
                why = ("no CUDA driver (libcuda.so.1 does not load)" if not cuda_stub.real_driver_present()
                       else "TVM's CUDA runtime sees no GPU")
                print(f"flashgemm-tune-ms-default: error: tuning for {target} measures every candidate on the GPU, and "
                      f"there is none here ({why}). Run this on the GPU machine; here, --check compiles one candidate "
                      f"of each kernel's default space without a GPU.", file=sys.stderr)
                return 2

    from flashgemm.tune import ms_default  # noqa: PLC0415

    if args.check:
        bad = []
        for wl in workloads:
            try:
                res = ms_default.check_space(wl, target)
            except (NotImplementedError, ValueError) as err:
                bad.append(f"{wl.dir_name}: {err}")
                continue
            bad += [f"{wl.dir_name} {name}: no candidate built ({r['error'] or 'none passed the postprocessors'})"
                    for name, r in res.items() if not r["built"]]
        for msg in bad:
            print(f"flashgemm-tune-ms-default: error: {msg}", file=sys.stderr)
        return 2 if bad else 0

    summary, errors = [], []
    for wl in workloads:
        wl_dir = ms_default.workload_dir(args.db, target, wl.dir_name)
        try:
            meta = ms_default.tune_unfused(wl, target, args.trials, wl_dir, workers=args.workers, seed=args.seed,
                                           log=lambda msg: print(msg, flush=True),
                                           max_seconds=None if args.max_minutes is None else args.max_minutes * 60)
        except (ms_default.TuningError, NotImplementedError, ValueError) as err:
            errors.append(str(err))
            print(f"flashgemm-tune-ms-default: error: {err}", file=sys.stderr)
            continue
        summary.append((wl, meta))
    if summary:
        print(f"\nMeta-Schedule default space, unfused op, on {target} (best per task; --trials {args.trials} per "
              f"workload in all):")
        def us(secs):
            return f"{secs * 1e6:10.1f} us" if secs else f"{'-':>10s}   "
        for wl, meta in summary:
            t = meta["tasks"]
            left = meta["budget"] - meta["trials"]
            print(f"  {wl.dir_name:28s} gemm {us(t['gemm']['best_secs'])} ({t['gemm']['trials']} trials)"
                  f"   softmax {us(t['softmax']['best_secs'])} ({t['softmax']['trials']} trials)"
                  f"   total {us(meta['best_secs_total'])}{_fused_best(target, wl)}"
                  + (f"   [{left} trials to go: run again]" if left > 0 else ""))
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
