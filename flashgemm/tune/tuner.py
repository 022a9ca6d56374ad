"""Tune one workload for one target with Meta-Schedule and keep the top-k records.

Resumable: every measured candidate lands in <workload dir>/work/ (Meta-Schedule's JSONDatabase,
appended as it goes); a new run counts what is there and tunes only toward the remaining budget,
seeding the search with the best records found so far. The committed top-k files are rewritten
atomically at the end of every run.
"""
from __future__ import annotations

import ast
import contextlib
import csv
import dataclasses
import datetime
import fcntl
import functools
import hashlib
import itertools
import json
import logging
import math
import os
import re
import platform
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from flashgemm import targets
from flashgemm.op.workloads import Workload

from flashgemm.tune import curves
from flashgemm.tune import database as dbm
from flashgemm.tune import rpc_runner
from flashgemm.spaces.intrinsics import register_intrinsics
from flashgemm.spaces.kernel_forms import design_space, form_of, tuned_forms, tuning_module, tuning_modules

STRATEGIES = ("evolutionary", "random")


def _builder_runner(target_name: str, workers: int, tracker: Optional[rpc_runner.Tracker], servers: int,
                    rpc_timeout: int):
    """Builder on this machine's cores; runner local (the first GPU here) or remote (every server under the
    tracker's key, one worker each)."""
    if targets.is_cuda(target_name):
        from flashgemm.spaces import cuda_space as space  # noqa: PLC0415
        builder = space.builder(target_name, workers)
    else:
        from flashgemm.spaces import llvm as space  # noqa: PLC0415
        builder = space.builder(workers)
    if tracker is None:
        return builder, space.runner()
    return builder, rpc_runner.runner(tracker, space.evaluator_config(), servers, rpc_timeout)


def quiet_meta_schedule_console() -> None:
    """Meta-Schedule logs everything to <work>/logs and, at its logger's level, to stdout; keep stdout for
    the progress bar. Its logging set-up also formats the names of the handlers already on its logger and
    fails on an unnamed one (pytest adds such), so drop those."""
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in list(ms_logger.handlers):
        if handler.get_name() is None:
            ms_logger.removeHandler(handler)
    ms_logger.setLevel(logging.WARNING)  # the console handler's level; the file logs stay at DEBUG


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


@derived_object
class _Progress(ms.measure_callback.PyMeasureCallback):
    """Counts trials as they are measured: valid/invalid, best so far, for the bar and the curve."""

    def __init__(self, done: int, best: float, on_batch: Callable):
        self.done, self.valid, self.invalid = done, 0, 0
        self.best = best
        self.curve = []  # (time, best seconds so far), one entry per trial
        self.on_batch = on_batch

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        # Runs before Meta-Schedule's own callbacks: a batch in which no candidate got an RPC server stops
        # the run here, before it is stored as trials (the servers are gone; a resumed run redoes it).
        if runner_results and all(rpc_runner.is_no_server(r.error_msg) for r in runner_results):
            raise rpc_runner.NoServerError(str(runner_results[0].error_msg).strip().splitlines()[-1])
        for b, r in zip(builder_results, runner_results):
            self.done += 1
            secs = None
            if b.error_msg is None and r.error_msg is None and r.run_secs:
                vals = [float(x) for x in r.run_secs]
                secs = sum(vals) / len(vals)
            if secs is None or secs >= dbm.INVALID_SECS:
                self.invalid += 1
            else:
                self.valid += 1
                self.best = min(self.best, secs)
            self.curve.append((time.time(), self.best))
        self.on_batch(self)


STOP_MARK = "flashgemm: tuning stopped"  # in the exception that ends a run at its time budget / on SIGTERM


class StopRequest:
    """When a run should end early: a deadline (time.time()) and/or a stop request (SIGTERM, SIGINT)."""

    def __init__(self, deadline: Optional[float] = None):
        self.deadline, self.requested = deadline, None

    def reason(self) -> Optional[str]:
        if self.requested:
            return self.requested
        if self.deadline is not None and time.time() >= self.deadline:
            return "time budget reached"
        return None


