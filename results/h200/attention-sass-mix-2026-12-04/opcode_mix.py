"""Instruction mix and warp stall samples of each kernel in an `ncu --page source --csv --print-source sass` export
(gzip): by opcode, and by how often a SASS line ran (lines run equally often are one region: the chunk loop, code a
warp runs once, ...).  python3 opcode_mix.py SOURCE.csv.gz"""
import collections
import csv
import gzip
import re
import sys

sections, cur = [], None
for row in csv.reader(gzip.open(sys.argv[1], "rt")):
    if not row:
        continue
    if row[0] == "Kernel Name":
        cur = [row[1], None, []]
        sections.append(cur)
    elif row[0] == "Address":
        cur[1] = {h: i for i, h in enumerate(row)}
    else:
        cur[2].append(row)
seen = set()
for name, col, rows in sections:
    key = (name, len(rows))
    if key in seen:  # ncu lists each kernel's page twice
        continue
    seen.add(key)
    ie, st = col["Instructions Executed"], col["Warp Stall Sampling (All Samples)"]
    by, stall, region, region_stall, region_lines = (collections.Counter() for _ in range(5))
    for r in rows:
        src = re.sub(r"^@!?U?P\w+\s+", "", r[col["Source"]].strip())
        op = src.split()[0].split(".")[0] if src else "?"
        n, s = float(r[ie] or 0), float(r[st] or 0)
        by[op] += n
        stall[op] += s
        region[n] += n
        region_stall[n] += s
        region_lines[n] += 1
    tot, ts = sum(by.values()), sum(stall.values())
    print(f"\n== {name[:110]}\n   {len(rows)} SASS lines, {tot / 1e6:.2f} M warp instructions, {ts:.0f} stall samples")
    print("   by opcode (share of instructions, of stall samples):")
    for k, v in by.most_common(24):
        print(f"     {k:10s} {v / 1e6:7.2f} M {100 * v / tot:5.1f} %   stalls {100 * stall[k] / max(ts, 1):5.1f} %")
    print("   by region (lines that ran n times a kernel; n / warps = times a warp):")
    for n in sorted(region, key=lambda k: -region_stall[k])[:6]:
        print(f"     ran {int(n):>8d}x: {region_lines[n]:5d} lines, {region[n] / 1e6:7.2f} M instructions, "
              f"stalls {100 * region_stall[n] / max(ts, 1):5.1f} %")
