"""Numerics of the CUDA kernels on a real GPU (sm_90 / H100 intended; any sm_80+ works): the generic
(symbolic-size) kernel and candidates of the tensor-core space, against the FP64 reference.

Skipped cleanly where there is no GPU (tvm.cuda(0).exist is False or TVM's CUDA runtime is absent).
Tolerances on P: fp16 atol 2e-3, bf16 atol 1.6e-2.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")

import tvm  # noqa: E402

from flashgemm import targets  # noqa: E402
from flashgemm.op.variant import Variant, canonicalize  # noqa: E402
from flashgemm.op.reference import fused_gemm_softmax_ref
from flashgemm.kernel.fused_gemm_softmax import runtime_func, tuning_func
from flashgemm.op.workloads import Workload  # noqa: E402
from flashgemm.bundle.best import TENSOR_CORE_ALIGN  # noqa: E402
from flashgemm.spaces.intrinsics import register_intrinsics


def _gpu_arch():
    try:
        dev = tvm.cuda(0)
        if not dev.exist:
            return None
        major, minor = (int(x) for x in dev.compute_version.split("."))
        return f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001
        return None


ARCH = _gpu_arch()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(ARCH is None, reason="no CUDA GPU visible to TVM"),
              pytest.mark.skipif(ARCH is not None and ARCH not in targets.CUDA_ARCHES,
                                 reason=f"GPU arch {ARCH} not a supported target")]

ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2}


def _np_dtype(dtype):
    if dtype == "bfloat16":
        import ml_dtypes  # noqa: PLC0415
        return ml_dtypes.bfloat16
    return np.float16


def _case(dtype, b, h, m, n, k, *, trans_b=True, bias=False, mask=None, causal=False, seed=0, scale=None):
    """Random inputs (ONNX-level shapes) for one case; mask: None | 'add' | 'bool'."""
    rng = np.random.default_rng(seed)
    nd = _np_dtype(dtype)
    a = rng.standard_normal((b, h, m, k)).astype(nd)
    bm = rng.standard_normal((b, h, n, k) if trans_b else (b, h, k, n)).astype(nd)
    bias_arr = (rng.standard_normal((1, h, m, n)) * 0.5).astype(nd) if bias else None  # broadcast over batch
    mask_arr = None
    if mask == "add":  # padding mask per sequence, -1e9 (overflows to -inf in fp16) and a fully masked row
        mv = np.zeros((b, 1, m, n), np.float32)
        mv[..., n - max(1, n // 5):] = -1e9
        mv[0, 0, 0, :] = -1e9
        mask_arr = mv.astype(nd)
    elif mask == "bool":
        mask_arr = rng.random((b, 1, 1, n)) > 0.2
    scale = (k ** -0.5) if scale is None else scale
    return dict(a=a, b=bm, bias=bias_arr, mask=mask_arr, scale=scale, trans_b=trans_b, causal=causal)


def _variant(dtype, c):
    return Variant(dtype, c["trans_b"], c["bias"] is not None,
                   "none" if c["mask"] is None else ("bool" if c["mask"].dtype == np.bool_ else "add"), c["causal"])


def _run(ex_fn, dtype, c, shape):
    dev = tvm.cuda(0)
    # A and B are compact here, so their canonical 4-D form is a reshape (batch dims coalesced)
    b_rows = (shape.n, shape.k) if c["trans_b"] else (shape.k, shape.n)
    args = [tvm.runtime.tensor(np.ascontiguousarray(c["a"]).reshape(shape.b0, shape.b1, shape.m, shape.k), dev),
            tvm.runtime.tensor(np.ascontiguousarray(c["b"]).reshape(shape.b0, shape.b1, *b_rows), dev)]
    # canonical 4-D operands (broadcast views materialised: the kernels take any strides, but DLPack/numpy
    # views with 0 strides are not accepted by tvm.runtime.tensor)
    out4 = (shape.b0, shape.b1, shape.m, shape.n)
    full = c["a"].shape[:-2] + (shape.m, shape.n)
    for name in ("bias", "mask"):
        if c[name] is not None:
            arr = np.broadcast_to(c[name], full)
            if arr.dtype == np.bool_:
                arr = arr.astype(np.uint8)
            args.append(tvm.runtime.tensor(np.ascontiguousarray(arr).reshape(out4), dev))
    p = tvm.runtime.empty(out4, dtype, dev)
    args += [p]
    ex_fn(*args, np.float32(c["scale"]))
    return p.numpy().astype(np.float64).reshape(full)


def _check(p, c, dtype):
    ref = fused_gemm_softmax_ref(c["a"], c["b"], c["bias"], c["mask"], scale=c["scale"], trans_b=c["trans_b"],
                                 causal=c["causal"])
    assert np.isfinite(p).all()
    err = np.abs(p - ref).max()
    assert err <= ATOL[dtype], f"max abs error {err:.3g} > {ATOL[dtype]}"


def _canon(c):
    return canonicalize(c["a"].shape, c["b"].shape, c["trans_b"],
                        None if c["bias"] is None else c["bias"].shape,
                        None if c["mask"] is None else c["mask"].shape)


# ----------------------------------------------------------------------------- generic kernel
_GENERIC = {}


def committed_twin_case(db: str):
    """(TunedKernel, dtype, case) for a committed sm_90 database's fixed-batch twin: random inputs of its workload at a
    batch the twin serves (B0 = 1 with 4 heads, or 2 x the tuned heads)."""
    from pathlib import Path

    from flashgemm.op.workloads import parse
    from flashgemm.bundle import best
    register_intrinsics("sm_90")
    tk = best.load_tuned(Path(__file__).resolve().parent.parent / "flashgemm" / "databases" / "sm_90" / db, "sm_90")
    dtype = "bfloat16" if db.endswith("bf16") else "float16"
    wl = parse(db.split(".")[0], dtype)
    _, b1, m, n, k = wl.canonical.sizes
    batch, heads = (1, 4) if tk.fixed_batch == (0, 1) else (2, b1)
    return tk, dtype, _case(dtype, batch, heads, m, n, k, scale=float(wl.scale))


def _generic(variant):
    """Compile the generic (symbolic-size) kernel of `variant` once per session."""
    if variant not in _GENERIC:
        from flashgemm.spaces import cuda_generic, cuda_space  # noqa: PLC0415
        sch = cuda_generic.generic_schedule(runtime_func(variant))
        _GENERIC[variant] = cuda_space.build(sch.mod, ARCH)
    return _GENERIC[variant]


SHAPES = {  # b, h, m, n, k
    "w2": (16, 12, 197, 197, 64),
    "w1-small": (2, 16, 512, 512, 64),
    "rows1500": (1, 2, 1500, 1500, 64),
    "m1": (2, 4, 1, 300, 64),
    "k1": (2, 2, 33, 40, 1),
    "odd": (3, 1, 17, 3, 5),
    "n65536": (1, 1, 2, 65536, 16),
}
FEATURES = {
    "plain": dict(),
    "bias": dict(bias=True),
    "addmask": dict(mask="add"),
    "boolmask": dict(mask="bool"),
    "causal": dict(causal=True),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_generic_kernel(dtype, feature, shape_name):
    b, h, m, n, k = SHAPES[shape_name]
    if shape_name == "n65536" and feature != "plain":
        pytest.skip("one feature is enough for the long row")
    c = _case(dtype, b, h, m, n, k, **FEATURES[feature])
    ex = _generic(_variant(dtype, c))
    _check(_run(ex, dtype, c, _canon(c)), c, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("m,n", [(64, 64), (48, 80), (80, 48)])  # causal M = N and M != N (bottom-right)
def test_generic_causal_shapes(dtype, m, n):
    c = _case(dtype, 2, 3, m, n, 32, causal=True, trans_b=False)
    _check(_run(_generic(_variant(dtype, c)), dtype, c, _canon(c)), c, dtype)


# ----------------------------------------------------------------------------- tensor-core space
def _space_candidates(variant, shape, scale, count, seeds=40, space=None, pad=None, recompute=False,
                      recompute_chunk=0, accept=None, stat_cols=0, split_chunk=0):
    """Up to `count` valid sampled schedules of the space (or of `space`, a schedule function over the same
    postprocessors), replayed on the runtime function; pad: of the kernel's padded form
    (flashgemm.kernel.fused_gemm_softmax), with recompute: its recompute form (stat_cols: the two-sweep form's column
    groups); split_chunk: the split-N form with this chunk instead of chunk_for's (the wide form); accept: a test of a
    sampled schedule's decisions (list, in trace order)."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    from tvm.s_tir.schedule import Trace  # noqa: PLC0415
    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    from flashgemm.spaces import cuda_split_n  # noqa: PLC0415
    # long rows: the split-N form (not for the recompute forms, whose kernel takes a chunk only for the two-sweep
    # form's chunk statistics: recompute_chunk)
    chunk = recompute_chunk if recompute else split_chunk or cuda_split_n.chunk_for(ARCH, shape.m, shape.n, shape.k)
    func = tuning_func(variant, shape, scale, chunk=chunk, pad=pad, recompute=recompute,
                       stat_cols=stat_cols).with_attr("global_symbol", "main")
    mod = tvm.IRModule({"main": func})
    generator = cuda_space.design_space(ARCH) if space is None else ms.space_generator.ScheduleFn(
        space, sch_rules=[], postprocs=cuda_space.postprocs(ARCH), mutator_probs={})
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(ARCH), task_name="main", rand_state=3,
                         space_generator=generator)
    sketches = ctx.generate_design_space()
    rt_mod = tvm.IRModule({"main": runtime_func(variant, shape, align=TENSOR_CORE_ALIGN, chunk=chunk, pad=pad,
                                                recompute=recompute, stat_cols=stat_cols)})
    out = []
    for seed in range(1, seeds + 1):
        sch = tvm.s_tir.Schedule(mod, seed=seed)
        Trace(sketches[seed % len(sketches)].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        if accept is not None and not accept([sch.trace.decisions[i] for i in sch.trace.insts
                                              if i in sch.trace.decisions]):
            continue
        if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
            continue
        # what ships: the same trace (decisions included) replayed on the runtime form
        rt = tvm.s_tir.Schedule(rt_mod)
        sch.trace.apply_to_schedule(rt, remove_postproc=False)
        out.append(rt)
        if len(out) == count:
            break
    assert out, "no valid candidate"
    return out


SPACE_CASES = {
    "w2-bias": ((16, 12, 197, 197, 64), dict(bias=True)),
    "w2-addmask": ((4, 12, 197, 197, 64), dict(mask="add")),
    "w1-boolmask": ((2, 16, 512, 512, 64), dict(mask="bool")),
    "causal-mn": ((2, 2, 96, 160, 64), dict(causal=True)),
    "rows1500": ((1, 2, 1500, 1500, 64), dict()),
    "m2": ((4, 2, 2, 256, 64), dict()),
    # M = 1 (decoding): the row-vector space (flashgemm/spaces/cuda_row_vector)
    "m1-decode": ((8, 16, 1, 2048, 64), dict()),
    "m1-n300-addmask": ((2, 3, 1, 300, 64), dict(mask="add")),  # N padded; batch 0's row fully masked
    "m1-k1-bias": ((2, 2, 1, 200, 1), dict(trans_b=False, bias=True)),
    "m1-k3-boolmask-causal": ((2, 3, 1, 40, 3), dict(causal=True, mask="bool")),
    "m1-n32000": ((1, 2, 1, 32000, 64), dict(trans_b=False)),  # 128 KB of S: beyond sm_89, fits sm_80 / sm_90
    "k1-odd": ((2, 3, 17, 33, 1), dict(trans_b=False)),
    # long rows (beyond shared memory on every arch): the split-N form
    "split-n-bias": ((1, 2, 64, 8192, 64), dict(bias=True)),
    "split-n-addmask": ((2, 1, 48, 4096, 40), dict(mask="add")),   # M, K padded; a fully masked row
    "split-n-causal": ((1, 1, 100, 4096, 64), dict(causal=True, trans_b=False)),
    "split-n-boolmask": ((1, 2, 32, 16384, 16), dict(mask="bool")),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", list(SPACE_CASES))
def test_space_candidates(dtype, case):
    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    (b, h, m, n, k), feat = SPACE_CASES[case]
    if case == "m1-n32000" and ARCH == "sm_89":
        pytest.skip("128 KB of S exceeds sm_89's 99 KB; test_cuda_codegen checks that it is refused clearly")
    c = _case(dtype, b, h, m, n, k, **feat)
    variant, shape = _variant(dtype, c), _canon(c)
    for sch in _space_candidates(variant, shape, c["scale"], count=3):
        ex = cuda_space.build(sch.mod, ARCH)
        _check(_run(ex, dtype, c, shape), c, dtype)


def test_space_rejects_ragged_long_rows():
    """A long row whose N is not a multiple of 16 has no split-N form: the one-pass space refuses it clearly
    (the generic kernel serves it)."""
    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    wl = Workload("lm", (64, 512), (512, 32001), dtype="bfloat16")
    func = tuning_func(wl.variant, wl.canonical, 1.0).with_attr("global_symbol", "main")
    with pytest.raises(Exception, match="multiple of 16"):
        from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
        ms.TuneContext(mod=tvm.IRModule({"main": func}), target=targets.tvm_target(ARCH), task_name="main",
                       space_generator=cuda_space.design_space(ARCH)).generate_design_space()


# ----------------------------------------------------------------------------- default (untuned) schedules
DEFAULT_CASES = {  # (b, h, m, n, k), features: what flashgemm-build --workload / --from-model ships for untuned shapes
    "vit-site-bias": ((4, 12, 197, 197, 64), dict(bias=True)),
    "bert-boolmask": ((2, 16, 512, 512, 64), dict(mask="bool")),
    "whisper-rows": ((1, 4, 1500, 1500, 64), dict()),
    "causal-addmask": ((2, 2, 96, 160, 64), dict(causal=True, mask="add")),
    "k3-not-transposed": ((2, 3, 17, 40, 3), dict(trans_b=False)),
    "k72-n300": ((2, 2, 100, 300, 72), dict(trans_b=False, bias=True)),
    "m2": ((4, 2, 2, 256, 64), dict()),
    "lm-head-rows": ((1, 1, 256, 32000, 512), dict(trans_b=False)),  # split-N: the LM head's N and layout
    "n65536-causal": ((1, 2, 64, 65536, 64), dict(causal=True)),
    "m1-decode": ((8, 16, 1, 2048, 64), dict()),
    "m1-n1500-addmask": ((2, 3, 1, 1500, 64), dict(mask="add")),
    "m1-k1-causal": ((2, 2, 1, 200, 1), dict(trans_b=False, causal=True)),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", list(DEFAULT_CASES))
def test_default_schedule(dtype, case):
    """The default schedule of a shape (flashgemm.bundle.best.default_kernel, as flashgemm-build ships it) at its own
    batch and, batch dims being symbolic, at another one."""
    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    from flashgemm.bundle import best  # noqa: PLC0415
    (b, h, m, n, k), feat = DEFAULT_CASES[case]
    c = _case(dtype, b, h, m, n, k, **feat)
    wl = Workload("t", c["a"].shape, c["b"].shape, dtype=dtype, trans_b=c["trans_b"], scale=c["scale"],
                  bias_shape=None if c["bias"] is None else c["bias"].shape,
                  mask_shape=None if c["mask"] is None else c["mask"].shape,
                  mask_kind="none" if c["mask"] is None else ("bool" if c["mask"].dtype == np.bool_ else "add"),
                  causal=c["causal"])
    tk = best.default_kernel(wl, ARCH, log=lambda *_: None)
    assert tk is not None and tk.any_batch and tk.kind == "default"
    ex = cuda_space.build(tk.schedule.mod, ARCH)
    _check(_run(ex, dtype, c, _canon(c)), c, dtype)
    c2 = _case(dtype, b + 1, h, m, n, k, seed=1, **feat)
    _check(_run(ex, dtype, c2, _canon(c2)), c2, dtype)
