"""Read the committed databases back: the best record of each tuned workload, replayed onto the
runtime form of the kernel (static sizes, symbolic strides, `scale` as an argument)."""
from __future__ import annotations

import dataclasses
import math
import os
import struct
import warnings
from pathlib import Path
from typing import Callable, Optional

import tvm
import tvm_ffi

from flashgemm.codegen import device_pass
from flashgemm import targets
from flashgemm.op.variant import CanonicalShape, Variant
from flashgemm.kernel.fused_gemm_softmax import runtime_func, tuning_func
from flashgemm.op.workloads import parse

from flashgemm.tune import database as dbm
from flashgemm.bundle import twins
from flashgemm.spaces.kernel_forms import Form, form_of, forms, tuning_module, tuning_modules
from flashgemm.spaces.intrinsics import register_intrinsics
from flashgemm.bundle.workers import from_portable, made_in_workers, portable


TENSOR_CORE_ALIGN = 64  # bytes; see flashgemm.kernel.fused_gemm_softmax.runtime_func


@dataclasses.dataclass
class TunedKernel:
    workload: str
    variant: Variant
    shape: CanonicalShape
    schedule: tvm.s_tir.Schedule  # runtime_func(variant, shape, any_batch=...) with the best trace applied
    run_secs: Optional[float] = None
    source_target: Optional[str] = None  # set when the record was tuned on another arch (transfer)
    any_batch: bool = False  # the schedule's batch dims are symbolic: it serves every batch of its M, N, K
    kind: str = "tuned"  # "tuned" (a measured record) or "default" (flashgemm/spaces/cuda_default: by rule)
    form: str = "one-pass"  # the kernel form the schedule is on (flashgemm.spaces.kernel_forms.forms)
    # the twin of an any-batch kernel: the same trace with one batch dim static (runtime_func's fixed_batch:
    # (0, 1) when tuned with B0 = 1, else (1, the tuned B1)); the bundle serves the calls with that dim's value by
    # it (constant index math), the others by `schedule`
    twin: Optional[tvm.s_tir.Schedule] = None
    fixed_batch: Optional[tuple] = None
    # the tuned workload's scale (float32), set with the twin: the bundle also ships the twin specialized on it
    # (with_scale), served to the calls whose scale attribute is exactly this value
    scale: Optional[float] = None
    # CUDA: the registers a thread the measured (tuning) form took; the export compiles schedule and twin with that
    # cap (flashgemm.codegen.cuda_build.MAX_REGISTERS_ATTR: their index math may cost the few registers that lose a
    # block)
    max_registers: Optional[int] = None
    # an any-length kernel (flashgemm.bundle.any_length): serves every M <= bound[0], N <= bound[1] of its variant and K
    bound: Optional[tuple] = None
    # an any-length kernel's twin serves only the calls whose N is a multiple of this (any_length_twin), and may be
    # of another form than the kernel (twin_form; None: the kernel's)
    n_multiple: int = 1
    twin_form: Optional[str] = None

    def shipped_func(self, sch: tvm.s_tir.Schedule, symbol: str, scale: Optional[float] = None) -> tvm.tirx.PrimFunc:
        """`sch`'s (the schedule's or the twin's) function as compiled for shipping: named `symbol`, with the
        measured form's register cap, and specialized on `scale` when given (with_scale)."""
        func = sch.mod["main"].with_attr("global_symbol", symbol)
        if scale is not None:
            func = with_scale(func, scale)
        if self.max_registers:
            from flashgemm.codegen.cuda_build import MAX_REGISTERS_ATTR  # noqa: PLC0415  (CUDA only)
            func = func.with_attr(MAX_REGISTERS_ATTR, self.max_registers)
        return func


