"""Shared test set-up: the repo on sys.path, and `gpu` tests skipped (with the reason shown) without a GPU."""
import fcntl
import os
import shutil
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def _compile_share() -> bool:
    """Each pytest-xdist worker builds its own bundles: give each its share of the cores for compile workers
    (kernel_library.compile_jobs), else two workers on two cores run four compiles, each importing TVM."""
    from flashgemm.bundle.workers import COMPILE_JOBS_ENV, usable_cores  # noqa: PLC0415
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers <= 1 or COMPILE_JOBS_ENV in os.environ:
        return False
    os.environ[COMPILE_JOBS_ENV] = str(max(1, usable_cores() // workers))
    return True


COMPILE_SHARE = _compile_share()  # True: the share is this file's, not the user's setting


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



@pytest.fixture(scope="session")
def made_once(tmp_path_factory):
    """made_once(name, make) -> the directory that make(dir) fills, made once per test run and shared by
    pytest-xdist's workers: a bundle compiles its kernels on every core, so one build each for 8 workers takes 8 times
    as long and can push a GPU run past its limit. Workers that find it being made wait for it (an flock beside it),
    so it is made with every core, not the worker's share."""
    from flashgemm.bundle.workers import COMPILE_JOBS_ENV  # noqa: PLC0415
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, above each worker's own

    def made(name: str, make):
        d = root / name
        with open(root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (d / ".made").exists():
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir()
                share = os.environ.pop(COMPILE_JOBS_ENV, None) if COMPILE_SHARE else None
                try:
                    make(d)
                finally:
                    if share is not None:
                        os.environ[COMPILE_JOBS_ENV] = share
                (d / ".made").touch()
        return d
    return made
