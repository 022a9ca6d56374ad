"""The attention-score rewrite (flashgemm/ort/rewrite/) on the tiny seed models and on hand-made graphs.

The tiny models in tests/data/ were exported by
    flashgemm-getmodel --model all --tiny --dtype float16 --batch 2 --out tests/data
(2 layers each, so 2 attention sites each); the regeneration test re-exports them when torch and transformers are
installed and checks that the graphs are the same. The dynamic ones (torch 2.14.1, transformers 5.24.0: see their
metadata) by
    flashgemm-getmodel --model all --tiny --dtype float16 --batch 2 --dynamic-batch --out tests/data       (-dynb)
    flashgemm-getmodel --model bert-large --tiny --dtype float16 --batch 2 --dynamic-batch --dynamic-seq \
        --out tests/data                                                                                   (-dyn)
and PyTorch's default export today (torch 2.13.0+cpu, transformers 5.24.0) by the same two with
--exporter dynamo --attention sdpa, for bert-large (-dyn-dynamo-sdpa) and whisper-enc (-dynb-dynamo-sdpa).

Numerics: the tiny float16 originals run on ORT's CPU EP, so the rewritten model is compared with the original
float16 model itself (not an fp32 run). Tolerance on the models' outputs (last_hidden_state, |values| <= ~4): max abs
1e-2, i.e. ~5 float16 ulps at that magnitude (the observed difference is 1 ulp: the fused op keeps the scores in fp32
where the original rounds S, c*S and c*S+M to fp16). Hand-made single-site graphs compare P (in [0, 1]) with atol
2e-3, the op's own float16 tolerance.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from flashgemm.ort import rewrite
from flashgemm.bundle import any_length
from flashgemm.bundle.kernel_library import export_bundle
from flashgemm.ort.session import run, session_options
from flashgemm.op.variant import FILL_LOGIT, MASK_FILL, Variant

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
MODELS = ["bert-large", "vit-b16", "whisper-enc"]
TINY = {m: DATA / f"{m}-tiny.f16.onnx" for m in MODELS}
DYN = {f"{m}-dynb": DATA / f"{m}-tiny-dynb.f16.onnx" for m in MODELS}  # symbolic batch
DYN["bert-large-dyn"] = DATA / "bert-large-tiny-dyn.f16.onnx"  # symbolic batch and sequence
# PyTorch's default export today: the dynamo exporter and transformers' SDPA attention (symbolic batch and sequence;
# Whisper: batch)
DYNAMO = {"bert-large-dyn": DATA / "bert-large-tiny-dyn-dynamo-sdpa.f16.onnx",
          "whisper-enc-dynb": DATA / "whisper-enc-tiny-dynb-dynamo-sdpa.f16.onnx"}
DYNAMO_SDPA = {"exporter": "dynamo", "attention": "sdpa"}
LAYERS = 2  # attention layers of every tiny model
CPU = ["CPUExecutionProvider"]
MODEL_ATOL = 1e-2
P_ATOL = 2e-3


@pytest.fixture(scope="module")
def so(tmp_path_factory):
    """A bundle with only the kernels these tests use (float16, transB 0/1, bias 0/1; a bias and an additive mask;
    a causal bias; a bool mask with mask_fill: ~8 s), the op library registered."""
    os.environ.pop("FLASHGEMM_BUNDLE_DIR", None)
    d = tmp_path_factory.mktemp("bundle_rewrite")
    variants = [Variant("float16", tb, b, "none", False) for tb in (False, True) for b in (False, True)] + \
        [Variant("float16", True, True, "add", False), Variant("float16", True, True, "none", True),
         Variant("float16", True, False, "fill", False)]
    export_bundle(d, "llvm", variants=variants, log=lambda *a: None)
    return session_options(d)


def _fused(path, tmp_path):
    out = tmp_path / (Path(path).stem + ".fused.onnx")
    return rewrite.rewrite_file(path, out), out


def _feeds(sess, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(1, 128, i.shape).astype(np.int64)
        elif i.name == "attention_mask":
            m = np.ones(i.shape, np.int64)
            m[0, -5:] = 0  # padding in batch 0 only
            feeds[i.name] = m
        else:
            feeds[i.name] = rng.standard_normal(i.shape).astype(np.float16)
    return feeds


def _ops(model, op_type, domain=""):
    return [n for n in model.graph.node if n.op_type == op_type and n.domain == domain]


# ----------------------------------------------------------------------------------------------- tiny models

@pytest.mark.parametrize("name", MODELS)
def test_tiny_model_files(name):
    path = TINY[name]
    assert path.is_file(), f"{path} missing: flashgemm-getmodel --model all --tiny --dtype float16 --batch 2 " \
                           f"--out tests/data"
    assert path.stat().st_size < 400_000
    m = onnx.load(str(path))
    assert m.ir_version <= 9 and {o.domain: o.version for o in m.opset_import}[""] == 17
    meta = {p.key: p.value for p in m.metadata_props}
    assert meta["flashgemm.model"] == name and meta["flashgemm.tiny"] == "1" and meta["flashgemm.dtype"] == "float16"
    assert "random init" in meta["flashgemm.weights"] and int(meta["flashgemm.attention_layers"]) == LAYERS
    assert len(_ops(m, "Softmax")) == LAYERS


@pytest.mark.parametrize("name", MODELS)
def test_tiny_sites_fused(name, tmp_path):
    report, out = _fused(TINY[name], tmp_path)
    assert len(report.fused) == LAYERS and not report.left_alone and not report.other_softmax, report.text()
    assert report.transb_folded == LAYERS
    assert report.qscale_folded == (LAYERS if name == "whisper-enc" else 0)
    m = onnx.load(str(out))
    nodes = _ops(m, "FusedGemmSoftmax", "flashgemm")
    assert len(nodes) == LAYERS and not _ops(m, "Softmax")
    assert {o.domain: o.version for o in m.opset_import}["flashgemm"] == 1 and m.ir_version <= 9
    for n in nodes:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["transB"] == 1 and attrs["causal"] == 0
        assert abs(attrs["scale"] - 32 ** -0.5) < 1e-3  # head dim 32 (fp16-rounded constant)
        assert len(n.input) == (3 if name == "bert-large" else 2)  # BERT's additive mask goes in as bias
    for site in report.fused:
        if name == "bert-large":  # the mask as the export adds it, and as the op reads it: its Expand dropped
            assert site.details["bias_shape"] == [2, 1, 16, 16] and site.details["narrowed"] == "[2, 1, 1, 16]"
    # the K transposes became [0, 2, 1, 3] (head-major K, transB instead of the last-two-axes swap)
    for n in nodes:
        producer = {o: p for p in m.graph.node for o in p.output}[n.input[1]]
        assert producer.op_type == "Transpose" and list(producer.attribute[0].ints) == [0, 2, 1, 3]


@pytest.mark.parametrize("name", MODELS)
def test_tiny_rewritten_matches_original(so, name, tmp_path):
    _, out = _fused(TINY[name], tmp_path)
    s0 = ort.InferenceSession(str(TINY[name]), providers=CPU)
    s1 = ort.InferenceSession(str(out), so, providers=CPU)
    feeds = _feeds(s0)
    (o0,) = s0.run(None, feeds)
    (o1,) = s1.run(None, feeds)
    assert o1.dtype == np.float16 and o1.shape == o0.shape
    np.testing.assert_allclose(o1.astype(np.float32), o0.astype(np.float32), rtol=0, atol=MODEL_ATOL)


@pytest.mark.parametrize("key", DYN)
def test_tiny_dynamic_model_files(key):
    path = DYN[key]
    assert path.is_file(), f"{path} missing: see this module's docstring for the flashgemm-getmodel command"
    assert path.stat().st_size < 400_000
    m = onnx.load(str(path))
    meta = {p.key: p.value for p in m.metadata_props}
    assert meta["flashgemm.batch"] == "dynamic" and meta["flashgemm.tiny"] == "1"
    assert "torch" in meta["flashgemm.exporter"] and "transformers" in meta["flashgemm.exporter"]
    seq = key == "bert-large-dyn"
    assert meta.get("flashgemm.sequence") == ("dynamic" if seq else None)
    for i in m.graph.input:
        dims = [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]
        assert dims[0] == "batch" and (dims[1] == "sequence") == seq, (i.name, dims)
    assert len(_ops(m, "Softmax")) == LAYERS


@pytest.mark.parametrize("key", DYN)
def test_tiny_dynamic_sites_fused(key, tmp_path):
    report, out = _fused(DYN[key], tmp_path)
    assert len(report.fused) == LAYERS and not report.left_alone and not report.notes, report.text()
    assert report.transb_folded == LAYERS
    if key.startswith("bert"):
        seq = "sequence" if key == "bert-large-dyn" else 16
        assert all(s.details["bias_shape"] == ["batch", 1, seq, seq] for s in report.fused), report.text()
    m = onnx.load(str(out))
    assert len(_ops(m, "FusedGemmSoftmax", "flashgemm")) == LAYERS and not _ops(m, "Softmax")
    # symbolic lengths are said out loud: what serves them on the GPU (any-length kernels up to 2048) and past that
    assert ("note    2 fused site(s) have symbolic lengths" in report.text()) == (key == "bert-large-dyn"), report.text()


@pytest.mark.parametrize("key", DYNAMO)
def test_dynamo_sdpa_sites_fused(key, tmp_path):
    """The dynamo exporter's SDPA: Q and K^T each scaled by sqrt(scale) (BERT; Whisper scales Q itself and passes
    scale 1), K^T written through a 3-D view (Reshape, Transpose [0, 2, 1], Reshape). Both scales fold into the op's,
    and the 3-D transpose into transB=1 on K as [batch, heads, n, d]."""
    report, out = _fused(DYNAMO[key], tmp_path)
    assert len(report.fused) == LAYERS and not report.left_alone and not report.other_softmax, report.text()
    assert report.transb_folded == LAYERS and report.qscale_folded == LAYERS, report.text()
    assert report.kscale_folded == (LAYERS if key.startswith("bert") else 0), report.text()
    # BERT's padding mask, which transformers 5 broadcasts to [batch, 1, sequence, sequence] by ANDing it with an
    # always-true `q_idx >= 0`, reaches the op as [batch, 1, 1, sequence] (narrow_masks)
    assert report.masks_narrowed == (LAYERS if key.startswith("bert") else 0), report.text()
    assert all(s.details.get("narrowed") == "[batch, 1, 1, sequence]" for s in report.fused) == key.startswith("bert")
    m = onnx.load(str(out))
    nodes = _ops(m, "FusedGemmSoftmax", "flashgemm")
    assert len(nodes) == LAYERS and not _ops(m, "Softmax")
    producers = {o: p for p in m.graph.node for o in p.output}
    for n in nodes:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["transB"] == 1 and abs(attrs["scale"] - 32 ** -0.5) < 1e-3, attrs
        k = producers[n.input[1]]  # K itself (head-major), no Mul, Reshape or 3-D Transpose left on its way
        assert k.op_type == "Transpose" and list(k.attribute[0].ints) == [0, 2, 1, 3], k


def test_key_view_not_provably_a_transpose_is_left(tmp_path):
    """Reshape(Transpose(Reshape(K, [-1, n, d]), [0, 2, 1]), s2) folds only where s2 gives back K's leading dims: a
    second Reshape to [h, b, d, n] (heads and batch swapped) is not K^T, and transB stays 0."""
    t = TensorProto.FLOAT16
    shapes = {"s1": [-1, 7, 32], "s2": [3, 2, 32, 7]}
    nodes = [helper.make_node("Reshape", ["K", "s1"], ["K3"]),
             helper.make_node("Transpose", ["K3"], ["Kt3"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["Kt3", "s2"], ["Kt"]),
             helper.make_node("MatMul", ["Q", "Kt"], ["S"]),
             helper.make_node("Softmax", ["S"], ["P"], axis=-1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("Q", t, [3, 2, 5, 32]),
                     helper.make_tensor_value_info("K", t, [2, 3, 7, 32])],
        [helper.make_tensor_value_info("P", t, None)],
        initializer=[helper.make_tensor(k, TensorProto.INT64, [len(v)], v) for k, v in shapes.items()])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(src))
    report, _ = _fused(src, tmp_path)
    assert len(report.fused) == 1 and report.fused[0].details["transB"] == 0 and report.transb_folded == 0, \
        report.text()


@pytest.mark.parametrize("key", DYNAMO)
def test_dynamo_sdpa_rewritten_matches_original(so, key, tmp_path):
    """The folded scales and K^T compute what the export does, at batches (and lengths) other than the traced ones."""
    _, out = _fused(DYNAMO[key], tmp_path)
    s0 = ort.InferenceSession(str(DYNAMO[key]), providers=CPU)
    s1 = ort.InferenceSession(str(out), so, providers=CPU)
    for batch in (1, 3):
        for seq in ((5, 16, 23) if key.startswith("bert") else (None,)):
            feeds = _dyn_feeds(DYNAMO[key], batch, seq, seed=batch * 100 + (seq or 0))
            (o0,) = s0.run(None, feeds)
            (o1,) = s1.run(None, feeds)
            assert o1.shape == o0.shape and o0.shape[0] == batch, (batch, seq)
            np.testing.assert_allclose(o1.astype(np.float32), o0.astype(np.float32), rtol=0, atol=MODEL_ATOL,
                                       err_msg=f"batch {batch} seq {seq}")


def _dyn_feeds(model_path, batch, seq, seed=0):
    """Inputs at a batch (and, for BERT, a sequence length) of our choosing; attention_mask pads batch 0's tail."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in onnx.load(str(model_path), load_external_data=False).graph.input:
        dims = [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]
        shape = [batch if d == "batch" else seq if d == "sequence" else d for d in dims]
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(1, 128, shape).astype(np.int64)
        elif i.name == "attention_mask":
            m = np.ones(shape, np.int64)
            m[0, -max(1, shape[1] // 3):] = 0
            feeds[i.name] = m
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float16)
    return feeds


@pytest.mark.parametrize("key", DYN)
def test_tiny_dynamic_rewritten_matches_original(so, key, tmp_path):
    """The rewritten model equals the original at batches (and sequence lengths) other than the traced 2 (16)."""
    _, out = _fused(DYN[key], tmp_path)
    s0 = ort.InferenceSession(str(DYN[key]), providers=CPU)
    s1 = ort.InferenceSession(str(out), so, providers=CPU)
    lengths = (5, 16, 23) if key == "bert-large-dyn" else (16,)
    for batch in (1, 3):
        for seq in lengths:
            feeds = _dyn_feeds(DYN[key], batch, seq, seed=batch * 100 + seq)
            (o0,) = s0.run(None, feeds)
            (o1,) = s1.run(None, feeds)
            assert o1.shape == o0.shape and o0.shape[0] == batch, (batch, seq)
            np.testing.assert_allclose(o1.astype(np.float32), o0.astype(np.float32), rtol=0, atol=MODEL_ATOL,
                                       err_msg=f"batch {batch} seq {seq}")


def test_without_symbolic_inference_dynamic_sequence_left_alone(tmp_path, monkeypatch):
    """The fallback: without symbolic shape inference the report says why, and the sites whose broadcast it would
    have proven stay as they are (the same bytes)."""
    monkeypatch.setitem(sys.modules, "onnxruntime.tools.symbolic_shape_infer", None)  # import fails
    report, out = _fused(DYN["bert-large-dyn"], tmp_path)
    assert not report.fused and len(report.left_alone) == LAYERS, report.text()
    assert "symbolic shape inference unavailable" in report.notes[0] and "note" in report.text()
    assert all("cannot prove it broadcasts" in s.reasons[0] for s in report.left_alone), report.text()
    assert out.read_bytes() == DYN["bert-large-dyn"].read_bytes()


def test_rewrite_cli(tmp_path):
    out = tmp_path / "bert.fused.onnx"
    r = subprocess.run([sys.executable, "-m", "flashgemm.cli.rewrite", str(TINY["bert-large"]), str(out),
                        "--json", str(tmp_path / "r.json")], capture_output=True, text=True, check=True)
    assert "2 site(s) fused, 0 candidate site(s) left alone" in r.stdout, r.stdout
    assert out.is_file() and '"fused": 2' in (tmp_path / "r.json").read_text()
    assert f"flashgemm-build --target auto --from-model {out}" in r.stdout  # what to do next
    r = subprocess.run([sys.executable, "-m", "flashgemm.cli.rewrite", str(TINY["bert-large"]), str(out), "--attention",
                        "--json", str(tmp_path / "r.json")], capture_output=True, text=True, check=True)
    assert "attention: 2 fused site(s) became FusedAttention" in r.stdout, r.stdout
    assert "flashgemm-build --attention" in r.stdout and '"attention": 2' in (tmp_path / "r.json").read_text()
    # every site FusedAttention: the next step is the build with --attention (tuning takes the original model)
    assert f"flashgemm-build --target auto --attention --from-model {out}" in r.stdout, r.stdout
    assert "flashgemm-tune" not in r.stdout
    llama = DATA / "llama-3.2-1b-tiny-dyn.f16.onnx"  # a decoder: its causal rule taken exactly by default
    r = subprocess.run([sys.executable, "-m", "flashgemm.cli.rewrite", str(llama), str(out), "--attention",
                        "--decoder-causal", "off"], capture_output=True, text=True, check=True)
    assert "the bias holds the causal rule" in r.stdout and "--decoder-causal off keeps it" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-m", "flashgemm.cli.rewrite", str(llama), str(out)], capture_output=True,
                       text=True, check=True)  # FusedGemmSoftmax: the flag would not be exact, so said, not taken
    assert "the bias holds the causal rule" in r.stdout and "--decoder-causal all takes it" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-m", "flashgemm.cli.rewrite", str(llama), str(out), "--decoder-causal"],
                       capture_output=True, text=True, check=True)  # (bare: all)
    assert "2 fused site(s) take a decoder mask's causal rule as the causal flag (--decoder-causal all)" in r.stdout
    r = subprocess.run([sys.executable, "-m", "flashgemm.cli.rewrite", str(llama), str(out), "--attention",
                        "--json", str(tmp_path / "r.json")], capture_output=True, text=True, check=True)
    assert "2 FusedAttention site(s) take a decoder mask's causal rule as the causal flag with causal_fill" in r.stdout, \
        r.stdout
    assert {"causal_taken": 2, "causal_exact": 2, "decoder_causal": "exact"}.items() <= \
        json.loads((tmp_path / "r.json").read_text()).items()
    # its variant (the padding row a bias under the causal flag, causal_fill) is one the default build gives
    # tensor-core kernels
    found = rewrite.model_attention_variants(out)
    assert [(v.has_bias, v.causal, v.causal_fill) for v in found] == [(True, True, True)], found
    assert set(found) <= set(any_length.ATTENTION_COMMON_VARIANTS)


