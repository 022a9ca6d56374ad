"""Accuracy table of the fused op: per dtype and variant, how far our kernel's P is from exact, and from what
ONNX Runtime computes in FP32 (python -m benchmarks.bench_accuracy is the front end).

Protocol, per case (a workload spec, a dtype and a way to fill its mask):
  * inputs: A, B (and bias) random normal, drawn in float64 and rounded once to fp16/bf16; additive masks mix
    0, legal finite values, -65504, -1e9 (-inf once rounded to fp16, finite in bf16) and -inf; bool masks keep
    80%. Every comparison below uses these very rounded inputs, so input rounding is not counted as error.
  * ours: the kernel a bundle of the target serves for the workload, built here and called directly on the
    canonical 4-D operands (run_ours: numpy feeds -> numpy P, one implementation per target kind).
    llvm: the workload's tuned kernel from flashgemm/databases/llvm when there is one, else the generic kernel of its
    variant (what the CPU EP's bundle holds), broadcast operands materialised. CUDA: benchmarks.peers.our_kernel, kind
    "best" (tuned, else the default tensor-core schedule, else generic) on stride-0 torch views, as the op passes them.
    Each row records which kernel served it.
  * FP64 reference: flashgemm.op.reference.fused_gemm_softmax_ref on the rounded inputs upcast to float64 (the
    operator's contract: masked elements are exactly 0, a fully masked row is all zeros).
  * ORT FP32 golden: the unfused ONNX graph [Transpose] -> MatMul -> Mul(scale) -> [Add(bias)] -> [Add(mask) |
    Where(mask, S, -inf)] -> [Where(causal, S, -inf)] -> Softmax(-1), in float32 on onnxruntime's CPU EP, on the
    rounded inputs upcast to float32. It differs from the contract on fully masked rows (ORT's Softmax gives NaN
    for a row of -inf, and a uniform row where a bf16 mask holds finite -1e9): those rows are left out of the
    golden comparison and counted; the FP64 comparison keeps them (ours must write zeros there).

Error measures (P lies in [0, 1]):
  * max abs: max |P - ref| over all elements.
  * max rel: max |P - ref| / ref over elements with ref >= REL_FLOOR (1e-3); smaller probabilities are judged
    by the absolute error only (relative error of a near-zero value says nothing about the softmax).
  * output rounding: max |round_dtype(ref) - ref|, the least max abs error any kernel writing fp16/bf16 can have.
  * seed tolerance: numpy.testing.assert_allclose(golden, P, rtol=1e-3, atol=1e-4), i.e. |P - golden| <=
    atol + rtol * |golden| everywhere (on the rows compared); the "ratio" is the worst left/right side (> 1 fails).
    P is rounded to its dtype: a relative rounding error of up to 2^-11 (fp16) passes rtol=1e-3, up to 2^-8
    (bf16, ~3.9e-3) does not, so the seed tolerance cannot hold for bf16 wherever P is not tiny. The table says
    so per row instead of loosening it.
  * test tolerance: what the project's tests assert (tests/test_ort_op.py, tests/test_gpu_kernels.py,
    flashgemm-demo): max abs error vs the FP64 reference <= 2e-3 (fp16), 1.6e-2 (bf16), rtol 0.
"""
from __future__ import annotations

import dataclasses
import datetime
import platform
import re
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DTYPES = ("float16", "bfloat16")
REL_FLOOR = 1e-3  # max rel error is taken over elements whose reference is at least this
SEED_RTOL, SEED_ATOL = 1e-3, 1e-4  # the seed's assert_allclose(golden, actual, rtol=1e-3, atol=1e-4)
TEST_ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2}  # tests/test_ort_op.py, tests/test_gpu_kernels.py (rtol 0)
# Largest relative error of rounding to nearest: half an ulp, 2^-(significand bits)
OUTPUT_ROUNDING_REL = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


@dataclasses.dataclass(frozen=True)
class Case:
    """One row of the table: a workload spec without dtype, the dtype, and how to fill the mask.

    mask_fill: "keep80" (bool, 80% kept), "mixed" (additive: 0, finite values, -65504, -1e9, -inf) or
    "rows" (as "mixed", plus three fully masked rows; needs a 4-D mask with M >= 6)."""
    name: str
    spec: str
    dtype: str = "float16"
    mask_fill: str = "keep80"
    note: str = ""

    @property
    def workload(self):
        from flashgemm.op.workloads import parse  # noqa: PLC0415
        # no name: parse's custom-<sizes>-<digest>, the flashgemm/databases directory a flashgemm-tune run of the spec
        # writes
        return parse(self.spec, self.dtype)


