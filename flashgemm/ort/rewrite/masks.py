"""The fused sites' bias and mask: dropped when made of constants that add nothing, narrowed when a broadcast of a
narrower one, and a decoder's causal rule recognized inside (taken as the causal flag on request)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from flashgemm.op.variant import FILL_LOGIT, MASK_FILL, MASKED_AT_OR_BELOW
from flashgemm.ort.op_schema import DOMAIN, OP_TYPE  # (importing it registers the op's shape inference)
from flashgemm.ort.rewrite.values import (SUPPORTED, shape_of, fmt_dims, constant_array, attr_of, same_dim,
                                          broadcast_shape, static_dims)
from flashgemm.ort.rewrite.report import Report, site_of


CONSTANT_INPUT_LIMIT = (64, 1 << 24)  # the most nodes and elements drop_constant_masks evaluates for one input
STATIC_TERM_LIMIT = (1024, 1 << 22)  # ... and fold_static_terms (a BEiT layer's position bias: 663 nodes)


def _constant_value(v: ir.Value, opset: int, static_shapes: bool = False) -> Optional[np.ndarray]:
    """The value of `v` when it is computed from constants alone (initializers, Constant nodes; no graph input), by
    a handful of standard ops, into a tensor of known static shape (CONSTANT_INPUT_LIMIT), evaluated with onnx's
    reference evaluator; else None. static_shapes: also through the static dims of shapes (values.static_dims, a
    graph input's among them), and into a shape not known beforehand (STATIC_TERM_LIMIT bounds it)."""
    import onnx  # noqa: PLC0415
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415
    node_limit, size_limit = STATIC_TERM_LIMIT if static_shapes else CONSTANT_INPUT_LIMIT
    shape = shape_of(v)  # bounded before anything is computed: a static shape of at most the limit's elements
    static = shape is not None and all(isinstance(d, int) for d in shape)
    if not (static or static_shapes) or static and math.prod(shape) > size_limit:
        return None
    nodes, inits, todo = set(), {}, [v]
    while todo:
        x = todo.pop()
        if x.const_value is not None:
            inits[x.name] = x.const_value
            continue
        if x.is_graph_input():
            return None
        dims = static_dims(x) if static_shapes else None
        if dims is not None:
            inits[x.name] = ir.tensor(dims, name=x.name)
            continue
        p = x.producer()
        if p is None or p.domain not in ("", "ai.onnx") or any(
                a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in p.attributes.values()):
            return None
        if p not in nodes:
            nodes.add(p)
            if len(nodes) > node_limit:
                return None
            todo += [i for i in p.inputs if i is not None]
    order = [n for n in v.graph if n in nodes] if v.graph is not None else []
    if len(order) != len(nodes):
        return None
    graph = onnx.helper.make_graph(
        [ir.serde.serialize_node(n) for n in order], "constant", [],
        [onnx.helper.make_empty_tensor_value_info(v.name)],
        initializer=[ir.serde.serialize_tensor(t) for t in inits.values()])
    for t, name in zip(graph.initializer, inits):
        t.name = name
    try:
        (out,) = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)]))\
            .run(None, {})
    except Exception:  # noqa: BLE001  (an op the reference evaluator lacks, or fails on: leave the input)
        return None
    out = np.asarray(out)
    return out if out.size <= size_limit else None


def fold_static_terms(model: ir.Model) -> int:
    """Each term added to scores before a Softmax whose shape inference could not find, but whose value is fixed
    (_constant_value with static_shapes: from constants and the static dims of shapes), becomes an initializer of that
    value; returns how many. BEiT's TorchScript export computes its relative position bias every run by interpolating
    its table to the input's resolution (static: the image size), through ops that leave its shape unknown, so that
    its broadcast to the scores could not be proved."""
    opset = model.opset_imports.get("", 17)
    folded, seen = 0, set()
    for sm in [n for n in model.graph if n.op_type == "Softmax" and n.domain in ("", "ai.onnx")]:
        todo = [sm.inputs[0]]
        while todo:
            add = todo.pop().producer()
            if add is None or add.domain not in ("", "ai.onnx") or add.op_type != "Add" or id(add) in seen:
                continue
            seen.add(id(add))
            for i, term in enumerate(add.inputs):
                shape = shape_of(term)
                if term.const_value is not None or shape is not None and all(isinstance(d, int) for d in shape):
                    todo.append(term)
                    continue
                val = _constant_value(term, opset, static_shapes=True)
                if val is None:
                    todo.append(term)
                    continue
                const = ir.Value(name=f"{term.name}_static", shape=ir.Shape(val.shape), type=term.type,
                                 const_value=ir.tensor(val, name=f"{term.name}_static"))
                model.graph.register_initializer(const)
                add.replace_input_with(i, const)
                folded += 1
    if folded:
        RemoveUnusedNodesPass()(model)
    return folded


