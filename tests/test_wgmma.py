"""Hopper wgmma in the plain GEMM path (schedules/cuda_wgmma.py; scripts/bench_gemm.py --mma wgmma).

CPU (compile-only, stub driver): every sketch of the space builds for sm_90a, fp16 and bf16, with wgmma.mma_async
from shared-memory descriptors, the proxy fence, cp.async copies; shapes, targets and options it cannot serve are
refused with the reason. GPU (marked gpu, Hopper only): every sketch against an FP64 product.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SIZE = (256, 512, 256)  # every sketch fits: M by 64 and 128, N by 128 and 256, K by 64

WORKER = textwrap.dedent(r'''
    import json, sys
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace
    from tir_kernels.gemm import gemm_func
    from schedules import cuda_wgmma

    out = []
    for dtype, (m, n, k) in json.loads(sys.argv[1]):
        mod = tvm.IRModule({"main": gemm_func(m, n, k, dtype)})
        ctx = ms.TuneContext(mod=mod, target=cuda_wgmma.target(), task_name="main", rand_state=5,
                             space_generator=cuda_wgmma.design_space())
        sketches = ctx.generate_design_space()
        built = []
        for idx, sketch in enumerate(sketches):
            sch = tvm.s_tir.Schedule(mod, seed=idx + 1)
            Trace(sketch.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
                built.append(None)
                continue
            src = cuda_wgmma.build(sch.mod).mod.imports[0].inspect_source("cuda")
            built.append({"src": src})
        out.append({"dtype": dtype, "built": built})
    print("RESULT" + json.dumps(out))
''')


@pytest.fixture(scope="module")
def codegen(tmp_path_factory):
    from tests.compile_worker import run_compile_worker
    return {r["dtype"]: r["built"] for r in run_compile_worker(
        WORKER, [["float16", list(SIZE)], ["bfloat16", list(SIZE)]], tmp_path_factory)}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_sketch_builds_with_wgmma(codegen, dtype):
    from schedules import cuda_wgmma
    built = codegen[dtype]
    assert len(built) == len(cuda_wgmma.BNS) * len(cuda_wgmma.WGS) * len(cuda_wgmma.STAGES)
    assert all(b is not None for b in built), "a sketch was rejected by the postprocessors"
    ptx = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    seen_n = set()
    for b in built:
        src = b["src"]
        n = next(bn for bn in cuda_wgmma.BNS if f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{ptx}.{ptx}" in src)
        seen_n.add(n)
        for needed in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned",
                       "fence.proxy.async.shared::cta", "cp.async.cg.shared.global", "cp.async.wait_group"):
            assert needed in src, needed
        assert "fg_wgmma_fence_operand_float32(float& reg)" in src  # the by-reference fence (cuda_build)
    assert seen_n == set(cuda_wgmma.BNS)


def test_refusals():
    import tvm

    from schedules import cuda_wgmma
    from schedules.cuda_space import UnsupportedShapeError
    from tir_kernels.gemm import gemm_func
    with pytest.raises(ValueError, match="mma.sync only"):
        cuda_wgmma.check_target("sm_80")
    cuda_wgmma.check_target("sm_90")
    with pytest.raises(UnsupportedShapeError, match=r"tiles M by 64 .* \(got M=96, N=128, K=64\)"):
        cuda_wgmma.schedule(tvm.s_tir.Schedule(tvm.IRModule({"main": gemm_func(96, 128, 64)})))
    with pytest.raises(UnsupportedShapeError, match=r"B as \[N, K\]"):
        cuda_wgmma.schedule(tvm.s_tir.Schedule(tvm.IRModule({"main": gemm_func(64, 128, 64, trans_b=False)})))
    # only the sketches that tile the shape: N = 128 leaves BN = 256 out, M = 64 leaves two warpgroups out
    sketches = cuda_wgmma.schedule(tvm.s_tir.Schedule(tvm.IRModule({"main": gemm_func(64, 128, 64)})))
    assert len(sketches) == len(cuda_wgmma.STAGES)


@pytest.mark.parametrize("args, message", [
    (["--target", "sm_80"], "mma.sync only"),
    (["--target", "sm_90", "--k-split", "on"], "no k-split or fragment-pipeline"),
    (["--target", "sm_90", "--size", "96", "128", "64"], "M must be a multiple of 64"),
])
def test_bench_gemm_refuses_what_wgmma_cannot_do(args, message, tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_gemm.py"), "--mma", "wgmma", *args,
                          "--out", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, size", [("float16", (256, 512, 320)), ("bfloat16", (192, 384, 128))])
def test_wgmma_numerics(dtype, size):
    """Every sketch that tiles the shape, against an FP64 product; the output is pre-filled with NaN."""
    import tests.test_gpu_kernels as g
    if g.ARCH != "sm_90":
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90); this one is {g.ARCH}")
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    from schedules import cuda_wgmma
    from tests.test_gemm_path import gemm_case, gemm_run
    from tir_kernels.gemm import gemm_func
    m, n, k = size
    mod = tvm.IRModule({"main": gemm_func(m, n, k, dtype)})
    ctx = ms.TuneContext(mod=mod, target=cuda_wgmma.target(), task_name="main", rand_state=7,
                         space_generator=cuda_wgmma.design_space())
    sketches = ctx.generate_design_space()
    a, b, ref, tol = gemm_case(m, n, k, dtype)
    for idx, sketch in enumerate(sketches):
        sch = tvm.s_tir.Schedule(mod, seed=idx + 1)
        Trace(sketch.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        assert all(p.apply(sch) for p in ctx.space_generator.postprocs)
        c = gemm_run(cuda_wgmma.build(sch.mod)["main"], a, b)
        err = np.abs(c - ref).max()
        assert err <= tol, f"sketch {idx}: max abs error {err:.3g} > {tol:.3g}"
    assert len(sketches) >= 2
