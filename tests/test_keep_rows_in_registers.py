"""flashgemm.codegen.tir.keep_rows_in_registers (the one-pass form's row sweeps read S from shared memory once, exp
computed once): hand-built device code, rewritten and left alone; the committed W2 kernels' CUDA source; on the GPU, the
W2 kernels with and without the rewrite against each other and FP64."""
import re

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

from flashgemm.codegen import cuda_build
from flashgemm.codegen.tir import keep_rows_in_registers
from flashgemm import targets
from tests.compile_worker import disable_pass, enable_pass, pass_runs

N = 200  # columns of a row: 7 sweeps of 32 lanes, the last one partial (W2's 197 is the same shape)


def _sweeps(between: str = "", third_cond: bool = False, extent: int = 7, loaded_index: bool = False,
            sum_into_view: bool = False):
    """Three sweeps over S's rows, a warp a row (max, sum of exps, P), as the one-pass form lowers them. `between`
    puts a statement between the first and second sweep ("view-write": a store through another view of S's
    allocation) or between the second and third ("max-write": the max the exp reads overwritten). sum_into_view:
    the second sweep stores its exps into S's own elements, through that other view, instead of summing them."""
    @T.prim_func
    def f(p: T.handle("float16", "global")):
        P = T.decl_buffer((4 * N,), "float16", data=p)
        ty = T.launch_thread("threadIdx.y", 4)
        tx = T.launch_thread("threadIdx.x", 32)
        pool = T.alloc_buffer((4 * 256 * 4,), "uint8", scope="shared.dyn")
        S = T.decl_buffer((4 * 256,), "float32", data=pool.data, scope="shared.dyn")
        V = T.decl_buffer((4 * 256,), "float32", data=pool.data, scope="shared.dyn")
        off = T.alloc_buffer((1,), "int32", scope="local")
        mx = T.alloc_buffer((1,), "float32", scope="local")
        sm = T.alloc_buffer((1,), "float32", scope="local")
        V[tx] = T.float32(0)
        off[0] = 0
        mx[0] = T.float32(-3.0e38)
        for c in range(7):
            if c * 32 + tx < N:
                mx[0] = T.max(mx[0], S[ty * 256 + c * 32 + tx] * T.float32(0.125))
        V[ty] = T.float32(1)
        sm[0] = T.float32(0)
        for c in range(7):
            if c * 32 + tx < N:
                sm[0] = sm[0] + T.exp2(S[ty * 256 + c * 32 + tx] * T.float32(0.18) - mx[0])
        mx[0] = mx[0]
        for c in range(7):
            if c * 32 + tx < N:
                P[ty * N + c * 32 + tx] = T.Cast("float16", T.exp2(S[ty * 256 + c * 32 + tx] * T.float32(0.18)
                                                                   - mx[0]) / sm[0])

    def on_seq(s, mutator):
        s = mutator.default_mutate(s)
        items = list(s.seq)
        marks = [i for i, x in enumerate(items) if isinstance(x, tirx.BufferStore)
                 and x.buffer.name in ("V", "mx") and i > 0 and isinstance(items[i - 1], tirx.For)]
        if not marks:
            return s
        view_at, max_at = marks  # V[ty] = 1 after sweep 1, mx[0] = mx[0] after sweep 2
        keep = {"view-write": {view_at}, "max-write": {max_at}}.get(between, set())
        items = [x for i, x in enumerate(items) if i not in (view_at, max_at) or i in keep]
        return tirx.SeqStmt(items)

    def on_for(s, mutator):
        s = mutator.default_mutate(s)
        return tirx.For(s.loop_var, s.min, tirx.IntImm("int32", extent), s.kind, s.body)

    def on_if(s, mutator):
        s = mutator.default_mutate(s)
        if sum_into_view and isinstance(s.then_case, tirx.BufferStore) and s.then_case.buffer.name == "sm":
            exp = s.then_case.value.b  # sm[0] + exp(...)
            s_index = next(iter(_loads(exp, "S"))).indices
            return tirx.IfThenElse(s.condition, tirx.BufferStore(_stored(f, "V"), exp, s_index), None)
        if third_cond and isinstance(s.then_case, tirx.BufferStore) and s.then_case.buffer.name == "P":
            guard = tirx.And(s.condition, tirx.LT(s.then_case.indices[0], 4 * N - 1))
            return tirx.IfThenElse(guard, s.then_case, None)
        return s

    def on_load(e, mutator):
        if loaded_index and e.source.name == "S":
            return tirx.BufferLoad(e.source, [e.indices[0] + tirx.BufferLoad(_buffer(f, "off"), [0])])
        return mutator.default_mutate(e)

    body = tvm_ffi.structural_mutate(f.body, ((tirx.SeqStmt, on_seq), (tirx.For, on_for), (tirx.IfThenElse, on_if),
                                              (tvm.ir.TensorLoad, on_load)))
    return f.with_body(body)


