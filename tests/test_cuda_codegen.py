"""CUDA code generation, compile-only (no GPU needed): the tensor-core space and the generic schedule.

For sm_80 / sm_89 / sm_90 and fp16 / bf16: sample the Meta-Schedule space (seeded), check the valid
rate, build valid candidates with nvcc, and check the CUDA source (mma.sync m16n8k16 of the right
dtype, ldmatrix, cp.async) and that nvcc produced a fatbin for the requested arch.

Why a subprocess: TVM only calls nvcc when its CUDA runtime library loads, and that needs libcuda.so.1
(the driver) at *import* time. On a GPU-less machine we compile a stub libcuda.so.1 (its functions
return CUDA_ERROR_NO_DEVICE) into a temp dir and run the builds in a child process with it on
LD_LIBRARY_PATH. On a machine with a real driver the stub is not used (never shadow a real driver).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flashgemm.codegen import cuda_stub

ROOT = Path(__file__).resolve().parents[1]
ARCHES = ("sm_80", "sm_89", "sm_90")
DTYPES = ("float16", "bfloat16")
SEEDS = 12            # samples per (arch, dtype)
BUILDS = 1            # valid candidates built with nvcc per (arch, dtype)
VALID_FLOOR = 0.5     # measured: 12/12 valid on W2 (the postprocs reject nothing for these shapes)
# W2-like problem kept small for the test (batch 2x3); 197 = not a multiple of 16 on M and N
WORKLOAD = "a=2x3x197x64,b=2x3x197x64,transB=1,scale=0.125"
# rows too long for shared memory on every arch: the split-N form (M = 100 and K = 40 padded)
SPLIT_N_WORKLOAD = "a=2x100x40,b=2x40x8192,bias=8192,scale=0.125"
# M = 1 (decoding): the row-vector space (flashgemm/spaces/cuda_row_vector), one shape per arch: N padded to 256
# (transB, add mask), K = 3 with B [K, N] and a bias, the decode shape's N and K with causal
ROW_VECTOR_WORKLOADS = {
    "sm_80": ("float16", "a=2x3x1x64,b=2x3x300x64,transB=1,mask=2x1x1x300:add,scale=0.125"),
    "sm_89": ("bfloat16", "a=2x3x1x3,b=2x3x3x40,bias=40"),
    "sm_90": ("float16", "a=2x4x1x64,b=2x4x2048x64,transB=1,causal=1,scale=0.125"),
}


WORKER = textwrap.dedent(r'''
    import json, os, struct, sys
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    import tvm, tvm_ffi
    import tvm.support.nvcc  # noqa: F401  (registers tvm_callback_cuda_compile)
    from tvm.s_tir.schedule import Trace
    from tvm.s_tir import meta_schedule as ms
    from flashgemm.op.variant import Variant
    from flashgemm.kernel.fused_gemm_softmax import runtime_func, tuning_func
    from flashgemm.op.workloads import parse
    from flashgemm.spaces import cuda_generic, cuda_space
    from flashgemm import targets

    assert tvm.runtime.enabled("cuda"), "TVM's CUDA runtime did not load: nvcc would never run"
    fatbins = []
    _orig = tvm_ffi.get_global_func("tvm_callback_cuda_compile")

    @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
    def _record(code, *rest):
        out = _orig(code, *rest)
        fatbins.append(bytes(out))
        return out

    def fatbin_arch(blob):
        """sm version of the first entry of a fatbin (header magic 0xBA55ED50), or None."""
        if len(blob) < 48 or struct.unpack_from("<I", blob, 0)[0] != 0xBA55ED50:
            return None
        return struct.unpack_from("<I", blob, 16 + 28)[0]

    def build(mod, arch):
        del fatbins[:]
        ex = cuda_space.build(mod, arch)
        src = ex.mod.imports[0].inspect_source("cuda")
        return src, [fatbin_arch(b) for b in fatbins]

    req = json.loads(sys.argv[1])
    res = {"space": [], "generic": []}
    from flashgemm.spaces.kernel_forms import tuning_module
    for arch, dtype, spec in req["space"]:
        wl = parse(spec, dtype)
        mod = tuning_module(wl, arch)  # the one-pass form, or the split-N form for long rows
        ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(arch), task_name="main", rand_state=7,
                             space_generator=cuda_space.design_space(arch))
        sketches = ctx.generate_design_space()
        valid, builds = 0, []
        for seed in range(1, req["seeds"] + 1):
            sch = tvm.s_tir.Schedule(mod, seed=seed)
            Trace(sketches[seed % len(sketches)].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
                continue
            valid += 1
            if len(builds) < req["builds"]:
                try:
                    src, archs = build(sch.mod, arch)
                    builds.append({"ok": True, "src": src, "fatbin_archs": archs})
                except Exception as err:  # noqa: BLE001
                    builds.append({"ok": False, "error": str(err)[-2000:]})
        res["space"].append({"arch": arch, "dtype": dtype, "spec": spec, "sketches": len(sketches), "seeds": req["seeds"],
                             "valid": valid, "builds": builds})
    for arch, variant in req["generic"]:
        v = Variant(**variant)
        try:
            src, archs = build(cuda_generic.generic_schedule(runtime_func(v)).mod, arch)
            res["generic"].append({"arch": arch, "variant": v.key, "ok": True, "fatbin_archs": archs,
                                   "src_len": len(src)})
        except Exception as err:  # noqa: BLE001
            res["generic"].append({"arch": arch, "variant": v.key, "ok": False, "error": str(err)[-2000:]})
    res["default"] = []
    from flashgemm.bundle import best
    for arch, spec in req.get("default", []):
        wl = parse(spec)
        tk = best.default_kernel(wl, arch, log=lambda *_: None)
        if tk is None:
            res["default"].append({"arch": arch, "spec": spec, "ok": False, "error": "no default schedule"})
            continue
        try:
            src, archs = build(tk.schedule.mod, arch)
            twin = build(tk.twin.mod, arch)[0] if tk.twin is not None else None
            res["default"].append({"arch": arch, "spec": spec, "ok": True, "src": src, "fatbin_archs": archs,
                                   "any_batch": tk.any_batch, "twin_src": twin, "fixed_batch": tk.fixed_batch,
                                   "canonical": list(wl.canonical.sizes)})
        except Exception as err:  # noqa: BLE001
            res["default"].append({"arch": arch, "spec": spec, "ok": False, "error": str(err)[-2000:]})
    from flashgemm.kernel import fused_attention_mma, fused_attention_wgmma, fused_gemm_softmax_wgmma
    for form, kernel in (("mma", fused_attention_mma), ("wgmma", fused_attention_wgmma),
                         ("gemm_softmax_wgmma", fused_gemm_softmax_wgmma), ("split", fused_attention_mma)):
        res["attention_" + form] = []
        for arch, variant, d in req.get("attention_" + form, []):
            v = Variant(**variant)
            kw = {"split": True} if form == "split" else {}
            try:
                src, archs = build(tvm.IRModule({"main": kernel.runtime_func(v, d, **kw)}), arch)
                res["attention_" + form].append({"arch": arch, "variant": v.key, "d": d, "ok": True,
                                                 "fatbin_archs": archs, "src": src})
            except Exception as err:  # noqa: BLE001
                res["attention_" + form].append({"arch": arch, "variant": v.key, "d": d, "ok": False,
                                                 "error": str(err)[-2000:]})
    print("RESULT" + json.dumps(res))
''')


@pytest.fixture(scope="module")
def build_env(tmp_path_factory):
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        pytest.skip("nvcc not found (CUDA toolkit needed for compile-only CUDA tests)")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(nvcc) + os.pathsep + env.get("PATH", "")
    env["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if not cuda_stub.real_driver_present():
        if shutil.which("cc") is None and shutil.which("gcc") is None:
            pytest.skip("no C compiler to build the stub libcuda.so.1")
        env = cuda_stub.env_with_stub(cuda_stub.build_stub(tmp_path_factory.mktemp("stubcuda")), env)
    return env


def _run_worker(env, req: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", WORKER, json.dumps(req)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, f"build worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT"):])


@pytest.fixture(scope="module")
def results(build_env):
    req = {"workload": WORKLOAD, "seeds": SEEDS, "builds": BUILDS,
           "space": [[a, d, WORKLOAD] for a in ARCHES for d in DTYPES]
           + [[a, d, SPLIT_N_WORKLOAD] for a, d in zip(ARCHES, DTYPES + DTYPES[:1])]
           + [[a, d, spec] for a, (d, spec) in ROW_VECTOR_WORKLOADS.items()],
           "generic": [[a, {"dtype": "float16", "trans_b": True, "has_bias": True, "mask": "add", "causal": True}]
                       for a in ARCHES]
           + [["sm_90", {"dtype": "bfloat16", "mask": "bool"}]],
           "default": [[a, s] for a, s in DEFAULT_CASES],
           "attention_mma": ATTENTION_MMA_CASES, "attention_wgmma": ATTENTION_WGMMA_CASES,
           "attention_split": ATTENTION_SPLIT_CASES,
           "attention_gemm_softmax_wgmma": GEMM_SOFTMAX_WGMMA_CASES}
    return _run_worker(build_env, req)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_space_valid_rate_and_codegen(results, arch, dtype):
    (r,) = [x for x in results["space"] if x["arch"] == arch and x["dtype"] == dtype and x["spec"] == WORKLOAD]
    rate = r["valid"] / r["seeds"]
    print(f"{arch} {dtype}: {r['sketches']} sketches, valid {r['valid']}/{r['seeds']} = {rate:.0%}")
    assert rate >= VALID_FLOOR, f"valid-candidate rate {rate:.0%} below the floor {VALID_FLOOR:.0%}"
    assert r["builds"], "no valid candidate to build"
    sm = int(arch[3:])
    ptx_dtype = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    for b in r["builds"]:
        assert b["ok"], b.get("error")
        src = b["src"]
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx_dtype}.{ptx_dtype}.f32" in src
        assert "ldmatrix.sync.aligned" in src
        assert "cp.async" in src
        assert "extern __shared__" in src  # S lives in dynamic shared memory
        # every mma fragment is per-thread registers: 8 elements a 16x16 fragment, at most 4x4 fragments
        # a warp. TVM 0.27's single LowerWarpMemory pass left A/B fragments as 32x larger arrays indexed
        # by threadIdx.x (local memory; flashgemm/codegen/cuda_build.py).
        frags = re.findall(r"alignas\(64\) \w+ (\w+warp\w*)\[(\d+)\]", src)
        assert frags and all(int(n) <= 128 for _, n in frags), frags
        assert b["fatbin_archs"] and all(a == sm for a in b["fatbin_archs"]), b["fatbin_archs"]


@pytest.mark.parametrize("arch, dtype", list(zip(ARCHES, DTYPES + DTYPES[:1])))
def test_split_n_space_valid_rate_and_codegen(results, arch, dtype):
    """The long-row (split-N) form: two kernels (tensor-core pass with chunk statistics, rescale pass)."""
    (r,) = [x for x in results["space"] if x["arch"] == arch and x["dtype"] == dtype and x["spec"] == SPLIT_N_WORKLOAD]
    rate = r["valid"] / r["seeds"]
    print(f"split-N {arch} {dtype}: {r['sketches']} sketches, valid {r['valid']}/{r['seeds']} = {rate:.0%}")
    assert rate >= VALID_FLOOR, f"valid-candidate rate {rate:.0%} below the floor {VALID_FLOOR:.0%}"
    assert r["builds"], "no valid candidate to build"
    ptx = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    for b in r["builds"]:
        assert b["ok"], b.get("error")
        src = b["src"]
        for needle in (f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32", "ldmatrix.sync.aligned", "cp.async",
                       "extern __shared__"):
            assert needle in src
        kernels = re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(', src)
        assert len(set(kernels)) == 2, kernels  # pass 1 (GEMM + chunk statistics) and pass 2 (rescale)
        assert b["fatbin_archs"] and all(a == int(arch[3:]) for a in b["fatbin_archs"]), b["fatbin_archs"]


@pytest.mark.parametrize("arch", ARCHES)
def test_row_vector_space_valid_rate_and_codegen(results, arch):
    """M = 1: a GEMV per row with the softmax behind it, one kernel, S in shared memory, warp-shuffle reductions,
    no tensor cores (a 16-row mma tile would be 15/16 padding)."""
    dtype, spec = ROW_VECTOR_WORKLOADS[arch]
    (r,) = [x for x in results["space"] if x["arch"] == arch and x["spec"] == spec]
    rate = r["valid"] / r["seeds"]
    print(f"row-vector {arch} {dtype}: {r['sketches']} sketches, valid {r['valid']}/{r['seeds']} = {rate:.0%}")
    assert rate >= VALID_FLOOR, f"valid-candidate rate {rate:.0%} below the floor {VALID_FLOOR:.0%}"
    assert r["builds"], "no valid candidate to build"
    for b in r["builds"]:
        assert b["ok"], b.get("error")
        src = b["src"]
        kernels = re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(', src)
        assert len({name for _, name in kernels}) == 1, kernels  # fused: GEMV and softmax in one kernel
        assert "mma.sync" not in src and "__shfl_down_sync" in src and "extern __shared__" in src
        assert all(int(t) % 32 == 0 for t, _ in kernels), kernels  # whole warps
        assert b["fatbin_archs"] and all(a == int(arch[3:]) for a in b["fatbin_archs"]), b["fatbin_archs"]


@pytest.mark.parametrize("arch", ARCHES)
def test_generic_builds(results, arch):
    rs = [x for x in results["generic"] if x["arch"] == arch]
    assert rs
    sm = int(arch[3:])
    for r in rs:
        assert r["ok"], r.get("error")
        assert r["fatbin_archs"] and all(a == sm for a in r["fatbin_archs"]), r["fatbin_archs"]


def _attention_epilogue_ok(src: str):
    """O's epilogue: a division a row (its reciprocal), not one an element (IEEE division with its slow path), and a
    thread's two adjacent columns in one 32-bit store."""
    assert 0 < src.count("/ l_run_ptr[") <= 4, src.count("/ l_run_ptr[")
    assert "O32_ptr[" in src


