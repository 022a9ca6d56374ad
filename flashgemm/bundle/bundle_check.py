"""Run every kernel of a built bundle once on this machine's GPU (or CPU) and check P (FusedAttention's kernels: O)
against the FP64 reference.

What a user runs after `flashgemm-build` on the machine that will serve the model, and what compute-sanitizer
runs over (flashgemm-check-bundle --sanitizer memcheck,racecheck): the exact binary that ORT loads, every
function in its manifest. Shapes: a tuned or default-schedule kernel runs its own M, N, K at a small batch (it
serves any batch; shape-specific kernels run their own batch); an any-length kernel runs several lengths up to its
bound (_any_length_sizes); a generic kernel runs an odd shape (M, N, K not
multiples of 16) with a fully masked row where the variant has a mask. Every run also has NaN and +inf in a few rows
(poke_special_values), whose expected output (NaN rows, or zeros for a fully masked row) the FP64 reference gives.
FusedAttention's kernels run with a V beside (NaN in its last row of the first head, which reaches its column of
every row, fully masked ones included), once with zero_nan_rows and once without: the generic one at an odd shape
with D != K, a tensor-core one (a head_size) at a partial row tile and column chunk and at a shape where causal tiles
skip columns, a split-N one (manifest "split") at a step's few rows in 2 and 13 splits (empty ones too).
FusedGemmSoftmax's tensor-core kernels (a head_size) run those shapes and one for each width of P's
stores (N % 8, % 4, % 2, odd). Tolerances as the tests: fp16 atol 2e-3, bf16 atol 1.6e-2.
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import tvm

from flashgemm.op.reference import fused_attention_ref, fused_gemm_softmax_ref
from flashgemm.op.variant import BOOL_MASK_KINDS, FILL_LOGIT, MASK_FILL

from flashgemm.bundle.elf_check import elf_problem
from flashgemm.bundle.kernel_library import KERNELS_SO, MANIFEST, KernelLibraries, kernel_libraries

ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5}
GENERIC_SIZES = (1, 2, 37, 45, 19)  # (b0, b1, M, N, K): nothing a multiple of 16
ATTENTION_GENERIC_D = 11  # FusedAttention's generic kernels: V's head size (D != K)


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
        # enough rows for the special values (poke_special_values) even where M is 1 (the row-vector kernels)
        b0, b1 = 1, max(min(b1 * b0, 2), -(-(SPECIAL_ROWS + 1) // m))
        if fn.get("fixed_batch"):  # a twin: its static batch dim keeps its value
            dim, value = fn["fixed_batch"]
            b0, b1 = (value, b1) if dim == 0 else (b0, value)
    return b0, b1, m, n, k


def _any_length_sizes(fn: dict) -> list:
    """An any-length kernel's runs: its bound, lengths just under it (odd, so no vector of P or B lines up), a short
    square and a non-square call, at a batch of 2 x 3 (1 x 2 past 512 x 512; the bound's rows and columns past M and N
    must stay unread and unwritten: compute-sanitizer's memcheck sees a stray access). A twin's runs keep its static
    batch dim (fixed_batch) and round each N down to its n_multiple (the only calls it serves)."""
    _, _, mb, nb, k = fn["sizes"]
    pairs = [(mb, nb), (mb - 1, nb - 3), (max(1, mb // 2 + 3), max(1, nb // 2 + 3)), (min(mb, 17), min(nb, 17)),
             (max(1, mb - 5), max(1, nb // 3 + 1))]
    b0, b1 = (2, 3) if mb * nb <= 512 * 512 else (1, 2)  # the FP64 reference's time grows with the bound
    if fn.get("fixed_batch"):
        dim, value = fn["fixed_batch"]
        b0, b1 = (value, b1 * b0) if dim == 0 else (b0, value)
    q = fn.get("n_multiple") or 1
    out = []
    for m, n in pairs:
        n = n // q * q
        if (b0, b1, m, n, k) not in out and m >= 1 and n >= 1:
            out.append((b0, b1, m, n, k))
    return out


def sizes_of(fn: dict) -> list:
    """The sizes (b0, b1, M, N, K) a manifest function is checked at."""
    if fn.get("split"):  # FusedAttention's split-N kernels: rows of one tile (a step's one row), N a partial chunk
        hs, rows = fn["head_size"], fn["split"][0]
        return [(2, 3, min(9, rows), 136, hs), (1, 2, 1, 520, hs)]
    if fn.get("head_size") and fn.get("op") == "FusedAttention":  # the tensor-core kernels: a partial tile and
        hs = fn["head_size"]                      # chunk; causal tiles that skip columns; N % 16 = 8 and 0 (a bias
        return [(2, 3, 77, 136, hs), (1, 2, 200, 208, hs)]  # or a bool mask staged in 16-byte runs, or read in place)
    if fn.get("head_size"):  # FusedGemmSoftmax's: the same, and each width of P's stores (N % 8, 4, 2, odd)
        hs, q = fn["head_size"], fn.get("n_multiple") or 1
        return [s for s in ((2, 3, 77, 136, hs), (1, 2, 200, 200, hs), (1, 2, 130, 1500, hs), (1, 2, 70, 1030, hs),
                            (1, 2, 90, 197, hs)) if s[3] % q == 0]
    return _any_length_sizes(fn) if fn.get("any_length") else [_sizes(fn)]


SPLIT_WAYS = (2, 13)  # the splits a split-N kernel is checked in
SPECIAL_ROWS = 4  # rows of the first batches that poke_special_values writes into (the last batch takes B's NaN)


def poke_special_values(a, b, bias, mask, trans_b: bool) -> list:
    """Write NaN and +inf into a few rows of the inputs (in place), one case a row, so that one run of a kernel
    checks the special-value contract (README) beside the ordinary rows; returns what was poked, for the report.

    Flat row r of the first batches (b0, b1, i in row-major order), the last batch left to the B poke:
      row 0: NaN in A (with a mask, the row is fully masked: it must stay zeros, a masked logit is never read);
      row 1: NaN in A: the row is NaN;
      row 2: +inf in the bias (or in A without one): NaN row, as PyTorch's softmax of a +inf logit;
      row 3: NaN in the additive mask (or the bias) at one column: NaN row unless that column is masked;
    and, with two batches or more, NaN in one column of the last batch's B (the last column: with causal, masked for
    every row but the last ones): every row of that batch that does not mask the column is NaN."""
    b0, b1, m, k = a.shape
    rows = [(r // (b1 * m), (r // m) % b1, r % m) for r in range(min(SPECIAL_ROWS, b0 * b1 * m - m))]
    if not rows or k == 0:
        return []
    poked = []

    def put(arr, idx, value, what):
        arr[tuple(min(i, s - 1) if s else i for i, s in zip(idx, arr.shape))] = value  # broadcast dims: index 0
        poked.append(what)

    for r, (x0, x1, i) in enumerate(rows):
        if r in (0, 1):
            put(a, (x0, x1, i, 0), np.nan, f"A[{x0},{x1},{i},0]=nan")
        elif r == 2:
            put(bias if bias is not None else a, (x0, x1, i, 0), np.inf, f"{'bias' if bias is not None else 'A'}"
                f"[{x0},{x1},{i},0]=inf")
        elif r == 3 and mask is not None and mask.dtype != np.bool_:
            put(mask, (x0, x1, i, 1), np.nan, f"mask[{x0},{x1},{i},1]=nan")
        elif r == 3 and bias is not None:
            put(bias, (x0, x1, i, 1), np.nan, f"bias[{x0},{x1},{i},1]=nan")
    if b0 * b1 >= 2:
        n = b.shape[2] if trans_b else b.shape[3]
        put(b, (b0 - 1, b1 - 1, n - 1, 0) if trans_b else (b0 - 1, b1 - 1, 0, n - 1), np.nan,
            f"B column {n - 1} of batch [{b0 - 1},{b1 - 1}]=nan")
    return poked


def compare(out: np.ndarray, ref: np.ndarray) -> tuple:
    """(max abs error over the elements finite in both, whether the NaNs are exactly where the reference has them).
    An infinity, or a NaN where the reference has a number (or a number where it has NaN), fails the check."""
    nan_ok = bool(np.array_equal(np.isnan(out), np.isnan(ref))) and not np.isinf(out).any()
    both = np.isfinite(out) & np.isfinite(ref)
    err = float(np.abs(out[both] - ref[both]).max()) if both.any() else 0.0
    return err, nan_ok


def inputs(fn: dict, sizes: tuple, seed: int = 0) -> tuple:
    """(a, b, bias, mask, scale) for a manifest function at sizes (b0, b1, M, N, K): random normal A and B, a bias
    where the variant has one, a random mask (with a fully masked row) where it has one, and the function's scale
    (a scale-specialized twin's own, else 1 / sqrt(K))."""
    b0, b1, m, n, k = sizes
    nd = _np_dtype(fn["dtype"])
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
    elif fn["mask"] in BOOL_MASK_KINDS:
        mask = rng.random((b0, b1, m, n)) > 0.2
        mask[0, 0, 0, :] = False
    scale = fn["scale"] if fn.get("scale") is not None else k ** -0.5
    return a, b, bias, mask, scale


def device_args(dev, a, b, bias, mask) -> list:
    """The kernel's tensor arguments on `dev`, P last (uninitialized)."""
    args = [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)]
    if bias is not None:
        args.append(tvm.runtime.tensor(bias, dev))
    if mask is not None:
        args.append(tvm.runtime.tensor(mask.astype(np.uint8) if mask.dtype == np.bool_ else mask, dev))
    return args


