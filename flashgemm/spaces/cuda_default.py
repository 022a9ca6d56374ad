"""Default (untuned) schedules of the tensor-core space: a fast kernel for a shape nobody tuned.

The generic CUDA kernel serves any shape but is 100-170x slower than a tuned one (one block per row,
S recomputed in every softmax pass). For a shape known at build time (`flashgemm-build --workload`,
`--from-model`) we can do far better without a GPU: pick one point of the tuned space
(cuda_space._schedule) by rule instead of by measurement, check it the way the tuner checks a
candidate (the space's postprocessors, the arch's shared-memory limit), and ship it. The manifest
marks it `"schedule": "default"`, never `tuned`.

The rule (choose_decisions) follows what tuning on the H100/H200 picked for W1, W2 and the BERT and
ViT sites (flashgemm/databases/sm_90/*, top records):
  * rows per block BM = 64 when the 16-row tile count divides by 4 (BERT: 512 rows), else 16 (ViT: 197);
  * one 16-column fragment per warp, as many warps as divide the column tiles, up to 16; the rest of
    N is swept in chunks;
  * k tiles of 32 (two 16-deep fragments) when K allows, two pipeline stages;
  * 16-byte cooperative copies when the operand's rows allow it (smaller vectors otherwise: a vector
    must never straddle a row, rows of K = 1 or 3 are not 16-byte aligned), 4-wide P stores, unroll 16.
Fallbacks follow (fewer rows per block, fewer warps, scalar copies) for a shape the first choice
does not fit. M = 1 takes the row-vector space (flashgemm/spaces/cuda_row_vector, rule in
choose_row_vector_decisions), long rows the split-N form (choose_split_n_decisions). Shapes no space can
schedule (rows too long for shared memory whose N is not a multiple of 16) raise
cuda_space.UnsupportedShapeError: the generic kernel serves them.
"""
from __future__ import annotations

import tvm
from tvm.s_tir import meta_schedule as ms

from flashgemm.spaces import cuda_recompute, cuda_row_vector, cuda_space, cuda_split_n
from flashgemm import targets
from flashgemm.spaces.intrinsics import register_intrinsics

VEC_CHOICES = (1, 2, 4, 8)  # cuda_space.fetch's cooperative-fetch widths (categorical index = position)
PV_CHOICES = (1, 2, 4)  # cuda_space's P store widths
UNROLL_CHOICES = (0, 16, 64, 512)
SPLIT_PV_CHOICES = (1, 2, 4)  # cuda_split_n's pass-2 vector widths
ROW_VECTOR_STAGES = 2  # cuda_row_vector's k-tile pipeline depth (B [N, K])


def _widest(row_len: int, limit: int = 8) -> int:
    """The widest copy vector (elements) that divides an operand's row length."""
    return next(v for v in (8, 4, 2, 1) if v <= limit and row_len % v == 0)


