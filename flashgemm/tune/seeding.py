"""Records a run starts from, measured before its search: the kept records of another compiler re-measured
(remeasure), records whose traces predate a sketch change re-expressed (migrate), the other dtype's best records
replayed (seed_candidates)."""
from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import math
import os
from pathlib import Path
from typing import Callable, Optional

import tvm
from tvm.s_tir import meta_schedule as ms

from flashgemm import targets
from flashgemm.op.workloads import Workload

from flashgemm.tune import database as dbm
from flashgemm.spaces.intrinsics import register_intrinsics
from flashgemm.spaces.kernel_forms import design_space, form_of, tuning_module, tuning_modules
from flashgemm.tune.stopping import tuning_lock
from flashgemm.tune.provenance import compiler_id, environment
from flashgemm.tune import search
from flashgemm.tune.search import SHARD_PREFIX


MIGRATED = "migrated.json"  # in work/: the records already re-expressed by migrate (their traces' decisions)


def migrate(workload: Workload, target_name: str, work: Path, dbs: list, records: int, workers: int,
            log: Callable) -> tuple:
    """Re-express the best `records` records of each form that predate a knob of today's sketches on those sketches,
    measure them with the tuning builder and runner into the work database, and return (measured, valid):
    recompute-form records at every warp tiling (flashgemm/spaces/cuda_recompute.retiled: resident A) and
    register-sketch records with their resident B copy vectorized (flashgemm/spaces/cuda_registers.vectorized_b_fetch).
    The search then starts from them: it only mutates a record's own decisions, so it never reaches a knob its records
    lack. Each source record is re-expressed once per work directory (work/migrated.json)."""
    from flashgemm.spaces import cuda_recompute, cuda_registers  # noqa: PLC0415
    if not targets.is_cuda(target_name):
        log(f"[tune] {workload.dir_name}: no CUDA sketches on {target_name}: nothing to migrate")
        return 0, 0
    done_path = work / MIGRATED
    done = set(json.loads(done_path.read_text())) if done_path.exists() else set()
    target = targets.tvm_target(target_name)
    sources, items, rejected = [], [], 0
    for form, mod in tuning_modules(workload, target_name):
        ctx = None
        for rec in dbm.top_records([mod], dbs, records):
            if str(list(rec.trace.decisions.values())) in done:
                continue
            traces = list(cuda_recompute.retiled(rec.trace, mod)) if form.name == "recompute" else []
            vectorized = cuda_registers.vectorized_b_fetch(rec.trace)
            if vectorized is not None:
                traces.append(vectorized)
            if not traces:
                continue
            sources.append(rec)
            ctx = ctx or ms.TuneContext(mod=mod, target=target, task_name="main",
                                        space_generator=design_space(target_name))
            for trace in traces:
                sch = tvm.s_tir.Schedule(mod)
                if isinstance(trace, list):  # trace JSON without its postprocessors' steps
                    tvm.s_tir.schedule.Trace.apply_json_to_schedule(trace, sch)
                else:
                    trace.apply_to_schedule(sch, remove_postproc=True)
                # the marker first, as Meta-Schedule's own candidates have it: a search that starts from these records
                # replays them without their postprocessors' steps and applies the postprocessors again; without it
                # the replay keeps those steps and RewriteCooperativeFetch finds its annotations gone
                sch.enter_postproc()
                if all(p.apply(sch) for p in ctx.space_generator.postprocs):
                    items.append((mod, sch))
                else:
                    rejected += 1
    if not sources:
        log(f"[tune] {workload.dir_name}: no record of the best {records} to re-express on today's sketches")
        return 0, 0
    log(f"[tune] {workload.dir_name}: re-expressing {len(sources)} records on today's sketches: measuring "
        f"{len(items)} candidates ({rejected} rejected by the postprocessors)")
    measured, ok, best, errors = measure_into(work, target_name, items, workers)
    done_path.write_text(json.dumps(sorted(done | {str(list(r.trace.decisions.values())) for r in sources})))
    log(f"[tune] {workload.dir_name}: {measured} re-expressed candidates measured, best "
        + (f"{best * 1e6:.1f} us" if best < math.inf else "none valid")
        + (f"; {len(errors)} failed, the first: {errors[0]}" if errors else ""))
    return measured, ok


