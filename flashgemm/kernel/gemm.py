"""C = A @ B (or A @ B^T) in TensorIR: the fused op's GEMM alone, FP16/BF16 in and out, FP32 accumulation.

Issue 3 measures "the plain GEMM path of the space" against cuBLAS on 4096^3: this is that GEMM with the
fused op's block structure (batch dims B0 x B1 of extent 1, block "S" written exactly as in
fused_gemm_softmax, so the same tensor-core intrinsics and helpers apply), followed by block "C", the cast to
the input dtype, where the softmax would be. Scheduled by flashgemm/spaces/cuda_gemm.py, measured by
python -m benchmarks.bench_gemm. Static sizes only: it is a benchmark kernel, not a shipped one.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T


def gemm_func(m: int, n: int, k: int, dtype: str = "float16", trans_b: bool = True) -> tvm.tirx.PrimFunc:
    """A [1, 1, m, k], B [1, 1, n, k] (trans_b) or [1, 1, k, n], C [1, 1, m, n]; all row-major, dtype in/out."""
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"gemm_func: dtype must be float16 or bfloat16, got {dtype!r}")
    if min(m, n, k) < 1:
        raise ValueError(f"gemm_func: sizes must be positive, got M={m}, N={n}, K={k}")
    b_shape = (1, 1, n, k) if trans_b else (1, 1, k, n)

    def b_elem(Bm, v0, v1, vk, vj):
        return Bm[v0, v1, vj, vk] if trans_b else Bm[v0, v1, vk, vj]

    @T.prim_func(s_tir=True)
    def gemm(a: T.handle, b: T.handle, c: T.handle):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A = T.match_buffer(a, (1, 1, m, k), dtype, align=64)
        Bm = T.match_buffer(b, b_shape, dtype, align=64)
        C = T.match_buffer(c, (1, 1, m, n), dtype, align=64)
        S = T.sblock_alloc_buffer((1, 1, m, n), "float32")
        for b0, b1, i, j, kk in T.grid(1, 1, m, n, k):
            with T.sblock("S"):
                v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, kk])
                with T.init():
                    S[v0, v1, vi, vj] = T.float32(0)
                S[v0, v1, vi, vj] = S[v0, v1, vi, vj] + T.cast(A[v0, v1, vi, vk], "float32") * T.cast(
                    b_elem(Bm, v0, v1, vk, vj), "float32")
        for b0, b1, i, j in T.grid(1, 1, m, n):
            with T.sblock("C"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                C[v0, v1, vi, vj] = T.cast(S[v0, v1, vi, vj], dtype)

    return gemm
