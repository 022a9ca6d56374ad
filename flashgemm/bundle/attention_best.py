"""FusedAttention's tuned tiles: the best record of each attention database (flashgemm-tune --attention), and the
tiles a bundle ships for one (variant, head size) with the longest N each serves.

A tuned tile is the fastest measured at its workload's N. The bundle serves it to the calls of its variant and head
size with N up to that N and past the previous tuned N; past the longest tuned N the shipped tiles
(fused_attention_wgmma.TILES, fused_attention_mma.TILES: a measured sweep) serve as before. Neighbours with one tile
merge into one kernel. Tiles are chosen per length only: batch and heads are not part of the choice.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Optional

from flashgemm import targets
from flashgemm.kernel import fused_attention_mma, fused_attention_wgmma
from flashgemm.op.variant import Variant
from flashgemm.bundle.best import workload_of
from flashgemm.spaces import attention_tiles
from flashgemm.spaces.attention_tiles import Tile
from flashgemm.spaces.kernel_forms import tuning_modules
from flashgemm.tune import database as dbm


@dataclasses.dataclass(frozen=True)
class TunedTile:
    workload: str  # the database directory's name
    variant: Variant
    sizes: tuple  # canonical [B0, B1, M, N, D] tuned at
    tile: Tile
    run_secs: float
    tuned_on: str

    @property
    def n(self) -> int:
        return self.sizes[3]

    @property
    def head_size(self) -> int:
        return self.sizes[4]


def load_tuned_tile(wl_dir: Path, target: str) -> TunedTile:
    """The fastest valid record of an attention database tuned on `target`, as its tile."""
    prov = dbm.read_provenance(wl_dir)
    dbm.check_target(wl_dir, prov, target)
    wl = workload_of(wl_dir, prov)
    mod = tuning_modules(wl, target)[0][1]
    top = dbm.top_records(mod, [dbm.open_json_db(wl_dir)], 1)
    if not top:
        raise dbm.DatabaseError(f"{wl_dir} has no valid record for its workload {wl.spec()} (tune it again: "
                                f"flashgemm-tune --attention --target {target} --workload '{wl.spec()}')")
    import tvm  # noqa: PLC0415
    sch = tvm.s_tir.Schedule(mod)
    try:
        top[0].trace.apply_to_schedule(sch, remove_postproc=False)
        tile = attention_tiles.tile_of(sch.mod)
    except Exception as err:  # noqa: BLE001  (TVM raises its own error types)
        raise dbm.DatabaseError(f"the best record of {wl_dir} does not replay on the workload: "
                                f"{str(err).strip().splitlines()[0]}") from err
    if tile is None or tile not in attention_tiles.tiles(target, wl.variant, wl.canonical.sizes[4]):
        raise dbm.DatabaseError(f"the best record of {wl_dir} draws a tile ({tile}) that the {target} kernels no "
                                f"longer take; tune it again")
    return TunedTile(wl_dir.name, wl.variant, tuple(wl.canonical.sizes), tile, dbm.mean_secs(top[0]), target)


def load_all(target: str, db_root: Optional[os.PathLike] = None, log: Callable = print) -> list:
    """Every attention database of `target` under db_root, as TunedTiles (none on llvm: no tiles there). Tiles are
    arch-specific (wgmma on sm_90 only, shared memory per arch): other arches' databases are not transferred."""
    own = Path(db_root or dbm.default_root()) / target
    if not targets.is_cuda(target) or not own.is_dir():
        return []
    out = []
    for wl_dir in sorted(p for p in own.iterdir() if (p / dbm.PROVENANCE).exists()):
        if workload_of(wl_dir, dbm.read_provenance(wl_dir)).attention:
            t = load_tuned_tile(wl_dir, target)
            out.append(t)
            log(f"[build] tuned {wl_dir.name}: tile {t.tile.form} {t.tile.params}, {t.run_secs * 1e6:.1f} us measured")
    return out


def default_tiles(target_name: str, d: int) -> list:
    """The shipped tiles of head size `d`: [(max_n or None, Tile)], the longest N each serves (None: any)."""
    if targets.resolve(target_name) == "sm_90" and d in fused_attention_wgmma.HEAD_SIZES:
        return [(max_n, Tile("wgmma", tuple(p))) for max_n, p in fused_attention_wgmma.TILES[d]]
    return [(None, Tile("mma", tuple(fused_attention_mma.TILES[d])))]


def served_tiles(target_name: str, variant: Variant, d: int, tuned=()) -> list:
    """The tiles a bundle ships for (variant, head size d): [(max_n or None, Tile, TunedTile or None)] in order of
    max_n, the last serving any N (module doc). A tuned tile of `tuned` for this variant and head size serves up to
    its N; of two tuned at one N, the faster per batch element."""
    mine = {}
    for t in sorted((t for t in tuned if t.variant == variant and t.head_size == d),
                    key=lambda t: t.run_secs / max(1, t.sizes[0] * t.sizes[1])):
        mine.setdefault(t.n, t)
    served = [(n, t.tile, t) for n, t in sorted(mine.items())]
    longest = served[-1][0] if served else 0
    served += [(max_n, tile, None) for max_n, tile in default_tiles(target_name, d)
               if max_n is None or max_n > longest]
    merged = []
    for max_n, tile, t in served:
        if merged and merged[-1][1] == tile:  # one kernel serves both: the later's bound
            t = merged.pop()[2] or t
        merged.append((max_n, tile, t))
    return merged  # the shipped tiles end with one for any N, so the last serves any N
