"""The pattern rules (onnxscript): Softmax(MatMul(A, B) [* scale] [+ M [+ M2]]) -> FusedGemmSoftmax, then K's
transpose and Q's and K's constant scales folded into the op (the package docstring lists them in order)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern

from flashgemm.op.variant import MASK_FILL, MASKED_AT_OR_BELOW, canonicalize
from flashgemm.ort.op_schema import DOMAIN
from flashgemm.ort.rewrite.values import (SUPPORTED, SiteRejected, reject, shape_of, fmt_dims, constant_array,
                                          constant_scalar, attr_of,
                                          same_dim, dtype_name)
from flashgemm.ort.rewrite.report import Report, node_name, site_of
from flashgemm.ort.rewrite.masks import constant_values


def _matmul_shape(a, b):
    """ONNX MatMul's output shape for ranks >= 2 (dims may be symbolic / None)."""
    ba, bb = a[:-2], b[:-2]
    n = max(len(ba), len(bb))
    ba, bb = [1] * (n - len(ba)) + ba, [1] * (n - len(bb)) + bb
    batch = []
    for x, y in zip(ba, bb):
        batch.append(y if x == 1 else x if y == 1 else x if x == y else None)
    return batch + [a[-2], b[-1]]


def _check_broadcast(m_shape, s_shape):
    """Raise unless m_shape provably broadcasts to s_shape without changing it."""
    if len(m_shape) > len(s_shape):
        reject(f"added operand of rank {len(m_shape)} > the scores' rank {len(s_shape)} would change their shape")
    for i in range(1, len(m_shape) + 1):
        md, sd = m_shape[-i], s_shape[-i]
        if md == 1:
            continue
        if md is None:
            reject(f"added operand {fmt_dims(m_shape)}: dim {len(m_shape) - i} is unknown, cannot prove it "
                   f"broadcasts to the scores {fmt_dims(s_shape)}")
        if md == sd and sd is not None:
            continue
        dim = f"dim {len(m_shape) - i}: {md} vs {'?' if sd is None else sd}"
        if isinstance(md, int) and isinstance(sd, int):
            reject(f"added operand {fmt_dims(m_shape)} is not broadcastable to the scores {fmt_dims(s_shape)} ({dim})")
        reject(f"added operand {fmt_dims(m_shape)}: cannot prove it broadcasts to the scores {fmt_dims(s_shape)} "
               f"({dim})")


def _broadcast_dims(x, y):
    """The broadcast of two shape_of lists that each broadcast to the scores (_check_broadcast): a dim is the one that
    is not 1."""
    rank = max(len(x), len(y))
    x, y = [1] * (rank - len(x)) + list(x), [1] * (rank - len(y)) + list(y)
    return [b if a == 1 else a for a, b in zip(x, y)]


def _softmax_axis_ok(node: ir.Node, rank: Optional[int], opset: int):
    attr = node.attributes.get("axis")
    axis = attr.as_int() if attr is not None else (-1 if opset >= 13 else 1)
    if axis == -1:
        return
    if rank is None:
        reject(f"Softmax axis={axis} and the rank of its input is unknown: cannot prove it is the last axis")
    if axis != rank - 1:
        reject(f"Softmax over axis {axis} of a rank-{rank} tensor: not the last axis")


