"""DRAM traffic of one call of the fused op, measured with Nsight Compute (ncu), against the unfused torch pair.

Two roles in one module:

* the driver, run under ncu (one process per workload and system):

      python -m benchmarks.dram_bytes --driver --workload SPEC --system ours|torch_pair|torch_eager --target sm_90

  sets up the inputs (benchmarks.peers.torch_inputs), runs the system WARMUP times, then exactly once between
  torch.cuda.synchronize() calls inside cudaProfilerStart/Stop (and an NVTX range), so that
  `ncu --profile-from-start off` captures the kernels of that one call and nothing else;

* measure(), which runs ncu on the driver (see ncu_command()) and sums dram__bytes_read.sum,
  dram__bytes_write.sum and gpu__time_duration.sum over every kernel ncu captured in the range.

Systems:
  ours         our kernel as a bundle serves it (benchmarks.peers.our_kernel: tuned, else default, else generic)
  torch_pair   the unfused pair of the issue: one batched GEMM with the scale folded into its alpha
               (Tensor.baddbmm_, beta=0), then torch.softmax: two kernels (only for workloads with no bias, mask
               or causal mask and equal batch dims of A and B, such as W1-W4)
  torch_eager  the op as a PyTorch user writes it (benchmarks.peers.torch_fn: matmul, * scale, softmax: 3 kernels)

The floor is A + B + bias + mask + P bytes (each read or written once), the formula of python -m benchmarks.bench.
Goals (the issue): ours <= 40% of the unfused pair's bytes, and <= 1.2x the floor's bytes.

Caveats of the counters: ncu flushes the caches before each kernel (--cache-control all), so every kernel starts
with a cold L2 (in a real back-to-back run the softmax would find part of S in L2); L2 is write-back, so bytes a
kernel leaves dirty in L2 when it ends may not be counted as DRAM writes of that kernel (flagged per system
when the writes come out below P's size).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile

from benchmarks import commit_id

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SYSTEMS = ("ours", "torch_pair", "torch_eager")
UNFUSED = "torch_pair"  # the "unfused pair (torch bmm + softmax)"; torch_eager when the pair is not measured
WARMUP = 3
GOAL_VS_UNFUSED = 0.40
GOAL_VS_FLOOR = 1.2

READ, WRITE, TIME = "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"
METRICS = (READ, WRITE, TIME)

PERMISSION_FIX = (
    "GPU performance counters are restricted to admin users on this machine. Run the profiler as root "
    "(sudo -E env PATH=$PATH ...), or let every user read them: put 'options nvidia "
    "NVreg_RestrictProfilingToAdminUsers=0' in a file under /etc/modprobe.d/ and reload the nvidia kernel module "
    "(or reboot); in a container, run it with --cap-add SYS_ADMIN. See https://developer.nvidia.com/ERR_NVGPUCTRPERM")


class NcuError(RuntimeError):
    """ncu is missing or cannot profile on this machine (nothing can be measured)."""


class NcuPermissionError(NcuError):
    """ERR_NVGPUCTRPERM: the user may not read the GPU performance counters."""


# ---------------------------------------------------------------------------------------------------------------
# ncu's CSV

# ncu scales units by SI factors (1000 for bytes too: Kbyte = 1e3 byte) unless --print-units base; the binary
# spellings are accepted for safety. Everything becomes bytes or nanoseconds.
_BYTE_UNITS = {"byte": 1, "bytes": 1, "b": 1,
               "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
               "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
_TIME_UNITS = {"psecond": 1e-3, "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
               "ps": 1e-3, "ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}


def to_base(value: float, unit: str) -> tuple:
    """(value, unit) -> (value in bytes or nanoseconds, 'byte' | 'nsecond'); other units pass unchanged."""
    u = unit.strip()
    if u.lower() in _BYTE_UNITS:
        return value * _BYTE_UNITS[u.lower()], "byte"
    if u.lower() in _TIME_UNITS:
        return value * _TIME_UNITS[u.lower()], "nsecond"
    return value, u


def _number(text: str):
    text = text.strip().replace(",", "")  # ncu may group thousands ("1,048,576")
    if not text or text.lower() in ("n/a", "nan", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list:
    """ncu --csv output (either --page raw or the default --page details) -> one dict per profiled kernel launch,
    in launch order: {"id", "kernel", "metrics": {name: value in base units}, "units": {name: base unit}}.

    Lines before and between CSV blocks (==PROF==, ==WARNING==, the application's own output) are skipped.
    raw: a header row ("ID", ..., "Kernel Name", ..., metric names), a row of units, then one row per launch.
    details: one row per (launch, metric) with "Metric Name", "Metric Unit", "Metric Value" columns."""
    kernels, by_key = [], {}
    header = units = None
    for line in text.splitlines():
        if not line.startswith('"'):
            if line.startswith("==") or not line.strip():
                continue
            header = None  # anything else ends a CSV block
            continue
        row = next(csv.reader(io.StringIO(line)))
        if row and row[0] == "ID":
            header, units = row, None
            continue
        if header is None or len(row) != len(header):
            continue
        cell = dict(zip(header, row))
        if not cell["ID"].strip().isdigit():  # raw page: the units row
            units = cell
            continue
        key = (cell.get("Process ID", ""), int(cell["ID"]))
        if key not in by_key:
            by_key[key] = {"id": int(cell["ID"]), "kernel": cell.get("Kernel Name", ""), "metrics": {}, "units": {}}
            kernels.append(by_key[key])
        k = by_key[key]
        if "Metric Name" in cell and "Metric Value" in cell:  # details page
            pairs = [(cell["Metric Name"], cell["Metric Value"], cell.get("Metric Unit", ""))]
        else:  # raw page: every metric column (ncu metric names have a '__')
            pairs = [(name, cell[name], (units or {}).get(name, "")) for name in header if "__" in name]
        for name, value, unit in pairs:
            v = _number(value)
            if v is None:
                continue
            k["metrics"][name], k["units"][name] = to_base(v, unit)
    return kernels


def summarize(kernels: list) -> dict:
    """Sum the DRAM bytes and kernel time over the launches ncu captured."""
    if not kernels:
        raise ValueError("ncu profiled no kernels")
    read = write = time_ns = 0.0
    for k in kernels:
        for name, want in ((READ, "byte"), (WRITE, "byte"), (TIME, "nsecond")):
            if name not in k["metrics"]:
                raise ValueError(f"kernel {k['id']} ({k['kernel'][:80]}): no {name} in ncu's output")
            if k["units"][name] != want:
                raise ValueError(f"kernel {k['id']}: {name} in unit {k['units'][name]!r}, expected {want!r}")
        read += k["metrics"][READ]
        write += k["metrics"][WRITE]
        time_ns += k["metrics"][TIME]
    return {"kernels": [k["kernel"] for k in kernels], "kernel_count": len(kernels),
            "bytes_read": int(round(read)), "bytes_written": int(round(write)),
            "bytes_total": int(round(read + write)), "kernel_time_us": time_ns / 1e3}


def check_ncu_output(text: str) -> None:
    """Raise NcuPermissionError (with ncu's own line and the fix) when ncu could not read the counters."""
    for line in text.splitlines():
        if "ERR_NVGPUCTRPERM" in line:
            raise NcuPermissionError(f"ncu: {line.strip()}\n{PERMISSION_FIX}")


# ---------------------------------------------------------------------------------------------------------------
# Bytes, ratios, goals

def floor_bytes(wl) -> int:
    """A + B + bias + mask + P bytes, as benchmarks.peers.torch_inputs makes them (bool masks 1 byte an element)."""
    item = 2  # float16 / bfloat16
    total = (math.prod(wl.a_shape) + math.prod(wl.b_shape) + math.prod(wl.canonical.out_shape)) * item
    if wl.bias_shape is not None:
        total += math.prod(wl.bias_shape) * item
    if wl.mask_shape is not None:
        total += math.prod(wl.mask_shape) * (1 if wl.mask_kind == "bool" else item)
    return total


def p_bytes(wl) -> int:
    return math.prod(wl.canonical.out_shape) * 2


def compare(ours, unfused, floor) -> dict:
    """Ratios of our bytes to the unfused pair's and to the floor's, and whether the issue's goals are met
    (None where a number is missing)."""
    def ratio(a, b):
        return a / b if a is not None and b else None
    r_unfused, r_floor = ratio(ours, unfused), ratio(ours, floor)
    return {"ours_over_unfused": r_unfused, "ours_over_floor": r_floor,
            "goal_unfused_met": None if r_unfused is None else r_unfused <= GOAL_VS_UNFUSED,
            "goal_floor_met": None if r_floor is None else r_floor <= GOAL_VS_FLOOR}


def evaluate(row: dict) -> dict:
    """The comparison entries of a row that holds the systems' measurements."""
    def total(name):
        m = row.get(name)
        return m.get("bytes_total") if isinstance(m, dict) else None
    ref = UNFUSED if total(UNFUSED) is not None else "torch_eager"
    out = {"unfused_reference": ref, **compare(total("ours"), total(ref), row["floor_bytes"])}
    eager = total("torch_eager")
    out["ours_over_torch_eager"] = total("ours") / eager if total("ours") is not None and eager else None
    return out


# ---------------------------------------------------------------------------------------------------------------
# Running ncu on the driver

def find_ncu(ncu=None) -> str:
    path = ncu or os.environ.get("NCU") or shutil.which("ncu")
    if not path:
        for cand in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu"):
            if os.path.exists(cand):
                path = cand
                break
    if not path or not (os.path.exists(path) or shutil.which(path)):
        raise NcuError("ncu (Nsight Compute CLI) not found: put it on PATH (it ships with the CUDA toolkit, "
                       "/usr/local/cuda/bin/ncu) or name it with --ncu / $NCU")
    return path


def ncu_command(ncu: str, log_file: str, cache_control: str = "all", clock_control: str = "base") -> list:
    """ncu's part of the command line; the driver's command follows it."""
    return [ncu, "--profile-from-start", "off", "--metrics", ",".join(METRICS), "--csv", "--page", "raw",
            "--print-units", "base", "--cache-control", cache_control, "--clock-control", clock_control,
            "--log-file", log_file]


def workload_arg(wl) -> str:
    """A --workload argument that parses back to this very workload (its name included: the tuning database's
    directory is named after it)."""
    return f"{wl.spec()},name={wl.name}"


def driver_command(wl, system, target_name, db_root, info_file) -> list:
    cmd = [sys.executable, "-m", "benchmarks.dram_bytes", "--driver", "--workload", workload_arg(wl),
           "--system", system, "--target", target_name, "--info", info_file]
    return cmd + (["--db", str(db_root)] if db_root else [])


def add_workload_args(ap, timeout_s: int) -> None:
    """The command-line options python -m benchmarks.bench_dram_bytes and python -m benchmarks.bench_stall_sites
    share."""
    ap.add_argument("--target", default="auto", help="sm_80|sm_89|sm_90|auto (a CUDA target)")
    ap.add_argument("--workload", action="append", required=True, help="preset (w1..w4, bert-large, ...) or spec")
    ap.add_argument("--dtype", default=None, choices=["float16", "bfloat16", "both"],
                    help="default: the preset's own (float16; bfloat16 for lm-head)")
    ap.add_argument("--db", default=None, help="tuning database root (default: the repo's flashgemm/databases)")
    ap.add_argument("--ncu", default=None, help="path of ncu (default: $NCU, then PATH)")
    ap.add_argument("--timeout", type=int, default=timeout_s, help="seconds per ncu run")


def cuda_workloads(ap, args, script: str) -> tuple:
    """(CUDA target, workloads) of add_workload_args' options; ap.error for a target that is not CUDA or a bad
    workload."""
    from flashgemm import targets  # noqa: PLC0415
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    try:
        target = targets.resolve(args.target)
    except targets.TargetError as err:
        ap.error(str(err))
    if not targets.is_cuda(target):
        ap.error(f"{script} profiles GPU kernels with Nsight Compute: --target {args.target} resolves to "
                 f"{target} (run it on a GPU machine with --target sm_80|sm_89|sm_90|auto)")
    if args.timeout < 1:
        ap.error(f"--timeout {args.timeout} (give the seconds an ncu run may take, at least 1)")
    dtypes = ["float16", "bfloat16"] if args.dtype == "both" else [args.dtype]
    try:
        return target, [parse(w, d) for w in args.workload for d in dtypes]
    except ValueError as err:
        ap.error(str(err))


def _tail(text, n=6):
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:])


