"""Replace attention-score subgraphs of an ONNX model with flashgemm::FusedGemmSoftmax (onnxscript pattern rewriter).

    from flashgemm.ort.rewrite import rewrite_file
    report = rewrite_file("bert.onnx", "bert.fused.onnx")
    print(report.text())

Five rules, applied in this order (each an onnxscript `RewriteRuleClassBase`; those that match Add or Mul with
`commute=True`, so Add(mask, s) and Mul(c, s) match as well as Add(s, mask) and Mul(s, c)):

1. FuseScoresSoftmax   Softmax( [Add( [Mul(S, c) | Div(S, c) | S] , M )] ),  S = MatMul(A, B)
                         -> FusedGemmSoftmax(A, B, [bias=M]; scale = c | 1/c | 1, transB=0, causal=0)
2. FoldKeyScale        FusedGemmSoftmax(A, Mul(X, c) | Div(X, c); scale s) -> FusedGemmSoftmax(A, X; scale s*c | s/c)
                         (PyTorch's SDPA export scales Q and K^T each by sqrt(scale))
3. FoldBatchedTransposeB  FusedGemmSoftmax(A, Reshape(Transpose(Reshape(K, [-1, n, d]), [0,2,1]), [..., d, n]);
                         transB=0) -> FusedGemmSoftmax(A, K; transB=1)   (the same export's K^T through a 3-D view;
                         proven from the shapes)
4. FoldTransposeB      FusedGemmSoftmax(A, Transpose(K, perm); transB=0)
                         -> FusedGemmSoftmax(A, K'; transB=1),  K' = Transpose(K, perm with its last two entries
                            swapped), or K itself when that is the identity (BERT/ViT/Whisper: [0,2,3,1] -> [0,2,1,3])
5. FoldQueryScale      FusedGemmSoftmax([Transpose]([Reshape](Mul(X, c) | Div(X, c))), B; scale s)
                         -> FusedGemmSoftmax([Transpose]([Reshape](X)), B; scale s*c | s/c)   (Whisper scales q)

After the rules, the fused sites' masks: drop_constant_masks drops one of zeros (or all true) made of constants,
narrow_masks gives the op one that is a broadcast of a narrower one (an Expand, an always-true And term) narrow.

Rule 1 fuses only what is provably the same function (everything it declines is reported with the reason):
  - Softmax over the last axis: axis -1, or axis == rank-1 with the rank known (opset < 13's default axis 1 too,
    when the rank is 2; its 2-D coercion at the last axis is the row softmax);
  - the scores' dtype is float16 or bfloat16 (the op's only types). float32 models are left alone and the report
    says so: there is deliberately no --cast option, because casting an fp32 model's Q, K and mask to fp16 around
    each site changes its numerics (and e.g. turns a -3.4e38 mask into -inf) - that is not a rewrite but a
    different model; export the model in float16 instead (flashgemm-getmodel --dtype float16);
  - A and B of known rank >= 2 (ONNX MatMul's 1-D promotion is not the op's contract);
  - the scale is a constant (initializer or Constant, not a graph input) with exactly one element, finite (and
    non-zero for Div), of rank <= the scores' rank (so it cannot broadcast the scores to a larger shape);
  - the added operand M is unidirectionally broadcastable to the scores: rank <= theirs, and each of its dims
    (aligned right) is 1 or provably equal to the scores' dim (same number, or same symbolic name). An unknown
    dim, or a symbolic dim against a different one, is not provable: the site is left alone. M goes in as the
    op's `bias` input, which is added exactly as Add adds it (the op's `mask` input would instead zero rows whose
    entries are all <= -65504, which ONNX's Add + Softmax does not);
  - for scores of rank >= 5 the shapes must be static and accepted by the op's canonicalization (the kernels take
    at most two independent batch dims; rank <= 4 always fits).
Shapes: infer_shapes (onnx's inference, also on a constant-folded clone) and then infer_symbolic_shapes (onnxruntime's
SymbolicShapeInference, auto_merge off) fill them in before matching. The latter is what proves a dynamic export's
mask - built from `attention_mask` [batch, sequence] - broadcastable to the scores [batch, heads, sequence, sequence];
it equates two symbols only where that is proven (see _ssi_class), never on a broadcast's say-so. When it cannot
run (onnxruntime or sympy missing, or it fails), the report carries a note saying why and such sites stay unfused.
The matched intermediate values (S, the scaled and the masked scores) must have no other consumer - the matcher
refuses otherwise, and the report says so.

Numerics: the fused op accumulates in fp32 and applies the scale in fp32, so its result differs from the fp16 graph's
(which rounds S, c*S and c*S+M to fp16) by rounding only. Rules 2 and 5 rely on Reshape and Transpose only moving
elements, so c*(X) reshaped/transposed times K is c times the product, exactly in real arithmetic; for a power-of-two
c (Whisper: 64^-0.5 = 0.125) the fp16 product X*c is itself exact, for SDPA's sqrt(scale) on both sides it is not
(the folded op then rounds less than the export).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass, ShapeInferencePass
from onnxscript.rewriter import pattern

from flashgemm.op.variant import ATTENTION_HEAD_SIZES, ATTENTION_N_MULTIPLE_KN, MASKED_AT_OR_BELOW, canonicalize

from flashgemm.ort.op_schema import DOMAIN, OP_TYPE  # (importing it registers the op's shape inference with onnx)
from flashgemm.ort.model import ATTENTION_OP_TYPE
SUPPORTED = {ir.DataType.FLOAT16: "float16", ir.DataType.BFLOAT16: "bfloat16"}
EXTERNAL_DATA_THRESHOLD = 2**31 - 2**24  # protobuf's 2 GB limit, with margin


# ------------------------------------------------------------------------------------------------ report

@dataclasses.dataclass
class Site:
    softmax: str  # the Softmax node's name (its output name if the node has none)
    fused: bool = False
    reasons: list = dataclasses.field(default_factory=list)  # why it was left alone
    details: dict = dataclasses.field(default_factory=dict)  # what the fused node got


@dataclasses.dataclass
class Report:
    model: str = ""
    dtype: str = "?"
    sites: dict = dataclasses.field(default_factory=dict)  # candidate sites, by Softmax name
    other_softmax: list = dataclasses.field(default_factory=list)  # Softmax nodes no pattern matched
    transb_folded: int = 0
    qscale_folded: int = 0
    kscale_folded: int = 0
    attention: Optional[int] = None  # sites turned into FusedAttention (None: not asked for, rewrite_model(attention=))
    attention_left: list = dataclasses.field(default_factory=list)  # (site, why P was kept)
    heads_transposes: int = 0  # Transposes around FusedAttention absorbed into its BSNH views (fold_heads_transposes)
    qkv_packed: int = 0  # FusedAttention nodes whose Q, K, V projections became one MatMul (pack_qkv_projections)
    constant_masks_dropped: int = 0  # all-zero biases / all-true masks made of constants (drop_constant_masks)
    masks_narrowed: int = 0  # biases / masks given to the op without an always-true broadcasting term (narrow_masks)
    causal_taken: int = 0  # sites given a decoder mask's causal rule as the causal flag (causal_masks, take=True)
    notes: list = dataclasses.field(default_factory=list)  # e.g. why symbolic shape inference did not run

    def site(self, name: str) -> Site:
        return self.sites.setdefault(name, Site(name))

    @property
    def fused(self) -> list:
        return [s for s in self.sites.values() if s.fused]

    @property
    def left_alone(self) -> list:
        return [s for s in self.sites.values() if not s.fused]

    def text(self) -> str:
        lines = [f"{self.model}: {len(self.fused)} site(s) fused, {len(self.left_alone)} candidate site(s) left "
                 f"alone (scores dtype {self.dtype}); transB folded at {self.transb_folded}, "
                 f"query-side scale folded at {self.qscale_folded}"
                 f"{f', key-side at {self.kscale_folded}' if self.kscale_folded else ''}"
                 + (f"; a bias of zeros or an all-true mask, made of constants, dropped at "
                    f"{self.constant_masks_dropped}" if self.constant_masks_dropped else "")
                 + (f"; a bias or mask narrowed (an always-true broadcasting term dropped) at {self.masks_narrowed}"
                    if self.masks_narrowed else "")]
        for s in self.fused:
            d = s.details
            terms = {"summed": " (two added terms summed into the bias)",
                     "a term of zeros left out": " (an added term of zeros left out)"}.get(d.get("bias_terms"), "")
            if "mask_shape" in d:
                terms = f" mask=add {d['mask_shape']} (a second added term)"
            lines.append(f"  fused   {s.softmax}: scale={d['scale']:.8g} transB={d['transB']} "
                         f"bias={'yes ' + str(d['bias_shape']) if d['bias'] else 'no'}{terms}"
                         f"{' (query scale ' + format(d['qscale'], '.8g') + ' folded)' if 'qscale' in d else ''}"
                         f"{' (key scale ' + format(d['kscale'], '.8g') + ' folded)' if 'kscale' in d else ''}"
                         f"{' (narrowed to ' + d['narrowed'] + ')' if 'narrowed' in d else ''}"
                         f"{' (mask narrowed to ' + d['mask_narrowed'] + ')' if 'mask_narrowed' in d else ''}"
                         f"{''.join(f' ({x} dropped: zeros made of constants)' for x in d.get('dropped', ()))}"
                         f"{_causal_text(d)}")
        for s in self.left_alone:
            lines.append(f"  left    {s.softmax}: {'; '.join(dict.fromkeys(s.reasons))}")
        symbolic = [s.softmax for s in self.fused if not all(isinstance(d, int) for d in s.details.get("lengths", ()))]
        if symbolic:
            # a CUDA bundle serves a length with a fast kernel only when one was built for it; every other length
            # goes to the generic kernel, far slower than the unfused graph: say so where the user decides to fuse
            lines.append(f"  note    {len(symbolic)} fused site(s) have symbolic lengths (M or N): on the GPU, a CUDA "
                         f"bundle's any-length kernels serve them up to length 2048 (default schedules for the usual "
                         f"head sizes and mask kinds; flashgemm-build --from-model THIS_MODEL adds its own kinds, "
                         f"flashgemm-tune --from-model THIS_MODEL --lengths ... tunes them); longer ones, or a bundle "
                         f"built with --any-length none, run on the generic kernel, much slower than the original graph")
        causal = [s.softmax for s in self.fused if "causal_in_bias" in s.details and "causal_taken" not in s.details]
        if causal:
            # a decoder's export adds its causal and padding masks as one tensor of the scores' shape: say what the
            # op does with it, since a causal kernel would skip the half of the keys past the diagonal
            lines.append(f"  note    {len(causal)} fused site(s) read a decoder's causal and padding masks as one bias "
                         f"of the scores' shape (the causal rule inside it): the op reads that bias at every element "
                         f"and computes every key, about twice a causal kernel's work; its causal flag is not the "
                         f"same function there (a row whose visible keys are all padding attends to every key in the "
                         f"export); --decoder-causal takes it, exact at every other row")
        if self.causal_taken:
            lines.append(f"  note    {self.causal_taken} fused site(s) take a decoder mask's causal rule as the causal "
                         f"flag (--decoder-causal): a row whose visible keys are all padding (a left-padded "
                         f"sequence's first tokens, a sequence of padding alone) attends to its visible keys, where "
                         f"the original attends to every key at the mask's fill; every other row is the same")
        if self.attention is not None:
            lines.append(f"  attention: {self.attention} fused site(s) became FusedAttention "
                         f"(P never stored); {self.heads_transposes} Transpose(s) between heads and sequence around "
                         f"them absorbed (read and written in place: attribute bsnh); Q, K and V projections packed into "
                 f"one MatMul at {self.qkv_packed}")
            lines += [f"  kept P  {site}: {why}" for site, why in self.attention_left]
        lines += [f"  note    {n}" for n in self.notes]
        if self.other_softmax:
            lines.append(f"  {len(self.other_softmax)} other Softmax node(s), not fed by MatMul -> [Mul|Div] -> "
                         f"[Add [-> Add]] -> Softmax: {', '.join(self.other_softmax)}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"model": self.model, "dtype": self.dtype, "fused": len(self.fused),
                "left_alone": len(self.left_alone), "transb_folded": self.transb_folded,
                "qscale_folded": self.qscale_folded, "kscale_folded": self.kscale_folded, "attention": self.attention,
                "attention_left": [list(x) for x in self.attention_left], "heads_transposes": self.heads_transposes,
                "qkv_packed": self.qkv_packed,
                "constant_masks_dropped": self.constant_masks_dropped, "masks_narrowed": self.masks_narrowed,
                "causal_taken": self.causal_taken,
                "notes": self.notes,
                "sites": [dataclasses.asdict(s) for s in self.sites.values()], "other_softmax": self.other_softmax}


def _causal_text(d: dict) -> str:
    if "causal_taken" in d:
        return f" (the causal rule taken as causal=1; the bias left: {d['causal_taken']})"
    return " (the bias holds the causal rule: every key computed)" if "causal_in_bias" in d else ""


def _node_name(node: ir.Node) -> str:
    return node.name or node.outputs[0].name or f"<{node.op_type}>"


# ------------------------------------------------------------------------------------------------ helpers

class SiteRejected(Exception):
    """Why a candidate site is not fused (the reason goes to the report and to the rewriter's match result)."""

    def __init__(self, reason: str, *sources):
        super().__init__(reason)
        self.reason = reason
        self.sources = [s for s in sources if s is not None]


def _fail(msg: str, *sources):
    raise SiteRejected(msg, *sources)


def _shape(v: Optional[ir.Value]):
    """list of dims (int | str symbol | None unknown), or None if the rank is unknown."""
    if v is None or v.shape is None:
        return None
    out = []
    for d in v.shape:
        if isinstance(d, int):
            out.append(d)
        else:
            out.append(d.value if getattr(d, "value", None) is not None else None)
    return out


def _fmt(shape) -> str:
    return "?" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _constant_array(v: Optional[ir.Value]) -> Optional[np.ndarray]:
    """The value of a constant (an initializer that is not a graph input, a Constant node, either through an
    Identity, as the TorchScript exporter writes biases), else None."""
    for _ in range(2):
        if v is None or v.is_graph_input():
            return None
        if v.const_value is not None:
            return v.const_value.numpy()
        p = v.producer()
        if p is None or p.domain != "":
            return None
        if p.op_type == "Constant" and "value" in p.attributes:
            return p.attributes["value"].as_tensor().numpy()
        if p.op_type != "Identity":
            return None
        v = p.inputs[0]
    return None


def _constant_scalar(v: Optional[ir.Value], what: str, max_rank: int) -> float:
    """The value of a one-element constant (_constant_array's: an initializer or a Constant, through an Identity; not
    a graph input), after constant propagation at its producer; raises SiteRejected."""
    if v is None:
        _fail(f"{what} is missing")
    if v.is_graph_input():
        _fail(f"{what} ({v.name}) is a graph input, not a constant", v)
    producer = v.producer()
    if producer is not None:
        from onnxscript import optimizer  # noqa: PLC0415
        optimizer.basic_constant_propagation([producer])
    try:
        arr = _constant_array(v)
    except Exception:  # noqa: BLE001  (external data not available)
        _fail(f"{what} ({v.name}): its value cannot be read", v)
    if arr is None:
        _fail(f"{what} ({v.name}) is not a constant", v)
    if arr.size != 1:
        _fail(f"{what} ({v.name}) has shape {list(arr.shape)}, not a single element", v)
    if arr.ndim > max_rank:
        _fail(f"{what} ({v.name}) has rank {arr.ndim} > the scores' rank {max_rank}: it would broadcast them", v)
    value = float(np.asarray(arr, dtype=np.float64).reshape(()))
    if not math.isfinite(value):
        _fail(f"{what} ({v.name}) = {value} is not finite", v)
    return value


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
        _fail(f"added operand of rank {len(m_shape)} > the scores' rank {len(s_shape)} would change their shape")
    for i in range(1, len(m_shape) + 1):
        md, sd = m_shape[-i], s_shape[-i]
        if md == 1:
            continue
        if md is None:
            _fail(f"added operand {_fmt(m_shape)}: dim {len(m_shape) - i} is unknown, cannot prove it broadcasts to "
                  f"the scores {_fmt(s_shape)}")
        if md == sd and sd is not None:
            continue
        dim = f"dim {len(m_shape) - i}: {md} vs {'?' if sd is None else sd}"
        if isinstance(md, int) and isinstance(sd, int):
            _fail(f"added operand {_fmt(m_shape)} is not broadcastable to the scores {_fmt(s_shape)} ({dim})")
        _fail(f"added operand {_fmt(m_shape)}: cannot prove it broadcasts to the scores {_fmt(s_shape)} ({dim})")


def _broadcast_dims(x, y):
    """The broadcast of two _shape lists that each broadcast to the scores (_check_broadcast): a dim is the one that
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
        _fail(f"Softmax axis={axis} and the rank of its input is unknown: cannot prove it is the last axis")
    if axis != rank - 1:
        _fail(f"Softmax over axis {axis} of a rank-{rank} tensor: not the last axis")


# ------------------------------------------------------------------------------------------------ rules

class FuseScoresSoftmax(pattern.RewriteRuleClassBase):
    """MatMul -> [Mul|Div by a constant] -> [Add M [-> Add M2]] -> Softmax(last axis)  =>  FusedGemmSoftmax.

    Two added terms (a relative position bias and the padding mask: MPNet, T5, BEiT), read as far as constants
    allow (_constant_values: a position bias gathered from its table, zeros of a ConstantOfShape): a term of zeros
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

    def pattern(self, op, a, b, c, m, m2):
        s = op.MatMul(a, b, _outputs=["scores"])
        scaled = pattern.OrValue([op.Mul(s, c), op.Div(s, c), s], tag_var="scaling",
                                 tag_values=["Mul", "Div", "None"])
        masked = pattern.OrValue([op.Add(op.Add(scaled, m), m2), op.Add(scaled, m), scaled], tag_var="adds",
                                 tag_values=[2, 1, 0])
        return op.Softmax(masked, _allow_other_attributes=True, _outputs=["probs"])

    def check(self, context, a, b, c, m, scores, probs, scaling, adds, m2=None, **_):
        softmax = probs.producer()
        site = self.report.site(_node_name(softmax)) if self.report is not None else None
        try:
            self._attrs = self._check(context, a, b, c, m, m2, scores, probs, scaling, adds)
        except SiteRejected as e:
            if site is not None:
                site.reasons.append(e.reason)
            return pattern.MatchResult().fail(e.reason, e.sources or None)
        return pattern.MatchResult()

    def _check(self, context, a, b, c, m, m2, scores, probs, scaling, adds):
        dtype = scores.dtype or a.dtype
        if dtype is None:
            _fail("the scores' dtype is unknown", scores)
        if dtype not in SUPPORTED:
            _fail(f"the scores are {_dtype_name(dtype)}: FusedGemmSoftmax takes float16/bfloat16 only "
                  f"(export the model in float16; no implicit cast. A float16 model whose export computes "
                  f"attention in float32, as TorchScript's export of SDPA attention does, fuses when exported with "
                  f"the dynamo exporter or attn_implementation=\"eager\")", scores)
        a_shape, b_shape = _shape(a), _shape(b)
        if a_shape is None or b_shape is None:
            _fail(f"MatMul input rank unknown (A {_fmt(a_shape)}, B {_fmt(b_shape)})", scores)
        if len(a_shape) < 2 or len(b_shape) < 2:
            _fail(f"MatMul with a 1-D input (A {_fmt(a_shape)}, B {_fmt(b_shape)}): the op needs rank >= 2", scores)
        s_shape = _matmul_shape(a_shape, b_shape)
        inferred = _shape(scores)
        if inferred is not None and len(inferred) == len(s_shape):  # prefer inferred dims where ours are unknown
            s_shape = [x if x is not None else y for x, y in zip(s_shape, inferred)]
        opset = context.model.opset_imports.get("", 17) if context.model is not None else 17
        _softmax_axis_ok(probs.producer(), len(s_shape), opset)
        scale = 1.0
        if scaling == "Mul":
            scale = _constant_scalar(c, "scale (Mul operand)", len(s_shape))
        elif scaling == "Div":
            d = _constant_scalar(c, "scale (Div divisor)", len(s_shape))
            if d == 0.0:
                _fail("division by a zero constant", c)
            scale = 1.0 / d
        if not math.isfinite(float(np.float32(scale))):
            _fail(f"scale {scale} overflows float32")
        m_shape = None
        for term in (m, m2)[:adds]:
            t_shape = _shape(term)
            if t_shape is None:
                _fail(f"added operand {term.name}: shape unknown, cannot prove it broadcasts to the scores", term)
            _check_broadcast(t_shape, s_shape)
            if term.dtype is not None and term.dtype != dtype:
                _fail(f"added operand is {_dtype_name(term.dtype)} but the scores are {_dtype_name(dtype)}", term)
            m_shape = t_shape if m_shape is None else _broadcast_dims(m_shape, t_shape)
        # the extra inputs: ("bias", term) | ("bias and additive mask", bias, mask) | ("summed", M, M2) | ()
        how = () if not adds else ("bias", m) if adds == 1 else ("summed", m, m2)
        if adds == 2:
            values = [_constant_values(t) for t in (m, m2)]
            zeros = [v is not None and not v.any() for v in values]  # (NaN is not zero): x + 0 is x
            above = [v is not None and not (v <= MASKED_AT_OR_BELOW).any() for v in values]
            if any(zeros):
                how = ("bias", m2 if zeros[0] else m)
            elif any(above):
                how = ("bias and additive mask", m2, m) if above[0] else ("bias and additive mask", m, m2)
            if how[0] != "summed":
                m_shape = _shape(how[1])
        if len(s_shape) >= 5:
            dims = [a_shape, b_shape] + ([m_shape] if m_shape is not None else [])
            if any(not isinstance(d, int) for shape in dims for d in shape):
                _fail(f"rank-{len(s_shape)} scores with symbolic dims: cannot prove the op's batch broadcast "
                      f"(two independent batch dims at most) accepts them")
            try:
                canonicalize(a_shape, b_shape, False, m_shape, None)
            except ValueError as e:
                _fail(f"the op rejects these shapes: {e}")
        return {"scale": float(np.float32(scale)), "bias": bool(adds), "bias_shape": m_shape, "how": how,
                "dtype": SUPPORTED[dtype], "shape": s_shape, "k": a_shape[-1]}

    def rewrite(self, op, a, b, c, m, scores, probs, adds, m2=None, **_):
        attrs = self._attrs
        how = attrs["how"]
        if how and how[0] == "summed":
            inputs = [a, b, op.Add(m, m2)]
            inputs[2].type, inputs[2].shape = m.type, ir.Shape(attrs["bias_shape"])
        else:
            inputs = [a, b, *how[1:]]
        out = op.FusedGemmSoftmax(*inputs, scale=attrs["scale"], transB=0, causal=0, _domain=DOMAIN)
        out.type, out.shape = probs.type, probs.shape
        if self.report is not None:
            site = self.report.site(_node_name(probs.producer()))
            site.fused, site.details = True, {k: attrs[k] for k in ("scale", "bias", "bias_shape")}
            if adds == 2:
                site.details["bias_terms"] = how[0] if how[0] != "bias" else "a term of zeros left out"
            if how and how[0] == "bias and additive mask":
                site.details["mask_shape"] = _shape(how[2])
            site.details["transB"] = 0
            site.details["lengths"] = [d if isinstance(d, int) else str(d) for d in attrs["shape"][-2:]]
            site.details["k"] = attrs["k"] if isinstance(attrs["k"], int) else str(attrs["k"])
            out.producer().name = "FusedGemmSoftmax:" + site.softmax  # so rules 2-5 can find the site
        return out


def _fgs(op, a, b, rest_name="fgs"):
    return op.FusedGemmSoftmax(a, b, _domain=DOMAIN, _allow_other_inputs=True, _allow_other_attributes=True,
                               _outputs=[rest_name])


def _site_of(report: Optional[Report], node: ir.Node) -> Optional[Site]:
    if report is None or not node.name.startswith("FusedGemmSoftmax:"):
        return None
    return report.sites.get(node.name.split(":", 1)[1])


def _emit(op, fgs: ir.Node, a, b, *, scale: float, trans_b: int):
    rest = list(fgs.inputs[2:])
    causal = fgs.attributes.get("causal")
    out = op.FusedGemmSoftmax(a, b, *rest, scale=float(np.float32(scale)), transB=int(trans_b),
                              causal=causal.as_int() if causal is not None else 0, _domain=DOMAIN)
    old = fgs.outputs[0]
    out.type, out.shape = old.type, old.shape
    out.producer().name = fgs.name
    return out


def _scale_factor(c: ir.Value, kind: str, what: str, max_rank: int, scale: float) -> float:
    """The factor X * c (kind "Mul") or X / c ("Div") puts on the scores, folded into the op's `scale`: c a constant
    scalar (SiteRejected otherwise), non-zero for Div, the product finite in float32."""
    value = _constant_scalar(c, what, max_rank)
    if kind == "Div":
        if value == 0.0:
            raise SiteRejected("division by zero")
        value = 1.0 / value
    if not math.isfinite(float(np.float32(value * scale))):
        raise SiteRejected("scale overflows float32")
    return value


def _attr(node: ir.Node, name: str, default):
    a = node.attributes.get(name)
    if a is None:
        return default
    return a.as_float() if isinstance(default, float) else a.as_int()


class FoldTransposeB(pattern.RewriteRuleClassBase):
    """FusedGemmSoftmax(A, Transpose(K, perm); transB=0) -> FusedGemmSoftmax(A, K'; transB=1)."""

    def __init__(self, report: Optional[Report] = None):
        super().__init__("FoldTransposeB")
        self.report = report

    def pattern(self, op, a, k):
        return _fgs(op, a, op.Transpose(k, _allow_other_attributes=True, _outputs=["kt"]))

    def check(self, context, a, k, kt, fgs, **_):
        node = fgs.producer()
        if _attr(node, "transB", 0) != 0:
            return pattern.MatchResult().fail("already transB=1")
        perm_attr = kt.producer().attributes.get("perm")
        if perm_attr is None and _shape(k) is None:
            return pattern.MatchResult().fail("Transpose without perm and input rank unknown")
        return pattern.MatchResult()

    def rewrite(self, op, a, k, kt, fgs, **_):
        node = fgs.producer()
        perm_attr = kt.producer().attributes.get("perm")
        perm = list(perm_attr.as_ints()) if perm_attr is not None else list(range(len(_shape(k))))[::-1]
        inner = perm[:-2] + [perm[-1], perm[-2]]  # Transpose(Transpose(K, inner), swap last two) == Transpose(K, perm)
        b = k if inner == list(range(len(perm))) else op.Transpose(k, perm=inner)
        site = _site_of(self.report, node)
        if site is not None:
            site.details["transB"] = 1
            self.report.transb_folded += 1
        return _emit(op, node, a, b, scale=_attr(node, "scale", 1.0), trans_b=1)


class _FoldScale(pattern.RewriteRuleClassBase):
    """What FoldKeyScale and FoldQueryScale share: the factor's check and its record on the site."""

    def __init__(self, name: str, report: Optional[Report] = None):
        super().__init__(name)
        self.report = report
        self._c = None

    def _check_scale(self, x, c, kind: str, side: str, fgs):
        x_shape = _shape(x)
        if x_shape is None:
            return pattern.MatchResult().fail(f"rank of the scaled {side} unknown")
        try:
            self._c = _scale_factor(c, kind, f"{side} scale", len(x_shape), _attr(fgs.producer(), "scale", 1.0))
        except SiteRejected as e:
            return pattern.MatchResult().fail(e.reason)
        return pattern.MatchResult()

    def _record_scale(self, node: ir.Node, side: str) -> float:
        """The op's new scale; the site records the factor (details "qscale" / "kscale") and the report counts it."""
        scale = _attr(node, "scale", 1.0) * self._c
        site = _site_of(self.report, node)
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
        return _emit(op, node, a, x, scale=scale, trans_b=_attr(node, "transB", 0))


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
        if _attr(fgs.producer(), "transB", 0) != 0:
            return pattern.MatchResult().fail("already transB=1")
        perm = kt3.producer().attributes.get("perm")
        if perm is None or list(perm.as_ints()) != [0, 2, 1]:
            return pattern.MatchResult().fail("not a transpose of a 3-D view's last two dims")
        k_shape, k3_shape, kt_shape = _shape(k), _shape(k3), _shape(kt)
        if k_shape is None or k3_shape is None or kt_shape is None or len(k_shape) < 3 or len(k3_shape) != 3 or \
                len(kt_shape) != len(k_shape):
            return pattern.MatchResult().fail(f"the 3-D view's shapes {_fmt(k_shape)} -> {_fmt(k3_shape)} -> "
                                              f"{_fmt(kt_shape)} are not known")
        n, d = k_shape[-2:]
        same = [_same_dim(x, y) for x, y in zip([*k3_shape[1:], *kt_shape], [n, d, *k_shape[:-2], d, n])]
        if not all(same):
            return pattern.MatchResult().fail(f"the 3-D view {_fmt(k_shape)} -> {_fmt(k3_shape)} -> {_fmt(kt_shape)} "
                                              f"is not provably K's last two dims swapped")
        return pattern.MatchResult()

    def rewrite(self, op, a, k, fgs, **_):
        node = fgs.producer()
        site = _site_of(self.report, node)
        if site is not None:
            site.details["transB"] = 1
            self.report.transb_folded += 1
        return _emit(op, node, a, k, scale=_attr(node, "scale", 1.0), trans_b=1)


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
            q = op.Reshape(q, shp, allowzero=_attr(r, "allowzero", 0))
        if transposed:
            perm = qt.producer().attributes.get("perm")
            q = op.Transpose(q, perm=list(perm.as_ints())) if perm is not None else op.Transpose(q)
        scale = self._record_scale(node, "q")
        return _emit(op, node, q, b, scale=scale, trans_b=_attr(node, "transB", 0))


# ------------------------------------------------------------------------------------------------ driver

def _probe(model: ir.Model, report: Report):
    """Record every candidate site with the reasons rule 1 declines it - also those the matcher would refuse because
    an intermediate value has another consumer (matched here without that requirement)."""
    probe = FuseScoresSoftmax.rule(report)
    variants = probe.commute()
    for node in list(model.graph):
        if node.op_type != "Softmax" or node.domain not in ("", "ai.onnx"):
            continue
        name = _node_name(node)
        structural = any(v.match(model, model.graph, node, check_nodes_are_removable=False) is not None and
                         name in report.sites for v in variants)
        if not structural and name not in report.sites:
            report.other_softmax.append(name)
    for site in report.sites.values():
        site.reasons = list(dict.fromkeys(site.reasons))


def _dtype_name(dtype: Optional[ir.DataType]) -> str:
    if dtype is None:
        return "?"
    return {ir.DataType.FLOAT: "float32", ir.DataType.DOUBLE: "float64"}.get(dtype, dtype.name.lower())


def _dtype_of(model: ir.Model) -> str:
    for node in model.graph:
        if node.op_type == "Softmax" and node.inputs[0] is not None and node.inputs[0].dtype is not None:
            return _dtype_name(node.inputs[0].dtype)
    return "?"


def _known(shape) -> int:
    return -1 if shape is None else sum(isinstance(d, int) for d in shape)


def _fold_small_constant_of_shape(node: ir.Node):
    """The folder leaves ConstantOfShape alone by default; shape arithmetic needs its small ones folded."""
    if node.op_type == "ConstantOfShape" and node.inputs and node.inputs[0] is not None:
        c = node.inputs[0].const_value
        if c is not None and int(np.prod(c.numpy())) <= 4096:
            return True
    return None


def infer_shapes(model: ir.Model) -> int:
    """Fill in value shapes and dtypes without changing the model's nodes; returns how many values gained shape info.

    ONNX shape inference alone leaves e.g. BERT's mask [B, ?, S, S]: the mask is Expand'ed to a shape computed by
    Constant -> ConstantOfShape -> Mul -> Equal -> Where, which its data propagation does not evaluate. So inference
    runs on a shallow clone (weights shared, not copied) whose constant subexpressions onnxscript's constant folder
    has evaluated; the shapes found there are copied back, by value name, onto the untouched model.
    """
    from onnxscript import optimizer  # noqa: PLC0415
    ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)
    clone = model.clone()
    folder_log = logging.getLogger("onnxscript.optimizer._constant_folding")
    level = folder_log.level
    folder_log.setLevel(logging.ERROR)  # "Evaluation failed" for a node it cannot fold: that node just stays
    try:
        optimizer.fold_constants(clone, onnx_shape_inference=True, should_fold=_fold_small_constant_of_shape)
        ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(clone)
    except Exception:  # noqa: BLE001  (shape info is best effort: sites without it are left alone)
        return 0
    finally:
        folder_log.setLevel(level)
    found = {}
    for node in clone.graph:
        for v in node.outputs:
            if v.name:
                found[v.name] = v
    gained = 0
    for node in model.graph:
        for v in node.outputs:
            w = found.get(v.name)
            if w is None or w.shape is None or (w.dtype is not None and v.dtype is not None and w.dtype != v.dtype):
                continue
            if v.shape is not None and len(v.shape) != len(w.shape):
                continue
            if _known(_shape(w)) > _known(_shape(v)):
                v.shape = w.shape
                if v.dtype is None and w.dtype is not None:
                    v.dtype = w.dtype
                gained += 1
    return gained


