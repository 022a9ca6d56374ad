"""The op across sequence lengths on one GPU: what a bundle serves at each length against the peers.

    python -m benchmarks.lengths --bundle build/sm_90 --out results/lengths.json [--plot lengths.png]

At each length L the attention scores of `--batch` x `--heads` heads, M = N = L, head size `--k` (B transposed,
scale 1/sqrt(K), no mask: the form ORT's MatMul + Softmax peer also computes), timed as:
  * ours: the kernel the op picks for the call (the dispatch of flashgemm/ort/csrc/bundle.cc, mirrored by
    `served_by`: the tensor-core kernel of K in its first range (past it, before all but tuned kernels), else exact or
    any-batch tuned / default kernel, else
    the smallest any-length bound, else the tensor-core kernel, else generic);
  * any-length: the any-length kernel alone, where the bundle has one (the same as ours where no kernel of the
    length's own exists);
  * tensor-core: the bundle's tensor-core kernel of K alone (sm_90: flashgemm/kernel/fused_gemm_softmax_wgmma.py),
    where it has one;
  * generic: the bundle's generic kernel (what served these lengths before any-length kernels), up to
    --generic-max-length (its time grows with L^2 x K on CUDA cores: hundreds of ms a call past that);
  * torch eager (matmul, then softmax) and ORT's MatMul + Softmax on the CUDA EP (skipped where onnxruntime has no
    CUDA EP).
Every system runs in alternating rounds (benchmarks.peers.time_in_rounds); each length's P is checked against the
torch result first. The JSON keeps every timing, which kernel served, the GPU and the driver.
"""
from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

LENGTHS = (17, 64, 100, 128, 200, 256, 300, 384, 512, 600, 768, 900, 1024, 1500, 2048)  # at and between bounds
GENERIC_MAX_LENGTH = 512


def served_by(functions: list, variant_key: str, sizes: tuple, align: int = 256):
    """The manifest function the op serves canonical `sizes` with (bundle.cc Bundle::Find, without the scale and
    fixed-batch twins), or None."""
    b0, b1, m, n, k = sizes
    mine = [f for f in functions if _key(f) == variant_key and f["align"] <= align and f.get("op") != "FusedAttention"]
    tensor_core = next((f for f in mine if f.get("head_size") == k and n % (f.get("n_multiple") or 1) == 0
                        and max(b0, b1) <= 65535), None)
    ahead = tensor_core is not None and n >= tensor_core["min_n"] and m >= tensor_core["min_m"]
    if ahead and n <= tensor_core["first_max_n"]:
        return tensor_core
    mine = [f for f in mine if not f.get("head_size") and (not ahead or f["schedule"] in ("tuned", "generic"))]
    for f in mine:
        if f["schedule"] != "generic" and not f.get("any_length") and not f.get("fixed_batch") and \
                f.get("scale") is None and (f["sizes"] == [b0, b1, m, n, k] or
                                            (f["any_batch"] and f["sizes"][2:] == [m, n, k])):
            return f
    bounded = [f for f in mine if f.get("any_length") and f["sizes"][4] == k and f["sizes"][2] >= m
               and f["sizes"][3] >= n and (not f.get("fixed_batch") or (b0, b1)[f["fixed_batch"][0]] ==
                                           f["fixed_batch"][1]) and n % (f.get("n_multiple") or 1) == 0]
    if bounded:
        return min(bounded, key=lambda f: (f["sizes"][2] * f["sizes"][3],
                                           -bool(f.get("fixed_batch")) - ((f.get("n_multiple") or 1) > 1),
                                           f["schedule"] != "tuned"))
    return tensor_core or next((f for f in mine if f["schedule"] == "generic"), None)


def _key(f: dict) -> str:
    from flashgemm.op.variant import Variant  # noqa: PLC0415
    return Variant(f["dtype"], bool(f["trans_b"]), bool(f["bias"]), f["mask"], bool(f["causal"])).key


