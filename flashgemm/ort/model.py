"""One-node ONNX models of flashgemm::FusedGemmSoftmax (tests, examples).

    P = FusedGemmSoftmax(A, B, [bias], [mask]; scale, transB, causal)   domain "flashgemm", opset 1

IR version 9: onnx 1.23 writes IR 14 by default, which ORT 1.31 rejects ("max supported IR version: 13").
"""
from __future__ import annotations

from typing import Optional, Sequence

from onnx import TensorProto, helper

DOMAIN = "flashgemm"
OP_TYPE = "FusedGemmSoftmax"
ATTENTION_OP_TYPE = "FusedAttention"
IR_VERSION = 9
OPSET = 17

ELEM_TYPES = {
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "float32": TensorProto.FLOAT,
    "bool": TensorProto.BOOL,
}


def elem_type(dtype) -> int:
    """'float16' | 'bfloat16' | 'float32' | 'bool' (or a numpy / ml_dtypes dtype) -> TensorProto enum."""
    name = getattr(dtype, "name", dtype)  # np.dtype('float16').name == 'float16'; str passes through
    name = {"float": "float32"}.get(str(name), str(name))
    if name not in ELEM_TYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; one of {sorted(ELEM_TYPES)}")
    return ELEM_TYPES[name]


def make_model(dtype, a_shape: Sequence[int], b_shape: Sequence[int], bias_shape: Optional[Sequence[int]] = None,
               mask_shape: Optional[Sequence[int]] = None, mask_dtype=None, scale: float = 1.0, trans_b: int = 0,
               causal: int = 0, *, b_dtype=None, bias_dtype=None, out_shape: Optional[Sequence] = None,
               mask_fill: int = 0, causal_fill: int = 0):
    """Graph inputs A, B, [bias], [mask] -> output P.

    dtype: T of A, B, bias and P. mask_dtype: 'bool' or T (default T); mask_fill, causal_fill: the op's attributes
    (a bool mask's false entries, the keys past the causal diagonal, at the lowest logit) where given. b_dtype /
    bias_dtype override T for those inputs (only to provoke type errors in tests). An absent bias with a mask present becomes an empty input name,
    ONNX's way to skip an optional input. P's shape is left symbolic unless out_shape is given.
    """
    t = elem_type(dtype)
    inputs = [helper.make_tensor_value_info("A", t, list(a_shape)),
              helper.make_tensor_value_info("B", elem_type(b_dtype or dtype), list(b_shape))]
    names = ["A", "B"]
    if bias_shape is not None:
        inputs.append(helper.make_tensor_value_info("bias", elem_type(bias_dtype or dtype), list(bias_shape)))
        names.append("bias")
    if mask_shape is not None:
        if bias_shape is None:
            names.append("")
        inputs.append(helper.make_tensor_value_info("mask", elem_type(mask_dtype or dtype), list(mask_shape)))
        names.append("mask")
    node = helper.make_node(OP_TYPE, names, ["P"], domain=DOMAIN, name="fgs", scale=float(scale),
                            transB=int(trans_b), causal=int(causal))
    if mask_fill:
        node.attribute.append(helper.make_attribute("mask_fill", int(mask_fill)))
    if causal_fill:
        node.attribute.append(helper.make_attribute("causal_fill", int(causal_fill)))
    if out_shape is None:
        out_shape = [f"p{i}" for i in range(max(len(a_shape), len(b_shape)))]
    out = helper.make_tensor_value_info("P", t, list(out_shape))
    graph = helper.make_graph([node], "fused_gemm_softmax", inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)],
                             ir_version=IR_VERSION)


