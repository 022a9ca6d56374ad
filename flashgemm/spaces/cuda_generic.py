"""CUDA schedule of the generic (symbolic-size) kernels: the fallback for every shape nobody tuned.

Correct for any B0, B1, M, N, K >= 1 (N = 65536, K = 1, M = 1 ...) and any strides; reasonable, not
fast. Design:

* One thread block of `THREADS` threads per row (b0, b1, i); blockIdx.x runs over the B0*B1*M rows.
  Threads stride over the N columns; the row max and row sum are cross-thread reductions (the
  reduction loop bound to threadIdx.x: TVM's LowerCrossThreadReduction emits warp shuffles plus
  one shared-memory exchange between warps).
* Where S lives: N is symbolic, so a row of S cannot be a static shared/register array; a dynamic
  shared-memory row would cap N at ~12K (48 KB) to ~56K (227 KB on H100) and fail above; a global
  scratch would cost a hidden B0*B1*M*N*4-byte workspace (1.4 GB for Whisper). We *recompute* S
  instead: each of the three row passes (max, sum of exp, normalize) recomputes its S element as a
  K-long dot product in registers, so the kernel needs no storage that grows with N or K, at 3x the
  (small, K=64 for attention) GEMM work. A[i, :] is reread from L1/L2 by every thread; fine for a
  fallback.
* TensorIR cannot recompute a reduction block in several consumers (compute_inline refuses
  reductions; compute_at wants every consumer under the loop), so `recompute_s_per_pass` first
  rewrites the function: it duplicates the "S" block for the "exp" pass and for the "P" pass, and
  "exp" for the "P" pass, with buffers of their own. The result computes exactly the same values
  (the duplicates are the very same statements); only block and buffer names are added.
"""
from __future__ import annotations

import re

import tvm
import tvm.script
from tvm import s_tir, tirx

THREADS = 256  # threads per row; 8 warps


# ----------------------------------------------------------------------------- IR rewriting
# TVM 0.27's IR has no Python substitution helper for buffers (buffers are tensor-typed Vars, loads are
# TensorLoad ...), so the duplication is done on the TVMScript text of the function and parsed back: the
# printed form is stable and complete (it round-trips), the nests are top-level `for` statements of the
# root block, and buffers are referenced as `S[...]` / `E[...]`. Anything unexpected raises.
_NEST = re.compile(r"^    for .*$", re.M)


def _nests(body: str) -> list:
    starts = [m.start() for m in _NEST.finditer(body)]
    return [body[a:b] for a, b in zip(starts, starts[1:] + [len(body)])]


def _sub(text: str, bufs: dict, blocks: dict) -> str:
    for old, new in bufs.items():
        text = re.sub(rf"(?<![A-Za-z0-9_.]){old}\[", f"{new}[", text)
    for old, new in blocks.items():
        text, n = re.subn(rf'T\.sblock\("{old}"\)', f'T.sblock("{new}")', text)
        if n != 1:
            raise ValueError(f"cuda_generic: block {old!r} found {n} times")
    return text


