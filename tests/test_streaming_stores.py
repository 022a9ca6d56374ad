"""P's streaming stores (schedules/streaming_stores): every store to P becomes one evict-first store of the same
width. CPU: the rewrite on the store forms CodeGenCUDA writes, the modules it must leave alone, the helper compiled by
nvcc for every store width and arch, and the committed W1 / W2 / W3 kernels. GPU: the committed W1 and W2 kernels
give the same P bit for bit with and without it (the timing is benchmarks/shipped_forms_ab.py --cached-stores's)."""
import re
from pathlib import Path

import numpy as np
import pytest

from schedules import streaming_stores

REPO = Path(__file__).resolve().parent.parent
HEAD = '#include <cuda_fp16.h>\n'
SIG = ('extern "C" __global__ void __launch_bounds__(128) main_kernel(half* __restrict__ A_ptr, '
       'half* __restrict__ P_ptr)')
VECTOR = "      *(half2*)(P_ptr + ((((int)blockIdx.x) * 512) + (((int)threadIdx.x) * 2))) = __1;\n"
SECTOR = "          *(uint2*)(P_ptr + (((int)threadIdx.x) * 4)) = fg_v;\n"
SCALAR = "        P_ptr[((((int)blockIdx.x) * 197) + ((int)threadIdx.x))] = ((half)(x_ptr[0] * r));\n"


def _module(*body: str) -> str:
    return HEAD + SIG + ";\n" + SIG + " {\n" + "".join(body) + "}\n"


def test_each_store_to_p_becomes_one_streaming_store(monkeypatch):
    monkeypatch.delenv(streaming_stores.SWITCH, raising=False)
    out = streaming_stores.rewrite(_module(VECTOR, SECTOR, SCALAR))
    assert not re.search(r"\*\(\w+\*\)\(P_ptr|P_ptr\[", out)
    assert "fg_store_cs((half2*)(P_ptr + ((((int)blockIdx.x) * 512) + (((int)threadIdx.x) * 2))), __1);" in out
    assert "fg_store_cs((uint2*)(P_ptr + (((int)threadIdx.x) * 4)), fg_v);" in out
    assert "fg_store_cs(P_ptr + (((((int)blockIdx.x) * 197) + ((int)threadIdx.x))), ((half)(x_ptr[0] * r)));" in out
    # the helper once, before the first kernel (its declaration)
    assert out.count("void fg_store_cs(") == 1 and out.index("void fg_store_cs(") < out.index("__global__")


@pytest.mark.parametrize("read", ["        y_ptr[0] = P_ptr[3];\n", "        f(P_ptr);\n",
                                  "        half2 v = *(half2*)(P_ptr + 8);\n"])
def test_a_module_that_uses_p_otherwise_is_left_alone(read, monkeypatch):
    monkeypatch.delenv(streaming_stores.SWITCH, raising=False)
    src = _module(VECTOR, read)
    assert streaming_stores.rewrite(src) == src


def test_the_switch_turns_it_off(monkeypatch):
    src = _module(VECTOR)
    monkeypatch.setenv(streaming_stores.SWITCH, "1")
    assert streaming_stores.rewrite(src) == src


