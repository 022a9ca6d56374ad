"""Attention written on [batch * heads, ...] views, lifted to [batch, heads, ...] before the rules.

DeBERTa (v2 and v3, by both exporters) computes its scores with batched 3-D MatMuls on [batch * heads, sequence,
head size] views and reshapes them to [batch, heads, sequence, sequence] only for the mask:

    Softmax(Where(~mask, lowest, Reshape(MatMul(Q3, K3ᵀ / c) + rel_bias3, [-1, H, M, N])))
    O3 = MatMul(Reshape(P, [-1, M, N]), V3)

lift_batched_heads moves that Reshape down to the operands: the scores become MatMul(Q4, K4ᵀ / c) + rel_bias4 of the
mask's rank, which rule 1 matches, and P V becomes MatMul(P, V4) (then O3 = Reshape(O4)), which FusedAttention takes.
An operand that is itself a 4-D tensor with its first two dims merged (Reshape(X4, [-1, M, K]) with X4 [B, H, M, K],
the projections' usual route) is X4 again, so the Transposes between heads and sequence reach the op's bsnh views;
others are reshaped (a view). Exact: a Reshape that splits only the first dim commutes with a batched MatMul, a
transpose of the last two dims, and elementwise ops on a scalar or on operands split alike."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from flashgemm.ort.rewrite.values import same_dim, shape_of

# ops that compute only shapes (the exporters' plumbing around a view): they die with the Reshapes they feed
_SHAPE_PLUMBING = ("Shape", "Gather", "Slice", "Squeeze", "Unsqueeze", "Concat", "Cast", "Mul", "Div", "Add", "Sub",
                   "Constant", "Identity", "Reshape")


def _std(node: Optional[ir.Node], *op_types) -> bool:
    return node is not None and node.domain in ("", "ai.onnx") and node.op_type in op_types


def _feeds_only(value: ir.Value, sinks: set, depth: int = 12) -> bool:
    """Whether every use of `value` is a shape input in `sinks` ((node, input index) pairs) or shape plumbing that
    leads only there: removing the sinks leaves nothing that reads it."""
    if depth == 0 or value.is_graph_output():
        return False
    for node, index in value.uses():
        if (id(node), index) in sinks:
            continue
        if not _std(node, *_SHAPE_PLUMBING) or not all(_feeds_only(o, sinks, depth - 1) for o in node.outputs):
            return False
    return True


def _only_use(value: ir.Value, node: ir.Node, sinks: set) -> bool:
    """`value` is read by `node` and otherwise only by shape plumbing that dies with `sinks`."""
    if value.is_graph_output():
        return False
    return any(u is node for u, _ in value.uses()) and all(
        u is node or _std(u, *_SHAPE_PLUMBING) and all(_feeds_only(o, sinks) for o in u.outputs)
        for u, _ in value.uses())


def _scalar(v: Optional[ir.Value]) -> bool:
    shape = shape_of(v)
    return shape is not None and all(d == 1 for d in shape)


class _Lift:
    """Builds the 4-D twins [B, H, ...] of rank-3 values [B * H, ...]; the new nodes go to `nodes`, in order."""

    def __init__(self, heads: int, batch, name: str):
        self.heads, self.batch, self.name, self.nodes = heads, batch, name, []

    def node(self, op_type: str, inputs: list, shape, dtype, **attrs) -> ir.Value:
        attributes = [ir.AttrInt64s(k, v) if isinstance(v, list) else ir.AttrInt64(k, v) if isinstance(v, int)
                      else ir.AttrTensor(k, v) for k, v in attrs.items()]
        node = ir.Node("", op_type, inputs, attributes=attributes, name=f"{self.name}_{len(self.nodes)}",
                       num_outputs=1)
        out = node.outputs[0]
        out.name, out.dtype, out.shape = f"{node.name}_out", dtype, ir.Shape(shape)
        self.nodes.append(node)
        return out

    def target(self, x: ir.Value, leading: list, skip: int) -> ir.Value:
        """A Reshape's shape: `leading`, then x's dims past the first `skip`, read at run time."""
        rank = len(shape_of(x))
        const = [self.node("Constant", [], [len(c)], ir.DataType.INT64, value=ir.tensor(np.array(c, np.int64)))
                 for c in (leading, [skip], [rank])]
        dims = self.node("Shape", [x], [rank], ir.DataType.INT64)
        rest = self.node("Slice", [dims, const[1], const[2]], [rank - skip], ir.DataType.INT64)
        return self.node("Concat", [const[0], rest], [len(leading) + rank - skip], ir.DataType.INT64, axis=0)

    def lift(self, x: ir.Value) -> ir.Value:
        """x [B * H, M, K] as [B, H, M, K] (x [1, M, K] as it is: it broadcasts alike): X4 itself where x =
        Reshape(X4) merged X4's first two dims; a transpose of the last two dims and a product or quotient by a
        scalar lifted through; else a Reshape."""
        shape = shape_of(x)
        if shape[0] == 1:
            return x
        p = x.producer()
        if _std(p, "Reshape"):
            inner = shape_of(p.inputs[0])
            if inner is not None and len(inner) == 4 and inner[1] == self.heads and \
                    same_dim(inner[2], shape[1]) and same_dim(inner[3], shape[2]):
                return p.inputs[0]
        perm = p.attributes.get("perm") if _std(p, "Transpose") else None
        if perm is not None and list(perm.as_ints()) == [0, 2, 1]:
            inner = self.lift(p.inputs[0])
            dims = shape_of(inner)
            return self.node("Transpose", [inner], dims[:2] + [dims[3], dims[2]], x.dtype, perm=[0, 1, 3, 2])
        if _std(p, "Mul", "Div") and _scalar(p.inputs[1]) and len(shape_of(p.inputs[0]) or ()) == 3:
            inner = self.lift(p.inputs[0])
            return self.node(p.op_type, [inner, p.inputs[1]], shape_of(inner), x.dtype)
        return self.node("Reshape", [x, self.target(x, [-1, self.heads], 1)], [self.batch, self.heads, *shape[1:]],
                         x.dtype)

    def term(self, x: ir.Value) -> ir.Value:
        """A term added to the scores: lifted where it is [B * H, M, N], else as it is (it broadcasts alike)."""
        return self.lift(x) if len(shape_of(x) or ()) == 3 else x


def _scores_chain(v: ir.Value, adds: int = 2, scaled: bool = False) -> Optional[list]:
    """The nodes from v up to its MatMul, [Add [Add]] [Mul|Div by a scalar] MatMul, each value rank 3 (an Add's
    other term of rank <= 3), the MatMul's inputs too; or None."""
    p = v.producer()
    if len(shape_of(v) or ()) != 3:
        return None
    if _std(p, "MatMul"):
        return [p] if all(len(shape_of(i) or ()) == 3 for i in p.inputs) else None
    if _std(p, "Mul", "Div") and not scaled:
        for i, c in ((0, 1), (1, 0)) if p.op_type == "Mul" else ((0, 1),):
            if _scalar(p.inputs[c]):
                rest = _scores_chain(p.inputs[i], 0, True)
                if rest is not None:
                    return [p] + rest
    if _std(p, "Add") and adds:
        for i in (0, 1):
            if len(shape_of(p.inputs[1 - i]) or (0, 0, 0, 0)) <= 3:
                rest = _scores_chain(p.inputs[i], adds - 1, scaled)
                if rest is not None:
                    return [p] + rest
    return None