# FusedAttention's tensor-core kernel (flashgemm/kernel/fused_attention_mma.py): one variant and head size per arch
ATTENTION_MMA_CASES = [
    ("sm_80", {"dtype": "float16", "trans_b": True}, 64),
    ("sm_89", {"dtype": "bfloat16", "mask": "bool", "causal": True}, 128),  # K as [D, N]: ldmatrix.trans
    ("sm_90", {"dtype": "float16", "trans_b": True, "has_bias": True, "mask": "add"}, 80),
    ("sm_80", {"dtype": "bfloat16", "trans_b": True, "has_bias": True, "causal": True, "causal_fill": True}, 64),
]


@pytest.mark.parametrize("case", range(len(ATTENTION_MMA_CASES)))
def test_attention_mma_builds(results, case):
    """mma.sync of the variant's dtype for Q K^T and P V (D / 8 and N-chunk / 8 n8 tiles a k-step), K and V
    through ldmatrix (V transposed), cp.async copies, quad shuffles for the row statistics, built for the arch."""
    arch, variant, d = ATTENTION_MMA_CASES[case]
    r = results["attention_mma"][case]  # (the worker's results in the cases' order)
    assert r["ok"], r.get("error")
    src, ab = r["src"], "bf16" if variant["dtype"] == "bfloat16" else "f16"
    assert src.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32") > 0
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src and "cp.async.cg.shared.global" in src
    assert "__shfl_xor_sync" in src
    _attention_epilogue_ok(src)
    assert ("__syncthreads_or" in src) == bool(variant.get("causal_fill"))  # causal_fill: the tile's need of every key
    assert r["fatbin_archs"] and all(a == int(arch[3:]) for a in r["fatbin_archs"]), r["fatbin_archs"]