def _masks_of(node: ir.Node) -> list:
    """(slot, value) of a FusedGemmSoftmax node's bias and mask inputs that are present."""
    return [(slot, node.inputs[slot]) for slot in (2, 3) if len(node.inputs) > slot and node.inputs[slot] is not None]


def drop_constant_masks(model: ir.Model, report: Report) -> None:
    """A fused site's bias (or additive mask) that is zeros everywhere, or a boolean mask that keeps everything,
    computed from constants alone: dropped. Exporters write one for a model without padding (transformers 5's
    bidirectional mask for ViT: Where(arange(S) >= 0, 0, -65504), expanded to [B, 1, S, S]); ONNX Runtime cannot
    constant-fold it (fp16 Where has no CPU kernel), so every Run would compute it and every site read it."""
    opset = model.opset_imports.get("", 17)
    seen = {}
    for node in [n for n in model.graph if n.op_type == OP_TYPE and n.domain == DOMAIN]:
        for slot, x in _masks_of(node):
            if id(x) not in seen:
                seen[id(x)] = _constant_value(x, opset)
            val = seen[id(x)]
            if val is None or not (np.all(val) if val.dtype == np.bool_ else np.all(val == 0)):
                continue
            node.replace_input_with(slot, None)
            if slot == 3:  # (a bool mask that keeps everything fills nothing)
                node.attributes.pop("mask_fill", None)
            report.constant_masks_dropped += 1
            site = site_of(report, node)
            if site is not None:
                site.details.setdefault("dropped", []).append("bias" if slot == 2 else "mask")
        inputs = list(node.inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()
        if len(inputs) != len(node.inputs):
            node.resize_inputs(len(inputs))
    if report.constant_masks_dropped:  # the masks' computations, unless something else reads them
        RemoveUnusedNodesPass()(model)


# ops through which an integer index range keeps its values (only their arrangement changes)
_VALUE_KEEPING = ("Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity")

# ops whose output holds only values of their data input (input 0; Concat: of every input), in any arrangement
_VALUE_SUBSET = _VALUE_KEEPING + ("Gather", "GatherElements", "GatherND", "Transpose", "Slice", "Flatten", "Tile",
                                  "Concat")


def constant_values(v: Optional[ir.Value], depth: int = 16) -> Optional[np.ndarray]:
    """Every value v can hold (flat, float64), where v is read out of constants through ops that only move values
    (_VALUE_SUBSET) or is a ConstantOfShape (its one value): else None."""
    if v is None or depth == 0:
        return None
    try:
        arr = constant_array(v)
    except Exception:  # noqa: BLE001  (external data not available: nothing is known of it)
        return None
    if arr is not None:
        return np.asarray(arr, dtype=np.float64).ravel()
    p = v.producer()
    if p is None or p.domain != "":
        return None
    if p.op_type == "ConstantOfShape":
        value = p.attributes.get("value")
        return np.asarray(value.as_tensor().numpy() if value is not None else [0.0], dtype=np.float64).ravel()
    if p.op_type not in _VALUE_SUBSET:
        return None
    found = [constant_values(x, depth - 1) for x in ([x for x in p.inputs if x is not None]
                                                      if p.op_type == "Concat" else p.inputs[:1])]
    return None if not found or any(f is None for f in found) else np.concatenate(found)


def _source(v: ir.Value, op_type: str) -> Optional[ir.Node]:
    """The `op_type` node whose values `v` holds, through ops that keep its values (_VALUE_KEEPING); else None."""
    p = v.producer()
    while p is not None and p.domain in ("", "ai.onnx") and p.op_type in _VALUE_KEEPING:
        p = p.inputs[0].producer()
    return p if p is not None and p.domain in ("", "ai.onnx") and p.op_type == op_type else None


def _range(v: ir.Value) -> Optional[tuple]:
    """(start, delta) when `v` holds Range(start, limit, delta) of constant start and delta (_source); else None."""
    p = _source(v, "Range")
    if p is None:
        return None
    start, delta = constant_array(p.inputs[0]), constant_array(p.inputs[2])
    if start is None or delta is None or start.size != 1 or delta.size != 1:
        return None
    return start.item(), delta.item()


def _range_start(v: ir.Value) -> Optional[float]:
    """The least element of `v` when it holds an increasing index range (_range with delta > 0); else None."""
    r = _range(v)
    return r[0] if r is not None and r[1] > 0 else None


def _always_true(v: ir.Value, opset: int) -> bool:
    """Whether every element of the boolean `v` is provably true: a constant of trues, an And of such (or a Cast of such
    to bool), or an index range compared with a constant it never falls below (GreaterOrEqual(Range(0, S, 1), 0):
    transformers 5 writes one into every bidirectional mask, which broadcasts a [B, 1, 1, S] padding mask to
    [B, 1, S, S])."""
    val = _constant_value(v, opset)
    if val is not None:
        return val.dtype == np.bool_ and bool(np.all(val))
    p = v.producer()
    if p is None or p.domain not in ("", "ai.onnx"):
        return False
    if p.op_type == "And":
        return _always_true(p.inputs[0], opset) and _always_true(p.inputs[1], opset)
    if p.op_type == "Cast" and p.inputs[0].dtype == ir.DataType.BOOL:  # (to bool, as TorchScript exports write it)
        return attr_of(p, "to", 0) == ir.DataType.BOOL and _always_true(p.inputs[0], opset)
    if p.op_type in ("GreaterOrEqual", "Greater"):
        start, c = _range_start(p.inputs[0]), constant_array(p.inputs[1])
        if start is None or c is None or c.size != 1:
            return False
        return start >= c.item() if p.op_type == "GreaterOrEqual" else start > c.item()
    return False


def _placed(v: ir.Value, axis: int, length) -> bool:
    """Whether `v` is a vector placed along `axis` (negative, from the last): that dim `length` (known or symbolic)
    and every other dim 1."""
    shape = shape_of(v)
    return shape is not None and len(shape) >= -axis and same_dim(shape[axis], length) and all(
        d == 1 for i, d in enumerate(shape) if i != len(shape) + axis)


def _index_range(v: ir.Value, axis: int, length) -> Optional[float]:
    """The first index of `v` when it is Range(start, limit, 1) of constant start (_range) placed along `axis`
    (_placed); else None."""
    if not _placed(v, axis, length):
        return None
    r = _range(v)
    return r[0] if r is not None and r[1] == 1 else None


def _unit_range(v: ir.Value) -> Optional[ir.Node]:
    """The Range(start, limit, 1) node whose values `v` holds (_source); else None."""
    p = _source(v, "Range")
    delta = None if p is None else constant_array(p.inputs[2])
    return p if delta is not None and delta.size == 1 and delta.item() == 1 else None


def _uncast(v: ir.Value) -> ir.Value:
    """`v` with the Casts that compute it left out (lengths, which TorchScript exports cast between integer types)."""
    p = v.producer()
    while p is not None and p.domain in ("", "ai.onnx") and p.op_type == "Cast":
        v, p = p.inputs[0], p.inputs[0].producer()
    return v


def _sum_of(v: ir.Value, a: ir.Value, b: ir.Value) -> bool:
    """Whether `v` is Add(a, b) or Add(b, a), Casts looked through (_uncast)."""
    p = _uncast(v).producer()
    if p is None or p.domain not in ("", "ai.onnx") or p.op_type != "Add":
        return False
    x, y, a, b = _uncast(p.inputs[0]), _uncast(p.inputs[1]), _uncast(a), _uncast(b)
    return (x is a and y is b) or (x is b and y is a)


def _cache_causal_rule(kv: ir.Value, q: ir.Value, m, n) -> bool:
    """Whether kv_idx <= q_idx is the causal rule of a decoder with a cache: the m queries at positions past ..
    past + m - 1 and the n = past + m keys at 0 .. n - 1, so key j <= query i + (n - m), the op's rule. Proved on the
    graph, as transformers' exports compute the positions: kv_idx = Range(0, L, 1) and q_idx = Range(past, L, 1) of
    the same limit L, or q_idx = Range(0, s, 1) + past with L = past + s (past a scalar, the cache's length; Casts
    of these lengths looked through)."""
    if not _placed(kv, -1, n) or not _placed(q, -2, m):
        return False
    kr = _unit_range(kv)
    start = None if kr is None else constant_array(kr.inputs[0])
    if start is None or start.size != 1 or start.item() != 0:
        return False
    limit = kr.inputs[1]
    qr = _unit_range(q)
    if qr is not None:
        return _uncast(qr.inputs[1]) is _uncast(limit)
    p = _source(q, "Add")
    if p is None:
        return False
    for r, past in (p.inputs, reversed(p.inputs)):
        rr = _unit_range(r)
        shape = shape_of(past)
        if rr is None or shape is None or math.prod(shape) != 1 or not _sum_of(limit, past, rr.inputs[1]):
            continue
        s0 = constant_array(rr.inputs[0])
        if s0 is not None and s0.size == 1 and s0.item() == 0:
            return True
    return False


def _causal_rule(v: ir.Value, m, n, opset: int = 17) -> bool:
    """Whether the boolean `v` is the op's causal rule for scores [..., m, n], key j <= query i + (n - m):
    LessOrEqual(kv_idx, q_idx) or GreaterOrEqual(q_idx, kv_idx) of index ranges along the last axis (the n keys)
    and the one before it (the m queries), as transformers' decoder masks write it: from one start where m = n
    (no cache: query i is position i), or a cache's positions (_cache_causal_rule); or made of constants (a static
    export's) whose values are that triangle."""
    p = v.producer()
    if p is None or p.domain not in ("", "ai.onnx") or p.op_type not in ("LessOrEqual", "GreaterOrEqual"):
        return False
    if isinstance(m, int) and isinstance(n, int):
        val = _constant_value(v, opset)
        if val is not None:  # (a triangle of trues alone, one query after its cache, masks nothing: no rule)
            tri = np.tril(np.ones((m, n), bool), k=n - m)
            return (val.dtype == np.bool_ and val.ndim >= 2 and val.shape[-2:] == (m, n) and not tri.all()
                    and bool(np.all(val == tri)))
    kv, q = p.inputs if p.op_type == "LessOrEqual" else reversed(p.inputs)
    if not same_dim(m, n):
        return _cache_causal_rule(kv, q, m, n)
    start = _index_range(kv, -1, n)
    return start is not None and _index_range(q, -2, m) == start


def _and_terms(v: ir.Value) -> list:
    """The terms of an And tree (Expands and Casts to bool on the way dropped), `v` itself when it is no And."""
    p = v.producer()
    while p is not None and p.domain in ("", "ai.onnx") and (
            p.op_type == "Expand" or p.op_type == "Cast" and attr_of(p, "to", 0) == ir.DataType.BOOL):
        v, p = p.inputs[0], p.inputs[0].producer()
    if p is None or p.domain not in ("", "ai.onnx") or p.op_type != "And":
        return [v]
    return _and_terms(p.inputs[0]) + _and_terms(p.inputs[1])


def _causal_where(v: ir.Value, m, n, opset: int = 17) -> Optional[ir.Node]:
    """The Where(causal rule And ..., 0, fill) that computes the additive `v` (through Expands and Casts), fill at or
    below the masking threshold: a decoder's causal and padding masks in one, as transformers builds them for scores
    [..., m, n]; else None."""
    p = v.producer()
    while p is not None and p.domain in ("", "ai.onnx") and p.op_type in ("Expand", "Cast"):
        p = p.inputs[0].producer()
    if p is None or p.domain not in ("", "ai.onnx") or p.op_type != "Where":
        return None
    keep, fill = constant_array(p.inputs[1]), constant_array(p.inputs[2])
    if keep is None or fill is None or keep.size != 1 or fill.size != 1 or keep.item() != 0:
        return None
    if not fill.item() <= MASKED_AT_OR_BELOW or not any(_causal_rule(t, m, n, opset)
                                                         for t in _and_terms(p.inputs[0])):
        return None
    return p


# elementwise ops (numpy broadcasting): on inputs that broadcast to theirs, their output broadcasts to theirs
_ELEMENTWISE = ("Identity", "Cast", "Not", "Neg", "And", "Or", "Add", "Sub", "Mul", "Div", "Equal", "Less",
                "LessOrEqual", "Greater", "GreaterOrEqual", "Where")


def _narrowed(v: ir.Value, opset: int, new: list) -> ir.Value:
    """A value that equals `v` once broadcast to v's shape, as narrow as its computation allows: Expands dropped,
    and the always-true terms of Ands (_always_true), through elementwise ops (_ELEMENTWISE: an elementwise op
    commutes with broadcasting its inputs). New nodes go to `new` (in order); `v` itself when nothing narrows."""
    p = v.producer()
    if p is None or p.domain not in ("", "ai.onnx"):
        return v
    if p.op_type == "Expand":
        return _narrowed(p.inputs[0], opset, new)
    if p.op_type not in _ELEMENTWISE:
        return v
    if p.op_type == "And":
        a, b = p.inputs
        if _always_true(a, opset):
            return _narrowed(b, opset, new)
        if _always_true(b, opset):
            return _narrowed(a, opset, new)
    ins = [None if x is None else _narrowed(x, opset, new) for x in p.inputs]
    if all(x is y for x, y in zip(ins, p.inputs)):
        return v
    node = ir.Node("", p.op_type, ins, attributes=list(p.attributes.values()), name=f"{p.name}_narrow",
                   num_outputs=1)
    out = node.outputs[0]
    out.name, out.dtype = f"{v.name}_narrow", v.dtype
    out.shape = broadcast_shape(*[x for x in ins if x is not None])
    new.append(node)
    return out


def narrow_masks(model: ir.Model, report: Report) -> None:
    """A fused site's bias or mask that is a broadcast of a narrower one (an Expand, or an always-true term of an
    And, on its way: _narrowed) is given to the op narrow; the op broadcasts it itself. transformers 5's
    bidirectional masks AND a [B, 1, 1, S] padding mask with `q_idx >= 0` over [1, 1, S, 1], older exports Expand
    it to [B, 1, S, S]: so narrowed, the op reads one row for every row of the scores (stride 0: its kernels read a
    thread's columns once for all its rows) instead of a materialized [B, 1, S, S]."""
    opset = model.opset_imports.get("", 17)
    done = {}
    for node in [n for n in model.graph if n.op_type == OP_TYPE and n.domain == DOMAIN]:
        for slot, x in _masks_of(node):
            if id(x) not in done:
                new = []
                narrow = _narrowed(x, opset, new)
                wide, thin = shape_of(x), shape_of(narrow)
                # taken where it provably broadcasts a dim of x that is not 1 (else the copy would buy nothing)
                if wide is None or thin is None or not any(
                        t == 1 and w != 1 for t, w in zip(reversed(thin), reversed(wide))) and len(thin) >= len(wide):
                    for n in new:  # not taken: a node outside the graph still counts as a use of its inputs
                        for i in range(len(n.inputs)):
                            n.replace_input_with(i, None)
                    narrow, new = x, []
                done[id(x)] = narrow
                if new:
                    model.graph.insert_after(x.producer(), new)
            if done[id(x)] is x:
                continue
            node.replace_input_with(slot, done[id(x)])
            report.masks_narrowed += 1
            site = site_of(report, node)
            if site is not None:
                site.details["narrowed" if slot == 2 else "mask_narrowed"] = fmt_dims(shape_of(done[id(x)]))
    if report.masks_narrowed:  # the wide computations, unless something else reads them
        RemoveUnusedNodesPass()(model)


def _without_causal_rule(where: ir.Node, m, n, opset: int, new: list) -> Optional[ir.Value]:
    """The decoder mask computed by `where` (_causal_where) with its causal rule left out of the And, narrowed
    (_narrowed: a padding mask [B, 1, 1, S]); None when the rule was its only term. New nodes go to `new`. Its fill is
    FILL_LOGIT where the export's is lower (bfloat16's lowest, whose log2-scaled logit overflows the CUDA kernels):
    the keys past the diagonal are there with causal_fill, so a row seeing only padding attends to every key, as in
    the export; every other row reads those keys as masked either way."""
    terms = [t for t in _and_terms(where.inputs[0]) if not _causal_rule(t, m, n, opset)]
    if not terms or all(_always_true(t, opset) for t in terms):
        return None
    cond = terms[0]
    for i, t in enumerate(terms[1:]):
        node = ir.Node("", "And", [cond, t], name=f"{where.name}_padding_and{i}", num_outputs=1)
        node.outputs[0].name, node.outputs[0].dtype = f"{where.name}_padding_keep{i}", ir.DataType.BOOL
        node.outputs[0].shape = broadcast_shape(cond, t)
        new.append(node)
        cond = node.outputs[0]
    fill, dtype = where.inputs[2], SUPPORTED.get(where.outputs[0].dtype)
    value = constant_array(fill)
    if dtype is not None and float(value.item()) < FILL_LOGIT[dtype]:  # (bfloat16's lowest: the kernels' fill instead)
        const = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", ir.tensor(
            np.full(value.shape, FILL_LOGIT[dtype]).astype(value.dtype), name=f"{where.name}_padding_fill"))],
            name=f"{where.name}_padding_fill", num_outputs=1)
        fill = const.outputs[0]
        fill.name, fill.dtype, fill.shape = f"{where.name}_padding_fill", where.outputs[0].dtype, ir.Shape(value.shape)
        new.append(const)
    node = ir.Node("", "Where", [cond, where.inputs[1], fill], name=f"{where.name}_padding", num_outputs=1)
    out = node.outputs[0]
    out.name, out.dtype = f"{where.outputs[0].name}_padding", where.outputs[0].dtype
    out.shape = broadcast_shape(cond, where.inputs[1], fill)
    new.append(node)
    return _narrowed(out, opset, new)


