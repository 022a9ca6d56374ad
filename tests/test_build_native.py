"""A failing native build (the ONNX Runtime custom-op library) reached through the CLI scripts is one line with the
fix (the tool to install, or the log that holds the full output), not a traceback."""
import importlib.util
import os
import stat
from pathlib import Path

import pytest

from ort_integration import kernel_library, native

REPO = Path(__file__).resolve().parent.parent


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_script", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def native_sandbox(tmp_path, monkeypatch):
    """native's build tree and ORT headers in tmp_path (headers present), the kernel bundle's compile a no-op, and
    a bin/ directory first on PATH for stand-in tools; returns bin/."""
    monkeypatch.setattr(native, "build_dir", lambda with_cuda=False: tmp_path / "native")
    headers = tmp_path / "ort-headers"
    headers.mkdir()
    (headers / "onnxruntime_c_api.h").write_text("")
    monkeypatch.setattr(native, "ORT_INCLUDE_DIR", headers)
    monkeypatch.setattr(kernel_library, "export_bundle", lambda *a, **k: None)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


CMAKE_CONFIGURE_FAILS = """echo "-- The CXX compiler identification is unknown"
echo "CMake Error at CMakeLists.txt:6 (project):"
echo "  No CMAKE_CXX_COMPILER could be found."
echo "-- Configuring incomplete, errors occurred!"
exit 1
"""
CMAKE_COMPILE_FAILS = """[ "$1" = "--build" ] || exit 0
echo "[ 50%] Building CXX object CMakeFiles/flashgemm_ort.dir/src/op.cc.o"
echo "src/op.cc:12:3: error: 'Ort::Foo' has not been declared"
echo "make[2]: *** [CMakeFiles/flashgemm_ort.dir/build.make:76: src/op.cc.o] Error 1"
exit 2
"""


def _status(main, argv) -> int:
    """A script's main(argv): its return value, or the status it exits with (its errors exit 2)."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def _one_line_error(capsys, rc: int, script: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: error: "), err
    return lines[0]


@pytest.mark.parametrize("cmake, needle", [
    (CMAKE_CONFIGURE_FAILS, "configuring libflashgemm_ort.so (cmake) failed (exit 1): CMake Error at "
                            "CMakeLists.txt:6 (project): No CMAKE_CXX_COMPILER could be found.; full output in "),
    (CMAKE_COMPILE_FAILS, "compiling libflashgemm_ort.so failed (exit 2): src/op.cc:12:3: error: 'Ort::Foo' has not "
                          "been declared; full output in "),
])
def test_a_failing_native_build_is_one_line_naming_its_log(native_sandbox, tmp_path, capsys, cmake, needle):
    _tool(native_sandbox, "cmake", cmake)
    line = _one_line_error(capsys, _status(_script("build").main, ["--target", "llvm", "--db", str(tmp_path / "db"),
                                                          "--out", str(tmp_path / "out")]), "build.py")
    assert needle in line
    log = tmp_path / "native" / native.BUILD_LOG
    assert line.endswith(f"full output in {log}") and "[ 50%]" not in line
    assert "echo" not in log.read_text() and cmake.splitlines()[1].split('"')[1] in log.read_text()  # all of it


def test_missing_build_tools_name_the_install_command(native_sandbox, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(native_sandbox))  # nothing there: no cmake, no make, no compiler
    monkeypatch.delenv("CXX", raising=False)
    line = _one_line_error(capsys, _status(_script("build").main, ["--target", "llvm", "--db", str(tmp_path / "db"),
                                                          "--out", str(tmp_path / "out")]), "build.py")
    assert line == ("build.py: error: building libflashgemm_ort.so needs cmake, make and a C++17 compiler; not found: "
                    "cmake, make, a C++ compiler (g++); install them: apt-get install cmake make g++ (cmake also: pip "
                    "install cmake)")


def test_missing_ort_headers_is_one_line(native_sandbox, tmp_path, capsys, monkeypatch):
    """The ORT headers' directory lacks onnxruntime_c_api.h (a checkout without third_party/, or a wrong
    ORT_INCLUDE_DIR): one line naming the directory and where the headers come from; cmake never runs."""
    monkeypatch.setattr(native, "ORT_INCLUDE_DIR", tmp_path / "no-headers")
    _tool(native_sandbox, "cmake", "echo cmake ran >&2; exit 1\n")
    line = _one_line_error(capsys, _status(_script("build").main, ["--target", "llvm", "--db", str(tmp_path / "db"),
                                                          "--out", str(tmp_path / "out")]), "build.py")
    want = (f"build.py: error: {tmp_path / 'no-headers'} has no onnxruntime_c_api.h: give the directory of ONNX "
            "Runtime's C/C++ API headers (the repository vendors them in third_party/onnxruntime/include)")
    assert line == want, line


def test_vendored_ort_headers_are_api_21():
    """The library asks the host ORT for its headers' API version: 21 keeps every ORT from 1.21 on able to load it."""
    text = (native.ORT_INCLUDE_DIR / "onnxruntime_c_api.h").read_text()
    assert "#define ORT_API_VERSION 21" in text
    for name in ("onnxruntime_cxx_api.h", "onnxruntime_cxx_inline.h", "onnxruntime_float16.h"):
        assert (native.ORT_INCLUDE_DIR / name).is_file(), name


def test_demo_reports_a_failing_native_build_in_one_line(native_sandbox, tmp_path, capsys, monkeypatch):
    from tuning_db import best, tuner  # noqa: PLC0415
    monkeypatch.setattr(tuner, "tune", lambda *a, **k: None)
    monkeypatch.setattr(best, "load_all", lambda *a, **k: [])
    _tool(native_sandbox, "cmake", CMAKE_CONFIGURE_FAILS)
    line = _one_line_error(capsys, _status(_script("demo").main, ["--target", "llvm"]), "demo.py")
    assert "configuring libflashgemm_ort.so (cmake) failed (exit 1): CMake Error" in line
