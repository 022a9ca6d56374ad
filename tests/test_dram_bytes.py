"""benchmarks/dram_bytes.py and python -m benchmarks.bench_dram_bytes on the CPU: ncu's CSV (raw and details pages, base
and scaled units), the floor, ratios and goals, the ncu command line, measure() end to end against a stand-in ncu, the
permission error, and the front end's refusal of a CPU target. The real measurement needs the GPU machine."""
import importlib.util
import json
import os
import stat
import sys
import textwrap

import pytest

from benchmarks import dram_bytes as D
from flashgemm.op.workloads import parse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GEMM = ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_tn_align8>"
        "(cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_tn_align8::Params)")
SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::Half, float, c10::Half, "
           "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(T4 *, const T2 *, int)")

# ncu --csv --page raw --print-units base: header of names, a row of units, one row per launch; ==PROF== lines
# before it; values may carry thousands separators; kernel names carry commas inside quotes.
RAW_BASE = textwrap.dedent(f'''\
    ==PROF== Connected to process 51234 (/usr/bin/python3.12)
    ==PROF== Profiling "Kernel2" - 0: 0%....50%....100% - 1 pass
    ==PROF== Profiling "cunn_SoftMaxForward" - 1: 0%....50%....100% - 1 pass
    ==PROF== Disconnected from process 51234
    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"
    "","","","","","","","","","","","byte","byte","nsecond"
    "0","51234","python3.12","127.0.0.1","{GEMM}","1","7","(128, 1, 1)","(8, 8, 256)","0","9.0","33,619,968","134,217,728","81,344"
    "1","51234","python3.12","127.0.0.1","{SOFTMAX}","1","7","(1024, 1, 1)","(131072, 1, 1)","0","9.0","134217728","134217600","120000"
    ''')

# The same run printed without --print-units base: ncu scales by SI factors (1000 for bytes too).
RAW_SCALED = textwrap.dedent('''\
    ==PROF== Connected to process 777 (/usr/bin/python3.12)
    ==WARNING== Note: Running with uncontrolled GPU caches.
    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"
    "","","","","","","","","","","","Mbyte","Kbyte","usecond"
    "0","777","python3.12","host","default_function_kernel","1","7","(128, 1, 1)","(4096, 1, 1)","0","9.0","168.23","512.50","95.30"
    "1","777","python3.12","host","other_kernel","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","1.5","2","1.25"
    ''')

# The default page (details): one row per (launch, metric).
DETAILS = textwrap.dedent(f'''\
    ==PROF== Connected to process 4242 (/usr/bin/python3.12)
    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
    "0","4242","python3.12","127.0.0.1","{GEMM}","1","7","(128, 1, 1)","(8, 8, 256)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Mbyte","33.62"
    "0","4242","python3.12","127.0.0.1","{GEMM}","1","7","(128, 1, 1)","(8, 8, 256)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","Mbyte","134.22"
    "0","4242","python3.12","127.0.0.1","{GEMM}","1","7","(128, 1, 1)","(8, 8, 256)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","81.34"
    "1","4242","python3.12","127.0.0.1","{SOFTMAX}","1","7","(1024, 1, 1)","(131072, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","1,000"
    "1","4242","python3.12","127.0.0.1","{SOFTMAX}","1","7","(1024, 1, 1)","(131072, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","Gbyte","0.5"
    "1","4242","python3.12","127.0.0.1","{SOFTMAX}","1","7","(1024, 1, 1)","(131072, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","0.12"
    ==PROF== Disconnected from process 4242
    ''')

PERM = textwrap.dedent('''\
    ==PROF== Connected to process 999 (/usr/bin/python3.12)
    ==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0. For instructions on enabling permissions and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM
    ==PROF== Disconnected from process 999
    ==WARNING== No kernels were profiled.
    ''')


def test_raw_page_base_units():
    ks = D.parse_ncu_csv(RAW_BASE)
    assert [k["id"] for k in ks] == [0, 1]
    assert ks[0]["kernel"] == GEMM and ks[1]["kernel"] == SOFTMAX  # commas inside the quotes kept
    assert ks[0]["metrics"] == {D.READ: 33619968, D.WRITE: 134217728, D.TIME: 81344}
    assert ks[0]["units"] == {D.READ: "byte", D.WRITE: "byte", D.TIME: "nsecond"}
    s = D.summarize(ks)
    assert s["kernel_count"] == 2 and s["kernels"] == [GEMM, SOFTMAX]
    assert s["bytes_read"] == 33619968 + 134217728
    assert s["bytes_written"] == 134217728 + 134217600
    assert s["bytes_total"] == s["bytes_read"] + s["bytes_written"]
    assert s["kernel_time_us"] == pytest.approx(201.344)


