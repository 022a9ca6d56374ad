"""One time-limited compile of the kernel library, in a process of its own:

    python -m flashgemm.bundle.compile_worker [--embed-ptx] TARGET MODULE.json [LIBRARY.so]
    python -m flashgemm.bundle.compile_worker --registers TARGET MODULE.json OUT.txt

Compiles the IRModule saved in MODULE.json (tvm.ir.save_json, by the same TVM) for TARGET as the bundle compiles it
(compile_module: nvcc for CUDA targets; --embed-ptx: with the PTX beside the machine code) and, given LIBRARY.so,
exports it there. With --registers,
writes to OUT.txt the registers a thread of the module's kernel takes (flashgemm.codegen.cuda_build.kernel_registers;
"none" for a module of several kernels). Exit status 0 when it did; otherwise the error is on stderr (its last line says
what failed) and the status is 1.

Why a process: kernel_library.run_compiles starts it in a process group of its own and kills the whole group past
the time limit, nvcc and the compilers it starts included; a compile in the build's own process could not be stopped.
This module imports little (not kernel_library's tuning modules): a worker starts for every compile.
"""
import sys
from pathlib import Path


def compile_module(mod, target_name: str, embed_ptx: bool = False):
    """The bundle's compile of `mod` for `target_name` (CUDA: nvcc, with flashgemm.codegen.cuda_build's pipeline, as the
    tuned kernels were measured built; embed_ptx: their PTX too, flashgemm.codegen.cuda_build.embedded_ptx); a tvm
    Executable."""
    import tvm  # noqa: PLC0415

    from flashgemm import targets  # noqa: PLC0415
    target = targets.tvm_target(target_name)
    if targets.is_cuda(target_name):
        from flashgemm.codegen import cuda_build, cuda_stub  # noqa: PLC0415  (CUDA only)
        cuda_stub.require_cuda_codegen()  # else the library would hold CUDA source that ORT cannot load
        if embed_ptx:
            with cuda_build.embedded_ptx():
                return cuda_build.compile_cuda(mod, target)
        return cuda_build.compile_cuda(mod, target)
    if embed_ptx:
        raise ValueError("embed_ptx: only CUDA targets have PTX")
    from flashgemm.spaces import llvm  # noqa: PLC0415
    target = llvm.export_target(target)  # the host's vector ISA: the generic kernels rely on LLVM's vectorizer
    with target:
        return tvm.compile(mod, target=target)


def main(argv: list) -> int:
    registers = argv[:1] == ["--registers"]
    embed_ptx = argv[:1] == ["--embed-ptx"]
    argv = argv[1:] if registers or embed_ptx else argv
    if len(argv) not in ((3,) if registers else (2, 3)):
        print(__doc__, file=sys.stderr)
        return 2
    import tvm  # noqa: PLC0415, F401  (registers the IR's types, which the JSON names)
    from tvm_ffi.serialization import from_json_graph_str  # noqa: PLC0415

    mod = from_json_graph_str(Path(argv[1]).read_text())  # this TVM wrote it: no schema upgrade (workers.from_json)
    if registers:
        from flashgemm.codegen import cuda_build  # noqa: PLC0415
        from flashgemm import targets
        regs = cuda_build.kernel_registers(mod, targets.tvm_target(argv[0]))
        Path(argv[2]).write_text("none" if regs is None else str(regs))
        return 0
    ex = compile_module(mod, argv[0], embed_ptx)
    if len(argv) == 3:
        ex.export_library(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
