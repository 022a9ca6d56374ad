#!/usr/bin/env python3
"""Tune workloads for a target with Meta-Schedule; keep the top-k records in flashgemm/databases/<target>/.

  flashgemm-tune --target llvm --workload demo --trials 16
  flashgemm-tune --target auto --workload bert-large --dtype both          # 1024 trials each
  flashgemm-tune --target llvm --workload "a=4x128x64,b=4x64x128,mask=4x1x128:bool"
  flashgemm-tune --target auto --from-model build/models/bert-large.f16.onnx --trials 256

--from-model tunes the attention-score shapes of a model (each FusedGemmSoftmax node of a rewritten model, or
each site the rewrite would fuse): a tuned kernel serves every batch size of its M, N, K. Sites whose batch or
sequence length is symbolic (a dynamic export) get any-length kernels instead (flashgemm/bundle/any_length.py), one
per bound of the ladder that holds a length of --lengths, each tuned at its bound; flashgemm-build ships them in place
of the default-schedule ones:
  flashgemm-tune --target auto --from-model build/models/bert-large-dyn.f16.onnx --lengths 128,512 --trials 256

Running it again continues toward --trials (the budget is a total, not an increment).

After a change to how kernels are compiled, the kept records' times are stale: --remeasure times them again with
today's compiler and rewrites the database with those times before the search (seeding.remeasure: a search against
stale times can rank new candidates above a faster kept record and prune it):
  flashgemm-tune --target sm_90 --workload bert-large --dtype both --trials 2048 --remeasure
It does so by itself (the local runner, on the target's machine) when the database's provenance names another
compiler than today's (provenance.compiler_id: a hash of the compile pipeline's sources and TVM's version), and warns
instead with --runner rpc, --keep-times or a CUDA target without a local GPU.

Measuring on several GPUs (TVM's RPC tracker; flashgemm-rpc-cluster starts one server per GPU):
  flashgemm-rpc-cluster run -- flashgemm-tune --target sm_90 --workload w1 --workload w2 --runner rpc --jobs 2
--jobs tunes that many workloads at once: while one searches and compiles on the CPU, another's candidates
are measured, so more GPUs are kept busy than one workload's measuring stage can. For one workload,
--searches N splits its budget over N independent searches run at once (one per GPU is the usual choice):
  flashgemm-rpc-cluster run -- flashgemm-tune --target sm_90 --workload w2 --runner rpc --searches 4
"""
import argparse
import dataclasses
import os
import sys


from flashgemm.cli.usage import ArgumentParser, count, number


