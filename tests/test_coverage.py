"""benchmarks/coverage.py: its table on synthetic rows, its command's errors, and (with torch and transformers) one
architecture exported, rewritten and compared for real."""
import importlib.util
import subprocess
import sys

import pytest

from benchmarks import coverage

ENV = {"torch": "torch 2.14.1", "transformers": "transformers 5.25.0", "onnxruntime": "1.32.0", "commit": "abc1234",
       "date": "2026-12-04"}


def test_markdown_gives_every_row_its_counts_difference_and_reasons():
    rows = [{"architecture": "mpnet", "exporter": "torchscript", "attention": "eager", "softmax": 2,
             "fused_attention": 2, "fused_p": 0, "left": {}, "not_matched": [], "kept_p": [], "max_abs_diff": 0.0039,
             "max_abs_diff_padded_out": 0.002, "reads": ["bias [batch, 1, 1, sequence] + mask [1, 2, 16, 16]"]},
            {"architecture": "deberta-v2", "exporter": "dynamo", "attention": "eager", "softmax": 2,
             "fused_attention": 0, "fused_p": 0, "left": {}, "not_matched": ["s0", "s1"], "kept_p": [],
             "max_abs_diff": 0.0},
            {"architecture": "beit", "exporter": "torchscript", "attention": "eager", "softmax": 2,
             "fused_attention": 1, "fused_p": 0, "left": {"s1": ["added operand [1, ?]: cannot prove it broadcasts"]},
             "not_matched": [], "kept_p": [], "max_abs_diff": 0.0},
            {"architecture": "bart-encoder", "exporter": "dynamo", "export_error": "TorchExportError: failed"},
            {"architecture": "llama", "exporter": "dynamo", "attention": "sdpa", "softmax": 2, "fused_attention": 2,
             "fused_p": 0, "left": {}, "not_matched": [], "kept_p": [], "max_abs_diff": 0.001,
             "max_abs_diff_padded_out": 0.001, "decoder_causal": {"sites": 2, "causal_fill": 2, "max_abs_diff": 0.00098,
                                                                  "max_abs_diff_kept": 0.00098}}]
    text = coverage.markdown(rows, ENV)
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| architecture")]
    assert len(lines) == 5 and "torch 2.14.1" in text and "abc1234" in text
    assert lines[0].startswith("| mpnet | torchscript (eager) | 2 | 2 | 0 | bias [batch, 1, 1, sequence] + mask "
                               "[1, 2, 16, 16] | 0.0039 | 0.002 | – | – |")
    assert "not MatMul -> [scale] -> [Add [-> Add]] -> Softmax" in lines[1] and "| – |" in lines[1]  # no padded run
    assert "cannot prove it broadcasts" in lines[2]
    assert "export failed: TorchExportError: failed" in lines[3]
    assert "| 0.001 | 0.001 | 2 (2 causal_fill), 0.00098 | – |" in lines[4]  # --decoder-causal: its sites, the diff


def test_reads_says_what_the_op_reads():
    """The bias as the op reads it (narrowed where it was), a decoder's causal rule inside it, a second term as the
    additive mask; a term dropped as zeros is not read."""
    bias = {"bias": True, "bias_shape": ["batch", 1, "sequence", "sequence"]}
    assert coverage._reads({"bias": False, "bias_shape": None}) == "none"
    assert coverage._reads(bias) == "bias [batch, 1, sequence, sequence]"
    assert coverage._reads(dict(bias, narrowed="[batch, 1, 1, sequence]")) == "bias [batch, 1, 1, sequence]"
    assert coverage._reads(dict(bias, causal_in_bias=-65504.0)) == (
        "bias [batch, 1, sequence, sequence] (causal rule inside)")
    assert coverage._reads(dict(bias, dropped=["bias"])) == "none"
    assert coverage._reads(dict(bias, mask_shape=[1, 2, 16, 16])) == (
        "bias [batch, 1, sequence, sequence] + mask [1, 2, 16, 16]")


def test_command_names_the_fix():
    r = subprocess.run([sys.executable, "-m", "benchmarks.coverage", "--out", "x.json", "--arch", "no-such"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        assert "--arch no-such is not one of the architectures" in r.stderr and "mpnet" in r.stderr
    else:
        assert "pip install '.[models]'" in r.stderr


def test_one_architecture_for_real(tmp_path):
    pytest.importorskip("torch", reason="exporting needs torch (pip install '.[models]')")
    pytest.importorskip("transformers", reason="exporting needs transformers (pip install '.[models]')")
    from flashgemm.bundle.kernel_library import export_bundle
    from flashgemm.op.variant import Variant
    bundle = tmp_path / "bundle"
    export_bundle(bundle, "llvm", variants=[Variant("float16", True, True, "add", False)], attention=True,
                  log=lambda *a: None)
    (tmp_path / "work").mkdir()
    row = coverage.check("mpnet", "torchscript", bundle, tmp_path / "work", log=lambda *a: None)
    assert row["softmax"] == row["fused_attention"] == 2 and not row["left"] and not row["not_matched"], row
    assert row["max_abs_diff"] < 1e-2 and row["max_abs_diff_padded_out"] < 1e-2, row
    assert row["reads"] == ["bias [batch, 1, 1, sequence] + mask [1, 2, sequence, sequence]"], row


def test_a_decoder_with_a_cache_for_real(tmp_path):
    """Llama after a key/value cache (queries past the cache, by the dynamo exporter): both sites fused, the bias
    holding the causal rule, which --decoder-causal takes as the flag, the same output at the kept tokens."""
    pytest.importorskip("torch", reason="exporting needs torch (pip install '.[models]')")
    pytest.importorskip("transformers", reason="exporting needs transformers (pip install '.[models]')")
    from flashgemm.bundle.kernel_library import export_bundle
    from flashgemm.op.variant import Variant
    bundle = tmp_path / "bundle"
    export_bundle(bundle, "llvm", variants=[Variant("float16", True, True, "none", c, f)
                                            for c, f in ((False, False), (True, False), (True, True))],
                  attention=True, log=lambda *a: None)
    (tmp_path / "work").mkdir()
    row = coverage.check("llama-cache", "dynamo", bundle, tmp_path / "work", log=lambda *a: None)
    assert row["softmax"] == row["fused_attention"] == 2 and row["max_abs_diff"] < 1e-2, row
    assert row["reads"] == ["bias [batch, 1, sequence, sym:past + sequence] (causal rule inside)"], row
    assert row["decoder_causal"]["sites"] == row["decoder_causal"]["causal_fill"] == 2, row
    assert row["decoder_causal"]["max_abs_diff"] < 1e-2, row  # every token (causal_fill)
