#!/usr/bin/env python3
"""Tuning throughput with 1, 2, 4 ... GPUs through TVM's RPC tracker: same workloads, same trial budget.

  python -m benchmarks.bench_tuning --target sm_90 --workload vit-b16 --trials 256 --gpus 1,2,4 --out results/x.json
  python -m benchmarks.bench_tuning --target sm_90 --workload w2 --dtype both --jobs 2 --gpus 1,2 --out ...
  python -m benchmarks.bench_tuning --target sm_90 --workload w2 --trials 512 --gpus 1,2,4 --searches gpus --out ...

--searches gpus runs one search per GPU for each workload (flashgemm-tune --searches n); the default, 1, one search.

Each configuration tunes from an empty database (a temporary --db) with flashgemm-rpc-cluster run --gpus
<the first n> -- flashgemm-tune --runner rpc [--jobs J] [--searches S]; each search builds on at most 16 cores
(flashgemm-tune's default), so a configuration with more searches also uses more of this machine's cores. Results are
merged into --out by configuration (run it in slices: one --gpus value per command), with a markdown table beside it.
Throughput = trials of all workloads / the longest workload's tuning time (flashgemm-tune's own clock, from the
first search to the last measurement; cluster start-up excluded and reported apart).
"""
import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from benchmarks import commit_id
from flashgemm.cli.usage import ArgumentParser, count


def _machine() -> dict:
    from flashgemm.spaces.cuda_space import gpu_environment  # noqa: PLC0415

    env = gpu_environment()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        env["gpus"] = len([x for x in out.stdout.splitlines() if x.strip()])
    except (OSError, subprocess.SubprocessError):
        pass
    env["cpu_cores"] = os.cpu_count()
    return env


def searches_for(args, n_gpus: int) -> int:
    return n_gpus if args.searches == "gpus" else int(args.searches)


def config_key(args, n_gpus: int) -> str:
    s = searches_for(args, n_gpus)
    return str(n_gpus) if s == 1 else f"{n_gpus}x{s}"


def run_config(args, n_gpus: int, db: Path, port: int) -> dict:
    gpus = ",".join(str(i) for i in range(n_gpus))
    searches = searches_for(args, n_gpus)
    tune = ["flashgemm-tune", "--target", args.target, "--trials", str(args.trials), "--batch-size",
            str(args.batch_size), "--runner", "rpc", "--jobs", str(args.jobs), "--db", str(db), "--seed", "1",
            "--searches", str(searches)]
    for name in args.workload:
        tune += ["--workload", name]
    if args.dtype:
        tune += ["--dtype", args.dtype]
    cmd = [sys.executable, "-m", "flashgemm.cli.rpc_cluster", "run", "--gpus", gpus, "--port", str(port),
           "--log-dir", str(db / "rpc-logs"), "--", *tune]
    print(f"[bench_tuning] {n_gpus} GPU(s): {' '.join(cmd[1:])}", flush=True)
    t0 = time.time()
    log = db / "stdout.log"
    # Output to a file, not a pipe (it survives us; a killed reader would break the cluster's shutdown), and
    # the run in its own process group, stopped with us: a slice cut by a timeout leaves no tracker behind.
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            # where the cut run was (start-up, search, measuring): the log goes with the temporary database
            print(f"[bench_tuning] interrupted after {time.time() - t0:.0f} s; the run's output so far:\n"
                  + log.read_text(errors="replace")[-4000:], flush=True)
            raise
    wall = time.time() - t0
    print(log.read_text(errors="replace")[-4000:], flush=True)
    per = {}
    for prov_path in sorted((db / args.target).glob("*/provenance.json")):
        prov = json.loads(prov_path.read_text())
        run = prov["runs"][-1]
        per[prov_path.parent.name] = {"trials": run["trials"], "valid": run["valid"], "invalid": run["invalid"],
                                      "seconds": run["seconds"], "trials_per_second": run["trials_per_second"],
                                      "stage_seconds": run["stage_seconds"], "runner": run.get("runner"),
                                      "searches": run.get("searches", 1), "workers": run.get("workers"),
                                      "best_us": round(prov["best_secs"] * 1e6, 2) if prov["best_secs"] else None}
    trials = sum(p["trials"] for p in per.values())
    longest = max((p["seconds"] for p in per.values()), default=None)
    return {"gpus": n_gpus, "searches": searches, "db": str(db), "returncode": returncode, "workloads": per, "trials": trials,
            "tuning_seconds": longest, "wall_seconds": round(wall, 1),
            "trials_per_second": round(trials / longest, 3) if longest else None}


