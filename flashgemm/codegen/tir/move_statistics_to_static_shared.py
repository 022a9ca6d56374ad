"""Row statistics in static shared memory, so that TVM's barrier planner sees them as buffers of their own.

The fused kernels keep their small softmax statistics (row max and row sum, and the per-warp partials that the
register and recompute forms combine) in shared memory, in the same "shared.dyn" scope as their big buffers (A, B,
S). TVM's ThreadSync("shared.dyn") plans barriers before MergeSharedMemoryAllocations, but it treats every dynamic
shared buffer of a kernel as one (they are to be merged into one allocation). So a loop that reads the row max and
writes the row sum's partials, two buffers, looked like a read and a write of the same memory by different threads:
it got a __syncthreads at its top and another before its store, each iteration. W1's register kernel had 19
barriers in its source (16 a row tile) where the data dependences need 10.

This pass, run on the scheduled module before TVM's lowering, moves the buffers of the statistics (those named
row_max* / row_sum* in "shared.dyn") to static "shared" scope with the schedule's own set_scope. ThreadSync("shared")
tells buffers apart, so it keeps only the barriers the dependences need; the values, the indexing and the order of
the computation do not change. Static shared memory is not merged with liveness-based reuse, so a kernel may take a
little more shared memory (W1: 8.4 KB of partials), and static memory counts against the 48 KB a kernel gets
without opting in to more. A kernel that would then not launch (launchable) is compiled without the move:
check_shared_memory, at the end of the device pipeline, raises, and cuda_build.compile_cuda compiles it again.

Kernels that reduce across threads and kernels that compute S more than once keep their statistics dynamic (move).

W1's shipped kernels gain about 1.5 % from it (H100, both dtypes), so W1 is not bound by its barriers' count (its
barrier stalls may be the waits for warp 0's combine of the partials: not measured). W3's recompute kernels are 3-4 %
slower with the move, so the recompute forms are left out.

FLASHGEMM_DISABLE_PASSES=move_statistics_to_static_shared turns it off (A/B: benchmarks/shipped_forms_ab.py
--dynamic-statistics).
"""
from __future__ import annotations

import contextlib
import contextvars

import tvm
import tvm_ffi
from tvm import tirx

from flashgemm import targets
from flashgemm.codegen.device_pass import each_function
from flashgemm.codegen.tir.keep_exp_in_accumulator import uses_var

STAT_PREFIXES = ("row_max", "row_sum")
DYNAMIC, STATIC = "shared.dyn", "shared"
PASS = "move_statistics_to_static_shared"  # its name in cuda_build.PASSES


def _writes_statistic(block) -> list:
    """Write indices of this block's statistics buffers in dynamic shared memory."""
    return [idx for idx, region in enumerate(block.writes)
            if region.source.scope() == DYNAMIC and region.source.name.startswith(STAT_PREFIXES)]


def has_cross_thread_reduction(func: tvm.tirx.PrimFunc) -> bool:
    """Whether a block of func reduces across threads (a reduction iterator bound to a thread loop): TVM's
    allreduce, whose result one lane writes and the whole warp reads back at the same index."""
    found = [False]

    def thread_loop(loop):
        if loop.thread_binding is None:
            return

        def realize(r):
            if any(int(iv.iter_type) == tirx.IterVar.CommReduce and uses_var(value, loop.loop_var)
                   for iv, value in zip(r.block.iter_vars, r.iter_values)):
                found[0] = True
        tvm_ffi.structural_walk(loop.body, ((tvm.s_tir.SBlockRealize, realize),))
    tvm_ffi.structural_walk(func.body, ((tirx.For, thread_loop),))
    return found[0]


