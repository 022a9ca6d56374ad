"""A seed model end to end on ONNX Runtime's CUDA EP: the original float16 model against the same model with its
attention scores rewritten to flashgemm::FusedGemmSoftmax, both against a float32 golden run (python -m
benchmarks.bench_models).

Per model (static batch):
  export     float32 and float16 ONNX from the same seeded random weights (models.export; traced on the GPU)
  rewrite    the float16 model -> *.fused.f16.onnx (rewrite.rewrite_file; its report is kept)
  accuracy   golden = the float32 model on the CUDA EP with TF32 off. For each input: max |out - golden| of the
             original and of the rewritten model, and max |rewritten - original|. ViT-B/16 also gets top-1 agreement
             with the golden run over --vit-inputs images: its export has no classifier (ViTModel), so the logits
             are a seeded random 1000-class linear head (ViTForImageClassification's: CLS token -> Linear) applied
             in float64 to each run's last_hidden_state.
  latency    inputs and outputs bound in device memory (IOBinding), default session options for both models
             (ORT_ENABLE_ALL), `warmup` runs then `reps` timed runs, each ended by ORT's own stream sync; median
             and 10th/90th percentiles of the per-run wall time.
  scores     the share of a forward pass the attention-score sites take: the model's sites (one per layer, its
             shapes, scale and bias) as a standalone graph run in one go, unfused (Transpose -> MatMul -> Mul ->
             [Add] -> Softmax, ORT's CSE off so that the copies stay) and fused; time / the model's time.
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import onnxruntime as ort

from benchmarks import commit_id
from flashgemm.ort import models, rewrite
from flashgemm.ort.model import make_site_models
from flashgemm.ort.session import run, session_options

BATCH = {"bert-large": 8, "vit-b16": 16, "whisper-enc": 4,  # issue 5's batch sizes
         "mpnet-base": 16, "deberta-v3-base": 8, "llama-3.2-1b": 4,  # embedding and classifier batches; the causal
         # prefill's (4 x 32 heads x 2048)
         "llama-3.2-1b-step": 4}  # the prefill's batch, one token each after its cache
VIT_CLASSES = 1000


def providers(device: str, **cuda_options) -> list:
    if device == "cpu":  # the CI smoke test of this module (tiny models, CPU EP)
        return ["CPUExecutionProvider"]
    return [("CUDAExecutionProvider", {k: str(v) for k, v in cuda_options.items()}), "CPUExecutionProvider"]


def device_binding(sess: ort.InferenceSession, feeds: dict, device: str = "cuda") -> ort.IOBinding:
    """Inputs copied to the device once; outputs allocated there by ORT (no host copy in the timed runs)."""
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value), device, 0))
    for out in sess.get_outputs():
        binding.bind_output(out.name, device, 0)
    return binding


def time_runs(sess: ort.InferenceSession, binding: ort.IOBinding, warmup: int, reps: int) -> dict:
    for _ in range(warmup):
        sess.run_with_iobinding(binding)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding)  # returns after ORT synchronizes its stream
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return {"median_ms": statistics.median(times), "p10_ms": times[len(times) // 10],
            "p90_ms": times[(len(times) * 9) // 10], "reps": reps}


def _inputs(name: str, batch: int, seed: int, tiny: bool = False) -> tuple[dict, dict]:
    """(float32 feeds, float16 feeds) of one example: the same values, floats rounded to float16 for both."""
    f32 = models.example_inputs(name, tiny=tiny, dtype="float32", batch=batch, seed=seed)
    f16 = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in f32.items()}
    f32 = {k: v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v for k, v in f32.items()}
    return f32, f16


def _vit_head(hidden: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(0, 0.02, (hidden, VIT_CLASSES)), rng.normal(0, 0.02, VIT_CLASSES)


def bench_model(name: str, bundle_dir: os.PathLike, work_dir: os.PathLike, batch: Optional[int] = None,
                accuracy_inputs: int = 4, vit_inputs: int = 2048, warmup: int = 5, reps: int = 30,
                log: Callable = print, device: str = "cuda", tiny: bool = False, attention: bool = False,
                exporter: str = "torchscript", attn_implementation: str = "eager", decoder_causal="exact") -> dict:
    """attention: rewrite with flashgemm-rewrite --attention (the sites become FusedAttention; no score-site
    breakdown then). exporter, attn_implementation: how the model is exported (models.export's exporter and
    attention; the golden float32 run is exported the same way). decoder_causal: flashgemm-rewrite's
    --decoder-causal (rewrite.DECODER_CAUSAL; a bool as rewrite_model takes it)."""
    decoder_causal = rewrite.pipeline.decoder_causal_mode(decoder_causal)
    batch = batch or BATCH[name]
    work = Path(work_dir)
    dev = device
    t0 = time.time()
    paths = {}
    out_dir = work / f"b{batch}"  # static-batch exports: one directory per batch (external data keeps its name)
    for dtype in ("float32", "float16"):
        p = out_dir / models.file_name(name, tiny, dtype, exporter=exporter, attention=attn_implementation)
        if not p.exists():
            models.export(name, out_dir, tiny=tiny, dtype=dtype, batch=batch, log=log, device=dev, exporter=exporter,
                          attention=attn_implementation)
        paths[dtype] = p
    fused_path = out_dir / (f"{p.name.split('.')[0]}.fused{'-attention' if attention else ''}"
                            f"{'' if decoder_causal == 'exact' else '-causal-' + decoder_causal}.f16.onnx")
    report = rewrite.rewrite_file(paths["float16"], fused_path, log=log, attention=attention,
                                  decoder_causal=decoder_causal)
    log(f"[{name}] export + rewrite: {time.time() - t0:.0f} s")

    so_fused = session_options(bundle_dir)
    golden = ort.InferenceSession(str(paths["float32"]), providers=providers(dev, use_tf32=0))
    original = ort.InferenceSession(str(paths["float16"]), providers=providers(dev))
    fused = ort.InferenceSession(str(fused_path), so_fused, providers=providers(dev))

    # accuracy
    n_batches = max(accuracy_inputs, -(-vit_inputs // batch) if name == "vit-b16" else 0)
    err = {"original": 0.0, "rewritten": 0.0, "rewritten_vs_original": 0.0}
    top1 = {"original": 0, "rewritten": 0, "images": 0}
    head = None
    for i in range(n_batches):
        f32, f16 = _inputs(name, batch, seed=1000 + i, tiny=tiny)
        (g,) = run(golden, f32)
        (o,) = run(original, f16)
        (r,) = run(fused, f16)
        g64, o64, r64 = (x.astype(np.float64) for x in (g, o, r))
        if i < accuracy_inputs:
            err["original"] = max(err["original"], float(np.abs(o64 - g64).max()))
            err["rewritten"] = max(err["rewritten"], float(np.abs(r64 - g64).max()))
            err["rewritten_vs_original"] = max(err["rewritten_vs_original"], float(np.abs(r64 - o64).max()))
        if name == "vit-b16":
            if head is None:
                head = _vit_head(g.shape[-1])
            w, b = head
            cls = [x[:, 0, :] @ w + b for x in (g64, o64, r64)]
            top = [c.argmax(-1) for c in cls]
            top1["original"] += int((top[1] == top[0]).sum())
            top1["rewritten"] += int((top[2] == top[0]).sum())
            top1["images"] += len(top[0])
    result = {"model": name, "batch": batch, "rewrite": report.to_json(), "fused_sites": len(report.fused),
              "attention": attention, "exporter": exporter, "attn_implementation": attn_implementation,
              "decoder_causal": decoder_causal,
              "max_abs_error": err, "accuracy_inputs": accuracy_inputs,
              "output_max_abs_golden": float(np.abs(g64).max())}
    if top1["images"]:
        result["top1_agreement"] = {k: top1[k] / top1["images"] for k in ("original", "rewritten")}
        result["top1_images"] = top1["images"]
    log(f"[{name}] max |err| vs golden: original {err['original']:.3g}, rewritten {err['rewritten']:.3g}"
        + (f"; top-1 agreement over {top1['images']}: original {result['top1_agreement']['original']:.4%}, "
           f"rewritten {result['top1_agreement']['rewritten']:.4%}" if top1["images"] else ""))

    # latency
    _, f16 = _inputs(name, batch, seed=1, tiny=tiny)
    lat = {}
    for key, sess in (("original", original), ("rewritten", fused)):
        lat[key] = time_runs(sess, device_binding(sess, f16, dev), warmup, reps)
    result["latency"] = lat
    result["speedup"] = lat["original"]["median_ms"] / lat["rewritten"]["median_ms"]
    del golden
    if attention:
        log(f"[{name}] batch {batch}: original {lat['original']['median_ms']:.2f} ms, rewritten (attention) "
            f"{lat['rewritten']['median_ms']:.2f} ms ({result['speedup']:.3f}x)")
        return result

    # the attention-score sites alone, one forward pass's worth
    sites = []
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    for spec, copies in rewrite.model_workloads(fused_path, name=name, counts=True):
        wl = parse(spec)
        unfused_model, fused_model = make_site_models(wl.dtype, wl.a_shape, wl.b_shape, wl.bias_shape, wl.scale,
                                                      int(wl.trans_b), copies=copies)
        rng = np.random.default_rng(2)
        feeds = {"A": rng.standard_normal(wl.a_shape).astype(np.float16),
                 "B": rng.standard_normal(wl.b_shape).astype(np.float16)}
        if wl.bias_shape:
            feeds["bias"] = rng.standard_normal(wl.bias_shape).astype(np.float16)
        s_unfused = ort.InferenceSession(unfused_model.SerializeToString(), providers=providers(dev),
                                         disabled_optimizers=["CommonSubexpressionElimination"])
        s_fused = ort.InferenceSession(fused_model.SerializeToString(), so_fused, providers=providers(dev))
        t_unfused = time_runs(s_unfused, device_binding(s_unfused, feeds, dev), 3, max(5, reps // 3))
        t_fused = time_runs(s_fused, device_binding(s_fused, feeds, dev), 3, max(5, reps // 3))
        sites.append({"spec": spec, "copies": copies, "unfused": t_unfused, "fused": t_fused,
                      "per_site_us": {"unfused": t_unfused["median_ms"] * 1e3 / copies,
                                      "fused": t_fused["median_ms"] * 1e3 / copies}})
        del s_unfused, s_fused
    result["score_sites"] = sites
    su = sum(s["unfused"]["median_ms"] for s in sites)
    sf = sum(s["fused"]["median_ms"] for s in sites)
    result["score_share"] = {"original": su / lat["original"]["median_ms"],
                             "rewritten": sf / lat["rewritten"]["median_ms"]}
    log(f"[{name}] batch {batch}: original {lat['original']['median_ms']:.2f} ms, rewritten "
        f"{lat['rewritten']['median_ms']:.2f} ms ({result['speedup']:.3f}x); scores {su:.2f} -> {sf:.2f} ms "
        f"({result['score_share']['original']:.1%} -> {result['score_share']['rewritten']:.1%} of the pass)")
    return result


def environment() -> dict:
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "onnxruntime": ort.__version__, "commit": commit_id()}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        env["gpu"], env["driver"] = [x.strip() for x in out.split(",")]
    except Exception as e:  # noqa: BLE001
        env["gpu"] = f"unknown ({e})"
    try:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415
        env["torch"], env["transformers"] = torch.__version__, transformers.__version__
    except ImportError:
        pass
    return env


def label(result: dict) -> str:
    """The model's name, with its export where that is not the TorchScript exporter's eager attention, and
    --decoder-causal where it was not the default (results before it was: True, the flag alone)."""
    how = (result.get("exporter", "torchscript"), result.get("attn_implementation", "eager"))
    return (result["model"] + ("" if how == ("torchscript", "eager") else f" ({how[0]}, {how[1]})")
            + _decoder_causal_label(result.get("decoder_causal", "off")))


def _decoder_causal_label(mode) -> str:
    return {True: " --decoder-causal", False: "", "exact": "", "off": " --decoder-causal off"}.get(
        mode, f" --decoder-causal {mode}")


def markdown(results: list, env: dict) -> str:
    lines = ["# Seed models on ONNX Runtime CUDA EP: original vs rewritten (float16)", "",
             f"{env.get('gpu')}, driver {env.get('driver')}, onnxruntime {env.get('onnxruntime')}, "
             f"commit {env.get('commit')}, {env.get('date')}. Random weights (seeded), static batch.", "",
             "| model | batch | sites fused | original ms | rewritten ms | speedup | scores share before → after "
             "| max abs err vs fp32 (orig / rewritten) | top-1 agreement (orig / rewritten) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        t = r.get("top1_agreement")
        lines.append(
            f"| {label(r)} | {r['batch']} | {r['fused_sites']} | {r['latency']['original']['median_ms']:.2f} | "
            f"{r['latency']['rewritten']['median_ms']:.2f} | {r['speedup']:.3f}× | "
            + (f"{r['score_share']['original']:.1%} → {r['score_share']['rewritten']:.1%} | " if "score_share" in r
               else "– (FusedAttention) | ")
            + f"{r['max_abs_error']['original']:.3g} / {r['max_abs_error']['rewritten']:.3g} | "
            + (f"{t['original']:.3%} / {t['rewritten']:.3%} ({r['top1_images']} images)" if t else "–") + " |")
    return "\n".join(lines) + "\n"


def save(results: list, out_json: os.PathLike) -> None:
    env = environment()
    out = Path(out_json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": env, "method": __doc__, "results": results}, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(results, env))
