"""One exp an element (flashgemm/codegen/tir/keep_exp_in_accumulator): the row sum stores exp(logit - max) into the
accumulator and the normalize step reads it back. CPU only: the rewrite on small device-like functions (applied, and
compiled for llvm with the same outputs as without it), the shapes it must refuse, and the tuned kernels it applies to
as the export compiles them. The GPU numerics are the register-sketch GPU tests'; the timing is
benchmarks/shipped_forms_ab.py --exp-twice's."""
import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from flashgemm.codegen.tir import keep_exp_in_accumulator as eia
from tests.compile_worker import disable_pass, enable_pass, pass_runs

ROWS, COLS = 4, 8


def kernel(case: str = "ok"):
    """Rows of X through the three passes of a register sketch: write S, row max, row sum, normalize. `case` makes
    one of the shapes the rewrite must refuse."""
    twice = 2 if case == "summed-twice" else 1
    use_at = 1 if case == "other-max" else 0

    @T.prim_func
    def f(X: T.Buffer((ROWS * COLS,), "float32"), P: T.Buffer((ROWS * COLS,), "float32"),
          Y: T.Buffer((ROWS * COLS,), "float32")):
        S = T.alloc_local((COLS,))
        stat = T.alloc_local((2,))
        mx = T.alloc_local((1,))
        m = T.alloc_local((1,))
        m2 = T.alloc_local((1,))
        acc = T.alloc_local((1,))
        for r in range(ROWS):
            for j in range(COLS):
                S[j] = X[r * COLS + j]
            mx[0] = T.float32(-3.0e38)
            for j in range(COLS):
                mx[0] = T.max(mx[0], S[j] * T.float32(0.5))
            stat[0] = mx[0]
            stat[1] = mx[0] + T.float32(1.0)
            m[0] = stat[0]
            acc[0] = T.float32(0.0)
            for t in range(twice):
                for j in range(COLS):
                    acc[0] = acc[0] + T.exp(S[j] * T.float32(0.5) - m[0])
            if case == "max-rewritten":
                stat[0] = stat[0] + T.float32(1.0)
            if case == "max-after":
                for j in range(COLS):
                    mx[0] = T.max(mx[0], S[j] * T.float32(0.5))
            if case == "plain-read":
                for j in range(COLS):
                    Y[r * COLS + j] = S[j]
            m2[0] = stat[use_at]
            for j in range(COLS // 2):
                P[T.Ramp(r * COLS + j * 2, 1, 2)] = T.exp(
                    S[T.Ramp(j * 2, 1, 2)] * T.Broadcast(T.float32(0.5), 2) - T.Broadcast(m2[0], 2)) / T.Broadcast(
                    acc[0], 2)
    return f


def run_llvm(func, x):
    ex = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    dev = tvm.cpu()
    p, y = (tvm.runtime.tensor(np.zeros_like(x), dev) for _ in range(2))
    ex(tvm.runtime.tensor(x, dev), p, y)
    return p.numpy()


def test_the_sum_stores_the_exp_and_the_normalize_step_reads_it():
    func = kernel()
    out, names = eia.rewrite(func)
    assert names == ["S"]
    script = out.script()
    assert script.count("T.exp(") == 1  # the sum's; the normalize step's is gone
    assert "S[j] = T.exp(S[j] * T.float32(0.5) - m)" in script  # (one-element buffers print as scalars)
    assert "= S[T.Ramp(j * 2, 1, 2)] / T.Broadcast(acc, 2)" in script
    x = np.random.default_rng(0).normal(scale=4.0, size=ROWS * COLS).astype("float32")
    want = run_llvm(func, x)
    np.testing.assert_array_equal(run_llvm(out, x), want)  # same operations on the same values
    rows = x.reshape(ROWS, COLS) * 0.5
    ref = np.exp(rows - rows.max(1, keepdims=True))
    np.testing.assert_allclose(want.reshape(ROWS, COLS), ref / ref.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("case", ["other-max", "summed-twice", "max-rewritten", "max-after", "plain-read"])
def test_what_it_cannot_prove_is_left_alone(case):
    # other-max: the normalize step subtracts another max than the sum did; summed-twice: a loop would store the
    # exp of an exp; max-rewritten: the max the normalize step loads is not the sum's any more; max-after /
    # plain-read: S read as a logit after the sum pass
    func = kernel(case)
    out, names = eia.rewrite(func)
    assert names == [] and out.same_as(func)


def test_the_switch_turns_it_off(monkeypatch):
    mod = tvm.IRModule({"main": kernel()})
    assert eia.keep_exp_in_accumulator(mod)["main"].script().count("T.exp(") == 1
    disable_pass(monkeypatch, "keep_exp_in_accumulator")
    assert not pass_runs("keep_exp_in_accumulator")


def _source(db: str, monkeypatch, off: bool) -> str:
    from tests.compile_worker import best_record_source
    # the exps this pass leaves: exchange_statistics_once, later in the source hook, adds its combine's weights
    disable_pass(monkeypatch, "exchange_statistics_once")
    if off:
        disable_pass(monkeypatch, "keep_exp_in_accumulator")
    else:
        enable_pass(monkeypatch, "keep_exp_in_accumulator")
    return best_record_source(db)


def test_the_register_sketch_kernels_get_one_exp_an_element_and_the_others_stay(monkeypatch):
    # W1's best record (register sketch, the row-tile loop pipelined: a sum pass and a normalize step in the loop
    # and again in its epilogue): 2 exps of the sum passes; 6 with the normalize steps' float2 pairs
    on, off = _source("bert-large.f16", monkeypatch, False), _source("bert-large.f16", monkeypatch, True)
    assert (on.count("exp2f("), off.count("exp2f(")) == (2, 6)  # (exp2: rewrite_softmax_arithmetic)
    assert on.count("S_warp_ptr[") > off.count("S_warp_ptr[")  # the stores of E
    # the shared-S form (W2) keeps S in shared memory: nothing to rewrite
    assert _source("vit-b16.f16", monkeypatch, False) == _source("vit-b16.f16", monkeypatch, True)
