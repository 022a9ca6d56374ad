"""A/B of warp columns in the recompute form's resident-A kernels at W3 (cuda_recompute's resident-A note): the
committed database's best resident records (one warp column: a warp holds all CW columns of its rows, and every
warp reads the whole B chunk from shared memory in each sweep) against the same block, BM x CW, at every warp
tiling (cuda_recompute.retiled: each warp reads CW/WN columns of B, A's registers copied once a column), every
other decision (row groups, chunks, k tiles, fetch widths, pipeline depth, P's way out) the record's own; the
tiling with WN = 1 is the record itself on today's sketch (warps on threadIdx.y and .z): the binding alone.
  python -m benchmarks.warp_columns_ab build OUT_DIR [--records 2] [--dtype float16]   # here (stub driver is fine)
  python -m benchmarks.staged_p_ab time OUT_DIR OUT.json                               # on the GPU (the same timer)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.resident_a_ab import cli
from benchmarks.staged_p_ab import WORKLOAD, recompute_setup


def build(out_dir: Path, records: int, dtype: str) -> None:
    import tvm  # noqa: PLC0415

    from flashgemm.spaces import cuda_recompute  # noqa: PLC0415
    from flashgemm.tune import database as dbm  # noqa: PLC0415
    mod, top, export = recompute_setup(out_dir, dtype)
    pairs = []
    for n, rec in enumerate([r for r in top if cuda_recompute.retiled(r.trace, mod)][:records]):
        base = tvm.s_tir.Schedule(mod)
        rec.trace.apply_to_schedule(base, remove_postproc=False)
        base_name = export(base, f"rec{n}", postprocessed=True)
        decisions = [str(rec.trace.decisions[i]) for i in rec.trace.insts if i in rec.trace.decisions]
        for trace in cuda_recompute.retiled(rec.trace, mod):
            (wm, fm), (wn, fn) = [[int(x) for x in d] for d in list(trace.decisions.values())[2:4]]
            sch = tvm.s_tir.Schedule(mod)
            trace.apply_to_schedule(sch, remove_postproc=True)
            name = export(sch, f"rec{n}_wm{wm}_fm{fm}_wn{wn}")
            if name is None or base_name is None:
                continue
            pairs.append({"label": f"record {n} ({dbm.mean_secs(rec) * 1e6:.1f} us in tuning, one warp column) vs "
                                   f"WM {wm} FM {fm} WN {wn} FN {fn}",
                          "stages": None, "decisions": decisions, "record": base_name, "columns": name})
    (out_dir / "pairs.json").write_text(json.dumps({"workload": WORKLOAD, "dtype": dtype,
                                                    "kinds": ["record", "columns"], "pairs": pairs}, indent=1))


def main(argv=None) -> int:
    return cli(__doc__, build, 2, argv)


if __name__ == "__main__":
    sys.exit(main())
