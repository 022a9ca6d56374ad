"""FusedAttention through ONNX Runtime: the op library's second operator, served by a bundle built with its kernels
(export_bundle(attention=True)), on the CPU EP and, where there is a GPU, the CUDA EP. Numerics against the FP64
reference (fused_attention_ref): broadcast bias, masks, causal, K and K^T, V broadcast over P's batch dims, special
values; shape and type errors as ORT statuses; the generic-kernel warning."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from flashgemm.bundle.kernel_library import MANIFEST_FORMAT, export_bundle, kernel_libraries
from flashgemm.kernel.fused_attention_mma import n_multiple
from flashgemm.op.reference import fused_attention_ref
from flashgemm.op.variant import BOOL_MASK_KINDS, FILL_LOGIT, MASK_FILL, Variant
from flashgemm.ort.model import make_attention_model, make_model
from flashgemm.ort.rewrite import count_ops, model_attention_variants, rewrite_file
from flashgemm.ort.session import BUNDLE_DIR_CONFIG_KEY, providers, run, session_options

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2}
# (dtype, transB, bias, mask, causal): the variants the test bundle holds
VARIANTS = [Variant("float16", True, False, "none", False), Variant("float16", True, True, "bool", False),
            Variant("float16", False, False, "add", True), Variant("bfloat16", True, True, "add", False),
            Variant("bfloat16", False, False, "bool", True), Variant("float16", True, False, "none", True),
            Variant("bfloat16", True, False, "none", False), Variant("float16", True, True, "none", False),
            Variant("float16", True, True, "add", False), Variant("float16", True, True, "none", True),
            Variant("float16", True, True, "fill", False), Variant("bfloat16", True, False, "fill", False),
            Variant("float16", True, True, "none", True, True), Variant("bfloat16", True, True, "none", True, True)]


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    return request.param


@pytest.fixture(scope="module")
def bundle(made_once, device):
    os.environ.pop("FLASHGEMM_BUNDLE_DIR", None)
    if device == "cpu":
        target = "llvm"
    else:
        providers("cuda")  # onnxruntime-gpu or a clear error
        from flashgemm import targets  # noqa: PLC0415
        target = targets.resolve("auto")
    return made_once(f"attention-{target}",
                     lambda d: export_bundle(d, target, variants=VARIANTS, attention=True, log=lambda *a: None))


@pytest.fixture(scope="module")
def sess_opts(bundle):
    return session_options(bundle)


def session(sess_opts, device, model):
    return ort.InferenceSession(model.SerializeToString(), sess_opts, providers=providers(device))


def check(sess_opts, device, v: Variant, q_shape, k_shape, v_shape, bias_shape=None, mask=None, scale=0.25,
          seed=0, poke=None, zero_nan_rows=0):
    rng = np.random.default_rng(seed)
    dt = NP[v.dtype]
    feeds = {"Q": rng.standard_normal(q_shape).astype(dt), "K": rng.standard_normal(k_shape).astype(dt),
             "V": rng.standard_normal(v_shape).astype(dt)}
    if bias_shape is not None:
        feeds["bias"] = rng.standard_normal(bias_shape).astype(dt)
    if mask is not None:
        with np.errstate(over="ignore"):  # -1e9 -> -inf in float16, on purpose
            feeds["mask"] = mask if mask.dtype == np.bool_ else mask.astype(dt)
    if poke is not None:
        poke(feeds)
    model = make_attention_model(v.dtype, q_shape, k_shape, v_shape, bias_shape,
                                 None if mask is None else mask.shape,
                                 None if mask is None else ("bool" if mask.dtype == np.bool_ else v.dtype),
                                 scale=scale, trans_b=int(v.trans_b), causal=int(v.causal),
                                 zero_nan_rows=zero_nan_rows, mask_fill=int(v.mask == "fill"),
                                 causal_fill=int(v.causal_fill))
    (o,) = run(session(sess_opts, device, model), feeds)
    ref = fused_attention_ref(feeds["Q"], feeds["K"], feeds["V"], feeds.get("bias"), feeds.get("mask"), scale=scale,
                              trans_b=v.trans_b, causal=v.causal, zero_nan_rows=zero_nan_rows,
                              mask_fill=MASK_FILL[v.dtype] if v.mask == "fill" else None,
                              causal_fill=FILL_LOGIT[v.dtype] if v.causal_fill else None)
    assert o.dtype == dt and o.shape == ref.shape, (o.shape, ref.shape)
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=0, atol=ATOL[v.dtype])
    return o, ref


HEADS = (0, 2, 1, 3)  # [batch, sequence, heads, head size] <-> [batch, heads, sequence, head size]


def check_in_place(sess_opts, device, v: Variant, feeds, shapes, x, flags, rng, packed_qkv=0):
    """FusedAttention on `feeds` (Q, K and V as the op reads them in place, of `shapes`: BSNH where `flags` says, or
    one packed tensor), with a bias [B, 1, 1, N] and a mask [B, 1, M, N] where v has them, against the reference on
    x, the same Q, K and V as [batch, heads, sequence, head size] (O transposed to BSNH where flags[3])."""
    b, _, m, d = x["Q"].shape
    n = x["V"].shape[2]
    if v.has_bias:
        feeds["bias"] = rng.standard_normal((b, 1, 1, n)).astype(NP[v.dtype])
    mask = _mask(v, (b, 1, m, n), rng)
    if mask is not None:
        with np.errstate(over="ignore"):
            feeds["mask"] = mask if mask.dtype == np.bool_ else mask.astype(NP[v.dtype])
    model = make_attention_model(v.dtype, *shapes, feeds["bias"].shape if v.has_bias else None,
                                 None if mask is None else mask.shape,
                                 None if mask is None else ("bool" if mask.dtype == np.bool_ else v.dtype),
                                 scale=d ** -0.5, trans_b=int(v.trans_b), causal=int(v.causal), bsnh=flags,
                                 packed_qkv=packed_qkv, mask_fill=int(v.mask == "fill"), causal_fill=int(v.causal_fill))
    (o,) = run(session(sess_opts, device, model), feeds)
    ref = fused_attention_ref(x["Q"], x["K"], x["V"], feeds.get("bias"), feeds.get("mask"), scale=d ** -0.5,
                              trans_b=v.trans_b, causal=v.causal,
                              mask_fill=MASK_FILL[v.dtype] if v.mask == "fill" else None,
                              causal_fill=FILL_LOGIT[v.dtype] if v.causal_fill else None)
    if flags[3]:
        ref = ref.transpose(HEADS)
    assert o.shape == ref.shape, (o.shape, ref.shape)
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=0, atol=ATOL[v.dtype])


@pytest.mark.parametrize("v, flags, sizes", [
    (VARIANTS[0], (1, 1, 1, 1), (2, 3, 9, 21, 64)), (VARIANTS[0], (1, 0, 1, 0), (2, 3, 70, 130, 64)),
    (VARIANTS[0], (0, 1, 0, 1), (1, 4, 1, 33, 64)), (VARIANTS[5], (1, 1, 1, 1), (2, 2, 65, 65, 128)),
    (VARIANTS[3], (1, 1, 1, 0), (2, 3, 17, 40, 64)), (VARIANTS[2], (1, 0, 1, 1), (2, 3, 20, 24, 64))],
    ids=lambda x: x.key if isinstance(x, Variant) else "x".join(map(str, x)))
def test_bsnh_tensors(sess_opts, device, v, flags, sizes):
    """Attribute bsnh: Q, K, V, O flagged are [batch, sequence, heads, head size], read and written in place through
    strides; O equals the reference on the tensors transposed to [batch, heads, sequence, head size] (decode M = 1,
    ragged M and N past the tiles, a bias [B, 1, 1, N], an additive mask [B, 1, M, N], causal, K as [D, N])."""
    b, h, m, n, d = sizes
    rng = np.random.default_rng(sum(sizes))
    logical = {"Q": (b, h, m, d), "K": (b, h, n, d) if v.trans_b else (b, h, d, n), "V": (b, h, n, d)}
    x = {name: rng.standard_normal(shape).astype(NP[v.dtype]) for name, shape in logical.items()}
    feeds = {name: np.ascontiguousarray(x[name].transpose(HEADS)) if f else x[name]
             for name, f in zip(("Q", "K", "V"), flags)}
    check_in_place(sess_opts, device, v, feeds, [feeds[name].shape for name in ("Q", "K", "V")], x, flags, rng)


def test_bsnh_errors(sess_opts, device):
    """bsnh that is not four 0/1 flags, or flags K with transB=0, fails the session load; a flagged tensor that is
    not rank 4 fails the call; each names the fix."""
    v = VARIANTS[0]
    for flags, needle in (((1, 1), "bsnh must be four 0/1 flags"), ((1, 2, 0, 0), "bsnh must be four 0/1 flags")):
        with pytest.raises(Exception, match=needle):
            session(sess_opts, device, make_attention_model(v.dtype, (2, 5, 3, 64), (2, 7, 3, 64), (2, 7, 3, 64),
                                                            trans_b=1, bsnh=flags))
    with pytest.raises(Exception, match="needs transB=1"):
        session(sess_opts, device, make_attention_model(v.dtype, (2, 5, 3, 64), (2, 3, 64, 7), (2, 7, 3, 64),
                                                        trans_b=0, bsnh=(1, 1, 1, 1)))
    sess = session(sess_opts, device, make_attention_model(v.dtype, (5, 3, 64), (2, 7, 3, 64), (2, 7, 3, 64),
                                                           trans_b=1, bsnh=(1, 1, 1, 1)))
    feeds = {"Q": np.zeros((5, 3, 64), np.float16), "K": np.zeros((2, 7, 3, 64), np.float16),
             "V": np.zeros((2, 7, 3, 64), np.float16)}
    with pytest.raises(Exception, match=r"Q is BSNH \(attribute bsnh\), so it must be \[batch, sequence, heads"):
        run(sess, feeds)


@pytest.mark.parametrize("v, o_flag, sizes", [
    (VARIANTS[0], 1, (2, 3, 9, 64)), (VARIANTS[0], 0, (2, 4, 130, 64)), (VARIANTS[5], 1, (2, 2, 65, 128)),
    (VARIANTS[3], 1, (2, 3, 17, 64)), (VARIANTS[1], 0, (1, 2, 40, 32)), (VARIANTS[6], 1, (3, 2, 200, 64))],
    ids=lambda x: x.key if isinstance(x, Variant) else str(x))
def test_packed_qkv_tensor(sess_opts, device, v, o_flag, sizes):
    """Attribute packed_qkv: one tensor [batch, sequence, 3, heads, head size] given as Q, K and V, each read in
    place as its slice of dim 2; O equals the reference on the three slices transposed to [batch, heads, sequence,
    head size] (ragged lengths past the tiles, causal, a bias and masks, bf16, head sizes 32, 64 and 128)."""
    b, h, s, d = sizes
    rng = np.random.default_rng(sum(sizes))
    qkv = rng.standard_normal((b, s, 3, h, d)).astype(NP[v.dtype])
    x = {name: np.ascontiguousarray(qkv[:, :, i].transpose(HEADS)) for i, name in enumerate(("Q", "K", "V"))}
    check_in_place(sess_opts, device, v, {"QKV": qkv}, [qkv.shape] * 3, x, (1, 1, 1, o_flag), rng, packed_qkv=1)


def test_packed_qkv_errors(sess_opts, device):
    """packed_qkv without bsnh flagging Q, K and V fails the session load; Q, K and V that are not one tensor, or a
    tensor that is not [batch, sequence, 3, heads, head size], fail the call; each names the fix."""
    v, qkv = VARIANTS[0], (2, 5, 3, 2, 64)
    with pytest.raises(Exception, match=r"packed_qkv .* needs bsnh = \[1, 1, 1, 0 or 1\]"):
        session(sess_opts, device, make_attention_model(v.dtype, qkv, qkv, qkv, trans_b=1, bsnh=(1, 1, 0, 0),
                                                        packed_qkv=1))
    model = make_attention_model(v.dtype, qkv, qkv, qkv, trans_b=1, bsnh=(1, 1, 1, 0))
    model.graph.node[0].attribute.append(helper.make_attribute("packed_qkv", 1))
    feeds = {n: np.zeros(qkv, np.float16) for n in ("Q", "K", "V")}
    with pytest.raises(Exception, match=r"Q, K and V must be the same tensor .*give its name as all three inputs"):
        run(session(sess_opts, device, model), feeds)
    bad = (2, 5, 2, 64)
    sess = session(sess_opts, device, make_attention_model(v.dtype, bad, bad, bad, trans_b=1, bsnh=(1, 1, 1, 0),
                                                           packed_qkv=1))
    with pytest.raises(Exception, match=r"Q is packed with K and V .* \[batch, sequence, 3, heads, head size\]"):
        run(sess, {"QKV": np.zeros(bad, np.float16)})


def _mask(v: Variant, shape, rng):
    if v.mask in BOOL_MASK_KINDS:
        return rng.random(shape) < 0.7
    if v.mask == "add":
        with np.errstate(over="ignore"):
            return np.where(rng.random(shape) < 0.3, -1e9, -rng.random(shape))
    return None


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.key)
def test_variants(sess_opts, device, v):
    """[B, H, M, K] heads, a padding-style bias [B, 1, 1, N], a [B, 1, M, N] mask, M != N, D != K."""
    b, h, m, n, k, d = 2, 3, 9, 21, 16, 24
    k_shape = (b, h, n, k) if v.trans_b else (b, h, k, n)
    mask = _mask(v, (b, 1, m, n), np.random.default_rng(1))
    check(sess_opts, device, v, (b, h, m, k), k_shape, (b, h, n, d), (b, 1, 1, n) if v.has_bias else None, mask)


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.key)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("zero_nan_rows", [0, 1], ids=["nan-rows", "zero-nan-rows"])
def test_tensor_core_kernel(sess_opts, device, v, d, zero_nan_rows, monkeypatch, capfd):
    """K = D in the tensor-core kernels' head sizes (attention_tensor_core_kernels: wgmma on sm_90 at 64 and 128,
    mma.sync elsewhere): on CUDA such a kernel serves, else the generic one. Ragged M and N (a partial row tile and
    column chunk), V shared by the batch, a bias and mask broadcast over heads, a fully masked row; NaN in Q's row 3
    of one head (a NaN row, or 0 * V with zero_nan_rows) and in V's last row's column 1 (reached through 0 * NaN by
    every row, the causal ones, the fully masked one and the zeroed one included)."""
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")  # read when the kernel is created
    b, h, m, n = 2, 3, 77, 136
    rng = np.random.default_rng(4)
    mask = _mask(v, (b, 1, m, n), rng)
    if mask is not None:
        mask[1, 0, 5] = False if v.mask in BOOL_MASK_KINDS else -np.inf  # row 5 of batch 1: fully masked

    def poke(feeds):
        feeds["Q"][0, 1, 3, 0] = np.nan
        feeds["V"][1, n - 1, 1] = np.nan
    k_shape = (b, h, n, d) if v.trans_b else (b, h, d, n)
    o, ref = check(sess_opts, device, v, (b, h, m, d), k_shape, (h, n, d), (b, 1, 1, n) if v.has_bias else None,
                   mask, scale=d ** -0.5, poke=poke, zero_nan_rows=zero_nan_rows)
    row = o[0, 1, 3].astype(np.float32)
    assert np.isnan(row).all() if not zero_nan_rows else (np.isnan(row[1]) and not np.any(np.delete(row, 1)))
    assert np.isnan(o[:, 1, :, 1].astype(np.float32)).all()  # (V's head 1 holds the NaN)
    served = f"_{tensor_core_form(d)}_d" if device == "cuda" else "_generic"
    assert f"fa_{v.key}{served}" in capfd.readouterr().err


@pytest.mark.parametrize("v", [x for x in VARIANTS if x.has_bias or x.mask != "none"], ids=lambda v: v.key)
@pytest.mark.parametrize("m", [77, 1])
@pytest.mark.parametrize("d", [64, 80])
def test_tensor_core_kernel_one_row_bias_and_mask(sess_opts, device, v, m, d, monkeypatch, capfd):
    """A bias and a mask of one row for all of S's (a padding mask [B, 1, 1, N], read through row stride 0; at M = 1
    any bias): the tensor-core kernels read a thread's columns once for its rows. Batch 1's mask masks every column
    (its rows are 0 * V: zeros, NaN in V's NaN column); a NaN in batch 0's bias at a kept column makes its rows
    NaN."""
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")  # read when the kernel is created
    b, h, n = 2, 3, 136
    rng = np.random.default_rng(6)
    mask = _mask(v, (b, 1, 1, n), rng)
    if mask is not None:
        mask[0, 0, 0, 7] = True if v.mask in BOOL_MASK_KINDS else 0.0
        mask[1] = False if v.mask in BOOL_MASK_KINDS else -np.inf

    def poke(feeds):
        if "bias" in feeds:
            feeds["bias"][0, ..., 7] = np.nan
        feeds["V"][1, 0, n - 1, 1] = np.nan
    k_shape = (b, h, n, d) if v.trans_b else (b, h, d, n)
    bias_shape = (b, 1, 1, n) if m > 1 else (b, h, 1, n)
    o, _ = check(sess_opts, device, v, (b, h, m, d), k_shape, (b, h, n, d), bias_shape if v.has_bias else None,
                 mask, scale=d ** -0.5, poke=poke)
    o = o.astype(np.float32)
    assert np.isnan(o[0]).all() if v.has_bias else np.isfinite(o[0]).all()
    if mask is not None and v.mask != "fill":  # ("fill": batch 1's rows are uniform, the reference's)
        assert np.isnan(o[1, 0, :, 1]).all() and not np.any(np.delete(o[1], 1, axis=-1)) and not np.any(o[1, 1:])
    served = f"_{tensor_core_form(d)}_d{d}" if device == "cuda" else "_generic"
    assert f"fa_{v.key}{served}" in capfd.readouterr().err


@pytest.mark.parametrize("v", [x for x in VARIANTS if x.has_bias or x.mask != "none"], ids=lambda v: v.key)
@pytest.mark.parametrize("n", [208, 136, 201])
def test_tensor_core_kernel_bias_and_mask_of_rows(sess_opts, device, v, n, monkeypatch, capfd):
    """A bias of the scores' full shape [B, H, M, N] and a mask [B, 1, M, N] (DeBERTa's, a decoder's): on the
    one-warpgroup wgmma tile copied chunk by chunk into shared memory where N puts their rows' 16-byte runs on 16-byte
    boundaries (208: both; 136: the bias and an additive mask, a bool mask read in place; 201: in place), against
    FP64 with a fully masked row, NaN in the bias at a kept column of one row (that row NaN) and in V (its column)."""
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")  # read when the kernel is created
    b, h, m, d = 2, 3, 77, 64
    rng = np.random.default_rng(8)
    mask = _mask(v, (b, 1, m, n), rng)
    if mask is not None:
        mask[1, 0, 5] = False if v.mask in BOOL_MASK_KINDS else -np.inf  # row 5 of batch 1: fully masked
        mask[0, 0, 9, 3] = True if v.mask in BOOL_MASK_KINDS else 0.0

    def poke(feeds):
        if "bias" in feeds:
            feeds["bias"][0, 2, 9, 3] = np.nan
        feeds["V"][1, 0, n - 1, 1] = np.nan
    k_shape = (b, h, n, d) if v.trans_b else (b, h, d, n)
    o, _ = check(sess_opts, device, v, (b, h, m, d), k_shape, (b, h, n, d), (b, h, m, n) if v.has_bias else None,
                 mask, scale=d ** -0.5, poke=poke)
    if v.has_bias:
        assert np.isnan(o[0, 2, 9].astype(np.float32)).all()
    tensor_core = device == "cuda" and n % n_multiple(v) == 0  # (K as [D, N]: N a multiple of 8)
    served = f"_{tensor_core_form(d)}_d{d}" if tensor_core else "_generic"
    assert f"fa_{v.key}{served}" in capfd.readouterr().err


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.key)
@pytest.mark.parametrize("d, m", [(128, 1), (64, 9), (80, 1)])
@pytest.mark.parametrize("zero_nan_rows", [0, 1], ids=["nan-rows", "zero-nan-rows"])
def test_split_n_kernel(sess_opts, device, v, d, m, zero_nan_rows, monkeypatch, capfd):
    """Few query rows against many keys (a decoder's step, M = 1; speculative decoding's few, M = 9) in B x H = 6
    row tiles, which leave the GPU's SMs idle: on CUDA the split-N kernel serves, N split across blocks and the
    splits' partial rows combined, matching FP64 with a padding bias [B, 1, 1, N], a mask of the rows, NaN in Q's
    row 0 of one head (a NaN row, or 0 * V with zero_nan_rows), +inf in the bias at one kept column of batch 1 (its
    rows NaN: a split's max +inf), a fully masked row (0 * V) and NaN in V's last row (every row's column 1)."""
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")  # read when the kernel is created
    b, h, n = 2, 3, 1000
    rng = np.random.default_rng(d + m)
    mask = _mask(v, (b, 1, m, n), rng)
    if mask is not None:
        mask[0, 0, m - 1] = False if v.mask in BOOL_MASK_KINDS else -np.inf  # batch 0's last row: fully masked
        mask[1, 0, :, 700] = True if v.mask in BOOL_MASK_KINDS else 0.0

    def poke(feeds):
        feeds["Q"][0, 1, 0, 0] = np.nan
        feeds["V"][1, n - 1, 1] = np.nan
        if "bias" in feeds:
            feeds["bias"][1, 0, 0, 700] = np.inf
    k_shape = (b, h, n, d) if v.trans_b else (b, h, d, n)
    o, ref = check(sess_opts, device, v, (b, h, m, d), k_shape, (h, n, d), (b, 1, 1, n) if v.has_bias else None,
                   mask, scale=d ** -0.5, poke=poke, zero_nan_rows=zero_nan_rows)
    assert np.isnan(o[:, 1, :, 1].astype(np.float32)).all()  # (V's head 1 holds the NaN)
    err = capfd.readouterr().err
    if device == "cuda":
        assert re.search(rf"fa_{v.key}_split_d{d}\S* \(default, (N%8=0, )?N in \d+ splits\)", err), err
    else:
        assert f"fa_{v.key}_generic" in err


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("m,n,pad", [(200, 200, 70), (77, 200, 150), (130, 130, 0)],
                         ids=["prefill-left-padded", "after-a-cache", "no-padding"])
def test_causal_fill_is_the_full_decoder_mask(sess_opts, device, dtype, d, m, n, pad):
    """causal_fill with a decoder's padding row [B, 1, 1, N] as the bias, at FILL_LOGIT (what --decoder-causal gives a
    decoder) is softmax with the decoder's mask of the scores' shape, at the dtype's lowest as exported, at every
    row (FP64): a row tile whose first row sees only padding (batch 0, left-padded by `pad`) computes every key and
    its rows that see only padding attend to every key (bfloat16's lowest itself would overflow the CUDA kernels'
    log2-scaled logits); the other tiles (batch 1, no padding) skip the keys past the diagonal."""
    v = next(x for x in VARIANTS if x.dtype == dtype and x.causal_fill)
    rng = np.random.default_rng(m + pad)
    row = np.zeros((2, 1, 1, n))
    row[0, ..., :pad] = FILL_LOGIT[dtype]
    i, j = np.arange(m)[:, None], np.arange(n)[None, :]
    mask4 = np.where((j > i + n - m) | (row < 0), MASK_FILL[dtype], 0.0)  # [2, 1, m, n], as the export has it
    feeds = {name: rng.standard_normal((2, 3, length, d)).astype(NP[dtype])
             for name, length in (("Q", m), ("K", n), ("V", n))}
    model = make_attention_model(dtype, (2, 3, m, d), (2, 3, n, d), (2, 3, n, d), row.shape, scale=d ** -0.5,
                                 trans_b=1, causal=1, causal_fill=1)
    (o,) = run(session(sess_opts, device, model), {**feeds, "bias": row.astype(NP[dtype])})
    x = {name: a.astype(np.float64) for name, a in feeds.items()}
    ref = fused_attention_ref(x["Q"], x["K"], x["V"], mask4, None, scale=d ** -0.5, trans_b=True)
    assert np.isfinite(o.astype(np.float64)).all()
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=0, atol=ATOL[dtype])


def tensor_core_form(d: int) -> str:
    """The kernel form serving head size d on this machine's GPU (attention_tensor_core_kernels)."""
    from flashgemm import targets  # noqa: PLC0415
    from flashgemm.kernel import fused_attention_wgmma  # noqa: PLC0415
    return "wgmma" if targets.resolve("auto") == "sm_90" and d in fused_attention_wgmma.HEAD_SIZES else "mma"


@pytest.mark.gpu
@pytest.mark.parametrize("v", [VARIANTS[0], VARIANTS[4]], ids=lambda v: v.key)
def test_tensor_core_tiles_by_length(sess_opts, device, v, monkeypatch, capfd):
    """A head size with a tile for short sequences (max_n) serves N up to it with that tile and longer N with the
    any-N tile, each matching FP64 (a partial last chunk, V's NaN beyond the short tile's reach)."""
    if device != "cuda":
        pytest.skip("CUDA's tensor-core kernels")
    from flashgemm import targets  # noqa: PLC0415
    from flashgemm.bundle.kernel_library import attention_tensor_core_kernels  # noqa: PLC0415
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    tiles = [(name, f["max_n"]) for name, _, f in attention_tensor_core_kernels(targets.resolve("auto"), v)
             if f["head_size"] == 64 and f["zero_nan_rows"] == 0]
    if len(tiles) < 2:
        pytest.skip("one tile serves every N at head size 64 here")
    (short, max_n), (long, _) = tiles
    for n in (max_n, max_n + 8):
        def poke(feeds):
            feeds["V"][0, 0, n - 1, 5] = np.nan
        k_shape = (1, 2, n, 64) if v.trans_b else (1, 2, 64, n)
        check(sess_opts, device, v, (1, 2, 130, 64), k_shape, (1, 2, n, 64), scale=0.125, seed=n,
              mask=_mask(v, (1, 1, 130, n), np.random.default_rng(n)), poke=poke)
        err = capfd.readouterr().err
        assert f"{short if n <= max_n else long} (" in err, err


@pytest.mark.gpu
def test_a_tuned_tile_serves_up_to_its_length(device, tmp_path, monkeypatch, capfd):
    """A bundle built with a tuned tile (attention_best.TunedTile, as flashgemm-build --attention reads one from an
    attention database; here a tile the bundle does not ship otherwise) serves it to the calls of its variant and
    head size up to the tuned N, the shipped tiles past it; both match FP64 (a partial last chunk, V's NaN)."""
    if device != "cuda":
        pytest.skip("CUDA's tensor-core kernels")
    from flashgemm import targets  # noqa: PLC0415
    from flashgemm.bundle.attention_best import TunedTile, served_tiles  # noqa: PLC0415
    from flashgemm.bundle.kernel_library import attention_tensor_core_kernels  # noqa: PLC0415
    from flashgemm.spaces import attention_tiles  # noqa: PLC0415
    target, v, d, tuned_n = targets.resolve("auto"), VARIANTS[0], 64, 192
    shipped = {tile for _, tile, _ in served_tiles(target, v, d)}
    tile = next(t for t in attention_tiles.tiles(target, v, d) if t not in shipped)
    tuned = TunedTile("t.attention.f16", v, (1, 4, 200, tuned_n, d), tile, 1e-5, target)
    (name,) = [n for n, _, f in attention_tensor_core_kernels(target, v, [tuned])
               if f["schedule"] == "tuned" and f["zero_nan_rows"] == 0]
    export_bundle(tmp_path, target, variants=[v], attention=True, attention_tuned=[tuned], log=lambda *a: None)
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    so = session_options(tmp_path)
    for n in (tuned_n - 8, tuned_n, tuned_n + 8):
        def poke(feeds):
            feeds["V"][0, 1, n - 1, 3] = np.nan
        check(so, device, v, (1, 2, 130, d), (1, 2, n, d), (1, 2, n, d), scale=0.125, seed=n, poke=poke)
        err = capfd.readouterr().err
        assert (f"{name} (tuned, N<={tuned_n})" in err) == (n <= tuned_n), (n, err)
        assert f"_{tile.form}_d{d}" in err  # past it, a shipped tile of the head size


@pytest.mark.parametrize("v", [VARIANTS[0], VARIANTS[5], VARIANTS[3]], ids=lambda v: v.key)
@pytest.mark.parametrize("d", [64, 128])
def test_tensor_core_kernel_scales_and_rising_logits(sess_opts, device, v, d):
    """Negative, zero and positive scales, and rows whose logits rise along N by about 12 log2 units a 64-column
    chunk, by 2, or fall, over several chunks and a partial last one (the online softmax's running max and O's
    rescaling, in every chunk or none), match FP64."""
    b, h, m, n = 1, 2, 130, 300
    rising = np.linspace(-1.0, 1.0, n)

    for scale in (-0.7 * d ** -0.5, 0.0, d ** -0.5, 3 * d ** -0.5):
        def poke(feeds):
            # rows whose logits run over N (K's column 0) by 40 (~12 log2 units a 64-column chunk), 6 and -24
            for row, rate in ((0, 20.0), (1, 3.0), (2, -12.0)):
                feeds["Q"][0, :, row] = 0
                feeds["Q"][0, :, row, 0] = rate / (abs(scale) or 1.0)
            k = feeds["K"] if v.trans_b else np.swapaxes(feeds["K"], -1, -2)  # (a view: writes reach K)
            k[0, :, :, 0] = rising
        k_shape = (b, h, n, d) if v.trans_b else (b, h, d, n)
        check(sess_opts, device, v, (b, h, m, d), k_shape, (b, h, n, d), (b, 1, 1, n) if v.has_bias else None,
              _mask(v, (b, 1, m, n), np.random.default_rng(d)), scale=scale, seed=d, poke=poke)


def test_tensor_core_kernel_head_sizes_and_fallbacks(sess_opts, device, monkeypatch, capfd):
    """Every shipped head size serves on CUDA; K != D, N not a multiple of 8 with K as [D, N], or a head size
    without a kernel go to the generic kernel."""
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    v = VARIANTS[0]
    for d in (32, 80, 96):
        check(sess_opts, device, v, (1, 2, 40, d), (1, 2, 50, d), (1, 2, 50, d), scale=d ** -0.5, seed=d)
    check(sess_opts, device, v, (1, 2, 40, 64), (1, 2, 50, 64), (1, 2, 50, 32), scale=0.125)  # K != D
    check(sess_opts, device, v, (1, 2, 40, 48), (1, 2, 50, 48), (1, 2, 50, 48), scale=0.125)  # no such head size
    kn = VARIANTS[2]  # K as [D, N]
    check(sess_opts, device, kn, (1, 2, 40, 64), (1, 2, 64, 50), (1, 2, 50, 64), scale=0.125,
          mask=_mask(kn, (1, 1, 40, 50), np.random.default_rng(5)))
    err = capfd.readouterr().err
    if device == "cuda":
        for d in (32, 80, 96):
            assert f"fa_{v.key}_mma_d{d} " in err
        assert err.count(f"fa_{v.key}_generic") == 2 and f"fa_{kn.key}_generic" in err


def test_head_size_kernel_dispatch_and_bad_entries(bundle, device, tmp_path, monkeypatch, capfd):
    """Bundle::FindAttention on the CPU: an entry with a head_size (the tensor-core kernels' manifest form, pointed
    here at the llvm generic function so that it runs) serves the calls whose K and D are both its head size and
    whose N its n_multiple divides; the others take the generic kernel. A malformed such entry fails the bundle with
    the field named. Of two such kernels, one with a max_n serves the calls up to it, the other the longer ones."""
    if device != "cpu":
        pytest.skip("the manifest's dispatch rules, not the device, are under test")
    import shutil  # noqa: PLC0415
    v = VARIANTS[0]
    manifest = json.loads((bundle / "manifest.json").read_text())
    generic = {f["name"]: f for f in manifest["functions"]}[f"fa_{v.key}_generic"]
    entry = dict(generic, schedule="default", form="mma", head_size=16, n_multiple=8)

    def bundle_with(e, name):
        d = tmp_path / name
        d.mkdir()
        for so in kernel_libraries(bundle):
            shutil.copy(so, d)
        extra = e if isinstance(e, list) else [e]
        (d / "manifest.json").write_text(json.dumps(dict(manifest, functions=manifest["functions"] + extra)))
        return d

    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    so = session_options(bundle_with(entry, "head-size"))
    for k, d, n, served in ((16, 16, 24, "default, N%8=0"), (16, 16, 20, "generic"), (16, 8, 24, "generic"),
                            (32, 32, 24, "generic")):
        check(so, device, v, (1, 2, 5, k), (1, 2, n, k), (1, 2, n, d), seed=k + d + n)
        err = capfd.readouterr().err
        assert f"fa_{v.key}_generic ({served}) sizes=[1,2,5,{n},{k}]" in err, (k, d, n, err)
    # a tile for short sequences (max_n; here a tuned one) beside one for any N, listed after it: the short one up
    # to its max_n
    so = session_options(bundle_with([dict(entry, n_multiple=1), dict(entry, n_multiple=1, max_n=16, schedule="tuned",
                                                                      tuned=True, sizes=[1, 8, 40, 16, 16])], "max-n"))
    for n, served in ((16, "tuned, N<=16"), (24, "default")):
        check(so, device, v, (1, 2, 5, 16), (1, 2, n, 16), (1, 2, n, 16), seed=n)
        err = capfd.readouterr().err
        assert f"fa_{v.key}_generic ({served}) sizes=[1,2,5,{n},16]" in err, (n, err)
    # kernels specialized on zero_nan_rows (the CUDA tensor-core kernels' two): each node takes its value's
    so = session_options(bundle_with([dict(entry, n_multiple=1, zero_nan_rows=0),
                                      dict(entry, n_multiple=1, zero_nan_rows=1, schedule="tuned", tuned=True,
                                           sizes=[1, 8, 40, 16, 16])], "zero-nan-rows"))
    for zero_nan_rows, served in ((0, "default"), (1, "tuned")):
        check(so, device, v, (1, 2, 5, 16), (1, 2, 24, 16), (1, 2, 24, 16), seed=3, zero_nan_rows=zero_nan_rows)
        err = capfd.readouterr().err
        assert f"fa_{v.key}_generic ({served}) sizes=[1,2,5,24,16]" in err, (zero_nan_rows, err)
    # a split-N kernel (manifest "split"): never on the CPU, whose calls keep the kernels above
    so = session_options(bundle_with([dict(entry, n_multiple=1), dict(entry, n_multiple=1, split=[16, 64])], "split"))
    check(so, device, v, (1, 2, 1, 16), (1, 2, 4096, 16), (1, 2, 4096, 16), seed=5)
    assert f"fa_{v.key}_generic (default) sizes=[1,2,1,4096,16]" in capfd.readouterr().err
    bad_entries = ((dict(head_size=0), '"head_size" is not a positive integer'),
                   (dict(zero_nan_rows=2), '"zero_nan_rows" is neither 0 nor 1'),
                   (dict(n_multiple=0), '"n_multiple" is not a positive integer'),
                   (dict(max_n=0), '"max_n" is not a positive integer'),
                   (dict(split=[0, 64]), '"split" is not \\[rows, chunk\\] of positive integers'),
                   (dict(split=[16]), '"split" is not \\[rows, chunk\\] of positive integers'),
                   (dict(schedule="tuned"), '"schedule" disagrees with "tuned"'))
    for i, (bad, needle) in enumerate(bad_entries):
        d = bundle_with(dict(entry, **bad), f"bad-{i}")
        opts = ort.SessionOptions()
        opts.add_session_config_entry(BUNDLE_DIR_CONFIG_KEY, str(d))
        with pytest.raises(Exception, match="functions\\[\\d+\\]." + needle.replace('"', '.')):
            session_options(so=opts)


def test_v_broadcast_and_rank_3(sess_opts, device):
    """V shared by the batch ([H, N, D] against [B, H, M, K] scores), and rank-3 inputs."""
    v = VARIANTS[0]
    check(sess_opts, device, v, (2, 3, 5, 8), (2, 3, 7, 8), (3, 7, 4))
    check(sess_opts, device, v, (6, 5, 8), (6, 7, 8), (6, 7, 8), seed=2)


def test_fully_masked_rows_and_empty_columns(sess_opts, device):
    """A row with every column masked is zeros; N = 0 (no column at all) makes every row zeros."""
    v = VARIANTS[1]
    mask = np.ones((1, 1, 4, 6), bool)
    mask[0, 0, 2] = False
    o, _ = check(sess_opts, device, v, (1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 5), (1, 1, 1, 6), mask)
    assert not np.any(o[:, :, 2].astype(np.float32))
    o, _ = check(sess_opts, device, VARIANTS[0], (1, 2, 3, 8), (1, 2, 0, 8), (1, 2, 0, 5))
    assert o.shape == (1, 2, 3, 5) and not np.any(o.astype(np.float32))


def test_empty_head_size_and_empty_output(sess_opts, device):
    """K = 0: every logit is 0 (a uniform softmax), so O is the mean of V's rows; D = 0 or M = 0: an empty O."""
    v = VARIANTS[0]
    o, _ = check(sess_opts, device, v, (1, 2, 3, 0), (1, 2, 4, 0), (1, 2, 4, 5))
    assert o.shape == (1, 2, 3, 5)
    for q, k, vv, out in (((1, 2, 3, 8), (1, 2, 4, 8), (1, 2, 4, 0), (1, 2, 3, 0)),
                          ((1, 2, 0, 8), (1, 2, 4, 8), (1, 2, 4, 5), (1, 2, 0, 5))):
        sess = session(sess_opts, device, make_attention_model("float16", q, k, vv, trans_b=1))
        (o,) = run(sess, {"Q": np.zeros(q, np.float16), "K": np.zeros(k, np.float16), "V": np.zeros(vv, np.float16)})
        assert o.shape == out


def test_nan_in_nan_out(sess_opts, device):
    """A NaN in Q makes its row NaN; a NaN in V reaches its column of every row, the fully masked one (0 * NaN)
    included, whose other columns stay 0."""
    v = VARIANTS[1]
    mask = np.ones((1, 1, 5, 6), bool)
    mask[0, 0, 4] = False

    def poke(feeds):
        feeds["Q"][0, 1, 1, 2] = np.nan
        feeds["V"][0, 0, 3, 1] = np.nan
    o, _ = check(sess_opts, device, v, (1, 2, 5, 8), (1, 2, 6, 8), (1, 2, 6, 4), (1, 1, 1, 6), mask, poke=poke)
    assert np.isnan(o[0, 1, 1].astype(np.float32)).all()
    assert np.isnan(o[0, 0, :, 1].astype(np.float32)).all()
    assert not np.any(np.nan_to_num(o[0, 0, 4].astype(np.float32), nan=1.0)[[0, 2, 3]])


def test_shape_and_type_errors(sess_opts, device):
    v = VARIANTS[0]
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 5, 8)).astype(np.float16), rng.standard_normal((2, 7, 8)).astype(np.float16)
    cases = [
        ((2, 6, 4), np.float16, "V must be [..., N, D] with N=7"),
        ((3, 7, 4), np.float16, "do not broadcast to those of Q·K"),
    ]
    for v_shape, vt, needle in cases:
        model = make_attention_model("float16", q.shape, k.shape, ["v0", "v1", "v2"], trans_b=1)
        sess = session(sess_opts, device, model)
        with pytest.raises(Exception, match="FusedAttention \\(node 'fa'\\)") as ei:
            run(sess, {"Q": q, "K": k, "V": rng.standard_normal(v_shape).astype(vt)})
        assert needle in str(ei.value), str(ei.value)


