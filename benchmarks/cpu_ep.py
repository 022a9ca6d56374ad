"""Rewritten models against the originals on ONNX Runtime's CPU EP: what the fused op costs where only the llvm
bundle's generic kernels serve it.

  python -m benchmarks.cpu_ep --bundle build/llvm --rounds 5 [--json OUT.json] [--attention]

Cases:
  site-*   one attention-score site of a BERT-like layer (batch 8, 12 heads, seq 128, head 64; `copies` of it, one
           per layer of a forward pass), unfused (Transpose -> MatMul -> Mul -> Add(bias) -> Softmax) against
           FusedGemmSoftmax (flashgemm.ort.model.make_site_models); with transB (the exporters' K^T) and without.
  model:*  the tiny seed models in tests/data (bert-large, vit-b16, whisper-enc; float16, batch 2), original against
           rewritten (flashgemm.ort.rewrite.rewrite_file).
With --attention (a bundle built with flashgemm-build --attention), instead: `attention-site-*` (the site followed by
MatMul(P, V), V [8, 12, 128, 64]) unfused against FusedAttention, and the tiny models rewritten with --attention.
Both sessions of a case get the same session options: the op library registered (session_options(bundle)),
ORT_ENABLE_ALL, CommonSubexpressionElimination off (else the site copies collapse into one), default threads. Each
round runs `reps` timed runs of the original, then of the rewritten model (alternating which goes first), after
`warmup` runs; a side's time is the median over rounds of its round's median run. ratio = rewritten / original
(the issue's goal: at most 1.2). Outputs are checked to agree (max |diff| reported) before timing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
TINY_MODELS = ("bert-large-tiny", "vit-b16-tiny", "whisper-enc-tiny")
# (name, A, B, bias, scale, transB): BERT-base's attention scores at batch 8, seq 128; bias = the padding mask
SITES = (
    ("site-bert-tb1", (8, 12, 128, 64), (8, 12, 128, 64), (8, 1, 1, 128), 0.125, 1),
    ("site-bert-tb0", (8, 12, 128, 64), (8, 12, 64, 128), (8, 1, 1, 128), 0.125, 0),
)


def _options(bundle):
    import onnxruntime as ort  # noqa: PLC0415

    from flashgemm.ort.session import session_options  # noqa: PLC0415
    so = session_options(bundle)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return so


def _session(model_bytes: bytes, bundle):
    import onnxruntime as ort  # noqa: PLC0415
    return ort.InferenceSession(model_bytes, _options(bundle), providers=["CPUExecutionProvider"],
                                disabled_optimizers=["CommonSubexpressionElimination"])


def _feeds_of(model, seed: int) -> dict:
    """Random feeds for a model's graph inputs (static shapes): token ids in [0, 64), masks of ones, floats N(0, 1)."""
    from onnx import TensorProto  # noqa: PLC0415
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        et = i.type.tensor_type.elem_type
        if et == TensorProto.INT64:
            feeds[i.name] = (np.ones(shape, np.int64) if "mask" in i.name
                             else rng.integers(0, 64, shape, dtype=np.int64))
        elif et == TensorProto.FLOAT16:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float16)
        elif et == TensorProto.FLOAT:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            raise ValueError(f"input {i.name}: element type {et} not generated")
    return feeds


def time_pair(original, rewritten, feeds: dict, rounds: int, reps: int, warmup: int) -> dict:
    """Median over rounds of each side's per-round median run (ms), the two sides alternating first."""
    from flashgemm.ort.session import run  # noqa: PLC0415
    sides = {"original": original, "rewritten": rewritten}
    outs = {k: run(s, feeds) for k, s in sides.items()}
    diff = max(float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())
               for a, b in zip(outs["original"], outs["rewritten"]))
    for s in sides.values():
        for _ in range(warmup):
            run(s, feeds)
    per_round = {k: [] for k in sides}
    for r in range(rounds):
        for k in (("original", "rewritten") if r % 2 == 0 else ("rewritten", "original")):
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                run(sides[k], feeds)
                times.append((time.perf_counter() - t0) * 1e3)
            per_round[k].append(statistics.median(times))
    res = {k: {"median_ms": statistics.median(v), "rounds_ms": v} for k, v in per_round.items()}
    res["ratio"] = res["rewritten"]["median_ms"] / res["original"]["median_ms"]
    res["max_abs_diff"] = diff
    return res


