"""Row statistics of a warp allreduce kept in registers: no lane-0 store, barrier and reload a statistic.

The one-pass shared-S form (cuda_space; W2's kernel) reduces each row with TVM's cross-thread allreduce: a warp a
row, the lanes over its columns, warp shuffles. The allreduce already leaves the result in every lane (its last
shuffle broadcasts lane 0's value), but the statistic's buffer is in shared memory, so TVM writes it back from lane
0 only, puts a barrier before that store (the previous row's readers) and one after it, and the whole warp reads it
back, in the next sweep's loop. Two statistics, four barriers a row block, where the data need none.

This pass, run on the scheduled module before TVM's lowering (the "flashgemm" TIR pipeline), moves such a
statistic to "local" scope with the schedule's own set_scope. TVM's cross-thread lowering then writes the result in
every thread of the reduction (its write-back is predicated on lane 0 only for non-local buffers) and the readers
use that register. It is safe only where every thread reads back what its own reduction group computed, so a
statistic moves only when (checked on the block structure, `_movable`):
- one block writes it, a cross-thread reduction whose thread-bound reduction loops are all threadIdx.x, of at most
  a warp's extent, and the written element does not depend on threadIdx.x (every lane of the group writes the same
  element). Why within a warp: over several warps TVM's allreduce leaves its result in a volatile shared word, and
  the readers would load that word at every use (the split-N normalize and the row-vector kernels: per element),
  where today one lane copies it to a plain shared word the compiler may keep in a register;
- every other block that reads it reads one element, at the same index as the writer as a function of the block
  and thread indices (threadIdx.y etc. mean the same warp), with no serial loop in either index (a thread holds one
  element: no per-thread array).
Where a check fails (e.g. the serial max of a kernel with a -inf init: one thread a row, read by a warp) the
statistic stays where the schedule put it.

FLASHGEMM_DISABLE_PASSES=keep_warp_statistics_in_registers turns it off (A/B: benchmarks/shipped_forms_ab.py
--shared-warp-statistics).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from flashgemm.codegen.device_pass import each_function
from flashgemm.codegen.tir.keep_exp_in_accumulator import substitute, uses_var
from flashgemm.codegen.tir.move_statistics_to_static_shared import STAT_PREFIXES

PASS = "keep_warp_statistics_in_registers"  # its name in cuda_build.PASSES
SHARED_SCOPES = ("shared", "shared.dyn")
REDUCE_THREAD = "threadIdx.x"
WARP_EXTENTS = (2, 4, 8, 16, 32)  # a reduction within one warp: TVM's shuffle allreduce, the result in a register


class _Site:
    """A block realize with the loops around it; `index` canonicalizes an access of it (module doc)."""

    def __init__(self, realize, loops, tags):
        self.realize, self.block = realize, realize.block
        values, self.serial, self.extents = {}, [], {}
        for loop in loops:
            tag = loop.thread_binding.thread_tag if loop.thread_binding is not None else None
            if tag is not None:
                values[loop.loop_var] = tags.setdefault(tag, tirx.Var(tag, "int32"))
                self.extents[tag] = loop.extent
            elif isinstance(loop.extent, tirx.IntImm) and int(loop.extent) == 1:
                values[loop.loop_var] = loop.min
            else:
                self.serial.append(loop.loop_var)
        self.iters = {iv.var: substitute(v, values) for iv, v in zip(self.block.iter_vars, realize.iter_values)}
        self.loops, self.tags = loops, tags  # tags: thread tag -> its canonical Var, shared by all sites

    def index(self, region):
        """The element a one-element region names, in canonical block/thread variables; None if it is not one
        element or depends on a serial loop."""
        out = []
        for rng in region.region:
            if not (isinstance(rng.extent, tirx.IntImm) and int(rng.extent) == 1):
                return None
            e = substitute(rng.min, self.iters)
            if any(uses_var(e, v) for v in self.serial):
                return None
            out.append(e)
        return out

    def thread_extent(self, tag: str):
        """The extent of the loop bound to `tag` around this block, or None."""
        for loop in self.loops:
            if loop.thread_binding is not None and loop.thread_binding.thread_tag == tag:
                return int(loop.extent) if isinstance(loop.extent, tirx.IntImm) else None
        return None

    def reduce_thread_tags(self) -> set:
        """Thread tags of the loops this block reduces over (its CommReduce iterators' bindings)."""
        tags = set()
        for iv, value in zip(self.block.iter_vars, self.realize.iter_values):
            if int(iv.iter_type) != tirx.IterVar.CommReduce:
                continue
            for loop in self.loops:
                if loop.thread_binding is not None and uses_var(value, loop.loop_var):
                    tags.add(loop.thread_binding.thread_tag)
        return tags


def _sites(func: tvm.tirx.PrimFunc) -> list:
    """Every block realize of func (root excluded) with its enclosing loops."""
    out, tags = [], {}

    def visit(stmt, loops):
        if isinstance(stmt, tirx.For):
            visit(stmt.body, loops + [stmt])
        elif isinstance(stmt, tvm.s_tir.SBlockRealize):
            out.append(_Site(stmt, loops, tags))
            visit(stmt.block.body, loops)
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, loops)
        elif isinstance(stmt, tirx.IfThenElse):
            visit(stmt.then_case, loops)
            if stmt.else_case is not None:
                visit(stmt.else_case, loops)
        elif hasattr(stmt, "body"):
            visit(stmt.body, loops)
    visit(func.body.block.body, [])
    return out


