"""The benchmark's report (benchmarks/report.py, python -m benchmarks.bench_report): table, plots and the regression
check, on synthetic results (the measuring half needs a GPU; its JSON is what these functions read)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _result(ours_w1=100.0, gpu="NVIDIA H100 80GB HBM3"):
    def t(us):
        return {"median_us": us, "p10_us": us * 0.98, "p90_us": us * 1.02, "max_abs_err_vs_fp32": 1e-4}
    rows = [{"workload": "bert-large.f16", "dtype": "float16", "bytes": 168e6, "flop": 8.6e9, "hbm_floor_us": 56.0,
             "tc_floor_us": 8.7, "ours_kernel": "tuned (bert-large.f16, 99 us when tuned)", "ours": t(ours_w1),
             "triton": t(80.0), "torch_eager": t(178.0), "torch_compile": t(161.0), "ort_cuda": t(202.0),
             "ms_default_unfused": {"error": "LookupError: not tuned"}},
            {"workload": "k1.f16", "dtype": "float16", "bytes": 8.4e6, "flop": 8.4e6, "hbm_floor_us": 3.0,
             "tc_floor_us": 0.01, "ours_kernel": "default schedule (untuned)", "ours": t(9.0),
             "torch_eager": t(12.0), "ort_cuda": {"error": "LookupError: no CUDA EP"}}]
    return {"date": "2026-11-22T10:00:00+00:00", "commit": "abc1234", "target": "sm_90",
            "env": {"gpu": gpu, "driver": "580.159.04", "copy_rate_TBps": 2.98, "peak_tflops": 989.4,
                    "peak_source": "published dense peak for H100 80GB HBM3"},
            "protocol": {"timer": "CUDA events", "l2_flush": False, "inputs": "random normal"}, "rows": rows}


def test_markdown_has_every_system_floors_and_reasons():
    md = report.markdown(_result())
    header = next(line for line in md.splitlines() if line.startswith("| workload"))
    for label in ("ours (TVM)", "Triton (ours)", "torch eager", "torch.compile", "ORT CUDA EP", "MS default, unfused",
                  "HBM floor", "TC floor"):
        assert label in header
    w1 = next(line for line in md.splitlines() if line.startswith("| bert-large"))
    assert "(tuned)" in w1 and "| 1.79 |" in w1  # ours / floor = 100 / 56
    assert "| 0.80 |" in w1  # best peer (Triton 80) / ours
    assert "n/a" in w1  # MS default did not run for W1: a cell that says so, not a blank
    assert "k1.f16 ORT CUDA EP: LookupError: no CUDA EP" in md  # a system that did not run says why


def test_markdown_puts_our_other_kernels_beside_ours_and_not_among_the_peers():
    """python -m benchmarks.bench --also tuned_any_batch,generic: columns right after ours; "best peer / ours" ignores
    them."""
    res = _result()
    res["rows"][0].update(ours_tuned_any_batch={"median_us": 90.0}, ours_generic={"median_us": 400.0})
    md = report.markdown(res)
    header = next(line for line in md.splitlines() if line.startswith("| workload"))
    assert header.index("ours (TVM)") < header.index("ours tuned, any batch (no twin)") < header.index("ours generic") \
        < header.index("Triton (ours)")
    w1 = next(line for line in md.splitlines() if line.startswith("| bert-large"))
    assert "| 90.0 |" in w1 and "| 400.0 |" in w1 and "| 0.80 |" in w1  # best peer still Triton's 80 / ours' 100


def test_compare_flags_only_real_regressions():
    old = _result(100.0)
    assert report.compare(_result(104.0), old)["regressed"] == []  # within 5 %
    cmp = report.compare(_result(106.0), old)
    assert [(i["workload"], i["system"]) for i in cmp["regressed"]] == [("bert-large.f16", "ours")]
    assert "**REGRESSED**" in report.compare_markdown(cmp)
    failed = _result()
    failed["rows"][0]["ours"] = {"error": "RuntimeError: build failed"}
    assert report.compare(failed, old)["regressed"][0]["new_us"] is None  # ran before, fails now: flagged
    with pytest.raises(ValueError, match="same GPU"):
        report.compare(_result(gpu="NVIDIA H200"), old)


def test_bench_report_cli_regenerates_table_plots_and_exit_status(tmp_path):
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    new.write_text(json.dumps(_result(120.0)))
    old.write_text(json.dumps(_result(100.0)))
    script = ["-m", "benchmarks.bench_report"]
    proc = subprocess.run([sys.executable, *script, str(new), "--compare", str(old)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr  # a regression fails the command
    for suffix in (".md", "-bars.png", "-roofline.png"):
        path = tmp_path / f"new{suffix}"
        assert path.exists() and path.stat().st_size > 0
    assert "REGRESSED" in (tmp_path / "new.md").read_text()
    ok = subprocess.run([sys.executable, *script, str(old)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    bad = subprocess.run([sys.executable, *script, str(broken)], capture_output=True, text=True)
    assert bad.returncode == 2 and "broken.json" in bad.stderr


def test_bench_cli_refuses_cpu_target_and_empty_runs():
    script = ["-m", "benchmarks.bench"]
    proc = subprocess.run([sys.executable, *script, "--target", "llvm", "--workload", "w1"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "GPU machine" in proc.stderr
    proc = subprocess.run([sys.executable, *script, "--target", "sm_90"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--suite" in proc.stderr
    proc = subprocess.run([sys.executable, *script, "--target", "sm_90", "--workload", "w1", "--systems", "cublas"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "cublas" in proc.stderr


def test_suite_workloads_parse_in_both_dtypes():
    from benchmarks import bench  # noqa: PLC0415
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    names = [parse(w, d).dir_name for w in bench.SUITE for d in ("float16", "bfloat16")]
    assert len(set(names)) == 2 * len(bench.SUITE)


def test_rounds_alternate_the_systems_and_keep_each_ones_median_round():
    """python -m benchmarks.bench --rounds: a clock that slows down within the run (each timing 10 us slower than the
    one before) must not favour the system timed first: the order reverses every other round, and each system keeps its
    median round."""
    from benchmarks.peers import time_in_rounds
    order = []

    def drifting_timer(call, reps):
        order.append(call())
        return {"median_us": 100.0 + 10 * len(order), "p10_us": 0.0, "p90_us": 0.0}
    out = time_in_rounds({"ours": lambda: "ours", "torch": lambda: "torch"}, 3, 50, drifting_timer)
    assert order == ["ours", "torch", "torch", "ours", "ours", "torch"]
    assert out["ours"]["round_medians_us"] == [110.0, 140.0, 150.0] and out["ours"]["median_us"] == 140.0
    assert out["torch"]["round_medians_us"] == [120.0, 130.0, 160.0] and out["torch"]["median_us"] == 130.0
    single = time_in_rounds({"ours": lambda: "ours"}, 1, 50, drifting_timer)
    assert single["ours"]["round_medians_us"] == [170.0] and single["ours"]["median_us"] == 170.0


def test_the_protocol_line_says_how_many_rounds():
    res = _result()
    assert "rounds alternating" not in report.markdown(res)
    res["protocol"]["rounds"] = 3
    assert "3 rounds alternating the systems, each system's median round" in report.markdown(res)


def test_lengths_plot_draws_the_any_length_line_where_the_op_served_one(tmp_path):
    """benchmarks/lengths: where the op served a length with an any-length kernel only "ours" was timed, and the
    any-length line takes that point; where a kernel of the length's own served it, the any-length time is its own."""
    from benchmarks import lengths
    rows = [{"length": 100, "served_by": {"ours": "fgs_f16_tb1_bias0_masknone_causal0_default_len128x128_k64"},
             "us": {"ours": 15.0, "ORT MatMul+Softmax": 44.0}},
            {"length": 512, "served_by": {"ours": "fgs_f16_tb1_bias0_masknone_causal0_m512_n512_k64",
                                          "any-length": "fgs_f16_tb1_bias0_masknone_causal0_default_len512x512_k64"},
             "us": {"ours": 71.0, "any-length": 203.0, "ORT MatMul+Softmax": 179.0}}]
    assert [lengths._time(r, "any-length") for r in rows] == [15.0, 203.0]
    assert [lengths._time(r, "generic") for r in rows] == [None, None]
    out = tmp_path / "lengths.png"
    lengths.plot({"rows": rows, "batch": 16, "heads": 16, "k": 64, "dtype": "float16", "env": {"gpu": "G"}}, out)
    assert out.stat().st_size > 1000


