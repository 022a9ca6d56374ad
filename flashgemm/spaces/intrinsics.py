"""The tensor intrinsics and reducers the spaces' records name, registered before a database of them is opened."""
from flashgemm import targets


def register_intrinsics(name: str) -> None:
    """CUDA records hold Tensorize instructions that name TVM's and our bf16 tensor intrinsics, and the two-sweep
    recompute form's rfactor needs the online-softmax reducer: they must be registered before a database of such
    records is opened, or loading it fails (it replays every trace)."""
    if targets.is_cuda(name):
        from flashgemm.tvm_ext import online_softmax, tensor_intrin  # noqa: F401,PLC0415  (TVM's intrinsics, and ours)
        online_softmax.register()
        # the sm_90 split-N form's wgmma sketches (flashgemm/spaces/cuda_wgmma): on every arch, so that sm_90's
        # databases load for a transfer to sm_80 / sm_89 (which skips those records: flashgemm.bundle.best)
        from flashgemm.spaces import cuda_wgmma  # noqa: PLC0415
        cuda_wgmma.register_all()
