"""flashgemm/tune/ms_default.py and flashgemm-tune-ms-default (the peer "Meta-Schedule's default space on the unfused
op") on the CPU: the unfused kernels' numerics, a tiny llvm tuning run (resume, load, run on torch tensors), a task
whose candidates all fail, the CUDA default space compiled for sm_90 without a GPU, and the errors.

Runtime on 2 cores: ~2 minutes, most of it the two `slow` tests (Meta-Schedule's default llvm rules import TVM's
tensor intrinsics, ~25 s once per process) and the sm_90 compile check (~45 s, a subprocess with the stub driver).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import commands
import pytest

from flashgemm.op.reference import fused_gemm_softmax_ref
from flashgemm.op.workloads import parse
from flashgemm.tune import ms_default as md

REPO = Path(__file__).resolve().parent.parent
SCRIPT = commands.argv("tune_ms_default")
TINY = "a=2x16x8,b=8x16,mask=2x1x16:bool,scale=0.5,name=tiny-msd"


def _np_dtype(dtype):
    import ml_dtypes  # noqa: PLC0415
    return {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]


def _inputs(wl, seed=0):
    """ONNX-level numpy inputs of a workload, with one fully masked row when it has a mask."""
    rng = np.random.default_rng(seed)
    dt = _np_dtype(wl.dtype)
    feeds = {"A": rng.standard_normal(wl.a_shape).astype(dt), "B": rng.standard_normal(wl.b_shape).astype(dt)}
    if wl.bias_shape is not None:
        feeds["bias"] = rng.standard_normal(wl.bias_shape).astype(dt)
    if wl.mask_shape is not None:
        keep = rng.random(wl.mask_shape) > 0.3
        keep.reshape(-1)[:wl.mask_shape[-1]] = False  # the first mask row: everything masked
        feeds["mask"] = keep if wl.mask_kind == "bool" else np.where(keep, 0.0, -np.inf).astype(dt)
    return feeds


def _reference(wl, feeds):
    return fused_gemm_softmax_ref(feeds["A"], feeds["B"], feeds.get("bias"), feeds.get("mask"), scale=wl.scale,
                                  trans_b=wl.trans_b, causal=wl.causal)


# S is rounded to the dtype between the kernels (ms_default.unfused_funcs): fp16 logits carry ~5e-4 relative
# error, bf16 ~4e-3, into probabilities <= 1
ATOL = {"float16": 2e-3, "bfloat16": 2e-2}


@pytest.mark.parametrize("spec", [
    # attention scores: transB, additive mask broadcast over heads, causal with M > N (fully masked rows)
    "a=2x3x17x8,b=2x3x9x8,transB=1,scale=0.3,mask=2x1x17x9:add,causal=1",
    # bf16, B shared by the batch, a bias broadcast over the batch, a bool padding mask
    "a=2x5x12,b=12x7,bias=5x7,mask=2x1x7:bool,scale=0.5,dtype=bfloat16",
    # plain 2-D with a row bias
    "a=4x6,b=6x10,bias=10",
])
def test_unfused_module_numerics_on_llvm(spec):
    import tvm  # noqa: PLC0415
    wl = parse(spec)
    mod = md.unfused_module(wl)
    assert sorted(gv.name_hint for gv in mod.get_global_vars()) == ["gemm", "softmax"]
    ex = tvm.compile(mod, target="llvm")  # unscheduled: the default (serial) schedule
    feeds = _inputs(wl)
    shapes, dev = md.tensor_shapes(wl), tvm.cpu()

    def arg(name):
        x = np.ascontiguousarray(feeds[name]).reshape(shapes[name][0])
        return tvm.runtime.tensor(x.astype(np.uint8) if x.dtype == np.bool_ else x, dev)

    s = tvm.runtime.empty(shapes["S"][0], wl.dtype, dev)
    p = tvm.runtime.empty(shapes["P"][0], wl.dtype, dev)
    ex["gemm"](*[arg(n) for n in ("A", "B", "bias") if n in feeds], s)
    ex["softmax"](s, *([arg("mask")] if "mask" in feeds else []), p)
    ref = _reference(wl, feeds)
    got = p.numpy().astype(np.float64).reshape(ref.shape)
    np.testing.assert_allclose(got, ref, atol=ATOL[wl.dtype], rtol=0)
    dead = ref.sum(-1) == 0
    if "mask" in feeds:
        assert dead.any(), "the test should exercise a fully masked row"
    assert (got[dead] == 0).all(), "a fully masked row must be exactly zero"


def _torch_feeds(feeds):
    import torch  # noqa: PLC0415
    out = {}
    for k, v in feeds.items():
        v = np.ascontiguousarray(v)
        out[k] = torch.from_numpy(v) if v.dtype in (np.bool_, np.float16) else \
            torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16)  # bf16 values: exact
    return out


@pytest.mark.parametrize("spec", [
    "a=2x3x17x8,b=2x3x9x8,transB=1,scale=0.3,mask=2x1x17x9:add,causal=1",
    "a=2x5x12,b=12x7,bias=5x7,mask=2x1x7:bool,scale=0.5,dtype=bfloat16",
    "a=3x1x4x6,b=2x6x10,bias=3x2x1x10,mask=1x2x4x1:add",  # broadcasts on both batch dims, a column mask
])
def test_prepare_passes_torch_feeds_as_the_kernels_expect(spec, monkeypatch):
    """prepare_unfused's path from torch tensors (broadcast batch dims, bool masks) to the kernels' compact
    buffers, with the unscheduled kernels in place of tuned ones."""
    torch = pytest.importorskip("torch", reason="prepare_unfused takes torch tensors (CI installs no torch)")
    import tvm  # noqa: PLC0415
    wl = parse(spec)
    ex = tvm.compile(md.unfused_module(wl), target="llvm")
    monkeypatch.setattr(md, "load_unfused", lambda *_a, **_k: [ex["gemm"], ex["softmax"]])
    feeds = _inputs(wl, seed=1)
    run = md.prepare_unfused(wl, "llvm")(_torch_feeds(feeds))
    p = run()
    assert tuple(p.shape) == wl.canonical.out_shape
    assert p.dtype == {"float16": torch.float16, "bfloat16": torch.bfloat16}[wl.dtype]
    np.testing.assert_allclose(p.float().numpy(), _reference(wl, feeds), atol=ATOL[wl.dtype], rtol=0)


def test_unsupported_and_missing_databases_are_clear_errors(tmp_path):
    with pytest.raises(NotImplementedError, match="empty problem"):
        md.unfused_module(parse("a=0x4,b=4x5"))
    wl = parse("a=3x5x7,b=7x9,name=never-tuned-msd")
    for where in (None, tmp_path):
        with pytest.raises(LookupError, match=r"flashgemm-tune-ms-default --target llvm --workload "
                                              r"'a=3x5x7,b=7x9.*name=never-tuned-msd'"):
            md.prepare_unfused(wl, "llvm", where)
    assert not any(tmp_path.iterdir()), "looking up a database must not create one"
    # a fused-op database (same JSON files, plus provenance.json) is never mistaken for ours ...
    vit = parse("vit-b16")
    if (REPO / "flashgemm" / "databases" / "sm_90" / vit.dir_name / "provenance.json").exists():
        if (REPO / "flashgemm" / "databases" / "ms_default" / "sm_90" / vit.dir_name / md.META).exists():
            found = md.find_dir(vit, "sm_90", REPO / "flashgemm" / "databases")  # the committed peer database, not ours
            assert found == REPO / "flashgemm" / "databases" / "ms_default" / "sm_90" / vit.dir_name
        else:
            with pytest.raises(LookupError):
                md.find_dir(vit, "sm_90", REPO / "flashgemm" / "databases")
    # ... and never written into
    fused = tmp_path / "fused"
    fused.mkdir()
    (fused / "provenance.json").write_text("{}")
    with pytest.raises(md.TuningError, match="fused op"):
        md.tune_unfused(wl, "llvm", 2, fused)
    # the target names: ms_default is not one
    from flashgemm import targets  # noqa: PLC0415
    with pytest.raises(targets.TargetError):
        targets.resolve("ms_default")


def test_cli_refuses_cuda_tuning_without_a_gpu():
    from flashgemm.codegen import cuda_stub  # noqa: PLC0415
    if cuda_stub.real_driver_present():
        pytest.skip("a CUDA driver is present: the refusal is for GPU-less machines")
    proc = subprocess.run([*SCRIPT, "--target", "sm_90", "--workload", "demo"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 2
    assert "measures every candidate on the GPU" in proc.stderr and "--check" in proc.stderr


# ----------------------------------------------------------------------------- tuning (llvm)
def _small_search():
    """Meta-Schedule's evolutionary search with a small population: the default's 512 costs seconds a batch."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    return ms.search_strategy.EvolutionarySearch(population_size=16, init_min_unmeasured=4, genetic_num_iters=1)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    root = tmp_path_factory.mktemp("msd")
    wl = parse(TINY)
    wl_dir = md.workload_dir(root, "llvm", wl.dir_name)
    logs = []
    first = md.tune_unfused(wl, "llvm", 2, wl_dir, log=logs.append, workers=2, strategy=_small_search())
    second = md.tune_unfused(wl, "llvm", 4, wl_dir, log=logs.append, workers=2, strategy=_small_search())
    return root, wl, wl_dir, first, second, logs