def _heads(b, h, m, n, k, scale=None, extra=""):
    """Attention-score shapes (transB): A [b, h, m, k], B [b, h, n, k]; scale 1/sqrt(k) unless given."""
    scale = k ** -0.5 if scale is None else scale
    return f"a={b}x{h}x{m}x{k},b={b}x{h}x{n}x{k},transB=1,scale={scale!r}" + (f",{extra}" if extra else "")


# Small shapes (the llvm table runs in CI on 2 cores); each variant of the op, and the odd sizes.
CASE_TEMPLATES = (
    Case("plain", _heads(2, 4, 64, 64, 32), note="transB, scale 1/sqrt(K)"),
    Case("peaked", _heads(2, 4, 64, 64, 32, scale=1.0),
         note="scale 1: logits of std sqrt(K) ~ 5.7, P near 1 in many rows"),
    Case("bias", _heads(2, 4, 64, 64, 32, extra="bias=1x4x64x64"), note="bias broadcast over the batch"),
    Case("addmask", _heads(2, 4, 64, 64, 32, extra="mask=2x1x64x64:add"), mask_fill="mixed",
         note="additive mask with -inf/-1e9/-65504 and finite entries"),
    Case("boolmask", _heads(2, 4, 64, 64, 32, extra="mask=2x1x1x64:bool"), note="padding mask [B,1,1,N]"),
    Case("causal-m48n80", _heads(2, 2, 48, 80, 32, extra="causal=1"), note="bottom-right aligned"),
    Case("causal-m80n48", _heads(2, 2, 80, 48, 32, extra="causal=1"),
         note="bottom-right aligned: the first M-N rows are fully masked"),
    Case("transB0", "a=2x3x40x24,b=2x3x24x56,transB=0,scale=0.2", note="B is [K, N]"),
    Case("m197", _heads(1, 2, 197, 197, 64), note="ViT-B/16 sequence: M = N = 197, K = 64"),
    Case("k1", "a=2x2x33x1,b=2x2x1x40,transB=0,scale=1.0"),
    Case("m1", _heads(2, 4, 1, 300, 64)),
    Case("masked-rows", _heads(2, 2, 16, 48, 32, extra="mask=2x2x16x48:add"), mask_fill="rows",
         note="3 fully masked rows: all -inf, all -1e9 (finite in bf16), a mix"),
)
CASE_NAMES = tuple(c.name for c in CASE_TEMPLATES)


def default_cases(dtypes: Sequence[str] = DTYPES, names: Optional[Iterable[str]] = None) -> list[Case]:
    """Every case template (or those named) for each dtype, dtype-major."""
    names = list(names) if names is not None else list(CASE_NAMES)
    unknown = sorted(set(names) - set(CASE_NAMES))
    if unknown:
        raise ValueError(f"unknown cases {unknown} (choose from {', '.join(CASE_NAMES)})")
    return [dataclasses.replace(c, dtype=d) for d in dtypes for c in CASE_TEMPLATES if c.name in names]


# ----------------------------------------------------------------------------- inputs
def np_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes  # noqa: PLC0415
        return ml_dtypes.bfloat16
    return np.dtype(np.float16)