def main(argv=None) -> int:
    from flashgemm.op.workloads import PRESETS, check_attention, parse  # noqa: PLC0415  (keep --help fast)

    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto", help="auto | llvm | sm_80 | sm_89 | sm_90 (default: auto)")
    ap.add_argument("--workload", action="append", default=[],
                    help=f"preset ({', '.join(sorted(PRESETS))}, w1..w4) or a spec string; repeatable")
    ap.add_argument("--from-model", action="append", default=[], metavar="MODEL.onnx",
                    help="also tune every distinct attention-score shape of this ONNX model; repeatable")
    ap.add_argument("--lengths", default="128,256,512", metavar="L1,L2,...",
                    help="for the symbolic sites of --from-model models: the sequence lengths whose any-length "
                         "kernels to tune (each length's bound; default 128,256,512)")
    ap.add_argument("--attention", action="store_true",
                    help="tune FusedAttention (O = P.V, never writing P) at the workloads' shapes instead of "
                         "FusedGemmSoftmax: its tensor-core tiles, CUDA targets only (same as attention=1 in a spec)")
    ap.add_argument("--dtype", default=None, choices=["float16", "bfloat16", "both"],
                    help="override the workload's dtype; 'both' tunes each")
    ap.add_argument("--trials", type=count(1), default=1024, help="total candidates per workload (default 1024)")
    ap.add_argument("--strategy", default="evolutionary", choices=["evolutionary", "random"],
                    help="evolutionary = XGBoost-guided search (default); random = ReplayTrace")
    ap.add_argument("--top-k", type=count(1), default=10, help="records kept per workload (default 10)")
    ap.add_argument("--db", default=None, help="database root (default: the repo's flashgemm/databases/)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=count(1), default=None,
                    help="builder processes (default: all cores, at most 16 a search)")
    ap.add_argument("--batch-size", type=count(1), default=256,
                    help="candidates per search iteration; an interrupted run loses at most one batch. One "
                         "evolutionary search costs 30-50 s on 16 cores whatever the batch, so bigger batches "
                         "tune faster (default 256)")
    ap.add_argument("--population", type=count(1), default=512,
                    help="evolutionary search population per iteration (default 512, Meta-Schedule's; batches "
                         "under 64 get 8 a candidate of the batch, and a form whose space has few points 4 a point, "
                         "at least 16 either way)")
    ap.add_argument("--runner", default="local", choices=["local", "rpc"],
                    help="local: this machine's first GPU (or CPU for llvm), default; rpc: every server "
                         "registered under --key at --tracker")
    ap.add_argument("--tracker", default=None,
                    help="HOST:PORT of TVM's RPC tracker (default: $TVM_TRACKER_HOST:$TVM_TRACKER_PORT)")
    ap.add_argument("--key", default=None, help="the servers' key (default: $TVM_TRACKER_KEY)")
    ap.add_argument("--rpc-timeout", type=count(1), default=60,
                    help="seconds a server gives one candidate before killing its session (default 60)")
    ap.add_argument("--max-minutes", type=number(0.0), default=None,
                    help="stop after the first batch that ends past this many minutes (0: after the first batch), "
                         "writing the database as a finished run does (SIGTERM and Ctrl-C do the same after the "
                         "batch in flight); run again to go on. For machines with a per-command time limit: the "
                         "limit minus one batch")
    ap.add_argument("--jobs", type=count(1), default=1,
                    help="workloads tuned at once (needs --runner rpc: the tracker keeps their measurements "
                         "apart); builder cores are split between them (default 1)")
    ap.add_argument("--searches", type=count(1), default=1,
                    help="independent searches per workload, run at once, each with its share of the trials, cores "
                         "and RPC servers (needs --runner rpc): how one workload uses several GPUs (default 1)")
    ap.add_argument("--padded-form", action="store_true",
                    help="also tune the kernel's padded form (register-resident S) for shapes that need padding "
                         "(M or N not a multiple of 16/64, e.g. 197, 1500), sharing the trials round robin; off by "
                         "default: on the H100 it has not beaten the default form there")
    ap.add_argument("--recompute-form", nargs="?", const="on", default="auto", choices=["auto", "on", "off"],
                    help="tune the kernel's recompute form (S recomputed over column chunks in three sweeps, only a "
                         "chunk on chip) as a second task sharing the trials, for shapes with M >= 16 and no bias or "
                         "mask: auto (the default) on long rows, N >= kernel_forms.RECOMPUTE_AUTO_MIN_N "
                         "(it wins at Whisper's 1500 on the H100), on (shorter rows too; the bare flag), off")
    ap.add_argument("--two-sweep-form", action="store_true",
                    help="also tune the two-sweep recompute form (S twice, FlashAttention's online statistics) as one "
                         "more task; experimental: on the H100 it has not beaten the three-sweep form at W3")
    ap.add_argument("--forms", default=None, metavar="NAME[,NAME]",
                    help="tune exactly these kernel forms, overriding the three flags above: one-pass or split-n "
                         "(the primary form), split-n-wide (long rows on sm_90; tuned by default there), padded, "
                         "recompute, recompute2 (those the shape has); e.g. "
                         "--forms recompute2 gives that form all the trials")
    ap.add_argument("--migrate-records", type=count(0), default=0, metavar="N",
                    help="before searching, re-express the best N records that predate a knob of today's sketches "
                         "on them (the recompute form's records at every warp tiling, for resident A; the "
                         "register sketches' records with their resident B copy vectorized) "
                         "and measure them, so that the search starts from them (default 0: off; the search "
                         "mutates only a record's own decisions and never reaches a knob its records lack)")
    ap.add_argument("--seed-from-dtype", default=None, choices=["float16", "bfloat16"], metavar="DTYPE",
                    help="before searching, replay the best --seed-records records of the same workload in the other "
                         "dtype's committed database (float16 or bfloat16; CUDA targets) and measure them, so that "
                         "the search starts from that dtype's kernels too (each is replayed once per work directory)")
    ap.add_argument("--remeasure", action="store_true",
                    help="first time each workload's kept records again with today's compiler and write them back "
                         "(then the search goes on toward --trials; the local runner only)")
    ap.add_argument("--keep-times", action="store_true",
                    help="do not re-time kept records that another compiler timed (by default flashgemm-tune does, "
                         "with the local runner, before the search: provenance.compiler_id)")
    ap.add_argument("--seed-records", type=count(1), default=10, metavar="N",
                    help="how many records --seed-from-dtype replays (default 10)")
    args = ap.parse_args(argv)
    if args.seed_from_dtype and args.dtype in (args.seed_from_dtype, "both"):
        ap.error(f"--seed-from-dtype {args.seed_from_dtype}: give the workloads' own dtype with --dtype (the other "
                 "one)")
    if args.searches > 1 and args.runner != "rpc":
        ap.error("--searches > 1 needs --runner rpc: searches measured at once on one local device would time each "
                 "other's kernels; the RPC tracker gives every candidate a server of its own")
    if args.searches > 1 and args.jobs > 1:
        ap.error("use --jobs (several workloads at once) or --searches (one workload, several searches), not both")
    if args.jobs > 1 and args.runner != "rpc":
        ap.error("--jobs > 1 needs --runner rpc: concurrent workloads measured on one local device time each "
                 "other's kernels; the RPC tracker gives every candidate a server of its own")
    if not args.workload and not args.from_model:
        ap.error("give at least one --workload or --from-model")
    if args.runner == "local" and (args.tracker or args.key):
        ap.error("--tracker/--key are for --runner rpc")

    from flashgemm import targets  # noqa: PLC0415
    from flashgemm.tune import provenance, rpc_runner, seeding, stopping, tuner  # noqa: PLC0415

    try:
        target = targets.resolve(args.target)
        dtypes = ["float16", "bfloat16"] if args.dtype == "both" else [args.dtype]
        specs = list(args.workload)
        if args.from_model:
            from flashgemm.ort.rewrite import any_length_requests, workloads_of_models  # noqa: PLC0415
            from flashgemm.bundle import any_length  # noqa: PLC0415

            def log(msg):
                print(f"[tune] {msg}", flush=True)
            try:
                lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
            except ValueError:
                raise ValueError(f"--lengths {args.lengths!r}: give sequence lengths, e.g. 128,256,512") from None
            if not lengths or min(lengths) < 1:
                raise ValueError(f"--lengths {args.lengths!r}: give positive sequence lengths, e.g. 128,256,512")
            specs += workloads_of_models(args.from_model, log=log, symbolic_ok=True)
            dynamic = any_length.tuning_specs(any_length_requests(args.from_model, log=log, heads=True),
                                              lengths)
            if dynamic and not targets.is_cuda(target):
                log(f"{len(dynamic)} site kind(s) with symbolic lengths: on {target} the generic kernels serve every "
                    f"length (any-length kernels are tuned for CUDA targets)")
                dynamic = []
                if not specs:
                    raise ValueError(f"--from-model: nothing to tune for {target}: every site has a symbolic length, "
                                     f"which the generic kernels serve on the CPU (tune for a CUDA target instead)")
            if dynamic:
                log(f"{len(dynamic)} any-length workload(s) for the symbolic sites"
                    + "".join(f"\n  {s}" for s in dynamic))
            specs += dynamic
        workloads = [parse(w, d) for w in specs for d in dtypes]
        if args.attention:
            workloads = [check_attention(dataclasses.replace(w, attention=True)) for w in workloads]
        tracker = rpc_runner.parse_tracker(args.tracker, args.key) if args.runner == "rpc" else None
    except (ValueError, targets.TargetError, rpc_runner.TrackerError) as err:
        ap.error(str(err))
    options = dict(strategy=args.strategy, top_k=args.top_k, db_root=args.db, seed=args.seed,
                   workers=args.workers, batch_size=args.batch_size, population=args.population, tracker=tracker,
                   rpc_timeout=args.rpc_timeout, shards=args.searches,
                   max_seconds=None if args.max_minutes is None else args.max_minutes * 60,
                   padded_form=args.padded_form,
                   recompute_form={"auto": None, "on": True, "off": False}[args.recompute_form],
                   two_sweep_form=args.two_sweep_form, migrate_records=args.migrate_records,
                   seed_from_dtype=args.seed_from_dtype, seed_records=args.seed_records,
                   only_forms=tuple(x.strip() for x in args.forms.split(",") if x.strip()) if args.forms else None)
    if args.remeasure and args.runner != "local":
        ap.error("--remeasure measures on this machine (the local runner): leave out --runner rpc")
    from flashgemm.tune import database as dbm  # noqa: PLC0415
    # (re-timing needs the target here: the local runner, and a GPU for a CUDA target)
    can_time = args.runner == "local" and (not targets.is_cuda(target) or targets.detect_local() != "llvm")
    for wl in workloads:
        # kept records timed by another compiler are re-timed first (provenance.compiler_id), unless --keep-times
        why = None if args.remeasure else provenance.stale_times(wl, target, args.db)
        if why and (args.keep_times or not can_time):
            print(f"[tune] warning: {wl.dir_name}: {why}; the search ranks new candidates against those times "
                  f"(seeding.remeasure): run flashgemm-tune --remeasure on the GPU machine first", file=sys.stderr)
            continue
        if why:
            print(f"[tune] {wl.dir_name}: {why}: timing them again first (--keep-times to skip)", flush=True)
        if args.remeasure or why:
            try:
                seeding.remeasure(wl, target, db_root=args.db, workers=args.workers)
            except dbm.DatabaseError as err:
                print(f"flashgemm-tune: error: {err}", file=sys.stderr)
                return 2
    try:
        errors = tuner.tune_many(workloads, target, args.trials, jobs=args.jobs, **options)
    except (KeyboardInterrupt, RuntimeError):
        if not stopping.aborted_by:
            raise
        print(f"flashgemm-tune: aborted by a second {stopping.aborted_by[0]}; the batches measured so far are kept in work/ "
              f"and counted by the next run of the same command", file=sys.stderr)
        # at once, as asked: the interpreter's exit would join threads still waiting on the killed workers (which
        # can take minutes); what is kept was written batch by batch
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    for err in errors:
        print(f"flashgemm-tune: error: {err}", file=sys.stderr)
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
