"""The register-resident sketches (flashgemm/spaces/cuda_registers.py): S stays in the mma accumulators.

CPU (compile-only, no GPU): where they apply, which sketches the space offers, and for sm_80 / sm_89 / sm_90
that sampled candidates are valid, build with nvcc (through the stub driver, as in test_cuda_codegen), keep
the accumulators in registers (no S tile in shared memory) and replay on the shipped runtime form.
GPU (marked gpu): numerics of sampled candidates against the FP64 reference for every variant feature.
"""
from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest
from flashgemm.spaces.intrinsics import register_intrinsics

SEEDS = 12
VALID_FLOOR = 0.5  # measured: 9/12 .. 12/12 (invalid: more than 1024 threads a block)
CODEGEN = [("sm_80", "float16", "a=2x3x128x64,b=2x3x256x64,transB=1,scale=0.125"),
           ("sm_89", "bfloat16", "a=2x3x64x40,b=2x3x40x128"),  # K padded, B [K, N]
           ("sm_90", "float16", "a=2x3x128x64,b=2x3x512x64,transB=1,causal=1")]
# the kernel's padded form (cuda_registers.padded_sizes): W3's rows (wide: one warp row), W2's, odd K and causal
PADDED_CODEGEN = [("sm_90", "float16", "a=1x2x1500x64,b=1x2x1500x64,transB=1"),
                  ("sm_80", "bfloat16", "a=2x3x197x64,b=2x3x197x64,transB=1"),
                  ("sm_89", "float16", "a=2x2x100x40,b=2x2x40x200,causal=1")]
PADDED_VALID_FLOOR = 0.25  # measured (CPU, compile-only); wide rows: most B-streamed stages overflow

WORKER = textwrap.dedent(r'''
    import json, os, sys
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    import tvm
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms
    from tests.compile_worker import sample_and_build
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import tuning_modules
    from flashgemm.spaces import cuda_registers, cuda_space
    from flashgemm import targets

    assert tvm.runtime.enabled("cuda"), "TVM's CUDA runtime did not load: nvcc would never run"
    out = []
    for arch, dtype, spec, seeds in json.loads(sys.argv[1]):
        wl = parse(spec, dtype)
        modules = tuning_modules(wl, arch)  # the padded form where the shape has one, else the primary form
        form, mod = next((fm for fm in modules if fm[0].name == "padded"), modules[0])
        gen = ms.space_generator.ScheduleFn(lambda s: cuda_registers.schedule(s, arch), sch_rules=[],
                                            postprocs=cuda_space.postprocs(arch), mutator_probs={})
        ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(arch), task_name="main", rand_state=5,
                             space_generator=gen)
        out.append({"arch": arch, "dtype": dtype, "spec": spec, "pad": form.pad,
                    **sample_and_build(ctx, mod, wl, arch, seeds, pad=form.pad)})
    print("RESULT" + json.dumps(out))
''')


def test_where_the_register_sketches_apply():
    import tvm
    import tvm_ffi

    from flashgemm.spaces import cuda_registers
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import tuning_module
    assert cuda_registers.applies(512, 512, 64) and cuda_registers.applies(16, 64, 1)
    assert not cuda_registers.applies(197, 256, 64)   # M not a multiple of 16 (padded S)
    assert not cuda_registers.applies(256, 1500, 64)  # N not a multiple of 64
    assert not cuda_registers.applies(1, 512, 64)     # M = 1: the row-vector space
    assert not cuda_registers.applies(64, 4096, 64)   # beyond the registers
    served = {spec: cuda_registers.serves(tvm.s_tir.Schedule(tuning_module(parse(spec), "sm_90")))
              for spec in ("bert-large", "a=2x64x64,b=2x64x128,causal=1", "a=2x64x64,b=2x64x128,bias=2x64x128",
                           "a=2x64x64,b=2x64x128,mask=2x64x128:bool")}
    assert list(served.values()) == [True, True, False, False]  # bias / mask variants: shared-memory sketches only


