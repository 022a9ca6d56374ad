"""A/B of the recompute form's A fragments at W3: loaded at every k tile of every chunk vs resident (loaded once a
block; cuda_recompute's resident-A note), from the committed database's best recompute records that are not
resident.

Resident A first had one warp column (WN = 1) only, so each record is paired with both one-column resident
tilings of its block, BM x CW (rows (BM/16, 1) and (BM/32, 2) warp rows x fragments, FN = CW/16), every other
decision (row groups, chunks, k tiles, fetch widths, pipeline depth, P's way out) the record's own.
  python -m benchmarks.resident_a_ab build OUT_DIR [--records 3] [--dtype float16]   # here, nvcc (stub driver is fine)
  python -m benchmarks.staged_p_ab time OUT_DIR OUT.json                             # on the GPU (the same timer)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.staged_p_ab import WORKLOAD, _replay_with, recompute_setup


def build(out_dir: Path, records: int, dtype: str) -> None:
    import tvm  # noqa: PLC0415

    from flashgemm.spaces import cuda_recompute  # noqa: PLC0415
    from flashgemm.tune import database as dbm  # noqa: PLC0415
    mod, top, export = recompute_setup(out_dir, dtype)
    # (the committed best are resident since 96f1b0c)
    top = [r for r in top if not cuda_recompute.is_resident(r.trace, mod)][:records]
    pairs = []
    for n, rec in enumerate(top):
        decisions = [rec.trace.decisions[i] for i in rec.trace.insts if i in rec.trace.decisions]
        stages = cuda_recompute.pipeline_stages(rec.trace)
        staged = cuda_recompute.is_staged(rec.trace, mod)
        grp, cw, (wm, fm), (wn, fn) = decisions[0], decisions[1], *[[int(x) for x in d] for d in decisions[2:4]]
        base = tvm.s_tir.Schedule(mod)
        rec.trace.apply_to_schedule(base, remove_postproc=False)
        base_name = export(base, f"rec{n}", postprocessed=True)
        sketch = cuda_recompute._schedule(tvm.s_tir.Schedule(mod), stages, staged_p=staged, resident_a=True)
        bmt = wm * fm
        for wm_r, fm_r in ((bmt, 1), (bmt // 2, 2)) if bmt % 2 == 0 else ((bmt, 1),):
            res = _replay_with([grp, cw, [wm_r, fm_r], [1, wn * fn], *decisions[4:]], sketch.trace, mod)
            name = export(res, f"rec{n}_resident_wm{wm_r}")
            if name is None or base_name is None:
                continue
            pairs.append({"label": f"record {n} ({dbm.mean_secs(rec) * 1e6:.1f} us in tuning; WM {wm} FM {fm} WN {wn}"
                                   f" FN {fn}{', staged' if staged else ''}) vs resident WM {wm_r} FM {fm_r}",
                          "stages": stages, "decisions": [str(d) for d in decisions],
                          "per_k_tile": base_name, "resident": name})
    (out_dir / "pairs.json").write_text(json.dumps({"workload": WORKLOAD, "dtype": dtype,
                                                    "kinds": ["per_k_tile", "resident"], "pairs": pairs}, indent=1))


def cli(doc: str, build_fn, records: int, argv=None) -> int:
    """The command line of an A/B builder (this one, benchmarks.warp_columns_ab): build OUT_DIR [--records N]
    [--dtype D]."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["build"])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--records", type=int, default=records)
    ap.add_argument("--dtype", default="float16")
    args = ap.parse_args(argv)
    build_fn(args.out_dir, args.records, args.dtype)
    return 0


def main(argv=None) -> int:
    return cli(__doc__, build, 3, argv)


if __name__ == "__main__":
    sys.exit(main())