def test_lengths_served_by_mirrors_the_tensor_core_rule():
    """benchmarks/lengths.served_by (bundle.cc Find's mirror): FusedGemmSoftmax's tensor-core kernel of K serves N
    from its min_n on, ahead of the shape's own kernel; below, the shape's own and any-length kernels first, then
    it (never the generic kernel while it serves); another K, or N not a multiple of its n_multiple, never it; a
    FusedAttention entry never serves FusedGemmSoftmax."""
    from benchmarks import lengths
    base = dict(dtype="float16", trans_b=1, bias=0, mask="none", causal=0, align=16, op="FusedGemmSoftmax",
                any_batch=False, any_length=False, fixed_batch=None, scale=None, n_multiple=1)
    tc = dict(base, name="tc", schedule="default", sizes=None, head_size=64, min_n=1024, min_m=64, first_max_n=2048,
              n_multiple=2)
    own = dict(base, name="own", schedule="tuned", sizes=[1, 16, 1500, 1500, 64])
    decode = dict(base, name="decode", schedule="tuned", sizes=[1, 16, 1, 1500, 64])
    long_row = dict(base, name="long", schedule="tuned", sizes=[1, 8, 64, 65536, 64])
    default_4096 = dict(base, name="default4096", schedule="default", sizes=[1, 8, 64, 4096, 64])
    anylen = dict(base, name="anylen", schedule="default", sizes=[1, 1, 512, 512, 64], any_batch=True,
                  any_length=True)
    generic = dict(base, name="generic", schedule="generic", sizes=None, align=2)
    attention = dict(generic, name="fa", op="FusedAttention")
    fns = [attention, generic, anylen, own, decode, long_row, default_4096, tc]
    key = lengths._key(base)
    assert [lengths.served_by(fns, key, s)["name"] for s in (
        (1, 16, 1500, 1500, 64), (1, 16, 300, 300, 64), (1, 16, 600, 600, 64), (1, 16, 1500, 1501, 64),
        (1, 16, 600, 600, 128), (1, 16, 1, 1500, 64), (1, 8, 64, 65536, 64), (1, 8, 64, 4096, 64))] == [
        "tc", "anylen", "tc", "generic", "generic", "decode", "long", "tc"]
    assert lengths.served_by([attention], key, (1, 1, 8, 8, 8)) is None


