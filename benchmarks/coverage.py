"""Which transformers architectures the rewrite fuses: tiny random-init models of each, exported by both of PyTorch's
exporters, rewritten with --attention and run on ONNX Runtime's CPU EP against the original.

    python -m benchmarks.coverage --out results/cpu/coverage.json [--arch mpnet --arch t5-encoder ...]

Needs torch and transformers (pip install '.[models]'); no GPU, no model hub: each architecture is its transformers
class on a tiny config (2 layers, hidden 64, 2 heads of 32; grouped key/value heads where the architecture has them).
Encoder-decoders (T5, BART, Whisper) run their decoder on 8 target tokens beside (no cache): their decoder's causal
self-attention and cross-attention are sites too. Decoders with a cache ("-cache": GPT-2, Llama, Qwen2, Mistral,
Phi-3) take 16 new tokens after a key/value cache of 8 (inputs past_key_L and past_value_L, symbolic past axis), as a
generation loop's prompt continuation or step runs them; their attention_mask spans cache and new tokens.
Per architecture and exporter ("dynamo": torch.onnx.export(dynamo=True) with transformers' SDPA attention where the
architecture has it, else eager; "torchscript": dynamo=False, eager attention), symbolic batch and sequence axes: the
Softmax nodes of the export, the sites the rewrite fused (FusedAttention or FusedGemmSoftmax) and why it left the
others, what the op reads besides Q, K and V (its bias and additive mask, as narrow as the rewrite made them; a
decoder's causal rule inside the bias, for which every key is computed), and the largest |rewritten - original| of the
output at batch 2, length 16, with padding at the end of one sequence and at the start of the other, and with a sequence
padded out entirely. Where a bias holds the causal rule, the model is rewritten with --decoder-causal too and compared
at every token (with causal_fill the same function) and at the tokens whose rows keep a key. A table (.md) is written
beside the JSON.
"""
from __future__ import annotations

import argparse
import json
import re
import tempfile
import warnings
from pathlib import Path

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
SEQ, BATCH, IMAGE, AUDIO, TARGET, MELS, PAST = 16, 2, 32, 400, 8, 8, 8


