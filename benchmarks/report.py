"""Tables, plots and the regression check of a python -m benchmarks.bench result (its JSON is the only input, so every
figure can be regenerated from a committed file: python -m benchmarks.bench_report)."""
from __future__ import annotations

import json
import os

from .peers import KINDS, SYSTEMS

LABELS = {"ours": "ours (TVM)", "triton": "Triton (ours)", "torch_eager": "torch eager", "torch_compile": "torch.compile",
          "ort_cuda": "ORT CUDA EP", "ms_default_unfused": "MS default, unfused", "ours_tuned": "ours tuned",
          "ours_tuned_any_batch": "ours tuned, any batch (no twin)", "ours_default": "ours default schedule",
          "ours_generic": "ours generic"}
REGRESSION = 0.05  # --compare flags our times that got worse by more than this


def _t(row, name):
    v = row.get(name)
    return v.get("median_us") if isinstance(v, dict) else None


def systems_in(result) -> list:
    extra = [f"ours_{k}" for k in KINDS if any(f"ours_{k}" in r for r in result["rows"])]
    present = [s for s in SYSTEMS if any(s in r for r in result["rows"])]
    return present[:1] + extra + present[1:] if present[:1] == ["ours"] else extra + present


def markdown(result, compare=None) -> str:
    env = result["env"]
    names = systems_in(result)
    f = lambda x, d=1: "—" if x is None else f"{x:.{d}f}"  # noqa: E731
    lines = [f"# Benchmark: {env['gpu']}, driver {env.get('driver')}, {result['date']} (commit {result.get('commit')})",
             "", f"Device copy rate {env['copy_rate_TBps']:.2f} TB/s (read + written, measured in this run); "
             f"tensor-core peak {f(env.get('peak_tflops'))} TFLOP/s ({env.get('peak_source', 'unknown GPU')}).",
             f"Protocol: {result['protocol']['timer']}; L2 {'flushed' if result['protocol']['l2_flush'] else 'not flushed'}"
             f" between calls; inputs {result['protocol']['inputs']}"
             + (f"; {result['protocol']['rounds']} rounds alternating the systems, each system's median round"
                if result["protocol"].get("rounds", 1) > 1 else "")
             + ". Times in µs (median; p10–p90 in the JSON).", "",
             "| workload | dtype | " + " | ".join(LABELS.get(n, n) for n in names)
             + " | HBM floor | TC floor | ours / HBM floor | best peer / ours |",
             "|---|---|" + "---|" * len(names) + "---|---|---|---|"]
    notes = []
    for r in result["rows"]:
        cells = []
        for n in names:
            t = _t(r, n)
            if t is None and isinstance(r.get(n), dict) and "error" in r[n]:
                notes.append(f"- {r['workload']} {LABELS.get(n, n)}: {r[n]['error']}")
                cells.append("n/a")
            else:
                cells.append(f(t))
        ours = _t(r, "ours")
        peers = [_t(r, n) for n in ("triton", "torch_eager", "torch_compile", "ort_cuda", "ms_default_unfused")]
        best_peer = min([p for p in peers if p], default=None)
        kernel = r.get("ours_kernel", "").split(" (")[0]
        lines.append(f"| {r['workload'].rsplit('.', 1)[0]}{f' ({kernel})' if kernel else ''} | {r.get('dtype', '')} | "
                     + " | ".join(cells) + f" | {f(r['hbm_floor_us'])} | {f(r.get('tc_floor_us'))} | "
                     f"{f(ours / r['hbm_floor_us'] if ours else None, 2)} | "
                     f"{f(best_peer / ours if ours and best_peer else None, 2)} |")
    out = "\n".join(lines) + "\n"
    if notes:
        out += "\nNot measured:\n" + "\n".join(notes) + "\n"
    if compare is not None:
        out += "\n" + compare_markdown(compare)
    return out


# ----------------------------------------------------------------------------- regression check
def compare(new, old, threshold=REGRESSION) -> dict:
    """Our times (ours and ours_*) in `new` against `old`, workload by workload. Comparable only on the same GPU
    model; a different one raises ValueError (times from two GPUs say nothing about a kernel change)."""
    if new["env"]["gpu"] != old["env"]["gpu"]:
        raise ValueError(f"--compare: {old['env']['gpu']!r} (old) is not {new['env']['gpu']!r}: "
                         "compare results taken on the same GPU model")
    old_rows = {r["workload"]: r for r in old["rows"]}
    items = []
    for r in new["rows"]:
        o = old_rows.get(r["workload"])
        if o is None:
            continue
        for name in [k for k in r if k == "ours" or k.startswith("ours_") and isinstance(r[k], dict)]:
            t_new, t_old = _t(r, name), _t(o, name)
            if t_new is None or t_old is None:
                if t_old is not None:  # it ran before and does not now: the worst regression
                    items.append({"workload": r["workload"], "system": name, "old_us": t_old, "new_us": None,
                                  "ratio": None, "regressed": True})
                continue
            ratio = t_new / t_old
            items.append({"workload": r["workload"], "system": name, "old_us": t_old, "new_us": t_new,
                          "ratio": ratio, "regressed": ratio > 1 + threshold})
    return {"old_commit": old.get("commit"), "old_date": old.get("date"), "threshold": threshold, "items": items,
            "regressed": [i for i in items if i["regressed"]]}


