"""The register sketches' row statistics exchanged between warps once a row tile instead of twice.

After keep_exp_in_accumulator and reduce_statistics_in_quads, CodeGenCUDA prints each row tile of a register sketch as

    max:  m = max of the lane's elements, quad shuffles; lane q = 0 stores m -> MAXP[slot + warp]
    __syncthreads();
    sum:  M = max(MAXP[slot + 0], ..., MAXP[slot + WN-1]);  e = exp(x*c - M*log2e) into the accumulator;
          s = sum of e, quad shuffles; lane q = 0 stores s -> SUMP[slot + warp]
    __syncthreads();
    P:    M' = max(MAXP[...]);  S = SUMP[slot + 0] + ... ;  rcp = 1 / S;  P = e * rcp

Rewritten, the sum takes exp against the lane's own warp maximum m (FlashAttention's combine), the first barrier goes,
and P weighs each warp's partial sum by exp(m_w - M'):

    sum:  e = exp(x*c - m*log2e);  ... as before
    P:    S = sum_w SUMP[slot + w] * exp2((MAXP[slot + w] - M') * log2e);  rcp = exp2((m - M') * log2e) / S

Exact in exact arithmetic; in float32 each factor adds one rounding (on W1 fp16, P moves by about 1e-4 at most, and
its error against FP64 stays the same).

Where it pays: W1's register-sketch kernels, every shipped form and both dtypes, run about 4 % faster on the H200
(benchmarks/shipped_forms_ab.py --two-exchanges times them without it); a hand-written W3 kernel of the same design
gains more, but at W3 the shipped kernels are of the recompute form, which this does not touch.

Applied to every register-sketch kernel: the tuning forms and the twins specialized on their scale, whose row max
reads the accumulator elements (take_scale_out_of_max took the constant scale out), and the kernels with a runtime scale
(the plain twin, the any-batch kernel), whose max reads X * scale. Either way m_w is the maximum of what the sum's exp
takes, so the exp's argument stays <= 0 as before; and the result does not depend on which m_w each warp uses, as long
as the sum's exp and P's factor use the same one (they read the same fg_mw slot). Applied to a row tile only when the
source proves the rewrite safe (each check below, else that tile is left as it is):
- the kernel kept exp in its accumulator (the mark store_whole_sectors also reads): P reads e, not a new exp;
- the max and sum loops walk the same accumulator elements (their index expressions equal once the loop names are
  mapped), the two partial stores use the same slot expression, and the sum's and P's combines read the same partials
  (so the lane's own partial is one of them, as the unrewritten kernel's correctness already requires);
- P's block takes no exp and reads its combined maximum only where this rewrite puts it;
- between the row tile's max stores and the previous P's reads of the partials a barrier remains: the nearest
  `__syncthreads();` before the max loop sits in the same block (the row-tile loop's top barrier, or the epilogue's);
- the sum's block reads no shared memory.
FLASHGEMM_DISABLE_PASSES=exchange_statistics_once turns it off (A/B).
"""
from __future__ import annotations

import re

from flashgemm.codegen.cuda_src.store_whole_sectors import EXP_KEPT

PASS = "exchange_statistics_once"  # its name in cuda_build.PASSES
_LOG2E = "1.4426950408889634f"
_CLAMP = "-0x1.2ced32a16a1b1p+127f"  # the kernel's max(M, -2e38) before exp: no -inf - -inf
_SYNC = "__syncthreads();"
# the max block's partial store: `if ((((int)threadIdx.x) % 4) == 0) { MAXP[IDX] = LOCAL[0]; }`
_MAX_STORE = re.compile(r"\n(?P<ind>[ ]*)if \(\(\(\(int\)threadIdx\.x\) % 4\) == 0\) \{\n[ ]*row_max_rf_shared_dyn_shared_ptr"
                        r"\[(?P<idx>[^\n]*)\] = (?P<local>row_max_rf_shared_dyn_local_ptr\w*)\[0\];\n(?P=ind)\}")
_SUM_STORE = re.compile(r"\n[ ]*if \(\(\(\(int\)threadIdx\.x\) % 4\) == 0\) \{\n[ ]*row_sum_rf_shared_dyn_shared_ptr"
                        r"\[(?P<idx>[^\n]*)\] = (?P<local>row_sum_rf_shared_dyn_local_ptr\w*)\[0\];")
