"""Start, check and stop TVM's RPC tracker and one RPC server per GPU on this machine.

Processes are TVM's own (`python -m tvm.exec.rpc_tracker`, `python -m tvm.exec.rpc_server`), each in its own
process group so that stopping one also stops the session process it forked. A GPU server sees only its
GPU (CUDA_VISIBLE_DEVICES), so every candidate runs on cuda:0 of some server. The cluster's state (addresses,
pids, start times, logs) goes to a JSON file that `stop` and `status` read.

TVM's RPC has no authentication, and a server loads and runs the code it is sent: whoever reaches a tracker or server
port can run anything as this user. So everything binds 127.0.0.1 unless the caller names another address (`host`),
and a non-loopback one is started only with a warning (EXPOSED_WARNING). Other hosts reach a loopback cluster through
SSH tunnels (docs/pipeline.md, "Tuning on several GPUs").

`stop` signals only the processes this module started: a pid from the state file is checked (its command line runs
TVM's tracker or server module, and its start time is the one recorded) before its process group is signalled, since
the pid may belong to another process by then.
"""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from flashgemm.tune import rpc_runner

DEFAULT_KEY = "flashgemm"
DEFAULT_PORT = 9190
SERVER_PORTS = (9090, 9190)  # servers look for a free port in [9090, 9190); the tracker sits at 9190+
TRACKER_MODULE = "tvm.exec.rpc_tracker"
SERVER_MODULE = "tvm.exec.rpc_server"
EXPOSED_WARNING = ("warning: TVM RPC listens on {host}: it has no authentication and runs any code it is sent, so "
                   "anyone who reaches these ports can run code as this user; use a private network only, or keep "
                   "127.0.0.1 and an SSH tunnel (docs/pipeline.md, \"Tuning on several GPUs\")")


class ClusterError(RuntimeError):
    """A tracker or server that did not start, or did not register in time."""


@dataclass
class Cluster:
    tracker_host: str
    tracker_port: int
    key: str
    tracker_pid: Optional[int]           # None when we joined a tracker started elsewhere
    servers: list = field(default_factory=list)  # [{"pid", "device", "log", "started"}]
    log_dir: str = ""
    # start times (start_time()) of the processes, which `stop` checks before signalling a pid; None in state files
    # written before they were recorded (then only the command line is checked)
    tracker_started: Optional[int] = None

    @property
    def tracker(self) -> rpc_runner.Tracker:
        return rpc_runner.Tracker(self.tracker_host, self.tracker_port, self.key)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, path)

    @staticmethod
    def load(path: Path) -> "Cluster":
        try:
            return Cluster(**json.loads(Path(path).read_text()))
        except FileNotFoundError:
            raise ClusterError(f"no cluster state at {path}: nothing started with this --state") from None
        except (ValueError, TypeError) as err:
            raise ClusterError(f"{path} is not a cluster state file ({err}); stop its processes by hand") from None


