#!/usr/bin/env python3
"""Export the seed models to ONNX (PyTorch + transformers, published configs written in code, seeded random weights).

    flashgemm-getmodel --model bert-large|bert-small|vit-b16|whisper-enc|mpnet-base|deberta-v3-base|llama-3.2-1b|
                               llama-3.2-1b-step|all [--tiny]
                        [--dtype float32|float16]
                        [--batch N] [--dynamic-batch] [--dynamic-seq] [--exporter torchscript|dynamo]
                        [--attention eager|sdpa] [--seed S] [--out DIR]

    bert-large   BERT-Large (google-bert/bert-large-uncased config), seq 512, inputs input_ids + attention_mask
    bert-small   a small BERT (sentence-transformers/all-MiniLM-L6-v2 config: 6 layers, 12 heads of 32), seq 128
    vit-b16      ViT-B/16 (google/vit-base-patch16-224 config), 224x224 -> 197 tokens, input pixel_values
    whisper-enc  Whisper large-v2 encoder (openai/whisper-large-v2 config), 80 mel x 3000 frames -> 1500 positions
    mpnet-base   MPNet (sentence-transformers/all-mpnet-base-v2 config), seq 384: a relative position bias and the
                 padding mask added to the scores (eager attention only: transformers has no SDPA for it)
    deberta-v3-base  DeBERTa-v3 (microsoft/deberta-v3-base config), seq 512: disentangled attention on [batch * heads]
                 views, its padding mask a Where(~mask, lowest, scores) (eager attention only)
    llama-3.2-1b a decoder (meta-llama/Llama-3.2-1B config: 16 layers, 32 query heads of 64 sharing 8 key/value
                 heads, rotary positions), its prefill at seq 2048 without the LM head, inputs input_ids +
                 attention_mask ("all" is the first, third and fourth)
    llama-3.2-1b-step  the same decoder's generation step: one new token after a key/value cache of 2047 (inputs
                 past_key_L / past_value_L, random), the attention_mask over both

No model hub is used: the weights are random (torch.manual_seed(S), default 0), so outputs are meaningless but the
graphs are the real ones. --tiny: 2 layers, hidden 64, 2 heads, short sequences (CI; tests/data/ holds these, made
with `--model all --tiny --dtype float16 --batch 2 --out tests/data`, the -dynb ones adding --dynamic-batch, and
bert-large-tiny-dyn with `--model bert-large --tiny --batch 2 --dynamic-batch --dynamic-seq --out tests/data`; the
-dynamo-sdpa ones as those with `--exporter dynamo --attention sdpa`; llama-3.2-1b-tiny-dyn with `--model
llama-3.2-1b --tiny --batch 2 --dynamic-batch --dynamic-seq`, with and without the dynamo flags, and
mpnet-base-tiny-dyn and deberta-v3-base-tiny-dyn alike, with `--exporter dynamo` and eager attention;
llama-3.2-1b-step-tiny with `--model llama-3.2-1b-step --tiny --batch 2`).
--exporter dynamo --attention sdpa: what torch.onnx.export and transformers write by default today (the default here,
torchscript and eager, is what the benchmarks use).
Output: DIR/<model>[-tiny][-dynb|-dyns|-dyn][-dynamo][-sdpa].<f32|f16>.onnx (symbolic batch | sequence | both),
IR <= 9; the config, seed, exporter and opset are in the model's metadata_props. Details: flashgemm/ort/models.py.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


from flashgemm.ort import models
from flashgemm.cli.usage import ArgumentParser, count


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="all", choices=[*models.NAMES, "all"])
    ap.add_argument("--tiny", action="store_true", help="tiny configs of the same architectures (CI)")
    ap.add_argument("--dtype", default="float16", choices=models.DTYPES)
    ap.add_argument("--batch", type=count(1), default=1, help="static batch size (default 1)")
    ap.add_argument("--dynamic-batch", action="store_true", help="symbolic batch dim 'batch' (traced with --batch)")
    ap.add_argument("--dynamic-seq", action="store_true",
                    help="symbolic sequence dim 'sequence' of BERT's input_ids/attention_mask (traced with the tiny 16 "
                         "or full 512); ViT's and Whisper's lengths are fixed by their input size")
    ap.add_argument("--exporter", default="torchscript", choices=models.EXPORTERS,
                    help="torch.onnx.export(dynamo=False) (opset 17; default) or dynamo=True (its default opset)")
    ap.add_argument("--attention", default="eager", choices=models.ATTENTIONS,
                    help="transformers' attn_implementation (default eager: explicit ops)")
    ap.add_argument("--seed", type=int, default=models.DEFAULT_SEED)
    ap.add_argument("--out", default=str(Path("build") / "models"))
    args = ap.parse_args(argv)
    if Path(args.out).exists() and not Path(args.out).is_dir():
        ap.error(f"--out {args.out} is a file", fix="give a directory for the models; it is created if missing")
    names = models.SEED_MODELS if args.model == "all" else (args.model,)
    fixed = [n for n in names if not models.SPECS[n].seq_inputs]
    if args.dynamic_seq and fixed:
        ap.error(f"--dynamic-seq: the sequence length of {', '.join(fixed)} is fixed by its input size",
                 fix="use --dynamic-seq with --model bert-large or bert-small only")
    try:
        import torch  # noqa: F401, PLC0415
        import transformers  # noqa: F401, PLC0415
    except ImportError as e:
        ap.error(f"needs torch and transformers: {e}", fix="pip install -e '.[models]'")
    for name in names:
        models.export(name, args.out, tiny=args.tiny, dtype=args.dtype, batch=args.batch,
                      dynamic_batch=args.dynamic_batch, dynamic_seq=args.dynamic_seq, seed=args.seed,
                      exporter=args.exporter, attention=args.attention)
    return 0


if __name__ == "__main__":
    sys.exit(main())
