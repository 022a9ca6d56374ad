"""flashgemm/tvm_ext/shallow_stack.py: TVM's and our tensor intrinsics parsed with the shallow stack are the ones parsed
with Python's own inspect.stack(). (How much faster is printed, not asserted: timings are not tests.)"""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Prints {intrinsic name: sha256 of its desc and impl TVMScript} for every intrinsic TVM's modules name and ours,
# and the seconds the import took. argv[1] == "python-stack": the shallow stack is switched off.
_DUMP = r"""
import contextlib, hashlib, importlib, json, pkgutil, sys, time
sys.path.insert(0, sys.argv[2])
if sys.argv[1] == "python-stack":
    import flashgemm.tvm_ext.shallow_stack as ss
    ss.shallow_stack = lambda *a, **k: contextlib.nullcontext()
t = time.perf_counter()
from flashgemm.tvm_ext import tensor_intrin as ours
seconds = time.perf_counter() - t
import tvm.s_tir.tensor_intrin as pkg
from tvm.s_tir import TensorIntrin
names = {v for k, v in vars(ours).items() if k.isupper() and isinstance(v, str)}
for m in pkgutil.iter_modules(pkg.__path__):
    mod = importlib.import_module(f"{pkg.__name__}.{m.name}")
    names |= {v for k, v in vars(mod).items() if k.endswith("_INTRIN") and isinstance(v, str)}
out = {}
for name in sorted(names):
    ti = TensorIntrin.get(name, allow_missing=True)
    if ti is not None:
        out[name] = hashlib.sha256((ti.desc.script() + ti.impl.script()).encode()).hexdigest()
print(json.dumps({"seconds": seconds, "intrinsics": out}))
"""


def _dump(mode: str) -> dict:
    run = subprocess.run([sys.executable, "-c", _DUMP, mode, str(REPO)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_intrinsics_parsed_with_the_shallow_stack_are_the_same():
    shallow, python = _dump("shallow"), _dump("python-stack")
    assert len(shallow["intrinsics"]) > 100  # TVM's CUDA, x86, ARM, ... and our bf16 ones
    assert "mma_bf16bf16f32" in shallow["intrinsics"] and "mma_ldmatrix_bf16_a_dyn" in shallow["intrinsics"]
    assert shallow["intrinsics"] == python["intrinsics"]
    print(f"import of the intrinsics: {shallow['seconds']:.1f} s with the shallow stack, "
          f"{python['seconds']:.1f} s with Python's ({len(shallow['intrinsics'])} intrinsics compared)")


def _imports_of_tvm_intrinsics(path: Path) -> list:
    import ast  # noqa: PLC0415
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"{path.relative_to(REPO)}:{node.lineno} imports {n}" for n in names
                  if n.startswith("tvm.s_tir.tensor_intrin")]
    return found


def test_only_schedules_tensor_intrin_imports_tvm_intrinsics():
    """Whichever module imports TVM's intrinsic modules first pays for parsing all 546: cuda_space importing
    tvm.s_tir.tensor_intrin.cuda ahead of flashgemm.tvm_ext.tensor_intrin costs flashgemm-tune most of its start-up.
    So the package's modules reach them through flashgemm.tvm_ext.tensor_intrin only."""
    files = [p for p in sorted((REPO / "flashgemm").rglob("*.py")) if p.name != "tensor_intrin.py"]
    assert len(files) > 20
    assert [hit for p in files for hit in _imports_of_tvm_intrinsics(p)] == []


# Counts Python's own (deep) inspect.stack() walks while flashgemm-tune's CUDA modules are imported.
_COUNT = r"""
import inspect, sys
sys.path.insert(0, sys.argv[1])
calls = [0]
real = inspect.getouterframes
def counting(*a, **k):
    calls[0] += 1
    return real(*a, **k)
inspect.getouterframes = counting  # what inspect.stack() calls
import flashgemm.tune.tuner, flashgemm.spaces.cuda_space, flashgemm.spaces.cuda_gemm, flashgemm.spaces.cuda_split_n  # noqa: E401
import flashgemm.spaces.cuda_registers, flashgemm.spaces.cuda_recompute, flashgemm.spaces.cuda_row_vector, flashgemm.spaces.cuda_default  # noqa
import tvm.s_tir.tensor_intrin.cuda
assert "tvm.s_tir.tensor_intrin.cuda" in sys.modules
print(calls[0])
"""


def test_cuda_modules_parse_the_intrinsics_with_the_shallow_stack():
    run = subprocess.run([sys.executable, "-c", _COUNT, str(REPO)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    deep = int(run.stdout.strip().splitlines()[-1])
    # each TVMScript prim_func parsed outside the shallow stack walks the whole stack once: TVM's 546 would show
    assert deep < 50, f"{deep} prim_funcs were parsed with Python's full inspect.stack()"
