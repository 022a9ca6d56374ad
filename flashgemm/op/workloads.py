"""Workloads: an op instance at ONNX level (shapes, dtype, attributes) with a name.

Presets are the seed models' attention-score shapes and the W1-W4 of shared/baselines.md; any other
instance is written as a spec string, e.g.

    a=8x12x197x64,b=8x12x197x64,transB=1,scale=0.125,mask=8x1x1x197:bool,dtype=bfloat16

Keys: a, b (shapes, 'x'-separated), transB (0/1), causal (0/1), scale (float), bias (shape),
mask (shape, optionally ':bool' or ':add'; additive by default), dtype (float16|bfloat16), anylength (0/1: the
any-length kernel whose bound is the spec's M x N, flashgemm/bundle/any_length.py), attention (0/1: FusedAttention,
O = P.V with V [.., N, K], instead of FusedGemmSoftmax; a preset too, with flashgemm-tune --attention).
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Optional

from flashgemm.op.variant import ATTENTION_HEAD_SIZES, DTYPES, MASK_KINDS, CanonicalShape, Variant, canonicalize


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    a_shape: tuple
    b_shape: tuple
    dtype: str = "float16"
    trans_b: bool = False
    scale: float = 1.0
    bias_shape: Optional[tuple] = None
    mask_shape: Optional[tuple] = None
    mask_kind: str = "none"  # none | add | bool | fill (op.variant.MASK_KINDS)
    causal: bool = False
    # an any-length workload (flashgemm/bundle/any_length.py): the kernel of the any-length form whose bound is
    # this M x N, tuned at the bound (every call it serves is at most that long: its time there bounds theirs)
    any_length: bool = False
    # FusedAttention (O = P.V, V [.., N, K]: the head size is K) instead of FusedGemmSoftmax: its own database,
    # tuned over its tensor-core tiles (flashgemm/spaces/attention_tiles)
    attention: bool = False

    @property
    def bound(self) -> Optional[tuple]:
        """(Mb, Nb) of an any-length workload, else None."""
        return tuple(self.canonical.sizes[2:4]) if self.any_length else None

    @property
    def variant(self) -> Variant:
        return Variant(self.dtype, self.trans_b, self.bias_shape is not None, self.mask_kind, self.causal)

    @property
    def canonical(self) -> CanonicalShape:
        return canonicalize(self.a_shape, self.b_shape, self.trans_b, self.bias_shape, self.mask_shape)

    @property
    def dir_name(self) -> str:
        """Directory under flashgemm/databases/<target>/ (dtype included: one database per dtype)."""
        return f"{self.name}{'.attention' if self.attention else ''}.{DTYPES[self.dtype]}"

    def spec(self) -> str:
        parts = [f"a={_fmt(self.a_shape)}", f"b={_fmt(self.b_shape)}", f"transB={int(self.trans_b)}",
                 f"scale={self.scale!r}", f"dtype={self.dtype}", f"causal={int(self.causal)}"]
        if self.bias_shape is not None:
            parts.append(f"bias={_fmt(self.bias_shape)}")
        if self.mask_shape is not None:
            parts.append(f"mask={_fmt(self.mask_shape)}:{self.mask_kind}")
        if self.any_length:
            parts.append("anylength=1")
        if self.attention:
            parts.append("attention=1")
        return ",".join(parts)

    def to_json(self) -> dict:
        return {"name": self.name, "spec": self.spec()}

    def with_dtype(self, dtype: str) -> "Workload":
        return dataclasses.replace(self, dtype=dtype)


def check_attention(wl: Workload) -> Workload:
    """A FusedAttention workload: a head size with the tensor-core kernels, not an any-length one (its kernels take
    any length already). Raises ValueError naming the fix."""
    k = wl.canonical.sizes[4]
    if k not in ATTENTION_HEAD_SIZES:
        raise ValueError(f"attention=1: head size (K) {k} has no FusedAttention tensor-core kernel to tune (head sizes "
                         f"{', '.join(map(str, ATTENTION_HEAD_SIZES))}); its calls run the generic kernel")
    if wl.any_length:
        raise ValueError("attention=1 with anylength=1: FusedAttention's kernels serve any length already; drop "
                         "anylength")
    return wl


def _fmt(shape) -> str:
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


def _shape(text: str) -> tuple:
    if text == "scalar":
        return ()
    try:
        dims = tuple(int(d) for d in text.split("x"))
    except ValueError:
        raise ValueError(f"bad shape {text!r}: write dims separated by 'x', e.g. 8x12x197x64") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"bad shape {text!r}: negative dim")
    return dims


def _heads(batch, heads, m, n, k, **kw):
    """Attention scores Q.K^T: A = Q [batch, heads, M, K], B = K [batch, heads, N, K] (transB)."""
    return dict(a_shape=(batch, heads, m, k), b_shape=(batch, heads, n, k), trans_b=True, scale=k ** -0.5, **kw)


PRESETS = {
    # W1: BERT-Large attention scores, batch 16 x 16 heads, seq 512 (256 x 512 x 512 x 64)
    "bert-large": _heads(16, 16, 512, 512, 64),
    # W2: ViT-B/16 at 224x224 (197 tokens), batch 16 x 12 heads (192 x 197 x 197 x 64)
    "vit-b16": _heads(16, 12, 197, 197, 64),
    # W3: Whisper (large) encoder, 1500 frames, batch 8 x 20 heads (160 x 1500 x 1500 x 64)
    "whisper-enc": _heads(8, 20, 1500, 1500, 64),
    # W4: LM head, 4096 tokens x hidden 4096 -> 32000-word vocabulary (hidden . W_vocab)
    "lm-head": dict(a_shape=(4096, 4096), b_shape=(4096, 32000)),
    # Corner cases (issue 6's benchmark): decoding (one query row over 2048 keys), K = 1, a 65536-long row
    "decode-m1": _heads(8, 16, 1, 2048, 64),
    "k1": dict(a_shape=(64, 256, 1), b_shape=(64, 1, 256)),
    "long-row-n65536": _heads(1, 8, 64, 65536, 64),
    # The CPU demo and CI: small enough to tune in seconds on 2 cores. Padding mask per sequence.
    "demo": _heads(2, 4, 64, 64, 32, mask_shape=(2, 1, 1, 64), mask_kind="bool"),
}
ALIASES = {"w1": "bert-large", "w2": "vit-b16", "w3": "whisper-enc", "w4": "lm-head"}
DEFAULT_DTYPE = {"lm-head": "bfloat16"}


def preset(name: str, dtype: Optional[str] = None) -> Workload:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in PRESETS:
        raise KeyError(name)
    return Workload(name=key, dtype=dtype or DEFAULT_DTYPE.get(key, "float16"), **PRESETS[key])


def parse(text: str, dtype: Optional[str] = None) -> Workload:
    """A preset name or a spec string -> Workload. Raises ValueError with what is wrong."""
    text = text.strip()
    if "=" not in text:
        try:
            return preset(text, dtype)
        except KeyError:
            raise ValueError(f"unknown workload {text!r} (use a preset: {', '.join(sorted(PRESETS))} or w1..w4; "
                             f"or a spec like 'a=2x64x32,b=2x32x64,dtype=float16')") from None
    fields = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"bad workload field {part!r}: expected key=value")
        fields[key.strip()] = value.strip()
    unknown = set(fields) - {"a", "b", "transB", "causal", "scale", "bias", "mask", "dtype", "name", "anylength",
                             "attention"}
    if unknown:
        raise ValueError(f"unknown workload keys {sorted(unknown)}; known: a, b, transB, causal, scale, bias, mask, "
                         f"dtype, anylength, attention")
    if "a" not in fields or "b" not in fields:
        raise ValueError("a workload spec needs at least a=<shape> and b=<shape>")
    mask_shape, mask_kind = None, "none"
    if "mask" in fields:
        shape_text, _, kind = fields["mask"].partition(":")
        mask_shape, mask_kind = _shape(shape_text), (kind or "add")
        if mask_kind not in MASK_KINDS[1:]:
            raise ValueError(f"mask kind must be one of {', '.join(MASK_KINDS[1:])}, got {mask_kind!r}")
    wl_dtype = dtype or fields.get("dtype", "float16")
    if wl_dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {wl_dtype!r}")
    wl = Workload(
        name="",
        a_shape=_shape(fields["a"]), b_shape=_shape(fields["b"]), dtype=wl_dtype,
        trans_b=fields.get("transB", "0") == "1", scale=float(fields.get("scale", 1.0)),
        bias_shape=_shape(fields["bias"]) if "bias" in fields else None,
        mask_shape=mask_shape, mask_kind=mask_kind, causal=fields.get("causal", "0") == "1",
        any_length=fields.get("anylength", "0") == "1", attention=fields.get("attention", "0") == "1")
    wl.canonical  # noqa: B018  (validates the shapes; raises ShapeError, a ValueError)
    if wl.attention:
        check_attention(wl)
    digest = hashlib.sha1(wl.spec().encode()).hexdigest()[:8]  # scale and masks differ at equal sizes
    name = fields.get("name") or f"custom-{'x'.join(str(s) for s in wl.canonical.sizes)}-{digest}"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ValueError(f"workload name {name!r}: use letters, digits, '.', '_' and '-'")
    return dataclasses.replace(wl, name=name)