def make_feeds(wl, mask_fill: str = "keep80", seed: int = 0) -> dict:
    """Numpy inputs in the workload's dtype (bool for bool masks), drawn in float64 and rounded once."""
    rng = np.random.default_rng(seed)
    nd = np_dtype(wl.dtype)
    feeds = {"A": rng.standard_normal(wl.a_shape).astype(nd), "B": rng.standard_normal(wl.b_shape).astype(nd)}
    if wl.bias_shape is not None:
        feeds["bias"] = rng.standard_normal(wl.bias_shape).astype(nd)
    if wl.mask_kind == "bool":
        feeds["mask"] = rng.random(wl.mask_shape) > 0.2
    elif wl.mask_kind == "add":
        # 0 (kept), legal finite offsets, then values that mask out: fp16's lowest, -1e9 (fp16: overflows to -inf
        # on rounding; bf16: stays finite) and -inf
        choices = np.array([0.0, -65504.0, -1e9, -np.inf])
        pick = rng.choice(len(choices) + 1, size=wl.mask_shape, p=[0.55, 0.05, 0.1, 0.1, 0.2])
        values = np.where(pick == len(choices), -3.0 * rng.random(wl.mask_shape),
                          choices[np.minimum(pick, len(choices) - 1)])
        if mask_fill == "rows":  # whole rows masked: all -inf, all -1e9, and a mix of both
            values[0, 0, 0, :] = -np.inf
            values[0, -1, 3, :] = -1e9
            values[-1, 0, 5, :] = np.where(np.arange(values.shape[-1]) % 2, -np.inf, -1e9)
        with np.errstate(over="ignore"):
            feeds["mask"] = values.astype(nd)
    return feeds


def reference(wl, feeds) -> np.ndarray:
    """FP64 P of the contract, on the (rounded) feeds."""
    from flashgemm.op.reference import fused_gemm_softmax_ref  # noqa: PLC0415
    return fused_gemm_softmax_ref(feeds["A"], feeds["B"], feeds.get("bias"), feeds.get("mask"), scale=wl.scale,
                                  trans_b=wl.trans_b, causal=wl.causal)


# ----------------------------------------------------------------------------- ORT FP32 golden
def golden_model(wl):
    """The unfused float32 ONNX graph of the workload (module doc)."""
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

    from flashgemm.ort.model import IR_VERSION, OPSET  # noqa: PLC0415
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("A", f32, list(wl.a_shape)),
              helper.make_tensor_value_info("B", f32, list(wl.b_shape))]
    inits = [numpy_helper.from_array(np.array(wl.scale, np.float32), "scale")]
    if wl.mask_kind == "bool" or wl.causal:
        inits.append(numpy_helper.from_array(np.array(-np.inf, np.float32), "neg_inf"))
    nodes, b, x = [], "B", "S"
    if wl.trans_b:
        perm = list(range(len(wl.b_shape)))
        perm[-2:] = perm[-1], perm[-2]
        nodes.append(helper.make_node("Transpose", ["B"], ["Bt"], perm=perm))
        b = "Bt"
    nodes += [helper.make_node("MatMul", ["A", b], ["S"]), helper.make_node("Mul", ["S", "scale"], ["Ss"])]
    x = "Ss"
    if wl.bias_shape is not None:
        inputs.append(helper.make_tensor_value_info("bias", f32, list(wl.bias_shape)))
        nodes.append(helper.make_node("Add", [x, "bias"], ["Sb"]))
        x = "Sb"
    if wl.mask_kind == "add":
        inputs.append(helper.make_tensor_value_info("mask", f32, list(wl.mask_shape)))
        nodes.append(helper.make_node("Add", [x, "mask"], ["Sm"]))
        x = "Sm"
    elif wl.mask_kind == "bool":
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, list(wl.mask_shape)))
        nodes.append(helper.make_node("Where", ["mask", x, "neg_inf"], ["Sm"]))
        x = "Sm"
    if wl.causal:
        c = wl.canonical
        keep = np.arange(c.n)[None, :] <= np.arange(c.m)[:, None] + (c.n - c.m)  # bottom-right aligned
        inits.append(numpy_helper.from_array(keep, "causal_keep"))
        nodes.append(helper.make_node("Where", ["causal_keep", x, "neg_inf"], ["Sc"]))
        x = "Sc"
    nodes.append(helper.make_node("Softmax", [x], ["P"], axis=-1))
    graph = helper.make_graph(nodes, "golden_fp32", inputs, [helper.make_tensor_value_info("P", f32, None)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def golden(wl, feeds) -> np.ndarray:
    """ORT's FP32 P (CPU EP) on the rounded feeds upcast to float32, as float64."""
    import onnxruntime as ort  # noqa: PLC0415
    sess = ort.InferenceSession(golden_model(wl).SerializeToString(), providers=["CPUExecutionProvider"])
    f32 = {k: v if v.dtype == np.bool_ else v.astype(np.float32) for k, v in feeds.items()}
    (p,) = sess.run(["P"], f32)
    return p.astype(np.float64)


# ----------------------------------------------------------------------------- our kernel
def _torch_of(array: np.ndarray):
    """CPU torch tensor of a numpy array, bf16 included (torch.from_numpy does not know ml_dtypes)."""
    import torch  # noqa: PLC0415
    if array.dtype == np_dtype("bfloat16"):
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array))


