#!/usr/bin/env python3
"""The main job, end to end on one machine: tune a little -> build the bundle -> run an ONNX Runtime
session with flashgemm::FusedGemmSoftmax -> print P's error against the FP64 reference and the time.

  flashgemm-demo                      # target auto (llvm without a GPU), 8 trials of the 'demo' workload
  flashgemm-demo --trials 32 --workload vit-b16

Everything goes under ./build: tuning records to build/demo_db/ (the databases installed with the package stay as
they are), the bundle to build/<target>/.
"""
import argparse
import os
import statistics
import sys
import time


from flashgemm.cli.usage import ArgumentParser, count

TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2}  # max abs error of P (values in [0, 1])


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto")
    ap.add_argument("--workload", default="demo")
    ap.add_argument("--trials", type=count(1), default=8)
    ap.add_argument("--repeat", type=count(1), default=20, help="timed session runs")
    args = ap.parse_args(argv)

    import numpy as np  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    from flashgemm.bundle import kernel_library  # noqa: PLC0415
    from flashgemm.ort import session
    from flashgemm.ort.model import make_model  # noqa: PLC0415
    from flashgemm.codegen import cuda_stub  # noqa: PLC0415
    from flashgemm import targets
    from flashgemm.op.reference import fused_gemm_softmax_ref  # noqa: PLC0415
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    from flashgemm.bundle import best  # noqa: PLC0415
    from flashgemm.tune import database, tuner

    with ap.errors(targets.TargetError, what="--target"):
        target = targets.resolve(args.target)
    with ap.errors(ValueError, what="--workload"):
        wl = parse(args.workload)
    db_root = os.path.join("build", "demo_db")
    bundle = os.path.join("build", target)
    with ap.errors(database.DatabaseError, cuda_stub.CudaCodegenError, ValueError), \
            ap.errors(kernel_library.CompileError, fix=""):  # (these name their log)
        print(f"== 1/3 tune {wl.dir_name} on {target}: {args.trials} trials (Meta-Schedule, XGBoost cost model)")
        tuner.tune(wl, target, args.trials, db_root=db_root)
        print(f"== 2/3 build the bundle in {bundle}")
        kernel_library.export_bundle(bundle, target, best.load_all(target, db_root,
                                                                   compile_limit_s=kernel_library.COMPILE_LIMIT_S))

    print("== 3/3 run an ONNX Runtime session with the op")
    providers = (["CUDAExecutionProvider"] if targets.is_cuda(target) else []) + ["CPUExecutionProvider"]
    os.environ["FLASHGEMM_VERBOSE"] = "1"  # the op says which kernel serves the call (tuned or generic)
    model = make_model(wl.dtype, wl.a_shape, wl.b_shape, wl.bias_shape, wl.mask_shape,
                       "bool" if wl.mask_kind == "bool" else None, wl.scale, int(wl.trans_b), int(wl.causal))
    sess = ort.InferenceSession(model.SerializeToString(), session.session_options(bundle), providers=providers)
    rng = np.random.default_rng(0)
    np_dtype = np.float16 if wl.dtype == "float16" else __import__("ml_dtypes").bfloat16
    feeds = {"A": rng.standard_normal(wl.a_shape).astype(np_dtype),
             "B": rng.standard_normal(wl.b_shape).astype(np_dtype)}
    if wl.bias_shape is not None:
        feeds["bias"] = rng.standard_normal(wl.bias_shape).astype(np_dtype)
    if wl.mask_shape is not None:
        keep = rng.random(wl.mask_shape) > 0.25
        feeds["mask"] = keep if wl.mask_kind == "bool" else np.where(keep, 0, -1e9).astype(np_dtype)
    (p,) = session.run(sess, feeds)
    sys.stderr.flush()
    os.environ.pop("FLASHGEMM_VERBOSE")
    ref = fused_gemm_softmax_ref(feeds["A"], feeds["B"], feeds.get("bias"), feeds.get("mask"),
                                 scale=wl.scale, trans_b=wl.trans_b, causal=wl.causal)
    err = float(np.abs(p.astype(np.float64) - ref).max())
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        session.run(sess, feeds)
        times.append(time.perf_counter() - t0)
    print(f"P: shape {list(p.shape)} {wl.dtype}; row sums in [{p.astype(np.float64).sum(-1).min():.4f}, "
          f"{p.astype(np.float64).sum(-1).max():.4f}]")
    print(f"max |P - P_ref(fp64)| = {err:.3e}  (tolerance {TOLERANCE[wl.dtype]:.1e} for {wl.dtype})")
    print(f"session run: median {statistics.median(times) * 1e3:.3f} ms over {args.repeat} runs on {target}")
    ok = err <= TOLERANCE[wl.dtype]
    print("OK" if ok else "FAILED: error above tolerance")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
