"""The README's figure: the op against its peers at W1-W3, from the committed results of one benchmark run.

    python -m benchmarks.readme_figure [--run results/h200/proof-2026-11-29] [--dtype float16] [--out docs/op-level.png]

One panel a workload (its own time axis), one labelled bar a system, the HBM floor (the time to read the inputs and
write P once at the GPU's measured copy rate) as a dashed line. Reads the run's bench-w{1,2,3}.json
(python -m benchmarks.bench --out).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

SYSTEMS = (("ours", "ours"), ("triton", "Triton (ours)"), ("torch_eager", "torch eager"),
           ("torch_compile", "torch.compile"))
WORKLOADS = (("w1", "W1 BERT-Large"), ("w2", "W2 ViT-B/16"), ("w3", "W3 Whisper encoder"))
DTYPE_SUFFIX = {"float16": ".f16", "bfloat16": ".bf16"}


def rows(run: Path, dtype: str) -> list:
    out = []
    for tag, title in WORKLOADS:
        data = json.loads((run / f"bench-{tag}.json").read_text())
        row = next(r for r in data["rows"] if r["workload"].endswith(DTYPE_SUFFIX[dtype]))
        b0, b1, m, n, k = row["sizes"]
        out.append({"title": f"{title}\n{b0 * b1} x {m} x {n} x {k}", "floor": row["hbm_floor_us"],
                    "times": [(label, row[key]["median_us"]) for key, label in SYSTEMS if key in row],
                    "env": data["env"], "date": data["date"][:10], "commit": data["commit"]})
    return out


def draw(panels: list, dtype: str, out: Path) -> None:
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(1, len(panels), figsize=(12, 4.2))
    colors = ("#1f77b4", "#9467bd", "#2ca02c", "#d62728")
    for ax, p in zip(axes, panels):
        labels = [label for label, _ in p["times"]]
        times = [t for _, t in p["times"]]
        bars = ax.bar(range(len(times)), times, color=colors[:len(times)])
        ax.bar_label(bars, labels=[f"{t:.0f}" if t >= 100 else f"{t:.1f}" for t in times], padding=2, fontsize=9)
        ax.axhline(p["floor"], color="black", linestyle="--", linewidth=1, label=f"HBM floor {p['floor']:.1f} us")
        ax.legend(loc="upper left", fontsize=8, frameon=False)
        ax.set_xticks(range(len(times)), labels, rotation=20, ha="right", fontsize=9)
        ax.set_title(p["title"], fontsize=10)
        ax.set_ylim(0, max(times) * 1.22)
    axes[0].set_ylabel("time per call (us, lower is better)")
    env = panels[0]["env"]
    fig.suptitle(f"P = softmax(scale * Q K^T), {dtype}, {env['gpu']} (driver {env['driver']}), "
                 f"{panels[0]['date']}, commit {panels[0]['commit']}", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("results/h200/proof-2026-11-29"))
    ap.add_argument("--dtype", default="float16", choices=tuple(DTYPE_SUFFIX))
    ap.add_argument("--out", type=Path, default=Path("docs/op-level.png"))
    args = ap.parse_args(argv)
    draw(rows(args.run, args.dtype), args.dtype, args.out)
    print(f"readme_figure: wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
