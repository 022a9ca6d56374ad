"""Synchronous vector copies from global to shared memory made cp.async (the register sketches' resident B).

The register sketches (cuda_registers) copy B into shared memory once a block, before the software-pipelined loop,
so the copy is not one of the pipeline's asynchronous stages: TVM lowers it to plain loads and stores. Vectorized,
that needs an alignment TVM 0.27 cannot prove with the runtime forms' symbolic batch strides, and CodeGenCUDA
writes a gather nvcc rejects (make_uint4 of 8 halves), so the copy would stay one 2-byte load and store an
element: W1's kernel spends ~6 % of its ncu samples there without this pass, and ~3 % of its time.

This pass, in the device pipeline, turns every remaining vector copy

    for ...: S[Ramp(d, 1, L)] = G[Ramp(g, 1, L)]      S shared, G global, L * element bytes in (4, 8, 16)

into cp.async of the same bytes, committed as a group of its own and waited for (wait_group 0) right after the
loop nest, before any barrier or other statement, so every later read sees it exactly as it saw the stores
(ThreadSync has already placed the barriers for them). cp.async makes no alignment check, and needs none beyond
what the vector store already promised: the schedule only vectorizes where the tuning form's static strides make
the address a multiple of the vector, and the runtime forms add only batch offsets (a multiple of the contiguous
inner dims, or 0) to pointers the op checks to be 64-byte aligned (Bundle::Find) -- the same premises under which
the pipelined A copies are cp.async already. A nest whose value is not a plain load (a zero-filled copy) and
anything inside an asynchronous scope is left as it is. Conditions keep their place: inside the nest (the copy
loop's bound where the threads do not divide it) they guard the cp.async as they guarded the store; around it, the
commit and the wait are in the same branch as the copies.

FLASHGEMM_DISABLE_PASSES=make_copies_async turns it off (A/B).
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from flashgemm.codegen.device_pass import each_function

PASS = "make_copies_async"  # its name in cuda_build.PASSES
CP_ASYNC = "tirx.s_tir.cp_async_raw"
_BYTES = (4, 8, 16)
_SHARED = ("shared", "shared.dyn")


def _ramp_base(index):
    """Ramp(b, 1, L) or Ramp(b, 1, L) + Broadcast(c, L) -> (b [+ c], L), else None."""
    offset = 0
    if isinstance(index, tirx.Add) and isinstance(index.b, tirx.Broadcast):
        index, offset = index.a, index.b.value
    if not (isinstance(index, tirx.Ramp) and isinstance(index.stride, tirx.IntImm) and index.stride.value == 1
            and isinstance(index.lanes, tirx.IntImm)):
        return None
    return (index.base + offset if not (isinstance(offset, int) and offset == 0) else index.base), index.lanes.value


def copy_call(store):
    """The cp.async call for a vector global->shared store (module doc), or None where it does not apply."""
    if not (isinstance(store, tirx.BufferStore) and store.buffer.scope() in _SHARED and len(store.indices) == 1):
        return None
    load = store.value
    if not (isinstance(load, tvm.ir.TensorLoad) and load.source.scope() in ("global", "")
            and len(load.indices) == 1 and load.source.dtype == store.buffer.dtype):
        return None
    dst, src = _ramp_base(store.indices[0]), _ramp_base(load.indices[0])
    if dst is None or src is None or dst[1] != src[1]:
        return None
    nbytes = dst[1] * tvm.DataType(store.buffer.dtype).bits // 8
    if nbytes not in _BYTES:
        return None
    return tirx.Evaluate(tirx.call_intrin(store.buffer.dtype, CP_ASYNC, store.buffer.data, dst[0],
                                          load.source.data, src[0], nbytes))


def _nest_store(stmt):
    """A nest of serial loops and else-less conditions around one store -> the store, else None. (A condition there
    is the copy loop's bound where the threads do not divide it: cp.async under it copies what the store copied.)"""
    while isinstance(stmt, (tirx.For, tirx.IfThenElse)):
        if isinstance(stmt, tirx.For):
            if stmt.kind != tirx.ForKind.SERIAL:
                return None
            stmt = stmt.body
        else:
            if stmt.else_case is not None:
                return None
            stmt = stmt.then_case
    return stmt if isinstance(stmt, tirx.BufferStore) else None


def _async(stmt) -> list:
    """The nest with its store made cp.async, committed, then waited for (module doc): two statements."""
    def on_store(s, _mutator):
        return copy_call(s)
    body = tvm_ffi.structural_mutate(stmt, ((tirx.BufferStore, on_store),))
    wait = tirx.AttrStmt(0, "async_wait_queue_scope", 0,
                         tirx.AttrStmt(0, "async_wait_inflight_count", 0, tirx.Evaluate(0)))
    return [tirx.AttrStmt(0, "async_commit_queue_scope", 0, body), wait]


def rewrite(func) -> tuple:
    """(func with its synchronous vector global->shared copies made cp.async, how many nests were rewritten)."""
    count = [0]

    def convertible(s) -> bool:
        store = _nest_store(s)
        return store is not None and copy_call(store) is not None

    def on_seq(seq, mutator):
        out = []
        for s in seq.seq:
            if convertible(s):
                count[0] += 1
                out.extend(_async(s))
            else:
                out.append(mutator.mutate(s))
        return tirx.SeqStmt(out)

    def on_attr(s, mutator):
        if str(s.attr_key).startswith("async_"):  # already asynchronous (the pipelines' stages): not ours
            return s
        return mutator.default_mutate(s)

    body = tvm_ffi.structural_mutate(func.body, ((tirx.SeqStmt, on_seq), (tirx.AttrStmt, on_attr)))
    return (func.with_body(body) if count[0] else func), count[0]


# rewrite() on every device function (module doc); cuda_build.PASSES leaves it out when disabled.
make_copies_async = each_function("flashgemm.AsyncCopies", lambda f: rewrite(f)[0])