def _attention_site(unfused, v_shape):
    """The unfused site with each P_i read by MatMul(P_i, V) -> O_i, and its --attention rewrite (FusedAttention)."""
    import onnx_ir as ir  # noqa: PLC0415
    from onnx import TensorProto, helper  # noqa: PLC0415

    from flashgemm.ort.rewrite import rewrite_model  # noqa: PLC0415
    g = unfused.graph
    g.input.append(helper.make_tensor_value_info("V", TensorProto.FLOAT16, list(v_shape)))
    outs = [o.name for o in g.output]
    del g.output[:]
    for p in outs:
        g.node.append(helper.make_node("MatMul", [p, "V"], [f"O_{p}"]))
        g.output.append(helper.make_tensor_value_info(f"O_{p}", TensorProto.FLOAT16, None))
    model = ir.from_proto(unfused)
    report = rewrite_model(model, attention=True)
    if report.attention != len(outs):
        raise RuntimeError(f"the attention site did not fuse: {report.text()}")
    return unfused, ir.to_proto(model)


def bench(bundle, rounds: int = 5, reps: int = 10, warmup: int = 3, copies: int = 4, only: str = "",
          log=print, attention: bool = False) -> list:
    import onnx  # noqa: PLC0415

    from flashgemm.ort.model import make_site_models  # noqa: PLC0415
    from flashgemm.ort.rewrite import rewrite_file  # noqa: PLC0415
    rows = []
    for name, a, b, bias, scale, tb in SITES:
        if attention:
            name = name.replace("site", "attention-site")
        if only not in name:
            continue
        unfused, fused = make_site_models("float16", a, b, bias, scale, tb, copies=copies)
        rng = np.random.default_rng(0)
        feeds = {"A": rng.standard_normal(a).astype(np.float16), "B": rng.standard_normal(b).astype(np.float16),
                 "bias": np.where(rng.random(bias) < 0.1, -10000.0, 0.0).astype(np.float16)}
        if attention:
            unfused, fused = _attention_site(unfused, a)
            feeds["V"] = rng.standard_normal(a).astype(np.float16)
        res = time_pair(_session(unfused.SerializeToString(), bundle), _session(fused.SerializeToString(), bundle),
                        feeds, rounds, reps, warmup)
        rows.append({"case": name, "copies": copies, **res})
        log(_line(rows[-1]))
    with tempfile.TemporaryDirectory() as tmp:
        for m in TINY_MODELS:
            if only not in f"model:{m}":
                continue
            src, dst = DATA / f"{m}.f16.onnx", Path(tmp) / f"{m}.fused.f16.onnx"
            report = rewrite_file(src, dst, attention=attention)
            feeds = _feeds_of(onnx.load(str(src)), 0)
            res = time_pair(_session(src.read_bytes(), bundle), _session(dst.read_bytes(), bundle), feeds, rounds,
                            reps, warmup)
            rows.append({"case": f"model{'+attention' if attention else ''}:{m}", "fused_sites": len(report.fused),
                         **res})
            log(_line(rows[-1]))
    return rows


def _line(row: dict) -> str:
    return (f"{row['case']:<24} original {row['original']['median_ms']:8.3f} ms  rewritten "
            f"{row['rewritten']['median_ms']:8.3f} ms  ratio {row['ratio']:6.2f}  max|diff| {row['max_abs_diff']:.2g}")


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", default=str(ROOT / "build" / "llvm"), help="llvm bundle with its op library")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10, help="timed runs a side a round")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--copies", type=int, default=4, help="site copies in one graph (layers of a forward pass)")
    ap.add_argument("--only", default="", help="cases whose name contains this")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--attention", action="store_true",
                    help="FusedAttention's cases (the bundle must be built with flashgemm-build --attention)")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"cpu_ep: {os.cpu_count()} CPUs, load average {load:.2f} at start")
    rows = bench(args.bundle, args.rounds, args.reps, args.warmup, args.copies, args.only, attention=args.attention)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "cpus": os.cpu_count(), "load_at_start": load},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
