"""The rewrite beside ONNX Runtime's transformers optimizer, in both orders, end to end on the CUDA EP.

    python -m benchmarks.optimizer_order --bundle build/sm_90 --model bert-large --model vit-b16 \\
        --out results/optimizer-order.json

Per model (the float16 export at its benchmark batch, models.BATCH): five pipelines, the same ORT settings,
    original | optimizer | ours (rewrite; --attention: rewrite --attention) | optimizer then ours |
    ours then optimizer (opt_level 0)
where "optimizer" is `onnxruntime.transformers.optimizer.optimize_model(model_type, heads, hidden, opt_level,
use_gpu=True)` (--opt-level, default 1: its usual use). Each pipeline's fused attention-score sites (ours) and
com.microsoft Attention nodes (the optimizer's own), max |output - original|, and the median time of `reps` runs in
alternating rounds (IOBinding on the device, each run ended by ORT's stream sync).
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

MODEL_TYPES = {"bert-large": "bert", "vit-b16": "vit", "whisper-enc": "bert"}


def _optimize(src: Path, dst: Path, name: str, level: int) -> Path:
    from onnxruntime.transformers.optimizer import optimize_model  # noqa: PLC0415

    from flashgemm.ort import models  # noqa: PLC0415
    cfg = models.SPECS[name].config()
    heads = cfg.get("num_attention_heads") or cfg.get("encoder_attention_heads")
    hidden = cfg.get("hidden_size") or cfg.get("d_model")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = optimize_model(str(src), model_type=MODEL_TYPES[name], num_heads=heads, hidden_size=hidden,
                           opt_level=level, use_gpu=True)
    m.save_model_to_file(str(dst))
    return dst


def _count(path: Path, op: str, domain: str) -> int:
    import onnx  # noqa: PLC0415
    return sum(n.op_type == op and n.domain == domain for n in onnx.load(str(path), load_external_data=False)
               .graph.node)


def bench_model(name: str, bundle, work_dir, level: int, warmup: int, reps: int, rounds: int, log=print,
                attention: bool = False) -> dict:
    import numpy as np  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    from flashgemm.ort import models, rewrite  # noqa: PLC0415
    from benchmarks.model_bench import BATCH, _inputs, device_binding, providers, time_runs  # noqa: PLC0415
    from flashgemm.ort.session import session_options  # noqa: PLC0415

    batch = BATCH[name]
    work = Path(work_dir) / f"{name}-b{batch}"
    src = work / models.file_name(name, False, "float16")
    if not src.exists():
        models.export(name, work, dtype="float16", batch=batch, log=log, device="cuda")
    quiet = lambda *a: None  # noqa: E731
    paths = {"original": src, "optimizer": _optimize(src, work / "opt.onnx", name, level)}
    tag = ".attention" if attention else ""
    paths["ours"] = work / f"ours{tag}.onnx"
    rewrite.rewrite_file(src, paths["ours"], log=quiet, attention=attention)
    paths["optimizer then ours"] = work / f"opt.ours{tag}.onnx"
    rewrite.rewrite_file(paths["optimizer"], paths["optimizer then ours"], log=quiet, attention=attention)
    # opt_level 0 here: at 1 and up optimize_model loads the model into an ORT session of its own, which has no way
    # to register the op library ("flashgemm:FusedGemmSoftmax is not a registered function/op")
    paths["ours then optimizer"] = _optimize(paths["ours"], work / f"ours{tag}.opt.onnx", name, 0)
    _, feeds = _inputs(name, batch, seed=1)
    sessions, out = {}, {}
    for key, p in paths.items():
        so = session_options(bundle) if "ours" in key else ort.SessionOptions()
        sessions[key] = ort.InferenceSession(str(p), so, providers=providers("cuda"))
        out[key] = sessions[key].run(None, feeds)[0].astype(np.float64)
    bindings = {k: device_binding(s, feeds) for k, s in sessions.items()}
    times = {k: [] for k in sessions}
    for r in range(rounds):
        for key in (list(sessions) if r % 2 == 0 else list(sessions)[::-1]):
            times[key].append(time_runs(sessions[key], bindings[key], warmup, reps)["median_ms"])
    rows = []
    for key, p in paths.items():
        ms = sorted(times[key])[len(times[key]) // 2]
        row = {"pipeline": key, "fused_sites": _count(p, "FusedGemmSoftmax", "flashgemm"),
               "fused_attention": _count(p, "FusedAttention", "flashgemm"),
               "ort_attention": _count(p, "Attention", "com.microsoft"), "median_ms": ms, "rounds_ms": times[key],
               "max_abs_diff": float(np.abs(out[key] - out["original"]).max()),
               "speedup": sorted(times["original"])[rounds // 2] / ms}
        rows.append(row)
        log(f"[{name} b{batch}] {key:22s} {ms:8.3f} ms  {row['speedup']:.3f}x  sites fused {row['fused_sites']:2d}"
            f"  FusedAttention {row['fused_attention']:2d}"
            f"  ORT Attention {row['ort_attention']:2d}  |diff| {row['max_abs_diff']:.2e}")
    return {"model": name, "batch": batch, "opt_level": level, "attention": attention,
            "attention_layers": models.attention_layers(name),
            "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="a CUDA bundle directory (flashgemm-build)")
    ap.add_argument("--model", action="append", choices=sorted(MODEL_TYPES))
    ap.add_argument("--opt-level", type=int, default=1, choices=(0, 1, 2, 99))
    ap.add_argument("--work", default="build/models/optimizer-order", help="where the exports go")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True, help="the JSON results file")
    ap.add_argument("--attention", action="store_true",
                    help="rewrite with --attention (FusedAttention; the bundle needs flashgemm-build --attention)")
    args = ap.parse_args(argv)
    from benchmarks.peers import gpu_info  # noqa: PLC0415
    res = {"env": gpu_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "models": [bench_model(m, args.bundle, args.work, args.opt_level, args.warmup, args.reps, args.rounds,
                                  attention=args.attention) for m in args.model or ["bert-large", "vit-b16"]]}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