# FusedAttention's split-N form (fused_attention_mma.runtime_func's split): a decoder step's variants
ATTENTION_SPLIT_CASES = [
    ("sm_80", {"dtype": "float16", "trans_b": True, "has_bias": True}, 64),
    ("sm_90", {"dtype": "bfloat16", "trans_b": True, "has_bias": True, "causal": True, "causal_fill": True}, 128),
    ("sm_89", {"dtype": "float16", "mask": "bool"}, 80),  # K as [D, N]
]


@pytest.mark.parametrize("case", range(len(ATTENTION_SPLIT_CASES)))
def test_attention_split_builds(results, case):
    """Two kernels: the splits' (mma.sync, a block a row tile and split, its partial rows written to the float32
    workspace, no O store and no causal V_last pass) and the combine (a block a row, O stored with zero_or_o's
    division and zero-row select)."""
    arch, variant, d = ATTENTION_SPLIT_CASES[case]
    r = results["attention_split"][case]
    assert r["ok"], r.get("error")
    src, ab = r["src"], "bf16" if variant["dtype"] == "bfloat16" else "f16"
    kernels = re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(([^)]*)\) \{', src)
    assert [(name, "Work_ptr" in params, "O_ptr" in params) for _, name, params in kernels] == [
        ("main_kernel", True, False), ("main_kernel_1", True, True)], [k[1] for k in kernels]
    assert src.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32") > 0
    assert "exp2f(" in src and "__shfl_xor_sync" in src
    assert r["fatbin_archs"] and all(a == int(arch[3:]) for a in r["fatbin_archs"]), r["fatbin_archs"]


# FusedAttention's Hopper kernel (flashgemm/kernel/fused_attention_wgmma.py): K in both layouts, both head sizes
ATTENTION_WGMMA_CASES = [
    ("sm_90", {"dtype": "float16", "trans_b": True, "has_bias": True, "mask": "add"}, 64),
    ("sm_90", {"dtype": "bfloat16", "mask": "bool", "causal": True}, 128),  # K as [D, N]: MN-major, transposed
    ("sm_90", {"dtype": "float16", "trans_b": True, "has_bias": True, "mask": "fill"}, 64),  # DeBERTa's
    ("sm_90", {"dtype": "float16", "trans_b": True, "has_bias": True, "causal": True, "causal_fill": True}, 128),
]


@pytest.mark.parametrize("case", range(len(ATTENTION_WGMMA_CASES)))
def test_attention_wgmma_builds(results, case):
    """wgmma of the variant's dtype from shared memory for Q K^T (m64n{chunk}) and with P from registers for P V
    (m64n{D}), cp.async copies fenced for the async proxy, quad shuffles for the row statistics, built for sm_90a
    (the fatbin's sm_90 machine code)."""
    arch, variant, d = ATTENTION_WGMMA_CASES[case]
    r = results["attention_wgmma"][case]
    assert r["ok"], r.get("error")
    src, ab = r["src"], "bf16" if variant["dtype"] == "bfloat16" else "f16"
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.{ab}\.{ab} \{{[^}}]*\}}, %\d+, %\d+,", src)
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{d}k16\.f32\.{ab}\.{ab} \{{[^}}]*\}}, \{{", src)
    assert "fence.proxy.async.shared::cta" in src and "cp.async.cg.shared.global" in src
    assert "__shfl_xor_sync" in src
    _attention_epilogue_ok(src)
    assert ("__syncthreads_or" in src) == bool(variant.get("causal_fill"))
    assert r["fatbin_archs"] and all(a == 90 for a in r["fatbin_archs"]), r["fatbin_archs"]


# FusedGemmSoftmax's Hopper kernel (flashgemm/kernel/fused_gemm_softmax_wgmma.py): B in both layouts, both K
GEMM_SOFTMAX_WGMMA_CASES = [
    ("sm_90", {"dtype": "float16", "trans_b": True, "has_bias": True, "mask": "fill"}, 64),
    ("sm_90", {"dtype": "bfloat16", "mask": "add", "causal": True}, 128),
]


@pytest.mark.parametrize("case", range(len(GEMM_SOFTMAX_WGMMA_CASES)))
def test_gemm_softmax_wgmma_builds(results, case):
    """wgmma of the variant's dtype from shared memory for A B (m64n{chunk}), cp.async copies fenced for the async
    proxy, P staged in shared memory and stored in 16-byte vectors (rows of N % 8 == 0), built for sm_90a."""
    arch, variant, k = GEMM_SOFTMAX_WGMMA_CASES[case]
    r = results["attention_gemm_softmax_wgmma"][case]
    assert r["ok"], r.get("error")
    src, ab = r["src"], "bf16" if variant["dtype"] == "bfloat16" else "f16"
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.{ab}\.{ab} \{{[^}}]*\}}, %\d+, %\d+,", src)
    assert "fence.proxy.async.shared::cta" in src and "cp.async.cg.shared.global" in src
    assert re.search(r"\*\(uint4\*\)\(P32_ptr \+ [^;]*\) = \*\(uint4\*\)\(Ps32", src), "P's 16-byte stores"
    assert r["fatbin_archs"] and all(a == 90 for a in r["fatbin_archs"]), r["fatbin_archs"]