def _numpy_of(tensor) -> np.ndarray:
    import torch  # noqa: PLC0415
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np_dtype("bfloat16"))
    return tensor.numpy()


def _canonical_operands(wl, feeds: dict) -> list:
    """The kernel's tensor arguments on the CPU as compact canonical 4-D numpy arrays, broadcast dims materialised
    (as tests/test_gpu_kernels.py passes them: tvm.runtime.tensor takes no stride-0 views, and numpy's DLPack
    export knows no bf16). The kernel reads the same values as through the op's stride-0 views; those views are
    what tests/test_ort_op.py exercises through ORT, and the CUDA path (benchmarks.peers) passes."""
    c = wl.canonical
    batch = c.out_shape[:-2]
    b_rows = (c.n, c.k) if wl.trans_b else (c.k, c.n)

    def four(x, rows_cols, shape4):
        # broadcasting to the full batch shape, then merging the batch dims into (B0, B1): canonicalize only drops
        # size-1 dims and merges neighbours, so B0 * B1 is the batch's product, in order
        return np.ascontiguousarray(np.broadcast_to(x, (*batch, *rows_cols))).reshape(shape4)
    out = [four(feeds["A"], (c.m, c.k), (c.b0, c.b1, c.m, c.k)),
           four(feeds["B"], b_rows, (c.b0, c.b1, *b_rows))]
    for name in ("bias", "mask"):
        if name in feeds:
            x = feeds[name].astype(np.uint8) if feeds[name].dtype == np.bool_ else feeds[name]
            out.append(four(x, (c.m, c.n), (c.b0, c.b1, c.m, c.n)))
    return out


_LLVM_GENERIC: dict = {}  # variant key -> compiled generic kernel (it serves every shape of its variant)


def _llvm_kernel(wl, db_root):
    """(compiled function, which kernel) for the CPU EP: the workload's tuned llvm kernel if its database
    exists, else the generic kernel of its variant."""
    import tvm  # noqa: PLC0415

    from flashgemm.bundle.kernel_library import generic_schedule  # noqa: PLC0415
    from flashgemm import targets  # noqa: PLC0415
    from flashgemm.kernel.fused_gemm_softmax import runtime_func  # noqa: PLC0415
    from flashgemm.bundle import best  # noqa: PLC0415
    from flashgemm.tune import database
    target = targets.tvm_target("llvm")
    wl_dir = database.workload_dir(db_root or database.default_root(), "llvm", wl.dir_name)
    if (wl_dir / database.PROVENANCE).exists():
        tk = best.load_tuned(wl_dir, "llvm")
        with target:
            fn = tvm.compile(tk.schedule.mod, target=target)["main"]
        return fn, f"tuned ({wl_dir.name}, {tk.run_secs * 1e6:.1f} us when tuned)"
    key = wl.variant.key
    if key not in _LLVM_GENERIC:
        with target:
            _LLVM_GENERIC[key] = tvm.compile(generic_schedule("llvm", runtime_func(wl.variant)).mod,
                                             target=target)["main"]
    return _LLVM_GENERIC[key], "generic (untuned)"


def our_runner(wl, target_name: str, db_root=None, log: Callable = print, kind: str = "best"):
    """(run_ours, which kernel): run_ours(numpy feeds) -> numpy P in the workload's dtype, computed by the kernel
    the target's bundle serves for `wl`. llvm: see _llvm_kernel (kind must be "best"); CUDA:
    benchmarks.peers.our_kernel(kind)."""
    from flashgemm import targets  # noqa: PLC0415
    if targets.is_cuda(target_name):
        import torch  # noqa: PLC0415

        from benchmarks.peers import our_kernel  # noqa: PLC0415
        prepare, which = our_kernel(wl, target_name, db_root, log, kind)

        def run_ours(feeds):
            on_gpu = {k: _torch_of(v).cuda() for k, v in feeds.items()}
            p = prepare(on_gpu)()
            torch.cuda.synchronize()
            return _numpy_of(p)
        return run_ours, which
    if kind != "best":
        raise ValueError(f"kernel kind {kind!r}: on llvm only 'best' (tuned if in the database, else generic)")
    import tvm  # noqa: PLC0415
    fn, which = _llvm_kernel(wl, db_root)
    c = wl.canonical

    def run_ours(feeds):
        dev = tvm.cpu(0)
        args = [tvm.runtime.tensor(x, dev) for x in _canonical_operands(wl, feeds)]
        p = tvm.runtime.empty((c.b0, c.b1, c.m, c.n), wl.dtype, dev)
        fn(*args, p, float(wl.scale))
        return p.numpy().reshape(c.out_shape)
    return run_ours, which


