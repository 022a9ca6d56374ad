"""How a tuning run stops: Meta-Schedule measure callbacks that report progress and end the run after the batch in
flight (a time budget, a signal), SIGTERM/SIGINT handling, and the lock that keeps one process tuning a workload."""
from __future__ import annotations

import _thread
import contextlib
import datetime
import fcntl
import functools
import math
import os
import platform
import signal
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from flashgemm import targets
from flashgemm.op.workloads import Workload

from flashgemm.tune import database as dbm
from flashgemm.tune import rpc_runner


@derived_object
class Progress(ms.measure_callback.PyMeasureCallback):
    """Counts trials as they are measured: valid/invalid, best so far, for the bar and the curve."""

    def __init__(self, done: int, best: float, on_batch: Callable):
        self.done, self.valid, self.invalid = done, 0, 0
        self.best = best
        self.curve = []  # (time, best seconds so far), one entry per trial
        self.on_batch = on_batch

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        # Runs before Meta-Schedule's own callbacks: a batch in which no built candidate got an RPC server stops
        # the run here, before it is stored as trials (the servers are gone; a resumed run redoes it). Candidates
        # that failed to build never asked for a server: they do not count either way.
        ran = [r for b, r in zip(builder_results, runner_results) if b.error_msg is None]
        if ran and all(rpc_runner.is_no_server(r.error_msg) for r in ran):
            raise rpc_runner.NoServerError(str(ran[0].error_msg).strip().splitlines()[-1])
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

    def __init__(self, stop: StopRequest, progress: Optional[Progress] = None, trials: int = 0, batch_size: int = 0):
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


def holding_tuning_lock(fn):
    """tune() under its workload's tuning lock (the lock's directory from the same arguments tune() gets)."""
    @functools.wraps(fn)
    def locked(workload: Workload, target_name: str, trials: int, **options):
        wl_dir = dbm.workload_dir(options.get("db_root") or dbm.default_root(), targets.resolve(target_name),
                                  workload.dir_name)
        with tuning_lock(wl_dir):
            return fn(workload, target_name, trials, **options)
    return locked


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
    """SIGTERM / SIGINT ask the run to stop after the batch in flight; a second one, a second later, aborts it at
    once (KeyboardInterrupt, the workers killed). The builder and runner workers ignore both
    (flashgemm/codegen/worker_init): their batch finishes.

    Each signal is seen as it arrives: Python runs a handler only when the main thread is back in Python, and the
    main thread waits inside TVM for a whole batch, where two signals would merge into one handler call and the
    second be lost. So the handler only wakes a thread (signal.set_wakeup_fd: a byte a signal, written at delivery)
    that decides; an abort interrupts the main thread (the workers killed first, so that its wait ends)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old, first, abort, raised = {}, {}, [], []
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)

    def arrived(signum: int) -> None:  # in the reader thread, as the signal arrives
        name = signal.Signals(signum).name
        now = time.monotonic()
        if abort or (stop.requested and now - first.get(signum, -math.inf) < SAME_SIGNAL_SECONDS):
            return  # aborting already, or the group copy of the signal that asked to stop
        if stop.requested:  # second signal: give up at once, with the workers (they ignore signals)
            _kill_workers()
            aborted_by.append(name)
            abort.append(name)
            _thread.interrupt_main()  # the main thread's handler raises
            return
        first[signum] = now
        stop.requested = f"{name} received"
        log(f"[tune] {name}: stopping after the batch in flight, then writing the database (again to abort)")

    def read() -> None:
        while True:
            try:
                data = os.read(wake_r, 64)
            except OSError:
                return
            if not data:  # the write end closed: the context is over
                return
            for signum in data:
                if signum in (signal.SIGTERM, signal.SIGINT):
                    arrived(signum)

    def handler(signum, frame):  # in the main thread, whenever Python gets to it: raises the abort, once
        if abort and not raised:
            raised.append(True)
            raise KeyboardInterrupt(abort[0])

    for sig in (signal.SIGTERM, signal.SIGINT):
        old[sig] = signal.signal(sig, handler)
    old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    reader = threading.Thread(target=read, name="flashgemm-signals", daemon=True)
    reader.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_wakeup)
        os.close(wake_w)
        reader.join(timeout=5)
        os.close(wake_r)
        for sig, h in old.items():
            signal.signal(sig, h)
