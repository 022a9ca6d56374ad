"""Reading a graph's values for the rewrite: shapes, constants, attributes, dtypes; a site declined with its
reason (SiteRejected)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import onnx_ir as ir


SUPPORTED = {ir.DataType.FLOAT16: "float16", ir.DataType.BFLOAT16: "bfloat16"}


class SiteRejected(Exception):
    """Why a candidate site is not fused (the reason goes to the report and to the rewriter's match result)."""

    def __init__(self, reason: str, *sources):
        super().__init__(reason)
        self.reason = reason
        self.sources = [s for s in sources if s is not None]


def reject(msg: str, *sources):
    raise SiteRejected(msg, *sources)


def shape_of(v: Optional[ir.Value]):
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


def fmt_dims(shape) -> str:
    return "?" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def constant_array(v: Optional[ir.Value]) -> Optional[np.ndarray]:
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


# ops a scale computed from a head size goes through (DeBERTa's TorchScript export: Cast(Sqrt(Mul(Cast(Squeeze(
# Slice(Shape(q)))), 3)))), evaluated by shape_constant
_SHAPE_ARITHMETIC = ("Cast", "Sqrt", "Mul", "Div", "Add", "Sub", "Squeeze", "Unsqueeze", "Identity", "Reshape",
                     "Concat", "Pow")


def static_dims(v: ir.Value) -> Optional[np.ndarray]:
    """v's value where it is dims of another value's shape that are known as numbers: a Shape, or a Slice or Gather
    of one with constant indices (an image's height and width under a dynamic batch); else None."""
    p = v.producer()
    if p is None or p.domain not in ("", "ai.onnx"):
        return None
    if not (p.op_type == "Shape" or p.op_type in ("Slice", "Gather") and p.inputs[0] is not None and
            p.inputs[0].producer() is not None and p.inputs[0].producer().op_type == "Shape"):
        return None
    shape_node = p if p.op_type == "Shape" else p.inputs[0].producer()
    dims = shape_of(shape_node.inputs[0])
    if dims is None:
        return None
    start = shape_node.attributes.get("start")
    end = shape_node.attributes.get("end")
    dims = dims[start.as_int() if start else None:end.as_int() if end else None]
    picked = np.arange(len(dims))
    if p.op_type != "Shape":
        args = [constant_array(i) for i in p.inputs[1:]]
        if any(a is None for a in args):
            return None
        picked = _evaluate(p, [picked] + args)
    if picked is None or any(not isinstance(dims[i], int) for i in np.ravel(picked)):
        return None
    return np.asarray([dims[i] for i in np.ravel(picked)], np.int64).reshape(np.shape(picked))


def shape_constant(v: Optional[ir.Value], depth: int = 12) -> Optional[np.ndarray]:
    """v's value where it is computed from constants and from the static dims of other values' shapes (static_dims)
    by arithmetic (_SHAPE_ARITHMETIC, each node run by onnx's reference evaluator); else None."""
    arr = constant_array(v)
    if arr is not None or v is None or depth == 0:
        return arr
    dims = static_dims(v)
    if dims is not None:
        return dims
    p = v.producer()
    if p is None or p.domain not in ("", "ai.onnx") or p.op_type not in _SHAPE_ARITHMETIC:
        return None
    args = [None if i is None else shape_constant(i, depth - 1) for i in p.inputs]
    if any(a is None and i is not None for a, i in zip(args, p.inputs)):
        return None
    return _evaluate(p, args)


def _evaluate(node: ir.Node, args: list) -> Optional[np.ndarray]:
    """One standard node run on numpy inputs by onnx's reference evaluator (None where it fails)."""
    import onnx  # noqa: PLC0415
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415
    proto = ir.serde.serialize_node(node)
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(args)]
    del proto.input[:]
    proto.input.extend(names)
    del proto.output[1:]
    proto.output[0] = "out"
    graph = onnx.helper.make_graph([proto], "one", [], [onnx.helper.make_empty_tensor_value_info("out")])
    try:
        (out,) = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)]))\
            .run(None, {n: a for n, a in zip(names, args) if n})
    except Exception:  # noqa: BLE001  (an op or attribute the evaluator rejects: not known)
        return None
    return np.asarray(out)


def constant_scalar(v: Optional[ir.Value], what: str, max_rank: int) -> float:
    """The value of a one-element constant (constant_array's: an initializer or a Constant, through an Identity; not
    a graph input), after constant propagation at its producer; raises SiteRejected."""
    if v is None:
        reject(f"{what} is missing")
    if v.is_graph_input():
        reject(f"{what} ({v.name}) is a graph input, not a constant", v)
    producer = v.producer()
    if producer is not None:
        from onnxscript import optimizer  # noqa: PLC0415
        optimizer.basic_constant_propagation([producer])
    try:
        arr = shape_constant(v)
    except Exception:  # noqa: BLE001  (external data not available)
        reject(f"{what} ({v.name}): its value cannot be read", v)
    if arr is None:
        reject(f"{what} ({v.name}) is not a constant", v)
    if arr.size != 1:
        reject(f"{what} ({v.name}) has shape {list(arr.shape)}, not a single element", v)
    if arr.ndim > max_rank:
        reject(f"{what} ({v.name}) has rank {arr.ndim} > the scores' rank {max_rank}: it would broadcast them", v)
    value = float(np.asarray(arr, dtype=np.float64).reshape(()))
    if not math.isfinite(value):
        reject(f"{what} ({v.name}) = {value} is not finite", v)
    return value


def attr_of(node: ir.Node, name: str, default):
    a = node.attributes.get(name)
    if a is None:
        return default
    return a.as_float() if isinstance(default, float) else a.as_int()


def same_dim(x, y) -> bool:
    return x is not None and x == y


def dtype_name(dtype: Optional[ir.DataType]) -> str:
    if dtype is None:
        return "?"
    return {ir.DataType.FLOAT: "float32", ir.DataType.DOUBLE: "float64"}.get(dtype, dtype.name.lower())


def dtype_of(model: ir.Model) -> str:
    for node in model.graph:
        if node.op_type == "Softmax" and node.inputs[0] is not None and node.inputs[0].dtype is not None:
            return dtype_name(node.inputs[0].dtype)
    return "?"


def known_dims(shape) -> int:
    return -1 if shape is None else sum(isinstance(d, int) for d in shape)


def broadcast_shape(*values: ir.Value) -> Optional[ir.Shape]:
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


def read_in(v: ir.Value) -> None:
    """An initializer whose data sits in an external file, read into memory (a copy: the file's mapping may close)."""
    if isinstance(v.const_value, ir.ExternalTensor):
        v.const_value = ir.tensor(np.array(v.const_value.numpy()), name=v.name)
