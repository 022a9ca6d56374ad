"""A faster `inspect.stack()` while TVM's tensor intrinsics are parsed (several times faster).

Every `@T.prim_func` calls `inspect.stack()` once to find the caller's frames. Python builds a FrameInfo for every frame
of the stack, and for each one `getsourcefile` stats the file and, for frames with no file on disk (the
`<frozen importlib._bootstrap>` frames of an import chain), `inspect.getmodule` walks all of `sys.modules`. Importing
`tvm.s_tir.tensor_intrin` parses 546 prim_funcs about 46 frames deep inside imports: that walk was most of
flashgemm-tune's start-up before the first search. It works only where the first import of TVM's intrinsic modules
happens inside the block: flashgemm/tvm_ext/tensor_intrin.py is the one module that imports them.

TVMScript reads from that stack only each frame's `.frame` (closure variables hidden by PEP 563) and the source
line of frame 2 (`is_defined_in_class`). `shallow_stack()` builds the first `full_frames` entries as Python
does and the deeper ones without their source line, so what TVMScript reads is the same (tests/test_shallow_stack.py
compares every intrinsic registered both ways).
"""
from __future__ import annotations

import contextlib
import inspect
import sys
import threading

_lock = threading.RLock()  # re-entrant: an import inside the block may use it again


def _stack(full_frames: int, context: int = 1) -> list:
    out, frame = [], sys._getframe(2)  # the caller of inspect.stack(), as Python's own
    while frame is not None:
        if len(out) < full_frames:
            info = inspect.getframeinfo(frame, context)
            out.append(inspect.FrameInfo(frame, *info, positions=info.positions))
        else:
            code = frame.f_code
            out.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None,
                                         positions=None))
        frame = frame.f_back
    return out


@contextlib.contextmanager
def shallow_stack(full_frames: int = 4):
    """Within the block, `inspect.stack()` gives source lines for the `full_frames` innermost frames only."""
    with _lock:
        real = inspect.stack
        inspect.stack = lambda context=1: _stack(full_frames, context)
        try:
            yield
        finally:
            inspect.stack = real
