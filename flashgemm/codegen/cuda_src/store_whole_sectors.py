"""P stored as whole 32-byte sectors by the register sketches: a shuffle within each quad of lanes, then one 8-byte
store a lane, in place of two 4-byte stores that each cover half of eight sectors.

An mma.sync accumulator gives lane 4r + q the columns 2q, 2q+1 of an 8-column fragment, so CodeGenCUDA's P loop of a
register sketch (cuda_registers: P from the fragments, half2 stores) is

    for (int fn = 0; fn < FN; ++fn) {
      for (int jh = 0; jh < 2; ++jh) {
        ...
        *(half2*)(P_ptr + ADDR) = V;        // ADDR = row(r) + fn * 16 + jh * 8 + q * 2 (+ ...)
      }
    }

and each warp store writes 16 bytes of eight rows: half of eight sectors. Rewritten, the two halves of a 16-column
row segment are exchanged within the quad (four shuffles) so that lane q holds columns 4q..4q+3 and stores them with
one 8-byte store: a warp store covers eight whole sectors.

Where it pays: only together with keep_exp_in_accumulator. With the exp kept in the accumulator alone, the W1 kernel's
P pass, no longer paced by the exps, queues half-sector stores (ncu: lg-throttle stalls, about a third more L2 sectors
written) and the kernel is much slower; with whole-sector stores alone it is slightly slower; with both, ~1.4x faster
than with neither (H100, fp16). So the rewrite is applied to the kernels whose accumulator
the exp pass rewrote (recognised in the source by a store of an exp of an accumulator element into that element).

Applied to a loop only when its shape is the one above and the address is proven to be one: the store is the last
statement of the jh loop body, only loops of constant trip count enclose the loop (every lane reaches the shuffles),
and ADDR, evaluated as an integer expression at random values of its variables, moves by 8 elements with jh and by 2
with q = threadIdx.x & 3, while the rewritten address is the quad's first address plus 4q and a multiple of 4 elements
(8 bytes). For that last condition P's `elem_offset` is sampled as a multiple of the kernel's P_OFFSET_FACTOR (4),
which the runtime forms declare and TVM's argument binder checks at every call; the tuning form is called with
byte_offset 0 only. No fallback for a misaligned address is emitted: a predicated second path, even never taken, makes
the W1 kernel about 2x slower. FLASHGEMM_DISABLE_PASSES=store_whole_sectors turns the rewrite off (A/B).

`stream` (the pass stream_p_stores, after this one) gives the lane's store the streaming cache hint (__stcs:
st.global.cs, evict-first in L2): P is written once and never read back by the kernel (W1: 134 MB through a 50 MB
L2). Only on this store, where each quad of lanes writes 32 contiguous bytes (whole sectors where P's rows start
32-byte aligned, as W1's 1024-byte rows do): with every P store of every kernel streamed, W1 gains a little, but
W2's shipped twins, whose 197-element rows end mid-sector, are slower, bf16 most (not profiled; partial sectors
evicted before their neighbours fill them is a guess).
FLASHGEMM_DISABLE_PASSES=stream_p_stores turns the hint off (A/B: benchmarks/shipped_forms_ab.py --cached-stores).
"""
from __future__ import annotations

import random
import re
from typing import Optional

_LOOP = re.compile(
    r"(?P<ind>[ ]*)for \(int (?P<fn>\w+) = 0; (?P=fn) < (?P<ext>\d+); \+\+(?P=fn)\) \{\n"
    r"(?P<ind2>[ ]*)for \(int (?P<jh>\w+) = 0; (?P=jh) < 2; \+\+(?P=jh)\) \{\n"
    r"(?P<body>(?:(?![ ]*for \()[^\n]*\n)*?)"
    r"(?P<ind3>[ ]*)\*\((?P<vec>half2|nv_bfloat162)\*\)\(P_ptr \+ (?P<addr>[^\n]*)\) = (?P<val>\w+);\n"
    r"(?P=ind2)\}\n")
_LANE = "((((int)threadIdx.x) & 3) * 2)"
_LANE4 = "((((int)threadIdx.x) & 3) * 4)"
# an accumulator element overwritten with its exp: the mark keep_exp_in_accumulator leaves in the sum pass
EXP_KEPT = re.compile(r"\b(?P<arr>\w+)\[(?P<idx>[^\]\n]+)\] = exp2?f\(\(+(?P=arr)\[(?P=idx)\]")
_CAST = re.compile(r"\(\(int\)(\w+)\.(\w)\)")
_INT_EXPR = re.compile(r"^[\w\s()+\-*/%&|<>]*$")  # no ternary or casts left
P_OFFSET_FACTOR = 4  # flashgemm.kernel.fused_gemm_softmax.P_OFFSET_FACTOR (not imported: builder workers stay light)
_TRIALS = 24


def applies(code: str) -> bool:
    """Whether the source is one the rewrite is for (module doc)."""
    return bool(EXP_KEPT.search(code))


