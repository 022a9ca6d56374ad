"""Any-length kernels (flashgemm/bundle/any_length.py): the kernel's any-length form computes the op at every M <= Mb,
N <= Nb (checked on the CPU against the FP64 reference, special values included), the models' symbolic sites are
found, and the CUDA kernels compile with their bounds guarded (compile-only here; tests/test_gpu_kernels.py and
flashgemm-check-bundle run them)."""
import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import commands
import pytest
import tvm

from compile_worker import run_compile_worker
from flashgemm.spaces import kernel_forms
from flashgemm.bundle.bundle_check import _any_length_sizes, compare, inputs, poke_special_values
from flashgemm.op.variant import Variant
from flashgemm.op.reference import fused_gemm_softmax_ref
from flashgemm.kernel.fused_gemm_softmax import runtime_func
from flashgemm.op.variant import canonicalize

DATA = Path(__file__).parent / "data"
VARIANTS = [Variant("float16", True), Variant("float16", True, True), Variant("float16", False, False, "add"),
            Variant("bfloat16", True, False, "bool", True), Variant("float16", True, True, "add", True)]


def _run_llvm(variant, bound, sizes, recompute=False, twin=None):
    """The any-length form (or its recompute form; twin: runtime_func's fixed_batch and n_multiple), unscheduled
    (serial loops), compiled for the CPU and run at `sizes`."""
    b0, b1, m, n, k = sizes
    shape = canonicalize((1, 1, bound[0], k), (1, 1, bound[1], k) if variant.trans_b else (1, 1, k, bound[1]),
                         variant.trans_b)
    func = runtime_func(variant, shape, any_batch=True, bound=bound, recompute=recompute, **(twin or {}))
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    fn = {"dtype": variant.dtype, "trans_b": int(variant.trans_b), "bias": int(variant.has_bias),
          "mask": variant.mask, "causal": int(variant.causal), "scale": None}
    a, b, bias, mask, scale = inputs(fn, sizes, seed=m * 31 + n)
    poked = poke_special_values(a, b, bias, mask, variant.trans_b)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(x, dev) for x in (a, b)]
    if bias is not None:
        args.append(tvm.runtime.tensor(bias, dev))
    if mask is not None:
        args.append(tvm.runtime.tensor(mask.astype(np.uint8) if mask.dtype == np.bool_ else mask, dev))
    p = tvm.runtime.empty((b0, b1, m, n), variant.dtype, dev)
    lib["main"](*args, p, np.float32(scale))
    ref = fused_gemm_softmax_ref(a, b, bias, mask, scale=scale, trans_b=variant.trans_b, causal=variant.causal)
    return p.numpy().astype(np.float64), ref, poked


RECOMPUTE_VARIANTS = [Variant("float16", True), Variant("bfloat16", True, causal=True), Variant("float16", False)]
FORMS = [(v, False) for v in VARIANTS] + [(v, True) for v in RECOMPUTE_VARIANTS + VARIANTS[1:]]


@pytest.mark.parametrize("variant,recompute", FORMS, ids=lambda x: x.key if isinstance(x, Variant) else
                         ("recompute" if x else "one-pass"))
def test_any_length_form_matches_the_reference_below_its_bound(variant, recompute):
    """The any-length form, and the recompute form over a bound (the kernel's padded recompute form with M and N
    symbolic): every length up to the bound, special values included."""
    bound = (48, 64)
    fn = {"sizes": [1, 1, *bound, 16]}
    for sizes in _any_length_sizes(fn):
        out, ref, poked = _run_llvm(variant, bound, sizes, recompute=recompute)
        err, nan_ok = compare(out, ref)
        assert nan_ok, f"{sizes}: NaN rows differ from the reference (poked {poked})"
        assert err <= (2e-3 if variant.dtype == "float16" else 1.6e-2), f"{sizes}: max abs err {err:.3g}"