def test_padded_form_where_the_register_sketches_need_it():
    import tvm
    import tvm_ffi

    from flashgemm.spaces import cuda_registers
    from flashgemm.op.variant import Variant
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import forms, tuning_modules
    plain, biased = Variant("float16", True), Variant("float16", True, has_bias=True)
    assert cuda_registers.padded_sizes("sm_90", plain, 1500, 1500, 64) == (1536, 1536, 64)   # W3
    assert cuda_registers.padded_sizes("sm_90", plain, 197, 197, 64) == (224, 256, 64)       # W2
    assert cuda_registers.padded_sizes("sm_80", plain, 100, 200, 40) == (112, 256, 48)
    assert cuda_registers.padded_sizes("sm_89", plain, 1500, 1500, 64) is None  # B stages overflow 99 KB
    assert cuda_registers.padded_sizes("sm_90", biased, 197, 197, 64) is None
    assert cuda_registers.padded_sizes("sm_90", plain, 1, 2048, 64) is None     # decoding: row-vector space
    assert cuda_registers.padded_sizes("sm_90", plain, 512, 512, 64) is None    # served as it is
    assert cuda_registers.padded_sizes("sm_90", plain, 64, 3000, 64) is None    # beyond the registers
    assert [f.name for f in forms(parse("whisper-enc"), "sm_90")] == ["one-pass", "padded", "recompute", "recompute2"]
    assert [f.name for f in forms(parse("whisper-enc"), "llvm")] == ["one-pass"]
    assert [f.name for f in forms(parse("bert-large"), "sm_90")] == ["one-pass", "recompute", "recompute2"]
    assert [(f.name, f.chunk) for f in forms(parse("lm-head"), "sm_90")] == [("split-n", 128), ("split-n-wide", 256)]
    assert [(f.name, f.chunk) for f in forms(parse("lm-head"), "sm_89")] == [("split-n", 128)]
    (_, primary), (form, padded), *_ = tuning_modules(parse("whisper-enc"), "sm_90")
    assert not tvm_ffi.structural_equal(primary, padded) and form.pad == (1536, 1536, 64)
    assert cuda_registers.is_padded_form(tvm.s_tir.Schedule(padded))
    assert not cuda_registers.is_padded_form(tvm.s_tir.Schedule(primary))


# (sketches, of which rfactor-ed ones) per form: the primary form, then the padded one where there is one, then
# the recompute ones (cuda_recompute, rfactor-ed statistics too: three sweeps 8 sketches, P from the fragments or
# staged through shared memory x A's fragments per k tile or resident; two sweeps 4)
@pytest.mark.parametrize("spec, expected", [("a=2x3x128x64,b=2x3x256x64,transB=1", [(7, 5), (8, 8), (4, 4)]),  # 2 shared-S + 5
                                            ("a=2x3x197x64,b=2x3x197x64,transB=1", [(2, 0), (5, 5), (8, 8), (4, 4)]),
                                            ("a=2x3x128x64,b=2x3x256x64,transB=1,bias=2x1x128x256", [(2, 0)])])
def test_space_offers_register_sketches_where_they_apply(spec, expected):
    import tvm
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    from flashgemm.spaces import cuda_space
    from flashgemm import targets
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import tuning_module
    from flashgemm.spaces.kernel_forms import tuning_modules
    modules = tuning_modules(parse(spec), "sm_90")
    counts = []
    for _, mod in modules:
        ctx = ms.TuneContext(mod=mod, target=targets.tvm_target("sm_90"), task_name="main", rand_state=1,
                             space_generator=cuda_space.design_space("sm_90"))
        sketches = ctx.generate_design_space()
        assert all(isinstance(s, tvm.s_tir.Schedule) for s in sketches)
        counts.append((len(sketches), sum("rfactor" in str(s.trace) for s in sketches)))  # register sketches rfactor
    assert counts == expected


@pytest.fixture(scope="module")
def codegen(tmp_path_factory):
    from tests.compile_worker import run_compile_worker
    return run_compile_worker(WORKER, [[a, d, s, SEEDS] for a, d, s in CODEGEN], tmp_path_factory)


@pytest.fixture(scope="module")
def padded_codegen(tmp_path_factory):
    from tests.compile_worker import run_compile_worker
    return run_compile_worker(WORKER, [[a, d, s, SEEDS] for a, d, s in PADDED_CODEGEN], tmp_path_factory)