def _architectures() -> dict:
    """name -> (builder of the torch module, input kind: "text" | "vision" | "audio" | "text2text" | "speech2text":
    encoder-decoders, run on decoder_input_ids beside, without a cache | "text-cache": a decoder after a cache)."""
    import transformers as tf  # noqa: PLC0415

    def text(cls, cfg_cls, **kw):
        return lambda: cls(cfg_cls(vocab_size=128, max_position_embeddings=64, **{**TINY, **kw})), "text"

    def vision(cls, cfg_cls, **kw):
        return lambda: cls(cfg_cls(image_size=IMAGE, patch_size=8, **{**TINY, **kw})), "vision"

    bart = dict(vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64)
    found = {
        "bert": text(tf.BertModel, tf.BertConfig),
        "roberta": text(tf.RobertaModel, tf.RobertaConfig),
        "xlm-roberta": text(tf.XLMRobertaModel, tf.XLMRobertaConfig),
        "distilbert": (lambda: tf.DistilBertModel(tf.DistilBertConfig(
            vocab_size=128, dim=64, n_layers=2, n_heads=2, hidden_dim=128, max_position_embeddings=64)), "text"),
        "albert": text(tf.AlbertModel, tf.AlbertConfig, embedding_size=32),
        "electra": text(tf.ElectraModel, tf.ElectraConfig, embedding_size=32),
        # DeBERTa-v3's configuration (v3 is DebertaV2's code): disentangled attention (c2p, p2c) summed into the scores
        "deberta-v2": text(tf.DebertaV2Model, tf.DebertaV2Config, relative_attention=True, pos_att_type=["p2c", "c2p"],
                           position_buckets=8, max_relative_positions=-1, norm_rel_ebd="layer_norm",
                           share_att_key=True, position_biased_input=False),
        "mpnet": text(tf.MPNetModel, tf.MPNetConfig),
        "clip-text": text(tf.CLIPTextModel, tf.CLIPTextConfig),
        "t5-encoder": (lambda: tf.T5EncoderModel(tf.T5Config(
            vocab_size=128, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2)), "text"),
        "bart-encoder": (lambda: tf.BartModel(tf.BartConfig(**bart)).get_encoder(), "text"),
        "t5": (lambda: tf.T5Model(tf.T5Config(vocab_size=128, d_model=64, d_kv=32, d_ff=128, num_layers=2,
                                              num_decoder_layers=2, num_heads=2)), "text2text"),
        "bart": (lambda: tf.BartModel(tf.BartConfig(**bart)), "text2text"),
        "whisper": (lambda: tf.WhisperModel(tf.WhisperConfig(
            vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=SEQ,
            max_target_positions=64, num_mel_bins=8, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            decoder_start_token_id=1)), "speech2text"),
        "gpt2": (lambda: tf.GPT2Model(tf.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=2,
                                                    n_positions=64)), "text"),
        "llama": text(tf.LlamaModel, tf.LlamaConfig, num_key_value_heads=1),
        "qwen2": text(tf.Qwen2Model, tf.Qwen2Config, num_key_value_heads=1),
        "mistral": text(tf.MistralModel, tf.MistralConfig, num_key_value_heads=1, sliding_window=8),
        "phi3": text(tf.Phi3Model, tf.Phi3Config, num_key_value_heads=2, pad_token_id=0),
        "vit": vision(tf.ViTModel, tf.ViTConfig),
        "deit": vision(tf.DeiTModel, tf.DeiTConfig),
        "beit": vision(tf.BeitModel, tf.BeitConfig, use_relative_position_bias=True),
        "dinov2": vision(tf.Dinov2Model, tf.Dinov2Config),
        "clip-vision": vision(tf.CLIPVisionModel, tf.CLIPVisionConfig),
        "wav2vec2": (lambda: tf.Wav2Vec2Model(tf.Wav2Vec2Config(
            **TINY, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=2)), "audio"),
    }
    for name in ("gpt2", "llama", "qwen2", "mistral", "phi3"):
        found[f"{name}-cache"] = (found[name][0], "text-cache")
    return found


def _build(builder, attention: str):
    """The model in float16 eval mode with transformers' attention `attention` where it has it, else eager: (module,
    the attention it runs)."""
    import torch  # noqa: PLC0415
    torch.manual_seed(0)
    model = builder()
    try:
        model.set_attn_implementation(attention)
    except (ValueError, ImportError):  # the architecture has no such attention
        model.set_attn_implementation("eager")
    return model.eval().half(), model.config._attn_implementation or "eager"


