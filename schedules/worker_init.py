"""What each of Meta-Schedule's builder and runner pool workers runs first (their `initializer`).

`timeout` and a terminal's Ctrl-C signal the whole process group, TVM's pool workers included. The tuner stops
after the batch in flight on that signal (tuning_db/tuner._stop_on_signals), but a worker killed by the same
signal failed its candidate: the batch in flight lost candidates and counted them invalid. So the workers leave
SIGINT and SIGTERM to the tuner. They still end: the pools kill them with SIGKILL, and a worker returns when the
tuner's pipe closes (tvm.support.popen_pool, tvm.exec.popen_worker).
"""
import signal


def ignore_stop_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
