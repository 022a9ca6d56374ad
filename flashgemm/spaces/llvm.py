"""CPU (llvm) schedules.

* `generic_schedule`: a fixed schedule for the symbolic-size kernels (one per variant) that serve every
  shape nobody tuned: rows of all batches in parallel, the whole row pipeline (GEMM row, max, exp, sum,
  normalize) computed at the row so S never leaves the per-row scratch, innermost loops unit-stride for
  LLVM's loop vectorizer, exp in vector arithmetic (`inline_exp`).
* `export_target`: the llvm target the bundle is compiled for (host vector ISA, reassociable reductions).
* `design_space`: what Meta-Schedule searches for a tuned llvm kernel — its default llvm rules, except
  that MultiLevelTiling may not fuse a write cache into the consumer: with the softmax blocks after the
  GEMM that fusion fails (reverse_compute_at: "producers not present under the target loop") and
  takes the whole space generation down. The GPU spaces are our own (cuda_*.py).
"""
from __future__ import annotations

import platform

import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir import meta_schedule as ms

from flashgemm.codegen.worker_init import ignore_stop_signals


def _trans_b(sch: tvm.s_tir.Schedule, s) -> bool:
    """Whether block "S" reads B as [..., N, K] (its last index is the reduction variable)."""
    block = sch.get(s)
    vk = block.iter_vars[4].var
    return any(r.source.name == "Bm" and r.region[3].min.same_as(vk) for r in block.reads)


# S's columns one register tile holds: 8 AVX2 accumulators, enough independent FMA chains to cover the FMA latency
# (16 columns, 2 chains: 0.9x the per-row streaming loop; 32: 1.1x; 64: 1.2-1.6x, BERT-base site to 512 x 512; no
# loss at 17 x 17).
TILE_COLUMNS = 64


def generic_schedule(func: tvm.tirx.PrimFunc) -> tvm.s_tir.Schedule:
    """Rows of all batches (B0 * B1 * M) in parallel; each row's pipeline (GEMM row, max, exp, sum, normalize)
    computed at the row, so S, E and the row statistics live in per-row scratch.

    Every size stays symbolic, and a split of a symbolic loop leaves a predicate that keeps TVM and LLVM from
    vectorizing, so:
    * "S" runs over whole tiles of TILE_COLUMNS columns: pad_einsum pads its N to a multiple, and B is first copied
      (all heads in parallel, before the rows) into a padded workspace laid out [K, N] for either transB, so a tile
      reads contiguous columns of B. A tile's accumulators are a vectorized local buffer (registers) over the k
      loop: per k, one broadcast of A and TILE_COLUMNS / 8 multiply-adds. Columns past N are computed and never
      read (`whole_tiles`); the copy fills them from column N - 1 (`clamped_padding`).
    * "row_max", "row_sum": reductions over j, unit-stride for LLVM's loop vectorizer (`export_target` gives it the
      host's vector ISA and lets it reassociate the float sum); "exp" and "P": elementwise over j. LLVM vectorizes
      them for a bias, a mask or causal alone; with two of those it keeps the max and exp loops scalar (the
      vectorized GEMM tiles stay).
    * exp: `inline_exp` (LLVM lowers TVM's exp to a libm call per element, which no loop vectorizer crosses);
      max: `nan_propagating_max` (TVM's float max is a compare-select, a reduction LLVM vectorizes only under
      no-NaN fast-math).
    Numerics: only the order of the fp32 additions in the row sum changes (NaN and inf propagate as in any order),
    and exp is within 2 ulp; a row with a NaN logit is a NaN row either way (the max ignores or returns the NaN,
    exp(NaN - max) or exp(x - NaN) is NaN); masking, the fully-masked-row zeros and the NaN rows are the kernel's
    Selects, untouched."""
    sch = tvm.s_tir.Schedule(nan_propagating_max(inline_exp(func)))
    s = sch.get_sblock("S")
    trans_b = _trans_b(sch, s)
    sch.pad_einsum(s, [1, 1, 1, TILE_COLUMNS, 1])
    if _has_block(sch, "S_pad"):
        sch.compute_inline(sch.get_sblock("S_pad"))
        b_pad = sch.get_sblock("Bm_pad")
    else:  # a static N that is whole tiles already: nothing padded, B copied all the same
        b_pad = sch.cache_read(s, [r.source.name for r in sch.get(s).reads].index("Bm"), "global")
    if trans_b:
        sch.transform_layout(b_pad, ("write", 0), lambda b0, b1, j, k: (b0, b1, k, j))
    heads = sch.get_loops(b_pad)[:2]
    sch.parallel(sch.fuse(*heads))

    out = sch.get_sblock("P")
    b0, b1, i, _ = sch.get_loops(out)
    row = sch.fuse(b0, b1, i)
    sch.parallel(row)
    for name in ("row_sum", "exp", "row_max"):
        sch.compute_at(sch.get_sblock(name), row)
    sch.compute_at(s, row, preserve_unit_loops=True)  # (a static N = 1 keeps its column loop to tile)
    j, k = sch.get_loops(s)[-2:]
    tile, column = sch.split(j, [None, TILE_COLUMNS])
    sch.reorder(tile, k, column)
    acc = sch.cache_write(s, 0, "local")
    sch.reverse_compute_at(acc, tile)
    init = sch.decompose_reduction(s, k)
    tile_blocks = {sch.get(b).name_hint for b in (init, s, acc)}
    func = whole_tiles(sch.mod["main"], tile_blocks)
    return tvm.s_tir.Schedule(clamped_padding(func, sch.get(b_pad).name_hint))


