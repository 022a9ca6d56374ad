"""Models exported with dynamic batch and sequence axes, end to end on ONNX Runtime's CUDA EP: the original float16
model against the same model rewritten (flashgemm::FusedGemmSoftmax), at every (batch, length) of a grid.

    python -m benchmarks.dynamic_models --bundle build/sm_90 --model bert-small --model bert-large \\
        --out results/dynamic.json

One export per model (models.export with dynamic_batch and dynamic_seq; seeded random weights), rewritten once;
both sessions are created once and serve every point of the grid (no re-export per shape: what a server does).
Inputs: random token ids and an attention mask whose last quarter of every other sequence is padding. Per point:
max |rewritten - original| over the output, the kernel the bundle serves the sites with (the op's dispatch
mirrored by benchmarks.lengths.served_by), and the median wall time of `reps` runs after `warmup` (IOBinding, each
run ended by ORT's stream sync) of each model in alternating rounds.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

BATCHES = (1, 8, 32)
LENGTHS = (17, 64, 100, 128, 200, 256, 384, 512)


def _feeds(batch: int, length: int, vocab: int, seed: int) -> dict:
    import numpy as np  # noqa: PLC0415
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (batch, length), dtype=np.int64)
    mask = np.ones((batch, length), dtype=np.int64)
    mask[1::2, length - length // 4:] = 0  # padding at the end of every other sequence
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def bench_model(name: str, bundle, work_dir, batches, lengths, warmup: int, reps: int, rounds: int,
                log=print, attention: bool = False) -> dict:
    import numpy as np  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    from benchmarks.lengths import served_by  # noqa: PLC0415
    from flashgemm.ort import models, rewrite  # noqa: PLC0415
    from flashgemm.bundle.kernel_library import MANIFEST  # noqa: PLC0415
    from benchmarks.model_bench import device_binding, providers, time_runs  # noqa: PLC0415
    from flashgemm.ort.session import session_options  # noqa: PLC0415

    work = Path(work_dir)
    path = work / models.file_name(name, False, "float16", True, True)
    if not path.exists():
        models.export(name, work, dtype="float16", batch=2, dynamic_batch=True, dynamic_seq=True, log=log,
                      device="cuda")
    fused_path = work / f"{name}-dyn.fused{'-attention' if attention else ''}.f16.onnx"
    report = rewrite.rewrite_file(path, fused_path, log=log, attention=attention)
    sites = rewrite.model_any_length(fused_path)
    cfg = models.SPECS[name].config()
    heads, k = cfg["num_attention_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]
    functions = json.loads((Path(bundle) / MANIFEST).read_text())["functions"]
    original = ort.InferenceSession(str(path), providers=providers("cuda"))
    fused = ort.InferenceSession(str(fused_path), session_options(bundle), providers=providers("cuda"))
    rows = []
    for batch in batches:
        for length in lengths:
            feeds = _feeds(batch, length, cfg["vocab_size"], seed=batch * 1000 + length)
            (o,) = original.run(None, feeds)
            (r,) = fused.run(None, feeds)
            err = float(np.abs(o.astype(np.float64) - r.astype(np.float64)).max())
            bindings = {"original": device_binding(original, feeds), "rewritten": device_binding(fused, feeds)}
            times = {"original": [], "rewritten": []}
            for i in range(rounds):
                order = ("original", "rewritten") if i % 2 == 0 else ("rewritten", "original")
                for key in order:
                    sess = original if key == "original" else fused
                    times[key].append(time_runs(sess, bindings[key], warmup, reps)["median_ms"])
            ms = {key: sorted(v)[len(v) // 2] for key, v in times.items()}
            kernels = sorted({(f or {}).get("name", "none") for v, kk, _ in sites
                              for f in [served_by(functions, v.key, (batch, heads, length, length, kk))]})
            row = {"batch": batch, "length": length, "original_ms": ms["original"], "rewritten_ms": ms["rewritten"],
                   "speedup": ms["original"] / ms["rewritten"], "rounds_ms": times, "max_abs_diff": err,
                   "served_by": kernels}
            rows.append(row)
            log(f"[{name}] b{batch:<3d} L{length:<4d} original {ms['original']:8.3f} ms  rewritten "
                f"{ms['rewritten']:8.3f} ms  {row['speedup']:.3f}x  |diff| {err:.2e}  {', '.join(kernels)}")
    return {"model": name, "fused_sites": len(report.fused), "site_kinds": [[v.key, kk] for v, kk, _ in sites],
            "heads": heads, "k": k, "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="a CUDA bundle directory (flashgemm-build)")
    ap.add_argument("--model", action="append", choices=("bert-small", "bert-large"), required=True)
    ap.add_argument("--work", default="build/models/dynamic", help="where the exports go")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--attention", action="store_true",
                    help="rewrite with --attention (FusedAttention; the bundle needs flashgemm-build --attention)")
    args = ap.parse_args(argv)
    from benchmarks.peers import gpu_info  # noqa: PLC0415
    out = {"env": gpu_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "models": []}
    for name in args.model:
        out["models"].append(bench_model(name, args.bundle, args.work, [int(x) for x in args.batches.split(",")],
                                         [int(x) for x in args.lengths.split(",")], args.warmup, args.reps,
                                         args.rounds, attention=args.attention))
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