# default (untuned) schedules, flashgemm/spaces/cuda_default.py: one odd shape per arch, both dtypes, all variant
# features
DEFAULT_CASES = [
    ("sm_80", "a=2x3x1500x64,b=2x3x1500x64,transB=1,scale=0.125"),  # Whisper rows
    ("sm_89", "a=2x3x197x64,b=2x3x197x64,transB=1,bias=2x1x197x197,dtype=bfloat16"),  # the ViT site, bf16
    ("sm_90", "a=2x3x17x3,b=2x3x3x40,causal=1,mask=2x1x17x40:add"),  # K = 3, B not transposed, causal
    ("sm_80", "a=4096x4096,b=4096x32000,dtype=bfloat16"),  # the LM head: split-N form
    ("sm_90", "a=2x4x1x64,b=2x4x2048x64,transB=1,scale=0.125"),  # M = 1 (decoding): the row-vector space
    ("sm_89", "a=2x1x1,b=2x1x200,causal=1,dtype=bfloat16"),  # M = 1 and K = 1
]


@pytest.mark.parametrize("arch, spec", DEFAULT_CASES)
def test_fixed_batch_twin_has_constant_batch_index_math(results, arch, spec):
    """An any-batch kernel ships with a twin (flashgemm.bundle.best) that keeps B0 = 1 (tuned with B0 = 1) or B1 at its
    tuned value (B0 > 1): its blockIdx split divides by constants, so the sign corrections of floordiv/floormod by
    a symbolic size ("rmod" temporaries) that the any-batch kernel's addresses carry are gone."""
    (r,) = [x for x in results["default"] if x["arch"] == arch and x["spec"] == spec]
    assert r["ok"], r.get("error")
    b0, b1 = r["canonical"][:2]
    assert r["fixed_batch"] == ([0, 1] if b0 == 1 else [1, b1])
    assert r["twin_src"] is not None and "rmod" not in r["twin_src"]
    if "mma.sync" in r["src"]:  # the tensor-core kernels fuse (B0, B1, row group) into blockIdx.x
        assert "rmod" in r["src"]