def make_attention_model(dtype, q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int],
                         bias_shape: Optional[Sequence[int]] = None, mask_shape: Optional[Sequence[int]] = None,
                         mask_dtype=None, scale: float = 1.0, trans_b: int = 0, causal: int = 0,
                         zero_nan_rows: int = 0, bsnh: Optional[Sequence[int]] = None, packed_qkv: int = 0,
                         mask_fill: int = 0, causal_fill: int = 0):
    """Graph inputs Q, K, V, [bias], [mask] -> output O, one FusedAttention node (its attributes are
    FusedGemmSoftmax's, transB being K's layout, and zero_nan_rows and bsnh when given): make_model's graph with V
    inserted after B and the node retyped. O's shape is left symbolic. packed_qkv: one graph input QKV (q_shape, the
    others ignored) given as Q, K and V."""
    model = make_model(dtype, q_shape, k_shape, bias_shape, mask_shape, mask_dtype, scale, trans_b, causal,
                       mask_fill=mask_fill, causal_fill=causal_fill,
                       out_shape=[f"o{i}" for i in range(4 if packed_qkv else max(len(q_shape), len(k_shape)))])
    graph = model.graph
    for value, name in zip(graph.input, ("Q", "K")):
        value.name = name
    graph.input.insert(2, helper.make_tensor_value_info("V", elem_type(dtype), list(v_shape)))
    node = graph.node[0]
    node.op_type, node.name = ATTENTION_OP_TYPE, "fa"
    inputs = (["QKV"] * 3 if packed_qkv else ["Q", "K", "V"]) + list(node.input[2:])
    if packed_qkv:
        graph.input[0].name = "QKV"
        del graph.input[1:3]
        node.attribute.append(helper.make_attribute("packed_qkv", 1))
    del node.input[:]
    node.input.extend(inputs)
    node.output[0] = graph.output[0].name = "O"
    if zero_nan_rows:
        node.attribute.append(helper.make_attribute("zero_nan_rows", int(zero_nan_rows)))
    if bsnh is not None:
        node.attribute.append(helper.make_attribute("bsnh", [int(x) for x in bsnh]))
    graph.name = "fused_attention"
    return model

def make_site_models(dtype, a_shape: Sequence[int], b_shape: Sequence[int], bias_shape: Optional[Sequence[int]],
                     scale: float, trans_b: int, copies: int = 1):
    """One attention-score site of a model, `copies` times over (one per layer), in both forms:
    (unfused, fused). unfused is what the exporter writes: [Transpose(B)] -> MatMul -> Mul(scale) -> [Add(bias)]
    -> Softmax(-1); fused is FusedGemmSoftmax. The copies share the inputs and write P0..P{copies-1}: one run
    times a whole forward pass's worth of sites, so per-run overheads do not swamp a ~30 us kernel. (Run the
    unfused one with ORT's CommonSubexpressionElimination disabled, or its copies collapse into one.)"""
    t = elem_type(dtype)
    inputs = [helper.make_tensor_value_info("A", t, list(a_shape)), helper.make_tensor_value_info("B", t, list(b_shape))]
    names = ["A", "B"]
    if bias_shape is not None:
        inputs.append(helper.make_tensor_value_info("bias", t, list(bias_shape)))
        names.append("bias")
    scale_init = helper.make_tensor("scale", t, [], [scale]) if t != TensorProto.BFLOAT16 else \
        helper.make_tensor("scale", TensorProto.FLOAT, [], [scale])
    unfused_nodes, fused_nodes, outs = [], [], []
    for i in range(copies):
        b = "B"
        if trans_b:
            perm = list(range(len(b_shape)))
            perm[-2:] = perm[-1], perm[-2]
            unfused_nodes.append(helper.make_node("Transpose", ["B"], [f"Bt{i}"], perm=perm))
            b = f"Bt{i}"
        unfused_nodes.append(helper.make_node("MatMul", ["A", b], [f"S{i}"]))
        x = f"S{i}"
        if t == TensorProto.BFLOAT16:  # Mul by a float32 scalar is not valid for bf16: cast it
            unfused_nodes.append(helper.make_node("CastLike", ["scale", x], [f"c{i}"]))
            unfused_nodes.append(helper.make_node("Mul", [x, f"c{i}"], [f"Ss{i}"]))
        else:
            unfused_nodes.append(helper.make_node("Mul", [x, "scale"], [f"Ss{i}"]))
        x = f"Ss{i}"
        if bias_shape is not None:
            unfused_nodes.append(helper.make_node("Add", [x, "bias"], [f"Sb{i}"]))
            x = f"Sb{i}"
        unfused_nodes.append(helper.make_node("Softmax", [x], [f"P{i}"], axis=-1))
        fused_nodes.append(helper.make_node(OP_TYPE, names, [f"P{i}"], domain=DOMAIN, name=f"fgs{i}",
                                            scale=float(scale), transB=int(trans_b), causal=0))
        outs.append(helper.make_tensor_value_info(f"P{i}", t, None))
    unfused = helper.make_model(
        helper.make_graph(unfused_nodes, "site_unfused", inputs, outs, initializer=[scale_init]),
        opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    fused = helper.make_model(helper.make_graph(fused_nodes, "site_fused", inputs, outs),
                              opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)],
                              ir_version=IR_VERSION)
    return unfused, fused
