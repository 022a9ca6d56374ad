#!/usr/bin/env python3
"""The plain GEMM path of the tensor-core space against cuBLAS (issue 3: 4096^3 fp16, >= 60 % of cuBLAS).

    python -m benchmarks.bench_gemm --target sm_90 --trials 256 --out results/h100/gemm-4096.json
    python -m benchmarks.bench_gemm --target sm_90 --mma wgmma --trials 64 --out results/h100/gemm-wgmma-4096.json

Tunes flashgemm/spaces/cuda_gemm's space (--mma wgmma: flashgemm/spaces/cuda_wgmma's Hopper space) with Meta-Schedule
into --work (resumable: a second run continues toward --trials; --trials 0 only benchmarks what is there), then times
the best kernel against torch.matmul (cuBLAS) in the same process. Needs a CUDA GPU, torch and xgboost.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


from flashgemm.cli.usage import ArgumentParser, count


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto", help="auto | sm_80 | sm_89 | sm_90 (default: auto)")
    ap.add_argument("--size", type=count(1), nargs=3, default=[4096, 4096, 4096], metavar=("M", "N", "K"))
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--trials", type=count(0), default=256, help="trial budget of the work database (default 256)")
    ap.add_argument("--work", default=None,
                    help="tuning work directory (default build/gemm/<target>-<M>x<N>x<K>-<dtype>)")
    ap.add_argument("--reps", type=count(1), default=50, help="calls timed per round (default 50)")
    ap.add_argument("--rounds", type=count(1), default=3,
                    help="rounds alternating ours and cuBLAS; each is reported at its median round (default 3)")
    ap.add_argument("--fragment-pipeline", choices=["off", "on", "both"], default="off",
                    help="sketches with the A/B fragments double-buffered in registers: off (default; measured slower "
                         "on the H100), on, or both (an A/B inside one tuning run)")
    ap.add_argument("--k-split", choices=["auto", "off", "on"], default="auto",
                    help="k-split sketches (K sliced over blocks, then a reduction kernel): auto (default: with the "
                         "others when the output is small, flashgemm/spaces/cuda_gemm.k_split_offered), off, or on "
                         "(only them)")
    ap.add_argument("--mma", choices=["mma_sync", "wgmma"], default="mma_sync",
                    help="the space's tensor-core instruction: mma_sync (default; sm_80, sm_89, sm_90) or wgmma "
                         "(Hopper's, sm_90 only, built as sm_90a: flashgemm/spaces/cuda_wgmma)")
    ap.add_argument("--out", required=True, help="results JSON (a .md table is written beside it)")
    args = ap.parse_args(argv)
    if any(s % 16 for s in args.size):
        ap.error(f"--size {' '.join(map(str, args.size))}: M, N, K must be multiples of 16",
                 fix="round them up to one, e.g. --size 4096 4096 4096")
    from flashgemm import targets  # noqa: PLC0415
    with ap.errors(targets.TargetError, what="--target"):
        target = targets.resolve(args.target)
    if not targets.is_cuda(target):
        ap.error(f"--target {args.target} is {target}: the plain GEMM path is the CUDA tensor-core space",
                 fix="run it on a GPU machine with --target sm_80|sm_89|sm_90|auto")
    size = tuple(args.size)
    from flashgemm.spaces import cuda_gemm, cuda_wgmma  # noqa: PLC0415
    if args.mma == "wgmma":
        with ap.errors(ValueError, what="--mma wgmma"):
            cuda_wgmma.check_target(target)
        if args.k_split == "on" or args.fragment_pipeline != "off":
            ap.error("--mma wgmma has no k-split or fragment-pipeline sketches",
                     fix="leave out --k-split on and --fragment-pipeline: they are the mma.sync space's")
        m, n, k = size
        if not any(cuda_wgmma.fits(m, n, k, bn, wg) for bn in cuda_wgmma.BNS for wg in cuda_wgmma.WGS):
            ap.error(f"--mma wgmma: --size {m} {n} {k} does not tile",
                     fix=f"M must be a multiple of 64, N of one of {cuda_wgmma.BNS}, K of {cuda_wgmma.BK}")
    if args.k_split == "on" and not cuda_gemm.k_split_factors(*size):
        ap.error(f"--k-split on: no factor of {cuda_gemm.K_SPLITS} fits --size {' '.join(map(str, size))}",
                 fix=f"use --k-split auto: a split needs K slices of at least {cuda_gemm.K_SLICE_MIN} and partials of "
                     f"at most {cuda_gemm.K_SPLIT_WORKSPACE >> 20} MiB")
    work = Path(args.work or f"build/gemm/{target}-{'x'.join(map(str, size))}-{args.dtype}"
                + ("-wgmma" if args.mma == "wgmma" else ""))
    from benchmarks import gemm  # noqa: PLC0415
    if args.trials > 0:
        frag = {"off": (False,), "on": (True,), "both": (False, True)}[args.fragment_pipeline]
        k_split = {"auto": None, "off": False, "on": True}[args.k_split]
        gemm.tune(size, args.dtype, target, args.trials, work, workers=os.cpu_count() or 2, fragment_pipeline=frag,
                  k_split=k_split, mma=args.mma)
    result = gemm.bench(size, args.dtype, target, work, args.reps, rounds_n=args.rounds, mma=args.mma)
    out = Path(args.out)
    gemm.save(result, out)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
