"""Measuring candidates on remote devices through TVM's RPC tracker (Meta-Schedule's RPCRunner).

The tracker hands each candidate to a free server registered under a key; a server serves one session at a
time, so two candidates never share a GPU and time each other. One runner worker per registered server keeps
them all busy. Start the tracker and servers with flashgemm-rpc-cluster.

What we add to Meta-Schedule's RPCRunner:
* a runner worker keeps its server session across the candidates of a batch (`create_session`), instead of
  a new session, hence a new server process and CUDA context, per candidate;
* `create_session` gives up after a while when no server under the key answers (TVM's tracker request
  waits forever: with every server dead, tuning would hang);
* the candidates of a session share one set of arguments (`alloc_argument`), as the local runner's do
  (flashgemm/codegen/cuda_runner.py), instead of a fresh random fill per candidate;
* `NoServerError`, raised by the tuner when a whole batch found no server, so a run whose servers all died
  stops with a message instead of storing a batch of failures as trials.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from tvm.s_tir import meta_schedule as ms

from flashgemm.codegen.worker_init import ignore_stop_signals

NO_SERVER = "flashgemm-rpc: no RPC server answered"  # marks the runner errors of candidates that found none
ENV_WAIT = "FLASHGEMM_RPC_WAIT_S"


class TrackerError(RuntimeError):
    """A tracker that cannot be reached, or one with no server under the key."""


class NoServerError(TrackerError):
    """Every candidate of a batch failed to get a server: the servers are gone."""


@dataclass(frozen=True)
class Tracker:
    host: str
    port: int
    key: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (key {self.key!r})"


def parse_tracker(address: str | None, key: str | None) -> Tracker:
    """HOST:PORT and a key, falling back to TVM's TVM_TRACKER_HOST / _PORT / _KEY environment variables."""
    address = address or (f"{os.environ['TVM_TRACKER_HOST']}:{os.environ.get('TVM_TRACKER_PORT', '9190')}"
                          if os.environ.get("TVM_TRACKER_HOST") else None)
    key = key or os.environ.get("TVM_TRACKER_KEY")
    if not address:
        raise TrackerError("--runner rpc needs --tracker HOST:PORT (or TVM_TRACKER_HOST/TVM_TRACKER_PORT); "
                           "start one with flashgemm-rpc-cluster start")
    if not key:
        raise TrackerError("--runner rpc needs --key KEY (or TVM_TRACKER_KEY): the key the servers registered with")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise TrackerError(f"--tracker must be HOST:PORT, got {address!r}")
    return Tracker(host, int(port), key)


def _within(seconds: float, fn, keep_waiting=None):
    """fn() on a daemon thread: (its value, None), or (None, its exception or None) if it did not return in
    time, or keep_waiting() (asked every _POLL_S while fn runs) said no. TVM's tracker client retries and waits
    without end; this bounds it (the thread is abandoned)."""
    out: dict = {}

    def _call():
        try:
            out["value"] = fn()
        except Exception as err:  # noqa: BLE001  (refused, reset, not a tracker, ...)
            out["error"] = err

    t = threading.Thread(target=_call, daemon=True)
    t.start()
    deadline = time.time() + seconds
    while t.is_alive() and time.time() < deadline:
        t.join(max(0.0, min(deadline - time.time(), _POLL_S if keep_waiting else seconds)))
        if t.is_alive() and keep_waiting is not None and not keep_waiting():
            break
    return out.get("value"), out.get("error")


def summary(tracker: Tracker, timeout: float = 10.0) -> dict:
    """The tracker's own summary (servers and queues), or TrackerError when it does not answer in time."""
    from tvm import rpc  # noqa: PLC0415

    info, err = _within(timeout, lambda: rpc.connect_tracker(tracker.host, tracker.port).summary())
    if info is None:
        why = err or f"no answer in {timeout:.0f} s"
        raise TrackerError(f"cannot reach the RPC tracker at {tracker.host}:{tracker.port}: {why}. "
                           f"Is it running? flashgemm-rpc-cluster start starts one; "
                           f"flashgemm-rpc-cluster status --tracker {tracker.host}:{tracker.port} checks it")
    return info


