"""The generated CUDA source of every kernel a bundle ships, without a GPU or nvcc's machine code: to show that a
change of the compile pipeline or of the code's layout leaves the shipped kernels byte-identical.

    python -m benchmarks.kernel_sources --target sm_90 --out DIR    # DIR/sources/<function>.cu, DIR/sources.sha256
    python -m benchmarks.kernel_sources --compare BEFORE.sha256 AFTER.sha256

Runs flashgemm-build's bundle selection (the committed databases, default schedules, any-length kernels, twins)
with the bundle's compile replaced by one flashgemm.codegen.cuda_build.compile_cuda a function, kept as CUDA source (TVM
keeps the source when there is no CUDA driver; this process never loads a stub one). nvcc still runs for the
register caps of tuned kernels (flashgemm.bundle.best). Slow: the whole sm_90 bundle, 795 functions, takes tens of
minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _source_module(mod, target_name: str, embed_ptx: bool = False):
    """Stands in for flashgemm.bundle.compile_worker.compile_module: each function's CUDA source, written by
    export_library into a sources/ directory beside the library path."""
    import tvm  # noqa: PLC0415

    from flashgemm.codegen import cuda_build  # noqa: PLC0415
    from flashgemm import targets
    target = targets.tvm_target(target_name)
    sources = {}
    for gv in mod.functions:
        name = str(gv.name_hint)
        sources[name] = cuda_build.compile_cuda(tvm.IRModule({name: mod[name]}), target).mod.imports[0].inspect_source(
            "cuda")

    class Sources:
        def export_library(self, path):
            out = Path(path).parent / "sources"
            out.mkdir(exist_ok=True)
            lines = []
            for name in sorted(sources):
                (out / f"{name}.cu").write_text(sources[name])
                lines.append(f"{hashlib.sha256(sources[name].encode()).hexdigest()}  {name}")
            (Path(path).parent / "sources.sha256").write_text("\n".join(lines) + "\n")
            Path(path).write_text("CUDA sources only: see sources/\n")
    return Sources()


def generate(target: str, out: Path) -> int:
    from flashgemm.bundle import kernel_library  # noqa: PLC0415
    from flashgemm.codegen import cuda_stub  # noqa: PLC0415
    from flashgemm import targets
    if not targets.is_cuda(targets.resolve(target)):
        raise SystemExit(f"kernel_sources: error: {target} is not a CUDA target (sm_80, sm_89, sm_90)")
    os.environ[cuda_stub.GUARD] = "1"  # flashgemm-build would re-run itself with a stub driver: stay in this process
    kernel_library.compile_module = _source_module
    from flashgemm.cli import build  # noqa: PLC0415
    return build.main(["--target", target, "--compile-limit", "0", "--out", str(out)])


def compare(before: Path, after: Path) -> int:
    def read(p):
        return dict(reversed(line.split("  ", 1)) for line in p.read_text().splitlines() if line)
    b, a = read(before), read(after)
    changed = sorted(n for n in b.keys() & a.keys() if b[n] != a[n])
    print(f"kernel_sources: {len(b.keys() & a.keys()) - len(changed)} of {len(b.keys() | a.keys())} identical; "
          f"changed {len(changed)}, only before {len(b.keys() - a.keys())}, only after {len(a.keys() - b.keys())}")
    for n in changed + sorted(b.keys() ^ a.keys()):
        print(f"  {n}")
    return 0 if not changed and b.keys() == a.keys() else 1


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--out", type=Path, help="directory for sources/ and sources.sha256")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("--out DIR or --compare BEFORE AFTER")
    return generate(args.target, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
