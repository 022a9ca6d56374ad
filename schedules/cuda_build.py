"""How every CUDA kernel of the project is compiled: Meta-Schedule's builder workers, the final export
and the benchmarks all use `f_build` / PASS_CONFIG from here.

This module is deliberately light: builder workers are fresh processes that unpickle `f_build` by
reference, so importing this module must not import TVM's tensor-intrinsic modules (16 s of TVMScript
parsing per worker on a 2-core box; with 16 workers starting at once on the GPU machine every build
of the first tuning run timed out). A tensorized module needs no intrinsic registry to compile.
"""
from __future__ import annotations

import os

os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")  # nvrtc needs cuda-bindings; inherited by workers

# * use_async_copy: the pipelined global->shared copies become cp.async.
# Not used: tirx.merge_static_smem (would turn static shared buffers dynamic too) breaks the generic
# kernel's cross-thread reductions in MergeSharedMemoryAllocations ("buffer_byte_offsets" check);
# the space allocates its big buffers in "shared.dyn" itself.
PASS_CONFIG = {"tirx.use_async_copy": True}


def f_build(mod, target, _params=None):
    """Meta-Schedule f_build: inside `with target:` so nvcc builds for target.arch (the default builder
    builds for the local GPU), with PASS_CONFIG."""
    import tvm  # noqa: PLC0415
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # noqa: PLC0415

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    with target, tvm.transform.PassContext(config=PASS_CONFIG):
        return tvm.compile(mod, target=target).mod
