"""FusedAttention's split-N kernel against the kernel it replaces, kernel alone, at a decoder's generation steps.

  python -m benchmarks.split_n_ab BUNDLE [BUNDLE ...] --shape 1,32,4096,128 --splits op,4,8,26 --json OUT.json

For each shape (B, H, N, D: one query row a sequence against N keys) and mask ("none", and "padding": a bias row
[B, 1, 1, N] read through stride 0, as the rewrite passes a decoder's padding), fp16 with K as [N, D]: the
tensor-core kernel the op takes without a split (Bundle::FindAttention's: the first of the head size's tiles whose
max_n holds N) and each bundle's split-N kernel at every --splits count ("op": the count the op chooses,
op_splits, the mirror of flashgemm/ort/csrc/op.cc's SplitCount), on the same inputs, outputs checked to agree
within fp16's tolerance, timed in --rounds rounds of alternating order (benchmarks.peers.time_in_rounds: CUDA
events around groups of back-to-back calls). The split kernel's workspace is allocated once, outside the timing
(the op allocates it on the stream with each call). Several bundles: the same functions built otherwise (another
split tile), each timed beside the first's baseline.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# flashgemm/ort/csrc/op.cc: kSplitBlocksPerSm, kSplitMinChunks
SPLIT_BLOCKS_PER_SM, SPLIT_MIN_CHUNKS = 2, 2


def op_splits(blocks: int, n: int, chunk: int, sms: int) -> int:
    """The op's split count (op.cc's SplitCount) for `blocks` row tiles of one split, N keys in chunks of `chunk`."""
    if blocks >= sms:
        return 1
    chunks = -(-n // chunk)
    s = min(-(-SPLIT_BLOCKS_PER_SM * sms // blocks), chunks // SPLIT_MIN_CHUNKS)
    if s < 2:
        return 1
    per = -(-chunks // s)
    return -(-chunks // per)


def shape_arg(text: str) -> tuple:
    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: give B,H,N,D (e.g. 1,32,4096,128)")
    return tuple(int(p) for p in parts)


def _baseline(fns: dict, key: str, d: int, n: int) -> str:
    """The tensor-core kernel FindAttention takes for (variant key, head size d, N), zero_nan_rows 0."""
    tiles = [f for f in fns.values() if f["name"].startswith(f"fa_{key}_") and f.get("head_size") == d
             and not f.get("split") and f.get("zero_nan_rows") in (None, 0) and (f.get("max_n") or n) >= n]
    return min(tiles, key=lambda f: f.get("max_n") or 1 << 62)["name"]


def compare(bundles: list, shapes: list, splits: list, rounds: int = 5, reps: int = 100, log=print) -> list:
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415

    from benchmarks.bundle_ab import _load  # noqa: PLC0415
    from benchmarks.peers import time_in_rounds  # noqa: PLC0415
    from flashgemm.bundle.bundle_check import ATOL  # noqa: PLC0415
    from flashgemm.op.variant import Variant  # noqa: PLC0415
    loaded = [_load(Path(b)) for b in bundles]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for b, h, n, d in shapes:
        gen = torch.Generator(device="cuda").manual_seed(n + d)
        q, k, v = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float16)
                   for shape in ((b, h, 1, d), (b, h, n, d), (b, h, n, d)))
        row_bias = torch.where(torch.rand((b, 1, 1, n), generator=gen, device="cuda") < 0.1, -65504.0, 0.0).half()
        for mask in ("none", "padding"):
            key = Variant("float16", True, mask == "padding", "none", False).key
            args = [tvm_ffi.from_dlpack(x) for x in (q, k, v)]
            if mask == "padding":
                args.append(tvm_ffi.from_dlpack(row_bias.expand(b, h, 1, n)))
            scale = np.float32(d ** -0.5)
            mod0, fns0 = loaded[0]
            base = _baseline(fns0, key, d, n)
            outs = {"base": torch.empty((b, h, 1, d), device="cuda", dtype=torch.float16)}
            calls = {"base": lambda f=mod0[base], o=tvm_ffi.from_dlpack(outs["base"]): f(*args, o, scale, 0)}
            names = {"base": base}
            for i, (mod, fns) in enumerate(loaded):
                name = f"fa_{key}_split_d{d}"
                rows_, chunk = fns[name]["split"]
                for s in splits:
                    count = op_splits(b * h, n, chunk, sms) if s == "op" else int(s)
                    label = f"{i}:{s}={count}"
                    work = tvm_ffi.from_dlpack(torch.empty((count, b, h, d + 2), device="cuda", dtype=torch.float32))
                    outs[label] = torch.empty((b, h, 1, d), device="cuda", dtype=torch.float16)
                    calls[label] = (lambda f=mod[name], o=tvm_ffi.from_dlpack(outs[label]), w=work:
                                    f(*args, o, w, scale, 0))
                    names[label] = name
            for call in calls.values():
                call()
            torch.cuda.synchronize()
            for label, o in outs.items():
                diff = float((o.double() - outs["base"].double()).abs().max())
                if not diff <= ATOL["float16"]:
                    raise AssertionError(f"{names[label]} ({label}) at {b}x{h}x{n}x{d} {mask}: differs from {base} "
                                         f"by {diff:.3g}")
            t = time_in_rounds(calls, rounds, reps)
            for label in calls:
                row = {"shape": [b, h, n, d], "mask": mask, "label": label, "name": names[label],
                       "bundle": "" if label == "base" else bundles[int(label.split(":")[0])],
                       "splits": None if label == "base" else int(label.split("=")[1]),
                       "us": t[label]["median_us"], "rounds_us": t[label]["round_medians_us"]}
                row["over_base"] = row["us"] / t["base"]["median_us"]
                rows.append(row)
                log(f"{b}x{h}x{n}x{d} {mask:8s} {label:12s} {names[label]:52s} {row['us']:8.1f} us  "
                    f"{row['over_base']:.3f}x base  (rounds {', '.join(f'{x:.1f}' for x in row['rounds_us'])})")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundles", type=Path, nargs="+", help="CUDA bundles built with flashgemm-build --attention")
    ap.add_argument("--shape", type=shape_arg, action="append", default=None,
                    help="B,H,N,D (repeatable; default 1,32,4096,128 and 4,32,2048,128)")
    ap.add_argument("--splits", default="op", help="comma list of split counts, 'op' the op's choice (default op)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--json", type=Path, default=None, help="write the rows and the GPU's description here")
    args = ap.parse_args(argv)
    for d in args.bundles:
        if not (d / "manifest.json").is_file():
            ap.error(f"{d} is not a bundle (no manifest.json): build one with flashgemm-build --attention --out {d}")
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    if any(s != "op" and not (s.isdigit() and int(s) >= 1) for s in splits):
        ap.error(f"--splits {args.splits!r}: give 'op' or positive integers")
    rows = compare([str(b) for b in args.bundles], args.shape or [(1, 32, 4096, 128), (4, 32, 2048, 128)], splits,
                   args.rounds, args.reps)
    if args.json:
        from benchmarks.peers import gpu_info  # noqa: PLC0415
        args.json.write_text(json.dumps({"gpu": gpu_info(), "bundles": [str(b) for b in args.bundles],
                                         "rounds": args.rounds, "reps": args.reps, "sm_blocks_per_split":
                                         SPLIT_BLOCKS_PER_SM, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