def local_gpus() -> list[str]:
    """Indices of this machine's GPUs (nvidia-smi), honouring CUDA_VISIBLE_DEVICES when set."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or a name that resolves only to such addresses.
    0.0.0.0 and "" (every interface) are not; a name that does not resolve is not either."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _spawn(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    fh = open(log, "ab")  # noqa: SIM115  (the child owns it)
    return subprocess.Popen([sys.executable, "-m", *args], stdout=fh, stderr=subprocess.STDOUT, env=env,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _tail(path: str, n: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def start(*, devices: list[str], key: str = DEFAULT_KEY, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          tracker: Optional[str] = None, custom_addr: Optional[str] = None, log_dir: Path,
          wait_s: float = 60.0, server_ports: tuple[int, int] = SERVER_PORTS, log: Callable = print,
          warn: Callable = _stderr) -> Cluster:
    """Start a tracker at host:port (unless `tracker` names one to join) and one server per device.

    devices: GPU indices ("0", "1", ...) for GPU servers, or "cpu" entries for CPU-only (llvm) servers; none
    starts the tracker alone (for servers on other hosts). Waits until the tracker lists every new server
    under `key`; otherwise stops them all and raises. server_ports: the [lo, hi) range the servers bind in,
    split between them (two clusters on one host need disjoint ranges).
    host: the address the tracker and the servers bind, loopback unless the caller names another; a non-loopback
    one is warned about through `warn` (EXPOSED_WARNING). custom_addr: the address the servers register under,
    which clients connect to; a non-loopback one needs a non-loopback `host` (a loopback-bound server is reachable
    from other hosts only through a tunnel, whose local end is 127.0.0.1).
    """
    if not devices and tracker:
        raise ClusterError("nothing to start: joining a tracker needs GPUs or CPU servers to serve")
    if devices and custom_addr and is_loopback(host) and not is_loopback(custom_addr):
        raise ClusterError(f"--custom-addr {custom_addr}: the servers would listen on {host} only, where other hosts "
                           f"cannot reach them; add --host with this host's address on a private network (e.g. --host "
                           f"{custom_addr}), or reach them through an SSH tunnel with --custom-addr 127.0.0.1 (docs/pipeline.md)")
    if not 0 < server_ports[0] < server_ports[1] <= 65536 or server_ports[1] - server_ports[0] < len(devices):
        raise ClusterError(f"server ports {server_ports[0]}-{server_ports[1]} cannot hold {len(devices)} server(s): "
                           "give a range [LO, HI) with at least one port a server")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    cluster = Cluster(host, port, key, None, [], str(log_dir))
    before = 0
    if not is_loopback(host):
        warn(EXPOSED_WARNING.format(host=host))
    try:
        if tracker:
            joined = rpc_runner.parse_tracker(tracker, key)
            cluster.tracker_host, cluster.tracker_port = joined.host, joined.port
            before = rpc_runner.server_count(cluster.tracker)
        else:
            _check_port_free(host, port)
            proc = _spawn([TRACKER_MODULE, "--host", host, "--port", str(port), "--port-end", str(port + 1)],
                          log_dir / "tracker.log", env)
            cluster.tracker_pid, cluster.tracker_started = proc.pid, start_time(proc.pid)
            _wait_for(lambda: _answers(cluster.tracker), 30, f"the tracker at {host}:{port} did not come up "
                      f"(port taken? another cluster running?):\n{_tail(str(log_dir / 'tracker.log'))}",
                      proc=proc)
            log(f"[rpc] tracker at {host}:{port} (pid {proc.pid})")
        # Each server of this call searches its own slice of server_ports: TVM's servers set SO_REUSEADDR, so two
        # starting at once could both bind the same port before either listens, and one then never registered
        # (the "only 1 of 2 servers registered" failure of the RPC tests).
        lo, width = server_ports[0], max(1, (server_ports[1] - server_ports[0]) // max(1, len(devices)))
        for i, dev in enumerate(devices):
            server_env = dict(env)
            if dev != "cpu":
                server_env["CUDA_VISIBLE_DEVICES"] = dev
            args = [SERVER_MODULE, "--tracker", f"{cluster.tracker_host}:{cluster.tracker_port}",
                    "--key", key, "--host", host,
                    "--port", str(lo + i * width), "--port-end", str(lo + (i + 1) * width),
                    # Sessions in spawned, not forked, processes: the server process has touched CUDA by then,
                    # and a forked child's first CUDA call fails (cudaErrorInitializationError). A session is
                    # kept for a whole batch (rpc_runner), so the spawn's start-up is paid once a batch.
                    "--no-fork"]
            if custom_addr:
                args += ["--custom-addr", custom_addr]
            slog = log_dir / f"server-{i}-{'cpu' if dev == 'cpu' else 'gpu' + dev}.log"
            proc = _spawn(args, slog, server_env)
            cluster.servers.append({"pid": proc.pid, "device": dev, "log": str(slog), "started": start_time(proc.pid)})
        want = before + len(devices)
        _wait_for(lambda: rpc_runner.server_count(cluster.tracker) >= want, wait_s,
                  lambda: f"only {rpc_runner.server_count(cluster.tracker)} of {want} servers registered under "
                          f"key {key!r} in {wait_s:.0f} s; last server log:\n{_tail(cluster.servers[-1]['log'])}")
    except Exception:
        stop(cluster, log=lambda *_: None)
        raise
    if devices:
        log(f"[rpc] {len(devices)} server(s) registered under key {key!r}: "
            + ", ".join(("cpu" if s["device"] == "cpu" else f"GPU {s['device']}") + f" (pid {s['pid']})"
                        for s in cluster.servers))
    return cluster


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            raise ClusterError(f"cannot start a tracker at {host}:{port}: {err.strerror} (another tracker or "
                               f"cluster running? flashgemm-rpc-cluster status, or choose --port)") from None


def _answers(tracker: rpc_runner.Tracker) -> bool:
    """Whether the tracker's port accepts connections (a raw probe: TVM's client retries and logs)."""
    try:
        with socket.create_connection((tracker.host, tracker.port), timeout=2):
            return True
    except OSError:
        return False


def _wait_for(cond: Callable[[], bool], seconds: float, why, proc: Optional[subprocess.Popen] = None) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.3)
    raise ClusterError(why() if callable(why) else why)


def kill_group(pid: int, grace_s: float = 5.0) -> bool:
    """SIGTERM the process group `pid` leads (the server and the session it forked), SIGKILL after grace_s.
    Returns whether anything was running."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.time() + grace_s
    while time.time() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        _reap(pid)
        time.sleep(0.1)
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def start_time(pid: int) -> Optional[int]:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat, field 22): with the pid, it names one
    process (a pid is reused, a (pid, start time) pair is not). None when there is no such process (or no /proc)."""
    stat = _stat(pid)
    return stat[1] if stat else None


def _stat(pid: int) -> Optional[tuple]:
    """(state letter, start time) of /proc/PID/stat, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": the comm may hold spaces and parentheses
    return fields[0], int(fields[19])


