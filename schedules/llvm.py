"""CPU (llvm) schedules.

* `generic_schedule`: a fixed schedule for the symbolic-size kernels (one per variant) that serve every
  shape nobody tuned: rows of all batches in parallel, the whole row pipeline (GEMM row, max, exp, sum,
  normalize) computed at the row so S never leaves the per-row scratch, innermost loops unit-stride for
  LLVM's loop vectorizer.
* `export_target`: the llvm target the bundle is compiled for (host vector ISA, reassociable reductions).
* `design_space`: what Meta-Schedule searches for a tuned llvm kernel — its default llvm rules, except
  that MultiLevelTiling may not fuse a write cache into the consumer: with the softmax blocks after the
  GEMM that fusion fails (reverse_compute_at: "producers not present under the target loop") and
  takes the whole space generation down. The GPU spaces are our own (cuda_*.py).
"""
from __future__ import annotations

import platform

import tvm
from tvm.s_tir import meta_schedule as ms

from .worker_init import ignore_stop_signals


def _trans_b(sch: tvm.s_tir.Schedule, s) -> bool:
    """Whether block "S" reads B as [..., N, K] (its last index is the reduction variable)."""
    block = sch.get(s)
    vk = block.iter_vars[4].var
    return any(r.source.name == "Bm" and r.region[3].min.same_as(vk) for r in block.reads)


def generic_schedule(func: tvm.tirx.PrimFunc) -> tvm.s_tir.Schedule:
    """Rows of all batches (B0 * B1 * M) in parallel; each row's pipeline (GEMM row, max, exp, sum, normalize)
    computed at the row, so S, E and the row statistics live in N-sized per-row scratch.

    Every size stays symbolic, so the schedule makes no vectors itself (a split of a symbolic loop leaves a
    predicate that TVM's vectorizer scalarizes): it lays the loops out so that LLVM's loop vectorizer, which handles
    runtime trip counts and tails, finds unit-stride innermost loops, and `export_target` gives it the host's vector
    ISA (F16C/AVX: the fp16 -> fp32 widening becomes one instruction, not a libcall per multiply-add) and lets it
    reassociate float reductions.
    * "S" without transB: the k loop outside, j inside: S[j] += A[i, k] * B[k, j] over a contiguous row of B, no
      reduction in the inner loop. The row of S is zeroed first (decompose_reduction).
    * "S" with transB: j outside, k inside: a dot product of two contiguous rows, a reduction over k that LLVM
      vectorizes only because fast-math-reassoc allows it to (k outside would read B with stride K: 3x slower).
    * "row_max", "row_sum": reductions over j, vectorized the same way; "exp" and "P": elementwise over j.
    Numerics: only the order of the fp32 additions in the GEMM and the row sum changes (NaN and inf propagate as in
    any order); masking, the fully-masked-row zeros and the NaN rows are the template's Selects, untouched."""
    sch = tvm.s_tir.Schedule(func)
    out = sch.get_sblock("P")
    b0, b1, i, _ = sch.get_loops(out)
    row = sch.fuse(b0, b1, i)
    sch.parallel(row)
    for name in ("row_sum", "exp", "row_max", "S"):
        sch.compute_at(sch.get_sblock(name), row)
    s = sch.get_sblock("S")
    j, k = sch.get_loops(s)[1:]
    sch.decompose_reduction(s, j)
    if not _trans_b(sch, s):
        sch.reorder(k, j)
    return sch


# The x86-64 ISA level llvm bundles are compiled for where the building CPU has it: AVX2, FMA and F16C (the fp16 ->
# fp32 widening in one instruction, not a libcall per multiply-add), so a bundle runs on any CPU of that level
# (Intel since 2013, AMD since 2015), not only on the one that built it. The op checks it when it loads the bundle
# (manifest "cpu", ort_integration/src/bundle.cc): a CPU without it gets an error, never an illegal instruction.
X86_LEVEL = "x86-64-v3"
_X86_LEVEL_FLAGS = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}  # /proc/cpuinfo's names


def export_mcpu() -> str:
    """-mcpu of an llvm bundle: X86_LEVEL where this x86-64 CPU has it, else this CPU's own (LLVM's name for it)."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        try:
            flags = set(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split())
        except (OSError, StopIteration):
            flags = set()
        if _X86_LEVEL_FLAGS <= flags:
            return X86_LEVEL
    return tvm.target.codegen.llvm_get_system_cpu()


def export_target(target: tvm.target.Target) -> tvm.target.Target:
    """The llvm target the bundle is compiled for: `target` plus -mcpu (export_mcpu, for a vector ISA) and
    fast-math-reassoc (vectorized float reductions; see generic_schedule). No other fast-math flag: nnan/ninf would
    break the NaN-row and masking contract, arcp/afn would change exp and the division."""
    attrs = dict(target.export())
    attrs.setdefault("mcpu", export_mcpu())
    attrs["fast-math-reassoc"] = True
    return tvm.target.Target(attrs)


def design_space() -> ms.space_generator.SpaceGenerator:
    # Meta-Schedule's llvm rules import TVM's tensor intrinsics when a TuneContext starts: through
    # schedules.tensor_intrin they are parsed with the shallow stack (13 s instead of 34 on the 2-core box)
    from . import tensor_intrin  # noqa: F401,PLC0415
    rules = []
    for rule in ms.ScheduleRule.create("llvm"):
        if isinstance(rule, ms.schedule_rule.MultiLevelTiling):
            rule = ms.schedule_rule.MultiLevelTiling(
                structure="SSRSRS", tile_binds=None, max_innermost_factor=64, vector_load_lens=None,
                reuse_read=None, reuse_write=ms.schedule_rule.ReuseType(req="no", levels=[1, 2], scope="global"))
        rules.append(rule)
    return ms.space_generator.PostOrderApply(
        sch_rules=rules, postprocs="from-target", mutator_probs="from-target")


def build(mod, target, _params=None):
    """Meta-Schedule f_build for llvm. The default one imports tvm.s_tir.tensor_intrin in every fresh
    builder worker (16 s on a 2-core machine: builds then time out at 30 s); the CPU needs none of it."""
    import tvm  # noqa: PLC0415  (runs in a builder worker)

    with target:
        return tvm.compile(mod, target=target).mod


def builder(workers: int) -> ms.builder.Builder:
    return ms.builder.LocalBuilder(max_workers=workers, f_build=build, initializer=ignore_stop_signals)


def evaluator_config() -> ms.runner.EvaluatorConfig:
    # Caches are not flushed between repeats: the CPU kernels are small and the demo measures warm runs.
    return ms.runner.EvaluatorConfig(number=3, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=False)


def runner() -> ms.runner.Runner:
    return ms.runner.LocalRunner(evaluator_config=evaluator_config(), initializer=ignore_stop_signals)