def test_any_length_recompute_twin_matches_the_reference_at_the_calls_it_serves():
    """The twin of an any-length recompute kernel (flashgemm.bundle.best.ANY_LENGTH_TWIN: B0 = 1, P's column test for N
    a multiple of 4): every length up to the bound with N a multiple of 4, special values included (bundle_check's runs
    of a twin)."""
    from flashgemm.bundle.best import ANY_LENGTH_TWIN
    bound = (48, 64)
    fn = {"sizes": [1, 1, *bound, 16], "fixed_batch": list(ANY_LENGTH_TWIN["fixed_batch"]),
          "n_multiple": ANY_LENGTH_TWIN["n_multiple"]}
    runs = _any_length_sizes(fn)
    assert all(s[0] == 1 and s[3] % 4 == 0 for s in runs) and len(runs) >= 4
    for variant in (Variant("float16", True), Variant("bfloat16", True, causal=True)):
        for sizes in runs:
            out, ref, poked = _run_llvm(variant, bound, sizes, recompute=True, twin=ANY_LENGTH_TWIN)
            err, nan_ok = compare(out, ref)
            assert nan_ok, f"{sizes}: NaN rows differ from the reference (poked {poked})"
            assert err <= (2e-3 if variant.dtype == "float16" else 1.6e-2), f"{sizes}: max abs err {err:.3g}"
    with pytest.raises(ValueError, match="n_multiple"):
        runtime_func(Variant("float16", True), canonicalize((1, 1, 64, 16), (1, 1, 64, 16), True), any_batch=True,
                     bound=(64, 64), n_multiple=4)


def test_any_length_form_rejects_what_it_cannot_serve():
    shape = canonicalize((1, 1, 64, 40), (1, 1, 64, 40), True)
    with pytest.raises(ValueError, match="multiple of 16"):
        runtime_func(Variant("float16", True), shape, any_batch=True, bound=(64, 64))


def test_model_sites_with_symbolic_lengths_are_found():
    from flashgemm.ort.rewrite import model_any_length, workloads_of_models
    found = model_any_length(DATA / "bert-large-tiny-dyn.f16.onnx")
    assert found == [(Variant("float16", True, True, "none", False), 32, 2)]
    assert model_any_length(DATA / "bert-large-tiny.f16.onnx") == []
    with pytest.raises(ValueError, match="flashgemm-build --from-model builds any-length kernels"):
        workloads_of_models([str(DATA / "bert-large-tiny-dyn.f16.onnx")], log=lambda msg: None)
    assert workloads_of_models([str(DATA / "bert-large-tiny-dyn.f16.onnx")], log=lambda msg: None,
                               symbolic_ok=True) == []


def test_common_set_and_ladder():
    from flashgemm.bundle import any_length
    bounds = any_length.LENGTH_BOUNDS
    assert list(bounds) == sorted(bounds) and bounds[-1] >= 2048
    assert all(b % 32 == 0 and (b <= 64 or b % 64 == 0) for b in bounds)  # cuda_space._pad_factors: no re-padding
    assert all(hi / lo <= 2 for lo, hi in zip(bounds, bounds[1:])) and all(
        hi / lo <= 1.5 for lo, hi in zip(bounds, bounds[1:]) if lo >= 128)
    pairs = any_length.common()
    assert {k for _, k in pairs} == {32, 64, 80, 96, 128}
    assert {(v.has_bias, v.mask, v.causal) for v, _ in pairs} >= {(False, "none", False), (False, "add", False),
                                                                  (False, "bool", False), (True, "none", False),
                                                                  (False, "none", True)}


