"""W1 register kernel (tuning-form CUDA of bert-large.f16's best record) edited by regular expressions: variants."""
import re, sys
src = open(sys.argv[1]).read()
head, kern = src.split('extern "C" __global__', 1)
kern = 'extern "C" __global__' + kern
SCALE = " * 0x1p-3f/*1.250000e-01*/"

def hoist_scale(k):
    # max(x * c) = c * max(x) exactly for c > 0 (rounding is monotone): drop the FMUL an element
    k, n = re.subn(r"(row_max_rf_shared_dyn_local_ptr(?:_\d)?\[0\] = max\(row_max_rf_shared_dyn_local_ptr(?:_\d)?\[0\], \()(S_warp_ptr\[[^;]*?\])" + re.escape(SCALE) + r"\)\);",
                   r"\1\2));", k)
    assert n == 2, n
    # scale once, before the quad shuffles
    k, n = re.subn(r"(\n\s*)(row_max_rf_shared_dyn_local_ptr(?:_\d)?)\[0\] = max\(\2\[0\], __shfl_xor_sync\(\(uint\)4294967295, \2\[0\], 1, 32\)\);",
                   r"\1\2[0] = \2[0] * 0x1p-3f;\g<0>", k)
    assert n == 2, n
    return k

def split_chains(k, ways):
    for stat, op in (("row_max", "max"), ("row_sum", "+")):
        for suf in ("", "_1"):
            name = f"{stat}_rf_shared_dyn_local_ptr{suf}"
            k = k.replace(f"float {name}[1];", f"float {name}[{ways}];")
            # the accumulate statement: use the innermost loop variable(s) as the accumulator index
            if op == "max":
                pat = re.compile(re.escape(f"{name}[0] = max({name}[0], (S_warp_ptr[") + r"(\(\(\(\(\((\w+) \* 64\) \+ \((\w+) \* 8\)\) \+ \((\w+) \* 4\)\) \+ \((\w+) \* 2\)\) \+ (\w+)\))\]")
            else:
                pat = re.compile(re.escape(f"{name}[0] = ({name}[0] + S_warp_ptr[") + r"(\(\(\(\(\((\w+) \* 64\) \+ \((\w+) \* 8\)\) \+ \((\w+) \* 4\)\) \+ \((\w+) \* 2\)\) \+ (\w+)\))\]")
            m = pat.search(k); assert m, name
            ax5, ax6 = m.group(4), m.group(6)
            idx = ax6 if ways == 2 else f"({ax5} * 2 + {ax6})"
            stmt_old = m.group(0)
            stmt_new = stmt_old.replace(f"{name}[0]", f"{name}[{idx}]")
            k = k.replace(stmt_old, stmt_new)
            # init every accumulator
            init = re.compile(re.escape(f"{name}[0] = ") + r"(-0x1\.fffffep\+127f/\*-3\.402823e\+38\*/|0x0p\+0f/\*0\.000000e\+00\*/);")
            mi = init.search(k); assert mi, name
            k = k.replace(mi.group(0), " ".join(f"{name}[{w}] = {mi.group(1)};" for w in range(ways)), 1)
            # combine before the first shuffle
            shfl = re.compile(r"(\n\s*)" + re.escape(f"{name}[0] = ") + r"[^\n]*__shfl_xor_sync\(\(uint\)4294967295, " + re.escape(f"{name}[0], 1, 32)"))
            scaled = re.compile(r"(\n\s*)" + re.escape(f"{name}[0] = {name}[0] * 0x1p-3f;"))
            ms = scaled.search(k) or shfl.search(k); assert ms, name
            if op == "max":
                comb = (f"{name}[0] = max({name}[0], {name}[1]);" if ways == 2 else
                        f"{name}[0] = max(max({name}[0], {name}[1]), max({name}[2], {name}[3]));")
            else:
                comb = (f"{name}[0] = {name}[0] + {name}[1];" if ways == 2 else
                        f"{name}[0] = ({name}[0] + {name}[1]) + ({name}[2] + {name}[3]);")
            k = k[:ms.start()] + ms.group(1) + comb + k[ms.start():]
    return k

def streaming_stores(k):
    k, n = re.subn(r"\*\(uint2\*\)\((P_ptr \+ [^;]*?)\) = fg_v;", r"__stcs((uint2*)(\1), fg_v);", k)
    assert n == 2, n
    return k

variants = {
    "v0": kern,
    "v1": hoist_scale(kern),
    "v2": split_chains(kern, 2),
    "v3": split_chains(hoist_scale(kern), 2),
    "v4": split_chains(hoist_scale(kern), 4),
    "v5": streaming_stores(split_chains(hoist_scale(kern), 2)),
}
out = [head]
for name, k in variants.items():
    k = k.replace("main_kernel", f"w1_{name}_kernel")
    out.append(k)
open(sys.argv[2], "w").write("\n".join(out))
print(list(variants))
