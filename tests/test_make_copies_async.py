"""flashgemm.codegen.tir.make_copies_async (vector global->shared copies made cp.async) and
cuda_registers.vectorized_b_fetch (old register-sketch records re-expressed with their resident B copy vectorized):
lowered TIR, the CUDA source of the W1 records as tuned and as shipped; on the GPU, the re-expressed W1 kernels against
the committed ones and FP64."""
import re

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

from flashgemm.spaces import kernel_forms
from flashgemm.codegen.tir import make_copies_async
from flashgemm.codegen import cuda_build
from flashgemm.spaces import cuda_registers
from flashgemm import targets
from flashgemm.spaces.intrinsics import register_intrinsics
from tests.compile_worker import disable_pass, enable_pass, pass_runs


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
    func, count = make_copies_async.rewrite(_copy())
    assert count == 1
    (call,) = _calls(func, make_copies_async.CP_ASYNC)
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
    func, count = make_copies_async.rewrite(_copy(lanes=lanes))
    assert count == 1 and [int(c.args[4]) for c in _calls(func, make_copies_async.CP_ASYNC)] == [bytes_]


def test_a_guarded_copy_keeps_its_guard():
    # the copy loop's bound where the threads do not divide it (a sampled causal M > N kernel had one)
    func, count = make_copies_async.rewrite(_copy(guarded=True))
    assert count == 1
    ifs = []
    tvm_ffi.structural_walk(func.body, ((tirx.IfThenElse, ifs.append),))
    (guard,) = ifs
    assert isinstance(guard.then_case, tirx.Evaluate) and str(guard.then_case.value.op.name) == make_copies_async.CP_ASYNC


@pytest.mark.parametrize("case", ["scalar", "shared-source", "zero-filled", "already-async"])
def test_copies_it_leaves_alone(case):
    func = {"scalar": lambda: _copy(lanes=1), "shared-source": lambda: _copy(src_scope="shared"),
            "zero-filled": lambda: _copy(zero_filled=True), "already-async": lambda: _copy(in_async=True)}[case]()
    out, count = make_copies_async.rewrite(func)
    assert count == 0 and out.same_as(func)


def test_the_switch_turns_it_off(monkeypatch):
    mod = tvm.IRModule({"main_kernel": _copy()})
    assert not make_copies_async.make_copies_async(mod).same_as(mod) and pass_runs(make_copies_async.PASS)
    disable_pass(monkeypatch, make_copies_async.PASS)
    assert not pass_runs(make_copies_async.PASS)


# ---- the W1 records: tuned with a scalar B copy (the database in tests/data/w1-scalar-b), re-expressed with a
# vectorized one; the committed databases' best records are those re-expressions (measured on the GPU)

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]
SCALAR_B_DB = REPO / "tests" / "data" / "w1-scalar-b" / "sm_90" / "bert-large.f16"


def _best(wl_dir):
    """(workload, the best record of a database directory, its tuning module)."""
    from flashgemm.bundle import best
    from flashgemm.tune import database as dbm
    from flashgemm.spaces.kernel_forms import form_of, tuning_modules
    register_intrinsics("sm_90")
    wl = best.workload_of(wl_dir, dbm.read_provenance(wl_dir))
    modules = tuning_modules(wl, "sm_90")
    rec = dbm.top_records([m for _, m in modules], [dbm.open_json_db(wl_dir)], 1)[0]
    return wl, rec, dict((f.name, m) for f, m in modules)[form_of(rec, modules).name]


def _reexpressed(wl_dir):
    """(workload, the best record, its re-expression on the tuning form, postprocessed)."""
    from flashgemm.spaces.kernel_forms import design_space
    from tvm.s_tir import meta_schedule as ms
    wl, rec, mod = _best(wl_dir)
    trace = cuda_registers.vectorized_b_fetch(rec.trace)
    assert trace is not None
    sch = tvm.s_tir.Schedule(mod)
    tvm.s_tir.schedule.Trace.apply_json_to_schedule(trace, sch)
    sch.enter_postproc()
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target("sm_90"), task_name="main",
                         space_generator=design_space("sm_90"))
    assert all(p.apply(sch) for p in ctx.space_generator.postprocs)
    return wl, rec, sch


def _twin(wl, trace):
    from flashgemm.bundle import best
    from flashgemm.spaces.kernel_forms import forms
    return best.on_runtime_func(trace, wl, "sm_90", forms(wl, "sm_90")[0], True, (0, 1))


def _kernel_source(mod) -> str:
    src = cuda_build.compile_cuda(mod, targets.tvm_target("sm_90")).mod.imports[0].inspect_source("cuda")
    return src[src.index("__global__"):]


_B_CP_ASYNC = re.compile(r"ptx_cp_async\w*\(buf_dyn_shmem_ptr, [^;]*, Bm_ptr, ")
_WAIT_ALL = "ptx_cp_async_wait_group_async_wait_group_0();"


def _copies_b_by_cp_async(kernel: str) -> bool:
    first = _B_CP_ASYNC.search(kernel)
    if "Bm_ptr[" in kernel or not first:  # a scalar copy of B left, or none by cp.async
        return False
    after = kernel[first.end():]
    # the loop's commit and its wait for every group come before the next barrier or anything else
    return after.index("commit_group();") < after.index(_WAIT_ALL) < after.index("__syncthreads()")


def test_a_scalar_b_record_reexpressed_copies_b_by_cp_async_as_tuned_and_as_shipped():
    wl, rec, sch = _reexpressed(SCALAR_B_DB)
    assert cuda_registers.vectorized_b_fetch(sch.trace) is None  # already vectorized: nothing more to re-express
    assert _copies_b_by_cp_async(_kernel_source(sch.mod)) and _copies_b_by_cp_async(_kernel_source(
        _twin(wl, sch.trace).mod))
    assert "Bm_ptr[" in _kernel_source(_twin(wl, rec.trace).mod)  # the old record replays as it was tuned


