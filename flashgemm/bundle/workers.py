"""A build's work spread over processes: how many at once (compile_jobs), and kernel construction in a pool of
worker processes (made_in_workers).

Making a bundle's kernels (replaying tuned traces, choosing default schedules, measuring a tuned kernel's registers
with nvcc) takes seconds a kernel in Python and TVM, one core at a time: about 20 s for one (variant, head size)'s
eleven any-length kernels. A CUDA bundle makes hundreds, so a build makes them in worker processes (spawned: TVM
does not survive fork) and compiles them in parts (kernel_library.library_parts). A Schedule does not cross
processes; a worker returns its TunedKernels with their schedules' modules as JSON (portable), made Schedules again
here (from_portable)."""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Sequence

import tvm
from tvm_ffi.serialization import from_json_graph_str

# the environment variable that caps a build's worker processes (compile_jobs)
COMPILE_JOBS_ENV = "FLASHGEMM_COMPILE_JOBS"


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def compile_jobs() -> int:
    """How many worker processes a build runs at once: the environment's FLASHGEMM_COMPILE_JOBS, else one a core
    this process may run on. Set it where other builds share the cores (pytest-xdist's workers each build bundles:
    the test suite gives each worker its share), else their workers, each importing TVM, contend for them."""
    value = os.environ.get(COMPILE_JOBS_ENV, "").strip()
    if value:
        try:
            jobs = int(value)
        except ValueError:
            jobs = 0
        if jobs < 1:
            raise ValueError(f"{COMPILE_JOBS_ENV}={value!r}: give a whole number of worker processes, 1 or more")
        return jobs
    return usable_cores()


def from_json(text: str):
    """The TVM object of tvm.ir.save_json's `text`, written by this TVM: tvm.ir.load_json would first upgrade it from
    older schemas in Python (json.loads and dumps of the whole graph: ~0.1 s a kernel, hundreds of them a build)."""
    return from_json_graph_str(text)


def portable(tk):
    """A TunedKernel (or None) that crosses processes: its schedules' modules as JSON."""
    if tk is None:
        return None
    return dataclasses.replace(tk, schedule=tvm.ir.save_json(tk.schedule.mod),
                               twin=None if tk.twin is None else tvm.ir.save_json(tk.twin.mod))


def from_portable(tk):
    """The TunedKernel (or None) of portable(tk), with Schedules again."""
    if tk is None:
        return None
    return dataclasses.replace(tk, schedule=tvm.s_tir.Schedule(from_json(tk.schedule)),
                               twin=None if tk.twin is None else tvm.s_tir.Schedule(from_json(tk.twin)))


def made_in_workers(make: Callable, tasks: Sequence[tuple], log: Callable, what: str, jobs: int = 0) -> list:
    """[make(*task) for task in tasks], each in a worker process, `jobs` at once (default compile_jobs()); in this
    process when one would do. make(*task) returns (result, lines): a picklable result (portable kernels) and the
    lines it would have logged, which are logged here in task order, with a progress line a round
    ("<what>: 12 of 50 (34 s, 16 workers)"). A task's exception is raised here once the others are cancelled."""
    jobs = min(len(tasks), jobs or compile_jobs())
    results = [None] * len(tasks)
    if jobs <= 1:
        for i, task in enumerate(tasks):
            results[i], lines = make(*task)
            for line in lines:
                log(line)
        return results
    lines_of, shown, start = {}, 0, time.monotonic()
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(make, *task): i for i, task in enumerate(tasks)}
        try:
            for done, future in enumerate(as_completed(futures), 1):
                i = futures[future]
                results[i], lines_of[i] = future.result()
                while shown in lines_of:  # each task's lines in task order, as soon as those before it are in
                    for line in lines_of.pop(shown):
                        log(line)
                    shown += 1
                if done % jobs == 0 or done == len(tasks):
                    log(f"[build] {what}: {done} of {len(tasks)} ({time.monotonic() - start:.0f} s, {jobs} workers)")
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return results