def test_rewrite_reads_external_data_beside_the_model(tmp_path, monkeypatch):
    """A model over 2 GB keeps its weights in a file beside it (every LLM's export): symbolic shape inference reads
    the small ones from there, not from the working directory, so its dynamic sites fuse as the one-file model's."""
    src = DATA / "llama-3.2-1b-tiny-dyn.f16.onnx"
    ext = tmp_path / "model" / "llama.onnx"
    ext.parent.mkdir()
    onnx.save(onnx.load(str(src)), str(ext), save_as_external_data=True, all_tensors_to_one_file=True,
              location="llama.onnx.data", size_threshold=0)
    monkeypatch.chdir(tmp_path)
    one = rewrite.rewrite_file(src, tmp_path / "one.onnx", attention=True, decoder_causal=True)
    two = rewrite.rewrite_file(ext, tmp_path / "two.onnx", attention=True, decoder_causal=True)
    assert len(two.fused) == len(one.fused) == 2 and "symbolic shape inference failed" not in two.text(), two.text()
    ops = [[n.op_type for n in onnx.load(str(tmp_path / f)).graph.node] for f in ("one.onnx", "two.onnx")]
    assert ops[0] == ops[1] and ops[0].count("FusedAttention") == 2


def test_regenerate_tiny_models_match(tmp_path):
    pytest.importorskip("torch", reason="regenerating the tiny models needs torch (pip install -e '.[models]')")
    pytest.importorskip("transformers", reason="regenerating the tiny models needs transformers "
                                               "(pip install -e '.[models]')")
    from flashgemm.ort import models  # noqa: PLC0415
    cases = [(name, TINY[name], {}) for name in MODELS] + \
            [(name, DYN[f"{name}-dynb"], {"dynamic_batch": True}) for name in MODELS] + \
            [("bert-large", DYN["bert-large-dyn"], {"dynamic_batch": True, "dynamic_seq": True})] + \
            [("bert-large", DYNAMO["bert-large-dyn"], {"dynamic_batch": True, "dynamic_seq": True, **DYNAMO_SDPA}),
             ("whisper-enc", DYNAMO["whisper-enc-dynb"], {"dynamic_batch": True, **DYNAMO_SDPA})] + \
            [("llama-3.2-1b", DATA / "llama-3.2-1b-tiny-dyn.f16.onnx", {"dynamic_batch": True, "dynamic_seq": True}),
             ("llama-3.2-1b", DATA / "llama-3.2-1b-tiny-dyn-dynamo-sdpa.f16.onnx",
              {"dynamic_batch": True, "dynamic_seq": True, **DYNAMO_SDPA})] + \
            [("llama-3.2-1b-step", DATA / "llama-3.2-1b-step-tiny.f16.onnx", {})] + \
            [(name, DATA / f"{name}-tiny-dyn{how}.f16.onnx",
              {"dynamic_batch": True, "dynamic_seq": True, **({"exporter": "dynamo"} if how else {})})
             for name in ("mpnet-base", "deberta-v3-base") for how in ("", "-dynamo")]
    for name, path, dyn in cases:
        new = onnx.load(str(models.export(name, tmp_path, tiny=True, dtype="float16", batch=2, log=lambda *a: None,
                                          **dyn)))
        old = onnx.load(str(path))
        assert _structure(new) == _structure(old), name
        meta_old = {p.key: p.value for p in old.metadata_props}
        meta_new = {p.key: p.value for p in new.metadata_props}
        assert {k: v for k, v in meta_new.items() if k != "flashgemm.exporter"} == \
               {k: v for k, v in meta_old.items() if k != "flashgemm.exporter"}
        if meta_new["flashgemm.exporter"] == meta_old["flashgemm.exporter"]:  # same torch/transformers: same weights
            for a, b in zip(old.graph.initializer, new.graph.initializer):
                assert a.raw_data == b.raw_data, (name, a.name)