def choose_decisions(m: int, n: int, k: int, trans_b: bool, mt: int, nt: int, kt: int) -> list:
    """Candidate decisions, best guess first. mt, nt, kt: 16-element tile counts of the padded M, N, K
    (the extents the space's SamplePerfectTile instructions split)."""
    vec_a = _widest(k)
    vec_b = _widest(k if trans_b else n)
    pv = 4 if n % 4 == 0 else 1
    bk = 2 if kt % 2 == 0 else 1
    bms = [b for b in ((4, 1) if mt % 4 == 0 else (1,)) if mt % b == 0] + [2, 1]
    warps = [w for w in (16, 8, 4, 2, 1) if nt % w == 0]
    out, seen = [], set()
    for bm in dict.fromkeys(b for b in bms if mt % b == 0):
        for w in warps[:2] if len(warps) > 1 else warps:
            for va, vb in ((vec_a, vec_b), (1, 1)):
                key = (bm, w, va, vb)
                if key in seen:
                    continue
                seen.add(key)
                out.append({"i": [mt // bm, bm], "j": [nt // w, w, 1], "k": [kt // bk, bk],
                            "vec_a": VEC_CHOICES.index(va), "vec_b": VEC_CHOICES.index(vb),
                            "pv": PV_CHOICES.index(pv), "unroll": UNROLL_CHOICES.index(16), "stages": 2})
    return out


def choose_any_length_decisions(m: int, n: int, k: int, trans_b: bool, mt: int, nt: int, kt: int) -> list:
    """The any-length form's candidates (flashgemm/bundle/any_length.py), best guess first: 16 rows a block and 8 warps
    over the columns, one 16-column fragment each; then fewer warps. 16 rows, not choose_decisions' 64: a row block of S
    is 4x smaller in shared memory, so 4x more blocks fit an SM, and rows past M cost a 16-row tile, not a 64-row one;
    of ten choices swept over bounds and head sizes this one is the fastest at every point. B as [K, N] is copied
    element by element: its rows are N long, N known only at the call."""
    vec_a = _widest(k)
    vec_b = _widest(k) if trans_b else 1
    bk = 2 if kt % 2 == 0 else 1
    out = []
    for w in [w for w in (8, 4, 2, 1) if nt % w == 0]:
        for va, vb in ((vec_a, vec_b), (1, 1)):
            cand = {"i": [mt, 1], "j": [nt // w, w, 1], "k": [kt // bk, bk], "vec_a": VEC_CHOICES.index(va),
                    "vec_b": VEC_CHOICES.index(vb), "pv": 0, "unroll": UNROLL_CHOICES.index(16), "stages": 2}
            if cand not in out:
                out.append(cand)
    return out


def _postprocs(mod: tvm.IRModule, target_name: str) -> list:
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(target_name), task_name="default-schedule")
    procs = cuda_space.postprocs(target_name)
    for p in procs:
        p._initialize_with_tune_context(ctx)
    return procs


def _sample_insts(trace) -> list:
    return [inst for inst in trace.insts if inst.kind.name in ("SamplePerfectTile", "SampleCategorical")]


def choose_split_n_decisions(m: int, n: int, k: int, trans_b: bool, mt: int, jt: int, kt: int) -> list:
    """Candidates of the split-N form (flashgemm/spaces/cuda_split_n), best guess first. mt: 16-row tiles of the padded
    M (a multiple of 4); jt: 16-column tiles of one chunk (CW/16); kt: 16-element tiles of K.
    A GEMM-shaped tile: 128 rows a block when M allows (else 64) against the chunk's columns, a 2 x 2 grid of
    warps (each 64 x 64 at BM = 128), k tiles of 64, 16-byte copies."""
    vec_a, vec_b = _widest(k), _widest(k if trans_b else n)
    pv = SPLIT_PV_CHOICES.index(_widest(n, limit=4))
    bks = [b for b in (4, 2, 1) if kt % b == 0 and kt // b > 1] or [1]  # >1 k tile: the pipeline has work
    out = []
    for bm in (b for b in (8, 4) if mt % b == 0):  # 16-row tiles a block
        for wm, wn in ((2, 2), (1, 4), (2, 4), (1, 2)):
            if bm % wm or jt % wn or bm // wm > 4:
                continue
            for bk in bks[:2]:
                for va, vb in ((vec_a, vec_b), (1, 1)):
                    out.append({"i": [mt // bm, wm, bm // wm], "j": [wn, jt // wn], "k": [kt // bk, bk],
                                "vec_a": VEC_CHOICES.index(va), "vec_b": VEC_CHOICES.index(vb), "pv": pv,
                                "stages": 2})
    return out


def choose_row_vector_decisions(n: int, k: int, npad: int) -> list:
    """Candidates of the M = 1 row-vector space (flashgemm/spaces/cuda_row_vector), best guess first. npad: N padded to
    cuda_row_vector.N_PAD. The rule is the structure of the H100 tuning of decode-m1
    (flashgemm/databases/sm_90/decode-m1.f16: all of its top 3 records, about twice as fast as the first rule's V = 4):
    one column a thread (V = 1: the product reads B's shared tile element by element, and a thread's rows V apart put V
    lanes on one bank), as many warps as divide the row up to 16 and the rest in chunks, k vectors of 4 (8-byte cp.async
    copies) and k tiles of up to 32 elements, a 2-stage pipeline (cuda_default.ROW_VECTOR_STAGES), unroll 64, 4-wide P
    stores. More columns a thread follow as fallbacks."""
    lanes = npad // 32
    kv_choices = cuda_row_vector.kv_choices(k)
    kv = 4 if 4 in kv_choices else kv_choices[-1]
    kvecs = k // kv
    kb = max(d for d in range(1, 9) if kvecs % d == 0 and d * kv <= 32)
    pv = PV_CHOICES.index(_widest(n, limit=4))
    out = []
    for v in (1, 2, 4, 8):
        if lanes % v:
            continue
        w = next(x for x in range(cuda_row_vector.MAX_WARPS, 0, -1) if (lanes // v) % x == 0)
        out.append({"j": [npad // v, v], "w": [lanes // v // w, w], "kv": kv_choices.index(kv), "kb": [kvecs // kb, kb],
                    "unroll": UNROLL_CHOICES.index(64), "pv": pv})
    return out


# the recompute sketch the default schedule of that form is taken from (cuda_recompute: pipeline depth, P through a
# shared tile, A's fragments once a block): that of W3's best records in both dtypes
RECOMPUTE_SKETCH = {"stages": 2, "staged_p": True, "resident_a": True}


def choose_recompute_decisions(mt: int, nt: int, kt: int) -> list:
    """Candidates of the recompute form (flashgemm/spaces/cuda_recompute, RECOMPUTE_SKETCH), best guess first. mt, nt,
    kt: 16-element tile counts of the padded M, N, K. The rule is W3's best records
    (flashgemm/databases/sm_90/whisper-enc.f16 and .bf16, the same decisions in both dtypes): blocks of 64 rows sweeping
    chunks of 64 columns, 2 x 2 warps of 32 x 32, k tiles of 16, A copied a scalar at a time (its only width), B's
    chunks 4, then 8 and 8 elements a thread. Fallbacks: 32 and 16 rows a block, 32-column chunks."""
    out = []
    for bmt, (wm, fm) in ((4, (2, 2)), (2, (1, 2)), (1, (1, 1))):
        for cwt, (wn, fn) in ((4, (2, 2)), (2, (1, 2))):
            if mt % bmt or nt % cwt:
                continue
            out.append({"i": [mt // bmt, bmt], "j": [nt // cwt, cwt], "wi": [wm, fm], "wj": [wn, fn], "k": [kt, 1],
                        "vec_a": 0, "vec_b0": 1, "vec_b1": 2, "vec_b2": 2})
    return out


# the sampling instructions of each form's trace, in order (tile keys: SamplePerfectTile, others: SampleCategorical)
_FORMS = {
    "one_pass": ("i", "j", "k", "vec_a", "vec_b", "pv", "unroll"),
    "split_n": ("i", "j", "k", "vec_a", "vec_b", "pv"),
    "row_vector": ("j", "w", "kv", "kb", "unroll", "pv"),
    "recompute": ("i", "j", "wi", "wj", "k", "vec_a", "vec_b0", "vec_b1", "vec_b2"),
}
_TILE_KEYS = {"i", "j", "k", "w", "kb", "wi", "wj"}


def default_trace(mod: tvm.IRModule, target_name: str, log=None, candidates=None):
    """The trace (postprocessors included, as in a tuning record) of the first candidate of the form's chooser
    that passes the space's postprocessors for `target_name`. Raises cuda_space.UnsupportedShapeError when the
    space cannot schedule the shape or no candidate fits. candidates: a function (m, n, k, trans_b, *tile counts)
    -> decisions, in place of the form's chooser (to compare rules)."""
    target_name = targets.resolve(target_name)
    register_intrinsics(target_name)
    b0, b1, m, n, k = cuda_space._sizes(mod["main"])
    probe = tvm.s_tir.Schedule(mod, seed=1)
    trans_b = cuda_space._is_trans_b(probe)
    if cuda_recompute.is_recompute_form(probe):  # (first: over a bound it is an any-length form too)
        form = "recompute"
        probe = cuda_recompute.schedule(probe, target_name, stage_options=(RECOMPUTE_SKETCH["stages"],),
                                        staged_p=(RECOMPUTE_SKETCH["staged_p"],),
                                        resident_a=(RECOMPUTE_SKETCH["resident_a"],))[0]
    elif cuda_split_n.is_split_n(probe):
        form = "split_n"
        cuda_split_n.schedule(probe, target_name, stage_options=(2,))  # raises UnsupportedShapeError
    elif cuda_row_vector.applies(m):
        form = "row_vector"
        cuda_row_vector.schedule(probe, target_name, stage_options=(ROW_VECTOR_STAGES,))  # raises UnsupportedShapeError
    else:
        form = "one_pass"
        cuda_space._schedule(probe, target_name, stage_options=(2,))  # raises UnsupportedShapeError
    order = _FORMS[form]
    trace = probe.trace
    insts = _sample_insts(trace)
    kinds = [i.kind.name for i in insts]
    expected = ["SamplePerfectTile" if key in _TILE_KEYS else "SampleCategorical" for key in order]
    if kinds != expected:
        raise AssertionError(f"cuda_default: the {form} space's sampling instructions changed: {kinds} "
                             f"(update its chooser)")
    tiles = []  # the extent each SamplePerfectTile splits
    for inst, key in zip(insts, order):
        if key in _TILE_KEYS:
            ext = 1
            for d in trace.decisions[inst]:
                ext *= int(d)
            tiles.append(ext)
    if form == "recompute":  # (tiles: M, N, the probe's own row and column blocks, K)
        cands = choose_recompute_decisions(tiles[0], tiles[1], tiles[4])
    elif form == "split_n":
        cands = choose_split_n_decisions(m, n, k, trans_b, *tiles)
    elif form == "row_vector":
        cands = choose_row_vector_decisions(n, k, tiles[0])
    else:
        rule = choose_any_length_decisions if cuda_space.is_any_length(probe) else choose_decisions
        cands = (candidates or rule)(m, n, k, trans_b, *tiles)
    procs = _postprocs(mod, target_name)
    tried = 0
    for cand in cands:
        tried += 1
        if cand.get("stages", 2) != 2:  # one-pass / split-N: the probe is their 2-stage sketch
            raise AssertionError("cuda_default: only the 2-stage sketch is probed")
        t = cuda_space.with_decisions(trace, [cand[key] for key in order])
        sch = tvm.s_tir.Schedule(mod, seed=1)
        try:
            t.apply_to_schedule(sch, remove_postproc=True)
            ok = all(p.apply(sch) for p in procs)
        except Exception as err:  # noqa: BLE001  (a candidate the space rejects: try the next)
            if log:
                log(f"[default] candidate {cand} rejected: {str(err).strip().splitlines()[0][:160]}")
            continue
        if ok:
            return sch.trace, cand
        if log:
            log(f"[default] candidate {cand} fails the {target_name} checks (threads / shared memory)")
    raise cuda_space.UnsupportedShapeError(
        f"none of the {tried} default schedules of M={m}, N={n}, K={k} fits {target_name}; the generic kernel serves it")
