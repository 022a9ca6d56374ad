"""W1 (bert-large.f16's best record, compiler with schedules/max_scale): the tuning form (u0), the scale-specialized
twin as the bundle ships it (u1), and the twin with one difference from the tuning form taken away at a time:
u2 __launch_bounds__(128) for __maxnreg__(240), u3 the batch strides constants (A_s1 = B_s1 = 32768), u4 both."""
import re, sys
def kernel(path):
    src = open(path).read()
    head, kern = src.split('extern "C" __global__', 1)
    return head, 'extern "C" __global__' + kern
head, tf = kernel(sys.argv[1])
_, tw = kernel(sys.argv[2])
SIG = "int elem_offset) {"
def bounds(k):
    k, n = re.subn(r"__maxnreg__\(240\)", "__launch_bounds__(128)", k)
    assert n == 2, n
    return k
def strides(k):
    i = k.index(SIG) + len(SIG)
    b, n = re.subn(r"\b(A_s1|B_s1)\b", "32768", k[i:])
    assert n >= 2, n
    return k[:i] + b
vs = {"u0": tf, "u1": tw, "u2": bounds(tw), "u3": strides(tw), "u4": strides(bounds(tw))}
out = [head]
for name, k in vs.items():
    out.append(k.replace("main_kernel", f"w1_{name}_kernel"))
open(sys.argv[3], "w").write("\n".join(out))
print(list(vs))