def test_raw_page_scaled_units_are_decimal():
    ks = D.parse_ncu_csv(RAW_SCALED)
    assert ks[0]["metrics"][D.READ] == pytest.approx(168.23e6)
    assert ks[0]["metrics"][D.WRITE] == pytest.approx(512.5e3)
    assert ks[0]["metrics"][D.TIME] == pytest.approx(95300)
    s = D.summarize(ks)
    assert s["bytes_read"] == round(168.23e6 + 1.5e6)
    assert s["bytes_written"] == 512500 + 2000
    assert s["kernel_time_us"] == pytest.approx(96.55)


def test_details_page():
    ks = D.parse_ncu_csv(DETAILS)
    assert len(ks) == 2 and ks[1]["kernel"] == SOFTMAX
    assert ks[0]["metrics"][D.READ] == pytest.approx(33.62e6)
    assert ks[1]["metrics"][D.READ] == 1000  # thousands separator
    assert ks[1]["metrics"][D.WRITE] == pytest.approx(0.5e9)
    assert ks[1]["metrics"][D.TIME] == pytest.approx(120000)
    s = D.summarize(ks)
    assert s["bytes_written"] == round(134.22e6 + 0.5e9)
    assert s["kernel_time_us"] == pytest.approx(81.34 + 120)


@pytest.mark.parametrize("value,unit,want,base", [
    (3, "byte", 3, "byte"), (1.5, "Kbyte", 1500, "byte"), (2, "Mbyte", 2e6, "byte"), (1.25, "Gbyte", 1.25e9, "byte"),
    (1, "Tbyte", 1e12, "byte"), (4, "KB", 4e3, "byte"), (4, "MB", 4e6, "byte"), (4, "GB", 4e9, "byte"),
    (1, "KiB", 1024, "byte"), (1, "MiB", 2 ** 20, "byte"), (7, "nsecond", 7, "nsecond"),
    (2, "usecond", 2000, "nsecond"), (3, "msecond", 3e6, "nsecond"), (1, "second", 1e9, "nsecond"),
    (42, "%", 42, "%"), (9, "cycle", 9, "cycle")])
def test_units(value, unit, want, base):
    got, got_unit = D.to_base(value, unit)
    assert got == pytest.approx(want) and got_unit == base


def test_summarize_refuses_what_it_cannot_add():
    with pytest.raises(ValueError, match="no kernels"):
        D.summarize([])
    ks = D.parse_ncu_csv(RAW_BASE)
    del ks[1]["metrics"][D.WRITE]
    with pytest.raises(ValueError, match="dram__bytes_write.sum"):
        D.summarize(ks)
    ks = D.parse_ncu_csv(RAW_BASE.replace('"byte","byte","nsecond"', '"%","byte","nsecond"'))
    with pytest.raises(ValueError, match="unit"):
        D.summarize(ks)


def test_parser_ignores_non_csv_lines_and_empty_output():
    assert D.parse_ncu_csv(PERM) == []
    assert D.parse_ncu_csv("") == []
    noisy = "some app output\n" + RAW_BASE + "==PROF== Report: done\n"
    assert len(D.parse_ncu_csv(noisy)) == 2


def test_permission_error_says_how_to_fix():
    with pytest.raises(D.NcuPermissionError) as exc:
        D.check_ncu_output(PERM)
    msg = str(exc.value)
    assert "ERR_NVGPUCTRPERM - The user does not have permission" in msg
    assert "NVreg_RestrictProfilingToAdminUsers=0" in msg and "root" in msg
    D.check_ncu_output(RAW_BASE)  # no error


def test_floor_bytes():
    w1 = parse("w1")
    a = 16 * 16 * 512 * 64 * 2
    p = 16 * 16 * 512 * 512 * 2
    assert D.floor_bytes(w1) == 2 * a + p and D.p_bytes(w1) == p
    w4 = parse("w4")
    assert D.floor_bytes(w4) == (4096 * 4096 + 4096 * 32000 + 4096 * 32000) * 2
    masked = parse("a=8x12x197x64,b=8x12x197x64,transB=1,mask=8x1x1x197:bool,bias=197x197")
    one = 8 * 12 * 197 * 64 * 2
    assert D.floor_bytes(masked) == 2 * one + 8 * 12 * 197 * 197 * 2 + 197 * 197 * 2 + 8 * 197 * 1
    add = parse("a=8x12x197x64,b=8x12x197x64,transB=1,mask=8x1x1x197:add")
    assert D.floor_bytes(add) == 2 * one + 8 * 12 * 197 * 197 * 2 + 8 * 197 * 2