def test_readme_figure_draws_the_committed_run(tmp_path):
    """benchmarks/readme_figure.py reads the committed W1-W3 run the README's figure comes from and draws it."""
    from benchmarks import readme_figure  # noqa: PLC0415
    root = Path(__file__).resolve().parent.parent
    panels = readme_figure.rows(root / "results" / "h200" / "proof-2026-11-29", "float16")
    assert [p["title"].split("\n")[0] for p in panels] == [t for _, t in readme_figure.WORKLOADS]
    assert all(label == "ours" and t > 0 for label, t in (p["times"][0] for p in panels))
    out = tmp_path / "figure.png"
    readme_figure.draw(panels, "float16", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_kernel_sources_compare_names_what_changed(tmp_path, capsys):
    """benchmarks/kernel_sources.py --compare: identical sets pass; a changed, a dropped or an added kernel fails,
    named."""
    from benchmarks import kernel_sources  # noqa: PLC0415
    before, after = tmp_path / "before.sha256", tmp_path / "after.sha256"
    before.write_text("aa  k1\nbb  k2\ncc  k3\n")
    after.write_text("aa  k1\nbb  k2\ncc  k3\n")
    assert kernel_sources.main(["--compare", str(before), str(after)]) == 0
    assert "3 of 3 identical" in capsys.readouterr().out
    after.write_text("aa  k1\nzz  k2\ndd  k4\n")
    assert kernel_sources.main(["--compare", str(before), str(after)]) == 1
    out = capsys.readouterr().out
    assert "changed 1, only before 1, only after 1" in out and "  k2" in out and "  k3" in out and "  k4" in out


def test_attention_benchmark_graphs_take_the_mask_as_a_bias():
    """benchmarks.attention --mask: FusedAttention and FusedGemmSoftmax get the padding mask as their bias input, the
    unfused graph as an Add before the Softmax (run here on ORT's CPU EP against numpy)."""
    from benchmarks.attention import _graph
    b, h, m, d = 2, 3, 5, 8
    for kind, op in (("attention", "FusedAttention"), ("scores", "FusedGemmSoftmax")):
        (node, *_) = _graph(kind, "float16", (b, h, m, d), 0.5, False, (b, 1, 1, m)).graph.node
        assert node.op_type == op and list(node.input)[-1] == "bias"
    _unfused_graph_against_numpy(b, h, m, m, d, pad=2, seed=0)


def _unfused_graph_against_numpy(b, h, m, n, d, pad, seed):
    """benchmarks.attention's unfused graph of Q [b, h, m, d], K and V [b, h, n, d] and a padding row (batch 1's last
    `pad` keys) on ORT's CPU EP, against numpy in float64."""
    import numpy as np
    import onnxruntime as ort

    from benchmarks.attention import _graph
    model = _graph("unfused", "float16", (b, h, m, d), 0.5, False, (b, 1, 1, n), keys=n)
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((b, h, L, d)).astype(np.float16) for L in (m, n, n))
    bias = np.where(np.arange(n) < np.array([[n], [n - pad]]), 0, -65504).astype(np.float16).reshape(b, 1, 1, n)
    (o,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"Q": q, "K": k, "V": v, "bias": bias})
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) * 0.5 + bias
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    assert o.shape == (b, h, m, d)
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=0, atol=1e-2)