def _loads(e, name) -> list:
    found = []
    tvm_ffi.structural_walk(e, ((tvm.ir.TensorLoad, lambda x: found.append(x) if x.source.name == name else None),))
    return found


def _stored(func, name):
    found = []
    tvm_ffi.structural_walk(func.body, ((tirx.BufferStore, lambda s: found.append(s.buffer)
                                         if s.buffer.name == name else None),))
    return found[0]


def _buffer(func, name):
    found = []
    tvm_ffi.structural_walk(func.body, ((tirx.AllocBuffer, lambda s: found.append(s.buffer)
                                         if s.buffer.name == name else None),))
    return found[0]


def _count(func, what) -> int:
    n = [0]

    def load(e):
        if what == "S" and e.source.name == "S":
            n[0] += 1

    def call(c):
        if what == "exp" and str(c.op.name) in ("tirx.exp", "tirx.exp2"):
            n[0] += 1
    tvm_ffi.structural_walk(func.body, ((tvm.ir.TensorLoad, load), (tvm.ir.Call, call)))
    return n[0]


def test_three_sweeps_load_the_row_once_and_compute_its_exp_once():
    func = _sweeps()
    assert (_count(func, "S"), _count(func, "exp")) == (3, 2)
    out, groups = keep_rows_in_registers.rewrite(func)
    assert groups == 1
    assert (_count(out, "S"), _count(out, "exp")) == (1, 1)
    fors = []
    tvm_ffi.structural_walk(out.body, ((tirx.For, fors.append),))
    assert len(fors) == 3 and all(f.kind == tirx.ForKind.UNROLLED for f in fors)  # (constant indices: registers)
    allocs = []
    tvm_ffi.structural_walk(out.body, ((tirx.AllocBuffer, lambda s: allocs.append(s.buffer)),))
    rows = [b for b in allocs if b.name.startswith("row_")]
    assert sorted(b.name for b in rows) == ["row_0", "row_0_exp"]
    assert all(b.scope() == "local" and [int(x) for x in b.shape] == [7] for b in rows)
    # the P sweep reads the stored exp and nothing of S
    script = out.script()
    p_line = next(ln for ln in script.splitlines() if ln.strip().startswith("P["))
    assert "row_0_exp[c]" in p_line and "S[" not in p_line and "exp2" not in p_line


def test_a_write_to_the_rows_memory_between_sweeps_splits_the_group():
    # through another view of the same allocation, after the first sweep: the max keeps its own load, the sum
    # fills the row and P reads it
    out, groups = keep_rows_in_registers.rewrite(_sweeps(between="view-write"))
    assert groups == 1
    assert (_count(out, "S"), _count(out, "exp")) == (2, 1)


def test_a_sweep_that_writes_the_rows_memory_takes_no_part():
    # the sum sweep stores into S's elements through another view: P must read S again, so no group (a group of the
    # max sweep alone, or of P alone, saves nothing and is not made)
    func = _sweeps(sum_into_view=True)
    assert _count(func, "S") == 3
    out, groups = keep_rows_in_registers.rewrite(func)
    assert groups == 0 and out.same_as(func)


def test_the_exp_is_not_reused_when_what_it_reads_changes_between():
    out, groups = keep_rows_in_registers.rewrite(_sweeps(between="max-write"))
    assert groups == 1
    assert (_count(out, "S"), _count(out, "exp")) == (1, 2)


def test_a_sweep_under_another_condition_keeps_its_shared_loads():
    out, groups = keep_rows_in_registers.rewrite(_sweeps(third_cond=True))
    assert groups == 1
    assert (_count(out, "S"), _count(out, "exp")) == (2, 2)