def test_ratios_and_goals():
    c = D.compare(ours=110, unfused=300, floor=100)
    assert c["ours_over_unfused"] == pytest.approx(110 / 300) and c["ours_over_floor"] == pytest.approx(1.1)
    assert c["goal_unfused_met"] is True and c["goal_floor_met"] is True
    c = D.compare(ours=121, unfused=300, floor=100)  # 0.403 of the pair, 1.21 of the floor: both missed
    assert c["goal_unfused_met"] is False and c["goal_floor_met"] is False
    c = D.compare(ours=120, unfused=300, floor=100)  # exactly on both limits: met
    assert c["goal_unfused_met"] is True and c["goal_floor_met"] is True
    c = D.compare(ours=None, unfused=300, floor=100)
    assert c["ours_over_unfused"] is None and c["goal_unfused_met"] is None and c["goal_floor_met"] is None


def test_evaluate_uses_the_pair_and_falls_back_to_eager():
    row = {"floor_bytes": 100, "ours": {"bytes_total": 110}, "torch_pair": {"bytes_total": 250},
           "torch_eager": {"bytes_total": 500}}
    e = D.evaluate(row)
    assert e["unfused_reference"] == "torch_pair" and e["ours_over_unfused"] == pytest.approx(0.44)
    assert e["goal_unfused_met"] is False and e["ours_over_torch_eager"] == pytest.approx(0.22)
    row["torch_pair"] = {"error": "torch_pair covers workloads without bias"}
    e = D.evaluate(row)
    assert e["unfused_reference"] == "torch_eager" and e["goal_unfused_met"] is True


def test_ncu_command_line():
    cmd = D.ncu_command("ncu", "/tmp/x/ncu.log")
    assert cmd == ["ncu", "--profile-from-start", "off",
                   "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum",
                   "--csv", "--page", "raw", "--print-units", "base", "--cache-control", "all",
                   "--clock-control", "base", "--log-file", "/tmp/x/ncu.log"]
    wl = parse("w2")
    drv = D.driver_command(wl, "ours", "sm_90", None, "/tmp/x/info.json")
    assert drv[:4] == [sys.executable, "-m", "benchmarks.dram_bytes", "--driver"]
    assert drv[drv.index("--system") + 1] == "ours" and "--db" not in drv


@pytest.mark.parametrize("spec,dtype", [("w1", None), ("w2", None), ("w3", None), ("w4", None), ("demo", None),
                                        ("w1", "bfloat16"), ("a=2x64x32,b=2x32x64,scale=0.3,mask=2x1x64:bool", "bfloat16")])
def test_workload_argument_round_trips(spec, dtype):
    wl = parse(spec, dtype)
    again = parse(D.workload_arg(wl))
    assert again == wl and again.dir_name == wl.dir_name  # the tuning database's directory is found again


def test_find_ncu_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("NCU", raising=False)
    with pytest.raises(D.NcuError, match="not found"):
        D.find_ncu("/nonexistent/ncu")


FAKE_NCU = '''#!{python}
"""Stands in for ncu: writes a canned CSV for the --system it was given to --log-file."""
import json, sys
argv = sys.argv[1:]
if argv == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2099.1.0.0 (fake)")
    sys.exit(0)
if {perm!r}:
    print({perm_text!r})
    sys.exit(1)
log = argv[argv.index("--log-file") + 1]
system = argv[argv.index("--system") + 1]
info = argv[argv.index("--info") + 1]
assert argv[:3] == ["--profile-from-start", "off", "--metrics"], argv
head = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"'
units = '"","","","","","","","","","","","byte","byte","nsecond"'
def row(i, name, r, w, t):
    return '"%d","1","python3","h","%s","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","%s","%s","%s"' % (i, name, r, w, t)
kernels = {{
    "ours": [("default_function_kernel", "70,000", "65,536", "5000")],
    "torch_pair": [("gemm, tn", 65536, 200000, 3000), ("cunn_SoftMaxForward", 200000, 65536, 4000)],
}}
if system == "torch_eager":
    print("==ERROR== The application returned an error code (1).")
    sys.exit(1)
with open(log, "w") as fh:
    fh.write("==PROF== Connected to process 1 (python3)\\n" + head + "\\n" + units + "\\n")
    fh.write("\\n".join(row(i, *k) for i, k in enumerate(kernels[system])) + "\\n")
with open(info, "w") as fh:
    json.dump({{"which": "fake kernel"}} if system == "ours" else {{}}, fh)
'''