def profile(wl, system, target_name, db_root, ncu, cache_control="all", clock_control="base",
            timeout_s=3600) -> dict:
    """Run ncu on the driver for one workload and system; the system's measurement, or {"error": ...}."""
    with tempfile.TemporaryDirectory(prefix="dram_bytes_") as tmp:
        log_file, info_file = os.path.join(tmp, "ncu.log"), os.path.join(tmp, "info.json")
        cmd = ncu_command(ncu, log_file, cache_control, clock_control) + driver_command(
            wl, system, target_name, db_root, info_file)
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"ncu + driver ran past {timeout_s} s"}
        except OSError as err:
            raise NcuError(f"could not start ncu ({ncu}): {err}") from err
        log_text = open(log_file).read() if os.path.exists(log_file) else ""
        check_ncu_output(log_text + "\n" + proc.stdout + "\n" + proc.stderr)
        info = {}
        if os.path.exists(info_file):
            with open(info_file) as fh:
                info = json.load(fh)
    if info.get("error"):
        return {"error": info["error"]}
    kernels = parse_ncu_csv(log_text) or parse_ncu_csv(proc.stdout)
    if proc.returncode != 0:
        err = f"ncu exited {proc.returncode}: {_tail(log_text + proc.stdout, 3)}"
        return {"error": err + (f" | driver's stderr: {_tail(proc.stderr, 3)}" if proc.stderr.strip() else "")}
    if not kernels:
        return {"error": "ncu profiled no kernels in the cudaProfilerStart/Stop range: "
                         + _tail(log_text + proc.stdout + proc.stderr)}
    try:
        out = summarize(kernels)
    except ValueError as err:
        return {"error": str(err)}
    out.update({k: info[k] for k in ("which", "max_abs_err_vs_fp32", "floor_bytes_of_tensors") if k in info})
    if out["bytes_written"] < 0.9 * p_bytes(wl):
        out["note"] = ("DRAM writes below P's size: part of the output was still in L2 (write-back) when the "
                       "kernels ended")
    return out