WIDTHS = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
struct __align__(8) half4 { __half x, y, z, w; };
extern "C" __global__ void k2(half* __restrict__ P_ptr, float v) {
  P_ptr[threadIdx.x] = ((half)(v));
}
extern "C" __global__ void k4(nv_bfloat16* __restrict__ P_ptr, float v) {
  *(nv_bfloat162*)(P_ptr + (threadIdx.x * 2)) = __float22bfloat162_rn(make_float2(v, v));
}
extern "C" __global__ void k8(half* __restrict__ P_ptr, half4 v) {
  *(half4*)(P_ptr + (threadIdx.x * 4)) = v;
}
extern "C" __global__ void k16(half* __restrict__ P_ptr, uint4 v) {
  *(uint4*)(P_ptr + (threadIdx.x * 8)) = v;
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_the_helper_compiles_to_one_streaming_store_of_each_width(arch, tmp_path, monkeypatch):
    """nvcc (as TVM calls it: -O3, fast math) on stores of 2, 4, 8 and 16 bytes: each kernel has one st.global.cs of
    its width and no other global store."""
    import shutil
    import subprocess
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    monkeypatch.delenv(streaming_stores.SWITCH, raising=False)
    src = streaming_stores.rewrite(WIDTHS)
    assert src.count("fg_store_cs(") == 5  # the helper and four stores
    (tmp_path / "k.cu").write_text(src)
    subprocess.run(["nvcc", f"-arch={arch}", "-O3", "--use_fast_math", "-ptx", "-o", str(tmp_path / "k.ptx"),
                    str(tmp_path / "k.cu")], check=True, capture_output=True)
    ptx = (tmp_path / "k.ptx").read_text()
    kernels = dict(re.findall(r"\.entry (k\d+)\((.*?)\n}\n", ptx, re.S))
    expected = {"k2": r"st\.global\.cs\.u16", "k4": r"st\.global\.cs\.u32", "k8": r"st\.global\.cs\.v2\.u32",
                "k16": r"st\.global\.cs\.v4\.u32"}
    for name, store in expected.items():
        body = kernels[name]
        assert len(re.findall(store, body)) == 1, (name, body)
        assert len(re.findall(r"\bst\.global", body)) == 1, (name, body)


@pytest.mark.parametrize("db,form", [("bert-large.f16", "(uint2*)"), ("vit-b16.bf16", "P_ptr + ("),
                                     ("whisper-enc.f16", "(half4*)")])
def test_the_committed_kernels_store_p_streaming(db, form, monkeypatch):
    """W1's whole-sector stores, W2's 2-byte stores (N = 197), W3's 8-byte stores: all of them rewritten."""
    from tests.compile_worker import best_record_source
    monkeypatch.delenv(streaming_stores.SWITCH, raising=False)
    src = best_record_source(db)
    kernel = src[src.index("__global__"):]
    stores = re.findall(r"fg_store_cs\(([^\n]*)", kernel)
    assert stores and all(s.startswith(form) for s in stores), stores
    assert not re.search(r"\*\(\w+\*\)\(P_ptr|P_ptr\[", kernel)


def _p_of(db: str, switch_off: bool, monkeypatch):
    """P of the committed database's shipped twin (tuning_db.best) on random inputs, compiled with or without the
    rewrite."""
    import tvm

    import tests.test_gpu_kernels as g
    from schedules import cuda_build, targets
    from tuning_db import best
    if switch_off:
        monkeypatch.setenv(streaming_stores.SWITCH, "1")
    else:
        monkeypatch.delenv(streaming_stores.SWITCH, raising=False)
    targets.register_intrinsics("sm_90")
    from tir_kernels.workloads import parse
    tk = best.load_tuned(REPO / "tuning_db" / "sm_90" / db, "sm_90")
    dtype = "bfloat16" if db.endswith("bf16") else "float16"
    wl = parse(db.split(".")[0], dtype)
    _, b1, m, n, k = wl.canonical.sizes
    # the twin fixes one batch dim (B0 = 1, or B1 = the tuned heads) and takes any size of the other
    batch, heads = (1, 4) if tk.fixed_batch == (0, 1) else (2, b1)
    c = g._case(dtype, batch, heads, m, n, k, scale=float(wl.scale))
    built = cuda_build.compile_cuda(tvm.IRModule({"main": tk.shipped_func(tk.twin, "main")}),
                                    targets.tvm_target(g.ARCH))
    src = built.mod.imports[0].inspect_source("cuda")
    assert ("fg_store_cs(" in src) != switch_off
    return g._run(built, dtype, c, g._canon(c)), c, dtype


@pytest.mark.gpu
@pytest.mark.parametrize("db", ["bert-large.f16", "vit-b16.bf16"])
def test_p_is_the_same_with_and_without_streaming_stores(db, monkeypatch):
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    p_on, c, dtype = _p_of(db, False, monkeypatch)
    p_off, _, _ = _p_of(db, True, monkeypatch)
    g._check(p_on, c, dtype)
    assert np.array_equal(p_on, p_off)