def test_kernels_made_in_worker_processes_are_the_kernels_made_here():
    """kernels_for makes its pairs in worker processes: what comes back (modules through JSON) is what one process
    makes, in the order asked, without the pairs a tuned any-length kernel already covers."""
    from flashgemm.bundle import any_length
    v16, vbf = any_length.COMMON_VARIANTS[0], any_length.COMMON_VARIANTS[5]
    requests = [(v16, 64), (vbf, 32), (v16, 64), (v16, 40)]  # a duplicate and an unserved K, both skipped
    here = any_length.kernels_for(requests, "sm_90", bounds=(32,), jobs=1, log=lambda *a: None)
    lines = []
    there = any_length.kernels_for(requests, "sm_90", bounds=(32,), jobs=2, log=lines.append)
    assert [tk.workload for tk in there] == [tk.workload for tk in here] == [
        f"any-length-{v16.key}-k64-32", f"any-length-{vbf.key}-k32-32"]
    for a, b in zip(here, there):
        assert dataclasses.replace(a, schedule=None, twin=None) == dataclasses.replace(b, schedule=None, twin=None)
        tvm.ir.assert_structural_equal(a.schedule.mod, b.schedule.mod)
        assert b.twin is None and a.twin is None  # no twin at so short a bound
    assert lines[-1].startswith("[build] any-length kernels, (variant, head size) pairs: 2 of 2 (")
    assert any_length.kernels_for(requests, "sm_90", bounds=(32,), jobs=2, tuned=here) == []


WORKER = r'''
import json, os, sys
sys.path.insert(0, ".")
from flashgemm.bundle.compile_worker import compile_module
from flashgemm.op.variant import Variant
from flashgemm.bundle import any_length
import tvm
out = []
for arch, dtype, trans_b, bias, mask, causal, k, bounds in json.loads(sys.argv[1]):
    v = Variant(dtype, trans_b, bias, mask, causal)
    for tk in any_length.default_kernels(v, k, arch, bounds, log=lambda m: None):
        mod = tvm.IRModule({"k": tk.shipped_func(tk.schedule, "k")})
        src = compile_module(mod, arch).mod.imports[0].inspect_source()
        os.environ["FLASHGEMM_DISABLE_PASSES"] = "skip_rows_past_m"
        src_unskipped = compile_module(mod, arch).mod.imports[0].inspect_source()
        del os.environ["FLASHGEMM_DISABLE_PASSES"]
        out.append({"arch": arch, "variant": v.key, "bound": list(tk.bound), "src": src,
                    "src_unskipped": src_unskipped})
print("RESULT" + json.dumps(out))
'''


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return run_compile_worker(WORKER, [["sm_90", "float16", True, True, "none", False, 32, [64, 192]],
                                       ["sm_80", "bfloat16", False, False, "add", True, 64, [128]]],
                              tmp_path_factory)


def test_cuda_kernels_guard_their_bounds(compiled):
    assert [(r["arch"], r["bound"]) for r in compiled] == [("sm_90", [64, 64]), ("sm_90", [192, 192]),
                                                           ("sm_80", [128, 128])]
    for r in compiled:
        src = r["src"]
        assert "mma" in src, "not a tensor-core kernel"
        assert re.search(r"< M\b", src) and re.search(r"< N\b", src), "the real lengths are not guarded"
        assert "_pred_" in src, "the global->shared copies are not predicated"
        # P's row stride is the runtime N: no vector store of P may assume it aligned
        assert not re.search(r"\*\(\(uint2\*\)\(P_ptr|\*\(\(half4\*\)\(P_ptr|\*\(\(float2\*\)\(P_ptr", src)


def test_skip_rows_changes_only_the_block_index(compiled):
    """flashgemm/codegen/tir/skip_rows_past_m remaps blockIdx.x over the row groups below M and nothing else: the same
    statements, barriers and warp shuffles as without it (once, its remapped bindings kept TVM from lowering the row
    statistics' cross-thread reduction, which then raced in shared memory: wrong on every call, invisible without a
    GPU)."""
    for r in compiled:
        on, off = r["src"], r["src_unskipped"]
        assert re.search(r"blockIdx\.x\) / \(\(M \+ 15\) >> 4\)", on), "the grid does not follow M's row groups"
        assert "M + 15" not in off
        for what in ("__syncthreads", "__shfl", "red_buf", "mma.sync", "cp.async"):
            assert on.count(what) == off.count(what), what
        assert on.count("\n") == off.count("\n")