def check_function(mod, fn: dict, dev, seed: int = 0, sizes: Optional[tuple] = None) -> dict:
    """Run one manifest function (at `sizes`, default its first of sizes_of) on random inputs with special values
    poked into a few rows (poke_special_values; a FusedAttention kernel with zero_nan_rows 0 and 1); returns {name,
    sizes, max_abs_err, nan_ok, poked, nan_rows, ok, kind}."""
    b0, b1, m, n, k = sizes = sizes or sizes_of(fn)[0]
    dtype = fn["dtype"]
    attention = fn.get("op", "FusedGemmSoftmax") == "FusedAttention"
    a, b, bias, mask, scale = inputs(fn, sizes, seed)
    poked = poke_special_values(a, b, bias, mask, bool(fn["trans_b"]))
    args = device_args(dev, a, b, bias, mask)
    if attention:
        d = fn.get("head_size") or ATTENTION_GENERIC_D
        v = np.random.default_rng(seed + 1).standard_normal((b0, b1, n, d)).astype(_np_dtype(dtype))
        v[0, 0, n - 1, min(1, d - 1)] = np.nan
        poked.append(f"V[0,0,{n - 1},{min(1, d - 1)}]=nan")
        args.insert(2, tvm.runtime.tensor(v, dev))
    kw = dict(scale=scale, trans_b=bool(fn["trans_b"]), causal=bool(fn["causal"]),
              mask_fill=MASK_FILL[dtype] if fn["mask"] == "fill" else None,
              causal_fill=FILL_LOGIT[dtype] if fn.get("causal_fill") else None)
    # FusedAttention: both ways of its zero_nan_rows argument, NaN rows kept (the reference's NaN rows) and zeroed;
    # a kernel specialized on one (manifest "zero_nan_rows") that one, with the other passed: it must be ignored. A
    # split-N kernel runs in 2 splits and in SPLIT_WAYS[1] (past N's chunks: empty splits too)
    err, nan_ok, nan_rows = 0.0, True, None
    ways = (None,) if not attention else (0, 1) if fn.get("zero_nan_rows") is None else (fn["zero_nan_rows"],)
    for zero_nan_rows, splits in itertools.product(ways, SPLIT_WAYS if fn.get("split") else (None,)):
        out = tvm.runtime.empty((b0, b1, m, d if attention else n), dtype, dev)
        passed = () if zero_nan_rows is None else (zero_nan_rows if fn.get("zero_nan_rows") is None else
                                                   1 - zero_nan_rows,)
        work = () if splits is None else (tvm.runtime.empty((splits, b0, b1, m * (d + 2)), "float32", dev),)
        mod[fn["name"]](*args, out, *work, np.float32(scale), *passed)
        out = out.numpy().astype(np.float64)
        ref = (fused_attention_ref(a, b, v, bias, mask, zero_nan_rows=bool(zero_nan_rows), **kw) if attention
               else fused_gemm_softmax_ref(a, b, bias, mask, **kw))
        e, ok = compare(out, ref)
        err, nan_ok = max(err, e), nan_ok and ok
        if not zero_nan_rows or nan_rows is None:  # (the reference's NaN rows, counted where they are kept)
            nan_rows = int(np.isnan(ref).all(axis=-1).sum())
    return {"name": fn["name"], "kind": fn.get("schedule", "tuned" if fn.get("tuned") else "generic"),
            "sizes": [b0, b1, m, n, k], "max_abs_err": err, "nan_ok": nan_ok, "poked": poked,
            "nan_rows": nan_rows, "ok": err <= ATOL[dtype] and nan_ok}


