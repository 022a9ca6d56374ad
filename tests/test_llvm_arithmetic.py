"""The arithmetic the generic llvm kernels are rewritten to so that LLVM vectorizes their row loops
(flashgemm/spaces/llvm.py): `vector_exp` against float64 with its special values, and `nan_propagating_max` as a row
reduction; compiled for the CPU as the kernels are."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from flashgemm.spaces import llvm

N = 1 << 16


def _compile(func):
    target = llvm.export_target(tvm.target.Target("llvm"))
    with target:
        return tvm.compile(tvm.IRModule({"main": func}), target=target)


@pytest.fixture(scope="module")
def exp_fn():
    @T.prim_func(s_tir=True)
    def f(X: T.Buffer((N,), "float32"), Y: T.Buffer((N,), "float32")):
        for i in range(N):
            with T.sblock("y"):
                vi = T.axis.spatial(N, i)
                Y[vi] = T.exp(X[vi])
    func = llvm.inline_exp(f)
    assert "T.exp(" not in func.script(), "every fp32 exp is rewritten"
    lib = _compile(func)

    def run(x: np.ndarray) -> np.ndarray:
        x = np.resize(x.astype(np.float32), N)
        y = tvm.runtime.tensor(np.zeros(N, np.float32))
        lib["main"](tvm.runtime.tensor(x), y)
        return y.numpy()
    return run


def test_within_two_ulp_of_exp_from_2_to_the_minus_125_up(exp_fn):
    x = np.linspace(-86.9, 88.72, N, dtype=np.float32)
    y, ref = exp_fn(x), np.exp(x.astype(np.float64))
    ulp = np.abs(y - ref) / np.spacing(ref.astype(np.float32))
    assert ulp.max() <= 2.0, (x[ulp.argmax()], y[ulp.argmax()], ref[ulp.argmax()])


def test_special_values(exp_fn):
    x = np.array([np.nan, -np.nan, -np.inf, np.inf, 0.0, -0.0, 89.0, -88.0, -1e30, 1e-30, -200.0], np.float32)
    y = exp_fn(x)[:len(x)]
    assert np.isnan(y[:2]).all(), "NaN in, NaN out"
    np.testing.assert_array_equal(y[2:], [0.0, np.inf, 1.0, 1.0, np.inf, 0.0, 0.0, 1.0, 0.0])


def test_monotone_on_softmax_arguments(exp_fn):
    """Softmax exponentiates x - max <= 0: there exp must not decrease as x grows (ties are fine)."""
    x = np.linspace(-30.0, 0.0, N, dtype=np.float32)
    assert (np.diff(exp_fn(x)) >= 0).all()


def test_row_max_is_nan_wherever_the_nan_sits_and_vectorizes():
    @T.prim_func(s_tir=True)
    def f(x_h: T.handle, y_h: T.handle):
        n = T.int32()
        X = T.match_buffer(x_h, (n,), "float32")
        Y = T.match_buffer(y_h, (1,), "float32")
        for i in range(n):
            with T.sblock("row_max"):
                vi = T.axis.reduce(n, i)
                with T.init():
                    Y[0] = T.min_value("float32")
                Y[0] = T.max(Y[0], X[vi])
    lib = _compile(llvm.nan_propagating_max(f))
    if llvm.export_mcpu() == llvm.X86_LEVEL:
        assert "vmaxps" in lib.mod.inspect_source("asm"), "the max reduction is vectorized"
    rng = np.random.default_rng(0)
    for n in (1, 7, 64, 1001):
        x = rng.standard_normal(n).astype(np.float32)
        y = tvm.runtime.tensor(np.zeros(1, np.float32))
        lib["main"](tvm.runtime.tensor(x), y)
        assert y.numpy()[0] == x.max()
        for at in sorted({0, n // 2, n - 1}):
            xn = x.copy()
            xn[at] = np.nan
            lib["main"](tvm.runtime.tensor(xn), y)
            assert np.isnan(y.numpy()[0]), (n, at)
    x = np.full(5, -np.inf, np.float32)  # a fully masked row keeps the identity: exp(-inf - lowest) = 0
    lib["main"](tvm.runtime.tensor(x), y)
    assert y.numpy()[0] == np.finfo(np.float32).min


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("bias,mask,causal", [(False, "none", False), (True, "none", False), (False, "bool", False),
                                              (False, "add", False), (False, "none", True)])
def test_the_generic_kernels_compile_to_vector_code(trans_b, bias, mask, causal):
    """A generic llvm kernel keeps no libm exp call, does its GEMM on whole vectors and its row max and row sum as
    vector reductions: generic_schedule's tiles and the rewrites above reach the machine code. (With two of bias,
    mask and causal LLVM keeps the row loops scalar: generic_schedule's docstring.)"""
    from flashgemm.op.variant import Variant  # noqa: PLC0415
    from flashgemm.kernel.fused_gemm_softmax import runtime_func  # noqa: PLC0415
    sch = llvm.generic_schedule(runtime_func(Variant("float16", bool(trans_b), bias, mask, causal)))
    lib = _compile(sch.mod["main"])
    ir = lib.mod.inspect_source("ll")
    assert "vector.reduce.fmaximum" in ir and "vector.reduce.fadd" in ir, "row max and row sum are vectorized"
    assert "@expf" not in ir and "llvm.exp." not in ir
    if llvm.export_mcpu() == llvm.X86_LEVEL:
        asm = lib.mod.inspect_source("asm")
        assert "vfmadd231ps\t%ymm" in asm or "vfmadd213ps\t%ymm" in asm, "the GEMM tile's multiply-adds are 8 wide"


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("n", [64, 70, 1])
def test_the_generic_schedule_on_static_sizes_whole_tiles_or_not(trans_b, n):
    """generic_schedule on a static-size kernel (a tuned llvm record's fallback, tests/test_build_limits): N a whole
    number of tiles (nothing padded), a part of one, or a single column; against the FP64 reference."""
    from flashgemm.op.variant import Variant, canonicalize  # noqa: PLC0415
    from flashgemm.kernel.fused_gemm_softmax import runtime_func  # noqa: PLC0415
    from flashgemm.op.reference import fused_gemm_softmax_ref  # noqa: PLC0415
    a_shape, b_shape = [2, 3, 5, 16], ([2, 3, n, 16] if trans_b else [2, 3, 16, n])
    v = Variant("float16", bool(trans_b))
    shape = canonicalize(a_shape, b_shape, trans_b=trans_b)
    lib = _compile(llvm.generic_schedule(runtime_func(v, shape)).mod["main"])
    rng = np.random.default_rng(n)
    a = rng.standard_normal(a_shape).astype(np.float16)
    b = rng.standard_normal(b_shape).astype(np.float16)
    batch = (shape.b0, shape.b1)  # the canonical 4-D problem the kernel takes (contiguous batches merged)
    p = tvm.runtime.tensor(np.zeros([*batch, 5, n], np.float16))
    lib["main"](tvm.runtime.tensor(a.reshape(*batch, *a_shape[2:])), tvm.runtime.tensor(b.reshape(*batch, *b_shape[2:])),
                p, 0.25)
    ref = fused_gemm_softmax_ref(a, b, scale=0.25, trans_b=bool(trans_b))
    np.testing.assert_allclose(p.numpy().reshape(ref.shape).astype(np.float64), ref, rtol=0, atol=2e-3)
