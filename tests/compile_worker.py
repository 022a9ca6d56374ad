"""Compile-only CUDA tests' worker process (not a test module): see run_compile_worker."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from schedules import cuda_stub

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def run_compile_worker(worker: str, request: list, tmp_path_factory) -> list:
    """Run `worker` (Python source that prints "RESULT" + JSON) in a fresh process that can compile CUDA without a
    GPU: nvcc on PATH, TVM's nvcc mode, and the stub libcuda.so.1 where no real driver is present (as in
    test_cuda_codegen). Skips without nvcc; returns the parsed JSON."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        pytest.skip("nvcc not found (CUDA toolkit needed for compile-only CUDA tests)")
    env = dict(os.environ, TVM_CUDA_COMPILE_MODE="nvcc",
               PATH=os.path.dirname(nvcc) + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not cuda_stub.real_driver_present():
        if shutil.which("cc") is None and shutil.which("gcc") is None:
            pytest.skip("no C compiler to build the stub libcuda.so.1")
        env = cuda_stub.env_with_stub(cuda_stub.build_stub(tmp_path_factory.mktemp("stubcuda")), env)
    proc = subprocess.run([sys.executable, "-c", worker, json.dumps(request)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=1200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, f"build worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT"):])
