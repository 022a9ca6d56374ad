"""exp as exp2 of one FFMA and one reciprocal a row (flashgemm/codegen/tir/rewrite_softmax_arithmetic). CPU only: the
rewrites on small device-like functions, compiled for llvm with and without them (same values, masked and fully masked
rows included), the divisions they must leave in place, and the tuned kernels as the export compiles them. The GPU
numerics are the kernel tests'; the timing is benchmarks/shipped_forms_ab.py --plain-arith's."""
import re

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from flashgemm.codegen.tir import rewrite_softmax_arithmetic as sa
from tests.compile_worker import disable_pass, pass_runs

ROWS, COLS = 4, 8
LOWEST = float(np.finfo(np.float32).min)


def softmax_rows(case: str = "ok"):
    """Rows of X through a max, a sum of exps and a normalize step, the row sum kept in a one-element local buffer.
    `case` makes one of the divisions the reciprocal must not replace: the sum stored inside the normalize loop, or
    passed by address (as an mma accumulator is)."""

    @T.prim_func
    def f(X: T.Buffer((ROWS * COLS,), "float32"), P: T.Buffer((ROWS * COLS,), "float32"),
          Y: T.Buffer((ROWS,), "float32")):
        m = T.alloc_local((1,))
        s = T.alloc_local((1,))
        for r in range(ROWS):
            m[0] = T.float32(LOWEST)  # the kernel's identity: a fully masked row keeps it
            for j in range(COLS):
                m[0] = T.max(m[0], X[r * COLS + j] * T.float32(0.5))
            s[0] = T.float32(0.0)
            for j in range(COLS):
                s[0] = s[0] + T.exp(X[r * COLS + j] * T.float32(0.5) - m[0])
            for j in range(COLS // 2):
                if case == "stored-in-loop":
                    s[0] = s[0] + T.float32(0.0)
                if case == "address-taken":
                    Y[r] = T.call_extern("float32", "keep", T.address_of(s[0]))
                P[T.Ramp(r * COLS + j * 2, 1, 2)] = T.if_then_else(
                    T.float32(0.0) < s[0],
                    T.exp(X[T.Ramp(r * COLS + j * 2, 1, 2)] * T.Broadcast(T.float32(0.5), 2) - T.Broadcast(m[0], 2))
                    / T.Broadcast(s[0], 2), T.Broadcast(T.float32(0.0), 2))
    return f


def run_llvm(func, x):
    ex = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    dev = tvm.cpu()
    p, y = tvm.runtime.tensor(np.zeros_like(x), dev), tvm.runtime.tensor(np.zeros(ROWS, "float32"), dev)
    ex(tvm.runtime.tensor(x, dev), p, y)
    return p.numpy()


def logits():
    x = np.random.default_rng(0).normal(scale=4.0, size=(ROWS, COLS)).astype("float32")
    x[1, ::3] = -np.inf  # masked elements
    x[2, :] = -np.inf  # a fully masked row: zeros, not NaN
    x[3, :] *= 50.0  # wide logits
    return x.reshape(-1)


def test_exp_becomes_exp2_of_one_fma_and_the_division_one_reciprocal_a_row():
    func = softmax_rows()
    out = sa.rewrite(func)
    script = out.script()
    assert "T.exp(" not in script and script.count("T.exp2(") == 2
    assert script.count(" / ") == 1 and "s_rcp: T.let[T.float32] = T.float32(1.0) / s" in script  # before the loop
    assert "X[r * 8 + j] * T.float32(0.72134752" in script  # c * log2(e) folded
    x = logits()
    want, got = run_llvm(func, x).reshape(ROWS, COLS), run_llvm(out, x).reshape(ROWS, COLS)
    assert np.isfinite(got).all() and not got[2].any() and not got[1, ::3].any()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    rows = x.reshape(ROWS, COLS).astype("float64") * 0.5
    with np.errstate(invalid="ignore"):  # the fully masked row: -inf - (-inf), zeros by the contract
        ref = np.exp(rows - rows.max(1, keepdims=True))
        ref = np.nan_to_num(ref / ref.sum(1, keepdims=True))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)


def test_a_max_at_the_lowest_float_keeps_masked_exps_zero():
    # a fully masked chunk of the split-N form keeps the max's identity, float32's lowest; its masked logits are
    # -inf: exp(-inf - lowest) = 0, where exp2(-inf * L - lowest * L) would be exp2(-inf + inf) = NaN
    @T.prim_func
    def f(X: T.Buffer((4,), "float32"), M: T.Buffer((4,), "float32"), Y: T.Buffer((4,), "float32")):
        for i in range(4):
            Y[i] = T.exp(X[i] * T.float32(0.5) - M[i])
    x = np.array([-np.inf, -np.inf, 1.0, 30.0], "float32")
    m = np.array([LOWEST, 3.0, 2.0, 15.0], "float32")
    out = sa.rewrite(f)
    assert "T.exp2(" in out.script()
    y = []
    for func in (f, out):
        ex = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
        args = [tvm.runtime.tensor(v, tvm.cpu()) for v in (x, m, np.zeros(4, "float32"))]
        ex(*args)
        y.append(args[2].numpy())
    np.testing.assert_array_equal(y[1][:2], [0.0, 0.0])
    np.testing.assert_allclose(y[1], y[0], rtol=2e-6)


@pytest.mark.parametrize("case", ["stored-in-loop", "address-taken"])
def test_a_divisor_that_may_change_in_the_loop_stays_a_division(case):
    out = sa.rewrite(softmax_rows(case))
    script = out.script()
    assert "_rcp" not in script and script.count(" / ") == 1
    assert "T.exp2(" in script  # the exp rewrite does not depend on it


def test_the_switch_turns_both_off(monkeypatch):
    mod = tvm.IRModule({"main": softmax_rows()})
    assert "T.exp2(" in sa.rewrite_softmax_arithmetic(mod)["main"].script()
    disable_pass(monkeypatch, "rewrite_softmax_arithmetic")
    assert not pass_runs("rewrite_softmax_arithmetic")


def test_the_w1_kernel_as_exported(monkeypatch):
    # W1's best record (register sketch): the sum pass's exp is exp2 of an FFMA, its normalize step multiplies by
    # one reciprocal a row (in the row-tile loop and in its pipeline epilogue), P's stores stay whole sectors
    from tests.compile_worker import best_record_source_switched
    src = best_record_source_switched("bert-large.f16", monkeypatch, "exchange_statistics_once", off=True)
    assert "expf(" not in src and src.count("exp2f(") == 2
    assert len(re.findall(r"_rcp(?:_\d+)? = \(0x1p\+0f/\*1\.000000e\+00\*/ / ", src)) == 2
    assert src.count("fg_pair[2]") == 2
    # as exported, flashgemm.codegen.cuda_src.exchange_statistics_once weighs the 4 warps' sums (4 exps a row tile) and
    # folds its factor into the row's one division (an exp and a division instead of the reciprocal)
    src = best_record_source_switched("bert-large.f16", monkeypatch, "exchange_statistics_once", off=False)
    assert "expf(" not in src and src.count("exp2f(") == 2 + 2 * (4 + 1)
    assert len(re.findall(r"_rcp(?:_\d+)? = exp2f\([^\n]*\) / row_sum_shared_dyn_local_ptr(?:_\d+)?\[0\];", src)) == 2
    assert src.count("fg_pair[2]") == 2
