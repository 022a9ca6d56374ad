"""The rewrite composes with ONNX Runtime's transformers optimizer (`optimize_model`, the usual preprocessing, which
fuses LayerNorm/Gelu and, where it can, attention into com.microsoft.Attention), in both orders, on the tiny seed
models: every attention-score site ends up fused (by the rewrite, or by the optimizer's own Attention), and the
optimizer's other fusions survive the rewrite (they need P's shape: flashgemm/ort/op_schema.py)."""
import warnings
from pathlib import Path

import onnx
import pytest

from flashgemm.ort import rewrite

DATA = Path(__file__).parent / "data"
MODELS = {"bert-large-tiny.f16.onnx": "bert", "bert-large-tiny-dyn.f16.onnx": "bert", "vit-b16-tiny.f16.onnx": "vit",
          "whisper-enc-tiny.f16.onnx": "bert",
          # the dynamo exporter's SDPA (the optimizer fuses no attention of these)
          "bert-large-tiny-dyn-dynamo-sdpa.f16.onnx": "bert", "whisper-enc-tiny-dynb-dynamo-sdpa.f16.onnx": "bert"}
LAYERS = 2


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """The optimizer's shape inference saves its partial model into the working directory when it gives up."""
    monkeypatch.chdir(tmp_path)


def _optimize(path, out, model_type, attention=True):
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    options = FusionOptions(model_type)
    options.enable_attention = attention
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = optimize_model(str(path), model_type=model_type, num_heads=2, hidden_size=64, opt_level=0, use_gpu=False,
                           optimization_options=options)
    m.save_model_to_file(str(out))
    return out


def _count(path, op, domain=None):
    return sum(n.op_type == op and (domain is None or n.domain == domain) for n in onnx.load(str(path)).graph.node)


@pytest.mark.parametrize("attention", [False, True], ids=["scores", "attention"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_rewrite_then_optimizer_keeps_both_fusions(name, attention, tmp_path):
    """Also after --attention: FusedAttention's schema gives O its shape, which the optimizer's fusions need."""
    fused = tmp_path / "fused.onnx"
    report = rewrite.rewrite_file(DATA / name, fused, log=lambda *a: None, attention=attention)
    whole = LAYERS if attention else 0  # sites that became FusedAttention
    assert len(report.fused) == LAYERS and report.attention == (whole if attention else None), report.text()
    # against the optimizer alone with its attention fusion off (what it can do around attention it leaves alone)
    alone = _optimize(DATA / name, tmp_path / "alone.onnx", MODELS[name], attention=False)
    both = _optimize(fused, tmp_path / "both.onnx", MODELS[name])
    assert _count(both, "FusedAttention", "flashgemm") == whole
    assert _count(both, "FusedGemmSoftmax", "flashgemm") == LAYERS - whole
    for op in ("SkipLayerNormalization", "LayerNormalization", "EmbedLayerNormalization", "BiasGelu", "Gelu"):
        assert _count(both, op) == _count(alone, op), op
    assert _count(both, "SkipLayerNormalization") > 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_optimizer_then_rewrite_leaves_no_site_unfused(name, tmp_path):
    opt = _optimize(DATA / name, tmp_path / "opt.onnx", MODELS[name])
    report = rewrite.rewrite_file(opt, tmp_path / "opt.fused.onnx", log=lambda *a: None)
    attention = _count(opt, "Attention", "com.microsoft")
    assert not report.left_alone, report.text()
    assert len(report.fused) + attention == LAYERS, report.text()
    if attention:  # the optimizer fused the attention itself; without that fusion the rewrite takes every site
        opt = _optimize(DATA / name, tmp_path / "opt-noattn.onnx", MODELS[name], attention=False)
        report = rewrite.rewrite_file(opt, tmp_path / "opt-noattn.fused.onnx", log=lambda *a: None)
        assert len(report.fused) == LAYERS, report.text()


def test_shape_inference_of_the_op():
    """onnx's shape inference gives P the broadcast batch of A and B and [M, N], symbols kept (op_schema)."""
    from onnx import TensorProto, helper
    a = helper.make_tensor_value_info("A", TensorProto.FLOAT16, ["batch", 12, "seq", 64])
    b = helper.make_tensor_value_info("B", TensorProto.FLOAT16, [1, 12, "keys", 64])
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, ["batch", 1, 1, "keys"])
    p = helper.make_tensor_value_info("P", TensorProto.UNDEFINED, None)
    node = helper.make_node("FusedGemmSoftmax", ["A", "B", "", "mask"], ["P"], domain="flashgemm", transB=1)
    graph = helper.make_graph([node], "g", [a, b, mask], [p])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("flashgemm", 1)])
    out = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.output[0].type.tensor_type
    assert out.elem_type == TensorProto.FLOAT16
    assert [d.dim_value or d.dim_param for d in out.shape.dim] == ["batch", 12, "seq", "keys"]
