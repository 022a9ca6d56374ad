"""The probe's kernels from the CUDA source of vit-b16.f16's best record in its tuning form (as
tests/compile_worker.best_record_source compiles it, commit 0a7ee85): v0 as it is, v1 without the four cp.async
statements that load B's k-tiles into shared memory (its P is wrong; it is timed only).
    python make_variants.py W2_SOURCE.cu w2_variants.cu"""
import sys

src = open(sys.argv[1]).read()
head, kern = src.split('extern "C" __global__', 1)
kern = 'extern "C" __global__' + kern
kern = kern[kern.index(';') + 1:].lstrip()  # the definition, without the declaration before it
v0 = kern.replace('main_kernel', 'w2_v0_kernel')
lines = v0.split('\n')
kept = [l for l in lines if not (l.strip().startswith('ptx_cp_async') and 'Bm_ptr' in l)]
assert len(lines) - len(kept) == 4
v1 = '\n'.join(kept).replace('w2_v0_kernel', 'w2_v1_kernel')
open(sys.argv[2], 'w').write(head + '\n' + v0 + '\n' + v1 + '\n')
