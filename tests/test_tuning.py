"""flashgemm-tune and flashgemm/databases/ on the CPU (llvm): tiny budgets, resume, top-k pruning, provenance,
interrupted runs, and bad arguments. Each tuning call costs tens of seconds on 2 cores."""
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flashgemm.spaces import kernel_forms
from flashgemm.op.workloads import parse
from flashgemm.tune import database as dbm
from flashgemm.tune import provenance, search, seeding, stopping, tuner
from flashgemm.spaces.intrinsics import register_intrinsics

REPO = Path(__file__).resolve().parent.parent
TUNE = [sys.executable, "-m", "flashgemm.cli.tune"]
SPEC = "a=2x16x8,b=8x16,mask=2x1x16:bool,scale=0.5,name=tiny"


def records(path: Path) -> list:
    return [json.loads(line) for line in (path / "database_tuning_record.json").read_text().splitlines()]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One workload tuned for 3 trials, then resumed to 5."""
    root = tmp_path_factory.mktemp("db")
    wl = parse(SPEC)
    first = tuner.tune(wl, "llvm", 3, db_root=root, workers=2, progress=False)
    second = tuner.tune(wl, "llvm", 5, db_root=root, workers=2, progress=False)
    return root, wl, first, second


@pytest.mark.slow
def test_tuning_writes_a_top_k_database_with_provenance(tuned):
    root, wl, first, _ = tuned
    wl_dir = root / "llvm" / wl.dir_name
    assert first["trials"] == 3 and first["valid"] + first["invalid"] == 3
    prov = json.loads((wl_dir / "provenance.json").read_text())
    for key in ("target", "workload", "variant", "canonical_sizes", "trials", "valid", "invalid",
                "strategy", "best_secs", "environment", "runs"):
        assert key in prov, key
    assert prov["target"] == "llvm" and prov["workload"]["spec"] == wl.spec()
    assert prov["environment"]["tvm"].startswith("0.27")
    assert prov["best_secs"] > 0
    recs = records(wl_dir)
    assert 1 <= len(recs) <= 10
    secs = [sum(r[1][1]) / len(r[1][1]) for r in recs]
    assert secs == sorted(secs) and secs[0] == pytest.approx(prov["best_secs"])
    assert all(s < dbm.INVALID_SECS for s in secs), "invalid candidates must never be kept as winners"
    assert (wl_dir / "curve.csv").read_text().startswith("trial,best_seconds")
    assert (wl_dir / "curve.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_running_again_resumes_toward_the_budget(tuned):
    root, wl, first, second = tuned
    assert second["trials"] == 5
    assert [r["trials"] for r in second["runs"]] == [3, 2]
    assert second["best_secs"] <= first["best_secs"]
    # the budget is met: a third call measures nothing and keeps the database
    again = tuner.tune(wl, "llvm", 5, db_root=root, workers=2, progress=False)
    assert again["trials"] == 5 and len(again["runs"]) == 2


@pytest.mark.slow
def test_a_provenance_put_back_between_slices_is_restored_from_the_work_ledger(tmp_path):
    """A checkout or pull between two slices puts the tracked provenance.json and curve.csv back to an older
    state while work/ keeps every record: the next slice restores the lost run from work/'s ledger (instead of
    counting its trials as a run that never finished) and republishes the whole curve."""
    wl = parse(SPEC)
    wl_dir = tmp_path / "llvm" / wl.dir_name
    tuner.tune(wl, "llvm", 2, db_root=tmp_path, workers=2, progress=False)
    tracked = ("provenance.json", "curve.csv", *dbm.DB_FILES)  # (a database's files go back as a set)
    old = {f: (wl_dir / f).read_bytes() for f in tracked}
    tuner.tune(wl, "llvm", 4, db_root=tmp_path, workers=2, progress=False)
    for f in tracked:  # git checkout of the committed files
        (wl_dir / f).write_bytes(old[f])
    third = tuner.tune(wl, "llvm", 5, db_root=tmp_path, workers=2, progress=False)
    assert [r["trials"] for r in third["runs"]] == [2, 2, 1]
    assert not any("stopped before they finished" in r.get("note", "") for r in third["runs"])
    trials = [int(line.split(",")[0]) for line in (wl_dir / "curve.csv").read_text().splitlines()[1:]]
    assert trials == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_top_k_prunes(tuned):
    root, wl, _, _ = tuned
    prov = tuner.tune(wl, "llvm", 5, db_root=root, top_k=1, workers=2, progress=False)
    assert prov["top_k"] == 1 and len(records(root / "llvm" / wl.dir_name)) == 1


@pytest.mark.slow
def test_torn_last_line_is_repaired_and_tuning_goes_on(tuned):
    root, wl, _, _ = tuned
    work = root / "llvm" / wl.dir_name / "work" / "database_tuning_record.json"
    n = len(work.read_text().splitlines())
    with work.open("a") as fh:
        fh.write('[0, [[["GetSBlock", [], ["S", "ma')  # a write cut by kill -9
    prov = tuner.tune(wl, "llvm", 6, db_root=root, workers=2, progress=False)
    assert prov["trials"] == 6 and len(work.read_text().splitlines()) == n + 1


@pytest.mark.slow
def test_kill_dash_9_mid_run_loses_at_most_the_batch_in_flight(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = TUNE + ["--target", "llvm", "--workload", SPEC, "--trials", "4", "--batch-size", "2",
                  "--db", str(tmp_path), "--workers", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    work = tmp_path / "llvm" / parse(SPEC).dir_name / "work"
    deadline = time.time() + 240
    records = work / "database_tuning_record.json"
    while time.time() < deadline and proc.poll() is None:
        if records.exists() and records.read_text().strip():  # first batch stored: kill the second mid-flight
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed mid-way"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = len(records.read_text().splitlines())
    assert 1 <= killed < 4
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    prov = json.loads((work.parent / "provenance.json").read_text())
    assert prov["trials"] == 4 and prov["best_secs"] > 0
    # the killed run's trials are counted in the provenance as an unrecorded run
    (lost,) = [r for r in prov["runs"] if "note" in r]
    assert lost["trials"] == killed and "stopped before they finished" in lost["note"]
    assert sum(r["trials"] for r in prov["runs"]) == 4
    # the killed run's records are on the curve too, in the order they were measured, ahead of the resumed run's
    curve = (work.parent / "curve.csv").read_text().splitlines()[1:]
    assert [int(row.split(",")[0]) for row in curve] == [1, 2, 3, 4]
    assert float(curve[-1].split(",")[1]) == pytest.approx(prov["best_secs"])
    # its points are the killed run's own records (the first ones stored), not the resumed run's
    best, expect = math.inf, []
    for line in records.read_text().splitlines()[:killed]:
        best = min(best, dbm.mean_secs(json.loads(line)[1][1]) or math.inf)
        expect.append(best)
    assert [float(row.split(",")[1]) for row in curve[:killed]] == pytest.approx(expect)


@pytest.mark.slow
@pytest.mark.parametrize("how,target", [("max_minutes", "llvm"), ("sigterm", "llvm"), ("sigterm_to_group", "llvm"),
                                        # the H100 run where `timeout` lost candidates to killed runner workers
                                        pytest.param("sigterm_to_group", "sm_90", marks=pytest.mark.gpu)])
def test_a_time_boxed_or_terminated_run_writes_its_database(tmp_path, how, target):
    """--max-minutes, or SIGTERM, ends the run after a batch and writes the top-k and provenance like a finished
    run; running again goes on. sigterm_to_group is what `timeout` does: the signal to the tuner, then to its
    whole process group, builder and runner workers included; the batch in flight still finishes whole."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = TUNE + ["--target", target, "--workload", SPEC, "--trials", "6", "--batch-size", "2", "--db",
                  str(tmp_path), "--workers", "2"]
    wl_dir = tmp_path / target / parse(SPEC).dir_name
    if how == "max_minutes":
        out = subprocess.run(cmd + ["--max-minutes", "0"], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        assert "stopped early (time budget reached)" in out.stdout
        expect = "time budget reached"
    else:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=how == "sigterm_to_group")
        records = wl_dir / "work" / "database_tuning_record.json"
        deadline = time.time() + 240
        while time.time() < deadline and not (records.exists() and records.read_text().strip()):
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        if how == "sigterm_to_group":
            os.killpg(proc.pid, signal.SIGTERM)
        text, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, text
        assert "SIGTERM: stopping after the batch in flight" in text
        expect = "SIGTERM received"
    prov = json.loads((wl_dir / "provenance.json").read_text())
    assert 2 <= prov["trials"] < 6 and prov["best_secs"] > 0
    assert prov["runs"][-1]["stopped"] == expect and prov["runs"][-1]["trials"] == prov["trials"]
    assert prov["runs"][-1]["invalid"] == 0, "a worker died of the signal and failed its candidate"
    assert len(records_of(wl_dir)) >= 1
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert json.loads((wl_dir / "provenance.json").read_text())["trials"] == 6


