"""W1 (bert-large.f16's best record) as the shipped twin (s0), with the scale a constant 0.125f (s1), and with the
constant scale taken out of the row max, max(x*c) = c*max(x) for c > 0 (s2)."""
import re, sys
src = open(sys.argv[1]).read()
head, kern = src.split('extern "C" __global__', 1)
kern = 'extern "C" __global__' + kern
def const_scale(k):
    i = k.index("float scale) {") + len("float scale) {")
    b, n = re.subn(r"\bscale\b", "0.125f", k[i:])
    assert n == 4, n
    return k[:i] + b
def hoist(k):
    k, n = re.subn(r"\((S_warp_ptr\[[^;]*?\]) \* 0\.125f\)\);", r"\1);", k)
    assert n == 2, n
    # after each max loop nest, before the first quad shuffle: scale the lane's max once
    k, n = re.subn(r"(\n(\s*)(row_max_rf_shared_dyn_local_ptr(?:_\d)?)\[0\] = max\(\3\[0\], __shfl_xor_sync\([^\n]*, 1, 32\)\);)",
                   r"\n\2\3[0] = \3[0] * 0.125f;\1", k)
    assert n == 2, n
    return k
vs = {"s0": kern, "s1": const_scale(kern), "s2": hoist(const_scale(kern))}
out = [head]
for name, k in vs.items():
    out.append(k.replace("main_kernel", f"w1_{name}_kernel"))
open(sys.argv[2], "w").write("\n".join(out))
print(list(vs))

# runtime scale: s3 hoisted unconditionally (valid only for scale > 0); s4 max and min of the raw values, then the lane's
# scaled max picked by the sign of scale (valid for every scale), no branch
def hoist_runtime(k, with_min):
    pat = r"\n(\s*)(row_max_rf_shared_dyn_local_ptr(?:_\d)?)\[0\] = max\(\2\[0\], \((S_warp_ptr\[[^;]*?\]) \* scale\)\);"
    rep = (r"\n\1\2[0] = max(\2[0], \3);\n\1fg_mn = min(fg_mn, \3);" if with_min else r"\n\1\2[0] = max(\2[0], \3);")
    k, n = re.subn(pat, rep, k)
    assert n == 2, n
    after = (r"\n\2\3[0] = (0.0f <= scale) ? \3[0] * scale : fg_mn * scale;\1" if with_min else r"\n\2\3[0] = \3[0] * scale;\1")
    k, n = re.subn(r"(\n(\s*)(row_max_rf_shared_dyn_local_ptr(?:_\d)?)\[0\] = max\(\3\[0\], __shfl_xor_sync\([^\n]*, 1, 32\)\);)", after, k)
    assert n == 2, n
    if with_min:
        k, n = re.subn(r"\n(\s*)(row_max_rf_shared_dyn_local_ptr(?:_\d)?)\[0\] = (-0x1\.fffffep\+127f/\*-3\.402823e\+38\*/);",
                       r"\n\1\2[0] = \3;\n\1float fg_mn = 0x1.fffffep+127f;", k)
        assert n == 2, n
    return k
vs2 = {"s3": hoist_runtime(kern, False), "s4": hoist_runtime(kern, True)}
with open(sys.argv[2], "a") as f:
    for name, k in vs2.items():
        f.write("\n" + k[k.index('extern "C" __global__'):].replace("main_kernel", f"w1_{name}_kernel"))
print(list(vs2))