class FuseScoresSoftmax(pattern.RewriteRuleClassBase):
    """MatMul -> [Mul|Div by a constant] -> [Add M [-> Add M2]] -> Softmax(last axis)  =>  FusedGemmSoftmax.

    Two added terms (a relative position bias and the padding mask: MPNet, T5, BEiT), read as far as constants
    allow (constant_values: a position bias gathered from its table, zeros of a ConstantOfShape): a term of zeros
    (T5's cross-attention bias) is left out; a term whose values all lie above the op's masking threshold becomes
    the op's additive mask, which adds such values as they are, and the other its bias, so that both are added in
    float32 as the original adds them. Otherwise the two become one bias, Add(M, M2),
    taken in the model's dtype before the scores (the same terms rounded in another order; where one term is the
    dtype's lowest the sum keeps nothing of the other, so a row masked everywhere, a sequence of padding alone,
    comes out otherwise than the original's, which rounds there too). ONNX Runtime's common-subexpression
    elimination leaves one such Add where the layers share M and M2."""

    def __init__(self, report: Optional[Report] = None):
        super().__init__("FuseScoresSoftmax")
        self.report = report
        self._attrs = None

    def pattern(self, op, a, b, c, m, m2, cond, fill):
        s = op.MatMul(a, b, _outputs=["scores"])
        scaled = pattern.OrValue([op.Mul(s, c), op.Div(s, c), s], tag_var="scaling",
                                 tag_values=["Mul", "Div", "None"])
        masked = pattern.OrValue([op.Add(op.Add(scaled, m), m2), op.Add(scaled, m), scaled], tag_var="adds",
                                 tag_values=[2, 1, 0])
        filled = pattern.OrValue([op.Where(cond, fill, masked), op.Where(cond, masked, fill), masked],
                                 tag_var="where", tag_values=["fill_where_true", "fill_where_false", None])
        return op.Softmax(filled, _allow_other_attributes=True, _outputs=["probs"])

    def check(self, context, a, b, c, m, scores, probs, scaling, adds, where, m2=None, cond=None, fill=None, **_):
        softmax = probs.producer()
        site = self.report.site(node_name(softmax)) if self.report is not None else None
        try:
            self._attrs = self._check(context, a, b, c, m, m2, scores, probs, scaling, adds)
            if where is not None:
                self._attrs.update(self._check_where(cond, fill, where, scores.dtype or a.dtype))
        except SiteRejected as e:
            if site is not None:
                site.reasons.append(e.reason)
            return pattern.MatchResult().fail(e.reason, e.sources or None)
        return pattern.MatchResult()

    def _check(self, context, a, b, c, m, m2, scores, probs, scaling, adds):
        dtype = scores.dtype or a.dtype
        if dtype is None:
            reject("the scores' dtype is unknown", scores)
        if dtype not in SUPPORTED:
            reject(f"the scores are {dtype_name(dtype)}: FusedGemmSoftmax takes float16/bfloat16 only "
                   f"(export the model in float16; no implicit cast. A float16 model whose export computes "
                   f"attention in float32, as TorchScript's export of SDPA attention does, fuses when exported with "
                   f"the dynamo exporter or attn_implementation=\"eager\")", scores)
        a_shape, b_shape = shape_of(a), shape_of(b)
        if a_shape is None or b_shape is None:
            reject(f"MatMul input rank unknown (A {fmt_dims(a_shape)}, B {fmt_dims(b_shape)})", scores)
        if len(a_shape) < 2 or len(b_shape) < 2:
            reject(f"MatMul with a 1-D input (A {fmt_dims(a_shape)}, B {fmt_dims(b_shape)}): the op needs rank >= 2",
                   scores)
        s_shape = _matmul_shape(a_shape, b_shape)
        inferred = shape_of(scores)
        if inferred is not None and len(inferred) == len(s_shape):  # prefer inferred dims where ours are unknown
            s_shape = [x if x is not None else y for x, y in zip(s_shape, inferred)]
        opset = context.model.opset_imports.get("", 17) if context.model is not None else 17
        _softmax_axis_ok(probs.producer(), len(s_shape), opset)
        scale = 1.0
        if scaling == "Mul":
            scale = constant_scalar(c, "scale (Mul operand)", len(s_shape))
        elif scaling == "Div":
            d = constant_scalar(c, "scale (Div divisor)", len(s_shape))
            if d == 0.0:
                reject("division by a zero constant", c)
            scale = 1.0 / d
        if not math.isfinite(float(np.float32(scale))):
            reject(f"scale {scale} overflows float32")
        m_shape = None
        for term in (m, m2)[:adds]:
            t_shape = shape_of(term)
            if t_shape is None:
                reject(f"added operand {term.name}: shape unknown, cannot prove it broadcasts to the scores", term)
            _check_broadcast(t_shape, s_shape)
            if term.dtype is not None and term.dtype != dtype:
                reject(f"added operand is {dtype_name(term.dtype)} but the scores are {dtype_name(dtype)}", term)
            m_shape = t_shape if m_shape is None else _broadcast_dims(m_shape, t_shape)
        # the extra inputs: ("bias", term) | ("bias and additive mask", bias, mask) | ("summed", M, M2) | ()
        how = () if not adds else ("bias", m) if adds == 1 else ("summed", m, m2)
        if adds == 2:
            values = [constant_values(t) for t in (m, m2)]
            zeros = [v is not None and not v.any() for v in values]  # (NaN is not zero): x + 0 is x
            above = [v is not None and not (v <= MASKED_AT_OR_BELOW).any() for v in values]
            if any(zeros):
                how = ("bias", m2 if zeros[0] else m)
            elif any(above):
                how = ("bias and additive mask", m2, m) if above[0] else ("bias and additive mask", m, m2)
            if how[0] != "summed":
                m_shape = shape_of(how[1])
        if len(s_shape) >= 5:
            dims = [a_shape, b_shape] + ([m_shape] if m_shape is not None else [])
            if any(not isinstance(d, int) for shape in dims for d in shape):
                reject(f"rank-{len(s_shape)} scores with symbolic dims: cannot prove the op's batch broadcast "
                       f"(two independent batch dims at most) accepts them")
            try:
                canonicalize(a_shape, b_shape, False, m_shape, None)
            except ValueError as e:
                reject(f"the op rejects these shapes: {e}")
        return {"scale": float(np.float32(scale)), "bias": bool(adds), "bias_shape": m_shape, "how": how,
                "dtype": SUPPORTED[dtype], "shape": s_shape, "k": a_shape[-1]}

    def _check_where(self, cond, fill, where, dtype) -> dict:
        """Where(cond, lowest, scores) (or Where(cond, scores, lowest)) before the Softmax: the op's bool mask with
        mask_fill, which gives its false entries the dtype's lowest logit exactly as the Where does (a row false
        everywhere is then uniform, as here). Any other fill is another function: -inf makes such a row NaN."""
        attrs = self._attrs
        if attrs["how"] and attrs["how"][0] == "bias and additive mask":  # the op's mask slot is the Where's
            attrs["how"] = ("summed", *attrs["how"][1:])
            attrs["bias_shape"] = _broadcast_dims(shape_of(attrs["how"][1]), shape_of(attrs["how"][2]))
        if cond.dtype != ir.DataType.BOOL:
            reject(f"Where's condition is {dtype_name(cond.dtype)}, not bool", cond)
        c_shape = shape_of(cond)
        if c_shape is None:
            reject("Where's condition: shape unknown, cannot prove it broadcasts to the scores", cond)
        _check_broadcast(c_shape, attrs["shape"])
        lowest = MASK_FILL[SUPPORTED[dtype]]
        value = constant_array(fill)
        if value is None or value.size != 1 or value.ndim > len(attrs["shape"]):
            reject("Where's fill is not a one-element constant", fill)
        value = float(np.asarray(value, np.float64).reshape(()))
        if value != lowest:
            reject(f"Where fills the masked scores with {value:g}: the op's mask_fill takes {dtype_name(dtype)}'s "
                   f"lowest, {lowest:g}, alone (with another fill a row masked everywhere is another function)",
                   fill)
        return {"where": where, "mask_shape": c_shape}

    def rewrite(self, op, a, b, c, m, scores, probs, adds, where, m2=None, cond=None, **_):
        attrs = self._attrs
        how = attrs["how"]
        if how and how[0] == "summed":
            inputs = [a, b, op.Add(m, m2)]
            inputs[2].type, inputs[2].shape = m.type, ir.Shape(attrs["bias_shape"])
        else:
            inputs = [a, b, *how[1:]]
        extra = {}
        if where is not None:  # the op's mask keeps where the Where does not fill
            keep = cond if where == "fill_where_false" else _negated(op, cond)
            inputs = inputs[:3] + [None] * (3 - len(inputs)) + [keep]
            extra["mask_fill"] = 1
        out = op.FusedGemmSoftmax(*inputs, scale=attrs["scale"], transB=0, causal=0, **extra, _domain=DOMAIN)
        out.type, out.shape = probs.type, probs.shape
        if self.report is not None:
            site = self.report.site(node_name(probs.producer()))
            site.fused, site.details = True, {k: attrs[k] for k in ("scale", "bias", "bias_shape")}
            if adds == 2:
                site.details["bias_terms"] = how[0] if how[0] != "bias" else "a term of zeros left out"
            if how and how[0] == "bias and additive mask":
                site.details["mask_shape"] = shape_of(how[2])
            if where is not None:
                site.details["mask_shape"], site.details["mask_fill"] = attrs["mask_shape"], 1
            site.details["transB"] = 0
            site.details["lengths"] = [d if isinstance(d, int) else str(d) for d in attrs["shape"][-2:]]
            site.details["k"] = attrs["k"] if isinstance(attrs["k"], int) else str(attrs["k"])
            out.producer().name = "FusedGemmSoftmax:" + site.softmax  # so rules 2-5 can find the site
        return out


