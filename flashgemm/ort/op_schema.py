"""The ops' ONNX schemas (FusedGemmSoftmax, FusedAttention) with type and shape inference, registered with the
`onnx` package on import.

Why: tools that infer shapes through `onnx` (onnx.shape_inference, and ONNX Runtime's symbolic shape inference, which
asks onnx for every node it does not know itself) stop at an unknown custom op, and everything after it loses its
shape. ONNX Runtime's transformers optimizer (`onnxruntime.transformers.optimizer.optimize_model`) needs those
shapes for some fusions: on a rewritten BERT it left every Add + LayerNormalization unfused (no
SkipLayerNormalization) until P's shape was known. The rewrite imports this module, so does anyone who imports
`flashgemm.ort.rewrite` before optimizing. ONNX Runtime itself does not read it (the op library declares the op
to ORT).

P's type is A's; its shape is the broadcast batch of A and B (ONNX MatMul rules) followed by [M, N], M = A[-2],
N = B[-2] with transB else B[-1]; a batch dim whose size cannot be decided (two different symbols) is left unknown.
FusedAttention's O has the same batch dims and [M, D], D = V[-1]. Its attribute bsnh (four 0/1 flags: Q, K, V, O)
marks tensors that are [batch, sequence, heads, head size] (ONNX Runtime's BSNH) rather than [batch, heads, sequence,
head size]: they are read (O written) through strides, so the Transposes an export puts around attention need not
run; a flagged O is [batch, M, heads, D]. Its attribute packed_qkv (0/1) marks Q, K and V as one tensor [batch, sequence,
3, heads, head size] given as all three inputs (one MatMul's output with the three projections' weights side by
side): Q, K and V are its slices 0, 1 and 2 of dim 2, each BSNH (bsnh flags all three).
"""
from __future__ import annotations

import onnx
from onnx import defs

DOMAIN = "flashgemm"
OP_TYPE = "FusedGemmSoftmax"
ATTENTION_OP_TYPE = "FusedAttention"  # inputs A (Q), B (K), V, bias, mask -> O [batch..., M, D]


def _dims(tp):
    """The shape of a tensor TypeProto as a list of int | str | None, or None if the rank is unknown."""
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    out = []
    for d in tp.tensor_type.shape.dim:
        out.append(d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param") else None)
    return out


def _broadcast(a, b):
    """One batch dim of two: ONNX broadcasting where decidable, else None."""
    if a == 1:
        return b
    if b == 1 or a == b:
        return a
    if isinstance(a, int) and not isinstance(b, int):
        return a  # a symbol against a size > 1: the size (or the model is invalid)
    if isinstance(b, int) and not isinstance(a, int):
        return b
    return None


def _heads_second(dims, flagged: bool):
    """A BSNH tensor's dims as [batch, heads, sequence, head size] (and back: the swap is its own inverse)."""
    return [dims[0], dims[2], dims[1], dims[3]] if flagged and dims is not None and len(dims) == 4 else dims


def infer(ctx, attention: bool = False) -> None:
    a_type = ctx.get_input_type(0)
    if a_type is None or not a_type.HasField("tensor_type"):
        return
    out = onnx.TypeProto()
    out.tensor_type.elem_type = a_type.tensor_type.elem_type
    a = _dims(a_type)
    b = _dims(ctx.get_input_type(1)) if ctx.get_num_inputs() > 1 and ctx.has_input(1) else None
    attr = ctx.get_attribute("transB")
    trans_b = bool(attr.i) if attr is not None else False
    attr = ctx.get_attribute("bsnh") if attention else None
    bsnh = [bool(x) for x in attr.ints] if attr is not None and len(attr.ints) == 4 else [False] * 4
    attr = ctx.get_attribute("packed_qkv") if attention else None
    packed = attr is not None and attr.i == 1

    def unpacked(dims):  # a packed_qkv tensor's dims as one of Q, K, V (BSNH)
        return dims[:2] + dims[3:] if packed and dims is not None and len(dims) == 5 else dims
    a, b = _heads_second(unpacked(a), bsnh[0]), _heads_second(unpacked(b), bsnh[1])
    if a is not None and b is not None and len(a) >= 2 and len(b) >= 2:
        ba, bb = a[:-2], b[:-2]
        n = max(len(ba), len(bb))
        ba, bb = [1] * (n - len(ba)) + ba, [1] * (n - len(bb)) + bb
        dims = [_broadcast(x, y) for x, y in zip(ba, bb)] + [a[-2], b[-2] if trans_b else b[-1]]
        if attention:  # O: P's batch dims + [M, D]; D from V (unknown when V's shape is)
            v = unpacked(_dims(ctx.get_input_type(2))) if ctx.get_num_inputs() > 2 and ctx.has_input(2) else None
            dims[-1] = v[-1] if v else None
            dims = _heads_second(dims, bsnh[3])  # a BSNH O: [batch, M, heads, D]
        shape = out.tensor_type.shape
        for d in dims:
            dim = shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str) and d:
                dim.dim_param = d
    ctx.set_output_type(0, out)