def measure(target_name: str, items: list, workers: int) -> list:
    """Build and measure postprocessed schedules [(module, schedule)] with the tuning builder and runner:
    [(run seconds, None) or (None, error line)] in the items' order."""
    if not items:
        return []
    target = targets.tvm_target(target_name)
    # search.builder_runner, looked up here at each call: the tests stand in for it
    builder, runner = search.builder_runner(target_name, workers, None, 0, 60)
    built = list(builder.build([ms.builder.BuilderInput(sch.mod, target) for _, sch in items]))
    args = [ms.arg_info.ArgInfo.from_prim_func(mod["main"]) for mod, _ in items]
    ok = [i for i, b in enumerate(built) if not b.error_msg]  # (indices: FFI results are new wrappers per access)
    device = "cuda" if targets.is_cuda(target_name) else "cpu"
    futures = dict(zip(ok, runner.run([ms.runner.RunnerInput(built[i].artifact_path, device, args[i])
                                        for i in ok]))) if ok else {}
    out = []
    for i in range(len(items)):
        res = futures[i].result() if i in futures else None
        err = built[i].error_msg if res is None else res.error_msg
        if err:
            out.append((None, str(err).strip().splitlines()[-1][:300] if str(err).strip() else "error"))
        else:
            out.append(([float(x) for x in res.run_secs], None))
    return out