def _structure(m):
    def attrs(n):
        return sorted((a.name, str(helper.get_attribute_value(a))) for a in n.attribute if a.type != a.TENSOR)

    def vi(v):
        t = v.type.tensor_type
        return v.name, t.elem_type, [d.dim_value or d.dim_param for d in t.shape.dim]

    return {
        "ir": m.ir_version, "opsets": sorted((o.domain, o.version) for o in m.opset_import),
        "nodes": [(n.op_type, n.domain, list(n.input), list(n.output), attrs(n)) for n in m.graph.node],
        "inputs": [vi(v) for v in m.graph.input], "outputs": [vi(v) for v in m.graph.output],
        "initializers": [(t.name, t.data_type, list(t.dims)) for t in m.graph.initializer],
    }


# --------------------------------------------------------------------------------------- hand-made graphs

T = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16, "float32": TensorProto.FLOAT}
NPT = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}


def attention(dtype="float16", q=(2, 3, 5, 8), k=(2, 3, 7, 8), *, k_perm=(0, 1, 3, 2), scale_op="Mul", scale=0.25,
              scale_input=False, scale_first=False, add=None, add_dims=None, add_first=False, axis=-1,
              scores_output=False, k_t_output=False):
    """Q [.., M, D], K [.., N, D] -> Softmax(axis)([Add]([Mul|Div](MatMul(Q, Transpose(K, k_perm)), scale), mask)).

    scale_input: the scale is a graph input (not a constant). add: the mask's shape (its dims may be strings);
    add_dims overrides the declared dims only. scores_output: MatMul's output is also a graph output.
    """
    t = T[dtype]
    inputs = [helper.make_tensor_value_info("Q", t, list(q)), helper.make_tensor_value_info("K", t, list(k))]
    inits, nodes = [], []
    b = "K"
    if k_perm is not None:
        nodes.append(helper.make_node("Transpose", ["K"], ["Kt"], perm=list(k_perm)))
        b = "Kt"
    nodes.append(helper.make_node("MatMul", ["Q", b], ["S"]))
    x = "S"
    if scale_op:
        if scale_input:
            inputs.append(helper.make_tensor_value_info("c", t, []))
        else:
            inits.append(helper.make_tensor("c", t, [], np.array(scale, NPT[dtype]).reshape(1).view(np.uint16)
                                            .tobytes() if dtype != "float32" else [scale],
                                            raw=dtype != "float32"))
        ins = ["c", x] if scale_first else [x, "c"]
        nodes.append(helper.make_node(scale_op, ins, ["Ss"]))
        x = "Ss"
    if add is not None:
        inputs.append(helper.make_tensor_value_info("M", t, list(add_dims or add)))
        nodes.append(helper.make_node("Add", ["M", x] if add_first else [x, "M"], ["Sm"]))
        x = "Sm"
    nodes.append(helper.make_node("Softmax", [x], ["P"], axis=axis))
    outputs = [helper.make_tensor_value_info("P", t, None)]
    if scores_output:
        outputs.append(helper.make_tensor_value_info("S", t, None))
    if k_t_output:
        outputs.append(helper.make_tensor_value_info("Kt", t, None))
    graph = helper.make_graph(nodes, "attn", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _rewrite_proto(model, tmp_path, name="m"):
    src, dst = tmp_path / f"{name}.onnx", tmp_path / f"{name}.out.onnx"
    onnx.save(model, str(src))
    report = rewrite.rewrite_file(src, dst)
    return report, src, dst


def _compare(so, src, dst, feeds):
    (p0,) = ort.InferenceSession(str(src), providers=CPU).run(["P"], feeds)
    (p1,) = run(ort.InferenceSession(str(dst), so, providers=CPU), feeds, ["P"])
    np.testing.assert_allclose(p1.astype(np.float64), p0.astype(np.float64), rtol=0, atol=P_ATOL)


def _qkm(q=(2, 3, 5, 8), k=(2, 3, 7, 8), m=None, seed=0, dtype="float16"):
    rng = np.random.default_rng(seed)
    feeds = {"Q": rng.standard_normal(q).astype(NPT[dtype]), "K": rng.standard_normal(k).astype(NPT[dtype])}
    if m is not None:
        feeds["M"] = np.where(rng.random(m) < 0.3, -65504.0, 0.0).astype(NPT[dtype])
    return feeds


@pytest.mark.parametrize("case", ["mul", "mul_first", "div", "none", "add_first", "bias_m_n", "no_transpose"])
def test_synthetic_fused_forms(so, tmp_path, case):
    kw = dict(add=(2, 1, 1, 7))
    if case == "mul_first":
        kw["scale_first"] = True
    elif case == "div":
        kw.update(scale_op="Div", scale=2.0)
    elif case == "none":
        kw.update(scale_op=None)
    elif case == "add_first":
        kw["add_first"] = True
    elif case == "bias_m_n":
        kw["add"] = (5, 7)
    elif case == "no_transpose":
        kw["k_perm"] = None
    k = (2, 3, 8, 7) if case == "no_transpose" else (2, 3, 7, 8)
    report, src, dst = _rewrite_proto(attention(k=k, **kw), tmp_path)
    assert len(report.fused) == 1 and not report.left_alone, report.text()
    d = report.fused[0].details
    assert d["scale"] == {"div": 0.5, "none": 1.0}.get(case, 0.25)
    assert d["transB"] == (0 if case == "no_transpose" else 1)
    m = onnx.load(str(dst))
    assert [n.op_type for n in m.graph.node] == ["FusedGemmSoftmax"]  # Transpose(K, [0,1,3,2]) folded away
    assert not m.graph.initializer  # the scale constant went with its Mul
    _compare(so, src, dst, _qkm(k=k, m=kw["add"]))


@pytest.mark.parametrize("where", ["q_row", "k_column", "mask_nan", "mask_pos_inf"])
def test_special_values_match_the_unfused_graph(so, tmp_path, where):
    """NaN and +inf in the inputs (README, "Special values"), at logits the mask keeps: the rewritten model gives the
    NaN rows ORT's own MatMul + Mul + Add + Softmax gives, and the same numbers elsewhere. (A NaN at a logit the mask
    takes out is where the two differ by design: the fused op never reads a masked logit.)"""
    report, src, dst = _rewrite_proto(attention(add=(2, 1, 1, 7)), tmp_path)
    assert len(report.fused) == 1, report.text()
    feeds = _qkm(m=(2, 1, 1, 7), seed=3)
    feeds["M"][...] = 0  # nothing masked
    feeds["M"][1, 0, 0, 6] = -1.0
    if where == "q_row":
        feeds["Q"][0, 1, 2, 3] = np.nan
    elif where == "k_column":
        feeds["K"][1, 2, 4, 0] = np.nan
    elif where == "mask_nan":
        feeds["M"][0, 0, 0, 5] = np.nan
    else:
        feeds["M"][1, 0, 0, 2] = np.inf
    (p0,) = ort.InferenceSession(str(src), providers=CPU).run(["P"], feeds)
    assert np.isnan(p0).all(axis=-1).any()  # ORT's graph does give NaN rows here
    _compare(so, src, dst, feeds)


def test_transpose_with_another_consumer_kept(so, tmp_path):
    """Kt is also a graph output: the site is fused with transB=0 and the Transpose stays."""
    report, src, dst = _rewrite_proto(attention(add=(2, 1, 1, 7), k_t_output=True), tmp_path)
    assert len(report.fused) == 1 and report.fused[0].details["transB"] == 0 and report.transb_folded == 0
    assert [n.op_type for n in onnx.load(str(dst)).graph.node] == ["Transpose", "FusedGemmSoftmax"]
    _compare(so, src, dst, _qkm(m=(2, 1, 1, 7)))


def test_bfloat16_fused(tmp_path):
    report, _, dst = _rewrite_proto(attention("bfloat16", add=(2, 1, 1, 7)), tmp_path)
    assert len(report.fused) == 1 and report.dtype == "bfloat16"
    assert [n.op_type for n in onnx.load(str(dst)).graph.node] == ["FusedGemmSoftmax"]


def test_float32_left_untouched(tmp_path):
    report, src, dst = _rewrite_proto(attention("float32", add=(2, 1, 1, 7)), tmp_path)
    assert not report.fused and len(report.left_alone) == 1
    reason = report.left_alone[0].reasons[0]
    assert "float32" in reason and "float16/bfloat16 only" in reason and "dynamo exporter" in reason, reason
    assert dst.read_bytes() == src.read_bytes()
    r = subprocess.run([sys.executable, "-m", "flashgemm.cli.rewrite", str(src), str(tmp_path / "o.onnx")],
                       capture_output=True, text=True, check=True)
    assert "0 site(s) fused, 1 candidate site(s) left alone" in r.stdout and "float32" in r.stdout, r.stdout
    assert "--from-model" not in r.stdout


@pytest.mark.parametrize("axis,fused", [(1, False), (-2, False), (0, False), (3, True), (-1, True)])
def test_softmax_axis(tmp_path, axis, fused):
    report, src, dst = _rewrite_proto(attention(axis=axis), tmp_path)
    assert len(report.fused) == int(fused), report.text()
    if not fused:
        assert "not the last axis" in report.left_alone[0].reasons[0]
        assert dst.read_bytes() == src.read_bytes()


def _masked_fill(model, fill, keep_first: bool, negated: bool):
    """`model` (attention(): Softmax(Mul(MatMul, c))) with the scaled scores masked by a Where before the Softmax:
    Where(Not(keep), fill, scores) (keep_first False) or Where(keep, scores, fill), keep a bool input [2, 1, 5, 7];
    negated: the condition is a Not of its own (a Not node that the rewrite keeps) rather than Not(keep)."""
    g = model.graph
    softmax = g.node[-1]
    g.input.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, [2, 1, 5, 7]))
    g.initializer.append(helper.make_tensor("fill", TensorProto.FLOAT16, [], np.array(fill, np.float16).reshape(1)
                                            .view(np.uint16).tobytes(), raw=True))
    cond = "keep"
    if not keep_first:
        g.node.insert(len(g.node) - 1, helper.make_node("Not", ["keep"], ["drop"]))
        cond = "drop"
    if negated:  # Where(Not(Not(drop)), ...) is Where(keep, ...): the rewrite's mask is Not(drop)'s input
        g.node.insert(len(g.node) - 1, helper.make_node("Not", [cond], ["cond2"]))
        cond, keep_first = "cond2", not keep_first
    ins = [cond, softmax.input[0], "fill"] if keep_first else [cond, "fill", softmax.input[0]]
    g.node.insert(len(g.node) - 1, helper.make_node("Where", ins, ["Sw"]))
    softmax.input[0] = "Sw"
    return model


