"""The compile pipeline's pass switch, and the module-pass wrapper its device rewrites share (cuda_build.PASSES).

FLASHGEMM_DISABLE_PASSES=name[,name...] leaves the named passes of cuda_build.PASSES out of every compile in the
process (A/B runs); cuda_build refuses a name it does not have, listing the ones it has."""
from __future__ import annotations

import os
from typing import Callable, Optional

import tvm
from tvm import tirx

DISABLE_ENV = "FLASHGEMM_DISABLE_PASSES"


def disabled_passes() -> frozenset:
    """The pass names FLASHGEMM_DISABLE_PASSES lists (comma-separated)."""
    return frozenset(n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip())


def enabled(name: str) -> bool:
    """Whether the pass `name` of cuda_build.PASSES runs in this process's compiles."""
    return name not in disabled_passes()


def each_function(name: str, rewrite_one: Callable, enabled: Optional[Callable] = None):
    """A module pass (opt level 0) applying rewrite_one(func) -> func to every PrimFunc of the module, unless
    enabled() says no; the module's attributes are kept."""

    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if enabled is not None and not enabled():
            return mod
        out = {gv: rewrite_one(f) if isinstance(f, tirx.PrimFunc) else f for gv, f in mod.functions.items()}
        return tvm.IRModule(out, attrs=mod.attrs)

    return tvm.transform.module_pass(apply, opt_level=0, name=name)