def attention_generic_schedule(func: tvm.tirx.PrimFunc) -> tvm.s_tir.Schedule:
    """FusedAttention's generic kernel (flashgemm/kernel/fused_attention.py): rows of all batches in parallel, each
    row's pipeline (S row, max, exp, sum, the row of O) computed at the row, so S and P live in per-row scratch and
    never reach memory. Every size is symbolic; the inner loops are unit-stride (S: over k with K^T, O: over V's
    columns) for LLVM's loop vectorizer. exp and max as in generic_schedule (inline_exp, nan_propagating_max)."""
    sch = tvm.s_tir.Schedule(nan_propagating_max(inline_exp(func)))
    b0, b1, i, _ = sch.get_loops(sch.get_sblock("O"))
    row = sch.fuse(b0, b1, i)
    sch.parallel(row)
    for name in ("O_acc", "row_sum", "exp", "row_max", "S"):
        sch.compute_at(sch.get_sblock(name), row)
    s = sch.get_sblock("S")
    vk = sch.get(s).iter_vars[4].var
    if not any(r.source.name == "Km" and r.region[3].min.same_as(vk) for r in sch.get(s).reads):
        # K is [K, N]: the row's columns innermost (unit-stride in K, a vector of S), the k loop outside
        j, k = sch.get_loops(s)[-2:]
        sch.reorder(k, j)
    return sch


def _has_block(sch: tvm.s_tir.Schedule, name: str) -> bool:
    found = []
    tvm_ffi.structural_walk(sch.mod["main"].body, ((tvm.s_tir.SBlock, lambda b: found.append(b.name_hint)),))
    return name in found


def whole_tiles(func: tirx.PrimFunc, blocks: set) -> tirx.PrimFunc:
    """The tile blocks of generic_schedule without their predicates, their column loops vectorized. The predicates
    are compute_at's (columns < N) and fuse's (batch < B0, always true of the fused row loop): S's padded columns
    are scratch that no consumer reads, so computing them is harmless, and the column loop becomes one vector."""
    def drop_predicate(realize):
        if realize.block.name_hint not in blocks:
            return realize
        return tvm.s_tir.SBlockRealize(realize.iter_values, tirx.const(True, "bool"), realize.block)

    def vectorize(loop):
        body = loop.body
        if isinstance(body, tvm.s_tir.SBlockRealize) and body.block.name_hint in blocks and \
                isinstance(loop.extent, tirx.IntImm):
            return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.VECTORIZED, body,
                            annotations=loop.annotations)
        return loop
    body = tvm_ffi.structural_map(func.body, ((tvm.s_tir.SBlockRealize, drop_predicate),))
    return func.with_body(tvm_ffi.structural_map(body, ((tirx.For, vectorize),)))


