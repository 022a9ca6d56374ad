"""benchmarks/stall_sites.py on synthetic ncu pages (CPU): the source page of a two-kernel report parses per kernel,
samples group by instruction class with their stall reasons, the report renders, and bad input fails clearly.
Profiling itself needs ncu and a GPU (python -m benchmarks.bench_stall_sites; results/h200/proof-2026-11-29/stall-sites-*)."""
import pytest

from benchmarks import stall_sites

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
          '"stall_barrier","stall_wait","stall_long_sb","stall_selected","stall_barrier (Not Issued)"')


def _kernel(name, rows):
    lines = [f'"Kernel Name","{name}",', HEADER]
    for addr, sass, all_, barrier, wait, long_sb, selected in rows:
        lines.append(f'"{addr}","{sass}","{all_}","0","{barrier}","{wait}","{long_sb}","{selected}","0"')
    return "\n".join(lines)


PAGE = "\n".join([
    _kernel("main_kernel", [
        ("0x10", "      HMMA.16816.F32 R92, R156, R160, R92", 30, 0, 20, 0, 10),
        ("0x20", "@!P0  BAR.SYNC.DEFER_BLOCKING 0x0", 10, 10, 0, 0, 0),
        ("0x30", "      MUFU.EX2 R8, R9", 40, 0, 30, 0, 10),
        ("0x40", "      STG.E [R2.64], R8", 20, 0, 5, 15, 0),
        ("0x50", "      FOOBAR R1", 0, 0, 0, 0, 0)]),
    _kernel("main_kernel_1", [("0x10", "      LDG.E.CONSTANT R2, desc[UR6][R4.64+0x8]", "1,200", 0, 0, "1,200", 0)]),
])


def test_opcodes_and_classes():
    assert stall_sites.opcode("@!P0  LDGSTS.E.BYPASS.128 [R1], [R2]") == "LDGSTS"
    assert stall_sites.opcode("      MUFU.EX2 R8, R9") == "MUFU"
    assert stall_sites.instruction_class("HMMA.16816.F32 R1, R2, R3, R1") == "tensor core (HMMA)"
    assert stall_sites.instruction_class("STG.E [R2.64], R8") == "global stores (P)"
    assert stall_sites.instruction_class("FOOBAR R1") == stall_sites.OTHER
    # ptxas widens an fp16 to fp32 with HADD2.F32 (-RZ + x): a conversion, not integer math
    assert stall_sites.instruction_class("@!P0  HADD2.F32 R2, -RZ, R14.H0_H0") == "conversions / packing, fp16 pairs"


def test_a_two_kernel_page_groups_samples_by_class_and_reason():
    kernels = stall_sites.parse_source_csv(PAGE)
    assert [k["kernel"] for k in kernels] == ["main_kernel", "main_kernel_1"]
    s = stall_sites.summarize(kernels[0], top=3)
    assert s["samples"] == 100
    classes = {c["class"]: c for c in s["classes"]}
    assert classes["special functions (exp, reciprocal: MUFU)"]["share"] == pytest.approx(0.4)
    assert classes["special functions (exp, reciprocal: MUFU)"]["top_reasons"][0] == ("wait", 0.75)
    assert classes["global stores (P)"]["top_reasons"][0] == ("long_sb", 0.75)
    assert "other" not in classes  # no samples, no row
    assert [c["class"] for c in s["classes"]][0] == "special functions (exp, reciprocal: MUFU)"  # largest first
    assert [h["sass"].split()[0] for h in s["hottest"]] == ["MUFU.EX2", "HMMA.16816.F32", "STG.E"]
    assert dict(s["reasons"])["wait"] == pytest.approx(0.55)
    # thousands separators ("1,200") parse as numbers
    assert stall_sites.summarize(kernels[1])["samples"] == 1200
    md = stall_sites.markdown(s, "W1")
    assert md.startswith("### W1") and "| special functions (exp, reciprocal: MUFU) | 40.0% | 1 | wait 75%" in md


def test_pages_without_samples_fail_clearly():
    with pytest.raises(ValueError, match="SourceCounters"):
        stall_sites.parse_source_csv('"ID","Kernel Name"\n"0","k"\n')
    empty = stall_sites.parse_source_csv(_kernel("k", [("0x10", "NOP", 0, 0, 0, 0, 0)]))
    with pytest.raises(ValueError, match="no warp-state samples"):
        stall_sites.summarize(empty[0])


def test_the_report_renders_metrics_and_kernels():
    from benchmarks import bench_stall_sites as script
    kernel = stall_sites.parse_source_csv(PAGE)[0]
    result = {"date": "2026-11-27", "commit": "abc", "command": "python -m benchmarks.bench_stall_sites --workload w1",
              "env": {"gpu": "H100", "driver": "580", "ncu": "ncu 2025"},
              "rows": [{"workload": "bert-large.f16", "spec": "a=...", "which": "tuned",
                        "kernels": [{"summary": stall_sites.summarize(kernel),
                                     "metrics": {"gpu__time_duration.sum": 142880.0, "launch__block_size": 128.0,
                                                 "smsp__issue_active.avg.per_cycle_active": 0.34}}]}]}
    md = script.report(result)
    assert "GPU: H100, driver 580" in md and "## bert-large.f16" in md
    assert "| threads a block | 128 |" in md and "| duration under ncu (ns; base clocks, cold caches) | 142,880 |" in md
    assert "| instructions issued a scheduler a cycle (max 1) | 0.34 |" in md