# the twin of an any-length kernel: the recompute form over its bound (kernel_forms) for the calls with
# B0 = 1 (contiguous batches, which canonicalize() merges into B1) and N a multiple of 4 (P in vector stores:
# flashgemm.kernel.fused_gemm_softmax._padded's n_multiple); 4, the staged P's vector width on every bound
# (cuda_recompute.p_vector_width), and two fragment columns' pair with room to spare. With a bias or mask the batch
# stays symbolic (ANY_LENGTH_TWIN minus fixed_batch): a padding mask [B, 1, 1, N] keeps B0 = batch.
ANY_LENGTH_TWIN = {"fixed_batch": (0, 1), "n_multiple": 4}


def any_length_twin_args(variant: Variant) -> dict:
    """runtime_func's twin arguments of an any-length kernel of `variant` (ANY_LENGTH_TWIN above)."""
    if variant.has_bias or variant.mask != "none":
        return {"n_multiple": ANY_LENGTH_TWIN["n_multiple"]}
    return dict(ANY_LENGTH_TWIN)


def any_length_twin(trace, variant: Variant, shape: CanonicalShape, form, target: str) -> dict:
    """TunedKernel's twin, twin_form, fixed_batch and n_multiple of an any-length kernel on `form` (kernel_forms.Form)
    whose bound has a twin form (kernel_forms.any_length_twin_form), else {}. The trace itself where the kernel is that
    form already; else (a one-pass kernel) the twin form's default schedule (flashgemm/spaces/cuda_default)."""
    from flashgemm.spaces.kernel_forms import any_length_twin_form  # noqa: PLC0415
    twin_form = any_length_twin_form(variant, form.bound, shape.sizes[4], target) if form.bound else None
    if twin_form is None:
        return {}
    if form != twin_form:
        from flashgemm.spaces import cuda_default, cuda_space  # noqa: PLC0415  (CUDA only)
        mod = tvm.IRModule({"main": tuning_func(variant, shape, 1.0, bound=twin_form.bound, recompute=True)})
        try:
            trace, _ = cuda_default.default_trace(mod, target)
        except cuda_space.UnsupportedShapeError:
            return {}
    args = any_length_twin_args(variant)
    sch = tvm.s_tir.Schedule(runtime_func(variant, shape, align=TENSOR_CORE_ALIGN, any_batch=True,
                                          bound=twin_form.bound, recompute=True, **args))
    trace.apply_to_schedule(sch, remove_postproc=False)
    return {"twin": sch, "twin_form": twin_form.name, "fixed_batch": args.get("fixed_batch"),
            "n_multiple": args["n_multiple"]}


def with_scale(func: tvm.tirx.PrimFunc, scale: float) -> tvm.tirx.PrimFunc:
    """`func` with its `scale` argument replaced by the constant `scale` in the body; the argument stays (the calling
    convention is every kernel's) and is ignored. Why: with a constant scale the compile pipeline takes it out of the
    row max (flashgemm/codegen/tir/take_scale_out_of_max), ~2.5 % on W1's twin; the tuning forms, which Meta-Schedule
    timed, have it constant too. The bundle serves such a kernel only to calls with exactly this scale (manifest
    "scale")."""
    param = func.params[-1]
    if param.name != "scale" or str(param.ty.dtype) != "float32":
        raise ValueError(f"{func.attrs.get('global_symbol', 'kernel')}: the last argument is not the float32 scale")
    return with_constant_argument(func, param, tvm.tirx.FloatImm("float32", float(scale)))


def with_constant_argument(func: tvm.tirx.PrimFunc, param, value) -> tvm.tirx.PrimFunc:
    """`func` with the scalar argument `param` replaced by `value` in the body; the argument stays (the calling
    convention is every kernel's) and is ignored."""
    body = tvm_ffi.structural_map(func.body, ((tvm.tirx.Var, lambda v: value if v.same_as(param) else v),))
    return func.with_body(body)


