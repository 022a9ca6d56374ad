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
        arr = constant_array(v)
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