def _negated(op, cond: ir.Value) -> ir.Value:
    """Not(cond): x where cond = Not(x) (through Casts of a bool to bool), else a new Not."""
    v = cond
    while v.producer() is not None and v.producer().op_type == "Cast" and v.producer().domain == "" and \
            v.producer().inputs[0].dtype == ir.DataType.BOOL:
        v = v.producer().inputs[0]
    p = v.producer()
    if p is not None and p.op_type == "Not" and p.domain == "":
        return p.inputs[0]
    out = op.Not(cond)
    out.type, out.shape = cond.type, cond.shape
    return out


def _fgs(op, a, b, rest_name="fgs"):
    return op.FusedGemmSoftmax(a, b, _domain=DOMAIN, _allow_other_inputs=True, _allow_other_attributes=True,
                               _outputs=[rest_name])


def _emit(op, fgs: ir.Node, a, b, *, scale: float, trans_b: int):
    rest = list(fgs.inputs[2:])
    causal = fgs.attributes.get("causal")
    extra = {"mask_fill": 1} if attr_of(fgs, "mask_fill", 0) else {}
    out = op.FusedGemmSoftmax(a, b, *rest, scale=float(np.float32(scale)), transB=int(trans_b),
                              causal=causal.as_int() if causal is not None else 0, **extra, _domain=DOMAIN)
    old = fgs.outputs[0]
    out.type, out.shape = old.type, old.shape
    out.producer().name = fgs.name
    return out


