#!/usr/bin/env python3
"""Build the runtime bundle of a target: best tuned kernels + generic kernels -> kernel libraries + manifest, in
build/<target>/ under the current directory (or --out).

  flashgemm-build --target llvm
  flashgemm-build --target sm_90 --db flashgemm/databases/
  flashgemm-build --target sm_90 --from-model build/models/vit-b16.f16.rewritten.onnx

Shapes nobody tuned: on a CUDA target, --workload SPEC and --from-model MODEL.onnx add a kernel of the
tensor-core space with a default schedule (chosen by rule, untuned: "schedule": "default" in the manifest)
for each of those shapes that has no tuned kernel, far faster than the generic kernel that otherwise
serves them. Tuning them (flashgemm-tune --from-model) is faster still.

Any length: a CUDA bundle also holds any-length kernels (flashgemm/bundle/any_length.py: default schedules, one per
bound of a ladder up to 2048, each serving every shorter M and N of its variant and head size), for the usual head
sizes and mask kinds (--any-length common, the default) and for the sites of --from-model models whose batch or
sequence axes are symbolic, so a model exported with dynamic axes runs on tensor cores at every length.

Then: flashgemm.session_options(BUNDLE_DIR) registers the op library (flashgemm.get_library_path(), installed with
the package) on a SessionOptions and points it at the bundle (the session config entry flashgemm.bundle_dir).
"""
import argparse
import os
import subprocess
import sys

from flashgemm.cli.usage import ArgumentParser, number


def _log(msg: str) -> None:
    # the bundle modules' own lines already carry the prefix (they also print without this CLI)
    print(msg if msg.startswith("[build]") else f"[build] {msg}", flush=True)


def _workloads(specs: list, models: list, attention: bool) -> list:
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    if models:
        from flashgemm.ort.rewrite import workloads_of_models  # noqa: PLC0415
        specs = specs + workloads_of_models(models, log=_log, symbolic_ok=True, attention_ok=attention)
    return [parse(s) for s in specs]


def _any_length_kernels(choice: str, models: list, target: str, tuned: list) -> list:
    from flashgemm.bundle import any_length  # noqa: PLC0415
    from flashgemm.ort.rewrite import any_length_requests  # noqa: PLC0415
    requests = any_length_requests(models, log=_log) if models else []
    if choice == "common":
        requests += [r for r in any_length.common() if r not in requests]
    if not requests:
        return []
    _log(f"any-length kernels for {len(requests)} (variant, head size) pairs, lengths up to "
         f"{any_length.LENGTH_BOUNDS[-1]} ...")
    return any_length.kernels_for(requests, target, log=_log, tuned=tuned)


ATTENTION_CHOICES = ("common", "model", "all")


