"""The normalize step without a branch (the pass unguard_normalize; the recompute form's kernels only).

The kernel writes P = (row_sum == 0 ? 0 : E / row_sum) as T.if_then_else: a fully masked row (sum 0) gives zeros,
and a NaN sum (a NaN or +inf logit in the row) fails the test, so the row comes out NaN (README: special values).
CodeGenCUDA prints it as an if/else whose else holds the whole element computation (exp, division):
    if (SUM == 0x0p+0f/*0.000000e+00*/) { condval = 0; } else { ...; condval = E / SUM; }
nvcc keeps it a branch per element or vector (a BSSY/BSYNC convergence region each, the reciprocal inside).
unguard_normalize computes the else's body unconditionally and then zeroes the result where the test holds:
    { ...; condval = E / SUM; }  if (SUM == 0x0p+0f/*0.000000e+00*/) { condval = 0; }
Same values for every input (a zero sum gives 0, a NaN sum NaN). The body only reads what the branch read, and
every such read sits inside the bounds guard that encloses the if, not under the sum test, so it is as safe
unguarded. Only this exact shape is touched: a test `X == 0`, a then of `V = <zeros>;`, an else whose body ends
in `V = ...;`.
Where it pays (H100; benchmarks/shipped_forms_ab.py --guarded times the kernels without it): the recompute form's
W3 kernels run 7-8 % faster as shipped, but the register sketch's W1 kernels without whole-sector stores run 20 %
*slower*, though their SASS loses most BSSY and MUFU.RCP, keeps its occupancy and spills nothing: a P pass no longer
paced by its exps and reciprocals sends P's half-sector stores in bursts, and they, not the math, bound the kernel
(store_whole_sectors' module doc; with its whole-sector stores this rewrite changes W1 by < 1 %). The shared-S form
(W2) moves by 1 %. So the hook applies it to the recompute form's kernels only, recognised by its
third copy of S (`S_p_*` in the source: the kernel's recompute form is the only one with an "S_p" buffer).

A rewrite of the CUDA text: TVM 0.27 lowers T.if_then_else to this branch in CodeGenCUDA itself, after every TIR pass.
"""
import re

_ZERO = r"0x0p\+0f/\*0\.000000e\+00\*/"
_SUM_TEST = re.compile(r"^(?P<ind>[ \t]*)if \((?=[^\n]* == %s\) \{\n)" % _ZERO, re.M)
_ZERO_THEN = re.compile(r"\{\n[ \t]*(?P<var>\w+) = (?P<zero>(?:make_float\d\()?%s(?:, %s)*\)?);\n[ \t]*\} else \{"
                        % (_ZERO, _ZERO))


def closing_bracket(code: str, i: int, open_: str, close: str) -> int:
    """Index of the bracket that closes code[i] (== open_), or -1."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_:
            depth += 1
        elif code[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return -1


_RECOMPUTE_FORM = re.compile(r"\bS_p_(?:warp|local|shared)")


def unguard_recompute_normalize(code: str) -> str:
    """unguard_normalize on the recompute form's kernels (note above)."""
    if not _RECOMPUTE_FORM.search(code):
        return code
    return unguard_normalize(code)


def unguard_normalize(code: str) -> str:
    """The normalize step's `if (SUM == 0) {V = 0;} else {...}` -> `{...} if (SUM == 0) {V = 0;}` (note above)."""
    out, pos = [], 0
    for m in _SUM_TEST.finditer(code):
        if m.start() < pos:
            continue
        cond_open = m.end() - 1
        cond_close = closing_bracket(code, cond_open, "(", ")")
        if cond_close < 0 or not re.search(r" == %s$" % _ZERO, code[cond_open + 1:cond_close]):
            continue
        then = _ZERO_THEN.match(code, cond_close + 2)
        if then is None:
            continue
        body_open = then.end() - 1
        body_close = closing_bracket(code, body_open, "{", "}")
        if body_close < 0:
            continue
        body, var = code[body_open + 1:body_close], then.group("var")
        if not re.search(r"(^|\n)[ \t]*%s = [^;]*;\s*$" % re.escape(var), body):
            continue
        ind = m.group("ind")
        out += [code[pos:m.start()], f"{ind}{{{body}}}\n{ind}if ({code[cond_open + 1:cond_close]}) {{\n",
                f"{ind}  {var} = {then.group('zero')};\n{ind}}}"]
        pos = body_close + 1
    return "".join(out) + code[pos:]
