"""P stored with the streaming cache hint (st.global.cs, evict-first) where a kernel only writes P.

A fused kernel writes P once and never reads it back, so P's lines need not stay in L2 (W1: 134 MB of P through a
50 MB L2). CodeGenCUDA writes plain stores; this source rewrite, in cuda_build's source hook after sector_stores, turns
each store to P into a call of one helper that stores the same bytes with __stcs:

    *(T*)(P_ptr + ADDR) = V;     ->  fg_store_cs((T*)(P_ptr + ADDR), V);
    P_ptr[IDX] = V;              ->  fg_store_cs(P_ptr + (IDX), V);

The helper converts V to T as the assignment did and stores sizeof(T) bytes (2, 4, 8 or 16: half, half2, half4,
uint2, ...) as one integer scalar or vector of that size, so the store's width and alignment do not change. Modules in
which P_ptr is read, or used in any other way than these two statement forms (the split-N form's combine pass reads
P back), are left as they are.

Measured (H200 probe, 2026-11-28, session 42: results/h200/streaming-stores-2026-11-28): W1's shipped fp16 kernel (the
fixed-batch twin) with its two P stores edited this way ran 73.2-73.8 against 74.9-75.6 us.
FLASHGEMM_NO_STREAMING_STORES=1 turns it off (A/B: benchmarks/shipped_forms_ab.py --cached-stores).
"""
from __future__ import annotations

import os
import re

SWITCH = "FLASHGEMM_NO_STREAMING_STORES"
_VECTOR = re.compile(r"^(?P<ind>[ \t]*)\*\((?P<ty>[\w:]+)\*\)\(P_ptr \+ (?P<addr>[^;\n]*)\) = (?P<val>[^;\n]*);$", re.M)
_SCALAR = re.compile(r"^(?P<ind>[ \t]*)P_ptr\[(?P<idx>[^;\n]*)\] = (?P<val>[^;\n]*);$", re.M)
_PARAM = re.compile(r"\b\w+\* __restrict__ P_ptr\b")
_DONE = re.compile(r"fg_store_cs\((?:\([\w:]+\*\)\()?P_ptr \+")
HELPER = """
// P's streaming store (schedules/streaming_stores.py): the bytes of (T)v, stored evict-first with one access
template <typename T, typename V>
static __device__ __forceinline__ void fg_store_cs(T* p, V v) {
  const T t = (T)v;
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16, "P store width");
  if constexpr (sizeof(T) == 16) { __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&t)); }
  else if constexpr (sizeof(T) == 8) { __stcs(reinterpret_cast<uint2*>(p), *reinterpret_cast<const uint2*>(&t)); }
  else if constexpr (sizeof(T) == 4) {
    __stcs(reinterpret_cast<unsigned int*>(p), *reinterpret_cast<const unsigned int*>(&t));
  }
  else { __stcs(reinterpret_cast<unsigned short*>(p), *reinterpret_cast<const unsigned short*>(&t)); }
}
"""


def rewrite(code: str) -> str:
    """Every store to P as a streaming store (module doc), or the source unchanged."""
    if os.environ.get(SWITCH) or "P_ptr" not in code:
        return code
    new = _VECTOR.sub(lambda m: f"{m['ind']}fg_store_cs(({m['ty']}*)(P_ptr + {m['addr']}), {m['val']});", code)
    new = _SCALAR.sub(lambda m: f"{m['ind']}fg_store_cs(P_ptr + ({m['idx']}), {m['val']});", new)
    # what is left of P_ptr must be the parameter lists and the stores just written: anything else reads P
    rest = _DONE.sub("", _PARAM.sub("", new))
    if new == code or "P_ptr" in rest:
        return code
    at = new.find('extern "C" __global__')
    return new[:at] + HELPER.lstrip("\n") + "\n" + new[at:]
