"""Timing and the peers of the fused op on one GPU: torch eager, torch.compile, and our own kernels as a bundle
serves them (python -m benchmarks.bench is the front end; benchmarks/report.py writes its tables and plots)."""
from __future__ import annotations

import functools
import os
import statistics
import subprocess

WARMUP = 10
INNER = 10  # calls per timed group


def gpu_info() -> dict:
    import torch  # noqa: PLC0415
    info = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda_torch": torch.version.cuda}
    try:
        # one line per GPU of the host: the one torch's device 0 is (the first of CUDA_VISIBLE_DEVICES)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total,clocks.max.sm",
                              "--format=csv,noheader", f"--id={visible}"], capture_output=True, text=True,
                             timeout=30).stdout
        first = out.strip().splitlines()[0]
        info["driver"], info["memory"], info["max_sm_clock"] = [x.strip() for x in first.split(",")]
    except Exception as err:  # noqa: BLE001
        info["driver"] = f"unknown ({err})"
    return info


def time_cuda(fn, reps: int, budget_s: float = 3.0) -> dict:
    """Per-call time: INNER back-to-back calls between two events (so host overhead hides behind the
    queued GPU work, as in a model), `reps` calls in such groups, median of the group means.
    A slow system (a generic kernel at hundreds of ms a call) would take minutes at that protocol: when
    WARMUP + reps calls would exceed `budget_s`, it gets 1 warm-up and groups of 1 call, at least 3 of them,
    and the row says so (warmup, calls_per_group, groups)."""
    import torch  # noqa: PLC0415
    fn()  # first call: compiles / autotunes where the system does that
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    once_s = start.elapsed_time(end) * 1e-3
    warmup, inner, groups = WARMUP, INNER, max(1, reps // INNER)
    if once_s * (WARMUP + reps) > budget_s:
        warmup, inner, groups = 1, 1, max(3, min(reps, int(budget_s / max(once_s, 1e-9))))
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(groups):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / inner)  # us
    times.sort()
    return {"median_us": statistics.median(times), "p10_us": times[len(times) // 10],
            "p90_us": times[(len(times) * 9) // 10], "warmup": warmup, "calls_per_group": inner, "groups": groups}


def time_in_rounds(calls: dict, rounds: int, reps: int, timer=None) -> dict:
    """{name: timing} of every call, timed `rounds` times by timer (time_cuda) in alternating order (forward, then
    backward, ...); each name's timing is its median round's, with every round's median in round_medians_us."""
    timer = timer or time_cuda
    times = {name: [] for name in calls}
    for r in range(rounds):
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            times[name].append(timer(calls[name], reps))
    return {name: {**sorted(ts, key=lambda t: t["median_us"])[len(ts) // 2],
                   "round_medians_us": [t["median_us"] for t in ts]} for name, ts in times.items()}


def copy_rate_bytes_per_s() -> float:
    """Device-to-device copy of 1 GiB, bytes read + written per second (median of 20)."""
    import torch  # noqa: PLC0415
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    t = time_cuda(lambda: dst.copy_(src), 20)["median_us"]
    return 2 * src.numel() / (t * 1e-6)


def torch_inputs(wl, seed=0):
    """Random inputs on the GPU. B is drawn with std 1 / (sqrt(K) * |scale|), so that the logits scale * A.B have
    unit variance as in a trained model: for attention (scale = 1/sqrt(K)) that is std 1; for an LM head (scale 1,
    K = 4096) it is a 1/sqrt(hidden) weight init. Unscaled N(0, 1) weights would give logits of std 64 there, a
    one-hot softmax that no fp16/bf16 GEMM (torch's included) can reproduce within rounding."""
    import torch  # noqa: PLC0415
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[wl.dtype]
    g = torch.Generator(device="cuda").manual_seed(seed)
    b_std = 1.0 / (max(wl.canonical.k, 1) ** 0.5 * (abs(wl.scale) or 1.0))
    feeds = {"A": torch.randn(wl.a_shape, generator=g, device="cuda").to(dt),
             "B": (torch.randn(wl.b_shape, generator=g, device="cuda") * b_std).to(dt)}
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


KINDS = ("tuned", "tuned_any_batch", "default", "tensor_core", "generic")


def _serves(tk, c) -> bool:
    """Whether the bundle serves canonical shape `c` by tk's fixed-batch twin (bundle.cc Find)."""
    return tk.twin is not None and c.sizes[tk.fixed_batch[0]] == tk.fixed_batch[1]


def _tensor_core_kernel(wl, target_name):
    """(IRModule, description, (min_n, min_m, first_max_n)) of the bundle's FusedGemmSoftmax tensor-core kernel that
    serves the workload (kernel_library.gemm_softmax_tensor_core_kernels; bundle.cc Find's conditions), or None."""
    import tvm  # noqa: PLC0415

    from flashgemm.bundle.kernel_library import gemm_softmax_tensor_core_kernels  # noqa: PLC0415
    c = wl.canonical
    for _, func, fields in gemm_softmax_tensor_core_kernels(target_name, wl.variant):
        if fields["head_size"] == c.k and c.n % fields["n_multiple"] == 0 and max(c.b0, c.b1) <= 65535:
            return (tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                    f"tensor-core ({fields['form']}, K={c.k}; ahead of every kernel where {fields['min_n']} <= N <= "
                    f"{fields['first_max_n']} and M >= {fields['min_m']}, of all but tuned ones past that N)",
                    (fields["min_n"], fields["min_m"], fields["first_max_n"]))
    return None


def our_kernel(wl, target_name, db_root, log, kind="best"):
    """(callable over torch feeds, which kernel) for the workload. kind "best": what a bundle built with
    --workload serves (tuned if the database has it, else the default schedule, else generic); or one of KINDS
    (LookupError when the workload has no such kernel); "tuned_any_batch" is the tuned kernel without its fixed-batch
    twin, to time what the twin saves."""
    import torch  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415

    from flashgemm.bundle.kernel_library import generic_schedule  # noqa: PLC0415
    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    from flashgemm import targets
    from flashgemm.kernel.fused_gemm_softmax import runtime_func  # noqa: PLC0415
    from flashgemm.bundle import best  # noqa: PLC0415
    from flashgemm.tune import database

    wl_dir = database.workload_dir(db_root or database.default_root(), target_name, wl.dir_name)
    c = wl.canonical
    mod = which = None
    # bundle.cc Find: the tensor-core kernel first in its range; past it, after tuned kernels only; else last
    tensor_core = _tensor_core_kernel(wl, target_name)
    ahead = tensor_core is not None and c.n >= tensor_core[2][0] and c.m >= tensor_core[2][1]
    if tensor_core is not None and (kind == "tensor_core" or (kind == "best" and ahead and c.n <= tensor_core[2][2])):
        mod, which = tensor_core[:2]
    if mod is None and kind in ("best", "tuned", "tuned_any_batch") and (wl_dir / database.PROVENANCE).exists():
        tk = best.load_tuned(wl_dir, target_name)
        # what the bundle serves this call: the fixed-batch twin where the call has its static value (bundle.cc Find)
        twin = _serves(tk, c) and kind != "tuned_any_batch"
        # and of the twins the one specialized on the call's scale (kernel_library: CUDA bundles ship it)
        scale = tk.scale if twin and targets.is_cuda(target_name) and tk.scale == best.float32(wl.scale) else None
        mod = tvm.IRModule({"main": tk.shipped_func(tk.twin if twin else tk.schedule, "main", scale)})  # as shipped
        form = (", fixed-batch twin" if twin else "") + (f" specialized on scale {scale:g}" if scale is not None
                                                         else "")
        which = (f"tuned ({wl_dir.name}{form}, {tk.run_secs * 1e6:.1f} us when tuned"
                 f"{f', at most {tk.max_registers} registers a thread' if tk.max_registers else ''})")
    if mod is None and kind in ("best", "default") and not (kind == "best" and ahead):
        tk = best.default_kernel(wl, target_name, log=lambda msg: log("  " + msg))
        if tk is not None:
            twin = _serves(tk, c)
            scale = tk.scale if twin and targets.is_cuda(target_name) and tk.scale == best.float32(wl.scale) else None
            mod = tvm.IRModule({"main": tk.shipped_func(tk.twin if twin else tk.schedule, "main", scale)})
            which = (f"default schedule (untuned{', fixed-batch twin' if twin else ''}"
                     f"{f' specialized on scale {scale:g}' if scale is not None else ''})")
    if mod is None and kind == "best" and tensor_core is not None:
        mod, which = tensor_core[:2]
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




# ----------------------------------------------------------------------------- the other peers
def ort_unfused(wl):
    """prepare(feeds) for ONNX Runtime's CUDA EP on the unfused graph an exporter writes ([Transpose] -> MatMul ->
    Mul(scale) -> [Add(bias)] -> Softmax), inputs and output bound in device memory (IOBinding on the torch
    tensors: no copies). ORT synchronizes its stream at the end of every run (its default), so its time includes
    the per-run host overhead that a model run pays once per graph, not once per op."""
    import onnxruntime as ort  # noqa: PLC0415
    import torch  # noqa: PLC0415

    from flashgemm.ort.model import elem_type, make_site_models  # noqa: PLC0415
    if wl.mask_shape is not None or wl.causal:
        raise LookupError("the ORT peer graph has no mask or causal form (MatMul + Softmax only)")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise LookupError(f"onnxruntime {ort.__version__} has no CUDA EP here (install onnxruntime-gpu)")
    unfused, _ = make_site_models(wl.dtype, wl.a_shape, wl.b_shape, wl.bias_shape, wl.scale, int(wl.trans_b))
    so = ort.SessionOptions()
    sess = ort.InferenceSession(unfused.SerializeToString(), so, providers=["CUDAExecutionProvider"])
    etype = elem_type(wl.dtype)

    def bind(feeds):
        p = torch.empty(wl.canonical.out_shape, dtype=feeds["A"].dtype, device="cuda")
        io = sess.io_binding()
        for name in [i.name for i in sess.get_inputs()]:
            t = feeds[name].contiguous()
            feeds[name] = t  # keep the contiguous copy alive as long as the binding
            io.bind_input(name, "cuda", 0, etype, tuple(t.shape), t.data_ptr())
        io.bind_output(sess.get_outputs()[0].name, "cuda", 0, etype, tuple(p.shape), p.data_ptr())

        def run():
            sess.run_with_iobinding(io)
            return p
        return run
    return bind


def triton_fused(wl):
    """prepare(feeds) for this project's Triton version of the fused op (benchmarks/triton_fused.py)."""
    try:
        from . import triton_fused as tf  # noqa: PLC0415
    except ImportError as err:
        raise LookupError(f"triton is not installed ({err})") from None
    return tf.prepare(wl)


def ms_default_unfused(wl, target_name, db_root):
    """prepare(feeds) for Meta-Schedule's default schedules of the unfused op (GEMM, then softmax), from the
    databases of flashgemm-tune-ms-default; LookupError (with the command) when that workload was not tuned."""
    from flashgemm.tune import ms_default  # noqa: PLC0415
    return ms_default.prepare_unfused(wl, target_name, db_root)


# Published dense fp16/bf16 tensor-core peaks (FP32 accumulation, no sparsity), TFLOP/s, by GPU name.
# GeForce parts run FP32-accumulate MMA at half rate; those figures are the FP32-accumulate ones.
PEAK_TFLOPS = {"H100 80GB HBM3": 989.4, "H100 SXM": 989.4, "H200": 989.4, "H100 PCIe": 756.0, "H100 NVL": 835.0,
               "A100": 312.0, "L4": 121.0, "RTX 4090": 165.2 / 2, "L40S": 362.0}


def peak_tflops(gpu_name: str):
    """(peak, the key it matched) for a GPU name from torch, or (None, None) when unknown."""
    for key in sorted(PEAK_TFLOPS, key=len, reverse=True):
        if key in gpu_name:
            return PEAK_TFLOPS[key], key
    return None, None


SYSTEMS = ("ours", "triton", "torch_eager", "torch_compile", "ort_cuda", "ms_default_unfused")


def _bind_feeds(fn):
    """prepare(feeds) -> run() for a function of the feeds by name (the shape every system's maker returns)."""
    def prepare(feeds):
        return lambda: fn(**feeds)
    return prepare


def bench_workload(wl, target_name, db_root, reps, rate, peak, log, also=(), systems=SYSTEMS, ms_db=None,
                   rounds: int = 1):
    """One workload: every system checked against an FP32 torch reference, then timed (time_cuda).
    A system that cannot run the workload is recorded with its reason, never silently dropped.
    rounds > 1: every system is prepared first, then timed once a round, the order reversed every other round (a
    GPU whose clock drifts within the run, as the LM head's does, then weighs on all systems alike); each system's
    row is its median round, with every round's median in round_medians_us (benchmarks/gemm.py does the same)."""
    import torch  # noqa: PLC0415
    feeds = torch_inputs(wl)
    nbytes = sum(t.numel() * t.element_size() for t in feeds.values())
    nbytes += feeds["A"].element_size() * torch.Size(wl.canonical.out_shape).numel()
    c = wl.canonical
    flop = 2 * c.b0 * c.b1 * c.m * c.n * c.k
    row = {"workload": wl.dir_name, "spec": wl.spec(), "dtype": wl.dtype, "sizes": list(c.sizes), "bytes": nbytes,
           "flop": flop, "hbm_floor_us": nbytes / rate * 1e6,
           "tc_floor_us": flop / (peak * 1e12) * 1e6 if peak else None}
    ref = torch_fn(wl)(**{k: t.float() if t.is_floating_point() else t for k, t in feeds.items()})
    makers = {}
    if "ours" in systems:
        def ours():
            prepare, which = our_kernel(wl, target_name, db_root, log)
            row["ours_kernel"] = which
            return prepare
        makers["ours"] = ours
    for kind in also:
        makers[f"ours_{kind}"] = functools.partial(lambda k: our_kernel(wl, target_name, db_root, log, k)[0], kind)
    if "triton" in systems:
        makers["triton"] = lambda: triton_fused(wl)
    if "torch_eager" in systems:
        makers["torch_eager"] = lambda: _bind_feeds(torch_fn(wl))
    if "torch_compile" in systems:
        def compiled():
            torch._dynamo.reset()  # one fresh compile per workload (dynamo's recompile limit would fall back to eager)
            return _bind_feeds(torch.compile(torch_fn(wl), dynamic=False))
        makers["torch_compile"] = compiled
    if "ort_cuda" in systems:
        makers["ort_cuda"] = lambda: ort_unfused(wl)
    if "ms_default_unfused" in systems:
        makers["ms_default_unfused"] = lambda: ms_default_unfused(wl, target_name, ms_db)
    ready = {}  # name -> (call, max abs error), for the rounds
    for name, make in makers.items():
        if name in ("ours_tuned", "ours_tensor_core") and row.get("ours_kernel", "").startswith(
                name[len("ours_"):].replace("_", "-")):
            continue  # "ours" is that kernel already
        try:
            fn = make()(dict(feeds))
            err = float((fn().float() - ref).abs().max())
            if not err < 0.05:  # a wrong answer is reported, never timed as if it were a result
                raise ArithmeticError(f"max abs error {err:.3g} against the FP32 reference")
            if rounds > 1:
                ready[name] = (fn, err)
                continue
            row[name] = {**time_cuda(fn, reps), "max_abs_err_vs_fp32": err}
            log(f"  {name:20s} {row[name]['median_us']:10.1f} us   err {err:.2e}")
        except Exception as exc:  # noqa: BLE001  (a system that cannot serve this workload: say why, go on)
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            row[name] = {"error": f"{type(exc).__name__}: {lines[-1][:300]}"}
            log(f"  {name:20s} not measured: {row[name]['error']}")
        if rounds <= 1:
            torch.cuda.empty_cache()
    timed = time_in_rounds({name: fn for name, (fn, _) in ready.items()}, rounds, reps)
    for name, t in timed.items():
        row[name] = {**t, "max_abs_err_vs_fp32": ready[name][1]}
        log(f"  {name:20s} {t['median_us']:10.1f} us   err {ready[name][1]:.2e}   rounds "
            + ", ".join(f"{x:.1f}" for x in t["round_medians_us"]))
    ready.clear()
    torch.cuda.empty_cache()
    log(f"  {'HBM floor':20s} {row['hbm_floor_us']:10.1f} us" +
        (f"   tensor-core floor {row['tc_floor_us']:.1f} us" if peak else ""))
    return row
