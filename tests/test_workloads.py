"""Workload presets and spec strings (flashgemm/op/workloads.py)."""
import pytest

from flashgemm.op.workloads import PRESETS, parse, preset


def test_presets_match_the_baseline_shapes():
    # W1-W4 of shared/baselines.md: (batch*heads) x M x N x K
    want = {"bert-large": (256, 512, 512, 64), "vit-b16": (192, 197, 197, 64),
            "whisper-enc": (160, 1500, 1500, 64), "lm-head": (1, 4096, 32000, 4096)}
    for name, (bh, m, n, k) in want.items():
        c = preset(name).canonical
        assert (c.b0 * c.b1, c.m, c.n, c.k) == (bh, m, n, k), name
    assert preset("w4").dtype == "bfloat16" and preset("w1").dtype == "float16"
    assert set(PRESETS) >= {"bert-large", "vit-b16", "whisper-enc", "lm-head", "demo"}


def test_spec_string_round_trip():
    wl = parse("a=8x12x197x64,b=8x12x197x64,transB=1,scale=0.125,mask=8x1x1x197:bool,dtype=bfloat16")
    assert wl.variant.key == "bf16_tb1_bias0_maskbool_causal0"
    assert wl.canonical.sizes == (8, 12, 197, 197, 64)
    again = parse(wl.spec())
    assert again.spec() == wl.spec() and again.name == wl.name
    assert parse(wl.spec(), dtype="float16").dtype == "float16"


@pytest.mark.parametrize("text, message", [
    ("bert", "unknown workload"),
    ("a=2x3", "needs at least"),
    ("a=2x3,b=3x4,colour=red", "unknown workload keys"),
    ("a=2xq,b=3x4", "bad shape"),
    ("a=2x3,b=4x5", "K mismatch"),
    ("a=2x3,b=3x4,dtype=float32", "dtype"),
    ("a=2x3,b=3x4,mask=2x4:mul", "mask kind"),
    ("a=2x3,b=3x4,bias=3x4", "not broadcastable"),
])
def test_bad_specs_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)
