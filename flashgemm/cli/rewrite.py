#!/usr/bin/env python3
"""Fuse the attention scores of an ONNX model into flashgemm::FusedGemmSoftmax and print what was done.

    flashgemm-rewrite IN.onnx OUT.onnx [--json REPORT.json] [--attention] [--decoder-causal {exact,all,off}]

Fuses MatMul(Q, K^T) [* or / constant scale] [+ mask/bias] [masked_fill with the lowest] -> Softmax(last axis)
where that is provably the same function (flashgemm/ort/rewrite/ says exactly when), folds a Transpose of K into
transB=1 and a constant scale on Q or K into the op's scale; scores computed on [batch * heads, ...] views
(DeBERTa) are lifted to [batch, heads, ...] first. float16/bfloat16 models only: a float32 model is left as it is
(the report says so); export it in float16 (flashgemm-getmodel --dtype float16). The output imports opset
("flashgemm", 1): run it with the custom-op library registered (flashgemm/ort/session.py). Exit status 0 also when
nothing was fused.

With ONNX Runtime's transformers optimizer, run it first (optimize_model(..., opt_level=0)), then this script:
where the optimizer fuses attention itself (com.microsoft.Attention, which never writes P) that is faster than
this op, and the rewrite leaves those sites to it; it fuses the rest.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


from flashgemm.ort.rewrite import DECODER_CAUSAL, ModelFileError, rewrite_file
from flashgemm.cli.usage import ArgumentParser


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", metavar="IN.onnx")
    ap.add_argument("dst", metavar="OUT.onnx")
    ap.add_argument("--json", metavar="REPORT.json", help="also write the report as JSON")
    ap.add_argument("--attention", action="store_true",
                    help="also fuse each site's MatMul(P, V) into flashgemm::FusedAttention where P has no other "
                         "consumer and a tensor-core kernel serves the head size (32, 64, 80, 96, 128; P is then never "
                         "stored); needs a bundle built with flashgemm-build --attention (CUDA; on the CPU the generic "
                         "kernel, slower)")
    ap.add_argument("--decoder-causal", choices=DECODER_CAUSAL, default=DECODER_CAUSAL[0], nargs="?", const="all",
                    help="where a decoder adds its causal and padding masks as one bias (transformers' exports, "
                         "with a key/value cache or without), give the op the causal rule as its causal flag and the "
                         "padding mask alone: the keys past the diagonal are skipped (about half a prefill's work) "
                         "and one row of the mask is read. exact (default): at FusedAttention sites (--attention), "
                         "the same function at every row (causal_fill: the keys past the diagonal at the mask's "
                         "lowest, computed only for a row tile that sees nothing but padding); all (the flag alone): "
                         "FusedGemmSoftmax sites too, the same at every row but one kind: a row whose visible keys "
                         "are all padding (a left-padded sequence's first tokens, a sequence of padding alone) "
                         "attends to its visible keys, where the original attends to every key; off: the op reads "
                         "the mask at every element and computes every key")
    args = ap.parse_args(argv)
    writable = "give a writable file path"
    with ap.errors(ModelFileError), ap.errors(OSError, what=f"cannot write {args.dst}", fix=writable):
        report = rewrite_file(args.src, args.dst, attention=args.attention, decoder_causal=args.decoder_causal)
    print(report.text())
    print(f"wrote {args.dst}")
    if report.fused and len(report.fused) > (report.attention or 0):
        # a rewritten model is only as fast as the kernels its site shapes get
        print(f"next, on the GPU machine: flashgemm-tune --target auto --from-model {args.dst} (tune its shapes), "
              f"or at least flashgemm-build --target auto --from-model {args.dst} (default schedules); a shape "
              f"left to the generic kernel is correct but ~100x slower")
    if report.attention:
        print(f"FusedAttention nodes need a bundle built with flashgemm-build --attention (next: flashgemm-build "
              f"--target auto --attention --from-model {args.dst}), whose tensor-core kernels serve them on CUDA "
              f"(only sites with such a head size were fused); on the CPU they run a generic kernel, slower than the "
              f"original graph")
    if args.json:
        with ap.errors(OSError, what=f"cannot write {args.json}", fix=writable):
            Path(args.json).write_text(json.dumps(report.to_json(), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