@pytest.mark.slow
def test_a_second_signal_aborts_at_once_and_takes_the_workers_along(tmp_path):
    psutil = pytest.importorskip("psutil")
    cmd = TUNE + ["--target", "llvm", "--workload", "demo", "--trials", "64", "--batch-size", "16", "--db",
                  str(tmp_path), "--workers", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, workers = time.time() + 240, []
    while time.time() < deadline and not workers:  # the runner's worker starts with the search, signals handled
        time.sleep(0.5)
        workers = [c for c in psutil.Process(proc.pid).children(recursive=True) if "popen_worker" in " ".join(c.cmdline())]
    assert workers, "no pool worker appeared"
    proc.send_signal(signal.SIGTERM)
    time.sleep(2 * stopping.SAME_SIGNAL_SECONDS)
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, text
    assert "aborted by a second SIGTERM" in text
    time.sleep(0.5)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]


def test_a_signal_repeated_at_once_is_one_stop_request(monkeypatch):
    """`timeout` signals the tuner and then its process group: that second copy must not abort the run, while a
    second signal sent later still does."""
    monkeypatch.setattr(stopping, "SAME_SIGNAL_SECONDS", 0.3)
    killed = []
    monkeypatch.setattr(stopping, "_kill_workers", lambda: killed.append(True))  # not this test process's children
    stop, said, before = stopping.StopRequest(None), [], signal.getsignal(signal.SIGTERM)
    with stopping.stop_on_signals(stop, said.append):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert stop.requested == "SIGTERM received" and len(said) == 1
        time.sleep(0.4)
        assert not killed
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
    assert killed == [True] and signal.getsignal(signal.SIGTERM) == before