def float32(x: float) -> float:
    """x rounded to float32 (what the ORT op's scale attribute holds), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


_MAX_REGISTERS_CACHE: dict = {}


def _max_registers(rec, target: str, compile_limit_s: Optional[float] = None) -> Optional[int]:
    """TunedKernel.max_registers of a record: its tuning form compiled for `target` (None on llvm). With
    compile_limit_s, compiled in a worker process killed with its nvcc past that many seconds
    (kernel_library.run_compiles), as the bundle's own compiles are; a compile that fails or runs past it leaves the
    kernel without a cap, with a warning."""
    if not targets.is_cuda(target) or not device_pass.enabled("cap_registers"):  # (disabled: A/B timing)
        return None
    key = (str(rec.trace), str(rec.workload.mod), target)
    if key not in _MAX_REGISTERS_CACHE:
        sch = tvm.s_tir.Schedule(rec.workload.mod)
        rec.trace.apply_to_schedule(sch, remove_postproc=False)
        try:
            if compile_limit_s:
                _MAX_REGISTERS_CACHE[key] = _registers_in_worker(sch.mod, target, compile_limit_s)
            else:
                from flashgemm.codegen import cuda_build  # noqa: PLC0415
                _MAX_REGISTERS_CACHE[key] = cuda_build.kernel_registers(sch.mod, targets.tvm_target(target))
        except Exception as err:  # noqa: BLE001  (the shipped forms then compile without a cap, as before)
            warnings.warn(f"the register use of a tuned kernel could not be measured ({str(err).strip()[:200]}); "
                          f"its shipped forms are compiled without a register cap")
            _MAX_REGISTERS_CACHE[key] = None
    return _MAX_REGISTERS_CACHE[key]


def _registers_in_worker(mod, target: str, limit_s: float) -> Optional[int]:
    """cuda_build.kernel_registers(mod) in a compile worker limited to limit_s seconds; RuntimeError with the reason
    (one line) when it fails or runs past the limit."""
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    from flashgemm.bundle import kernel_library  # noqa: PLC0415  (it imports this module)
    work = Path(tempfile.mkdtemp(prefix="flashgemm-registers-"))
    out = work / "registers.txt"
    failure = kernel_library.run_compiles([kernel_library.CompileJob("registers", mod, out, registers=True)],
                                          target, limit_s, work, parallel=1)["registers"]
    value = None if failure is not None else out.read_text().strip()
    if failure is None or failure.log is None:  # else the message names the log in it
        shutil.rmtree(work, ignore_errors=True)
    if failure is not None:
        raise RuntimeError(failure.why())
    return None if value == "none" else int(value)


def _replay(trace, wl, target: str, form: Optional[Form] = None) -> tuple[tvm.s_tir.Schedule, bool]:
    """A tuning trace (postprocessors included) on the runtime kernel, with symbolic batch dims when the trace allows
    (our CUDA space never splits the batch loops; Meta-Schedule's llvm space may tile them, and then the batch stays
    static). Returns (schedule, any_batch)."""
    form = form or forms(wl, target)[0]
    for any_batch in (True, False):
        try:
            return on_runtime_func(trace, wl, target, form, any_batch), any_batch
        except Exception:  # noqa: BLE001
            if not any_batch:
                raise
    raise AssertionError("unreachable")


def on_runtime_func(trace, wl, target: str, form: Form, any_batch: bool, fixed_batch=None) -> tvm.s_tir.Schedule:
    """A tuning trace replayed on the runtime function of `form` (symbolic strides, scale an argument): any batch,
    static batch dims, or one of them fixed (fixed_batch: (dim, size), the twin). Raises where the trace does not
    replay there."""
    align = TENSOR_CORE_ALIGN if targets.is_cuda(target) else 2
    sch = tvm.s_tir.Schedule(runtime_func(wl.variant, wl.canonical, align=align, any_batch=any_batch,
                                          chunk=form.chunk, pad=form.pad, recompute=form.recompute,
                                          stat_cols=form.stat_cols,
                                          fixed_batch=fixed_batch, bound=form.bound))
    trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


def _twin(trace, wl, target: str, form: Optional[Form], any_batch: bool) -> dict:
    """TunedKernel's twin, fixed_batch and scale for an any-batch kernel (empty for the others): B0 fixed at 1 when it
    was tuned with B0 = 1 (B1 = batch x heads varies), else B1 fixed at its tuned value (B0 = batch varies)."""
    if not any_batch:
        return {}
    b0, b1 = wl.canonical.sizes[:2]
    fixed = (0, 1) if b0 == 1 else (1, b1)
    try:
        return {"twin": on_runtime_func(trace, wl, target, form or forms(wl, target)[0], True, fixed),
                "fixed_batch": fixed, "scale": float32(wl.scale)}
    except Exception:  # noqa: BLE001  (not expected: the any-batch kernel, which did replay, then serves every batch)
        return {}


def workload_of(wl_dir: Path, prov: dict):
    try:
        return parse(prov["workload"]["spec"])
    except (KeyError, ValueError) as err:
        raise dbm.DatabaseError(f"{wl_dir}/{dbm.PROVENANCE} has no usable workload spec ({err})") from None


def load_tuned(wl_dir: Path, target: str, compile_limit_s: Optional[float] = None) -> TunedKernel:
    """The best record of a database tuned on `target`, on the runtime kernel. compile_limit_s: the time limit of the
    register measurement's compile (_max_registers; None: in this process, no limit)."""
    prov = dbm.read_provenance(wl_dir)
    dbm.check_target(wl_dir, prov, target)
    wl = workload_of(wl_dir, prov)
    modules = tuning_modules(wl, target)
    register_intrinsics(target)
    top = dbm.top_records([mod for _, mod in modules], [dbm.open_json_db(wl_dir)], 1)
    if not top:
        raise dbm.DatabaseError(f"{wl_dir} has no valid record for its workload {wl.spec()} "
                                f"(was the kernel definition changed since tuning? then tune again)")
    try:
        form = form_of(top[0], modules)
        sch, any_batch = _replay(top[0].trace, wl, target, form)
    except Exception as err:  # noqa: BLE001
        raise dbm.DatabaseError(f"the best record of {wl_dir} does not replay on the kernel: "
                                f"{str(err).strip().splitlines()[0]}") from err
    # the twin, unless a benchmark of this record found it slower than the plain kernel (flashgemm/bundle/twins.py)
    if form.bound:  # (an any-length kernel's twin: any_length_twin)
        twin = any_length_twin(top[0].trace, wl.variant, wl.canonical, form, target)
    else:
        twin = _twin(top[0].trace, wl, target, form, any_batch) if twins.ships_twin(prov) else {}
    return TunedKernel(wl_dir.name, wl.variant, wl.canonical, sch, dbm.mean_secs(top[0]), any_batch=any_batch,
                       form=form.name, max_registers=_max_registers(top[0], target, compile_limit_s),
                       bound=form.bound, **twin)


