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


def test_the_bundle_names_and_marks_tuned_tiles():
    t = tuned(512, wg(2, 64, 2))
    kernels = {name: f for name, _, f in attention_tensor_core_kernels("sm_90", F16, [t]) if f["head_size"] == 64}
    name = f"fa_{F16.key}_wgmma_d64_t2x64x2_n512"
    assert kernels[name]["schedule"] == "tuned" and kernels[name]["max_n"] == 512
    assert kernels[name]["sizes"] == t.sizes and kernels[name]["run_secs"] == t.run_secs
    assert kernels[f"fa_{F16.key}_wgmma_d64_n1024"]["schedule"] == "default"  # the shipped short tile, past 512
