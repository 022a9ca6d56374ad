#!/usr/bin/env python3
"""Benchmark the fused op against its peers on one GPU, in one run.

  scripts/bench.py --target sm_90 --workload w1 --workload w2 --out results/bench.json

For each workload: our kernel as a bundle would serve it (the best record of tuning_db/<target>/<workload>/
when it was tuned, else the tensor-core space's default schedule (schedules/cuda_default), else the generic
kernel), with --also default,generic those too side by side, torch eager (matmul + softmax), torch.compile of the same function, and the
HBM floor = (A + B + bias + mask + P bytes) / the device-to-device copy rate measured in this run.

Timing protocol (also written into the JSON): inputs are random normal (never zeros), 10 warm-up calls,
then --reps calls in groups of 10 back-to-back calls between two CUDA events on the current stream (so
host overhead hides behind queued GPU work); the median and 10th/90th percentiles of the group means
are reported. Our kernel's arguments are wrapped once, outside the timed region. L2 is not flushed between calls (the attention-score workloads move 40 MB to
2.9 GB per call against a 50 MB L2). Each result is checked against an FP32 torch reference first.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

WARMUP = 10
INNER = 10  # calls per timed group


def gpu_info() -> dict:
    import torch  # noqa: PLC0415
    info = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda_torch": torch.version.cuda}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
        info["driver"], info["memory"], info["max_sm_clock"] = [x.strip() for x in out.strip().split(",")]
    except Exception as err:  # noqa: BLE001
        info["driver"] = f"unknown ({err})"
    return info


def time_cuda(fn, reps: int) -> dict:
    """Per-call time: INNER back-to-back calls between two events (so host overhead hides behind the
    queued GPU work, as in a model), `reps` such groups, median of the group means."""
    import torch  # noqa: PLC0415
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(max(1, reps // INNER)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(INNER):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / INNER)  # us
    times.sort()
    return {"median_us": statistics.median(times), "p10_us": times[len(times) // 10],
            "p90_us": times[(len(times) * 9) // 10], "reps": reps}


def copy_rate_bytes_per_s() -> float:
    """Device-to-device copy of 1 GiB, bytes read + written per second (median of 20)."""
    import torch  # noqa: PLC0415
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    t = time_cuda(lambda: dst.copy_(src), 20)["median_us"]
    return 2 * src.numel() / (t * 1e-6)


def torch_inputs(wl, seed=0):
    import torch  # noqa: PLC0415
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[wl.dtype]
    g = torch.Generator(device="cuda").manual_seed(seed)
    feeds = {"A": torch.randn(wl.a_shape, generator=g, device="cuda").to(dt),
             "B": torch.randn(wl.b_shape, generator=g, device="cuda").to(dt)}
    if wl.bias_shape is not None:
        feeds["bias"] = torch.randn(wl.bias_shape, generator=g, device="cuda").to(dt)
    if wl.mask_shape is not None:
        keep = torch.rand(wl.mask_shape, generator=g, device="cuda") > 0.2
        feeds["mask"] = keep if wl.mask_kind == "bool" else torch.where(keep, 0.0, -1e9).to(dt)
    return feeds


def torch_fn(wl):
    """The unfused op as a PyTorch user writes it (matmul, then softmax over the last axis)."""
    import torch  # noqa: PLC0415

    def f(A, B, bias=None, mask=None):
        s = torch.matmul(A, B.transpose(-1, -2) if wl.trans_b else B) * wl.scale
        if bias is not None:
            s = s + bias
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
        if wl.causal:
            m, n = s.shape[-2:]
            s = s.masked_fill(torch.ones(m, n, dtype=torch.bool, device=s.device).triu(n - m + 1), float("-inf"))
        return torch.softmax(s, dim=-1)
    return f


KINDS = ("tuned", "default", "generic")


def our_kernel(wl, target_name, db_root, log, kind="best"):
    """(callable over torch feeds, which kernel) for the workload. kind "best": what a bundle built with
    --workload serves (tuned if the database has it, else the default schedule, else generic); or one of KINDS
    (LookupError when the workload has no such kernel)."""
    import torch  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415

    from ort_integration.kernel_library import generic_schedule  # noqa: PLC0415
    from schedules import cuda_space  # noqa: PLC0415
    from tir_kernels import runtime_func  # noqa: PLC0415
    from tuning_db import best, database  # noqa: PLC0415

    wl_dir = database.workload_dir(db_root or database.default_root(), target_name, wl.dir_name)
    c = wl.canonical
    mod = which = None
    if kind in ("best", "tuned") and (wl_dir / database.PROVENANCE).exists():
        tk = best.load_tuned(wl_dir, target_name)
        mod, which = tk.schedule.mod, f"tuned ({wl_dir.name}, {tk.run_secs * 1e6:.1f} us when tuned)"
    if mod is None and kind in ("best", "default"):
        tk = best.default_kernel(wl, target_name, log=lambda msg: log("  " + msg))
        if tk is not None:
            mod, which = tk.schedule.mod, "default schedule (untuned)"
    if mod is None and kind in ("best", "generic"):
        mod, which = generic_schedule(target_name, runtime_func(wl.variant)).mod, "generic (untuned)"
    if mod is None:
        raise LookupError(f"no {kind} kernel for {wl.dir_name}")
    fn = cuda_space.build(mod, target_name)["main"]  # the builder's and the export's compile
    log(f"  ours{'' if kind == 'best' else '_' + kind}: {which}")

    def views(feeds):
        def four(t, shape, strides):
            return t.as_strided(shape, strides) if t.dim() else t.reshape(1).as_strided(shape, strides)
        b_rows = (c.n, c.k) if wl.trans_b else (c.k, c.n)
        out = [four(feeds["A"], (c.b0, c.b1, c.m, c.k), c.a_strides),
               four(feeds["B"], (c.b0, c.b1, *b_rows), c.b_strides)]
        if "bias" in feeds:
            out.append(four(feeds["bias"], (c.b0, c.b1, c.m, c.n), c.bias_strides))
        if "mask" in feeds:
            m = feeds["mask"].view(torch.uint8) if feeds["mask"].dtype == torch.bool else feeds["mask"]
            out.append(four(m, (c.b0, c.b1, c.m, c.n), c.mask_strides))
        return out

    def prepare(feeds):
        """Wrap the inputs and an output once (as the ORT op does per call in C++, at no Python cost)."""
        p = torch.empty(c.out_shape, dtype=feeds["A"].dtype, device="cuda")
        args = [tvm_ffi.from_dlpack(t) for t in views(feeds)] + [tvm_ffi.from_dlpack(p.view(c.b0, c.b1, c.m, c.n))]
        scale = float(wl.scale)

        def run():
            fn(*args, scale)
            return p
        return run
    return prepare, which


def bench_workload(wl, target_name, db_root, reps, rate, log, also=()):
    import torch  # noqa: PLC0415
    feeds = torch_inputs(wl)
    nbytes = sum(t.numel() * t.element_size() for t in feeds.values())
    nbytes += feeds["A"].element_size() * torch.Size(wl.canonical.out_shape).numel()
    c = wl.canonical
    row = {"workload": wl.dir_name, "spec": wl.spec(), "sizes": list(c.sizes), "bytes": nbytes,
           "flop": 2 * c.b0 * c.b1 * c.m * c.n * c.k, "hbm_floor_us": nbytes / rate * 1e6}
    ref = torch_fn(wl)(*[t.float() if t.is_floating_point() else t for t in feeds.values()])
    eager = torch_fn(wl)
    peers = {"torch_eager": lambda: eager(**feeds)}
    compiled = torch.compile(eager)
    peers["torch_compile"] = lambda: compiled(**feeds)
    try:
        prepare, which = our_kernel(wl, target_name, db_root, log)
        row["ours_kernel"] = which
        peers = {"ours": prepare(feeds), **peers}
    except Exception as err:  # noqa: BLE001  (a shape the space cannot serve yet: say so, keep the peers)
        row["ours_error"] = str(err).strip().splitlines()[-1][:300]
        log(f"  ours: not measured: {row['ours_error']}")
    for kind in also:
        if kind == "tuned" and row.get("ours_kernel", "").startswith("tuned"):
            continue  # "ours" is the tuned one already
        try:
            prepare, _ = our_kernel(wl, target_name, db_root, log, kind)
            peers[f"ours_{kind}"] = prepare(feeds)
        except LookupError as err:
            log(f"  ours_{kind}: {err}")
    for name, fn in peers.items():
        try:
            err = float((fn().float() - ref).abs().max())
            row[name] = {**time_cuda(fn, reps), "max_abs_err_vs_fp32": err}
            log(f"  {name:14s} {row[name]['median_us']:10.1f} us   err {err:.2e}")
        except Exception as exc:  # noqa: BLE001
            row[name] = {"error": str(exc).strip().splitlines()[-1][:300]}
            log(f"  {name:14s} failed: {row[name]['error']}")
    log(f"  {'HBM floor':14s} {row['hbm_floor_us']:10.1f} us")
    return row


def markdown(result) -> str:
    extra = [k for k in KINDS if any(f"ours_{k}" in r for r in result["rows"])]
    lines = [f"# Benchmark: {result['env']['gpu']}, driver {result['env'].get('driver')}, {result['date']}", "",
             "| workload | ours (kernel) µs | " + "".join(f"ours {k} µs | " for k in extra)
             + "torch eager µs | torch.compile µs | HBM floor µs | ours / floor | eager / ours |",
             "|---|---|" + "---|" * len(extra) + "---|---|---|---|---|"]
    for r in result["rows"]:
        def t(name):
            return r.get(name, {}).get("median_us") if isinstance(r.get(name), dict) else None
        ours, eager, comp, floor = t("ours"), t("torch_eager"), t("torch_compile"), r["hbm_floor_us"]
        f = lambda x: f"{x:.1f}" if x else "—"  # noqa: E731
        kernel = r.get("ours_kernel", "").split(" (")[0] or "none"
        lines.append(f"| {r['workload']} | {f(ours)} ({kernel}) | " + "".join(f"{f(t('ours_' + k))} | " for k in extra)
                     + f"{f(eager)} | {f(comp)} | {floor:.1f} | "
                     f"{f(ours / floor if ours else None)} | {f(eager / ours if ours and eager else None)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto")
    ap.add_argument("--workload", action="append", required=True)
    ap.add_argument("--dtype", default=None, choices=["float16", "bfloat16", "both"])
    ap.add_argument("--db", default=None)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--out", default=None, help="JSON path (a .md table is written beside it)")
    ap.add_argument("--also", default="", help="comma-separated kernels to measure beside ours: tuned,default,generic "
                                               "(e.g. --also default,generic: what tuning buys over the untuned ones)")
    args = ap.parse_args(argv)

    from schedules import targets  # noqa: PLC0415
    from tir_kernels.workloads import parse  # noqa: PLC0415

    target = targets.resolve(args.target)
    if not targets.is_cuda(target):
        ap.error("bench.py measures GPU kernels: run it on a GPU machine (--target sm_80|sm_89|sm_90|auto)")
    dtypes = ["float16", "bfloat16"] if args.dtype == "both" else [args.dtype]
    workloads = [parse(w, d) for w in args.workload for d in dtypes]
    also = [k for k in args.also.split(",") if k]
    if set(also) - set(KINDS):
        ap.error(f"--also: unknown kernel kinds {sorted(set(also) - set(KINDS))}; choose from {', '.join(KINDS)}")
    rate = copy_rate_bytes_per_s()
    env = gpu_info()
    print(f"{env['gpu']} driver {env.get('driver')}: device copy {rate / 1e12:.2f} TB/s (read + write)")
    rows = []
    for wl in workloads:
        print(f"{wl.dir_name} {wl.spec()}")
        rows.append(bench_workload(wl, target, args.db, args.reps, rate, print, also))
    # FLASHGEMM_COMMIT first: a tree copied to the GPU machine may carry a stale .git
    commit = os.environ.get("FLASHGEMM_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=ROOT).stdout.strip() or None
        except OSError:
            commit = None
    import tvm  # noqa: PLC0415
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "target": target, "commit": commit, "host": platform.node(),
              "env": {**env, "tvm": tvm.__version__, "copy_rate_TBps": rate / 1e12},
              "protocol": {"warmup": WARMUP, "reps": args.reps, "calls_per_event_pair": INNER,
                           "timer": "CUDA events around 10 back-to-back calls; median (p10, p90) of the groups",
                           "l2_flush": False, "inputs": "random normal; bool masks 80% keep"},
              "rows": rows}
    md = markdown(result)
    print(md)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
        with open(os.path.splitext(args.out)[0] + ".md", "w") as fh:
            fh.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
