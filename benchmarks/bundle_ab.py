"""Two builds of the same kernels timed against each other on one GPU: what a change to the kernel or to the
compile path costs, measured on the binaries a bundle ships.

  python -m benchmarks.bundle_ab BUNDLE_A BUNDLE_B --only m512_n512 --rounds 5 --json OUT.json

Every function that both manifests list under one name (those whose name the regular expression --only matches
somewhere in), except the generic kernels, runs at its own sizes (a tuned kernel's workload; an any-batch one at the
tuned batch) on the same inputs (flashgemm.bundle.bundle_check.inputs), after both outputs are checked to agree
within the dtype's tolerance. The two are timed in --rounds rounds of alternating order with python -m
benchmarks.bench's protocol (benchmarks.peers.time_in_rounds: groups of back-to-back calls between CUDA events);
"us" is each side's median round, B / A their ratio. FusedAttention's tensor-core kernels (no sizes of their own:
they serve any length) run at each shape of benchmarks.attention.SHAPES (or of --shape) they serve (their causality
and head size, N up to their max_n), with V, the kernel alone (no ORT Run around it). --one-row gives the bias and
mask as one row broadcast over heads and rows ([B0, 1, 1, N] read through stride 0: a padding mask, as BERT's exports
give it).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def _load(bundle: Path):
    from flashgemm.bundle.kernel_library import MANIFEST, KernelLibraries, kernel_libraries  # noqa: PLC0415
    manifest = json.loads((bundle / MANIFEST).read_text())
    return KernelLibraries(kernel_libraries(bundle)), {f["name"]: f for f in manifest["functions"]}


def _timed_sizes(fn: dict, shapes=None) -> list:
    """The (B0, B1, M, N, K) a function is timed at: its own sizes, or for a FusedAttention tensor-core kernel each
    shape it serves of `shapes` ((B, H, L, D, causal) tuples; default benchmarks.attention's); none for the generic
    kernels."""
    if fn.get("sizes") is not None:
        return [tuple(fn["sizes"])]
    if fn.get("op") != "FusedAttention" or fn.get("head_size") is None:
        return []
    if shapes is None:
        from benchmarks.attention import SHAPES  # noqa: PLC0415
        shapes = SHAPES.values()
    return [(b, h, length, length, d) for b, h, length, d, causal in shapes
            if d == fn["head_size"] and causal == bool(fn["causal"]) and length <= (fn.get("max_n") or length)]


def attention_shape(text: str) -> tuple:
    """--shape's B,H,L,D[,causal] as (B, H, L, D, causal)."""
    parts = text.split(",")
    if len(parts) not in (4, 5) or not all(x.strip().isdigit() for x in parts[:4]) or (
            len(parts) == 5 and parts[4].strip() not in ("0", "1", "causal")):
        raise argparse.ArgumentTypeError(f"{text!r}: give B,H,L,D or B,H,L,D,causal (e.g. 4,32,2048,128,causal)")
    return (*(int(x) for x in parts[:4]), len(parts) == 5 and parts[4].strip() != "0")


def _one_row(x, shape, dev):
    """x's last row of its first head (a [B0, 1, 1, N] copy) on dev, broadcast to `shape` through stride 0 (torch's
    expand on a GPU, numpy's strides on the CPU)."""
    import numpy as np  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415
    row = np.ascontiguousarray(x[:, :1, -1:, :]).astype(np.uint8 if x.dtype == np.bool_ else x.dtype)
    if dev.dlpack_device_type() == 1:  # kDLCPU
        return tvm_ffi.from_dlpack(np.lib.stride_tricks.as_strided(
            row, shape, (row.strides[0], 0, 0, row.strides[3]), writeable=True))
    import torch  # noqa: PLC0415
    t = torch.from_numpy(row) if row.dtype == np.uint8 else torch.from_numpy(row.view(np.int16)).view(
        torch.float16 if row.dtype == np.float16 else torch.bfloat16)  # bfloat16 (ml_dtypes) through its bits
    return tvm_ffi.from_dlpack(t.to(f"cuda:{dev.index}").expand(*shape))


def compare_bundles(a_dir, b_dir, only: str = "", rounds: int = 5, reps: int = 100, log=print, dev=None,
                    timer=None, one_row: bool = False, shapes=None) -> list:
    """One row per shared function (module doc). dev: the bundles' device (default cuda:0); timer: as
    benchmarks.peers.time_in_rounds takes it (default: CUDA events); one_row: bias and mask [B0, 1, 1, N]; shapes:
    the (B, H, L, D, causal) the FusedAttention tensor-core kernels run at (default benchmarks.attention's)."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415

    from benchmarks.peers import time_in_rounds  # noqa: PLC0415
    from flashgemm.bundle.bundle_check import ATOL, device_args, inputs  # noqa: PLC0415
    (mod_a, fns_a), (mod_b, fns_b) = _load(Path(a_dir)), _load(Path(b_dir))
    dev = dev or tvm.cuda(0)
    rows = []
    for name, sizes in ((name, sizes) for name in fns_a if name in fns_b and (not only or re.search(only, name))
                        for sizes in _timed_sizes(fns_a[name], shapes)):
        fn = fns_a[name]
        b0, b1, m, n, k = sizes
        a, b, bias, mask, scale = inputs(fn, sizes)
        args = device_args(dev, a, b, bias, mask)
        if one_row:
            for i, x in enumerate(x for x in (bias, mask) if x is not None):
                args[2 + i] = _one_row(x, (b0, b1, m, n), dev)
        extra = ()
        if fn.get("op") == "FusedAttention":  # V after K, O as [B0, B1, M, D]; zero_nan_rows after the scale
            v = np.random.default_rng(1).standard_normal((b0, b1, n, k)).astype(a.dtype)
            args.insert(2, tvm.runtime.tensor(v, dev))
            extra = (fn.get("zero_nan_rows") or 0,)
        outs = {side: tvm.runtime.empty((b0, b1, m, k if extra else n), fn["dtype"], dev) for side in "AB"}
        calls = {side: (lambda f=mod[name], p=outs[side]: f(*args, p, np.float32(scale), *extra))
                 for side, mod in (("A", mod_a), ("B", mod_b))}
        for call in calls.values():
            call()
        diff = float(np.nanmax(np.abs(outs["A"].numpy().astype(np.float64) - outs["B"].numpy().astype(np.float64))))
        if not diff <= ATOL[fn["dtype"]]:
            raise AssertionError(f"{name}: the two builds disagree by {diff:.3g}")
        t = time_in_rounds(calls, rounds, reps, timer)
        row = {"name": name, "sizes": list(sizes), "a_us": t["A"]["median_us"], "b_us": t["B"]["median_us"],
               "a_rounds_us": t["A"]["round_medians_us"], "b_rounds_us": t["B"]["round_medians_us"],
               "max_abs_diff": diff}
        row["b_over_a"] = row["b_us"] / row["a_us"]
        rows.append(row)
        log(f"{name:64s} A {row['a_us']:9.1f} us  B {row['b_us']:9.1f} us  B/A {row['b_over_a']:.3f}  "
            f"(rounds A {', '.join(f'{x:.1f}' for x in row['a_rounds_us'])}; B "
            f"{', '.join(f'{x:.1f}' for x in row['b_rounds_us'])})")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle_a", type=Path)
    ap.add_argument("bundle_b", type=Path)
    ap.add_argument("--only", default="", help="only functions whose name this regular expression matches somewhere "
                    "in (as flashgemm-check-bundle's --only)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=100, help="calls timed a round (in groups of 10)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows and the GPU's description here")
    ap.add_argument("--shape", type=attention_shape, action="append", default=None,
                    help="B,H,L,D[,causal]: time the FusedAttention tensor-core kernels at this shape instead of "
                    "benchmarks.attention's (repeatable; e.g. head sizes those lack: 16,16,512,80 or 4,32,2048,128)")
    ap.add_argument("--one-row", action="store_true", help="the bias and mask as one row [B0, 1, 1, N] broadcast "
                    "through stride 0 (a padding mask), not the scores' full shape")
    args = ap.parse_args(argv)
    for d in (args.bundle_a, args.bundle_b):
        if not (d / "manifest.json").is_file():
            ap.error(f"{d} is not a bundle (no manifest.json): build one with flashgemm-build --out {d}")
    rows = compare_bundles(args.bundle_a, args.bundle_b, args.only, args.rounds, args.reps, one_row=args.one_row,
                           shapes=args.shape)
    if not rows:
        ap.error("the two bundles share no non-generic function" + (f" matching {args.only!r}" if args.only else ""))
    if args.json:
        from benchmarks.peers import gpu_info  # noqa: PLC0415
        args.json.write_text(json.dumps({"gpu": gpu_info(), "a": str(args.bundle_a), "b": str(args.bundle_b),
                                         "rounds": args.rounds, "reps": args.reps, "one_row": args.one_row,
                                         "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
