"""FusedAttention's tile sweep on this machine's GPU: each candidate tile of the tensor-core kernel for one head size,
checked against an FP64 reference and timed at the sweep's shapes beside SDPA's flash and cuDNN backends.

    python -m benchmarks.attention_tiles --head-size 64 [--tiles 1x64x2,2x128x3] [--shapes W1,W2] --out OUT.json

The kernel is the one a bundle ships for the head size on this GPU (flashgemm.bundle.kernel_library.
attention_tensor_core_kernels: wgmma on sm_90 for 64 and 128, tiles WGxBNxSTAGES; mma.sync elsewhere, tiles
WARPSxMTxBNxSTAGES). The shipped TILES are the fastest of such a sweep; the report names the fastest tile per shape.
Kernels are launched through TVM's runtime on torch's tensors (one variant: fp16 or bf16, K as [N, D], no bias or
mask; causal for the causal shapes), timed as benchmarks.peers.time_in_rounds does (CUDA events around back-to-back
calls).
"""
from __future__ import annotations

import argparse
import json
import sys

from benchmarks.attention import SHAPES as ATTENTION_SHAPES
from benchmarks.attention import _sdpa

# name: (B, H, M = N, D, causal): benchmarks.attention's shapes and the lengths between them
SHAPES = {**ATTENTION_SHAPES, "N256": (32, 16, 256, 64, False), "N1024": (8, 16, 1024, 64, False),
          "d128": (4, 32, 2048, 128, False)}
# the candidates swept by default, per kernel form and head size
CANDIDATES = {
    "wgmma": {64: ((1, 64, 2), (1, 128, 2), (2, 64, 2), (2, 128, 2), (2, 128, 3)),
              128: ((1, 64, 2), (2, 64, 2), (2, 128, 2), (2, 64, 3))},
    "mma": {d: ((4, 1, 64, 2), (4, 2, 64, 2), (4, 1, 32, 2), (8, 1, 64, 2)) for d in (32, 64, 80, 96, 128)},
}
ATOL = {"float16": 4e-3, "bfloat16": 2e-2}


def kernel_form(head_size: int, target_name: str) -> str:
    from flashgemm.kernel import fused_attention_wgmma  # noqa: PLC0415
    return "wgmma" if target_name == "sm_90" and head_size in fused_attention_wgmma.HEAD_SIZES else "mma"


def kernel_funcs(form: str, head_size: int, dtype: str, causal: bool, tiles) -> dict:
    """{name: PrimFunc} of each tile (names t0, t1, ... in the order of `tiles`); ValueError names a tile the
    kernel does not take."""
    from flashgemm.kernel import fused_attention_mma, fused_attention_wgmma  # noqa: PLC0415
    from flashgemm.op.variant import Variant  # noqa: PLC0415
    v = Variant(dtype, True, False, "none", causal)
    kernel = fused_attention_wgmma if form == "wgmma" else fused_attention_mma
    return {f"t{i}": kernel.runtime_func(v, head_size, *tile, name=f"t{i}") for i, tile in enumerate(tiles)}


def valid_tiles(form: str, head_size: int, tiles, log=print) -> list:
    """The tiles the kernel takes at this head size (the others are said and left out)."""
    out = []
    for tile in tiles:
        try:
            kernel_funcs(form, head_size, "float16", False, [tile])
            out.append(tile)
        except (ValueError, TypeError) as err:
            log(f"tile {'x'.join(map(str, tile))} left out: {err}")
    return out


def sweep(head_size: int, dtype: str, tiles, shape_names, rounds: int, reps: int, log=print) -> dict:
    import torch  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415

    from benchmarks.peers import gpu_info, time_in_rounds  # noqa: PLC0415
    from flashgemm import targets  # noqa: PLC0415
    from flashgemm.bundle.compile_worker import compile_module  # noqa: PLC0415

    target_name = targets.resolve("auto")
    form = kernel_form(head_size, target_name)
    tiles = valid_tiles(form, head_size, [tuple(t) for t in (tiles or CANDIDATES[form][head_size])], log)
    if not tiles:
        raise SystemExit(f"no tile to sweep for the {form} kernel at head size {head_size}")
    shapes = {n: SHAPES[n] for n in shape_names if SHAPES[n][3] == head_size}
    if not shapes:
        raise SystemExit(f"none of the shapes {', '.join(shape_names)} has head size {head_size}")
    libs = {}
    for causal in sorted({s[4] for s in shapes.values()}):
        log(f"compiling {len(tiles)} {form} tiles, head size {head_size}, {dtype}{', causal' if causal else ''} ...")
        libs[causal] = compile_module(tvm.IRModule(kernel_funcs(form, head_size, dtype, causal, tiles)), target_name)
    rows = []
    for name, (b, h, m, d, causal) in shapes.items():
        tdt = getattr(torch, dtype)
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn((b, h, m, d), generator=g, device="cuda", dtype=tdt) for _ in range(3))
        scale = d ** -0.5
        s = (q.double() @ k.double().transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(torch.ones(m, m, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
        ref = torch.softmax(s, -1) @ v.double()
        del s
        o = torch.empty_like(q)
        args = [tvm_ffi.from_dlpack(t) for t in (q, k, v, o)]
        calls, row = {}, {"shape": name, "sizes": [b, h, m, m, d], "causal": causal, "tiles": {}, "peers": {}}
        for i, tile in enumerate(tiles):
            fn = libs[causal][f"t{i}"]
            o.fill_(float("nan"))
            fn(*args, scale)
            torch.cuda.synchronize()
            err = float((o.double() - ref).abs().max())
            row["tiles"]["x".join(map(str, tile))] = {"max_abs_err": err}
            if not err <= ATOL[dtype]:  # (NaN fails too)
                log(f"  {name}: tile {tile} differs from FP64 by {err:.3g}: not timed")
                continue
            calls["x".join(map(str, tile))] = (lambda fn=fn: fn(*args, scale))
        peers = {p: _sdpa(p)(q, k, v, scale, causal) for p in ("sdpa_flash", "sdpa_cudnn")}
        times = time_in_rounds({**calls, **peers}, rounds, reps)
        for key, t in times.items():
            (row["peers"] if key in peers else row["tiles"])[key] = {**row["tiles"].get(key, {}), **t}
        timed = {key: t["median_us"] for key, t in times.items() if key not in peers}
        row["fastest"] = min(timed, key=timed.get) if timed else None
        rows.append(row)
        log(f"{name}: " + ", ".join(f"{key} {t['median_us']:.1f} us" for key, t in times.items())
            + (f"; fastest {row['fastest']}" if row["fastest"] else ""))
        del ref
        torch.cuda.empty_cache()
    return {"gpu": gpu_info(), "target": target_name, "form": form, "head_size": head_size, "dtype": dtype,
            "rows": rows}


def _tile(text: str) -> tuple:
    try:
        return tuple(int(x) for x in text.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a tile is integers joined by x (WGxBNxSTAGES or WARPSxMTxBNxSTAGES), "
                                         f"not {text!r}") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head-size", type=int, required=True)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--tiles", default=None, help="comma list of tiles (default: CANDIDATES of the kernel form)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list of {', '.join(SHAPES)} (those of the "
                                                                "head size run)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the rows here (JSON)")
    args = ap.parse_args(argv)
    tiles = [_tile(t) for t in args.tiles.split(",")] if args.tiles else None
    result = sweep(args.head_size, args.dtype, tiles, args.shapes.split(","), args.rounds, args.reps)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
