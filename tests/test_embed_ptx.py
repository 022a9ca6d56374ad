"""flashgemm-build --embed-ptx (flashgemm.codegen.cuda_build.embedded_ptx): the kernels' fatbin holds their PTX beside
the machine code, so that a newer GPU's driver can compile and run an sm_80 or sm_89 bundle (how those bundles are
checked on an sm_90 GPU); a plain build holds machine code only. Compile-only: no GPU needed."""
import pytest

from compile_worker import run_compile_worker

WORKER = r'''
import json, struct, sys
import tvm, tvm_ffi
from flashgemm.codegen import cuda_build
from flashgemm.spaces import cuda_generic
from flashgemm.op.variant import Variant
from flashgemm.kernel.fused_gemm_softmax import runtime_func

blobs = []
_inner = tvm_ffi.get_global_func("tvm_callback_cuda_compile")


@tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
def _record(code, *rest):
    out = _inner(code, *rest)
    blobs.append(bytes(out))
    return out


def entries(blob):
    """(kind, sm) of each fatbin entry: kind 1 is PTX, 2 machine code (ELF)."""
    assert struct.unpack_from("<I", blob, 0)[0] == 0xBA55ED50, "not a fatbin"
    head, size = struct.unpack_from("<H", blob, 6)[0], struct.unpack_from("<Q", blob, 8)[0]
    out, p = [], head
    while p < head + size:
        kind, _, entry_head, payload = struct.unpack_from("<HHIQ", blob, p)
        out.append((kind, struct.unpack_from("<I", blob, p + 28)[0]))
        p += entry_head + payload
    return out


res = {}
mod = cuda_generic.generic_schedule(runtime_func(Variant("float16", True, False, "none", False))).mod
for arch in json.loads(sys.argv[1]):
    from flashgemm import targets
    for ptx in (False, True):
        del blobs[:]
        if ptx:
            with cuda_build.embedded_ptx():
                cuda_build.compile_cuda(mod, targets.tvm_target(arch))
        else:
            cuda_build.compile_cuda(mod, targets.tvm_target(arch))
        res[f"{arch} ptx={ptx}"] = [entries(b) for b in blobs]
print("RESULT" + json.dumps(res))
'''


def test_embedded_ptx_rides_beside_the_machine_code(tmp_path_factory):
    res = run_compile_worker(WORKER, ["sm_80", "sm_89"], tmp_path_factory)
    for arch, sm in (("sm_80", 80), ("sm_89", 89)):
        (plain,) = res[f"{arch} ptx=False"]
        (with_ptx,) = res[f"{arch} ptx=True"]
        assert sorted(map(tuple, plain)) == [(2, sm)], plain  # machine code for that arch only
        assert sorted(map(tuple, with_ptx)) == [(1, sm), (2, sm)], with_ptx  # and its PTX


def test_embed_ptx_is_for_cuda_targets_only(tmp_path):
    from flashgemm.bundle.kernel_library import export_bundle
    with pytest.raises(ValueError, match="only CUDA targets have PTX"):
        export_bundle(tmp_path, "llvm", variants=[], embed_ptx=True)
