"""A constant positive scale out of the row max (flashgemm/codegen/tir/take_scale_out_of_max), and the twins specialized
on their workload's scale that give the CUDA kernels such a constant (flashgemm.bundle.best.with_scale, the bundle's
"scale" entries).

CPU: the rewrite on a max loop (exact against the loop as written, on llvm, including the no-element case and
products that overflow), the loops it must leave alone, and the committed W1 / W2 kernels: tuning form and
scale-specialized twin hoisted, the plain twin (runtime scale) not. GPU: the scale-specialized W1 and W2 twins
against FP64 and against the plain twin. The manifest and dispatch side is in test_ort_op (scaled stand-in entries);
the timing is benchmarks/shipped_forms_ab.py's (twin_scale, --scaled-max)."""
import re
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm.script import tirx as T

from flashgemm.codegen.tir import take_scale_out_of_max
from flashgemm.spaces.intrinsics import register_intrinsics

REPO = Path(__file__).resolve().parent.parent
LOWEST = -3.4028234663852886e38


def _max_loop(c: float, reads_elsewhere: bool = False, scale_arg: bool = False):
    """out[0] = max over i < n of S[i] * c, from float32's lowest, written as the kernel's lowering writes it."""
    k = T.float32(c)

    @T.prim_func
    def f(S: T.Buffer((64,), "float32"), out: T.Buffer((2,), "float32"), n: T.int32, scale: T.float32):
        m = T.alloc_buffer((1,), "float32", scope="local")
        m[0] = T.float32(LOWEST)
        for i in range(64):
            if i < n:
                m[0] = T.max(m[0], S[i] * (scale if scale_arg else k))
                if reads_elsewhere:
                    out[1] = m[0]
        out[0] = m[0]
    return f


def _run(func, s: np.ndarray, n: int) -> float:
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    out = tvm.runtime.tensor(np.zeros(2, np.float32))
    lib["main"](tvm.runtime.tensor(s), out, n, np.float32(0.5))
    return float(out.numpy()[0])


@pytest.mark.parametrize("c", [0.125, 0.3, 3.0])
def test_hoisted_max_is_exactly_the_scaled_max(c):
    f = _max_loop(c)
    g = take_scale_out_of_max.rewrite(f)
    text = g.script()
    assert 'T.float32("-inf")' in text and "S[i] * " not in text  # the start and the per-element multiply
    assert len(re.findall(r"m \* T\.float32\(", text)) == 1  # one multiply, after the loop
    rng = np.random.default_rng(0)
    for s in (rng.standard_normal(64).astype(np.float32) * 100,
              np.full(64, -3.0e38, np.float32),  # products below float32's lowest when c > 1 (they round to -inf)
              np.concatenate([[3.0e38], rng.standard_normal(63)]).astype(np.float32)):
        for n in (0, 1, 37, 64):  # n = 0: every iteration predicated off, the max stays float32's lowest
            assert _run(g, s, n) == _run(f, s, n), (c, n)


@pytest.mark.parametrize("case", ["negative", "zero", "runtime-scale", "read-in-loop"])
def test_loops_it_cannot_prove_are_left_alone(case):
    f = {"negative": lambda: _max_loop(-0.125), "zero": lambda: _max_loop(0.0),
         "runtime-scale": lambda: _max_loop(0.125, scale_arg=True),  # its sign unknown: the min would be needed
         "read-in-loop": lambda: _max_loop(0.125, reads_elsewhere=True)}[case]()
    assert tvm_ffi.structural_equal(take_scale_out_of_max.rewrite(f), f)


def test_with_scale_makes_the_scale_a_constant_and_keeps_the_argument():
    from flashgemm.bundle import best
    f = _max_loop(1.0, scale_arg=True)
    g = best.with_scale(f, 0.125)
    assert len(g.params) == len(f.params) and g.params[-1].name == "scale"  # every kernel's calling convention
    assert "* scale" not in g.script() and "T.float32(0.125)" in g.script()
    with pytest.raises(ValueError, match="the float32 scale"):
        best.with_scale(f.with_attr("global_symbol", "k").specialize({f.params[-1]: tvm.tirx.FloatImm("float32", 1)}),
                        0.125)
    assert best.float32(0.1) == float(np.float32(0.1)) and best.float32(0.125) == 0.125


@pytest.fixture(scope="module")
def shipped_sources():
    """CUDA of the committed W1 and W2 fp16 kernels: the plain twin and the scale-specialized twin."""
    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    from flashgemm.bundle import best
    register_intrinsics("sm_90")
    out = {}
    for db in ("bert-large.f16", "vit-b16.f16"):
        tk = best.load_tuned(REPO / "flashgemm" / "databases" / "sm_90" / db, "sm_90")
        assert tk.scale == 0.125
        for tag, scale in (("twin", None), ("twin_scale", tk.scale)):
            mod = tvm.IRModule({"main": tk.shipped_func(tk.twin, "main", scale)})
            out[db, tag] = cuda_build.compile_cuda(mod, targets.tvm_target("sm_90")).mod.imports[0].inspect_source(
                "cuda")
    return out


@pytest.mark.parametrize("db, maxes", [("bert-large.f16", 2), ("vit-b16.f16", 1)])
def test_the_scale_specialized_twins_take_the_scale_out_of_their_row_max(shipped_sources, db, maxes):
    plain, scaled = shipped_sources[db, "twin"], shipped_sources[db, "twin_scale"]
    # the plain twin: the runtime scale multiplies every element inside the max
    assert len(re.findall(r"= max\(\w+\[0\], \(\w+\[[^;]*\] \* scale\)\);", plain)) == maxes
    assert "= -CUDART_INF_F;" not in plain
    # specialized: no scale argument left in the device code, the max over the raw values, one multiply after
    assert "float scale" not in scaled
    assert scaled.count("= -CUDART_INF_F;") == maxes
    assert len(re.findall(r"= max\(\(\w+\[0\] \* 0x1p-3f/\*1\.250000e-01\*/\), -0x1\.fffffep\+127f", scaled)) == maxes


@pytest.mark.gpu
@pytest.mark.parametrize("db", ["bert-large.f16", "bert-large.bf16", "vit-b16.f16", "vit-b16.bf16"])
def test_scale_specialized_twin_matches_fp64_and_the_plain_twin(db):
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    tk, dtype, c = g.committed_twin_case(db)
    ps = {}
    for tag, scale in (("twin", None), ("twin_scale", tk.scale)):
        built = cuda_build.compile_cuda(tvm.IRModule({"main": tk.shipped_func(tk.twin, "main", scale)}),
                                        targets.tvm_target(g.ARCH))
        ps[tag] = g._run(built, dtype, c, g._canon(c))
        g._check(ps[tag], c, dtype)
    # the same softmax: the max is exact, exp's argument may round an fp32 ulp apart (c * log2(e) folded)
    step = 2.0 ** -10 if dtype == "float16" else 2.0 ** -7
    assert float(np.abs(ps["twin"].astype(np.float64) - ps["twin_scale"].astype(np.float64)).max()) <= step