def _same(a: list, b: list, analyzer) -> bool:
    return len(a) == len(b) and all(analyzer.can_prove_equal(x, y) for x, y in zip(a, b))


def _movable(sites: list, writer: _Site, buf) -> bool:
    """Whether the statistic `buf`, written by `writer`, can live in registers (module doc)."""
    if writer.reduce_thread_tags() != {REDUCE_THREAD} or writer.thread_extent(REDUCE_THREAD) not in WARP_EXTENTS:
        return False
    w_region = next(r for r in writer.block.writes if r.source.same_as(buf))
    w_idx = writer.index(w_region)
    lane = writer.tags.get(REDUCE_THREAD)
    if w_idx is None or any(uses_var(e, lane) for e in w_idx):
        return False
    for site in sites:
        if site is writer:
            continue
        analyzer = tvm.sym.analyzer.Analyzer()  # the thread indices' ranges, as both blocks launch them
        for tag, extent in {**writer.extents, **site.extents}.items():
            analyzer.bind(writer.tags[tag], tvm.ir.Range.from_min_extent(0, extent))
        if any(r.source.same_as(buf) for r in site.block.writes):
            return False  # a second writer
        for r in site.block.reads:
            if r.source.same_as(buf):
                r_idx = site.index(r)
                if r_idx is None or not _same(r_idx, w_idx, analyzer):
                    return False
    return True


def statistics_to_move(func: tvm.tirx.PrimFunc) -> list:
    """(block name, write index, buffer) of the statistics that move() would put in registers."""
    sites = _sites(func)
    out = []
    for site in sites:
        for idx, region in enumerate(site.block.writes):
            buf = region.source
            if buf.scope() in SHARED_SCOPES and buf.name.startswith(STAT_PREFIXES) and _movable(sites, site, buf):
                out.append((site.block.name_hint, idx, buf))
    return out


def move(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """func with its warp-allreduce statistics in registers (module doc); func itself when it has none."""
    targets = statistics_to_move(func)
    if not targets:
        return func
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    # blocks by traversal, not by name (names need not be unique); match the writer by the buffer it writes
    pending, found = [sch.get_sblock("root")], []
    while pending:
        blk = pending.pop()
        for name, idx, buf in targets:
            w = sch.get(blk).writes
            if idx < len(w) and w[idx].source.same_as(buf):
                found.append((blk, idx))
        pending += sch.get_child_blocks(blk)
    for blk, idx in found:
        sch.set_scope(blk, idx, "local")
    return sch.mod["main"]


# move() on every scheduled function (module doc); cuda_build.PASSES leaves it out when disabled.
warp_statistics_in_registers = each_function("flashgemm.WarpStatisticsInRegisters", move)
