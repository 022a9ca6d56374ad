"""One search: Meta-Schedule's task scheduler over the workload's forms (a TuneContext a form), with our design
space, XGBoost cost model, builder and runner (local or RPC), the population sized to the space, and several
searches at once (shards) on machines with more cores than one search uses."""
from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Callable, Optional, Sequence

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from flashgemm import targets
from flashgemm.op.workloads import Workload

from flashgemm.tune import database as dbm
from flashgemm.tune import rpc_runner
from flashgemm.spaces.intrinsics import register_intrinsics
from flashgemm.spaces.kernel_forms import design_space, tuned_forms, tuning_modules
from flashgemm.tune.stopping import Progress, STOP_MARK, StopAfterBatch, StopRequest


def builder_runner(target_name: str, workers: int, tracker: Optional[rpc_runner.Tracker], servers: int,
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


@derived_object
class ResumeDatabase(ms.database.PyDatabase):
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
class SearchOutcome:
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
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(target_name),
                         space_generator=design_space(target_name, mod),
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


def run_search(workload: Workload, target_name: str, work: Path, budget: int, seed: int, workers: int, servers: int,
               best0: float, trials: int, done: int, progress: bool, log: Callable, *, strategy: str, batch_size: int,
               population: int, tracker: Optional[rpc_runner.Tracker], rpc_timeout: int, padded_form: bool = False,
               recompute_form: Optional[bool] = None, stop: Optional[StopRequest] = None, carried: int = 0,
               two_sweep_form: bool = False, only_forms: Optional[Sequence[str]] = None,
               committed_dir: Optional[Path] = None) -> SearchOutcome:
    """One Meta-Schedule search of `budget` trials into the work database at `work`. done: the trials already in
    it; carried: trials counted in the committed provenance only (shown in the progress, which is of the total);
    committed_dir: the committed database, whose top records seed the search too (ResumeDatabase)."""
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

    def on_batch(p: Progress):
        text = (f"valid {p.valid} invalid {p.invalid} best "
                f"{p.best * 1e6:.1f}us" if p.best < math.inf else f"valid {p.valid} invalid {p.invalid}")
        if bar is not None:
            bar.n = min(p.done + carried, trials)
            bar.set_postfix_str(text)
        else:
            log(f"[tune] {p.done + carried}/{trials} trials, {text}")

    quiet_meta_schedule_console()
    prog = Progress(done, best0, on_batch)
    out = SearchOutcome(best0, population=population)
    builder, runner = builder_runner(target_name, workers, tracker, servers, rpc_timeout)
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
            mod=mod, target=target, space_generator=design_space(target_name, mod), task_name=name, rand_state=rs,
            search_strategy=ms.search_strategy.ReplayTrace() if is_random else ms.search_strategy.EvolutionarySearch(
                population_size=pop, init_min_unmeasured=min(50, pop)),
            num_threads=workers, logger=logger).clone()
            for (_, mod), name, logger, rs, pop in zip(modules, names,
                                                       ms.logging.get_loggers_from_work_dir(str(work), names),
                                                       ms.utils.fork_seed(seed, n=len(modules)), populations)]
        ms.tune.tune_tasks(
            tasks=tasks, task_weights=[1.0] * len(tasks), work_dir=str(work), max_trials_global=budget,
            num_trials_per_iter=per_batch, builder=builder, runner=runner,
            database=ResumeDatabase(work_db, dbm.open_json_db(committed_dir, log=log)) if committed_dir else work_db,
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


def search_shards(workload: Workload, target_name: str, work: Path, remaining: int, seed: int, cores: int,
                  servers: int, shards: int, best0: float, log: Callable, **search) -> SearchOutcome:
    """`shards` searches at once in spawned processes (TVM does not survive a fork), each with its share of the
    budget, cores and RPC servers; their outcomes merged."""
    import concurrent.futures  # noqa: PLC0415
    import multiprocessing  # noqa: PLC0415

    dirs = [work / f"{SHARD_PREFIX}{i}" for i in range(shards)]
    shares = [remaining // shards + (1 if i < remaining % shards else 0) for i in range(shards)]
    name = workload.dir_name
    out = SearchOutcome(best0)
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
    return run_search(workload, target_name, work, budget, seed, workers, servers, best0, done + budget, done,
                   False, log, **search, stop=StopRequest(None))