def _scale_factor(c: ir.Value, kind: str, what: str, max_rank: int, scale: float) -> float:
    """The factor X * c (kind "Mul") or X / c ("Div") puts on the scores, folded into the op's `scale`: c a constant
    scalar (SiteRejected otherwise), non-zero for Div, the product finite in float32."""
    value = constant_scalar(c, what, max_rank)
    if kind == "Div":
        if value == 0.0:
            raise SiteRejected("division by zero")
        value = 1.0 / value
    if not math.isfinite(float(np.float32(value * scale))):
        raise SiteRejected("scale overflows float32")
    return value


class FoldTransposeB(pattern.RewriteRuleClassBase):
    """FusedGemmSoftmax(A, Transpose(K, perm); transB=0) -> FusedGemmSoftmax(A, K'; transB=1)."""

    def __init__(self, report: Optional[Report] = None):
        super().__init__("FoldTransposeB")
        self.report = report

    def pattern(self, op, a, k):
        return _fgs(op, a, op.Transpose(k, _allow_other_attributes=True, _outputs=["kt"]))

    def check(self, context, a, k, kt, fgs, **_):
        node = fgs.producer()
        if attr_of(node, "transB", 0) != 0:
            return pattern.MatchResult().fail("already transB=1")
        perm_attr = kt.producer().attributes.get("perm")
        if perm_attr is None and shape_of(k) is None:
            return pattern.MatchResult().fail("Transpose without perm and input rank unknown")
        return pattern.MatchResult()

    def rewrite(self, op, a, k, kt, fgs, **_):
        node = fgs.producer()
        perm_attr = kt.producer().attributes.get("perm")
        perm = list(perm_attr.as_ints()) if perm_attr is not None else list(range(len(shape_of(k))))[::-1]
        inner = perm[:-2] + [perm[-1], perm[-2]]  # Transpose(Transpose(K, inner), swap last two) == Transpose(K, perm)
        b = k if inner == list(range(len(perm))) else op.Transpose(k, perm=inner)
        site = site_of(self.report, node)
        if site is not None:
            site.details["transB"] = 1
            self.report.transb_folded += 1
        return _emit(op, node, a, b, scale=attr_of(node, "scale", 1.0), trans_b=1)