def clamped_padding(func: tirx.PrimFunc, block: str) -> tirx.PrimFunc:
    """pad_einsum's copy `block`, X_pad[.., j, ..] = if_then_else(j < N, X[.., j, ..], 0), as X[.., min(j, N - 1), ..].
    The padding is never read (whole_tiles), and the if_then_else would put a branch around the load that keeps the
    copy's index arithmetic (divisions by the symbolic batch sizes) inside the innermost loop."""
    def rewrite(b):
        if b.name_hint != block:
            return b
        store = b.body
        value = store.value
        cast = None
        if isinstance(value, tirx.Cast):
            cast, value = str(value.ty.dtype), value.value
        if not isinstance(value, tvm.ir.Call):  # an unpadded copy (generic_schedule): nothing to clamp
            return b
        cond, load, _ = value.args
        index = [tirx.min(x, cond.b - 1) if x.same_as(cond.a) else x for x in load.indices]
        assert any(x.same_as(cond.a) for x in load.indices), "pad_einsum's copy guards a column of its source"
        value = tirx.BufferLoad(load.source, index)
        value = tirx.Cast(cast, value) if cast else value
        return tvm.s_tir.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint,
                                tirx.BufferStore(store.buffer, value, store.indices), b.init, b.alloc_buffers,
                                b.match_buffers, b.annotations)
    return func.with_body(tvm_ffi.structural_map(func.body, ((tvm.s_tir.SBlock, rewrite),)))


# Cephes' expf: exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts, so r is exact), exp(r)
# a degree-7 polynomial on |r| <= ln 2 / 2; 2^n is applied as 2^(n-1) * 2, so n = 128 (x up to ln FLT_MAX) stays
# finite. Past the clamps exp is 0 or inf in fp32.
_EXP_HI, _EXP_LO = 88.72283905206835, -87.3365447505531
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


