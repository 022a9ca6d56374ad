"""The rewrite's report: each candidate site, fused (with what the op was given) or left alone (and why)."""
from __future__ import annotations

import dataclasses
from typing import Optional

import onnx_ir as ir


@dataclasses.dataclass
class Site:
    softmax: str  # the Softmax node's name (its output name if the node has none)
    fused: bool = False
    reasons: list = dataclasses.field(default_factory=list)  # why it was left alone
    details: dict = dataclasses.field(default_factory=dict)  # what the fused node got


@dataclasses.dataclass
class Report:
    model: str = ""
    dtype: str = "?"
    sites: dict = dataclasses.field(default_factory=dict)  # candidate sites, by Softmax name
    other_softmax: list = dataclasses.field(default_factory=list)  # Softmax nodes no pattern matched
    transb_folded: int = 0
    qscale_folded: int = 0
    kscale_folded: int = 0
    attention: Optional[int] = None  # sites turned into FusedAttention (None: not asked for, rewrite_model(attention=))
    attention_left: list = dataclasses.field(default_factory=list)  # (site, why P was kept)
    heads_transposes: int = 0  # Transposes around FusedAttention absorbed into its BSNH views (fold_heads_transposes)
    qkv_packed: int = 0  # FusedAttention nodes whose Q, K, V projections became one MatMul (pack_qkv_projections)
    constant_masks_dropped: int = 0  # all-zero biases / all-true masks made of constants (drop_constant_masks)
    masks_narrowed: int = 0  # biases / masks given to the op without an always-true broadcasting term (narrow_masks)
    causal_taken: int = 0  # sites given a decoder mask's causal rule as the causal flag (causal_masks, take=True)
    causal_exact: int = 0  # FusedAttention nodes of causal_taken given causal_fill (exact_causal)
    static_terms_folded: int = 0  # added terms of unknown shape but fixed value made initializers (fold_static_terms)
    heads_lifted: int = 0  # sites computed on [batch * heads, ...] views, lifted to 4-D first (lift_batched_heads)
    decoder_causal: str = "exact"  # rewrite_model's decoder_causal (pipeline.DECODER_CAUSAL)
    notes: list = dataclasses.field(default_factory=list)  # e.g. why symbolic shape inference did not run

    def site(self, name: str) -> Site:
        return self.sites.setdefault(name, Site(name))

    @property
    def fused(self) -> list:
        return [s for s in self.sites.values() if s.fused]

    @property
    def left_alone(self) -> list:
        return [s for s in self.sites.values() if not s.fused]

    def text(self) -> str:
        lines = [f"{self.model}: {len(self.fused)} site(s) fused, {len(self.left_alone)} candidate site(s) left "
                 f"alone (scores dtype {self.dtype}); transB folded at {self.transb_folded}, "
                 f"query-side scale folded at {self.qscale_folded}"
                 f"{f', key-side at {self.kscale_folded}' if self.kscale_folded else ''}"
                 + (f"; a bias of zeros or an all-true mask, made of constants, dropped at "
                    f"{self.constant_masks_dropped}" if self.constant_masks_dropped else "")
                 + (f"; a bias or mask narrowed (an always-true broadcasting term dropped) at {self.masks_narrowed}"
                    if self.masks_narrowed else "")
                 + (f"; an added term of fixed value (unknown shape) folded into a constant at "
                    f"{self.static_terms_folded}" if self.static_terms_folded else "")
                 + (f"; scores of [batch * heads, ...] views lifted to [batch, heads, ...] at {self.heads_lifted}"
                    if self.heads_lifted else "")]
        for s in self.fused:
            d = s.details
            terms = {"summed": " (two added terms summed into the bias)",
                     "a term of zeros left out": " (an added term of zeros left out)"}.get(d.get("bias_terms"), "")
            if d.get("mask_fill") == 1:
                terms += f" mask=bool {d['mask_shape']} (Where(mask, scores, lowest): mask_fill=1)"
            elif "mask_fill" in d:
                terms += f" mask=bool {d['mask_shape']} (Where(mask, scores, lowest), the masked P zeroed after)"
            elif "mask_shape" in d:
                terms = f" mask=add {d['mask_shape']} (a second added term)"
            lines.append(f"  fused   {s.softmax}: scale={d['scale']:.8g} transB={d['transB']} "
                         f"bias={'yes ' + str(d['bias_shape']) if d['bias'] else 'no'}{terms}"
                         f"{' (query scale ' + format(d['qscale'], '.8g') + ' folded)' if 'qscale' in d else ''}"
                         f"{' (key scale ' + format(d['kscale'], '.8g') + ' folded)' if 'kscale' in d else ''}"
                         f"{' (narrowed to ' + d['narrowed'] + ')' if 'narrowed' in d else ''}"
                         f"{' (mask narrowed to ' + d['mask_narrowed'] + ')' if 'mask_narrowed' in d else ''}"
                         f"{''.join(f' ({x} dropped: zeros made of constants)' for x in d.get('dropped', ()))}"
                         f"{_causal_text(d)}")
        for s in self.left_alone:
            lines.append(f"  left    {s.softmax}: {'; '.join(dict.fromkeys(s.reasons))}")
        symbolic = [s.softmax for s in self.fused if not all(isinstance(d, int) for d in s.details.get("lengths", ()))]
        if symbolic:
            # a CUDA bundle serves a length with a fast kernel only when one was built for it; every other length
            # goes to the generic kernel, far slower than the unfused graph: say so where the user decides to fuse
            lines.append(f"  note    {len(symbolic)} fused site(s) have symbolic lengths (M or N): on the GPU, a CUDA "
                         f"bundle's any-length kernels serve them up to length 2048 (default schedules for the usual "
                         f"head sizes and mask kinds; flashgemm-build --from-model THIS_MODEL adds its own kinds, "
                         f"flashgemm-tune --from-model THIS_MODEL --lengths ... tunes them); longer ones, or a bundle "
                         f"built with --any-length none, run on the generic kernel, much slower than the original graph")
        causal = [s.softmax for s in self.fused if "causal_in_bias" in s.details and "causal_taken" not in s.details]
        if causal:
            # a decoder's export adds its causal and padding masks as one tensor of the scores' shape: say what the
            # op does with it, since a causal kernel would skip the half of the keys past the diagonal
            lines.append(f"  note    {len(causal)} fused site(s) read a decoder's causal and padding masks as one bias "
                         f"of the scores' shape (the causal rule inside it): the op reads that bias at every element "
                         f"and computes every key, about twice a causal kernel's work; "
                         + ("--decoder-causal off keeps it" if self.decoder_causal == "off" else
                            "FusedAttention sites whose fill is the dtype's lowest take it exactly (--attention: "
                            "causal_fill), --decoder-causal all takes it at the others too (a row whose visible keys "
                            "are all padding then attends to those keys alone, not every key as in the export)"))
        if self.causal_exact:
            lines.append(f"  note    {self.causal_exact} FusedAttention site(s) take a decoder mask's causal rule as "
                         f"the causal flag with causal_fill: the keys past the diagonal at the mask's lowest, as "
                         f"there, the same function at every row; they are skipped for every row tile that sees a "
                         f"kept key (--decoder-causal off reads the mask instead)")
        if self.causal_taken > self.causal_exact:
            inexact = self.causal_taken - self.causal_exact
            lines.append(f"  note    {inexact} fused site(s) take a decoder mask's causal rule as the causal flag "
                         f"(--decoder-causal all): a row whose visible keys are all padding (a "
                         f"left-padded sequence's first tokens, a sequence of padding alone) attends to its visible "
                         f"keys, where the original attends to every key at the mask's fill; every other row is the "
                         f"same")
        if self.decoder_causal == "all" and self.fused and not self.causal_taken:
            lines.append("  note    --decoder-causal took nothing: no fused site's bias holds a causal rule that masks "
                         "a key (one the rewrite does not recognize, as a sliding window's or one summed into a "
                         "position bias, stays in the bias, read exactly)")
        if self.attention is not None:
            lines.append(f"  attention: {self.attention} fused site(s) became FusedAttention "
                         f"(P never stored); {self.heads_transposes} Transpose(s) between heads and sequence around "
                         f"them absorbed (read and written in place: attribute bsnh); Q, K and V projections packed into "
                 f"one MatMul at {self.qkv_packed}")
            lines += [f"  kept P  {site}: {why}" for site, why in self.attention_left]
        lines += [f"  note    {n}" for n in self.notes]
        if self.other_softmax:
            lines.append(f"  {len(self.other_softmax)} other Softmax node(s), not fed by MatMul -> [Mul|Div] -> "
                         f"[Add [-> Add]] -> Softmax: {', '.join(self.other_softmax)}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"model": self.model, "dtype": self.dtype, "fused": len(self.fused),
                "left_alone": len(self.left_alone), "transb_folded": self.transb_folded,
                "qscale_folded": self.qscale_folded, "kscale_folded": self.kscale_folded, "attention": self.attention,
                "attention_left": [list(x) for x in self.attention_left], "heads_transposes": self.heads_transposes,
                "qkv_packed": self.qkv_packed,
                "constant_masks_dropped": self.constant_masks_dropped, "masks_narrowed": self.masks_narrowed,
                "decoder_causal": self.decoder_causal, "causal_taken": self.causal_taken,
                "causal_exact": self.causal_exact,
                "heads_lifted": self.heads_lifted, "static_terms_folded": self.static_terms_folded,
                "notes": self.notes,
                "sites": [dataclasses.asdict(s) for s in self.sites.values()], "other_softmax": self.other_softmax}


def _causal_text(d: dict) -> str:
    if "causal_taken" in d:
        return (f" (the causal rule taken as causal=1{' with causal_fill' if d.get('causal_fill') else ''}; the bias "
                f"left: {d['causal_taken']})")
    return " (the bias holds the causal rule: every key computed)" if "causal_in_bias" in d else ""


def node_name(node: ir.Node) -> str:
    return node.name or node.outputs[0].name or f"<{node.op_type}>"


def site_of(report: Optional[Report], node: ir.Node) -> Optional[Site]:
    """The site of a fused node: FusedGemmSoftmax:<softmax>, or the FusedAttention node made of it (<...>_attention)."""
    if report is None or not node.name.startswith("FusedGemmSoftmax:"):
        return None
    name = node.name.split(":", 1)[1]
    return report.sites.get(name) or report.sites.get(name.removesuffix("_attention"))