def _env(ncu) -> dict:
    try:
        from benchmarks.peers import gpu_info  # noqa: PLC0415
        env = gpu_info()
    except Exception as err:  # noqa: BLE001  (no torch / no GPU: still say what ran)
        env = {"gpu": f"unknown ({str(err).strip().splitlines()[-1][:200] if str(err).strip() else err!r})"}
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
        env["ncu"] = out.strip().splitlines()[-1] if out.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        env["ncu"] = None
    return env


def measure(workloads, target_name, db_root, log, systems=SYSTEMS, ncu=None, cache_control="all",
            clock_control="base", timeout_s=3600) -> dict:
    """DRAM bytes of one call of each system on each workload, with the floor, ratios and goals. Raises NcuError
    when ncu is missing or may not read the counters (nothing could be measured)."""
    ncu = find_ncu(ncu)
    rows = []
    for wl in workloads:
        log(f"{wl.dir_name} {wl.spec()}")
        row = {"workload": wl.dir_name, "spec": wl.spec(), "sizes": list(wl.canonical.sizes),
               "floor_bytes": floor_bytes(wl), "p_bytes": p_bytes(wl)}
        for system in systems:
            row[system] = m = profile(wl, system, target_name, db_root, ncu, cache_control, clock_control, timeout_s)
            if "error" in m:
                log(f"  {system:12s} not measured: {m['error']}")
            else:
                log(f"  {system:12s} {m['bytes_read'] / 1e6:10.1f} MB read {m['bytes_written'] / 1e6:10.1f} MB "
                    f"written  {m['kernel_count']} kernel(s)  {m['kernel_time_us']:9.1f} us")
        row.update(evaluate(row))
        log(f"  {'floor':12s} {row['floor_bytes'] / 1e6:10.1f} MB   ours/{row['unfused_reference']} "
            f"{_fmt(row['ours_over_unfused'], 3)}  ours/floor {_fmt(row['ours_over_floor'], 3)}")
        rows.append(row)
    probe = ncu_command(ncu, "<tmpdir>/ncu.log", cache_control, clock_control)
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "target": target_name, "commit": commit_id(), "host": platform.node(), "env": _env(ncu),
            "protocol": {
                "command": " ".join(probe) + " " + sys.executable + " -m benchmarks.dram_bytes --driver "
                           "--workload SPEC --system SYSTEM --target " + target_name,
                "metrics": list(METRICS), "warmup_calls": WARMUP, "profiled_calls": 1,
                "range": "cudaProfilerStart/Stop around one call, synchronized on both sides",
                "cache_control": cache_control, "clock_control": clock_control,
                "floor": "A + B + bias + mask + P bytes", "bytes_unit": "bytes (MB = 1e6 bytes in tables)",
                "goals": {"ours_over_unfused_max": GOAL_VS_UNFUSED, "ours_over_floor_max": GOAL_VS_FLOOR},
                "unfused": UNFUSED + " (baddbmm_ with alpha=scale, beta=0, then softmax); torch_eager when absent"},
            "rows": rows}