def bench(bundle, batch: int, heads: int, k: int, dtype: str, lengths, rounds: int, reps: int, log=print,
          generic_max_length: int = GENERIC_MAX_LENGTH) -> dict:
    import torch  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415

    from benchmarks.peers import gpu_info, ort_unfused, time_in_rounds, torch_fn, torch_inputs  # noqa: PLC0415
    from flashgemm.bundle.kernel_library import MANIFEST, KernelLibraries, kernel_libraries  # noqa: PLC0415
    from flashgemm.op.variant import Variant  # noqa: PLC0415
    from flashgemm.op.workloads import parse  # noqa: PLC0415

    bundle = Path(bundle)
    manifest = json.loads((bundle / MANIFEST).read_text())
    mod = KernelLibraries(kernel_libraries(bundle))
    functions = manifest["functions"]
    key = Variant(dtype, True).key
    rows = []
    for L in lengths:
        wl = parse(f"a={batch}x{heads}x{L}x{k},b={batch}x{heads}x{L}x{k},transB=1,scale={k ** -0.5:.9g},"
                   f"dtype={dtype},name=len{L}")
        c = wl.canonical
        feeds = torch_inputs(wl)
        p = torch.empty(c.out_shape, dtype=feeds["A"].dtype, device="cuda")
        args = [tvm_ffi.from_dlpack(t.view(c.b0, c.b1, *t.shape[-2:])) for t in (feeds["A"], feeds["B"])]
        args.append(tvm_ffi.from_dlpack(p.view(c.b0, c.b1, c.m, c.n)))
        ours = served_by(functions, key, c.sizes)
        if ours is None:
            raise LookupError(f"{bundle} has no kernel of variant {key}")
        anylen = served_by([f for f in functions if f.get("any_length") or f["schedule"] == "generic"], key,
                           c.sizes)
        generic = served_by([f for f in functions if f["schedule"] == "generic"], key, c.sizes) \
            if L <= generic_max_length else None
        tensor_core = served_by([f for f in functions if f.get("head_size")], key, c.sizes)
        calls, which = {}, {}
        for name, f in (("ours", ours), ("any-length", anylen), ("tensor-core", tensor_core), ("generic", generic)):
            if f is None or (name != "ours" and f is ours) or (name == "any-length" and not f.get("any_length")) \
                    or (name == "tensor-core" and not f.get("head_size")):
                continue
            fn = mod[f["name"]]
            calls[name] = (lambda fn=fn: fn(*args, float(wl.scale)))
            which[name] = f["name"]
        ref = torch_fn(wl)
        calls["torch eager"] = (lambda: ref(feeds["A"], feeds["B"]))
        try:
            ort_run = ort_unfused(wl)(dict(feeds))
            calls["ORT MatMul+Softmax"] = ort_run
        except LookupError as err:
            log(f"  ORT peer skipped: {err}")
        want = ref(feeds["A"], feeds["B"]).double()
        for name in ("ours", "any-length", "tensor-core", "generic"):
            if name in calls:
                calls[name]()
                torch.cuda.synchronize()
                err = float((p.double() - want).abs().max())
                if not err <= (2e-3 if dtype == "float16" else 1.6e-2):
                    raise AssertionError(f"L={L}: {which[name]} differs from torch by {err:.3g}")
        t = time_in_rounds(calls, rounds, reps)
        row = {"length": L, "sizes": list(c.sizes), "served_by": which,
               "us": {name: t[name]["median_us"] for name in calls},
               "round_medians_us": {name: t[name]["round_medians_us"] for name in calls}}
        rows.append(row)
        log(f"L={L:5d} " + "  ".join(f"{n} {u:9.1f}" for n, u in row["us"].items()) + f"   ours = {which['ours']}")
    return {"bundle": str(bundle), "target": manifest.get("target"), "batch": batch, "heads": heads, "k": k,
            "dtype": dtype, "env": gpu_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "rows": rows}


def _time(row: dict, system: str):
    """The row's time of `system`; "any-length" where the op itself served the length with an any-length kernel
    (then only "ours" was timed: the same call)."""
    if system in row["us"]:
        return row["us"][system]
    if system == "any-length" and re.search(r"_len\d+x\d+_k\d+(_b\deq\d+)?(_n\d+)?$", row["served_by"]["ours"]):
        return row["us"]["ours"]
    if system == "tensor-core" and re.search(r"_wgmma_k\d+$", row["served_by"]["ours"]):
        return row["us"]["ours"]
    return None


def plot(result: dict, path) -> None:
    """Time against length, one line a system, log-log; each point of `ours` labelled with the kernel kind."""
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    import matplotlib.ticker  # noqa: PLC0415, F401  (matplotlib.ticker below)
    rows = result["rows"]
    systems = [s for s in ("ours", "any-length", "tensor-core", "generic", "torch eager", "ORT MatMul+Softmax")
               if any(s in r["us"] for r in rows)]
    fig, ax = plt.subplots(figsize=(8, 5))
    for s in systems:
        pts = [(r["length"], _time(r, s)) for r in rows if _time(r, s) is not None]
        ax.plot(*zip(*pts), marker="o", label=s,
                **({"linestyle": "--", "markersize": 4} if s in ("any-length", "tensor-core") else {}))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = []  # labelled lengths: none within 8 % of the one before (1024 and 1025 would overlap)
    for length in sorted({r["length"] for r in rows}):
        if not ticks or length > ticks[-1] * 1.08:
            ticks.append(length)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks], rotation=45)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("sequence length (M = N)")
    ax.set_ylabel("time per call (us)")
    ax.set_title(f"P = softmax(QK^T/sqrt(d)), {result['batch']} x {result['heads']} heads, d={result['k']}, "
                 f"{result['dtype']}, {result['env'].get('gpu', '')}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="a CUDA bundle directory (flashgemm-build)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--generic-max-length", type=int, default=GENERIC_MAX_LENGTH,
                    help="time the generic kernel up to this length (default: %(default)s)")
    ap.add_argument("--out", required=True, help="the JSON results file")
    ap.add_argument("--plot", default=None, help="also draw the figure (PNG)")
    args = ap.parse_args(argv)
    res = bench(args.bundle, args.batch, args.heads, args.k, args.dtype, [int(x) for x in args.lengths.split(",")],
                args.rounds, args.reps, generic_max_length=args.generic_max_length)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    if args.plot:
        plot(res, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