def server_count(tracker: Tracker, timeout: float = 10.0) -> int:
    """Servers registered under the tracker's key (busy or free)."""
    info = summary(tracker, timeout)
    return sum(1 for s in info.get("server_info", []) if s.get("key", "").split(":", 1)[-1] == tracker.key)


# One session per runner worker, kept across candidates: a server starts a fresh process for every session
# (spawned: seconds of Python and TVM start-up), which then pays CUDA's start-up too. The
# session is given back to the tracker after IDLE_S without work (between batches, while the search and
# the builder run, so that other tuning jobs get the server), after any failed candidate (a kernel fault
# poisons the CUDA context), and before the server's own session timeout could kill it.
_IDLE_S = float(os.environ.get("FLASHGEMM_RPC_IDLE_S", "2"))
_lock = threading.Lock()
_held: dict = {"session": None, "config": None, "born": 0.0, "used": 0.0, "busy": False, "ok": False, "args": None}
_reaper: list = []
_POLL_S = 1.0  # how often a worker waiting for a session asks the tracker whether any server is left
GONE_GRACE_S = 5.0  # no server listed this long: they are gone (a server re-registers within ms of a session)
_ARGS_KEPT = 2  # workloads whose arguments a session keeps (flashgemm-tune --jobs 2 may alternate between two)


def _drop_locked() -> None:
    # the last references to the session and its remote arrays: the connection closes
    _held.update(session=None, config=None, busy=False, args=None)


def _alive(session) -> bool:
    try:
        session.get_function("tvm.rpc.server.workpath")  # one round trip
        return True
    except Exception:  # noqa: BLE001
        return False


def _reap_idle() -> None:
    while True:
        time.sleep(min(0.25, _IDLE_S / 4))
        with _lock:
            if _held["session"] is not None and not _held["busy"] and time.time() - _held["used"] > _IDLE_S:
                _drop_locked()


def _request(rpc_config: ms.runner.RPCConfig):
    """A new session; an error instead of TVM's endless wait when no server is free for FLASHGEMM_RPC_WAIT_S
    seconds (default: long enough for every other worker's candidate to finish), or at once (after
    GONE_GRACE_S) when the tracker lists no server under the key at all: the servers are gone, and each of a
    batch's candidates waiting out the full time would stall the run for hours before it stops."""
    wait = float(os.environ.get(ENV_WAIT, 0)) or max(120.0, 3.0 * rpc_config.session_timeout_sec)
    tracker = Tracker(rpc_config.tracker_host, rpc_config.tracker_port, rpc_config.tracker_key)
    state = {"empty_since": None, "why": f"within {wait:.0f} s"}

    def servers_listed() -> bool:
        try:
            listed = server_count(tracker, timeout=_POLL_S * 5)
        except TrackerError:
            listed = 0  # the tracker is gone too: no server can be handed out
        if listed or state["empty_since"] is None:
            state["empty_since"] = None if listed else time.time()
            return True
        if time.time() - state["empty_since"] < GONE_GRACE_S:
            return True
        state["why"] = f"(none has been registered with the tracker for {GONE_GRACE_S:.0f} s)"
        return False

    value, err = _within(wait, rpc_config.connect_server, servers_listed)
    if value is not None:
        return value
    raise RuntimeError(f"{NO_SERVER} under key {rpc_config.tracker_key!r} at {rpc_config.tracker_host}:"
                       f"{rpc_config.tracker_port} {state['why']}" + (f": {err}" if err else ""))


def create_session(rpc_config: ms.runner.RPCConfig):
    """The session this worker holds, if still good, else a new one from the tracker."""
    now = time.time()
    with _lock:
        s = _held["session"]
        if s is not None and (_held["config"] != rpc_config or now - _held["born"] > rpc_config.session_timeout_sec / 2
                              or not _alive(s)):
            _drop_locked()
            s = None
        if s is not None:
            _held.update(busy=True, ok=False)
            return s
    s = _request(rpc_config)
    with _lock:
        _held.update(session=s, config=rpc_config, born=time.time(), busy=True, ok=False)
        if not _reaper:
            _reaper.append(threading.Thread(target=_reap_idle, daemon=True))
            _reaper[0].start()
    return s