def _unflatten_uses(flat: ir.Value, o4: ir.Value) -> None:
    """Reshape(flat, [B, H, M, D]) where flat = O4 [B, H, M, D] with its first two dims merged: O4 itself."""
    dims = shape_of(o4)
    for node, _ in list(flat.uses()):
        out = shape_of(node.outputs[0]) if _std(node, "Reshape") else None
        if out is not None and len(out) == 4 and out[1] == dims[1] and same_dim(out[2], dims[2]) and \
                same_dim(out[3], dims[3]):
            node.outputs[0].replace_all_uses_with(o4)


def lift_batched_heads(model: ir.Model) -> int:
    """Every Softmax([Where(c, x, y) of] Reshape(S3, [B, H, M, N])) whose S3 is a batched 3-D MatMul's scores
    (_scores_chain, each value read by the next alone, but for shape plumbing that dies with the Reshapes) lifted to
    4-D (module doc), with the MatMul(Reshape(P, [-1, M, N]), V3) reading P when there is one. Returns how many."""
    lifted = 0
    for softmax in [n for n in model.graph if _std(n, "Softmax")]:
        x = softmax.inputs[0]
        if _std(x.producer(), "Where"):
            x = next((i for i in x.producer().inputs[1:] if i is not None and _std(i.producer(), "Reshape")), None)
        r = x.producer() if x is not None else None
        if not _std(r, "Reshape") or len(x.uses()) != 1:
            continue
        y, out4 = r.inputs[0], shape_of(x)
        y3 = shape_of(y)
        if out4 is None or y3 is None or len(out4) != 4 or len(y3) != 3 or not isinstance(out4[1], int) or \
                not (same_dim(out4[2], y3[1]) and same_dim(out4[3], y3[2])):
            continue
        chain = _scores_chain(y)
        if chain is None:
            continue
        # P's side: Reshape(P, [-1, M, N]) read by MatMul(., V3) alone
        p, rp, mm = softmax.outputs[0], None, None
        rps = [u for u, _ in p.uses() if _std(u, "Reshape") and len(shape_of(u.outputs[0]) or ()) == 3]
        if len(rps) == 1 and len(rps[0].outputs[0].uses()) == 1:
            user, index = next(iter(rps[0].outputs[0].uses()))
            if _std(user, "MatMul") and index == 0 and len(shape_of(user.inputs[1]) or ()) == 3:
                rp, mm = rps[0], user
        sinks = {(id(r), 1)} | ({(id(rp), 1)} if rp is not None else set())
        if rp is not None and not _only_use(p, rp, sinks):
            rp = mm = None
            sinks = {(id(r), 1)}
        if not all(_only_use(n.outputs[0], user, sinks) for n, user in zip(chain, [r] + chain[:-1])):
            continue
        lift = _Lift(out4[1], out4[0], f"{softmax.name or 'softmax'}_lifted")
        scores = prev = None
        for node in reversed(chain):
            if node.op_type == "MatMul":
                ins = [lift.lift(i) for i in node.inputs]
            else:  # the chain's value lifted; an Add's other term too, a Mul's or Div's scalar as it is
                ins = [scores if i is prev else lift.term(i) if node.op_type == "Add" else i for i in node.inputs]
            scores = lift.node(node.op_type, ins, out4, node.outputs[0].dtype)
            prev = node.outputs[0]
        model.graph.insert_before(r, lift.nodes)
        x.replace_all_uses_with(scores)
        if mm is not None:
            o3 = mm.outputs[0]
            tail = _Lift(out4[1], out4[0], f"{softmax.name or 'softmax'}_lifted_pv")
            v4 = tail.lift(mm.inputs[1])
            o4 = tail.node("MatMul", [p, v4], out4[:3] + shape_of(v4)[3:], o3.dtype)
            flat = tail.node("Reshape", [o4, tail.target(o4, [-1], 2)], shape_of(o3), o3.dtype)
            ir.convenience.replace_nodes_and_values(model.graph, mm, [rp, mm], tail.nodes, [o3], [flat])
            _unflatten_uses(flat, o4)
        lifted += 1
    if lifted:
        RemoveUnusedNodesPass()(model)
    return lifted
