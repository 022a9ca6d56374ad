"""What the Meta-Schedule runner worker (a separate, persistent process) calls to measure a CUDA candidate.

Light on purpose, like cuda_build: the worker unpickles these functions by reference, so importing this module
must not import the tensor-intrinsic modules (seconds of TVMScript parsing).
"""
from __future__ import annotations

_ARGS: dict = {}  # runner worker process: the arguments of the last workload measured


def alloc_arguments_once(device, args_info, alloc_repeat):
    """LocalRunner f_alloc_argument: Meta-Schedule's default allocation (random fill), made once per workload and
    reused by every later candidate in the (persistent) runner worker. The default allocates and random-fills
    every argument per candidate: on W3 (780 MB of arguments) that takes seconds a candidate, for 30 timed launches
    of at most a few ms. A kernel's speed does not depend on the
    values, and every candidate writes the whole output, so sharing the buffers changes no measurement."""
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument  # noqa: PLC0415
    key = (str(device), repr(args_info), alloc_repeat)
    if key not in _ARGS:
        _ARGS.clear()  # one workload's buffers at a time
        _ARGS[key] = default_alloc_argument(device, args_info, alloc_repeat)
    return _ARGS[key]
