"""Where the time between "tuned" and "shipped" goes: a database's best record built in each form it can take, all
timed in one process on the same inputs with python -m benchmarks.bench's protocol (benchmarks.peers.time_cuda).

  python -m benchmarks.shipped_forms_ab OUT.json lm-head:float16 [whisper-enc:bfloat16 ...] [--db DB] [--rounds 2]
      [--caps 168,128] [--guarded] [--exp-twice] [--half-sectors] [--plain-arith] [--dynamic-statistics]
      [--shared-warp-statistics] [--combined-statistics] [--shared-rows] [--cached-stores] [--scaled-max]
      [--two-exchanges] [--forms tuning,twin,...]

Forms (each compiled as the export compiles it, with the record's register cap where it ships with one):
  tuning     the module Meta-Schedule measured: static sizes, contiguous operands, scale a constant;
  static     the runtime function with static batch dims (symbolic strides, scale an argument);
  twin       one batch dim static (the bundle's fixed-batch twin, flashgemm.bundle.best._twin);
  twin_scale the twin specialized on the workload's scale (flashgemm.bundle.best.with_scale: what a CUDA bundle
             serves to calls with that scale);
  any_batch  both batch dims symbolic (what serves every other batch);
  twin@capR  the twin compiled with at most R registers a thread (--caps R,...) instead of the record's own cap;
  tuning@guarded, twin@guarded (--guarded)  those two forms with the normalize step's branch left as CodeGenCUDA
             writes it (the pass unguard_normalize off), the twin with the register cap of the tuning
             form compiled that way, as the export compiled it before;
  tuning@exp-twice, twin@exp-twice (--exp-twice)  the same with exp(logit - max) computed again by the normalize
             step (flashgemm.codegen.tir.keep_exp_in_accumulator off, and with it
             flashgemm.codegen.cuda_src.store_whole_sectors);
  tuning@half-sectors, twin@half-sectors (--half-sectors)  the same with P stored from the fragments as CodeGenCUDA
             writes it (flashgemm.codegen.cuda_src.store_whole_sectors off);
  tuning@plain-arith, twin@plain-arith (--plain-arith)  the same with exp(x - m) and the division by the row sum
             as the kernel writes them (flashgemm.codegen.tir.rewrite_softmax_arithmetic off);
  tuning@dynamic-statistics, twin@dynamic-statistics (--dynamic-statistics)  the same with the row statistics left in
             dynamic shared memory (flashgemm.codegen.tir.move_statistics_to_static_shared off: more barriers);
  tuning@shared-warp-statistics, twin@shared-warp-statistics (--shared-warp-statistics)  the same with a warp
             allreduce's statistics in shared memory (flashgemm.codegen.tir.keep_warp_statistics_in_registers off: a
             lane-0 store, two barriers and the warp's reloads a statistic);
  tuning@combined-statistics, twin@combined-statistics (--combined-statistics)  the same with the register sketches'
             partial statistics combined by one warp between two barriers
             (flashgemm.codegen.tir.reduce_statistics_in_quads off);
  tuning@shared-rows, twin@shared-rows (--shared-rows)  the same with the one-pass form's sweeps reading each row of
             S from shared memory three times and computing its exp twice (flashgemm.codegen.tir.keep_rows_in_registers
             off);
  tuning@cached-stores, twin@cached-stores (--cached-stores)  the same with P's stores without the streaming
             (evict-first) cache hint (flashgemm.codegen.cuda_src.store_whole_sectors' __stcs off);
  tuning@scaled-max, twin_scale@scaled-max (--scaled-max)  the same with the constant scale left in the row max
             (flashgemm.codegen.tir.take_scale_out_of_max off; the plain twin, whose scale is an argument, never has it
             out);
  tuning@two-exchanges, twin@two-exchanges, twin_scale@two-exchanges (--two-exchanges)  the same with the register
             sketches' row statistics exchanged between warps twice a row tile
             (flashgemm.codegen.cuda_src.exchange_statistics_once off);
  any_batch@TAG  with any of the switches above: the any-batch kernel built that way (only when --forms names it).
Each form's P is checked against an FP32 torch reference before it is timed; the forms are timed in --rounds
rounds of alternating order (benchmarks.peers.time_in_rounds), and "us" lists each round's median.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from flashgemm.spaces.intrinsics import register_intrinsics

os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")


# the A/B switches: form tag -> the pass of flashgemm.codegen.cuda_build.PASSES left out (FLASHGEMM_DISABLE_PASSES)
SWITCHES = {"guarded": "unguard_normalize", "exp-twice": "keep_exp_in_accumulator",
            "half-sectors": "store_whole_sectors", "plain-arith": "rewrite_softmax_arithmetic",
            "dynamic-statistics": "move_statistics_to_static_shared",
            "shared-warp-statistics": "keep_warp_statistics_in_registers",
            "combined-statistics": "reduce_statistics_in_quads", "shared-rows": "keep_rows_in_registers",
            "cached-stores": "stream_p_stores", "scaled-max": "take_scale_out_of_max",
            "two-exchanges": "exchange_statistics_once"}


def forms_of(wl, target_name: str, db_root: Path, caps: tuple = (), switches: tuple = (), keep=None) -> dict:
    """{form name: (compiled function, takes runtime strides and scale)} of the database's best record; only the
    forms named in `keep` when given (each compile takes seconds)."""
    import tvm  # noqa: PLC0415

    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    from flashgemm import targets
    from flashgemm.bundle import best  # noqa: PLC0415
    from flashgemm.tune import database as dbm
    from flashgemm.spaces.kernel_forms import form_of, tuning_modules  # noqa: PLC0415
    wl_dir = dbm.workload_dir(db_root, target_name, wl.dir_name)
    tk = best.load_tuned(wl_dir, target_name)
    modules = tuning_modules(wl, target_name)
    register_intrinsics(target_name)
    rec = dbm.top_records([m for _, m in modules], [dbm.open_json_db(wl_dir)], 1)[0]
    form = form_of(rec, modules)
    tuning = tvm.s_tir.Schedule(rec.workload.mod)
    rec.trace.apply_to_schedule(tuning, remove_postproc=False)
    def wanted(name):
        return keep is None or name in keep
    out = {"tuning": (cuda_space.build(tuning.mod, target_name)["main"], False)} if wanted("tuning") else {}
    static = best.on_runtime_func(rec.trace, wl, target_name, form, any_batch=False) if wanted("static") else None
    shipped = {"static": static, "any_batch": tk.schedule if tk.any_batch else None, "twin": tk.twin}
    for name, sch in shipped.items():
        if sch is not None and wanted(name):
            mod = tvm.IRModule({"main": tk.shipped_func(sch, "main")})
            out[name] = (cuda_space.build(mod, target_name)["main"], True)
    if tk.twin is not None and tk.scale is not None and wanted("twin_scale"):
        mod = tvm.IRModule({"main": tk.shipped_func(tk.twin, "main", tk.scale)})
        out["twin_scale"] = (cuda_space.build(mod, target_name)["main"], True)
    from flashgemm.codegen.cuda_build import MAX_REGISTERS_ATTR  # noqa: PLC0415
    for cap in caps:
        func = (tk.twin or tk.schedule).mod["main"].with_attr("global_symbol", "main")
        mod = tvm.IRModule({"main": func.with_attr(MAX_REGISTERS_ATTR, int(cap))})
        out[f"twin@cap{cap}"] = (cuda_space.build(mod, target_name)["main"], True)
    for tag in switches:
        out.update(_switched_forms(tuning, tk, target_name, tag, wanted, lambda n: keep is not None and n in keep))
    return out


def _switched_forms(tuning, tk, target_name: str, tag: str, wanted=lambda name: True,
                    named=lambda name: False) -> dict:
    """The tuning form and the twins built without the pass SWITCHES[tag] (the module doc's *@guarded, *@exp-twice)."""
    import tvm  # noqa: PLC0415

    from flashgemm.codegen import cuda_build, device_pass  # noqa: PLC0415
    from flashgemm.spaces import cuda_space
    from flashgemm import targets
    var = device_pass.DISABLE_ENV
    before = os.environ.get(var)
    os.environ[var] = ",".join(filter(None, (before, SWITCHES[tag])))  # read at every compile
    try:
        out = {}
        if wanted(f"tuning@{tag}"):
            out[f"tuning@{tag}"] = (cuda_space.build(tuning.mod, target_name)["main"], False)
        if wanted(f"twin@{tag}"):
            cap = cuda_build.kernel_registers(tuning.mod, targets.tvm_target(target_name))
            func = (tk.twin or tk.schedule).mod["main"].with_attr("global_symbol", "main")
            if cap:
                func = func.with_attr(cuda_build.MAX_REGISTERS_ATTR, int(cap))
            out[f"twin@{tag}"] = (cuda_space.build(tvm.IRModule({"main": func}), target_name)["main"], True)
        if tk.twin is not None and tk.scale is not None and wanted(f"twin_scale@{tag}"):
            func = tk.shipped_func(tk.twin, "main", tk.scale)
            out[f"twin_scale@{tag}"] = (cuda_space.build(tvm.IRModule({"main": func}), target_name)["main"], True)
        if tk.any_batch and named(f"any_batch@{tag}"):  # only when --forms names it
            func = tk.shipped_func(tk.schedule, "main")
            out[f"any_batch@{tag}"] = (cuda_space.build(tvm.IRModule({"main": func}), target_name)["main"], True)
        return out
    finally:
        if before is None:
            del os.environ[var]
        else:
            os.environ[var] = before


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("workloads", nargs="+", help="preset:dtype")
    ap.add_argument("--db", default="flashgemm/databases")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--caps", default="", help="comma-separated register caps to build the twin with as well")
    ap.add_argument("--forms", default="", help="comma-separated forms to build and time (default: all of them), "
                                                "e.g. tuning,twin,twin_scale,tuning@scaled-max")
    ap.add_argument("--guarded", action="store_true",
                    help="also the tuning form and the twin with the normalize step's branch kept (A/B)")
    ap.add_argument("--exp-twice", action="store_true",
                    help="also the tuning form and the twin with the exp computed twice an element (A/B)")
    ap.add_argument("--half-sectors", action="store_true",
                    help="also the tuning form and the twin with P's half-sector stores from the fragments (A/B)")
    ap.add_argument("--plain-arith", action="store_true",
                    help="also the tuning form and the twin without "
                         "flashgemm.codegen.tir.rewrite_softmax_arithmetic (A/B)")
    ap.add_argument("--dynamic-statistics", action="store_true",
                    help="also the tuning form and the twin without "
                         "flashgemm.codegen.tir.move_statistics_to_static_shared (A/B)")
    ap.add_argument("--shared-warp-statistics", action="store_true",
                    help="also the tuning form and the twin without "
                         "flashgemm.codegen.tir.keep_warp_statistics_in_registers (A/B)")
    ap.add_argument("--combined-statistics", action="store_true",
                    help="also the tuning form and the twin without "
                         "flashgemm.codegen.tir.reduce_statistics_in_quads (A/B)")
    ap.add_argument("--shared-rows", action="store_true",
                    help="also the tuning form and the twin without flashgemm.codegen.tir.keep_rows_in_registers (A/B)")
    ap.add_argument("--cached-stores", action="store_true",
                    help="also the tuning form and the twin without store_whole_sectors' streaming hint (A/B)")
    ap.add_argument("--scaled-max", action="store_true",
                    help="also the tuning form and the scale-specialized twin without "
                         "flashgemm.codegen.tir.take_scale_out_of_max (A/B)")
    ap.add_argument("--two-exchanges", action="store_true",
                    help="also the tuning form and the twins without "
                         "flashgemm.codegen.cuda_src.exchange_statistics_once (A/B)")
    args = ap.parse_args(argv)
    caps = tuple(int(c) for c in args.caps.split(",") if c)
    import torch  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415

    from benchmarks import commit_id  # noqa: PLC0415
    from benchmarks.peers import time_in_rounds, torch_fn, torch_inputs  # noqa: PLC0415
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    props = torch.cuda.get_device_properties(0)
    result = {"gpu": props.name, "commit": commit_id(), "rows": []}
    for item in args.workloads:
        name, _, dtype = item.partition(":")
        if dtype not in ("float16", "bfloat16"):
            ap.error(f"{item}: give a workload as preset:dtype, the dtype float16 or bfloat16")
        wl = parse(name, dtype)
        if wl.bias_shape is not None or wl.mask_shape is not None:
            ap.error(f"{item}: workloads with a bias or mask are not supported here (A and B only)")
        c = wl.canonical
        feeds = torch_inputs(wl)
        ref = torch_fn(wl)(**{k: t.float() for k, t in feeds.items()})
        a = feeds["A"].as_strided((c.b0, c.b1, c.m, c.k), c.a_strides)
        b_rows = (c.n, c.k) if wl.trans_b else (c.k, c.n)
        b = feeds["B"].as_strided((c.b0, c.b1, *b_rows), c.b_strides)
        runs = {}
        switches = tuple(t for t in SWITCHES if getattr(args, t.replace("-", "_")))
        keep = set(args.forms.split(",")) if args.forms else None
        for form, (fn, runtime) in forms_of(wl, args.target, Path(args.db), caps, switches, keep).items():
            p = torch.empty((c.b0, c.b1, c.m, c.n), dtype=a.dtype, device="cuda")
            ops = [tvm_ffi.from_dlpack(t) for t in ((a, b, p) if runtime else (a.contiguous(), b.contiguous(), p))]

            def run(fn=fn, call_args=ops + [float(wl.scale)] if runtime else ops, p=p):
                fn(*call_args)
                return p
            err = float((run().float().reshape(ref.shape) - ref).abs().max())
            runs[form] = (run, err)
        timed = time_in_rounds({f: run for f, (run, err) in runs.items() if err < 0.05}, args.rounds, args.reps)
        row = {"workload": wl.dir_name,
               "forms": {f: {"max_abs_err_vs_fp32": e, "us": timed[f]["round_medians_us"] if f in timed else []}
                         for f, (_, e) in runs.items()}}
        for form, r in row["forms"].items():
            print(f"{wl.dir_name:16s} {form:10s} err {r['max_abs_err_vs_fp32']:.2e}  us {r['us']}", flush=True)
        result["rows"].append(row)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