def test_bundle_without_attention_kernels(device, tmp_path):
    """A bundle built without --attention serves FusedGemmSoftmax only: a FusedAttention node fails with the fix."""
    if device != "cpu":
        pytest.skip("the bundle's contents, not the device, are under test")
    export_bundle(tmp_path, "llvm", variants=VARIANTS[:1], log=lambda *a: None)
    assert json.loads((tmp_path / "manifest.json").read_text())["format"] == MANIFEST_FORMAT
    sess = session(session_options(tmp_path), device, make_attention_model("float16", (1, 2, 8), (1, 3, 8),
                                                                         (1, 3, 4), trans_b=1))
    with pytest.raises(Exception, match="no FusedAttention kernel for variant f16_tb1_bias0_masknone_causal0.*"
                                        "flashgemm-build --target llvm --attention"):
        run(sess, {k: np.zeros(s, np.float16) for k, s in (("Q", (1, 2, 8)), ("K", (1, 3, 8)), ("V", (1, 3, 4)))})


def _bundle_of_format(bundle: Path, tmp_path: Path, fmt: int) -> Path:
    """`bundle`'s kernels under a manifest that says format `fmt` (an older build's)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["format"] = fmt
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    for so in kernel_libraries(bundle):
        (tmp_path / so.name).symlink_to(so)
    return tmp_path


def test_format_2_bundle_attention_kernels_left_out(bundle, device, tmp_path):
    """A format-2 bundle's FusedAttention kernels predate the zero_nan_rows argument: they are left out (a
    FusedAttention node asks for a rebuild) while its FusedGemmSoftmax kernels still serve."""
    if device != "cpu":
        pytest.skip("the bundle's contents, not the device, are under test")
    opts = session_options(_bundle_of_format(bundle, tmp_path, 2))
    feeds = {k: np.zeros(s, np.float16) for k, s in (("Q", (1, 2, 8)), ("K", (1, 3, 8)), ("V", (1, 3, 4)))}
    sess = session(opts, device, make_attention_model("float16", (1, 2, 8), (1, 3, 8), (1, 3, 4), trans_b=1))
    with pytest.raises(Exception, match="no FusedAttention kernel for variant f16_tb1_bias0_masknone_causal0"):
        run(sess, feeds)
    (p,) = run(session(opts, device, make_model("float16", (1, 2, 8), (1, 3, 8), trans_b=1)),
               {"A": feeds["Q"], "B": feeds["K"]})
    np.testing.assert_allclose(p.astype(np.float64), np.full((1, 2, 3), 1 / 3), atol=1e-3)


def test_format_4_bundle_refuses_bsnh(bundle, device, tmp_path):
    """A format-4 bundle's FusedAttention kernels take compact tensors only: they still serve plain nodes, and a node
    with bsnh gets an error asking for a rebuild (not the kernel's stride check)."""
    if device != "cpu":
        pytest.skip("the bundle's contents, not the device, are under test")
    opts = session_options(_bundle_of_format(bundle, tmp_path, 4))
    plain = {k: np.zeros(s, np.float16) for k, s in (("Q", (1, 3, 2, 8)), ("K", (1, 3, 5, 8)), ("V", (1, 3, 5, 8)))}
    (o,) = run(session(opts, device, make_attention_model("float16", (1, 3, 2, 8), (1, 3, 5, 8), (1, 3, 5, 8),
                                                          trans_b=1)), plain)
    assert o.shape == (1, 3, 2, 8)
    feeds = {k: np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for k, x in plain.items()}
    sess = session(opts, device, make_attention_model("float16", (1, 2, 3, 8), (1, 5, 3, 8), (1, 5, 3, 8),
                                                      trans_b=1, bsnh=(1, 1, 1, 1)))
    with pytest.raises(Exception, match=r"was built before them; rebuild it \(flashgemm-build --target llvm"):
        run(sess, feeds)


def test_generic_kernel_warns_once_per_shape(sess_opts, device, capfd):
    """The generic kernel is slower than the unfused graph it replaces: one WARNING per node and sizes (on CUDA at a
    head size without a tensor-core kernel)."""
    m, n, d = (128, 128, 64) if device == "cpu" else (5, 7, 48)  # the CPU warns from BERT-base's site size up
    sess = session(sess_opts, device, make_attention_model("float16", (1, 1, m, d), (1, 1, n, d), (1, 1, n, d),
                                                           trans_b=1))
    feeds = {k: np.zeros(s, np.float16) for k, s in (("Q", (1, 1, m, d)), ("K", (1, 1, n, d)), ("V", (1, 1, n, d)))}
    for _ in range(3):
        run(sess, feeds)
    err = capfd.readouterr().err
    assert err.count(f"head size {d} with its generic kernel, slower than") == 1, err
    assert "without --attention" in err
    assert ("tensor-core kernels serve head sizes" in err) == (device == "cuda")


# ------------------------------------------------------------------------------------ the rewrite (--attention)

DATA = Path(__file__).resolve().parent / "data"
TINY = ["bert-large-tiny.f16", "vit-b16-tiny.f16", "whisper-enc-tiny.f16", "bert-large-tiny-dyn.f16",
        "whisper-enc-tiny-dynb-dynamo-sdpa.f16", "bert-large-tiny-dyn-dynamo-sdpa.f16"]
MODEL_ATOL = 1e-2  # as tests/test_rewrite.py: the fused op rounds once where the original rounds S, c*S, c*S+M


def _model_feeds(sess, seed=0, padded_out=False):
    """Random feeds at batch 2, length 12: batch 0's last 5 tokens padding (padded_out: every token of batch 1 too, so
    that its softmax rows are fully masked)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else (2 if n == 0 else 12) for n, d in enumerate(i.shape)]
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(1, 128, shape).astype(np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones(shape, np.int64)
            feeds[i.name][0, -5:] = 0
            if padded_out:
                feeds[i.name][1] = 0
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float16)
    return feeds


def _assert_computes_original(o1, path, feeds, device, attending):
    """The rewritten model's output `o1` against the original's (the model at `path`): on `device` at the tokens whose
    query rows keep a key, and at every token against the original on the CPU EP. A row whose every key is at the mask's
    finite lowest is softmax(s + lowest) = softmax(s) in exact arithmetic, as the op computes it (the bias added in
    float32) and as the CPU EP does (Add and Softmax in one float32 island); the CUDA EP adds in float16, where lowest +
    s rounds to lowest or the next float16 (32 apart) and the row comes out a near-uniform average: that row is compared
    with the exact one only. `attending`: [batch, sequence], True where a token's rows keep a key."""
    (o0,) = run(ort.InferenceSession(str(path), providers=providers(device)), feeds)
    np.testing.assert_allclose(o1[attending].astype(np.float32), o0[attending].astype(np.float32), rtol=0,
                               atol=MODEL_ATOL)
    if device != "cpu":
        (o0,) = run(ort.InferenceSession(str(path), providers=providers("cpu")), feeds)
    np.testing.assert_allclose(o1.astype(np.float32), o0.astype(np.float32), rtol=0, atol=MODEL_ATOL)


@pytest.mark.parametrize("name", TINY)
def test_rewrite_attention_tiny_models(sess_opts, device, name, tmp_path):
    """Every site of the tiny seed models (static and dynamic batch + sequence) becomes FusedAttention, P's Casts to
    float32 and back (ViT) included, its Q, K and V projections one MatMul, and the rewritten model computes what the
    original does."""
    dst = tmp_path / f"{name}.attention.onnx"
    report = rewrite_file(DATA / f"{name}.onnx", dst, attention=True)
    assert report.attention == 2 and not report.attention_left, report.text()
    assert report.heads_transposes == 8, report.text()  # Q, K, V and O of both sites in place (attribute bsnh)
    assert count_ops(dst, "FusedAttention", "flashgemm") == 2 and count_ops(dst, "FusedGemmSoftmax", "flashgemm") == 0
    assert count_ops(dst, "Softmax") == 0
    # each site's Q, K and V projections one MatMul (K's missing bias in Whisper zeros; the dynamo exports' Shape of
    # K read from the packed tensor)
    assert report.qkv_packed == 2, report.text()
    # a site: three projections become one, Q K^T and P V go into the op
    assert count_ops(dst, "MatMul") == count_ops(DATA / f"{name}.onnx", "MatMul") - 2 * (2 + 2)
    for node in onnx.load(str(dst)).graph.node:
        if node.op_type == "FusedAttention":
            assert len(set(node.input[:3])) == 1 and helper.get_node_attr_value(node, "packed_qkv") == 1
    original = ort.InferenceSession(str(DATA / f"{name}.onnx"), providers=providers(device))
    feeds = _model_feeds(original)
    o0 = run(original, feeds)
    o1 = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    for a, b in zip(o0, o1):
        np.testing.assert_allclose(b.astype(np.float32), a.astype(np.float32), rtol=0, atol=MODEL_ATOL)


DECODERS = ["llama-3.2-1b-tiny-dyn.f16", "llama-3.2-1b-tiny-dyn-dynamo-sdpa.f16"]


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("padding", ["none", "right", "left", "all"])
@pytest.mark.parametrize("decoder_causal", ["off", "exact"])
def test_rewrite_attention_tiny_decoders(sess_opts, device, name, padding, decoder_causal, tmp_path):
    """A decoder's attention (Llama: rotary Q and K, two query heads sharing one key/value head, a causal mask
    combined with the padding mask into one [batch, 1, sequence, sequence] bias) becomes FusedAttention at every
    site, and the rewritten model computes what the original does with no padding, right or left padding (left: a
    sequence's first query rows see only padding, every logit at the mask's lowest) and a sequence padded out
    (`_assert_computes_original`: such rows exactly). By default (exact) the causal rule becomes the op's causal flag
    with causal_fill (the keys past the diagonal at the lowest, as in the export) and the bias the padding mask
    [batch, 1, 1, sequence]: the same at every token, those whose rows see only padding included; off keeps the
    mask."""
    dst = tmp_path / f"{name}.attention.onnx"
    report = rewrite_file(DATA / f"{name}.onnx", dst, attention=True, decoder_causal=decoder_causal)
    taken = decoder_causal == "exact"
    assert report.attention == 2 and not report.attention_left, report.text()
    assert all(s.details.get("causal_in_bias") == -65504.0 for s in report.fused), report.text()
    assert report.causal_taken == 2 * taken, report.text()
    nodes = [n for n in onnx.load(str(dst)).graph.node if n.op_type == "FusedAttention"]
    assert len(nodes) == 2 and count_ops(dst, "Softmax") == 0
    assert all(helper.get_node_attr_value(n, "causal") == int(taken) for n in nodes)
    assert all(any(a.name == "causal_fill" and a.i == 1 for a in n.attribute) == taken for n in nodes)
    assert report.causal_exact == 2 * taken, report.text()
    rng = np.random.default_rng(1)
    feeds = {"input_ids": rng.integers(3, 128, (2, 12)).astype(np.int64), "attention_mask": np.ones((2, 12), np.int64)}
    pad = {"none": np.s_[0, :0], "right": np.s_[0, -5:], "left": np.s_[0, :5], "all": np.s_[1, :]}[padding]
    feeds["attention_mask"][pad] = 0
    (o1,) = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    attending = np.maximum.accumulate(feeds["attention_mask"], axis=1) > 0  # causal: a kept key at or before it
    _assert_computes_original(o1, DATA / f"{name}.onnx", feeds, device, attending)


@pytest.mark.parametrize("padding", ["none", "left", "all"])
def test_rewrite_attention_tiny_generation_step(sess_opts, device, padding, tmp_path):
    """A decoder's generation step (Llama: one new token a sequence after a cache of 15, models' llama-3.2-1b-step):
    both sites become FusedAttention reading the padding row [2, 1, 1, 16] alone (the causal rule leaves the new token
    every cached key, so none is said to be inside it), and the rewritten model computes what the original does with
    no padding, a left-padded cache, and a sequence padded out (its row every key at the lowest: exactly)."""
    name = "llama-3.2-1b-step-tiny.f16"
    dst = tmp_path / f"{name}.attention.onnx"
    report = rewrite_file(DATA / f"{name}.onnx", dst, attention=True)
    assert report.attention == 2 and not report.attention_left, report.text()
    assert [s.details["bias_shape"] for s in report.fused] == [[2, 1, 1, 16]] * 2, report.text()
    assert not any("causal_in_bias" in s.details for s in report.fused), report.text()
    original = ort.InferenceSession(str(DATA / f"{name}.onnx"), providers=providers(device))
    feeds = _model_feeds(original)
    feeds["attention_mask"][:] = 1
    feeds["attention_mask"][{"none": np.s_[0, :0], "left": np.s_[0, :6], "all": np.s_[1, :]}[padding]] = 0
    (o1,) = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    assert o1.shape == (2, 1, 64)
    _assert_computes_original(o1, DATA / f"{name}.onnx", feeds, device, feeds["attention_mask"].any(axis=1)[:, None])


@pytest.mark.parametrize("name", ["mpnet-base-tiny-dyn.f16", "mpnet-base-tiny-dyn-dynamo.f16"])
@pytest.mark.parametrize("padding", ["right", "all"])
def test_rewrite_attention_relative_position_bias(sess_opts, device, name, padding, tmp_path):
    """MPNet adds a relative position bias (gathered from its table) and the padding mask to the scores: both sites
    become FusedAttention with the padding mask as bias and the position bias as additive mask, and the rewritten
    model computes what the original does, a sequence padded out included (its rows the softmax over every key,
    exactly: `_assert_computes_original`)."""
    dst = tmp_path / f"{name}.attention.onnx"
    report = rewrite_file(DATA / f"{name}.onnx", dst, attention=True)
    assert report.attention == 2 and report.qkv_packed == 2 and not report.attention_left, report.text()
    assert all(s.details["bias_terms"] == "bias and additive mask" for s in report.fused), report.text()
    nodes = [n for n in onnx.load(str(dst)).graph.node if n.op_type == "FusedAttention"]
    assert len(nodes) == 2 and all(len(n.input) == 5 and n.input[3] and n.input[4] for n in nodes)
    original = ort.InferenceSession(str(DATA / f"{name}.onnx"), providers=providers(device))
    feeds = _model_feeds(original, padded_out=padding == "all")
    (o1,) = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    attending = np.repeat(feeds["attention_mask"].any(axis=1, keepdims=True), feeds["attention_mask"].shape[1], 1)
    _assert_computes_original(o1, DATA / f"{name}.onnx", feeds, device, attending)


@pytest.mark.parametrize("name", ["deberta-v3-base-tiny-dyn.f16", "deberta-v3-base-tiny-dyn-dynamo.f16"])
@pytest.mark.parametrize("padding", ["right", "all"])
@pytest.mark.parametrize("attention", [False, True], ids=["p", "attention"])
def test_rewrite_batched_heads_and_masked_fill(sess_opts, device, name, padding, attention, tmp_path):
    """DeBERTa computes its scores on [batch * heads, ...] views, adds its disentangled position terms and masks them
    with Where(~mask, lowest, scores) after a Reshape to [batch, heads, ...]: both sites are lifted to 4-D and fused
    (FusedGemmSoftmax, or with attention FusedAttention, P V lifted too) with the position terms as the bias, the
    key's scale and transpose folded, and the mask as a bool mask with mask_fill=1; the rewritten model computes what
    the original does at every token, the padding's (its rows uniform over every key in both) included."""
    src, dst = DATA / f"{name}.onnx", tmp_path / f"{name}.rewritten.onnx"
    report = rewrite_file(src, dst, attention=attention)
    assert report.heads_lifted == 2 and len(report.fused) == 2 and not report.left_alone, report.text()
    assert all(s.details["mask_fill"] == 1 and s.details["transB"] == 1 and "kscale" in s.details
               for s in report.fused), report.text()
    op = "FusedAttention" if attention else "FusedGemmSoftmax"
    nodes = [n for n in onnx.load(str(dst)).graph.node if n.op_type == op]
    assert len(nodes) == 2 and all(len(n.input) == 4 + attention and n.input[-2] and n.input[-1] and
                                   helper.get_node_attr_value(n, "mask_fill") == 1 for n in nodes)
    assert count_ops(dst, "Softmax") == 0 and count_ops(dst, "Where") == count_ops(src, "Where") - 2
    if attention:  # V and O in place (Q and K feed the position terms too, so their Transposes stay)
        assert report.attention == 2 and report.heads_transposes == 4 and not report.attention_left, report.text()
        from flashgemm.bundle import any_length  # noqa: PLC0415
        assert set(model_attention_variants(dst)) <= set(any_length.ATTENTION_COMMON_VARIANTS)  # the default build's
    original = ort.InferenceSession(str(src), providers=providers(device))
    feeds = _model_feeds(original, padded_out=padding == "all")
    (o0,) = run(original, feeds)
    (o1,) = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    np.testing.assert_allclose(o1.astype(np.float32), o0.astype(np.float32), rtol=0, atol=MODEL_ATOL)


def test_masked_fill_zeroed_after_the_softmax_is_a_plain_bool_mask(sess_opts, device, tmp_path):
    """Older transformers' DeBERTa (XSoftmax's export): Where(~m, lowest, S) -> Softmax -> Where(~m, 0, P) -> P V.
    The two Wheres are the op's plain bool mask (a masked entry 0, a row masked everywhere zeros): FusedAttention
    without mask_fill, and the rewritten graph computes what the original does, that row included."""
    t = TensorProto.FLOAT16
    nodes = [helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["Q", "Kt"], ["S"]), helper.make_node("Mul", ["S", "c"], ["Ss"]),
             helper.make_node("Add", ["Ss", "bias"], ["Sb"]), helper.make_node("Not", ["m"], ["r"]),
             helper.make_node("Where", ["r", "lowest", "Sb"], ["Sw"]), helper.make_node("Softmax", ["Sw"], ["P"]),
             helper.make_node("Where", ["r", "zero", "P"], ["Pz"]), helper.make_node("MatMul", ["Pz", "V"], ["O"])]
    inits = [helper.make_tensor(n, t, [], np.array(x, np.float16).reshape(1).view(np.uint16).tobytes(), raw=True)
             for n, x in (("c", 0.25), ("lowest", -65504.0), ("zero", 0.0))]
    inputs = [helper.make_tensor_value_info(n, t, s) for n, s in (("Q", [2, 3, 5, 32]), ("K", [2, 3, 7, 32]),
                                                                 ("V", [2, 3, 7, 32]), ("bias", [2, 1, 1, 7]))]
    inputs.append(helper.make_tensor_value_info("m", TensorProto.BOOL, [2, 1, 5, 7]))
    graph = helper.make_graph(nodes, "xsoftmax", inputs, [helper.make_tensor_value_info("O", t, None)],
                              initializer=inits)
    src, dst = tmp_path / "x.onnx", tmp_path / "x.attention.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(src))
    report = rewrite_file(src, dst, attention=True)
    assert report.attention == 1 and report.fused[0].details["mask_fill"] == 0, report.text()
    (node,) = [n for n in onnx.load(str(dst)).graph.node if n.op_type == "FusedAttention"]
    assert not any(a.name == "mask_fill" for a in node.attribute) and count_ops(dst, "Where") == 0
    rng = np.random.default_rng(8)
    feeds = {n: rng.standard_normal(s).astype(np.float16) for n, s in (("Q", (2, 3, 5, 32)), ("K", (2, 3, 7, 32)),
                                                                       ("V", (2, 3, 7, 32)), ("bias", (2, 1, 1, 7)))}
    feeds["m"] = rng.random((2, 1, 5, 7)) < 0.7
    feeds["m"][1, 0, 2] = False  # a row masked everywhere: zeros in both
    (o0,) = run(ort.InferenceSession(str(src), providers=providers(device)), feeds)
    (o1,) = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    assert not np.any(o1[1, :, 2].astype(np.float32))
    np.testing.assert_allclose(o1.astype(np.float32), o0.astype(np.float32), rtol=0, atol=ATOL["float16"])