@pytest.mark.slow
def test_tiny_llvm_tuning_resumes_and_loads(tuned):
    root, wl, wl_dir, first, second, logs = tuned
    assert first["trials"] == 2 and {t["trials"] for t in first["tasks"].values()} == {1}
    assert second["trials"] == 4 and len(second["runs"]) == 2, "the second call continues toward the total"
    assert all(t["valid"] >= 1 and t["best_secs"] > 0 for t in second["tasks"].values())
    assert second["best_secs_total"] <= first["best_secs_total"]
    assert any("gemm: best" in line for line in logs) and any("softmax: best" in line for line in logs)
    meta = json.loads((wl_dir / md.META).read_text())
    assert meta["target"] == "llvm" and meta["workload"]["spec"] == wl.spec()
    assert not (wl_dir / "provenance.json").exists()  # never looks like a fused-op database
    assert (wl_dir / "work" / "logs").is_dir()  # logs under work/: git-ignored
    # the budget is met: a third call measures nothing
    again = md.tune_unfused(wl, "llvm", 4, wl_dir, log=logs.append, workers=2, strategy=_small_search())
    assert again["trials"] == 4 and len(again["runs"]) == 2
    # load: one compiled function per task; found from the workload dir, the ms_default root or a flashgemm/databases
    # root
    assert len(md.load_unfused(wl, "llvm", wl_dir)) == 2
    assert md.find_dir(wl, "llvm", root) == wl_dir
    tdb = root.parent / (root.name + "-tuning_db")
    (tdb / "ms_default").mkdir(parents=True, exist_ok=True)
    os.symlink(root / "llvm", tdb / "ms_default" / "llvm")
    assert md.find_dir(wl, "llvm", tdb) == tdb / "ms_default" / "llvm" / wl.dir_name
    # our fused-op loader, pointed at the ms_default root, sees no tuned kernel there
    from flashgemm.bundle import best  # noqa: PLC0415
    assert best.load_all("llvm", root, log=lambda *_: None) == []


