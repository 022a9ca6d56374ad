"""CPU (llvm) schedules.

* `generic_schedule`: a fixed schedule for the symbolic-size kernels (one per variant) that serve every
  shape nobody tuned: rows of all batches in parallel, the whole row pipeline (GEMM row, max, exp, sum,
  normalize) computed at the row so S never leaves the per-row scratch.
* `design_space`: what Meta-Schedule searches for a tuned llvm kernel — its default llvm rules, except
  that MultiLevelTiling may not fuse a write cache into the consumer: with the softmax blocks after the
  GEMM that fusion fails (reverse_compute_at: "producers not present under the target loop") and
  takes the whole space generation down. The GPU spaces are our own (cuda_*.py).
"""
from __future__ import annotations

import tvm
from tvm.s_tir import meta_schedule as ms

from .worker_init import ignore_stop_signals


def generic_schedule(func: tvm.tirx.PrimFunc) -> tvm.s_tir.Schedule:
    sch = tvm.s_tir.Schedule(func)
    out = sch.get_sblock("P")
    b0, b1, i, _ = sch.get_loops(out)
    row = sch.fuse(b0, b1, i)
    sch.parallel(row)
    for name in ("row_sum", "exp", "row_max", "S"):
        sch.compute_at(sch.get_sblock(name), row)
    return sch


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
