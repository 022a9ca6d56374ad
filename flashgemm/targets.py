"""The targets the pipeline builds for, by the short names users type (llvm, sm_80, sm_89, sm_90)."""
from __future__ import annotations

import os

import tvm

CUDA_ARCHES = {  # arch -> TVM target tag carrying max_threads_per_block etc. (Meta-Schedule needs them)
    "sm_80": "nvidia/nvidia-a100",
    "sm_89": "nvidia/geforce-rtx-4090",
    "sm_90": "nvidia/nvidia-h100",
}
TARGET_NAMES = ("llvm", *CUDA_ARCHES)
# Opt-in maximum of dynamic shared memory per block (bytes), CUDA programming guide table 21.
SMEM_LIMIT = {"sm_80": 163 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024}


class TargetError(ValueError):
    """A target name we do not build for, or an 'auto' that found nothing to detect."""


def detect_local() -> str:
    """'auto': the local GPU's arch when TVM's CUDA runtime sees one, else llvm."""
    try:
        dev = tvm.cuda(0)
        if dev.exist:
            major, minor = (int(x) for x in dev.compute_version.split("."))
            name = f"sm_{major}{minor}"
            if name not in CUDA_ARCHES:
                raise TargetError(f"the local GPU, {dev.device_name}, is {name}, which no target serves (build on a "
                                  f"GPU of {', '.join(CUDA_ARCHES)}, or pass --target llvm)")
            return name
    except TargetError:
        raise
    except Exception:  # no CUDA runtime in this TVM build / no driver
        pass
    return "llvm"


def resolve(name: str) -> str:
    name = name.strip().lower()
    if name == "auto":
        return detect_local()
    if name not in TARGET_NAMES:
        raise TargetError(f"unknown target {name!r} (choose one of: auto, {', '.join(TARGET_NAMES)})")
    return name


def tvm_target(name: str) -> tvm.target.Target:
    """The TVM Target for a short name. llvm gets num-cores (Meta-Schedule requires it)."""
    name = resolve(name)
    if name == "llvm":
        return tvm.target.Target({"kind": "llvm", "num-cores": os.cpu_count() or 1})
    return tvm.target.Target({"tag": CUDA_ARCHES[name], "arch": name})


def is_cuda(name: str) -> bool:
    return resolve(name) in CUDA_ARCHES
