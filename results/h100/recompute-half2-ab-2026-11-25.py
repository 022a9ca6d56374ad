# The A/B behind recompute-half2-ab-2026-11-25.json, as run on the H100 (session 17) from the repo root with
# PYTHONPATH=.:<TVM site>: devtmp/cuda_recompute_old.py was `git show 2eb3d4c:schedules/cuda_recompute.py` with its
# relative imports made absolute (from schedules import ...); the new schedule is the one committed after 2eb3d4c.
"""A/B on the GPU: the recompute form's P stores, scalar (HEAD) vs half2 (working tree), same sampled decisions.
usage: python devtmp/rc_ab.py OUT.json [count] [dtype]"""
import importlib.util, json, os, sys, time
os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms
from tir_kernels.workloads import parse
from tuning_db.tuner import tuning_modules
from schedules import cuda_space, targets, cuda_recompute as new

spec = importlib.util.spec_from_file_location("cuda_recompute_old", "devtmp/cuda_recompute_old.py")
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
out, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
dtype = sys.argv[3] if len(sys.argv) > 3 else "float16"
arch = "sm_90"
targets.register_intrinsics(arch)
wl = parse("whisper-enc", dtype)
form, mod = next(fm for fm in tuning_modules(wl, arch) if fm[0].name == "recompute")
ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(arch), task_name="main", rand_state=5,
                     space_generator=cuda_space.design_space(arch))
dev = tvm.cuda(0)
rng = np.random.default_rng(0)
args = [tvm.runtime.tensor(rng.standard_normal((1, 160, 1500, 64)).astype(dtype), dev),
        tvm.runtime.tensor(rng.standard_normal((1, 160, 1500, 64)).astype(dtype), dev),
        tvm.runtime.empty((1, 160, 1500, 1500), dtype, dev)]
rows, seed = [], 0
while len(rows) < count and seed < 20 * count:
    seed += 1
    row = {"seed": seed, "sketch": seed % 2}
    for name, m in (("scalar", old), ("half2", new)):
        sch = m.schedule(tvm.s_tir.Schedule(mod, seed=seed), arch)[seed % 2]
        if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
            row = None
            break
        try:
            f = cuda_space.build(sch.mod, arch)
            f(*args)
            dev.sync()
            t = f.mod.time_evaluator("main", dev, number=10, repeat=3)(*args).median * 1e6
            row[name] = round(t, 1)
            row[name + "_p"] = args[-1].numpy()[0, :8].astype(np.float64)
        except Exception as err:  # noqa: BLE001
            row[name] = f"error: {str(err)[-300:]}"
    if row is None:
        continue
    if "scalar_p" in row and "half2_p" in row:
        row["max_abs_diff"] = float(np.abs(row["scalar_p"] - row["half2_p"]).max())
        row["row_sum_err"] = float(np.abs(row["half2_p"].sum(-1) - 1).max())
    row.pop("scalar_p", None); row.pop("half2_p", None)
    row["decisions"] = [str(d) for d in sch.trace.decisions.values()][:8]
    print(json.dumps(row), flush=True)
    rows.append(row)
json.dump({"gpu": open("/tmp/logs/gpu.txt").read().strip() if os.path.exists("/tmp/logs/gpu.txt") else "",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "workload": "whisper-enc", "dtype": dtype,
           "rows": rows}, open(out, "w"), indent=1)
