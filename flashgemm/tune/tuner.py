"""Tune one workload for one target with Meta-Schedule and keep the top-k records.

Resumable: every measured candidate lands in <workload dir>/work/ (Meta-Schedule's JSONDatabase,
appended as it goes); a new run counts what is there and tunes only toward the remaining budget,
seeding the search with the best records found so far. The committed top-k files are rewritten
atomically at the end of every run.
"""
from __future__ import annotations

import datetime
import math
import os
import time
from typing import Callable, Optional, Sequence


from flashgemm import targets
from flashgemm.op.workloads import Workload

from flashgemm.tune import curves
from flashgemm.tune import database as dbm
from flashgemm.tune import rpc_runner
from flashgemm.spaces.intrinsics import register_intrinsics
from flashgemm.spaces.kernel_forms import tuned_forms, tuning_modules
from flashgemm.tune.stopping import StopRequest, holding_tuning_lock, stop_on_signals
from flashgemm.tune.provenance import (append_curve, append_ledger, carried_trials, compiler_id, environment,
                                       json_safe, last_best, publish_curve, read_ledger, stage_seconds,
                                       start_work_curve, stored_curve)
from flashgemm.tune.search import MAX_CORES_PER_SEARCH, SHARD_PREFIX, SearchOutcome, run_search, search_shards
from flashgemm.tune.seeding import check_seed_dtype, migrate, seed_from_other_dtype

STRATEGIES = ("evolutionary", "random")