@pytest.mark.parametrize("keep_first,negated", [(False, False), (True, False), (False, True)],
                         ids=["fill-where-true", "fill-where-false", "not-of-a-not"])
def test_masked_fill_becomes_a_bool_mask_with_mask_fill(so, tmp_path, keep_first, negated):
    """Softmax(Where(~keep, lowest, scores)) (torch's masked_fill with finfo.min, as DeBERTa masks its scores) or
    Where(keep, scores, lowest): the op's bool mask with mask_fill=1, the same function, a row masked everywhere
    (uniform over every key) included."""
    report, src, dst = _rewrite_proto(_masked_fill(attention(), -65504.0, keep_first, negated), tmp_path)
    assert len(report.fused) == 1 and report.fused[0].details["mask_fill"] == 1, report.text()
    (node,) = [n for n in onnx.load(str(dst)).graph.node if n.op_type == "FusedGemmSoftmax"]
    assert helper.get_node_attr_value(node, "mask_fill") == 1 and node.input[2] == ""
    assert rewrite.count_ops(dst, "Where") == 0
    feeds = _qkm()
    feeds["keep"] = np.random.default_rng(1).random((2, 1, 5, 7)) < 0.6
    feeds["keep"][1, 0, 3] = False  # a row masked everywhere
    _compare(so, src, dst, feeds)
    (p1,) = run(ort.InferenceSession(str(dst), so, providers=CPU), feeds, ["P"])
    np.testing.assert_allclose(p1[1, :, 3].astype(np.float64), 1 / 7, rtol=0, atol=P_ATOL)


@pytest.mark.parametrize("fill,needle", [(-np.inf, "is not a one-element constant|with -inf"),
                                         (-10000.0, "with -10000: the op's mask_fill takes float16's lowest")])
def test_masked_fill_of_another_value_left_alone(tmp_path, fill, needle):
    """A Where that fills with anything but the dtype's lowest is another function (with -inf a row masked everywhere
    is NaN): left alone, with the reason."""
    report, _, _ = _rewrite_proto(_masked_fill(attention(), fill, False, False), tmp_path)
    assert not report.fused and re.search(needle, report.left_alone[0].reasons[0]), report.text()


def test_non_constant_scale_left_alone(tmp_path):
    report, src, dst = _rewrite_proto(attention(scale_input=True), tmp_path)
    assert not report.fused and "is a graph input, not a constant" in report.left_alone[0].reasons[0], report.text()
    assert dst.read_bytes() == src.read_bytes()


def test_computed_scale_left_alone(tmp_path):
    """scale = Sqrt(input): not a constant."""
    model = attention(scale_input=True)
    g = model.graph
    g.input[2].name = "c_in"
    g.node.insert(0, helper.make_node("Sqrt", ["c_in"], ["c"]))
    report, _, _ = _rewrite_proto(model, tmp_path)
    assert not report.fused and "(c) is not a constant" in report.left_alone[0].reasons[0], report.text()


def test_tensor_scale_left_alone(tmp_path):
    """A per-column 'scale' [7] is not a scalar."""
    model = attention()
    init = model.graph.initializer[0]
    init.CopyFrom(helper.make_tensor("c", TensorProto.FLOAT16, [7], np.full(7, 0.25, np.float16).view(np.uint16)
                                     .tobytes(), raw=True))
    report, _, _ = _rewrite_proto(model, tmp_path)
    assert not report.fused and "not a single element" in report.left_alone[0].reasons[0], report.text()


@pytest.mark.parametrize("add,declared,needle", [
    ((2, 3, 5, 7), (2, 3, 5, 7), None),                    # full shape: fused
    ((2, 3, 5, 7), (4, 1, 5, 7), "not broadcastable"),     # batch 4 vs 2 (invalid Add anyway)
    ((2, 3, 5, 7), (1, 2, 3, 5, 7), "rank 5 > the scores' rank 4"),  # would broadcast the scores to rank 5
    ((2, 3, 5, 7), (2, 3, 5, "n"), "cannot prove"),        # symbolic dim vs 7: not provable
    ((2, 3, 5, 7), (2, 3, 5, None), "unknown"),            # unknown dim: not provable
])
def test_mask_broadcast(tmp_path, add, declared, needle):
    declared = [d if d is not None else "" for d in declared]
    model = attention(add=add, add_dims=declared)
    if "" in declared:  # a dim with neither value nor name
        model.graph.input[2].type.tensor_type.shape.dim[3].Clear()
    report, src, dst = _rewrite_proto(model, tmp_path)
    if needle is None:
        assert len(report.fused) == 1, report.text()
        return
    assert not report.fused and needle in report.left_alone[0].reasons[0], report.text()
    assert dst.read_bytes() == src.read_bytes()


