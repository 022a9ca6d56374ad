"""MutateCategorical: the evolutionary search's move for the spaces' categorical knobs.

Meta-Schedule's mutators cover tile sizes (MutateTileSize), thread-binding extents, compute locations,
parallel extents, and the categorical draw of an unroll depth only where it feeds a
`meta_schedule.unroll_explicit/implicit` annotation (MutateUnroll). Our spaces' categorical knobs are the
cooperative-fetch vector widths, the P store width, the unroll depth (annotated `pragma_auto_unroll_max_step`:
the `meta_schedule.unroll_*` form would unroll the softmax's cross-thread reductions, which TVM 0.27 cannot
build; cuda_space), the register sketches' B fetch width and the row-vector kernel's k width (cuda_row_vector's
`kv`). MutateUnroll never applies to any of them, so
without this mutator the search changed them only by drawing fresh random candidates.

This mutator picks one SampleCategorical decision of the trace, uniformly, and moves it to another of its
candidates, uniformly. The postprocessors then check the new point as for any other mutation.
"""
from __future__ import annotations

import random

from tvm.s_tir import meta_schedule as ms
from tvm.ir.utils import derived_object


@derived_object
class MutateCategorical(ms.mutator.PyMutator):
    """Move one categorical knob of a trace to a different candidate (module doc)."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, trace, rand_state):
        # trace.insts order, not the decisions map's (hash) order: the same rand_state picks the same knob
        knobs = [inst for inst in trace.insts
                 if inst.kind.name == "SampleCategorical" and len(inst.attrs[0]) > 1 and inst in trace.decisions]
        if not knobs:
            return None
        rng = random.Random(int(rand_state))
        inst = rng.choice(knobs)
        old = int(trace.decisions[inst])
        new = rng.randrange(len(inst.attrs[0]) - 1)
        new += new >= old  # any candidate but the current one
        return trace.with_decision(inst, new, remove_postproc=True)

    def clone(self):
        return MutateCategorical()