class _FoldScale(pattern.RewriteRuleClassBase):
    """What FoldKeyScale and FoldQueryScale share: the factor's check and its record on the site."""

    def __init__(self, name: str, report: Optional[Report] = None):
        super().__init__(name)
        self.report = report
        self._c = None

    def _check_scale(self, x, c, kind: str, side: str, fgs):
        x_shape = shape_of(x)
        if x_shape is None:
            return pattern.MatchResult().fail(f"rank of the scaled {side} unknown")
        try:
            self._c = _scale_factor(c, kind, f"{side} scale", len(x_shape), attr_of(fgs.producer(), "scale", 1.0))
        except SiteRejected as e:
            return pattern.MatchResult().fail(e.reason)
        return pattern.MatchResult()

    def _record_scale(self, node: ir.Node, side: str) -> float:
        """The op's new scale; the site records the factor (details "qscale" / "kscale") and the report counts it."""
        scale = attr_of(node, "scale", 1.0) * self._c
        site = site_of(self.report, node)
        if site is not None:
            site.details[f"{side}scale"] = self._c
            site.details["scale"] = float(np.float32(scale))
            setattr(self.report, f"{side}scale_folded", getattr(self.report, f"{side}scale_folded") + 1)
        return scale


class FoldKeyScale(_FoldScale):
    """FusedGemmSoftmax(A, B * c | B / c; s) -> FusedGemmSoftmax(A, B; s*c | s/c). PyTorch's exports of
    scaled_dot_product_attention scale both Q and K^T by sqrt(scale) (FoldQueryScale takes Q's)."""

    def __init__(self, report: Optional[Report] = None):
        super().__init__("FoldKeyScale", report)

    def pattern(self, op, a, x, c):
        k = pattern.OrValue([op.Mul(x, c), op.Div(x, c)], tag_var="kop", tag_values=["Mul", "Div"])
        return _fgs(op, a, k)

    def check(self, context, a, x, c, kop, fgs, **_):
        return self._check_scale(x, c, kop, "key", fgs)

    def rewrite(self, op, a, x, fgs, **_):
        node = fgs.producer()
        scale = self._record_scale(node, "k")
        return _emit(op, node, a, x, scale=scale, trans_b=attr_of(node, "transB", 0))