# ---------------------------------------------------------------------------------------------------------------
# Report

def _fmt(x, digits=1):
    return "—" if x is None else f"{x:.{digits}f}"


def _mb(m):
    return _fmt(m["bytes_total"] / 1e6) if isinstance(m, dict) and "bytes_total" in m else "—"


def _short(kernel: str) -> str:
    name = kernel.removeprefix("void ").replace("(anonymous namespace)::", "").replace("|", "/")
    return name if len(name) <= 70 else name[:69] + "…"


def _mark(ok):
    return "—" if ok is None else ("yes" if ok else "**no**")


def markdown(result) -> str:
    env = result["env"]
    systems = [s for s in SYSTEMS if any(s in r for r in result["rows"])]
    lines = [f"# DRAM bytes per call (ncu): {env.get('gpu')}, driver {env.get('driver')}, {env.get('ncu')}, "
             f"{result['date']}, commit {result.get('commit')}", "",
             f"MB = 1e6 bytes, dram__bytes_read.sum + dram__bytes_write.sum summed over the kernels of one call; "
             f"caches flushed before each kernel (--cache-control {result['protocol']['cache_control']}). "
             f"Goals: ours <= {GOAL_VS_UNFUSED:.0%} of the unfused pair (bmm + softmax), ours <= "
             f"{GOAL_VS_FLOOR}x the floor (A + B + bias + mask + P).", "",
             "| workload | " + " | ".join(f"{s} MB (kernels)" for s in systems)
             + " | floor MB | ours / unfused | ours / floor | <= 0.40 | <= 1.2 |",
             "|---|" + "---|" * len(systems) + "---|---|---|---|---|"]
    for r in result["rows"]:
        cells = []
        for s in systems:
            m = r.get(s)
            cells.append(f"{_mb(m)} ({m['kernel_count']})" if isinstance(m, dict) and "kernel_count" in m
                         else "not measured")
        ref = "" if r["unfused_reference"] == UNFUSED else f" (vs {r['unfused_reference']})"
        lines.append(f"| {r['workload']} | " + " | ".join(cells) + f" | {r['floor_bytes'] / 1e6:.1f} | "
                     f"{_fmt(r['ours_over_unfused'], 3)}{ref} | {_fmt(r['ours_over_floor'], 3)} | "
                     f"{_mark(r['goal_unfused_met'])} | {_mark(r['goal_floor_met'])} |")
    lines += ["", "| workload | system | read MB | written MB | kernel time µs | kernels | note |",
              "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        for s in systems:
            m = r.get(s)
            if not isinstance(m, dict):
                continue
            if "error" in m:
                lines.append(f"| {r['workload']} | {s} | — | — | — | — | {m['error'][:200]} |")
                continue
            names = "; ".join(_short(n) for n in m["kernels"])
            note = m.get("note", "") + (f" ({m['which']})" if s == "ours" and m.get("which") else "")
            lines.append(f"| {r['workload']} | {s} | {m['bytes_read'] / 1e6:.1f} | {m['bytes_written'] / 1e6:.1f} | "
                         f"{m['kernel_time_us']:.1f} | {names} | {note.strip()} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# The driver (runs under ncu)

def torch_pair(wl):
    """bmm with the scale in its alpha, then softmax: exactly the two kernels of the unfused pair."""
    if wl.bias_shape is not None or wl.mask_shape is not None or wl.causal:
        raise ValueError("torch_pair covers workloads without bias, mask or causal mask (see torch_eager)")
    if len(wl.a_shape) < 2 or wl.a_shape[:-2] != wl.b_shape[:-2]:
        raise ValueError("torch_pair needs A and B with equal batch dims")
    import torch  # noqa: PLC0415
    c = wl.canonical

    def prepare(feeds):
        a = feeds["A"].reshape(-1, c.m, c.k)
        b = feeds["B"].reshape(-1, *wl.b_shape[-2:])
        b = b.transpose(1, 2) if wl.trans_b else b
        s = torch.empty(a.shape[0], c.m, c.n, dtype=a.dtype, device=a.device)
        scale = float(wl.scale)

        def run():
            s.baddbmm_(a, b, beta=0, alpha=scale)
            return torch.softmax(s, dim=-1).view(c.out_shape)
        return run
    return prepare


def _driver(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.dram_bytes --driver",
                                 description="Run one system once inside cudaProfilerStart/Stop (for ncu).")
    ap.add_argument("--driver", action="store_true")
    ap.add_argument("--workload", required=True, help="preset or spec (name=... keeps the tuning database's name)")
    ap.add_argument("--dtype", default=None, choices=["float16", "bfloat16"])
    ap.add_argument("--system", required=True, choices=SYSTEMS)
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--db", default=None)
    ap.add_argument("--info", default=None, help="JSON written here: which kernel, error vs FP32, the tensors' bytes")
    ap.add_argument("--warmup", type=int, default=WARMUP)
    args = ap.parse_args(argv)

    sys.path.insert(0, ROOT)
    import torch  # noqa: PLC0415

    from benchmarks import peers  # noqa: PLC0415
    from flashgemm.op.workloads import parse  # noqa: PLC0415

    def log(msg):
        print(msg, file=sys.stderr, flush=True)  # stdout stays ncu's

    info = {"system": args.system}

    def write_info():
        if args.info:
            with open(args.info, "w") as fh:
                json.dump(info, fh, indent=1)

    wl = parse(args.workload, args.dtype)
    info["workload"] = wl.dir_name
    feeds = peers.torch_inputs(wl)
    nbytes = sum(t.numel() * t.element_size() for t in feeds.values())
    info["floor_bytes_of_tensors"] = nbytes + feeds["A"].element_size() * math.prod(wl.canonical.out_shape)
    try:
        if args.system == "ours":
            prepare, info["which"] = peers.our_kernel(wl, args.target, args.db, log)
            fn = prepare(feeds)
        elif args.system == "torch_pair":
            fn = torch_pair(wl)(feeds)
        else:
            eager = peers.torch_fn(wl)
            fn = lambda: eager(**feeds)  # noqa: E731
        for _ in range(max(1, args.warmup)):
            fn()
        torch.cuda.synchronize()
    except Exception as err:  # noqa: BLE001  (a shape a system cannot serve: say so, exit non-zero)
        info["error"] = (str(err).strip().splitlines() or [repr(err)])[-1][:300]
        write_info()
        log(f"{args.system}: {info['error']}")
        return 3

    cudart = torch.cuda.cudart()
    torch.cuda.nvtx.range_push(f"dram_bytes:{args.system}")
    cudart.cudaProfilerStart()
    out = fn()
    torch.cuda.synchronize()
    cudart.cudaProfilerStop()
    torch.cuda.nvtx.range_pop()

    ref = peers.torch_fn(wl)(**{k: t.float() if t.is_floating_point() else t for k, t in feeds.items()})
    info["max_abs_err_vs_fp32"] = float((out.float().reshape(ref.shape) - ref).abs().max())
    write_info()
    log(f"{args.system}: one call profiled; max abs err vs FP32 {info['max_abs_err_vs_fp32']:.2e}")
    return 0


if __name__ == "__main__":
    if "--driver" not in sys.argv[1:]:
        sys.exit("this module's command line is the driver that ncu runs (--driver ...); "
                 "to measure, run python -m benchmarks.bench_dram_bytes")
    sys.exit(_driver(sys.argv[1:]))
