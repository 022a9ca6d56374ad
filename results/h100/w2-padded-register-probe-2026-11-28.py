"""Probe: W2 in the padded register form with hand-picked decisions, timed beside the database's best one-pass record.
argv: dtype [--local] (local: build only, print what each candidate is)."""
import sys, itertools
import tvm
from tvm.s_tir import meta_schedule as ms
from schedules import cuda_space, cuda_registers, targets
from tuning_db import tuner
from tir_kernels.workloads import parse
ARCH = "sm_90"
targets.register_intrinsics(ARCH)
dtype, local = sys.argv[1], "--local" in sys.argv
wl = parse("vit-b16", dtype)
mods = dict((f.name, m) for f, m in tuner.tuning_modules(wl, ARCH))
mod = mods["padded"]
gen = ms.space_generator.ScheduleFn(lambda s: cuda_registers.schedule(s, ARCH), sch_rules=[],
                                    postprocs=cuda_space.postprocs(ARCH), mutator_probs={})
ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(ARCH), task_name="main", rand_state=3, space_generator=gen)
sketches = ctx.generate_design_space()  # b-resident s2, s3, b-streamed s2, s3, row-pipelined
ROWS = [(2, 7, 1, 1), (1, 7, 1, 2), (7, 2, 1, 1), (1, 14, 1, 1), (2, 7, 1, 1), (14, 1, 1, 1), (7, 1, 2, 1),
        (7, 1, 1, 2), (2, 1, 7, 1)]
COLS = [(4, 4), (2, 8), (8, 2), (1, 16)]
cands = []
for si in (0, 4):
    for rows, cols in itertools.product(dict.fromkeys(ROWS), COLS):
        warps = rows[2] * cols[0]
        if warps > 16 or rows[3] * cols[1] > 16:
            continue
        dec = [rows, cols, (1, 4), 2, 0]
        try:
            trace = cuda_space.with_decisions(sketches[si].trace, dec)
            sch = tvm.s_tir.Schedule(mod)
            trace.apply_to_schedule(sch, remove_postproc=True)
            if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
                print("postproc rejects", si, dec, flush=True); continue
        except Exception as e:
            print("fails", si, dec, str(e).splitlines()[-1][:120], flush=True); continue
        cands.append((f"{'rowpipe' if si == 4 else 'bres-s2'} rows{rows} cols{cols}", sch))
print(len(cands), "candidates", flush=True)
if local:
    from concurrent.futures import ThreadPoolExecutor
    import time; t0 = time.time()
    with ThreadPoolExecutor(2) as ex:
        print(list(ex.map(lambda it: type(cuda_space.build(it[1].mod, ARCH)).__name__, cands[:4])))
    print("4 built in", round(time.time() - t0), "s")
    sys.exit()
import torch, tvm_ffi
from benchmarks.peers import time_in_rounds, torch_fn, torch_inputs
from tuning_db.database import open_json_db
from pathlib import Path
c = wl.canonical
feeds = torch_inputs(wl)
ref = torch_fn(wl)(**{k: t.float() for k, t in feeds.items()})
a = feeds["A"].as_strided((c.b0, c.b1, c.m, c.k), c.a_strides).contiguous()
b = feeds["B"].as_strided((c.b0, c.b1, c.n, c.k), c.b_strides).contiguous()
best = min(open_json_db(Path("tuning_db/sm_90") / wl.dir_name).get_all_tuning_records(),
           key=lambda r: sum(float(x) for x in r.run_secs))
s0 = tvm.s_tir.Schedule(best.workload.mod)
best.trace.apply_to_schedule(s0, remove_postproc=False)
cands.insert(0, ("database best (one-pass)", s0))
from concurrent.futures import ThreadPoolExecutor
def build(item):
    try:
        return cuda_space.build(item[1].mod, ARCH)["main"]
    except Exception as e:
        return str(e).splitlines()[-1][:100]
import time; t0 = time.time()
with ThreadPoolExecutor(14) as ex:
    built = list(ex.map(build, cands))
print("built in", round(time.time() - t0), "s", flush=True)
runs = {}
for (name, sch), fn in zip(cands, built):
    if isinstance(fn, str):
        print(name, "build failed", fn, flush=True); continue
    p = torch.full((c.b0, c.b1, c.m, c.n), float("nan"), dtype=a.dtype, device="cuda")
    ops = [tvm_ffi.from_dlpack(t) for t in (a, b, p)]
    def run(fn=fn, ops=ops, p=p):
        fn(*ops); return p
    err = float((run().float().reshape(ref.shape) - ref).abs().max())
    print(name, "err", err, flush=True)
    if err < 0.02:
        runs[name] = run
t = time_in_rounds(runs, 3, 30)
for name in sorted(runs, key=lambda n: min(t[n]["round_medians_us"])):
    print(f"{min(t[name]['round_medians_us']):8.1f}", name, [round(x, 1) for x in t[name]["round_medians_us"]],
          flush=True)
