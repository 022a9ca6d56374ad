"""Shapes before matching: onnx's inference (also on a constant-folded clone), then ONNX Runtime's symbolic
shape inference, which equates two symbolic dims only where that is proven (_ssi_class)."""
from __future__ import annotations

import logging
import math
import re

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from flashgemm.ort.rewrite.values import shape_of, known_dims, read_in


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
            if known_dims(shape_of(w)) > known_dims(shape_of(v)):
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
    go in as typed graph inputs (shape only: nothing is read or copied); the smaller ones of a model with external
    data are read into it. Inference that stops at a node it cannot resolve still returns what it found before it."""
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
        else:
            read_in(v)  # inference would look for an external file in the working directory
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


def min_of(dim, other) -> bool:
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
                if min_of(d1, d2):
                    out[-1 - i] = d2
                elif min_of(d2, d1):
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
                if not (len(rest) == 2 and (min_of(rest[0], rest[1]) or min_of(rest[1], rest[0]))):
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
            merged = _merge_dims(shape_of(v), dims)
            if merged is not None and merged != shape_of(v):
                v.shape = ir.Shape([d if d is None or isinstance(d, int) else ir.SymbolicDim(d) for d in merged])
            elif not typed:
                continue
            refined += 1
    return refined, None
