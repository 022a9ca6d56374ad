"""A/B of two versions of the two-sweep recompute form at W3 (e.g. P = exp(x - max) / sum against
P = exp(x - (max + log sum))), same sketches and decisions, each version built from its own checkout.

  python -m benchmarks.two_sweep_p_ab build OUT_DIR LABEL [--dtype float16] [--max-registers R] [--stages S]
                                                     # in each checkout (nvcc; stub driver ok)
  python -m benchmarks.staged_p_ab time OUT_DIR OUT.json                        # on the GPU, once both are built
build: each of DECISIONS on the resident-A sketches of both pipeline depths, exported to OUT_DIR/<LABEL>_<i>.so;
OUT_DIR/pairs.json lists the kernels (kinds: the labels in build order; the time step times every kind and compares
the first two). --max-registers: compiled with that register cap (flashgemm/codegen/cuda_build.MAX_REGISTERS_ATTR), e.g.
to see whether more warps an SM help; --stages: only that pipeline depth.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from flashgemm.spaces.intrinsics import register_intrinsics

os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
WORKLOAD = "whisper-enc"
# [groups, BM/16], [WM, FM], [KO, KI], fetch widths: the best two-sweep W3 fp16 records a tuning found (fixed here, so
# that both checkouts build the same kernels)
DECISIONS = [[[48, 2], [1, 2], [4, 1], 0, 1, 1], [[48, 2], [1, 2], [4, 1], 0, 1, 0],
             [[24, 4], [2, 2], [1, 4], 0, 1, 1], [[32, 3], [3, 1], [1, 4], 0, 1, 1]]


def build(out_dir: Path, label: str, dtype: str, max_registers: int = 0, stages_only: int = 0) -> None:
    import tvm  # noqa: PLC0415
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415

    from flashgemm.codegen import cuda_build  # noqa: PLC0415
    from flashgemm.spaces import cuda_recompute, cuda_space
    from flashgemm import targets
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    from flashgemm.spaces.kernel_forms import tuning_modules  # noqa: PLC0415
    arch = "sm_90"
    register_intrinsics(arch)
    mod = next(m for f, m in tuning_modules(parse(WORKLOAD, dtype), arch) if f.name == "recompute2")
    postprocs = ms.TuneContext(mod=mod, target=targets.tvm_target(arch), task_name="main", rand_state=5,
                               space_generator=cuda_space.design_space(arch)).space_generator.postprocs
    out_dir.mkdir(parents=True, exist_ok=True)
    meta_path = out_dir / "pairs.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"workload": WORKLOAD, "dtype": dtype,
                                                                         "kinds": [], "pairs": []}
    if label not in meta["kinds"]:
        meta["kinds"].append(label)
    i = 0
    for decisions in DECISIONS:
        for stages in [s_ for s_ in cuda_recompute.CHUNK_STAGES if stages_only in (0, s_)]:
            sketch = cuda_recompute._schedule2(tvm.s_tir.Schedule(mod), stages, resident_a=True).trace
            sch = tvm.s_tir.Schedule(mod)
            cuda_space.with_decisions(sketch, decisions).apply_to_schedule(sch, remove_postproc=True)
            if not all(p.apply(sch) for p in postprocs):
                raise RuntimeError(f"{decisions} at {stages} stages: rejected by the postprocessors")
            name = f"{label}_{i}"
            built = sch.mod
            if max_registers:
                built = tvm.IRModule({"main": built["main"].with_attr(cuda_build.MAX_REGISTERS_ATTR, max_registers)})
            cuda_space.build(built, arch).export_library(str(out_dir / f"{name}.so"))
            if i >= len(meta["pairs"]):
                meta["pairs"].append({"label": f"{decisions} stages {stages}", "stages": stages,
                                      "decisions": [str(d) for d in decisions]})
            meta["pairs"][i][label] = name
            print(f"built {name}: {decisions}, {stages} stages", flush=True)
            i += 1
    meta_path.write_text(json.dumps(meta, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out_dir", type=Path)
    b.add_argument("label")
    b.add_argument("--dtype", default="float16")
    b.add_argument("--max-registers", type=int, default=0)
    b.add_argument("--stages", type=int, default=0)
    args = ap.parse_args()
    build(args.out_dir, args.label, args.dtype, args.max_registers, args.stages)


if __name__ == "__main__":
    main()
