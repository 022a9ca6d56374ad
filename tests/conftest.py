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
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with TVM's CUDA runtime")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def stand_in_measurement(monkeypatch):
    """flashgemm.tune.tuner's builder and runner replaced by stand-ins (every candidate builds, and runs in 1 ms plus
    1 us per place in its batch): the list they fill with the runner inputs is returned. For tests of what the tuner
    measures and records, on machines without a GPU."""
    from types import SimpleNamespace

    from flashgemm.tune import search
    measured = []

    class Builder:
        def build(self, inputs):
            return [SimpleNamespace(error_msg=None, artifact_path=f"k{i}") for i, _ in enumerate(inputs)]

    class Runner:
        def run(self, inputs):
            measured.extend(inputs)
            return [SimpleNamespace(result=lambda i=i: SimpleNamespace(error_msg=None, run_secs=[1e-3 + i * 1e-6]))
                    for i, _ in enumerate(inputs)]

    monkeypatch.setattr(search, "builder_runner", lambda *a, **k: (Builder(), Runner()))
    return measured