def transfer_tuned(wl_dir: Path, source: str, target: str, log: Callable = print,
                   compile_limit_s: Optional[float] = None) -> Optional[TunedKernel]:
    """The best record of a database tuned on CUDA arch `source` that is valid on CUDA arch `target`:
    records are tried best first, replayed on the runtime kernel and checked by the target's verifier
    (its shared-memory and thread limits: an H100 record may need more shared memory than an RTX 4090
    has). When no record fits, the space's default schedule for `target` (default_kernel); None when that
    does not fit either, and the generic kernel serves the shape. The kernel is compiled for
    `target` by the export like any other; its measured time is the source arch's, not the target's.
    compile_limit_s: as load_tuned's."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415

    from flashgemm.codegen import cuda_build  # noqa: PLC0415
    from flashgemm.spaces import cuda_space
    prov = dbm.read_provenance(wl_dir)
    dbm.check_target(wl_dir, prov, source)
    wl = workload_of(wl_dir, prov)
    # the records' keys are the source's forms; a record of a form the target does not take (split-N where the
    # target keeps rows resident, or the reverse) replays on none of the target's kernels and is skipped
    modules = tuning_modules(wl, source)
    target_forms = forms(wl, target)
    register_intrinsics(target)
    verify = cuda_space.VerifyGPUCodeArch(cuda_space.SMEM_LIMIT[target])
    verify._initialize_with_tune_context(ms.TuneContext(mod=modules[0][1], target=targets.tvm_target(target),
                                                        task_name="verify"))
    records = dbm.top_records([mod for _, mod in modules], [dbm.open_json_db(wl_dir)], 1 << 20)
    for rank, rec in enumerate(records):
        try:
            form = form_of(rec, modules)
            if form not in target_forms:
                continue
            sch, any_batch = _replay(rec.trace, wl, target, form)
            if target != "sm_90" and cuda_build.uses_wgmma(sch.mod):  # Hopper's wgmma: no other arch has it
                continue
            tuning_sch = tvm.s_tir.Schedule(rec.workload.mod)
            rec.trace.apply_to_schedule(tuning_sch, remove_postproc=False)
            if not verify.apply(tuning_sch):
                continue
        except Exception:  # noqa: BLE001  (a record this arch cannot take: try the next)
            continue
        log(f"[build] {wl_dir.name}: record #{rank + 1} of {source} fits {target} (transferred, not tuned there)")
        return TunedKernel(wl_dir.name, wl.variant, wl.canonical, sch, dbm.mean_secs(rec), source_target=source,
                           any_batch=any_batch, form=form.name,
                           max_registers=_max_registers(rec, target, compile_limit_s), bound=form.bound,
                           **(any_length_twin(rec.trace, wl.variant, wl.canonical, form, target) if form.bound
                              else _twin(rec.trace, wl, target, form, any_batch)))
    tk = default_kernel(wl, target, log=log, name=wl_dir.name)
    log(f"[build] {wl_dir.name}: none of the {len(records)} records of {source} fits {target}: "
        + ("the default schedule (untuned) serves it" if tk is not None else "generic kernel"))
    return tk


def default_kernel(wl, target: str, log: Callable = print, name: Optional[str] = None) -> Optional[TunedKernel]:
    """The tensor-core space's default (untuned) schedule of a workload on a CUDA target
    (flashgemm/spaces/cuda_default), on the runtime kernel; None, with the reason logged, for a shape only the generic
    kernel serves."""
    from flashgemm.spaces import cuda_default, cuda_space  # noqa: PLC0415
    if not targets.is_cuda(target):
        raise ValueError(f"default schedules exist for CUDA targets only, not {target!r} "
                         f"(the llvm generic kernel serves untuned shapes)")
    try:
        trace, _ = cuda_default.default_trace(tuning_module(wl, target), target)
    except cuda_space.UnsupportedShapeError as err:
        log(f"[build] {name or wl.name}: no default schedule ({err})")
        return None
    sch, any_batch = _replay(trace, wl, target)
    if wl.any_length:
        form = forms(wl, target)[0]
        return TunedKernel(name or wl.name, wl.variant, wl.canonical, sch, None, any_batch=any_batch, kind="default",
                           form=form.name, bound=wl.bound,
                           **any_length_twin(trace, wl.variant, wl.canonical, form, target))
    return TunedKernel(name or wl.name, wl.variant, wl.canonical, sch, None, any_batch=any_batch, kind="default",
                       **_twin(trace, wl, target, None, any_batch))


def with_defaults(tuned: list, workloads, target: str, log: Callable = print) -> list:
    """`tuned` plus a default-schedule kernel for each workload whose (variant, M, N, K) no tuned kernel has."""
    have = {(tk.variant.key, tuple(tk.shape.sizes[2:])): tk.kind for tk in tuned}
    out = list(tuned)
    for wl in workloads:
        if wl.attention:
            log(f"[build] {wl.name}: attention=1: FusedAttention's tensor-core kernels serve every length of its "
                f"head size (flashgemm-build --attention); no kernel of its own")
            continue
        key = (wl.variant.key, tuple(wl.canonical.sizes[2:]))
        if key in have:
            log(f"[build] {wl.name}: {'a tuned' if have[key] == 'tuned' else 'the same default'} kernel serves "
                f"{wl.spec()}")
            continue
        tk = default_kernel(wl, target, log)
        if tk is not None:
            have[key] = tk.kind
            out.append(tk)
            log(f"[build] {wl.name}: default schedule (untuned) for M={key[1][0]}, N={key[1][1]}, K={key[1][2]}")
    return out


def _gemm_softmax_dbs(root: Path) -> list:
    """The databases under `root` (one arch's) of FusedGemmSoftmax workloads; FusedAttention's (flashgemm-tune
    --attention) are read by flashgemm.bundle.attention_best."""
    if not root.is_dir():
        return []
    dirs = sorted(p for p in root.iterdir() if (p / dbm.PROVENANCE).exists())
    return [d for d in dirs if not workload_of(d, dbm.read_provenance(d)).attention]


def _portable_tuned(wl_dir: Path, target: str, source: Optional[str], compile_limit_s: Optional[float]) -> tuple:
    """For made_in_workers: load_tuned of wl_dir (source None) or its transfer_tuned from `source`, portable, and the
    lines logged."""
    lines = []
    if source is not None:
        return portable(transfer_tuned(wl_dir, source, target, lines.append, compile_limit_s)), lines
    tk = load_tuned(wl_dir, target, compile_limit_s)
    prov = dbm.read_provenance(wl_dir)
    left = "" if twins.ships_twin(prov) or not tk.any_batch else \
        f" (fixed-batch twin left out: slower than the plain kernel in {prov['twin'].get('source')})"
    lines.append(f"[build] tuned {wl_dir.name}: {tk.run_secs * 1e6:.1f} us measured{left}")
    return portable(tk), lines


def load_all(target: str, db_root: Optional[os.PathLike] = None, log: Callable = print,
             transfer_from: Optional[str] = "sm_90", compile_limit_s: Optional[float] = None) -> list[TunedKernel]:
    """Every tuned workload of `target` under db_root. For a CUDA target, workloads tuned only on
    `transfer_from` (default sm_90, the committed databases) are transferred: see transfer_tuned.
    An empty list when nothing applies. compile_limit_s: the time limit of each kernel's register measurement
    (CUDA; flashgemm-build passes its --compile-limit): a compile past it is killed and the kernel ships without a
    cap."""
    root = Path(db_root or dbm.default_root())
    own = _gemm_softmax_dbs(root / target)
    names = {wl_dir.name for wl_dir in own}
    src = root / str(transfer_from)
    transfer = [] if not (targets.is_cuda(target) and transfer_from and transfer_from != target and src.is_dir()) \
        else [d for d in _gemm_softmax_dbs(src) if d.name not in names]
    # each record's replay, twins and register measurement (an nvcc compile) take seconds: in worker processes
    tasks = [(d, target, None, compile_limit_s) for d in own] + [(d, target, transfer_from, compile_limit_s)
                                                                  for d in transfer]
    made = made_in_workers(_portable_tuned, tasks, log, "tuned kernels, workloads")
    kernels = [tk for tk in map(from_portable, made) if tk is not None]
    if not kernels:
        log(f"[build] no tuned workloads for {target} under {root}: generic kernels only")
    # Tuned kernels serve any batch: of two with one (variant, M, N, K) the bundle keeps the first, so put this
    # arch's own before transferred ones, then the faster per batch element.
    kernels.sort(key=lambda tk: (tk.source_target is not None,
                                 (tk.run_secs or math.inf) / max(1, tk.shape.sizes[0] * tk.shape.sizes[1])))
    return kernels