def _command_line(pid: int) -> list:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def check_ours(pid: int, module: str, started: Optional[int]) -> Optional[str]:
    """None when `pid` is a process this module started: it runs TVM's `module` (python -m MODULE) and, when
    `started` was recorded, started then. "" when it is gone (nothing to stop). Otherwise why it is not to be
    signalled, for the report (the pid now belongs to another process, or cannot be checked)."""
    stat = _stat(pid)
    if stat is None:
        if not os.path.isdir("/proc/self"):
            return f"pid {pid} cannot be checked here (no /proc): stop it by hand if it is still TVM's {module}"
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, PermissionError):
            return ""
        return (f"pid {pid} has exited but processes of its group remain; not signalled, as they cannot be checked "
                f"(see them with: ps -o pid,args -g {pid})")
    state, ticks = stat
    if started is not None and ticks != started:
        return f"pid {pid} now belongs to another process (its start time is not the one recorded)"
    if state == "Z":  # exited, not yet reaped: no command line left to check; its start time or our child names it
        if started is not None:
            return None
        try:
            os.waitpid(pid, os.WNOHANG)  # only a child of ours can be reaped: it is ours
            return None
        except ChildProcessError:
            return ""
    args = _command_line(pid)
    if module not in args:
        shown = " ".join(args) or "(unreadable)"
        return f"pid {pid} is not TVM's {module} but runs: {shown[:160]}"
    return None


def stop(cluster: Cluster, log: Callable = print) -> None:
    """Stop the servers, then the tracker we started (a joined tracker is left running). Each pid is checked first
    (check_ours): one that now belongs to another process is reported and left alone. Every process is stopped
    before anything is reported: a report to a closed pipe (a killed parent) must not leave the tracker running
    and its port taken."""
    todo = [(int(s["pid"]), SERVER_MODULE, s.get("started"), "server") for s in cluster.servers]
    if cluster.tracker_pid:
        todo.append((int(cluster.tracker_pid), TRACKER_MODULE, cluster.tracker_started, "tracker"))
    reports = []
    for pid, module, started, what in todo:
        why_not = check_ours(pid, module, started)
        if why_not is None:
            if kill_group(pid):
                reports.append(f"stopped {what} pid {pid}")
        elif why_not:
            reports.append(f"left {what} pid {pid} alone: {why_not}")
    for line in reports:
        try:
            log(f"[rpc] {line}")
        except (OSError, ValueError):  # stdout gone
            pass


def describe(tracker: rpc_runner.Tracker) -> str:
    """Servers per key and queued requests, from the tracker."""
    info = rpc_runner.summary(tracker)
    per_key: dict = {}
    for s in info.get("server_info", []):
        k = s.get("key", "").split(":", 1)[-1]
        per_key.setdefault(k, []).append(s.get("addr"))
    lines = [f"tracker {tracker.host}:{tracker.port}"]
    for k, addrs in sorted(per_key.items()):
        q = info.get("queue_info", {}).get(k, {})
        lines.append(f"  key {k!r}: {len(addrs)} server(s) {addrs}; free {q.get('free', '?')}, "
                     f"pending requests {q.get('pending', '?')}")
    if not per_key:
        lines.append("  no servers registered")
    return "\n".join(lines)
