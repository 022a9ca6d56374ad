"""Replace attention-score subgraphs of an ONNX model with flashgemm::FusedGemmSoftmax (onnxscript pattern rewriter).

    from flashgemm.ort.rewrite import rewrite_file
    report = rewrite_file("bert.onnx", "bert.fused.onnx")
    print(report.text())

Five rules, applied in this order (each an onnxscript `RewriteRuleClassBase`; those that match Add or Mul with
`commute=True`, so Add(mask, s) and Mul(c, s) match as well as Add(s, mask) and Mul(s, c)):

1. FuseScoresSoftmax   Softmax( [Where(~keep, lowest, ] [Add( [Mul(S, c) | Div(S, c) | S] , M )] [)] ),
                         S = MatMul(A, B)
                         -> FusedGemmSoftmax(A, B, [bias=M], [keep; mask_fill=1]; scale = c | 1/c | 1, transB=0,
                            causal=0)
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
narrow_masks gives the op one that is a broadcast of a narrower one (an Expand, an always-true And term) narrow,
causal_masks recognizes a decoder's causal rule in a bias (taken as the causal flag: decoder_causal). With
attention, FusedAttention's passes follow (fuse_attention, fold_heads_transposes, pack_qkv_projections).

Before the rules, lift_batched_heads (module batched) gives attention computed on [batch * heads, ...] views (DeBERTa:
batched 3-D MatMuls, a Reshape to [batch, heads, ...] before the mask) its 4-D form, which they match.

Rule 1 fuses only what is provably the same function (everything it declines is reported with the reason):
  - Softmax over the last axis: axis -1, or axis == rank-1 with the rank known (opset < 13's default axis 1 too,
    when the rank is 2; its 2-D coercion at the last axis is the row softmax);
  - the scores' dtype is float16 or bfloat16 (the op's only types). float32 models are left alone and the report
    says so: there is deliberately no --cast option, because casting an fp32 model's Q, K and mask to fp16 around
    each site changes its numerics (and e.g. turns a -3.4e38 mask into -inf) - that is not a rewrite but a
    different model; export the model in float16 instead (flashgemm-getmodel --dtype float16);
  - A and B of known rank >= 2 (ONNX MatMul's 1-D promotion is not the op's contract);
  - the scale is a constant (initializer or Constant, not a graph input; or computed from static dims of a shape,
    as DeBERTa's sqrt of its head size: values.shape_constant) with exactly one element, finite (and non-zero for
    Div), of rank <= the scores' rank (so it cannot broadcast the scores to a larger shape);
  - the added operand M is unidirectionally broadcastable to the scores: rank <= theirs, and each of its dims
    (aligned right) is 1 or provably equal to the scores' dim (same number, or same symbolic name). An unknown
    dim, or a symbolic dim against a different one, is not provable: the site is left alone. M goes in as the
    op's `bias` input, which is added exactly as Add adds it (the op's `mask` input would instead zero rows whose
    entries are all <= -65504, which ONNX's Add + Softmax does not);
  - a Where before the Softmax (torch's masked_fill, as DeBERTa masks its scores) must fill with the dtype's lowest
    (-65504 in float16): its condition, bool and broadcastable, becomes the op's bool mask with mask_fill=1, whose
    false entries take that logit as the Where gives it (a row masked everywhere is uniform, as the original's);
    -inf or another fill is another function and is left alone;
  - for scores of rank >= 5 the shapes must be static and accepted by the op's canonicalization (the kernels take
    at most two independent batch dims; rank <= 4 always fits).
Shapes: infer_shapes (onnx's inference, also on a constant-folded clone) and then infer_symbolic_shapes (onnxruntime's
SymbolicShapeInference, auto_merge off) fill them in before matching; after them, fold_static_terms (module masks)
makes a constant of each term added to the scores whose shape neither found but whose value is fixed (from constants
and static dims: BEiT's position bias, interpolated to the image's resolution), and both run again. Symbolic
inference is what proves a dynamic export's mask - built from `attention_mask` [batch, sequence] - broadcastable to
the scores [batch, heads, sequence, sequence]; it equates two symbols only where that is proven (see _ssi_class),
never on a broadcast's say-so. When it cannot run (onnxruntime or sympy missing, or it fails), the report carries a
note saying why and such sites stay unfused. The matched intermediate values (S, the scaled and the masked scores)
must have no other consumer - the matcher refuses otherwise, and the report says so.

Numerics: the fused op accumulates in fp32 and applies the scale in fp32, so its result differs from the fp16 graph's
(which rounds S, c*S and c*S+M to fp16) by rounding only. Rules 2 and 5 rely on Reshape and Transpose only moving
elements, so c*(X) reshaped/transposed times K is c times the product, exactly in real arithmetic; for a power-of-two
c (Whisper: 64^-0.5 = 0.125) the fp16 product X*c is itself exact, for SDPA's sqrt(scale) on both sides it is not
(the folded op then rounds less than the export).

The modules, one a role: report (the Report), values (reading a graph's values), shapes (shape inference),
batched (the [batch * heads] views lifted), scores (the rules), masks (the fused sites' masks), attention
(FusedAttention's passes), pipeline (rewrite_model, rewrite_file: the passes in order), workloads (what a model needs
built).
"""
from __future__ import annotations

from flashgemm.ort.rewrite.pipeline import (DECODER_CAUSAL, ModelFileError, count_ops, load_model, rewrite_file,
                                           rewrite_model)
from flashgemm.ort.rewrite.report import Report, Site
from flashgemm.ort.rewrite.scores import FoldQueryScale, FoldTransposeB, FuseScoresSoftmax
from flashgemm.ort.rewrite.values import SUPPORTED
from flashgemm.ort.rewrite.workloads import (any_length_requests, model_any_length, model_attention_variants,
                                             model_workloads, workloads_of_models)

__all__ = ("FuseScoresSoftmax", "FoldTransposeB", "FoldQueryScale", "Report", "Site", "SUPPORTED", "rewrite_model",
           "rewrite_file", "count_ops", "model_workloads", "model_any_length", "model_attention_variants",
           "any_length_requests", "workloads_of_models", "load_model", "ModelFileError", "DECODER_CAUSAL")
