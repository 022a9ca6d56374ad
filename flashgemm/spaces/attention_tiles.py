"""FusedAttention's tensor-core tiles as a Meta-Schedule space.

FusedAttention's tensor-core kernels (flashgemm/kernel/fused_attention_mma.py, fused_attention_wgmma.py) are
written in TensorIR with their thread bindings: what is left to search is the tile, a handful of knobs
(warpgroups or warps, rows a warp, chunk columns, pipeline depth) that change the kernel's structure, not a
schedule of one computation. So the space is one categorical draw:

    workload  the generic definition (flashgemm/kernel/fused_attention.py) at one shape, every buffer concrete,
              scale a constant and zero_nan_rows 0 (Meta-Schedule's arguments are buffers only)
    sketch    SampleCategorical over the target's tiles for the head size, annotated on block "S" (TILE_KEY);
              the tile list itself rides along as TILES_KEY, so a record names its kernel on its own
    builder   f_build: the annotated tile's kernel as shipped (shapes symbolic; scale and zero_nan_rows the
              workload's constants), through compile_cuda
              (flashgemm-tune's CUDA builder, cuda_space.f_build, hands such candidates here)

`flashgemm-tune --attention` (or attention=1 in a spec) tunes a workload so, into its own database
(<name>.attention.<dtype>); flashgemm-build --attention ships each one's fastest tile for the lengths up to its N
(flashgemm/bundle/attention_best.py).

Records, databases, the evolutionary search (MutateCategorical moves the draw; the XGBoost model ranks the
candidates by the workload's features, the same for every tile, so in effect the search measures the tiles in
turn and stops when the space is spent) and the RPC runner are those of FusedGemmSoftmax's tuning.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Optional

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from flashgemm import targets
from flashgemm.kernel import fused_attention, fused_attention_mma, fused_attention_wgmma
from flashgemm.op.variant import Variant

TILE_KEY = "flashgemm.attention_tile"  # the draw: an index into TILES_KEY's list
TILES_KEY = "flashgemm.attention_tiles"  # the candidate tiles, JSON
ATTRS_KEY = "flashgemm.attention"  # on the workload's function: variant, head size, scale (JSON)
BLOCK = "S"  # the definition's block that carries the annotations
# the grids searched (the shipped TILES of each kernel are points of them)
WGMMA_GRID = [(wg, bn, stages) for wg in (1, 2) for bn in (64, 128) for stages in (2, 3)]
MMA_GRID = [(warps, mt, bn, stages) for warps in (4, 8) for mt in (1, 2) for bn in (32, 64) for stages in (2, 3)]


@dataclass(frozen=True)
class Shape:
    """One attention call: B0 x B1 heads, M queries, N keys, head size D (Q and K's K = V's D)."""
    b0: int
    b1: int
    m: int
    n: int
    d: int


@dataclass(frozen=True)
class Tile:
    form: str  # "wgmma" (sm_90) | "mma"
    params: tuple  # wgmma: (warpgroups, chunk columns, stages); mma: (warps, 16-row tiles a warp, columns, stages)

    def kernel(self, variant: Variant, d: int, name: str = "main") -> tvm.tirx.PrimFunc:
        if self.form == "wgmma":
            func = fused_attention_wgmma.runtime_func(variant, d, *self.params, name=name)
            if self.params[0] > 1 and (variant.has_bias or variant.mask != "none"):
                # two blocks of two warpgroups an SM: at most 128 registers a thread (uncapped, ptxas gives a bias's or
                # mask's logits 126-138); capped, those kernels measured 0.44-0.97x their time, the others up to
                # 1.10x, so they keep their launch bounds (BENCHMARKS.md)
                from flashgemm.codegen.cuda_build import MAX_REGISTERS_ATTR  # noqa: PLC0415  (CUDA only)
                func = func.with_attr(MAX_REGISTERS_ATTR, 65536 // (2 * 128 * self.params[0]) // 8 * 8)
            return func
        return fused_attention_mma.runtime_func(variant, d, *self.params, name=name)

    def to_json(self) -> list:
        return [self.form, list(self.params)]

    @staticmethod
    def from_json(x) -> "Tile":
        return Tile(x[0], tuple(int(v) for v in x[1]))


def shared_bytes(func: tvm.tirx.PrimFunc) -> int:
    """Dynamic shared memory a kernel allocates (its `shared.dyn` buffers), in bytes: the most a call can take (a
    staged pool's size depends on the call)."""
    total = []
    bound = tvm.sym.analyzer.Analyzer().const_int_bound

    def visit(block):
        for buf in block.alloc_buffers:
            if buf.scope() == "shared.dyn":
                n = 1
                for extent in buf.shape:
                    n *= bound(extent).max_value
                total.append(n * tvm.runtime.DataType(buf.dtype).bits // 8)
    tvm_ffi.structural_walk(func.body, ((tvm.s_tir.SBlock, visit),))
    return sum(total)


@functools.lru_cache(maxsize=None)  # (each tile's kernel is built to be checked: a fraction of a second each)
def tiles(target_name: str, variant: Variant, d: int) -> list:
    """The tiles searched for head size `d` on a CUDA target: the wgmma grid on sm_90 where the head size has the
    wgmma kernel, else the mma.sync grid; each one that the kernel accepts and whose shared memory fits."""
    target_name = targets.resolve(target_name)
    if not targets.is_cuda(target_name):
        raise ValueError(f"FusedAttention's tiles are for CUDA targets, not {target_name}")
    if target_name == "sm_90" and d in fused_attention_wgmma.HEAD_SIZES:
        grid = [Tile("wgmma", p) for p in WGMMA_GRID]
    else:
        grid = [Tile("mma", p) for p in MMA_GRID]
    out = []
    for tile in grid:
        try:
            func = tile.kernel(variant, d)
        except ValueError:  # a tile the kernel does not take (uneven copies, ...)
            continue
        if shared_bytes(func) <= targets.SMEM_LIMIT[target_name]:
            out.append(tile)
    if not out:
        raise ValueError(f"no FusedAttention tile for head size {d} on {target_name}")
    return out


def concrete(func: tvm.tirx.PrimFunc, variant: Variant, shape: Shape, scale: float,
             buffers: bool = True) -> tvm.tirx.PrimFunc:
    """`func` (a FusedAttention kernel or the definition: fn(Q, K, V, [bias], [mask], O, scale, zero_nan_rows))
    with scale a constant and zero_nan_rows 0, and (buffers) at `shape`: every buffer compact (bias and mask full
    [B0, B1, M, N])."""
    s = shape
    k_shape = (s.b0, s.b1, s.n, s.d) if variant.trans_b else (s.b0, s.b1, s.d, s.n)
    shapes = {"Q": (s.b0, s.b1, s.m, s.d), "Km": k_shape, "V": (s.b0, s.b1, s.n, s.d),
              "Bias": (s.b0, s.b1, s.m, s.n), "Mask": (s.b0, s.b1, s.m, s.n), "O": (s.b0, s.b1, s.m, s.d)}
    pmap = {}
    for p in func.params:
        if p.name in shapes and not buffers:
            continue
        if p.name in shapes:
            dims = shapes[p.name]
            strides = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1] if len(p.strides) else None
            pmap[p] = tvm.tirx.decl_buffer(dims, p.dtype, name=p.name, strides=strides,
                                           data_alignment=p.data_alignment, offset_factor=p.offset_factor,
                                           elem_offset=p.elem_offset)
        elif p.name == "scale":
            pmap[p] = tvm.tirx.FloatImm("float32", float(scale))
        elif p.name == "zero_nan_rows":
            pmap[p] = tvm.tirx.IntImm("int32", 0)
        else:
            raise ValueError(f"unexpected parameter {p.name} of a FusedAttention kernel")
    return func.specialize(pmap)


def workload_module(variant: Variant, shape: Shape, scale: float) -> tvm.IRModule:
    """The module a FusedAttention workload is tuned as (module doc); its function carries ATTRS_KEY."""
    func = concrete(fused_attention.runtime_func(variant), variant, shape, scale)
    attrs = {"variant": [variant.dtype, variant.trans_b, variant.has_bias, variant.mask, variant.causal],
             "shape": [shape.b0, shape.b1, shape.m, shape.n, shape.d], "scale": float(scale)}
    return tvm.IRModule({"main": func.with_attr(ATTRS_KEY, json.dumps(attrs))})


def is_workload(mod: tvm.IRModule) -> bool:
    """Whether `mod` is a FusedAttention workload (or a candidate of one): its function carries ATTRS_KEY."""
    func = mod["main"] if "main" in [g.name_hint for g in mod.get_global_vars()] else None
    return func is not None and func.attrs is not None and ATTRS_KEY in func.attrs


def _attrs(mod: tvm.IRModule) -> tuple:
    a = json.loads(str(mod["main"].attrs[ATTRS_KEY]))
    return Variant(*a["variant"]), Shape(*a["shape"]), a["scale"]


def design_space(target_name: str) -> ms.space_generator.SpaceGenerator:
    """One sketch: the tile drawn from tiles() for the workload's variant and head size (module doc)."""
    from flashgemm.spaces.mutate_categorical import MutateCategorical  # noqa: PLC0415

    def space(sch: tvm.s_tir.Schedule):
        variant, shape, _ = _attrs(sch.mod)
        options = tiles(target_name, variant, shape.d)
        block = sch.get_sblock(BLOCK)
        draw = sch.sample_categorical(candidates=list(range(len(options))), probs=[1.0 / len(options)] * len(options))
        sch.annotate(block, TILES_KEY, json.dumps([t.to_json() for t in options]))
        sch.annotate(block, TILE_KEY, draw)
        return [sch]

    return ms.space_generator.ScheduleFn(space, sch_rules=[], postprocs=[], mutator_probs={MutateCategorical(): 1.0})


def tile_of(mod: tvm.IRModule) -> Optional[Tile]:
    """The tile a candidate (or a record's trace applied to the workload) drew; None on the bare workload."""
    found = {}

    def visit(block):
        if TILE_KEY in block.annotations:
            found["tile"] = Tile.from_json(json.loads(str(block.annotations[TILES_KEY]))[
                int(block.annotations[TILE_KEY])])
    tvm_ffi.structural_walk(mod["main"].body, ((tvm.s_tir.SBlock, visit),))
    return found.get("tile")


def candidate_kernel(mod: tvm.IRModule, name: str = "main") -> tvm.tirx.PrimFunc:
    """The kernel a candidate stands for: the tile's kernel as the bundle ships it (any batch and length, free
    strides), with the workload's scale and zero_nan_rows 0 (the runner passes buffers only: the workload's, which
    its symbolic shapes take). Not at the workload's shape: static shapes and strides change the compiled code
    enough to reorder the tiles (the causal prefill: (1, 64, 2) at 432 us static, 502 us as shipped, against
    504 / 450 us for (2, 64, 2)), so a tile is timed as it will run."""
    variant, shape, scale = _attrs(mod)
    tile = tile_of(mod)
    if tile is None:
        raise ValueError("the module draws no FusedAttention tile (not a candidate of attention_tiles' space)")
    return concrete(tile.kernel(variant, shape.d, name=name), variant, shape, scale, buffers=False)


def f_build(mod, target, _params=None):
    """Meta-Schedule f_build for the space's candidates: the drawn tile's kernel through compile_cuda."""
    from flashgemm.codegen.cuda_build import compile_cuda  # noqa: PLC0415
    return compile_cuda(tvm.IRModule({"main": candidate_kernel(mod)}), target).mod