@pytest.mark.slow
def test_tiny_llvm_tuning_runs_on_torch_tensors(tuned):
    """The tuned kernels run on torch tensors (CPU here; the GPU benchmark passes CUDA tensors)."""
    torch = pytest.importorskip("torch", reason="prepare_unfused takes torch tensors (CI installs no torch)")
    root, wl, wl_dir, first, second, logs = tuned
    feeds = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in _inputs(wl, seed=3).items()}
    run = md.prepare_unfused(wl, "llvm", root)(feeds)
    p = run()
    assert tuple(p.shape) == wl.canonical.out_shape and p.dtype == torch.float16
    ref = _reference(wl, {k: v.numpy() for k, v in feeds.items()})
    np.testing.assert_allclose(p.float().numpy(), ref, atol=ATOL[wl.dtype], rtol=0)
    assert run() is p


@pytest.mark.slow
def test_a_time_boxed_slice_stops_after_its_batch_and_the_next_continues(tmp_path):
    """--max-minutes (max_seconds): the run ends after the batch in flight with that batch stored, says so, and a
    second run continues toward the same total."""
    wl = parse(TINY)
    wl_dir = tmp_path / "db"
    logs = []
    first = md.tune_unfused(wl, "llvm", 8, wl_dir, log=logs.append, workers=2, strategy=_small_search(),
                            batch_size=2, max_seconds=1e-6)
    assert first["trials"] == 2, "one batch of 2, then the deadline (already past) ends the run"
    assert first["runs"][-1]["stopped"] == "time budget reached"
    assert any("stopped after 2/8 trials (time budget reached); run again to continue" in line for line in logs)
    second = md.tune_unfused(wl, "llvm", 8, wl_dir, log=logs.append, workers=2, strategy=_small_search(),
                             batch_size=2)
    assert second["trials"] == 8 and len(second["runs"]) == 2 and "stopped" not in second["runs"][-1]
    assert sum(t["trials"] for t in second["tasks"].values()) == 8


