"""What a tuning database records of how it was made: the machine and compiler (compiler_id: a hash of the compile
pipeline's sources and TVM's version), the runs of its work directory (runs.jsonl), each stage's seconds, the
tuning curve."""
from __future__ import annotations

import ast
import csv
import hashlib
import json
import math
import os
import re
import platform
import shutil
import time
from pathlib import Path
from typing import Optional

import tvm

from flashgemm import targets
from flashgemm.op.workloads import Workload

from flashgemm.tune import database as dbm


def environment(target_name: str) -> dict:
    """Where the measurements were taken (the database's provenance)."""
    env = {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
           "tvm": tvm.__version__}
    try:
        import tvm_ffi  # noqa: PLC0415
        env["tvm_ffi"] = tvm_ffi.__version__
    except Exception:  # noqa: BLE001
        pass
    if targets.is_cuda(target_name):
        from flashgemm.spaces import cuda_space  # noqa: PLC0415
        env.update(cuda_space.gpu_environment())
    return env


# ---- which compiler timed the kept records
# A record's time is its kernel's as compiled the day it was measured (remeasure's doc). compiler_sources() decide
# what a trace compiles to after scheduling (the device pipeline, the CUDA source hook, the intrinsics); their hash
# with TVM's version names the compiler in provenance ("compiler"). The name stays that of the kept records'
# compiler: a search under another compiler keeps the old name (its top-k then mixes both), remeasure sets today's.
_PACKAGE = Path(__file__).resolve().parent.parent  # flashgemm/


COMPILER_PACKAGES = ("flashgemm.codegen", "flashgemm.tvm_ext")  # (and flashgemm.targets) what compiles a trace


def compiler_sources() -> tuple:
    """flashgemm/codegen/cuda_build.py, the modules of the compile pipeline it imports (its passes and source rewrites,
    flashgemm.targets, TVM workarounds) and theirs, followed through every module-level import so that a new one, or a
    helper a pass imports, is never left out, and the tensor intrinsics: paths relative to the package's parent. (Read,
    not imported: importing cuda_build registers an index map that TVM's own tensor-intrinsic module, imported later by
    Meta-Schedule, would then fail to register.)"""
    def path_of(module: str) -> Optional[Path]:
        parts = module.split(".")[1:]
        candidates = [_PACKAGE.joinpath(*parts[:-1], parts[-1] + ".py")] if parts else []
        for path in (*candidates, _PACKAGE.joinpath(*parts, "__init__.py")):
            if path.is_file():
                return path
        return None

    seen, todo = set(), ["flashgemm.codegen.cuda_build", "flashgemm.tvm_ext.tensor_intrin"]
    while todo:
        path = path_of(todo.pop())
        if path is None or path in seen:
            continue
        seen.add(path)
        for node in ast.parse(path.read_text()).body:  # (module level: a function's import is a lazy one, such as
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(COMPILER_PACKAGES):  # (targets')
                todo += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module == "flashgemm":
                todo += [f"flashgemm.{alias.name}" for alias in node.names if alias.name in ("targets",)]
    return tuple(sorted(str(path.relative_to(_PACKAGE.parent)) for path in seen if path.name != "__init__.py"))


def compiler_id(target_name: str) -> str:
    """A short hash naming how kernels for this target are compiled today (note above; llvm: TVM's version only)."""
    h = hashlib.sha256(f"tvm {tvm.__version__}\n".encode())
    if targets.is_cuda(target_name):
        for rel in compiler_sources():
            h.update(rel.encode() + b"\n" + (_PACKAGE.parent / rel).read_bytes())
    else:
        h.update(b"llvm")
    return h.hexdigest()[:12]


def stale_times(workload: Workload, target_name: str, db_root=None) -> Optional[str]:
    """Why a database's kept records may carry stale times (another compiler timed them), or None (no database,
    no record, or today's compiler)."""
    target_name = targets.resolve(target_name)
    wl_dir = dbm.workload_dir(db_root or dbm.default_root(), target_name, workload.dir_name)
    if not (wl_dir / dbm.PROVENANCE).exists():
        return None
    prov = dbm.read_provenance(wl_dir)
    had, now = prov.get("compiler"), compiler_id(target_name)
    if not prov.get("best_secs") or had == now:
        return None
    by = f"another compiler ({had})" if had else "a compiler from before this check"
    return f"its kept records were timed by {by}; today's is {now}"


CARRIED = "carried.json"  # in work/: trials counted in the provenance that this work directory never held


def carried_trials(prov_old: dict, ledger: list, work: Path) -> int:
    """Trials of the provenance that are not in this work directory, kept in work/carried.json once seen: the
    provenance's trials beyond the runs the ledger knows, or the number kept before when that is more (a checkout
    between two slices puts the provenance back to its committed state, which knows fewer trials than the ledger
    plus the carried ones; without the kept number the second slice would drop the carried trials)."""
    path = work / CARRIED
    try:
        kept = int(json.loads(path.read_text())["trials"]) if path.exists() else 0
    except (OSError, ValueError, KeyError, TypeError):
        kept = 0  # torn by kill -9 while written: recomputed from the provenance below
    in_work = sum(int(r.get("trials", 0)) for r in ledger)
    carried = max(kept, int(prov_old.get("trials", 0)) - in_work if prov_old else 0)
    if carried > kept:
        work.mkdir(parents=True, exist_ok=True)
        tmp = work / f".tmp-{CARRIED}"
        tmp.write_text(json.dumps({"trials": carried, "note": "trials of the committed provenance whose records "
                                   "(beyond the committed top-k) are not in this work directory"}))
        os.replace(tmp, path)
    return carried


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ")
_STAGE_MARKS = (("search", "Generating candidates"), ("build", "sample(s) to builder"),
                ("run", "valid sample(s) to runner"), ("update", "[Updated] Task"))


