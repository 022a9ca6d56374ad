"""Benchmarks of the fused op against its peers on one GPU (timing, peers, DRAM bytes, accuracy, report).

Kept apart from the data's path (flashgemm.kernel -> flashgemm.spaces -> flashgemm/databases -> flashgemm.ort), as
flash-attention keeps its benchmarks apart from its kernels: nothing on that path imports this package.
"""
import os
import subprocess

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit_id():
    """The commit a result was measured at: FLASHGEMM_COMMIT first (a tree copied to the GPU machine may carry a
    stale .git), else git's HEAD, else None."""
    commit = os.environ.get("FLASHGEMM_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=_REPO, timeout=30).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            commit = None
    return commit
