"""scripts/check_bundle.py: every kernel of a bundle run once against the reference (CPU bundle here; the same
command runs the CUDA bundle on the GPU machine, also under compute-sanitizer)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(REPO, "scripts", "check_bundle.py")


@pytest.fixture(scope="module")
def llvm_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "llvm"
    proc = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "build.py"), "--target", "llvm", "--out",
                           str(out), "--no-native"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def _check(*args):
    return subprocess.run([sys.executable, CHECK, *map(str, args)], capture_output=True, text=True)


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
