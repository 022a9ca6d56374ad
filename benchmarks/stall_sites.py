"""Where a kernel's warps stall: Nsight Compute's per-instruction warp-state samples, grouped by what the
instruction does.

`ncu --section SourceCounters` samples every warp's state at a fixed interval and charges each sample to the
instruction the warp sits at, with its stall reason; `ncu -i REPORT --page source --print-source sass --csv`
writes one row per SASS instruction ("Warp Stall Sampling (All Samples)" and one `stall_*` column per reason).
The stall-reason totals of WarpStateStats say *why* warps wait (e.g. "wait": fixed-latency dependencies); these
rows say *where*: at the barriers of a cross-warp reduction, at the exp, at the tensor-core instructions, at the
P stores. That is the measurement the issue asks for where a target is missed ("what limits it").

    profile(wl, ...)     runs ncu (SECTIONS) on benchmarks.dram_bytes' driver (our kernel, one call) and returns
                         per kernel the summary below and the headline metrics (KEY_METRICS)
    summarize(kernel)    samples by instruction class (CLASSES) with the top stall reasons of each, and the
                         hottest instructions
    python -m benchmarks.stall_sites SOURCE.csv [...]   the summary of an exported source page, as Markdown
    python -m benchmarks.bench_stall_sites --workload w1 ...            profile + report (results/h100/stall-sites-*)
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import tempfile
from collections import Counter

from . import dram_bytes

SECTIONS = ("SourceCounters", "WarpStateStats", "SpeedOfLight", "Occupancy", "LaunchStats", "ComputeWorkloadAnalysis")
# raw-page metric -> label (values in base units: ns, byte/second, %)
KEY_METRICS = {
    "gpu__time_duration.sum": "duration under ncu (ns; base clocks, cold caches)",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput (% of peak)",
    "dram__bytes.sum.per_second": "DRAM bandwidth (byte/s)",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput (% of peak)",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe active (%)",
    "smsp__issue_active.avg.per_cycle_active": "instructions issued a scheduler a cycle (max 1)",
    "sm__warps_active.avg.per_cycle_active": "warps active an SM",
    "launch__registers_per_thread": "registers a thread",
    "launch__block_size": "threads a block",
    "launch__grid_size": "blocks",
}

ALL_SAMPLES = "Warp Stall Sampling (All Samples)"

# SASS opcode (before the first '.') -> class. Order of CLASSES is the report's order.
CLASSES = {
    "tensor core (HMMA)": ("HMMA",),
    "shared memory: ldmatrix / loads / stores": ("LDSM", "LDS", "STS", "LDSU"),
    "async copy global -> shared (cp.async) and its waits": ("LDGSTS", "LDGDEPBAR", "DEPBAR", "ARRIVES"),
    "global loads": ("LDG",),
    "global stores (P)": ("STG",),
    "barriers (__syncthreads)": ("BAR",),
    "warp shuffles": ("SHFL",),
    "special functions (exp, reciprocal: MUFU)": ("MUFU",),
    "fp32 arithmetic": ("FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSEL", "FCHK", "FSWZADD", "FRND"),
    # HADD2.F32 Rd, -RZ, Rs.H0_H0 is how ptxas widens an fp16 to fp32; HFMA2 / HMUL2 are fp16 pairs
    "conversions / packing, fp16 pairs": ("F2F", "F2FP", "I2F", "F2I", "I2FP", "F2IP", "PRMT", "HADD2", "HFMA2",
                                          "HMUL2"),
    "integer / address arithmetic": ("IMAD", "IADD3", "IADD", "LEA", "LOP3", "SHF", "ISETP", "IABS", "IMNMX", "SEL",
                                     "MOV", "S2R", "S2UR", "CS2R", "ULDC", "LDC", "UMOV", "UIADD3", "ULEA", "USHF",
                                     "ULOP3", "UIMAD", "R2UR", "POPC", "FLO", "PLOP3", "P2R", "R2P", "VOTE", "VOTEU",
                                     "UISETP", "USEL", "UPRMT", "IMUL"),
    "control flow": ("BRA", "EXIT", "BSSY", "BSYNC", "WARPSYNC", "CALL", "RET", "NOP", "YIELD", "BMOV", "JMP"),
}
_CLASS_OF = {op: cls for cls, ops in CLASSES.items() for op in ops}
OTHER = "other"


def opcode(sass: str) -> str:
    """'@!P0 LDGSTS.E.BYPASS.128 [R1], [R2]' -> 'LDGSTS'."""
    text = sass.strip()
    if text.startswith("@"):
        text = text.split(None, 1)[1] if " " in text else ""
    return re.split(r"[.\s]", text, maxsplit=1)[0] if text else ""


def instruction_class(sass: str) -> str:
    return _CLASS_OF.get(opcode(sass), OTHER)


def _number(text: str) -> float:
    """A cell of the source page as a count (ncu groups thousands, "1,200"); an empty or "-" cell counts 0."""
    return dram_bytes._number(text or "") or 0.0


def parse_source_csv(text: str) -> list:
    """ncu's source page (SASS, CSV) -> one dict per kernel: {"kernel", "rows": [{"address", "sass", "samples",
    "stalls": {reason: samples}}]}. A report of several kernels repeats the '"Kernel Name",...' line and the header
    before each kernel's rows. Raises ValueError when the text has no such table (e.g. the report lacks
    SourceCounters)."""
    kernels, header, current = [], None, None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "Kernel Name":
            current = {"kernel": row[1] if len(row) > 1 else "?", "rows": []}
            kernels.append(current)
            header = None
            continue
        if row[0] == "Address" and ALL_SAMPLES in row:
            header = row
            if current is None:
                current = {"kernel": "?", "rows": []}
                kernels.append(current)
            continue
        if header is None or current is None or len(row) < len(header):
            continue
        rec = dict(zip(header, row))
        stalls = {col[len("stall_"):]: _number(rec[col]) for col in header
                  if col.startswith("stall_") and "(Not Issued)" not in col}
        current["rows"].append({"address": rec["Address"], "sass": rec["Source"].strip(),
                                "samples": _number(rec[ALL_SAMPLES]), "stalls": stalls})
    kernels = [k for k in kernels if k["rows"]]
    if not kernels:
        raise ValueError(f"no per-instruction table with a {ALL_SAMPLES!r} column: profile with "
                         "`ncu --section SourceCounters` and export with `--page source --print-source sass --csv`")
    return kernels


def summarize(kernel: dict, top: int = 12) -> dict:
    """Samples of one kernel by instruction class, each with its share and its top stall reasons (the 'selected'
    samples are issue slots, not stalls), and the `top` hottest instructions."""
    total = sum(r["samples"] for r in kernel["rows"])
    if total <= 0:
        raise ValueError(f"kernel {kernel['kernel']}: no warp-state samples")
    by_class: dict = {}
    reasons_all: Counter = Counter()
    for r in kernel["rows"]:
        cls = instruction_class(r["sass"])
        entry = by_class.setdefault(cls, {"samples": 0.0, "instructions": 0, "reasons": Counter()})
        entry["samples"] += r["samples"]
        entry["instructions"] += 1
        entry["reasons"].update(r["stalls"])
        reasons_all.update(r["stalls"])
    classes = []
    for cls, e in sorted(by_class.items(), key=lambda kv: -kv[1]["samples"]):
        if e["samples"] <= 0:
            continue
        classes.append({"class": cls, "samples": e["samples"], "share": e["samples"] / total,
                        "instructions": e["instructions"],
                        "top_reasons": [(k, v / e["samples"]) for k, v in e["reasons"].most_common(3) if v > 0]})
    hottest = sorted(kernel["rows"], key=lambda r: -r["samples"])[:top]
    return {"kernel": kernel["kernel"], "samples": total, "classes": classes,
            "reasons": [(k, v / total) for k, v in reasons_all.most_common() if v > 0],
            "hottest": [{"address": r["address"], "sass": r["sass"], "share": r["samples"] / total,
                         "top_reasons": [(k, v / r["samples"]) for k, v in Counter(r["stalls"]).most_common(2)
                                         if v > 0]} for r in hottest if r["samples"] > 0]}


def _reasons(pairs) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in pairs)


def markdown(summary: dict, title: str = "") -> str:
    lines = [f"### {title or summary['kernel'][:80]}", "",
             f"{summary['samples']:.0f} warp-state samples. Stall reasons over all of them: "
             f"{_reasons(summary['reasons'][:6])}.", "",
             "| instructions | share of samples | count | top reasons (share of the class's samples) |",
             "|---|---|---|---|"]
    for c in summary["classes"]:
        lines.append(f"| {c['class']} | {c['share']:.1%} | {c['instructions']} | {_reasons(c['top_reasons'])} |")
    lines += ["", "Hottest instructions:", "", "| share | SASS | top reasons |", "|---|---|---|"]
    for h in summary["hottest"]:
        sass = h["sass"].replace("|", "\\|")
        lines.append(f"| {h['share']:.1%} | `{sass[:70]}` | {_reasons(h['top_reasons'])} |")
    return "\n".join(lines) + "\n"


def _run(cmd, timeout_s):
    try:
        return subprocess.run(cmd, cwd=dram_bytes.ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        raise dram_bytes.NcuError(f"{' '.join(cmd[:3])} ... ran past {timeout_s} s") from err
    except OSError as err:
        raise dram_bytes.NcuError(f"could not start {cmd[0]}: {err}") from err


def profile(wl, target_name: str, db_root, ncu: str, timeout_s: int = 1800, keep_dir=None) -> dict:
    """ncu on one call of our kernel for `wl`: {"workload", "which", "kernels": [{"summary", "metrics"}]}.
    keep_dir: where the exported source page (CSV) is kept, else it is dropped. Raises NcuError when ncu fails
    (NcuPermissionError with the fix when it may not read the counters)."""
    with tempfile.TemporaryDirectory(prefix="stall_sites_") as tmp:
        rep, info_file = os.path.join(tmp, "report"), os.path.join(tmp, "info.json")
        sections = [arg for name in SECTIONS for arg in ("--section", name)]
        cmd = [ncu, "--profile-from-start", "off", *sections, "-f", "-o", rep] + dram_bytes.driver_command(
            wl, "ours", target_name, db_root, info_file)
        proc = _run(cmd, timeout_s)
        dram_bytes.check_ncu_output(proc.stdout + "\n" + proc.stderr)
        info = {}
        if os.path.exists(info_file):
            with open(info_file) as fh:
                info = json.load(fh)
        if info.get("error"):
            raise dram_bytes.NcuError(f"{wl.dir_name}: the driver failed: {info['error']}")
        if proc.returncode != 0 or not os.path.exists(rep + ".ncu-rep"):
            raise dram_bytes.NcuError(f"ncu exited {proc.returncode} without a report: "
                                      f"{dram_bytes._tail(proc.stdout + proc.stderr)}")
        source = _run([ncu, "-i", rep + ".ncu-rep", "--page", "source", "--print-source", "sass", "--csv"], timeout_s)
        raw = _run([ncu, "-i", rep + ".ncu-rep", "--page", "raw", "--csv", "--print-units", "base"], timeout_s)
    if keep_dir:
        os.makedirs(keep_dir, exist_ok=True)
        with open(os.path.join(keep_dir, f"stall-sites-{wl.dir_name}.source.csv"), "w") as fh:
            fh.write(source.stdout)
    kernels = parse_source_csv(source.stdout)
    metrics = dram_bytes.parse_ncu_csv(raw.stdout)
    if len(metrics) != len(kernels):
        raise dram_bytes.NcuError(f"{len(kernels)} kernels on the source page, {len(metrics)} on the raw page")
    return {"workload": wl.dir_name, "spec": wl.spec(), "which": info.get("which"),
            "kernels": [{"summary": summarize(k), "metrics": {m: raw_k["metrics"][m] for m in KEY_METRICS
                                                              if m in raw_k["metrics"]}}
                        for k, raw_k in zip(kernels, metrics)]}


def metrics_markdown(metrics: dict) -> str:
    rows = [f"| {label} | {metrics[m]:,.3g} |" if isinstance(metrics.get(m), float) and metrics[m] < 1000
            else f"| {label} | {metrics[m]:,.0f} |" for m, label in KEY_METRICS.items() if m in metrics]
    return "\n".join(["| metric | value |", "|---|---|", *rows]) + "\n"


def main(argv=None) -> int:
    import argparse  # noqa: PLC0415
    ap = argparse.ArgumentParser(prog="python -m benchmarks.stall_sites",
                                 description="Group an ncu source-page CSV's warp-state samples by instruction class.")
    ap.add_argument("csv", nargs="+", help="ncu -i REPORT --page source --print-source sass --csv > FILE")
    ap.add_argument("--top", type=int, default=12, help="hottest instructions listed per kernel")
    args = ap.parse_args(argv)
    for path in args.csv:
        with open(path) as fh:
            kernels = parse_source_csv(fh.read())
        for i, k in enumerate(kernels):
            print(markdown(summarize(k, args.top), f"{path}: kernel {i} ({k['kernel'][:60]})"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
