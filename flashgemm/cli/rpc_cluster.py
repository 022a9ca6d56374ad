#!/usr/bin/env python3
"""Run TVM's RPC tracker and one RPC server per GPU, for flashgemm-tune --runner rpc.

One machine, all its GPUs, for the length of one command (stopped afterwards, even on failure):
  flashgemm-rpc-cluster run -- flashgemm-tune --target sm_90 --workload vit-b16 --runner rpc
  (run exports TVM_TRACKER_HOST/PORT/KEY, which flashgemm-tune --runner rpc reads)

Or left running:
  flashgemm-rpc-cluster start [--gpus 0,1]       # tracker on 127.0.0.1:9190, servers under key 'flashgemm'
  flashgemm-tune ... --runner rpc --tracker 127.0.0.1:9190 --key flashgemm
  flashgemm-rpc-cluster status
  flashgemm-rpc-cluster stop

The tracker and the servers listen on 127.0.0.1 unless --host names another address. TVM's RPC has no
authentication and runs any code it is sent: reach a cluster from other hosts through SSH tunnels, or, on a
private network only, bind its address (docs/pipeline.md, "Tuning on several GPUs"). Through tunnels, on the tuning host
  flashgemm-rpc-cluster start --gpus none                   # the tracker alone, on 127.0.0.1:9190
  ssh -N -R 9190:127.0.0.1:9190 -L 9100:127.0.0.1:9100 -L 9101:127.0.0.1:9101 GPUHOST &
and on GPUHOST (its own server ports, one a server)
  flashgemm-rpc-cluster start --tracker 127.0.0.1:9190 --custom-addr 127.0.0.1 --gpus 0,1 --server-ports 9100-9102
On a private network: --host PRIVATE_IP on the tuning host, and on every GPU host
  flashgemm-rpc-cluster start --tracker TUNING_IP:9190 --host THIS_PRIVATE_IP --custom-addr THIS_PRIVATE_IP
"""
import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path


from flashgemm.cli.usage import ArgumentParser, count, number


def _devices(args) -> list:
    from flashgemm.tune import rpc_cluster  # noqa: PLC0415

    if args.gpus == "none":
        gpus = []
    elif args.gpus == "all":
        gpus = rpc_cluster.local_gpus()
    else:
        gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    return gpus + ["cpu"] * args.cpu_servers


def _start(args, log=print):
    from flashgemm.tune import rpc_cluster  # noqa: PLC0415

    devices = _devices(args)
    if not devices and not args.tracker and args.gpus == "all":
        print("[rpc] no GPU found (nvidia-smi): starting the tracker alone", file=sys.stderr)
    return rpc_cluster.start(devices=devices, key=args.key, host=args.host, port=args.port, tracker=args.tracker,
                             custom_addr=args.custom_addr, log_dir=args.log_dir, wait_s=args.wait,
                             server_ports=args.server_ports, log=log)


def _port_range(text: str) -> tuple:
    try:
        lo, hi = (int(p) for p in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r} (give LO-HI, e.g. 9090-9190)") from None
    if not 0 < lo < hi <= 65536:
        raise argparse.ArgumentTypeError(f"invalid value {text!r} (want 0 < LO < HI <= 65536, e.g. 9090-9190)")
    return lo, hi


def _interrupt(*_):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    state_default = Path("build") / "rpc-cluster.json"

    def cluster_args(p):
        p.add_argument("--gpus", default="all", help="'all' (default), 'none', or indices like 0,1")
        p.add_argument("--cpu-servers", type=count(0), default=0, help="also start N CPU-only servers (llvm; tests)")
        p.add_argument("--key", default="flashgemm", help="the key servers register under (default flashgemm)")
        p.add_argument("--host", default="127.0.0.1",
                       help="address the tracker and servers listen on (default 127.0.0.1: this host only). TVM "
                            "RPC is unauthenticated and runs the code it is sent: name another address on a private "
                            "network only (a warning says so), or use SSH tunnels")
        p.add_argument("--port", type=count(1), default=9190, help="tracker port (default 9190)")
        p.add_argument("--server-ports", type=_port_range, default=(9090, 9190), metavar="LO-HI",
                       help="ports [LO, HI) the servers bind in, split between them (default 9090-9190; "
                            "two clusters on one host need disjoint ranges)")
        p.add_argument("--tracker", default=None, help="HOST:PORT of a running tracker to join instead")
        p.add_argument("--custom-addr", default=None,
                       help="the address the servers register under, which the tuning host connects to: this host's "
                            "--host address, or 127.0.0.1 through an SSH tunnel")
        p.add_argument("--wait", type=number(positive=True), default=60.0,
                       help="seconds to wait for servers to register")
        p.add_argument("--log-dir", type=Path, default=Path("build") / "rpc-logs")

    p_start = sub.add_parser("start", help="start and leave running (state in --state)")
    cluster_args(p_start)
    p_start.add_argument("--state", type=Path, default=state_default)
    p_run = sub.add_parser("run", help="start, run a command with TVM_TRACKER_* set, stop")
    cluster_args(p_run)
    p_run.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    p_status = sub.add_parser("status", help="servers and queues the tracker knows")
    p_status.add_argument("--tracker", default=None, help="HOST:PORT (default: the one in --state)")
    p_status.add_argument("--state", type=Path, default=state_default)
    p_stop = sub.add_parser("stop", help="stop what start started (a pid that is no longer TVM's tracker or server "
                                         "is left alone, and reported)")
    p_stop.add_argument("--state", type=Path, default=state_default)
    args = ap.parse_args(argv)

    from flashgemm.tune import rpc_cluster, rpc_runner  # noqa: PLC0415

    try:
        if args.cmd == "start":
            if args.state.exists():
                ap.error(f"{args.state} exists: a cluster is running",
                         fix="stop it first with flashgemm-rpc-cluster stop, or pass another --state")
            cluster = _start(args)
            cluster.save(args.state)
            print(f"[rpc] state in {args.state}; tune with: --runner rpc --tracker "
                  f"{cluster.tracker_host}:{cluster.tracker_port} --key {cluster.key}")
        elif args.cmd == "status":
            if args.tracker:
                tracker = rpc_runner.parse_tracker(args.tracker, "any")
            else:
                tracker = rpc_cluster.Cluster.load(args.state).tracker
            print(rpc_cluster.describe(tracker))
        elif args.cmd == "stop":
            rpc_cluster.stop(rpc_cluster.Cluster.load(args.state))
            args.state.unlink()
        else:  # run
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not command:
                ap.error("run needs a command after --", fix="e.g. run -- flashgemm-tune --runner rpc ...")
            cluster = _start(args)
            env = dict(os.environ, TVM_TRACKER_HOST=cluster.tracker_host,
                       TVM_TRACKER_PORT=str(cluster.tracker_port), TVM_TRACKER_KEY=cluster.key)
            if command[0].endswith(".py"):
                command = [sys.executable, *command]
            # SIGTERM/SIGHUP (a timeout, a job scheduler, a closed terminal) must still stop the servers.
            for sig in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, _interrupt)
            try:
                return subprocess.call(command, env=env)
            except KeyboardInterrupt:
                return 130
            finally:
                rpc_cluster.stop(cluster)
    except (rpc_cluster.ClusterError, rpc_runner.TrackerError) as err:
        ap.error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