@pytest.mark.slow
def test_a_pruned_database_keeps_its_trial_count_and_tuning_continues_from_it(tmp_path):
    """--prune K (what gets committed) keeps the K fastest valid records per kernel; ms_default.json keeps the
    trials measured, so a later run goes on toward the total instead of starting over."""
    wl = parse(TINY)
    wl_dir = md.workload_dir(tmp_path, "llvm", wl.dir_name)
    md.tune_unfused(wl, "llvm", 6, wl_dir, log=lambda *_: None, workers=2, strategy=_small_search(), batch_size=2)
    records = wl_dir / "database_tuning_record.json"
    assert len(records.read_text().splitlines()) == 6
    proc = subprocess.run([*SCRIPT, "--target", "llvm", "--workload", TINY, "--prune", "1",
                           "--db", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "kept the fastest valid records, at most 1 distinct ones per task (gemm 1, softmax 1), of 6 trials" \
        in proc.stdout
    assert len(records.read_text().splitlines()) == 2
    meta = json.loads((wl_dir / md.META).read_text())
    assert meta["trials"] == 6 and meta["pruned"]["keep"] == 1 and meta["best_secs_total"] > 0
    assert len(md.load_unfused(wl, "llvm", wl_dir)) == 2, "the kept records still load"
    logs = []
    again = md.tune_unfused(wl, "llvm", 8, wl_dir, log=logs.append, workers=2, strategy=_small_search(),
                            batch_size=2)
    assert any("6 trials done" in line and "2 to go" in line for line in logs), logs[:1]
    assert again["trials"] == 8 and again["pruned"]["keep"] == 1 and len(again["runs"]) == 2
    assert len(records.read_text().splitlines()) == 4  # the 2 kept + the 2 just measured
    # nothing tuned there: a clear error, not a traceback
    proc = subprocess.run([*SCRIPT, "--target", "llvm", "--workload", "demo", "--prune", "10",
                           "--db", str(tmp_path / "empty")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "nothing tuned there to prune" in proc.stderr, proc.stderr


def test_cli_refuses_a_non_positive_max_minutes():
    proc = subprocess.run([*SCRIPT, "--target", "llvm", "--workload", TINY, "--max-minutes", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--max-minutes must be positive" in proc.stderr


@pytest.mark.slow
def test_a_task_whose_candidates_all_fail_is_a_clear_error(tmp_path, monkeypatch):
    from tvm.ir.utils import derived_object  # noqa: PLC0415
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415

    @derived_object
    class FailingBuilder(ms.builder.PyBuilder):
        def build(self, build_inputs):
            return [ms.builder.BuilderResult(None, "simulated nvcc failure") for _ in build_inputs]

    real = md._builder_runner
    monkeypatch.setattr(md, "_builder_runner", lambda target, workers: (FailingBuilder(), real(target, workers)[1]))
    wl = parse(TINY)
    with pytest.raises(md.TuningError, match=r"no valid candidate for task gemm .*simulated nvcc failure"):
        md.tune_unfused(wl, "llvm", 2, tmp_path / "db", log=lambda *_: None, workers=2, strategy=_small_search())
    with pytest.raises(LookupError, match="no valid record for the gemm task"):
        md.load_unfused(wl, "llvm", tmp_path / "db")


# ----------------------------------------------------------------------------- CUDA, compile-only
def test_cuda_default_space_compiles_for_sm_90():
    """flashgemm-tune-ms-default --check: each kernel's default space (cuda-tensorcore rules on sm_90) yields a
    candidate that nvcc compiles (through the stub libcuda on a machine without a driver)."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        pytest.skip("nvcc not found (CUDA toolkit needed for compile-only CUDA tests)")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the stub libcuda.so.1")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(nvcc) + os.pathsep + env.get("PATH", "")
    spec = "a=2x2x64x32,b=2x2x64x32,transB=1,scale=0.25,mask=2x1x1x64:bool,causal=1"
    proc = subprocess.run([*SCRIPT, "--target", "sm_90", "--workload", spec, "--check"],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "gemm on sm_90" in out and "softmax on sm_90" in out and out.count(", built") == 2, out[-4000:]
    gemm_line = next(line for line in out.splitlines() if "gemm on sm_90" in line)
    assert "tensor cores" in gemm_line, gemm_line  # fp16 on sm_90: the default space tensorizes (WMMA)
