"""Tuning through TVM's RPC tracker (flashgemm-tune --runner rpc), with CPU (llvm) servers on loopback.

The fault tests kill servers mid-run: tuning must go on with the rest, lose only the candidates in flight,
and stop with a clear error, its measurements kept, when no server is left.
"""
import contextlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flashgemm.op.workloads import parse
from flashgemm.tune import database as dbm
from flashgemm.tune import rpc_cluster, rpc_runner, tuner

REPO = Path(__file__).resolve().parent.parent
TUNE = [sys.executable, "-m", "flashgemm.cli.tune"]
CLUSTER = [sys.executable, "-m", "flashgemm.cli.rpc_cluster"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_port_range(n: int = 8) -> tuple:
    """n consecutive ports free now, away from rpc_cluster's default server range: two test suites on one host
    (and a real cluster) must not share server ports, or a tracker's record of a killed server can point at a
    port another suite's server holds under the same key."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        lo = rng.randrange(20000, 32000 - n)
        try:
            with contextlib.ExitStack() as held:
                for p in range(lo, lo + n):
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", p))
            return lo, lo + n
        except OSError:
            continue
    raise RuntimeError("no free port range found")


@pytest.fixture
def cluster(tmp_path):
    c = rpc_cluster.start(devices=["cpu", "cpu"], port=_free_port(), log_dir=tmp_path / "rpc-logs",
                          server_ports=_free_port_range(), log=lambda *_: None)
    yield c
    rpc_cluster.stop(c, log=lambda *_: None)


def _records(wl_dir: Path, work: str = "work") -> list:
    lines = (wl_dir / work / "database_tuning_record.json").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_parse_tracker_and_its_errors(monkeypatch):
    for var in ("TVM_TRACKER_HOST", "TVM_TRACKER_PORT", "TVM_TRACKER_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert rpc_runner.parse_tracker("10.0.0.2:9190", "h100") == rpc_runner.Tracker("10.0.0.2", 9190, "h100")
    with pytest.raises(rpc_runner.TrackerError, match="--tracker HOST:PORT"):
        rpc_runner.parse_tracker(None, "k")
    with pytest.raises(rpc_runner.TrackerError, match="--key"):
        rpc_runner.parse_tracker("h:1", None)
    with pytest.raises(rpc_runner.TrackerError, match="HOST:PORT"):
        rpc_runner.parse_tracker("nohost", "k")
    monkeypatch.setenv("TVM_TRACKER_HOST", "127.0.0.1")
    monkeypatch.setenv("TVM_TRACKER_PORT", "9999")
    monkeypatch.setenv("TVM_TRACKER_KEY", "gpu")
    assert rpc_runner.parse_tracker(None, None) == rpc_runner.Tracker("127.0.0.1", 9999, "gpu")


def test_tune_py_rpc_arguments_are_checked(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TVM_TRACKER")}
    out = subprocess.run([*TUNE, "--target", "llvm", "--workload", "demo", "--runner", "rpc", "--db", str(tmp_path)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 2 and "--tracker HOST:PORT" in out.stderr
    out = subprocess.run([*TUNE, "--target", "llvm", "--workload", "demo", "--jobs", "2", "--db", str(tmp_path)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 2 and "--jobs > 1 needs --runner rpc" in out.stderr


def test_unreachable_tracker_is_a_clear_error(tmp_path):
    nobody = rpc_runner.Tracker("127.0.0.1", _free_port(), "flashgemm")
    with pytest.raises(rpc_runner.TrackerError, match="cannot reach the RPC tracker"):
        tuner.tune(parse("demo"), "llvm", 4, db_root=tmp_path, tracker=nobody, progress=False)


def test_no_server_under_the_key_is_a_clear_error(cluster, tmp_path):
    other_key = rpc_runner.Tracker(cluster.tracker_host, cluster.tracker_port, "no-such-key")
    with pytest.raises(rpc_runner.TrackerError, match="no RPC server is registered under key 'no-such-key'"):
        tuner.tune(parse("demo"), "llvm", 4, db_root=tmp_path, tracker=other_key, progress=False)


def test_server_port_range_is_checked(tmp_path):
    with pytest.raises(rpc_cluster.ClusterError, match="cannot hold 2 server"):
        rpc_cluster.start(devices=["cpu", "cpu"], port=_free_port(), log_dir=tmp_path, server_ports=(30000, 30001))
    out = subprocess.run([*CLUSTER, "start", "--gpus", "none", "--server-ports", "9190-9090",
                          "--state", str(tmp_path / "s.json")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "want 0 < LO < HI" in out.stderr and not (tmp_path / "s.json").exists()


def test_rpc_cluster_script_start_status_stop(tmp_path):
    state, port = tmp_path / "state.json", _free_port()
    start = [*CLUSTER, "start", "--gpus", "none", "--cpu-servers", "2", "--port", str(port), "--state", str(state),
             "--log-dir", str(tmp_path / "logs"), "--server-ports", "%d-%d" % _free_port_range()]
    out = subprocess.run(start, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pids = [s["pid"] for s in json.loads(state.read_text())["servers"]] + [json.loads(state.read_text())["tracker_pid"]]
    try:
        status = subprocess.run([*CLUSTER, "status", "--state", str(state)], capture_output=True, text=True)
        assert "key 'flashgemm': 2 server(s)" in status.stdout, status.stdout + status.stderr
        again = subprocess.run(start, capture_output=True, text=True, timeout=60)
        assert again.returncode == 2 and "exists" in again.stderr
    finally:
        subprocess.run([*CLUSTER, "stop", "--state", str(state)], capture_output=True, text=True, timeout=60)
    time.sleep(0.5)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    assert not state.exists()


@pytest.fixture
def fake_spawn(monkeypatch):
    """rpc_cluster.start with nothing started: _spawn records each command line and hands back a harmless `sleep` in
    its own process group as the process (so that a stop reached by mistake would meet a real group, not ours);
    the tracker answers at once and lists every server."""
    started, sleepers = [], []

    def spawn(args, log, env):
        started.append(args)
        sleepers.append(subprocess.Popen(["sleep", "60"], start_new_session=True))
        return sleepers[-1]

    monkeypatch.setattr(rpc_cluster, "_spawn", spawn)
    monkeypatch.setattr(rpc_cluster, "_wait_for", lambda *a, **k: None)
    monkeypatch.setattr(rpc_cluster, "_check_port_free", lambda *a: None)
    monkeypatch.setattr(rpc_runner, "server_count", lambda *a, **k: 0)
    yield started
    for p in sleepers:
        p.kill()
        p.wait()


def _bound(args: list) -> str:
    return args[args.index("--host") + 1]


def test_the_cluster_binds_loopback_unless_told_otherwise(fake_spawn, tmp_path):
    warned = []
    c = rpc_cluster.start(devices=["cpu", "cpu"], port=_free_port(), log_dir=tmp_path, log=lambda *_: None,
                          warn=warned.append)
    assert [a[0] for a in fake_spawn] == [rpc_cluster.TRACKER_MODULE] + [rpc_cluster.SERVER_MODULE] * 2
    assert [_bound(a) for a in fake_spawn] == ["127.0.0.1"] * 3 and not warned
    assert c.tracker_started == rpc_cluster.start_time(c.tracker_pid) is not None
    assert all(s["started"] == rpc_cluster.start_time(s["pid"]) for s in c.servers)
    # servers joining a tracker through an SSH tunnel register as 127.0.0.1 and listen there (not on every interface)
    fake_spawn.clear()
    rpc_cluster.start(devices=["cpu"], tracker="127.0.0.1:9999", custom_addr="127.0.0.1", log_dir=tmp_path,
                      log=lambda *_: None, warn=warned.append)
    assert [_bound(a) for a in fake_spawn] == ["127.0.0.1"] and not warned
    # a non-loopback --custom-addr with loopback-bound servers would register servers nobody can reach
    fake_spawn.clear()
    with pytest.raises(rpc_cluster.ClusterError, match="add --host .* or reach them through an SSH tunnel"):
        rpc_cluster.start(devices=["cpu"], tracker="127.0.0.1:9999", custom_addr="192.0.2.7", log_dir=tmp_path)
    assert not fake_spawn


def test_an_explicit_non_loopback_host_warns(fake_spawn, tmp_path, capsys):
    """Only command lines are made here (fake_spawn): nothing listens on the address named."""
    warned = []
    rpc_cluster.start(devices=["cpu"], host="0.0.0.0", port=_free_port(), log_dir=tmp_path, log=lambda *_: None,
                      warn=warned.append)
    assert [_bound(a) for a in fake_spawn] == ["0.0.0.0"] * 2
    assert len(warned) == 1 and "\n" not in warned[0]
    assert "0.0.0.0" in warned[0] and "no authentication" in warned[0] and "runs any code" in warned[0]
    assert rpc_cluster.is_loopback("127.0.0.1") and rpc_cluster.is_loopback("::1")
    assert rpc_cluster.is_loopback("localhost") and not rpc_cluster.is_loopback("0.0.0.0")
    # the script: the warning on stderr, one line
    from flashgemm.cli import rpc_cluster as script  # noqa: PLC0415
    capsys.readouterr()
    assert script.main(["start", "--gpus", "none", "--host", "0.0.0.0", "--port", str(_free_port()),
                        "--state", str(tmp_path / "s.json"), "--log-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "no authentication" in line] == [rpc_cluster.EXPOSED_WARNING.format(host="0.0.0.0")]


def test_a_started_cluster_listens_on_loopback_only(tmp_path):
    psutil = pytest.importorskip("psutil")
    c = rpc_cluster.start(devices=["cpu"], port=_free_port(), log_dir=tmp_path, server_ports=_free_port_range(),
                          log=lambda *_: None)
    try:
        for pid in [c.tracker_pid] + [s["pid"] for s in c.servers]:
            leader = psutil.Process(pid)  # (TVM's server listens in a worker process it starts)
            listening = [conn.laddr.ip for proc in [leader, *leader.children(recursive=True)]
                         for conn in proc.net_connections("tcp") if conn.status == psutil.CONN_LISTEN]
            assert listening and set(listening) == {"127.0.0.1"}, (pid, listening)
    finally:
        rpc_cluster.stop(c, log=lambda *_: None)


def test_stop_leaves_alone_a_pid_that_is_not_ours(tmp_path):
    """A state file's pids can belong to other processes by the time of `stop` (the cluster died, the pids were
    reused): only a process running TVM's module, started when recorded, is signalled. Each stand-in leads its own
    process group, as the cluster's processes do, so a stop that did not check would kill it."""
    def spawn(*args):
        return subprocess.Popen([*args], start_new_session=True)

    sleeper = spawn("sleep", "60")                       # not TVM's at all
    impostor = spawn(sys.executable, "-c", "import time; time.sleep(60)", rpc_cluster.SERVER_MODULE)
    ours = spawn(sys.executable, "-c", "import time; time.sleep(60)", rpc_cluster.SERVER_MODULE)
    try:
        time.sleep(0.3)  # (the interpreters' command lines are theirs once exec'd; Popen returns after exec)
        state = tmp_path / "state.json"
        rpc_cluster.Cluster("127.0.0.1", 1, "k", sleeper.pid, [
            {"pid": impostor.pid, "device": "cpu", "log": "", "started": rpc_cluster.start_time(impostor.pid) + 1},
            {"pid": ours.pid, "device": "cpu", "log": "", "started": rpc_cluster.start_time(ours.pid)},
        ]).save(state)
        out = subprocess.run([*CLUSTER, "stop", "--state", str(state)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert sleeper.poll() is None and impostor.poll() is None, "stop signalled a process that is not ours"
        assert ours.wait(timeout=10) is not None  # the one that checks out is stopped (the check can say yes)
        assert (f"left tracker pid {sleeper.pid} alone: pid {sleeper.pid} is not TVM's {rpc_cluster.TRACKER_MODULE} "
                f"but runs: sleep 60") in out.stdout
        assert f"left server pid {impostor.pid} alone: pid {impostor.pid} now belongs to another process" in out.stdout
        assert f"stopped server pid {ours.pid}" in out.stdout and not state.exists()
        # a state file without start times (written before they were recorded): the command line decides
        old = rpc_cluster.Cluster("127.0.0.1", 1, "k", None, [{"pid": sleeper.pid, "device": "cpu", "log": ""}])
        reports = []
        rpc_cluster.stop(old, log=reports.append)
        assert sleeper.poll() is None and reports == [
            f"[rpc] left server pid {sleeper.pid} alone: pid {sleeper.pid} is not TVM's {rpc_cluster.SERVER_MODULE} "
            f"but runs: sleep 60"]
    finally:
        for p in (sleeper, impostor, ours):
            p.kill()
            p.wait()


def test_tuning_goes_on_when_a_server_is_killed_mid_run(cluster, tmp_path):
    """Kill one of two servers while its session is open: only candidates in flight on it fail."""
    victim = cluster.servers[0]
    killed = threading.Event()

    def kill_on_second_session():  # the first session serves batch 1; kill when it comes back for batch 2
        log = Path(victim["log"])
        while not killed.is_set():
            if log.exists() and log.read_text().count("connected from") >= 2:
                rpc_cluster.kill_group(victim["pid"])
                killed.set()
            time.sleep(0.02)

    threading.Thread(target=kill_on_second_session, daemon=True).start()
    prov = tuner.tune(parse("demo"), "llvm", 12, strategy="random", db_root=tmp_path, batch_size=6,
                      tracker=cluster.tracker, progress=False)
    assert killed.is_set(), "the server was never killed: the test did not test anything"
    run = prov["runs"][-1]
    assert run["runner"] == "rpc:2" and run["trials"] == 12
    assert run["valid"] >= 10, run  # at most the candidates in flight on the killed server (one per worker)
    wl_dir = dbm.workload_dir(tmp_path, "llvm", parse("demo").dir_name)
    assert len(_records(wl_dir)) == 12
    assert prov["best_secs"] and prov["top_k"] == min(10, run["valid"])


def test_a_held_session_allocates_a_workloads_arguments_once(cluster):
    """The RPC runner's arguments: one random fill per held session and workload (two workloads kept), a fresh
    one in a new session (the old session's remote arrays go with it)."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    t = cluster.tracker
    cfg = ms.runner.RPCConfig(tracker_host=t.host, tracker_port=t.port, tracker_key=t.key, session_timeout_sec=60)
    infos = [(("TENSOR", "float32", [n]),) for n in (8, 3, 5)]
    s = rpc_runner.create_session(cfg)
    try:
        dev = s.cpu(0)
        first = rpc_runner.alloc_argument(s, dev, infos[0], 1)
        assert first[0][0].numpy().shape == (8,) and first[0][0].numpy().any()  # random, not zeros
        assert rpc_runner.alloc_argument(s, dev, infos[0], 1) is first
        second = rpc_runner.alloc_argument(s, dev, infos[1], 1)
        assert second is not first and second[0][0].numpy().shape == (3,)
        assert rpc_runner.alloc_argument(s, dev, infos[0], 1) is first  # --jobs 2 alternating: both kept
        assert rpc_runner.alloc_argument(s, dev, infos[2], 1)[0][0].numpy().shape == (5,)  # a third: start over
        assert rpc_runner.alloc_argument(s, dev, infos[0], 1) is not first
    finally:
        rpc_runner.cleanup(s, None)  # not marked good: the session is dropped, with its arrays
    assert rpc_runner._held["session"] is None and rpc_runner._held["args"] is None
    s2 = rpc_runner.create_session(cfg)
    try:
        again = rpc_runner.alloc_argument(s2, s2.cpu(0), infos[0], 1)
        assert again is not first and again[0][0].numpy().shape == (8,)
    finally:
        rpc_runner.cleanup(s2, None)


def test_a_session_request_waits_while_servers_are_busy_and_ends_soon_when_none_is_left(tmp_path, monkeypatch):
    """A busy server: the request waits FLASHGEMM_RPC_WAIT_S. No server listed at all: it ends after
    GONE_GRACE_S, whatever the wait (each of a batch's candidates would wait it out otherwise)."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    one = rpc_cluster.start(devices=["cpu"], port=_free_port(), log_dir=tmp_path / "logs",
                            server_ports=_free_port_range(), log=lambda *_: None)
    try:
        t = one.tracker
        cfg = ms.runner.RPCConfig(tracker_host=t.host, tracker_port=t.port, tracker_key=t.key,
                                  session_timeout_sec=60)
        monkeypatch.setenv(rpc_runner.ENV_WAIT, "8")
        held = rpc_runner._request(cfg)  # the only server, busy from now on
        t0 = time.time()
        with pytest.raises(RuntimeError, match="no RPC server answered under key .* within 8 s"):
            rpc_runner._request(cfg)
        assert time.time() - t0 >= 8
        del held
        for s in one.servers:
            rpc_cluster.kill_group(s["pid"])
        monkeypatch.setenv(rpc_runner.ENV_WAIT, "600")
        t0 = time.time()
        with pytest.raises(RuntimeError, match="none has been registered with the tracker for 5 s"):
            rpc_runner._request(cfg)
        assert time.time() - t0 < rpc_runner.GONE_GRACE_S + 30
    finally:
        rpc_cluster.stop(one, log=lambda *_: None)


def test_tuning_stops_cleanly_when_every_server_is_gone_and_resumes(cluster, tmp_path):
    wl = parse("demo")
    first_batch = []

    def kill_all_after_first_batch(line):
        # The tuner reports each batch after measuring it and before proposing the next: the servers die between
        # batch 1 and batch 2 whatever the load. (Batch 1 may hold fewer than 6 candidates: the random search
        # drops repeats.)
        measured = re.match(r"\[tune\] (\d+)/12 trials", line)
        if measured and not first_batch:
            for s in cluster.servers:
                rpc_cluster.kill_group(s["pid"])
            first_batch.append(int(measured.group(1)))

    with pytest.raises(rpc_runner.NoServerError,
                       match="no RPC server answered.*none has been registered.*run the same command again"):
        tuner.tune(wl, "llvm", 12, strategy="random", db_root=tmp_path, batch_size=6, tracker=cluster.tracker,
                   progress=False, log=kill_all_after_first_batch)
    assert first_batch and 1 <= first_batch[0] < 12
    wl_dir = dbm.workload_dir(tmp_path, "llvm", wl.dir_name)
    assert len(_records(wl_dir)) == first_batch[0]  # batch 1 kept, the failed batch not stored as trials
    assert json.loads((wl_dir / dbm.PROVENANCE).read_text())["trials"] == first_batch[0]

    # New servers under the same tracker: the same command goes on to the budget.
    more = rpc_cluster.start(devices=["cpu"], tracker=f"{cluster.tracker_host}:{cluster.tracker_port}",
                             key=cluster.key, log_dir=tmp_path / "more-logs", server_ports=_free_port_range(),
                             log=lambda *_: None)
    try:
        prov = tuner.tune(wl, "llvm", 12, strategy="random", db_root=tmp_path, batch_size=6, tracker=cluster.tracker,
                          progress=False)
    finally:
        rpc_cluster.stop(more, log=lambda *_: None)
    assert prov["trials"] == 12 and len(_records(wl_dir)) == 12


def test_rpc_cluster_run_tunes_several_workloads_at_once(tmp_path):
    """flashgemm-rpc-cluster run -- flashgemm-tune --runner rpc --jobs 2: two workloads share two servers; all stopped
    after."""
    out = subprocess.run([*CLUSTER, "run", "--gpus", "none", "--cpu-servers", "2", "--port", str(_free_port()),
                          "--server-ports", "%d-%d" % _free_port_range(), "--log-dir", str(tmp_path / "logs"), "--",
                          *TUNE, "--target", "llvm", "--workload", "demo", "--workload", "a=2x64x32,b=2x32x64",
                          "--trials", "4", "--batch-size", "2", "--strategy", "random", "--runner", "rpc",
                          "--jobs", "2", "--db", str(tmp_path / "db")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 workloads, 2 at a time" in out.stdout
    dirs = sorted(p.name for p in (tmp_path / "db" / "llvm").iterdir())
    assert len(dirs) == 2
    for d in dirs:
        prov = json.loads((tmp_path / "db" / "llvm" / d / dbm.PROVENANCE).read_text())
        assert prov["trials"] == 4 and prov["runs"][-1]["runner"] == "rpc:2"
    assert out.stdout.count("stopped server pid") == 2 and "stopped tracker" in out.stdout


def test_one_workload_as_two_searches_merges_and_resumes(cluster, tmp_path):
    """--searches 2: the budget split over two searches (own work dirs, own processes), one top-k; a rerun with a
    larger budget goes on in both; a plain run afterwards counts every search's trials."""
    wl = parse("demo")
    wl_dir = dbm.workload_dir(tmp_path, "llvm", wl.dir_name)
    prov = tuner.tune(wl, "llvm", 8, strategy="random", db_root=tmp_path, batch_size=2, tracker=cluster.tracker,
                      progress=False, shards=2, workers=2)
    run = prov["runs"][-1]
    assert prov["trials"] == 8 and run["trials"] == 8 and run["searches"] == 2 and run["workers"] == 2
    assert run["population"] == 512  # what the searches used (random search keeps the population asked)
    shard_counts = [len(_records(wl_dir, f"work/shard-{i}")) for i in range(2)]
    assert shard_counts == [4, 4]
    assert prov["top_k"] == min(10, run["valid"]) and prov["best_secs"]
    curve = (wl_dir / "curve.csv").read_text().splitlines()
    assert len(curve) == 1 + 8 and curve[-1].startswith("8,")
    prov = tuner.tune(wl, "llvm", 12, strategy="random", db_root=tmp_path, batch_size=2, tracker=cluster.tracker,
                      progress=False, shards=2, workers=2)
    assert prov["trials"] == 12 and [len(_records(wl_dir, f"work/shard-{i}")) for i in range(2)] == [6, 6]
    prov = tuner.tune(wl, "llvm", 14, strategy="random", db_root=tmp_path, batch_size=2, tracker=cluster.tracker,
                      progress=False, workers=2)
    assert prov["trials"] == 14 and prov["runs"][-1]["trials"] == 2


def test_searches_argument_is_checked(tmp_path):
    out = subprocess.run([*TUNE, "--target", "llvm", "--workload", "demo", "--searches", "2", "--db", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--searches > 1 needs --runner rpc" in out.stderr
    with pytest.raises(ValueError, match="needs an RPC tracker"):
        tuner.tune(parse("demo"), "llvm", 4, db_root=tmp_path, shards=2, progress=False)


@pytest.mark.gpu
def test_rpc_tuning_on_the_local_gpu_times_each_candidate(tmp_path):
    """One GPU server on this machine: every candidate valid, and timed as itself. (A session kept across
    candidates once loaded every candidate's library from one path and timed the first kernel each time.)"""
    from flashgemm import targets  # noqa: PLC0415

    target = targets.detect_local()
    c = rpc_cluster.start(devices=["0"], port=_free_port(), log_dir=tmp_path / "rpc-logs",
                          server_ports=_free_port_range(), log=lambda *_: None)
    try:
        prov = tuner.tune(parse("vit-b16"), target, 16, db_root=tmp_path, batch_size=16, tracker=c.tracker,
                          progress=False)
    finally:
        rpc_cluster.stop(c, log=lambda *_: None)
    assert prov["runs"][-1]["valid"] == 16
    times = [sum(r[1][1]) / len(r[1][1]) for r in _records(dbm.workload_dir(tmp_path, target, "vit-b16.f16"))]
    assert len({round(t * 1e7) for t in times}) >= 8, times  # 16 different kernels: not one time 16 times


def test_a_batch_stops_the_run_when_every_built_candidate_found_no_server():
    """Candidates that failed to build never asked for a server: a batch of no-server errors beside build errors
    is a batch without servers (it used to be stored as invalid trials, and the run went on)."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415

    from flashgemm.tune.stopping import Progress  # noqa: PLC0415
    no_server = ms.runner.RunnerResult(None, f"RuntimeError: {rpc_runner.NO_SERVER} under key 'k' at h:1")
    build_error = ms.runner.RunnerResult(None, "Build error")
    measured = ms.runner.RunnerResult([1e-5], None)
    built, broken = ms.builder.BuilderResult("/nonexistent/a", None), ms.builder.BuilderResult(None, "nvcc failed")
    prog = Progress(0, float("inf"), lambda p: None)._inst  # (the Python object: no task scheduler to pass)
    with pytest.raises(rpc_runner.NoServerError, match="no RPC server answered"):
        prog.apply(None, 0, [], [built, broken, built], [no_server, build_error, no_server])
    assert prog.done == 0  # nothing counted: the batch is redone on resume
    prog.apply(None, 0, [], [built, broken, built], [no_server, build_error, measured])
    assert (prog.done, prog.valid, prog.invalid) == (3, 1, 2)  # one server answered: the batch counts
    prog.apply(None, 0, [], [broken, broken], [build_error, build_error])
    assert (prog.done, prog.invalid) == (5, 4)  # nothing built: nothing to say about servers