def test_tuning_specs_of_a_dynamic_model():
    from flashgemm.bundle import any_length
    from flashgemm.ort.rewrite import any_length_requests
    reqs = any_length_requests([DATA / "bert-large-tiny-dyn.f16.onnx"], log=lambda msg: None, heads=True)
    specs = any_length.tuning_specs(reqs, [16, 100, 128, 5000])  # 5000: past the ladder, the generic kernel's
    assert [s.split("name=")[1] for s in specs] == [
        f"anylen-f16-tb1-bias1-masknone-causal0-k32-h2-len{b}" for b in (32, 128)]
    from flashgemm.op.workloads import parse
    wl = parse(specs[1])
    assert wl.any_length and wl.bound == (128, 128) and wl.canonical.sizes == (8, 2, 128, 128, 32)
    assert parse(wl.spec()) == dataclasses.replace(wl, name=parse(wl.spec()).name)
    # a long bound of a variant without bias or mask is tuned in the recompute form over the bound (its one form)
    (spec,) = any_length.tuning_specs([(Variant("float16", True), 64, 12)], [1500])
    (form,) = kernel_forms.forms(parse(spec), "sm_90")
    assert form.name == "any-length-recompute" and form.bound == (1536, 1536) and form.pad == (1536, 1536, 64)


def test_tune_py_on_llvm_says_the_generic_kernels_serve_symbolic_lengths(tmp_path):
    import subprocess
    import sys
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "flashgemm.cli.tune", "--target", "llvm", "--from-model",
                           str(DATA / "bert-large-tiny-dyn.f16.onnx"), "--db", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "generic kernels serve on the CPU" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.gpu
