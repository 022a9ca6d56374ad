"""The committed tuning databases: tuning_db/<target>/<workload>.<dtype>/.

Each workload directory holds
    database_workload.json, database_tuning_record.json   Meta-Schedule JSONDatabase, top-k records only
    provenance.json                                       what was tuned, where, how, and how it went
    curve.csv, curve.png                                  best time found vs trials of the search in work/
    work/                                                 (git-ignored) every measured record, for resuming

Writes go to a temporary directory first and are renamed into place, so an interrupted run never
leaves a half-written database.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import tvm
from tvm.s_tir import meta_schedule as ms

INVALID_SECS = 1e9  # Meta-Schedule stores failed candidates with a huge run time (1e10 s)
PROVENANCE = "provenance.json"
DB_FILES = ("database_workload.json", "database_tuning_record.json")


class DatabaseError(RuntimeError):
    """A database that is missing, unreadable, or for another target/workload."""


def default_root() -> Path:
    return Path(__file__).resolve().parent


def workload_dir(root: os.PathLike, target: str, dir_name: str) -> Path:
    return Path(root) / target / dir_name


def mean_secs(record) -> Optional[float]:
    """A record's mean run time (a TuningRecord, or its run_secs list as stored in JSON); None when it failed."""
    secs = [float(x) for x in ((record if isinstance(record, list) else record.run_secs) or [])]
    if not secs:
        return None
    mean = sum(secs) / len(secs)
    return None if mean >= INVALID_SECS else mean


def repair_jsonl(path: Path) -> int:
    """Drop a torn last line (a run killed mid-write). Returns the number of lines dropped."""
    if not path.exists():
        return 0
    lines = path.read_bytes().splitlines(keepends=True)
    good = []
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            break
        if not line.endswith(b"\n"):
            line += b"\n"
        good.append(line)
    dropped = len(lines) - len(good)
    if dropped:
        path.write_bytes(b"".join(good))
    return dropped


def json_database(work_dir: Path, allow_missing: bool) -> ms.database.JSONDatabase:
    """ms.database.JSONDatabase(work_dir=...), built through a plain FFI call instead of the class constructor.

    Why: opening the database replays every record's trace on TVM's worker threads, and a trace with rfactor of the
    online-softmax reducer (schedules/online_softmax.py) calls back into Python from those threads. tvm-ffi releases
    the GIL during function calls but holds it during object constructors, so the constructor deadlocks (the two-sweep
    recompute form hung here). The function returns the same JSONDatabase object."""
    make = tvm.get_global_func("s_tir.meta_schedule.DatabaseJSONDatabase")
    return make(str(Path(work_dir) / DB_FILES[0]), str(Path(work_dir) / DB_FILES[1]), allow_missing, "structural")


def open_json_db(path: Path, create: bool = False) -> ms.database.JSONDatabase:
    if not create and not all((path / f).exists() for f in DB_FILES):
        raise DatabaseError(f"no tuning database at {path} (expected {', '.join(DB_FILES)})")
    path.mkdir(parents=True, exist_ok=True)
    for f in DB_FILES:
        repair_jsonl(path / f)
    # Records of the two-sweep recompute form replay rfactor of the online-softmax reducer when the database is
    # opened; unregistered, TVM fails with an opaque "parallel_for_dynamic error" (any target: it is not CUDA's)
    from schedules import online_softmax  # noqa: PLC0415
    online_softmax.register()
    try:
        return json_database(path, allow_missing=create)
    except Exception as err:  # noqa: BLE001  (TVM raises its own error types)
        reason = str(err).strip().splitlines()[-1]
        if "is not registered" in reason:  # a bug of ours, not of the database: say so
            raise DatabaseError(f"cannot read the tuning database at {path}: {reason} (register the target's "
                                f"tensor intrinsics first: schedules.targets.register_intrinsics)") from err
        raise DatabaseError(f"corrupt tuning database at {path}: {reason}. "
                            f"Delete the directory and tune again.") from err


def read_provenance(wl_dir: Path) -> dict:
    path = wl_dir / PROVENANCE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DatabaseError(f"{path} is missing: not a tuning database directory") from None
    except ValueError as err:
        raise DatabaseError(f"{path} is not valid JSON ({err}); delete {wl_dir} and tune again") from None


def check_target(wl_dir: Path, prov: dict, target: str) -> None:
    if prov.get("target") != target:
        raise DatabaseError(f"{wl_dir} holds records tuned for target {prov.get('target')!r}, not {target!r}. "
                            f"Tune for {target} (scripts/tune.py --target {target}) or point --db elsewhere.")


def top_records(mods, dbs, k: int) -> list:
    """The k fastest valid records for a module (or any of a list of modules: a workload's forms) across
    databases, one per distinct trace."""
    mods = [mods] if isinstance(mods, tvm.IRModule) else list(mods)
    seen, out = set(), []
    for db in dbs:
        for mod in mods:
            if not db.has_workload(mod):
                continue
            for rec in db.get_top_k(db.commit_workload(mod), max(k, 1) * 4):
                secs = mean_secs(rec)
                key = str(rec.trace)
                if secs is None or key in seen:
                    continue
                seen.add(key)
                out.append((secs, rec))
    out.sort(key=lambda t: t[0])
    return [rec for _, rec in out[:k]]


def write_top_k(wl_dir: Path, mod: tvm.IRModule, records: list, provenance: dict) -> None:
    """Atomically replace wl_dir's database files and provenance with `records` (already top-k); mod: the
    workload's primary module."""
    wl_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=wl_dir))
    try:
        db = json_database(tmp, allow_missing=True)
        db.commit_workload(mod)  # the primary form's, even when a record of another form is the fastest
        for rec in records:  # each record under its own form's workload
            db.commit_tuning_record(ms.database.TuningRecord(
                rec.trace, db.commit_workload(rec.workload.mod), rec.run_secs, rec.target, rec.args_info))
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=1) + "\n")
        for f in (*DB_FILES, PROVENANCE):  # each rename is atomic; provenance last marks completion
            os.replace(tmp / f, wl_dir / f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