def _attention_variants(choice: str, models: list):
    """The variants that get FusedAttention's tensor-core kernels (--attention CHOICE); None: every variant."""
    from flashgemm.bundle import any_length  # noqa: PLC0415
    from flashgemm.ort.rewrite import model_attention_variants  # noqa: PLC0415
    if choice == "all":
        return None
    out = [] if choice == "model" else list(any_length.ATTENTION_COMMON_VARIANTS)
    for path in models:
        found = model_attention_variants(path)
        _log(f"{path}: FusedAttention variants " + (", ".join(v.key for v in found) or "none"))
        out += [v for v in found if v not in out]
    return out


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="auto", help="auto | llvm | sm_80 | sm_89 | sm_90 (default: auto)")
    ap.add_argument("--db", default=None,
                    help="tuning database root (default: flashgemm/databases, installed with the package)")
    ap.add_argument("--out", default=None, help="bundle directory (default: build/<target>)")
    ap.add_argument("--workload", action="append", default=[], metavar="SPEC",
                    help="a shape to serve with a default-schedule kernel when it is not tuned: a preset name or a "
                         "spec (as for flashgemm-tune: flashgemm.op.workloads.parse); repeatable")
    ap.add_argument("--from-model", action="append", default=[], metavar="MODEL.onnx",
                    help="the attention-score shapes of a model (rewritten or not), as --workload; repeatable")
    ap.add_argument("--compile-limit", type=number(0.0), default=None, metavar="SECONDS",
                    help="leave out (with a warning) a tuned kernel that does not compile alone within this time; its "
                         "calls go to the generic kernel. The whole bundle's compile gets this much a kernel it holds; "
                         "past that its tuned kernels are left out the same way. CUDA: also the limit of each tuned "
                         "kernel's register measurement (past it, no register cap). A compile past its limit is killed "
                         "(nvcc included). Default: kernel_library.COMPILE_LIMIT_S, 120; 0: no limit")
    ap.add_argument("--any-length", choices=("common", "model", "none"), default="common",
                    help="CUDA: which any-length kernels the bundle holds: common (the usual head sizes 32-128 and "
                         "mask kinds, plus those of --from-model models with symbolic lengths), model (only the "
                         "latter), none (lengths without a kernel of their own take the generic kernel). "
                         "Default: common")
    ap.add_argument("--embed-ptx", action="store_true",
                    help="CUDA: embed the kernels' PTX beside their machine code, so that a newer GPU can run them "
                         "(to check an sm_80 or sm_89 bundle on an sm_90 GPU with flashgemm-check-bundle)")
    ap.add_argument("--attention", nargs="?", const="common", choices=ATTENTION_CHOICES, default=None,
                    help="also FusedAttention's kernels (O = softmax(scale*Q*K + bias + mask) * V, P never stored), "
                         "for models rewritten with flashgemm-rewrite --attention: the generic kernel of every variant "
                         "and, on CUDA, tensor-core kernels for head sizes 32, 64, 80, 96, 128 (Q's and V's equal; "
                         "wgmma on sm_90 at 64 and 128; 10-12 a variant), with the tiles tuned by flashgemm-tune "
                         "--attention under --db, for the variants of: common (the default) the dtypes, mask kinds "
                         "and causal masking exported models carry, with K transposed, and a decoder's padding bias "
                         "under causal masking (flashgemm-rewrite --decoder-causal) and DeBERTa's bias and filled "
                         "mask, plus those of the --from-model models; model: only those; all: all 80 (minutes on many "
                         "cores). A "
                         "variant without them runs its generic kernel, slower than the unfused graph it replaces "
                         "(the op warns)")
    args = ap.parse_args(argv)

    from flashgemm.bundle import kernel_library  # noqa: PLC0415
    from flashgemm.codegen import cuda_stub  # noqa: PLC0415
    from flashgemm import targets
    from flashgemm.bundle import attention_best, best  # noqa: PLC0415
    from flashgemm.tune import database
    from flashgemm.op import variant  # noqa: PLC0415

    try:
        target = targets.resolve(args.target)
        if targets.is_cuda(target) and not cuda_stub.cuda_codegen_ready() and not os.environ.get(cuda_stub.GUARD):
            # no driver here: TVM would keep the kernels as CUDA source; compile in a process with a stub driver
            stub = cuda_stub.build_stub()
            print(f"[build] no CUDA driver on this machine: compiling {target} kernels with nvcc through a stub "
                  f"libcuda.so.1 ({stub}); nothing runs here", flush=True)
            return subprocess.run([sys.executable, "-m", __spec__.name, *(argv if argv is not None else sys.argv[1:])],
                                  env=cuda_stub.env_with_stub(stub)).returncode
        out = args.out or os.path.join("build", target)
        if os.path.exists(out) and not os.path.isdir(out):
            ap.error(f"--out {out} is a file", fix="give a directory for the bundle; it is created if missing")
        if args.attention == "model" and not args.from_model:
            ap.error("--attention model needs --from-model MODEL.onnx (the models whose variants to build)",
                     fix="add --from-model, or use --attention (the common variants) or --attention all")
        extra = _workloads(args.workload, args.from_model, bool(args.attention))  # a mistake fails at once
        limit = kernel_library.COMPILE_LIMIT_S if args.compile_limit is None else args.compile_limit
        tuned = best.load_all(target, args.db, compile_limit_s=limit)
        if extra and targets.is_cuda(target):
            tuned = best.with_defaults(tuned, extra, target)
        if targets.is_cuda(target) and args.any_length != "none":
            tuned = tuned + _any_length_kernels(args.any_length, args.from_model, target, tuned)
        elif extra:
            print(f"[build] {target}: untuned shapes are served by the generic kernels (default schedules are for "
                  f"CUDA targets); --workload/--from-model add nothing")
        attention_tuned = attention_best.load_all(target, args.db, log=print) if args.attention else []
        attention_tc = None
        if args.attention and targets.is_cuda(target):
            attention_tc = _attention_variants(args.attention, args.from_model)
            if attention_tc is not None:
                _log(f"FusedAttention tensor-core kernels for {len(attention_tc)} variant(s) and those of tuned "
                     f"tiles; every other variant's FusedAttention runs its generic kernel (--attention all: all "
                     f"{len(variant.Variant.all())} variants)")
        kernel_library.export_bundle(out, target, tuned, compile_limit_s=limit, embed_ptx=args.embed_ptx,
                                     attention=bool(args.attention), attention_tuned=attention_tuned,
                                     attention_tensor_core=attention_tc)
    except kernel_library.CompileError as err:
        ap.error(str(err), fix="")  # it names the log to read or the option to change
    except (database.DatabaseError, targets.TargetError, cuda_stub.CudaCodegenError, ValueError) as err:
        ap.error(str(err))
    print(f"[build] bundle ready in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