def _bounded(what: str, fn):
    """fn() with a client-side deadline of the session timeout + 30 s. The server's own session timeout did not
    end every stuck session: one that connected and never went on could hold its runner worker (and the whole
    search) for minutes. Past the deadline the candidate fails and its session is dropped."""
    limit = (_held["config"].session_timeout_sec if _held["config"] is not None else 60) + 30.0
    value, err = _within(limit, fn)
    if err is not None:
        raise err
    if value is None:
        raise RuntimeError(f"{what} got no answer from the RPC server in {limit:.0f} s; candidate abandoned")
    return value


def upload_module(session, local_path: str, remote_path: str):
    """Meta-Schedule's upload, under a name of the candidate's own. Every artifact is called tvm_tmp_mod.tar;
    in a session kept across candidates, loading a second library at the first one's path gave back the
    first (one kernel was then timed for every candidate of the batch)."""
    unique = f"{os.path.basename(os.path.dirname(local_path))}-{remote_path}"
    _held["remote"] = unique

    def go():
        session.upload(local_path, unique)
        return session.load_module(unique)
    return _bounded("upload", go)


def alloc_argument(session, device, args_info, alloc_repeat):
    """Meta-Schedule's allocation (random fill), made once per held session and workload and reused by its later
    candidates. The default random-fills every argument for every candidate, which costs far more than the
    kernels' few milliseconds of timing on the big workloads (W1: 160 MB of arguments). A kernel's speed does not
    depend on the values, and every candidate writes the whole output, so sharing the buffers changes no
    measurement (the local runner does the same, flashgemm/codegen/cuda_runner.py)."""
    from tvm.s_tir.meta_schedule.runner.rpc_runner import default_alloc_argument  # noqa: PLC0415

    key = (str(device), repr(args_info), alloc_repeat)
    with _lock:
        cached = _held["args"] if _held["args"] is not None and _held["args"][0] is session else None
        if cached is not None and key in cached[1]:
            return cached[1][key]
    args = _bounded("allocation", lambda: default_alloc_argument(session, device, args_info, alloc_repeat))
    with _lock:
        if _held["session"] is session:  # not dropped meanwhile: keep them for the next candidate
            if _held["args"] is None or _held["args"][0] is not session or len(_held["args"][1]) >= _ARGS_KEPT:
                _held["args"] = (session, {})
            _held["args"][1][key] = args
    return args


def run_evaluator(session, rt_mod, device, evaluator_config, repeated_args):
    """Meta-Schedule's timing; marks the held session good for the next candidate only when it succeeds."""
    from tvm.s_tir.meta_schedule.runner.rpc_runner import default_run_evaluator  # noqa: PLC0415

    costs = _bounded("timing", lambda: default_run_evaluator(session, rt_mod, device, evaluator_config,
                                                             repeated_args))
    _held["ok"] = True
    return costs


def cleanup(session, remote_path) -> None:
    """Remove the candidate's files on the server (not its work directory, as Meta-Schedule's cleanup does:
    the session lives on); keep the session for the next candidate if this one went well. A dropped
    session's directory goes with it."""
    remote_path = _held.pop("remote", None) or remote_path
    try:
        if _held["ok"] and session is not None and remote_path is not None:
            session.remove(remote_path)
            session.remove(remote_path + ".so")
    except Exception:  # noqa: BLE001  (a broken session: drop it below)
        _held["ok"] = False
    finally:
        with _lock:
            if not _held["ok"]:
                _drop_locked()
            _held.update(busy=False, used=time.time())


def runner(tracker: Tracker, evaluator_config: ms.runner.EvaluatorConfig, workers: int,
           session_timeout: int = 60) -> ms.runner.Runner:
    """An RPCRunner with one worker per server (`workers`), each candidate in its own server session that the
    server kills after `session_timeout` seconds (a hung kernel costs one candidate, not the run)."""
    config = ms.runner.RPCConfig(tracker_host=tracker.host, tracker_port=tracker.port, tracker_key=tracker.key,
                                 session_timeout_sec=session_timeout)
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator_config,
                               f_create_session=create_session, f_upload_module=upload_module,
                               f_alloc_argument=alloc_argument, f_run_evaluator=run_evaluator,
                               f_cleanup=cleanup, max_workers=max(1, workers), initializer=ignore_stop_signals)


def is_no_server(error_msg) -> bool:
    return error_msg is not None and NO_SERVER in str(error_msg)
