"""Every command-line mistake is one line, `<script>: error: <what> (<fix>)`, with exit status 2: a wrong target,
a missing file, a file that is not what the script expects, a bad number. Each case runs the script in a process of
its own, as a user would (flashgemm.cli.usage is what they share)."""
import os
import subprocess
from pathlib import Path

import commands
import pytest

REPO = Path(__file__).resolve().parent.parent


def _not_onnx(tmp: Path) -> Path:
    path = tmp / "notes.onnx"
    path.write_text("these are notes, not a model\n")
    return path


def _cut_bundle(tmp: Path) -> Path:
    """A bundle whose kernels .so is cut in half (a shared library of this Python stands in for the kernels):
    dlopen would die of SIGBUS on it."""
    import _ctypes  # noqa: PLC0415  (an extension module: a small ELF shared library at hand)
    d = tmp / "bundle"
    d.mkdir()
    data = Path(_ctypes.__file__).read_bytes()
    (d / "flashgemm_kernels.so").write_bytes(data[:len(data) // 2])
    (d / "manifest.json").write_text('{"format": 1, "device": "cpu", "target": "llvm", "functions": []}')
    return d


def _not_a_bench_result(tmp: Path) -> Path:
    path = tmp / "bench.json"
    path.write_text("{")
    return path


# (script, arguments: str, or a function of the temporary directory for a path; what stderr must say, the fix last)
CASES = {
    "bench-unknown-target": ("benchmarks.bench", ["--target", "sm_999", "--workload", "w1"],
                             ["unknown target 'sm_999'", "choose one of: auto, llvm, sm_80, sm_89, sm_90"]),
    "bench-zero-reps": ("benchmarks.bench", ["--target", "sm_90", "--workload", "w1", "--reps", "0"],
                        ["--reps: invalid value '0'", "give a whole number of at least 1"]),
    "build-unknown-target": ("build", ["--target", "sm_999"], ["choose one of: auto, llvm"]),
    "build-model-not-onnx": ("build", ["--target", "llvm", "--out", lambda t: t / "out",
                                          "--from-model", _not_onnx],
                             ["is not an ONNX model", "give an .onnx model, e.g. one exported by flashgemm-getmodel"]),
    "build-negative-limit": ("build", ["--compile-limit", "-5"], ["give a number at least 0"]),
    "build-attention-model-without-model": ("build", ["--target", "llvm", "--attention", "model"],
                                            ["--attention model needs --from-model", "--attention all"]),
    "build-attention-unknown-choice": ("build", ["--target", "llvm", "--attention", "most"],
                                       ["--attention: invalid choice: 'most'"]),
    "rewrite-not-onnx": ("rewrite", [_not_onnx, lambda t: t / "out.onnx"],
                         ["notes.onnx is not an ONNX model", "flashgemm-getmodel"]),
    "rewrite-missing-file": ("rewrite", [lambda t: t / "missing.onnx", lambda t: t / "out.onnx"],
                             ["missing.onnx: no such file", "give an .onnx model"]),
    "tune-unknown-workload": ("tune", ["--target", "llvm", "--workload", "nonsense"],
                              ["unknown workload 'nonsense'", "use a preset"]),
    "tune-trials-not-a-number": ("tune", ["--workload", "demo", "--trials", "many"],
                                 ["--trials: invalid value 'many'", "give a whole number"]),
    "check-bundle-cut-kernels": ("check_bundle", [_cut_bundle], ["truncated: ", "rebuild the bundle"]),
    "accuracy-unknown-target": ("benchmarks.bench_accuracy", ["--target", "sm_999"], ["--target: unknown target", "choose one of"]),
    "getmodel-zero-batch": ("getmodel", ["--batch", "0"], ["--batch: invalid value '0'", "at least 1"]),
    "getmodel-dynamic-seq-vit": ("getmodel", ["--model", "vit-b16", "--dynamic-seq"],
                                 ["--dynamic-seq: the sequence length of vit-b16 is fixed by its input size",
                                  "use --dynamic-seq with --model bert-large or bert-small only"]),
    "bench-report-not-json": ("benchmarks.bench_report", [_not_a_bench_result],
                              ["bench.json", "give a JSON that python -m benchmarks.bench --out wrote"]),
    "dram-bytes-cpu-target": ("benchmarks.bench_dram_bytes", ["--target", "llvm", "--workload", "w1"],
                              ["resolves to llvm", "run it on a GPU machine"]),
    "bench-gemm-odd-size": ("benchmarks.bench_gemm", ["--target", "sm_90", "--size", "100", "100", "100", "--out",
                                              lambda t: t / "r.json"], ["multiples of 16", "round them up"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_mistake_is_one_line_with_the_fix(case, tmp_path):
    script, args, says = CASES[case]
    argv = [str(a(tmp_path)) if callable(a) else a for a in args]
    # from another directory: the messages must not depend on the current one being the repository
    # (the benchmarks are not installed: they run from the repository, as python -m benchmarks.<name>)
    proc = subprocess.run(commands.argv(script) + argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)} if script.startswith("benchmarks.") else None)
    err = proc.stderr.strip()
    assert proc.returncode in (1, 2), (proc.returncode, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    last = err.splitlines()[-1] if err else ""
    assert last.startswith(f"{commands.prog(script)}: error: ") and last.endswith(")"), err[-3000:]
    assert "\nusage:" not in "\n" + err, err  # no usage block: --help has it
    for needle in says:
        assert needle in last, last
    assert last.rindex(says[-1]) > last.index(": error: "), last


def test_every_script_uses_the_shared_parser():
    """A script written with argparse.ArgumentParser would print the usage block and no fix."""
    paths = [*(REPO / "flashgemm" / "cli").glob("*.py"), *(REPO / "benchmarks").glob("bench*.py")]
    for path in sorted(paths):
        if path.name in ("__init__.py", "usage.py"):
            continue
        text = path.read_text()
        assert "argparse.ArgumentParser(" not in text and "ArgumentParser(" in text, path.name


def test_argparse_mistakes_name_the_fix(capsys):
    """argparse's own errors (a missing argument, an unknown option, a bad int) get a fix; one already ending in a
    parenthesis keeps its own."""
    from flashgemm.cli.usage import ArgumentParser, count, number
    ap = ArgumentParser(prog="x.py")
    ap.add_argument("--n", type=int)
    ap.add_argument("--k", type=count(1))
    ap.add_argument("--f", type=number(positive=True))
    ap.add_argument("--mode", choices=["a", "b"])
    for argv, line in ((["--n", "q"], "x.py: error: argument --n: invalid int value: 'q' (give a whole number)"),
                       (["--k", "0"], "x.py: error: argument --k: invalid value '0' (give a whole number of at least "),
                       (["--f", "nan"], "x.py: error: argument --f: invalid value 'nan' (give a number above 0)"),
                       (["--mode", "c"], "x.py: error: argument --mode: invalid choice: 'c' (choose from "),
                       (["--bogus"], "x.py: error: unrecognized arguments: --bogus (see x.py --help)")):
        with pytest.raises(SystemExit) as exit_:
            ap.parse_args(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(line) and err.endswith(")\n") and err.count("\n") == 1, err
    with pytest.raises(SystemExit):
        with ap.errors(ValueError, what="--workload", fix="use a preset"):
            raise ValueError("unknown workload 'q'\nsecond line")
    assert capsys.readouterr().err == "x.py: error: --workload: unknown workload 'q' second line (use a preset)\n"