def stage_seconds(log_dir: Path, since: float, until: Optional[float] = None) -> dict:
    """Where a run's wall time went, from the timestamps of Meta-Schedule's own logs (1 s resolution):
    search (evolutionary search + cost model), build (builder workers, nvcc), run (GPU measurement) and
    update (cost-model training, database). Only lines written at or after `since` (epoch seconds).
    until: when the run ended; the last stage logged lasts until then. A run stopped after a batch (time budget,
    SIGTERM) never logs that batch's "[Updated]", and without `until` its measurement counted 0 s."""
    events = []
    for path in sorted(Path(log_dir).glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            m = _LOG_TIME.match(line)
            if not m:
                continue
            for stage, mark in _STAGE_MARKS:
                if mark in line:
                    t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
                    if t >= since - 1:
                        events.append((t, stage))
    # The logs have 1 s resolution and come from two files: marks of the same second are put in the loop's order
    # (search -> build -> run -> update -> search ...) after the stage before them. Sorted by name instead, the
    # next batch's "Generating candidates" came before the "[Updated]" of its own second, and the whole
    # evolutionary search of the next batch was counted as "update" (what the provenance of runs before this fix says).
    cycle = [stage for stage, _ in _STAGE_MARKS]
    events.sort(key=lambda e: e[0])
    ordered, prev, i = [], "update", 0
    while i < len(events):
        same = [e for e in events[i:] if e[0] == events[i][0]]
        same.sort(key=lambda e, p=prev: (cycle.index(e[1]) - cycle.index(p) - 1) % len(cycle))
        ordered += same
        prev, i = same[-1][1], i + len(same)
    totals = {stage: 0.0 for stage in cycle}
    for (t0, stage), (t1, _) in zip(ordered, ordered[1:]):
        totals[stage] += t1 - t0
    if until is not None and ordered and until > ordered[-1][0]:
        totals[ordered[-1][1]] += until - ordered[-1][0]
    return totals


LEDGER = "runs.jsonl"  # in work/: one JSON line per run whose records are in that work database


def read_ledger(work: Path) -> list:
    path = work / LEDGER
    dbm.repair_jsonl(path)  # a line cut by kill -9 while it was written: that run's trials are counted as unrecorded
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def append_ledger(work: Path, run: dict) -> None:
    work.mkdir(parents=True, exist_ok=True)
    dbm.repair_jsonl(work / LEDGER)  # else a torn last line would swallow this one
    with (work / LEDGER).open("a") as fh:
        fh.write(json.dumps(json_safe(run)) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def publish_curve(work_curve: Path, committed: Path) -> None:
    """curve.csv beside the database: the curve of the search in work/ (trial numbers are that work database's),
    written atomically. A work directory started afresh (another machine, work/ removed) starts a new curve."""
    tmp = committed.with_name(f".tmp-{committed.name}")
    tmp.write_bytes(work_curve.read_bytes())
    os.replace(tmp, committed)


def start_work_curve(work: Path, wl_dir: Path, carried: int) -> None:
    """With carried trials the work curve goes on from the committed one (its trial numbers include them)."""
    if carried and not (work / "curve.csv").exists() and (wl_dir / "curve.csv").exists():
        shutil.copyfile(wl_dir / "curve.csv", work / "curve.csv")


def last_best(path: Path) -> float:
    """The last best time of a curve.csv (inf when there is none)."""
    try:
        rows = [r for r in csv.reader(path.read_text().splitlines()[1:]) if len(r) == 2 and r[1]]
    except OSError:
        return math.inf
    return float(rows[-1][1]) if rows else math.inf


def stored_curve(work: Path, count: int, start: int, best: float, upto: int) -> list:
    """Curve points of records upto-count+1 .. upto of the work database, in the order they were stored, numbered
    from start + 1: the records of runs killed before they appended their own points (kill -9, a timeout's
    SIGKILL). upto: the records the work database held when this run started (this run's own come after them)."""
    path = work / dbm.DB_FILES[1]  # the tuning records: a JSON line each, appended as they were measured
    lines = path.read_text().splitlines()[:upto][-count:] if count > 0 and path.exists() else []
    out = []
    for i, line in enumerate(lines, start=start + 1):
        mean = dbm.mean_secs(json.loads(line)[1][1])  # [workload, [trace, run_secs, target, args_info]]
        if mean is not None:
            best = min(best, mean)
        out.append((i, best))
    return out


def append_curve(path: Path, curve) -> None:
    new = not path.exists()
    with path.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(["trial", "best_seconds"])
        w.writerows((t, "" if math.isinf(b) else f"{b:.9g}") for t, b in curve)


def json_safe(obj):
    """obj with dict keys made strings and tuples lists, as json.dumps takes them."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)