def test_tuned_any_length_kernel_serves_a_dynamic_model_at_every_length(tmp_path, monkeypatch, capfd):
    """The whole path on the GPU: flashgemm-tune --from-model on a dynamic export tunes the any-length kernel of its
    symbolic sites, flashgemm-build ships it with default ones for the other bounds, and the rewritten model runs on the
    tuned one at lengths up to its bound (any batch), matching the original model."""
    import subprocess
    import sys

    import onnxruntime as ort

    from flashgemm.ort import rewrite
    from flashgemm.ort.session import session_options
    repo = Path(__file__).resolve().parent.parent
    model = DATA / "bert-large-tiny-dyn.f16.onnx"
    db, out = tmp_path / "db", tmp_path / "bundle"
    from flashgemm import targets
    target = targets.resolve("auto")
    for cmd in (["tune", "--target", target, "--from-model", str(model), "--lengths", "16", "--trials", "8",
                 "--db", str(db)],
                ["build", "--target", target, "--db", str(db), "--out", str(out), "--any-length", "model",
                 "--from-model", str(model)]):
        proc = subprocess.run(commands.argv(cmd[0]) + cmd[1:], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{cmd[0]}: {proc.stderr[-3000:]}"
    manifest = json.loads((out / "manifest.json").read_text())
    bounded = sorted((f["sizes"][2], f["schedule"]) for f in manifest["functions"] if f.get("any_length"))
    assert bounded[:2] == [(32, "tuned"), (64, "default")], bounded
    fused = tmp_path / "fused.onnx"
    rewrite.rewrite_file(model, fused, log=lambda *a: None)
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    cuda = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    sess = ort.InferenceSession(str(fused), session_options(out), providers=cuda)
    original = ort.InferenceSession(str(model), providers=cuda)
    rng = np.random.default_rng(0)
    # (the tiny model takes at most 32 positions: the default kernels of the longer bounds serve no call of it)
    for batch, length, served in ((3, 16, "(tuned, any length <= 32x32)"), (1, 29, "(tuned, any length <= 32x32)"),
                                  (5, 1, "(tuned, any length <= 32x32)")):
        ids = rng.integers(1, 100, (batch, length), dtype=np.int64)
        mask = np.ones((batch, length), dtype=np.int64)
        mask[-1, max(1, length // 2):] = 0  # (never a fully padded sequence)
        feeds = {"input_ids": ids, "attention_mask": mask}
        capfd.readouterr()
        (got,) = sess.run(None, feeds)
        err = capfd.readouterr().err
        assert served in err, err
        (want,) = original.run(None, feeds)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=2e-2)


def test_skip_rows_grid_covers_the_row_groups_below_m():
    """flashgemm/codegen/tir/skip_rows_past_m on a default any-length kernel: its blocks enumerate every (batch, row
    group) whose first row is below M exactly once, and nothing else (each block's first row read from the "P" block's
    binding)."""
    import tvm_ffi
    from tvm import tirx

    from flashgemm.codegen.tir import skip_rows_past_m
    from flashgemm.codegen.tir.keep_exp_in_accumulator import substitute as _subst
    from flashgemm.bundle import any_length
    (tk,) = any_length.default_kernels(Variant("float16", True, True), 32, "sm_90", [192], log=lambda m: None)
    func = tk.shipped_func(tk.schedule, "k")
    bx, g, bm, _ = skip_rows_past_m.row_groups(func)
    assert g * bm == 192
    assert skip_rows_past_m.row_groups(runtime_func(Variant("float16", True), canonicalize((1, 1, 64, 32), (1, 1, 64, 32),
                                                                                    True))) is None
    skipped = skip_rows_past_m.skip(func)
    new_bx = skip_rows_past_m._block_x_loop(skipped)
    loops, binding = [], []
    tvm_ffi.structural_walk(new_bx.body, ((tirx.For, loops.append),
                                          (tvm.s_tir.SBlockRealize, lambda r: binding.extend(
                                              r.iter_values[:3]) if r.block.name_hint == "P" else None)))
    ana = tvm.sym.analyzer.Analyzer()
    for b0, b1, m in [(2, 3, 192), (2, 3, 17), (1, 2, 100), (3, 1, 1), (2, 2, 160), (2, 2, 161)]:
        sizes = {"B0": b0, "B1": b1, "M": m}
        env = {v: tirx.const(sizes[v.name], "int32") for v in _free_vars(new_bx.extent) if v.name in sizes}
        extent = int(ana.simplify(_subst(new_bx.extent, env)))
        live = -(-m // bm)
        assert extent == b0 * b1 * live, (b0, b1, m)
        seen = []
        for x in range(extent):
            at = {**env, new_bx.loop_var: tirx.const(x, "int32"), **{lp.loop_var: lp.min for lp in loops}}
            seen.append(tuple(int(ana.simplify(_subst(e, at))) for e in binding))
        want = [(i, j, grp * bm) for i in range(b0) for j in range(b1) for grp in range(live)]
        assert sorted(seen) == want, (b0, b1, m)


def _free_vars(e):
    import tvm_ffi
    from tvm import tirx
    found = []
    tvm_ffi.structural_walk(e, ((tirx.Var, found.append),))
    return found


RECOMPUTE_WORKER = r'''
import json, sys
sys.path.insert(0, ".")
import tvm
from flashgemm.spaces import cuda_space
from tests.compile_worker import best_record_module
from flashgemm.kernel.fused_gemm_softmax import runtime_func
from flashgemm.op.workloads import parse
from flashgemm.bundle import best
from flashgemm.tune.database import default_root, open_json_db
from pathlib import Path
out = []
for db, spec, bound in json.loads(sys.argv[1]):
    best_record_module(db)  # registers the target's tensor intrinsics
    rec = min(open_json_db(default_root() / "sm_90" / db).get_all_tuning_records(),
              key=lambda r: sum(float(s) for s in r.run_secs))
    wl = parse(spec)
    sch = tvm.s_tir.Schedule(runtime_func(wl.variant, wl.canonical, align=best.TENSOR_CORE_ALIGN, any_batch=True,
                                          bound=(bound, bound), recompute=True))
    rec.trace.apply_to_schedule(sch, remove_postproc=False)
    src = cuda_space.build(sch.mod, "sm_90").mod.imports[0].inspect_source("cuda")
    out.append({"db": db, "src": src})
print("RESULT" + json.dumps(out))
'''


def test_tuned_recompute_record_replays_on_the_any_length_recompute_form(tmp_path_factory):
    """W3's best tuned record (the recompute form at 1500 x 1500, padded to 1536) replays unchanged on the
    any-length recompute form of the 1536 bound and compiles for sm_90: a tuned kernel for every length up to 1536,
    M and N guarded and the grid over M's row groups (flashgemm/codegen/tir/skip_rows_past_m)."""
    (r,) = run_compile_worker(RECOMPUTE_WORKER, [["whisper-enc.f16", "a=8x20x1500x64,b=8x20x1500x64,transB=1,"
                                                                     "scale=0.125,dtype=float16", 1536]],
                              tmp_path_factory)
    src = r["src"]
    assert "mma" in src and re.search(r"< M\b", src) and re.search(r"< N\b", src)
    assert re.search(r"blockIdx\.x\) / \(\(M \+ \d+\) >> \d+\)", src), "the grid does not follow M's row groups"


def test_long_bounds_are_the_recompute_form():
    """flashgemm.spaces.kernel_forms.any_length_form: the recompute form over the bound on CUDA with B transposed, from
    ANY_LENGTH_RECOMPUTE_MIN_BOUND for variants without bias or mask and from ANY_LENGTH_MASKED_RECOMPUTE_MIN_BOUND
    for the others; the one-pass any-length form everywhere else."""
    from flashgemm.spaces.kernel_forms import ANY_LENGTH_MASKED_RECOMPUTE_MIN_BOUND as masked_bound
    from flashgemm.spaces.kernel_forms import ANY_LENGTH_RECOMPUTE_MIN_BOUND as long_bound
    from flashgemm.spaces.kernel_forms import any_length_form
    short = max(b for b in (32, 64, 128, 192, 256, 384, 512, 768) if b < long_bound)
    assert long_bound < masked_bound
    cases = [(Variant("float16", True), long_bound, "sm_90", "any-length-recompute"),
             (Variant("bfloat16", True, causal=True), 2048, "sm_80", "any-length-recompute"),
             (Variant("float16", True), short, "sm_90", "any-length"),
             (Variant("float16", True, True), long_bound, "sm_90", "any-length"),
             (Variant("float16", True, True), masked_bound, "sm_90", "any-length-recompute"),
             (Variant("float16", True, False, "add"), 2048, "sm_90", "any-length-recompute"),
             (Variant("bfloat16", True, False, "bool", True), masked_bound, "sm_89", "any-length-recompute"),
             (Variant("float16", False, False, "add"), 2048, "sm_90", "any-length"),
             (Variant("float16", False), 2048, "sm_90", "any-length"),
             (Variant("float16", True), 2048, "llvm", "any-length")]
    for variant, bound, target, want in cases:
        form = any_length_form(variant, (bound, bound), 64, target)
        assert form.name == want, (variant.key, bound, target)
        assert form.bound == (bound, bound)
        assert form.recompute == (want == "any-length-recompute")


def test_any_length_twins_are_the_recompute_form_from_their_bound():
    """flashgemm.bundle.best.any_length_twin (through any_length.default_kernels): from
    ANY_LENGTH_RECOMPUTE_TWIN_MIN_BOUND a kernel without bias or mask has a twin in the recompute form over its bound
    (B0 = 1, N a multiple of 4), also where the kernel itself is the one-pass form (then with that form's default
    schedule); shorter bounds and variants with a bias none."""
    from flashgemm.bundle import any_length
    twin_bound = kernel_forms.ANY_LENGTH_RECOMPUTE_TWIN_MIN_BOUND
    long_bound = kernel_forms.ANY_LENGTH_RECOMPUTE_MIN_BOUND
    assert twin_bound < long_bound
    below = max(b for b in any_length.LENGTH_BOUNDS if b < twin_bound)
    plain = Variant("float16", True)
    got = {tk.bound[0]: tk for tk in any_length.default_kernels(plain, 64, "sm_90", [below, twin_bound, long_bound],
                                                                log=lambda m: None)}
    assert got[below].twin is None and got[below].form == "any-length"
    for bound, form in ((twin_bound, "any-length"), (long_bound, "any-length-recompute")):
        tk = got[bound]
        assert (tk.form, tk.twin_form, tk.fixed_batch, tk.n_multiple) == (form, "any-length-recompute", (0, 1), 4)
        assert "S_p" in tk.twin.mod["main"].script()  # the recompute form's third GEMM
    biased = {tk.bound[0]: tk for tk in any_length.default_kernels(
        Variant("float16", True, True), 64, "sm_90", [long_bound, kernel_forms.ANY_LENGTH_MASKED_RECOMPUTE_MIN_BOUND],
        log=lambda m: None)}
    assert biased[long_bound].twin is None and biased[long_bound].form == "any-length"
    tk = biased[kernel_forms.ANY_LENGTH_MASKED_RECOMPUTE_MIN_BOUND]  # (its batch stays symbolic: a padding mask keeps B0)
    assert (tk.form, tk.twin_form, tk.fixed_batch, tk.n_multiple) == ("any-length-recompute", "any-length-recompute",
                                                                     None, 4)


def test_the_recompute_default_rule_is_w3s_best_record():
    """flashgemm/spaces/cuda_default.choose_recompute_decisions' first candidate is the decisions of W3's best tuned
    record in each dtype (the rule says it is), at W3's padded sizes."""
    from compile_worker import best_record_module
    from flashgemm.spaces import cuda_default, cuda_recompute
    from flashgemm.tune.database import open_json_db
    repo = Path(__file__).resolve().parent.parent
    for db in ("whisper-enc.f16", "whisper-enc.bf16"):
        best_record_module(db)  # registers the target's tensor intrinsics
        rec = min(open_json_db(repo / "flashgemm" / "databases" / "sm_90" / db).get_all_tuning_records(),
                  key=lambda r: sum(float(s) for s in r.run_secs))
        mod = rec.workload.mod
        assert cuda_recompute.pipeline_stages(rec.trace) == cuda_default.RECOMPUTE_SKETCH["stages"]
        assert cuda_recompute.is_staged(rec.trace, mod) == cuda_default.RECOMPUTE_SKETCH["staged_p"]
        assert cuda_recompute.is_resident(rec.trace, mod) == cuda_default.RECOMPUTE_SKETCH["resident_a"]
        got = [[int(x) for x in d] if hasattr(d, "__len__") else int(d)
               for d in cuda_recompute.current_decisions(rec.trace, mod)]
        first = cuda_default.choose_recompute_decisions(1536 // 16, 1536 // 16, 64 // 16)[0]
        assert got == [first[key] for key in cuda_default._FORMS["recompute"]], db


RECOMPUTE_PASSES_WORKER = r'''
import json, os, sys
sys.path.insert(0, ".")
import tvm
from flashgemm.bundle.compile_worker import compile_module
from flashgemm.op.variant import Variant
from flashgemm.bundle import any_length
out = []
for dtype, causal, k, bound in json.loads(sys.argv[1]):
    (tk,) = any_length.default_kernels(Variant(dtype, True, causal=causal), k, "sm_90", [bound], log=lambda m: None)
    mod = tvm.IRModule({"k": tk.shipped_func(tk.schedule, "k")})
    srcs = {}
    for off in ("", "skip_chunks_past_n", "skip_rows_past_m"):
        if off:
            os.environ["FLASHGEMM_DISABLE_PASSES"] = off
        srcs[off or "both"] = compile_module(mod, "sm_90").mod.imports[0].inspect_source()
        os.environ.pop("FLASHGEMM_DISABLE_PASSES", None)
    twin = tvm.IRModule({"k": tk.shipped_func(tk.twin, "k")})
    srcs["twin"] = compile_module(twin, "sm_90").mod.imports[0].inspect_source()
    out.append({"form": tk.form, "bound": bound, "srcs": srcs, "fixed_batch": list(tk.fixed_batch),
                "n_multiple": tk.n_multiple})
print("RESULT" + json.dumps(out))
'''


def test_any_length_recompute_kernel_sweeps_only_chunks_and_rows_below_n_and_m(tmp_path_factory):
    """The recompute form over the 1536 bound as a bundle ships it (sm_90): its grid covers the 64-row groups below M
    (flashgemm/codegen/tir/skip_rows_past_m) and each of its three sweeps the 64-column chunks below N
    (flashgemm/codegen/tir/skip_chunks_past_n), and nothing else changes: with either pass off, the same barriers, mma
    and copies."""
    (r,) = run_compile_worker(RECOMPUTE_PASSES_WORKER, [["float16", True, 64, 1536]], tmp_path_factory)
    assert r["form"] == "any-length-recompute"
    both, no_chunks, no_rows = (r["srcs"][key] for key in ("both", "skip_chunks_past_n",
                                                           "skip_rows_past_m"))
    sweeps = r"for \(int \w+ = 0; \w+ < \(min\(24, \(\(N \+ 63\) >> 6\)\) - 1\); \+\+\w+\)"
    assert len(re.findall(sweeps, both)) == 3, "the three sweeps do not stop at N's last chunk"
    assert not re.search(sweeps, no_chunks) and len(re.findall(sweeps, no_rows)) == 3
    grid = r"blockIdx\.x\) / \(\(M \+ 63\) >> 6\)"
    assert re.search(grid, both) and re.search(grid, no_chunks) and not re.search(grid, no_rows)
    for what in ("__syncthreads", "mma.sync", "cp.async", "ldmatrix"):
        assert both.count(what) == no_chunks.count(what) == no_rows.count(what), what
    # its twin (B0 = 1, N a multiple of 4) stores P 4 halves (8 bytes) at a time; the kernel itself one by one
    assert r["fixed_batch"] == [0, 1] and r["n_multiple"] == 4
    twin = r["srcs"]["twin"]
    vector_p = r"\*\((uint2|half4|uint1|half2)\*\)\(P_ptr \+"
    assert re.search(vector_p, twin) and not re.search(vector_p, both)
    assert re.search(r"\bP_ptr\[[^\n]*\] = \(\(half\)", both) and not re.search(r"\bP_ptr\[[^\n]*\] = \(\(half\)", twin)
    signs = r"B1 \* \d+\) >= 0"  # the sign corrections of a division by a symbolic B1 (runtime_func's fixed_batch)
    assert re.search(signs, both) and not re.search(signs, twin), "the twin's batch index math is not constant"


def test_skip_chunks_finds_each_sweep_and_its_chunk_width():
    """flashgemm.codegen.tir.skip_chunks_past_n.chunk_width on the scheduled recompute form over a bound: the three
    sweeps' loops, 64 columns a chunk (the default rule's); no chunk loop in a one-pass any-length kernel or a static
    one."""
    import tvm_ffi
    from tvm import tirx

    from flashgemm.codegen.tir import skip_chunks_past_n
    from flashgemm.bundle import any_length
    (tk,) = any_length.default_kernels(Variant("float16", True), 64, "sm_90", [1024], log=lambda m: None)
    func = tk.shipped_func(tk.schedule, "k")
    b_buf, n = skip_chunks_past_n._b_rows(func)
    assert b_buf.name == "Bm" and n.name == "N"
    loops = []
    tvm_ffi.structural_walk(func.body, ((tirx.For, lambda lp: loops.append(lp)
                                         if "software_pipeline_stage" in lp.annotations else None),))
    assert [skip_chunks_past_n.chunk_width(lp, b_buf) for lp in loops] == [64, 64, 64]
    assert [int(lp.extent) for lp in loops] == [16, 16, 16]
    skipped = skip_chunks_past_n.skip(func)
    new = []
    tvm_ffi.structural_walk(skipped.body, ((tirx.For, lambda lp: new.append(lp)
                                            if "software_pipeline_stage" in lp.annotations else None),))
    assert all(str(lp.extent) == "T.min(16, (N + 63) // 64)" for lp in new), [str(lp.extent) for lp in new]
    (one_pass,) = any_length.default_kernels(Variant("float16", True, True), 64, "sm_90", [1024], log=lambda m: None)
    f1 = one_pass.shipped_func(one_pass.schedule, "k")
    assert tvm_ffi.structural_equal(skip_chunks_past_n.skip(f1), f1)