def move(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """func with its statistics buffers in static shared memory (module doc); func itself when it has none, when it
    reduces across threads, or when it computes S more than once (several mma accumulators: the recompute forms).
    Why not across threads: ThreadSync takes two accesses at structurally equal indices for one thread's, so the
    barrier between an allreduce's store (lane 0 only) and the warp's loads of it would go. In dynamic shared memory
    its conservatism keeps that barrier (the one-pass shared-S form: W2). Why not the recompute forms: measured
    slower with the move (W3, module doc), for a reason not found."""
    from flashgemm.codegen.cuda_build import warp_accumulators  # noqa: PLC0415  (cuda_build runs this pass)
    if has_cross_thread_reduction(func) or len(warp_accumulators(tvm.IRModule({"main": func}))) > 1:
        return func
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    # blocks by traversal, not by name: cache_write's write-back blocks share names
    pending, writers = [sch.get_sblock("root")], []
    while pending:
        blk = pending.pop()
        writers += [(blk, idx) for idx in _writes_statistic(sch.get(blk))]
        pending += sch.get_child_blocks(blk)
    if not writers:
        return func
    for blk, idx in writers:
        sch.set_scope(blk, idx, STATIC)
    return sch.mod["main"]


_OFF = contextvars.ContextVar("flashgemm_static_statistics_off", default=False)


@contextlib.contextmanager
def left_dynamic():
    """Compile with the statistics left in dynamic shared memory (cuda_build's retry when static memory overflows)."""
    token = _OFF.set(True)
    try:
        yield
    finally:
        _OFF.reset(token)


STATIC_LIMIT = 48 * 1024  # bytes of static shared memory a kernel may have (CUDA)
OVERFLOW = "statistics overflow shared memory"  # the message check_shared_memory raises with


def shared_bytes(func: tvm.tirx.PrimFunc) -> tuple:
    """(static, dynamic) bytes of shared memory a lowered device function allocates; (0, 0) parts that are not
    constant."""
    sizes = {STATIC: 0, DYNAMIC: 0}

    def alloc(node):
        buf = node.buffer
        if buf.scope() in sizes and all(isinstance(x, tirx.IntImm) for x in buf.shape):
            dtype = tvm.DataType(str(buf.dtype))
            count = 1
            for x in buf.shape:
                count *= int(x)
            sizes[buf.scope()] += count * dtype.bits * dtype.lanes // 8
    tvm_ffi.structural_walk(func.body, ((tirx.AllocBuffer, alloc),))
    return sizes[STATIC], sizes[DYNAMIC]


def _moved(func: tvm.tirx.PrimFunc) -> bool:
    """Whether a lowered function has statistics this pass moved: set_scope names the new buffer after the old one
    and its scope ("row_max_shared.dyn" -> "row_max_shared.dyn_shared", then "row_max_shared_dyn_shared"), so the
    name keeps the dynamic origin. Statistics a schedule put in static memory itself (the row-vector and split-N
    forms) are not the pass's to check."""
    found = [False]

    def alloc(node):
        name = node.buffer.name
        if node.buffer.scope() == STATIC and name.startswith(STAT_PREFIXES) and "dyn" in name:
            found[0] = True
    tvm_ffi.structural_walk(func.body, ((tirx.AllocBuffer, alloc),))
    return found[0]


DRIVER_RESERVED = 1024  # bytes of a block's shared memory the driver keeps (not in the opt-in limit's reach)


def launchable(static: int, dynamic: int, limit) -> bool:
    """Whether a block with this much static and dynamic shared memory launches under TVM's CUDA runtime. A kernel's
    dynamic shared memory may by default be 48 KB less its static memory; TVM's runtime raises that limit (the
    opt-in, up to `limit` in all) only for kernels whose dynamic part alone passes 48 KB. So below that, static +
    dynamic must fit 48 KB (a W1-like candidate with 45 KB dynamic and 9 KB static failed to launch:
    CUDA_ERROR_INVALID_VALUE), above it the arch's limit, less what the driver reserves (limit None: unknown arch,
    not checked)."""
    if static > STATIC_LIMIT:
        return False
    if dynamic <= STATIC_LIMIT:
        return static + dynamic <= STATIC_LIMIT
    return limit is None or static + dynamic <= limit - DRIVER_RESERVED


@tvm.transform.module_pass(opt_level=0, name="flashgemm.CheckStatisticsSharedMemory")
def check_shared_memory(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Raise (OVERFLOW) when a device function whose statistics were moved would not launch (launchable): static
    memory is not reused by liveness the way the merged dynamic buffer is, and it counts against the 48 KB a kernel
    gets without opting in, so the move can push a kernel over a limit. cuda_build.compile_cuda then compiles it
    again with the statistics left dynamic."""
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or not _moved(func):
            continue
        static, dynamic = shared_bytes(func)
        target = func.attrs.get("target") if func.attrs is not None else None
        arch = str(target.attrs.get("arch", "")) if target is not None else ""
        limit = targets.SMEM_LIMIT.get(arch[:-1] if arch.endswith("a") else arch)  # sm_90a: the wgmma kernels' build
        if not launchable(static, dynamic, limit):
            raise ValueError(f"{OVERFLOW}: {gv.name_hint} would take {static} bytes of static and {dynamic} of dynamic "
                             f"shared memory (launchable: 48 KB in all below 48 KB dynamic, else {limit} less "
                             f"{DRIVER_RESERVED} reserved)")
    return mod


def overflows_static(err: Exception) -> bool:
    """Whether a compile error is check_shared_memory's, or ptxas refusing a kernel's static shared memory."""
    return OVERFLOW in str(err) or "too much shared data" in str(err)


# move() on every scheduled function (module doc); cuda_build.PASSES leaves it out when disabled, and it does
# nothing while left_dynamic() is in force.
statistics_in_static_shared = each_function("flashgemm.StatisticsInStaticShared", move,
                                            enabled=lambda: not _OFF.get())