def compare_markdown(cmp) -> str:
    lines = [f"## Against {cmp['old_date']} (commit {cmp['old_commit']}): "
             f"{len(cmp['regressed'])} of our numbers worse by more than {cmp['threshold']:.0%}", "",
             "| workload | kernel | old µs | new µs | new / old | |", "|---|---|---|---|---|---|"]
    for i in cmp["items"]:
        new = "failed" if i["new_us"] is None else f"{i['new_us']:.1f}"
        ratio = "—" if i["ratio"] is None else f"{i['ratio']:.3f}"
        lines.append(f"| {i['workload']} | {i['system']} | {i['old_us']:.1f} | {new} | {ratio} | "
                     f"{'**REGRESSED**' if i['regressed'] else ''} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- plots
def plots(result, out_prefix) -> list:
    """<prefix>-bars.png (time per system per workload, log scale, floors as lines) and <prefix>-roofline.png
    (each system placed by achieved FLOP/s against the op's arithmetic intensity at the HBM floor's bytes)."""
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows, env = result["rows"], result["env"]
    names = [n for n in systems_in(result) if any(_t(r, n) for r in rows)]  # systems with at least one time
    colors = {n: plt.get_cmap("tab10")(i) for i, n in enumerate(names)}
    title = f"{env['gpu']}, {result['date'][:10]}, commit {result.get('commit')}"

    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(rows) * len(names) / 3), 5))
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        xs = [j + i * width for j, r in enumerate(rows) if _t(r, n)]
        ax.bar(xs, [_t(r, n) for r in rows if _t(r, n)], width, label=LABELS.get(n, n), color=colors[n])
    for j, r in enumerate(rows):
        ax.hlines(r["hbm_floor_us"], j - width / 2, j + 0.8 - width / 2, colors="k", linestyles="--",
                  label="HBM floor" if j == 0 else None)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
    ax.set_xticklabels([r["workload"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("µs per call (log)")
    ax.set_title(f"Fused GEMM + softmax and peers: {title}", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    bars = f"{out_prefix}-bars.png"
    fig.savefig(bars, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 5))
    rate, peak = env["copy_rate_TBps"] * 1e12, env.get("peak_tflops")
    ais = [r["flop"] / r["bytes"] for r in rows]
    lo, hi = min(ais) / 2, max(max(ais) * 4, 3 * peak * 1e12 / rate if peak else 0)  # show the knee
    xs = [lo * (hi / lo) ** (i / 50) for i in range(51)]
    roof = [min(rate * x, peak * 1e12 if peak else float("inf")) / 1e12 for x in xs]
    ax.plot(xs, roof, "k-", label=f"roof: {env['copy_rate_TBps']:.2f} TB/s copy rate"
            + (f", {peak:.0f} TFLOP/s peak" if peak else ""))
    markers = "osD^vP*X"
    for i, n in enumerate(names):
        pts = [(r["flop"] / r["bytes"], r["flop"] / (_t(r, n) * 1e-6) / 1e12) for r in rows if _t(r, n)]
        if pts:
            ax.scatter(*zip(*pts), label=LABELS.get(n, n), color=colors[n], marker=markers[i % len(markers)], s=28)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity, FLOP per byte of the HBM floor (A + B + bias + mask + P)")
    ax.set_ylabel("achieved TFLOP/s (2·B·M·N·K / time)")
    ax.set_title(f"Roofline: {title}", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    roofline = f"{out_prefix}-roofline.png"
    fig.savefig(roofline, dpi=120)
    plt.close(fig)
    return [bars, roofline]


def write(result, out_json, compare_with=None, with_plots=True) -> tuple:
    """JSON, markdown (and plots) beside it; returns (markdown, compare result or None)."""
    cmp = compare(result, compare_with) if compare_with is not None else None
    md = markdown(result, cmp)
    os.makedirs(os.path.dirname(os.path.abspath(out_json)), exist_ok=True)
    with open(out_json, "w") as fh:
        json.dump(result, fh, indent=1)
    prefix = os.path.splitext(out_json)[0]
    with open(prefix + ".md", "w") as fh:
        fh.write(md)
    if with_plots:
        plots(result, prefix)
    return md, cmp