def measure_into(work: Path, target_name: str, items: list, workers: int) -> tuple:
    """measure, each result committed (failures as invalid) to the work database: (measured, valid, best seconds,
    error lines)."""
    if not items:
        return 0, 0, math.inf, []
    target = targets.tvm_target(target_name)
    work_db = dbm.open_json_db(work, create=True)
    best, errors = math.inf, []
    for (mod, sch), (secs, err) in zip(items, measure(target_name, items, workers)):
        if err:
            errors.append(err)
        secs = [dbm.INVALID_SECS] if err else secs
        work_db.commit_tuning_record(ms.database.TuningRecord(sch.trace, work_db.commit_workload(mod), secs, target,
                                                              ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
        best = min(best, dbm.mean_secs(secs) or math.inf)
    return len(items), len(items) - len(errors), best, errors


def remeasure(workload: Workload, target_name: str, *, db_root=None, workers: Optional[int] = None,
              log: Callable = print) -> dict:
    """Time a database's kept records again with today's compiler and write the database back with those times;
    returns the new provenance.

    A record's time is its kernel's as compiled the day it was measured. A change to how kernels are compiled (a
    device pass or source hook of flashgemm/codegen/cuda_build) leaves the kept times stale, and a search then ranks
    its new candidates against them: after a pass that speeds up every kernel, new candidates rank above the best
    record's stale time and the top-k pruning can drop that record, though rebuilt it would be the fastest. So:
    re-measure, then search. Each kept record is rebuilt from its trace (postprocessors included) on its form's module
    and measured with the tuning builder and runner; one that no longer builds or runs is dropped (and logged).
    Provenance: best_secs, and an entry under "remeasured" (when, the times before and after). A work directory holding
    earlier measurements is refused: a search reads them before the committed records, with their stale times."""
    target_name = targets.resolve(target_name)
    wl_dir = dbm.workload_dir(db_root or dbm.default_root(), target_name, workload.dir_name)
    with tuning_lock(wl_dir):
        work = wl_dir / "work"
        held = [d for d in (work, *work.glob(f"{SHARD_PREFIX}*"))
                if (d / dbm.DB_FILES[1]).exists() and (d / dbm.DB_FILES[1]).stat().st_size]
        if held:
            raise dbm.DatabaseError(
                f"{held[0]} holds the earlier searches' measurements, as stale as the kept ones, and a search would "
                f"read them first: move {work} aside (e.g. to {work.name}.before-remeasure; the next run counts its "
                f"trials from the provenance, as in a fresh clone) and run --remeasure again")
        prov = dbm.read_provenance(wl_dir)
        dbm.check_target(wl_dir, prov, target_name)
        register_intrinsics(target_name)
        modules = tuning_modules(workload, target_name)
        recs = dbm.top_records([mod for _, mod in modules], [dbm.open_json_db(wl_dir, log=log)],
                               int(prov.get("top_k", 10)))
        if not recs:
            raise dbm.DatabaseError(f"{wl_dir} has no valid record to re-measure")
        items = []
        for rec in recs:
            sch = tvm.s_tir.Schedule(rec.workload.mod)
            rec.trace.apply_to_schedule(sch, remove_postproc=False)
            items.append((rec.workload.mod, sch))
        log(f"[remeasure] {workload.dir_name}: timing its {len(recs)} kept records again on {target_name}")
        kept, rows = [], []
        for rec, (secs, err) in zip(recs, measure(target_name, items, workers or os.cpu_count() or 1)):
            before = dbm.mean_secs(rec)
            if err:
                log(f"[remeasure]   {before * 1e6:9.1f} us -> dropped: {err}")
                continue
            kept.append(ms.database.TuningRecord(rec.trace, rec.workload, secs, rec.target, rec.args_info))
            rows.append((before, dbm.mean_secs(secs)))
            log(f"[remeasure]   {before * 1e6:9.1f} us -> {rows[-1][1] * 1e6:9.1f} us")
        if not kept:
            raise dbm.DatabaseError(f"no kept record of {wl_dir} builds and runs today: the database is left as it "
                                    f"was; tune it afresh (another --db) or find what broke the build")
        kept.sort(key=dbm.mean_secs)
        prov = dict(prov, best_secs=dbm.mean_secs(kept[0]))
        prov.pop("twin", None)  # (a twin verdict timed the old kernels; flashgemm/bundle/twins ignores it now anyway)
        prov["compiler"] = compiler_id(target_name)
        prov["remeasured"] = [*prov.get("remeasured", []), {
            "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "environment": environment(target_name), "records": len(recs), "kept": len(kept),
            "us_before_after": [[round(b * 1e6, 2), round(a * 1e6, 2)] for b, a in sorted(rows, key=lambda r: r[1])]}]
        dbm.write_top_k(wl_dir, tuning_module(workload, target_name), kept, prov)
        log(f"[remeasure] {workload.dir_name}: best {dbm.mean_secs(recs[0]) * 1e6:.1f} -> "
            f"{prov['best_secs'] * 1e6:.1f} us, {len(kept)} of {len(recs)} records kept in {wl_dir}")
        return prov


SEEDED = "seeded.json"  # in work/: the other dtype's records already replayed by seed_from_other_dtype


def _plain_json(obj):
    """A trace's as_json() (TVM containers and immediates) as plain Python for json.dumps."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
        return obj.value
    if hasattr(obj, "items"):
        return {str(k): _plain_json(v) for k, v in obj.items()}
    try:
        return [_plain_json(x) for x in obj]
    except TypeError:
        return str(obj)


def dtype_renames(source_dtype: str, dtype: str) -> dict:
    """Tensor-intrinsic names of source_dtype -> those of dtype: ldmatrix and mma.sync (every layout and scope)
    and wgmma (every tile width, B layout, output and pipeline form)."""
    from flashgemm.spaces import cuda_wgmma  # noqa: PLC0415
    from flashgemm.tvm_ext.tensor_intrin import intrin_group  # noqa: PLC0415
    out = {}
    for trans_b in (False, True):
        for scope in ("shared", "shared.dyn"):
            a, b = intrin_group(source_dtype, trans_b, scope), intrin_group(dtype, trans_b, scope)
            out.update({a[k]: b[k] for k in ("load_a", "load_b", "compute") if a[k] != b[k]})
    for bn, b_major, to, stages in itertools.product(cuda_wgmma.BNS, ("k", "mn"), ("global", "shared"),
                                                    (0, *cuda_wgmma.STAGES)):
        a = cuda_wgmma.intrin_names(source_dtype, bn, b_major, to, stages)
        b = cuda_wgmma.intrin_names(dtype, bn, b_major, to, stages)
        out.update({a[k]: b[k] for k in a if a[k] != b[k]})
    return out


def check_seed_dtype(workload: Workload, target_name: str, source_dtype: str) -> None:
    if source_dtype not in ("float16", "bfloat16") or source_dtype == workload.dtype:
        raise ValueError(f"--seed-from-dtype {source_dtype}: name the other of float16 / bfloat16 than the "
                         f"workload's own ({workload.dtype})")
    if not targets.is_cuda(target_name):
        raise ValueError(f"--seed-from-dtype is for the CUDA targets (the {target_name} space has no dtype-specific "
                         "intrinsics to rename)")


def seed_candidates(workload: Workload, target_name: str, source_dtype: str, db_root=None, records: int = 10,
                    skip: frozenset = frozenset()) -> tuple:
    """The best `records` records of the same shape in source_dtype's committed database, replayed on this
    workload's modules with their tensor intrinsics renamed to this dtype's (the sketches are the same for fp16 and
    bf16): ([(module, schedule)], their keys, how many did not replay). Keys in `skip` are left out."""
    check_seed_dtype(workload, target_name, source_dtype)
    source = workload.with_dtype(source_dtype)
    src_dir = dbm.workload_dir(db_root or dbm.default_root(), target_name, source.dir_name)
    src_db = dbm.open_json_db(src_dir)  # a DatabaseError naming the directory when there is none
    src_forms = tuning_modules(source, target_name)
    dst_mods = {f.name: m for f, m in tuning_modules(workload, target_name)}
    renames = dtype_renames(source_dtype, workload.dtype)
    items, keys, rejected = [], [], 0
    for rec in dbm.top_records([m for _, m in src_forms], [src_db], records):
        form = form_of(rec, src_forms).name
        text = json.dumps(_plain_json(rec.trace.as_json()))
        # the trace's digest too: the wgmma sketches differ in their instructions, not only in their decisions
        key = f"{form}:{list(rec.trace.decisions.values())}:{hashlib.sha1(text.encode()).hexdigest()[:12]}"
        if key in skip or form not in dst_mods:
            continue
        for old, new in renames.items():
            text = text.replace(json.dumps(old), json.dumps(new))
        sch = tvm.s_tir.Schedule(dst_mods[form])
        try:  # the whole trace, its postprocessors' steps included (as the export replays a record)
            tvm.s_tir.schedule.Trace.apply_json_to_schedule(json.loads(text), sch)
        except Exception:  # noqa: BLE001 - a record that does not replay on this dtype's module is skipped
            rejected += 1
            continue
        items.append((dst_mods[form], sch))
        keys.append(key)
    return items, keys, rejected


def seed_from_other_dtype(workload: Workload, target_name: str, work: Path, source_dtype: str, db_root, records: int,
                          workers: int, log: Callable) -> tuple:
    """Measure seed_candidates into the work database and return (measured, valid). Why: the search mutates its
    own records, and one dtype's database can hold a kernel family the other's search never reached (W1: fp16's
    row-pipelined winner, bf16's K-pipelined one). Each source record is replayed once per work
    directory (work/seeded.json)."""
    source = workload.with_dtype(source_dtype).dir_name
    done_path = work / SEEDED
    done = set(json.loads(done_path.read_text())) if done_path.exists() else set()
    items, keys, rejected = seed_candidates(workload, target_name, source_dtype, db_root, records, frozenset(done))
    if not items:
        log(f"[tune] {workload.dir_name}: no {source} record left to replay"
            + (f" ({rejected} did not replay)" if rejected else ""))
        return 0, 0
    log(f"[tune] {workload.dir_name}: replaying the best {len(items)} records of {source}"
        + (f" ({rejected} did not replay)" if rejected else ""))
    work.mkdir(parents=True, exist_ok=True)
    measured, ok, best, errors = measure_into(work, target_name, items, workers)
    done_path.write_text(json.dumps(sorted(done | set(keys))))
    log(f"[tune] {workload.dir_name}: {measured} records of {source} measured, best "
        + (f"{best * 1e6:.1f} us" if best < math.inf else "none valid")
        + (f"; {len(errors)} failed, the first: {errors[0]}" if errors else ""))
    return measured, ok