@pytest.mark.parametrize("arch, spec", DEFAULT_CASES)
def test_default_schedule_builds(results, arch, spec):
    (r,) = [x for x in results["default"] if x["arch"] == arch and x["spec"] == spec]
    assert r["ok"], r.get("error")
    assert r["any_batch"]
    ptx = "bf16" if "bfloat16" in spec else "f16"
    if re.search(r"a=(\d+x)*1x\d+,", spec):  # M = 1: the row-vector kernel, no tensor cores
        assert "mma.sync" not in r["src"] and "__shfl_down_sync" in r["src"]
        assert r["fatbin_archs"] and all(a == int(arch[3:]) for a in r["fatbin_archs"]), r["fatbin_archs"]
        return
    for needle in (f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32", "ldmatrix.sync.aligned", "cp.async"):
        assert needle in r["src"]
    sm = int(arch[3:])
    assert r["fatbin_archs"] and all(a == sm for a in r["fatbin_archs"]), r["fatbin_archs"]


def test_default_decisions_follow_the_tuned_winners():
    """The rule reproduces the structure the H100/H200 tuning chose (flashgemm/databases/sm_90 top records): BERT's
    512-row site 64 rows a block and 16 warps over 2 chunks, ViT's 197 16 rows a block, K tiles of 32."""
    from flashgemm.spaces import cuda_default  # noqa: PLC0415
    bert = cuda_default.choose_decisions(512, 512, 64, True, 32, 32, 4)[0]
    assert (bert["i"], bert["j"], bert["k"]) == ([8, 4], [2, 16, 1], [2, 2])
    vit = cuda_default.choose_decisions(197, 197, 64, True, 14, 16, 4)[0]
    assert (vit["i"], vit["j"], vit["k"]) == ([14, 1], [1, 16, 1], [2, 2])
    assert cuda_default.VEC_CHOICES[vit["vec_a"]] == 8 and cuda_default.PV_CHOICES[vit["pv"]] == 1  # 197 % 4 != 0
    odd = cuda_default.choose_decisions(17, 40, 3, False, 2, 3, 1)
    # K = 3: 16-byte copies would straddle A's rows; B [K, N] rows of 40: 8-wide copies fit
    assert [cuda_default.VEC_CHOICES[odd[0][x]] for x in ("vec_a", "vec_b")] == [1, 8]
    for cand in odd:  # every candidate is a valid split of the tile counts
        assert cand["i"][0] * cand["i"][1] == 2 and cand["j"][0] * cand["j"][1] * cand["j"][2] == 3


@pytest.mark.parametrize("arch", ARCHES)
def test_default_schedule_refuses_what_the_space_cannot_hold(arch):
    import tvm  # noqa: PLC0415

    from flashgemm.spaces import cuda_default, cuda_space  # noqa: PLC0415
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    from flashgemm.spaces.kernel_forms import tuning_module  # noqa: PLC0415
    for spec, needle in (("a=2x1x64,b=2x64x65536", "M=1 with N=65536"),  # one row of S beyond shared memory
                         ("a=64x512,b=512x32001,dtype=bfloat16", "multiple of 16")):
        with pytest.raises(cuda_space.UnsupportedShapeError, match=needle):
            cuda_default.default_trace(tuning_module(parse(spec), arch), arch)
    trace, cand = cuda_default.default_trace(tuning_module(parse("vit-b16")), arch)
    assert isinstance(trace, tvm.s_tir.schedule.Trace) and cand["i"] == [14, 1]
    if arch == "sm_89":  # 99 KB: a 32000-column row of S (128 KB) does not fit; it does on sm_80 and sm_90
        with pytest.raises(cuda_space.UnsupportedShapeError, match="M=1 with N=32000"):
            cuda_default.default_trace(tuning_module(parse("a=1x64,b=64x32000"), arch), arch)
    else:
        _, cand = cuda_default.default_trace(tuning_module(parse("a=1x64,b=64x32000"), arch), arch)
        assert cand["j"][1] * cand["w"][1] * 32 * cand["w"][0] == 32000


def test_row_vector_default_decisions():
    """M = 1: the structure the H100 tuning of decode-m1 chose (flashgemm/databases/sm_90/decode-m1.f16): one column a
    thread, 16 warps and the rest of the row in chunks, k vectors of 4 in k tiles of 32; K = 3: scalar k steps."""
    from flashgemm.spaces import cuda_default  # noqa: PLC0415
    dec = cuda_default.choose_row_vector_decisions(2048, 64, 2048)[0]
    assert (dec["j"], dec["w"], dec["kb"]) == ([2048, 1], [4, 16], [2, 8]) and dec["kv"] == 2  # kv = 4
    short = cuda_default.choose_row_vector_decisions(300, 64, 512)[0]
    assert short["j"] == [512, 1] and short["w"] == [1, 16]
    odd = cuda_default.choose_row_vector_decisions(40, 3, 256)
    assert all(c["kv"] == 0 and c["kb"] == [1, 3] for c in odd)  # K = 3: kv = 1, one k tile of 3


def test_long_rows_rejected_clearly():
    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    with pytest.raises(cuda_space.LongRowError, match="split-N form"):
        cuda_space.check_shape("sm_90", 4096, 32000, 4096)
    cuda_space.check_shape("sm_90", 1500, 1500, 64)   # W3 fits on H100 (96 KB of S at BM=16)
    with pytest.raises(cuda_space.LongRowError):
        cuda_space.check_shape("sm_89", 2000, 2000, 64)  # sm_89: 99 KB holds S rows up to N ~ 1530


def test_generic_recompute_rewrite_is_exact_on_cpu():
    """The generic CUDA schedule's IR rewrite (S recomputed per pass) computes the operator exactly:
    build the rewritten (unscheduled) function for llvm and compare with the reference."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    from flashgemm.spaces.cuda_generic import recompute_s_per_pass  # noqa: PLC0415
    from flashgemm.op.variant import Variant, canonicalize  # noqa: PLC0415
    from flashgemm.op.reference import fused_gemm_softmax_ref
    from flashgemm.kernel.fused_gemm_softmax import runtime_func

    rng = np.random.default_rng(0)
    v = Variant("float16", trans_b=True, has_bias=False, mask="add", causal=True)
    b, h, m, n, k = 2, 3, 5, 7, 9
    a = rng.standard_normal((b, h, m, k)).astype("float16")
    bb = rng.standard_normal((b, h, n, k)).astype("float16")
    mask = np.where(rng.random((b, 1, m, n)) < 0.3, -1e9, 0.0).astype("float32")
    mask[0, 0, 1, :] = -1e9                       # a fully masked row -> zeros
    mask16 = np.maximum(mask, -65504).astype("float16")
    shape = canonicalize(a.shape, bb.shape, True, None, mask.shape)
    func = recompute_s_per_pass(runtime_func(v, shape))
    ex = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    dev = tvm.cpu()
    p = tvm.runtime.empty((b, h, m, n), "float16", dev)
    mask_b = np.broadcast_to(mask16, (b, h, m, n))
    ex(tvm.runtime.tensor(a, dev), tvm.runtime.tensor(bb, dev), tvm.runtime.tensor(np.ascontiguousarray(mask_b), dev),
       p, np.float32(0.3))
    ref = fused_gemm_softmax_ref(a, bb, mask=mask16, scale=0.3, trans_b=True, causal=True)
    np.testing.assert_allclose(p.numpy().astype(np.float64), ref, atol=2e-3)


def test_m1_takes_the_row_vector_space():
    """The tensor-core space refuses M = 1 and names the space that serves it; that one refuses only rows of S
    beyond shared memory."""
    from flashgemm.spaces import cuda_row_vector, cuda_space  # noqa: PLC0415
    with pytest.raises(cuda_space.UnsupportedShapeError, match="cuda_row_vector"):
        cuda_space.check_shape("sm_90", 1, 256, 64)
    assert cuda_row_vector.applies(1) and not cuda_row_vector.applies(2)
    cuda_row_vector.check_shape("sm_90", 1, 50000, 128)
    with pytest.raises(cuda_space.UnsupportedShapeError, match="M=1 with N=60000"):
        cuda_row_vector.check_shape("sm_90", 1, 60000, 128)


@pytest.mark.parametrize("m, n, k", [(2, 256, 64), (3, 40, 1), (512, 512, 64), (1, 300, 64), (1, 40, 1)])
def test_space_generates_for_edge_shapes(m, n, k):
    """Few rows, K = 1, a shape needing no padding, M = 1: the space yields sketches and a valid sample."""
    import tvm  # noqa: PLC0415
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    from tvm.s_tir.schedule import Trace  # noqa: PLC0415

    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    from flashgemm import targets
    from flashgemm.op.variant import Variant, canonicalize  # noqa: PLC0415
    from flashgemm.kernel.fused_gemm_softmax import tuning_func

    v = Variant("bfloat16", True)
    c = canonicalize((2, 2, m, k), (2, 2, n, k), True)
    mod = tvm.IRModule({"main": tuning_func(v, c, 0.125).with_attr("global_symbol", "main")})
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target("sm_90"), task_name="main", rand_state=3,
                         space_generator=cuda_space.design_space("sm_90"))
    sketches = ctx.generate_design_space()
    assert sketches
    valid = 0
    for seed in range(1, 9):
        sch = tvm.s_tir.Schedule(mod, seed=seed)
        Trace(sketches[seed % len(sketches)].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        valid += all(p.apply(sch) for p in ctx.space_generator.postprocs)
    assert valid >= 1


def test_meta_schedule_builder_workers_build_candidates():
    """Meta-Schedule's builder runs f_build in fresh worker processes that never import TVM's tensor
    intrinsics (flashgemm/codegen/cuda_build.py): a sampled candidate must build there too (without a driver the
    CUDA codegen still runs; nvcc does not). Regression: the mma_store index map was missing there and
    every candidate of a tuning run failed to build."""
    import tvm  # noqa: PLC0415
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    from tvm.s_tir.schedule import Trace  # noqa: PLC0415

    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    from flashgemm import targets
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    from flashgemm.spaces.kernel_forms import tuning_module  # noqa: PLC0415

    mod = tuning_module(parse(WORKLOAD))
    target = targets.tvm_target("sm_90")
    ctx = ms.TuneContext(mod=mod, target=target, space_generator=cuda_space.design_space("sm_90"),
                         task_name="main", rand_state=1)
    sketch = ctx.generate_design_space()[0]
    for seed in range(1, 20):
        sch = tvm.s_tir.Schedule(mod, seed=seed)
        Trace(sketch.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        if all(p.apply(sch) for p in ctx.space_generator.postprocs):
            break
    (res,) = cuda_space.builder("sm_90", 1).build([ms.builder.BuilderInput(sch.mod, target)])
    assert res.error_msg is None, res.error_msg[-1500:]


def _warp_buffers_func(n_accumulators: int):
    """A function whose root block allocates n fp32 "warp" buffers (accumulators) and one fp16 fragment."""
    from tvm.script import tirx as T  # noqa: PLC0415

    @T.prim_func(s_tir=True)
    def two(x: T.Buffer((32,), "float32")):
        acc0 = T.sblock_alloc_buffer((32,), "float32", scope="warp")
        acc1 = T.sblock_alloc_buffer((32,), "float32", scope="warp")
        frag = T.sblock_alloc_buffer((32,), "float16", scope="warp")
        for i in range(32):
            with T.sblock("c"):
                vi = T.axis.remap("S", [i])
                x[vi] = acc0[vi] + acc1[vi] + T.cast(frag[vi], "float32")

    @T.prim_func(s_tir=True)
    def one(x: T.Buffer((32,), "float32")):
        acc0 = T.sblock_alloc_buffer((32,), "float32", scope="warp")
        frag = T.sblock_alloc_buffer((32,), "float16", scope="warp")
        for i in range(32):
            with T.sblock("c"):
                vi = T.axis.remap("S", [i])
                x[vi] = acc0[vi] + T.cast(frag[vi], "float32")
    import tvm  # noqa: PLC0415
    return tvm.IRModule({"main": two if n_accumulators == 2 else one})


@pytest.mark.parametrize("n_accumulators", [1, 2])
def test_warp_memory_fallback_only_with_one_accumulator(monkeypatch, n_accumulators):
    """When LowerWarpMemory fails, compile_cuda falls back to TVM's pipeline only for a kernel with one mma
    accumulator: that pipeline lowers only the first "warp" buffer, and a second accumulator left as a per-lane
    array computes wrong answers (as a two-sweep recompute draft did). With several it raises."""
    import tvm  # noqa: PLC0415
    from flashgemm.codegen import cuda_build  # noqa: PLC0415
    from flashgemm import targets
    mod = _warp_buffers_func(n_accumulators)
    assert cuda_build.warp_accumulators(mod) == ["acc0", "acc1"][:n_accumulators]
    calls = []

    def fake_compile(mod, target=None, tir_pipeline=None):
        calls.append(tir_pipeline)
        if tir_pipeline == cuda_build.TIR_PIPELINE:
            raise tvm.error.InternalError("LowerWarpMemory failed to rewrite load to shuffle for index tx*8 + 257")
        return "built by the fallback"

    monkeypatch.setattr(cuda_build.tvm, "compile", fake_compile)
    target = targets.tvm_target("sm_90")
    if n_accumulators == 1:
        assert cuda_build.compile_cuda(mod, target) == "built by the fallback"
        assert calls == [cuda_build.TIR_PIPELINE, None]
    else:
        with pytest.raises(cuda_build.UnloweredWarpMemoryError, match="2 mma accumulators .acc0, acc1."):
            cuda_build.compile_cuda(mod, target)
        assert calls == [cuda_build.TIR_PIPELINE]
