"""Builds never hang: the kernel bundle's compile limits (per tuned kernel and the whole bundle, llvm and CUDA alike,
and the register measurement of tuned CUDA kernels).

Most tests run a stand-in for the compile worker (kernel_library.WORKER) that hangs on one kernel and starts a child
of its own, as nvcc starts cicc and ptxas: past the limit both must be gone. Two hang the real worker's nvcc (a stub on
PATH), through a stub CUDA driver where there is none.
"""
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from flashgemm.bundle import kernel_library
from flashgemm.codegen import cuda_stub
from flashgemm.spaces import llvm
from flashgemm.kernel.fused_gemm_softmax import runtime_func
from flashgemm.op.workloads import parse
from flashgemm.bundle.best import TunedKernel

STUB_WORKER = r'''
import os, subprocess, sys, time
target, mod_path, *export = sys.argv[1:]
hang_in = os.environ["STUB_HANG_IN"]  # "probe": a tuned kernel compiled alone; "bundle": the whole bundle; "any"
if os.environ["STUB_MARKER"] in open(mod_path).read() and (hang_in == "any" or bool(export) == (hang_in == "bundle")):
    child = subprocess.Popen(["sleep", "300"])  # what a compile starts (nvcc: cicc, ptxas)
    with open(os.environ["STUB_PIDS"], "a") as f:
        f.write(f"{os.getpid()} {child.pid}\n")
    time.sleep(300)
if export:
    open(export[0], "wb").write(b"(stand-in: nothing was compiled)")
'''


