"""The normalize step without its branch (flashgemm/codegen/cuda_src/unguard_normalize.py): CodeGenCUDA's
`if (SUM == 0) { V = 0; } else { ...; V = E / SUM; }` becomes `{ ...; V = E / SUM; } if (SUM == 0) { V = 0; }`,
in the recompute form's kernels only (unguard_recompute_normalize: it made the register sketch's W1 kernel slower).
CPU only: the rewrite, its equivalence (both forms compiled with the host C compiler and run on the same inputs,
NaN and zero sums included), which kernels get it, and tuned kernels compiled as the export compiles them. The GPU
numerics and the timing are the GPU tests' and benchmarks/shipped_forms_ab.py --guarded's."""
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.compile_worker import disable_pass, pass_runs

REPO = Path(__file__).resolve().parent.parent
ZERO = "0x0p+0f/*0.000000e+00*/"

SCALAR = f"""      float condval;
      if (((float*)buf)[((int)threadIdx.y)] == {ZERO}) {{
        condval = {ZERO};
      }} else {{
        condval = (expf((((float*)buf)[(t + 672)] - ((float*)buf)[t + 16])) / ((float*)buf)[((int)threadIdx.y)]);
      }}
      P[t] = ((half)condval);
"""

VECTOR = f"""            float2 condval_1;
            if (row_sum_local[0] == {ZERO}) {{
              condval_1 = make_float2({ZERO}, {ZERO});
            }} else {{
              float2 __2;
                float2 __3;
                __3.x = expf(S[0] - row_max_local[0]);
                __3.y = expf(S[1] - row_max_local[0]);
                float2 v__3 = make_float2(row_sum_local[0], row_sum_local[0]);
                __2.x = (__3.x/v__3.x);
                __2.y = (__3.y/v__3.y);
              condval_1 = __2;
            }}
            out[0] = condval_1.x; out[1] = condval_1.y;
"""


def test_the_guarded_normalize_becomes_an_unconditional_body_and_a_zeroing_test():
    from flashgemm.codegen.cuda_src.unguard_normalize import unguard_normalize
    for src, var, zero in ((SCALAR, "condval", ZERO), (VECTOR, "condval_1", f"make_float2({ZERO}, {ZERO})")):
        out = unguard_normalize(src)
        assert "} else {" not in out and out.count(f" == {ZERO}) {{") == 1 and f"{var} = {zero};" in out
        assert out.index("expf(") < out.index(f" == {ZERO}) {{")  # the body first, then the test
        lines = [ln.strip() for ln in out.splitlines()]
        assert lines[-1] == src.splitlines()[-1].strip()  # what follows is untouched
    twice = unguard_normalize(unguard_normalize(SCALAR))
    assert twice == unguard_normalize(SCALAR)


def test_other_shapes_other_forms_and_the_switch_leave_the_source_alone(monkeypatch):
    from flashgemm.codegen.cuda_src.unguard_normalize import unguard_normalize, unguard_recompute_normalize
    other_then = SCALAR.replace(f"condval = {ZERO};\n      }} else", "condval = 1.0f;\n      } else")
    other_var = VECTOR.replace("              condval_1 = __2;", "              other = __2;")
    other_test = SCALAR.replace(f"== {ZERO}) {{", "== 1.0f) {")
    for src in (other_then, other_var, other_test):
        assert unguard_normalize(src) == src
    recompute = SCALAR.replace("P[t]", "S_p_warp_ptr[0] = 0.0f; P[t]")
    assert unguard_recompute_normalize(SCALAR) == SCALAR  # no third copy of S: not the recompute form
    assert unguard_recompute_normalize(recompute) == unguard_normalize(recompute) != recompute
    disable_pass(monkeypatch, "unguard_normalize")
    assert not pass_runs("unguard_normalize")


C_HARNESS = r"""
#include <math.h>
#include <stdio.h>
typedef struct { float x, y; } float2;
static float2 make_float2(float x, float y) { float2 r = {x, y}; return r; }
static void normalize(const float *S, const float *row_max_local, const float *row_sum_local, float *out) {
%s
}
int main(void) {
  const float sums[] = {2.5f, 0.0f, -1.0f, NAN, INFINITY, 1e-30f};
  /* a row with a masked logit (its max 0.5), and a fully masked row (its max the lowest float) */
  const float S[2][2] = {{0.5f, -INFINITY}, {-INFINITY, -INFINITY}};
  const float maxes[] = {0.5f, -3.4028234663852886e38f};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 2; ++j) {
      float out[2];
      normalize(S[j], &maxes[j], &sums[i], out);
      printf("%%a %%a\n", out[0], out[1]);
    }
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no host C compiler")
def test_both_forms_compute_the_same_values(tmp_path):
    """Zero, negative, NaN, infinite and tiny sums, finite and -inf logits: the same bits either way; a zero sum (a
    fully masked row) gives zeros and a NaN sum (a NaN or +inf logit in the row) NaN everywhere."""
    from flashgemm.codegen.cuda_src.unguard_normalize import unguard_normalize
    cc = shutil.which("cc") or shutil.which("gcc")
    results = []
    for src in (VECTOR, unguard_normalize(VECTOR)):
        c_file, exe = tmp_path / "n.c", tmp_path / "n"
        c_file.write_text(C_HARNESS % src)
        subprocess.run([cc, "-O2", "-o", str(exe), str(c_file), "-lm"], check=True, capture_output=True)
        results.append(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)
    assert results[0] == results[1]
    values = [float.fromhex(v) for v in results[0].split()]  # per sum: row 0's two elements, then row 1's
    by_sum = [values[4 * i:4 * i + 4] for i in range(6)]
    assert by_sum[0][0] > 0 and by_sum[0][1] == 0  # sum 2.5: the masked element exactly 0
    assert all(v == 0 for v in by_sum[1])  # sum 0
    assert all(math.isnan(v) for v in by_sum[3])  # sum NaN
    assert not any(math.isnan(v) for i in (0, 1, 2, 4, 5) for v in by_sum[i])


def _shipped_source(db: str) -> str:
    import tvm

    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    from flashgemm.bundle import best
    tuned = best.load_tuned(REPO / "flashgemm" / "databases" / "sm_90" / db, "sm_90")
    sch = tuned.twin or tuned.schedule
    return cuda_build.compile_cuda(tvm.IRModule({"main": tuned.shipped_func(sch, "main")}),
                                   targets.tvm_target("sm_90")).mod.imports[0].inspect_source("cuda")


def test_the_recompute_kernel_ships_without_the_branch_and_the_register_kernel_with_it():
    """The committed W3 fp16 kernel (recompute form) and W1 fp16 kernel (register sketch), compiled as the export
    compiles them (nvcc takes both sources)."""
    w3 = _shipped_source("whisper-enc.f16")
    assert "S_p_warp" in w3 and w3.count(f" == {ZERO}) {{") >= 1
    assert not re.search(r" == %s\) \{\n[^\n]*\n[ ]*\} else \{" % re.escape(ZERO), w3)  # no guarded normalize left
    w1 = _shipped_source("bert-large.f16")
    assert re.search(r" == %s\) \{\n[^\n]*\n[ ]*\} else \{" % re.escape(ZERO), w1)
