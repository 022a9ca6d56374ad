"""wgmma's shared-memory matrix descriptor (TVM 0.27 has the instruction, not the descriptor's packing)."""
from __future__ import annotations

from tvm.script import tirx as T


def smem_descriptor(addr, lbo: int = 16):
    """The 64-bit descriptor of the shared byte address `addr` (uint32): 128-byte swizzle (layout type 1), stride
    byte offset 1024 B (the next 8-row atom of K-major, the next 8 k of MN-major), leading byte offset `lbo` bytes
    (MN-major: the next 64 columns; unused by K-major with this swizzle: 16, i.e. 1)."""
    return (T.Cast("uint64", T.bitwise_and(addr, T.uint32(0x3FFFF)) >> T.uint32(4))
            | (T.uint64(lbo >> 4) << T.uint64(16)) | (T.uint64(64) << T.uint64(32)) | (T.uint64(1) << T.uint64(62)))
