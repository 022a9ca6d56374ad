"""The package as a user installs it: the wheel built from this tree (scikit-build-core compiles the op library into
it), installed into a fresh virtual environment, and used from a directory outside the checkout with no PYTHONPATH:
tune a few llvm trials, build a bundle, rewrite a tiny model, run it in an ONNX Runtime session with the op and
compare it with the original model, after moving the bundle to another directory."""
import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINY_BERT = REPO / "tests" / "data" / "bert-large-tiny.f16.onnx"
pytestmark = pytest.mark.xdist_group("wheel")  # one worker builds the wheel once for the module (make test: loadgroup)
RUNTIME = ("onnxruntime", "xgboost-cpu")  # what the test extra of a CPU machine adds (pyproject.toml: cpu)

# In the fresh environment: the rewritten model against the original, both on the CPU EP, the op from the wheel.
_SESSION = r"""
import json, sys
import numpy as np, onnxruntime as ort
import flashgemm
original, rewritten, bundle = sys.argv[1:4]
so = flashgemm.session_options(bundle)
feeds = {}
for i in ort.InferenceSession(original, providers=["CPUExecutionProvider"]).get_inputs():
    shape = [d if isinstance(d, int) else 2 for d in i.shape]
    kind = i.type[len("tensor("):-1]
    feeds[i.name] = (np.ones(shape, np.int64) if kind == "int64" else
                     np.random.default_rng(0).standard_normal(shape).astype(np.float16))
want = ort.InferenceSession(original, providers=["CPUExecutionProvider"]).run(None, feeds)
got = ort.InferenceSession(rewritten, so, providers=["CPUExecutionProvider"]).run(None, feeds)
err = max(float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max()) for g, w in zip(got, want))
print(json.dumps({"library": flashgemm.get_library_path(), "max_abs_diff": err}))
"""


def _run(cmd, cwd, env, timeout=900):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd[0]}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(bin directory of a fresh venv with the wheel installed, the wheel)."""
    root = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # Its own CMake tree: pyproject's build-dir is shared by the checkout, and xdist workers that each run this module's
    # tests would otherwise configure the same tree at once (CMake then fails to generate its try_compile projects).
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root / "dist", f"-Cbuild-dir={root / 'build'}",
          REPO], root, env)
    (wheel,) = (root / "dist").glob("flashgemm-*.whl")
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    _run([bin_dir / "python", "-m", "pip", "install", "-q", wheel, *RUNTIME], root, env)
    return bin_dir, wheel


def test_the_wheel_holds_the_package_and_its_op_library_only(installed):
    _, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"flashgemm"}, tops  # benchmarks/, tests/ and results/ stay in the repository
    assert "flashgemm/lib/libflashgemm_ort.so" in names
    assert any(n.startswith("flashgemm/databases/sm_90/") for n in names)  # the shipped tuning databases
    assert wheel.name.endswith("-py3-none-linux_x86_64.whl"), wheel.name


def test_the_installed_library_finds_tvm_relative_to_itself(installed):
    bin_dir, _ = installed
    lib = _run([bin_dir / "python", "-c", "import flashgemm; print(flashgemm.get_library_path())"], "/", None).strip()
    assert Path(lib).parent == next((bin_dir.parent / "lib").glob("python3*/site-packages/flashgemm/lib"))
    dynamic = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    assert "[$ORIGIN/../../tvm/lib:$ORIGIN/../../tvm_ffi/lib]" in dynamic, dynamic


@pytest.mark.slow
def test_tune_build_rewrite_and_run_outside_the_checkout(installed, tmp_path):
    bin_dir, _ = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    work = tmp_path / "user"
    work.mkdir()
    _run(["flashgemm-tune", "--target", "llvm", "--workload", "demo", "--trials", "4", "--db", "db"], work, env)
    _run(["flashgemm-build", "--target", "llvm", "--db", "db", "--out", "bundle"], work, env)
    assert (work / "bundle" / "manifest.json").is_file() and (work / "bundle" / "flashgemm_kernels.so").is_file()
    report = _run(["flashgemm-rewrite", TINY_BERT, "model.onnx", "--json", "report.json"], work, env)
    assert json.loads((work / "report.json").read_text())["fused"], report
    moved = tmp_path / "elsewhere" / "bundle"  # a bundle is a directory: copied or moved, it serves as it is
    moved.parent.mkdir()
    (work / "bundle").rename(moved)
    out = json.loads(_run(["python", "-c", _SESSION, TINY_BERT, work / "model.onnx", moved], work, env)
                     .strip().splitlines()[-1])
    assert str(bin_dir.parent) in out["library"], out
    assert out["max_abs_diff"] < 2e-2, out  # fp16 model outputs, fused against unfused
