"""The rewrite in order (rewrite_model: shapes, the rules, the masks, then FusedAttention's passes), and the file
level around it: loading, saving (external data past 2 GB), counting ops."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import onnx_ir as ir
from onnxscript.rewriter import pattern

from flashgemm.ort.op_schema import DOMAIN
from flashgemm.ort.rewrite.values import dtype_of, read_in
from flashgemm.ort.rewrite.report import Report
from flashgemm.ort.rewrite.shapes import infer_shapes, infer_symbolic_shapes
from flashgemm.ort.rewrite.masks import (drop_constant_masks, narrow_masks, causal_masks, exact_causal,
                                         fold_static_terms)
from flashgemm.ort.rewrite.scores import (FuseScoresSoftmax, FoldTransposeB, FoldKeyScale, FoldBatchedTransposeB,
                                          FoldQueryScale, probe_sites)
from flashgemm.ort.rewrite.attention import fuse_attention, fold_heads_transposes, pack_qkv_projections
from flashgemm.ort.rewrite.batched import lift_batched_heads


EXTERNAL_DATA_THRESHOLD = 2**31 - 2**24  # protobuf's 2 GB limit, with margin
DECODER_CAUSAL = ("exact", "all", "off")  # rewrite_model's decoder_causal, the first the default


def rewrite_model(model: ir.Model, name: str = "model", shapes: bool = True, attention: bool = False,
                  decoder_causal="exact") -> Report:
    """Rewrite `model` in place; returns the report. shapes: run infer_shapes and infer_symbolic_shapes first.
    attention: then turn each fused site whose P is read by one MatMul(P, V) alone into FusedAttention, where its
    head sizes are ones FusedAttention's tensor-core kernels serve (fuse_attention). decoder_causal (DECODER_CAUSAL;
    True is "all", False "off"): where a decoder's causal and padding masks arrive in one bias, "exact" gives
    FusedAttention sites the causal flag and the padding mask with causal_fill (the same function at every row),
    "all" every fused site (FusedGemmSoftmax's: the same except at rows whose visible keys are all padding), "off"
    none (the op reads the bias at every element and computes every key): causal_masks, exact_causal."""
    decoder_causal = decoder_causal_mode(decoder_causal)
    note = None
    folded = 0
    if shapes:
        infer_shapes(model)
        _, note = infer_symbolic_shapes(model)
        folded = fold_static_terms(model)
        if folded:  # again: the folded terms' shapes reach the scores and what follows them
            infer_shapes(model)
            _, note = infer_symbolic_shapes(model)
    report = Report(model=name, dtype=dtype_of(model), static_terms_folded=folded)
    if note:
        report.notes.append(note)
    report.heads_lifted = lift_batched_heads(model)  # (DeBERTa's [batch * heads, ...] views, before the rules see them)
    # 1. which sites are candidates, and why some are declined (no changes to the model)
    probe_report = Report()
    probe_sites(model, probe_report)
    # 2. the rewrite proper
    used_constants = [n for n in model.graph if n.op_type == "Constant" and n.domain == "" and n.outputs[0].uses()]
    used_inits = [v for v in model.graph.initializers.values() if v.uses()]
    pattern.RewriteRuleSet([FuseScoresSoftmax.rule(report)], commute=True).apply_to_model(model)
    pattern.RewriteRuleSet([FoldKeyScale.rule(report)], commute=True).apply_to_model(model)
    pattern.RewriteRuleSet([FoldBatchedTransposeB.rule(report)]).apply_to_model(model)
    pattern.RewriteRuleSet([FoldTransposeB.rule(report)]).apply_to_model(model)
    pattern.RewriteRuleSet([FoldQueryScale.rule(report)], commute=True).apply_to_model(model)
    drop_constant_masks(model, report)
    narrow_masks(model, report)
    drop_constant_masks(model, report)  # what narrowing left made of constants alone (transformers 5.25's ViT mask)
    report.decoder_causal = decoder_causal
    causal_masks(model, report, take=decoder_causal == "all")
    # 3. constants only the replaced nodes used (the scales): drop them, nothing else
    graph_outputs = set(model.graph.outputs)
    for n in used_constants:
        if n.graph is model.graph and not n.outputs[0].uses() and n.outputs[0] not in graph_outputs:
            model.graph.remove(n, safe=True)
    for v in used_inits:
        if not v.uses() and not v.is_graph_input() and v not in graph_outputs and v.name in model.graph.initializers:
            del model.graph.initializers[v.name]
    for site_name, probed in probe_report.sites.items():
        site = report.site(site_name)
        if site.fused:
            site.reasons = []
        elif probed.reasons:
            site.reasons = probed.reasons
        else:
            site.reasons = ["an intermediate value (scores, scaled or masked scores) has another consumer"]
    for site in report.sites.values():  # a site only the rewrite pass saw (should not happen): keep its reasons
        site.reasons = list(dict.fromkeys(site.reasons))
    report.other_softmax = probe_report.other_softmax
    if attention:
        fuse_attention(model, report)
        if decoder_causal == "exact":
            causal_masks(model, report, take=True, exact_only=True)
        exact_causal(model, report)
        fold_heads_transposes(model, report)
        pack_qkv_projections(model, report)
    if report.fused:
        model.opset_imports[DOMAIN] = 1
        if model.ir_version > 9:
            model.ir_version = 9
    return report


def decoder_causal_mode(value) -> str:
    """One of DECODER_CAUSAL for rewrite_model's decoder_causal (True: "all", False: "off"); ValueError else."""
    mode = {True: "all", False: "off"}.get(value, value) if isinstance(value, bool) else value
    if mode not in DECODER_CAUSAL:
        raise ValueError(f"decoder_causal must be one of {', '.join(DECODER_CAUSAL)} (or a bool), got {value!r}")
    return mode


class ModelFileError(ValueError):
    """A model path that is missing or does not hold an ONNX model; the message names the path and the fix."""


def load_model(path: os.PathLike) -> ir.Model:
    """The ONNX model in `path` (external weights mapped lazily, not read), or ModelFileError. An empty or foreign
    file can parse as a protobuf message with no fields; a real model always has an IR version and an opset."""
    fix = "give an .onnx model, e.g. one exported by flashgemm-getmodel"
    if not os.path.isfile(path):
        raise ModelFileError(f"{path}: no such file ({fix})")
    try:
        model = ir.load(str(path))
    except Exception as err:  # noqa: BLE001  (protobuf's DecodeError, onnx_ir's errors: the file is not a model)
        raise ModelFileError(f"{path} is not an ONNX model: {type(err).__name__}: {err} ({fix})") from None
    if not model.ir_version or not model.opset_imports:
        raise ModelFileError(f"{path} is not an ONNX model: it has no IR version or opset ({fix})")
    return model


def rewrite_file(src: os.PathLike, dst: os.PathLike, log=None, attention: bool = False,
                 decoder_causal="exact") -> Report:
    """Load src, rewrite, save to dst (external data in one dst.data file when over 2 GB, else one file); returns the
    report. ModelFileError when src is not an ONNX model. attention, decoder_causal: as rewrite_model's."""
    src, dst = Path(src), Path(dst)
    model = load_model(src)
    report = rewrite_model(model, name=src.name, attention=attention, decoder_causal=decoder_causal)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not report.fused and not _has_external_data(model) and src.resolve() != dst.resolve():
        shutil.copyfile(src, dst)  # nothing fused: the very same bytes (no inferred shapes added either)
        if log:
            log(report.text())
        return report
    size = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    external = dst.name + ".data" if size > EXTERNAL_DATA_THRESHOLD else None
    for v in model.graph.initializers.values() if external is None else ():
        read_in(v)  # saved in one file, not pointing at a data file beside src
    ir.save(model, str(dst), external_data=external)
    if log:
        log(report.text())
    return report


def _has_external_data(model: ir.Model) -> bool:
    return any(isinstance(v.const_value, ir.ExternalTensor) for v in model.graph.initializers.values())


def count_ops(path_or_model, op_type: str, domain: str = "") -> int:
    model = ir.load(str(path_or_model)) if isinstance(path_or_model, (str, os.PathLike)) else path_or_model
    return sum(1 for n in model.graph if n.op_type == op_type and n.domain == domain)
