"""Shared test set-up: the repo on sys.path, and `gpu` tests skipped (with the reason shown) without a GPU."""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def _gpu_present() -> bool:
    try:
        import tvm  # noqa: PLC0415
        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_present():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with TVM's CUDA runtime (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