def _fake_ncu(tmp_path, perm=False):
    path = tmp_path / "ncu"
    path.write_text(FAKE_NCU.format(python=sys.executable, perm=perm, perm_text=PERM))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_measure_end_to_end_with_a_stand_in_ncu(tmp_path):
    wl = parse("a=2x4x64x32,b=2x4x64x32,transB=1,scale=0.125,name=tiny")
    floor = D.floor_bytes(wl)
    assert floor == 2 * (2 * 4 * 64 * 32 * 2) + 2 * 4 * 64 * 64 * 2 == 131072
    logs = []
    res = D.measure([wl], "sm_90", None, logs.append, ncu=_fake_ncu(tmp_path))
    assert json.loads(json.dumps(res)) == res  # JSON-able
    (row,) = res["rows"]
    ours, pair = row["ours"], row["torch_pair"]
    assert ours["bytes_total"] == 135536 and ours["kernel_count"] == 1 and ours["which"] == "fake kernel"
    assert "note" not in ours  # writes cover P
    assert pair["kernel_count"] == 2 and pair["bytes_total"] == 531072 and pair["kernels"][0] == "gemm, tn"
    assert "error" in row["torch_eager"] and "exited 1" in row["torch_eager"]["error"]
    assert row["floor_bytes"] == floor and row["unfused_reference"] == "torch_pair"
    assert row["ours_over_unfused"] == pytest.approx(135536 / 531072)
    assert row["ours_over_floor"] == pytest.approx(135536 / 131072)
    assert row["goal_unfused_met"] is True and row["goal_floor_met"] is True
    assert res["env"]["ncu"] == "Version 2099.1.0.0 (fake)"
    assert "--profile-from-start off" in res["protocol"]["command"]
    md = D.markdown(res)
    assert "| tiny.f16 | 0.1 (1) | 0.5 (2) | not measured | 0.1 | 0.255 | 1.034 | yes | yes |" in md
    assert any("torch_eager" in line and "not measured" in line for line in logs)


def test_measure_stops_on_the_permission_error(tmp_path):
    wl = parse("a=2x4x64x32,b=2x4x64x32,transB=1,name=tiny")
    with pytest.raises(D.NcuPermissionError, match="NVreg_RestrictProfilingToAdminUsers=0"):
        D.measure([wl], "sm_90", None, lambda _: None, ncu=_fake_ncu(tmp_path, perm=True))


def _front_end():
    from benchmarks import bench_dram_bytes  # noqa: PLC0415
    return bench_dram_bytes


@pytest.mark.parametrize("target,says", [("llvm", "run it on a GPU machine"), ("sm_75", "unknown target")])
def test_front_end_refuses_a_non_cuda_target(monkeypatch, capsys, target, says):
    def never(*a, **k):
        raise AssertionError("measure() must not run for a CPU target")
    monkeypatch.setattr(D, "measure", never)
    with pytest.raises(SystemExit) as exc:
        _front_end().main(["--target", target, "--workload", "w1"])
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["a=2x3x16x8,b=2x3x24x8,transB=1,scale=0.35",  # attention scores, as W1-W3
                                  "a=16x8,b=8x40",  # the LM head, as W4
                                  "a=5x16x8,b=5x8x24,scale=2.0"])
def test_torch_pair_is_the_op(spec):
    torch = pytest.importorskip("torch")
    from benchmarks.peers import torch_fn
    wl = parse(spec)
    g = torch.Generator().manual_seed(0)
    feeds = {"A": torch.randn(wl.a_shape, generator=g), "B": torch.randn(wl.b_shape, generator=g)}
    got = D.torch_pair(wl)(feeds)()
    assert got.shape == torch.Size(wl.canonical.out_shape)
    torch.testing.assert_close(got, torch_fn(wl)(**feeds), rtol=1e-5, atol=1e-6)


def test_torch_pair_refuses_what_is_not_a_pair():
    with pytest.raises(ValueError, match="without bias"):
        D.torch_pair(parse("a=2x16x8,b=2x24x8,transB=1,mask=2x1x24:bool"))
    with pytest.raises(ValueError, match="equal batch dims"):
        D.torch_pair(parse("a=2x16x8,b=1x8x24"))