# ----------------------------------------------------------------------------- errors
def _num(x: float):
    """A float for JSON, or 'inf'/'nan' as a string (strict JSON has neither)."""
    x = float(x)
    return x if np.isfinite(x) else str(x)


def _abs_rel(p: np.ndarray, ref: np.ndarray, rows: np.ndarray) -> tuple[float, float]:
    """max |p - ref| and max |p - ref| / ref (ref >= REL_FLOOR) over the selected rows; a non-finite p is an
    infinite error."""
    p, ref = p[rows], ref[rows]
    err = np.where(np.isfinite(p), np.abs(p - ref), np.inf)
    big = ref >= REL_FLOOR
    return (float(err.max()) if err.size else 0.0,
            float((err[big] / ref[big]).max()) if big.any() else 0.0)


def compare(p, ref: np.ndarray, golden_p: np.ndarray, dtype: str) -> dict:
    """The error measures of one P (module doc). p: ours in its dtype (or any float array), ref: FP64 reference,
    golden_p: ORT's FP32 result. Fully masked rows (ref all zero) are compared with ref, not with the golden."""
    p = np.asarray(p).astype(np.float64)
    full = np.ones(ref.shape[:-1], dtype=bool)
    live = ref.sum(axis=-1) > 0  # rows the contract does not mask out entirely
    abs_ref, rel_ref = _abs_rel(p, ref, full)
    rounded_ref = ref.astype(np_dtype(dtype)).astype(np.float64)
    abs_gold, rel_gold = _abs_rel(p, golden_p, live)
    rounding = float(np.abs(rounded_ref - ref).max()) if ref.size else 0.0
    with np.errstate(invalid="ignore"):
        excess = np.abs(p[live] - golden_p[live]) / (SEED_ATOL + SEED_RTOL * np.abs(golden_p[live]))
    excess = np.where(np.isfinite(excess), excess, np.inf)
    seed_ratio = float(excess.max()) if excess.size else 0.0
    dead = golden_p[~live]  # [rows, N]: what ORT writes where the contract writes zeros
    nan_rows = np.isnan(dead).any(axis=-1)
    golden_dead = {"nan": int(nan_rows.sum()), "nonzero": int((~nan_rows & (dead != 0).any(axis=-1)).sum()),
                   "zero": int((~nan_rows & ~(dead != 0).any(axis=-1)).sum())}
    golden_err = _abs_rel(golden_p, ref, live)[0]
    return {
        "nonfinite": int((~np.isfinite(p)).sum()),
        "fully_masked_rows": int((~live).sum()),
        "vs_fp64": {"max_abs": _num(abs_ref), "max_rel": _num(rel_ref), "output_rounding_max_abs": _num(rounding),
                    # 0 where every element of P is the correctly rounded exact value
                    "max_abs_vs_rounded": _num(_abs_rel(p, rounded_ref, full)[0]),
                    "test_atol": TEST_ATOL[dtype], "test_pass": bool(abs_ref <= TEST_ATOL[dtype])},
        "vs_ort_fp32": {"max_abs": _num(abs_gold), "max_rel": _num(rel_gold), "rows_compared": int(live.sum()),
                        "seed_ratio": _num(seed_ratio), "seed_pass": bool(seed_ratio <= 1.0),
                        "golden_on_fully_masked_rows": golden_dead,
                        "golden_max_abs_vs_fp64": _num(golden_err)},
    }


