"""Property tests of flashgemm::FusedGemmSoftmax through ONNX Runtime's CPU EP (llvm bundle: the generic kernels), by
hypothesis, against the FP64 reference (flashgemm.op.reference.fused_gemm_softmax_ref):

* any shapes (M, N, K from 0 or 1 to 9, up to three batch dims that A, B, the bias and the mask each broadcast in their
  own way), masks (bool or additive, -inf and -1e9 included), causal, transB, a scale, and NaN / +-inf written into
  any input: P matches the reference, NaN exactly where the reference has NaN;
* the op fails (an ORT error naming the inputs) exactly when the shapes do not broadcast as ONNX MatMul and the
  contract say, as numpy decides it independently; shapes that do broadcast either run right or, where they need
  more than the two independent batch dims the kernels take, fail with the error that says so.

The example budget is fixed (and derandomized) so the run takes the same few tens of seconds everywhere.
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flashgemm.bundle.kernel_library import export_bundle  # noqa: E402
from flashgemm.ort.model import make_model  # noqa: E402
from flashgemm.ort.session import run, session_options  # noqa: E402
from flashgemm.op.reference import fused_gemm_softmax_ref  # noqa: E402

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2}
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def so(tmp_path_factory):
    os.environ.pop("FLASHGEMM_BUNDLE_DIR", None)
    d = tmp_path_factory.mktemp("bundle_properties")
    export_bundle(d, "llvm", log=lambda *a: None)
    return session_options(d)


def _broadcast_from(out_batch, draw, rank_min=0):
    """A batch shape that broadcasts to out_batch: a suffix of it, each dim kept or set to 1."""
    rank = draw(st.integers(min(rank_min, len(out_batch)), len(out_batch)))
    return [d if draw(st.booleans()) else 1 for d in out_batch[len(out_batch) - rank:]]


@st.composite
def problems(draw):
    batch = draw(st.lists(st.integers(1, 3), max_size=3))
    m, n, k = draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(st.integers(0, 9))
    trans_b = draw(st.booleans())
    a_shape = _broadcast_from(batch, draw) + [m, k]
    b_shape = _broadcast_from(batch, draw) + ([n, k] if trans_b else [k, n])
    out = list(np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))) + [m, n]
    bias_shape = _broadcast_from(out, draw, rank_min=1) if draw(st.booleans()) else None
    mask_kind = draw(st.sampled_from(["none", "bool", "add"]))
    mask_shape = None if mask_kind == "none" else _broadcast_from(out, draw, rank_min=1)
    return dict(dtype=draw(st.sampled_from(sorted(NP))), a_shape=a_shape, b_shape=b_shape, bias_shape=bias_shape,
                mask_kind=mask_kind, mask_shape=mask_shape, trans_b=trans_b, causal=draw(st.booleans()),
                scale=draw(st.sampled_from([1.0, 0.125, -0.5, 3.0])), seed=draw(st.integers(0, 2 ** 16)),
                pokes=draw(st.lists(st.tuples(st.sampled_from(["A", "B", "bias", "mask"]), st.integers(0, 10 ** 6),
                                              st.sampled_from([np.nan, np.inf, -np.inf])), max_size=3)))


def _feeds(p):
    rng = np.random.default_rng(p["seed"])
    nd = NP[p["dtype"]]
    feeds = {"A": rng.standard_normal(p["a_shape"]).astype(nd), "B": rng.standard_normal(p["b_shape"]).astype(nd)}
    if p["bias_shape"] is not None:
        feeds["bias"] = rng.standard_normal(p["bias_shape"]).astype(nd)
    if p["mask_kind"] == "bool":
        feeds["mask"] = rng.random(p["mask_shape"]) < 0.8
    elif p["mask_kind"] == "add":
        with np.errstate(over="ignore"):  # -1e9 is -inf in fp16
            feeds["mask"] = rng.choice([0.0, -0.5, -1e9, -np.inf], p["mask_shape"]).astype(nd)
    for name, at, value in p["pokes"]:
        x = feeds.get(name)
        if x is not None and x.size and x.dtype != np.bool_:
            x.reshape(-1)[at % x.size] = value
    return feeds


def _model(p, dtype=None):
    return make_model(dtype or p["dtype"], p["a_shape"], p["b_shape"], p["bias_shape"], p["mask_shape"],
                      "bool" if p["mask_kind"] == "bool" else None, scale=p["scale"], trans_b=int(p["trans_b"]),
                      causal=int(p["causal"]))


@SETTINGS
@given(p=problems())
def test_the_op_matches_the_reference(so, p):
    feeds = _feeds(p)
    sess = ort.InferenceSession(_model(p).SerializeToString(), so, providers=["CPUExecutionProvider"])
    try:
        (out,) = run(sess, feeds)
    except Exception as err:  # noqa: BLE001  (only the documented limit of two independent batch dims)
        assert "independent batch dims" in str(err), err
        return
    ref = fused_gemm_softmax_ref(feeds["A"], feeds["B"], feeds.get("bias"), feeds.get("mask"), scale=p["scale"],
                                 trans_b=p["trans_b"], causal=p["causal"])
    assert out.shape == ref.shape and out.dtype == NP[p["dtype"]]
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=0, atol=ATOL[p["dtype"]])  # NaN where ref has NaN


def _dims(draw, rank_max=3):
    return draw(st.lists(st.integers(1, 3), max_size=rank_max))


@st.composite
def any_shapes(draw):
    """Shapes drawn independently of each other: most do not fit together."""
    trans_b = draw(st.booleans())
    a = _dims(draw) + [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    b = _dims(draw) + [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    extra = st.none() | st.lists(st.integers(1, 4), min_size=1, max_size=5)
    mask_shape = draw(extra)
    return dict(dtype="float16", a_shape=a, b_shape=b, bias_shape=draw(extra),
                mask_kind="none" if mask_shape is None else "add", mask_shape=mask_shape, trans_b=trans_b,
                causal=False, scale=1.0, seed=0, pokes=[])


def _numpy_says_it_broadcasts(p) -> bool:
    a, b = p["a_shape"], p["b_shape"]
    n, kb = (b[-2], b[-1]) if p["trans_b"] else (b[-1], b[-2])
    if a[-1] != kb:
        return False
    try:
        out = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])) + (a[-2], n)
        return all(s is None or np.broadcast_shapes(tuple(s), out) == out for s in (p["bias_shape"], p["mask_shape"]))
    except ValueError:
        return False


@SETTINGS
@given(p=any_shapes())
def test_the_op_fails_exactly_when_the_shapes_do_not_broadcast(so, p):
    sess = ort.InferenceSession(_model(p).SerializeToString(), so, providers=["CPUExecutionProvider"])
    try:
        run(sess, _feeds(p))
        failed = None
    except Exception as err:  # noqa: BLE001
        failed = str(err)
    if not _numpy_says_it_broadcasts(p):
        assert failed is not None and any(w in failed for w in ("broadcast", "mismatch")), failed
    else:
        assert failed is None or "independent batch dims" in failed, failed
