"""The whole chain on the CPU: Meta-Schedule tuning -> a database -> flashgemm-build -> bundle (kernels .so + manifest)
-> ORT session with the installed op library that dispatches the tuned kernel for the tuned shape and a generic one
otherwise."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import commands
import pytest

from flashgemm.bundle.kernel_library import kernel_libraries
from flashgemm.ort import session
from flashgemm.ort.model import make_model
from flashgemm.op.reference import fused_gemm_softmax_ref
from flashgemm.op.variant import Variant
from flashgemm.op.workloads import parse
from flashgemm.tune import tuner

REPO = Path(__file__).resolve().parent.parent
BUILD = commands.argv("build")
SPEC = "a=2x3x16x8,b=2x3x16x8,transB=1,mask=2x1x1x16:bool,scale=0.35,name=pipe"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    db, bundle = root / "db", root / "bundle"
    tuner.tune(parse(SPEC), "llvm", 2, db_root=db, workers=2, progress=False)
    out = subprocess.run(BUILD + ["--target", "llvm", "--db", str(db), "--out", str(bundle)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    return db, bundle


@pytest.mark.slow
def test_manifest_lists_the_tuned_kernel_and_every_generic_one(built):
    _, bundle = built
    manifest = json.loads((bundle / "manifest.json").read_text())
    tuned = [f for f in manifest["functions"] if f["tuned"]]
    assert len(tuned) == 1 and tuned[0]["sizes"] == [2, 3, 16, 16, 8]
    assert tuned[0]["workload"] == "pipe.f16" and tuned[0]["run_secs"] > 0
    assert sum(not f["tuned"] for f in manifest["functions"]) == len(Variant.all())
    assert (bundle / "flashgemm_kernels.so").is_file()
    assert not (bundle / "libflashgemm_ort.so").exists()  # the op library is the package's


def _run(bundle, a_shape, b_shape, mask_shape, seed=0):
    model = make_model("float16", a_shape, b_shape, None, mask_shape, "bool", 0.35, 1, 0)
    sess = ort.InferenceSession(model.SerializeToString(), session.session_options(bundle),
                                providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(a_shape).astype(np.float16)
    b = rng.standard_normal(b_shape).astype(np.float16)
    mask = rng.random(mask_shape) > 0.3
    (p,) = session.run(sess, {"A": a, "B": b, "mask": mask})
    ref = fused_gemm_softmax_ref(a, b, mask=mask, scale=0.35, trans_b=True)
    return float(np.abs(p.astype(np.float64) - ref).max())


@pytest.mark.slow
def test_session_uses_the_tuned_kernel_for_the_tuned_shape(built, monkeypatch, capfd):
    _, bundle = built
    monkeypatch.setenv("FLASHGEMM_VERBOSE", "1")
    assert _run(bundle, (2, 3, 16, 8), (2, 3, 16, 8), (2, 1, 1, 16)) < 2e-3
    tuned = next(f for f in json.loads((bundle / "manifest.json").read_text())["functions"] if f["tuned"])
    assert f"{tuned['name']} (tuned) sizes=[2,3,16,16,8]" in capfd.readouterr().err
    # another batch, same M, N, K: a kernel whose trace took symbolic batch dims serves it, else the generic one
    assert _run(bundle, (5, 3, 16, 8), (5, 3, 16, 8), (5, 1, 1, 16)) < 2e-3
    expect = f"{tuned['name']} (tuned)" if tuned["any_batch"] else "fgs_f16_tb1_bias0_maskbool_causal0_generic (generic)"
    assert f"{expect} sizes=[5,3,16,16,8]" in capfd.readouterr().err
    # another M of the same variant: served by the generic kernel, still right
    assert _run(bundle, (2, 3, 17, 8), (2, 3, 16, 8), (2, 1, 1, 16)) < 2e-3
    assert "fgs_f16_tb1_bias0_maskbool_causal0_generic (generic)" in capfd.readouterr().err


@pytest.mark.slow
def test_build_refuses_a_corrupt_database(built, tmp_path):
    db, _ = built
    bad = tmp_path / "db"
    subprocess.run(["cp", "-r", str(db), str(bad)], check=True)
    records = next((bad / "llvm").iterdir()) / "database_tuning_record.json"
    records.write_text("{not json\n")
    out = subprocess.run(BUILD + ["--target", "llvm", "--db", str(bad), "--out", str(tmp_path / "b")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and f"{records}, line 1: not JSON" in out.stderr, out.stderr[-2000:]
    assert records.read_text() == "{not json\n"  # reported, not cut


def test_build_refuses_a_database_of_another_target(tmp_path):
    wl_dir = tmp_path / "llvm" / "x.f16"
    wl_dir.mkdir(parents=True)
    (wl_dir / "provenance.json").write_text(json.dumps({"target": "sm_90", "workload": {"spec": SPEC}}))
    out = subprocess.run(BUILD + ["--target", "llvm", "--db", str(tmp_path), "--out", str(tmp_path / "b"),
                                 ], capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "tuned for target 'sm_90', not 'llvm'" in out.stderr


def test_committed_gpu_databases_load_and_replay_on_the_shipped_kernels():
    """flashgemm/databases/sm_90 (tuned on the H100) must load without a GPU and replay onto the runtime form that
    flashgemm-build exports (a CUDA database needs the tensor intrinsics registered first)."""
    from flashgemm.bundle import best  # noqa: PLC0415

    from flashgemm.codegen import cuda_build  # noqa: PLC0415

    kernels = best.load_all("sm_90", log=lambda *_: None)
    assert {k.workload for k in kernels} >= {"bert-large.f16", "vit-b16.f16"}
    wgmma = set()
    for k in kernels:
        assert k.run_secs > 0
        text = k.schedule.mod.script()
        if k.shape.m == 1:  # the row-vector space (flashgemm/spaces/cuda_row_vector): a GEMV, no tensor cores
            assert "mma" not in text and "software_pipeline_stage" in text and "shared.dyn" in text, k.workload
        elif cuda_build.uses_wgmma(k.schedule.mod):  # Hopper's wgmma (flashgemm/spaces/cuda_wgmma): no ldmatrix
            assert "T.ptx.wgmma" in text and "software_pipeline_stage" in text, k.workload
            wgmma.add(k.workload)
        else:
            assert "mma" in text and "ldmatrix" in text, k.workload
    assert wgmma == {"lm-head.bf16", "lm-head.f16"}  # the split-N form's wgmma records won the LM head's tuning
    assert all(k.source_target is None for k in kernels)  # tuned on sm_90 itself


@pytest.mark.parametrize("arch", ["sm_80", "sm_89"])
def test_build_for_an_untuned_arch_transfers_the_sm90_records(arch, tmp_path):
    """No A100/RTX 4090 databases: flashgemm-build --target sm_80|sm_89 takes the sm_90 records that the arch's
    verifier accepts (sm_89 has 99 KB of shared memory a block, sm_80 163, the H100 227; no wgmma), builds them for that
    arch and marks them transferred (untuned there) in the manifest. Four of the committed databases (a register, a
    one-pass, a recompute and a wgmma split-N record: every kind the transfer meets; all 21 take minutes an arch to
    compile)."""
    untuned = "a=2x4x100x72,b=2x4x72x300,mask=2x1x100x300:bool,name=odd"
    db = tmp_path / "db"
    for name in ("bert-large.f16", "vit-b16.f16", "whisper-enc.f16", "lm-head.bf16"):
        shutil.copytree(REPO / "flashgemm" / "databases" / "sm_90" / name, db / "sm_90" / name)
    bundle = tmp_path / "bundle"
    out = subprocess.run(BUILD + ["--target", arch, "--out", str(bundle), "--db", str(db),
                                  "--workload", "vit-b16", "--workload", untuned, "--any-length", "none"],
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["target"] == arch
    # --workload: a default-schedule kernel for the untuned shape; the tuned (transferred) one serves vit-b16
    default, twin, scaled = sorted((e for e in manifest["functions"]
                                    if e["schedule"] == "default" and e["workload"] == "odd"),
                                   key=lambda e: (e["fixed_batch"] is not None, e["scale"] is not None))
    assert default["sizes"] == [2, 4, 100, 300, 72] and default["any_batch"] and not default["tuned"]
    assert default["fixed_batch"] is None and twin["fixed_batch"] == [1, 4]  # its twin: B1 (the heads) static
    # and the twin specialized on the workload's scale (1 when the spec gives none), for the calls with that scale
    assert twin["scale"] is None and scaled["fixed_batch"] == [1, 4] and scaled["scale"] == 1.0
    assert default["tuned_on"] is None and default["align"] == 64
    assert "vit-b16: a tuned kernel serves" in out.stdout
    shaped = [e for e in manifest["functions"] if e["schedule"] == "tuned"]
    committed = {p.name for p in (db / "sm_90").iterdir() if (p / "provenance.json").exists()}
    assert len(committed) == 4
    # each committed workload: a transferred record; else (no record fits the arch's shared memory, as with
    # Whisper's 1500-column rows on sm_80) the space's default schedule for the arch; else (sm_89's 99 KB cannot
    # hold them even at 16 rows a block) the generic kernel, said in the log
    defaults = {e["workload"] for e in manifest["functions"] if e["schedule"] == "default"} - {"odd"}
    served = {e["workload"] for e in shaped} | defaults
    # ViT's short rows fit every arch; which other records fit depends on what tuning found (the LM head's kept
    # records are wgmma ones: the default schedule serves it)
    assert served <= committed and "vit-b16.f16" in {e["workload"] for e in shaped}
    assert all(e["transferred"] and e["tuned_on"] == "sm_90" for e in shaped)
    assert "transferred, not tuned there" in out.stdout
    for name in defaults:
        assert f"{name}: none of the 10 records of sm_90 fits {arch}: the default schedule" in out.stdout
    for name in committed - served:
        assert f"{name}: none of the 10 records of sm_90 fits {arch}: generic kernel" in out.stdout
    # compiled to fatbins (nvcc ran, through a stub driver where there is none), not CUDA source that ONNX Runtime
    # could not load
    assert all(b"__global__" not in so.read_bytes() for so in kernel_libraries(bundle))



@pytest.mark.slow
def test_build_leaves_out_a_tuned_kernel_that_does_not_compile_in_time(tmp_path):
    """A real demo record (an 8-trial llvm tuning, tests/data/llvm-slow-export) that built in the tuner but whose bundle
    kernel (free strides, 512-step explicit unroll) kept LLVM busy for more than 200 s: flashgemm-build must give up on
    it at --compile-limit, say so, and ship a bundle whose generic kernel serves the shape, right."""
    db = REPO / "tests" / "data" / "llvm-slow-export"
    bundle = tmp_path / "b"
    out = subprocess.run(BUILD + ["--target", "llvm", "--db", str(db), "--out", str(bundle), "--compile-limit", "10"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    name = "fgs_f16_tb1_bias0_maskbool_causal0_b2x4_m64_n64_k32"
    assert (f"left out tuned kernel {name} (workload demo.f16): its compile did not finish in 10 s; its calls go "
            f"to the generic kernel") in out.stdout
    functions = json.loads((bundle / "manifest.json").read_text())["functions"]
    assert len(functions) == len(Variant.all()) and not any(f["tuned"] for f in functions)
    wl = parse("demo")
    model = make_model("float16", wl.a_shape, wl.b_shape, None, wl.mask_shape, "bool", wl.scale, 1, 0)
    sess = ort.InferenceSession(model.SerializeToString(), session.session_options(bundle),
                                providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    a = rng.standard_normal(wl.a_shape).astype(np.float16)
    b = rng.standard_normal(wl.b_shape).astype(np.float16)
    mask = rng.random(wl.mask_shape) > 0.3
    (p,) = session.run(sess, {"A": a, "B": b, "mask": mask})
    ref = fused_gemm_softmax_ref(a, b, mask=mask, scale=wl.scale, trans_b=True)
    assert np.abs(p.astype(np.float64) - ref).max() < 2e-3
