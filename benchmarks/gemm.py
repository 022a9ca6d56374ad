"""The plain GEMM path of the space against cuBLAS (python -m benchmarks.bench_gemm is the front end).

tune: Meta-Schedule over flashgemm/spaces/cuda_gemm's space (XGBoost cost model, evolutionary search, our builder and
      runner), into a JSON database in a work directory; running it again continues toward the trial budget.
bench: the best record built as the export builds kernels, against torch.matmul (cuBLAS) in the same process on
      the same GPU, both checked against an FP32 product; CUDA events around back-to-back calls (peers.time_cuda).
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Callable

from flashgemm.tune import database as dbm
from flashgemm.spaces.intrinsics import register_intrinsics

from . import commit_id, peers

RECORDS = "database_tuning_record.json"


def gemm_module(size: tuple, dtype: str):
    import tvm  # noqa: PLC0415

    from flashgemm.kernel.gemm import gemm_func  # noqa: PLC0415
    m, n, k = size
    return tvm.IRModule({"main": gemm_func(m, n, k, dtype, trans_b=True)})


def measured_trials(work: Path) -> int:
    path = work / RECORDS
    return sum(1 for _ in path.open()) if path.exists() else 0


def _space(target_name: str, mma: str, fragment_pipeline, k_split):
    """(TVM target, design space) of the plain GEMM: cuda_gemm's mma.sync space, or cuda_wgmma's (sm_90a)."""
    from flashgemm.spaces import cuda_gemm, cuda_wgmma  # noqa: PLC0415
    from flashgemm import targets
    if mma == "wgmma":
        cuda_wgmma.check_target(target_name)
        return cuda_wgmma.target(), cuda_wgmma.design_space()
    return targets.tvm_target(target_name), cuda_gemm.design_space(
        target_name, fragment_pipeline or cuda_gemm.FRAGMENT_PIPELINE, k_split)


def _register(target_name: str, mma: str) -> None:
    """The tensor intrinsics a record's trace names (replayed by name)."""
    from flashgemm.spaces import cuda_wgmma  # noqa: PLC0415
    from flashgemm import targets
    register_intrinsics(target_name)
    if mma == "wgmma":
        cuda_wgmma.register_all()


def tune(size: tuple, dtype: str, target_name: str, trials: int, work: Path, workers: int, log: Callable = print,
         batch_size: int = 64, seed: int = 0, fragment_pipeline=None, k_split=None, mma: str = "mma_sync") -> int:
    """Measure candidates until the work database holds `trials` of them; returns how many this call measured.
    fragment_pipeline, k_split: cuda_gemm's sketch choices (defaults: cuda_gemm.FRAGMENT_PIPELINE; k-split
    sketches where cuda_gemm.k_split_offered). mma: "mma_sync" (cuda_gemm) or "wgmma" (cuda_wgmma, sm_90 only)."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415

    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    target, space = _space(target_name, mma, fragment_pipeline, k_split)
    work.mkdir(parents=True, exist_ok=True)
    dbm.repair_jsonl(work / RECORDS, log)  # a slice killed mid-write leaves at most a torn last line
    done = measured_trials(work)
    budget = trials - done
    if budget <= 0:
        log(f"[gemm] {work}: {done} trials measured already (budget {trials})")
        return 0
    log(f"[gemm] tuning {size} {dtype} on {target_name} ({mma}): {done} done, {budget} to go")
    _register(target_name, mma)
    ms.tune_tir(mod=gemm_module(size, dtype), target=target, work_dir=str(work),
                max_trials_global=budget, num_trials_per_iter=min(batch_size, budget),
                builder=cuda_space.builder(target_name, workers), runner=cuda_space.runner(),
                database=dbm.open_json_db(work, create=True, log=log), cost_model="xgb",
                strategy=ms.search_strategy.EvolutionarySearch(population_size=512, init_min_unmeasured=50),
                space=space,
                num_tuning_cores=workers, seed=seed)
    return measured_trials(work) - done


def best_module(size: tuple, dtype: str, target_name: str, work: Path, mma: str = "mma_sync"):
    """(scheduled module, its measured seconds, its k-split factor) of the work database's best record."""
    import tvm  # noqa: PLC0415

    _register(target_name, mma)
    mod = gemm_module(size, dtype)
    top = dbm.top_records(mod, [dbm.open_json_db(work)], 1)
    if not top:
        raise dbm.DatabaseError(f"{work} has no valid GEMM record for {size} {dtype}: run the tuning first")
    sch = tvm.s_tir.Schedule(mod)
    top[0].trace.apply_to_schedule(sch, remove_postproc=False)
    from flashgemm.spaces import cuda_gemm  # noqa: PLC0415
    return sch.mod, dbm.mean_secs(top[0]), cuda_gemm.k_split_of(top[0].trace)


