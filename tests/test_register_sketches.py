"""The register-resident sketches (schedules/cuda_registers.py): S stays in the mma accumulators.

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

SEEDS = 12
VALID_FLOOR = 0.5  # measured: 9/12 .. 12/12 (invalid: more than 1024 threads a block)
CODEGEN = [("sm_80", "float16", "a=2x3x128x64,b=2x3x256x64,transB=1,scale=0.125"),
           ("sm_89", "bfloat16", "a=2x3x64x40,b=2x3x40x128"),  # K padded, B [K, N]
           ("sm_90", "float16", "a=2x3x128x64,b=2x3x512x64,transB=1,causal=1")]

WORKER = textwrap.dedent(r'''
    import json, os, sys
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace
    from tir_kernels import runtime_func
    from tir_kernels.workloads import parse
    from tuning_db.best import TENSOR_CORE_ALIGN
    from tuning_db.tuner import tuning_module
    from schedules import cuda_registers, cuda_space, targets

    assert tvm.runtime.enabled("cuda"), "TVM's CUDA runtime did not load: nvcc would never run"
    out = []
    for arch, dtype, spec, seeds in json.loads(sys.argv[1]):
        wl = parse(spec, dtype)
        mod = tuning_module(wl, arch)
        gen = ms.space_generator.ScheduleFn(lambda s: cuda_registers.schedule(s, arch), sch_rules=[],
                                            postprocs=cuda_space.postprocs(arch), mutator_probs={})
        ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(arch), task_name="main", rand_state=5,
                             space_generator=gen)
        sketches = ctx.generate_design_space()
        valid, builds, built = 0, [], set()
        for seed in range(1, seeds + 1):
            k = seed % len(sketches)
            sch = tvm.s_tir.Schedule(mod, seed=seed)
            Trace(sketches[k].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
                continue
            valid += 1
            if k in built:
                continue
            built.add(k)
            try:
                src = cuda_space.build(sch.mod, arch).mod.imports[0].inspect_source("cuda")
                rt = tvm.s_tir.Schedule(tvm.IRModule({"main": runtime_func(wl.variant, wl.canonical,
                    align=TENSOR_CORE_ALIGN, any_batch=True)}))
                sch.trace.apply_to_schedule(rt, remove_postproc=False)  # what build.py ships: any batch
                cuda_space.build(rt.mod, arch)
                builds.append({"ok": True, "src": src})
            except Exception as err:  # noqa: BLE001
                builds.append({"ok": False, "error": str(err)[-2000:]})
        out.append({"arch": arch, "dtype": dtype, "sketches": len(sketches), "valid": valid, "seeds": seeds,
                    "builds": builds})
    print("RESULT" + json.dumps(out))
''')


def test_where_the_register_sketches_apply():
    import tvm

    from schedules import cuda_registers
    from tir_kernels.workloads import parse
    from tuning_db.tuner import tuning_module
    assert cuda_registers.applies(512, 512, 64) and cuda_registers.applies(16, 64, 1)
    assert not cuda_registers.applies(197, 256, 64)   # M not a multiple of 16 (padded S)
    assert not cuda_registers.applies(256, 1500, 64)  # N not a multiple of 64
    assert not cuda_registers.applies(1, 512, 64)     # M = 1: the row-vector space
    assert not cuda_registers.applies(64, 4096, 64)   # beyond the registers
    served = {spec: cuda_registers.serves(tvm.s_tir.Schedule(tuning_module(parse(spec), "sm_90")))
              for spec in ("bert-large", "a=2x64x64,b=2x64x128,causal=1", "a=2x64x64,b=2x64x128,bias=2x64x128",
                           "a=2x64x64,b=2x64x128,mask=2x64x128:bool")}
    assert list(served.values()) == [True, True, False, False]  # bias / mask variants: shared-memory sketches only


@pytest.mark.parametrize("spec, expected", [("a=2x3x128x64,b=2x3x256x64,transB=1", 7),   # 2 shared-S + 5 register
                                            ("a=2x3x197x64,b=2x3x197x64,transB=1", 2),   # shared-S only
                                            ("a=2x3x128x64,b=2x3x256x64,transB=1,bias=2x1x128x256", 2)])
def test_space_offers_register_sketches_where_they_apply(spec, expected):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from schedules import cuda_space, targets
    from tir_kernels.workloads import parse
    from tuning_db.tuner import tuning_module
    ctx = ms.TuneContext(mod=tuning_module(parse(spec), "sm_90"), target=targets.tvm_target("sm_90"),
                         task_name="main", rand_state=1, space_generator=cuda_space.design_space("sm_90"))
    sketches = ctx.generate_design_space()
    assert len(sketches) == expected and all(isinstance(s, tvm.s_tir.Schedule) for s in sketches)
    assert sum("rfactor" in str(s.trace) for s in sketches) == expected - 2  # only the register sketches rfactor


@pytest.fixture(scope="module")
def codegen(tmp_path_factory):
    from tests.compile_worker import run_compile_worker
    return run_compile_worker(WORKER, [[a, d, s, SEEDS] for a, d, s in CODEGEN], tmp_path_factory)


@pytest.mark.parametrize("arch, dtype, spec", CODEGEN)
def test_register_sketches_build_with_accumulators_in_registers(codegen, arch, dtype, spec):
    (r,) = [x for x in codegen if x["arch"] == arch]
    rate = r["valid"] / r["seeds"]
    print(f"{arch} {dtype}: {r['sketches']} register sketches, valid {r['valid']}/{r['seeds']} = {rate:.0%}")
    assert r["sketches"] == 5 and rate >= VALID_FLOOR
    assert r["builds"]
    ptx = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    for b in r["builds"]:
        assert b["ok"], b.get("error")
        src = b["src"]
        for needle in (f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32", "ldmatrix.sync.aligned", "cp.async"):
            assert needle in src
        # S is a per-thread register array (the warp's fragments: 8 floats each) that the softmax reads directly (no
        # fp32 S tile in shared memory), and no shuffles: every element is read by the lane that holds it
        (acc,) = re.findall(r"alignas\(64\) float S\w*_warp_ptr\[(\d+)\];", src)
        assert int(acc) % 8 == 0 and int(acc) <= 128, acc
        assert re.search(r"=[^;\n]*\bS\w*_warp_ptr\[", src)  # the softmax reads the accumulators themselves
        assert "__shfl" not in src[src.index('extern "C" __global__'):]  # (TVM's preamble defines shuffle macros)
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
    from schedules import cuda_registers, cuda_space
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