# ----------------------------------------------------------------------------- the table
def tolerances() -> dict:
    return {
        "reference": "flashgemm.op.reference.fused_gemm_softmax_ref in float64 on the rounded inputs",
        "golden": "unfused ONNX graph in float32 on onnxruntime's CPUExecutionProvider, same rounded inputs",
        "max_rel": f"max |P - ref| / ref over elements with ref >= {REL_FLOOR:g}",
        "rel_floor": REL_FLOOR,
        "seed": {"rtol": SEED_RTOL, "atol": SEED_ATOL, "against": "ORT FP32 golden",
                 "check": "numpy.testing.assert_allclose(golden, P, rtol, atol) on rows not fully masked",
                 "applies": {d: OUTPUT_ROUNDING_REL[d] <= SEED_RTOL for d in DTYPES},
                 "why": "P is rounded to its dtype: half an ulp is 2^-11 relative for fp16 (within rtol 1e-3) and "
                        "2^-8 for bf16 (~3.9e-3 > rtol 1e-3), so bf16 cannot meet the seed tolerance where P is "
                        "not tiny; the project's tests use absolute tolerances against the FP64 reference instead "
                        "(fp16 2e-3, bf16 1.6e-2, rtol 0)"},
        "tests": {d: {"atol": TEST_ATOL[d], "rtol": 0.0, "against": "FP64 reference (max abs error of P)",
                      "where": "tests/test_ort_op.py, tests/test_gpu_kernels.py, flashgemm-demo"} for d in DTYPES},
        "output_rounding_rel": OUTPUT_ROUNDING_REL,
        "fully_masked_rows": "the contract gives zeros; ORT's Softmax gives NaN (all -inf) or a uniform row "
                             "(finite -1e9, bf16): compared with the FP64 reference only",
    }


def environment(target_name: str) -> dict:
    import onnxruntime as ort  # noqa: PLC0415
    import tvm  # noqa: PLC0415

    from flashgemm import targets  # noqa: PLC0415
    from . import commit_id  # noqa: PLC0415
    commit = commit_id()
    env = {"target": target_name, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit, "host": platform.node(), "tvm": tvm.__version__, "onnxruntime": ort.__version__,
           "numpy": np.__version__}
    if targets.is_cuda(target_name):
        from benchmarks.peers import gpu_info  # noqa: PLC0415
        env.update(gpu_info())
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


def accuracy_table(target_name: str, cases: Optional[Sequence[Case]] = None, log: Callable = print,
                   db_root=None, seed: int = 0) -> dict:
    """Run every case (default: default_cases()) with our kernel for `target_name` and return
    {"env", "tolerances", "rows"}. A case whose kernel fails to build or run gets a row with "error"."""
    from flashgemm import targets  # noqa: PLC0415
    target_name = targets.resolve(target_name)
    cases = default_cases() if cases is None else list(cases)
    rows = []
    for case in cases:
        wl = case.workload
        row = {"case": case.name, "dtype": case.dtype, "spec": wl.spec(), "variant": wl.variant.key,
               "sizes": list(wl.canonical.sizes), "note": case.note}
        feeds = make_feeds(wl, case.mask_fill, seed)
        try:
            run_ours, row["kernel"] = our_runner(wl, target_name, db_root, log)
            p = run_ours(feeds)
        except Exception as err:  # noqa: BLE001  (one case's failure must not hide the others' numbers)
            row["error"] = str(err).strip().splitlines()[-1][:300] if str(err).strip() else type(err).__name__
            log(f"{case.dtype:8s} {case.name:12s} FAILED: {row['error']}")
            rows.append(row)
            continue
        row.update(compare(p, reference(wl, feeds), golden(wl, feeds), case.dtype))
        f, g = row["vs_fp64"], row["vs_ort_fp32"]
        log(f"{case.dtype:8s} {case.name:12s} abs {_e(f['max_abs'])} rel {_e(f['max_rel'])} | vs ORT fp32 abs "
            f"{_e(g['max_abs'])} seed {'pass' if g['seed_pass'] else 'FAIL'} | {row['kernel']}")
        rows.append(row)
    return {"env": environment(target_name), "tolerances": tolerances(), "rows": rows}


def _e(x) -> str:
    return f"{x:.1e}" if isinstance(x, float) else str(x)


def _worst(values) -> str:
    """The largest of floats and 'inf'/'nan' strings, formatted."""
    values = [float(v) for v in values]
    return _e(max(values, key=lambda v: np.inf if np.isnan(v) else v)) if values else "—"


