"""A failing development build of the op library (flashgemm.ort.native, the source tree's CMake project) is one line
with the fix (the tool to install, or the log that holds the full output), not a traceback."""
import os
import stat
from pathlib import Path

import pytest

from flashgemm.ort import native


@pytest.fixture
def native_sandbox(tmp_path, monkeypatch):
    """native's build tree and ORT headers in tmp_path (headers present), and a bin/ directory first on PATH for
    stand-in tools; returns bin/."""
    monkeypatch.setattr(native, "build_dir", lambda with_cuda=False: tmp_path / "native")
    headers = tmp_path / "ort-headers"
    headers.mkdir()
    (headers / "onnxruntime_c_api.h").write_text("")
    monkeypatch.setattr(native, "ORT_INCLUDE_DIR", headers)
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


def _one_line_error(out: Path) -> str:
    with pytest.raises(native.NativeBuildError) as err:
        native.build_custom_op_library(out, log=lambda *a: None)
    line = str(err.value)
    assert "\n" not in line, line
    return line


@pytest.mark.parametrize("cmake, needle", [
    (CMAKE_CONFIGURE_FAILS, "configuring libflashgemm_ort.so (cmake) failed (exit 1): CMake Error at "
                            "CMakeLists.txt:6 (project): No CMAKE_CXX_COMPILER could be found.; full output in "),
    (CMAKE_COMPILE_FAILS, "compiling libflashgemm_ort.so failed (exit 2): src/op.cc:12:3: error: 'Ort::Foo' has not "
                          "been declared; full output in "),
])
def test_a_failing_native_build_is_one_line_naming_its_log(native_sandbox, tmp_path, cmake, needle):
    _tool(native_sandbox, "cmake", cmake)
    line = _one_line_error(tmp_path / "out")
    assert needle in line
    log = tmp_path / "native" / native.BUILD_LOG
    assert line.endswith(f"full output in {log}") and "[ 50%]" not in line
    assert "echo" not in log.read_text() and cmake.splitlines()[1].split('"')[1] in log.read_text()  # all of it


def test_missing_build_tools_name_the_install_command(native_sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(native_sandbox))  # nothing there: no cmake, no make, no compiler
    monkeypatch.delenv("CXX", raising=False)
    assert _one_line_error(tmp_path / "out") == (
        "building libflashgemm_ort.so needs cmake, make and a C++17 compiler; not found: cmake, make, a C++ compiler "
        "(g++); install them: apt-get install cmake make g++ (cmake also: pip install cmake)")


def test_missing_ort_headers_is_one_line(native_sandbox, tmp_path, monkeypatch):
    """The ORT headers' directory lacks onnxruntime_c_api.h (a checkout without third_party/, or a wrong
    ORT_INCLUDE_DIR): one line naming the directory and where the headers come from; cmake never runs."""
    monkeypatch.setattr(native, "ORT_INCLUDE_DIR", tmp_path / "no-headers")
    _tool(native_sandbox, "cmake", "echo cmake ran >&2; exit 1\n")
    assert _one_line_error(tmp_path / "out") == (
        f"{tmp_path / 'no-headers'} has no onnxruntime_c_api.h: give the directory of ONNX Runtime's C/C++ API "
        "headers (the repository vendors them in third_party/onnxruntime/include)")


def test_without_a_source_tree_the_build_names_the_installed_library(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "SOURCE_DIR", tmp_path)
    line = _one_line_error(tmp_path / "out")
    assert f"no source tree at {tmp_path} (CMakeLists.txt)" in line and "flashgemm.get_library_path()" in line


def test_vendored_ort_headers_are_api_21():
    """The library asks the host ORT for its headers' API version: 21 keeps every ORT from 1.21 on able to load it."""
    text = (native.ORT_INCLUDE_DIR / "onnxruntime_c_api.h").read_text()
    assert "#define ORT_API_VERSION 21" in text
    for name in ("onnxruntime_cxx_api.h", "onnxruntime_cxx_inline.h", "onnxruntime_float16.h"):
        assert (native.ORT_INCLUDE_DIR / name).is_file(), name