def test_mask_that_grows_the_scores_left_alone(so, tmp_path):
    """Scores [1, 3, 5, 7] + mask [2, 1, 5, 7] is valid ONNX (the Add broadcasts to [2, 3, 5, 7]), but the op's
    bias must broadcast *to* P: left alone, and the model still runs as before."""
    report, src, dst = _rewrite_proto(attention(q=(1, 3, 5, 8), k=(1, 3, 7, 8), add=(2, 1, 5, 7)), tmp_path)
    assert not report.fused and "dim 0: 2 vs 1" in report.left_alone[0].reasons[0], report.text()
    (p,) = ort.InferenceSession(str(dst), providers=CPU).run(None, _qkm((1, 3, 5, 8), (1, 3, 7, 8), (2, 1, 5, 7)))
    assert p.shape == (2, 3, 5, 7)


def test_scores_with_another_consumer_left_alone(tmp_path):
    report, _, _ = _rewrite_proto(attention(scores_output=True), tmp_path)
    assert not report.fused and "another consumer" in report.left_alone[0].reasons[0], report.text()


def test_softmax_not_fed_by_matmul_reported(tmp_path):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT16, [2, 5])
    graph = helper.make_graph([helper.make_node("Softmax", ["X"], ["P"], axis=-1, name="sm")], "g", [x],
                              [helper.make_tensor_value_info("P", TensorProto.FLOAT16, [2, 5])])
    report, _, _ = _rewrite_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
                                  tmp_path)
    assert not report.sites and report.other_softmax == ["sm"]


def test_symbolic_batch_same_name_fused(so, tmp_path):
    """Scores [b, 3, 5, 7] and mask [b, 1, 1, 7]: the same symbol 'b' proves the broadcast."""
    model = attention(q=("b", 3, 5, 8), k=("b", 3, 7, 8), add=("b", 1, 1, 7))
    report, src, dst = _rewrite_proto(model, tmp_path)
    assert len(report.fused) == 1 and report.fused[0].details["bias_shape"] == ["b", 1, 1, 7], report.text()
    _compare(so, src, dst, _qkm(m=(2, 1, 1, 7)))


@pytest.mark.parametrize("via", ["input", "broadcast"])
def test_symbolic_dim_not_provable_left_alone(tmp_path, via):
    """Symbolic inference does not equate symbols it cannot prove equal. input: mask [b, 1, 1, k] against scores
    [b, 3, 5, n]. broadcast: mask = Ma [b, 1, 1, k] + Mb [b, 1, 1, n] - its last dim is n or k (when n is 1), and
    merging k with n there would be an assumption; the scores' last dim is n."""
    model = attention(q=("b", 3, 5, 8), k=("b", 3, "n", 8), add=("b", 1, 1, "k"))
    if via == "broadcast":
        g = model.graph
        g.input[2].name = "Ma"
        g.input.append(helper.make_tensor_value_info("Mb", TensorProto.FLOAT16, ["b", 1, 1, "n"]))
        g.node.insert(0, helper.make_node("Add", ["Ma", "Mb"], ["M"]))
    report, src, dst = _rewrite_proto(model, tmp_path)
    assert not report.fused and not report.notes, report.text()
    assert "cannot prove it broadcasts" in report.left_alone[0].reasons[0] or \
           "is unknown" in report.left_alone[0].reasons[0], report.text()
    assert dst.read_bytes() == src.read_bytes()


def test_min_broadcast_rule():
    """a vs Min(k, a), k >= 1: the broadcast is a; anything else is not decided by the rule."""
    assert rewrite.shapes.min_of("Min(32, sequence)", "sequence") and rewrite.shapes.min_of("Min(1, s)", "s")
    assert not rewrite.shapes.min_of("Min(0, s)", "s") and not rewrite.shapes.min_of("Min(32, t)", "s")
    assert not rewrite.shapes.min_of("Max(32, s)", "s") and not rewrite.shapes.min_of("Min(s, t)", "s")


def test_model_workloads_of_the_tiny_models(tmp_path):
    """flashgemm-tune --from-model: one workload per distinct site shape, parseable, with the rewrite's scale and
    bias (as the rewritten model gives it: the padding mask's Expand to [2, 1, 16, 16] dropped, narrow_masks)."""
    from flashgemm.ort.rewrite import model_workloads  # noqa: PLC0415
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    specs = model_workloads(DATA / "bert-large-tiny.f16.onnx")
    assert specs == ["a=2x2x16x32,b=2x2x16x32,transB=1,causal=0,scale=0.176757812,dtype=float16,bias=2x1x1x16,"
                     "name=bert-large-tiny-m16n16k32"]
    wl = parse(specs[0])
    assert wl.canonical.sizes == (2, 2, 16, 16, 32) and wl.variant.has_bias and wl.trans_b
    # a rewritten model gives the same workloads as the original
    fused = tmp_path / "fused.onnx"
    rewrite.rewrite_file(DATA / "whisper-enc-tiny.f16.onnx", fused)
    assert [s.rsplit(",name=", 1)[0] for s in model_workloads(fused)] == \
        [s.rsplit(",name=", 1)[0] for s in model_workloads(DATA / "whisper-enc-tiny.f16.onnx")]


def test_workloads_of_models_for_tune_and_build(tmp_path):
    """--from-model of flashgemm-tune and flashgemm-build: every model's specs, logged; a missing file or a model
    without a fusable site is an error that says so, and so is a model rewritten with --attention unless the build
    has --attention too."""
    from flashgemm.ort.rewrite import workloads_of_models  # noqa: PLC0415
    lines = []
    models = [DATA / "bert-large-tiny.f16.onnx", DATA / "whisper-enc-tiny.f16.onnx"]
    specs = workloads_of_models(models, log=lines.append)
    assert len(specs) == 2 and specs[0].endswith("name=bert-large-tiny-m16n16k32") and "whisper" in specs[1]
    assert len(lines) == 2 and "1 attention-score workload(s)" in lines[0] and specs[0] in lines[0]
    with pytest.raises(ValueError, match="no such file"):
        workloads_of_models([tmp_path / "absent.onnx"])
    _, src, _ = _rewrite_proto(attention("float32", add=(2, 1, 1, 7)), tmp_path)  # float32: nothing to fuse
    with pytest.raises(ValueError, match="no fusable attention-score site"):
        workloads_of_models([src], log=lambda *_: None)
    # a model rewritten with --attention: its FusedAttention sites need no workload (their kernels serve every
    # length) when the build has --attention; without it, the error names the fix
    fused = tmp_path / "bert.attention.onnx"
    rewrite.rewrite_file(DATA / "bert-large-tiny.f16.onnx", fused, attention=True)
    lines = []
    assert workloads_of_models([fused], log=lines.append, attention_ok=True) == []
    assert "2 FusedAttention site(s) (rewritten with --attention)" in lines[-1], lines
    with pytest.raises(ValueError, match="are FusedAttention already .* flashgemm-build --attention --from-model"):
        workloads_of_models([fused], log=lambda *_: None)


def test_site_past_a_contrib_op_is_typed(tmp_path):
    """After ONNX Runtime's optimizer, values past a com.microsoft op (Gelu, SkipLayerNormalization) carry no type:
    onnx's inference does not know those ops. Symbolic shape inference does, and its dtypes count too (ViT-B/16 after
    optimize_model(opt_level=1): 1 of 12 sites fused before)."""
    m = attention(add=(2, 1, 1, 7))
    g = m.graph
    g.node.insert(0, helper.make_node("Gelu", ["Q"], ["Qg"], domain="com.microsoft"))
    next(n for n in g.node if n.op_type == "MatMul").input[0] = "Qg"
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    report, _, dst = _rewrite_proto(m, tmp_path)
    assert len(report.fused) == 1, report.text()
    assert [n.op_type for n in onnx.load(str(dst)).graph.node] == ["Gelu", "FusedGemmSoftmax"]


def _masked_scores() -> list:
    """P = Softmax(Q K^T c + mask): the nodes of a site reading graph inputs Q, K, initializer c and value mask."""
    return [helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", ["Q", "Kt"], ["S"]),
            helper.make_node("Mul", ["S", "c"], ["Ss"]),
            helper.make_node("Add", ["Ss", "mask"], ["Sm"]),
            helper.make_node("Softmax", ["Sm"], ["P"], axis=-1)]


