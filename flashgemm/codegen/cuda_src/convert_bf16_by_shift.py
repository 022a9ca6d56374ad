"""bf16 -> fp32 conversions by a shift (the pass convert_bf16_by_shift).

CodeGenCUDA writes a cast to fp32 as `((float)x)`; for an nv_bfloat16 x that is cuda_bf16.h's conversion
operator, an inline-asm cvt.f32.bf16, and ptxas then keeps every bf16 load from shared memory a 2-byte LDS.U16. Its
fp16 twin (cvt.f32.f16 -> HADD2.F32, which reads either half of a register) lets ptxas merge four consecutive loads
into one LDS.64. The one-row GEMV (cuda_row_vector: decode-m1) reads B from shared memory element by element and
converts each: SASS of the same schedule has 512 LDS.U16 in bf16 against 34 LDS.64 + 18 LDS for 128 elements in
fp16, and the bf16 kernel is nearly twice as slow on the H100. The conversion is exact as a bit shift
(bf16 is fp32's upper half), and written so (no asm) ptxas merges the loads (64 LDS.128 in the same kernel).
So every `((float)E)` becomes `(flashgemm_f32(E))`: a template that casts, overloaded for nv_bfloat16.

A rewrite of the CUDA text: the cast is CodeGenCUDA's own printing of a TIR Cast, which no TIR pass can change.
"""
from flashgemm.codegen.cuda_src.unguard_normalize import closing_bracket

BF16_TO_F32 = """
template <typename T> static __device__ __forceinline__ float flashgemm_f32(T x) { return (float)x; }
static __device__ __forceinline__ float flashgemm_f32(nv_bfloat16 x) {
  return __uint_as_float(((unsigned int)__bfloat16_as_ushort(x)) << 16);
}
"""


def bf16_to_f32_by_shift(code: str) -> str:
    """Rewrite the fp32 casts of a CUDA source that uses nv_bfloat16 (note above); other sources are unchanged."""
    if "nv_bfloat16" not in code:
        return code
    kernel = code.find('extern "C" __global__')  # (the helper goes before the kernels: the preamble keeps its casts)
    if kernel < 0:
        return code
    return code[:kernel] + BF16_TO_F32 + _rewrite_f32_casts(code[kernel:])


def _rewrite_f32_casts(code: str) -> str:
    """`((float)E)` -> `(flashgemm_f32(E))`, E up to the parenthesis that closes the cast's own (nested casts too)."""
    out, pos, cast = [], 0, "((float)"
    while (at := code.find(cast, pos)) >= 0:
        end = closing_bracket(code, at, "(", ")")
        if end < 0:
            raise ValueError(f"unbalanced parentheses after offset {at} of the CUDA source")
        out.append(code[pos:at] + "(flashgemm_f32(" + _rewrite_f32_casts(code[at + len(cast):end]) + "))")
        pos = end + 1
    return "".join(out) + code[pos:]
