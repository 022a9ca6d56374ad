"""A/B of block rasterization in the plain GEMM path (flashgemm/spaces/cuda_gemm: R block rows a group walk the block
columns together): the same tiling, k tiles, fetch widths and pipeline depth at R = 1, 2, 4, 8, 16 and all block
rows (those that divide the block rows), timed in one process on one GPU beside cuBLAS. R = 1 is the row-major block
order every kernel of the space had before the knob.

    python -m benchmarks.gemm_raster_ab --out results/h100/gemm-raster-ab.json                # on the GPU
    python -m benchmarks.gemm_raster_ab --decisions "16,8,2 32,1,8 64,4 0 0" --stages 3 4 --out ...

--decisions: a record's sample decisions from before the knob (row tiles [blocks, WM, FM], column tiles, k tiles, A
and B fetch-width indices), as results/h100/gemm-records-*.txt lists them; the default is that file's two best
tilings.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from benchmarks import commit_id
from flashgemm.spaces.intrinsics import register_intrinsics

# The two best tilings of a 192-trial H100 run (commit ee9b77c's results/h100/gemm-records-fragment-pipeline-2026-11-26.txt)
DEFAULT_DECISIONS = ["16,8,2 32,1,8 64,4 0 0", "32,4,2 16,2,8 64,4 0 0"]


def parse_decisions(text: str) -> list:
    """'16,8,2 32,1,8 64,4 0 0' -> [[16, 8, 2], [32, 1, 8], [64, 4], 0, 0]."""
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(f"--decisions {text!r}: want 5 fields (row tiles, column tiles, k tiles, A and B fetch "
                         "widths), e.g. '16,8,2 32,1,8 64,4 0 0'")
    tiles = [[int(x) for x in p.split(",")] for p in parts[:3]]
    return tiles + [int(parts[3]), int(parts[4])]


RASTER_GROUPS = (1, 2, 4, 8, 16)


def traces(mod, decisions: list, stages: int) -> list:
    """(R, trace) for every rasterization group R that divides the block rows: the stages-deep sketch with these
    decisions, the row tiles [blocks, WM, FM] as [blocks / R, R, WM, FM]."""
    import tvm  # noqa: PLC0415

    from flashgemm.spaces import cuda_gemm  # noqa: PLC0415
    from flashgemm.spaces.cuda_space import with_decisions  # noqa: PLC0415
    sketch = cuda_gemm._schedule(tvm.s_tir.Schedule(mod), stages).trace
    (blocks, wm, fm), rest = decisions[0], decisions[1:]
    groups = sorted({r for r in RASTER_GROUPS + (blocks,) if blocks % r == 0})
    return [(r, with_decisions(sketch, [[blocks // r, r, wm, fm]] + rest)) for r in groups]


def run(size: tuple, dtype: str, target_name: str, decision_sets: list, stage_options: list, reps: int,
        log=print) -> dict:
    import torch  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415

    from flashgemm.spaces import cuda_gemm, cuda_space  # noqa: PLC0415
    from flashgemm import targets

    from . import gemm, peers  # noqa: PLC0415
    register_intrinsics(target_name)
    mod = gemm.gemm_module(size, dtype)
    postprocs = ms.TuneContext(mod=mod, target=targets.tvm_target(target_name), task_name="main", rand_state=5,
                               space_generator=cuda_gemm.design_space(target_name)).space_generator.postprocs
    ops = gemm.GpuOperands(size, dtype)
    rows = []
    for text in decision_sets:
        decisions = parse_decisions(text)
        for stages in stage_options:
            for r, trace in traces(mod, decisions, stages):
                sch = tvm.s_tir.Schedule(mod)
                trace.apply_to_schedule(sch, remove_postproc=True)
                label = f"{text} | stages {stages} | R {r}"
                if not all(p.apply(sch) for p in postprocs):
                    log(f"[raster] {label}: rejected by the postprocessors")
                    rows.append({"decisions": text, "stages": stages, "raster": r, "error": "postprocessors"})
                    continue
                try:
                    fn = cuda_space.build(sch.mod, target_name)["main"]
                except Exception as exc:  # noqa: BLE001 - a tiling that does not build at this depth: say so
                    log(f"[raster] {label}: does not build ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
                    rows.append({"decisions": text, "stages": stages, "raster": r, "error": str(exc)[:300]})
                    continue
                ops.c.zero_()
                fn(*ops.args)
                torch.cuda.synchronize()
                err = ops.rel_err(ops.c)
                t = peers.time_cuda(lambda: fn(*ops.args), reps)
                rows.append({"decisions": text, "stages": stages, "raster": r, "median_us": t["median_us"],
                             "p10_us": t["p10_us"], "p90_us": t["p90_us"],
                             "tflops": ops.flop / (t["median_us"] * 1e-6) / 1e12, "max_rel_err_vs_fp32": err})
                log(f"[raster] {label}: {t['median_us']:.1f} us, max |err| / max |C| {err:.2e}")
    cublas = peers.time_cuda(ops.cublas, reps)
    log(f"[raster] cuBLAS: {cublas['median_us']:.1f} us")
    return {"size": list(size), "dtype": dtype, "target": target_name, "rows": rows, "cublas": cublas}


def markdown(env: dict, result: dict) -> str:
    cublas = result["cublas"]["median_us"]
    lines = [f"# GEMM rasterization A/B: {env['gpu']}, driver {env.get('driver')}, {env['date']} "
             f"(commit {env['commit']})", "",
             f"{'x'.join(map(str, result['size']))} {result['dtype']}; cuBLAS {cublas:.1f} µs in the same run; "
             "each row's time relative to R = 1 of the same decisions and depth.", "",
             "| decisions | stages | R | µs | TFLOP/s | vs R = 1 | of cuBLAS |", "|---|---|---|---|---|---|---|"]
    base = {(r["decisions"], r["stages"]): r["median_us"] for r in result["rows"]
            if r.get("raster") == 1 and "median_us" in r}
    for r in result["rows"]:
        if "median_us" not in r:
            lines.append(f"| {r['decisions']} | {r['stages']} | {r['raster']} | does not build | | | |")
            continue
        b = base.get((r["decisions"], r["stages"]))
        rel = f"{b / r['median_us']:.3f}×" if b else "—"
        lines.append(f"| {r['decisions']} | {r['stages']} | {r['raster']} | {r['median_us']:.1f} | {r['tflops']:.1f} "
                     f"| {rel} | {cublas / r['median_us']:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto")
    ap.add_argument("--size", type=int, nargs=3, default=[4096, 4096, 4096], metavar=("M", "N", "K"))
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--decisions", action="append", help="a record's decisions (repeatable; default: "
                    f"{DEFAULT_DECISIONS})")
    ap.add_argument("--stages", type=int, nargs="+", default=[3, 4])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from flashgemm import targets  # noqa: PLC0415

    from . import gemm, peers  # noqa: PLC0415
    target = targets.resolve(args.target)
    if not targets.is_cuda(target):
        ap.error(f"--target {target}: the A/B times CUDA kernels")
    result = run(tuple(args.size), args.dtype, target, args.decisions or DEFAULT_DECISIONS, args.stages, args.reps)
    env = {**peers.gpu_info(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit_id() or "unknown"}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": env, "protocol": "CUDA events around 10 back-to-back calls, median "
                               "of the groups (benchmarks/peers.time_cuda); L2 not flushed", "result": result},
                              indent=1))
    out.with_suffix(".md").write_text(markdown(env, result))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
