"""Build FusedAttention's bundle for the benchmark's fp16 shapes (W1-W3: plain; prefill: causal) into argv[1]."""
import sys, time
from flashgemm.bundle.kernel_library import export_bundle
from flashgemm.op.variant import Variant

if __name__ == "__main__":
    t = time.time()
    vs = [Variant("float16", True, False, "none", False), Variant("float16", True, False, "none", True)]
    export_bundle(sys.argv[1], "sm_90", variants=vs, attention=True, log=lambda *a: None)
    print(f"bundle {sys.argv[1]} in {time.time() - t:.0f} s", flush=True)