SYMBOLIC_PREFIX = "sym:"  # symbolic shape inference's own dims (not the graph inputs'), kept apart from onnx's unk__N
_INLINE_LIMIT = 4096  # initializers up to this many elements go to symbolic inference with their values (shape data)


def _symbolic_inference(model: ir.Model):
    """{value name: (dims, dtype)} from onnxruntime's SymbolicShapeInference (auto_merge off), or a one-line reason
    string when it is not available or fails.

    Why: onnx's inference gives a mask built from a dynamic `attention_mask` (Unsqueeze/Cast/Sub/Mul, Shape/Gather/
    Concat/Reshape, Expand/Where) fresh unk__N dims, while symbolic inference carries the graph inputs' symbols (and
    sympy expressions of them) through the shape arithmetic, so the mask's [batch, 1, 1, sequence] and the scores'
    [batch, heads, sequence, sequence] become comparable. auto_merge stays off: it equates two symbols met at a
    broadcast on the assumption that neither is 1 - an assumption, not a proof. Weights above _INLINE_LIMIT elements
    go in as typed graph inputs (shape only: nothing is read or copied). Inference that stops at a node it cannot
    resolve still returns what it found before it."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001  (onnxruntime or sympy missing)
        return f"symbolic shape inference unavailable ({type(e).__name__}: {e}); install onnxruntime and sympy"
    if model.opset_imports.get("", 0) < 7:
        return "symbolic shape inference needs opset >= 7"
    clone = model.clone()
    for name, v in list(clone.graph.initializers.items()):
        if v.shape is not None and v.shape.is_static() and math.prod(v.shape.numpy()) > _INLINE_LIMIT \
                and not v.is_graph_input():
            del clone.graph.initializers[name]
            v.const_value = None
            clone.graph.inputs.append(v)
    inputs_symbols = {d.value for v in model.graph.inputs if v.shape is not None for d in v.shape
                      if not isinstance(d, int) and getattr(d, "value", None)}
    ssi_log = logging.getLogger("onnxruntime.tools.symbolic_shape_infer")
    level = ssi_log.level
    ssi_log.setLevel(logging.CRITICAL)  # "unsupported broadcast" for each unprovable broadcast: expected here
    try:
        ssi = _ssi_class(SymbolicShapeInference)(2**31 - 1, False, False, 0)
        ssi._preprocess(ir.to_proto(clone))  # noqa: SLF001  (infer_shapes() would write a file on failure)
        while ssi.run_:
            ssi._infer_impl()  # noqa: SLF001
        ssi._update_output_from_vi()  # noqa: SLF001
        infos = list(ssi.out_mp_.graph.value_info) + list(ssi.out_mp_.graph.output)
    except Exception as e:  # noqa: BLE001
        return f"symbolic shape inference failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    finally:
        ssi_log.setLevel(level)
    found = {}
    for vi in infos:
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
            continue
        dims = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.dim_param:
                dims.append(d.dim_param if d.dim_param in inputs_symbols else SYMBOLIC_PREFIX + d.dim_param)
            else:
                dims.append(None)
        found[vi.name] = (dims, t.elem_type)
    return found


def _min_of(dim, other) -> bool:
    """dim is the sympy expression Min(k, other) for an integer k >= 1 (dims as symbolic inference writes them)."""
    import sympy  # noqa: PLC0415
    if not isinstance(dim, str) or not isinstance(other, (str, int)):
        return False
    from sympy.parsing.sympy_parser import parse_expr  # noqa: PLC0415

    def parse(text):  # every name a symbol: dims like "sequence" would otherwise parse as sympy's functions
        names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text)) - {"Min", "Max"}
        return parse_expr(text, local_dict={n: sympy.Symbol(n, integer=True, nonnegative=True) for n in names})
    try:
        e, o = parse(dim), parse(str(other))
    except Exception:  # noqa: BLE001  (not an expression sympy reads: not provable)
        return False
    if not isinstance(e, sympy.Min) or len(e.args) != 2:
        return False
    return any(k.is_Integer and int(k) >= 1 and x == o for k, x in (e.args, e.args[::-1]))


_BROADCASTING = ("Add", "Sub", "Mul", "Div", "Pow", "Where", "Sum", "Max", "Min", "Equal", "Less", "Greater",
                 "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")


def _ssi_class(base):
    """SymbolicShapeInference that also resolves one broadcast it otherwise gives up on (and then stops inferring):
    dims a and Min(k, a), k >= 1 an integer - e.g. BERT's embeddings [batch, sequence, H] + position embeddings
    sliced from a k-row table, [1, Min(k, sequence), H]. Provably the result is a wherever the broadcast is valid:
    Min(k, a) == a unless a > k, and then neither is 1 (the model fails there, fused or not); if Min(k, a) is 1, a
    is 1 or k is 1, and the result is a either way. Every other broadcast of two different symbols is left to the
    base class (no merge: a fresh unknown, and inference stops there)."""
    class Inference(base):
        def _broadcast_shapes(self, shape1, shape2):
            r1, r2 = len(shape1), len(shape2)
            out = super()._broadcast_shapes(shape1, shape2)
            for i in range(len(out)):
                if out[-1 - i] is not None:
                    continue
                d1 = shape1[r1 - 1 - i] if i < r1 else 1
                d2 = shape2[r2 - 1 - i] if i < r2 else 1
                if _min_of(d1, d2):
                    out[-1 - i] = d2
                elif _min_of(d2, d1):
                    out[-1 - i] = d1
            return out

        def _onnx_infer_single_node(self, node):
            # onnx's inference gives a fresh unk__N where a and Min(k, a) meet (and inference would stop there):
            # put in the dim _broadcast_shapes proves
            super()._onnx_infer_single_node(node)
            if node.op_type not in _BROADCASTING or not node.output or node.output[0] not in self.known_vi_:
                return
            shapes = [self._try_get_shape(node, i) for i in range(len(node.input)) if node.input[i]]
            vi = self.known_vi_[node.output[0]]
            t = vi.type.tensor_type
            if not shapes or any(x is None for x in shapes) or not t.HasField("shape"):
                return
            shape = shapes[0]
            for other in shapes[1:]:
                shape = self._broadcast_shapes(shape, other)
            if len(shape) != len(t.shape.dim):
                return
            for d, new in zip(t.shape.dim, shape):
                unknown = not d.HasField("dim_value") and (not d.dim_param or self._is_none_dim(d.dim_param))
                if not unknown or new is None or (isinstance(new, str) and self._is_none_dim(new)):
                    continue
                if isinstance(new, str):
                    d.dim_param = new
                else:
                    d.dim_value = int(new)

        def _check_merged_dims(self, dims, allow_broadcast=True):
            # the base records a merge of any two symbols met at a broadcast (used later even with auto_merge off):
            # keep only equalities the op requires without broadcasting (MatMul's reduced dim) and a ~ Min(k, a)
            if allow_broadcast:
                rest = list(dict.fromkeys(str(d) for d in dims if not (isinstance(d, int) and d <= 1)))
                if not (len(rest) == 2 and (_min_of(rest[0], rest[1]) or _min_of(rest[1], rest[0]))):
                    return
            super()._check_merged_dims(dims, allow_broadcast)
    return Inference


def _merge_dims(old, new):
    """Per dim: a number from either (both numbers must agree), else the symbolic inference's symbol, else the old;
    None when the two are inconsistent (then the value keeps its old shape)."""
    if old is None:
        return list(new)
    if len(old) != len(new):
        return None
    out = []
    for a, b in zip(old, new):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            return None
        out.append(a if isinstance(a, int) else b if b is not None else a)
    return out


def infer_symbolic_shapes(model: ir.Model) -> tuple:
    """Refine value shapes and dtypes with symbolic shape inference (_symbolic_inference); the nodes are not changed.
    Returns (values refined, None) or (0, the reason it could not run) - then sites that need it are left alone."""
    found = _symbolic_inference(model)
    if isinstance(found, str):
        return 0, found
    refined = 0
    for node in model.graph:
        for v in node.outputs:
            if v.name not in found:
                continue
            dims, elem = found[v.name]
            if v.dtype is not None and elem and int(v.dtype) != elem:
                continue
            typed = v.dtype is None and bool(elem)  # past a contrib op (Gelu, SkipLayerNormalization) onnx has none
            if typed:
                v.dtype = ir.DataType(elem)
            merged = _merge_dims(_shape(v), dims)
            if merged is not None and merged != _shape(v):
                v.shape = ir.Shape([d if d is None or isinstance(d, int) else ir.SymbolicDim(d) for d in merged])
            elif not typed:
                continue
            refined += 1
    return refined, None


def rewrite_model(model: ir.Model, name: str = "model", shapes: bool = True, attention: bool = False,
                  decoder_causal: bool = False) -> Report:
    """Rewrite `model` in place; returns the report. shapes: run infer_shapes and infer_symbolic_shapes first.
    attention: then turn each fused site whose P is read by one MatMul(P, V) alone into FusedAttention, where its
    head sizes are ones FusedAttention's tensor-core kernels serve (fuse_attention). decoder_causal: a decoder's
    causal and padding masks in one bias go to the op as its causal flag and the padding mask (causal_masks: the
    same function except at rows whose visible keys are all padding)."""
    note = None
    if shapes:
        infer_shapes(model)
        _, note = infer_symbolic_shapes(model)
    report = Report(model=name, dtype=_dtype_of(model))
    if note:
        report.notes.append(note)
    # 1. which sites are candidates, and why some are declined (no changes to the model)
    probe_report = Report()
    _probe(model, probe_report)
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
    causal_masks(model, report, take=decoder_causal)
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
        fold_heads_transposes(model, report)
        pack_qkv_projections(model, report)
    if report.fused:
        model.opset_imports[DOMAIN] = 1
        if model.ir_version > 9:
            model.ir_version = 9
    return report


def _same_dim(x, y) -> bool:
    return x is not None and x == y


def _attention_chain(fgs: ir.Node, graph: ir.Graph):
    """(nodes reading P on the way to MatMul(P, V), that MatMul, zero_nan_rows) or (None, why not, None). P may pass
    Casts first (exporters write softmax(...).to(q.dtype); ViT's export goes to float32 and back) as long as each
    casts to P's dtype or to float32, exact for a float16/bfloat16 P, and MatMul gets P's dtype back; and, once,
    IsNaN + Where(IsNaN(P), 0, P) (exports of PyTorch's scaled_dot_product_attention), which zeroes P's NaN rows:
    FusedAttention's zero_nan_rows (_zeroes_nan_rows). Every value on the way has one consumer but that pair, and is
    no graph output."""
    outputs = set(graph.outputs)
    chain, value, zero_nan_rows, casts = [], fgs.outputs[0], 0, 0
    while True:
        uses = list(value.uses())
        if value in outputs:
            return None, "P is a graph output", None
        if len(uses) != 1:
            pair = _zeroes_nan_rows(value, uses)
            if pair is None or zero_nan_rows:
                return None, f"P has {len(uses)} consumers", None
            if isinstance(pair, str):
                return None, pair, None
            chain += pair
            value, zero_nan_rows = pair[1].outputs[0], 1
            continue
        user, index = uses[0]
        if user.op_type == "Cast" and user.domain == "" and casts < 2 and \
                _attr(user, "to", None) in (fgs.outputs[0].dtype.value, ir.DataType.FLOAT.value):
            chain.append(user)
            value, casts = user.outputs[0], casts + 1
            continue
        if user.op_type != "MatMul" or user.domain != "" or index != 0:
            return None, f"P is read by {user.op_type or '?'} (input {index}), not as MatMul(P, V)", None
        if value.dtype != fgs.outputs[0].dtype:
            return None, f"MatMul reads P as {value.dtype}, not {fgs.outputs[0].dtype}", None
        return chain, user, zero_nan_rows


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
        zero = _constant_scalar(where.inputs[1], "Where(IsNaN(P), X, P)'s X", rank)
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
    p_shape, v_shape = _shape(p), _shape(v)
    if p_shape is None or v_shape is None or len(v_shape) < 2:
        return f"V's shape {_fmt(v_shape)} or P's {_fmt(p_shape)} is unknown"
    if not _same_dim(v_shape[-2], p_shape[-1]):
        return f"V's rows {_fmt(v_shape)} are not provably P's columns {_fmt(p_shape)}"
    vb, pb = v_shape[:-2], p_shape[:-2]
    if len(vb) > len(pb) or not all(d == 1 or _same_dim(d, e) for d, e in zip(vb[::-1], pb[::-1])):
        return f"V's batch dims {_fmt(vb)} do not provably broadcast to P's {_fmt(pb)}"
    # the tensor-core kernels' reach (flashgemm/kernel/fused_attention_mma.py): elsewhere FusedAttention would run
    # its generic kernel, slower than the FusedGemmSoftmax + MatMul kept here
    # K: Q's as the site was matched (`k`; the rewrite's own Transposes and Reshapes carry no shape), else Q's now
    q_shape, trans_b = _shape(fgs.inputs[0]), _attr(fgs, "transB", 0)
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


CONSTANT_INPUT_LIMIT = (64, 1 << 24)  # the most nodes and elements drop_constant_masks evaluates for one input


def _constant_value(v: ir.Value, opset: int) -> Optional[np.ndarray]:
    """The value of `v` when it is computed from constants alone (initializers, Constant nodes; no graph input), by
    a handful of standard ops, into a tensor of known static shape (CONSTANT_INPUT_LIMIT), evaluated with onnx's
    reference evaluator; else None."""
    import onnx  # noqa: PLC0415
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415
    shape = _shape(v)  # bounded before anything is computed: a static shape of at most the limit's elements
    if shape is None or not all(isinstance(d, int) for d in shape) or math.prod(shape) > CONSTANT_INPUT_LIMIT[1]:
        return None
    nodes, inits, todo = set(), {}, [v]
    while todo:
        x = todo.pop()
        if x.is_graph_input():
            return None
        if x.const_value is not None:
            inits[x.name] = x
            continue
        p = x.producer()
        if p is None or p.domain not in ("", "ai.onnx") or any(
                a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in p.attributes.values()):
            return None
        if p not in nodes:
            nodes.add(p)
            if len(nodes) > CONSTANT_INPUT_LIMIT[0]:
                return None
            todo += [i for i in p.inputs if i is not None]
    order = [n for n in v.graph if n in nodes] if v.graph is not None else []
    if len(order) != len(nodes):
        return None
    graph = onnx.helper.make_graph(
        [ir.serde.serialize_node(n) for n in order], "constant", [],
        [onnx.helper.make_empty_tensor_value_info(v.name)],
        initializer=[ir.serde.serialize_tensor(x.const_value) for x in inits.values()])
    for t, x in zip(graph.initializer, inits.values()):
        t.name = x.name
    try:
        (out,) = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)]))\
            .run(None, {})
    except Exception:  # noqa: BLE001  (an op the reference evaluator lacks, or fails on: leave the input)
        return None
    return np.asarray(out)


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
            report.constant_masks_dropped += 1
            site = _site_of(report, node)
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


def _constant_values(v: Optional[ir.Value], depth: int = 16) -> Optional[np.ndarray]:
    """Every value v can hold (flat, float64), where v is read out of constants through ops that only move values
    (_VALUE_SUBSET) or is a ConstantOfShape (its one value): else None."""
    if v is None or depth == 0:
        return None
    try:
        arr = _constant_array(v)
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
    found = [_constant_values(x, depth - 1) for x in ([x for x in p.inputs if x is not None]
                                                      if p.op_type == "Concat" else p.inputs[:1])]
    return None if not found or any(f is None for f in found) else np.concatenate(found)


def _range_start(v: ir.Value) -> Optional[float]:
    """The least element of `v` when it holds an increasing index range: Range(start, limit, delta) of constant start
    and constant delta > 0, through ops that keep its values (_VALUE_KEEPING); else None."""
    p = v.producer()
    while p is not None and p.domain in ("", "ai.onnx") and p.op_type in _VALUE_KEEPING:
        p = p.inputs[0].producer()
    if p is None or p.domain not in ("", "ai.onnx") or p.op_type != "Range":
        return None
    start, delta = _constant_array(p.inputs[0]), _constant_array(p.inputs[2])
    if start is None or delta is None or start.size != 1 or delta.size != 1 or not delta.item() > 0:
        return None
    return start.item()


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
        return _attr(p, "to", 0) == ir.DataType.BOOL and _always_true(p.inputs[0], opset)
    if p.op_type in ("GreaterOrEqual", "Greater"):
        start, c = _range_start(p.inputs[0]), _constant_array(p.inputs[1])
        if start is None or c is None or c.size != 1:
            return False
        return start >= c.item() if p.op_type == "GreaterOrEqual" else start > c.item()
    return False


def _index_range(v: ir.Value, axis: int, length) -> Optional[float]:
    """The first index of `v` when it is Range(start, limit, 1) of constant start placed along `axis` (negative,
    from the last) by ops that keep its values (_VALUE_KEEPING): that dim `length` (one dim with it, known or
    symbolic) and every other dim 1; else None."""
    shape = _shape(v)
    if shape is None or len(shape) < -axis or not _same_dim(shape[axis], length) or any(
            d != 1 for i, d in enumerate(shape) if i != len(shape) + axis):
        return None
    p = v.producer()
    while p is not None and p.domain in ("", "ai.onnx") and p.op_type in _VALUE_KEEPING:
        p = p.inputs[0].producer()
    if p is None or p.domain not in ("", "ai.onnx") or p.op_type != "Range":
        return None
    start, delta = _constant_array(p.inputs[0]), _constant_array(p.inputs[2])
    if start is None or delta is None or start.size != 1 or delta.size != 1 or delta.item() != 1:
        return None
    return start.item()


def _causal_rule(v: ir.Value, m, n, opset: int = 17) -> bool:
    """Whether the boolean `v` is the causal rule of scores [..., m, n] with m = n, key j <= query i:
    LessOrEqual(kv_idx, q_idx) or GreaterOrEqual(q_idx, kv_idx) of index ranges from one start along the last axis
    (the n keys) and the one before it (the m queries), as transformers' decoder masks write it (without a cache:
    query i is position i), or made of constants (a static export's) whose values are that triangle. It is then the
    op's causal rule, j > i + (n - m) masked."""
    p = v.producer()
    if not _same_dim(m, n) or p is None or p.domain not in ("", "ai.onnx") or p.op_type not in (
            "LessOrEqual", "GreaterOrEqual"):
        return False
    if isinstance(m, int):
        val = _constant_value(v, opset)
        if val is not None:
            return (val.dtype == np.bool_ and val.ndim >= 2 and val.shape[-2:] == (m, n)
                    and bool(np.all(val == np.tril(np.ones((m, n), bool)))))
    kv, q = p.inputs if p.op_type == "LessOrEqual" else reversed(p.inputs)
    start = _index_range(kv, -1, n)
    return start is not None and _index_range(q, -2, m) == start


def _and_terms(v: ir.Value) -> list:
    """The terms of an And tree (Expands and Casts to bool on the way dropped), `v` itself when it is no And."""
    p = v.producer()
    while p is not None and p.domain in ("", "ai.onnx") and (
            p.op_type == "Expand" or p.op_type == "Cast" and _attr(p, "to", 0) == ir.DataType.BOOL):
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
    keep, fill = _constant_array(p.inputs[1]), _constant_array(p.inputs[2])
    if keep is None or fill is None or keep.size != 1 or fill.size != 1 or keep.item() != 0:
        return None
    if not fill.item() <= MASKED_AT_OR_BELOW or not any(_causal_rule(t, m, n, opset)
                                                         for t in _and_terms(p.inputs[0])):
        return None
    return p


def _broadcast_shape(*values: ir.Value) -> Optional[ir.Shape]:
    """The shape of an elementwise op's output on `values` (numpy broadcasting), where every dim is known."""
    shapes = [v.shape for v in values]
    if any(sh is None for sh in shapes):
        return None
    rank = max(len(sh) for sh in shapes)
    dims = []
    for i in range(rank):
        ds = {d for sh in shapes for d in [sh[i - rank + len(sh)] if i - rank + len(sh) >= 0 else 1] if d != 1}
        if len(ds) > 1 or any(not isinstance(d, int) and getattr(d, "value", None) is None for d in ds):
            return None
        dims.append(ds.pop() if ds else 1)
    return ir.Shape(dims)


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
    out.shape = _broadcast_shape(*[x for x in ins if x is not None])
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
                wide, thin = _shape(x), _shape(narrow)
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
            site = _site_of(report, node)
            if site is not None:
                site.details["narrowed" if slot == 2 else "mask_narrowed"] = _fmt(_shape(done[id(x)]))
    if report.masks_narrowed:  # the wide computations, unless something else reads them
        RemoveUnusedNodesPass()(model)


def _without_causal_rule(where: ir.Node, m, n, opset: int, new: list) -> Optional[ir.Value]:
    """The decoder mask computed by `where` (_causal_where) with its causal rule left out of the And, narrowed
    (_narrowed: a padding mask [B, 1, 1, S]); None when the rule was its only term. New nodes go to `new`."""
    terms = [t for t in _and_terms(where.inputs[0]) if not _causal_rule(t, m, n, opset)]
    if not terms or all(_always_true(t, opset) for t in terms):
        return None
    cond = terms[0]
    for i, t in enumerate(terms[1:]):
        node = ir.Node("", "And", [cond, t], name=f"{where.name}_padding_and{i}", num_outputs=1)
        node.outputs[0].name, node.outputs[0].dtype = f"{where.name}_padding_keep{i}", ir.DataType.BOOL
        node.outputs[0].shape = _broadcast_shape(cond, t)
        new.append(node)
        cond = node.outputs[0]
    node = ir.Node("", "Where", [cond, where.inputs[1], where.inputs[2]], name=f"{where.name}_padding",
                   num_outputs=1)
    out = node.outputs[0]
    out.name, out.dtype = f"{where.outputs[0].name}_padding", where.outputs[0].dtype
    out.shape = _broadcast_shape(cond, where.inputs[1], where.inputs[2])
    new.append(node)
    return _narrowed(out, opset, new)


def causal_masks(model: ir.Model, report: Report, take: bool = False) -> None:
    """At each fused site whose bias is a decoder's causal and padding masks in one (_causal_where), records the
    mask's fill; the report says that the op reads that bias at every element and computes every key. take: the
    causal rule goes to the op's causal flag instead, and the bias keeps the rest, narrowed (the padding mask [B, 1,
    1, S]); the keys past the diagonal are then skipped. Not the same function on one kind of row: a row whose
    visible keys are all padding (a left-padded sequence's first tokens, a sequence of padding alone) is the softmax
    over every key in the export (each at the fill), over its visible keys with the flag; every other row is the
    same, and no other row reads those tokens (their keys are masked for every query)."""
    opset = model.opset_imports.get("", 17)
    done = {}
    for node in [n for n in model.graph if n.op_type == OP_TYPE and n.domain == DOMAIN]:
        scores = _shape(node.outputs[0])
        if _attr(node, "causal", 0) or scores is None or len(scores) < 2 or len(node.inputs) < 3:
            continue
        bias, site = node.inputs[2], _site_of(report, node)
        where = None if bias is None else _causal_where(bias, scores[-2], scores[-1], opset)
        if where is None:
            continue
        if site is not None:
            site.details["causal_in_bias"] = float(_constant_array(where.inputs[2]).item())
        if not take:
            continue
        if id(bias) not in done:
            new = []
            done[id(bias)] = _without_causal_rule(where, scores[-2], scores[-1], opset, new), new
            if new:
                model.graph.insert_after(where, new)
        rest, _ = done[id(bias)]
        node.replace_input_with(2, rest)
        node.attributes["causal"] = ir.AttrInt64("causal", 1)
        report.causal_taken += 1
        if site is not None:
            site.details["causal_taken"] = _fmt(_shape(rest)) if rest is not None else "no bias"
    if report.causal_taken:
        RemoveUnusedNodesPass()(model)


def fuse_attention(model: ir.Model, report: Report) -> None:
    """FusedGemmSoftmax(A, B, bias, mask) -> [Cast to P's own dtype] -> [Where(IsNaN(P), 0, P)] -> MatMul(P, V)
    becomes FusedAttention(A, B, V, bias, mask), with the same attributes (and zero_nan_rows=1 for the Where), where
    _attention_chain and _attention_obstacle allow it; P is then never stored. The MatMul's output keeps its name."""
    report.attention = 0
    for fgs in [n for n in model.graph if n.op_type == OP_TYPE and n.domain == DOMAIN]:
        chain, matmul, zero_nan_rows = _attention_chain(fgs, model.graph)
        site = _site_of(report, fgs)
        why = matmul if chain is None else _attention_obstacle(fgs, matmul, site.details.get("k") if site else None)
        if why is not None:
            report.attention_left.append((_node_name(fgs), why))
            continue
        inputs = list(fgs.inputs) + [None] * (4 - len(fgs.inputs))
        inputs = inputs[:2] + [matmul.inputs[1]] + inputs[2:]
        while inputs and inputs[-1] is None:
            inputs.pop()
        attributes = list(fgs.attributes.values())
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
    start, end = _attr(shape_node, "start", 0), _attr(shape_node, "end", 4)
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
    a, b = _shape(node.inputs[0]), _shape(node.outputs[0])
    return a is not None and b is not None and len(a) == len(b) and all(_same_dim(x, y) for x, y in zip(a, b))


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
            if (i == 1 and not _attr(attn, "transB", 0)) or not _heads_transpose(t) or x in outputs \
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
            bias = _constant_array(b) if q is not None and q.op_type == "MatMul" else None
            if bias is not None and bias.ndim == 1 and len(mm_out.uses()) == 1 and mm_out not in outputs:
                nodes.append(p)
                p = q
                break
        else:
            return None
    if p is None or p.op_type != "MatMul" or p.domain != "":
        return None
    w, ys = _constant_array(p.inputs[1]), _shape(y)
    if w is None or w.ndim != 2 or ys is None or len(ys) != 3 or ys[2] != w.shape[1] or \
            (bias is not None and bias.shape != (w.shape[1],)):
        return None
    # [B, S, h d] -> [B, S, h, d]: from x's inferred shape, else from a constant shape (0 keeps a dim, -1 fills)
    dims, c = _shape(x), _constant_array(r.inputs[1])
    if dims is not None and len(dims) == 4 and isinstance(dims[2], int) and isinstance(dims[3], int) \
            and all(_same_dim(a, b) for a, b in zip(dims[:2], ys[:2])):
        h, d = dims[2], dims[3]
    elif c is not None and c.shape == (4,) and not (_attr(r, "allowzero", 0) and 0 in c):
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
                 decoder_causal: bool = False) -> Report:
    """Load src, rewrite, save to dst (external data in one dst.data file when over 2 GB); returns the report.
    ModelFileError when src is not an ONNX model. attention, decoder_causal: as rewrite_model's."""
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
    ir.save(model, str(dst), external_data=external)
    if log:
        log(report.text())
    return report


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


def workloads_of_models(paths, log: Callable = print, symbolic_ok: bool = False) -> list:
    """The workload specs of every model in `paths` (model_workloads), each model's listed in the log: what
    `flashgemm-tune --from-model` tunes and `flashgemm-build --from-model` builds kernels for. ValueError, with the fix,
    for a missing file, a file that is not a model (ModelFileError) or a model without a fusable site of static M, N, K
    (symbolic_ok: unless it has sites of symbolic lengths, which any-length kernels serve: model_any_length)."""
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
            raise ValueError(f"--from-model {path}: no fusable attention-score site with static M, N, K "
                             f"(see flashgemm-rewrite's report)")
        specs += found
    return specs


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
        shapes = [_shape(v) for v in (a, b, bias, mask)]
        if shapes[0] is None or shapes[1] is None or any(
                s is not None and not all(isinstance(d, int) for d in s) for s in shapes):
            continue  # a symbolic length: any-length kernels serve it (model_any_length)
        dtype = SUPPORTED.get(a.dtype)
        if dtype is None:
            continue
        fields = [f"a={'x'.join(map(str, shapes[0]))}", f"b={'x'.join(map(str, shapes[1]))}",
                  f"transB={_attr(node, 'transB', 0)}", f"causal={_attr(node, 'causal', 0)}",
                  f"scale={_attr(node, 'scale', 1.0):.9g}", f"dtype={dtype}"]
        if bias is not None:
            fields.append(f"bias={'x'.join(map(str, shapes[2])) or 'scalar'}")
        if mask is not None:
            kind = "bool" if mask.dtype == ir.DataType.BOOL else "add"
            fields.append(f"mask={'x'.join(map(str, shapes[3])) or 'scalar'}:{kind}")
        m, k = shapes[0][-2:]
        n = shapes[1][-2] if _attr(node, "transB", 0) else shapes[1][-1]
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
        shapes = [_shape(v) for v in (a, b)]
        dtype = SUPPORTED.get(a.dtype)
        if dtype is None or shapes[0] is None or shapes[1] is None or all(
                isinstance(d, int) for s in shapes for d in s):
            continue  # static: model_workloads covers it
        k = shapes[0][-1]
        if not isinstance(k, int):
            continue
        variant = Variant(dtype, bool(_attr(node, "transB", 0)), bias is not None,
                          "none" if mask is None else "bool" if mask.dtype == ir.DataType.BOOL else "add",
                          bool(_attr(node, "causal", 0)))
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
        v = Variant(dtype, bool(_attr(node, "transB", 0)), bias is not None,
                    "none" if mask is None else "bool" if mask.dtype == ir.DataType.BOOL else "add",
                    bool(_attr(node, "causal", 0)))
        if v not in out:
            out.append(v)
    return out


def _has_external_data(model: ir.Model) -> bool:
    return any(isinstance(v.const_value, ir.ExternalTensor) for v in model.graph.initializers.values())


def count_ops(path_or_model, op_type: str, domain: str = "") -> int:
    model = ir.load(str(path_or_model)) if isinstance(path_or_model, (str, os.PathLike)) else path_or_model
    return sum(1 for n in model.graph if n.op_type == op_type and n.domain == domain)


__all__: Sequence[str] = ("FuseScoresSoftmax", "FoldTransposeB", "FoldQueryScale", "Report", "Site", "rewrite_model",
                          "rewrite_file", "count_ops", "model_workloads", "model_any_length",
                          "model_attention_variants", "load_model", "ModelFileError")