def _export(name: str, builder, kind: str, exporter: str, out: Path) -> tuple:
    import torch  # noqa: PLC0415

    from flashgemm.ort.models import key_value_cache  # noqa: PLC0415
    model, attention = _build(builder, "sdpa" if exporter == "dynamo" else "eager")

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *x):
            if kind == "text":
                return self.model(input_ids=x[0], attention_mask=x[1]).last_hidden_state
            if kind == "text-cache":
                return self.model(input_ids=x[0], attention_mask=x[1],
                                  past_key_values=key_value_cache(self.model.config, x[2:]),
                                  use_cache=True).last_hidden_state
            if kind == "text2text":
                return self.model(input_ids=x[0], attention_mask=x[1], decoder_input_ids=x[2],
                                  use_cache=False).last_hidden_state
            if kind == "speech2text":
                return self.model(input_features=x[0], decoder_input_ids=x[1], use_cache=False).last_hidden_state
            key = "pixel_values" if kind == "vision" else "input_values"
            return self.model(**{key: x[0]}).last_hidden_state

    target = {"decoder_input_ids": {0: "batch", 1: "target"}}
    if kind == "text-cache":
        with torch.no_grad():  # the cache's per-layer [batch, key/value heads, past, head size] from one short run
            probe = model(input_ids=torch.randint(3, 128, (BATCH, 2)), use_cache=True).past_key_values
        names, args = ["input_ids", "attention_mask"], [torch.randint(3, 128, (BATCH, SEQ)),
                                                        torch.ones(BATCH, PAST + SEQ, dtype=torch.int64)]
        args[1][1, :3] = 0  # left padding in the trace: transformers keeps the mask
        axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"}}
        for layer, cached in enumerate(probe.layers):
            for part, t in (("key", cached.keys), ("value", cached.values)):
                names.append(f"past_{part}_{layer}")
                args.append(torch.randn(BATCH, t.shape[1], PAST, t.shape[3]).half())
                axes[names[-1]] = {0: "batch", 2: "past"}
        args = tuple(args)
    elif kind in ("text", "text2text"):
        names, args = ["input_ids", "attention_mask"], (torch.randint(3, 128, (BATCH, SEQ)),
                                                        torch.ones(BATCH, SEQ, dtype=torch.int64))
        args[1][0, -4:] = 0  # padding in the trace: transformers keeps the mask
        axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
        if kind == "text2text":
            names, args, axes = names + ["decoder_input_ids"], args + (torch.randint(3, 128, (BATCH, TARGET)),), \
                axes | target
    elif kind == "speech2text":
        names = ["input_features", "decoder_input_ids"]
        args = (torch.randn(BATCH, MELS, 2 * SEQ).half(), torch.randint(3, 128, (BATCH, TARGET)))
        axes = {"input_features": {0: "batch"}} | target
    else:
        shape = (BATCH, 3, IMAGE, IMAGE) if kind == "vision" else (BATCH, AUDIO)
        names, args = ["pixel_values" if kind == "vision" else "input_values"], (torch.randn(*shape).half(),)
        axes = {names[0]: {0: "batch"}}
    path = out / f"{name}-{exporter}.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            dims = {}
            shapes = tuple({a: dims.setdefault(n, torch.export.Dim(n)) for a, n in axes[k].items()} for k in names)
            torch.onnx.export(Wrapped(), args, str(path), input_names=names, output_names=["out"], dynamo=True,
                              dynamic_shapes=(shapes,))  # (forward's one *x argument)
        else:
            torch.onnx.export(Wrapped(), args, str(path), input_names=names, output_names=["out"], opset_version=17,
                              dynamo=False, dynamic_axes={**axes, "out": {0: "batch"}})
    return path, attention


def _feeds(sess, padded_out: bool, seed: int = 0) -> dict:
    cache = any(i.name.startswith("past_") for i in sess.get_inputs())
    import numpy as np  # noqa: PLC0415
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        if i.name in ("input_ids", "decoder_input_ids"):
            feeds[i.name] = rng.integers(3, 128, (BATCH, SEQ if i.name == "input_ids" else TARGET)).astype(np.int64)
        elif i.name == "attention_mask" and cache:
            mask = np.ones((BATCH, PAST + SEQ), np.int64)
            mask[1, :3] = 0  # left padding, in the cache
            feeds[i.name] = mask
        elif i.name == "attention_mask":
            mask = np.ones((BATCH, SEQ), np.int64)
            mask[0, -4:] = 0  # right padding
            mask[1, :3] = 0  # left padding
            if padded_out:
                mask[1] = 0
            feeds[i.name] = mask
        elif i.name.startswith("past_"):
            feeds[i.name] = rng.standard_normal((BATCH, i.shape[1], PAST, i.shape[3])).astype(np.float16)
        else:
            shape = {"pixel_values": (BATCH, 3, IMAGE, IMAGE), "input_values": (BATCH, AUDIO),
                     "input_features": (BATCH, MELS, 2 * SEQ)}[i.name]
            feeds[i.name] = rng.standard_normal(shape).astype(np.float16)
    return feeds