def recompute_s_per_pass(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """[S, row_max, exp, row_sum, P] -> [S, row_max, S_e, exp, row_sum, S_p, exp_p, P]: the exp pass and the
    normalize pass get private copies of S (and P of exp), so that each can be computed where it is used."""
    text = func.script()
    first = _NEST.search(text)
    if first is None:
        raise ValueError("cuda_generic: no loop nest in the function")
    head, nests = text[:first.start()], _nests(text[first.start():])
    names = [re.search(r'T\.sblock\("([^"]+)"\)', n).group(1) for n in nests]
    if names != ["S", "row_max", "exp", "row_sum", "P"]:
        raise ValueError(f"cuda_generic: unexpected block structure {names}")
    alloc = re.compile(r"^(    )S = (T\.sblock_alloc_buffer\(.*\))$", re.M)
    m_s = alloc.search(head)
    m_e = re.search(r"^    E = (T\.sblock_alloc_buffer\(.*\))$", head, re.M)
    if m_s is None or m_e is None:
        raise ValueError("cuda_generic: S/E allocations not found")
    head = head[:m_s.end()] + f"\n    S_e = {m_s.group(2)}\n    S_p = {m_s.group(2)}\n    E_p = {m_e.group(1)}" \
        + head[m_s.end():]
    n_s, n_max, n_exp, n_sum, n_p = nests
    # (Only for an operator whose row max starts at -inf; flashgemm.kernel.fused_gemm_softmax uses min_value.)
    # With -inf, TVM's reducer matching (needed for the cross-thread
    # reduction) only knows max with identity min_value("float32") = -FLT_MAX. Same results: a row
    # whose logits are all -inf gets row_max = -FLT_MAX instead of -inf, then exp(-inf - row_max) = 0
    # for every element, row_sum = 0, and P = 0 by the row_sum != 0 rule, exactly as with -inf.
    n_max, k = re.subn(r'(with T\.init\(\):\n\s*row_max\[[^\]]*\] = )T\.float32\("-inf"\)',
                       r'\1T.min_value("float32")', n_max)
    if k != 1 and not re.search(r'with T\.init\(\):\n\s*row_max\[[^\]]*\] = T\.float32\(-3402823466', n_max):
        raise ValueError("cuda_generic: row_max init is neither -inf nor min_value('float32')")
    body = [n_s, n_max,
            _sub(n_s, {"S": "S_e"}, {"S": "S_e"}), _sub(n_exp, {"S": "S_e"}, {}), n_sum,
            _sub(n_s, {"S": "S_p"}, {"S": "S_p"}), _sub(n_exp, {"S": "S_p", "E": "E_p"}, {"exp": "exp_p"}),
            _sub(n_p, {"E": "E_p"}, {})]
    new = tvm.script.from_source(head + "".join(body))
    if isinstance(new, tvm.IRModule):
        new = new["main"] if "main" in new.functions else list(new.functions.values())[0]
    return new.with_attr("global_symbol", func.attrs["global_symbol"]) if func.attrs and \
        "global_symbol" in func.attrs else new


# ----------------------------------------------------------------------------- schedule
def generic_schedule(func: tirx.PrimFunc, threads: int = THREADS) -> s_tir.Schedule:
    """The fixed CUDA schedule of a (symbolic or static size) runtime kernel; see the module docstring."""
    sch = s_tir.Schedule(recompute_s_per_pass(func))
    sch.compute_inline(sch.get_sblock("exp"))    # into row_sum
    sch.compute_inline(sch.get_sblock("exp_p"))  # into P
    # rows -> blocks; the three row passes inside
    b0, b1, i, j = sch.get_loops(sch.get_sblock("P"))
    row = sch.fuse(b0, b1, i)
    sch.bind(row, "blockIdx.x")
    for name in ("row_sum", "row_max"):
        sch.compute_at(sch.get_sblock(name), row)
    for red, s_name in (("row_max", "S"), ("row_sum", "S_e"), ("P", "S_p")):
        blk = sch.get_sblock(red)
        jl = sch.get_loops(blk)[-1]
        jo, ji = sch.split(jl, factors=[None, threads])
        sch.bind(ji, "threadIdx.x")
        s_blk = sch.get_sblock(s_name)
        sch.compute_at(s_blk, ji)          # one S element per thread and column, K loop in registers
        sch.set_scope(s_blk, 0, "local")
    for red in ("row_max", "row_sum"):   # the row statistics live in shared memory of the block
        sch.set_scope(sch.get_sblock(red), 0, "shared")
    return sch


def attention_generic_schedule(func: tirx.PrimFunc, threads: int = THREADS) -> s_tir.Schedule:
    """FusedAttention's generic kernel (flashgemm/kernel/fused_attention.runtime_func(chunk=threads)): one block
    per row, the row max and row sum as in generic_schedule (S recomputed in registers for each), then O: for
    each group of `threads` of V's columns (one a thread, its fp32 accumulator in a register) and each chunk of
    `threads` of the row's columns, the block computes the chunk's probabilities into shared memory and every
    thread adds the chunk's p · V[j, d] to its accumulator. The chunk is recomputed for each column group (once for
    D <= threads). No storage grows with N, K or D."""
    sch = s_tir.Schedule(func)
    sch.compute_inline(sch.get_sblock("exp"))  # into row_sum
    b0, b1, i, d = sch.get_loops(sch.get_sblock("O"))
    row = sch.fuse(b0, b1, i)
    sch.bind(row, "blockIdx.x")
    d_group, d_thread = sch.split(d, factors=[None, threads])
    sch.bind(d_thread, "threadIdx.x")
    acc = sch.get_sblock("O_acc")
    sch.compute_at(acc, d_group)
    chunk, column, d_acc = sch.get_loops(acc)[-3:]
    sch.reorder(chunk, d_acc, column)
    sch.bind(d_acc, "threadIdx.x")
    sch.set_scope(acc, 0, "local")
    e_o = sch.get_sblock("exp_o")
    sch.compute_at(e_o, chunk)
    sch.set_scope(e_o, 0, "shared")
    sch.bind(sch.get_loops(e_o)[-1], "threadIdx.x")
    s_o = sch.get_sblock("S_o")
    sch.compute_at(s_o, sch.get_loops(e_o)[-1])  # one S element per thread and column, K loop in registers
    sch.set_scope(s_o, 0, "local")
    for name in ("row_sum", "row_max"):
        sch.compute_at(sch.get_sblock(name), row)
    for red, s_name in (("row_max", "S"), ("row_sum", "S_e")):
        blk = sch.get_sblock(red)
        jl = sch.get_loops(blk)[-1]
        jo, ji = sch.split(jl, factors=[None, threads])
        sch.bind(ji, "threadIdx.x")
        s_blk = sch.get_sblock(s_name)
        sch.compute_at(s_blk, ji)
        sch.set_scope(s_blk, 0, "local")
    for red in ("row_max", "row_sum"):
        sch.set_scope(sch.get_sblock(red), 0, "shared")
    return sch