def table(result: dict) -> str:
    rows = sorted(result["configs"].values(), key=lambda r: (r.get("searches", 1) > 1, r["gpus"]))
    base = next((r for r in rows if r["gpus"] == 1 and r["trials_per_second"]), None)
    m = result["machine"]
    lines = [f"# Tuning throughput vs GPUs ({result['date']})", "",
             f"{m.get('gpus', '?')}x {m.get('gpu', '?')}, driver {m.get('driver', '?')}, {m.get('cpu_cores')} CPU "
             f"cores; target {result['target']}; workloads {', '.join(result['workloads'])}; {result['trials']} trials "
             f"each, batch {result['batch_size']}, --jobs {result['jobs']}; commit {result['commit']}.", "",
             "| GPUs | searches | trials | tuning s | trials/s | speed-up | scaling efficiency | best (us) per workload | "
             "search / build / run s (first workload) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tps = r["trials_per_second"]
        speed = tps / base["trials_per_second"] if base and tps else None
        first = next(iter(r["workloads"].values()), {})
        st = first.get("stage_seconds") or {}
        lines.append(f"| {r['gpus']} | {r.get('searches', 1)} | {r['trials']} | {r['tuning_seconds']} | {tps} | "
                     + (f"{speed:.2f}x | {speed / r['gpus']:.2f} |" if speed else "- | - |")
                     + " " + ", ".join(f"{w}: {p['best_us']}" for w, p in r["workloads"].items())
                     + " | " + " / ".join(f"{st[k]:.0f}" if k in st else "-" for k in ("search", "build", "run")) + " |")
    return "\n".join(lines) + "\n"


def _interrupt(*_):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--workload", action="append", required=True, help="preset or spec (repeatable)")
    ap.add_argument("--dtype", default=None, choices=["float16", "bfloat16", "both"], help="flashgemm-tune --dtype")
    ap.add_argument("--trials", type=count(1), default=256)
    ap.add_argument("--batch-size", type=count(1), default=256)
    ap.add_argument("--jobs", type=count(1), default=1, help="flashgemm-tune --jobs (workloads tuned at once)")
    ap.add_argument("--gpus", default="1,2,4", help="GPU counts to measure, e.g. 1,2,4")
    ap.add_argument("--searches", default="1", help="searches per workload: a number, or 'gpus' (one per GPU)")
    ap.add_argument("--port", type=count(1), default=9190)
    ap.add_argument("--out", type=Path, required=True, help="JSON to write/merge (a .md is written beside it)")
    ap.add_argument("--keep", type=Path, default=None, help="keep each configuration's database under this dir")
    args = ap.parse_args(argv)
    counts = [x.strip() for x in args.gpus.split(",") if x.strip()]
    if not counts or not all(x.isdigit() and int(x) > 0 for x in counts):
        ap.error(f"--gpus {args.gpus!r}: not a list of GPU counts", fix="give counts like 1,2,4")
    counts = [int(x) for x in counts]
    if args.searches != "gpus" and not (args.searches.isdigit() and int(args.searches) > 0):
        ap.error(f"--searches {args.searches!r}", fix="give a number of at least 1, or 'gpus'")
    from flashgemm import targets  # noqa: PLC0415
    with ap.errors(targets.TargetError, what="--target"):
        targets.resolve(args.target)  # flashgemm-tune resolves it again, in each configuration
    with ap.errors(ValueError, OSError, what=f"--out {args.out} holds no results to merge into",
                   fix="give a JSON this script wrote, or a new path"):
        result = json.loads(args.out.read_text()) if args.out.exists() else {}
    if not isinstance(result, dict):
        ap.error(f"--out {args.out} holds no results to merge into", fix="give a JSON this script wrote, or a new path")
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a timeout's signal stops the configuration in flight too
        signal.signal(sig, _interrupt)
    result.update({"target": args.target, "workloads": args.workload, "dtype": args.dtype, "trials": args.trials,
                   "batch_size": args.batch_size, "jobs": args.jobs, "machine": _machine(),
                   "commit": commit_id() or "unknown",
                   "date": datetime.date.today().isoformat(),
                   "protocol": "each configuration tunes from an empty database; builder on all cores; throughput "
                               "= total trials / longest workload's tuning time (flashgemm-tune's clock)"})
    result.setdefault("configs", {})
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)  # tempfile.mkdtemp(dir=...) needs it to exist
    for n in counts:
        key = config_key(args, n)
        db = Path(tempfile.mkdtemp(prefix=f"bench-tuning-{key}-", dir=args.keep)) if args.keep else \
            Path(tempfile.mkdtemp(prefix=f"bench-tuning-{key}-"))
        result["configs"][key] = run_config(args, n, db, args.port)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        args.out.with_suffix(".md").write_text(table(result))
        print(table(result), flush=True)
    return 0 if all(c["returncode"] == 0 for c in result["configs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
