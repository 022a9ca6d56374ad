"""The peer "Meta-Schedule's default auto-scheduling of the UNFUSED op": what the design space buys.

The op P = softmax_rowwise(scale * A @ B + bias + mask) run the way a framework runs it, as two kernels
(`unfused_module`):

  "gemm"     S = cast(dtype, scale * (A @ B[^T]) + bias)   fp32 accumulation, bias in the epilogue
  "softmax"  P = softmax_rowwise(S + mask, causal)          fp32 math, P in the dtype

each tuned by Meta-Schedule with its DEFAULT design space for the target (PostOrderApply with the
target's own schedule rules, postprocessors and mutators: "cuda-tensorcore" on sm_80+, "llvm" on the
CPU), the default evolutionary search and XGBoost cost model, and the default task scheduler
("gradient": every task gets one batch, then each batch goes to the task with the largest expected gain in
summed latency). Only the builder and the runner are the project's: `flashgemm.spaces.cuda_space`'s arch-correct
builder (Meta-Schedule's default LocalBuilder compiles for the local GPU's arch), with one retry for a TVM
bug that otherwise fails most default tensor-core candidates (compile_cuda below), and its runner (the
measurement protocol our fused kernels were tuned with); flashgemm/spaces/llvm.py's builder and runner on the CPU.
No tensor cores for bf16: TVM registers WMMA intrinsics for fp16 only, so the default space schedules a
bf16 GEMM on CUDA cores (that is what Meta-Schedule's default gives a bf16 user).

Trial budget: `trials` is the total of both tasks (measured candidates, valid or not) and, as with
flashgemm-tune, a total rather than an increment: running again continues toward it, the evolutionary
search seeded with the records already measured. How it splits between the tasks is the task
scheduler's call (the first round gives each task one batch of trials // 4, at most 64; a 64-trial run
is 16 + 16, then 32 to the task(s) whose improvement matters most): that is how Meta-Schedule itself
divides a model's budget among its operators.

Where the databases live: one directory per (target, workload),
`flashgemm/databases/ms_default/<target>/<workload dir_name>/`, holding Meta-Schedule's JSONDatabase with every
measured record of both tasks (database_workload.json, database_tuning_record.json) and `ms_default.json`
(what was tuned, trials per task, the best time per task). A 1024-trial run leaves ~1000 records (~14 MB):
the committed databases are pruned to the fastest 10 valid records per task (prune_unfused, `--prune 10`), their
trial counts kept in ms_default.json, which resuming reads too. Logs go to
`work/logs/` (git-ignored like every flashgemm/databases/**/work/). These directories are deliberately not our
fused-op layout: they have no provenance.json, so flashgemm.bundle.best.load_all (which reads
`<root>/<target>/*/provenance.json`) skips them even when pointed at flashgemm/databases/ms_default/, and
"ms_default" is not a target name (flashgemm.targets.resolve refuses it).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import tvm
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.script import tirx as T

from flashgemm import targets
from flashgemm.op.variant import BOOL_MASK_KINDS, FILL_LOGIT, MASK_KINDS, MASKED_AT_OR_BELOW, CanonicalShape, Variant

from flashgemm.tune import database
from flashgemm.spaces.intrinsics import register_intrinsics

TASKS = ("gemm", "softmax")  # task names, in the order the two kernels run
META = "ms_default.json"
DB_FILES = ("database_workload.json", "database_tuning_record.json")
INVALID_SECS = database.INVALID_SECS
NEG_INF = float("-inf")
SCRIPT = "flashgemm-tune-ms-default"


class TuningError(RuntimeError):
    """A task of which no candidate could be built and measured, or a database for something else."""


def default_root() -> Path:
    return database.default_root() / "ms_default"


def workload_dir(root: Optional[os.PathLike], target_name: str, dir_name: str) -> Path:
    return Path(root or default_root()) / target_name / dir_name


def tune_command(wl, target_name: str) -> str:
    spec = wl.name if _is_preset(wl) else f"{wl.spec()},name={wl.name}"
    return f"{SCRIPT} --target {target_name} --workload '{spec}' --dtype {wl.dtype}"


def _is_preset(wl) -> bool:
    from flashgemm.op.workloads import PRESETS, preset  # noqa: PLC0415
    if wl.name not in PRESETS:
        return False
    try:
        return preset(wl.name, wl.dtype) == wl
    except KeyError:
        return False


# ----------------------------------------------------------------------------- the unfused op
def _bcast(shape: CanonicalShape) -> dict:
    """Per tensor, which canonical dims are broadcast (stride 0): those get extent 1 and index 0, as in
    flashgemm.kernel.fused_gemm_softmax.tuning_func, so that the measured memory traffic is the real one."""
    bc = {"a": tuple(s == 0 for s in shape.a_strides[:2]) + (False, False),
          "b": tuple(s == 0 for s in shape.b_strides[:2]) + (False, False)}
    if shape.bias_strides is not None:
        bc["bias"] = tuple(s == 0 for s in shape.bias_strides)
    if shape.mask_strides is not None:
        bc["mask"] = tuple(s == 0 for s in shape.mask_strides)
    return bc


def _check_supported(variant: Variant, shape: CanonicalShape) -> None:
    if variant.mask not in MASK_KINDS:
        raise NotImplementedError(f"ms_default: mask kind {variant.mask!r} is not supported (only {MASK_KINDS})")
    if variant.has_bias != (shape.bias_strides is not None) or (variant.mask != "none") != (
            shape.mask_strides is not None):
        raise ValueError("ms_default: the variant's bias/mask flags do not match the shape's bias/mask strides")
    if min(shape.sizes) < 1:
        raise NotImplementedError(f"ms_default: empty problem {shape.sizes} (B0, B1, M, N, K): every size must be "
                                  f">= 1 (there is nothing to tune)")


def tensor_shapes(wl) -> dict:
    """Name -> (shape, dtype) of every argument of the two kernels ('A', 'B', 'bias', 'mask', 'S', 'P'), in the
    compact form the kernels take (broadcast canonical dims have extent 1)."""
    v, c = wl.variant, wl.canonical
    bc = _bcast(c)

    def shape_of(t, full):
        return tuple(1 if bc.get(t, (False,) * 4)[d] else full[d] for d in range(4))

    out = {"A": (shape_of("a", (c.b0, c.b1, c.m, c.k)), v.dtype),
           "B": (shape_of("b", (c.b0, c.b1, c.n, c.k) if v.trans_b else (c.b0, c.b1, c.k, c.n)), v.dtype)}
    if v.has_bias:
        out["bias"] = (shape_of("bias", (c.b0, c.b1, c.m, c.n)), v.dtype)
    if v.mask != "none":
        out["mask"] = (shape_of("mask", (c.b0, c.b1, c.m, c.n)), "uint8" if v.mask in BOOL_MASK_KINDS else v.dtype)
    out["S"] = ((c.b0, c.b1, c.m, c.n), v.dtype)
    out["P"] = ((c.b0, c.b1, c.m, c.n), v.dtype)
    return out


def unfused_funcs(wl) -> dict:
    """{"gemm": PrimFunc, "softmax": PrimFunc} of a Workload (see unfused_module). Each has global_symbol "main"
    (the form Meta-Schedule tunes and the database is keyed by)."""
    v, c = wl.variant, wl.canonical
    _check_supported(v, c)
    dt, scale = v.dtype, float(wl.scale)
    B0, B1, M, N, K = c.sizes
    bc = _bcast(c)
    shapes = tensor_shapes(wl)
    a_shape, b_shape, s_shape = shapes["A"][0], shapes["B"][0], shapes["S"][0]
    bias_shape = shapes.get("bias", ((1, 1, 1, 1), dt))[0]
    mask_shape, mask_dtype = shapes.get("mask", ((1, 1, 1, 1), dt))
    has_bias, mask_kind, causal, trans_b = v.has_bias, v.mask, v.causal, v.trans_b

    def at(t, b0, b1, r, col):
        idx = (b0, b1, r, col)
        return tuple(0 if bc.get(t, (False,) * 4)[d] else idx[d] for d in range(4))

    def b_elem(Bm, b0, b1, k, j):
        return Bm[at("b", b0, b1, j, k)] if trans_b else Bm[at("b", b0, b1, k, j)]

    def epilogue(acc, Bias, b0, b1, i, j):
        x = acc[b0, b1, i, j] * T.float32(scale)
        if has_bias:
            x = x + T.cast(Bias[at("bias", b0, b1, i, j)], "float32")
        return T.cast(x, dt)

    def logit(S, Mask, b0, b1, i, j):  # the fused kernel's masking rules (flashgemm/kernel/fused_gemm_softmax.py)
        x = T.cast(S[b0, b1, i, j], "float32")
        if mask_kind == "add":
            mv = T.cast(Mask[at("mask", b0, b1, i, j)], "float32")
            x = T.if_then_else(mv <= T.float32(MASKED_AT_OR_BELOW), T.float32(NEG_INF), x + mv)
        elif mask_kind == "bool":
            x = T.if_then_else(Mask[at("mask", b0, b1, i, j)] != T.uint8(0), x, T.float32(NEG_INF))
        elif mask_kind == "fill":
            x = T.if_then_else(Mask[at("mask", b0, b1, i, j)] != T.uint8(0), x, T.float32(FILL_LOGIT[v.dtype]))
        if causal:  # bottom-right aligned diagonal
            x = T.if_then_else(j > i + (N - M), T.float32(NEG_INF), x)
        return x

    # S in the input dtype, not fp32: that is what a framework's unfused op does (torch.matmul / cuBLAS with an
    # alpha + bias epilogue return fp16/bf16; the softmax reads that and computes in fp32), and it is the cheaper
    # of the two for the unfused peer (S's round trip through memory, the traffic fusion removes, is 2 bytes an
    # element instead of 4). The price is one rounding of the logits to the dtype (scale and bias are applied in
    # fp32 before it), which the numerics tests allow for.
    @T.prim_func(s_tir=True)
    def gemm(a_h: T.handle, b_h: T.handle, bias_h: T.handle, s_h: T.handle):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A = T.match_buffer(a_h, a_shape, dt)
        Bm = T.match_buffer(b_h, b_shape, dt)
        Bias = T.match_buffer(bias_h, bias_shape, dt)
        S = T.match_buffer(s_h, s_shape, dt)
        acc = T.sblock_alloc_buffer((B0, B1, M, N), "float32")
        for b0, b1, i, j, k in T.grid(B0, B1, M, N, K):
            with T.sblock("gemm"):
                v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                with T.init():
                    acc[v0, v1, vi, vj] = T.float32(0)
                acc[v0, v1, vi, vj] = acc[v0, v1, vi, vj] + T.cast(A[at("a", v0, v1, vi, vk)], "float32") * T.cast(
                    b_elem(Bm, v0, v1, vk, vj), "float32")
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("epilogue"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                S[v0, v1, vi, vj] = epilogue(acc, Bias, v0, v1, vi, vj)

    @T.prim_func(s_tir=True)
    def softmax(s_h: T.handle, mask_h: T.handle, p_h: T.handle):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        S = T.match_buffer(s_h, s_shape, dt)
        Mask = T.match_buffer(mask_h, mask_shape, mask_dtype)
        P = T.match_buffer(p_h, s_shape, dt)
        row_max = T.sblock_alloc_buffer((B0, B1, M), "float32")
        E = T.sblock_alloc_buffer((B0, B1, M, N), "float32")
        row_sum = T.sblock_alloc_buffer((B0, B1, M), "float32")
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("row_max"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():  # min_value, not -inf: the identity TVM's cross-thread max reduction knows
                    row_max[v0, v1, vi] = T.min_value("float32")
                row_max[v0, v1, vi] = T.max(row_max[v0, v1, vi], logit(S, Mask, v0, v1, vi, vj))
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("exp"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                # a masked element: exp(-inf - finite) = 0; a fully masked row sums to 0 and gets zeros below
                E[v0, v1, vi, vj] = T.exp(logit(S, Mask, v0, v1, vi, vj) - row_max[v0, v1, vi])
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("row_sum"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():
                    row_sum[v0, v1, vi] = T.float32(0)
                row_sum[v0, v1, vi] = row_sum[v0, v1, vi] + E[v0, v1, vi, vj]
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("P"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                P[v0, v1, vi, vj] = T.cast(T.if_then_else(
                    row_sum[v0, v1, vi] > T.float32(0), E[v0, v1, vi, vj] / row_sum[v0, v1, vi], T.float32(0)), dt)

    a, b, bias, s = gemm.params
    gemm = tvm.tirx.PrimFunc([a, b, *([bias] if has_bias else []), s], gemm.body, gemm.ret_type, gemm.attrs)
    s, mask, p = softmax.params
    softmax = tvm.tirx.PrimFunc([s, *([mask] if mask_kind != "none" else []), p], softmax.body, softmax.ret_type,
                                softmax.attrs)
    return {"gemm": gemm, "softmax": softmax}


def unfused_module(wl) -> tvm.IRModule:
    """The unfused op of a Workload as a framework runs it, two PrimFuncs:

    gemm(A, B, [bias], S):     S = cast(dtype, scale * A @ B(^T) + bias), fp32 accumulation (scale folded in)
    softmax(S, [mask], P):     P = softmax_rowwise(S + mask) with the fused op's masking contract (README,
                               flashgemm/op/reference.py): additive mask <= -65504 or a false bool (uint8 0)
                               masks out, causal is bottom-right aligned, a fully masked row is all zeros.

    Buffers are compact, with extent 1 on broadcast canonical dims (tensor_shapes). Raises NotImplementedError for
    what it does not support (an empty problem)."""
    funcs = unfused_funcs(wl)
    return tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})


def task_module(func: tvm.tirx.PrimFunc) -> tvm.IRModule:
    """The IRModule one task tunes, and its database key."""
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def task_modules(wl) -> dict:
    return {name: task_module(f) for name, f in unfused_funcs(wl).items()}


# ----------------------------------------------------------------------------- tuning
@derived_object
class _Progress(ms.measure_callback.PyMeasureCallback):
    """Per task: trials, valid/invalid, best, the first failure message; a log line per measured batch."""

    def __init__(self, names: list, done: dict, total_done: int, budget: int, log: Callable):
        self.names, self.log, self.budget = names, log, budget
        self.total = total_done
        self.stats = {n: {"trials": 0, "valid": 0, "invalid": 0, "best": math.inf, "error": None,
                          "done_before": done.get(n, 0)} for n in names}

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        st = self.stats[self.names[task_id]]
        for b, r in zip(builder_results, runner_results):
            self.total += 1
            st["trials"] += 1
            err = b.error_msg or (r.error_msg if r is not None else "no runner result")
            secs = None
            if err is None and r.run_secs:
                vals = [float(x) for x in r.run_secs]
                secs = sum(vals) / len(vals)
            if secs is None or secs >= INVALID_SECS:
                st["invalid"] += 1
                if st["error"] is None and err:
                    st["error"] = str(err).strip()
            else:
                st["valid"] += 1
                st["best"] = min(st["best"], secs)
        best = f"{st['best'] * 1e6:.1f} us" if st["best"] < math.inf else "none yet"
        self.log(f"[ms-default] {self.total}/{self.budget} trials; {self.names[task_id]}: "
                 f"{st['done_before'] + st['trials']} trials (this run: valid {st['valid']}, "
                 f"invalid {st['invalid']}), best {best}")


def _records_of(db, mod) -> list:
    if not db.has_workload(mod):
        return []
    return [r for r in db.get_all_tuning_records() if tvm_ffi.structural_equal(r.workload.mod, mod)]


_mean_secs = database.mean_secs  # one definition of "valid record's mean time" for both databases


def best_record(db, mod):
    """The fastest valid record of a task, or None."""
    best = None
    for rec in _records_of(db, mod):
        secs = _mean_secs(rec)
        if secs is not None and (best is None or secs < best[0]):
            best = (secs, rec)
    return best


def _open_db(wl_dir: Path, create: bool) -> ms.database.JSONDatabase:
    """The database of wl_dir. create=True: tune_unfused's, which appends to it (created when missing; a torn final
    line, a write cut by a kill, is cut off in place with a message). create=False: read only, nothing written (as
    database.open_json_db). Any other unreadable line is a TuningError naming file and line."""
    from flashgemm.tune import database as dbm  # noqa: PLC0415
    try:
        if create:
            for f in DB_FILES:
                dbm.repair_jsonl(wl_dir / f)
            return ms.database.JSONDatabase(work_dir=str(wl_dir), allow_missing=True)
        with dbm.readable_copy(wl_dir, DB_FILES) as (workload, records):
            return ms.database.JSONDatabase(path_workload=str(workload), path_tuning_record=str(records),
                                            allow_missing=False)
    except dbm.DatabaseError as err:
        raise TuningError(str(err)) from None
    except Exception as err:  # noqa: BLE001  (TVM's own error types)
        raise TuningError(f"cannot read the Meta-Schedule database at {wl_dir}: "
                          f"{str(err).strip().splitlines()[-1]}. Delete the directory and tune again.") from err


def _read_meta(wl_dir: Path) -> dict:
    path = wl_dir / META
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise TuningError(f"{path} is not valid JSON ({err}); delete {wl_dir} and tune again") from None


def _check_meta(wl_dir: Path, meta: dict, wl, target_name: str) -> None:
    if meta.get("target") not in (None, target_name):
        raise TuningError(f"{wl_dir} holds Meta-Schedule default records for target {meta['target']!r}, not "
                          f"{target_name!r}; point it elsewhere")
    if meta.get("workload", {}).get("spec") not in (None, wl.spec()):
        raise TuningError(f"{wl_dir} was tuned for a different workload ({meta['workload']['spec']}); name yours "
                          f"differently or remove that directory")


STORAGE_REWRITE_BUG = "tvm_access_ptr element type must match the source buffer"


def compile_cuda(mod: tvm.IRModule, target: tvm.target.Target):
    """flashgemm.codegen.cuda_build.compile_cuda (what cuda_space.build and our builder run), and for the one TVM 0.27
    bug that hits Meta-Schedule's default tensor-core (WMMA) candidates, a second try with StorageRewrite off.

    StorageRewrite merges the fp32 accumulator's and the fp16 operands' shared buffers and then fails
    "tvm_access_ptr element type must match the source buffer (float16 vs. float32)". On sm_90 most sampled WMMA
    candidates of the default space fail so on a 128x128x64 GEMM, and all of them on ViT's 197x197x64; with
    tirx.disable_storage_rewrite all of them build. Without the retry the
    peer would lose most (or, on W2, all) of its GEMM trials to a compiler bug, which is not what the peer is meant
    to measure. Our own space never takes the retry (its kernels fail differently with that flag: "Cannot find warp
    index"), so our kernels and every candidate that builds the normal way are compiled exactly as before."""
    from flashgemm.codegen import cuda_build  # noqa: PLC0415
    try:
        return cuda_build.compile_cuda(mod, target)
    except Exception as err:  # noqa: BLE001  (TVM's error types)
        if STORAGE_REWRITE_BUG not in str(err):
            raise
    with target, tvm.transform.PassContext(config={**cuda_build.PASS_CONFIG, "tirx.disable_storage_rewrite": True}):
        return tvm.compile(mod, target=target, tir_pipeline=cuda_build.TIR_PIPELINE)


def f_build(mod, target, _params=None):
    """Meta-Schedule f_build for CUDA (builder workers unpickle it by reference): flashgemm.codegen.cuda_build.f_build
    with compile_cuda's retry."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # noqa: PLC0415

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return compile_cuda(mod, target).mod


def _builder_runner(target_name: str, workers: int):
    """CUDA: flashgemm.spaces.cuda_space.builder's settings (arch-correct nvcc build, 120 s timeout) with f_build above,
    and cuda_space.runner (our kernels' measurement protocol). llvm: flashgemm/spaces/llvm.py's builder and runner."""
    if targets.is_cuda(target_name):
        from flashgemm.spaces import cuda_space  # noqa: PLC0415
        return cuda_space.builder(target_name, workers, build_fn=f_build), cuda_space.runner()
    from flashgemm.spaces import llvm  # noqa: PLC0415
    return llvm.builder(workers), llvm.runner()


def default_batch(remaining: int) -> int:
    """Candidates per search iteration (num_trials_per_iter): a quarter of the budget left, 1 to 64 (64 is
    Meta-Schedule's default). The first round of the gradient scheduler gives each task one batch, so a 64-trial
    run is 16 gemm + 16 softmax, then two batches of 16 by the gradient rule."""
    return max(1, min(64, -(-remaining // 4)))


def tune_unfused(wl, target_name: str, trials: int, work_dir: os.PathLike, log: Callable = print,
                 workers: Optional[int] = None, seed: int = 1, strategy="evolutionary",
                 batch_size: Optional[int] = None, max_seconds: Optional[float] = None) -> dict:
    """Tune both kernels of the unfused op toward a total of `trials` measured candidates (both tasks together,
    split by Meta-Schedule's gradient task scheduler: module doc) with Meta-Schedule's default space, search and
    cost model, into the JSON database in `work_dir` (this workload's directory). Resumable: the trials already
    measured (the records in the database, or ms_default.json's count where prune_unfused dropped records) count
    toward `trials`. strategy: Meta-Schedule's default ("evolutionary": population 512); tests
    pass a smaller EvolutionarySearch. batch_size: default_batch. max_seconds: end after the batch during which
    this much time has passed (as SIGTERM / SIGINT do: a time-boxed slice; the next run continues). Returns the
    summary also written to work_dir/ms_default.json; raises TuningError when a task has no valid candidate (with
    the first failure's message)."""
    from flashgemm.tune.provenance import environment, json_safe  # noqa: PLC0415
    from flashgemm.tune.search import quiet_meta_schedule_console  # noqa: PLC0415
    from flashgemm.tune.stopping import STOP_MARK, StopAfterBatch, StopRequest, stop_on_signals  # noqa: PLC0415
    target_name = targets.resolve(target_name)
    if trials < 1:
        raise ValueError("trials must be >= 1")
    wl_dir = Path(work_dir)
    target = targets.tvm_target(target_name)
    mods = task_modules(wl)  # raises for what the module does not support, before anything is written
    if (wl_dir / "provenance.json").exists():
        raise TuningError(f"{wl_dir} is a tuning database of our fused op (it has provenance.json); the unfused "
                          f"op's records go elsewhere (default: {workload_dir(None, target_name, wl.dir_name)})")
    wl_dir.mkdir(parents=True, exist_ok=True)
    meta_old = _read_meta(wl_dir)
    _check_meta(wl_dir, meta_old, wl, target_name)
    register_intrinsics(target_name)  # CUDA records name tensor intrinsics: registered before reading them
    db = _open_db(wl_dir, create=True)
    prev = meta_old.get("tasks", {})
    # the larger of the records here and the count in ms_default.json: a pruned database (prune_unfused) holds
    # fewer records than were measured; a run killed before it wrote ms_default.json left more
    done = {n: max(len(_records_of(db, m)), prev.get(n, {}).get("trials", 0)) for n, m in mods.items()}
    total_done = sum(done.values())
    remaining = trials - total_done
    cores = workers or min(os.cpu_count() or 1, 16)
    log(f"[ms-default] {wl.dir_name} on {target_name}: unfused gemm + softmax, Meta-Schedule's default space; "
        f"{total_done} trials done ({', '.join(f'{n} {done[n]}' for n in TASKS)}), budget {trials}, "
        f"{max(remaining, 0)} to go")
    run, ran = None, {n: {"trials": 0, "valid": 0} for n in TASKS}
    if remaining > 0:
        quiet_meta_schedule_console()
        from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir  # noqa: PLC0415
        from tvm.s_tir.meta_schedule.utils import fork_seed  # noqa: PLC0415
        log_dir = wl_dir / "work"
        names = list(TASKS)
        loggers = get_loggers_from_work_dir(str(log_dir), names)
        tasks = [ms.TuneContext(mod=mods[n], target=target, space_generator="post-order-apply",
                                search_strategy=strategy, task_name=n, rand_state=rs, num_threads=cores,
                                logger=lg).clone()
                 for n, lg, rs in zip(names, loggers, fork_seed(seed + total_done, n=len(names)))]
        builder, runner = _builder_runner(target_name, cores)
        batch = batch_size or default_batch(remaining)
        progress = _Progress(names, done, total_done, trials, log)
        t0 = time.time()
        stop = StopRequest(None if max_seconds is None else t0 + max_seconds)
        stopped = None
        try:
            with stop_on_signals(stop, log):
                ms.tune_tasks(tasks=tasks, task_weights=[1.0] * len(tasks), work_dir=str(log_dir),
                              max_trials_global=remaining, num_trials_per_iter=batch, builder=builder,
                              runner=runner, database=db, cost_model="xgb",
                              # the stop check last: the batch is in the database when it ends the run
                              measure_callbacks=[progress, *ms.measure_callback.MeasureCallback.create("default"),
                                                 StopAfterBatch(stop)],
                              task_scheduler="gradient")
        except Exception as err:  # noqa: BLE001  (through TVM's FFI the callback's error comes back a RuntimeError)
            if STOP_MARK not in str(err):
                raise
            stopped = str(err).split(STOP_MARK + ": ", 1)[1].splitlines()[0]
            log(f"[ms-default] {wl.dir_name}: stopped after {progress.total}/{trials} trials ({stopped}); "
                f"run again to continue")
        run = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "seconds": round(time.time() - t0, 1), "batch": batch, "workers": cores,
               "tasks": {n: {k: progress.stats[n][k] for k in ("trials", "valid", "invalid")} for n in names}}
        if stopped:
            run["stopped"] = stopped
        ran = progress.stats
        errors = {n: progress.stats[n]["error"] for n in names}
    else:
        errors = {}
    db = _open_db(wl_dir, create=False)
    summary_tasks, failed = {}, []
    for n, m in mods.items():
        recs = _records_of(db, m)
        best = best_record(db, m)
        valid = sum(_mean_secs(r) is not None for r in recs)
        summary_tasks[n] = {"trials": max(len(recs), prev.get(n, {}).get("trials", 0) + ran[n]["trials"]),
                            "valid": max(valid, prev.get(n, {}).get("valid", 0) + ran[n]["valid"]),
                            "best_secs": best[0] if best else None}
        if best is None:
            failed.append(n)
    meta = {"what": "Meta-Schedule default space, unfused op (gemm -> softmax)", "target": target_name,
            "target_json": target.export() if hasattr(target, "export") else str(target),
            "workload": wl.to_json(), "variant": wl.variant.key, "canonical_sizes": list(wl.canonical.sizes),
            "trials": sum(t["trials"] for t in summary_tasks.values()), "budget": trials,
            "tasks": summary_tasks,
            "best_secs_total": (sum(t["best_secs"] for t in summary_tasks.values()) if not failed else None),
            "task_scheduler": "gradient",
            "strategy": strategy if isinstance(strategy, str) else type(strategy).__name__,
            "cost_model": "xgb", "environment": environment(target_name),
            **({"pruned": meta_old["pruned"]} if "pruned" in meta_old else {}),
            "runs": list(meta_old.get("runs", [])) + ([run] if run else [])}
    tmp = wl_dir / (META + ".tmp")
    tmp.write_text(json.dumps(json_safe(meta), indent=1) + "\n")
    os.replace(tmp, wl_dir / META)
    if failed and run is not None and run.get("stopped") and meta["trials"] < trials:
        # a slice stopped early: the task scheduler may not have reached a task yet; the next run goes on
        for n in TASKS:
            t = summary_tasks[n]
            log(f"[ms-default] {wl.dir_name}: {n}: " + (f"best {t['best_secs'] * 1e6:.1f} us" if t["best_secs"]
                else "no valid candidate yet") + f" ({t['valid']}/{t['trials']} valid)")
        return meta
    if failed:
        parts = []
        for n in failed:
            why = errors.get(n)
            why = (" First failure: " + why.splitlines()[-1][:400]) if why else ""
            parts.append(f"{n} ({summary_tasks[n]['trials']} trials, none valid).{why}")
        raise TuningError(f"{wl.dir_name} on {target_name}: no valid candidate for task " + "; ".join(parts)
                          + f" See {wl_dir / 'work' / 'logs'}.")
    for n in TASKS:
        t = summary_tasks[n]
        log(f"[ms-default] {wl.dir_name}: {n}: best {t['best_secs'] * 1e6:.1f} us ({t['valid']}/{t['trials']} valid)")
    log(f"[ms-default] {wl.dir_name}: gemm + softmax = {meta['best_secs_total'] * 1e6:.1f} us; database {wl_dir}")
    return meta


def prune_unfused(wl, target_name: str, work_dir: os.PathLike, keep: int = 10, log: Callable = print) -> dict:
    """Keep only the `keep` fastest valid records of each task (distinct traces: database.top_records) in
    work_dir's database (what gets committed: a 1024-trial database holds ~1000 records, ~14 MB of JSON). The
    trial counts stay in ms_default.json, so a later tune_unfused still continues toward its total; its search just
    no longer sees the dropped records. Needs no device. Returns the updated summary."""
    target_name = targets.resolve(target_name)
    if keep < 1:
        raise ValueError("keep must be >= 1")
    wl_dir = Path(work_dir)
    meta = _read_meta(wl_dir)
    if not meta:
        raise TuningError(f"{wl_dir} has no {META}: nothing tuned there to prune (tune it first)")
    _check_meta(wl_dir, meta, wl, target_name)
    mods = task_modules(wl)
    register_intrinsics(target_name)
    db = _open_db(wl_dir, create=False)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=wl_dir))
    try:
        new = ms.database.JSONDatabase(work_dir=str(tmp), allow_missing=True)
        kept = {}
        for n, m in mods.items():
            recs = _records_of(db, m)
            task = meta["tasks"].setdefault(n, {})
            # a run killed before it wrote ms_default.json left more records than it counts
            task["trials"] = max(task.get("trials", 0), len(recs))
            task["valid"] = max(task.get("valid", 0), sum(_mean_secs(r) is not None for r in recs))
            top = database.top_records(m, [db], keep)
            task["best_secs"] = _mean_secs(top[0]) if top else None
            workload = new.commit_workload(m)
            for r in top:
                new.commit_tuning_record(ms.database.TuningRecord(r.trace, workload, r.run_secs, r.target,
                                                                  r.args_info))
            kept[n] = len(top)
        meta["trials"] = sum(t["trials"] for t in meta["tasks"].values())
        bests = [t["best_secs"] for t in meta["tasks"].values()]
        meta["best_secs_total"] = sum(bests) if all(bests) else None
        meta["pruned"] = {"keep": keep, "records_kept": kept,
                          "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        (tmp / META).write_text(json.dumps(meta, indent=1) + "\n")
        for f in (*DB_FILES, META):  # each rename atomic; the counts (META) last
            os.replace(tmp / f, wl_dir / f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"[ms-default] {wl.dir_name}: kept the fastest valid records, at most {keep} distinct ones per task "
        f"({', '.join(f'{n} {kept[n]}' for n in TASKS)}), of {meta['trials']} trials")
    return meta


def check_space(wl, target_name: str, samples: int = 64, log: Callable = print) -> dict:
    """Compile-only check of the default space (no device needed; CUDA codegen needs TVM's CUDA runtime, e.g.
    through flashgemm/codegen/cuda_stub.py): per task, generate the design space, sample up to `samples` candidates
    (seeded) until one passes the space's postprocessors, and build it as the builder does. Returns per task
    {"sketches", "sampled", "valid", "built", "error", "source"} (source: the CUDA source, or None).
    Valid rates of the default CUDA space can be low (bf16 GEMMs, no tensor cores: ~1 sample in 60 passes
    VerifyGPUCode; the evolutionary search samples hundreds), hence the default of 64 samples."""
    from tvm.s_tir.schedule import Trace  # noqa: PLC0415
    target_name = targets.resolve(target_name)
    target = targets.tvm_target(target_name)
    register_intrinsics(target_name)  # the cuda-tensorcore rules name TVM's tensor intrinsics
    out = {}
    for name, mod in task_modules(wl).items():
        ctx = ms.TuneContext(mod=mod, target=target, task_name=name, rand_state=1,
                             space_generator="post-order-apply")
        sketches = ctx.generate_design_space()
        res = {"sketches": len(sketches), "sampled": 0, "valid": 0, "built": False, "error": None, "source": None}
        for seed in range(1, samples + 1):
            res["sampled"] += 1
            sch = tvm.s_tir.Schedule(mod, seed=seed)
            try:
                Trace(sketches[seed % len(sketches)].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
                if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
                    continue
            except Exception:  # noqa: BLE001  (a sample the space rejects, as the search would)
                continue
            res["valid"] += 1
            try:
                if targets.is_cuda(target_name):
                    ex = compile_cuda(sch.mod, target)
                    res["source"] = ex.mod.imports[0].inspect_source("cuda")
                else:
                    with target:
                        tvm.compile(sch.mod, target=target)
                res["built"], res["error"] = True, None
                break
            except Exception as err:  # noqa: BLE001
                res["error"] = str(err).strip().splitlines()[-1][:400]
        tc = res["source"] is not None and any(x in res["source"] for x in ("wmma::", "mma.sync", "mma_sync"))
        log(f"[ms-default] {wl.dir_name} {name} on {target_name}: {res['sketches']} sketches, {res['valid']} of "
            f"{res['sampled']} samples valid, " + ("built" if res["built"] else f"none built ({res['error']})")
            + (" (tensor cores)" if tc else ""))
        out[name] = res
    return out


# ----------------------------------------------------------------------------- loading and running
def _candidates(wl, target_name: str, where: Optional[os.PathLike]) -> list:
    """Where a workload's database may be: `where` itself (a workload directory), <where>/<target>/<dir_name>
    (an ms_default root such as flashgemm/databases/ms_default) or <where>/ms_default/<target>/<dir_name> (the fused-op
    database root, e.g. flashgemm/databases/, as benchmarks/peers.py passes it); the default root when where is None."""
    if where is None:
        return [workload_dir(None, target_name, wl.dir_name)]
    p = Path(where)
    return [p, p / target_name / wl.dir_name, p / "ms_default" / target_name / wl.dir_name]


def find_dir(wl, target_name: str, where: Optional[os.PathLike] = None) -> Path:
    """The workload's database directory; LookupError (with the command that makes it) when there is none."""
    target_name = targets.resolve(target_name)
    cands = _candidates(wl, target_name, where)
    for c in cands:  # ms_default.json marks our directories (a fused-op database has the same two JSON files)
        if (c / META).exists():
            return c
    raise LookupError(f"no Meta-Schedule default database for {wl.dir_name} on {target_name} (looked in "
                      f"{', '.join(str(c) for c in dict.fromkeys(cands))}); make it on a machine with the GPU "
                      f"(or on the CPU for llvm) with: {tune_command(wl, target_name)}  (it writes to "
                      f"{workload_dir(None, target_name, wl.dir_name)}"
                      f"; --db ROOT writes to ROOT/{target_name}/{wl.dir_name})")


def _build(mod: tvm.IRModule, target_name: str):
    target = targets.tvm_target(target_name)
    if targets.is_cuda(target_name):
        return compile_cuda(mod, target)["main"]  # = flashgemm.spaces.cuda_space.build, plus the retry
    with target:
        return tvm.compile(mod, target=target)["main"]


def load_schedules(wl, target_name: str, work_dir: Optional[os.PathLike] = None) -> list:
    """[(task name, best schedule, its measured seconds)] in run order."""
    target_name = targets.resolve(target_name)
    wl_dir = find_dir(wl, target_name, work_dir)
    meta = _read_meta(wl_dir)
    _check_meta(wl_dir, meta, wl, target_name)
    register_intrinsics(target_name)
    db = _open_db(wl_dir, create=False)
    out = []
    for name, mod in task_modules(wl).items():
        best = best_record(db, mod)
        if best is None:
            raise LookupError(f"{wl_dir} has no valid record for the {name} task of {wl.dir_name} (tuning did not "
                              f"finish, or the kernel definition changed since); tune again: "
                              f"{tune_command(wl, target_name)}")
        sch = tvm.s_tir.Schedule(mod)
        best[1].trace.apply_to_schedule(sch, remove_postproc=False)
        out.append((name, sch, best[0]))
    return out


def load_unfused(wl, target_name: str, work_dir: Optional[os.PathLike] = None) -> list:
    """The compiled best kernel of each task, [gemm, softmax], built the way they were measured
    (flashgemm.spaces.cuda_space.build for CUDA, tvm.compile in the target scope for llvm)."""
    target_name = targets.resolve(target_name)
    return [_build(sch.mod, target_name) for _, sch, _ in load_schedules(wl, target_name, work_dir)]


def _compact_strides(shape) -> tuple:
    out, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = acc
        acc *= shape[i]
    return tuple(out)


def kernel_views(wl, feeds: dict) -> dict:
    """The torch feeds ('A', 'B', optional 'bias', 'mask': the op's ONNX-level tensors) as the compact 4-D views
    the kernels take (tensor_shapes): canonical strides with the broadcast dims dropped to extent 1; a bool
    mask is viewed as uint8. Tensors that are not laid out as the canonical form expects are copied once."""
    import torch  # noqa: PLC0415
    c = wl.canonical
    shapes = tensor_shapes(wl)
    canon = {"A": c.a_strides, "B": c.b_strides, "bias": c.bias_strides, "mask": c.mask_strides}
    out = {}
    for name in ("A", "B", "bias", "mask"):
        if name not in shapes:
            if name in feeds and feeds[name] is not None:
                raise ValueError(f"feed {name!r} given but workload {wl.dir_name} has none")
            continue
        if feeds.get(name) is None:
            raise ValueError(f"workload {wl.dir_name} needs the feed {name!r}")
        t = feeds[name]
        if name == "mask" and t.dtype == torch.bool:
            t = t.view(torch.uint8)
        shape = shapes[name][0]
        if math.prod(shape) != t.numel():
            raise ValueError(f"feed {name!r} of shape {tuple(t.shape)} does not match workload {wl.dir_name}")
        flat, strides, compact = t.contiguous().reshape(-1), canon[name], _compact_strides(shape)
        if all(d == 1 or st == cs for d, st, cs in zip(shape, strides, compact)):
            view = flat.as_strided(shape, compact)
        else:  # not expected (canonicalize keeps each tensor's own compact layout), but never wrong
            view = flat.as_strided(shape, [st if d > 1 else 0 for d, st in zip(shape, strides)]).contiguous()
        out[name] = view
    return out


def prepare_unfused(wl, target_name: str, work_dir: Optional[os.PathLike] = None) -> Callable:
    """prepare(feeds) -> run: feeds are torch tensors ('A', 'B', optional 'bias', 'mask' bool or additive:
    benchmarks/peers.py's torch_inputs), on the GPU for a CUDA target or the CPU for llvm; run() launches the
    tuned gemm then the tuned softmax and returns P (a torch tensor of the op's output shape). work_dir: see
    find_dir. LookupError (with the tuning command) when the workload was not tuned."""
    gemm, softmax = load_unfused(wl, target_name, work_dir)  # first: a missing database is the error to report
    import torch  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415

    c = wl.canonical
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[wl.dtype]

    def prepare(feeds):
        dev = feeds["A"].device
        v = kernel_views(wl, feeds)
        s = torch.empty((c.b0, c.b1, c.m, c.n), dtype=dtype, device=dev)
        p = torch.empty(c.out_shape, dtype=dtype, device=dev)
        p4 = p.view(c.b0, c.b1, c.m, c.n)
        g_args = [tvm_ffi.from_dlpack(x) for x in (v["A"], v["B"], *([v["bias"]] if "bias" in v else []), s)]
        s_args = [tvm_ffi.from_dlpack(x) for x in (s, *([v["mask"]] if "mask" in v else []), p4)]

        def run():
            gemm(*g_args)
            softmax(*s_args)
            return p
        return run
    return prepare