def _masked_rows(row) -> str:
    g = row["vs_ort_fp32"]["golden_on_fully_masked_rows"]
    if not row["fully_masked_rows"]:
        return "0"
    ort_says = ", ".join(f"{n} {what}" for what, n in (("NaN", g["nan"]), ("nonzero", g["nonzero"]),
                                                       ("zero", g["zero"])) if n)
    return f"{row['fully_masked_rows']} (ORT: {ort_says})"


def markdown(result: dict) -> str:
    env, tol = result["env"], result["tolerances"]
    where = env.get("gpu") or env.get("cpu") or ""
    done = [r for r in result["rows"] if "error" not in r]
    lines = [f"# Accuracy of P: target {env['target']} ({where}), commit {env.get('commit')}, {env['date']}", "",
             "Inputs are rounded to the dtype once; the FP64 NumPy reference and the golden (ORT FP32, unfused graph, "
             "CPU EP) both take those rounded inputs. max rel = max |err| / ref over ref >= "
             f"{tol['rel_floor']:g}. Output rounding = max error of rounding the exact P to the dtype, the floor for "
             f"any kernel. Seed = assert_allclose(golden, P, rtol={tol['seed']['rtol']:g}, "
             f"atol={tol['seed']['atol']:g}), worst |err| / (atol + rtol |golden|) in brackets (> 1 fails). "
             "Test = max abs vs FP64 <= the tests' atol (rtol 0).", ""]
    for dtype in DTYPES:
        mine = [r for r in done if r["dtype"] == dtype]
        if mine:
            lines.append(
                f"- {dtype}: worst max abs vs FP64 {_worst(r['vs_fp64']['max_abs'] for r in mine)} "
                f"(output rounding alone {_worst(r['vs_fp64']['output_rounding_max_abs'] for r in mine)}, test atol "
                f"{TEST_ATOL[dtype]:g}), worst max rel {_worst(r['vs_fp64']['max_rel'] for r in mine)} "
                f"(rounding bound {OUTPUT_ROUNDING_REL[dtype]:.1e}); seed tolerance holds in "
                f"{sum(r['vs_ort_fp32']['seed_pass'] for r in mine)}/{len(mine)} cases, test tolerance in "
                f"{sum(r['vs_fp64']['test_pass'] for r in mine)}/{len(mine)}"
                + ("" if tol["seed"]["applies"][dtype] else " (the seed rtol is below bf16's output rounding: "
                   "see the notes)"))
    lines += ["", "| dtype | case | kernel | max abs vs FP64 | max rel vs FP64 | output rounding | max abs vs ORT FP32 "
              "| max rel vs ORT FP32 | seed rtol 1e-3, atol 1e-4 | test atol | fully masked rows |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['dtype']} | {r['case']} | error: {r['error']} |" + " — |" * 8)
            continue
        f, g = r["vs_fp64"], r["vs_ort_fp32"]
        seed = f"{'pass' if g['seed_pass'] else '**FAIL**'} ({_ratio(g['seed_ratio'])})"
        test = f"{'pass' if f['test_pass'] else '**FAIL**'} ({f['test_atol']:g})"
        lines.append(f"| {r['dtype']} | {r['case']} | {r['kernel'].split(' (')[0]} | {_e(f['max_abs'])} | "
                     f"{_e(f['max_rel'])} | {_e(f['output_rounding_max_abs'])} | {_e(g['max_abs'])} | "
                     f"{_e(g['max_rel'])} | {seed} | {test} | {_masked_rows(r)} |")
    cases = {}  # name -> (spec without its dtype, note), in table order
    for r in result["rows"]:
        cases.setdefault(r["case"], (re.sub(r",dtype=[a-z0-9]+", "", r["spec"]), r.get("note")))
    lines += ["", "Notes:",
              "- Seed tolerance: " + tol["seed"]["why"] + ".",
              "- Fully masked rows: " + tol["fully_masked_rows"] + ".",
              "- Cases:"]
    lines += [f"  - {name}: `{spec}`" + (f" ({note})" if note else "") for name, (spec, note) in cases.items()]
    return "\n".join(lines) + "\n"


def _ratio(x) -> str:
    return f"{x:.2f}" if isinstance(x, float) else str(x)
