"""flashgemm/spaces/mutate_categorical.py: the evolutionary search moves every categorical knob of the CUDA spaces.

CPU only: the design space of W1 on sm_90 is generated (no build), mutated and searched with a random cost model.
"""
from __future__ import annotations

import pytest
import tvm
from tvm.s_tir import meta_schedule as ms

from flashgemm.spaces import cuda_space
from flashgemm import targets
from flashgemm.spaces.mutate_categorical import MutateCategorical
from flashgemm.op.workloads import parse
from flashgemm.spaces.kernel_forms import tuning_module
from flashgemm.spaces.intrinsics import register_intrinsics

ARCH = "sm_90"


@pytest.fixture(scope="module")
def w1():
    register_intrinsics(ARCH)
    mod = tuning_module(parse("bert-large", "float16"), ARCH)
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(ARCH), space_generator=cuda_space.design_space(ARCH),
                         task_name="main", rand_state=3, num_threads=2)
    return mod, ctx, ctx.generate_design_space()


def _categoricals(trace):
    return [(inst, int(trace.decisions[inst])) for inst in trace.insts
            if inst.kind.name == "SampleCategorical" and inst in trace.decisions]


def test_moves_one_categorical_knob_to_another_candidate(w1):
    mod, ctx, sketches = w1
    mutator = MutateCategorical()
    mutator._initialize_with_tune_context(ctx)
    trace = sketches[0].trace
    before = _categoricals(trace)
    assert len(before) >= 3, "the W1 sketch lost its categorical knobs (fetch widths, P width, unroll)"
    moved = set()
    for _ in range(120):
        after = _categoricals(mutator.apply(trace))
        changed = [i for i, ((_, d0), (_, d1)) in enumerate(zip(before, after)) if d0 != d1]
        assert len(changed) == 1, "exactly one knob moves a mutation"
        i = changed[0]
        assert 0 <= after[i][1] < len(before[i][0].attrs[0])
        moved.add(i)
    assert moved == set(range(len(before))), "every categorical knob is reachable"
    sch = tvm.s_tir.Schedule(mod)
    mutator.apply(trace).apply_to_schedule(sch, remove_postproc=True)  # the mutant replays on the module


def test_no_categorical_knob_gives_none(w1):
    mod, ctx, _ = w1
    sch = tvm.s_tir.Schedule(mod)
    sch.get_loops(sch.get_sblock("S"))  # a trace with no sampling instruction
    assert MutateCategorical().apply(sch.trace) is None


def test_every_mutator_of_the_space_applies(w1):
    """A mutator that never applies only burns search attempts (MutateUnroll did: no space here annotates
    meta_schedule.unroll_*)."""
    _, ctx, sketches = w1
    assert any(isinstance(m, MutateCategorical) for m in cuda_space.mutator_probs())
    probs = ctx.space_generator.mutator_probs
    assert len(probs) == len(cuda_space.mutator_probs())
    for mutator in probs:
        mutator._initialize_with_tune_context(ctx)
        assert any(mutator.apply(s.trace) is not None for s in sketches for _ in range(3)), mutator


def test_evolutionary_search_runs_with_it(w1):
    """Meta-Schedule's C++ search calls the Python mutator from its worker threads: one small round of it."""
    mod, _, _ = w1
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(ARCH), space_generator=cuda_space.design_space(ARCH),
                         search_strategy=ms.search_strategy.EvolutionarySearch(
                             population_size=6, init_min_unmeasured=6, genetic_num_iters=2),
                         task_name="main", rand_state=7, num_threads=2).clone()
    strategy = ctx.search_strategy
    strategy.pre_tuning(max_trials=4, num_trials_per_iter=4, design_spaces=ctx.generate_design_space(),
                        database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    candidates = strategy.generate_measure_candidates()
    strategy.post_tuning()
    assert candidates and len(candidates) <= 4
