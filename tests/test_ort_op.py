"""flashgemm::FusedGemmSoftmax through ONNX Runtime, on the CPU EP and (marked gpu) the CUDA EP, against the FP64
reference and ORT's own ops.

Every test taking `so` runs once per device: a session-scoped fixture exports the kernel bundle (llvm: the 80
generic kernels, ~30 s; CUDA: the local GPU's arch with the committed databases' kernels and, on sm_90, the
tensor-core kernels of test_cuda_tensor_core_kernel's variants, a few minutes, or a prebuilt one from
$FLASHGEMM_TEST_CUDA_BUNDLE, made as the fixture makes it: python -m tests.test_ort_op DIR [TARGET]) into a temp dir
and builds libflashgemm_ort.so into it (~15 s cold, ~1 s incremental). The CUDA run needs
onnxruntime-gpu; with plain onnxruntime on a GPU machine it fails (it is not skipped).

Tolerances (max abs error of P, whose entries lie in [0, 1]):
  float16   atol 2e-3   (P is rounded to fp16: ~5e-4 relative, plus fp16 inputs feeding an fp32 softmax)
  bfloat16  atol 1.6e-2 (bf16 output rounding is 2^-8 relative, ~4e-3 at P ~ 1, with margin)
The reference is computed from the very same (rounded) fp16/bf16 inputs, upcast to float64.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import random
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from flashgemm.ort import native
from flashgemm.bundle.elf_check import elf_problem
from flashgemm.bundle.kernel_library import MANIFEST_FORMAT, export_bundle, kernel_libraries
from flashgemm.ort.model import make_model
from flashgemm import get_library_path
from flashgemm.ort.session import BUNDLE_DIR_CONFIG_KEY, LIBRARY, LibraryError, providers, run, session_options
from flashgemm.op.variant import MASK_FILL, ShapeError, canonicalize
from flashgemm.op.reference import fused_gemm_softmax_ref

DTYPES = ["float16", "bfloat16"]
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2}
CPU = ["CPUExecutionProvider"]


@dataclasses.dataclass
class Opts:
    """Session options with the op library registered, and the providers its bundle's device needs."""
    so: ort.SessionOptions
    providers: list


def opts(bundle_dir, device) -> Opts:
    return Opts(session_options(bundle_dir), providers(device))


