"""W1 fp16's shipped kernel (bert-large.f16's best record as the scale-specialized twin, `probe-w1-twin-scale.cu` of
../scale-specialized-2026-11-28, the same CUDA as today's build) with its row statistics exchanged once a row tile
instead of twice (v1), next to the kernel as shipped (v0) and the tuning form (t0).

As shipped, each row tile runs: warp-partial row max -> shared -> barrier -> every lane combines the 4 partials ->
exp(x - max) into the accumulator and the warp-partial sum -> shared -> barrier -> sum, P. v1 takes exp against the
warp's own max (the partial it already has after the quad shuffles), stores max and sum partials together, drops the
first barrier, and combines as FlashAttention does: sum = sum_w s_w exp(m_w - m), P = e exp(m_w - m) / sum."""
import re, sys

def kernel(path):
    src = open(path).read()
    head, kern = src.split('extern "C" __global__', 1)
    return head, 'extern "C" __global__' + kern

LOG2E = "1.4426950408889634f"
CLAMP = "-0x1.2ced32a16a1b1p+127f"  # the template's max(m, -2e38) before exp: no -inf - -inf

def one_exchange(k):
    out, pos, copies = [], 0, 0
    store = re.compile(r"\n(\s*)if \(\(\(\(int\)threadIdx\.x\) % 4\) == 0\) \{\n\s*row_max_rf_shared_dyn_shared_ptr\["
                       r"\(\(\(\((ax3_1\w*) \* 64\) \+ \((ax3_2\w*) \* 32\)\)[^\n]*\] = (row_max_rf_shared_dyn_local_ptr\w*)\[0\];")
    while True:
        m = store.search(k, pos)
        if not m:
            break
        copies += 1
        ind, a1, a2, local = m.groups()
        out.append(k[pos:m.start()])
        out.append(f"\n{ind}fg_mw[{a1} * 2 + {a2}] = {local}[0];" + m.group(0))
        pos = m.end()
        # (b) the barrier between the max and the sum
        sync = k.index("__syncthreads();", pos)
        out.append(k[pos:sync])
        pos = sync + len("__syncthreads();")
        # (c) the sum's max: this warp's own
        c = re.compile(r"(row_max_shared_dyn_local_ptr\w*)\[0\] = max\(max\(row_max_rf_shared_dyn_shared_ptr\[\(\(\((ax3_1\w*) \* 64\) \+ \((ax3_2\w*) \* 32\)\)[^\n]*;")
        mc = c.search(k, pos)
        out.append(k[pos:mc.start()])
        out.append(f"{mc.group(1)}[0] = fg_mw[{mc.group(2)} * 2 + {mc.group(3)}];")
        pos = mc.end()
        # (d) P: the weighted sum and this lane's factor
        d = re.compile(r"(row_max_shared_dyn_local_ptr\w*)\[0\] = max\(max\(row_max_rf_shared_dyn_shared_ptr\[\(\(\((ax2_1\w*) \* 64\) \+ \((ax2_2\w*) \* 32\)\)[^\n]*;\n(\s*)(row_sum_shared_dyn_local_ptr\w*)\[0\] = [^\n]*;\n\s*float (row_sum_shared_dyn_local_rcp\w*) = \(0x1p\+0f/\*1\.000000e\+00\*/ / (row_sum_shared_dyn_local_ptr\w*)\[0\]\);")
        md = d.search(k, pos)
        gmax, c1, c2, ind2, rsum, rcp, _ = md.groups()
        base = f"((({c1} * 64) + ({c2} * 32)) + ((((int)threadIdx.x) >> 2) * 4))"
        mk = [f"row_max_rf_shared_dyn_shared_ptr[({base} + {w})]" for w in range(4)]
        sk = [f"row_sum_rf_shared_dyn_shared_ptr[({base} + {w})]" for w in range(4)]
        gm = f"max({gmax}[0], {CLAMP})"
        weights = " + ".join(f"{sk[w]} * exp2f((max({mk[w]}, {CLAMP}) - {gm}) * {LOG2E})" for w in range(4))
        new = (md.group(0).split("\n")[0] + "\n"
               + f"{ind2}{rsum}[0] = {weights};\n"
               + f"{ind2}float {rcp} = exp2f((max(fg_mw[{c1} * 2 + {c2}], {CLAMP}) - {gm}) * {LOG2E}) / {rsum}[0];")
        out.append(k[pos:md.start()])
        out.append(new)
        pos = md.end()
    out.append(k[pos:])
    assert copies == 2, copies  # the pipelined row-tile loop and its last tile
    k = "".join(out)
    i = k.index("{", k.index("int elem_offset)")) + 1
    return k[:i] + "\n  float fg_mw[4];  // this lane's warp-partial row maxima of the row tile" + k[i:]

head, tf = kernel(sys.argv[1])
_, tw = kernel(sys.argv[2])
vs = {"t0": tf, "v0": tw, "v1": one_exchange(tw)}
out = [head]
for name, k in vs.items():
    out.append(k.replace("main_kernel", f"w1_{name}_kernel"))
open(sys.argv[3], "w").write("\n".join(out))
print(list(vs))