@holding_tuning_lock
def tune(workload: Workload, target_name: str, trials: int, *, strategy: str = "evolutionary",
         top_k: int = 10, db_root: Optional[os.PathLike] = None, seed: int = 1,
         workers: Optional[int] = None, batch_size: int = 256, population: int = 512, log: Callable = print,
         progress: bool = True, tracker: Optional[rpc_runner.Tracker] = None, rpc_timeout: int = 60,
         shards: int = 1, max_seconds: Optional[float] = None, padded_form: bool = False,
         recompute_form: Optional[bool] = None, two_sweep_form: bool = False,
         only_forms: Optional[Sequence[str]] = None, migrate_records: int = 0,
         seed_from_dtype: Optional[str] = None, seed_records: int = 10) -> dict:
    """Tune toward a total budget of `trials` candidates; returns the provenance written.

    max_seconds: stop after the first batch that ends past this many seconds (and on SIGTERM/SIGINT, after the
    batch in flight), writing the database and provenance as a finished run does; run again to go on. Meant for
    slices on a machine with a command time limit: give it the limit minus one batch.

    tracker: measure on the RPC servers registered under tracker.key (all of them, one candidate each at a
    time) instead of this machine's first GPU / its CPU. rpc_timeout: seconds a server gives one candidate.
    batch_size: candidates measured per search iteration (Meta-Schedule's num_trials_per_iter); a run
    killed mid-way loses at most the batch in flight. population: the evolutionary search's population
    (Meta-Schedule's default, 512); each iteration samples and scores that many candidates on the CPU.
    workers: CPU cores in all (builder processes, search threads); default min(all, 16 per search).
    shards: split the remaining budget over this many independent searches (own seed, cost model, share of the
    cores and of the RPC servers), run at once in their own processes; their records merge into one top-k.
    Meta-Schedule runs one search in lock-step (search, build, measure, update), so it keeps a GPU busy only a
    fraction of the time however many servers there are; separate searches keep several busy. Needs a tracker.
    Search i works in work/shard-i/ (resumable like work/).
    padded_form: tune the kernel's padded form too, where the shape has one (forms()); its records count toward
    the budget and the top-k like the primary form's (they are kept whether or not a later run tunes it).
    recompute_form: the same for the recompute form (flashgemm/spaces/cuda_recompute: S recomputed in three sweeps over
    column chunks instead of kept on chip); None (the default) tunes it where the rows are long (tuned_forms).
    two_sweep_form: tune the two-sweep recompute form too ("recompute2": S twice, FlashAttention's online statistics).
    only_forms: tune exactly these forms (names of forms()), e.g. ("recompute2",) to give one form all the trials.
    migrate_records: first re-express this many of the best records that predate a knob of today's sketches on
    them and measure them (migrate; they count as trials), so that the search starts from them.
    seed_from_dtype: first replay the best seed_records records of the same shape in that dtype's committed
    database on this dtype and measure them (seed_from_other_dtype; they count as trials), so that the search starts
    from them too.
    """
    target_name = targets.resolve(target_name)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if trials < 1 or top_k < 1 or shards < 1:
        raise ValueError("trials, top_k and shards must be >= 1")
    if shards > 1 and max_seconds is not None:
        raise ValueError("a time budget (--max-minutes) is for one search; with several searches (--searches) cut "
                         "the run with a timeout instead (each batch already measured is kept)")
    if shards > 1 and tracker is None:
        raise ValueError("shards > 1 needs an RPC tracker (--runner rpc): searches measured at once on one local "
                         "device would time each other's kernels")
    tuned_forms(workload, target_name, only=only_forms)  # an unknown form name fails here, before any work
    if seed_from_dtype is not None:
        check_seed_dtype(workload, target_name, seed_from_dtype)
    target = targets.tvm_target(target_name)
    wl_dir = dbm.workload_dir(db_root or dbm.default_root(), target_name, workload.dir_name)
    try:
        wl_dir.mkdir(parents=True, exist_ok=True)
        probe = wl_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise dbm.DatabaseError(f"cannot write the tuning database at {wl_dir}: {err.strerror}. "
                                f"Pass --db with a writable directory.") from None
    prov_old = dbm.read_provenance(wl_dir) if (wl_dir / dbm.PROVENANCE).exists() else {}
    if prov_old:
        dbm.check_target(wl_dir, prov_old, target_name)
        if prov_old.get("workload", {}).get("spec") not in (None, workload.spec()):
            raise dbm.DatabaseError(f"{wl_dir} was tuned for a different workload ({prov_old['workload']['spec']}); "
                                    f"name yours differently or remove that directory")

    servers = 0
    if tracker is not None:
        servers = rpc_runner.server_count(tracker)
        if servers == 0:
            raise rpc_runner.TrackerError(f"no RPC server is registered under key {tracker.key!r} at "
                                          f"{tracker.host}:{tracker.port}; start them with flashgemm-rpc-cluster "
                                          f"start (or check --key)")
    mods = [mod for _, mod in tuning_modules(workload, target_name)]
    register_intrinsics(target_name)
    work = wl_dir / "work"
    work_dirs = [work, *sorted(p for p in work.glob(f"{SHARD_PREFIX}*") if p.is_dir())] if work.is_dir() else [work]
    # Trials the committed provenance counts but this work directory never saw (a fresh clone, another machine's
    # slices): their top-k records are in the committed database, the rest are gone. They count toward the budget
    # (it is a total) and toward the provenance's trials. The search starts from the committed top records
    # (ResumeDatabase). It may measure one of them again: Meta-Schedule skips only what this run measured
    # (TVM 0.27 evolutionary_search.cc: measured_workloads_).
    # (Before migrate: its ledger entry is trials of this work directory.)
    carried = carried_trials(prov_old, read_ledger(work), work)
    committed = [dbm.open_json_db(wl_dir, log=log)] if all((wl_dir / f).exists() for f in dbm.DB_FILES) else []
    if migrate_records:
        t_mig = time.time()
        migrated, migrated_valid = migrate(
            workload, target_name, work, [dbm.open_json_db(d, create=True, log=log) for d in work_dirs] + committed,
            migrate_records, workers or min(os.cpu_count() or 1, MAX_CORES_PER_SEARCH), log)
        if migrated:
            append_ledger(work, {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                  "trials": migrated, "valid": migrated_valid, "invalid": migrated - migrated_valid,
                                  "strategy": "migrated", "seconds": round(time.time() - t_mig, 1),
                                  "note": "earlier records re-expressed on today's sketches and measured "
                                          "(flashgemm.tune.seeding.migrate)"})
    if seed_from_dtype:
        t_seed = time.time()
        seeded, seeded_valid = seed_from_other_dtype(
            workload, target_name, work, seed_from_dtype, db_root, seed_records,
            workers or min(os.cpu_count() or 1, MAX_CORES_PER_SEARCH), log)
        if seeded:
            append_ledger(work, {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                  "trials": seeded, "valid": seeded_valid, "invalid": seeded - seeded_valid,
                                  "strategy": "seeded", "seconds": round(time.time() - t_seed, 1),
                                  "note": f"the best records of the {seed_from_dtype} database replayed in "
                                          f"{workload.dtype} and measured (flashgemm.tune.seeding.seed_from_other_dtype)"})
    work_dbs = [dbm.open_json_db(d, create=True, log=log) for d in work_dirs]
    done = sum(len(db.get_all_tuning_records()) for db in work_dbs)
    # the best so far (the progress shows it) is also the committed database's (committed, above): a clone's work/
    # starts empty
    prior = dbm.top_records(mods, [*work_dbs, *committed], 1)
    best0 = dbm.mean_secs(prior[0]) if prior else math.inf
    remaining = trials - done - carried
    cores = workers or min(os.cpu_count() or 1, MAX_CORES_PER_SEARCH * shards)
    if carried:
        log(f"[tune] {workload.dir_name}: {carried} trials of earlier searches are in the committed database (their "
            f"top records only: their work directory is not here); counted toward the budget")
    log(f"[tune] {workload.dir_name} on {target_name}: {done + carried} trials done, budget {trials}, "
        f"{max(remaining, 0)} to go ({strategy}"
        + (f"; measured on {servers} RPC server(s) at {tracker}" if tracker else "")
        + (f"; {shards} independent searches of {max(1, cores // shards)} cores each)" if shards > 1 else ")"))

    search = dict(strategy=strategy, batch_size=batch_size, population=population, tracker=tracker,
                  rpc_timeout=rpc_timeout, padded_form=padded_form, recompute_form=recompute_form,
                  two_sweep_form=two_sweep_form, only_forms=only_forms, committed_dir=wl_dir if committed else None)
    aborted = None
    t0 = time.time()
    stop = StopRequest(None if max_seconds is None else t0 + max_seconds)
    if remaining <= 0:
        outcome = SearchOutcome(best0)
    elif shards <= 1:
        with stop_on_signals(stop, log):
            outcome = run_search(workload, target_name, work, remaining, seed + done, cores, servers, best0, trials,
                              done, progress, log, **search, stop=stop, carried=carried)
    else:
        outcome = search_shards(workload, target_name, work, remaining, seed + done, cores, servers, shards, best0,
                                 log, **search)
    aborted = outcome.aborted
    elapsed = time.time() - t0
    stages = {}
    if remaining > 0:
        logs = [work / "logs"] if shards <= 1 else [work / f"{SHARD_PREFIX}{i}" / "logs" for i in range(shards)]
        per_search = [stage_seconds(d, t0, t0 + elapsed) for d in logs]
        # sharded: the searches overlap in time; report each stage's mean over the searches
        stages = {k: sum(st[k] for st in per_search) / len(per_search) for k in per_search[0]}
        log("[tune] time by stage" + (" (mean of the searches)" if shards > 1 else "") + ": "
            + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items())
            + f" (wall {elapsed:.0f} s, {outcome.trials / max(elapsed, 1e-9):.2f} trials/s)")
    work_dbs = [dbm.open_json_db(d, create=True, log=log) for d in
                [work, *sorted(p for p in work.glob(f"{SHARD_PREFIX}*") if p.is_dir())]]

    top = dbm.top_records(mods, [*work_dbs, *committed], top_k)  # (committed: opened above, unchanged since)
    total = sum(len(db.get_all_tuning_records()) for db in work_dbs) + carried
    # The work directory keeps its own ledger of finished runs and its own curve: the committed provenance and
    # curve.csv are tracked files that a checkout or pull between two slices can put back to an older state,
    # while work/ (ignored) keeps every record. Runs the ledger knows and the provenance lost are restored.
    ledger = read_ledger(work)
    runs = list(prov_old.get("runs", []))
    runs += [r for r in ledger if r not in runs]
    accounted = sum(int(r.get("trials", 0)) for r in ledger) if ledger or carried else \
        (int(prov_old.get("trials", 0)) if prov_old else 0)  # (carried: the provenance's trials are not in work/)
    unrecorded = done - accounted
    curve_changed = False
    if unrecorded > 0:  # records of runs that never finished (kill -9, a timeout's SIGKILL): count them
        lost = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "trials": unrecorded, "strategy": strategy,
                "note": "found in the work database: measured by earlier runs that were stopped before they "
                        "finished, so their timing and valid/invalid split were not recorded"}
        append_ledger(work, lost)
        runs.append(lost)
        if not any(work.glob(f"{SHARD_PREFIX}*")):  # (sharded: the order of records across shards is not kept)
            start_work_curve(work, wl_dir, carried)
            append_curve(work / "curve.csv", stored_curve(work, unrecorded, accounted + carried,
                                                             last_best(work / "curve.csv"), upto=done))
            curve_changed = True
    if remaining > 0:
        this_run = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "trials": outcome.trials, "valid": outcome.valid, "invalid": outcome.invalid,
                     "strategy": strategy, "seconds": round(elapsed, 1),
                     "trials_per_second": round(outcome.trials / elapsed, 3) if elapsed else None,
                     "stage_seconds": stages, "batch_size": batch_size,
                     "population": outcome.population,
                     "workers": cores, "searches": shards,
                     "forms": [f.name for f in tuned_forms(workload, target_name, padded_form, recompute_form,
                                                           two_sweep_form, only_forms)],
                     "runner": f"rpc:{servers}" if tracker else "local",
                     **({"stopped": outcome.stopped} if outcome.stopped else {})}
        append_ledger(work, this_run)
        runs.append(this_run)
        points = outcome.curve(done)
        if carried:  # the curve goes on from the committed one: trial numbers and best so far include the carried
            start_work_curve(work, wl_dir, carried)
            best_before = float(prov_old.get("best_secs") or math.inf)
            points = [(t + carried, min(b, best_before)) for t, b in points]
        append_curve(work / "curve.csv", points)
        curve_changed = True
    if curve_changed:
        publish_curve(work / "curve.csv", wl_dir / "curve.csv")
        png = curves.plot_curve(wl_dir / "curve.csv", wl_dir / "curve.png",
                                f"{workload.dir_name} on {target_name} ({strategy})")
        log(f"[tune] tuning curve: {wl_dir / 'curve.csv'}" + (f", {png}" if png else " (no matplotlib: no PNG)"))
    provenance = {
        "target": target_name,
        "target_json": target.export() if hasattr(target, "export") else str(target),
        "workload": workload.to_json(),
        "variant": workload.variant.key,
        "canonical_sizes": list(workload.canonical.sizes),
        "trials": total,
        "valid": sum(r.get("valid", 0) for r in runs),
        "invalid": sum(r.get("invalid", 0) for r in runs),
        "strategy": strategy if len({r["strategy"] for r in runs}) <= 1 else "mixed",
        "top_k": len(top),
        "best_secs": dbm.mean_secs(top[0]) if top else None,
        "environment": environment(target_name),
        "runs": runs,
        **({"remeasured": prov_old["remeasured"]} if prov_old.get("remeasured") else {}),  # (remeasure's history)
        # the kept records' compiler (note at compiler_id): today's for a new database, else the one it had
        **({"compiler": prov_old["compiler"]} if prov_old.get("compiler") else
           {} if prov_old.get("best_secs") else {"compiler": compiler_id(target_name)}),
    }
    if not top:
        raise dbm.DatabaseError(f"no valid candidate among {total} trials for {workload.dir_name} on {target_name}; "
                                f"see {work}/logs")
    dbm.write_top_k(wl_dir, mods[0], top, json_safe(provenance))
    if aborted is not None:
        raise rpc_runner.NoServerError(
            f"{workload.dir_name}: stopped after {total} of {trials} trials: {aborted}. The trials measured so far "
            f"are kept (top {len(top)} in {wl_dir}); restart the servers (flashgemm-rpc-cluster) and run the "
            f"same command again to go on")
    best = provenance["best_secs"]
    log(f"[tune] {workload.dir_name}: {total} trials total, best {best * 1e6:.1f} us, top {len(top)} kept in {wl_dir}"
        + (f"; stopped early ({outcome.stopped}): run the same command again to go on to {trials}"
           if outcome.stopped and total < trials else ""))
    return provenance