def vector_exp(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """exp(x) of an fp32 expression in arithmetic LLVM vectorizes (multiply-adds, a floor, an integer shift into the
    exponent bits): within 2 ulp of exp for results from 2^-125 up; NaN stays NaN, smaller results flush to 0
    (-inf gives 0), x > ln FLT_MAX gives inf. (Softmax exponentiates x - max <= 0: a result under 2^-125 is
    nothing next to the row maximum's 1.)"""
    def f(v):
        return tirx.const(v, "float32")
    xc = tirx.max(tirx.min(x, f(_EXP_HI)), f(_EXP_LO))
    n = tirx.floor(xc * f(1.44269504088896341) + f(0.5))
    r = xc - n * f(_LN2_HI) - n * f(_LN2_LO)
    y = f(_EXP_POLY[0])
    for c in _EXP_POLY[1:]:
        y = y * r + f(c)
    y = y * (r * r) + r + f(1.0)
    half_two_n = tirx.reinterpret("float32", tirx.shift_left(tirx.Cast("int32", n) + 126, 23))
    y = tirx.Select(x > f(_EXP_HI), f(float("inf")), y * half_two_n * f(2.0))
    y = tirx.Select(x < f(_EXP_LO), f(0.0), y)
    return tirx.Select(tirx.isnan(x), x, y)  # the clamps' min/max would turn a NaN into a bound


_EXP = tvm.ir.Op.get("tirx.exp")


def inline_exp(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with every fp32 exp written as `vector_exp`."""
    def rewrite(call):
        return vector_exp(call.args[0]) if call.op.same_as(_EXP) and str(call.ty.dtype) == "float32" else call
    return func.with_body(tvm_ffi.structural_map(func.body, ((tvm.ir.Call, rewrite),)))



def nan_propagating_max(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with every fp32 max written as LLVM's `maximum` (NaN if either side is NaN), which LLVM vectorizes as
    a reduction without fast-math flags."""
    def rewrite(m):
        if str(m.ty.dtype) != "float32":
            return m
        return tirx.call_llvm_pure_intrin("float32", "llvm.maximum.f32", m.a, m.b)
    return func.with_body(tvm_ffi.structural_map(func.body, ((tirx.Max, rewrite),)))


# The x86-64 ISA level llvm bundles are compiled for where the building CPU has it: AVX2, FMA and F16C (the fp16 ->
# fp32 widening in one instruction, not a libcall per multiply-add), so a bundle runs on any CPU of that level
# (Intel since 2013, AMD since 2015), not only on the one that built it. The op checks it when it loads the bundle
# (manifest "cpu", flashgemm/ort/csrc/bundle.cc): a CPU without it gets an error, never an illegal instruction.
X86_LEVEL = "x86-64-v3"
_X86_LEVEL_FLAGS = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}  # /proc/cpuinfo's names


def export_mcpu() -> str:
    """-mcpu of an llvm bundle: X86_LEVEL where this x86-64 CPU has it, else this CPU's own (LLVM's name for it)."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        try:
            flags = set(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split())
        except (OSError, StopIteration):
            flags = set()
        if _X86_LEVEL_FLAGS <= flags:
            return X86_LEVEL
    return tvm.target.codegen.llvm_get_system_cpu()


def export_target(target: tvm.target.Target) -> tvm.target.Target:
    """The llvm target the bundle is compiled for: `target` plus -mcpu (export_mcpu, for a vector ISA) and
    fast-math-reassoc (vectorized float reductions; see generic_schedule). No other fast-math flag: nnan/ninf would
    break the NaN-row and masking contract, arcp/afn would change exp and the division."""
    attrs = dict(target.export())
    attrs.setdefault("mcpu", export_mcpu())
    attrs["fast-math-reassoc"] = True
    return tvm.target.Target(attrs)


def design_space() -> ms.space_generator.SpaceGenerator:
    # Meta-Schedule's llvm rules import TVM's tensor intrinsics when a TuneContext starts: through
    # flashgemm.tvm_ext.tensor_intrin they are parsed with the shallow stack (several times faster)
    from flashgemm.tvm_ext import tensor_intrin  # noqa: F401,PLC0415
    rules = []
    for rule in ms.ScheduleRule.create("llvm"):
        if isinstance(rule, ms.schedule_rule.MultiLevelTiling):
            rule = ms.schedule_rule.MultiLevelTiling(
                structure="SSRSRS", tile_binds=None, max_innermost_factor=64, vector_load_lens=None,
                reuse_read=None, reuse_write=ms.schedule_rule.ReuseType(req="no", levels=[1, 2], scope="global"))
        rules.append(rule)
    return ms.space_generator.PostOrderApply(
        sch_rules=rules, postprocs="from-target", mutator_probs="from-target")


def build(mod, target, _params=None):
    """Meta-Schedule f_build for llvm. The default one imports tvm.s_tir.tensor_intrin in every fresh
    builder worker (16 s on a 2-core machine: builds then time out at 30 s); the CPU needs none of it."""
    import tvm  # noqa: PLC0415  (runs in a builder worker)

    with target:
        return tvm.compile(mod, target=target).mod


def builder(workers: int) -> ms.builder.Builder:
    return ms.builder.LocalBuilder(max_workers=workers, f_build=build, initializer=ignore_stop_signals)


def evaluator_config() -> ms.runner.EvaluatorConfig:
    # Caches are not flushed between repeats: the CPU kernels are small and the demo measures warm runs.
    return ms.runner.EvaluatorConfig(number=3, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=False)


def runner() -> ms.runner.Runner:
    return ms.runner.LocalRunner(evaluator_config=evaluator_config(), initializer=ignore_stop_signals)
