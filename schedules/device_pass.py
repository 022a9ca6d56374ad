"""The module-pass wrapper the compile pipeline's device rewrites share (cuda_build): one rewrite a function, each
pass with an environment switch that turns it off for A/B runs."""
from __future__ import annotations

import os
from typing import Callable, Optional

import tvm
from tvm import tirx


def each_function(name: str, switch: str, rewrite_one: Callable, enabled: Optional[Callable] = None):
    """A module pass (opt level 0) applying rewrite_one(func) -> func to every PrimFunc of the module, unless the
    environment variable `switch` is set or enabled() says no; the module's attributes are kept."""

    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if os.environ.get(switch) or (enabled is not None and not enabled()):
            return mod
        out = {gv: rewrite_one(f) if isinstance(f, tirx.PrimFunc) else f for gv, f in mod.functions.items()}
        return tvm.IRModule(out, attrs=mod.attrs)

    return tvm.transform.module_pass(apply, opt_level=0, name=name)