def _reads(details: dict) -> str:
    """What a fused site gives the op besides Q, K and V, from the rewrite's report: its bias and additive mask with
    the shapes the op reads (narrowed where the rewrite narrowed them), and whether the bias holds a decoder's causal
    rule (then every key is computed)."""
    dims = lambda shape: "[" + ", ".join(str(d) for d in shape) + "]"  # noqa: E731
    dropped = details.get("dropped", ())
    parts = []
    if details.get("bias") and "bias" not in dropped:
        parts.append(f"bias {details.get('narrowed') or dims(details['bias_shape'])}"
                     + (" (causal rule inside)" if "causal_in_bias" in details else ""))
    if "mask_shape" in details and "mask" not in dropped:
        parts.append(f"mask {details.get('mask_narrowed') or dims(details['mask_shape'])}")
    return " + ".join(parts) or "none"


def check(name: str, exporter: str, bundle: Path, work: Path, log=print) -> dict:
    """Export, rewrite and compare one architecture by one exporter: a result row (see the module docstring)."""
    import numpy as np  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415
    from flashgemm.ort.rewrite import count_ops, rewrite_file  # noqa: PLC0415
    from flashgemm.ort.session import run, session_options  # noqa: PLC0415
    builder, kind = _architectures()[name]
    row = {"architecture": name, "exporter": exporter}
    try:
        src, row["attention"] = _export(name, builder, kind, exporter, work)
    except Exception as e:  # noqa: BLE001  (the exporter's failure is the result)
        cause = e.__cause__ or e  # torch.onnx wraps torch.export's error, whose first line says what failed
        first = re.sub(r"\x1b\[[0-9;]*m", "", str(cause)).strip().splitlines()
        row["export_error"] = f"{type(cause).__name__}: {(first[0] if first else '')[:160]}"
        log(f"{name} ({exporter}): export failed: {row['export_error']}")
        return row
    dst = src.with_suffix(".attention.onnx")
    report = rewrite_file(src, dst, log=lambda *a: None, attention=True)
    row.update(softmax=count_ops(src, "Softmax"), fused_attention=count_ops(dst, "FusedAttention", "flashgemm"),
               fused_p=count_ops(dst, "FusedGemmSoftmax", "flashgemm"),
               left={s.softmax: s.reasons for s in report.left_alone},
               not_matched=report.other_softmax, kept_p=[list(x) for x in report.attention_left],
               reads=sorted({_reads(site.details) for site in report.fused}))
    original = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    rewritten = ort.InferenceSession(str(dst), session_options(bundle), providers=["CPUExecutionProvider"])
    for key, padded_out in (("max_abs_diff", False), ("max_abs_diff_padded_out", True)):
        if kind not in ("text", "text2text") and padded_out:
            continue
        feeds = _feeds(original, padded_out)
        a, b = (run(s, feeds)[0].astype(np.float64) for s in (original, rewritten))
        row[key] = float(np.abs(a - b).max())
        row[key.replace("max_abs_diff", "nan")] = [bool(np.isnan(a).any()), bool(np.isnan(b).any())]
    if any("causal_in_bias" in site.details for site in report.fused):
        # --decoder-causal: the same at every token (causal_fill), and at the tokens whose rows keep a key
        causal_dst = src.with_suffix(".attention-causal.onnx")
        causal = rewrite_file(src, causal_dst, log=lambda *a: None, attention=True, decoder_causal=True)
        feeds = _feeds(original, False)
        a = run(original, feeds)[0].astype(np.float64)
        b = run(ort.InferenceSession(str(causal_dst), session_options(bundle), providers=["CPUExecutionProvider"]),
                feeds)[0].astype(np.float64)
        kept = np.ones(a.shape[:2], bool)
        if kind in ("text", "text-cache"):  # a token keeps a key once one is kept at or before its position
            kept = (np.maximum.accumulate(feeds["attention_mask"], axis=1) > 0)[:, -a.shape[1]:]
        row["decoder_causal"] = {"sites": causal.causal_taken, "causal_fill": causal.causal_exact,
                                 "max_abs_diff": float(np.abs(a - b).max()),
                                 "max_abs_diff_kept": float(np.abs(a - b)[kept].max())}
    log(f"{name} ({exporter}, {row['attention']}): {row['softmax']} Softmax -> {row['fused_attention']} "
        f"FusedAttention + {row['fused_p']} FusedGemmSoftmax; max |diff| {row['max_abs_diff']:.3g}"
        + (f", padded out {row['max_abs_diff_padded_out']:.3g}" if "max_abs_diff_padded_out" in row else ""))
    return row


