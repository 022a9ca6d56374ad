"""Run every kernel of a built bundle once on this machine's GPU (or CPU) and check P against the FP64 reference.

What a user runs after `scripts/build.py` on the machine that will serve the model, and what compute-sanitizer
runs over (scripts/check_bundle.py --sanitizer memcheck,racecheck): the exact binary that ORT loads, every
function in its manifest. Shapes: a tuned or default-schedule kernel runs its own M, N, K at a small batch (it
serves any batch; shape-specific kernels run their own batch); a generic kernel runs an odd shape (M, N, K not
multiples of 16) with a fully masked row where the variant has a mask. Tolerances as the tests: fp16 atol 2e-3,
bf16 atol 1.6e-2.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import tvm

from tir_kernels import fused_gemm_softmax_ref

from .elf_check import elf_problem
from .kernel_library import KERNELS_SO, MANIFEST

ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5}
GENERIC_SIZES = (1, 2, 37, 45, 19)  # (b0, b1, M, N, K): nothing a multiple of 16


def _np_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes  # noqa: PLC0415
        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def _sizes(fn: dict) -> tuple:
    if fn["sizes"] is None:
        return GENERIC_SIZES
    b0, b1, m, n, k = fn["sizes"]
    if fn.get("any_batch"):  # any batch: run a small one (its kernel is the same code at any batch)
        b0, b1 = 1, min(b1 * b0, 2)
        if fn.get("fixed_batch"):  # a twin: its static batch dim keeps its value
            dim, value = fn["fixed_batch"]
            b0, b1 = (value, b1) if dim == 0 else (b0, value)
    return b0, b1, m, n, k


def check_function(mod, fn: dict, dev, seed: int = 0) -> dict:
    """Run one manifest function on random inputs; returns {name, sizes, max_abs_err, ok, kind}."""
    b0, b1, m, n, k = _sizes(fn)
    dtype, nd = fn["dtype"], _np_dtype(fn["dtype"])
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((b0, b1, m, k)).astype(nd)
    b = rng.standard_normal((b0, b1, n, k) if fn["trans_b"] else (b0, b1, k, n)).astype(nd)
    bias = (rng.standard_normal((b0, b1, m, n)) * 0.5).astype(nd) if fn["bias"] else None
    mask = None
    if fn["mask"] == "add":
        mv = np.where(rng.random((b0, b1, m, n)) > 0.2, 0.0, -1e9).astype(np.float32)
        mv[0, 0, 0, :] = -1e9  # a fully masked row: zeros, never NaN
        with np.errstate(over="ignore"):  # -1e9 overflows to -inf in fp16, as it does in real fp16 masks
            mask = mv.astype(nd)
    elif fn["mask"] == "bool":
        mask = rng.random((b0, b1, m, n)) > 0.2
        mask[0, 0, 0, :] = False
    scale = fn["scale"] if fn.get("scale") is not None else k ** -0.5  # a scale-specialized twin: its own
    args = [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)]
    if bias is not None:
        args.append(tvm.runtime.tensor(bias, dev))
    if mask is not None:
        args.append(tvm.runtime.tensor(mask.astype(np.uint8) if mask.dtype == np.bool_ else mask, dev))
    p = tvm.runtime.empty((b0, b1, m, n), dtype, dev)
    mod[fn["name"]](*args, p, np.float32(scale))
    out = p.numpy().astype(np.float64)
    ref = fused_gemm_softmax_ref(a, b, bias, mask, scale=scale, trans_b=bool(fn["trans_b"]), causal=bool(fn["causal"]))
    err = float(np.abs(out - ref).max()) if np.isfinite(out).all() else float("inf")
    return {"name": fn["name"], "kind": fn.get("schedule", "tuned" if fn.get("tuned") else "generic"),
            "sizes": [b0, b1, m, n, k], "max_abs_err": err, "ok": err <= ATOL[dtype]}


def check_bundle(bundle_dir, only: Optional[str] = None, log: Callable = print) -> list:
    """Every function of the bundle's manifest (or those whose name contains `only`), in manifest order."""
    bundle_dir = Path(bundle_dir)
    manifest_path, so = bundle_dir / MANIFEST, bundle_dir / KERNELS_SO
    for path in (manifest_path, so):
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing (build the bundle first: scripts/build.py --out {bundle_dir})")
    rebuild = f"rebuild the bundle: scripts/build.py --out {bundle_dir}"
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError as err:
        raise ValueError(f"{manifest_path} is not valid JSON: {err} ({rebuild})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("functions"), list):
        raise ValueError(f"{manifest_path} is not a bundle manifest: no list of functions ({rebuild})")
    dev = tvm.cuda(0) if manifest.get("device") == "cuda" else tvm.cpu(0)
    if manifest.get("device") == "cuda" and not dev.exist:
        raise RuntimeError(f"{bundle_dir} is a CUDA bundle ({manifest.get('target')}) and no GPU is visible here "
                           f"(run it on the GPU machine the bundle is for)")
    problem = elf_problem(so)  # dlopen of a truncated library dies of SIGBUS rather than raising
    if problem:
        raise ValueError(f"corrupt kernel library {so}: {problem} ({rebuild})")
    mod = tvm.runtime.load_module(str(so))
    results = []
    for fn in manifest["functions"]:
        if only and only not in fn["name"]:
            continue
        res = check_function(mod, fn, dev)
        results.append(res)
        log(f"{'ok  ' if res['ok'] else 'FAIL'} {res['name']:60s} {res['kind']:8s} "
            f"{'x'.join(map(str, res['sizes'])):22s} max abs err {res['max_abs_err']:.2e}")
    return results
