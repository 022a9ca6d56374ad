"""The tiles a bundle ships for FusedAttention (flashgemm/bundle/attention_best.py): tuned tiles ahead of the shipped
ones, each serving up to the N it was tuned at, neighbours with one tile merged."""
from flashgemm.bundle import attention_best as ab
from flashgemm.bundle.kernel_library import attention_tensor_core_kernels
from flashgemm.kernel import fused_attention_mma, fused_attention_wgmma
from flashgemm.op.variant import Variant
from flashgemm.spaces.attention_tiles import Tile

F16 = Variant("float16", True, False, "none", False)
CAUSAL = Variant("float16", True, False, "none", True)


def wg(*p):
    return Tile("wgmma", p)


def tuned(n, tile, secs=1e-4, variant=F16, d=64, batch=(1, 128)):
    return ab.TunedTile(f"w{n}.attention.f16", variant, (*batch, n, n, d), tile, secs, "sm_90")


def test_without_tuned_tiles_the_shipped_ones_serve():
    shipped = [(max_n, wg(*p), None) for max_n, p in fused_attention_wgmma.TILES[64]]
    assert ab.served_tiles("sm_90", F16, 64) == shipped
    assert ab.served_tiles("sm_80", F16, 64) == [(None, Tile("mma", fused_attention_mma.TILES[64]), None)]


def test_tuned_tiles_serve_up_to_their_length_then_the_shipped_ones():
    short, mid, long = tuned(197, wg(1, 64, 3)), tuned(512, wg(2, 64, 2)), tuned(1500, wg(1, 128, 2))
    other = tuned(256, wg(2, 128, 2), variant=CAUSAL)  # another variant's: not these kernels'
    served = ab.served_tiles("sm_90", F16, 64, [long, other, short, mid])
    any_n = fused_attention_wgmma.TILES[64][-1][1]
    # the shipped tile for N <= 1024 is shadowed by the one tuned at 1500 and left out
    assert served == [(197, short.tile, short), (512, mid.tile, mid), (1500, long.tile, long),
                      (None, wg(*any_n), None)]
    assert ab.served_tiles("sm_90", F16, 128, [long]) == ab.served_tiles("sm_90", F16, 128)  # another head size


def test_neighbours_with_one_tile_merge_and_the_faster_per_element_wins_a_length():
    any_n = wg(*fused_attention_wgmma.TILES[64][-1][1])
    a, b = tuned(197, wg(1, 64, 3)), tuned(512, wg(1, 64, 3))
    slow, fast = tuned(1500, wg(2, 64, 2), secs=2e-4), tuned(1500, any_n, secs=1.5e-4, batch=(1, 100))
    served = ab.served_tiles("sm_90", F16, 64, [a, b, slow])
    assert served[0] == (512, a.tile, a) and served[1][:2] == (1500, slow.tile)
    # per element: fast is 1.5 us an element of 100, slow 2e-4 / 128 = 1.56 us: fast serves N = 1500, and it is
    # the shipped any-N tile, so one kernel serves from 513 on
    served = ab.served_tiles("sm_90", F16, 64, [a, b, slow, fast])
    assert served == [(512, a.tile, a), (None, any_n, fast)]


def test_the_bundle_names_and_marks_tuned_tiles_and_specializes_each_on_zero_nan_rows():
    t = tuned(512, wg(2, 64, 2))
    kernels = {name: f for name, _, f in attention_tensor_core_kernels("sm_90", F16, [t]) if f["head_size"] == 64}
    name = f"fa_{F16.key}_wgmma_d64_t2x64x2_n512"
    assert kernels[name]["schedule"] == "tuned" and kernels[name]["max_n"] == 512
    assert kernels[name]["sizes"] == t.sizes and kernels[name]["run_secs"] == t.run_secs
    assert kernels[f"fa_{F16.key}_wgmma_d64_n1024"]["schedule"] == "default"  # the shipped short tile, past 512
    # each tile twice, specialized on zero_nan_rows (a register cliff of the argument: with_zero_nan_rows)
    assert kernels[name]["zero_nan_rows"] == 0 and kernels[name + "_zeronan"]["zero_nan_rows"] == 1
    # the three tiles and the split-N form (manifest "split": its rows and chunk), each twice
    split = f"fa_{F16.key}_split_d64"
    assert kernels[split]["split"] == [16, 64] and kernels[split + "_zeronan"]["zero_nan_rows"] == 1
    assert len(kernels) == 2 * 4


def test_a_kernel_specialized_on_zero_nan_rows_ignores_the_argument():
    """with_zero_nan_rows on the llvm generic kernel: the argument stays in the signature, the body computes the
    specialized value's output whatever is passed (a NaN row of Q: NaN kept with 0, zeroed with 1)."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    from flashgemm.bundle.compile_worker import compile_module  # noqa: PLC0415
    from flashgemm.bundle.kernel_library import attention_generic_func, with_zero_nan_rows  # noqa: PLC0415
    from flashgemm.op.reference import fused_attention_ref  # noqa: PLC0415
    func = attention_generic_func("llvm", F16, "fa")
    funcs = {f"fa{z}": with_zero_nan_rows(func, z).with_attr("global_symbol", f"fa{z}") for z in (0, 1)}
    assert [p.name for p in funcs["fa1"].params] == [p.name for p in func.params]
    mod = compile_module(tvm.IRModule(funcs), "llvm", False)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 5, 8)).astype(np.float16) for _ in range(3))
    q[0, 1, 3, 0] = np.nan
    dev = tvm.cpu()
    for z in (0, 1):
        out = tvm.runtime.empty((1, 2, 5, 8), "float16", dev)
        mod[f"fa{z}"](*(tvm.runtime.tensor(x, dev) for x in (q, k, v)), out, np.float32(0.5), 1 - z)
        ref = fused_attention_ref(q, k, v, scale=0.5, trans_b=True, zero_nan_rows=bool(z))
        np.testing.assert_allclose(out.numpy().astype(np.float64), ref, rtol=0, atol=2e-3)
        assert np.isnan(out.numpy()[0, 1, 3]).all() == (z == 0)
