"""The compile pipeline's table of passes (flashgemm/codegen/cuda_build.PASSES) and its one switch,
FLASHGEMM_DISABLE_PASSES."""
from __future__ import annotations

import re

import pytest

from flashgemm.codegen import cuda_build, device_pass


def test_each_pass_once_by_a_verb_object_name_stages_in_pipeline_order():
    names = [p.name for p in cuda_build.PASSES]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z]+(_[a-z0-9]+)*", n) for n in names), names
    order = [cuda_build.SCHEDULED, cuda_build.DEVICE, cuda_build.SOURCE]
    stages = [order.index(p.stage) for p in cuda_build.PASSES]
    assert stages == sorted(stages), "the table lists the passes in the order they run"


def test_disabled_passes_leave_the_pipeline(monkeypatch):
    monkeypatch.setenv(device_pass.DISABLE_ENV, "make_copies_async, stream_p_stores")
    assert "make_copies_async" not in [p.name for p in cuda_build.enabled_passes(cuda_build.DEVICE)]
    assert "stream_p_stores" not in [p.name for p in cuda_build.enabled_passes(cuda_build.SOURCE)]
    assert "store_whole_sectors" in [p.name for p in cuda_build.enabled_passes(cuda_build.SOURCE)]
    monkeypatch.delenv(device_pass.DISABLE_ENV)
    assert [p.name for p in cuda_build.enabled_passes(cuda_build.DEVICE)] == \
        [p.name for p in cuda_build.PASSES if p.stage == cuda_build.DEVICE]


def test_an_unknown_or_required_pass_is_an_error_naming_the_passes(monkeypatch):
    monkeypatch.setenv(device_pass.DISABLE_ENV, "make_copies_async,no_such_pass")
    with pytest.raises(ValueError, match=r"names no pass no_such_pass; the passes: keep_warp_statistics_in_registers"):
        cuda_build.enabled_passes(cuda_build.DEVICE)
    monkeypatch.setenv(device_pass.DISABLE_ENV, "lower_all_warp_memory")
    with pytest.raises(ValueError, match="lower_all_warp_memory cannot be left out"):
        cuda_build.enabled_passes(cuda_build.DEVICE)


def test_the_streaming_hint_is_its_own_pass_over_the_sector_stores():
    from flashgemm.codegen.cuda_src import store_whole_sectors  # noqa: PLC0415
    src = "    *(uint2*)(P_ptr + ((i * 8) + 4)) = fg_v;\n    *(half2*)(P_ptr + i) = v;\n"
    assert store_whole_sectors.stream(src) == ("    __stcs((uint2*)(P_ptr + ((i * 8) + 4)), fg_v);\n"
                                         "    *(half2*)(P_ptr + i) = v;\n")