def test_attention_benchmark_decode_shapes():
    """benchmarks.attention's generation steps: one query a sequence against N keys (Q [B, H, 1, D], K and V [B, H,
    N, D]) in every graph; the unfused one run here on ORT's CPU EP against numpy, with a padding row."""
    from benchmarks.attention import DECODE_SHAPES, SHAPES, _graph, shape_sizes
    assert all(shape_sizes(x)[2] == 1 and not shape_sizes(x)[5] for x in DECODE_SHAPES)
    assert shape_sizes("prefill")[2:4] == (SHAPES["prefill"][2],) * 2
    b, h, d, n = 2, 3, 8, 9
    dims = {x.name: [e.dim_value for e in x.type.tensor_type.shape.dim]
            for x in _graph("attention", "float16", (b, h, 1, d), 0.5, False, keys=n).graph.input}
    assert dims == {"Q": [b, h, 1, d], "K": [b, h, n, d], "V": [b, h, n, d]}
    _unfused_graph_against_numpy(b, h, 1, n, d, pad=3, seed=1)


def test_attention_benchmark_masks():
    """benchmarks.attention --mask: padding [B, 1, 1, N] (batch element i pads its last (i % 4) N / 8 columns), full
    the same materialized, decoder the causal triangle and the padding in one [B, 1, M, N] (torch needed)."""
    torch = pytest.importorskip("torch", reason="the masks are torch tensors")
    from benchmarks.attention import padding_mask
    b, n = 3, 16
    low = torch.finfo(torch.float16).min
    pad = padding_mask("padding", b, n, n, torch.float16, device="cpu")
    assert pad.shape == (b, 1, 1, n) and int((pad[1] == low).sum()) == n // 8 and (pad[0] == 0).all()
    full = padding_mask("full", b, n, n, torch.float16, device="cpu")
    assert full.shape == (b, 1, n, n) and torch.equal(full, pad.expand(b, 1, n, n))
    dec = padding_mask("decoder", b, n, n, torch.float16, device="cpu")
    above = torch.ones(n, n, dtype=torch.bool).triu(1)
    assert dec.shape == (b, 1, n, n) and (dec[:, :, above] == low).all()
    assert torch.equal(dec[:, :, ~above], full[:, :, ~above])
    assert padding_mask("none", b, n, n, torch.float16, device="cpu") is None
