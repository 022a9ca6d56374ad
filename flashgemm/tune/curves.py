"""Tuning curves: best time found vs trials, from <workload dir>/work/curve.csv, as a PNG beside it."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Optional


def read_curve(csv_path: Path) -> list[tuple[int, Optional[float]]]:
    with csv_path.open() as fh:
        return [(int(r["trial"]), float(r["best_seconds"]) if r["best_seconds"] else None)
                for r in csv.DictReader(fh)]


def plot_curve(csv_path: Path, png_path: Path, title: str) -> Optional[Path]:
    """Writes the PNG and returns its path; None (and nothing written) without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    points = [(t, s * 1e6) for t, s in read_curve(csv_path) if s is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    if points:
        ax.step([t for t, _ in points], [us for _, us in points], where="post")
    ax.set_xlabel("trials")
    ax.set_ylabel("best time found (µs)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)
    return png_path


if __name__ == "__main__":  # python -m flashgemm.tune.curves DB_DIR/curve.csv: redraw its PNG
    import sys
    for arg in sys.argv[1:]:
        csv_file = Path(arg)
        print(plot_curve(csv_file, csv_file.with_suffix(".png"), f"{csv_file.parent.name}: best time vs trials")
              or "matplotlib is not installed")