def _schema(attention: bool = False) -> defs.OpSchema:
    types = ["tensor(float16)", "tensor(bfloat16)"]
    param = defs.OpSchema.FormalParameter
    opt = defs.OpSchema.FormalParameterOption.Optional
    if attention:
        name, doc = ATTENTION_OP_TYPE, "O = softmax_rowwise(scale * Q @ K + bias + mask) @ V, P never stored."
        inputs, outputs = [param("Q", "T"), param("K", "T"), param("V", "T")], [param("O", "T")]
    else:
        name, doc = OP_TYPE, ("P = softmax_rowwise(scale * A @ B + bias + mask), optionally causal "
                              "(README: the operator).")
        inputs, outputs = [param("A", "T"), param("B", "T")], [param("P", "T")]
    schema = defs.OpSchema(
        name, DOMAIN, 1, doc,
        inputs=inputs + [param("bias", "T", param_option=opt), param("mask", "M", param_option=opt)],
        outputs=outputs,
        type_constraints=[("T", types, "inputs but the mask, and the output"),
                          ("M", types + ["tensor(bool)"], "mask: additive or boolean")],
        attributes=[defs.OpSchema.Attribute("scale", defs.OpSchema.AttrType.FLOAT, "logit scale", required=False),
                    defs.OpSchema.Attribute("transB", defs.OpSchema.AttrType.INT, "B is [..., N, K]", required=False),
                    defs.OpSchema.Attribute("causal", defs.OpSchema.AttrType.INT, "bottom-right causal mask",
                                            required=False),
                    defs.OpSchema.Attribute("causal_fill", defs.OpSchema.AttrType.INT,
                                            "with causal: keys past the diagonal at the lowest logit, not masked out",
                                            required=False),
                    defs.OpSchema.Attribute("mask_fill", defs.OpSchema.AttrType.INT,
                                            "a bool mask's false entry is the type's lowest logit, not masked out "
                                            "(Where(mask, logits, lowest))", required=False)]
        + ([defs.OpSchema.Attribute("zero_nan_rows", defs.OpSchema.AttrType.INT,
                                    "a NaN row of P is 0 (Where(IsNaN(P), 0, P) before P V)", required=False),
            defs.OpSchema.Attribute("bsnh", defs.OpSchema.AttrType.INTS,
                                    "Q, K, V, O: 1 where [batch, sequence, heads, head size] (module doc)",
                                    required=False),
            defs.OpSchema.Attribute("packed_qkv", defs.OpSchema.AttrType.INT,
                                    "Q, K, V are one tensor [batch, sequence, 3, heads, head size] (module doc)",
                                    required=False)]
           if attention else []))
    schema.set_type_and_shape_inference_function(lambda ctx: infer(ctx, attention))
    return schema

def register() -> None:
    """Register the schema once (a second import, or another copy of this package, finds it there)."""
    for name, attention in ((OP_TYPE, False), (ATTENTION_OP_TYPE, True)):
        if not defs.has(name, DOMAIN):
            defs.register_schema(_schema(attention))


register()
