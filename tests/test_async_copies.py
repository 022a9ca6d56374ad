"""schedules.async_copies (vector global->shared copies made cp.async) and cuda_registers.vectorized_b_fetch (old
register-sketch records re-expressed with their resident B copy vectorized): lowered TIR, the CUDA source of the
W1 records as tuned and as shipped; on the GPU, the re-expressed W1 kernels against the committed ones and FP64."""
import re

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

from schedules import async_copies, cuda_build, cuda_registers, targets


def _copy(lanes: int = 8, src_scope: str = "global", guarded: bool = False, in_async: bool = False,
          zero_filled: bool = False):
    """A device function whose 32 threads copy 1024 elements of A into shared memory, `lanes` a store."""
    @T.prim_func
    def f(a: T.handle("float16", "global")):
        A = T.decl_buffer((1024,), "float16", data=a)
        tx = T.launch_thread("threadIdx.x", 32)
        S = T.alloc_buffer((1024,), "float16", scope="shared.dyn")
        for i in range(4):
            S[T.Ramp(i * 256 + tx * 8, 1, 8)] = A[T.Ramp(i * 256 + tx * 8, 1, 8)]
        T.tvm_storage_sync("shared")
    if lanes == 8 and src_scope == "global" and not guarded and not in_async and not zero_filled:
        return f

    def on_store(s, _mutator):
        base = s.indices[0].base
        idx = tirx.Ramp(base, 1, lanes) if lanes > 1 else base
        src = s.value.source
        if src_scope != "global":
            src = tirx.decl_buffer((1024,), "float16", name="L", scope=src_scope)
        value = tirx.BufferLoad(src, [idx])
        if zero_filled:
            value = tirx.if_then_else(tirx.Broadcast(base < 1000, lanes), value, tirx.Broadcast(
                tirx.FloatImm("float16", 0.0), lanes))
        st = tirx.BufferStore(s.buffer, value, [idx])
        return tirx.IfThenElse(base < 1000, st, None) if guarded else st

    def on_for(s, mutator):
        s = mutator.default_mutate(s)
        return tirx.AttrStmt(0, "async_commit_queue_scope", 0, s) if in_async else s
    return f.with_body(tvm_ffi.structural_mutate(f.body, ((tirx.BufferStore, on_store), (tirx.For, on_for))))


def _calls(func, name: str) -> list:
    out = []
    tvm_ffi.structural_walk(func.body, ((tvm.ir.Call, lambda c: out.append(c) if str(c.op.name) == name else None),))
    return out


def test_a_vector_copy_becomes_cp_async_then_a_wait():
    func, count = async_copies.rewrite(_copy())
    assert count == 1
    (call,) = _calls(func, async_copies.CP_ASYNC)
    assert int(call.args[4]) == 16
    seq = []
    tvm_ffi.structural_walk(func.body, ((tirx.SeqStmt, seq.append),))
    (body,) = [q for q in seq if any(getattr(x, "attr_key", "") == "async_commit_queue_scope" for x in q.seq)]
    at = [getattr(x, "attr_key", "") for x in body.seq].index("async_commit_queue_scope")
    commit, wait, sync = body.seq[at:]
    assert commit.attr_key == "async_commit_queue_scope" and isinstance(commit.body, tirx.For)
    assert wait.attr_key == "async_wait_queue_scope" and wait.body.attr_key == "async_wait_inflight_count"
    assert int(wait.body.value) == 0  # every copy landed before the barrier that follows
    assert isinstance(sync, tirx.Evaluate)


@pytest.mark.parametrize("lanes, bytes_", [(4, 8), (2, 4)])
def test_narrower_vectors_too(lanes, bytes_):
    func, count = async_copies.rewrite(_copy(lanes=lanes))
    assert count == 1 and [int(c.args[4]) for c in _calls(func, async_copies.CP_ASYNC)] == [bytes_]