def check_bundle(bundle_dir, only: Optional[str] = None, log: Callable = print) -> list:
    """Every function of the bundle's manifest (or those whose name the regular expression `only` matches somewhere
    in; a plain substring works as one), in manifest order."""
    bundle_dir = Path(bundle_dir)
    manifest_path = bundle_dir / MANIFEST
    if not manifest_path.exists():
        raise FileNotFoundError(f"{manifest_path} is missing "
                                f"(build the bundle first: flashgemm-build --out {bundle_dir})")
    rebuild = f"rebuild the bundle: flashgemm-build --out {bundle_dir}"
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError as err:
        raise ValueError(f"{manifest_path} is not valid JSON: {err} ({rebuild})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("functions"), list):
        raise ValueError(f"{manifest_path} is not a bundle manifest: no list of functions ({rebuild})")
    libraries = kernel_libraries(bundle_dir) if "kernels" in manifest else [bundle_dir / KERNELS_SO]
    for path in libraries:
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing (build the bundle first: flashgemm-build --out {bundle_dir})")
    dev = tvm.cuda(0) if manifest.get("device") == "cuda" else tvm.cpu(0)
    if manifest.get("device") == "cuda" and not dev.exist:
        raise RuntimeError(f"{bundle_dir} is a CUDA bundle ({manifest.get('target')}) and no GPU is visible here "
                           f"(run it on the GPU machine the bundle is for)")
    for so in libraries:
        problem = elf_problem(so)  # dlopen of a truncated library dies of SIGBUS rather than raising
        if problem:
            raise ValueError(f"corrupt kernel library {so}: {problem} ({rebuild})")
    mod = KernelLibraries(libraries)
    results = []
    for fn in manifest["functions"]:
        if only and not re.search(only, fn["name"]):
            continue
        if fn.get("op") == "FusedAttention" and manifest.get("format", 1) < 3:
            log(f"skip {fn['name']}: a FusedAttention kernel of manifest format {manifest.get('format')}, without the "
                f"zero_nan_rows argument, which the op library leaves out ({rebuild})")
            continue
        for sizes in sizes_of(fn):
            res = check_function(mod, fn, dev, sizes=sizes)
            results.append(res)
            log(f"{'ok  ' if res['ok'] else 'FAIL'} {res['name']:60s} {res['kind']:8s} "
                f"{'x'.join(map(str, res['sizes'])):22s} max abs err {res['max_abs_err']:.2e}  "
                f"NaN rows {res['nan_rows']} {'as expected' if res['nan_ok'] else 'WRONG'}")
    return results