def short_tail(asked: int, got: int, left: int, batch_size: int) -> Optional[str]:
    """Why a search should end with `left` trials of its budget unspent, or None.

    The evolutionary search returns fewer candidates than asked when its population holds too few new ones (a batch of
    256 often comes back 253-255). Meta-Schedule then runs one more round for the few left: a whole search, build and
    measurement (up to a minute or more, for a handful of trials) for them. A tail of at most 1/32 of a batch left by
    such a short batch is not worth that round."""
    if 0 < left <= batch_size // 32 and got < asked:
        return (f"the last batch came back with {got} of {asked} candidates (the search found no more new ones) and "
                f"{left} trial(s) of the budget are not worth another search round")
    return None


@derived_object
class StopAfterBatch(ms.measure_callback.PyMeasureCallback):
    """Ends the run after a measured batch has been stored (placed after Meta-Schedule's callbacks), so that a
    time-boxed slice (--max-minutes, or `timeout` sending SIGTERM) writes its database and provenance instead of
    losing them; also when only a short tail of the budget is left (short_tail)."""

    def __init__(self, stop: StopRequest, progress: Optional[_Progress] = None, trials: int = 0, batch_size: int = 0):
        self.stop, self.progress, self.trials, self.batch_size = stop, progress, trials, batch_size

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        why = self.stop.reason()
        if not why and self.progress is not None:
            got = len(measure_candidates)
            before = self.progress.done - got
            why = short_tail(min(self.batch_size, self.trials - before), got, self.trials - self.progress.done,
                             self.batch_size)
        if why:
            raise RuntimeError(f"{STOP_MARK}: {why}")


@derived_object
class _ResumeDatabase(ms.database.PyDatabase):
    """The work database, whose top records also hold the committed database's: Meta-Schedule's evolutionary
    search seeds its population from get_top_k (PickBestFromDatabase), so a run without work/ (a fresh clone,
    another machine) starts from the committed top records instead of from nothing. Everything is written to, and
    counted in, the work database alone; the committed one is only read."""

    def __init__(self, work_db, committed_db):
        self.work, self.committed = work_db, committed_db

    def has_workload(self, mod):
        return self.work.has_workload(mod)

    def commit_workload(self, mod):
        return self.work.commit_workload(mod)

    def commit_tuning_record(self, record):
        self.work.commit_tuning_record(record)

    def get_top_k(self, workload, top_k):
        return dbm.top_records(workload.mod, [self.work, self.committed], top_k)

    def get_all_tuning_records(self):
        return self.work.get_all_tuning_records()

    def __len__(self):
        return len(self.work)


SHARD_PREFIX = "shard-"
# Cores one search uses by default: Meta-Schedule's builder pool and XGBoost do not scale past ~16 threads on these
# small batches (with 64 cores a batch spends several times longer building and updating the cost model than
# with 16).
MAX_CORES_PER_SEARCH = 16


@dataclasses.dataclass
class _SearchOutcome:
    best: float
    trials: int = 0
    valid: int = 0
    invalid: int = 0
    aborted: Optional[str] = None
    stopped: Optional[str] = None  # ended early on purpose (time budget, SIGTERM): the caller finalizes normally
    population: int = 0  # the search population it used (batch_population; shards: the largest)
    events: list = dataclasses.field(default_factory=list)  # (time, best so far of that search), per trial

    def curve(self, done: int) -> list:
        """(trial number, best so far) over all searches, trials ordered by when they were measured."""
        out, best = [], math.inf
        for i, (_, b) in enumerate(sorted(self.events), start=done + 1):
            best = min(best, b)
            out.append((i, best))
        return out


# A form whose space is a handful of points gets a population of a few candidates a point instead of `population`:
# the wide split-N form has 12 (4 sketches x one categorical of 3), and with a population of 512 the evolutionary
# search spent most of a 3-minute run re-sampling them.
SMALL_SPACE_CANDIDATES_A_POINT = 4
MIN_POPULATION = 16
# A small batch gets a population of this many candidates a measured one instead of `population`: Meta-Schedule's
# defaults pair 512 with batches of 64. A population of 512 for batches of 2 (CI, a demo's 8 trials) spends most
# of a short llvm run evolving candidates the batch never measures; batches of 64 or more keep the full population.
POPULATION_A_MEASURED_CANDIDATE = 8