def _constant_mask_graph(kind: str) -> onnx.ModelProto:
    """softmax(Q K^T * 0.125 + mask) with the mask transformers 5 writes for a model without padding (ViT), as the
    TorchScript exporter writes it: Where(Expand(arange(S)[:, None] >= t, shape), 0, -65504) in float16, shape the
    exporter's Where(Equal) computation of [B, 1, S, S], t a Constant 0 (kind "zeros"), a graph input ("input"), or 3
    (kind "partial": rows 0-2 masked); kind "batch": t 0 and B read from Q's shape (as transformers 5.25's dynamo
    export does), so that only the narrowed mask, its Expand dropped, is made of constants alone."""
    t16 = TensorProto.FLOAT16
    b, s, d = 2, 6, 16
    thr = [] if kind == "input" else [helper.make_node("Constant", [], ["t"], value=helper.make_tensor(
        "t", TensorProto.INT64, [], [3 if kind == "partial" else 0]))]
    nodes = thr + [
        helper.make_node("Constant", [], ["ar"], value=helper.make_tensor("ar", TensorProto.INT64, [1, 1, s, 1],
                                                                            list(range(s)))),
        helper.make_node("GreaterOrEqual", ["ar", "t"], ["ge"]),
        # the exporter's expand(b, -1, s, s): Where(shape == -1, 1, shape), the -1s made by ConstantOfShape * -1
        *([helper.make_node("Shape", ["Q"], ["b1"], start=0, end=1),
           helper.make_node("Constant", [], ["rest"], value=helper.make_tensor("rest", TensorProto.INT64, [3],
                                                                                 [-1, s, s])),
           helper.make_node("Concat", ["b1", "rest"], ["want"], axis=0)] if kind == "batch" else
          [helper.make_node("Constant", [], ["want"], value=helper.make_tensor("want", TensorProto.INT64, [4],
                                                                                 [b, -1, s, s]))]),
        helper.make_node("Constant", [], ["four"], value=helper.make_tensor("four", TensorProto.INT64, [1], [4])),
        helper.make_node("ConstantOfShape", ["four"], ["ones"],
                         value=helper.make_tensor("one", TensorProto.INT64, [1], [1])),
        helper.make_node("Constant", [], ["neg"], value=helper.make_tensor("neg", TensorProto.INT64, [], [-1])),
        helper.make_node("Mul", ["ones", "neg"], ["negs"]),
        helper.make_node("Equal", ["want", "negs"], ["is_neg"]),
        helper.make_node("Where", ["is_neg", "ones", "want"], ["shp"]),
        helper.make_node("Expand", ["ge", "shp"], ["keep"]),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", t16, [], [0.0])),
        helper.make_node("Constant", [], ["low"], value=helper.make_tensor("low", t16, [], [-65504.0])),
        helper.make_node("Where", ["keep", "zero", "low"], ["mask"])] + _masked_scores()
    inputs = [helper.make_tensor_value_info(n, t16, [b, 2, s, d]) for n in ("Q", "K")]
    if kind == "input":
        inputs.append(helper.make_tensor_value_info("t", TensorProto.INT64, []))
    init = [helper.make_tensor("c", t16, [], np.array([0.125], np.float16).view(np.uint16).tobytes(), raw=True)]
    return helper.make_model(helper.make_graph(nodes, "mask", inputs, [helper.make_tensor_value_info("P", t16, None)],
                                               initializer=init),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("kind", ["zeros", "batch", "input", "partial"])
def test_rewrite_drops_a_constant_mask_of_zeros(so, tmp_path, kind):
    """A mask that is zeros everywhere and made of constants alone (transformers 5's for a model without padding),
    as exported or once narrowed (its Expand to the batch read from an input dropped), is dropped from the fused site
    with the nodes that computed it; one that reads a graph input, or masks something, stays. P matches the original
    graph either way."""
    src, dst = tmp_path / "m.onnx", tmp_path / "m.out.onnx"
    onnx.save(_constant_mask_graph(kind), str(src))
    report = rewrite.rewrite_file(src, dst)
    assert len(report.fused) == 1, report.text()
    dropped = kind in ("zeros", "batch")
    assert report.constant_masks_dropped == int(dropped), report.text()
    assert ("(bias dropped: zeros made of constants)" in report.text()) == dropped
    (node,) = [n for n in onnx.load(str(dst)).graph.node if n.op_type == "FusedGemmSoftmax"]
    assert len(node.input) == (2 if dropped else 3)
    # the mask's Where (its Expand and the Expand's shape computation dropped: narrow_masks)
    assert rewrite.count_ops(dst, "Where") == (0 if dropped else 1)
    assert rewrite.count_ops(dst, "Shape") == 0
    assert report.masks_narrowed == int(kind != "zeros"), report.text()
    rng = np.random.default_rng(4)
    feeds = {n: rng.standard_normal((2, 2, 6, 16)).astype(np.float16) for n in ("Q", "K")}
    if kind == "input":
        feeds["t"] = np.array(0, np.int64)
    (p0,) = run(ort.InferenceSession(str(src), providers=CPU), feeds)
    (p1,) = run(ort.InferenceSession(str(dst), so, providers=CPU), feeds)
    np.testing.assert_allclose(p1.astype(np.float64), p0.astype(np.float64), rtol=0, atol=P_ATOL)


def _padding_mask_graph(start: int, delta: int, op: str, b: int = 2, s: int = 6, d: int = 16, cast: bool = False,
                        kv_start=None, constant: bool = False, dtype: str = "float16"):
    """transformers 5's bidirectional mask: Where(And(And(True, q_idx `op` 0), padding), 0, -65504) with q_idx =
    Range(start, start + S delta, delta) over [1, 1, S, 1] and the padding attention_mask [B, S] over [B, 1, 1, S],
    added to the scores [B, 2, S, S]. cast: the test wrapped in Cast(to=BOOL), as TorchScript exports write it.
    kv_start: the test is a decoder's causal rule instead, `op`(kv_idx, q_idx) with kv_idx = Range(kv_start,
    kv_start + S, 1) over [1, 1, 1, S]; constant: both index ranges constants, as a static export folds them.
    dtype: the scores' (bfloat16: the fill bfloat16's lowest, as torch.finfo gives it)."""
    t16, i64 = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}[dtype], TensorProto.INT64

    def const(name, dtype, dims, vals):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, dims, vals))
    nodes = [const("start", i64, [], [start]), const("delta", i64, [], [delta]), const("zero_i", i64, [], [0]),
             const("ax_q", i64, [3], [0, 1, 3]), const("ax_kv", i64, [2], [1, 2]),
             const("true", TensorProto.BOOL, [], [True]), const("zero", t16, [], [0.0]),
             const("low", t16, [], [MASK_FILL[dtype]]), const("one_i", i64, [1], [1]),
             helper.make_node("Shape", ["attention_mask"], ["shp"]),
             helper.make_node("Gather", ["shp", "one_i"], ["len1"], axis=0),
             helper.make_node("Squeeze", ["len1"], ["len"]),
             helper.make_node("Mul", ["len", "delta"], ["span"]),
             helper.make_node("Add", ["start", "span"], ["limit"]),  # S elements: start, start + delta, ...
             helper.make_node("Range", ["start", "limit", "delta"], ["q"]),
             helper.make_node("Unsqueeze", ["q", "ax_q"], ["q_idx"])]
    test = "q_test" if cast else "q_ok"
    if kv_start is None:
        nodes.append(helper.make_node(op, ["q_idx", "zero_i"], [test]))
    else:
        nodes += [const("kv_start", i64, [], [kv_start]), const("one_s", i64, [], [1]),
                  const("ax_k", i64, [3], [0, 1, 2]),
                  helper.make_node("Add", ["kv_start", "len"], ["kv_limit"]),
                  helper.make_node("Range", ["kv_start", "kv_limit", "one_s"], ["kv"]),
                  helper.make_node("Unsqueeze", ["kv", "ax_k"], ["kv_idx"]),
                  helper.make_node(op, ["kv_idx", "q_idx"], [test])]
        if constant:
            nodes[-1:] = [const("kv_idx_c", i64, [1, 1, 1, s], list(range(kv_start, kv_start + s))),
                          const("q_idx_c", i64, [1, 1, s, 1], list(range(start, start + s * delta, delta))),
                          helper.make_node(op, ["kv_idx_c", "q_idx_c"], [test])]
    if cast:
        nodes.append(helper.make_node("Cast", ["q_test"], ["q_ok"], to=TensorProto.BOOL))
    nodes += [helper.make_node("Cast", ["attention_mask"], ["pad_b"], to=TensorProto.BOOL),
              helper.make_node("Unsqueeze", ["pad_b", "ax_kv"], ["pad"]),
              helper.make_node("And", ["true", "q_ok"], ["both"]),
              helper.make_node("And", ["both", "pad"], ["keep"]),
              helper.make_node("Where", ["keep", "zero", "low"], ["mask"])] + _masked_scores()
    inputs = [helper.make_tensor_value_info(n, t16, [b, 2, s, d]) for n in ("Q", "K")] + [
        helper.make_tensor_value_info("attention_mask", i64, [b, s])]
    np_dt = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    init = [helper.make_tensor("c", t16, [], np.array([0.25], np_dt).view(np.uint16).tobytes(), raw=True)]
    return helper.make_model(helper.make_graph(nodes, "pad", inputs, [helper.make_tensor_value_info("P", t16, None)],
                                               initializer=init),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _padding_mask_p(src, dst, so, attention_mask, seed: int) -> tuple:
    """P of _padding_mask_graph's original (src) and rewritten (dst) model on the CPU EP: random Q, K [2, 2, 6, 16]
    and the given attention_mask [2, 6]."""
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal((2, 2, 6, 16)).astype(np.float16) for n in ("Q", "K")}
    feeds["attention_mask"] = np.array(attention_mask, np.int64)
    (p0,) = run(ort.InferenceSession(str(src), providers=CPU), feeds)
    (p1,) = run(ort.InferenceSession(str(dst), so, providers=CPU), feeds)
    return p0, p1


@pytest.mark.parametrize("cast", [False, True])
@pytest.mark.parametrize("start,delta,op,narrowed", [(0, 1, "GreaterOrEqual", True), (1, 2, "Greater", True),
                                                     (0, 1, "Greater", False), (-1, 1, "GreaterOrEqual", False)])