_COMBINE = re.compile(r"\n(?P<ind>[ ]*)(?P<var>row_max_shared_dyn_local_ptr\w*)\[0\] = (?P<rhs>[^\n]*row_max_rf_shared_dyn_shared_ptr[^\n]*);")
_P_SUM = re.compile(r"\n(?P<ind>[ ]*)(?P<var>row_sum_shared_dyn_local_ptr\w*)\[0\] = (?P<rhs>[^\n]*);\n[ ]*float (?P<rcp>\w+) = "
                    r"\(0x1p\+0f/\*1\.000000e\+00\*/ / (?P=var)\[0\]\);")
_FOR = re.compile(r"for \(int (\w+) = 0; \1 < (\d+); \+\+\1\) \{")


def applies(code: str) -> bool:
    return bool(EXP_KEPT.search(code))


def rewrite(code: str) -> str:
    """Every row tile of the module doc's shape rewritten where proven; the rest of the source unchanged."""
    if not applies(code):
        return code
    out, pos, done = [], 0, False
    for m in list(_MAX_STORE.finditer(code)):
        if m.start() < pos:
            continue
        new = _rewrite_tile(code, m)
        if new is None:
            continue
        start, end, text = new
        out += [code[pos:start], text]
        pos, done = end, True
    if not done:
        return code
    code = "".join(out) + code[pos:]
    return _declare(code)


def _declare(code: str) -> str:
    """fg_mw, the lane's warp maxima of a row tile, at the top of each kernel body whose tiles were rewritten."""
    out, pos = [], 0
    for m in re.finditer(r'extern "C" __global__ [^\n;]*\) \{\n', code):
        end = code.find('extern "C" __global__', m.end())
        slots = [int(n) for n in re.findall(r"/\* fg_mw slots (\d+) \*/", code[m.end():end if end >= 0 else len(code)])]
        if slots:
            out += [code[pos:m.end()], f"  float fg_mw[{max(slots)}];  // the lane's warp maxima of a row tile (exchange_statistics_once)\n"]
            pos = m.end()
    return "".join(out) + code[pos:]


def _open_loops(code: str, at: int, since: int) -> list:
    """(name, extent, position) of the loops that open in code[since:at] and are still open at `at`, outermost
    first."""
    out, i = [], at
    while True:
        j = code.rfind("for (int ", since, i)
        if j < 0:
            return out
        m = _FOR.match(code, j)
        if m is not None and _closes(code, m.end() - 1) >= at:
            out.insert(0, (m.group(1), int(m.group(2)), j))
        i = j


def _closes(code: str, brace: int) -> int:
    depth = 0
    for k in range(brace, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code)


def _same_block(text: str) -> bool:
    """Whether the start and the end of `text` are in the same block: its braces never close more than they open, and
    balance."""
    depth = 0
    for ch in text:
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return False
    return depth == 0


def _canon(text: str, names: list) -> str:
    for i, n in enumerate(names):
        text = re.sub(rf"\b{re.escape(n)}\b", f"@{i}", text)
    return text


def _reads(rhs: str, buf: str) -> list:
    return re.findall(rf"{buf}\[([^\[\]]*(?:\[[^\[\]]*\][^\[\]]*)*)\]", rhs)