def space_points(mod: tvm.IRModule, target_name: str) -> Optional[int]:
    """The number of points of our design space on `mod` when every sampling decision of its sketches is categorical
    (a finite product per sketch); None when a sketch samples tile sizes or anything else."""
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(target_name), space_generator=design_space(target_name),
                         task_name="count", num_threads=1)
    total = 0
    for sketch in ctx.generate_design_space():
        points = 1
        for inst in sketch.trace.insts:
            if inst.kind.name == "SampleCategorical":
                points *= len(inst.attrs[0])
            elif inst.kind.name.startswith("Sample"):
                return None
        total += points
    return total


def batch_population(population: int, batch_size: int, budget: int) -> int:
    """The evolutionary search's population for batches of min(batch_size, budget) candidates."""
    return min(population, max(MIN_POPULATION, POPULATION_A_MEASURED_CANDIDATE * max(1, min(batch_size, budget))))


def form_population(population: int, points: Optional[int]) -> int:
    """The evolutionary search's population for a form of `points` points (None: a large space)."""
    if points is None:
        return population
    return min(population, max(MIN_POPULATION, SMALL_SPACE_CANDIDATES_A_POINT * points))


def _search(workload: Workload, target_name: str, work: Path, budget: int, seed: int, workers: int, servers: int,
            best0: float, trials: int, done: int, progress: bool, log: Callable, *, strategy: str, batch_size: int,
            population: int, tracker: Optional[rpc_runner.Tracker], rpc_timeout: int, padded_form: bool = False,
            recompute_form: Optional[bool] = None, stop: Optional[StopRequest] = None, carried: int = 0,
            two_sweep_form: bool = False, only_forms: Optional[Sequence[str]] = None,
            committed_dir: Optional[Path] = None) -> _SearchOutcome:
    """One Meta-Schedule search of `budget` trials into the work database at `work`. done: the trials already in
    it; carried: trials counted in the committed provenance only (shown in the progress, which is of the total);
    committed_dir: the committed database, whose top records seed the search too (_ResumeDatabase)."""
    tuned = tuned_forms(workload, target_name, padded_form, recompute_form, two_sweep_form, only_forms)
    modules = [(f, m) for f, m in tuning_modules(workload, target_name) if f in tuned]
    work_db = dbm.open_json_db(work, create=True, log=log)
    is_random = strategy == "random"
    per_batch = max(1, min(batch_size, budget))
    asked, population = population, population if is_random else batch_population(population, batch_size, budget)
    if population < asked:
        log(f"[tune] {workload.dir_name}: batches of {per_batch}: search population {population} "
            f"({POPULATION_A_MEASURED_CANDIDATE} candidates a measured one)")
    bar = None
    if progress:
        try:
            from tqdm import tqdm  # noqa: PLC0415
            bar = tqdm(total=trials, initial=done + carried, unit="trial", desc=workload.dir_name,
                       dynamic_ncols=True)
        except ImportError:
            bar = None

    def on_batch(p: _Progress):
        text = (f"valid {p.valid} invalid {p.invalid} best "
                f"{p.best * 1e6:.1f}us" if p.best < math.inf else f"valid {p.valid} invalid {p.invalid}")
        if bar is not None:
            bar.n = min(p.done + carried, trials)
            bar.set_postfix_str(text)
        else:
            log(f"[tune] {p.done + carried}/{trials} trials, {text}")

    quiet_meta_schedule_console()
    prog = _Progress(done, best0, on_batch)
    out = _SearchOutcome(best0, population=population)
    builder, runner = _builder_runner(target_name, workers, tracker, servers, rpc_timeout)
    try:
        # ms.tune_tir with one task per form (it would make one per function of one module, each keyed by a
        # module whose function keeps its own name, so the records would not match tuning_modules())
        target = targets.tvm_target(target_name)
        names = ["main" if f is modules[0][0] else f"main_{f.name}" for f, _ in modules]
        populations = []
        for form, mod in modules:
            points = None if is_random else space_points(mod, target_name)
            populations.append(form_population(population, points))
            if populations[-1] < population:
                log(f"[tune] {workload.dir_name}: the {form.name} form's space has {points} points; its search "
                    f"population is {populations[-1]} (not {population})")
        tasks = [ms.TuneContext(
            mod=mod, target=target, space_generator=design_space(target_name), task_name=name, rand_state=rs,
            search_strategy=ms.search_strategy.ReplayTrace() if is_random else ms.search_strategy.EvolutionarySearch(
                population_size=pop, init_min_unmeasured=min(50, pop)),
            num_threads=workers, logger=logger).clone()
            for (_, mod), name, logger, rs, pop in zip(modules, names,
                                                       ms.logging.get_loggers_from_work_dir(str(work), names),
                                                       ms.utils.fork_seed(seed, n=len(modules)), populations)]
        ms.tune.tune_tasks(
            tasks=tasks, task_weights=[1.0] * len(tasks), work_dir=str(work), max_trials_global=budget,
            num_trials_per_iter=per_batch, builder=builder, runner=runner,
            database=_ResumeDatabase(work_db, dbm.open_json_db(committed_dir, log=log)) if committed_dir else work_db,
            cost_model="random" if is_random else "xgb",
            # ours first: it stops a batch that found no RPC server before Meta-Schedule stores it
            measure_callbacks=[prog, *ms.measure_callback.MeasureCallback.create("default"),
                               *([StopAfterBatch(stop, prog, done + budget, batch_size)]
                                 if stop is not None else [])],
            # round robin: the forms are one workload, so the fastest record of any counts (the gradient
            # scheduler would weigh them as separate operators of a model)
            task_scheduler="round-robin")
    except Exception as err:  # noqa: BLE001  (through TVM's FFI our NoServerError comes back a RuntimeError)
        if STOP_MARK in str(err):
            out.stopped = str(err).split(STOP_MARK + ": ", 1)[1].splitlines()[0]
        elif not rpc_runner.is_no_server(err):
            raise
        else:  # keep what was measured (the caller writes it), then report
            aborted = next(line for line in str(err).splitlines() if rpc_runner.NO_SERVER in line)
            out.aborted = aborted[aborted.index(rpc_runner.NO_SERVER):]
    if bar is not None:
        bar.close()
    out.best, out.trials, out.valid, out.invalid, out.events = prog.best, prog.done - done, prog.valid, \
        prog.invalid, prog.curve
    return out


