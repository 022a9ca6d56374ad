"""FusedAttention: a site's MatMul(P, V) fused (P never stored), the Transposes between heads and sequence around
it absorbed (bsnh), and self-attention's Q, K and V projections packed into one MatMul read in place."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from flashgemm.op.variant import ATTENTION_HEAD_SIZES, ATTENTION_N_MULTIPLE_KN
from flashgemm.ort.model import ATTENTION_OP_TYPE
from flashgemm.ort.op_schema import DOMAIN, OP_TYPE  # (importing it registers the op's shape inference)
from flashgemm.ort.rewrite.values import (SiteRejected, shape_of, fmt_dims, constant_array, constant_scalar, attr_of,
                                          same_dim)
from flashgemm.ort.rewrite.report import Report, node_name, site_of


def _attention_chain(fgs: ir.Node, graph: ir.Graph):
    """(nodes reading P on the way to MatMul(P, V), that MatMul, zero_nan_rows, unfilled) or (None, why not, None,
    None). P may pass Casts first (exporters write softmax(...).to(q.dtype); ViT's export goes to float32 and back) as
    long as each casts to P's dtype or to float32, exact for a float16/bfloat16 P, and MatMul gets P's dtype back;
    once, IsNaN + Where(IsNaN(P), 0, P) (exports of PyTorch's scaled_dot_product_attention), which zeroes P's NaN
    rows: FusedAttention's zero_nan_rows (_zeroes_nan_rows); and once, the Where that zeroes the entries a mask_fill
    site filled (_zeroes_filled: DeBERTa's XSoftmax in older transformers): unfilled, the op's plain bool mask. Every
    value on the way has one consumer but that pair, and is no graph output."""
    outputs = set(graph.outputs)
    chain, value, zero_nan_rows, casts, unfilled = [], fgs.outputs[0], 0, 0, False
    while True:
        uses = list(value.uses())
        if value in outputs:
            return None, "P is a graph output", None, None
        if len(uses) != 1:
            pair = _zeroes_nan_rows(value, uses)
            if pair is None or zero_nan_rows:
                return None, f"P has {len(uses)} consumers", None, None
            if isinstance(pair, str):
                return None, pair, None, None
            chain += pair
            value, zero_nan_rows = pair[1].outputs[0], 1
            continue
        user, index = uses[0]
        if user.op_type == "Cast" and user.domain == "" and casts < 2 and \
                attr_of(user, "to", None) in (fgs.outputs[0].dtype.value, ir.DataType.FLOAT.value):
            chain.append(user)
            value, casts = user.outputs[0], casts + 1
            continue
        if user.op_type == "Where" and user.domain == "" and index == 2 and not unfilled and \
                _zeroes_filled(fgs, user):
            chain.append(user)
            value, unfilled = user.outputs[0], True
            continue
        if user.op_type != "MatMul" or user.domain != "" or index != 0:
            return None, f"P is read by {user.op_type or '?'} (input {index}), not as MatMul(P, V)", None, None
        if value.dtype != fgs.outputs[0].dtype:
            return None, f"MatMul reads P as {value.dtype}, not {fgs.outputs[0].dtype}", None, None
        return chain, user, zero_nan_rows, unfilled


def _zeroes_filled(fgs: ir.Node, where: ir.Node) -> bool:
    """Whether `where` is Where(c, 0, P) for a mask_fill site whose bool mask keeps where c does not (the op's mask
    is Not(c), or c is Not(the mask)): the entries the site filled with the lowest, zeroed after the softmax (older
    transformers' DeBERTa, XSoftmax: Where(~m, lowest, S) -> Softmax -> Where(~m, 0, P)). Those two are the op's plain
    bool mask: a masked entry 0, a row masked everywhere zeros."""
    if not attr_of(fgs, "mask_fill", 0) or len(fgs.inputs) < 4 or fgs.inputs[3] is None:
        return False
    keep, cond = fgs.inputs[3], where.inputs[0]

    def not_of(v):
        p = v.producer()
        return p.inputs[0] if p is not None and p.op_type == "Not" and p.domain == "" else None
    if not_of(keep) is not cond and not_of(cond) is not keep:
        return False
    p_rank = len(fgs.outputs[0].shape) if fgs.outputs[0].shape is not None else 0
    try:
        zero = constant_scalar(where.inputs[1], "Where(~mask, X, P)'s X", p_rank)
    except SiteRejected:
        return False
    return zero == 0 and where.outputs[0].dtype == fgs.outputs[0].dtype

def _zeroes_nan_rows(p: ir.Value, uses):
    """[IsNaN, Where] where P's consumers are IsNaN(P) and Where(IsNaN(P), 0, P) with a one-element constant 0 (a
    softmax row is NaN as a whole: a NaN or +inf logit; the pair makes those rows 0, then O = 0 V), None where they are
    not that pair, or why not (a str) where the Where's X is not such a 0."""
    kinds = sorted((u.op_type, i) for u, i in uses)
    if kinds != [("IsNaN", 0), ("Where", 2)] or any(u.domain != "" for u, _ in uses):
        return None
    isnan = next(u for u, _ in uses if u.op_type == "IsNaN")
    where = next(u for u, _ in uses if u.op_type == "Where")
    if where.inputs[0] is not isnan.outputs[0] or len(isnan.outputs[0].uses()) != 1:
        return None
    rank = len(p.shape) if p.shape is not None else 0
    try:
        zero = constant_scalar(where.inputs[1], "Where(IsNaN(P), X, P)'s X", rank)
    except SiteRejected as e:
        return f"P's NaN rows are replaced before MatMul(P, V), but {e.reason}"
    if zero != 0:
        return f"P's NaN rows are replaced by {zero:g} before MatMul(P, V), not by 0"
    if where.outputs[0].dtype != p.dtype:
        return f"Where(IsNaN(P), 0, P) is {where.outputs[0].dtype}, not P's {p.dtype}"
    return [isnan, where]


def _attention_obstacle(fgs: ir.Node, matmul: ir.Node, k=None) -> Optional[str]:
    """Why FusedGemmSoftmax node `fgs` and the MatMul(P, V) reading its P cannot become one FusedAttention, or None:
    V must have P's dtype and a shape provably [..., N, D] with P's N and batch dims that broadcast to P's (MatMul
    would otherwise broadcast P up to V's batch, which FusedAttention does not); and K (`k`: Q's head size as the
    site was matched) = D must be a head size of the tensor-core kernels, with N a multiple of 8 where K is [D, N]
    and N is static (elsewhere FusedAttention's generic kernel would serve, slower than the two ops kept)."""
    p, v = fgs.outputs[0], matmul.inputs[1]
    if v is None or v.dtype != p.dtype:
        return "V's dtype is not P's"
    p_shape, v_shape = shape_of(p), shape_of(v)
    if p_shape is None or v_shape is None or len(v_shape) < 2:
        return f"V's shape {fmt_dims(v_shape)} or P's {fmt_dims(p_shape)} is unknown"
    if not same_dim(v_shape[-2], p_shape[-1]):
        return f"V's rows {fmt_dims(v_shape)} are not provably P's columns {fmt_dims(p_shape)}"
    vb, pb = v_shape[:-2], p_shape[:-2]
    if len(vb) > len(pb) or not all(d == 1 or same_dim(d, e) for d, e in zip(vb[::-1], pb[::-1])):
        return f"V's batch dims {fmt_dims(vb)} do not provably broadcast to P's {fmt_dims(pb)}"
    # the tensor-core kernels' reach (flashgemm/kernel/fused_attention_mma.py): elsewhere FusedAttention would run
    # its generic kernel, slower than the FusedGemmSoftmax + MatMul kept here
    # K: Q's as the site was matched (`k`; the rewrite's own Transposes and Reshapes carry no shape), else Q's now
    q_shape, trans_b = shape_of(fgs.inputs[0]), attr_of(fgs, "transB", 0)
    k = k if isinstance(k, int) else (q_shape[-1] if q_shape else None)
    d = v_shape[-1]
    if not (isinstance(k, int) and k == d and k in ATTENTION_HEAD_SIZES):
        return (f"head sizes K = {'?' if k is None else k}, D = {d}: FusedAttention's tensor-core kernels need both "
                f"one of {', '.join(map(str, ATTENTION_HEAD_SIZES))}")
    n = p_shape[-1]
    if not trans_b and isinstance(n, int) and n % ATTENTION_N_MULTIPLE_KN:
        return (f"K as [D, N] with N = {n}, not a multiple of {ATTENTION_N_MULTIPLE_KN} (the tensor-core kernels "
                f"copy K's rows in 16 bytes)")
    return None


def fuse_attention(model: ir.Model, report: Report) -> None:
    """FusedGemmSoftmax(A, B, bias, mask) -> [Cast to P's own dtype] -> [Where(IsNaN(P), 0, P)] -> [Where(~mask, 0,
    P)] -> MatMul(P, V) becomes FusedAttention(A, B, V, bias, mask), with the same attributes (zero_nan_rows=1 for the
    first Where, mask_fill dropped for the second), where
    _attention_chain and _attention_obstacle allow it; P is then never stored. The MatMul's output keeps its name."""
    report.attention = 0
    for fgs in [n for n in model.graph if n.op_type == OP_TYPE and n.domain == DOMAIN]:
        chain, matmul, zero_nan_rows, unfilled = _attention_chain(fgs, model.graph)
        site = site_of(report, fgs)
        why = matmul if chain is None else _attention_obstacle(fgs, matmul, site.details.get("k") if site else None)
        if why is not None:
            report.attention_left.append((node_name(fgs), why))
            continue
        inputs = list(fgs.inputs) + [None] * (4 - len(fgs.inputs))
        inputs = inputs[:2] + [matmul.inputs[1]] + inputs[2:]
        while inputs and inputs[-1] is None:
            inputs.pop()
        attributes = [a for a in fgs.attributes.values() if not (unfilled and a.name == "mask_fill")]
        if unfilled and site is not None:
            site.details["mask_fill"] = 0  # (the masked entries zeroed after the softmax: a plain bool mask)
        if zero_nan_rows:
            attributes.append(ir.AttrInt64("zero_nan_rows", 1))
        attn = ir.Node(DOMAIN, ATTENTION_OP_TYPE, inputs, attributes=attributes,
                       name=(fgs.name or "fgs") + "_attention", num_outputs=1)
        out = matmul.outputs[0]
        attn.outputs[0].shape, attn.outputs[0].dtype = out.shape, out.dtype
        ir.convenience.replace_nodes_and_values(model.graph, matmul, [fgs, *chain, matmul], [attn], [out],
                                                [attn.outputs[0]])
        report.attention += 1

HEADS_PERM = [0, 2, 1, 3]  # [batch, sequence, heads, head size] <-> [batch, heads, sequence, head size]


def _heads_transpose(node: Optional[ir.Node]) -> bool:
    if node is None or node.op_type != "Transpose" or node.domain != "":
        return False
    perm = node.attributes.get("perm")
    return perm is not None and list(perm.as_ints()) == HEADS_PERM


def _read_shape_from(graph: ir.Graph, shape_node: ir.Node, source: ir.Value, positions: list, tag: str) -> None:
    """Shape(x)[start:end] of a rank-4 x whose dims are dims `positions` of `source` -> Gather(Shape(source), those
    positions) (the same int64 values), so that the Shape no longer reads x. tag names the new nodes."""
    start, end = attr_of(shape_node, "start", 0), attr_of(shape_node, "end", 4)
    start, end = (min(max(v + 4 if v < 0 else v, 0), 4) for v in (start, end))
    base = shape_node.name or "shape"
    name = f"{base}_{tag}_dims"
    while name in graph.initializers:  # (unnamed or like-named Shape nodes)
        name += "_"
    dims = ir.Value(name=name, const_value=ir.tensor(np.array(positions[start:end], dtype=np.int64)))
    graph.register_initializer(dims)
    shp = ir.Node("", "Shape", [source], name=f"{base}_of_{tag}", num_outputs=1)
    gather = ir.Node("", "Gather", [shp.outputs[0], dims], attributes=[ir.AttrInt64("axis", 0)],
                     name=f"{base}_{tag}_gather", num_outputs=1)
    graph.insert_before(shape_node, [shp, gather])
    old = shape_node.outputs[0]
    gather.outputs[0].shape, gather.outputs[0].dtype = old.shape, old.dtype
    old.replace_all_uses_with(gather.outputs[0], replace_graph_outputs=True)
    name = old.name
    graph.remove(shape_node, safe=True)
    gather.outputs[0].name = name


def _shapes_through(graph: ir.Graph, t: ir.Node, keep: ir.Node) -> bool:
    """Whether every consumer of Transpose `t`'s output but `keep` is a Shape node; if so, each becomes
    Gather(Shape(X), its dims' positions in X) of `t`'s input X (the same int64 values), so that only `keep` reads
    the Transpose. (The dynamo exporter reads K's shape beside SDPA.)"""
    out = t.outputs[0]
    others = [n for n, _ in out.uses() if n is not keep]
    if any(n.op_type != "Shape" or n.domain != "" for n in others):
        return False
    for shape_node in others:
        _read_shape_from(graph, shape_node, t.inputs[0], HEADS_PERM, "heads")
    return True


def _identity_reshape(node: ir.Node) -> bool:
    """A Reshape whose output shape is provably its input's (every dim the same number or symbol): a no-op."""
    if node.op_type != "Reshape" or node.domain != "":
        return False
    a, b = shape_of(node.inputs[0]), shape_of(node.outputs[0])
    return a is not None and b is not None and len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b))


def fold_heads_transposes(model: ir.Model, report: Report) -> None:
    """Transpose(X, [0, 2, 1, 3]) -> FusedAttention's Q, K (transB=1) or V, and FusedAttention -> Transpose(O,
    [0, 2, 1, 3]): the op reads X ([batch, sequence, heads, head size], as the projections' Reshape leaves it) and
    writes O in that layout itself, through strides (attribute bsnh; flashgemm/op/variant.py:canonicalize), and the
    Transpose goes. Exporters put four such Transposes around every attention; each is a copy of a [batch, sequence,
    hidden] tensor. A Transpose with another consumer (but Shape: _shapes_through), or whose output is a graph output,
    stays (it runs anyway). A Reshape between O and its Transpose that provably keeps O's shape goes first."""
    outputs = set(model.graph.outputs)
    for attn in [n for n in model.graph if n.op_type == ATTENTION_OP_TYPE and n.domain == DOMAIN]:
        if "bsnh" in attn.attributes:
            continue
        flags = [0, 0, 0, 0]
        for i in (0, 1, 2):
            x = attn.inputs[i]
            t = x.producer() if x is not None else None
            if (i == 1 and not attr_of(attn, "transB", 0)) or not _heads_transpose(t) or x in outputs \
                    or not _shapes_through(model.graph, t, attn) or len(x.uses()) != 1:
                continue
            attn.replace_input_with(i, t.inputs[0])
            model.graph.remove(t, safe=True)
            flags[i] = 1
        o = attn.outputs[0]
        uses = list(o.uses())
        if o not in outputs and len(uses) == 1 and _identity_reshape(uses[0][0]):
            r = uses[0][0]
            if r.outputs[0] not in outputs:
                r.outputs[0].replace_all_uses_with(o)
                model.graph.remove(r, safe=True)
                uses = list(o.uses())
        if o not in outputs and len(uses) == 1 and uses[0][1] == 0 and _heads_transpose(uses[0][0]):
            t = uses[0][0]
            t_out, name = t.outputs[0], t.outputs[0].name
            o.shape = t_out.shape
            t_out.replace_all_uses_with(o, replace_graph_outputs=True)
            model.graph.remove(t, safe=True)
            o.name = name
            flags[3] = 1
        if any(flags):
            attn.attributes["bsnh"] = ir.AttrInt64s("bsnh", flags)
            report.heads_transposes += sum(flags)


def _projection(x: ir.Value, outputs: set):
    """x = Reshape(MatMul(X, W) [+ b], shape) splitting [B, S, h d] into [B, S, h, d], each value read once (but x,
    which Shape nodes may read too): (X, W, b or None, (h, d), x's Shape readers, the nodes x came from), else None."""
    r = x.producer()
    if r is None or r.op_type != "Reshape" or r.domain != "" or x in outputs:
        return None
    readers = [n for n, _ in x.uses()]
    shape_readers = [n for n in readers if n.op_type == "Shape" and n.domain == ""]
    if len(readers) - len(shape_readers) != 1:
        return None
    y, nodes, bias = r.inputs[0], [r], None
    if y is None or len(y.uses()) != 1 or y in outputs:
        return None
    p = y.producer()
    if p is not None and p.op_type == "Add" and p.domain == "":
        for mm_out, b in ((p.inputs[0], p.inputs[1]), (p.inputs[1], p.inputs[0])):
            q = mm_out.producer() if mm_out is not None else None
            bias = constant_array(b) if q is not None and q.op_type == "MatMul" else None
            if bias is not None and bias.ndim == 1 and len(mm_out.uses()) == 1 and mm_out not in outputs:
                nodes.append(p)
                p = q
                break
        else:
            return None
    if p is None or p.op_type != "MatMul" or p.domain != "":
        return None
    w, ys = constant_array(p.inputs[1]), shape_of(y)
    if w is None or w.ndim != 2 or ys is None or len(ys) != 3 or ys[2] != w.shape[1] or \
            (bias is not None and bias.shape != (w.shape[1],)):
        return None
    # [B, S, h d] -> [B, S, h, d]: from x's inferred shape, else from a constant shape (0 keeps a dim, -1 fills)
    dims, c = shape_of(x), constant_array(r.inputs[1])
    if dims is not None and len(dims) == 4 and isinstance(dims[2], int) and isinstance(dims[3], int) \
            and all(same_dim(a, b) for a, b in zip(dims[:2], ys[:2])):
        h, d = dims[2], dims[3]
    elif c is not None and c.shape == (4,) and not (attr_of(r, "allowzero", 0) and 0 in c):
        c = [int(v) for v in c]
        kept = [c[i] == 0 or (isinstance(ys[i], int) and c[i] == ys[i]) for i in (0, 1)]
        if c[2] > 0 and c[3] > 0 and (all(kept) or (kept[0] or kept[1]) and -1 in c[:2]):
            h, d = c[2], c[3]
        elif all(kept) and min(c[2:]) == -1 and max(c[2:]) > 0 and ys[2] % max(c[2:]) == 0:
            h, d = (ys[2] // c[3], c[3]) if c[2] == -1 else (c[2], ys[2] // c[2])
        else:
            return None
    else:
        return None
    if h * d != ys[2]:
        return None
    nodes.append(p)
    return p.inputs[0], w, bias, (h, d), shape_readers, nodes


QKV_DIMS = [0, 1, 3, 4]  # Q's (K's, V's) dims in the packed [batch, sequence, 3, heads, head size]


def pack_qkv_projections(model: ir.Model, report: Report) -> None:
    """FusedAttention whose Q, K and V (all BSNH) are Reshape(MatMul(X, W_q|k|v) [+ b_q|k|v]) of one X: the three
    projections become one MatMul(X, [W_q W_k W_v]) [+ [b_q b_k b_v]] reshaped to [batch, sequence, 3, heads, head
    size], given to the op as Q, K and V (attribute packed_qkv), which reads each slice in place. One GEMM three
    times as wide runs in far fewer waves than three narrow ones, and one bias add replaces three. A missing bias is
    zeros; a Shape read of Q, K or V is rerouted to the packed tensor's dims.
    The packed bias is [1, 1, 3 h d], not [3 h d]: ONNX Runtime's MatMulAddFusion turns a MatMul of static shape plus
    a one-dimensional bias into a Gemm, whose CUDA kernel first writes the bias into every row of the output by a
    kernel of its own and then accumulates onto it; with the bias of the output's rank the Add stays an elementwise
    broadcast."""
    outputs = set(model.graph.outputs)
    packed_any = False
    for attn in [n for n in model.graph if n.op_type == ATTENTION_OP_TYPE and n.domain == DOMAIN]:
        flags = attn.attributes.get("bsnh")
        if flags is None or list(flags.as_ints())[:3] != [1, 1, 1] or "packed_qkv" in attn.attributes:
            continue
        found = [_projection(attn.inputs[i], outputs) for i in (0, 1, 2)]
        if any(f is None for f in found) or len({id(f[0]) for f in found}) != 1 or len({f[3] for f in found}) != 1 \
                or len({(f[1].shape, f[1].dtype) for f in found}) != 1 or len({id(f[5][0]) for f in found}) != 3:
            continue
        x, (h, d), base = found[0][0], found[0][3], (attn.name or "fa") + "_qkv"
        w = np.concatenate([f[1] for f in found], axis=1)
        inits = {"weight": w}
        if any(f[2] is not None for f in found):
            inits["bias"] = np.concatenate([f[2] if f[2] is not None else np.zeros(h * d, w.dtype)
                                            for f in found]).reshape(1, 1, -1)
        inits["shape"] = np.array([0, 0, 3, h, d], np.int64)
        values = {}
        for key, arr in inits.items():
            name = f"{base}_{key}"
            while name in model.graph.initializers:
                name += "_"
            values[key] = ir.Value(name=name, const_value=ir.tensor(arr))
            model.graph.register_initializer(values[key])
        mm = ir.Node("", "MatMul", [x, values["weight"]], name=f"{base}_matmul", num_outputs=1)
        new, y = [mm], mm.outputs[0]
        if "bias" in values:
            new.append(ir.Node("", "Add", [y, values["bias"]], name=f"{base}_add", num_outputs=1))
            y = new[-1].outputs[0]
        new.append(ir.Node("", "Reshape", [y, values["shape"]], name=f"{base}_reshape", num_outputs=1))
        packed = new[-1].outputs[0]
        packed.name, packed.dtype = f"{base}_packed", x.dtype
        known = [attn.inputs[i].shape for i in (0, 1, 2) if attn.inputs[i].shape is not None]
        if known and len(known[0]) == 4:  # Q's (or K's, V's) [B, S, h, d]
            packed.shape = ir.Shape([*known[0][:2], 3, h, d])
        model.graph.insert_before(attn, new)
        for i, f in enumerate(found):
            for shape_node in f[4]:
                _read_shape_from(model.graph, shape_node, packed, QKV_DIMS, "qkv")
            attn.replace_input_with(i, packed)
            for node in f[5]:  # Reshape, [Add], MatMul: consumer first
                model.graph.remove(node, safe=True)
        attn.attributes["packed_qkv"] = ir.AttrInt64("packed_qkv", 1)
        report.qkv_packed += 1
        packed_any = True
    if packed_any:  # the three Reshapes' shape computations, the biases' Identity nodes, the old weights
        RemoveUnusedNodesPass()(model)
        for name, v in list(model.graph.initializers.items()):
            if not v.uses() and not v.is_graph_input() and v not in outputs:
                del model.graph.initializers[name]