@pytest.mark.parametrize("name", ["bert-large-tiny.f16", "whisper-enc-tiny.f16"])
def test_packed_projection_bias_stays_an_add(bundle, device, name, tmp_path):
    """ONNX Runtime's MatMulAddFusion leaves the packed projection a MatMul and an Add (its Gemm would write the bias
    into every row of the output by a kernel of its own first): the session's optimized graph has no Gemm made of it,
    and its Add reads the MatMul's output."""
    dst = tmp_path / f"{name}.attention.onnx"
    rewrite_file(DATA / f"{name}.onnx", dst, attention=True)
    opts = session_options(bundle)
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(dst), opts, providers=providers(device))
    nodes = onnx.load(opts.optimized_model_filepath).graph.node
    packed = [n for n in nodes if "_qkv_" in n.name]
    assert not [n.name for n in packed if n.op_type == "Gemm"]
    matmuls = {n.output[0] for n in packed if n.op_type == "MatMul"}
    adds = [n for n in packed if n.op_type == "Add" and set(n.input) & matmuls]
    assert len(matmuls) == len(adds) == 2, [(n.op_type, n.name) for n in packed]


def test_model_attention_variants_of_a_model_rewritten_or_not(tmp_path):
    """What flashgemm-build --attention --from-model builds tensor-core kernels for: the variant of each kind of
    FusedAttention node, the same whether the model is rewritten already or not (then rewritten in memory)."""
    for name, variants in (("vit-b16-tiny.f16", [Variant("float16", True, False, "none", False)]),
                           ("bert-large-tiny-dyn-dynamo-sdpa.f16", None)):
        src, dst = DATA / f"{name}.onnx", tmp_path / f"{name}.attention.onnx"
        rewrite_file(src, dst, attention=True)
        found = model_attention_variants(src)
        assert found == model_attention_variants(dst) and len(found) == 1
        assert variants is None or found == variants, found
    assert model_attention_variants(DATA / "bert-large-tiny.f16.onnx")[0].dtype == "float16"


