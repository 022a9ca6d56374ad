"""flashgemm-check-bundle: every kernel of a bundle run once against the reference (CPU bundle here; the same
command runs the CUDA bundle on the GPU machine, also under compute-sanitizer)."""
import json
import os
import shutil
import subprocess
import sys
import time

import commands
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = commands.argv("check_bundle")


@pytest.fixture(scope="module")
def llvm_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "llvm"
    proc = subprocess.run([*commands.argv("build"), "--target", "llvm", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def _check(*args):
    return subprocess.run([*CHECK, *map(str, args)], capture_output=True, text=True)


def test_every_kernel_of_a_bundle_matches_the_reference(llvm_bundle):
    proc = _check(llvm_bundle)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    n = len(json.loads((llvm_bundle / "manifest.json").read_text())["functions"])
    assert f"{n} of {n} kernels match the reference" in proc.stdout


def test_a_kernel_serving_the_wrong_variant_is_caught(llvm_bundle, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(llvm_bundle, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    fns = {f["name"]: f for f in manifest["functions"]}
    # the manifest claims the causal kernel is the non-causal one: its output must then fail the check
    fns["fgs_f16_tb1_bias0_masknone_causal0_generic"]["name"] = "fgs_f16_tb1_bias0_masknone_causal1_generic"
    (bad / "manifest.json").write_text(json.dumps(manifest))
    proc = _check(bad, "--only", "f16_tb1_bias0_masknone")
    assert proc.returncode == 1 and "FAIL" in proc.stdout, proc.stdout


def test_missing_or_corrupt_bundle_is_a_clear_error(tmp_path):
    proc = _check(tmp_path / "nothing")
    assert proc.returncode == 2 and "build the bundle first" in proc.stderr
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_text("{")
    (tmp_path / "b" / "flashgemm_kernels.so").write_text("")
    proc = _check(tmp_path / "b")
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr
    proc = _check(tmp_path / "b", "--sanitizer", "leakcheck")
    assert proc.returncode == 2 and "unknown tools" in proc.stderr


def _wall_clock(fn, reps):  # bundle_ab's timer on the CPU
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return {"median_us": (time.perf_counter() - t0) * 1e6 / reps}


def test_two_builds_timed_against_each_other(llvm_bundle, tmp_path):
    """benchmarks/bundle_ab on two copies of one llvm bundle (the tool; its GPU runs time CUDA bundles): every
    shared non-generic function gets a row with both times and their ratio, after the outputs agree."""
    import tvm

    from benchmarks.bundle_ab import compare_bundles
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        shutil.copytree(llvm_bundle, d)
        m = json.loads((d / "manifest.json").read_text())
        # stand-in for a tuned kernel: a generic function listed at fixed sizes (the same name in both bundles)
        m["functions"].append({**m["functions"][0], "sizes": [1, 2, 9, 13, 8], "tuned": True, "schedule": "tuned"})
        (d / "manifest.json").write_text(json.dumps(m))

    rows = compare_bundles(a, b, rounds=2, reps=3, log=lambda *a: None, dev=tvm.cpu(0), timer=_wall_clock)
    assert len(rows) == 1 and rows[0]["sizes"] == [1, 2, 9, 13, 8] and rows[0]["max_abs_diff"] == 0
    assert rows[0]["a_us"] > 0 and rows[0]["b_over_a"] == rows[0]["b_us"] / rows[0]["a_us"]
    assert len(rows[0]["a_rounds_us"]) == 2


def test_two_builds_of_attention_kernels_timed(tmp_path, monkeypatch):
    """benchmarks/bundle_ab on FusedAttention: a kernel with a head size and no sizes of its own (a tensor-core
    kernel's manifest form, pointed here at the llvm generic function) is timed at each benchmarks.attention shape
    it serves (its causality, head size, and N up to its max_n), with V, O as [B, H, M, D]."""
    import tvm

    import benchmarks.attention
    from benchmarks.bundle_ab import compare_bundles
    from flashgemm.bundle.kernel_library import export_bundle
    from flashgemm.op.variant import Variant
    monkeypatch.setattr(benchmarks.attention, "SHAPES", {"short": (1, 2, 24, 16, False), "long": (1, 2, 40, 16, False),
                                                         "causal": (1, 2, 24, 16, True), "d8": (1, 2, 24, 8, False)})
    export_bundle(tmp_path / "a", "llvm", variants=[Variant("float16", True, False, "none", False)], attention=True,
                  log=lambda *a: None)
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    (generic,) = [f for f in m["functions"] if f.get("op") == "FusedAttention"]
    generic.update(schedule="default", form="mma", head_size=16, max_n=32)
    (tmp_path / "a" / "manifest.json").write_text(json.dumps(m))
    shutil.copytree(tmp_path / "a", tmp_path / "b")

    rows = compare_bundles(tmp_path / "a", tmp_path / "b", only="^fa_f16_.*none", rounds=1, reps=2,
                           log=lambda *a: None, dev=tvm.cpu(0), timer=_wall_clock)  # --only: a regular expression
    assert [r["sizes"] for r in rows] == [[1, 2, 24, 24, 16]], rows  # not past max_n, causal or another head size
    assert rows[0]["max_abs_diff"] == 0 and rows[0]["a_us"] > 0
    assert not compare_bundles(tmp_path / "a", tmp_path / "b", only="^f16_", rounds=1, reps=2, log=lambda *a: None,
                               dev=tvm.cpu(0), timer=_wall_clock)
    # --shape: the shapes given instead of benchmarks.attention's (only those of the kernel's head size and
    # causality, N up to its max_n)
    rows = compare_bundles(tmp_path / "a", tmp_path / "b", only="^fa_f16_.*none", rounds=1, reps=2,
                           log=lambda *a: None, dev=tvm.cpu(0), timer=_wall_clock,
                           shapes=[(2, 1, 8, 16, False), (1, 1, 8, 16, True), (1, 1, 40, 16, False),
                                   (1, 1, 8, 8, False)])
    assert [r["sizes"] for r in rows] == [[2, 1, 8, 8, 16]], rows


def test_attention_kernels_timed_with_one_row_bias_and_mask(tmp_path):
    """bundle_ab --one-row: the bias and mask as [B0, 1, 1, N] read through stride 0 (a padding mask), both builds
    agreeing on them."""
    import tvm

    from benchmarks.bundle_ab import compare_bundles
    from flashgemm.bundle.kernel_library import export_bundle
    from flashgemm.op.variant import Variant
    export_bundle(tmp_path / "a", "llvm", variants=[Variant("float16", True, True, "bool", False)], attention=True,
                  log=lambda *a: None)
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    (generic,) = [f for f in m["functions"] if f.get("op") == "FusedAttention" and not f.get("zero_nan_rows")]
    generic.update(schedule="default", form="mma", head_size=64, sizes=[2, 3, 24, 40, 64])
    (tmp_path / "a" / "manifest.json").write_text(json.dumps(m))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (row,) = compare_bundles(tmp_path / "a", tmp_path / "b", only=generic["name"], rounds=1, reps=2,
                             log=lambda *a: None, dev=tvm.cpu(0), timer=_wall_clock, one_row=True)
    assert row["sizes"] == [2, 3, 24, 40, 64] and row["max_abs_diff"] == 0


def test_bundle_ab_shape_argument():
    """bundle_ab --shape B,H,L,D[,causal]: parsed, or refused with the form it takes."""
    import argparse

    from benchmarks.bundle_ab import attention_shape
    assert attention_shape("4,32,2048,128,causal") == (4, 32, 2048, 128, True)
    assert attention_shape("16,16,512,80") == (16, 16, 512, 80, False)
    assert attention_shape("1,2,3,64,0") == (1, 2, 3, 64, False)
    for bad in ("16,16,512", "a,1,1,64", "1,1,1,64,yes"):
        with pytest.raises(argparse.ArgumentTypeError, match="B,H,L,D"):
            attention_shape(bad)


def test_fused_attention_kernels_are_checked(tmp_path):
    """FusedAttention's kernels run with V (D != K for the generic one) against fused_attention_ref, V's NaN
    included; a kernel of the wrong variant fails (here the causal kernel named as the non-causal one)."""
    from flashgemm.bundle.bundle_check import check_bundle
    from flashgemm.bundle.kernel_library import export_bundle
    from flashgemm.op.variant import Variant
    variants = [Variant("float16", True, False, "none", c) for c in (False, True)] + [
        Variant("bfloat16", False, True, "bool", True)]
    export_bundle(tmp_path, "llvm", variants=variants, attention=True, log=lambda *a: None)
    lines = []
    results = check_bundle(tmp_path, only="^fa_", log=lines.append)
    assert len(results) == 3 and all(r["ok"] for r in results), lines
    assert all("V[0,0,44,1]=nan" in r["poked"] and r["sizes"] == [1, 2, 37, 45, 19] for r in results), results
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    for f in manifest["functions"]:
        if f["name"] == "fa_f16_tb1_bias0_masknone_causal0_generic":
            f["name"] = "fa_f16_tb1_bias0_masknone_causal1_generic"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    results = check_bundle(tmp_path, only="^fa_f16", log=lines.append)
    assert [r["ok"] for r in results] == [False, True], lines