def rewrite(code: str) -> str:
    """The P loops of the module doc's shape, with proven addresses, rewritten; the rest of the source unchanged."""
    if not applies(code):
        return code

    def sub(m):
        g = m.groupdict()
        new_addr = g["addr"].replace(_LANE, _LANE4)
        if (len(g["ind3"]) != len(g["ind2"]) + 2 or _divergent(code, m.start())
                or not _proven(g["addr"], new_addr, g["jh"])):
            return m.group(0)
        i2 = g["ind2"]
        return (f"{g['ind']}for (int {g['fn']} = 0; {g['fn']} < {g['ext']}; ++{g['fn']}) {{\n"
                f"{i2}unsigned fg_pair[2];  // this lane's two 4-byte pieces (jh = 0, 1), exchanged in the quad below\n"
                f"{i2}for (int {g['jh']} = 0; {g['jh']} < 2; ++{g['jh']}) {{\n{g['body']}"
                f"{g['ind3']}fg_pair[{g['jh']}] = *(unsigned*)&{g['val']};\n{i2}}}\n"
                f"{i2}{{\n"
                f"{i2}  const int {g['jh']} = 0;\n"
                f"{i2}  const int fg_q = ((int)threadIdx.x) & 3;\n"
                f"{i2}  const int fg_src = (((int)threadIdx.x) & ~3) | ((fg_q & 1) * 2);\n"
                f"{i2}  const unsigned fg_a0 = __shfl_sync(0xffffffffu, fg_pair[0], fg_src);\n"
                f"{i2}  const unsigned fg_a1 = __shfl_sync(0xffffffffu, fg_pair[1], fg_src);\n"
                f"{i2}  const unsigned fg_b0 = __shfl_sync(0xffffffffu, fg_pair[0], fg_src + 1);\n"
                f"{i2}  const unsigned fg_b1 = __shfl_sync(0xffffffffu, fg_pair[1], fg_src + 1);\n"
                f"{i2}  const uint2 fg_v = (fg_q >> 1) ? make_uint2(fg_a1, fg_b1) : make_uint2(fg_a0, fg_b0);\n"
                f"{i2}  {_store(new_addr)}\n"
                f"{i2}}}\n")
    return _LOOP.sub(sub, code)


def _store(addr: str) -> str:
    """The lane's 8-byte store of the rewritten loop (`stream` gives it the cache hint)."""
    return f"*(uint2*)(P_ptr + {addr}) = fg_v;"


_LANE_STORE = re.compile(r"^(?P<ind>[ ]*)\*\(uint2\*\)\(P_ptr \+ (?P<addr>[^\n]*)\) = fg_v;$", re.M)


def stream(code: str) -> str:
    """The rewritten loops' lane stores (`_store`) with the streaming cache hint, __stcs (module doc)."""
    return _LANE_STORE.sub(lambda m: f"{m.group('ind')}__stcs((uint2*)(P_ptr + {m.group('addr')}), fg_v);", code)


_UNIFORM_BLOCK = re.compile(r'^(extern "C" .*|for \(int (\w+) = 0; \2 < \d+; \+\+\2\) \{|\{)$')


def _divergent(code: str, at: int) -> bool:
    """Whether a block other than the kernel's body, a loop of constant trip count or a plain scope encloses position
    `at` of the source: an `if`, `else` or a loop with a runtime bound could leave lanes out of the shuffles."""
    stack = []
    for line in code[:at].splitlines():
        s = line.strip()
        for _ in range(s.count("}") - (1 if s.startswith("}") and s.endswith("{") else 0)):
            if stack:
                stack.pop()
        if s.startswith("}") and s.endswith("{"):  # } else {
            if stack:
                stack.pop()
            stack.append(s)
        elif s.endswith("{"):
            stack.append(s)
    return not all(_UNIFORM_BLOCK.match(s) for s in stack)


def _py(expr: str) -> Optional[str]:
    """A C integer expression of the source as Python, or None. Division and modulo only without subtraction: with
    the non-negative values sampled, C's truncating / and % then agree with Python's // and %."""
    expr = _CAST.sub(lambda m: f"{m.group(1)}_{m.group(2)}", expr)
    if not _INT_EXPR.match(expr) or (("/" in expr or "%" in expr) and "-" in expr):
        return None
    return expr.replace("/", "//")


def _proven(addr: str, new_addr: str, jh: str) -> bool:
    """The module doc's address conditions, checked by evaluating both addresses at random values of their names."""
    old, new = _py(addr), _py(new_addr)
    if old is None or new is None:
        return False
    names = sorted(set(re.findall(r"[A-Za-z_]\w*", old + " " + new)) - {"threadIdx_x", jh})
    rng = random.Random(0)
    try:
        old_code, new_code = compile(old, "<addr>", "eval"), compile(new, "<addr>", "eval")
        for _ in range(_TRIALS):
            env = {n: rng.randrange(1, 1 << 12) for n in names}
            if "elem_offset" in env:
                env["elem_offset"] = P_OFFSET_FACTOR * rng.randrange(0, 1 << 10)
            for tx in range(32):
                def at(code, t, h):
                    return eval(code, {"__builtins__": {}}, {**env, "threadIdx_x": t, jh: h})  # noqa: S307
                base = at(old_code, tx & ~3, 0)
                if at(old_code, tx, 1) - at(old_code, tx, 0) != 8 or at(old_code, tx, 0) - base != 2 * (tx & 3):
                    return False
                new_at = at(new_code, tx, 0)
                if new_at != base + 4 * (tx & 3) or new_at % 4:
                    return False
    except Exception:  # noqa: BLE001  (anything it cannot evaluate is not proven)
        return False
    return True