def test_rewrite_attention_sdpa_export_zeroes_nan_rows(sess_opts, device, tmp_path):
    """The dynamo exporter's SDPA with a mask zeroes P's NaN rows before P.V (Where(IsNaN(P), 0, P)): FusedAttention
    with zero_nan_rows=1 replaces the pair too, and a sequence padded out entirely (its rows fully masked: NaN in ORT's
    Softmax, zeros after the Where) comes out as the export computes it."""
    src, dst = DATA / "bert-large-tiny-dyn-dynamo-sdpa.f16.onnx", tmp_path / "m.onnx"
    report = rewrite_file(src, dst, attention=True)
    assert report.attention == 2 and not report.attention_left, report.text()
    assert count_ops(dst, "IsNaN") == 0 and count_ops(dst, "FusedAttention", "flashgemm") == 2
    assert all(a.name != "zero_nan_rows" or a.i == 1 for n in onnx.load(str(dst)).graph.node
               if n.op_type == "FusedAttention" for a in n.attribute)
    assert sum(a.name == "zero_nan_rows" for n in onnx.load(str(dst)).graph.node for a in n.attribute) == 2
    original = ort.InferenceSession(str(src), providers=providers(device))
    feeds = _model_feeds(original, padded_out=True)
    o0 = run(original, feeds)
    o1 = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    for a, b in zip(o0, o1):
        assert not np.isnan(a.astype(np.float32)).any()
        np.testing.assert_allclose(b.astype(np.float32), a.astype(np.float32), rtol=0, atol=MODEL_ATOL)


