"""What a model needs built: its fused sites' workloads and lengths, any-length requests, FusedAttention's
variants (flashgemm-build and flashgemm-tune --from-model)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Optional

import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from flashgemm.ort.model import ATTENTION_OP_TYPE
from flashgemm.ort.op_schema import DOMAIN, OP_TYPE  # (importing it registers the op's shape inference)
from flashgemm.ort.rewrite.values import SUPPORTED, shape_of, attr_of
from flashgemm.ort.rewrite.shapes import infer_shapes, infer_symbolic_shapes
from flashgemm.ort.rewrite.pipeline import rewrite_model, load_model, ModelFileError, count_ops


def any_length_requests(paths, log: Callable = print, heads: bool = False) -> list:
    """(variant, K) of the fused sites with a symbolic length in the models at `paths` (rewritten or not);
    with heads, (variant, K, heads) (model_any_length)."""
    out = []
    for path in paths:
        found = model_any_length(path)
        if found:
            log(f"{path}: {len(found)} site kind(s) with symbolic lengths: "
                + ", ".join(f"{v.key} K={k}" for v, k, _ in found))
        out += [x for x in (found if heads else [(v, k) for v, k, _ in found]) if x not in out]
    return out


def workloads_of_models(paths, log: Callable = print, symbolic_ok: bool = False, attention_ok: bool = False) -> list:
    """The workload specs of every model in `paths` (model_workloads), each model's listed in the log: what
    `flashgemm-tune --from-model` tunes and `flashgemm-build --from-model` builds kernels for. ValueError, with the fix,
    for a missing file, a file that is not a model (ModelFileError) or a model without a fusable site of static M, N, K
    (symbolic_ok: unless it has sites of symbolic lengths, which any-length kernels serve: model_any_length;
    attention_ok: unless its sites are FusedAttention already, rewritten with --attention, whose kernels
    flashgemm-build --attention builds for any length: model_attention_variants)."""
    specs = []
    for path in paths:
        if not os.path.isfile(path):
            raise ModelFileError(f"--from-model {path}: no such file (give the path of an ONNX model)")
        found = model_workloads(path)
        log(f"{path}: {len(found)} attention-score workload(s) of static shape" + "".join(f"\n  {s}" for s in found))
        if not found:
            if model_any_length(path):
                if symbolic_ok:
                    continue
                raise ValueError(f"--from-model {path}: every fusable attention-score site has a symbolic batch or "
                                 f"length; flashgemm-build --from-model builds any-length kernels for them")
            attention_sites = count_ops(load_model(path), ATTENTION_OP_TYPE, DOMAIN)
            if attention_sites:
                if attention_ok:
                    log(f"{path}: {attention_sites} FusedAttention site(s) (rewritten with --attention): their "
                        f"kernels serve every length")
                    continue
                raise ValueError(f"--from-model {path}: its {attention_sites} site(s) are FusedAttention already "
                                 f"(rewritten with --attention): build with flashgemm-build --attention --from-model; "
                                 f"to tune, give --from-model the model before the rewrite (flashgemm-tune "
                                 f"--attention tunes FusedAttention's tiles from its sites)")
            raise ValueError(f"--from-model {path}: no fusable attention-score site with static M, N, K "
                             f"(see flashgemm-rewrite's report)")
        specs += found
    return specs


def mask_kind(node: ir.Node, mask: Optional[ir.Value]) -> str:
    """The op variant's mask kind of a fused node whose mask input is `mask` (flashgemm.op.variant.MASK_KINDS)."""
    if mask is None:
        return "none"
    if mask.dtype != ir.DataType.BOOL:
        return "add"
    return "fill" if attr_of(node, "mask_fill", 0) else "bool"


def _fused_sites(path: os.PathLike):
    """(node, A, B, bias, mask) of every FusedGemmSoftmax node of the model at `path`, shapes inferred; a model without
    fused nodes (not rewritten yet) is rewritten in memory first."""
    model = load_model(path)
    infer_shapes(model)
    infer_symbolic_shapes(model)
    if not any(n.op_type == OP_TYPE and n.domain == DOMAIN for n in model.graph):
        rewrite_model(model, name=Path(path).name, shapes=False)
        ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)  # the rewrite's new values
    for node in model.graph:
        if node.op_type == OP_TYPE and node.domain == DOMAIN:
            ins = list(node.inputs) + [None] * (4 - len(node.inputs))
            yield node, ins[0], ins[1], ins[2], ins[3]