@pytest.mark.parametrize("arch, dtype, spec", CODEGEN + PADDED_CODEGEN)
def test_register_sketches_build_with_accumulators_in_registers(codegen, padded_codegen, arch, dtype, spec):
    padded = (arch, dtype, spec) in PADDED_CODEGEN
    (r,) = [x for x in (padded_codegen if padded else codegen) if x["spec"] == spec]
    rate = r["valid"] / r["seeds"]
    print(f"{arch} {dtype} {spec} (padded {r['pad']}): {r['sketches']} register sketches, "
          f"valid {r['valid']}/{r['seeds']} = {rate:.0%}")
    assert (r["pad"] is not None) == padded
    assert r["sketches"] == 5 and rate >= (PADDED_VALID_FLOOR if padded else VALID_FLOOR)
    assert r["builds"]
    ptx = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    for b in r["builds"]:
        assert b["ok"], b.get("error")
        src = b["src"]
        for needle in (f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32", "ldmatrix.sync.aligned", "cp.async"):
            assert needle in src
        # S is a per-thread register array (the warp's fragments: 8 floats each) that the softmax reads directly (no
        # fp32 S tile in shared memory), and no shuffles of S (only P's whole-sector stores,
        # flashgemm/codegen/cuda_src/store_whole_sectors, and the partial statistics' quad reductions): every element of
        # S is read by the lane that holds it
        (acc,) = re.findall(r"alignas\(64\) float S\w*_warp_ptr\[(\d+)\];", src)
        assert int(acc) % 8 == 0 and int(acc) <= 128, acc
        assert re.search(r"=[^;\n]*\bS\w*_warp_ptr\[", src)  # the softmax reads the accumulators themselves
        kernel = src[src.index('extern "C" __global__'):]  # (TVM's preamble defines shuffle macros)
        # (and the quad reductions of the partial statistics: flashgemm/codegen/tir/reduce_statistics_in_quads)
        quad = re.findall(r"__shfl_xor_sync\(\(uint\)4294967295, row_(?:max|sum)_rf\w*_ptr\w*\[0\], [12], 32\)", kernel)
        assert kernel.count("__shfl") == kernel.count("__shfl_sync(0xffffffffu, fg_pair[") + len(quad)
        assert len(re.findall(r'__global__ void __launch_bounds__\(\d+\) (\w+)\(', src)) == 2  # decl + def: 1 kernel


# ----------------------------------------------------------------------------- GPU numerics
CASES = {  # (b, h, m, n, k), features (no bias or mask: cuda_registers.serves)
    "w1": ((2, 16, 512, 512, 64), dict()),
    "causal-m-lt-n": ((2, 2, 128, 192, 64), dict(causal=True)),
    "causal-m-gt-n": ((2, 2, 192, 128, 64), dict(causal=True)),   # the first 64 rows fully masked: zeros
    "b-not-transposed-k40": ((2, 2, 64, 128, 40), dict(trans_b=False)),
    "k16-n2048": ((1, 2, 32, 2048, 16), dict()),
}


@pytest.mark.gpu
@pytest.mark.parametrize("forms", [None, ("row-pipelined",)], ids=["all", "row-pipelined"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
def test_register_sketch_numerics(dtype, case, forms):
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    from flashgemm.spaces import cuda_registers, cuda_space
    (b, h, m, n, k), feat = CASES[case]
    c = g._case(dtype, b, h, m, n, k, **feat)
    variant, shape = g._variant(dtype, c), g._canon(c)
    # valid candidates of every sketch (four) or of the row-pipelined one only (two: its A double buffer and the
    # cp.async waits across row tiles), each replayed on the runtime form as it ships
    forms = forms or cuda_registers.FORMS
    for rt in g._space_candidates(variant, shape, c["scale"], count=4 if len(forms) > 1 else 2,
                                  space=lambda s: cuda_registers.schedule(s, g.ARCH, forms=forms)):
        p = g._run(cuda_space.build(rt.mod, g.ARCH), dtype, c, shape)
        g._check(p, c, dtype)
        if feat.get("causal") and m > n:
            assert np.all(p[..., : m - n, :] == 0)  # fully masked rows are exact zeros


PADDED_CASES = {  # shapes the register sketches take in the kernel's padded form (cuda_registers.padded_sizes)
    "w3-rows1500": ((1, 2, 1500, 1500, 64), dict()),
    "w2-197": ((2, 3, 197, 197, 64), dict()),
    "causal-m-lt-n-k40": ((2, 2, 100, 200, 40), dict(causal=True)),
    "causal-m-gt-n": ((2, 2, 150, 90, 64), dict(causal=True)),   # the first 60 rows fully masked: zeros
    "b-not-transposed-odd": ((2, 2, 70, 130, 24), dict(trans_b=False)),
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", list(PADDED_CASES))
def test_padded_register_sketch_numerics(dtype, case):
    """Padded rows and columns: zero-filled A/B, -inf logits past N, guarded P stores (that nothing is read or
    written out of bounds is compute-sanitizer memcheck's job: results/h100 has the run)."""
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    from flashgemm.spaces import cuda_registers, cuda_space
    (b, h, m, n, k), feat = PADDED_CASES[case]
    c = g._case(dtype, b, h, m, n, k, **feat)
    variant, shape = g._variant(dtype, c), g._canon(c)
    pad = cuda_registers.padded_sizes(g.ARCH, variant, m, n, k)
    assert pad is not None
    for rt in g._space_candidates(variant, shape, c["scale"], count=4, pad=pad,
                                  space=lambda s: cuda_registers.schedule(s, g.ARCH)):
        p = g._run(cuda_space.build(rt.mod, g.ARCH), dtype, c, shape)
        g._check(p, c, dtype)
        if feat.get("causal") and m > n:
            assert np.all(p[..., : m - n, :] == 0)


def test_database_keeps_and_replays_records_of_every_form(tmp_path):
    """A database holding records of every form (tune --padded-form --recompute-form): the top-k keeps each under its
    own form's workload, and the build replays the fastest on the runtime kernel of its form (no GPU: traces only)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    from flashgemm.spaces import cuda_space
    from flashgemm import targets
    from flashgemm.op.workloads import parse
    from flashgemm.tune import database as dbm
    from flashgemm.bundle.best import load_tuned
    from flashgemm.spaces.kernel_forms import tuning_modules
    target, wl = "sm_90", parse("a=1x2x100x64,b=1x2x200x64,transB=1,name=odd")
    register_intrinsics(target)
    modules = tuning_modules(wl, target)
    assert [f.name for f, _ in modules] == ["one-pass", "padded", "recompute", "recompute2"]
    traces = []
    for _, mod in modules:  # one valid sampled candidate of each form's space
        ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(target), task_name="main", rand_state=1,
                             space_generator=cuda_space.design_space(target))
        sketches = ctx.generate_design_space()
        for seed in range(1, 40):
            sch = tvm.s_tir.Schedule(mod, seed=seed)
            Trace(sketches[seed % len(sketches)].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            if all(p.apply(sch) for p in ctx.space_generator.postprocs):
                traces.append(sch.trace)
                break
    assert len(traces) == len(modules)
    for fast in range(len(modules)):  # each form's record the fastest in turn
        secs = [2e-5] * len(modules)
        secs[fast] = 1e-5
        scratch = dbm.open_json_db(tmp_path / f"scratch{fast}", create=True)
        records = [ms.database.TuningRecord(tr, scratch.commit_workload(mod), [tvm.runtime.convert(float(s))],
                                            targets.tvm_target(target), None)
                   for tr, (_, mod), s in zip(traces, modules, secs)]
        wl_dir = tmp_path / f"db{fast}" / wl.dir_name
        dbm.write_top_k(wl_dir, modules[0][1], records,
                        {"target": target, "workload": wl.to_json(), "trials": len(modules)})
        top = dbm.top_records([mod for _, mod in modules], [dbm.open_json_db(wl_dir)], 10)
        assert [dbm.mean_secs(r) for r in top] == [1e-5] + [2e-5] * (len(modules) - 1)  # all kept, each its own
        tk = load_tuned(wl_dir, target)
        assert tk.run_secs == 1e-5
        assert tk.form == modules[fast][0].name  # replayed on the form it was tuned in
        guarded = re.search(r"if v\w+ < 100 and v\w+ < 200:", tk.schedule.mod.script())
        assert bool(guarded) == (fast > 0)  # the padded forms' guarded P store (fused_gemm_softmax._padded)
        assert ('"S_sum' in tk.schedule.mod.script()) == (fast == 2)  # the recompute form's second GEMM
