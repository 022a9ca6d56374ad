"""Read the committed databases back: the best record of each tuned workload, replayed onto the
runtime form of the kernel (static sizes, symbolic strides, `scale` as an argument)."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Optional

import tvm

from schedules import targets
from tir_kernels import CanonicalShape, Variant, runtime_func
from tir_kernels.workloads import parse

from . import database as dbm
from .tuner import tuning_module


TENSOR_CORE_ALIGN = 64  # bytes; see tir_kernels.runtime_func


@dataclasses.dataclass
class TunedKernel:
    workload: str
    variant: Variant
    shape: CanonicalShape
    schedule: tvm.s_tir.Schedule  # runtime_func(variant, shape) with the best trace applied
    run_secs: Optional[float] = None


def load_tuned(wl_dir: Path, target: str) -> TunedKernel:
    prov = dbm.read_provenance(wl_dir)
    dbm.check_target(wl_dir, prov, target)
    try:
        wl = parse(prov["workload"]["spec"])
    except (KeyError, ValueError) as err:
        raise dbm.DatabaseError(f"{wl_dir}/{dbm.PROVENANCE} has no usable workload spec ({err})") from None
    mod = tuning_module(wl)
    targets.register_intrinsics(target)
    top = dbm.top_records(mod, [dbm.open_json_db(wl_dir)], 1)
    if not top:
        raise dbm.DatabaseError(f"{wl_dir} has no valid record for its workload {wl.spec()} "
                                f"(was the kernel definition changed since tuning? then tune again)")
    align = TENSOR_CORE_ALIGN if targets.is_cuda(target) else 2
    sch = tvm.s_tir.Schedule(runtime_func(wl.variant, wl.canonical, align=align))
    try:
        top[0].trace.apply_to_schedule(sch, remove_postproc=False)
    except Exception as err:  # noqa: BLE001
        raise dbm.DatabaseError(f"the best record of {wl_dir} does not replay on the kernel: "
                                f"{str(err).strip().splitlines()[0]}") from err
    return TunedKernel(wl_dir.name, wl.variant, wl.canonical, sch,
                       dbm.mean_secs(top[0]))


def load_all(target: str, db_root: Optional[os.PathLike] = None, log: Callable = print) -> list[TunedKernel]:
    """Every tuned workload of `target` under db_root; an empty list when none was tuned."""
    root = Path(db_root or dbm.default_root()) / target
    if not root.is_dir():
        log(f"[build] no tuned workloads for {target} under {root}: generic kernels only")
        return []
    kernels = []
    for wl_dir in sorted(p for p in root.iterdir() if (p / dbm.PROVENANCE).exists()):
        kernels.append(load_tuned(wl_dir, target))
        log(f"[build] tuned {wl_dir.name}: {kernels[-1].run_secs * 1e6:.1f} us measured")
    return kernels