@pytest.mark.parametrize("case", ["too-long", "loaded-index"])
def test_sweeps_it_leaves_alone(case):
    func = _sweeps(extent=keep_rows_in_registers.MAX_ELEMENTS + 1) if case == "too-long" else _sweeps(loaded_index=True)
    out, groups = keep_rows_in_registers.rewrite(func)
    assert groups == 0 and out.same_as(func)


def test_the_switch_turns_it_off(monkeypatch):
    mod = tvm.IRModule({"main_kernel": _sweeps()})
    assert not keep_rows_in_registers.keep_rows_in_registers(mod).same_as(mod) and pass_runs(keep_rows_in_registers.PASS)
    disable_pass(monkeypatch, keep_rows_in_registers.PASS)
    assert not pass_runs(keep_rows_in_registers.PASS)


# ---- the committed W2 kernels (one-pass form, a warp a row of 197)

@pytest.mark.parametrize("db", ["vit-b16.f16", "vit-b16.bf16"])
def test_the_committed_w2_kernels_read_each_row_once(db, monkeypatch):
    from tests.compile_worker import best_record_source_switched
    src = best_record_source_switched(db, monkeypatch, keep_rows_in_registers.PASS, off=False)
    kernel = src[src.index("__global__"):]
    assert "float row_0_ptr[7];" in kernel and "float row_0_exp_ptr[7];" in kernel
    assert kernel.count("exp2f(") == 1
    p_store = re.search(r"P_ptr\[[^\n]*", kernel).group(0)
    assert "buf_dyn_shmem_ptr" not in p_store
    before = best_record_source_switched(db, monkeypatch, keep_rows_in_registers.PASS, off=True)
    assert "row_0_ptr" not in before and before[before.index("__global__"):].count("exp2f(") == 2


@pytest.mark.gpu
def test_w2_kernels_with_and_without_the_rewrite(monkeypatch):
    """The committed W2 fp16 record as tuned, compiled with the pass and without it, on the same inputs: both within
    tolerance of FP64, and within one fp16 rounding step of each other (not bit for bit: without the pass nvcc compiles
    the P sweep's exp2 argument on its own and may contract it differently than the sum's, an fp32 ulp that can move
    P's rounding, and on the GPU it does); and the shipped twins of both dtypes against
    FP64."""
    import tests.test_gpu_kernels as g
    from tests.test_make_copies_async import REPO, _best, _run_tuning_form, _twin
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    wl, rec, mod = _best(REPO / "flashgemm" / "databases" / "sm_90" / "vit-b16.f16")
    sch = tvm.s_tir.Schedule(mod)
    rec.trace.apply_to_schedule(sch, remove_postproc=False)
    c = g._case("float16", *wl.canonical.sizes[:2], 197, 197, 64, scale=float(wl.scale))
    shape = g._canon(c)
    out = []
    for off in (False, True):
        if off:
            disable_pass(monkeypatch, keep_rows_in_registers.PASS)
        built = cuda_build.compile_cuda(sch.mod, targets.tvm_target(g.ARCH))
        assert ("row_0_ptr" in built.mod.imports[0].inspect_source("cuda")) != off
        out.append(_run_tuning_form(built, "float16", c, shape))
    enable_pass(monkeypatch, keep_rows_in_registers.PASS)
    g._check(out[0], c, "float16")
    g._check(out[1], c, "float16")
    assert np.abs(out[0] - out[1]).max() <= 2.0 ** -11  # P <= 1: one fp16 step
    for dtype in ("float16", "bfloat16"):
        wl, rec, _ = _best(REPO / "flashgemm" / "databases" / "sm_90" / f"vit-b16.{'f16' if dtype == 'float16' else 'bf16'}")
        c = g._case(dtype, 1, 12, 197, 197, 64, scale=float(wl.scale))
        twin = cuda_build.compile_cuda(_twin(wl, rec.trace).mod, targets.tvm_target(g.ARCH))
        assert "row_0_ptr" in twin.mod.imports[0].inspect_source("cuda")
        g._check(g._run(twin, dtype, c, g._canon(c)), c, dtype)