def _rewrite_tile(code: str, m):
    """(start, end, replacement) for the row tile whose max store is `m`, or None where a check fails."""
    # the max block: the two row-slot loops enclosing the store, and its element loop
    # the row-slot loops: the two innermost loops around the store, which open right one after the other
    slots = _open_loops(code, m.start(), 0)[-2:]
    if len(slots) != 2 or not code[code.index("{", slots[0][2]) + 1:slots[1][2]].strip() == "":
        return None
    (a1, e1, max_for), (a2, e2, _) = slots
    max_end = _closes(code, code.index("{", max_for)) + 1
    # a barrier in the same block before the max loop (module doc)
    before = code.rfind(_SYNC, 0, max_for)
    if before < 0 or not _same_block(code[before:max_for]):
        return None
    # the barrier to drop: the first statement after the max block
    after = code[max_end:]
    if not after.lstrip().startswith(_SYNC):
        return None
    drop_at = max_end + after.index(_SYNC)
    sum_for = code.find("for (int ", drop_at)
    sum_loop = _FOR.match(code, sum_for)
    if sum_loop is None:
        return None
    sum_end = _closes(code, code.index("{", sum_for)) + 1
    b1, f1 = sum_loop.group(1), int(sum_loop.group(2))
    inner = _FOR.match(code, code.index("for (int ", sum_loop.end()))
    if inner is None or (f1, int(inner.group(2))) != (e1, e2):
        return None
    b2 = inner.group(1)
    sum_block = code[sum_for:sum_end]
    comb = _COMBINE.search(sum_block)
    sstore = _SUM_STORE.search(sum_block)
    if comb is None or sstore is None:
        return None
    # the next barrier, then P's block
    p_sync = code.find(_SYNC, sum_end)
    if p_sync < 0 or code[sum_end:p_sync].strip():
        return None
    p_for = code.find("for (int ", p_sync)
    p_loop = _FOR.match(code, p_for)
    if p_loop is None:
        return None
    p_inner = _FOR.match(code, code.index("for (int ", p_loop.end()))
    if p_inner is None or (int(p_loop.group(2)), int(p_inner.group(2))) != (e1, e2):
        return None
    c1, c2 = p_loop.group(1), p_inner.group(1)
    p_end = _closes(code, code.index("{", p_for)) + 1
    p_block = code[p_for:p_end]
    pcomb = _COMBINE.search(p_block)
    psum = _P_SUM.search(p_block)
    if pcomb is None or psum is None or psum.start() < pcomb.start():
        return None
    # the checks of the module doc
    max_block = code[max_for:max_end]
    # the max reads the elements themselves (take_scale_out_of_max took a constant scale out) or X * a runtime scale
    max_elems = ["".join(g) for g in re.findall(r"= max\(\w+\[0\], (?:\((S_warp_ptr\[[^\]\n]*\]) \* \w+\)|"
                                                r"(S_warp_ptr\[[^\]\n]*\]))\);", max_block)]
    sum_elems = re.findall(r"(S_warp_ptr\[[^\n]*?\]) = exp2f\(", sum_block)
    if len(max_elems) != 1 or len(sum_elems) != 1:
        return None
    inner_max = [n for n, _, _ in _open_loops(code, max_block.index(max_elems[0]) + max_for, max_for)]
    inner_sum = [n for n, _, _ in _open_loops(code, sum_block.index(sum_elems[0]) + sum_for, sum_for)]
    if len(inner_max) != len(inner_sum) or inner_max[:2] != [a1, a2] or inner_sum[:2] != [b1, b2]:
        return None
    if _canon(max_elems[0], inner_max) != _canon(sum_elems[0], inner_sum):
        return None
    if _canon(m.group("idx"), [a1, a2]) != _canon(sstore.group("idx"), [b1, b2]):
        return None
    if _canon(comb.group("rhs"), [b1, b2]) != _canon(pcomb.group("rhs"), [c1, c2]):
        return None
    max_reads = _reads(pcomb.group("rhs"), "row_max_rf_shared_dyn_shared_ptr")
    sum_reads = _reads(psum.group("rhs"), "row_sum_rf_shared_dyn_shared_ptr")
    if not max_reads or sorted(max_reads) != sorted(sum_reads):
        return None
    if re.search(r"\bexp2?f\(", p_block) or len(re.findall(rf"\b{pcomb.group('var')}\b", p_block)) != 1:
        return None
    if "shared_ptr[" in sum_block.replace(sstore.group(0), "").replace(comb.group(0), ""):
        return None
    gmax_var = comb.group("var")  # now the lane's own maximum: nothing after the sum may read it
    if re.search(rf"\b{gmax_var}\b", code[sum_end:p_end]):
        return None
    # the rewrite
    slot = lambda x1, x2: f"fg_mw[{x1} * {e2} + {x2}]"  # noqa: E731
    max_text = (code[max_for:m.start()] + f"\n{m.group('ind')}{slot(a1, a2)} = {m.group('local')}[0];  "
                f"/* fg_mw slots {e1 * e2} */" + code[m.start():max_end])
    sum_text = sum_block.replace(comb.group(0), f"\n{comb.group('ind')}{gmax_var}[0] = {slot(b1, b2)};", 1)
    gm = f"max({pcomb.group('var')}[0], {_CLAMP})"
    weights = " + ".join(f"row_sum_rf_shared_dyn_shared_ptr[{i}] * exp2f((max(row_max_rf_shared_dyn_shared_ptr[{i}], "
                         f"{_CLAMP}) - {gm}) * {_LOG2E})" for i in sum_reads)
    ind = psum.group("ind")
    p_text = p_block.replace(
        psum.group(0),
        f"\n{ind}{psum.group('var')}[0] = {weights};\n"
        f"{ind}float {psum.group('rcp')} = exp2f((max({slot(c1, c2)}, {_CLAMP}) - {gm}) * {_LOG2E}) / "
        f"{psum.group('var')}[0];", 1)
    text = (max_text + code[max_end:drop_at] + "/* exchange_statistics_once: no barrier */" + code[drop_at + len(_SYNC):sum_for]
            + sum_text + code[sum_end:p_for] + p_text)
    return max_for, p_end, text