def test_rewrite_narrows_a_padding_mask_broadcast_by_an_always_true_term(so, tmp_path, start, delta, op, narrowed,
                                                                         cast):
    """A padding mask ANDed with an index test that is true everywhere (transformers 5's `q_idx >= 0`, cast to bool
    again by TorchScript exports) reaches the op as [B, 1, 1, S], the test and its [B, 1, S, S] broadcast dropped; a
    test that is false somewhere (row 0 of q_idx > 0, or of a range from -1) keeps the mask [B, 1, S, S]. P matches
    the original graph either way."""
    src, dst = tmp_path / "m.onnx", tmp_path / "m.out.onnx"
    onnx.save(_padding_mask_graph(start, delta, op, cast=cast), str(src))
    report = rewrite.rewrite_file(src, dst)
    assert len(report.fused) == 1 and report.masks_narrowed == int(narrowed), report.text()
    m = onnx.load(str(dst))
    (node,) = _ops(m, "FusedGemmSoftmax", "flashgemm")
    shapes = {v.name: [x.dim_value for x in v.type.tensor_type.shape.dim] for v in m.graph.value_info}
    assert shapes[node.input[2]] == ([2, 1, 1, 6] if narrowed else [2, 1, 6, 6]), shapes.get(node.input[2])
    assert (rewrite.count_ops(dst, "Range") == 0) == narrowed  # the test's computation left with it
    p0, p1 = _padding_mask_p(src, dst, so, [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], seed=5)
    np.testing.assert_allclose(p1.astype(np.float64), p0.astype(np.float64), rtol=0, atol=P_ATOL)


@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("op,kv_start,cast,causal", [("LessOrEqual", 0, False, True), ("LessOrEqual", 0, True, True),
                                                     ("LessOrEqual", 1, False, False), ("Less", 0, False, False)])
def test_rewrite_notes_a_causal_rule_in_the_bias(so, tmp_path, op, kv_start, cast, causal, constant):
    """A decoder's mask, Where(True & kv_idx <= q_idx & padding, 0, -65504) added to the scores, is fused as a bias
    of the scores' shape, and the report says that it holds the causal rule (every key computed); an index test
    that is not the causal rule (kv_idx + 1 <= q_idx, kv_idx < q_idx) is not taken for one. The index ranges
    computed or constants (a static export's). P matches either way."""
    src, dst = tmp_path / "m.onnx", tmp_path / "m.out.onnx"
    onnx.save(_padding_mask_graph(0, 1, op, cast=cast, kv_start=kv_start, constant=constant), str(src))
    report = rewrite.rewrite_file(src, dst)
    assert len(report.fused) == 1 and not report.masks_narrowed, report.text()
    assert ("causal_in_bias" in report.fused[0].details) == causal, report.text()
    assert ("holds the causal rule" in report.text()) == causal
    assert ("1 fused site(s) read a decoder's causal and padding masks" in report.text()) == causal
    if causal:
        assert report.fused[0].details["causal_in_bias"] == -65504.0
    mask = [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]]
    p0, p1 = _padding_mask_p(src, dst, so, mask, seed=6)
    np.testing.assert_allclose(p1.astype(np.float64), p0.astype(np.float64), rtol=0, atol=P_ATOL)
    # --decoder-causal: the rule becomes causal=1 and the bias the padding mask [2, 1, 1, 6] (its Range, LessOrEqual
    # and [2, 1, 6, 6] broadcast gone); P the same except at batch 0's rows 0 and 1, whose visible keys are padding
    report = rewrite.rewrite_file(src, dst, decoder_causal=True)
    assert report.causal_taken == int(causal), report.text()
    if not causal:
        return
    m = onnx.load(str(dst))
    (node,) = _ops(m, "FusedGemmSoftmax", "flashgemm")
    assert helper.get_node_attr_value(node, "causal") == 1 and rewrite.count_ops(dst, "LessOrEqual") == 0
    shapes = {v.name: [x.dim_value for x in v.type.tensor_type.shape.dim] for v in m.graph.value_info}
    assert shapes[node.input[2]] == [2, 1, 1, 6], shapes.get(node.input[2])
    _, p1 = _padding_mask_p(src, dst, so, mask, seed=6)
    kept = np.ones((2, 2, 6), bool)
    kept[0, :, :2] = False
    np.testing.assert_allclose(p1[kept].astype(np.float64), p0[kept].astype(np.float64), rtol=0, atol=P_ATOL)
    assert np.abs(p1[~kept].astype(np.float64) - p0[~kept]).max() > 0.1  # those rows: visible keys only


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_taken_causal_rule_keeps_the_padding_at_the_kernels_fill(tmp_path, dtype):
    """The padding mask left when the causal rule goes to the flag fills at FILL_LOGIT: bfloat16's lowest, which the
    export writes, becomes -2**127 (its log2-scaled logit would overflow the CUDA kernels to -inf, and causal_fill
    puts the keys past the diagonal at -2**127); float16's -65504 stays."""
    src, dst = tmp_path / "m.onnx", tmp_path / "m.out.onnx"
    onnx.save(_padding_mask_graph(0, 1, "LessOrEqual", kv_start=0, dtype=dtype), str(src))
    report = rewrite.rewrite_file(src, dst, decoder_causal="all")
    assert report.causal_taken == 1 and report.fused[0].details["causal_in_bias"] == MASK_FILL[dtype], report.text()
    m = onnx.load(str(dst))
    (node,) = _ops(m, "FusedGemmSoftmax", "flashgemm")
    producers = {o: n for n in m.graph.node for o in n.output}
    where = producers[node.input[2]]
    while where.op_type != "Where":
        where = producers[where.input[0]]
    value = onnx.numpy_helper.to_array(producers[where.input[2]].attribute[0].t)  # (a Constant node)
    assert float(value.astype(np.float64)) == FILL_LOGIT[dtype], value


def _cache_mask_graph(positions: str) -> onnx.ModelProto:
    """A decoder's mask with a cache, as transformers' exports compute it: queries Q [2, 2, 3, 16] at positions past
    .. past + 2 (past = 4, the cache K_past's length), keys K = Concat(K_past, K_new) [2, 2, 7, 16] at 0 .. 6, and
    Where(kv_idx <= q_idx & padding, 0, -65504) added to the scores, attention_mask [2, 7]. positions: how q_idx is
    computed, "add" Range(0, seq, 1) + past ("add_cast": each length Cast first), "range" Range(past, past + seq,
    1); "no_offset" Range(0, seq, 1) (query i at position i: a rule the op's bottom-right aligned flag is not)."""
    t16, i64 = TensorProto.FLOAT16, TensorProto.INT64

    def const(name, dtype, dims, vals):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, dims, vals))
    nodes = [const("zero_i", i64, [], [0]), const("one_i", i64, [], [1]), const("two_i", i64, [], [2]),
             const("ax_q", i64, [3], [0, 1, 3]), const("ax_k", i64, [3], [0, 1, 2]), const("ax_p", i64, [2], [1, 2]),
             const("zero", t16, [], [0.0]), const("low", t16, [], [-65504.0]),
             helper.make_node("Concat", ["K_past", "K_new"], ["K"], axis=2),
             helper.make_node("Shape", ["Q"], ["q_shape"]), helper.make_node("Shape", ["K_past"], ["past_shape"]),
             helper.make_node("Gather", ["q_shape", "two_i"], ["seq"], axis=0),
             helper.make_node("Gather", ["past_shape", "two_i"], ["past"], axis=0),
             helper.make_node("Add", ["past", "seq"], ["total"])]
    if positions == "add_cast":  # as TorchScript exports write it: each length Cast before its use
        nodes += [helper.make_node("Cast", [x], [f"{x}_c"], to=i64) for x in ("past", "seq", "total")]
        nodes += [helper.make_node("Range", ["zero_i", "total_c", "one_i"], ["kv"]),
                  helper.make_node("Range", ["zero_i", "seq_c", "one_i"], ["q0"]),
                  helper.make_node("Add", ["q0", "past_c"], ["q"])]
    else:
        nodes.append(helper.make_node("Range", ["zero_i", "total", "one_i"], ["kv"]))
    nodes.append(helper.make_node("Unsqueeze", ["kv", "ax_k"], ["kv_idx"]))
    if positions == "add":
        nodes += [helper.make_node("Range", ["zero_i", "seq", "one_i"], ["q0"]),
                  helper.make_node("Add", ["q0", "past"], ["q"])]
    elif positions == "range":
        nodes.append(helper.make_node("Range", ["past", "total", "one_i"], ["q"]))
    elif positions == "no_offset":
        nodes.append(helper.make_node("Range", ["zero_i", "seq", "one_i"], ["q"]))
    nodes += [helper.make_node("Unsqueeze", ["q", "ax_q"], ["q_idx"]),
              helper.make_node("LessOrEqual", ["kv_idx", "q_idx"], ["rule"]),
              helper.make_node("Cast", ["attention_mask"], ["pad_b"], to=TensorProto.BOOL),
              helper.make_node("Unsqueeze", ["pad_b", "ax_p"], ["pad"]),
              helper.make_node("And", ["rule", "pad"], ["keep"]),
              helper.make_node("Where", ["keep", "zero", "low"], ["mask"])] + _masked_scores()
    inputs = [helper.make_tensor_value_info("Q", t16, [2, 2, 3, 16]),
              helper.make_tensor_value_info("K_past", t16, [2, 2, 4, 16]),
              helper.make_tensor_value_info("K_new", t16, [2, 2, 3, 16]),
              helper.make_tensor_value_info("attention_mask", i64, [2, 7])]
    init = [helper.make_tensor("c", t16, [], np.array([0.25], np.float16).view(np.uint16).tobytes(), raw=True)]
    return helper.make_model(helper.make_graph(nodes, "cache", inputs, [helper.make_tensor_value_info("P", t16, None)],
                                               initializer=init),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("positions,causal", [("add", True), ("add_cast", True), ("range", True),
                                               ("no_offset", False)])
def test_rewrite_takes_a_cached_decoders_causal_rule(so, tmp_path, positions, causal):
    """With a cache, query i sits at position past + i among past + m keys: kv_idx <= q_idx is the op's bottom-right
    aligned causal rule, and --decoder-causal takes it (the bias left: the padding row [2, 1, 1, 7]); positions
    that start at 0 (the top-left triangle) are not that rule and stay in the bias. P matches the original at every
    row (no row's visible keys are all padding here)."""
    src, dst = tmp_path / "m.onnx", tmp_path / "m.out.onnx"
    onnx.save(_cache_mask_graph(positions), str(src))
    report = rewrite.rewrite_file(src, dst, decoder_causal=True)
    assert len(report.fused) == 1 and report.causal_taken == int(causal), report.text()
    assert ("--decoder-causal took nothing" in report.text()) == (not causal), report.text()
    m = onnx.load(str(dst))
    (node,) = _ops(m, "FusedGemmSoftmax", "flashgemm")
    shapes = {v.name: [x.dim_value for x in v.type.tensor_type.shape.dim] for v in m.graph.value_info}
    assert helper.get_node_attr_value(node, "causal") == int(causal)
    assert shapes[node.input[2]] == ([2, 1, 1, 7] if causal else [2, 1, 3, 7]), shapes.get(node.input[2])
    rng = np.random.default_rng(8)
    feeds = {"Q": rng.standard_normal((2, 2, 3, 16)), "K_past": rng.standard_normal((2, 2, 4, 16)),
             "K_new": rng.standard_normal((2, 2, 3, 16))}
    feeds = {k: v.astype(np.float16) for k, v in feeds.items()}
    feeds["attention_mask"] = np.array([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0]], np.int64)
    (p0,) = run(ort.InferenceSession(str(src), providers=CPU), feeds)
    (p1,) = run(ort.InferenceSession(str(dst), so, providers=CPU), feeds)
    np.testing.assert_allclose(p1.astype(np.float64), p0.astype(np.float64), rtol=0, atol=P_ATOL)