def test_a_guarded_copy_keeps_its_guard():
    # the copy loop's bound where the threads do not divide it (a sampled causal M > N kernel had one)
    func, count = async_copies.rewrite(_copy(guarded=True))
    assert count == 1
    ifs = []
    tvm_ffi.structural_walk(func.body, ((tirx.IfThenElse, ifs.append),))
    (guard,) = ifs
    assert isinstance(guard.then_case, tirx.Evaluate) and str(guard.then_case.value.op.name) == async_copies.CP_ASYNC


@pytest.mark.parametrize("case", ["scalar", "shared-source", "zero-filled", "already-async"])
def test_copies_it_leaves_alone(case):
    func = {"scalar": lambda: _copy(lanes=1), "shared-source": lambda: _copy(src_scope="shared"),
            "zero-filled": lambda: _copy(zero_filled=True), "already-async": lambda: _copy(in_async=True)}[case]()
    out, count = async_copies.rewrite(func)
    assert count == 0 and out.same_as(func)


def test_the_switch_turns_it_off(monkeypatch):
    mod = tvm.IRModule({"main_kernel": _copy()})
    assert not async_copies.async_copies(mod).same_as(mod)
    monkeypatch.setenv(async_copies.SWITCH, "1")
    assert async_copies.async_copies(mod).same_as(mod)


# ---- the W1 records: re-expressed with a vectorized B copy, compiled as tuned and as shipped

def _reexpressed(db: str):
    """(workload, the committed best record, its re-expressed schedule on the tuning form, postprocessed)."""
    from tests.compile_worker import best_record_module  # noqa: F401  (registers the intrinsics as it does)
    from tuning_db import best
    from tuning_db.tuner import design_space, form_of, tuning_modules
    from tvm.s_tir import meta_schedule as ms
    from pathlib import Path
    from tuning_db import database as dbm
    targets.register_intrinsics("sm_90")
    wl_dir = Path(__file__).resolve().parents[1] / "tuning_db" / "sm_90" / db
    wl = best._workload_of(wl_dir, dbm.read_provenance(wl_dir))
    modules = tuning_modules(wl, "sm_90")
    rec = dbm.top_records([m for _, m in modules], [dbm.open_json_db(wl_dir)], 1)[0]
    mod = dict((f.name, m) for f, m in modules)[form_of(rec, modules).name]
    trace = cuda_registers.vectorized_b_fetch(rec.trace)
    assert trace is not None
    sch = tvm.s_tir.Schedule(mod)
    tvm.s_tir.schedule.Trace.apply_json_to_schedule(trace, sch)
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target("sm_90"), task_name="main",
                         space_generator=design_space("sm_90"))
    assert all(p.apply(sch) for p in ctx.space_generator.postprocs)
    return wl, rec, sch


def _twin(wl, trace):
    from tuning_db import best
    from tuning_db.tuner import forms
    return best.on_runtime_func(trace, wl, "sm_90", forms(wl, "sm_90")[0], True, (0, 1))


_B_CP_ASYNC = re.compile(r"ptx_cp_async\w*\(buf_dyn_shmem_ptr, [^;]*, Bm_ptr, ")
_WAIT_ALL = "ptx_cp_async_wait_group_async_wait_group_0();"


@pytest.mark.parametrize("db", ["bert-large.f16", "bert-large.bf16"])
def test_w1_records_reexpressed_copy_b_by_cp_async_as_tuned_and_as_shipped(db):
    wl, rec, sch = _reexpressed(db)
    assert cuda_registers.vectorized_b_fetch(sch.trace) is None  # already vectorized: nothing more to re-express
    for mod in (sch.mod, _twin(wl, sch.trace).mod):
        src = cuda_build.compile_cuda(mod, targets.tvm_target("sm_90")).mod.imports[0].inspect_source("cuda")
        kernel = src[src.index("__global__"):]
        assert "Bm_ptr[" not in kernel  # no scalar copy of B left
        first = _B_CP_ASYNC.search(kernel)
        assert first, "B is not copied by cp.async"
        after = kernel[first.end():]
        # the loop's commit and its wait for every group come before the next barrier or anything else
        assert after.index("commit_group();") < after.index(_WAIT_ALL) < after.index("__syncthreads()")
    # the committed record itself still replays as it was tuned (its B copy scalar)
    src = cuda_build.compile_cuda(_twin(wl, rec.trace).mod, targets.tvm_target("sm_90")).mod.imports[0] \
        .inspect_source("cuda")
    assert "Bm_ptr[" in src