def _alive(pid: int) -> bool:
    """Whether pid runs (a zombie waiting for its reaper does not)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def _hung_pids(path: Path) -> list:
    return [int(p) for line in path.read_text().splitlines() for p in line.split()] if path.exists() else []


def _assert_all_gone(pids_file: Path, expected_hangs: int) -> None:
    pids = _hung_pids(pids_file)
    assert len(pids) == 2 * expected_hangs, f"the stand-in hung {len(pids) // 2} times, not {expected_hangs}"
    time.sleep(0.2)  # (killed orphans are reaped by init)
    assert not [p for p in pids if _alive(p)], "a compile past its limit left processes running"


@pytest.fixture
def stub_worker(tmp_path, monkeypatch):
    """kernel_library.WORKER replaced by STUB_WORKER; returns (set(hang_in, marker), the file of the pids it hung)."""
    script = tmp_path / "stub_worker.py"
    script.write_text(STUB_WORKER)
    monkeypatch.setattr(kernel_library, "WORKER", [sys.executable, str(script)])
    pids = tmp_path / "hung-pids"
    monkeypatch.setenv("STUB_PIDS", str(pids))

    def hang(where: str, marker: str):
        monkeypatch.setenv("STUB_HANG_IN", where)
        monkeypatch.setenv("STUB_MARKER", marker)
    return hang, pids


def _fake_tuned():
    """A 'tuned' kernel of the demo workload (the generic schedule on its static shape: the stand-in compiles
    nothing), and its variant."""
    wl = parse("demo")
    sch = llvm.generic_schedule(runtime_func(wl.variant, wl.canonical))
    return TunedKernel(wl.dir_name, wl.variant, wl.canonical, sch, run_secs=1e-4), wl.variant


def _functions(bundle: Path) -> list:
    return [f["name"] for f in json.loads((bundle / "manifest.json").read_text())["functions"]]


@pytest.mark.parametrize("target,hangs", [("llvm", 1), ("sm_80", 2)])
def test_a_tuned_kernel_past_the_limit_is_left_out_and_killed(target, hangs, stub_worker, tmp_path, monkeypatch):
    """A tuned kernel whose compile hangs, alone or in the bundle, is killed with what it started, left out with a
    warning, and served by the generic one. On llvm each tuned kernel is compiled alone first (one hang); on CUDA
    (nvcc) the bundle is compiled at once and its tuned kernels probed only once it runs past its limit (two)."""
    monkeypatch.setattr(cuda_stub, "require_cuda_codegen", lambda: None)  # (the stand-in compiles nothing)
    tk, variant = _fake_tuned()
    name = kernel_library.tuned_name(tk.variant, tk.shape, tk.any_batch)
    hang, pids = stub_worker
    hang("any", name)
    said = []
    t0 = time.monotonic()
    kernel_library.export_bundle(tmp_path / "b", target, [tk], variants=[variant], log=said.append,
                                 compile_limit_s=1)
    assert time.monotonic() - t0 < 30
    assert (f"warning: left out tuned kernel {name} (workload demo.f16): its compile did not finish in 1 s; its calls "
            f"go to the generic kernel. Retune the workload, or give it more time (flashgemm-build --compile-limit)") in said
    assert _functions(tmp_path / "b") == [kernel_library.generic_name(variant)]
    _assert_all_gone(pids, hangs)


def test_the_whole_bundle_past_its_limit_falls_back_then_fails_in_one_line(stub_worker, tmp_path):
    """The bundle gets the per-kernel limit once a kernel it holds: past it, its tuned kernels are left out as above
    and the generic ones compiled alone; when even those do not finish, one line says how to give them more time."""
    tk, variant = _fake_tuned()
    name = kernel_library.tuned_name(tk.variant, tk.shape, tk.any_batch)
    hang, pids = stub_worker
    hang("bundle", name)  # the kernel compiles alone, the bundle holding it does not
    said = []
    kernel_library.export_bundle(tmp_path / "b", "llvm", [tk], variants=[variant], log=said.append, compile_limit_s=1)
    assert (f"warning: left out tuned kernel {name} (workload demo.f16): the bundle's compile did not finish in 2 s "
            f"(1 s a kernel); its calls go to the generic kernel") in " ".join(said)
    assert _functions(tmp_path / "b") == [kernel_library.generic_name(variant)]
    _assert_all_gone(pids, 1)

    hang("bundle", kernel_library.generic_name(variant))  # the generic kernel hangs: nothing left to fall back on
    with pytest.raises(kernel_library.CompileError) as err:
        kernel_library.export_bundle(tmp_path / "c", "llvm", [tk], variants=[variant], log=said.append,
                                     compile_limit_s=1)
    assert "\n" not in str(err.value) and str(err.value) == (
        "the llvm bundle (1 generic kernel) did not compile in 1 s (1 s a kernel); give it more time: flashgemm-build "
        "--compile-limit SECONDS (a kernel; 0: no limit)")
    assert not (tmp_path / "c" / kernel_library.KERNELS_SO).exists()
    assert not (tmp_path / "c" / (kernel_library.KERNELS_SO + ".tmp")).exists()
    _assert_all_gone(pids, 3)


def test_a_failing_bundle_compile_is_one_line_naming_its_log(stub_worker, tmp_path, monkeypatch):
    script = tmp_path / "failing_worker.py"
    script.write_text("import sys\nprint('a long compiler diagnostic')\nsys.exit('error: the compiler gave up')\n")
    monkeypatch.setattr(kernel_library, "WORKER", [sys.executable, str(script)])
    _, variant = _fake_tuned()
    with pytest.raises(kernel_library.CompileError) as err:
        kernel_library.export_bundle(tmp_path / "b", "llvm", [], variants=[variant], log=lambda *_: None,
                                     compile_limit_s=30)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("the llvm bundle does not compile: error: the compiler gave up; full "
                                              "output in ")
    log = Path(msg.rsplit("full output in ", 1)[1])
    assert "a long compiler diagnostic" in log.read_text()
    shutil.rmtree(log.parent)  # (kept by export_bundle for the reader of the message)


@pytest.fixture
def hung_nvcc(tmp_path, monkeypatch):
    """An nvcc first on PATH that hangs with a child (as nvcc waits on cicc or ptxas), and a stub CUDA driver for the
    workers where there is none (TVM then runs nvcc without a GPU); returns the file of the pids it hung."""
    if not cuda_stub.real_driver_present():
        stub = cuda_stub.build_stub(tmp_path / "stub-libcuda")
        for k, v in cuda_stub.env_with_stub(stub, {}).items():
            monkeypatch.setenv(k, v if k != "LD_LIBRARY_PATH" else v + os.environ.get("LD_LIBRARY_PATH", ""))
        monkeypatch.setattr(cuda_stub, "require_cuda_codegen", lambda: None)  # (this process has no CUDA runtime)
    bin_dir, pids = tmp_path / "bin", tmp_path / "nvcc-pids"
    bin_dir.mkdir()
    nvcc = bin_dir / "nvcc"
    nvcc.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! >> {pids}\nwait\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield pids
    assert _hung_pids(pids), "nvcc was never called within the limit: nothing was tested (a slow machine?)"
    _assert_all_gone(pids, 1)


def test_a_hung_nvcc_is_killed_at_the_bundle_limit(hung_nvcc, tmp_path):
    """The real worker compiling a CUDA bundle: its nvcc and what that started are killed at the limit, and the
    build stops with one line."""
    _, variant = _fake_tuned()
    with pytest.raises(kernel_library.CompileError, match=r"^the sm_80 bundle \(1 generic kernel\) did not compile "
                                                          r"in 12 s \(12 s a kernel\); give it more time"):
        kernel_library.export_bundle(tmp_path / "b", "sm_80", [], variants=[variant], log=lambda *_: None,
                                     compile_limit_s=12)


def test_a_hung_register_measurement_leaves_the_kernel_uncapped(hung_nvcc):
    """A tuned CUDA kernel's register measurement (best._max_registers, an nvcc compile of its tuning form, which
    flashgemm-build runs under --compile-limit) past the limit: killed, and the kernel ships without a register cap,
    with the warning of a measurement that failed."""
    from types import SimpleNamespace  # noqa: PLC0415

    import tvm  # noqa: PLC0415

    from flashgemm.spaces import cuda_generic  # noqa: PLC0415
    from flashgemm.bundle import best  # noqa: PLC0415
    wl = parse("demo")
    func = runtime_func(wl.variant, wl.canonical, align=64)
    # a record whose workload is already scheduled (the generic kernel's schedule) and whose trace is empty
    rec = SimpleNamespace(trace=tvm.s_tir.schedule.Trace([], {}),
                          workload=SimpleNamespace(mod=cuda_generic.generic_schedule(func).mod))
    with pytest.warns(UserWarning, match=r"the register use of a tuned kernel could not be measured \(its compile did "
                                         r"not finish in 12 s\); its shipped forms are compiled without a register cap"):
        assert best._max_registers(rec, "sm_80", compile_limit_s=12) is None


def test_build_py_reports_a_failing_bundle_compile_in_one_line(tmp_path, monkeypatch, capsys):
    import importlib.util  # noqa: PLC0415
    script = tmp_path / "failing_worker.py"
    script.write_text("import sys\nsys.exit('error: the compiler gave up')\n")
    monkeypatch.setattr(kernel_library, "WORKER", [sys.executable, str(script)])
    from flashgemm.cli import build  # noqa: PLC0415
    with pytest.raises(SystemExit) as exit_:
        build.main(["--target", "llvm", "--db", str(tmp_path / "db"), "--out", str(tmp_path / "out")])
    rc = exit_.value.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("flashgemm-build: error: the llvm bundle does not compile: error: the compiler gave up; full "
                             "output in ")
    shutil.rmtree(Path(err[0].rsplit("full output in ", 1)[1]).parent)
