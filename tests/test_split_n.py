"""The long-row (split-N) form, without a GPU: when it is chosen, and that its two-pass math (chunk max/sum,
combine, in-place rescale of P) is the operator: the unscheduled kernel compiled for llvm against the
FP64 reference, masks, causal rows and fully masked rows included. The CUDA schedule of the form is checked
in test_cuda_codegen (codegen) and test_gpu_kernels (numerics on the GPU)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

from flashgemm.spaces import cuda_split_n
from flashgemm.op.variant import Variant, canonicalize
from flashgemm.op.reference import fused_gemm_softmax_ref
from flashgemm.kernel.fused_gemm_softmax import tuning_func
from flashgemm.op.workloads import parse
from flashgemm.spaces.kernel_forms import split_n_chunk, tuning_module


@pytest.mark.parametrize("target, spec, chunk", [
    ("sm_90", "lm-head", 128),                       # N = 32000: rows far beyond shared memory
    ("sm_80", "long-row-n65536", 128),
    ("sm_90", "a=64x64,b=64x4000", 32),              # 4000 = 32 x 125: the widest chunk that divides N
    ("sm_90", "vit-b16", 0),                         # rows fit: the one-pass row-resident form
    ("sm_90", "whisper-enc", 0),                     # N = 1500 fits in the H100's 227 KB
    ("sm_89", "whisper-enc", 0),                     # ... not in the RTX 4090's 99 KB, and 1500 % 16 != 0: generic
    ("sm_90", "a=64x512,b=512x32001", 0),            # ragged long row: generic kernel
    ("sm_90", "a=1x64,b=64x32000", 0),               # M = 1: outside the tensor-core space
    ("llvm", "lm-head", 0),                          # CPU: one form for every shape
])
def test_split_n_is_chosen_for_long_rows_only(target, spec, chunk):
    assert split_n_chunk(parse(spec), target) == chunk


@pytest.mark.parametrize("target", ["sm_90", "llvm"])
def test_tuning_module_is_what_meta_schedule_records(target):
    """Meta-Schedule stores the workload after its normalize_mod (which sets tirx.noalias); the database
    lookups (top records, provenance) use tuning_module: both must be the same module, or a finished tuning
    run finds none of its records ("no valid candidate")."""
    import tvm_ffi  # noqa: PLC0415
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod  # noqa: PLC0415
    mod = tuning_module(parse("lm-head"), target)
    assert tvm_ffi.structural_equal(_normalize_mod(mod["main"]), mod)


def test_split_n_module_differs_from_the_one_pass_module():
    wl = parse("lm-head")
    assert cuda_split_n.is_split_n(tvm.s_tir.Schedule(tuning_module(wl, "sm_90")))
    assert not cuda_split_n.is_split_n(tvm.s_tir.Schedule(tuning_module(wl, "llvm")))


CASES = {  # b, h, m, n, k, features
    "plain-transB": ((2, 1, 5, 64, 8), dict(trans_b=True)),
    "bias": ((1, 2, 7, 48, 4), dict(bias=True)),
    "addmask-fully-masked-row": ((2, 1, 6, 64, 8), dict(mask="add")),
    "boolmask-whole-chunk-masked": ((1, 1, 4, 64, 8), dict(mask="bool")),
    "causal-m-gt-n": ((1, 1, 40, 32, 8), dict(causal=True)),   # first 8 rows fully masked (bottom-right)
    "causal-m-lt-n": ((1, 2, 9, 48, 3), dict(causal=True, trans_b=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_split_n_template_is_the_operator_on_llvm(case):
    (b, h, m, n, k), feat = CASES[case]
    rng = np.random.default_rng(7)
    trans_b = feat.get("trans_b", False)
    a = rng.standard_normal((b, h, m, k)).astype(np.float16)
    bm = rng.standard_normal((b, h, n, k) if trans_b else (b, h, k, n)).astype(np.float16)
    bias = (rng.standard_normal((1, h, m, n)) * 2).astype(np.float16) if feat.get("bias") else None
    mask = None
    if feat.get("mask") == "add":
        mv = np.zeros((b, 1, m, n), np.float32)
        mv[..., n - 20:] = -1e9
        mv[0, 0, 2, :] = -np.inf  # a fully masked row: zeros, not NaN
        mask = mv.astype(np.float16)
    elif feat.get("mask") == "bool":
        mask = rng.random((b, h, m, n)) > 0.3
        mask[..., 16:32] = False  # one whole 16-column chunk masked: its max is the lowest float, its sum 0
        mask[0, 0, 1, :] = False
    causal = feat.get("causal", False)
    variant = Variant("float16", trans_b, bias is not None,
                      "none" if mask is None else ("bool" if mask.dtype == np.bool_ else "add"), causal)
    shape = canonicalize(a.shape, bm.shape, trans_b, None if bias is None else bias.shape,
                         None if mask is None else mask.shape)
    func = tuning_func(variant, shape, 0.5, chunk=16).with_attr("global_symbol", "main")
    ex = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a.reshape(shape.b0, shape.b1, m, k), dev),
            tvm.runtime.tensor(bm.reshape(shape.b0, shape.b1, *bm.shape[-2:]), dev)]
    if bias is not None:  # compact tuning form: broadcast dims have extent 1
        args.append(tvm.runtime.tensor(bias.reshape((1,) * (4 - bias.ndim) + bias.shape)
                                       .reshape(1 if shape.bias_strides[0] == 0 else shape.b0,
                                                1 if shape.bias_strides[1] == 0 else shape.b1, m, n), dev))
    if mask is not None:
        mk = mask.astype(np.uint8) if mask.dtype == np.bool_ else mask
        args.append(tvm.runtime.tensor(mk.reshape(1 if shape.mask_strides[0] == 0 else shape.b0,
                                                  1 if shape.mask_strides[1] == 0 else shape.b1, m, n), dev))
    p = tvm.runtime.empty((shape.b0, shape.b1, m, n), "float16", dev)
    ex["main"](*args, p)
    got = p.numpy().astype(np.float64).reshape(b, h, m, n)
    ref = fused_gemm_softmax_ref(a, bm, bias, mask, scale=0.5, trans_b=trans_b, causal=causal)
    assert np.isfinite(got).all()
    assert np.abs(got - ref).max() <= 2e-3
    if mask is not None or causal:
        assert (got[ref == 0] == 0).all()  # masked elements are exactly 0, fully masked rows all zeros