def _decoder_causal(row: dict) -> str:
    dc = row.get("decoder_causal")
    return "–" if dc is None else f"{dc['sites']} ({dc['causal_fill']} causal_fill), {dc['max_abs_diff']:.3g}"


def markdown(rows: list, env: dict) -> str:
    lines = [f"Tiny random-init models, float16, rewritten with --attention, ONNX Runtime CPU EP ({env['torch']}, "
             f"{env['transformers']}, onnxruntime {env['onnxruntime']}, commit {env['commit']}, {env['date']}).", "",
             "| architecture | exporter (attention) | Softmax | FusedAttention | FusedGemmSoftmax | the op reads | "
             "max abs diff | padded out | --decoder-causal: sites, max abs diff | not fused: why |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "export_error" in r:
            lines.append(f"| {r['architecture']} | {r['exporter']} | – | – | – | – | – | – | – | "
                         f"export failed: "
                         f"{r['export_error']} |")
            continue
        why = "; ".join([*{w for ws in r["left"].values() for w in ws},
                         *(["the scores are not MatMul -> [scale] -> [Add [-> Add]] -> Softmax"]
                           * bool(r["not_matched"])),
                         *{why for _, why in r["kept_p"]}])
        pad = r.get("max_abs_diff_padded_out")
        lines.append(f"| {r['architecture']} | {r['exporter']} ({r['attention']}) | {r['softmax']} | "
                     f"{r['fused_attention']} | {r['fused_p']} | {'; '.join(r.get('reads', [])) or '–'} | "
                     f"{r['max_abs_diff']:.3g} | "
                     f"{'–' if pad is None else format(pad, '.3g')} | {_decoder_causal(r)} | {why or '–'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    import datetime  # noqa: PLC0415
    from benchmarks import commit_id  # noqa: PLC0415
    from flashgemm.bundle.kernel_library import export_bundle  # noqa: PLC0415
    from flashgemm.cli.usage import ArgumentParser  # noqa: PLC0415
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="results JSON (a .md table is written beside it)")
    ap.add_argument("--arch", action="append", help="an architecture (repeatable; default: all)")
    ap.add_argument("--exporter", action="append", choices=("dynamo", "torchscript"), help="default: both")
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415
    except ImportError:
        ap.error("torch and transformers are not installed", fix="pip install '.[models]'")
    import onnxruntime as ort  # noqa: PLC0415
    known = _architectures()
    for a in args.arch or ():
        if a not in known:
            ap.error(f"--arch {a} is not one of the architectures", fix=f"one of {', '.join(known)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "bundle"
        print("building the CPU bundle (every FusedAttention and FusedGemmSoftmax variant) ...")
        export_bundle(bundle, "llvm", attention=True, log=lambda *a: None)
        for name in args.arch or known:
            for exporter in args.exporter or ("dynamo", "torchscript"):
                work = Path(tmp) / f"{name}-{exporter}"
                work.mkdir()
                rows.append(check(name, exporter, bundle, work))
    env = {"torch": f"torch {torch.__version__}", "transformers": f"transformers {transformers.__version__}",
           "onnxruntime": ort.__version__, "commit": commit_id(),
           "date": datetime.date.today().isoformat()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": env, "results": rows}, indent=1))
    out.with_suffix(".md").write_text(markdown(rows, env))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
