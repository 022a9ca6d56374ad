#!/usr/bin/env python3
"""The seed models end to end on ONNX Runtime's CUDA EP: original float16 vs rewritten to use the fused op, both
against a float32 golden run (accuracy, ViT-B/16 top-1 agreement, latency, share of time in the attention scores).

  flashgemm-build --target auto                                  # the CUDA bundle with the tuned kernels
  python -m benchmarks.bench_models --bundle build/sm_90 --out results/h100/models.json [--model bert-large ...]

Needs a GPU, onnxruntime-gpu, torch and transformers (exports the models from their published configs with seeded
random weights, into --work). Method details: benchmarks/model_bench.py. A run for one model (and way of exporting it)
merges into --out, so the models can be run one per command.
"""
import argparse
import json
import sys
from pathlib import Path


from flashgemm.cli.usage import ArgumentParser, count
from flashgemm.ort.rewrite import DECODER_CAUSAL


def main(argv=None) -> int:
    from benchmarks import model_bench  # noqa: PLC0415
    from flashgemm.ort import models

    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", choices=models.NAMES, help="default: all three")
    ap.add_argument("--bundle", required=True, help="CUDA kernel bundle directory (flashgemm-build --target ...)")
    ap.add_argument("--out", required=True, help="results JSON (merged by model; a .md table is written beside it)")
    ap.add_argument("--work", default="build/models-bench", help="where the exported models go")
    ap.add_argument("--batch", type=count(1), default=None, help="override the per-model batch (8 / 16 / 4)")
    ap.add_argument("--reps", type=count(1), default=30)
    ap.add_argument("--vit-inputs", type=count(1), default=2048, help="images for ViT-B/16's top-1 agreement")
    ap.add_argument("--attention", action="store_true",
                    help="rewrite with --attention (FusedAttention; the bundle needs flashgemm-build --attention)")
    ap.add_argument("--decoder-causal", choices=DECODER_CAUSAL, default=DECODER_CAUSAL[0], nargs="?",
                    const="all", help="flashgemm-rewrite's --decoder-causal (default exact: a decoder's causal rule to "
                                      "FusedAttention's causal flag with causal_fill)")
    ap.add_argument("--exporter", default="torchscript", choices=models.EXPORTERS,
                    help="how the models are exported (flashgemm-getmodel --exporter; default torchscript)")
    ap.add_argument("--attn-implementation", default="eager", choices=models.ATTENTIONS,
                    help="transformers' attention in the export (flashgemm-getmodel --attention; default eager)")
    args = ap.parse_args(argv)
    from flashgemm.ort.session import MANIFEST  # noqa: PLC0415
    if not (Path(args.bundle) / MANIFEST).is_file():
        ap.error(f"--bundle {Path(args.bundle).absolute()} has no {MANIFEST}",
                 fix="build the CUDA bundle first: flashgemm-build --target auto, then pass its directory")
    import onnxruntime as ort  # noqa: PLC0415
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        ap.error("this onnxruntime has no CUDAExecutionProvider", fix="install onnxruntime-gpu (make EXTRA=gpu)")
    out = Path(args.out)
    with ap.errors(ValueError, KeyError, TypeError, OSError, what=f"--out {out} holds no results to merge into",
                   fix="give a JSON this script wrote, or a new path"):
        old = json.loads(out.read_text())["results"] if out.exists() else []
        results = {model_bench.label(r): r for r in old}
    for name in args.model or models.SEED_MODELS:
        r = model_bench.bench_model(name, args.bundle, args.work, batch=args.batch, reps=args.reps,
                                    vit_inputs=args.vit_inputs, attention=args.attention, exporter=args.exporter,
                                    attn_implementation=args.attn_implementation,
                                    decoder_causal=args.decoder_causal)
        results[model_bench.label(r)] = r
        model_bench.save(list(results.values()), out)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