def _two_terms_graph(table_low: float = -2.0, computed: bool = False, zeros: bool = False) -> onnx.ModelProto:
    """Softmax(MatMul(Q, K^T) * 0.25 + PB + M), Q [2, 3, 5, 8], K [2, 3, 7, 8]: PB a relative position bias gathered
    out of a constant table [8 buckets, 3 heads] (values in [table_low, 2]) by constant bucket ids [5, 7] and moved
    to [1, 3, 5, 7] (Gather, Transpose, Unsqueeze: T5's and MPNet's exports), M the padding mask input
    [2, 1, 1, 7]; computed: PB times an input scalar g instead (no constant bounds its values); zeros: PB a
    ConstantOfShape of zeros of PB's shape (T5's cross-attention bias)."""
    t16, i64 = TensorProto.FLOAT16, TensorProto.INT64
    rng = np.random.default_rng(3)
    table = rng.uniform(-2.0, 2.0, (8, 3)).astype(np.float16)
    table[0, 0] = table_low
    init = [helper.make_tensor("c", t16, [], np.array([0.25], np.float16).view(np.uint16).tobytes(), raw=True),
            helper.make_tensor("table", t16, [8, 3], table.view(np.uint16).tobytes(), raw=True),
            helper.make_tensor("ids", i64, [5, 7], rng.integers(0, 8, (5, 7)).ravel().tolist()),
            helper.make_tensor("ax0", i64, [1], [0])]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["g57h"], axis=0),
             helper.make_node("Transpose", ["g57h"], ["gh57"], perm=[2, 0, 1]),
             helper.make_node("Unsqueeze", ["gh57", "ax0"], ["pb0"])]
    inputs = [helper.make_tensor_value_info(n, t16, s) for n, s in (("Q", [2, 3, 5, 8]), ("K", [2, 3, 7, 8]),
                                                                     ("M", [2, 1, 1, 7]))]
    if computed:
        nodes.append(helper.make_node("Mul", ["pb0", "g"], ["pb"]))
        inputs.append(helper.make_tensor_value_info("g", t16, []))
    elif zeros:
        nodes += [helper.make_node("Shape", ["pb0"], ["pb_shape"]),
                  helper.make_node("ConstantOfShape", ["pb_shape"], ["pb"],
                                   value=helper.make_tensor("z", t16, [1], [0.0]))]
    else:
        nodes.append(helper.make_node("Identity", ["pb0"], ["pb"]))
    nodes += [helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["Q", "Kt"], ["S"]),
              helper.make_node("Mul", ["S", "c"], ["Ss"]),
              helper.make_node("Add", ["Ss", "pb"], ["Sp"]),
              helper.make_node("Add", ["Sp", "M"], ["Sm"]),
              helper.make_node("Softmax", ["Sm"], ["P"], axis=-1)]
    graph = helper.make_graph(nodes, "two_terms", inputs, [helper.make_tensor_value_info("P", t16, None)],
                              initializer=init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("case", ["table", "zeros", "table_with_lowest", "computed"])
def test_two_added_terms(so, tmp_path, case):
    """Scores + a position bias + the padding mask: fused. A position bias read out of a constant table above the
    masking threshold becomes the op's additive mask and the padding mask its bias, both added in float32 as the
    original adds them, so that a batch padded out entirely (every key at the mask's lowest) matches too; a bias of
    zeros is left out; a table holding the lowest, or a bias no constant bounds, is summed with the mask into one
    bias (rows with a key left match)."""
    report, src, dst = _rewrite_proto(_two_terms_graph(table_low=-65504.0 if case == "table_with_lowest" else -2.0,
                                                       computed=case == "computed", zeros=case == "zeros"), tmp_path)
    assert len(report.fused) == 1 and not report.left_alone, report.text()
    d = report.fused[0].details
    (node,) = _ops(onnx.load(str(dst)), "FusedGemmSoftmax", "flashgemm")
    if case == "table":
        assert d["bias_terms"] == "bias and additive mask" and d["mask_shape"] == [1, 3, 5, 7], report.text()
        assert node.input[2] == "M" and len(node.input) == 4, node.input
        assert "mask=add [1, 3, 5, 7]" in report.text()
    elif case == "zeros":
        assert d["bias_terms"] == "a term of zeros left out" and "mask_shape" not in d, report.text()
        assert list(node.input[2:]) == ["M"] and "term of zeros left out" in report.text()
    else:
        assert d["bias_terms"] == "summed" and "mask_shape" not in d, report.text()
        assert len(node.input) == 3 and "summed into the bias" in report.text()
    rng = np.random.default_rng(4)
    feeds = {"Q": rng.standard_normal((2, 3, 5, 8)).astype(np.float16),
             "K": rng.standard_normal((2, 3, 7, 8)).astype(np.float16),
             "M": np.zeros((2, 1, 1, 7), np.float16)}
    feeds["M"][0, ..., 4:] = -65504.0
    if case in ("table", "zeros"):
        feeds["M"][1] = -65504.0  # batch 1 padded out: its rows are the softmax of scores + PB over all keys
    if case == "computed":
        feeds["g"] = np.array(1.5, np.float16)
    _compare(so, src, dst, feeds)


@pytest.mark.parametrize("dim", [2, 0])
def test_added_term_of_fixed_value_folded(so, tmp_path, dim):
    """A bias whose shape inference cannot find but whose value is fixed (BEiT's position bias, interpolated to the
    input's static resolution: here a table Resized to [1, 3, Q's dim `dim`, 7], its sizes computed past what shape
    inference follows) is folded into a constant and the
    site fused, matching the original. Where the size read is a dynamic dim (the batch) the value is not fixed: the
    bias stays as computed and the site is left alone."""
    model = attention(q=("b", 3, 5, 8), k=("b", 3, 7, 8))
    g, t16, i64 = model.graph, TensorProto.FLOAT16, TensorProto.INT64
    table = np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype(np.float16)
    g.initializer.extend([
        helper.make_tensor("table", t16, [1, 3, 64, 64], table.view(np.uint16).tobytes(), raw=True),
        helper.make_tensor("lead", i64, [2], [1, 3]), helper.make_tensor("cols", i64, [1], [7]),
        helper.make_tensor("at", i64, [1], [dim]), helper.make_tensor("zero", t16, [], [0])])
    (softmax,) = [n for n in g.node if n.op_type == "Softmax"]
    scores = softmax.input[0]
    g.node.insert(len(g.node) - 1, helper.make_node("Add", [scores, "M"], ["Sm"]))
    softmax.input[0] = "Sm"
    for i, node in enumerate([helper.make_node("Shape", ["Q"], ["q_shape"]),
                              helper.make_node("Gather", ["q_shape", "at"], ["rows"], axis=0),
                              helper.make_node("Concat", ["lead", "rows", "cols"], ["dims"], axis=0),
                              # + 0 computed from the table (past the constant folder's size limit: the shape
                              # stays unknown to inference)
                              helper.make_node("Mul", ["table", "zero"], ["zeros"]),
                              helper.make_node("ReduceMin", ["zeros"], ["zero_t"], keepdims=0),
                              helper.make_node("Cast", ["zero_t"], ["zero_i"], to=i64),
                              helper.make_node("Add", ["dims", "zero_i"], ["size"]),
                              helper.make_node("Resize", ["table", "", "", "size"], ["M"], mode="linear")]):
        g.node.insert(i, node)
    report, src, dst = _rewrite_proto(model, tmp_path)
    if dim == 0:
        assert not report.fused and report.static_terms_folded == 0, report.text()
        return
    assert len(report.fused) == 1 and report.static_terms_folded == 1, report.text()
    assert report.fused[0].details["bias_shape"] == [1, 3, 5, 7], report.text()
    assert rewrite.count_ops(dst, "Resize") == 0
    _compare(so, src, dst, _qkm(q=(2, 3, 5, 8), k=(2, 3, 7, 8)))