def causal_masks(model: ir.Model, report: Report, take: bool = False, exact_only: bool = False) -> None:
    """At each fused site whose bias is a decoder's causal and padding masks in one (_causal_where), records the
    mask's fill; the report says that the op reads that bias at every element and computes every key. take: the
    causal rule goes to the op's causal flag instead, and the bias keeps the rest, narrowed (the padding mask [B, 1,
    1, S]); the keys past the diagonal are then skipped. Not the same function on one kind of row: a row whose
    visible keys are all padding (a left-padded sequence's first tokens, a sequence of padding alone) is the softmax
    over every key in the export (each at the fill), over its visible keys with the flag; every other row is the
    same, and no other row reads those tokens (their keys are masked for every query). exact_only (after
    fuse_attention): the FusedAttention sites alone whose fill is their dtype's lowest, which exact_causal then makes
    the same function at every row."""
    from flashgemm.ort.model import ATTENTION_OP_TYPE  # noqa: PLC0415
    opset = model.opset_imports.get("", 17)
    op_type, slot = (ATTENTION_OP_TYPE, 3) if exact_only else (OP_TYPE, 2)
    done = {}
    for node in [n for n in model.graph if n.op_type == op_type and n.domain == DOMAIN]:
        out = shape_of(node.outputs[0])
        if attr_of(node, "causal", 0) or out is None or len(out) < 2 or len(node.inputs) <= slot:
            continue
        keys = shape_of(node.inputs[2]) if exact_only else out  # (V: [..., n, d])
        if keys is None or len(keys) < 2:
            continue
        m, n = out[-2], keys[-2] if exact_only else keys[-1]
        bias, site = node.inputs[slot], site_of(report, node)
        where = None if bias is None else _causal_where(bias, m, n, opset)
        if where is None:
            continue
        fill = float(constant_array(where.inputs[2]).item())
        if exact_only and fill != MASK_FILL.get(SUPPORTED.get(node.inputs[0].dtype), 0.0):
            continue
        if site is not None:
            site.details["causal_in_bias"] = fill
        if not take:
            continue
        if id(bias) not in done:  # one mask feeds every layer: stripped once
            new = []
            done[id(bias)] = _without_causal_rule(where, m, n, opset, new)
            if new:
                model.graph.insert_after(where, new)
        rest = done[id(bias)]
        node.replace_input_with(slot, rest)
        node.attributes["causal"] = ir.AttrInt64("causal", 1)
        report.causal_taken += 1
        if site is not None:
            site.details["causal_taken"] = fmt_dims(shape_of(rest)) if rest is not None else "no bias"
    if report.causal_taken:
        RemoveUnusedNodesPass()(model)


def exact_causal(model: ir.Model, report: Report) -> None:
    """Each FusedAttention node that took a decoder mask's causal rule (causal_masks, take=True) filled at its
    dtype's lowest, and kept its padding as the bias, gets causal_fill=1: the keys past the diagonal at the lowest
    logit, as that mask puts them, so that a row whose visible keys are all padding attends to every key as in the
    export (its kernels skip those keys for every row tile that sees a kept key). The same function then at every
    row; FusedGemmSoftmax nodes keep the causal flag alone (their tensor-core kernels have no causal_fill)."""
    from flashgemm.ort.model import ATTENTION_OP_TYPE  # noqa: PLC0415
    for node in [n for n in model.graph if n.op_type == ATTENTION_OP_TYPE and n.domain == DOMAIN]:
        site = site_of(report, node)
        dtype = SUPPORTED.get(node.inputs[0].dtype)
        if site is None or "causal_taken" not in site.details or len(node.inputs) < 4 or node.inputs[3] is None or \
                dtype is None or site.details.get("causal_in_bias") != MASK_FILL[dtype]:
            continue
        node.attributes["causal_fill"] = ir.AttrInt64("causal_fill", 1)
        site.details["causal_fill"] = 1
        report.causal_exact += 1