def _attention_graph(v_shape, p_output=False, k=32, nan_rows_zeroed=False, zero=0.0):
    """Q [2, 3, 5, k], K [2, 3, 7, k] -> Softmax(MatMul(Q, K^T) * 0.25) -> MatMul(P, V) -> O (P also an output;
    nan_rows_zeroed: P's NaN rows replaced by `zero` before the MatMul, as PyTorch's SDPA exports do with 0)."""
    t = TensorProto.FLOAT16
    zeroed = [helper.make_node("IsNaN", ["P"], ["Pnan"]),
              helper.make_node("Where", ["Pnan", "zero", "P"], ["Pz"])] if nan_rows_zeroed else []
    nodes = [helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["Q", "Kt"], ["S"]),
             helper.make_node("Mul", ["S", "c"], ["Ss"]),
             helper.make_node("Softmax", ["Ss"], ["P"], axis=-1),
             *zeroed,
             helper.make_node("MatMul", ["Pz" if nan_rows_zeroed else "P", "V"], ["O"])]
    inputs = [helper.make_tensor_value_info(n, t, s) for n, s in (("Q", [2, 3, 5, k]), ("K", [2, 3, 7, k]),
                                                                  ("V", list(v_shape)))]
    outputs = [helper.make_tensor_value_info("O", t, None)] + ([helper.make_tensor_value_info("P", t, None)]
                                                               if p_output else [])
    init = [helper.make_tensor(name, t, [], np.array([x], np.float16).view(np.uint16).tobytes(), raw=True)
            for name, x in (("c", 0.25), ("zero", zero))]
    graph = helper.make_graph(nodes, "attn", inputs, outputs, initializer=init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("v_shape, p_output, k, zero, needle", [
    ((2, 3, 7, 32), True, 32, None, "P is a graph output"),
    ((4, 2, 3, 7, 32), False, 32, None, "do not provably broadcast"),
    ((2, 3, "n", 32), False, 32, None, "not provably P's columns"),
    ((2, 3, 7, 16), False, 32, None,
     "head sizes K = 32, D = 16: FusedAttention's tensor-core kernels need both one of"),
    ((2, 3, 7, 48), False, 48, None, "head sizes K = 48, D = 48"),
    ((2, 3, 7, 32), False, 32, 1.0, "P's NaN rows are replaced by 1 before MatMul(P, V), not by 0"),
])
def test_rewrite_attention_keeps_p_where_it_must(tmp_path, v_shape, p_output, k, zero, needle):
    """P kept (FusedGemmSoftmax, then MatMul) where fusing the MatMul would not be provably the same function, or
    where no tensor-core kernel would serve it (the generic FusedAttention kernel is slower than the two ops)."""
    src, dst = tmp_path / "m.onnx", tmp_path / "m.out.onnx"
    onnx.save(_attention_graph(v_shape, p_output, k, zero is not None, zero or 0.0), str(src))
    report = rewrite_file(src, dst, attention=True)
    assert len(report.fused) == 1 and report.attention == 0, report.text()
    assert needle in report.attention_left[0][1], report.text()
    assert count_ops(dst, "FusedGemmSoftmax", "flashgemm") == 1 and count_ops(dst, "FusedAttention", "flashgemm") == 0


def test_rewrite_attention_absorbs_heads_transposes(sess_opts, device, tmp_path):
    """The exporters' Transposes between [batch, sequence, heads, head size] and [batch, heads, sequence, head size]
    around attention go into FusedAttention's bsnh, K's through a Shape read beside it (rerouted to K's input, as
    the dynamo exporter's graphs have it); Q's stays, being a graph output too. Outputs match the original graph."""
    t = TensorProto.FLOAT16
    nodes = [helper.make_node("Transpose", ["Xq"], ["Q"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["Xk"], ["Kh"], perm=[0, 2, 1, 3]),
             helper.make_node("Shape", ["Kh"], ["Kshape"], start=-2),
             helper.make_node("Shape", ["Kh"], ["Kshape2"], end=2),  # unnamed, like the one above
             helper.make_node("Transpose", ["Kh"], ["Kt"], perm=[0, 1, 3, 2]),
             helper.make_node("Transpose", ["Xv"], ["V"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["Q", "Kt"], ["S"]),
             helper.make_node("Mul", ["S", "c"], ["Ss"]),
             helper.make_node("Softmax", ["Ss"], ["P"], axis=-1),
             helper.make_node("MatMul", ["P", "V"], ["O"]),
             helper.make_node("Transpose", ["O"], ["Out"], perm=[0, 2, 1, 3])]
    inputs = [helper.make_tensor_value_info(n, t, s) for n, s in (("Xq", [2, 5, 3, 64]), ("Xk", [2, 7, 3, 64]),
                                                                  ("Xv", [2, 7, 3, 64]))]
    outputs = [helper.make_tensor_value_info("Out", t, None), helper.make_tensor_value_info("Q", t, None),
               helper.make_tensor_value_info("Kshape", TensorProto.INT64, None),
               helper.make_tensor_value_info("Kshape2", TensorProto.INT64, None)]
    init = [helper.make_tensor("c", t, [], np.array([0.125], np.float16).view(np.uint16).tobytes(), raw=True)]
    src, dst = tmp_path / "m.onnx", tmp_path / "m.out.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "heads", inputs, outputs, initializer=init),
                                opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(src))
    report = rewrite_file(src, dst, attention=True)
    assert report.attention == 1 and report.heads_transposes == 3, report.text()
    (attn,) = [n for n in onnx.load(str(dst)).graph.node if n.op_type == "FusedAttention"]
    assert [list(a.ints) for a in attn.attribute if a.name == "bsnh"] == [[0, 1, 1, 1]]
    assert count_ops(dst, "Transpose") == 1
    rng = np.random.default_rng(6)
    feeds = {n: rng.standard_normal((2, s, 3, 64)).astype(np.float16) for n, s in (("Xq", 5), ("Xk", 7), ("Xv", 7))}
    o0 = run(ort.InferenceSession(str(src), providers=providers(device)), feeds)
    o1 = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    np.testing.assert_array_equal(o1[2], o0[2])  # K's shape [7, 64], read from Xk now
    np.testing.assert_array_equal(o1[3], o0[3])  # [2, 3]
    np.testing.assert_array_equal(o1[1], o0[1])
    np.testing.assert_allclose(o1[0].astype(np.float64), o0[0].astype(np.float64), rtol=0, atol=ATOL["float16"])


@pytest.mark.parametrize("zeroed", [False, True], ids=["plain", "nan-rows-zeroed"])
def test_rewrite_attention_matches_the_unfused_graph(sess_opts, device, tmp_path, zeroed):
    """V shared across the batch ([3, 7, 32]): fused, and O matches the unfused graph's; with P's NaN rows zeroed
    (the SDPA export's Where), a NaN in Q and an inf in K make zero rows there, as in the unfused graph."""
    src, dst = tmp_path / "m.onnx", tmp_path / "m.out.onnx"
    onnx.save(_attention_graph((3, 7, 32), nan_rows_zeroed=zeroed), str(src))
    report = rewrite_file(src, dst, attention=True)
    assert report.attention == 1 and count_ops(dst, "Where") == 0, report.text()
    rng = np.random.default_rng(5)
    feeds = {"Q": rng.standard_normal((2, 3, 5, 32)).astype(np.float16),
             "K": rng.standard_normal((2, 3, 7, 32)).astype(np.float16),
             "V": rng.standard_normal((3, 7, 32)).astype(np.float16)}
    if zeroed:
        feeds["Q"][0, 1, 2, 4] = np.nan  # a NaN row
        feeds["K"][1, 2, 3, :] = np.inf  # every row of batch 1, head 2 reads an inf logit
    (o0,) = run(ort.InferenceSession(str(src), providers=providers(device)), feeds)
    (o1,) = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    np.testing.assert_allclose(o1.astype(np.float64), o0.astype(np.float64), rtol=0, atol=ATOL["float16"])


def _projections_graph(kv_source: str) -> onnx.ModelProto:
    """Attention over heads of X [2, 7, 64] (2 heads of 32) as the TorchScript exporter writes it: Q, K, V =
    Reshape(Add(b, MatMul(src, W)), [2, -1, 2, 32]) -> Transpose, K with no bias; K and V from `kv_source` (X, or Y
    [2, 7, 64]: cross-attention)."""
    t = TensorProto.FLOAT16
    rng = np.random.default_rng(7)
    init = [helper.make_tensor("c", t, [], np.array([0.125], np.float16).view(np.uint16).tobytes(), raw=True),
            helper.make_tensor("shape", TensorProto.INT64, [4], [2, -1, 2, 32])]
    nodes = []
    for p in "qkv":
        w = (rng.standard_normal((64, 64)) * 0.1).astype(np.float16)
        init.append(helper.make_tensor(f"W{p}", t, [64, 64], w.view(np.uint16).tobytes(), raw=True))
        src = "X" if p == "q" else kv_source
        nodes.append(helper.make_node("MatMul", [src, f"W{p}"], [f"{p}mm"]))
        y = f"{p}mm"
        if p != "k":
            b = rng.standard_normal(64).astype(np.float16)
            init.append(helper.make_tensor(f"b{p}", t, [64], b.view(np.uint16).tobytes(), raw=True))
            nodes.append(helper.make_node("Identity", [f"b{p}"], [f"b{p}_id"]))
            nodes.append(helper.make_node("Add", [f"b{p}_id", f"{p}mm"], [f"{p}y"]))
            y = f"{p}y"
        nodes += [helper.make_node("Reshape", [y, "shape"], [f"{p}r"]),
                  helper.make_node("Transpose", [f"{p}r"], [f"{p}h"], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [helper.make_node("MatMul", ["qh", "kh"], ["S"]), helper.make_node("Mul", ["S", "c"], ["Ss"]),
              helper.make_node("Softmax", ["Ss"], ["P"], axis=-1), helper.make_node("MatMul", ["P", "vh"], ["O"]),
              helper.make_node("Transpose", ["O"], ["Out"], perm=[0, 2, 1, 3])]
    inputs = [helper.make_tensor_value_info(n, t, [2, 7, 64]) for n in ("X", "Y")]
    return helper.make_model(helper.make_graph(nodes, "proj", inputs, [helper.make_tensor_value_info("Out", t, None)],
                                               initializer=init),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("kv_source", ["X", "Y"], ids=["self", "cross"])
def test_rewrite_packs_self_attention_projections(sess_opts, device, tmp_path, kv_source):
    """Self-attention's three projections of one X become one MatMul with the weights side by side (K's missing
    bias zeros), read by the op as packed_qkv; cross-attention's (K and V of another tensor) stay three. Outputs
    match the original graph either way."""
    src, dst = tmp_path / "m.onnx", tmp_path / "m.out.onnx"
    onnx.save(_projections_graph(kv_source), str(src))
    report = rewrite_file(src, dst, attention=True)
    packed = kv_source == "X"
    assert report.attention == 1 and report.heads_transposes == 4, report.text()
    assert report.qkv_packed == int(packed), report.text()
    assert count_ops(dst, "MatMul") == (1 if packed else 3) and count_ops(dst, "Add") == (1 if packed else 2)
    rng = np.random.default_rng(8)
    feeds = {n: rng.standard_normal((2, 7, 64)).astype(np.float16) for n in ("X", "Y")}
    (o0,) = run(ort.InferenceSession(str(src), providers=providers(device)), feeds)
    (o1,) = run(ort.InferenceSession(str(dst), sess_opts, providers=providers(device)), feeds)
    np.testing.assert_allclose(o1.astype(np.float64), o0.astype(np.float64), rtol=0, atol=ATOL["float16"])