class GpuOperands:
    """The benchmarks' GEMM operands on the GPU: A [M, K] and B [N, K] drawn N(0, 1) (seed 0; C = A @ B^T, as the
    kernel is built), the output C, the kernel's arguments (DLPack views as [1, 1, rows, cols]) and the FP32
    product to check against."""

    def __init__(self, size: tuple, dtype: str):
        import torch  # noqa: PLC0415
        import tvm_ffi  # noqa: PLC0415
        m, n, k = size
        tdt = getattr(torch, dtype)
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.a = torch.randn(m, k, device="cuda", dtype=tdt, generator=gen)
        self.b = torch.randn(n, k, device="cuda", dtype=tdt, generator=gen)
        self.c = torch.empty(m, n, device="cuda", dtype=tdt)
        self.args = [tvm_ffi.from_dlpack(t.view(1, 1, *t.shape)) for t in (self.a, self.b, self.c)]
        self.ref = self.a.float() @ self.b.float().t()
        self.scale = self.ref.abs().max().item()
        self.flop = 2.0 * m * n * k
        self._matmul, self._b_t = torch.matmul, self.b.t()  # bound once: cublas() sits inside timed loops

    def rel_err(self, c) -> float:
        """max |c - A @ B^T| / max |A @ B^T|"""
        return (c.float() - self.ref).abs().max().item() / self.scale

    def cublas(self):
        return self._matmul(self.a, self._b_t)


def bench(size: tuple, dtype: str, target_name: str, work: Path, reps: int, log: Callable = print,
          rounds_n: int = 3, mma: str = "mma_sync") -> dict:
    import torch  # noqa: PLC0415

    from flashgemm.spaces import cuda_space, cuda_wgmma  # noqa: PLC0415
    mod, tuned_secs, k_split = best_module(size, dtype, target_name, work, mma)
    fn = (cuda_wgmma.build(mod) if mma == "wgmma" else cuda_space.build(mod, target_name))["main"]
    ops = GpuOperands(size, dtype)
    fn(*ops.args)
    torch.cuda.synchronize()
    err = {"ours": ops.rel_err(ops.c), "cublas": ops.rel_err(ops.cublas())}
    # Alternating rounds, each system's row the round with its median time: a single timing of cuBLAS right after
    # tuning can run ~2x slower than the same call a minute later in a fresh process
    calls = {"ours": lambda: fn(*ops.args), "cublas": ops.cublas}
    rows = {}
    for name, t in peers.time_in_rounds(calls, rounds_n, reps).items():
        t["tflops"] = ops.flop / (t["median_us"] * 1e-6) / 1e12
        t["max_rel_err_vs_fp32"] = err[name]
        rows[name] = t
        log(f"[gemm] {name}: {t['median_us']:.1f} us, {t['tflops']:.1f} TFLOP/s, max |err| / max |C| "
            f"{err[name]:.2e} (rounds: {', '.join(f'{x:.1f}' for x in t['round_medians_us'])} us)")
    ratio = rows["cublas"]["median_us"] / rows["ours"]["median_us"]
    log(f"[gemm] ours / cuBLAS throughput: {ratio:.1%} (ours: {mma}, k-split {k_split})")
    return {"size": list(size), "dtype": dtype, "target": target_name, "trials": measured_trials(work),
            "mma": mma, "k_split": k_split,
            "tuned_us": None if tuned_secs is None else tuned_secs * 1e6, "ours": rows["ours"],
            "cublas": rows["cublas"], "ours_over_cublas": ratio}


def save(result: dict, out: Path) -> None:
    env = {**peers.gpu_info(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit_id() or "unknown"}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": env, "protocol": "CUDA events around 10 back-to-back calls, median of "
                               "the groups (benchmarks/peers.time_cuda), in rounds alternating ours and cuBLAS; each "
                               "row is its median round (all rounds in round_medians_us); L2 not flushed; inputs "
                               "N(0, 1), B as [N, K] for both (C = A @ B^T)", "result": result}, indent=1))
    r = result
    md = [f"# Plain GEMM path of the space vs cuBLAS: {env['gpu']}, driver {env.get('driver')}, {env['date']} "
          f"(commit {env['commit']})", "",
          "| M x N x K | dtype | trials | ours: MMA | ours: k-split | ours µs | ours TFLOP/s | cuBLAS µs | "
          "cuBLAS TFLOP/s | ours / cuBLAS |",
          "|---|---|---|---|---|---|---|---|---|---|",
          f"| {'x'.join(map(str, r['size']))} | {r['dtype']} | {r['trials']} | {r.get('mma', 'mma_sync')} | "
          f"{r.get('k_split', 1)} | "
          f"{r['ours']['median_us']:.1f} | "
          f"{r['ours']['tflops']:.1f} | {r['cublas']['median_us']:.1f} | {r['cublas']['tflops']:.1f} | "
          f"{r['ours_over_cublas']:.1%} |", ""]
    out.with_suffix(".md").write_text("\n".join(md))