@pytest.fixture(scope="session", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    return request.param


def _local_cuda_target() -> str:
    from flashgemm import targets  # noqa: PLC0415
    return targets.resolve("auto")


@pytest.fixture(scope="session")
def bundle(made_once, device):
    os.environ.pop("FLASHGEMM_BUNDLE_DIR", None)  # session_options names the bundle (config entry)
    if device == "cpu":
        return made_once("bundle-cpu", lambda d: export_bundle(d, "llvm", log=lambda *a: None))
    providers("cuda")  # onnxruntime-gpu or a clear error
    prebuilt = os.environ.get("FLASHGEMM_TEST_CUDA_BUNDLE")
    target = _local_cuda_target()

    def make(d):
        if prebuilt:
            manifest = json.loads((Path(prebuilt) / "manifest.json").read_text())
            assert manifest["target"] == target, (prebuilt, manifest["target"])
            for path in [Path(prebuilt) / "manifest.json", *kernel_libraries(prebuilt)]:
                shutil.copy(path, d)
        else:  # as flashgemm-build makes it: the committed databases' kernels for this arch + the generic ones
            from flashgemm.bundle import best  # noqa: PLC0415
            export_bundle(d, target, best.load_all(target, log=lambda *a: None), log=lambda *a: None,
                          tensor_core=_tensor_core_pairs())
    return made_once(f"bundle-{target}", make)


@pytest.fixture(scope="session")
def dev_library(tmp_path_factory, device) -> Path:
    """A development build of the op library (flashgemm.ort.native): its RUNPATH is absolute, so a copy of it loads
    from any directory (the installed one finds TVM relative to itself)."""
    if not (native.SOURCE_DIR / "CMakeLists.txt").is_file():
        pytest.skip("flashgemm is imported from an installed package: a development build needs the source tree")
    d = tmp_path_factory.mktemp(f"dev-library-{device}")
    return native.build_custom_op_library(d, with_cuda=device == "cuda", log=lambda *a: None)


@pytest.fixture(scope="session")
def so(bundle, device):
    return opts(bundle, device)


def session(so: Opts, model):
    return ort.InferenceSession(model.SerializeToString(), so.so, providers=so.providers)


def rand(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(NP[dtype])


def check(so, dtype, a_shape, b_shape, bias_shape=None, mask=None, scale=None, trans_b=0, causal=0, seed=0,
          poke=None, mask_fill=0):
    """Run the op on random inputs and compare with the reference. mask: None or a numpy array (bool or float);
    mask_fill: the op's attribute (a bool mask's false entries the dtype's lowest logit).
    poke: called with the feeds before the run (and the reference), to write special values into them. NaNs must
    come out exactly where the reference has them (assert_allclose's equal_nan)."""
    rng = np.random.default_rng(seed)
    k = a_shape[-1]
    scale = 1.0 / np.sqrt(max(k, 1)) if scale is None else scale
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    feeds = {"A": a, "B": b}
    bias = None
    if bias_shape is not None:
        bias = feeds["bias"] = rand(rng, bias_shape, dtype)
    mask_dtype = None
    if mask is not None:
        mask_dtype = "bool" if mask.dtype == np.bool_ else dtype
        with np.errstate(over="ignore"):  # -1e9 -> -inf in float16, on purpose
            mask = feeds["mask"] = mask if mask.dtype == np.bool_ else mask.astype(NP[dtype])
    model = make_model(dtype, a.shape, b.shape, bias_shape, None if mask is None else mask.shape, mask_dtype,
                       scale=scale, trans_b=trans_b, causal=causal, mask_fill=mask_fill)
    if poke is not None:
        poke(feeds)
    (p,) = run(session(so, model), feeds)
    ref = fused_gemm_softmax_ref(a, b, bias, mask, scale=scale, trans_b=trans_b, causal=causal,
                                 mask_fill=MASK_FILL[dtype] if mask_fill else None)
    assert p.dtype == NP[dtype] and p.shape == ref.shape
    np.testing.assert_allclose(p.astype(np.float64), ref, rtol=0, atol=ATOL[dtype])
    return p, ref


# ---------------------------------------------------------------------------------------------- numerics

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias_shape", [None, [19], [17, 19], [2, 3, 17, 19], [3, 1, 19]],
                         ids=["nobias", "bias_n", "bias_mn", "bias_full", "bias_h1n"])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_bias(so, dtype, bias_shape, trans_b):
    b_shape = [2, 3, 19, 33] if trans_b else [2, 3, 33, 19]
    check(so, dtype, [2, 3, 17, 33], b_shape, bias_shape, trans_b=trans_b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_additive_mask_padding(so, dtype):
    """[B, 1, 1, N] padding mask with -1e9 (-inf in fp16), mild negative values, and one batch fully masked."""
    rng = np.random.default_rng(1)
    mask = np.where(rng.random((3, 1, 1, 21)) < 0.3, -1e9, -0.5 * rng.random((3, 1, 1, 21)))
    mask[2] = -1e9  # batch 2: every row fully masked -> zeros
    p, _ = check(so, dtype, [3, 4, 9, 16], [3, 4, 16, 21], [21], mask=mask)
    assert not np.any(p[2].astype(np.float32)), "fully masked rows must be exactly 0"


@pytest.mark.parametrize("dtype", DTYPES)
def test_additive_mask_full_with_masked_rows(so, dtype):
    rng = np.random.default_rng(2)
    mask = rng.standard_normal((2, 3, 5, 7))
    mask[0, 1, 2] = -np.inf
    mask[1, 2, 4] = -65504.0  # at the threshold: masked
    p, _ = check(so, dtype, [2, 3, 5, 8], [2, 3, 8, 7], mask=mask)
    assert not np.any(p[0, 1, 2].astype(np.float32)) and not np.any(p[1, 2, 4].astype(np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [[2, 1, 1, 12], [2, 1, 6, 12], [6, 12], [2, 3, 6, 12]])
def test_bool_mask(so, dtype, mask_shape):
    mask = np.random.default_rng(3).random(mask_shape) < 0.7
    mask.reshape(-1, mask.shape[-1])[0] = False  # one fully masked row (all rows of batch 0 for [2, 1, 1, N])
    check(so, dtype, [2, 3, 6, 10], [10, 12], [12], mask=mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [[2, 1, 6, 12], [2, 3, 6, 12]])
def test_bool_mask_fill(so, dtype, mask_shape):
    """mask_fill=1 (Where(mask, logits, lowest), torch's masked_fill with finfo.min): a false entry's logit is the
    dtype's lowest, so a row false everywhere is uniform (1 / N) where a plain bool mask makes it zeros; a NaN behind
    a false entry is never read; other rows as with a plain bool mask."""
    mask = np.random.default_rng(3).random(mask_shape) < 0.7
    mask[1, 0, 2] = False  # a row false everywhere (every head's, for [2, 1, M, N])

    def poke(feeds):
        feeds["A"][1, 0, 2, 0] = np.nan  # row 2 of batch 1, head 0: NaN logits, all replaced
    p, _ = check(so, dtype, [2, 3, 6, 10], [10, 12], [12], mask=mask, mask_fill=1, poke=poke)
    np.testing.assert_allclose(p[1, 0, 2].astype(np.float64), 1 / 12, rtol=0, atol=ATOL[dtype])
    plain, _ = check(so, dtype, [2, 3, 6, 10], [10, 12], [12], mask=mask)
    assert not np.any(plain[1, 0, 2].astype(np.float32))


def test_causal_fill_needs_causal_and_a_bias(so):
    """causal_fill=1 without causal=1: the session fails to load, naming the fix; without a bias: an error at Run."""
    with pytest.raises(Exception, match=r"causal_fill .* needs causal=1 \(set causal, or drop causal_fill\)"):
        session(so, make_model("float16", [2, 4, 8], [2, 8, 5], causal_fill=1))
    model = make_model("float16", [2, 4, 8], [2, 8, 5], causal=1, causal_fill=1)
    with pytest.raises(Exception, match=r"causal_fill .* but bias is absent \(give the bias, or drop causal_fill\)"):
        run(session(so, model), {"A": np.zeros((2, 4, 8), np.float16), "B": np.zeros((2, 8, 5), np.float16)})


def test_mask_fill_needs_a_bool_mask(so):
    """mask_fill=1 on an additive mask, or none: an error naming the attribute and the fix."""
    model = make_model("float16", [2, 4, 8], [2, 8, 5], mask_shape=[5], scale=1.0, mask_fill=1)
    feeds = {"A": np.zeros((2, 4, 8), np.float16), "B": np.zeros((2, 8, 5), np.float16),
             "mask": np.zeros(5, np.float16)}
    with pytest.raises(Exception, match=r"mask_fill=1 .* mask is float16 \(give a bool mask, or drop the attribute\)"):
        run(session(so, model), feeds)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(8, 8), (5, 11), (11, 5), (1, 7)])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_causal(so, dtype, m, n, trans_b):
    """Bottom-right aligned; with M > N the first M - N rows are fully masked (zeros)."""
    b_shape = [2, n, 16] if trans_b else [2, 16, n]
    p, _ = check(so, dtype, [2, m, 16], b_shape, trans_b=trans_b, causal=1)
    if m > n:
        assert not np.any(p[:, : m - n].astype(np.float32))


# Special values (README, "Special values"): each case writes NaN or +-inf into the inputs of a run of
# A [2, 3, 6, 16] @ B [2, 3, 16, 10] (+ bias [6, 10]) (+ mask [2, 1, 1, 10]) and says how many rows the contract makes
# NaN: a NaN or +inf among a row's unmasked logits makes the whole row NaN; a masked logit is never read.
def _at(name, index, value):
    def poke(feeds):
        feeds[name][index] = value
    return poke


def _both(*pokes):
    def poke(feeds):
        for p in pokes:
            p(feeds)
    return poke


NAN, INF = float("nan"), float("inf")
SPECIAL_CASES = {  # name: (bias?, mask kind, causal, poke, NaN rows of the 36)
    "nan_in_a": (False, None, 0, _at("A", (0, 1, 2, 0), NAN), 1),
    "inf_in_a": (False, None, 0, _at("A", (1, 2, 4, 3), INF), 1),
    "nan_in_b_column": (False, None, 0, _at("B", (1, 2, 0, 7), NAN), 6),  # every row of that head
    "inf_in_bias": (True, None, 0, _at("bias", (3, 4), INF), 6),  # row 3 of every head: the bias broadcasts
    "nan_in_bias": (True, None, 0, _at("bias", (5, 0), NAN), 6),
    "neg_inf_in_bias": (True, None, 0, _at("bias", (3, 4), -INF), 0),  # masks that element only
    "nan_in_additive_mask": (True, "add", 0, _at("mask", (0, 0, 0, 3), NAN), 18),  # every row of batch 0
    "nan_where_bool_masked": (True, "bool", 0, _both(_at("mask", (0, 0, 0, 3), False), _at("bias", (2, 3), NAN)), 3),
    "nan_where_additive_masked": (True, "add", 0, _both(_at("mask", (0, 0, 0, 3), -INF), _at("bias", (2, 3), NAN)),
                                  3),
    "nan_in_a_fully_masked_row": (False, "bool", 0, _both(_at("mask", (1, 0, 0, slice(None)), False),
                                                          _at("A", (1, 0, 2, 5), NAN)), 0),
    "nan_in_b_where_causal_masks": (False, None, 1, _at("B", (0, 0, 0, 9), NAN), 1),  # only the last row sees it
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(SPECIAL_CASES))
def test_special_values(so, dtype, case):
    has_bias, mask_kind, causal, poke, nan_rows = SPECIAL_CASES[case]
    mask = None
    if mask_kind == "bool":
        mask = np.ones((2, 1, 1, 10), bool)
    elif mask_kind == "add":
        mask = np.zeros((2, 1, 1, 10), np.float32)
        mask[1, 0, 0, 6] = -1e9  # masks an element of batch 1's rows
    p, ref = check(so, dtype, [2, 3, 6, 16], [2, 3, 16, 10], [6, 10] if has_bias else None, mask=mask, causal=causal,
                   poke=poke)
    rows = p.astype(np.float32).reshape(-1, 10)
    assert int(np.isnan(ref).any(axis=-1).sum()) == nan_rows  # the case is what it says
    assert int(np.isnan(rows).all(axis=-1).sum()) == nan_rows and not np.isinf(rows).any()
    if case == "nan_in_a_fully_masked_row":
        assert not np.any(p[1].astype(np.float32)), "a fully masked row stays zeros"


def test_attribute_defaults(so):
    """No attributes at all: scale 1.0, transB 0, causal 0."""
    model = make_model("float16", [3, 5, 8], [8, 7])
    del model.graph.node[0].attribute[:]
    rng = np.random.default_rng(10)
    a, b = rand(rng, [3, 5, 8], "float16"), rand(rng, [8, 7], "float16")
    (p,) = run(session(so, model), {"A": a, "B": b})
    np.testing.assert_allclose(p.astype(np.float64), fused_gemm_softmax_ref(a, b), rtol=0, atol=ATOL["float16"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_everything_at_once(so, dtype):
    mask = np.random.default_rng(4).random((4, 1, 1, 13)) < 0.8
    check(so, dtype, [4, 2, 9, 24], [4, 2, 13, 24], [2, 9, 13], mask=mask, scale=0.3, trans_b=1, causal=1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape,b_shape", [
    ([2, 3, 7, 16], [16, 9]),          # B shared by every batch of A
    ([2, 3, 7, 16], [3, 16, 9]),       # B broadcast over the outer batch dim
    ([7, 16], [2, 3, 16, 9]),          # A shared
    ([2, 1, 7, 16], [1, 3, 16, 9]),    # both broadcast: two independent batch dims
    ([5, 2, 3, 7, 16], [16, 9]),       # rank 5, batch dims merged into one
])
def test_batch_broadcast(so, dtype, a_shape, b_shape):
    check(so, dtype, a_shape, b_shape, [9])


ODD = [(m, n, k) for m in (1, 3, 17, 197) for n in (1, 3, 17, 197) for k in (1, 17)] + [
    (3, 17, 197), (197, 3, 3), (17, 197, 197), (1, 1, 197)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", ODD)
def test_odd_shapes(so, dtype, m, n, k):
    check(so, dtype, [2, m, k], [2, k, n], [n], seed=m * 1000 + n * 10 + k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape,b_shape,out_shape", [
    ([2, 0, 8], [2, 8, 5], (2, 0, 5)), ([2, 4, 8], [2, 8, 0], (2, 4, 0)), ([0, 4, 8], [8, 5], (0, 4, 5))])
def test_empty_output(so, dtype, a_shape, b_shape, out_shape):
    rng = np.random.default_rng(5)
    (p,) = run(session(so, make_model(dtype, a_shape, b_shape)),
               {"A": rand(rng, a_shape, dtype), "B": rand(rng, b_shape, dtype)})
    assert p.shape == out_shape and p.dtype == NP[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_k_zero(so, dtype):
    """A @ B is all zeros: P = softmax(bias)."""
    check(so, dtype, [2, 3, 0], [2, 0, 5], [5], mask=np.array([True, True, False, True, True]))


def _ort_reference_model(a_shape, b_shape, bias_shape, mask_shape, scale, trans_b):
    """ORT's own MatMul (+Mul) (+Add) + Softmax in float32."""
    f = TensorProto.FLOAT
    nodes, inputs = [], [helper.make_tensor_value_info("A", f, a_shape), helper.make_tensor_value_info("B", f, b_shape)]
    b = "B"
    if trans_b:
        perm = list(range(len(b_shape)))
        perm[-2:] = perm[-1], perm[-2]
        nodes.append(helper.make_node("Transpose", ["B"], ["Bt"], perm=perm))
        b = "Bt"
    nodes.append(helper.make_node("MatMul", ["A", b], ["S"]))
    x = "S"
    if scale != 1.0:
        nodes.append(helper.make_node("Mul", [x, "scale"], ["Ss"]))
        x = "Ss"
    for name, shape in (("bias", bias_shape), ("mask", mask_shape)):
        if shape is not None:
            inputs.append(helper.make_tensor_value_info(name, f, shape))
            nodes.append(helper.make_node("Add", [x, name], [x + "_" + name]))
            x = x + "_" + name
    nodes.append(helper.make_node("Softmax", [x], ["P"], axis=-1))
    graph = helper.make_graph(nodes, "ref", inputs, [helper.make_tensor_value_info("P", f, None)],
                              initializer=[helper.make_tensor("scale", f, [], [scale])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_b,with_extras", [(0, False), (1, True), (0, True)])
def test_against_ort_graph(so, dtype, trans_b, with_extras):
    rng = np.random.default_rng(6)
    a_shape, b_shape = [2, 4, 12, 32], ([2, 4, 20, 32] if trans_b else [2, 4, 32, 20])
    bias_shape, mask_shape = ([12, 20], [2, 1, 1, 20]) if with_extras else (None, None)
    scale = 0.25 if with_extras else 1.0
    feeds = {"A": rand(rng, a_shape, dtype), "B": rand(rng, b_shape, dtype)}
    if with_extras:
        feeds["bias"] = rand(rng, bias_shape, dtype)
        feeds["mask"] = (-3.0 * rng.random(mask_shape)).astype(NP[dtype])  # finite: ORT's Softmax has no masking
    ours = session(so, make_model(dtype, a_shape, b_shape, bias_shape, mask_shape, scale=scale, trans_b=trans_b))
    (p,) = run(ours, feeds)
    theirs = ort.InferenceSession(
        _ort_reference_model(a_shape, b_shape, bias_shape, mask_shape, scale, trans_b).SerializeToString(),
        providers=CPU)
    (q,) = theirs.run(None, {k: v.astype(np.float32) for k, v in feeds.items()})
    np.testing.assert_allclose(p.astype(np.float32), q, rtol=0, atol=ATOL[dtype])


def test_concurrent_runs(so):
    """One session, several threads at once: Compute keeps no mutable state."""
    dtype, rng = "float16", np.random.default_rng(7)
    sess = session(so, make_model(dtype, [4, 33, 40], [40, 29], [29]))
    cases = [{"A": rand(rng, [4, 33, 40], dtype), "B": rand(rng, [40, 29], dtype), "bias": rand(rng, [29], dtype)}
             for _ in range(8)]
    refs = [fused_gemm_softmax_ref(c["A"], c["B"], c["bias"]) for c in cases]
    run_concurrently([(sess, c, r, ATOL[dtype]) for c, r in zip(cases, refs)], reps=5)


def run_concurrently(cases, reps: int):
    """One thread per (session, feeds, reference, atol) case, all at once, each running its case `reps` times."""
    errors = []

    def worker(sess, feeds, ref, atol):
        try:
            for _ in range(reps):
                (p,) = run(sess, feeds)
                np.testing.assert_allclose(p.astype(np.float64), ref, rtol=0, atol=atol)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_verbose_dispatch_line(so, device, monkeypatch, capfd):
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")  # read when the kernel is created
    rng = np.random.default_rng(8)
    sess = session(so, make_model("bfloat16", [2, 3, 5, 8], [8, 6], mask_shape=[6], mask_dtype="bool", causal=1))
    feeds = {"A": rand(rng, [2, 3, 5, 8], "bfloat16"), "B": rand(rng, [8, 6], "bfloat16"), "mask": np.ones(6, bool)}
    for _ in range(3):
        run(sess, feeds)
    err = capfd.readouterr().err
    line = "flashgemm: fgs_bf16_tb0_bias0_maskbool_causal1_generic (generic) sizes=[1,6,5,6,8]" + (
        " on cuda:0" if device == "cuda" else "") + "\n"
    assert err.count(line) == 1, err  # once per node and shape, not on every run


def test_tuned_entry_dispatch(bundle, device, tmp_path, monkeypatch, capfd):
    """A tuned (or default-schedule) manifest entry serves exactly its sizes, or with any_batch every batch of its
    M, N, K (a fixed-batch twin only the calls whose B0 or B1 has its value, and those before the plain any-batch
    entry);
    other sizes fall back to the generic kernel."""
    d = tmp_path / "tuned"
    d.mkdir()
    for so in kernel_libraries(bundle):
        shutil.copy(so, d)
    manifest = json.loads((bundle / "manifest.json").read_text())
    by_name = {f["name"]: f for f in manifest["functions"]}
    # Stand-ins for tuned kernels: the generic functions, listed as tuned for [B0, B1, M, N, K] = [1, 2, 4, 6, 5].
    tuned = dict(tuned=True, schedule="tuned", sizes=[1, 2, 4, 6, 5], workload="w")
    manifest["functions"] += [
        dict(by_name["fgs_f16_tb0_bias0_masknone_causal0_generic"], **tuned),
        dict(by_name["fgs_f16_tb0_bias1_masknone_causal0_generic"], **tuned, any_batch=True),
        dict(by_name["fgs_f16_tb0_bias1_masknone_causal0_generic"], **tuned, any_batch=True, fixed_batch=[0, 1]),
        # B1 fixed at 2 beside an exact entry: B1 = 2 calls of any B0 (exact sizes first)
        dict(by_name["fgs_f16_tb0_bias0_masknone_causal0_generic"], **tuned, any_batch=True, fixed_batch=[1, 2]),
        # a kernel that assumes more pointer alignment than any call has (the op sees at most 256): never chosen
        dict(by_name["fgs_f16_tb0_bias0_masknone_causal1_generic"], **tuned, any_batch=True, align=4096),
        # a default-schedule (untuned) kernel: shape-specific like a tuned one
        dict(by_name["fgs_f16_tb0_bias1_masknone_causal1_generic"], tuned=False, schedule="default",
             sizes=[1, 2, 4, 6, 5], any_batch=True),
        # a B0 = 1 twin specialized on scale 0.25: the calls below have scale 1, so it serves none of them
        dict(by_name["fgs_f16_tb0_bias1_masknone_causal0_generic"], **tuned, any_batch=True, fixed_batch=[0, 1],
             scale=0.25)]
    (d / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    so2 = opts(d, device)
    rng = np.random.default_rng(9)
    for a_shape, with_bias, causal, tag in (([2, 4, 5], False, 0, "tuned"), ([3, 4, 5], False, 0, "generic"),
                                            ([3, 4, 5], True, 0, "tuned, B0=1"), ([1, 4, 5], True, 0, "tuned, B0=1"),
                                            ([3, 7, 5], True, 0, "generic"), ([2, 4, 5], False, 1, "generic"),
                                            ([3, 4, 5], True, 1, "default"), ([3, 5, 5], True, 1, "generic")):
        a, b = rand(rng, a_shape, "float16"), rand(rng, [5, 6], "float16")
        feeds = {"A": a, "B": b}
        if with_bias:
            feeds["bias"] = rand(rng, [6], "float16")
        model = make_model("float16", a_shape, [5, 6], [6] if with_bias else None, causal=causal)
        (p,) = run(session(so2, model), feeds)
        np.testing.assert_allclose(p.astype(np.float64),
                                   fused_gemm_softmax_ref(a, b, feeds.get("bias"), causal=causal),
                                   atol=ATOL["float16"])
        m = a_shape[1]
        assert (f"fgs_f16_tb0_bias{int(with_bias)}_masknone_causal{causal}_generic ({tag}) "
                f"sizes=[1,{a_shape[0]},{m},6,5]") in capfd.readouterr().err, (a_shape, with_bias, tag)
    # B broadcast over A's first batch dim: two batch dims that do not merge (B0 = 3 or 2), so no B0 = 1 twin:
    # the B1 = 2 twin where B1 is 2, else the plain any-batch entry
    for a_shape, b_shape, with_bias, expect in (([3, 2, 4, 5], [2, 5, 6], False, "tuned, B1=2"),
                                                ([2, 3, 4, 5], [3, 5, 6], True, "tuned")):
        a, b = rand(rng, a_shape, "float16"), rand(rng, b_shape, "float16")
        feeds = {"A": a, "B": b, **({"bias": rand(rng, [6], "float16")} if with_bias else {})}
        (p,) = run(session(so2, make_model("float16", a_shape, b_shape, [6] if with_bias else None)), feeds)
        np.testing.assert_allclose(p.astype(np.float64), fused_gemm_softmax_ref(a, b, feeds.get("bias")),
                                   atol=ATOL["float16"])
        assert (f"fgs_f16_tb0_bias{int(with_bias)}_masknone_causal0_generic ({expect}) "
                f"sizes=[{a_shape[0]},{a_shape[1]},4,6,5]") in capfd.readouterr().err, (a_shape, expect)


def test_scale_specialized_twin_dispatch(bundle, device, tmp_path, monkeypatch, capfd):
    """A fixed-batch twin specialized on a scale (manifest "scale") serves the calls whose scale attribute is that
    float32 bit for bit, before the plain twin; a call with another scale takes the plain twin."""
    d = tmp_path / "scaled"
    d.mkdir()
    for so in kernel_libraries(bundle):
        shutil.copy(so, d)
    manifest = json.loads((bundle / "manifest.json").read_text())
    by_name = {f["name"]: f for f in manifest["functions"]}
    twin = dict(tuned=True, schedule="tuned", sizes=[1, 2, 4, 6, 5], workload="w", any_batch=True, fixed_batch=[0, 1])
    generic = by_name["fgs_f16_tb0_bias0_masknone_causal0_generic"]
    manifest["functions"] += [dict(generic, **twin), dict(generic, **twin, scale=float(np.float32(0.1)))]
    (d / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    so2 = opts(d, device)
    rng = np.random.default_rng(11)
    for scale, tag in ((0.1, "tuned, B0=1, scale=0.100000001"), (0.125, "tuned, B0=1"),
                       (float(np.nextafter(np.float32(0.1), np.float32(1))), "tuned, B0=1")):
        a, b = rand(rng, [3, 4, 5], "float16"), rand(rng, [5, 6], "float16")
        (p,) = run(session(so2, make_model("float16", [3, 4, 5], [5, 6], scale=scale)), {"A": a, "B": b})
        np.testing.assert_allclose(p.astype(np.float64), fused_gemm_softmax_ref(a, b, scale=scale),
                                   atol=ATOL["float16"])
        err = capfd.readouterr().err
        assert f"fgs_f16_tb0_bias0_masknone_causal0_generic ({tag}) sizes=[1,3,4,6,5]" in err, (scale, err)


def test_any_length_dispatch(bundle, device, tmp_path, monkeypatch, capfd):
    """An any-length manifest entry (sizes [1, 1, Mb, Nb, K], any_batch and any_length) serves every call of its
    variant with M <= Mb, N <= Nb and this K, for any batch, after the exact and any-batch entries and before the
    generic kernel: the smallest bound that holds the call; at one bound a twin that serves the call first (a
    fixed-batch twin whose batch dim matches, one for N a multiple of n_multiple where it is), then tuned before
    default. Stand-ins: the generic functions (they serve any shape)."""
    d = tmp_path / "any-length"
    d.mkdir()
    for so in kernel_libraries(bundle):
        shutil.copy(so, d)
    manifest = json.loads((bundle / "manifest.json").read_text())
    by_name = {f["name"]: f for f in manifest["functions"]}
    k = 8
    plain = by_name["fgs_f16_tb0_bias0_masknone_causal0_generic"]
    biased = by_name["fgs_f16_tb0_bias1_masknone_causal0_generic"]

    def any_length(base, m, n, schedule="default", **extra):
        return dict(base, tuned=schedule == "tuned", schedule=schedule, sizes=[1, 1, m, n, k], any_batch=True,
                    any_length=True, workload="w", **extra)

    manifest["functions"] += [
        # listed largest first: the choice must not follow the manifest's order
        any_length(plain, 256, 256), any_length(plain, 128, 128), any_length(plain, 128, 128, n_multiple=4),
        # an any-batch entry of the call's own M, N, K comes before every any-length one
        dict(plain, tuned=False, schedule="default", sizes=[1, 1, 60, 60, k], any_batch=True, workload="w"),
        # more alignment than any call has (the op sees at most 256): never chosen, although the smallest bound
        any_length(plain, 64, 64, align=4096),
        # bias: a default and a tuned kernel at one bound, the tuned one after, and a B0 = 1 default twin there
        any_length(biased, 256, 256), any_length(biased, 256, 256, schedule="tuned"),
        any_length(biased, 256, 256, fixed_batch=[0, 1])]
    (d / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    so2 = opts(d, device)
    rng = np.random.default_rng(12)
    for a_shape, b_shape, with_bias, tag in (
            ([2, 100, k], [k, 100], False, "default, N%4=0, any length <= 128x128"),  # N a multiple of 4: that one
            ([2, 128, k], [k, 128], False, "default, N%4=0, any length <= 128x128"),
            ([2, 128, k], [k, 99], False, "default, any length <= 128x128"),
            ([2, 100, k], [k, 200], False, "default, any length <= 256x256"),
            ([2, 200, k], [k, 200], False, "default, any length <= 256x256"),
            ([2, 3, 200, k], [k, 100], False, "default, any length <= 256x256"),  # any batch
            ([2, 60, k], [k, 60], False, "default"),  # the any-batch entry of these M, N, K
            ([2, 30, k], [k, 30], False, "default, any length <= 128x128"),  # the align 4096 one is skipped
            ([2, 300, k], [k, 300], False, "generic"),  # M and N beyond every bound
            ([2, 100, k], [k, 257], False, "generic"),  # N beyond every bound
            ([2, 100, k + 1], [k + 1, 100], False, "generic"),  # another K
            ([3, 2, 100, k], [2, k, 100], True, "tuned, any length <= 256x256"),  # B0 = 3: not the B0 = 1 twin
            ([3, 100, k], [k, 100], True, "default, B0=1, any length <= 256x256")):  # the twin before tuned
        a, b = rand(rng, a_shape, "float16"), rand(rng, b_shape, "float16")
        n = b_shape[-1]
        feeds = {"A": a, "B": b, **({"bias": rand(rng, [n], "float16")} if with_bias else {})}
        model = make_model("float16", a_shape, b_shape, [n] if with_bias else None, scale=0.3)
        (p,) = run(session(so2, model), feeds)
        np.testing.assert_allclose(p.astype(np.float64), fused_gemm_softmax_ref(a, b, feeds.get("bias"), scale=0.3),
                                   rtol=0, atol=ATOL["float16"])
        sizes = canonicalize(a.shape, b.shape).sizes
        line = (f"fgs_f16_tb0_bias{int(with_bias)}_masknone_causal0_generic ({tag}) "
                f"sizes=[{','.join(str(x) for x in sizes)}]")
        err = capfd.readouterr().err
        assert line in err, (a_shape, b_shape, tag, err)


def test_tensor_core_entry_dispatch(bundle, device, tmp_path, monkeypatch, capfd):
    """A FusedGemmSoftmax entry with a head_size (the tensor-core kernels' manifest form: schedule default, min_n)
    serves the calls of its K whose N its n_multiple divides: ahead of every other kernel where N >= min_n, and below
    that where only the generic kernel would serve the call; a malformed one fails the bundle with the field named.
    Stand-ins: the generic functions (they serve any shape)."""
    if device != "cpu":
        pytest.skip("the manifest's dispatch rules, not the device, are under test")
    d = tmp_path / "tensor-core"
    d.mkdir()
    for so in kernel_libraries(bundle):
        shutil.copy(so, d)
    manifest = json.loads((bundle / "manifest.json").read_text())
    plain = {f["name"]: f for f in manifest["functions"]}["fgs_f16_tb0_bias0_masknone_causal0_generic"]
    k = 8
    tensor_core = dict(plain, schedule="default", form="wgmma", head_size=k, min_n=300, min_m=32, first_max_n=500,
                       n_multiple=2)
    functions = manifest["functions"] + [
        tensor_core,
        dict(plain, schedule="default", sizes=[1, 1, 128, 128, k], any_batch=True, any_length=True, workload="w"),
        # the shape's own kernel
        dict(plain, schedule="default", sizes=list(canonicalize((2, 40, k), (k, 400)).sizes), workload="w"),
        dict(plain, schedule="default", sizes=list(canonicalize((2, 20, k), (k, 400)).sizes), workload="w"),
        dict(plain, schedule="tuned", tuned=True, sizes=list(canonicalize((2, 40, k), (k, 600)).sizes), workload="w"),
        dict(plain, schedule="default", sizes=list(canonicalize((2, 40, k), (k, 700)).sizes), workload="w")]
    (d / "manifest.json").write_text(json.dumps(dict(manifest, functions=functions)))
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    so2 = opts(d, device)
    rng = np.random.default_rng(13)
    for m, n, kk, tag in ((40, 400, k, "default, N%2=0, K=8"),  # N >= min_n: before the shape's own kernel
                          (40, 100, k, "default, any length <= 128x128"),  # below min_n: the any-length kernel
                          (40, 200, k, "default, N%2=0, K=8"),  # past the any-length bound: not the generic kernel
                          (40, 201, k, "generic"),  # N not a multiple of n_multiple
                          (20, 400, k, "default"),  # fewer rows than min_m: the shape's own kernel first
                          (40, 600, k, "tuned"),  # past first_max_n: a tuned kernel of the shape's own first
                          (40, 700, k, "default, N%2=0, K=8"),  # ... but not a default-schedule one
                          (40, 400, k + 1, "generic")):  # another K
        a, b = rand(rng, [2, m, kk], "float16"), rand(rng, [kk, n], "float16")
        (p,) = run(session(so2, make_model("float16", a.shape, b.shape, scale=0.3)), {"A": a, "B": b})
        np.testing.assert_allclose(p.astype(np.float64), fused_gemm_softmax_ref(a, b, scale=0.3), rtol=0,
                                   atol=ATOL["float16"])
        sizes = ",".join(str(x) for x in canonicalize(a.shape, b.shape).sizes)
        err = capfd.readouterr().err
        assert f"fgs_f16_tb0_bias0_masknone_causal0_generic ({tag}) sizes=[{sizes}]" in err, (m, n, kk, err)
    for bad, needle in ((dict(head_size=0), '"head_size" is not a positive integer'),
                        (dict(min_n=0), '"min_n" is not a positive integer'),
                        (dict(min_m=0), '"min_m" is not a positive integer'),
                        (dict(first_max_n=299), '"first_max_n" is less than min_n'),
                        (dict(n_multiple=0), '"n_multiple" is not a positive integer'),
                        (dict(schedule="tuned", tuned=True), '"schedule" of a kernel with a head_size is not default')):
        bad_dir = tmp_path / f"bad-{'-'.join(bad)}"
        bad_dir.mkdir()
        for so in kernel_libraries(bundle):
            shutil.copy(so, bad_dir)
        (bad_dir / "manifest.json").write_text(json.dumps(dict(manifest, functions=manifest["functions"] + [
            dict(tensor_core, **bad)])))
        opts_ = ort.SessionOptions()
        opts_.add_session_config_entry(BUNDLE_DIR_CONFIG_KEY, str(bad_dir))
        with pytest.raises(Exception, match="functions\\[\\d+\\]." + needle.replace('"', '.')):
            session_options(so=opts_)


def test_generic_kernel_warning(so, device, capfd):
    """On the GPU a call that only the generic kernel serves logs a WARNING through ORT's logger, once per node and
    sizes, naming the fix; on the CPU (where the generic kernel is the normal, vectorized path) a small call logs
    none (test_cpu_generic_kernel_warning_at_size: a large one does)."""
    sess = session(so, make_model("float16", [3, 7, 5], [5, 9]))
    rng = np.random.default_rng(13)
    feeds = {"A": rand(rng, [3, 7, 5], "float16"), "B": rand(rng, [5, 9], "float16")}
    for _ in range(3):
        run(sess, feeds)
    err = capfd.readouterr().err
    if device == "cpu":
        assert "generic kernel" not in err, err
        return
    assert err.count("generic kernel") == 1, err
    for needle in ("FusedGemmSoftmax (node 'fgs')", "[1,3,7,9,5]", "much slower", "flashgemm-build --target sm_",
                   "--from-model", "flashgemm-tune --from-model"):
        assert needle in err, (needle, err)


def test_cpu_generic_kernel_warning_at_size(so, device, capfd):
    """On the CPU, from BERT-base's site size (one head's M x N x K = 128 x 128 x 64) up, where the generic llvm
    kernel trails ORT's own MatMul + Softmax, one WARNING per node and sizes says so and names the
    fix (run the original model on the CPU); just below that size, none."""
    if device != "cpu":
        pytest.skip("the CPU EP's warning")
    rng = np.random.default_rng(14)
    for m, warns in ((128, True), (127, False)):
        sess = session(so, make_model("float16", [1, 2, m, 64], [1, 2, 128, 64], trans_b=1))
        feeds = {"A": rand(rng, [1, 2, m, 64], "float16"), "B": rand(rng, [1, 2, 128, 64], "float16")}
        for _ in range(3):
            run(sess, feeds)
        err = capfd.readouterr().err
        if not warns:
            assert "generic llvm kernel" not in err, err
            continue
        assert err.count("generic llvm kernel") == 1, err
        for needle in ("FusedGemmSoftmax (node 'fgs')", "[1,2,128,128,64]", "slower than ONNX Runtime",
                       "run the original model"):
            assert needle in err, (needle, err)


_ORT_THREADS_PROBE = r"""
import json, os, sys
import numpy as np
import onnxruntime as ort
from flashgemm.ort.model import make_model
from flashgemm.ort.session import run, session_options
from flashgemm.op.reference import fused_gemm_softmax_ref

def threads():
    return len(os.listdir("/proc/self/task"))

bundle, intra = sys.argv[1], int(sys.argv[2])
so = session_options(bundle)
so.intra_op_num_threads = intra
rng = np.random.default_rng(3)
a = rng.standard_normal((2, 6, 40, 32)).astype(np.float16)
b = rng.standard_normal((2, 6, 48, 32)).astype(np.float16)
model = make_model("float16", a.shape, b.shape, scale=0.25, trans_b=1)
sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
before = threads()
(p,) = run(sess, {"A": a, "B": b})
ref = fused_gemm_softmax_ref(a, b, None, None, scale=0.25, trans_b=1)
print(json.dumps({"before": before, "after": threads(),
                  "err": float(np.abs(p.astype(np.float64) - ref).max())}))
"""


@pytest.mark.parametrize("intra", [1, 3])
def test_cpu_kernels_run_on_ort_threads(bundle, device, intra):
    """On the CPU EP the kernels' parallel loops run on the session's intra-op thread pool: a run starts no
    thread of its own (TVM's pool would start TVM_NUM_THREADS - 1 workers beside ORT's spinning ones), and the
    answer is right whether that pool has one thread or several."""
    if device != "cpu":
        pytest.skip("the CPU EP's thread pool")
    env = {**os.environ, "TVM_NUM_THREADS": "4"}
    out = subprocess.run([sys.executable, "-c", _ORT_THREADS_PROBE, str(bundle), str(intra)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["after"] == r["before"], r
    assert r["err"] < ATOL["float16"], r


# ------------------------------------------------------------------------------------------------ errors

def test_tvm_error_becomes_status(bundle, device, tmp_path, monkeypatch):
    """A kernel that raises (here: a manifest entry naming a kernel of another variant, so TVM's argument
    check fails) comes back as an error status; the process survives (TVM's error symbols are reachable)."""
    d = tmp_path / "wrong"
    d.mkdir()
    for so in kernel_libraries(bundle):
        shutil.copy(so, d)
    manifest = json.loads((bundle / "manifest.json").read_text())
    for f in manifest["functions"]:
        if f["name"] == "fgs_f16_tb0_bias0_masknone_causal0_generic":
            f["name"] = "fgs_f16_tb0_bias1_masknone_causal0_generic"  # expects 5 arguments, gets 4
    (d / "manifest.json").write_text(json.dumps(manifest))
    so2 = opts(d, device)
    sess = session(so2, make_model("float16", [2, 3], [3, 4]))
    with pytest.raises(Exception, match="kernel fgs_f16_tb0_bias1_masknone_causal0_generic failed"):
        run(sess, {"A": _z([2, 3]), "B": _z([3, 4])})
    check(so2, "float16", [2, 3, 4], [4, 5], [5])  # other variants of that bundle still work



def _expect_run_error(so, model, feeds, *needles):
    sess = session(so, model)
    with pytest.raises(Exception) as ei:  # onnxruntime's InvalidArgument / Fail
        run(sess, feeds)
    msg = str(ei.value)
    assert "FusedGemmSoftmax" in msg and "INVALID_ARGUMENT" in msg, msg
    for needle in needles:
        assert needle in msg, msg
    # the process survives, and so does ORT: a good run right after
    check(so, "float16", [2, 3, 4], [4, 5], [5])


def _z(shape, dtype="float16"):
    return np.zeros(shape, NP[dtype] if dtype in NP else dtype)


@pytest.mark.parametrize("case", [
    "b_bf16", "b_f32", "bias_bf16", "mask_f32", "k_mismatch", "k_mismatch_transb", "a_rank1", "b_rank1",
    "batch_not_broadcastable", "bias_not_broadcastable", "mask_not_broadcastable", "mask_rank_too_high",
    "three_batch_groups", "int32_overflow"])
def test_run_time_errors(so, case):
    f16 = "float16"
    a_shape, b_shape, bias_shape, mask_shape = [2, 3, 4], [2, 4, 5], None, None
    kw, dtypes = {}, {}
    needles = {
        "b_bf16": ["A is float16 but B is bfloat16"],
        "b_f32": ["A is float16 but B is float32"],
        "bias_bf16": ["A is float16 but bias is bfloat16"],
        "mask_f32": ["mask is float32; it must be bool or the type of A (float16)"],
        "k_mismatch": ["K mismatch: A is [2, 3, 4] (K=4) but B is [2, 3, 5] (K=3, transB=0)"],
        "k_mismatch_transb": ["K mismatch: A is [2, 3, 4] (K=4) but B is [2, 4, 5] (K=5, transB=1)"],
        "a_rank1": ["A must have rank >= 2", "got shape [4]"],
        "b_rank1": ["B must have rank >= 2", "got shape [4]"],
        "batch_not_broadcastable": ["A and B: batch dims [[2], [3]] are not broadcastable"],
        "bias_not_broadcastable": ["bias of shape [4] is not broadcastable to the output shape [2, 3, 5]"],
        "mask_not_broadcastable": ["mask of shape [2, 1] is not broadcastable to the output shape [2, 3, 5]"],
        "mask_rank_too_high": ["mask of shape [1, 2, 3, 5] is not broadcastable"],
        "three_batch_groups": ["needs 3 independent batch dims; the kernels take two"],
        "int32_overflow": ["has tensors of more than 2^31 elements"],
    }[case]
    if case == "b_bf16":
        dtypes["B"] = "bfloat16"
    elif case == "b_f32":
        dtypes["B"] = "float32"
    elif case == "bias_bf16":
        bias_shape, dtypes["bias"] = [5], "bfloat16"
    elif case == "mask_f32":
        mask_shape, dtypes["mask"] = [5], "float32"
    elif case == "k_mismatch":
        b_shape = [2, 3, 5]
    elif case == "k_mismatch_transb":
        kw["trans_b"] = 1
    elif case == "a_rank1":
        a_shape = [4]
    elif case == "b_rank1":
        b_shape = [4]
    elif case == "batch_not_broadcastable":
        b_shape = [3, 4, 5]
    elif case == "bias_not_broadcastable":
        bias_shape = [4]
    elif case == "mask_not_broadcastable":
        mask_shape = [2, 1]
    elif case == "mask_rank_too_high":
        mask_shape = [1, 2, 3, 5]
    elif case == "three_batch_groups":
        a_shape, b_shape, mask_shape = [2, 3, 4, 3, 4], [4, 5], [2, 1, 4, 3, 5]
    elif case == "int32_overflow":  # 2^32 outputs from 2 x 64K-element inputs
        a_shape, b_shape = [65536, 1, 1, 1], [1, 65536, 1, 1]
    feeds = {"A": _z(a_shape), "B": _z(b_shape, dtypes.get("B", f16))}
    if bias_shape is not None:
        feeds["bias"] = _z(bias_shape, dtypes.get("bias", f16))
    if mask_shape is not None:
        feeds["mask"] = _z(mask_shape, dtypes.get("mask", f16))
    model = make_model(f16, a_shape, b_shape, bias_shape, mask_shape, dtypes.get("mask"), b_dtype=dtypes.get("B"),
                       bias_dtype=dtypes.get("bias"), **kw)
    _expect_run_error(so, model, feeds, *needles)


@pytest.mark.parametrize("a_shape,b_shape,trans_b,want", [
    (["batch", 12, "seq", 32], ["batch", 12, "seq", 32], 1, ["batch", 12, "seq", "seq"]),  # a dynamic export's site
    ([2, 3, 5, 8], [8, 7], 0, [2, 3, 5, 7]),
    (["b", 1, "m", 8], [1, 4, 8, "n"], 0, ["b", 4, "m", "n"]),  # each side broadcasts one batch dim
    (["x", 5, 8], [3, 8, 7], 0, [3, 5, 7]),  # x is 3 or 1 at every valid call
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_output_shape_is_inferred(so, dtype, a_shape, b_shape, trans_b, want):
    """ORT knows P's type and shape when it builds the graph (the op's shape inference), symbolic dims included, so
    the nodes after the op see them too; sizes no call can take leave it unset (the call then fails in Compute).
    ORT 1.21-1.23 get no shape inference from the library (their custom-op shape inference crashes: op.h)."""
    if tuple(int(x) for x in ort.__version__.split(".")[:2]) < (1, 24):
        pytest.skip(f"onnxruntime {ort.__version__}: the op's shape inference is installed from 1.24 on")
    model = make_model(dtype, a_shape, b_shape, trans_b=trans_b)
    model.graph.output[0].type.tensor_type.ClearField("shape")
    out = session(so, model).get_outputs()[0]
    assert out.shape == want and out.type == f"tensor({dtype})"
    two_symbols = make_model(dtype, ["x", 5, 8], ["y", 8, 7])  # x or y may be 1: that batch dim is not known
    two_symbols.graph.output[0].type.tensor_type.ClearField("shape")
    shape = session(so, two_symbols).get_outputs()[0].shape
    assert len(shape) == 3 and shape[1:] == [5, 7] and shape[0] not in ("x", "y", 5, 7)


def test_unsupported_a_dtype_rejected_at_load(so):
    """A float32 A never reaches Compute: ORT's schema check (A is float16 | bfloat16) rejects the model."""
    with pytest.raises(Exception, match=r"Type 'tensor\(float\)' of input parameter \(A\)"):
        session(so, make_model("float32", [2, 3], [3, 4]))
    check(so, "float16", [2, 3, 4], [4, 5])


@pytest.mark.parametrize("attr,value,needle", [("transB", 2, "transB must be 0 or 1, got 2"),
                                               ("scale", 3, "attribute scale"),
                                               ("scale", float("nan"), "scale is nan: it must be a finite number"),
                                               ("scale", float("inf"), "scale is inf: it must be a finite number"),
                                               ("scale", float("-inf"), "scale is -inf: it must be a finite number")])
def test_bad_attribute(so, attr, value, needle):
    model = make_model("float16", [2, 3], [3, 4])
    node = model.graph.node[0]
    for i, a in enumerate(node.attribute):
        if a.name == attr:
            del node.attribute[i]
            break
    node.attribute.append(helper.make_attribute(attr, value))  # int where a float is due, or out of range
    with pytest.raises(Exception, match=needle):
        session(so, model)


# --------------------------------------------------------------------------------------- bundle loading

def _bad_bundle(bundle, tmp_path, what):
    d = tmp_path / what
    d.mkdir()
    if what == "empty":
        return d
    manifest = json.loads((bundle / "manifest.json").read_text())
    if what != "no_kernels_so":
        for so in kernel_libraries(bundle):
            shutil.copy(so, d)
    if what == "corrupt":
        (d / "manifest.json").write_text('{"format": 1, "functions": [')
        return d
    if what == "format_next":
        manifest["format"] = MANIFEST_FORMAT + 1
    elif what == "cuda":
        manifest["device"], manifest["target"] = "cuda", "cuda-sm90"
    elif what == "missing_function":
        manifest["functions"][0]["name"] = "fgs_no_such_kernel"
    elif what == "bad_field":
        del manifest["functions"][3]["mask"]
    elif what == "bad_schedule":
        manifest["functions"][2]["schedule"] = "fast"
    elif what == "tuned_but_generic":
        manifest["functions"][2]["tuned"] = True
    elif what == "bad_fixed_batch":  # a twin's static batch dim must be 0 or 1
        manifest["functions"][2].update(tuned=True, schedule="tuned", sizes=[1, 2, 4, 6, 5], any_batch=True,
                                        fixed_batch=[2, 1])
    elif what == "bad_scale":  # a scale-specialized twin's scale is a finite number
        manifest["functions"][2].update(tuned=True, schedule="tuned", sizes=[1, 2, 4, 6, 5], any_batch=True,
                                        fixed_batch=[0, 1], scale="0.125")
    elif what == "any_length_without_any_batch":  # an any-length kernel serves any batch
        manifest["functions"][2].update(tuned=False, schedule="default", sizes=[1, 1, 128, 128, 64], any_batch=False,
                                        any_length=True)
    elif what == "any_length_with_scale":  # any-length kernels are not specialized on a scale
        manifest["functions"][2].update(tuned=False, schedule="default", sizes=[1, 1, 128, 128, 64], any_batch=True,
                                        fixed_batch=[0, 1], scale=0.125, any_length=True)
    elif what == "any_length_bad_bound":  # the bound holds at least one row and column
        manifest["functions"][2].update(tuned=False, schedule="default", sizes=[1, 1, 0, 128, 64], any_batch=True,
                                        any_length=True)
    elif what == "any_length_bad_n_multiple":  # an any-length twin's N multiple is a positive integer
        manifest["functions"][2].update(tuned=False, schedule="default", sizes=[1, 1, 128, 128, 64], any_batch=True,
                                        any_length=True, n_multiple=0)
    elif what == "n_multiple_not_any_length":  # only an any-length kernel serves a multiple of N alone
        manifest["functions"][2].update(tuned=True, schedule="tuned", sizes=[1, 2, 4, 6, 5], any_batch=True,
                                        n_multiple=4)
    elif what == "scale_without_twin":  # only a fixed-batch twin is specialized on a scale
        manifest["functions"][2].update(tuned=True, schedule="tuned", sizes=[1, 2, 4, 6, 5], any_batch=True,
                                        scale=0.125)
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


FIX = {"cpu": "run flashgemm-build --target llvm", "cuda": "run flashgemm-build --target auto"}


@pytest.mark.parametrize("what,needles", [
    ("empty", ["no kernel bundle in", "manifest.json not found", "FIX"]),
    ("no_kernels_so", ["flashgemm_kernels.so", "not found", "FIX"]),
    ("corrupt", ["corrupt manifest", "manifest.json", "FIX"]),
    ("format_next", [f"manifest format {MANIFEST_FORMAT + 1}", f"reads formats 1 to {MANIFEST_FORMAT}", "FIX"]),
    ("cuda", ["holds CUDA kernels", "built without CUDA support"]),
    ("missing_function", ["has no function fgs_no_such_kernel"]),
    ("bad_field", ['functions[3]."mask" is missing']),
    ("bad_schedule", ['functions[2]."schedule" is not tuned|default|generic']),
    ("tuned_but_generic", ['functions[2]."schedule" disagrees with "tuned"']),
    ("bad_fixed_batch", ['functions[2]."fixed_batch" is not [0 or 1, a positive size]']),
    ("bad_scale", ['functions[2]."scale" is not a finite number']),
    ("scale_without_twin", ['functions[2]."scale" is set on a kernel that is not a fixed-batch twin']),
    ("any_length_without_any_batch", ['functions[2]."any_length" is set on a kernel that is not any_batch']),
    ("any_length_with_scale", ['functions[2]."any_length" is set on a kernel specialized on a scale']),
    ("any_length_bad_bound", ['functions[2]."sizes" of an any_length kernel does not bound M and N']),
    ("any_length_bad_n_multiple", ['functions[2]."n_multiple" is not a positive integer']),
    ("n_multiple_not_any_length", ['functions[2]."n_multiple" is set on a kernel that is not any_length']),
])
def test_bad_bundle_fails_registration(bundle, device, tmp_path, monkeypatch, what, needles):
    if what == "cuda" and device == "cuda":
        pytest.skip("a CUDA build of the library serves CUDA bundles; the CPU build covers this case")
    needles = [FIX[device] if n == "FIX" else n for n in needles]
    d = _bad_bundle(bundle, tmp_path, what)
    so = ort.SessionOptions()
    so.add_session_config_entry(BUNDLE_DIR_CONFIG_KEY, str(d))  # named: the library itself checks the bundle
    with pytest.raises(Exception) as ei:
        session_options(so=so)
    msg = str(ei.value)
    for needle in needles + [str(d)]:
        assert needle in msg, msg
    check(opts(bundle, device), "float16", [2, 3, 4], [4, 5])  # registering the good bundle still works


def test_cpu_bundle_names_the_cpu_its_kernels_need(bundle, device):
    """An llvm bundle records the -mcpu its kernels were compiled for (flashgemm/spaces/llvm.export_mcpu); on x86-64
    that is the x86-64-v3 level where this CPU has it, which the op checks when it loads the bundle (the session fixture
    did: this CPU has it), so a bundle copied to an older CPU fails with the fix instead of an illegal instruction."""
    from flashgemm.spaces import llvm
    manifest = json.loads((bundle / "manifest.json").read_text())
    if device != "cpu":
        assert "cpu" not in manifest
        return
    assert manifest["cpu"] == llvm.export_mcpu()
    if manifest["cpu"] == llvm.X86_LEVEL:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
        assert {"avx2", "fma", "f16c"} <= set(flags)


def test_library_without_bundle_next_to_it(dev_library, tmp_path, monkeypatch):
    """Without the config entry and FLASHGEMM_BUNDLE_DIR the bundle is the library's own directory (dladdr)."""
    monkeypatch.delenv("FLASHGEMM_BUNDLE_DIR", raising=False)
    shutil.copy(dev_library, tmp_path / LIBRARY)
    with pytest.raises(Exception, match=f"no kernel bundle in {tmp_path}"):
        ort.SessionOptions().register_custom_ops_library(str(tmp_path / LIBRARY))


def test_bundle_dir_from_the_session_config_entry(bundle, dev_library, device, tmp_path, monkeypatch):
    """The session config entry flashgemm.bundle_dir names the bundle (over $FLASHGEMM_BUNDLE_DIR and the library's
    own directory), so one library serves another directory's bundle and two sessions of a process two bundles."""
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    lib = lib_dir / LIBRARY
    shutil.copy(dev_library, lib)  # no bundle next to this copy
    monkeypatch.setenv("FLASHGEMM_BUNDLE_DIR", str(tmp_path / "nowhere"))
    so = ort.SessionOptions()
    so.add_session_config_entry(BUNDLE_DIR_CONFIG_KEY, str(bundle))
    so = session_options(so=so, library=lib)
    model = make_model("float16", [2, 5, 8], [2, 8, 7])
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=providers(device))
    rng = np.random.default_rng(3)
    a, b = rand(rng, [2, 5, 8], "float16"), rand(rng, [2, 8, 7], "float16")
    (p,) = run(sess, {"A": a, "B": b})
    np.testing.assert_allclose(p.astype(np.float64), fused_gemm_softmax_ref(a, b), rtol=0, atol=ATOL["float16"])

    empty = tmp_path / "empty"
    empty.mkdir()
    other = ort.SessionOptions()
    other.add_session_config_entry(BUNDLE_DIR_CONFIG_KEY, str(empty))
    with pytest.raises(LibraryError, match=f"no kernel bundle in {empty}"):
        session_options(so=other, library=lib)
    monkeypatch.delenv("FLASHGEMM_BUNDLE_DIR")
    with pytest.raises(Exception, match=f"no kernel bundle in {lib_dir}"):  # no entry: the library's directory
        ort.SessionOptions().register_custom_ops_library(str(lib))


# Registers the library in a process of its own: a loader that crashes (SIGBUS in dlopen) then fails the test with
# the signal instead of killing the test run. Prints the error; exit status 3 when registration succeeded.
_REGISTER = """
import sys
import onnxruntime as ort
try:
    ort.SessionOptions().register_custom_ops_library(sys.argv[1])
except Exception as err:
    print(err)
    sys.exit(0)
sys.exit(3)
"""


def _register_in_subprocess(lib: Path, bundle_dir: Path) -> str:
    env = dict(os.environ, FLASHGEMM_BUNDLE_DIR=str(bundle_dir))
    proc = subprocess.run([sys.executable, "-c", _REGISTER, str(lib)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode >= 0, f"the loader was killed by signal {-proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.returncode == 0, f"registration did not fail (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout.strip()


def _load_segment_middle(data: bytes) -> int:
    """A file offset in the middle of the largest loadable segment (where a truncation made dlopen die of SIGBUS)."""
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
    loads = [struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize) for i in range(phnum)]
    _, _, offset, _, _, filesz, _, _ = max((p for p in loads if p[0] == 1), key=lambda p: p[5])
    return offset + filesz // 2


@pytest.mark.parametrize("what", ["empty", "in_elf_header", "in_program_headers", "in_segment", "half", "last_byte",
                                  "garbage", "elf32", "big_endian", "other_machine"])
def test_corrupt_kernels_so_fails_registration(bundle, device, tmp_path, what):
    """A kernels .so cut short at any length, or not a library of this machine, fails register_custom_ops_library
    with the path, what is wrong and the fix; nothing is dlopened (before the check, a truncation inside a loadable
    segment killed the process with SIGBUS). The Python check (flashgemm-check-bundle) says the same."""
    d = tmp_path / what
    d.mkdir()
    shutil.copy(bundle / "manifest.json", d)
    for so in kernel_libraries(bundle)[1:]:  # the others whole: the first library is the one cut below
        shutil.copy(so, d)
    data = (bundle / "flashgemm_kernels.so").read_bytes()
    size = len(data)
    host = {"x86_64": 62, "aarch64": 183}.get(platform.machine(), 62)
    cut = {"empty": 0, "in_elf_header": 10, "in_program_headers": 64 + 30, "in_segment": _load_segment_middle(data),
           "half": size // 2, "last_byte": size - 1}.get(what)
    if cut is not None:
        data = data[:cut]
    elif what == "garbage":
        data = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    elif what == "elf32":
        data = data[:4] + b"\x01" + data[5:]
    elif what == "big_endian":
        data = data[:5] + b"\x02" + data[6:]
    else:  # another architecture's e_machine
        data = data[:18] + (183 if host == 62 else 62).to_bytes(2, "little") + data[20:]
    so_path = d / "flashgemm_kernels.so"
    so_path.write_bytes(data)
    expect = {"empty": "empty file (0 bytes)", "in_elf_header": "truncated: 10 of at least 64 bytes expected",
              "in_program_headers": f"truncated: 94 of at least {size} bytes expected",
              "garbage": "not an ELF file", "elf32": "a 32-bit ELF file", "big_endian": "a big-endian ELF file",
              "other_machine": f"built for {'aarch64' if host == 62 else 'x86-64'}; this process is "}.get(
                  what, f"truncated: {cut} of {size} bytes expected")
    msg = _register_in_subprocess(Path(get_library_path()), d)
    for needle in (f"corrupt kernel library {so_path}", expect, elf_problem(so_path), FIX[device]):
        assert needle in msg, msg


def test_session_options_names_the_fix(bundle, tmp_path, monkeypatch):
    """session_options fails with one line naming the absolute path tried and the fix: a relative bundle directory
    that does not resolve from the current directory (and the library: a relative FLASHGEMM_BUNDLE_DIR), a missing or
    truncated op library (ORT's dlopen would die of SIGBUS), a library whose dependency is missing (dlopen's error
    alone names no fix)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LibraryError) as ei:
        session_options("no/such/llvm")
    msg = str(ei.value)
    assert f"no bundle at {tmp_path}/no/such/llvm (no manifest.json" in msg, msg
    assert f"flashgemm-build --target llvm --out {tmp_path}/no/such/llvm" in msg, msg
    msg = _register_in_subprocess(Path(get_library_path()), Path("rel/bundle"))  # the library names it absolute
    assert f"no kernel bundle in {tmp_path}/rel/bundle " in msg, msg
    with pytest.raises(LibraryError, match=f"no op library at {tmp_path}/none/{LIBRARY} "):
        session_options(bundle, library="none/" + LIBRARY)

    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / LIBRARY).write_bytes(Path(get_library_path()).read_bytes()[:100_000])
    with pytest.raises(LibraryError) as ei:
        session_options(bundle, library=cut / LIBRARY)
    assert f"corrupt op library {cut}/{LIBRARY}: truncated: 100000 of " in str(ei.value), ei.value

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a library with a missing dependency")
    lib_dir = tmp_path / "missing-dep"
    lib_dir.mkdir()
    (tmp_path / "dep.c").write_text("int dep(void) { return 1; }\n")
    (tmp_path / "lib.c").write_text("int dep(void);\nint RegisterCustomOps(void) { return dep(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libfgdep.so"), str(tmp_path / "dep.c")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib_dir / LIBRARY), str(tmp_path / "lib.c"), "-L",
                    str(tmp_path), "-lfgdep"], check=True)
    (tmp_path / "libfgdep.so").unlink()
    with pytest.raises(LibraryError) as ei:
        session_options(bundle, library=lib_dir / LIBRARY)
    msg = str(ei.value)
    assert f"cannot load {lib_dir}/{LIBRARY}: libfgdep.so: cannot open shared object file" in msg, msg
    assert "install flashgemm into the environment that has its dependencies" in msg, msg


# ------------------------------------------------------------------------------ canonical shape (C++ = Py)

def _random_case(rng):
    rank = rng.randint(0, 3)
    batch = [rng.choice([1, 2, 3]) for _ in range(rank)]

    def sub(shape):  # broadcast-compatible variant: drop leading dims, set some dims to 1
        shape = shape[rng.randint(0, len(shape)):] if shape and rng.random() < 0.3 else list(shape)
        return [1 if rng.random() < 0.3 else d for d in shape]

    m, n, k = rng.choice([1, 2, 5]), rng.choice([1, 3, 4]), rng.choice([1, 2, 3])
    tb = rng.random() < 0.5
    a = sub(batch) + [m, k]
    b = sub(batch) + ([n, k] if tb else [k, n])
    if rng.random() < 0.1:  # provoke errors now and then
        b[-1 if tb else -2] += 1
    out = batch + [m, n]
    bias = sub(out) if rng.random() < 0.6 else None
    mask = sub(out) if rng.random() < 0.6 else None
    if mask is not None and rng.random() < 0.05:
        mask = [7] + mask
    return a, b, tb, bias, mask


def _fmt(shape):
    return "none" if shape is None else ",".join(map(str, shape))


@pytest.fixture(scope="session")
def canonical_cli(tmp_path_factory):
    """The C++ shape logic's test driver, built with the CPU library (incremental after the bundle fixture)."""
    native.build_custom_op_library(tmp_path_factory.mktemp("native"), log=lambda *a: None)
    return native.build_dir() / native.CANONICAL_CLI


def _cli_line(c, fields: int) -> str:
    """canonical_cli's answer for Python's canonical shapes c: FusedGemmSoftmax's fields, then the first `fields` of
    FusedAttention's (V's strides and D; O's strides; K's and V's offsets into a packed tensor)."""
    j = lambda t: "none" if t is None else ",".join(map(str, t))  # noqa: E731
    parts = [j(c.sizes), j(c.out_shape), j(c.a_strides), j(c.b_strides), j(c.bias_strides), j(c.mask_strides)]
    parts += [f"{j(c.v_strides)};{c.d}", j(c.out_strides), f"{c.k_offset},{c.v_offset}"][:fields]
    return "ok " + ";".join(parts)


def _cli_refusals(cli, cases, rows, canon, fields: int = 0) -> int:
    """Feeds `rows` (canonical_cli's input, a line a case) to the C++ driver and checks each answer against `canon`
    (Python's canonicalize of a case): the same shapes and strides (_cli_line), or the same error. Returns how many
    cases both refused."""
    lines = subprocess.run([str(cli)], input="".join(r + "\n" for r in rows), capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert len(lines) == len(cases)
    n_err = 0
    for case, line in zip(cases, lines):
        try:
            c = canon(*case)
        except ShapeError as e:
            n_err += 1
            assert line == f"err {e}", case
            continue
        assert line == _cli_line(c, fields), case
    return n_err


def test_canonical_cpp_matches_python(canonical_cli):
    rng = random.Random(0)
    cases = [_random_case(rng) for _ in range(3000)] + [
        ([2, 3, 4, 3, 4], [4, 5], False, None, [2, 1, 4, 3, 5]),
        ([65536, 1, 1, 1], [1, 65536, 1, 1], False, None, None),
        ([46341, 46341], [46341, 1], False, None, None),
        ([3], [3, 4], False, None, None), ([2, 3], [3], False, None, None),
        ([2, 3], [3, 4], False, [], [1, 1, 1]),
    ]
    rows = [f"{_fmt(a)};{_fmt(b)};{int(tb)};{_fmt(bias)};{_fmt(mask)}" for a, b, tb, bias, mask in cases]
    n_err = _cli_refusals(canonical_cli, cases, rows, canonicalize)
    assert 50 < n_err < len(cases) - 1000  # both paths exercised


def test_canonical_cpp_matches_python_with_v(canonical_cli):
    """FusedAttention's shapes: V [..., N, D] whose batch dims broadcast to Q·K's (or, now and then, do not)."""
    rng = random.Random(1)
    cases = []
    for _ in range(2000):
        a, b, tb, bias, mask = _random_case(rng)
        batch = a[:-2] if len(a) >= len(b) else b[:-2]
        n = b[-2] if tb else b[-1]
        v = [1 if rng.random() < 0.3 else d for d in batch[rng.randint(0, len(batch)):]] + [n, rng.choice([1, 4])]
        if rng.random() < 0.05:
            v[-2] += 1
        elif rng.random() < 0.05:
            v = [5] + v
        cases.append((a, b, tb, bias, mask, v))
    rows = [f"{_fmt(a)};{_fmt(b)};{int(tb)};{_fmt(bias)};{_fmt(mask)};{_fmt(v)}" for a, b, tb, bias, mask, v in cases]
    n_err = _cli_refusals(canonical_cli, cases, rows,
                          lambda a, b, tb, bias, mask, v: canonicalize(a, b, tb, bias, mask, v_shape=v), fields=1)
    assert 50 < n_err < len(cases) - 500  # both paths exercised


def _bsnh_case(rng):
    """FusedAttention shapes with random BSNH flags (Q, K, V, O): batch or heads 1 now and then (broadcast), and
    now and then a case the op refuses (a rank-3 BSNH tensor, BSNH K with transB=0, V of the other layout)."""
    flags = [rng.random() < 0.5 for _ in range(4)]
    b, h, m, n, d = rng.choice([1, 2, 3]), rng.choice([1, 2, 4]), rng.randint(1, 9), rng.randint(0, 9), rng.choice([8, 16])
    tb = flags[1] or rng.random() < 0.7

    def shape(flag, s, own_b, own_h, last):
        return [own_b, s, own_h, last] if flag else [own_b, own_h, s, last]
    q = shape(flags[0], m, rng.choice([b, 1]) if rng.random() < 0.2 else b, h, d)
    k = shape(flags[1], n, b, h, d) if tb else [b, h, d, n]
    v = shape(flags[2], n, b, rng.choice([h, 1]) if rng.random() < 0.2 else h, d)
    bias = [b, 1, m, n] if rng.random() < 0.3 else None
    mask = [1, h, 1, n] if rng.random() < 0.2 else None
    r = rng.random()
    if r < 0.04:
        q = q[1:]
    elif r < 0.08:
        tb = False
    elif r < 0.12:
        v = [b, n, h, d] if not flags[2] else [b, h, n, d]
    return q, k, int(tb), bias, mask, v, [int(f) for f in flags]


def test_canonical_cpp_matches_python_bsnh(canonical_cli):
    """FusedAttention's BSNH tensors (attribute bsnh): the two ports agree on shapes, strides and refusals."""
    rng = random.Random(2)
    cases = [_bsnh_case(rng) for _ in range(1500)]
    rows = [f"{_fmt(q)};{_fmt(k)};{tb};{_fmt(bias)};{_fmt(mask)};{_fmt(v)};{_fmt(flags)}"
            for q, k, tb, bias, mask, v, flags in cases]
    n_err = _cli_refusals(canonical_cli, cases, rows, lambda q, k, tb, bias, mask, v, flags: canonicalize(
        q, k, tb, bias, mask, v_shape=v, bsnh=flags), fields=2)
    assert 50 < n_err < len(cases) - 500  # both paths exercised


def _packed_case(rng):
    """FusedAttention with packed_qkv: one [batch, sequence, 3, heads, head size] tensor as Q, K and V, O BSNH or
    not, batch or heads 1 now and then; now and then a case the op refuses (bsnh not flagging Q, K and V, K another
    tensor's shape, a rank-4 or 2-slice tensor)."""
    b, s, h, d = rng.choice([1, 2, 3]), rng.randint(1, 9), rng.choice([1, 2, 4]), rng.choice([8, 16])
    qkv = [b, s, 3, h, d]
    k, v, flags = list(qkv), list(qkv), [1, 1, 1, int(rng.random() < 0.5)]
    bias = [b, 1, s, s] if rng.random() < 0.3 else None
    mask = [1, h, 1, s] if rng.random() < 0.2 else None
    r = rng.random()
    if r < 0.04:
        flags[rng.randint(0, 2)] = 0
    elif r < 0.08:
        k = [b, s + 1, 3, h, d]
    elif r < 0.12:
        qkv = k = v = [b, s, 2, h, d]
    elif r < 0.16:
        qkv = k = v = [b, s, h, d]
    return qkv, k, bias, mask, v, flags


def test_canonical_cpp_matches_python_packed_qkv(canonical_cli):
    """packed_qkv: the two ports agree on shapes, strides, K's and V's offsets and refusals."""
    rng = random.Random(3)
    cases = [_packed_case(rng) for _ in range(800)]
    rows = [f"{_fmt(q)};{_fmt(k)};1;{_fmt(bias)};{_fmt(mask)};{_fmt(v)};{_fmt(flags)};1"
            for q, k, bias, mask, v, flags in cases]
    n_err = _cli_refusals(canonical_cli, cases, rows, lambda q, k, bias, mask, v, flags: canonicalize(
        q, k, True, bias, mask, v_shape=v, bsnh=flags, packed_qkv=True), fields=3)
    assert 30 < n_err < len(cases) - 500  # both paths exercised


# ------------------------------------------------------------------------------------ CUDA EP specifics

def _cuda_value(x: np.ndarray, device_id: int = 0) -> ort.OrtValue:
    return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(x), "cuda", device_id)


# test_cuda_tensor_core_kernel's calls: (dtype, transB, K, batch, M, N, extras); the CUDA test bundle holds their
# variants' tensor-core kernels (TENSOR_CORE_PAIRS)
TENSOR_CORE_CASES = [
    ("float16", 1, 64, 2, 70, 1024, {}), ("float16", 1, 64, 1, 130, 1500, {}), ("float16", 1, 128, 2, 40, 1030, {}),
    ("float16", 1, 64, 2, 50, 197, {}), ("bfloat16", 0, 128, 2, 129, 1032, {"causal": 1}),
    ("float16", 1, 64, 1, 1100, 1030, {"causal": 1}), ("float16", 1, 64, 2, 33, 1500, {"bias_shape": [1500]}),
    ("bfloat16", 1, 128, 2, 65, 1090, {"mask": "bool"}), ("float16", 0, 64, 2, 64, 1024, {"mask": "add", "causal": 1})]


def _tensor_core_pairs():
    from flashgemm.op.variant import Variant  # noqa: PLC0415
    return [(Variant(d, bool(tb), "bias_shape" in x, x.get("mask", "none"), bool(x.get("causal"))), k)
            for d, tb, k, _, _, _, x in TENSOR_CORE_CASES]


def _nan_row_and_column(trans_b):
    """poke: NaN in a row of A (that row of P is NaN) and +inf in one column of B's last batch (every row of it that
    sees the column is NaN)."""
    def poke(feeds):
        feeds["A"][(0,) * (feeds["A"].ndim - 2) + (3, 1)] = np.nan
        b = feeds["B"]
        b[(-1,) * (b.ndim - 2) + ((5, 2) if trans_b else (2, 5))] = np.inf
    return poke


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_tensor_core_kernel(so, monkeypatch, capfd):
    """sm_90: FusedGemmSoftmax's Hopper kernel (fused_gemm_softmax_wgmma) serves K = 64 and 128 at every length of P's
    store widths (N % 8, % 4, % 2, odd; past its min_n, and below it where the test bundle has no kernel of the
    shape's own), with bias, masks (a fully masked row), causal with M < N and M > N (zero columns past every tile's
    diagonal), B as [K, N], bf16, and NaN / +inf in A and B, all matching FP64."""
    from flashgemm.kernel import fused_gemm_softmax_wgmma  # noqa: PLC0415
    if _local_cuda_target() != "sm_90":
        pytest.skip("the Hopper kernel ships in sm_90 bundles")
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    rng = np.random.default_rng(21)
    assert fused_gemm_softmax_wgmma.MIN_N <= 1024  # the cases' N: past it, and below it
    for dtype, trans_b, k, batch, m, n, extra in TENSOR_CORE_CASES:
        mask = None
        if extra.get("mask") == "bool":
            mask = rng.random((batch, 1, m, n)) > 0.3
            mask[0, 0, 2] = False  # a fully masked row: zeros
        elif extra.get("mask") == "add":
            mask = np.where(rng.random((batch, 1, 1, n)) < 0.3, -np.inf, 0.5)
        check(so, dtype, [batch, 2, m, k], [batch, 2, n, k] if trans_b else [batch, 2, k, n],
              extra.get("bias_shape"), mask, trans_b=trans_b, causal=extra.get("causal", 0), seed=m + n,
              poke=_nan_row_and_column(trans_b))
        err = capfd.readouterr().err
        assert f"_wgmma_k{k} (" in err, (dtype, trans_b, k, m, n, extra, err)


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_device_memory_zero_copy(so, monkeypatch, capfd):
    """Inputs and P in device memory (IOBinding): the op reads and writes them in place, on the GPU."""
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    rng = np.random.default_rng(11)
    a, b = rand(rng, [2, 4, 33, 64], "float16"), rand(rng, [2, 4, 47, 64], "float16")
    keep = rng.random((2, 1, 1, 47)) < 0.8
    sess = session(so, make_model("float16", a.shape, b.shape, mask_shape=keep.shape, mask_dtype="bool",
                                  scale=0.125, trans_b=1))
    p_dev = ort.OrtValue.ortvalue_from_shape_and_type([2, 4, 33, 47], np.float16, "cuda", 0)
    ptr = p_dev.data_ptr()
    binding = sess.io_binding()
    for name, x in (("A", a), ("B", b), ("mask", keep)):
        binding.bind_ortvalue_input(name, _cuda_value(x))
    binding.bind_ortvalue_output("P", p_dev)
    sess.run_with_iobinding(binding)
    out = binding.get_outputs()[0]
    assert out.device_name().lower() == "cuda" and out.data_ptr() == ptr  # written in place, no copy
    ref = fused_gemm_softmax_ref(a, b, None, keep, scale=0.125, trans_b=1)
    np.testing.assert_allclose(p_dev.numpy().astype(np.float64), ref, rtol=0, atol=ATOL["float16"])
    assert " on cuda:0\n" in capfd.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_graph_capture_uses_orts_stream(so):
    """ORT's CUDA-graph mode captures every kernel launched on its compute stream and replays the graph on
    later runs. A kernel launched on another stream either breaks the capture or is missing from the replay
    (stale P after new inputs are copied into the bound buffers); both fail here. float16 only: onnxruntime's
    Python OrtValue cannot fill or read a bfloat16 device buffer, and the launch path does not depend on T."""
    dtype, shape_a, shape_b = "float16", [3, 40, 64], [3, 64, 50]
    opts_graph = Opts(so.so, [("CUDAExecutionProvider", {"enable_cuda_graph": "1"}), "CPUExecutionProvider"])
    sess = session(opts_graph, make_model(dtype, shape_a, shape_b, [50]))
    rng = np.random.default_rng(12)
    a_dev, b_dev, bias_dev = (_cuda_value(rand(rng, s, dtype)) for s in (shape_a, shape_b, [50]))
    p_dev = ort.OrtValue.ortvalue_from_shape_and_type([3, 40, 50], np.float16, "cuda", 0)
    binding = sess.io_binding()
    for name, v in (("A", a_dev), ("B", b_dev), ("bias", bias_dev)):
        binding.bind_ortvalue_input(name, v)
    binding.bind_ortvalue_output("P", p_dev)
    for step in range(4):  # the first runs warm up and capture; the later ones replay
        a, b, bias = rand(rng, shape_a, dtype), rand(rng, shape_b, dtype), rand(rng, [50], dtype)
        for v, x in ((a_dev, a), (b_dev, b), (bias_dev, bias)):
            v.update_inplace(x)
        sess.run_with_iobinding(binding)
        np.testing.assert_allclose(p_dev.numpy().astype(np.float64), fused_gemm_softmax_ref(a, b, bias), rtol=0,
                                   atol=ATOL[dtype], err_msg=f"run {step}")


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_two_sessions_concurrently(so):
    """Two sessions of different models on one GPU, each run from 4 threads at once."""
    rng = np.random.default_rng(13)
    specs = [("float16", [4, 33, 40], [40, 29], [29]), ("bfloat16", [2, 3, 70, 64], [2, 3, 64, 90], None)]
    sessions = [session(so, make_model(dt, sa, sb, bias)) for dt, sa, sb, bias in specs]
    cases = []
    for i in range(8):
        dt, sa, sb, bias = specs[i % 2]
        feeds = {"A": rand(rng, sa, dt), "B": rand(rng, sb, dt)}
        if bias:
            feeds["bias"] = rand(rng, bias, dt)
        cases.append((sessions[i % 2], feeds, fused_gemm_softmax_ref(feeds["A"], feeds["B"], feeds.get("bias")),
                      ATOL[dt]))
    run_concurrently(cases, reps=10)


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_bundle_for_another_arch(bundle, device, tmp_path, monkeypatch):
    """A bundle built for another GPU arch: an ORT error naming both archs and the fix; the process survives."""
    d = tmp_path / "other-arch"
    d.mkdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    for so in kernel_libraries(bundle):
        shutil.copy(so, d)
    local = manifest["target"]
    manifest["target"] = "sm_80" if local.startswith("sm_9") else "sm_90"
    (d / "manifest.json").write_text(json.dumps(manifest))
    other = opts(d, device)
    sess = session(other, make_model("float16", [2, 3, 4], [4, 5]))
    with pytest.raises(Exception) as ei:
        run(sess, {"A": _z([2, 3, 4]), "B": _z([4, 5])})
    msg = str(ei.value)
    for needle in (f"was built for {manifest['target']} but GPU 0 is {local}", "flashgemm-build --target auto",
                   str(d)):
        assert needle in msg, msg
    check(opts(bundle, device), "float16", [2, 3, 4], [4, 5])


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_second_gpu(so, monkeypatch, capfd):
    """With several GPUs, a session on GPU 1 runs the op on GPU 1 (inputs live there)."""
    import tvm  # noqa: PLC0415
    if not tvm.cuda(1).exist:
        pytest.skip("needs 2 GPUs")
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    sess = ort.InferenceSession(make_model("float16", [2, 50, 64], [2, 64, 70]).SerializeToString(), so.so,
                                providers=[("CUDAExecutionProvider", {"device_id": "1"}), "CPUExecutionProvider"])
    rng = np.random.default_rng(14)
    a, b = rand(rng, [2, 50, 64], "float16"), rand(rng, [2, 64, 70], "float16")
    (p,) = run(sess, {"A": a, "B": b})
    np.testing.assert_allclose(p.astype(np.float64), fused_gemm_softmax_ref(a, b), rtol=0, atol=ATOL["float16"])
    assert " on cuda:1\n" in capfd.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_tuned_kernels_serve_other_batches(bundle, so, monkeypatch, capfd):
    """Each tuned kernel of the bundle (the committed databases', for any batch) at its tuned batch and at two
    others, through ORT on the GPU, against the reference; its fixed-batch twin serves the calls with the twin's
    static B0 or B1, the plain any-batch kernel one call that the twin cannot take (B broadcast over A's first
    batch dim, or one more head)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    tuned = [f for f in manifest["functions"] if f["tuned"] and f["any_batch"] and not f.get("fixed_batch")]
    assert tuned, "the committed flashgemm/databases has tuned kernels for this arch; the bundle should list them"
    def key(f):  # a kernel's variant and sizes: a twin's are its plain kernel's
        return (f["dtype"], f["trans_b"], f["bias"], f["mask"], f["causal"], *f["sizes"])
    fixed = [f for f in manifest["functions"] if f["tuned"] and f.get("fixed_batch")]
    twins = {key(f): f for f in fixed if f.get("scale") is None}
    scaled = {key(f): f for f in fixed if f.get("scale") is not None}  # the twins specialized on their scale
    from flashgemm.tune import database  # noqa: PLC0415
    from flashgemm.bundle import twins as verdicts
    left_out = {p.name for p in (database.default_root() / manifest["target"]).iterdir()
                if (p / database.PROVENANCE).exists() and not verdicts.ships_twin(database.read_provenance(p))}
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    rng = np.random.default_rng(15)
    for f in tuned:
        b0, b1, m, n, k = f["sizes"]
        if b1 * m * max(n, k) > 2**25:
            continue  # the LM head: its reference in float64 takes minutes on the host
        dtype, twin, twin_scaled = f["dtype"], twins.get(key(f)), scaled.get(key(f))
        calls = [([batch, b1], [batch, b1], None) for batch in (b0, 1, b0 + 3)]  # (A's batch dims, B's, scale)
        if twin is None:  # left out by a benchmark's verdict (flashgemm/bundle/twins.py): the plain kernel serves all
            assert f["workload"] in left_out, f"{f['name']}: no fixed-batch twin in the bundle"
            dim, value = 0, None
        else:
            dim, value = twin["fixed_batch"]
            # one call the twin cannot take: B0 = 2 that does not merge into B1 (B broadcast over A's first dim), or
            # B1 = one head more than the twin's
            calls.append(([2, b1], [b1], None) if dim == 0 else ([b0, value + 1], [b0, value + 1], None))
            if twin_scaled is not None:  # the twin's batch at its scale (the specialized twin; a workload's scale
                # need not be 1/sqrt(K), e.g. 0.0884 at K = 128), and at another scale (the plain twin)
                for s in (twin_scaled["scale"], twin_scaled["scale"] * 0.5):
                    calls.append(([1, b1], [1, b1], s) if dim == 0 else ([b0, value], [b0, value], s))
        served = set()
        for a_batch, b_batch, scale in calls:
            a_shape = [*a_batch, m, k]
            b_shape = [*b_batch, n, k] if f["trans_b"] else [*b_batch, k, n]
            bias_shape = [a_batch[0], 1, 1, n] if f["bias"] else None
            mask = {"none": None, "bool": rng.random([a_batch[0], 1, 1, n]) < 0.9,
                    "add": -3.0 * rng.random([a_batch[0], 1, 1, n])}[f["mask"]]
            check(so, dtype, a_shape, b_shape, bias_shape, mask=mask, scale=scale, trans_b=f["trans_b"],
                  causal=f["causal"], seed=a_batch[0])
            sizes = canonicalize(a_shape, b_shape, bool(f["trans_b"]), bias_shape,
                                 None if mask is None else list(mask.shape)).sizes
            call_scale = float(np.float32(1.0 / np.sqrt(k) if scale is None else scale))  # check's default
            by = twin if sizes[dim] == value else f
            tag = f"tuned, B{dim}={value}" if by is twin else "tuned"
            if by is twin and twin_scaled is not None and call_scale == twin_scaled["scale"]:
                by, tag = twin_scaled, f"{tag}, scale={float(np.float32(call_scale)):.9g}"
            assert f"{by['name']} ({tag}) sizes=[{','.join(map(str, sizes))}]" in capfd.readouterr().err, (f, a_batch)
            served.add(by["name"])
        expect = {f["name"]} | ({twin["name"]} if twin else set()) | ({twin_scaled["name"]} if twin_scaled else set())
        assert served == expect, (f["name"], served)


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_lm_head_tuned_kernel(bundle, so, monkeypatch, capfd):
    """The LM head (4096 x 32000 x 4096, the split-N form; on the H100 its tuned records are wgmma kernels built for
    sm_90a) through ORT on the GPU: the tuned kernel serves the call; every row of P sums to 1, and 32 sampled rows
    match the FP64 reference within 2 % of their largest probability (the whole reference would take minutes)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    heads = [f for f in manifest["functions"] if f["tuned"] and f["workload"].startswith("lm-head.")
             and not f.get("fixed_batch")]
    assert heads, "the committed flashgemm/databases has the LM head for this arch; the bundle should list it"
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    rng = np.random.default_rng(3)
    for f in heads:
        _, _, m, n, k = f["sizes"]
        dtype, scale = f["dtype"], k ** -0.5
        a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
        model = make_model(dtype, a.shape, b.shape, None, None, None, scale=scale, trans_b=0, causal=0)
        (p,) = run(session(so, model), {"A": a, "B": b})
        served = capfd.readouterr().err  # the tuned kernel or its fixed-batch twin, never the generic one
        assert " (tuned" in served and f"sizes=[1,1,{m},{n},{k}]" in served and p.shape == (m, n), served[-500:]
        p = p.astype(np.float64)
        assert np.isfinite(p).all() and np.abs(p.sum(-1) - 1).max() < 2e-2
        rows = rng.choice(m, 32, replace=False)
        s = (a[rows].astype(np.float64) @ b.astype(np.float64)) * scale
        ref = np.exp(s - s.max(-1, keepdims=True))
        ref /= ref.sum(-1, keepdims=True)
        err = np.abs(p[rows] - ref) / ref.max(-1, keepdims=True)
        assert err.max() < 2e-2, (f["name"], err.max())


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_default_schedule_kernel(bundle, device, tmp_path, monkeypatch, capfd):
    """flashgemm-build --workload for an untuned shape: the bundle's default-schedule kernel
    (flashgemm/spaces/cuda_default) serves that shape at any batch through ORT, right; another shape of the variant
    still gets the generic kernel."""
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    from flashgemm.bundle import best  # noqa: PLC0415
    target = _local_cuda_target()
    wl = parse("a=2x6x100x72,b=2x6x300x72,transB=1,bias=2x1x100x300,name=odd")
    kernels = best.with_defaults([], [wl], target, log=lambda *a: None)
    assert [k.kind for k in kernels] == ["default"]
    d = tmp_path / "with-default"
    export_bundle(d, target, kernels, variants=[wl.variant], log=lambda *a: None)
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    so = opts(d, device)
    # its B1 = 6 twin serves 6 heads at any batch, the plain default kernel 5 heads, the generic kernel M = 99
    for batch, heads, m, kind in ((2, 6, 100, "default, B1=6"), (5, 6, 100, "default, B1=6"), (2, 5, 100, "default"),
                                  (2, 6, 99, "generic")):
        check(so, "float16", [batch, heads, m, 72], [batch, heads, 300, 72], [batch, 1, m, 300], trans_b=1, seed=batch)
        assert f"({kind}) sizes=[{batch},{heads},{m},300,72]" in capfd.readouterr().err, (batch, heads, m)


if __name__ == "__main__":  # the CUDA test bundle, prebuilt (FLASHGEMM_TEST_CUDA_BUNDLE)
    from flashgemm.bundle import best
    export_bundle(sys.argv[1], _local_cuda_target() if len(sys.argv) < 3 else sys.argv[2],
                  best.load_all(sys.argv[2] if len(sys.argv) > 2 else _local_cuda_target()),
                  tensor_core=_tensor_core_pairs())