def test_a_second_signal_while_the_main_thread_waits_in_c_aborts(monkeypatch):
    """While the main thread waits inside TVM for a batch, Python runs no signal handler; two signals a second apart
    must still be two (the stop request, then the abort with the workers killed at once), not one merged call.
    Here the main thread blocks the signal and sleeps, so the signals land on other threads, as they do then."""
    monkeypatch.setattr(stopping, "SAME_SIGNAL_SECONDS", 0.3)
    killed = []
    monkeypatch.setattr(stopping, "_kill_workers", lambda: killed.append(time.monotonic()))
    stop, said = stopping.StopRequest(None), []
    go = threading.Event()

    def send():
        go.wait()
        for pause in (0.2, 0.6):
            time.sleep(pause)
            os.kill(os.getpid(), signal.SIGTERM)
    sender = threading.Thread(target=send)
    with pytest.raises(KeyboardInterrupt):
        with stopping.stop_on_signals(stop, said.append):
            sender.start()
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            try:
                go.set()
                start = time.monotonic()
                time.sleep(1.5)  # no handler runs in here
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            time.sleep(0.1)
    sender.join()
    assert stop.requested == "SIGTERM received" and len(said) == 1
    assert len(killed) == 1 and killed[0] - start < 1.2, "the abort waited for the main thread"


def test_tuning_workers_outlive_the_signal_that_stops_the_tuner():
    """`timeout` and Ctrl-C signal the whole process group. A runner or builder worker killed by it would fail its
    candidate in the batch the tuner still finishes; the workers ignore SIGTERM and SIGINT instead, in a process
    group of their own (their nvcc does not ignore it)."""
    from flashgemm.spaces import cuda_space, llvm  # noqa: PLC0415
    from flashgemm.codegen.worker_init import ignore_stop_signals  # noqa: PLC0415

    runner = llvm.runner()
    try:
        pid = runner.pool.submit(os.getpid).result()
        # its own process group, inherited by its children: nvcc dies of SIGTERM whatever its parent ignores, and
        # `timeout` signals the tuner's group
        assert runner.pool.submit(os.getpgid, 0).result() == pid != os.getpgid(0)
        child = runner.pool.submit(subprocess.run, ["sh", "-c", "ps -o pgid= -p $$"], capture_output=True, text=True)
        assert int(child.result().stdout) == pid
        for sig in (signal.SIGTERM, signal.SIGINT):
            os.kill(pid, sig)
            time.sleep(0.3)
            assert runner.pool.submit(os.getpid).result() == pid, f"the runner worker died of {sig.name}"
    finally:
        runner.pool.shutdown()
    assert llvm.builder(2).initializer is ignore_stop_signals
    assert cuda_space.builder("sm_90", 2).initializer is ignore_stop_signals


GROUP_SIGNAL_SCRIPT = """
import signal, subprocess, sys
from tvm.support.popen_pool import PopenPoolExecutor
from flashgemm.codegen.worker_init import ignore_stop_signals
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the tuner handles it (stops after the batch)
pool = PopenPoolExecutor(max_workers=1, initializer=ignore_stop_signals)
pool.submit(sum, [1]).result()  # the worker is up, its initializer run
# a build step that, like nvcc, sets its own SIGTERM handler and dies of it
build = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(143)); "
         "time.sleep(3); print('built')")
job = pool.submit(subprocess.run, [sys.executable, "-c", build], capture_output=True, text=True)
print("started", flush=True)
out = job.result()
print(out.returncode, out.stdout.strip(), flush=True)
"""


