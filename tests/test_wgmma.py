"""Hopper wgmma (flashgemm/spaces/cuda_wgmma.py): the plain GEMM path (python -m benchmarks.bench_gemm --mma wgmma) and
pass 1 of the fused op's split-N form (the LM head), which the sm_90 space offers beside its mma.sync sketches.

CPU (compile-only, stub driver): every GEMM sketch builds for sm_90a, fp16 and bf16, with wgmma.mma_async from
shared-memory descriptors, the proxy fence, cp.async copies; B as [K, N] (MN-major, the transposed-B flag) builds
too; the split-N sketches build as the space's builder builds them (sm_90 asked, sm_90a built); shapes, targets and
options it cannot serve are refused with the reason. GPU (marked gpu, Hopper only): every sketch against FP64.
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
    from flashgemm.kernel.gemm import gemm_func
    from flashgemm.spaces import cuda_wgmma

    out = []
    for dtype, (m, n, k), trans_b, options in json.loads(sys.argv[1]):
        mod = tvm.IRModule({"main": gemm_func(m, n, k, dtype, trans_b=trans_b)})
        ctx = ms.TuneContext(mod=mod, target=cuda_wgmma.target(), task_name="main", rand_state=5,
                             space_generator=cuda_wgmma.design_space(*options))
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
        out.append({"dtype": dtype, "trans_b": trans_b, "built": built})
    print("RESULT" + json.dumps(out))
''')

MN_OPTIONS = [[128], [2], [3], [1]]  # B as [K, N]: one sketch (BN 128, two warpgroups, 3 stages, in flight)


@pytest.fixture(scope="module")
def codegen(tmp_path_factory):
    from tests.compile_worker import run_compile_worker
    from flashgemm.spaces import cuda_wgmma
    every = [list(cuda_wgmma.BNS), list(cuda_wgmma.WGS), list(cuda_wgmma.STAGES)]
    return {(r["dtype"], r["trans_b"]): r["built"] for r in run_compile_worker(
        WORKER, [["float16", list(SIZE), True, every], ["bfloat16", list(SIZE), True, every],
                 ["bfloat16", list(SIZE), False, MN_OPTIONS]], tmp_path_factory)}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_sketch_builds_with_wgmma(codegen, dtype):
    from flashgemm.spaces import cuda_wgmma
    built = codegen[dtype, True]
    assert len(built) == len(cuda_wgmma.BNS) * len(cuda_wgmma.WGS) * len(cuda_wgmma.STAGES) * len(cuda_wgmma.INFLIGHT)
    assert all(b is not None for b in built), "a sketch was rejected by the postprocessors"
    ptx = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    seen_n, checked = set(), set()
    for b in built:
        src = b["src"]
        n = next(bn for bn in cuda_wgmma.BNS if f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{ptx}.{ptx}" in src)
        seen_n.add(n)
        for needed in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned",
                       "fence.proxy.async.shared::cta", "cp.async.cg.shared.global", "cp.async.wait_group"):
            assert needed in src, needed
        assert "fg_wgmma_fence_operand_float32(float& reg)" in src  # the by-reference fence (cuda_build)
        checked.add(check_k_loop(src))
    assert seen_n == set(cuda_wgmma.BNS)
    assert {"in flight", "drained"} <= checked


def check_k_loop(src: str) -> str:
    """The pipelined k-tile loop's order of synchronization. Drained: the copies, then the wgmmas and wait_group 0.
    In flight (cuda_wgmma.INFLIGHT): k-tile t's copies waited for with the right count (stages - 2 groups left;
    TVM's own count is one short in this order) before the proxy fence and a barrier, then the wgmmas, wait_group 1
    (k-tile t - 1 retired), a barrier (every warpgroup's), and only then the copies into k-tile t - 1's buffer; after
    the loop, wait_group 0 before the accumulators are read. Returns which form was checked ("" where the steady
    loop is gone: one k-tile left after the prologue, which TVM emits without a loop)."""
    import re
    loop = re.search(r"for \(int (k\w*_0) = 0;", src)
    if not loop:
        return ""
    start = loop.start()
    end = src.index("\n  }\n", start)
    body, tail = src[start:end], src[end:]
    kinds = {"cp_async_wait_group_async_wait_group_": "cpwait", "__syncthreads": "sync", "fence_proxy": "fence",
             "mma_async": "mma", "wgmma_wait_group_wait_group_sync_aligned_": "wgwait", "ptx_cp_async_legacy": "copy"}
    seq = []
    for name, count in re.findall(r"(cp_async_wait_group_async_wait_group_|__syncthreads|fence_proxy|mma_async|"
                                  r"wgmma_wait_group_wait_group_sync_aligned_|ptx_cp_async_legacy)(\d?)", body):
        op = kinds[name] + count
        if not (seq and op in ("mma", "copy") and seq[-1] == op):  # a run of copies or wgmmas counts once
            seq.append(op)
    if "wgwait1" not in seq:
        assert "wgwait0" in seq and seq.index("copy") < seq.index("mma") < seq.index("wgwait0"), seq
        return "drained"
    stages = int(re.search(rf"\({loop.group(1)} \+ \d+\) % (\d+)\)", body).group(1))
    fence = seq.index("fence")
    assert seq[fence - 1] == f"cpwait{stages - 2}" and seq[fence + 1] == "sync", seq
    wait1 = seq.index("wgwait1")
    assert "copy" not in seq[:wait1] and seq.index("mma") < wait1 < seq.index("sync", wait1) < seq.index("copy"), seq
    drain = tail.index("wgmma_wait_group_wait_group_sync_aligned_0();")
    assert "mma_async" not in tail[drain:], "wait_group 0 must follow the last k-tile's wgmmas"
    return "in flight"


def test_b_as_k_by_n_builds_mn_major(codegen):
    """B as [K, N] (the LM head's weight): the same swizzle with N contiguous, wgmma's transposed-B flag set."""
    (built,) = codegen["bfloat16", False]
    src = built["src"]
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in src
    assert "ps0, 1, 1, 0, 1;" in src  # scale-d, scale-a, scale-b, A K-major, B MN-major
    assert "ps0, 1, 1, 0, 0;" not in src
    assert check_k_loop(src) == "in flight"


SPLIT_N_SPEC = "a=256x256,b=256x8192,dtype=bfloat16"  # an LM head in small: N beyond shared memory, B as [K, N]

SPLIT_N_WORKER = textwrap.dedent(r'''
    import json, sys
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace
    from flashgemm.spaces import cuda_space
    from flashgemm import targets
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import form_module, forms, tuning_module

    spec, builds, wide = json.loads(sys.argv[1])
    wl = parse(spec)
    mod = form_module(wl, forms(wl, "sm_90")[-1]) if wide else tuning_module(wl, "sm_90")
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target("sm_90"), task_name="main", rand_state=5,
                         space_generator=cuda_space.design_space("sm_90"))
    sketches = ctx.generate_design_space()
    out = []
    for idx, sketch in enumerate(sketches):
        if "wgmma" not in str(sketch.trace):
            out.append({"wgmma": False})
            continue
        sch = tvm.s_tir.Schedule(mod, seed=idx + 1)
        Trace(sketch.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        ok = all(p.apply(sch) for p in ctx.space_generator.postprocs)
        src = None
        if ok and builds > 0:  # as the builder and the export build: sm_90 asked
            builds -= 1
            src = cuda_space.build(sch.mod, "sm_90").mod.imports[0].inspect_source("cuda")
        out.append({"wgmma": True, "valid": ok, "src": src})
    print("RESULT" + json.dumps(out))
''')


def test_split_n_space_offers_wgmma_sketches_that_build(tmp_path_factory):
    """The sm_90 space's split-N form: its mma.sync sketches plus one wgmma sketch per (warpgroups, stages, in-flight
    groups); every wgmma sketch passes the postprocessors, and cuda_build builds it for sm_90a although sm_90 is
    asked."""
    import re

    from flashgemm.spaces import cuda_space, cuda_wgmma
    from tests.compile_worker import run_compile_worker
    sketches = run_compile_worker(SPLIT_N_WORKER, [SPLIT_N_SPEC, 2, False], tmp_path_factory)
    wg = [s for s in sketches if s["wgmma"]]
    assert len(wg) == len(cuda_wgmma.SPLIT_N_WGS) * len(cuda_wgmma.STAGES) * len(cuda_wgmma.INFLIGHT)
    assert len(sketches) - len(wg) == len(cuda_space.PIPELINE_STAGES)  # the mma.sync sketches stay
    assert all(s["valid"] for s in wg)
    srcs = [s["src"] for s in wg if s["src"]]
    assert len(srcs) == 2
    for src in srcs:
        assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in src and "ps0, 1, 1, 0, 1;" in src
        # static shared memory goes before the dynamic pool: the swizzled tiles need it a multiple of 1024 bytes
        pass1 = src[src.rindex(") main_kernel("):src.rindex(") main_kernel_1(")]  # pass 1's definition
        static = re.findall(r"__shared__ alignas\(\d+\) float \w+\[(\d+)\];", pass1)
        assert static and sum(4 * int(n) for n in static) % 1024 == 0, static
        kernels = re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(', src)
        assert len(set(kernels)) == 2, kernels  # pass 1 (wgmma GEMM + chunk statistics) and pass 2 (rescale)
    # the first two wgmma sketches: 3 stages, drained and in flight
    assert [check_k_loop(src) for src in srcs] == ["drained", "in flight"]


def test_wide_split_n_form_is_wgmma_only_and_builds(tmp_path_factory):
    """The wide split-N form (sm_90, CW = 256: flashgemm.spaces.kernel_forms.forms): only wgmma sketches (the mma.sync form takes
    chunks of 128 columns at most), every one valid, m64n256 wgmmas, and the fp32 S tile (128 x 256) aliasing the
    pipeline buffers within the H100's shared memory."""
    from flashgemm.spaces import cuda_split_n, cuda_wgmma
    from tests.compile_worker import run_compile_worker
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import forms
    assert forms(parse(SPLIT_N_SPEC), "sm_90")[-1].chunk == cuda_split_n.WIDE_CHUNK == 256
    sketches = run_compile_worker(SPLIT_N_WORKER, [SPLIT_N_SPEC, 1, True], tmp_path_factory)
    assert len(sketches) == len(cuda_wgmma.SPLIT_N_WGS) * len(cuda_wgmma.STAGES) * len(cuda_wgmma.INFLIGHT)
    assert all(s["wgmma"] and s["valid"] for s in sketches)
    src = sketches[0]["src"]
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in src and check_k_loop(src) == "drained"


def test_split_n_refusals():
    import tvm

    from flashgemm.spaces import cuda_wgmma
    from flashgemm.spaces.cuda_space import UnsupportedShapeError
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import tuning_module
    sch = tvm.s_tir.Schedule(tuning_module(parse("a=100x128,b=128x8192,dtype=bfloat16"), "sm_90"))
    assert not cuda_wgmma.serves(sch)
    with pytest.raises(UnsupportedShapeError, match=r"M a multiple of 128 .*got M=100, N=8192, K=128, chunk 128"):
        cuda_wgmma.split_n_schedule(sch)
    # the wide form's chunk (CW = 256) has no mma.sync sketch: cuda_split_n.schedule says so (the space asks wgmma)
    from flashgemm.spaces import cuda_split_n
    from flashgemm.spaces.kernel_forms import form_module, forms
    wide = forms(parse(SPLIT_N_SPEC), "sm_90")[-1]
    with pytest.raises(UnsupportedShapeError, match="chunk width 256 has no mma.sync sketch .*wgmma-only"):
        cuda_split_n.schedule(tvm.s_tir.Schedule(form_module(parse(SPLIT_N_SPEC), wide)), "sm_90")


def test_a_wgmma_module_is_refused_for_other_arches():
    """compile_cuda builds a wgmma module for sm_90a when sm_90 is asked, and refuses it, with the reason, for an arch
    without wgmma (before nvcc runs)."""
    import tvm

    from flashgemm.codegen import cuda_build
    from flashgemm.spaces import cuda_space, cuda_wgmma
    from flashgemm.kernel.gemm import gemm_func
    (sch,) = cuda_wgmma.schedule(tvm.s_tir.Schedule(tvm.IRModule({"main": gemm_func(64, 128, 64)})), stage_options=(3,),
                                 inflight_options=(0,))
    assert cuda_build.uses_wgmma(sch.mod)
    assert not cuda_build.uses_wgmma(tvm.IRModule({"main": gemm_func(64, 128, 64)}))
    for arch in ("sm_80", "sm_89"):
        with pytest.raises(ValueError, match=f"uses Hopper's wgmma .*which {arch} lacks"):
            cuda_space.build(sch.mod, arch)


def test_refusals():
    import tvm

    from flashgemm.spaces import cuda_wgmma
    from flashgemm.spaces.cuda_space import UnsupportedShapeError
    from flashgemm.kernel.gemm import gemm_func
    with pytest.raises(ValueError, match="mma.sync only"):
        cuda_wgmma.check_target("sm_80")
    cuda_wgmma.check_target("sm_90")
    with pytest.raises(UnsupportedShapeError, match=r"tiles M by 64 .* \(got M=96, N=128, K=64\)"):
        cuda_wgmma.schedule(tvm.s_tir.Schedule(tvm.IRModule({"main": gemm_func(96, 128, 64)})))
    # only the sketches that tile the shape: N = 128 leaves BN = 256 out, M = 64 leaves two warpgroups out
    sketches = cuda_wgmma.schedule(tvm.s_tir.Schedule(tvm.IRModule({"main": gemm_func(64, 128, 64)})))
    assert len(sketches) == len(cuda_wgmma.STAGES) * len(cuda_wgmma.INFLIGHT)
    # the in-flight form retires k-tile t - 1 while k-tile t runs: it needs a pipeline of two stages at least
    with pytest.raises(ValueError, match=r"needs a software pipeline \(stages >= 2\)"):
        cuda_wgmma.register("float16", 128, stages=1)
    assert cuda_wgmma.register("float16", 128, stages=0)["mma"] == "fg_wgmma_m64n128k64_f16_f32"


@pytest.mark.parametrize("args, message", [
    (["--target", "sm_80"], "mma.sync only"),
    (["--target", "sm_90", "--k-split", "on"], "no k-split or fragment-pipeline"),
    (["--target", "sm_90", "--size", "96", "128", "64"], "M must be a multiple of 64"),
])
def test_bench_gemm_refuses_what_wgmma_cannot_do(args, message, tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_gemm", "--mma", "wgmma", *args,
                          "--out", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, size, trans_b", [("float16", (256, 512, 320), True),
                                                  ("bfloat16", (192, 384, 128), True),
                                                  ("bfloat16", (128, 512, 192), False)])  # B as [K, N]