def test_only_scalar_resident_b_records_are_reexpressed():
    from pathlib import Path
    from tuning_db import database as dbm
    root = Path(__file__).resolve().parents[1] / "tuning_db" / "sm_90"
    for db, expected in (("whisper-enc.f16", False), ("vit-b16.f16", False), ("bert-large.f16", True)):
        recs = dbm.open_json_db(root / db).get_all_tuning_records()
        best = min(recs, key=lambda r: dbm.mean_secs(r) or float("inf"))
        assert (cuda_registers.vectorized_b_fetch(best.trace) is not None) == expected, db


@pytest.mark.gpu
@pytest.mark.parametrize("db", ["bert-large.f16", "bert-large.bf16"])
def test_w1_reexpressed_kernels_give_the_committed_kernels_p(db):
    """The twin of W1's best record and of its re-expression (B copied by cp.async) on the same inputs: the same P,
    bit for bit (only how B reaches shared memory differs), and within tolerance of FP64."""
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    wl, rec, sch = _reexpressed(db)
    dtype = "float16" if db.endswith("f16") else "bfloat16"
    c = g._case(dtype, 1, 4, 512, 512, 64, scale=0.125)
    shape = g._canon(c)
    out = [g._run(cuda_build.compile_cuda(_twin(wl, t).mod, targets.tvm_target(g.ARCH)), dtype, c, shape)
           for t in (rec.trace, sch.trace)]
    g._check(out[1], c, dtype)
    assert np.array_equal(out[0], out[1])


def test_migrating_w1_records_measures_each_once_with_b_vectorized(tmp_path, stand_in_measurement):
    """tune(migrate_records=N) (tuning_db.tuner._migrate) on W1's committed database: its best N records (register
    sketches, B copied a scalar at a time) re-expressed with the copy 8 wide, each measured (a stand-in runner here)
    and committed to the work database, once a work directory."""
    from pathlib import Path
    from tir_kernels.workloads import parse
    from tuning_db import database as dbm
    from tuning_db import tuner
    targets.register_intrinsics("sm_90")
    wl = parse("bert-large")
    committed = dbm.open_json_db(Path(__file__).resolve().parents[1] / "tuning_db" / "sm_90" / "bert-large.f16")
    work = tmp_path / "work"
    n, valid = tuner._migrate(wl, "sm_90", work, [committed], 3, 2, print)
    assert n == valid == len(stand_in_measurement) == 3
    for rec in dbm.open_json_db(work).get_all_tuning_records():
        insts, decisions = rec.trace.as_json()
        (at,) = [i for i, inst in enumerate(insts) if inst[0] == "SampleCategorical"
                 and [int(c) for c in inst[2][0]] == list(cuda_registers.B_FETCH_WIDTHS)]
        assert dict((i, d) for i, d in decisions)[at] == len(cuda_registers.B_FETCH_WIDTHS) - 1  # 8 elements
        assert cuda_registers.vectorized_b_fetch(rec.trace) is None
        # as the search replays a record it starts from: without the postprocessors' steps, then the postprocessors
        sch = tvm.s_tir.Schedule(rec.workload.mod)
        rec.trace.apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        ctx = tvm.s_tir.meta_schedule.TuneContext(mod=rec.workload.mod, target=targets.tvm_target("sm_90"),
                                                  task_name="main", space_generator=tuner.design_space("sm_90"))
        assert all(p.apply(sch) for p in ctx.space_generator.postprocs)
    assert tuner._migrate(wl, "sm_90", work, [committed], 3, 2, print) == (0, 0)