@pytest.mark.parametrize("db", ["bert-large.f16", "bert-large.bf16"])
def test_the_committed_w1_kernels_copy_b_by_cp_async(db):
    wl, rec, _ = _best(REPO / "flashgemm" / "databases" / "sm_90" / db)
    assert cuda_registers.vectorized_b_fetch(rec.trace) is None
    assert _copies_b_by_cp_async(_kernel_source(_twin(wl, rec.trace).mod))


def test_only_scalar_resident_b_records_are_reexpressed():
    from flashgemm.tune import database as dbm
    root = REPO / "flashgemm" / "databases" / "sm_90"
    resident_a = REPO / "tests" / "data" / "w3-resident-one-column" / "sm_90" / "whisper-enc.f16"  # A scalar, not B
    for wl_dir, expected in ((root / "whisper-enc.f16", False), (root / "vit-b16.f16", False), (resident_a, False),
                             (root / "bert-large.f16", False), (SCALAR_B_DB, True)):
        recs = dbm.open_json_db(wl_dir).get_all_tuning_records()
        best = min(recs, key=lambda r: dbm.mean_secs(r) or float("inf"))
        assert (cuda_registers.vectorized_b_fetch(best.trace) is not None) == expected, wl_dir


def _run_tuning_form(built, dtype, c, shape):
    """P of a tuning-form kernel (A, B, P; static sizes, scale folded in) on c's inputs."""
    dev = tvm.cuda(0)
    a = tvm.runtime.tensor(np.ascontiguousarray(c["a"]).reshape(shape.b0, shape.b1, shape.m, shape.k), dev)
    b = tvm.runtime.tensor(np.ascontiguousarray(c["b"]).reshape(shape.b0, shape.b1, shape.n, shape.k), dev)
    p = tvm.runtime.empty((shape.b0, shape.b1, shape.m, shape.n), dtype, dev)
    built(a, b, p)
    return p.numpy().astype(np.float64).reshape(c["a"].shape[:-2] + (shape.m, shape.n))


@pytest.mark.gpu
def test_w1_kernels_with_and_without_the_rewrite(monkeypatch):
    """The committed W1 fp16 record as tuned (static strides: without the pass TVM copies B with plain 16-byte loads)
    compiled with the pass and without it on the same inputs: the same P bit for bit (only how B reaches shared
    memory differs), within tolerance of FP64; and its shipped twin (cp.async only) within tolerance too. (fp16
    only: the tuning form's argument check rejects ml_dtypes' bfloat16 arrays, "Mismatched A.dtype ... expected
    bfloat16"; the bf16 twin is checked below.)"""
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    wl, rec, mod = _best(REPO / "flashgemm" / "databases" / "sm_90" / "bert-large.f16")
    dtype = "float16"
    sch = tvm.s_tir.Schedule(mod)
    rec.trace.apply_to_schedule(sch, remove_postproc=False)
    c = g._case(dtype, *wl.canonical.sizes[:2], 512, 512, 64, scale=float(wl.scale))
    shape = g._canon(c)
    out = []
    for off in (False, True):
        if off:
            disable_pass(monkeypatch, make_copies_async.PASS)
        built = cuda_build.compile_cuda(sch.mod, targets.tvm_target(g.ARCH))
        assert _copies_b_by_cp_async(built.mod.imports[0].inspect_source("cuda")) != off
        out.append(_run_tuning_form(built, dtype, c, shape))
    enable_pass(monkeypatch, make_copies_async.PASS)
    g._check(out[0], c, dtype)
    assert np.array_equal(out[0], out[1])
    twin = cuda_build.compile_cuda(_twin(wl, rec.trace).mod, targets.tvm_target(g.ARCH))
    g._check(g._run(twin, dtype, c, shape), c, dtype)


def test_migrating_w1_records_measures_each_once_with_b_vectorized(tmp_path, stand_in_measurement):
    """tune(migrate_records=N) (flashgemm.tune.seeding.migrate) on the W1 database of tests/data/w1-scalar-b: its best N
    records (register sketches, B copied a scalar at a time) re-expressed with the copy 8 wide, each measured (a
    stand-in runner here) and committed to the work database, once a work directory."""
    from flashgemm.op.workloads import parse
    from flashgemm.tune import database as dbm
    from flashgemm.tune import seeding
    register_intrinsics("sm_90")
    wl = parse("bert-large")
    committed = dbm.open_json_db(SCALAR_B_DB)
    work = tmp_path / "work"
    n, valid = seeding.migrate(wl, "sm_90", work, [committed], 3, 2, print)
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
                                                  task_name="main", space_generator=kernel_forms.design_space("sm_90"))
        assert all(p.apply(sch) for p in ctx.space_generator.postprocs)
    assert seeding.migrate(wl, "sm_90", work, [committed], 3, 2, print) == (0, 0)


@pytest.mark.gpu
def test_w1_bf16_twin_matches_fp64():
    """The committed W1 bf16 record's shipped twin (B copied by cp.async) against FP64."""
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    wl, rec, _ = _best(REPO / "flashgemm" / "databases" / "sm_90" / "bert-large.bf16")
    c = g._case("bfloat16", 1, 8, 512, 512, 64, scale=float(wl.scale))
    twin = cuda_build.compile_cuda(_twin(wl, rec.trace).mod, targets.tvm_target(g.ARCH))
    g._check(g._run(twin, "bfloat16", c, g._canon(c)), c, "bfloat16")
