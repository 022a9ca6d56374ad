"""What each of Meta-Schedule's builder and runner pool workers runs first (their `initializer`).

`timeout` and a terminal's Ctrl-C signal the whole process group, TVM's pool workers included. The tuner stops
after the batch in flight on that signal (flashgemm/tune/stopping.stop_on_signals), but a worker killed by the same
signal failed its candidate: the batch in flight lost candidates and counted them invalid. So the workers leave
SIGINT and SIGTERM to the tuner. Ignoring them is not enough for the builders: nvcc (and its cicc / ptxas)
installs its own SIGTERM handler and dies of the group's copy ("nvcc: Terminated", the candidate's build fails).
So each worker also moves to a process
group of its own, which its nvcc inherits, out of reach of signals sent to the tuner's group. They still end: the
pools kill them with SIGKILL (stopping._kill_workers walks the process tree, not the group), and a worker returns
when the tuner's pipe closes (tvm.support.popen_pool, tvm.exec.popen_worker).
"""
import os
import signal


def ignore_stop_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        os.setpgid(0, 0)
    except OSError:  # already a group or session leader: it was not in the tuner's group to begin with
        pass
