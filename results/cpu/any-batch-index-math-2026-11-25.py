"""Session 19 (2026-11-25), compile-only on the CPU: the CUDA of W3 fp16's best record (tuning_db/sm_90/whisper-enc.f16)
as shipped (any-batch: B0, B1 symbolic) and with B0 = 1 static, B1 symbolic. Run: PYTHONPATH=. python THIS DB_DIR.
Output in the .txt beside it."""
import sys
from pathlib import Path
import tvm
from schedules import targets, cuda_build
from tuning_db import database as dbm
from tuning_db.best import _replay, _workload_of
from tuning_db.tuner import tuning_modules, form_of
wl_dir = Path(sys.argv[1]); target = "sm_90"
prov = dbm.read_provenance(wl_dir); wl = _workload_of(wl_dir, prov)
targets.register_intrinsics(target)
modules = tuning_modules(wl, target)
rec = dbm.top_records([m for _, m in modules], [dbm.open_json_db(wl_dir)], 1)[0]
form = form_of(rec, modules)
orig = tvm.tirx.Var
for label in ("b0b1", "b1only"):
    if label == "b1only":
        tvm.tirx.Var = lambda n, t: tvm.tirx.IntImm(t, 1) if n == "B0" else orig(n, t)
    try:
        sch, anyb = _replay(rec.trace, wl, target, form)
    finally:
        tvm.tirx.Var = orig
    ex = cuda_build.compile_cuda(sch.mod, targets.tvm_target(target))
    src = "\n".join(im.inspect_source() for im in ex.mod.imports)
    Path(f"/tmp/src-{label}.cu").write_text(src)
    print(label, "any_batch", anyb, "lines", src.count("\n"), "selects", src.count(" ? "), "rmod", src.count("rmod"))