MIGRATED = "migrated.json"  # in work/: the records already re-expressed by _migrate (their traces' decisions)


def _migrate(workload: Workload, target_name: str, work: Path, dbs: list, records: int, workers: int,
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
    measured, ok, best, errors = _measure_into(work, target_name, items, workers)
    done_path.write_text(json.dumps(sorted(done | {str(list(r.trace.decisions.values())) for r in sources})))
    log(f"[tune] {workload.dir_name}: {measured} re-expressed candidates measured, best "
        + (f"{best * 1e6:.1f} us" if best < math.inf else "none valid")
        + (f"; {len(errors)} failed, the first: {errors[0]}" if errors else ""))
    return measured, ok


def _measure(target_name: str, items: list, workers: int) -> list:
    """Build and measure postprocessed schedules [(module, schedule)] with the tuning builder and runner:
    [(run seconds, None) or (None, error line)] in the items' order."""
    if not items:
        return []
    target = targets.tvm_target(target_name)
    builder, runner = _builder_runner(target_name, workers, None, 0, 60)
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


def _measure_into(work: Path, target_name: str, items: list, workers: int) -> tuple:
    """_measure, each result committed (failures as invalid) to the work database: (measured, valid, best seconds,
    error lines)."""
    if not items:
        return 0, 0, math.inf, []
    target = targets.tvm_target(target_name)
    work_db = dbm.open_json_db(work, create=True)
    best, errors = math.inf, []
    for (mod, sch), (secs, err) in zip(items, _measure(target_name, items, workers)):
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
        for rec, (secs, err) in zip(recs, _measure(target_name, items, workers or os.cpu_count() or 1)):
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


SEEDED = "seeded.json"  # in work/: the other dtype's records already replayed by _seed_from_dtype


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


def _dtype_renames(source_dtype: str, dtype: str) -> dict:
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


def _check_seed_dtype(workload: Workload, target_name: str, source_dtype: str) -> None:
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
    _check_seed_dtype(workload, target_name, source_dtype)
    source = workload.with_dtype(source_dtype)
    src_dir = dbm.workload_dir(db_root or dbm.default_root(), target_name, source.dir_name)
    src_db = dbm.open_json_db(src_dir)  # a DatabaseError naming the directory when there is none
    src_forms = tuning_modules(source, target_name)
    dst_mods = {f.name: m for f, m in tuning_modules(workload, target_name)}
    renames = _dtype_renames(source_dtype, workload.dtype)
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


def _seed_from_dtype(workload: Workload, target_name: str, work: Path, source_dtype: str, db_root, records: int,
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
    measured, ok, best, errors = _measure_into(work, target_name, items, workers)
    done_path.write_text(json.dumps(sorted(done | set(keys))))
    log(f"[tune] {workload.dir_name}: {measured} records of {source} measured, best "
        + (f"{best * 1e6:.1f} us" if best < math.inf else "none valid")
        + (f"; {len(errors)} failed, the first: {errors[0]}" if errors else ""))
    return measured, ok


def _search_shards(workload: Workload, target_name: str, work: Path, remaining: int, seed: int, cores: int,
                   servers: int, shards: int, best0: float, log: Callable, **search) -> _SearchOutcome:
    """`shards` searches at once in spawned processes (TVM does not survive a fork), each with its share of the
    budget, cores and RPC servers; their outcomes merged."""
    import concurrent.futures  # noqa: PLC0415
    import multiprocessing  # noqa: PLC0415

    dirs = [work / f"{SHARD_PREFIX}{i}" for i in range(shards)]
    shares = [remaining // shards + (1 if i < remaining % shards else 0) for i in range(shards)]
    name = workload.dir_name
    out = _SearchOutcome(best0)
    with concurrent.futures.ProcessPoolExecutor(shards, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_shard_job, workload, target_name, d, n, seed + 1000 * i, max(1, cores // shards),
                               max(1, servers // shards), best0, f"{name}[{i}]", search)
                   for i, (d, n) in enumerate(zip(dirs, shares)) if n > 0]
        for fut in concurrent.futures.as_completed(futures):
            r = fut.result()
            out.best = min(out.best, r.best)
            out.trials += r.trials
            out.valid += r.valid
            out.invalid += r.invalid
            out.events += r.events
            out.aborted = out.aborted or r.aborted
            out.stopped = out.stopped or r.stopped
            out.population = max(out.population, r.population)
    log(f"[tune] {name}: {shards} searches done, {out.trials} trials, best "
        + (f"{out.best * 1e6:.1f} us" if out.best < math.inf else "none"))
    return out


def _shard_job(workload, target_name, work: Path, budget, seed, workers, servers, best0, label, search):
    def log(msg):
        print(msg.replace("[tune]", f"[tune] {label}:", 1), flush=True)

    register_intrinsics(target_name)
    done = len(dbm.open_json_db(work, create=True, log=log).get_all_tuning_records()) if work.is_dir() else 0
    # no deadline (a time budget is for one search), but a short tail ends a search here too
    return _search(workload, target_name, work, budget, seed, workers, servers, best0, done + budget, done,
                   False, log, **search, stop=StopRequest(None))


LOCK = "tuning.lock"  # in work/: held (flock) by the process tuning the workload


@contextlib.contextmanager
def tuning_lock(wl_dir: Path):
    """Hold the workload's tuning lock; DatabaseError at once when another process holds it. Two runs on one
    database would interleave their records and overwrite each other's provenance (two hosts tuning the same
    workload on a shared disk, or the same command started twice). The lock goes with its process, however it
    ends. A directory that cannot be written is left to tune()'s own check, which says so."""
    path = wl_dir / "work" / LOCK
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")  # noqa: SIM115  (closed below; closing releases the lock)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise dbm.DatabaseError(f"{wl_dir.name} is being tuned by another process ({holder}): wait for it to "
                                    f"finish, or tune into another --db. Two runs on one database would mix their "
                                    f"records (lock: {path})") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {platform.node()} since "
                 f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
        fh.flush()
        yield
    finally:
        fh.close()


def _holding_tuning_lock(fn):
    """tune() under its workload's tuning lock (the lock's directory from the same arguments tune() gets)."""
    @functools.wraps(fn)
    def locked(workload: Workload, target_name: str, trials: int, **options):
        wl_dir = dbm.workload_dir(options.get("db_root") or dbm.default_root(), targets.resolve(target_name),
                                  workload.dir_name)
        with tuning_lock(wl_dir):
            return fn(workload, target_name, trials, **options)
    return locked


@_holding_tuning_lock
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
    them and measure them (_migrate; they count as trials), so that the search starts from them.
    seed_from_dtype: first replay the best seed_records records of the same shape in that dtype's committed
    database on this dtype and measure them (_seed_from_dtype; they count as trials), so that the search starts
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
        _check_seed_dtype(workload, target_name, seed_from_dtype)
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
    # (_ResumeDatabase). It may measure one of them again: Meta-Schedule skips only what this run measured
    # (TVM 0.27 evolutionary_search.cc: measured_workloads_).
    # (Before _migrate: its ledger entry is trials of this work directory.)
    carried = _carried_trials(prov_old, _read_ledger(work), work)
    committed = [dbm.open_json_db(wl_dir, log=log)] if all((wl_dir / f).exists() for f in dbm.DB_FILES) else []
    if migrate_records:
        t_mig = time.time()
        migrated, migrated_valid = _migrate(
            workload, target_name, work, [dbm.open_json_db(d, create=True, log=log) for d in work_dirs] + committed,
            migrate_records, workers or min(os.cpu_count() or 1, MAX_CORES_PER_SEARCH), log)
        if migrated:
            _append_ledger(work, {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                  "trials": migrated, "valid": migrated_valid, "invalid": migrated - migrated_valid,
                                  "strategy": "migrated", "seconds": round(time.time() - t_mig, 1),
                                  "note": "earlier records re-expressed on today's sketches and measured "
                                          "(flashgemm.tune.tuner._migrate)"})
    if seed_from_dtype:
        t_seed = time.time()
        seeded, seeded_valid = _seed_from_dtype(workload, target_name, work, seed_from_dtype, db_root, seed_records,
                                                workers or min(os.cpu_count() or 1, MAX_CORES_PER_SEARCH), log)
        if seeded:
            _append_ledger(work, {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                  "trials": seeded, "valid": seeded_valid, "invalid": seeded - seeded_valid,
                                  "strategy": "seeded", "seconds": round(time.time() - t_seed, 1),
                                  "note": f"the best records of the {seed_from_dtype} database replayed in "
                                          f"{workload.dtype} and measured (flashgemm.tune.tuner._seed_from_dtype)"})
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
        outcome = _SearchOutcome(best0)
    elif shards <= 1:
        with stop_on_signals(stop, log):
            outcome = _search(workload, target_name, work, remaining, seed + done, cores, servers, best0, trials,
                              done, progress, log, **search, stop=stop, carried=carried)
    else:
        outcome = _search_shards(workload, target_name, work, remaining, seed + done, cores, servers, shards, best0,
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
    ledger = _read_ledger(work)
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
        _append_ledger(work, lost)
        runs.append(lost)
        if not any(work.glob(f"{SHARD_PREFIX}*")):  # (sharded: the order of records across shards is not kept)
            _start_work_curve(work, wl_dir, carried)
            _append_curve(work / "curve.csv", _stored_curve(work, unrecorded, accounted + carried,
                                                             _last_best(work / "curve.csv"), upto=done))
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
        _append_ledger(work, this_run)
        runs.append(this_run)
        points = outcome.curve(done)
        if carried:  # the curve goes on from the committed one: trial numbers and best so far include the carried
            _start_work_curve(work, wl_dir, carried)
            best_before = float(prov_old.get("best_secs") or math.inf)
            points = [(t + carried, min(b, best_before)) for t, b in points]
        _append_curve(work / "curve.csv", points)
        curve_changed = True
    if curve_changed:
        _publish_curve(work / "curve.csv", wl_dir / "curve.csv")
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


CARRIED = "carried.json"  # in work/: trials counted in the provenance that this work directory never held


def _carried_trials(prov_old: dict, ledger: list, work: Path) -> int:
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


# `timeout` sends its signal to the command and then to the command's process group: the tuner gets it twice
# within microseconds. A repeat this soon is that one request; a second Ctrl-C or kill comes later.
SAME_SIGNAL_SECONDS = 1.0
aborted_by: list = []  # the signal that aborted a run (TVM's FFI turns the KeyboardInterrupt into a RuntimeError)


def _kill_workers() -> None:
    """SIGKILL this process's descendants (builder and runner workers, their nvcc): an idle worker would leave on
    its own when the tuner's pipe closes, one inside a hung kernel would not."""
    try:
        from tvm.support.popen_pool import kill_child_processes  # noqa: PLC0415  (needs psutil)
        kill_child_processes(os.getpid())
    except ImportError:
        pass


@contextlib.contextmanager
def stop_on_signals(stop: StopRequest, log: Callable):
    """SIGTERM / SIGINT ask the run to stop after the batch in flight (a second one, a second later, kills as
    usual). The builder and runner workers ignore both (flashgemm/codegen/worker_init): their batch finishes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    first = {}

    def handler(signum, frame):
        name = signal.Signals(signum).name
        now = time.monotonic()
        if stop.requested and now - first.get(signum, -math.inf) < SAME_SIGNAL_SECONDS:
            return  # the group copy of the signal that asked to stop
        if stop.requested:  # second signal: give up at once, with the workers (they ignore signals)
            signal.signal(signum, old[signum])
            _kill_workers()
            aborted_by.append(name)
            raise KeyboardInterrupt(name)
        first[signum] = now
        stop.requested = f"{name} received"
        log(f"[tune] {name}: stopping after the batch in flight, then writing the database (again to abort)")
    for sig in (signal.SIGTERM, signal.SIGINT):
        old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


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


def _read_ledger(work: Path) -> list:
    path = work / LEDGER
    dbm.repair_jsonl(path)  # a line cut by kill -9 while it was written: that run's trials are counted as unrecorded
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _append_ledger(work: Path, run: dict) -> None:
    work.mkdir(parents=True, exist_ok=True)
    dbm.repair_jsonl(work / LEDGER)  # else a torn last line would swallow this one
    with (work / LEDGER).open("a") as fh:
        fh.write(json.dumps(json_safe(run)) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _publish_curve(work_curve: Path, committed: Path) -> None:
    """curve.csv beside the database: the curve of the search in work/ (trial numbers are that work database's),
    written atomically. A work directory started afresh (another machine, work/ removed) starts a new curve."""
    tmp = committed.with_name(f".tmp-{committed.name}")
    tmp.write_bytes(work_curve.read_bytes())
    os.replace(tmp, committed)


def _start_work_curve(work: Path, wl_dir: Path, carried: int) -> None:
    """With carried trials the work curve goes on from the committed one (its trial numbers include them)."""
    if carried and not (work / "curve.csv").exists() and (wl_dir / "curve.csv").exists():
        shutil.copyfile(wl_dir / "curve.csv", work / "curve.csv")


def _last_best(path: Path) -> float:
    """The last best time of a curve.csv (inf when there is none)."""
    try:
        rows = [r for r in csv.reader(path.read_text().splitlines()[1:]) if len(r) == 2 and r[1]]
    except OSError:
        return math.inf
    return float(rows[-1][1]) if rows else math.inf


def _stored_curve(work: Path, count: int, start: int, best: float, upto: int) -> list:
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


def _append_curve(path: Path, curve) -> None:
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