def model_workloads(path: os.PathLike, name: Optional[str] = None, counts: bool = False) -> list:
    """The distinct workload specs (flashgemm.op.workloads.parse strings) of a model's FusedGemmSoftmax nodes: what
    to tune so that a rewritten model runs tuned kernels (`flashgemm-tune --from-model`). Nodes with an unknown dim are
    skipped (a tuned kernel needs static M, N, K; its batch may differ at run time). A model without fused nodes
    (not rewritten yet) is rewritten in memory first. Names: <name>-m<M>n<N>k<K>[-<n>]. counts: (spec, number of
    nodes with it) pairs instead."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "-", name or Path(path).name.split(".")[0])
    specs, nodes = {}, {}
    for node, a, b, bias, mask in _fused_sites(path):
        shapes = [shape_of(v) for v in (a, b, bias, mask)]
        if shapes[0] is None or shapes[1] is None or any(
                s is not None and not all(isinstance(d, int) for d in s) for s in shapes):
            continue  # a symbolic length: any-length kernels serve it (model_any_length)
        dtype = SUPPORTED.get(a.dtype)
        if dtype is None:
            continue
        fields = [f"a={'x'.join(map(str, shapes[0]))}", f"b={'x'.join(map(str, shapes[1]))}",
                  f"transB={attr_of(node, 'transB', 0)}", f"causal={attr_of(node, 'causal', 0)}",
                  f"scale={attr_of(node, 'scale', 1.0):.9g}", f"dtype={dtype}"]
        if bias is not None:
            fields.append(f"bias={'x'.join(map(str, shapes[2])) or 'scalar'}")
        if mask is not None:
            fields.append(f"mask={'x'.join(map(str, shapes[3])) or 'scalar'}:{mask_kind(node, mask)}")
        m, k = shapes[0][-2:]
        n = shapes[1][-2] if attr_of(node, "transB", 0) else shapes[1][-1]
        spec = ",".join(fields)
        specs.setdefault(spec, f"{base}-m{m}n{n}k{k}")
        nodes[spec] = nodes.get(spec, 0) + 1
    # one name per spec; specs of one model sharing M, N, K (other variants) get a numbered suffix
    named, seen = [], {}
    for spec, nm in specs.items():
        seen[nm] = seen.get(nm, 0) + 1
        full = f"{spec},name={nm}" + (f"-{seen[nm]}" if seen[nm] > 1 else "")
        named.append((full, nodes[spec]) if counts else full)
    return named


def model_any_length(path: os.PathLike) -> list:
    """(Variant, K, heads) of each kind of FusedGemmSoftmax site whose batch or lengths are symbolic in the model at
    `path` (rewritten in memory first when it is not): what the bundle's any-length kernels
    (flashgemm.bundle.any_length) must cover for it. heads: A's dim -3 where static, else 1 (the batch to tune at).
    Sites with an unknown K are left to the generic kernel."""
    from flashgemm.op.variant import Variant  # noqa: PLC0415
    out = []
    for node, a, b, bias, mask in _fused_sites(path):
        shapes = [shape_of(v) for v in (a, b)]
        dtype = SUPPORTED.get(a.dtype)
        if dtype is None or shapes[0] is None or shapes[1] is None or all(
                isinstance(d, int) for s in shapes for d in s):
            continue  # static: model_workloads covers it
        k = shapes[0][-1]
        if not isinstance(k, int):
            continue
        variant = Variant(dtype, bool(attr_of(node, "transB", 0)), bias is not None, mask_kind(node, mask),
                          bool(attr_of(node, "causal", 0)))
        heads = shapes[0][-3] if len(shapes[0]) >= 3 and isinstance(shapes[0][-3], int) else 1
        if (variant, k, heads) not in out:
            out.append((variant, k, heads))
    return out


def model_attention_variants(path: os.PathLike) -> list:
    """The Variant of each kind of FusedAttention node in the model at `path` (rewritten in memory with
    rewrite_model(attention=True) first when it holds neither fused op): the variants flashgemm-build --attention
    compiles FusedAttention's tensor-core kernels for."""
    from flashgemm.op.variant import Variant  # noqa: PLC0415
    model = load_model(path)
    infer_shapes(model)
    infer_symbolic_shapes(model)
    if not any(n.op_type in (OP_TYPE, ATTENTION_OP_TYPE) and n.domain == DOMAIN for n in model.graph):
        rewrite_model(model, name=Path(path).name, shapes=False, attention=True)
    out = []
    for node in model.graph:
        if node.op_type != ATTENTION_OP_TYPE or node.domain != DOMAIN:
            continue
        ins = list(node.inputs) + [None] * (5 - len(node.inputs))
        dtype, bias, mask = SUPPORTED.get(ins[0].dtype), ins[3], ins[4]
        if dtype is None:
            continue
        v = Variant(dtype, bool(attr_of(node, "transB", 0)), bias is not None, mask_kind(node, mask),
                    bool(attr_of(node, "causal", 0)), bool(attr_of(node, "causal_fill", 0)))
        if v not in out:
            out.append(v)
    return out