def test_wgmma_numerics(dtype, size, trans_b):
    """Every sketch that tiles the shape, against an FP64 product; the output is pre-filled with NaN."""
    import tests.test_gpu_kernels as g
    if g.ARCH != "sm_90":
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90); this one is {g.ARCH}")
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    from flashgemm.spaces import cuda_wgmma
    from tests.test_gemm_path import gemm_case, gemm_run
    from flashgemm.kernel.gemm import gemm_func
    m, n, k = size
    mod = tvm.IRModule({"main": gemm_func(m, n, k, dtype, trans_b=trans_b)})
    ctx = ms.TuneContext(mod=mod, target=cuda_wgmma.target(), task_name="main", rand_state=7,
                         space_generator=cuda_wgmma.design_space())
    sketches = ctx.generate_design_space()
    a, b, ref, tol = gemm_case(m, n, k, dtype)
    for idx, sketch in enumerate(sketches):
        sch = tvm.s_tir.Schedule(mod, seed=idx + 1)
        Trace(sketch.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        assert all(p.apply(sch) for p in ctx.space_generator.postprocs)
        c = gemm_run(cuda_wgmma.build(sch.mod)["main"], a, b if trans_b else np.ascontiguousarray(b.T), trans_b)
        err = np.abs(c - ref).max()
        assert err <= tol, f"sketch {idx}: max abs error {err:.3g} > {tol:.3g}"
    assert len(sketches) >= 2


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, case, chunk", [
    ("bfloat16", ((1, 1, 256, 8192, 256), dict(trans_b=False)), 0),          # the LM head in small: B as [K, N]
    ("float16", ((1, 2, 128, 8192, 64), dict(trans_b=True, bias=True)), 0),  # K-major B, a bias, one k-tile
    ("bfloat16", ((2, 1, 128, 4096, 128), dict(trans_b=False, mask="bool")), 0),  # a boolean key mask, 2 k-tiles
    ("bfloat16", ((1, 1, 256, 8192, 256), dict(trans_b=False)), 256),        # the wide form (CW = 256)
    ("float16", ((1, 2, 128, 4096, 128), dict(trans_b=True, mask="add")), 256),  # wide, an additive mask
])
def test_wgmma_split_n_numerics(dtype, case, chunk):
    """Every wgmma sketch of the split-N form (chunk: the wide form's CW, 0 the primary form's), replayed on the
    shipped (runtime) form, against the FP64 reference."""
    import tests.test_gpu_kernels as g
    if g.ARCH != "sm_90":
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90); this one is {g.ARCH}")
    from flashgemm.spaces import cuda_space, cuda_wgmma
    (b, h, m, n, k), feat = case
    c = g._case(dtype, b, h, m, n, k, **feat)
    variant, shape = g._variant(dtype, c), g._canon(c)
    pipelines = len(cuda_wgmma.STAGES) * len(cuda_wgmma.INFLIGHT)
    count = pipelines * sum(m % (64 * wg) == 0 for wg in cuda_wgmma.SPLIT_N_WGS)
    cands = g._space_candidates(variant, shape, c["scale"], count=count, seeds=count,
                                space=lambda s: cuda_wgmma.split_n_schedule(s), split_chunk=chunk)
    assert len(cands) == count
    for sch in cands:
        ex = cuda_space.build(sch.mod, "sm_90")
        g._check(g._run(ex, dtype, c, shape), c, dtype)