def test_a_signal_to_the_tuners_process_group_spares_the_build_in_flight():
    """What `timeout` does, with a child that handles SIGTERM itself as nvcc does: the build still completes."""
    proc = subprocess.Popen([sys.executable, "-c", GROUP_SIGNAL_SCRIPT], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "started"
    time.sleep(1.5)  # the build is in its sleep
    os.killpg(proc.pid, signal.SIGTERM)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and text.split() == ["0", "built"], text


def records_of(wl_dir: Path) -> list:
    return records(wl_dir)


def run_tune(*args):
    return subprocess.run(TUNE + list(args), capture_output=True, text=True, timeout=300)


def test_unknown_workload_and_target_are_clear_errors(tmp_path):
    out = run_tune("--target", "llvm", "--workload", "nonsense", "--db", str(tmp_path))
    assert out.returncode == 2 and "unknown workload 'nonsense'" in out.stderr
    out = run_tune("--target", "sm_75", "--workload", "demo", "--db", str(tmp_path))
    assert out.returncode == 2 and "unknown target 'sm_75'" in out.stderr
    out = run_tune("--target", "llvm", "--workload", "demo", "--trials", "0", "--db", str(tmp_path))
    assert out.returncode == 2 and "at least 1" in out.stderr


def test_unwritable_database_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out = run_tune("--target", "llvm", "--workload", "demo", "--trials", "1", "--db", str(blocker / "db"))
    assert out.returncode == 2 and "cannot write the tuning database" in out.stderr


def test_a_workload_being_tuned_by_another_process_is_a_clear_error(tmp_path):
    """Two runs on one workload's database (the same command twice, two hosts on a shared disk) would mix their
    records: the second stops at once and names the first; the lock goes with the run that held it."""
    wl = parse(SPEC)
    wl_dir = dbm.workload_dir(tmp_path, "llvm", wl.dir_name)
    with stopping.tuning_lock(wl_dir):
        out = run_tune("--target", "llvm", "--workload", SPEC, "--trials", "1", "--db", str(tmp_path))
        with pytest.raises(dbm.DatabaseError, match=f"being tuned by another process \\(pid {os.getpid()} on"):
            tuner.tune(wl, "llvm", 1, db_root=tmp_path, progress=False)  # in this process too (another open file)
    assert out.returncode == 2, out.stderr
    assert f"{wl.dir_name} is being tuned by another process (pid {os.getpid()} on" in out.stderr
    assert "tune into another --db" in out.stderr
    assert not (wl_dir / dbm.PROVENANCE).exists() and not list((wl_dir / "work").glob("database_*"))
    with stopping.tuning_lock(wl_dir):  # released
        pass


def test_database_of_another_target_is_refused(tmp_path):
    wl = parse(SPEC)
    wl_dir = tmp_path / "llvm" / wl.dir_name
    wl_dir.mkdir(parents=True)
    (wl_dir / "provenance.json").write_text(json.dumps({"target": "sm_90", "workload": wl.to_json()}))
    out = run_tune("--target", "llvm", "--workload", SPEC, "--trials", "1", "--db", str(tmp_path))
    assert out.returncode == 2 and "tuned for target 'sm_90', not 'llvm'" in out.stderr


def test_cuda_runner_allocates_a_workloads_arguments_once():
    """The runner worker reuses one workload's (random-filled) arguments for every candidate; a new workload
    replaces them (flashgemm/codegen/cuda_runner.py)."""
    import tvm  # noqa: PLC0415

    from flashgemm.codegen import cuda_runner  # noqa: PLC0415
    dev = tvm.cpu(0)
    info = (("TENSOR", "float16", [8, 16]), ("TENSOR", "float16", [16, 4]))
    first = cuda_runner.alloc_arguments_once(dev, info, 1)
    assert len(first) == 1 and [tuple(a.shape) for a in first[0]] == [(8, 16), (16, 4)]
    assert cuda_runner.alloc_arguments_once(dev, info, 1) is first
    other = cuda_runner.alloc_arguments_once(dev, (("TENSOR", "float32", [3]),), 1)
    assert other is not first and list(cuda_runner._ARGS.values()) == [other]


def test_stage_seconds_orders_marks_of_the_same_second_as_the_loop_runs(tmp_path):
    """Meta-Schedule logs with 1 s resolution, in two files: the next batch's "Generating candidates" often shares
    its second with the "[Updated]" that ends the batch before. The search that follows is search time, not update."""
    (tmp_path / "task_scheduler.log").write_text(
        "2026-11-22 04:45:59 [INFO] Sending 32 sample(s) to builder\n"
        "2026-11-22 04:46:12 [INFO] Sending 32 valid sample(s) to runner\n"
        "2026-11-22 04:46:15 [INFO] [Updated] Task #0\n"
        "2026-11-22 04:46:43 [INFO] Sending 32 sample(s) to builder\n"
        "2026-11-22 04:46:58 [INFO] Sending 32 valid sample(s) to runner\n"
        "2026-11-22 04:46:59 [INFO] [Updated] Task #0\n")
    (tmp_path / "task_0_main.log").write_text(
        "2026-11-22 04:45:28 [INFO] Generating candidates......\n"
        "2026-11-22 04:46:15 [INFO] Generating candidates......\n")
    since = time.mktime(time.strptime("2026-11-22 04:45:00", "%Y-%m-%d %H:%M:%S"))
    assert provenance.stage_seconds(tmp_path, since) == {"search": 31 + 28, "build": 13 + 15, "run": 3 + 1, "update": 0}


def test_a_short_last_batch_leaving_a_few_trials_ends_the_search():
    """A batch of 256 that came back with 255 leaves 1 trial: not worth a whole search round. A full batch, a tail
    over 1/32 of a batch, or small batches (CI's) never end a search early."""
    assert "255 of 256" in stopping.short_tail(asked=256, got=255, left=1, batch_size=256)
    assert stopping.short_tail(asked=256, got=248, left=8, batch_size=256) is not None
    assert stopping.short_tail(asked=256, got=247, left=9, batch_size=256) is None
    assert stopping.short_tail(asked=256, got=256, left=1, batch_size=256) is None
    assert stopping.short_tail(asked=256, got=250, left=0, batch_size=256) is None
    assert stopping.short_tail(asked=4, got=3, left=1, batch_size=4) is None


def test_stage_seconds_counts_the_last_stage_until_the_run_ended(tmp_path):
    """A run stopped after its batch (time budget, SIGTERM) logs no "[Updated]" for it: its measurement lasts until
    the run's end, not 0 s."""
    (tmp_path / "task_scheduler.log").write_text(
        "2026-11-22 04:45:59 [INFO] Sending 32 sample(s) to builder\n"
        "2026-11-22 04:46:12 [INFO] Sending 32 valid sample(s) to runner\n")
    (tmp_path / "task_0_main.log").write_text("2026-11-22 04:45:28 [INFO] Generating candidates......\n")
    since = time.mktime(time.strptime("2026-11-22 04:45:00", "%Y-%m-%d %H:%M:%S"))
    end = time.mktime(time.strptime("2026-11-22 04:46:40", "%Y-%m-%d %H:%M:%S"))
    assert provenance.stage_seconds(tmp_path, since)["run"] == 0
    assert provenance.stage_seconds(tmp_path, since, end) == {"search": 31, "build": 13, "run": 28, "update": 0}


@pytest.mark.parametrize("target", ["llvm", "sm_90"])
def test_search_profile_gives_the_cost_of_each_stage_per_candidate(target):
    """flashgemm.tune.search_profile (no GPU needed): replay, every postprocessor and the feature extraction, timed."""
    from flashgemm.tune import search_profile  # noqa: PLC0415
    out = search_profile.profile(parse(SPEC if target == "llvm" else "vit-b16"), target, candidates=3)
    assert out["candidates"] == 3 and 1 <= out["valid"] <= 3
    stages = out["ms_per_candidate"]
    assert stages["replay"] > 0 and stages["features"] > 0
    if target == "sm_90":
        assert stages["postproc VerifyGPUCode"] > 0


def test_a_ledger_line_torn_by_kill_9_does_not_swallow_the_next_run(tmp_path):
    (tmp_path / provenance.LEDGER).write_text('{"trials": 2}\n{"trials": 12')  # the second write cut by kill -9
    provenance.append_ledger(tmp_path, {"trials": 3})
    assert [r["trials"] for r in provenance.read_ledger(tmp_path)] == [2, 3]

@pytest.mark.slow
def test_a_fresh_clone_goes_on_from_the_committed_database(tmp_path, monkeypatch):
    """A clone has the committed top-k and provenance but not work/ (git-ignored): tuning there counts the committed
    trials toward the budget, starts the search from the committed top records (the evolutionary search's
    get_top_k serves them: search.ResumeDatabase), keeps them in the top-k, and continues the provenance and the
    curve."""
    wl = parse(SPEC)
    wl_dir = tmp_path / "llvm" / wl.dir_name
    first = tuner.tune(wl, "llvm", 3, db_root=tmp_path, workers=2, progress=False)
    shutil.rmtree(wl_dir / "work")  # what a clone has
    again = tuner.tune(wl, "llvm", 3, db_root=tmp_path, workers=2, progress=False)
    assert again["trials"] == 3 and len(again["runs"]) == 1  # the budget is met: nothing measured
    tracked = ("provenance.json", *dbm.DB_FILES)  # (a database's files go back as a set)
    committed_files = {f: (wl_dir / f).read_bytes() for f in tracked}
    committed = {str(r.trace) for r in dbm.open_json_db(wl_dir).get_all_tuning_records() if dbm.mean_secs(r)}
    modules = [m for _, m in kernel_forms.tuning_modules(wl, "llvm")]
    best_first = str(dbm.top_records(modules, [dbm.open_json_db(wl_dir)], 1)[0].trace)
    served, get_top_k = [], search.ResumeDatabase._cls.get_top_k
    monkeypatch.setattr(search.ResumeDatabase._cls, "get_top_k",
                        lambda self, w, k: served.append(out := get_top_k(self, w, k)) or out)
    said = []
    more = tuner.tune(wl, "llvm", 5, db_root=tmp_path, workers=2, progress=False, log=said.append)
    assert more["trials"] == 5 and [r["trials"] for r in more["runs"]] == [3, 2]
    assert committed and {str(r.trace) for r in served[0]} == committed  # work/ was empty: the committed ones
    # the progress is of the total, carried trials included (it showed 2/5, and an ETA for 1019 trials on the H100)
    # and its best so far is the committed database's (or better)
    (shown,) = [line for line in said if line.startswith("[tune] 5/5 trials")]
    assert float(shown.rsplit("best ", 1)[1].removesuffix("us")) <= round(first["best_secs"] * 1e6, 1) + 0.05, shown
    # the committed best record stays in the top-k; its time is the committed one unless this run measured its trace
    # again (the search may re-sample it: the newer measurement is the one kept, and on a loaded machine it can be
    # slower)
    assert best_first in {str(r.trace) for r in dbm.open_json_db(wl_dir).get_all_tuning_records()}
    remeasured = {str(r.trace) for r in dbm.open_json_db(wl_dir / "work").get_all_tuning_records()}
    assert more["best_secs"] <= first["best_secs"] or best_first in remeasured, (more["best_secs"], first["best_secs"])
    curve = [line.split(",") for line in (wl_dir / "curve.csv").read_text().splitlines()[1:]]
    assert [int(t) for t, _ in curve] == [1, 2, 3, 4, 5]
    assert float(curve[-1][1]) <= float(curve[2][1])
    # a checkout between two slices puts the committed database back (3 trials) while work/ keeps the slice's 2:
    # the next slice still counts 3 + 2
    for f in tracked:
        (wl_dir / f).write_bytes(committed_files[f])
    last = tuner.tune(wl, "llvm", 6, db_root=tmp_path, workers=2, progress=False)
    assert last["trials"] == 6 and sum(r["trials"] for r in last["runs"]) == 6


def test_stored_curve_numbers_records_in_the_order_stored_and_skips_failed_ones(tmp_path):
    rows = [[0, [[], secs, {}, []]] for secs in ([3.0, 3.0], [1e10], [2.0, 4.0], [5.0], [1.0, 2.0])]
    (tmp_path / dbm.DB_FILES[1]).write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the last 3 records (the run that lost them started after 2 recorded trials and 10 carried ones)
    assert provenance.stored_curve(tmp_path, 3, 12, 2.5, upto=5) == [(13, 2.5), (14, 2.5), (15, 1.5)]
    assert provenance.stored_curve(tmp_path, 2, 0, float("inf"), upto=5) == [(1, 5.0), (2, 1.5)]
    # records the resuming run measured itself come after `upto` and are not the lost run's
    assert provenance.stored_curve(tmp_path, 2, 0, float("inf"), upto=3) == [(1, float("inf")), (2, 3.0)]
    (tmp_path / "curve.csv").write_text("trial,best_seconds\n1,4.0\n2,\n")
    assert provenance.last_best(tmp_path / "curve.csv") == 4.0 and provenance.last_best(tmp_path / "none.csv") == float("inf")


@pytest.mark.parametrize("flag, expected", [([], None), (["--recompute-form"], True),
                                            (["--recompute-form", "on"], True), (["--recompute-form", "off"], False)])
def test_tune_py_recompute_form_flag(monkeypatch, flag, expected):
    """--recompute-form auto (default: kernel_forms.tuned_forms decides by row length) | on (the bare flag) | off."""
    from flashgemm.cli import tune as script
    seen = {}
    monkeypatch.setattr(tuner, "tune_many", lambda workloads, target, trials, jobs=1, **kw: seen.update(kw) or [])
    assert script.main(["--target", "llvm", "--workload", "demo", "--trials", "1", *flag]) == 0
    assert seen["recompute_form"] is expected


def test_seeding_from_the_other_dtype_renames_wgmma_intrinsics(tmp_path):
    """The committed sm_90 LM-head bf16 database's best records are wgmma (m64n256, the wide split-N form): seeding
    the fp16 workload from it renames their wgmma intrinsics (seeding.dtype_renames) so that every one replays, and
    records that differ only in their instructions keep keys of their own."""
    from flashgemm import targets
    register_intrinsics("sm_90")
    root = tmp_path / "db"
    shutil.copytree(REPO / "flashgemm" / "databases" / "sm_90" / "lm-head.bf16", root / "sm_90" / "lm-head.bf16",
                    ignore=shutil.ignore_patterns("work"))
    items, keys, rejected = seeding.seed_candidates(parse("lm-head", "float16"), "sm_90", "bfloat16", root, 3)
    assert len(items) == len(set(keys)) == 3 and rejected == 0
    for _, sch in items:
        text = sch.mod.script()
        assert '"m64n256k16", "f32", "f16", "f16"' in text and '"bf16"' not in text


def test_seeding_from_the_other_dtype_replays_its_records_once(tmp_path, stand_in_measurement):
    """tune(seed_from_dtype=...) (seeding.seed_from_other_dtype): the committed W1 fp16 database's best records replayed on
    the bf16 module with bf16 tensor intrinsics, measured (a stand-in builder and runner here) into the work
    database and counted as trials, once per work directory; the wrong dtype or target is refused up front."""
    from flashgemm import targets
    measured = stand_in_measurement
    register_intrinsics("sm_90")
    root = tmp_path / "db"
    shutil.copytree(REPO / "flashgemm" / "databases" / "sm_90" / "bert-large.f16", root / "sm_90" / "bert-large.f16",
                    ignore=shutil.ignore_patterns("work"))
    wl = parse("bert-large", "bfloat16")
    items, keys, rejected = seeding.seed_candidates(wl, "sm_90", "float16", root, 3)
    assert len(items) == len(set(keys)) == 3 and rejected == 0
    for mod, sch in items:
        text = sch.mod.script()
        assert '"m16n8k16", "row", "col", "bf16", "bf16", "fp32"' in text and '"fp16"' not in text
        assert mod.script() == dict((f.name, m) for f, m in kernel_forms.tuning_modules(wl, "sm_90"))[
            keys[items.index((mod, sch))].split(":")[0]].script()

    prov = tuner.tune(wl, "sm_90", 3, db_root=root, seed_from_dtype="float16", seed_records=3, progress=False)
    assert len(measured) == 3 and prov["trials"] == 3
    assert prov["runs"][-1]["strategy"] == "seeded" and prov["runs"][-1]["valid"] == 3
    work = root / "sm_90" / "bert-large.bf16" / "work"
    assert seeding.seed_from_other_dtype(wl, "sm_90", work, "float16", root, 3, 2, print) == (0, 0)  # once

    with pytest.raises(ValueError, match="name the other of float16 / bfloat16"):
        tuner.tune(wl, "sm_90", 3, db_root=root, seed_from_dtype="bfloat16", progress=False)
    with pytest.raises(ValueError, match="for the CUDA targets"):
        tuner.tune(wl, "llvm", 3, db_root=root, seed_from_dtype="float16", progress=False)
    proc = subprocess.run(TUNE + ["--target", "sm_90", "--workload", "bert-large", "--dtype", "float16",
                                  "--seed-from-dtype", "float16", "--db", str(root)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "give the workloads' own dtype" in proc.stderr, proc.stderr


def test_a_form_of_few_points_gets_a_small_search_population():
    """The wide split-N form's space is 12 points (4 sketches x one categorical of 3): its evolutionary search gets
    4 candidates a point, not the 512 that spent 150 s re-sampling them; spaces that sample tile sizes keep theirs."""
    from flashgemm import targets
    wl = parse("lm-head", "bfloat16")
    register_intrinsics("sm_90")
    modules = {f.name: m for f, m in kernel_forms.tuning_modules(wl, "sm_90")}
    assert search.space_points(modules["split-n-wide"], "sm_90") == 12
    assert search.space_points(modules["split-n"], "sm_90") is None  # (it samples tile sizes)
    assert search.form_population(512, 12) == 48
    assert search.form_population(512, 2) == search.MIN_POPULATION
    assert search.form_population(512, None) == 512 and search.form_population(32, 12) == 32


def test_a_small_batch_gets_a_small_search_population(tmp_path):
    """8 candidates a measured one below batches of 64 (a population of 512 for batches of 2 spent 93 of a 119 s
    llvm run), at least 16; batches of 64 or more, and a population asked smaller, keep what was asked; the run's
    provenance says which it used."""
    assert search.batch_population(512, 256, 1000) == 512 and search.batch_population(512, 64, 1000) == 512
    assert search.batch_population(512, 8, 1000) == 64 and search.batch_population(512, 256, 8) == 64
    assert search.batch_population(512, 2, 1000) == search.MIN_POPULATION == 16
    assert search.batch_population(32, 256, 1000) == 32
    said = []
    prov = tuner.tune(parse(SPEC), "llvm", 2, db_root=tmp_path, batch_size=2, workers=2, progress=False,
                      log=said.append)
    assert prov["runs"][-1]["population"] == 16 and prov["runs"][-1]["batch_size"] == 2
    assert any("batches of 2: search population 16" in line for line in said)


def test_the_compiler_that_timed_the_kept_records_is_named_and_checked(tmp_path, monkeypatch):
    # one name for every CUDA arch (one pipeline), another for llvm; a change to a listed source changes it
    cuda = provenance.compiler_id("sm_90")
    assert cuda == provenance.compiler_id("sm_80") != provenance.compiler_id("llvm")
    sources = provenance.compiler_sources()  # the device passes and source rewrites of cuda_build among them
    assert {"flashgemm/codegen/cuda_build.py", "flashgemm/codegen/tir/keep_exp_in_accumulator.py",
            "flashgemm/codegen/cuda_src/store_whole_sectors.py", "flashgemm/codegen/tir/rewrite_softmax_arithmetic.py",
            "flashgemm/codegen/tir/move_statistics_to_static_shared.py",
            "flashgemm/codegen/tir/keep_warp_statistics_in_registers.py", "flashgemm/tvm_ext/tensor_intrin.py",
            "flashgemm/codegen/device_pass.py", "flashgemm/targets.py"} <= set(sources)  # (a pass imports device_pass)
    assert not any(rel.startswith(("flashgemm/kernel/", "flashgemm/op/", "flashgemm/spaces/")) for rel in sources)
    fake = tmp_path / "repo"
    for rel in sources:
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, fake / rel)
    monkeypatch.setattr(provenance, "_PACKAGE", fake / "flashgemm")
    assert provenance.compiler_id("sm_90") == cuda
    with open(fake / "flashgemm" / "codegen" / "tir" / "rewrite_softmax_arithmetic.py", "a") as f:
        f.write("# changed\n")
    assert provenance.compiler_id("sm_90") != cuda
    monkeypatch.setattr(provenance, "_PACKAGE", REPO / "flashgemm")
    # stale_times: no database, a database timed by another compiler, by an unnamed (older) one, by today's
    wl = parse(SPEC)
    assert provenance.stale_times(wl, "sm_90", tmp_path) is None
    wl_dir = dbm.workload_dir(tmp_path, "sm_90", wl.dir_name)
    wl_dir.mkdir(parents=True)
    for prov, why in (({"best_secs": 1e-4, "compiler": "0123456789ab"}, "another compiler (0123456789ab)"),
                      ({"best_secs": 1e-4}, "a compiler from before this check"),
                      ({"best_secs": 1e-4, "compiler": cuda}, None), ({"best_secs": None}, None)):
        (wl_dir / dbm.PROVENANCE).write_text(json.dumps(prov))
        got = provenance.stale_times(wl, "sm_90", tmp_path)
        assert got == why if why is None else why in got and cuda in got


@pytest.mark.slow
def test_remeasure_times_the_kept_records_again_and_writes_them_back(tmp_path):
    # stale times (as after a compiler change): the kept records stored as 10x and 20x slower than they run
    wl = parse(SPEC)
    tuner.tune(wl, "llvm", 3, db_root=tmp_path, workers=2, progress=False)
    wl_dir = tmp_path / "llvm" / wl.dir_name
    # the search's own measurements (work/) are as stale and would be read first: refused until moved aside
    with pytest.raises(dbm.DatabaseError, match="move .*work aside"):
        seeding.remeasure(wl, "llvm", db_root=tmp_path, workers=2)
    shutil.move(wl_dir / "work", wl_dir / "work.before-remeasure")
    path = wl_dir / "database_tuning_record.json"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    traces = sorted(json.dumps(r[1][0]) for r in lines)
    for i, r in enumerate(lines):
        r[1][1] = [1.0 + i]  # seconds: far beyond any real run of this tiny kernel
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(dbm.DatabaseError, match="is not the file that provenance.json was written with"):
        seeding.remeasure(wl, "llvm", db_root=tmp_path, workers=2)  # an edit by hand is refused ...
    prov = json.loads((wl_dir / "provenance.json").read_text())  # ... unless its sha256 is recorded with it
    prov[dbm.DIGESTS][path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    (wl_dir / "provenance.json").write_text(json.dumps(prov))
    said = []
    prov = seeding.remeasure(wl, "llvm", db_root=tmp_path, workers=2, log=said.append)
    after = records(wl_dir)
    assert sorted(json.dumps(r[1][0]) for r in after) == traces  # the same kernels, none lost
    secs = [sum(r[1][1]) / len(r[1][1]) for r in after]
    assert secs == sorted(secs) and secs[-1] < 0.5 and secs[0] == pytest.approx(prov["best_secs"])
    entry = prov["remeasured"][-1]
    assert entry["records"] == entry["kept"] == len(lines)
    assert sorted(b for b, _ in entry["us_before_after"]) == [1e6 * (1.0 + i) for i in range(len(lines))]
    assert json.loads((wl_dir / "provenance.json").read_text())["remeasured"] == prov["remeasured"]
    assert any("timing its" in line for line in said)
    # flashgemm-tune --remeasure then goes on with the search toward --trials
    out = subprocess.run(TUNE + ["--target", "llvm", "--workload", SPEC, "--trials", "3", "--db", str(tmp_path),
                                 "--remeasure", "--workers", "2"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[remeasure]" in out.stdout
    assert len(json.loads((wl_dir / "provenance.json").read_text())["remeasured"]) == 2
    assert json.loads((wl_dir / "provenance.json").read_text())["compiler"] == provenance.compiler_id("llvm")
    # kept records that another compiler timed: flashgemm-tune re-times them first by itself, or warns with --keep-times
    if (wl_dir / "work").exists():  # (remeasure refuses a work directory holding measurements)
        shutil.move(wl_dir / "work", wl_dir / "work.second")
    prov_path = wl_dir / "provenance.json"
    prov = json.loads(prov_path.read_text())
    prov_path.write_text(json.dumps(dict(prov, compiler="0123456789ab")))
    cmd = TUNE + ["--target", "llvm", "--workload", SPEC, "--trials", "3", "--db", str(tmp_path), "--workers", "2"]
    out = subprocess.run(cmd + ["--keep-times"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "another compiler (0123456789ab)" in out.stderr and "[remeasure]" not in out.stdout
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "timing them again first" in out.stdout and "[remeasure]" in out.stdout
    prov = json.loads(prov_path.read_text())
    assert prov["compiler"] == provenance.compiler_id("llvm") and len(prov["remeasured"]) == 3