TUNE_ERRORS = (dbm.DatabaseError, targets.TargetError, rpc_runner.TrackerError, ValueError)


def tune_many(workloads: list, target_name: str, trials: int, *, jobs: int = 1, workers: Optional[int] = None,
              log: Callable = print, **options) -> list:
    """Tune each workload (`tune`'s options); `jobs` > 1 tunes that many at once in separate processes, each
    with its share of the builder cores. Returns the errors (strings), [] when all went well; one workload's
    error does not stop the others."""
    if jobs > 1 and options.get("shards", 1) > 1:
        raise ValueError("use jobs (several workloads at once) or shards (one workload, several searches), not both")
    if jobs <= 1 or len(workloads) <= 1:
        errors = []
        for wl in workloads:
            try:
                tune(wl, target_name, trials, workers=workers, log=log, **options)
            except TUNE_ERRORS as err:
                errors.append(str(err))
                break  # stop at the first error, as a user running them one by one would
        return errors
    import concurrent.futures  # noqa: PLC0415
    import multiprocessing  # noqa: PLC0415

    jobs = min(jobs, len(workloads))
    share = max(1, workers // jobs if workers else min((os.cpu_count() or 1) // jobs, MAX_CORES_PER_SEARCH))
    log(f"[tune] {len(workloads)} workloads, {jobs} at a time, {share} builder cores each")
    errors = []
    # spawn, not fork: TVM's runtime and thread pools do not survive a fork.
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_tune_job, wl, target_name, trials, share, options): wl for wl in workloads}
        for fut in concurrent.futures.as_completed(futures):
            err = fut.result()
            if err:
                errors.append(err)
    return errors


def _tune_job(workload: Workload, target_name: str, trials: int, workers: int, options: dict) -> Optional[str]:
    """One workload of tune_many, in its own process: log lines instead of a progress bar (bars of several
    processes would overwrite each other)."""
    name = workload.dir_name

    def log(msg):
        print(msg if msg.startswith(f"[tune] {name}") else msg.replace("[tune]", f"[tune] {name}:", 1), flush=True)

    try:
        tune(workload, target_name, trials, workers=workers, log=log, progress=False, **options)
    except TUNE_ERRORS as err:
        return str(err)
    return None
