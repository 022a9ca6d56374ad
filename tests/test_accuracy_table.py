"""The accuracy table (benchmarks/accuracy.py, python -m benchmarks.bench_accuracy) on the CPU: its numbers for a few
tiny llvm cases are computed and plausible, its error measures catch a wrong P, and the CLI writes JSON + markdown.
About 15 s on 2 cores (TVM's import and six generic-kernel compiles; the CLI runs in-process)."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import commands
import pytest

from benchmarks import accuracy

REPO = Path(__file__).resolve().parent.parent


def usage():
    """python -m benchmarks.bench_accuracy as a module: its main() runs in this process, where TVM is loaded already."""
    return commands.module("benchmarks.bench_accuracy")


@pytest.fixture(scope="module")
def table():
    return accuracy.accuracy_table("llvm", accuracy.default_cases(names=["plain", "masked-rows"]),
                                   log=lambda *_: None)


def _row(table, dtype, case):
    (row,) = [r for r in table["rows"] if r["dtype"] == dtype and r["case"] == case]
    assert "error" not in row, row
    return row


@pytest.mark.parametrize("dtype", accuracy.DTYPES)
@pytest.mark.parametrize("case", ["plain", "masked-rows"])
def test_llvm_errors_are_computed_and_at_the_output_rounding(table, dtype, case):
    row = _row(table, dtype, case)
    f, g = row["vs_fp64"], row["vs_ort_fp32"]
    assert row["kernel"].startswith("generic") and row["nonfinite"] == 0
    # not zero (P really is rounded to fp16/bf16), and no worse than rounding the exact result makes it: the
    # generic llvm kernel computes in fp32
    assert 0 < f["output_rounding_max_abs"] <= f["max_abs"] <= 1.01 * f["output_rounding_max_abs"] + 1e-6
    assert 0 < f["max_rel"] <= accuracy.OUTPUT_ROUNDING_REL[dtype] * 1.01
    assert f["test_pass"] and f["max_abs"] <= accuracy.TEST_ATOL[dtype]
    assert g["golden_max_abs_vs_fp64"] < 1e-5  # the FP32 golden itself is close to exact
    assert abs(g["max_abs"] - f["max_abs"]) < 1e-5
    # the seed's rtol=1e-3 holds for fp16 and cannot for bf16 (its output rounding is 2^-8 relative)
    assert g["seed_pass"] == (dtype == "float16")
    assert (g["seed_ratio"] < 0.6) if dtype == "float16" else (1 < g["seed_ratio"] < 5)


def test_fully_masked_rows_are_counted_and_ort_differs_there(table):
    fp16, bf16 = _row(table, "float16", "masked-rows"), _row(table, "bfloat16", "masked-rows")
    assert fp16["fully_masked_rows"] == bf16["fully_masked_rows"] == 3
    # -1e9 overflows to -inf in fp16: ORT's Softmax gives NaN on all three rows; bf16 keeps -1e9 finite, so ORT
    # gives a nonzero row where the mask holds -1e9 (the contract: zeros)
    assert fp16["vs_ort_fp32"]["golden_on_fully_masked_rows"] == {"nan": 3, "nonzero": 0, "zero": 0}
    assert bf16["vs_ort_fp32"]["golden_on_fully_masked_rows"] == {"nan": 1, "nonzero": 2, "zero": 0}
    assert fp16["vs_ort_fp32"]["rows_compared"] == 2 * 2 * 16 - 3


def test_compare_catches_a_perturbed_p():
    """The error measures on our kernel's real P, then on copies of it made wrong in one element each."""
    wl = accuracy.default_cases(["float16"], ["masked-rows"])[0].workload
    feeds = accuracy.make_feeds(wl, "rows")
    run_ours, _ = accuracy.our_runner(wl, "llvm", log=lambda *_: None)
    p = run_ours(feeds).astype(np.float64)
    ref, gold = accuracy.reference(wl, feeds), accuracy.golden(wl, feeds)
    good = accuracy.compare(p, ref, gold, "float16")
    assert good["vs_fp64"]["test_pass"] and good["vs_ort_fp32"]["seed_pass"]
    assert good["vs_fp64"]["max_abs_vs_rounded"] <= 1e-3  # within an fp16 ulp of the correctly rounded P

    live = np.argwhere(ref >= 0.05)[0]
    wrong = p.copy()
    wrong[tuple(live)] += 3e-3  # over the tests' 2e-3
    bad = accuracy.compare(wrong, ref, gold, "float16")
    assert not bad["vs_fp64"]["test_pass"] and not bad["vs_ort_fp32"]["seed_pass"]
    assert bad["vs_fp64"]["max_abs"] == pytest.approx(3e-3, rel=0.2)
    assert bad["vs_fp64"]["max_rel"] > good["vs_fp64"]["max_rel"]

    dead = np.argwhere(ref.sum(-1) == 0)[0]
    wrong = p.copy()
    wrong[tuple(dead) + (0,)] = 0.5  # a fully masked row must be zeros: only the FP64 comparison sees it
    bad = accuracy.compare(wrong, ref, gold, "float16")
    assert bad["vs_fp64"]["max_abs"] == 0.5 and not bad["vs_fp64"]["test_pass"]
    assert bad["vs_ort_fp32"]["max_abs"] == good["vs_ort_fp32"]["max_abs"]

    wrong = p.copy()
    wrong[tuple(live)] = np.nan
    bad = accuracy.compare(wrong, ref, gold, "float16")
    assert bad["nonfinite"] == 1 and bad["vs_fp64"]["max_abs"] == "inf" and not bad["vs_fp64"]["test_pass"]
    json.dumps(bad, allow_nan=False)  # strict JSON still


def test_cli_writes_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "acc" / "accuracy.json"
    rc = usage().main(["--target", "llvm", "--dtype", "bfloat16", "--case", "k1", "--case", "boolmask",
                      "--out", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    result = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert result["env"]["target"] == "llvm" and "commit" in result["env"]
    assert result["tolerances"]["seed"] == {**result["tolerances"]["seed"], "rtol": 1e-3, "atol": 1e-4}
    assert result["tolerances"]["tests"]["bfloat16"]["atol"] == 1.6e-2
    assert [(r["dtype"], r["case"]) for r in result["rows"]] == [("bfloat16", "boolmask"), ("bfloat16", "k1")]
    md = out.with_suffix(".md").read_text()
    assert "| bfloat16 | k1 | generic |" in md and "| bfloat16 | boolmask | generic |" in md
    assert "cannot meet the seed tolerance" in md
    assert md in stdout


def test_cli_rejects_an_unknown_target(capsys):
    with pytest.raises(SystemExit) as exit_:
        usage().main(["--target", "sm_75"])
    assert exit_.value.code == 2
    assert "choose one of: auto, llvm, sm_80, sm_89, sm_90" in capsys.readouterr().err
