"""Seed models as ONNX: BERT-Large, ViT-B/16, the Whisper (large-v2) encoder, MPNet, DeBERTa-v3 and a decoder
(Llama 3.2 1B), exported with PyTorch + transformers.

    from flashgemm.ort.models import export
    path = export("bert-large", out_dir="build/models", dtype="float16", batch=1)

No model hub: every config is written out below from the published config.json of the named checkpoint, and the
weights are a seeded random init (`torch.manual_seed(seed)`, default 0, then transformers' own `_init_weights`). The
numbers are therefore meaningless; the *graphs* (ops, shapes, dtypes, where scale and mask enter attention) are the
real ones, which is what the rewrite (flashgemm/ort/rewrite/) and the kernels care about.

Export path: `attn_implementation="eager"` and the TorchScript exporter (`torch.onnx.export(..., dynamo=False)`,
opset 17), which writes attention as explicit ops. What the exports look like (transformers 5.23, torch 2.13):

    BERT     MatMul(Transpose(Q,[0,2,1,3]), Transpose(K,[0,2,3,1])) -> Mul(c = head_dim^-0.5) -> Add(mask [B,1,S,S])
             -> Softmax(-1)
    ViT      MatMul(Transpose(Q,[0,2,1,3]), Transpose(K,[0,2,3,1])) -> Mul(c) -> Softmax(-1)
             (ViT asks for softmax(dtype=float32).to(fp16); the exporter writes Softmax(-1) in the model's dtype
             followed by Cast(float32) -> Cast(float16), so the softmax itself is float16 - the Casts are kept)
    Whisper  Q = Mul(q_proj(x), c) -> Reshape -> Transpose([0,2,1,3]);  MatMul(Q, Transpose(K,[0,2,3,1])) -> Mul(1.0)
             -> Softmax(-1)   (Whisper scales q before the product; the encoder has no mask)

exporter="dynamo", attention="sdpa" gives what torch.onnx.export's default (dynamo=True) writes for transformers'
default attention (torch 2.13, transformers 5.24, opset 20):

    BERT     MatMul(Mul(Transpose(Reshape(Q)), c^0.5), Mul(Reshape(Transpose(Reshape(K, [-1, n, d]), [0,2,1]),
             [b, h, d, n]), c^0.5)) -> Add(Where(mask, 0, -65504)) -> Softmax(-1) -> Where(IsNaN(P), 0, P)
             -> MatMul(., V)
    (the rewrite folds both scales and the 3-D transpose of K; the NaN rows' zeroing keeps P: FusedAttention would
    leave them NaN. With attention="eager" the dynamo export's attention is the TorchScript one's and fuses whole.)

BERT's mask is transformers' 4-D additive mask [B, 1, S, S] (0 or dtype-min: -65504 in float16, -3.4e38 in float32)
built from the 2-D `attention_mask` input; the example input used for tracing has padding, so the mask is kept.

MPNet (all-mpnet-base-v2's config, a sentence-embedding model): its scores get a relative position bias, gathered
from a table [32 buckets, heads] and broadcast to [B, h, S, S], and then the padding mask, two Adds before the
Softmax (transformers has no SDPA attention for it: eager only, by either exporter).

DeBERTa-v3 (deberta-v3-base's config): disentangled attention, its scores a batched MatMul on [batch * heads,
sequence, head size] views plus the content-to-position and position-to-content terms (gathered from the queries'
and keys' products with the relative position embeddings), reshaped to [B, h, S, S] and masked by
Where(~mask, lowest, scores) with the mask [B, 1, S, S] (eager only, by either exporter).

Llama 3.2 1B: the decoder stack (LlamaModel, no LM head, no KV cache: a prefill's hidden states) at seq 2048 and
batch 4, the causal prefill's attention shape (32 heads x 2048 x 2048 x 64). Its attention differs from the
encoders' in three ways the rewrite meets: Q and K pass the rotary embedding after their Transpose to [B, h, S, d];
K and V are repeated from 8 key/value heads to the 32 query heads (Expand + Reshape); and the mask is the causal
triangle and the padding in one, Where(causal & padding, 0, lowest) of [B, 1, S, S] (both exporters), which
FusedAttention reads as a bias of the scores' shape (not as its causal flag: a query row whose every key up to itself
is padding attends to all keys at the lowest logit in the export, to none past itself with the flag).

Llama 3.2 1B's generation step ("llama-3.2-1b-step"): the same decoder stack after a key/value cache of 2047 tokens
(inputs past_key_L / past_value_L [B, 8, 2047, 64], random), one new token a sequence, the first sequence
left-padded: each site is one query row against 2048 keys, its mask the padding row (the causal rule leaves every
cached key visible to the new token). Tiny: a cache of 15.

Whisper: the *large-v2* config (d_model 1280, 32 layers, 20 heads of 64, 80 mel bins x 3000 frames -> 1500 positions).
Why: its attention-score shape is workload W3 (flashgemm/op/workloads.py: 20 heads x 1500 x 1500 x 64) and its input
is the 80 x 3000 log-mel. large-v3 differs only in num_mel_bins=128 (the attention is identical); base (512 wide,
8 heads) would not match W3.

`tiny=True` gives the same architectures at toy size for CI (2 layers, hidden 64, 2 heads of 32, short sequences):
BERT and MPNet seq 16, ViT 32x32 images with 8x8 patches (17 tokens), Whisper 48 mel frames -> 24 positions, Llama
seq 16 with its 2 query heads sharing one key/value head.

IR version: the exporter writes IR 8 for opset 17; anything above 9 is re-stamped to 9 (ORT 1.31 loads up to 9 here,
see model.py). Models over 2 GB (Whisper large-v2 in float32) are saved with one external data file next to them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Optional

import onnx

OPSET = 17  # the TorchScript exporter's; the dynamo exporter writes its own default (recorded in metadata_props)
MAX_IR_VERSION = 9
DTYPES = ("float32", "float16")
EXPORTERS = ("torchscript", "dynamo")  # torch.onnx.export(dynamo=False | True)
ATTENTIONS = ("eager", "sdpa")  # transformers' attn_implementation
DEFAULT_SEED = 0


# ------------------------------------------------------------------------------------------------- configs
# Published config.json values (the checkpoint in parentheses); the dropout probabilities do not matter in eval mode.

def _bert_large() -> dict:  # (google-bert/bert-large-uncased)
    return dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                intermediate_size=4096, hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12,
                pad_token_id=0)


def _bert_tiny() -> dict:
    return dict(_bert_large(), vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=128, max_position_embeddings=32)


def _bert_small() -> dict:  # (sentence-transformers/all-MiniLM-L6-v2: 6 layers, 12 heads of 32)
    return dict(_bert_large(), hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)


def _vit_b16() -> dict:  # (google/vit-base-patch16-224)
    return dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.02,
                layer_norm_eps=1e-12, image_size=224, patch_size=16, num_channels=3, qkv_bias=True)


def _vit_tiny() -> dict:
    return dict(_vit_b16(), hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                image_size=32, patch_size=8)


def _whisper_large_v2() -> dict:  # (openai/whisper-large-v2; the encoder's fields plus what WhisperConfig needs)
    return dict(vocab_size=51865, num_mel_bins=80, d_model=1280, encoder_layers=32, encoder_attention_heads=20,
                encoder_ffn_dim=5120, decoder_layers=32, decoder_attention_heads=20, decoder_ffn_dim=5120,
                activation_function="gelu", max_source_positions=1500, max_target_positions=448, dropout=0.0,
                attention_dropout=0.0, activation_dropout=0.0, init_std=0.02, scale_embedding=False,
                pad_token_id=50257, bos_token_id=50257, eos_token_id=50257, decoder_start_token_id=50258)


def _whisper_tiny() -> dict:
    return dict(_whisper_large_v2(), d_model=64, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=128,
                decoder_layers=2, decoder_attention_heads=2, decoder_ffn_dim=128, max_source_positions=24)


def _mpnet_base() -> dict:  # (sentence-transformers/all-mpnet-base-v2)
    return dict(vocab_size=30527, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                max_position_embeddings=514, initializer_range=0.02, layer_norm_eps=1e-5,
                relative_attention_num_buckets=32, pad_token_id=1, bos_token_id=0, eos_token_id=2)


def _mpnet_tiny() -> dict:
    return dict(_mpnet_base(), vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=128, max_position_embeddings=34)


def _deberta_v3_base() -> dict:  # (microsoft/deberta-v3-base)
    return dict(vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                max_position_embeddings=512, type_vocab_size=0, initializer_range=0.02, layer_norm_eps=1e-7,
                relative_attention=True, max_relative_positions=-1, position_buckets=256, norm_rel_ebd="layer_norm",
                share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False, pad_token_id=0)


def _deberta_tiny() -> dict:
    return dict(_deberta_v3_base(), vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=128, max_position_embeddings=64, position_buckets=8)


def _llama_3_2_1b() -> dict:  # (meta-llama/Llama-3.2-1B)
    return dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, head_dim=64, hidden_act="silu",
                max_position_embeddings=131072, initializer_range=0.02, rms_norm_eps=1e-5, rope_theta=500000.0,
                rope_scaling=dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                                  original_max_position_embeddings=8192, rope_type="llama3"),
                attention_bias=False, mlp_bias=False, tie_word_embeddings=True, bos_token_id=128000,
                eos_token_id=128001)


def _llama_tiny() -> dict:  # grouped-query attention kept: 2 heads of 32 share one key/value head
    return dict(_llama_3_2_1b(), vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=64,
                rope_scaling=dict(_llama_3_2_1b()["rope_scaling"], original_max_position_embeddings=32),
                bos_token_id=1, eos_token_id=2)


# ------------------------------------------------------------------------------------------------- models

@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    checkpoint: str  # whose published config the full-size model uses
    config: Callable[[], dict]
    tiny_config: Callable[[], dict]
    build: Callable  # (config dict, attention implementation) -> torch module taking the example inputs
    inputs: Callable  # (config dict, batch, seed) -> {name: tensor}
    output: str
    layers_key: str  # config key: number of self-attention layers (= attention sites)
    seq_inputs: tuple = ()  # inputs whose axis 1 is the sequence (symbolic with dynamic_seq); () = length fixed


    def layers(self, tiny: bool) -> int:
        return (self.tiny_config if tiny else self.config)()[self.layers_key]


def _token_model(model: str, config: str, init: Optional[dict] = None, call: Optional[dict] = None) -> Callable:
    """The build function of a transformers model taking input_ids and attention_mask: (config dict, attention) ->
    a module returning its last_hidden_state. model, config: the transformers classes' names; init: the model
    constructor's keywords beside the config; call: the forward's beside the inputs."""
    def build(cfg: dict, attention: str = "eager"):
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415

        class TokenModel(torch.nn.Module):
            def __init__(self):
                super().__init__()
                config_cls, model_cls = getattr(transformers, config), getattr(transformers, model)
                self.model = model_cls(config_cls(**cfg, attn_implementation=attention), **(init or {}))

            def forward(self, input_ids, attention_mask):
                return self.model(input_ids=input_ids, attention_mask=attention_mask, **(call or {})).last_hidden_state

        return TokenModel()
    return build


_bert = _token_model("BertModel", "BertConfig", init={"add_pooling_layer": False})
_mpnet = _token_model("MPNetModel", "MPNetConfig", init={"add_pooling_layer": False})
_deberta = _token_model("DebertaV2Model", "DebertaV2Config")
# the decoder stack without the LM head: a prefill's hidden states, no KV cache
_llama = _token_model("LlamaModel", "LlamaConfig", call={"use_cache": False})


def key_value_cache(config, past):
    """A transformers cache holding each layer's keys and values, `past` = (keys 0, values 0, keys 1, ...): how an
    export takes a decoder's cache as graph inputs."""
    import transformers  # noqa: PLC0415
    cache = transformers.DynamicCache(config=config)
    for layer in range(len(past) // 2):
        cache.update(past[2 * layer], past[2 * layer + 1], layer)
    return cache


def _decoder_step(model: str, config: str) -> Callable:
    """The build function of a transformers decoder's generation step: (config dict, attention) -> a module taking
    input_ids [B, new], attention_mask [B, past + new] and each layer's cached keys and values ([B, key/value heads,
    past, head size], past_key_L, past_value_L), returning the new tokens' last_hidden_state."""
    def build(cfg: dict, attention: str = "eager"):
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415

        class DecoderStep(torch.nn.Module):
            def __init__(self):
                super().__init__()
                config_cls, model_cls = getattr(transformers, config), getattr(transformers, model)
                self.model = model_cls(config_cls(**cfg, attn_implementation=attention))

            def forward(self, input_ids, attention_mask, *past):
                return self.model(input_ids=input_ids, attention_mask=attention_mask,
                                  past_key_values=key_value_cache(self.model.config, past),
                                  use_cache=True).last_hidden_state

        return DecoderStep()
    return build


_llama_step = _decoder_step("LlamaModel", "LlamaConfig")


def _step_inputs(cfg: dict, batch: int, past: int, gen):
    """One new token a sequence after a cache of `past` (random keys and values); the first sequence left-padded by
    a quarter of the cache, as a batch of prompts of unequal lengths is."""
    import torch  # noqa: PLC0415
    kv_shape = (batch, cfg["num_key_value_heads"], past, cfg["head_dim"])
    mask = torch.ones(batch, past + 1, dtype=torch.int64)
    mask[0, :max(1, past // 4)] = 0
    out = {"input_ids": torch.randint(1, cfg["vocab_size"], (batch, 1), generator=gen), "attention_mask": mask}
    for layer in range(cfg["num_hidden_layers"]):
        out[f"past_key_{layer}"] = _randn(kv_shape, gen)
        out[f"past_value_{layer}"] = _randn(kv_shape, gen)
    return out


def _bert_inputs(cfg: dict, batch: int, seq: int, gen):
    import torch  # noqa: PLC0415
    ids = torch.randint(1, cfg["vocab_size"], (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[0, seq - max(1, seq // 4):] = 0  # padding in the example: transformers keeps the mask in the trace
    return {"input_ids": ids, "attention_mask": mask}


def _vit(cfg: dict, attention: str = "eager"):
    import torch  # noqa: PLC0415
    from transformers import ViTConfig, ViTModel  # noqa: PLC0415

    class ViT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = ViTModel(ViTConfig(**cfg, attn_implementation=attention), add_pooling_layer=False)

        def forward(self, pixel_values):
            return self.model(pixel_values=pixel_values).last_hidden_state

    return ViT()


def _whisper(cfg: dict, attention: str = "eager"):
    import torch  # noqa: PLC0415
    from transformers import WhisperConfig  # noqa: PLC0415
    from transformers.models.whisper.modeling_whisper import WhisperEncoder  # noqa: PLC0415

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = WhisperEncoder(WhisperConfig(**cfg, attn_implementation=attention))

        def forward(self, input_features):
            return self.model(input_features=input_features).last_hidden_state

    return Encoder()


def _token_spec(name: str, checkpoint: str, config: Callable, tiny_config: Callable, build: Callable,
                seq: int) -> ModelSpec:
    """A model taking input_ids and attention_mask (_token_model) at length `seq` (16 tiny), padded as _bert_inputs."""
    return ModelSpec(name, checkpoint, config, tiny_config, build,
                     lambda cfg, b, gen, tiny: _bert_inputs(cfg, b, 16 if tiny else seq, gen), "last_hidden_state",
                     "num_hidden_layers", seq_inputs=("input_ids", "attention_mask"))


SPECS = {
    "bert-large": _token_spec("bert-large", "google-bert/bert-large-uncased", _bert_large, _bert_tiny, _bert, 512),
    "bert-small": _token_spec("bert-small", "sentence-transformers/all-MiniLM-L6-v2", _bert_small, _bert_tiny, _bert,
                              128),
    "vit-b16": ModelSpec(
        "vit-b16", "google/vit-base-patch16-224", _vit_b16, _vit_tiny, _vit,
        lambda cfg, b, gen, tiny: {"pixel_values": _randn((b, cfg["num_channels"], cfg["image_size"],
                                                            cfg["image_size"]), gen)},
        "last_hidden_state", "num_hidden_layers"),
    "whisper-enc": ModelSpec(
        "whisper-enc", "openai/whisper-large-v2", _whisper_large_v2, _whisper_tiny, _whisper,
        lambda cfg, b, gen, tiny: {"input_features": _randn((b, cfg["num_mel_bins"],
                                                              2 * cfg["max_source_positions"]), gen)},
        "last_hidden_state", "encoder_layers"),
    "mpnet-base": _token_spec("mpnet-base", "sentence-transformers/all-mpnet-base-v2", _mpnet_base, _mpnet_tiny,
                              _mpnet, 384),
    "deberta-v3-base": _token_spec("deberta-v3-base", "microsoft/deberta-v3-base", _deberta_v3_base, _deberta_tiny,
                                   _deberta, 512),
    "llama-3.2-1b": _token_spec("llama-3.2-1b", "meta-llama/Llama-3.2-1B", _llama_3_2_1b, _llama_tiny, _llama, 2048),
    "llama-3.2-1b-step": ModelSpec(
        "llama-3.2-1b-step", "meta-llama/Llama-3.2-1B", _llama_3_2_1b, _llama_tiny, _llama_step,
        lambda cfg, b, gen, tiny: _step_inputs(cfg, b, 15 if tiny else 2047, gen), "last_hidden_state",
        "num_hidden_layers"),
}
NAMES = tuple(SPECS)
SEED_MODELS = ("bert-large", "vit-b16", "whisper-enc")  # the benchmarked three ("all" in the commands)


def _randn(shape, gen):
    import torch  # noqa: PLC0415
    return torch.randn(*shape, generator=gen)


def file_name(name: str, tiny: bool, dtype: str, dynamic_batch: bool = False, dynamic_seq: bool = False,
              exporter: str = "torchscript", attention: str = "eager") -> str:
    """<name>[-tiny][-dynb | -dyns | -dyn][-dynamo][-sdpa].<f32|f16>.onnx: -dynb symbolic batch, -dyns symbolic
    sequence, -dyn both; -dynamo and -sdpa where the exporter and the attention are not the defaults."""
    dyn = {(True, False): "-dynb", (False, True): "-dyns", (True, True): "-dyn"}.get((dynamic_batch, dynamic_seq), "")
    how = ("-dynamo" if exporter == "dynamo" else "") + ("-sdpa" if attention == "sdpa" else "")
    return f"{name}{'-tiny' if tiny else ''}{dyn}{how}.{ {'float32': 'f32', 'float16': 'f16'}[dtype] }.onnx"


def example_inputs(name: str, tiny: bool = False, dtype: str = "float32", batch: int = 1, seed: int = DEFAULT_SEED
                   ) -> dict:
    """The inputs the export traced with, as numpy arrays (floats in `dtype`): reproducible from the seed."""
    import torch  # noqa: PLC0415
    spec = SPECS[name]
    cfg = (spec.tiny_config if tiny else spec.config)()
    gen = torch.Generator().manual_seed(seed + 1)
    out = {}
    for k, v in spec.inputs(cfg, batch, gen, tiny).items():
        out[k] = (v.to(getattr(torch, dtype)) if v.is_floating_point() else v).numpy()
    return out


def export(name: str, out_dir: os.PathLike = "build/models", tiny: bool = False, dtype: str = "float32",
           batch: int = 1, dynamic_batch: bool = False, seed: int = DEFAULT_SEED, log=print,
           device: str = "cpu", dynamic_seq: bool = False, exporter: str = "torchscript",
           attention: str = "eager") -> Path:
    """Build the model (seeded random init), export it to ONNX and return the file's path.
    exporter: "torchscript" (opset 17) or "dynamo" (torch.onnx.export(dynamo=True), its default opset); attention:
    transformers' attn_implementation, "eager" (explicit ops) or "sdpa" (scaled_dot_product_attention, which the
    dynamo exporter writes with Q and K^T each scaled by sqrt(scale) and P's NaN rows zeroed).
    device: where the exporter's trace runs the model ("cuda" is much faster for float16 at real sizes);
    the weights and the graph are the same either way. dynamic_batch / dynamic_seq: symbolic axis 0 'batch' of every
    input and the output / symbolic axis 1 'sequence' of the token inputs and the output (BERT only: ViT's and
    Whisper's lengths follow from their fixed image and mel sizes); they name the file (file_name)."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    if name not in SPECS:
        raise ValueError(f"unknown model {name!r}; one of {', '.join(NAMES)}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if exporter not in EXPORTERS or attention not in ATTENTIONS:
        raise ValueError(f"exporter must be one of {EXPORTERS} and attention one of {ATTENTIONS}, got {exporter!r} "
                         f"and {attention!r}")
    spec = SPECS[name]
    if dynamic_seq and not spec.seq_inputs:
        raise ValueError(f"{name} has no dynamic sequence axis: its length is fixed by its input size "
                         f"(drop --dynamic-seq; --dynamic-batch works)")
    cfg = (spec.tiny_config if tiny else spec.config)()
    torch.manual_seed(seed)
    model = spec.build(cfg, attention).eval().to(getattr(torch, dtype)).to(device)
    feeds = example_inputs(name, tiny, dtype, batch, seed)
    args = tuple(torch.from_numpy(v).to(device) for v in feeds.values())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / file_name(name, tiny, dtype, dynamic_batch, dynamic_seq, exporter, attention)
    log(f"exporting {name}{' (tiny)' if tiny else ''} {dtype} batch {batch}: config of {spec.checkpoint}"
        f"{' shrunk' if tiny else ''}, random init seed {seed} ...")
    dynamic_axes = {}
    for k in [*feeds, spec.output]:
        axes = ({0: "batch"} if dynamic_batch else {}) | \
               ({1: "sequence"} if dynamic_seq and k in (*spec.seq_inputs, spec.output) else {})
        if axes:
            dynamic_axes[k] = axes
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice and trace warnings (shape checks)
        raw = Path(tmp) / "model.onnx"
        if exporter == "dynamo":
            dims = {}  # the same axis names as dynamic_axes, as torch.export dims
            shapes = {k: {a: dims.setdefault(n, torch.export.Dim(n)) for a, n in axes.items()}
                      for k, axes in dynamic_axes.items() if k in feeds}
            torch.onnx.export(model, args, str(raw), input_names=list(feeds), output_names=[spec.output],
                              dynamo=True, dynamic_shapes=shapes or None)
        else:
            torch.onnx.export(model, args, str(raw), input_names=list(feeds), output_names=[spec.output],
                              opset_version=OPSET, dynamo=False, do_constant_folding=True,
                              dynamic_axes=dynamic_axes or None)
        proto = onnx.load(str(raw))  # loads any external data the exporter wrote (> 2 GB) into memory
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    if proto.ir_version > MAX_IR_VERSION:
        proto.ir_version = MAX_IR_VERSION
    meta = {
        "flashgemm.model": name, "flashgemm.tiny": str(int(tiny)), "flashgemm.dtype": dtype,
        "flashgemm.batch": "dynamic" if dynamic_batch else str(batch),
        **({"flashgemm.sequence": "dynamic"} if dynamic_seq else {}),
        "flashgemm.config_of": spec.checkpoint + (" (shrunk: tiny)" if tiny else ""),
        "flashgemm.config": json.dumps(cfg, sort_keys=True),
        "flashgemm.weights": f"random init, torch.manual_seed({seed}); not the checkpoint's weights",
        "flashgemm.attention_layers": str(cfg[spec.layers_key]),
        "flashgemm.exporter": f"torch {torch.__version__} "
                              f"{'dynamo exporter (dynamo=True)' if exporter == 'dynamo' else 'TorchScript exporter (dynamo=False)'}"
                              f", opset {opset}; transformers {transformers.__version__}, attn_implementation={attention}",
    }
    del proto.metadata_props[:]
    for k, v in meta.items():
        proto.metadata_props.add(key=k, value=v)
    tmp_path = path.with_name(path.name + ".tmp")
    weight_bytes = sum(len(t.raw_data) for t in proto.graph.initializer)  # ByteSize() itself fails above 2 GB
    if weight_bytes > 2**31 - 2**26:  # protobuf's 2 GB limit, with margin for the graph
        data = path.name + ".data"
        onnx.save(proto, str(tmp_path), save_as_external_data=True, all_tensors_to_one_file=True, location=data,
                  size_threshold=1024)
    else:
        onnx.save(proto, str(tmp_path))
    os.replace(tmp_path, path)
    onnx.checker.check_model(str(path))
    log(f"{path}  ({path.stat().st_size / 2**20:.1f} MiB, IR {proto.ir_version}, "
        f"{cfg[spec.layers_key]} attention layers)")
    return path


def attention_layers(name: str, tiny: bool = False) -> int:
    return SPECS[name].layers(tiny)


def describe(name: str, tiny: bool = False) -> str:
    spec = SPECS[name]
    return f"{name}: config of {spec.checkpoint}{' shrunk to tiny' if tiny else ''}: " + json.dumps(
        (spec.tiny_config if tiny else spec.config)(), sort_keys=True)


def metadata(path: os.PathLike) -> Optional[dict]:
    m = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in m.metadata_props}