class FoldBatchedTransposeB(pattern.RewriteRuleClassBase):
    """FusedGemmSoftmax(A, Reshape(Transpose(Reshape(K, [-1, n, d]), [0, 2, 1]), [..., d, n]); transB=0)
    -> FusedGemmSoftmax(A, K; transB=1): K^T written through a 3-D view (PyTorch's exports of
    scaled_dot_product_attention). Proven from the shapes: the first Reshape keeps K's last two dims (n, d), so each
    [n, d] matrix stays whole and in order, and the second gives back K's leading dims with (d, n)."""

    def __init__(self, report: Optional[Report] = None):
        super().__init__("FoldBatchedTransposeB")
        self.report = report

    def pattern(self, op, a, k, s1, s2):
        k3 = op.Reshape(k, s1, _allow_other_attributes=True, _outputs=["k3"])
        kt3 = op.Transpose(k3, _allow_other_attributes=True, _outputs=["kt3"])
        return _fgs(op, a, op.Reshape(kt3, s2, _allow_other_attributes=True, _outputs=["kt"]))

    def check(self, context, a, k, k3, kt3, kt, fgs, **_):
        if attr_of(fgs.producer(), "transB", 0) != 0:
            return pattern.MatchResult().fail("already transB=1")
        perm = kt3.producer().attributes.get("perm")
        if perm is None or list(perm.as_ints()) != [0, 2, 1]:
            return pattern.MatchResult().fail("not a transpose of a 3-D view's last two dims")
        k_shape, k3_shape, kt_shape = shape_of(k), shape_of(k3), shape_of(kt)
        if k_shape is None or k3_shape is None or kt_shape is None or len(k_shape) < 3 or len(k3_shape) != 3 or \
                len(kt_shape) != len(k_shape):
            return pattern.MatchResult().fail(f"the 3-D view's shapes {fmt_dims(k_shape)} -> {fmt_dims(k3_shape)} -> "
                                              f"{fmt_dims(kt_shape)} are not known")
        n, d = k_shape[-2:]
        same = [same_dim(x, y) for x, y in zip([*k3_shape[1:], *kt_shape], [n, d, *k_shape[:-2], d, n])]
        if not all(same):
            return pattern.MatchResult().fail(f"the 3-D view {fmt_dims(k_shape)} -> {fmt_dims(k3_shape)} -> "
                                              f"{fmt_dims(kt_shape)} is not provably K's last two dims swapped")
        return pattern.MatchResult()

    def rewrite(self, op, a, k, fgs, **_):
        node = fgs.producer()
        site = site_of(self.report, node)
        if site is not None:
            site.details["transB"] = 1
            self.report.transb_folded += 1
        return _emit(op, node, a, k, scale=attr_of(node, "scale", 1.0), trans_b=1)


class FoldQueryScale(_FoldScale):
    """FusedGemmSoftmax([Transpose]([Reshape](X * c)), B; s) -> FusedGemmSoftmax([Transpose]([Reshape](X)), B; s*c)."""

    def __init__(self, report: Optional[Report] = None):
        super().__init__("FoldQueryScale", report)

    def pattern(self, op, x, c, shp, b):
        q = pattern.OrValue([op.Mul(x, c, _outputs=["qs"]), op.Div(x, c, _outputs=["qd"])], tag_var="qop",
                            tag_values=["Mul", "Div"])
        r = op.Reshape(q, shp, _allow_other_attributes=True, _outputs=["qr"])
        q = pattern.OrValue([r, q], tag_var="reshaped", tag_values=[True, False])
        t = op.Transpose(q, _allow_other_attributes=True, _outputs=["qt"])
        q = pattern.OrValue([t, q], tag_var="transposed", tag_values=[True, False])
        return _fgs(op, q, b)

    def check(self, context, x, c, qop, fgs, **_):
        return self._check_scale(x, c, qop, "query", fgs)

    def rewrite(self, op, x, shp, b, fgs, reshaped, transposed, qr=None, qt=None, **_):
        node = fgs.producer()
        q = x
        if reshaped:
            r = qr.producer()
            q = op.Reshape(q, shp, allowzero=attr_of(r, "allowzero", 0))
        if transposed:
            perm = qt.producer().attributes.get("perm")
            q = op.Transpose(q, perm=list(perm.as_ints())) if perm is not None else op.Transpose(q)
        scale = self._record_scale(node, "q")
        return _emit(op, node, q, b, scale=scale, trans_b=attr_of(node, "transB", 0))


def probe_sites(model: ir.Model, report: Report):
    """Record every candidate site with the reasons rule 1 declines it - also those the matcher would refuse because
    an intermediate value has another consumer (matched here without that requirement)."""
    probe = FuseScoresSoftmax.rule(report)
    variants = probe.commute()
    for node in list(model.graph):
        if node.op_type != "Softmax" or node.domain not in ("", "ai.onnx"):
            continue
        name = node_name(node)
        structural = any(v.match(model, model.graph, node, check_nodes_are_removable=False) is not None and
                         name in report.sites for v in variants)
        if not structural and name not in report.sites:
            report.other_softmax.append(name)
    for site in report.sites.values():
        site.reasons = list(dict.fromkeys(site.reasons))
