"""FusedAttention (O = softmax(scale*Q*K^T + ...) * V, P never stored) against the peers, op level, on one GPU.

    python -m benchmarks.attention --attention-bundle DIR --bundle DIR [--dtype float16,bfloat16] --out OUT.json

Shapes: W1-W3's attention (Q, K, V [B, H, L, D]), a causal decoder prefill, and decoder generation steps (one
query a sequence against a cache of N keys, every key visible: Q [B, H, 1, D], K and V [B, H, N, D]). Systems, each checked against an
FP32 torch reference before it is timed (benchmarks.peers.time_cuda, inputs and outputs in device memory):
  sdpa_flash, sdpa_efficient, sdpa_cudnn   torch's scaled_dot_product_attention, one backend each
  ours_attention                          flashgemm::FusedAttention in ONNX Runtime (CUDA EP, IOBinding), the
                                          kernel the --attention-bundle serves
  ours_scores_matmul                      flashgemm::FusedGemmSoftmax + ORT's MatMul(P, V) in one ORT graph, the
                                          --bundle's kernels (what `flashgemm-rewrite` without --attention runs)
  ort_unfused                             ORT's MatMul + Mul + Softmax + MatMul
  ort_mha                                 ORT's com.microsoft.MultiHeadAttention (its [B, L, H*D] layout, the
                                          inputs rearranged once before timing; unidirectional for causal)
  ours_attention_queued, ort_mha_queued   the same sessions on torch's stream (the CUDA EP's user_compute_stream)
                                          with the run option disable_synchronize_execution_providers=1: each Run
                                          queues its kernels and returns, as torch's calls do, without waiting for
                                          the GPU at its end; the gap to the plain rows is ORT's end-of-Run sync
  ours_attention_graph                    the queued session with the CUDA EP's enable_cuda_graph: after its first
                                          Runs each Run replays the captured kernels (ORT's per-node host work
                                          left out; what a short kernel's Run costs beyond it)
--mask adds an additive padding mask (0 where kept, the dtype's lowest where not; batch element i pads its last
(i % 4) N / 8 columns): "padding" as BERT's exports give it, [B, 1, 1, N]; "full" the same mask materialized as
[B, 1, M, N] (as transformers' 4-D masks are); on the causal shape beside the causal flag (SDPA, which takes no
mask with is_causal, gets the two as one mask). "decoder" (the causal shape only): the causal triangle and the
padding in one [B, 1, M, N] mask and no causal flag, as a decoder's export adds them and the rewrite passes them on.
FusedAttention and FusedGemmSoftmax take the mask as their bias (what `flashgemm-rewrite` makes of an added mask),
the unfused graph as an Add, SDPA as attn_mask (its flash backend takes none), ORT's MultiHeadAttention as
key_padding_mask (padding) or attention_bias (full, decoder).
Every ORT session runs with --ort-threads intra-op threads (default 1: with the CUDA EP the pool serves only CPU
kernels; 0 keeps ORT's default, a thread a physical core, which moved ours by under 1 % on the H200:
results/h200/full-build-2026-12-04).
TFLOP/s counts 4*B*H*M*N*D (half of it causal).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from benchmarks.peers import gpu_info, peak_tflops, time_in_rounds

# name: (B, H, M = N, D, causal)
SHAPES = {"W1": (16, 16, 512, 64, False), "W2": (16, 12, 197, 64, False), "W3": (8, 20, 1500, 64, False),
          "prefill": (4, 32, 2048, 128, True)}
# name: (B, H, N, D): one query a sequence against N cached keys, a decoder's generation step (its causal rule
# leaves every key visible); "decode-b1" one sequence, whose B x H blocks of one query tile leave most SMs idle
DECODE_SHAPES = {"decode": (4, 32, 2048, 128), "decode-b1": (1, 32, 4096, 128)}


def shape_sizes(name: str) -> tuple:
    """(B, H, M, N, D, causal) of a shape of SHAPES or DECODE_SHAPES."""
    if name in SHAPES:
        b, h, length, d, causal = SHAPES[name]
        return b, h, length, length, d, causal
    b, h, n, d = DECODE_SHAPES[name]
    return b, h, 1, n, d, False
MASKS = ("none", "padding", "full", "decoder")
SYSTEMS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "ort_mha", "ort_mha_queued", "ours_attention",
           "ours_attention_queued", "ours_attention_graph", "ours_scores_matmul", "ort_unfused")


def _cuda_session(model, so, queued: bool, threads: int, cuda_graph: bool = False):
    """An ORT CUDA EP session of `model`, and the run options its Run takes. queued: on torch's current stream,
    Run not synchronizing the EP at its end (the GPU work of back-to-back calls queues as torch's does).
    threads: the session's intra-op threads (0: ORT's default). cuda_graph: the EP's enable_cuda_graph (after its
    first Runs each Run replays the kernels captured, with the same bound addresses)."""
    import onnxruntime as ort  # noqa: PLC0415
    import torch  # noqa: PLC0415
    options = {"enable_cuda_graph": "1"} if cuda_graph else {}
    if queued:
        stream = torch.cuda.current_stream().cuda_stream
        if not stream:  # ORT takes a null stream for none, and would run on a stream of its own, unsynchronized
            raise RuntimeError("a queued ORT session needs a torch stream other than the default (bench sets one)")
        options["user_compute_stream"] = str(stream)
    provider = ("CUDAExecutionProvider", options)
    so = so or ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=[provider])
    ro = ort.RunOptions()
    if queued:
        ro.add_run_config_entry("disable_synchronize_execution_providers", "1")
    return sess, ro


def _sdpa(backend_name):
    import torch  # noqa: PLC0415
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415
    backend = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
               "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}[backend_name]

    def prepare(q, k, v, scale, causal, mask=None):
        if causal and mask is not None:  # SDPA takes no mask beside is_causal: the two as one mask
            m, n = q.shape[2], k.shape[2]
            above = torch.ones(m, n, dtype=torch.bool, device=q.device).triu(n - m + 1)
            mask, causal = mask.masked_fill(above, float("-inf")), False

        def run():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                                        scale=scale)
        return run
    return prepare


def padding_mask(kind: str, b: int, m: int, n: int, dtype, device: str = "cuda"):
    """--mask's additive mask (module doc) as a torch tensor on the GPU: [B, 1, 1, N] ("padding") or [B, 1, M, N]
    ("full"; "decoder": the causal triangle too, bottom-right aligned); None for "none"."""
    import torch  # noqa: PLC0415
    if kind == "none":
        return None
    keep = torch.arange(n, device=device)[None, :] < torch.tensor([n - (i % 4) * (n // 8) for i in range(b)],
                                                                   device=device)[:, None]
    keep = keep.view(b, 1, 1, n)
    if kind == "decoder":
        keep = keep & torch.ones(m, n, dtype=torch.bool, device=device).tril(n - m)
    mask = torch.where(keep, 0.0, torch.finfo(dtype).min).to(dtype)
    return mask if kind == "padding" else mask.expand(b, 1, m, n).contiguous()


def _graph(kind: str, dtype: str, shape, scale: float, causal: bool, bias_shape=None, keys=None):
    """ONNX graphs of Q [B, H, M, D] (`shape`), K, V [B, H, keys (default M), D] [, bias] -> O: 'attention'
    (FusedAttention), 'scores' (FusedGemmSoftmax + MatMul), 'unfused' (the bias an Add before the Softmax)."""
    from onnx import helper  # noqa: PLC0415

    from flashgemm.ort.model import DOMAIN, IR_VERSION, OPSET, elem_type  # noqa: PLC0415
    t = elem_type(dtype)
    b, h, m, d = shape
    n = m if keys is None else keys
    inputs = [helper.make_tensor_value_info(x, t, [b, h, L, d]) for x, L in (("Q", m), ("K", n), ("V", n))]
    bias = [] if bias_shape is None else ["bias"]
    if bias:
        inputs.append(helper.make_tensor_value_info("bias", t, list(bias_shape)))
    attrs = dict(scale=float(scale), transB=1, causal=int(causal))
    if kind == "attention":
        nodes = [helper.make_node("FusedAttention", ["Q", "K", "V"] + bias, ["O"], domain=DOMAIN, **attrs)]
    elif kind == "scores":
        nodes = [helper.make_node("FusedGemmSoftmax", ["Q", "K"] + bias, ["P"], domain=DOMAIN, **attrs),
                 helper.make_node("MatMul", ["P", "V"], ["O"])]
    else:
        if causal:
            raise LookupError("the unfused ORT graph has no causal form here")
        import ml_dtypes  # noqa: PLC0415
        npt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
        c = helper.make_tensor("c", t, [], np.array([scale], npt).view(np.uint16).tobytes(), raw=True)
        nodes = [helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
                 helper.make_node("MatMul", ["Q", "Kt"], ["S"]), helper.make_node("Mul", ["S", "c"], ["Ss"])]
        if bias:
            nodes.append(helper.make_node("Add", ["Ss", "bias"], ["Sb"]))
        nodes += [helper.make_node("Softmax", [nodes[-1].output[0]], ["P"], axis=-1),
                  helper.make_node("MatMul", ["P", "V"], ["O"])]
        graph = helper.make_graph(nodes, "unfused", inputs, [helper.make_tensor_value_info("O", t, [b, h, m, d])],
                                  initializer=[c])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    graph = helper.make_graph(nodes, kind, inputs, [helper.make_tensor_value_info("O", t, [b, h, m, d])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)],
                             ir_version=IR_VERSION)


def _ort_mha(queued: bool, threads: int):
    """ORT's MultiHeadAttention on [B, L, H*D] tensors (Q, K, V rearranged from [B, H, L, D] before timing)."""
    import torch  # noqa: PLC0415
    from onnx import TensorProto, helper  # noqa: PLC0415

    from flashgemm.ort.model import IR_VERSION, OPSET, elem_type  # noqa: PLC0415

    def prepare(q, k, v, scale, causal, mask=None):
        b, h, m, d = q.shape
        n = k.shape[2]
        dtype = "float16" if q.dtype == torch.float16 else "bfloat16"
        t = elem_type(dtype)
        names = ["Q", "K", "V"]
        inputs = [helper.make_tensor_value_info(x, t, [b, L, h * d]) for x, L in zip(names, (m, n, n))]
        extra = {}
        if mask is not None and mask.shape[2] == 1:  # padding: key_padding_mask [B, N], 1 where kept
            extra["key_padding_mask"] = (mask.view(b, n) == 0).to(torch.int32).contiguous()
            names += ["", "key_padding_mask"]
            inputs.append(helper.make_tensor_value_info("key_padding_mask", TensorProto.INT32, [b, n]))
        elif mask is not None:  # full: attention_bias [B, 1, M, N]
            extra["attention_bias"] = mask
            names += ["", "", "attention_bias"]
            inputs.append(helper.make_tensor_value_info("attention_bias", t, list(mask.shape)))
        node = helper.make_node("MultiHeadAttention", names, ["O"], domain="com.microsoft", num_heads=h,
                                scale=float(scale), **({"unidirectional": 1} if causal else {}))
        graph = helper.make_graph([node], "mha", inputs, [helper.make_tensor_value_info("O", t, [b, m, h * d])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                        helper.make_opsetid("com.microsoft", 1)],
                                  ir_version=IR_VERSION)
        sess, ro = _cuda_session(model, None, queued, threads)
        packed = {name: x.transpose(1, 2).reshape(b, x.shape[2], h * d).contiguous()
                  for name, x in (("Q", q), ("K", k), ("V", v))}
        packed.update(extra)
        o = torch.empty((b, m, h * d), dtype=q.dtype, device="cuda")
        io = sess.io_binding()
        for name, x in packed.items():
            io.bind_input(name, "cuda", 0, TensorProto.INT32 if x.dtype == torch.int32 else t, tuple(x.shape),
                          x.data_ptr())
        io.bind_output("O", "cuda", 0, t, tuple(o.shape), o.data_ptr())

        def run():
            sess.run_with_iobinding(io, ro)
            return o.view(b, m, h, d).transpose(1, 2)  # (a view: the check compares it in [B, H, L, D])
        run.keep = packed  # the inputs live as long as the binding
        return run
    return prepare


def _ort(kind: str, bundle, queued: bool, threads: int, cuda_graph: bool = False):
    import torch  # noqa: PLC0415

    from flashgemm.ort.model import elem_type  # noqa: PLC0415
    from flashgemm.ort.session import session_options  # noqa: PLC0415

    def prepare(q, k, v, scale, causal, mask=None):
        dtype = "float16" if q.dtype == torch.float16 else "bfloat16"
        model = _graph(kind, dtype, tuple(q.shape), scale, causal, None if mask is None else tuple(mask.shape),
                       keys=k.shape[2])
        sess, ro = _cuda_session(model, session_options(bundle) if bundle else None, queued, threads, cuda_graph)
        o = torch.empty_like(q)
        io = sess.io_binding()
        et = elem_type(dtype)
        for name, x in (("Q", q), ("K", k), ("V", v)) + ((("bias", mask),) if mask is not None else ()):
            io.bind_input(name, "cuda", 0, et, tuple(x.shape), x.data_ptr())
        io.bind_output("O", "cuda", 0, et, tuple(o.shape), o.data_ptr())

        def run():
            sess.run_with_iobinding(io, ro)
            return o
        return run
    return prepare


def bench(shape_names, dtypes, attention_bundle, bundle, reps: int, rounds: int, log=print,
          systems=SYSTEMS, ort_threads: int = 1, mask: str = "none") -> dict:
    import torch  # noqa: PLC0415
    info = gpu_info()
    peak, _ = peak_tflops(info["gpu"])
    makers = {s: _sdpa(s) for s in SYSTEMS if s.startswith("sdpa")}
    n = ort_threads
    makers["ours_attention"] = _ort("attention", attention_bundle, False, n)
    makers["ours_attention_queued"] = _ort("attention", attention_bundle, True, n)
    makers["ours_attention_graph"] = _ort("attention", attention_bundle, True, n, cuda_graph=True)
    makers["ours_scores_matmul"] = _ort("scores", bundle, False, n)
    makers["ort_unfused"] = _ort("unfused", None, False, n)
    makers["ort_mha"] = _ort_mha(False, n)
    makers["ort_mha_queued"] = _ort_mha(True, n)
    unknown = set(systems) - set(makers)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    makers = {k: makers[k] for k in SYSTEMS if k in systems}
    rows = []
    # a stream of its own: torch's default stream has the handle 0, which ORT's user_compute_stream cannot take
    with torch.cuda.stream(torch.cuda.Stream()):
        for name in shape_names:
            if mask == "decoder" and not shape_sizes(name)[5]:
                log(f"{name}: not causal, no --mask decoder (a decoder's mask is the causal shape's)")
                continue
            rows += _bench_shape(name, dtypes, makers, peak, reps, rounds, log, mask)
    return {"gpu": info, "peak_tflops": peak, "ort_intra_op_threads": ort_threads, "mask": mask, "rows": rows}


def _bench_shape(name: str, dtypes, makers: dict, peak, reps: int, rounds: int, log, mask_kind: str = "none") -> list:
    """The rows of shape `name`, one a dtype: every system checked against the FP32 reference, then timed."""
    import torch  # noqa: PLC0415
    rows = []
    b, h, m, n, d, causal = shape_sizes(name)
    half = causal  # the work a causal prefill needs
    causal = causal and mask_kind != "decoder"  # the decoder's mask holds the causal triangle instead of the flag
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn((b, h, L, d), generator=g, device="cuda", dtype=tdt) for L in (m, n, n))
        mask = padding_mask(mask_kind, b, m, n, tdt)
        scale = 1.0 / d ** 0.5
        s = (q.float() @ k.float().transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(torch.ones(m, n, dtype=torch.bool, device="cuda").triu(n - m + 1), float("-inf"))
        if mask is not None:
            s += mask.float()
        ref = torch.softmax(s, -1) @ v.float()
        del s
        flops = 4 * b * h * m * n * d * (0.5 if half else 1.0)
        calls, row = {}, {"shape": name, "dtype": dtype, "sizes": [b, h, m, n, d], "causal": causal,
                          "mask": mask_kind, "systems": {}}
        for sys_name, make in makers.items():
            try:
                fn = make(q, k, v, scale, causal, mask)
                err = float((fn().float() - ref).abs().max())
            except Exception as e:  # noqa: BLE001  (a backend that does not take this shape or dtype)
                row["systems"][sys_name] = {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                continue
            row["systems"][sys_name] = {"max_abs_err": err}
            calls[sys_name] = fn
        for sys_name, t in time_in_rounds(calls, rounds, reps).items():
            us = t["median_us"]
            row["systems"][sys_name].update(t, tflops=flops / us * 1e-6,
                                            peak_fraction=(flops / us * 1e-6 / peak) if peak else None)
        rows.append(row)
        log(f"{name} {dtype}: " + ", ".join(
            f"{k} {r['median_us']:.1f} us" if "median_us" in r else f"{k} skipped" for k, r in
            row["systems"].items()))
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attention-bundle", required=True, help="a bundle built with flashgemm-build --attention")
    ap.add_argument("--bundle", required=True, help="the bundle of FusedGemmSoftmax's tuned kernels")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list of {', '.join(SHAPES)} (the default), "
                                                             f"{', '.join(DECODE_SHAPES)}")
    ap.add_argument("--dtype", default="float16,bfloat16")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of the systems to run")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ort-threads", type=int, default=1,
                    help="intra-op threads of every ORT session (0: ORT's default, a thread a physical core)")
    ap.add_argument("--mask", choices=MASKS, default="none",
                    help="an additive padding mask, [B, 1, 1, N] or [B, 1, M, N]; or the causal shape's causal and "
                         "padding mask in one [B, 1, M, N] (decoder; see the module doc)")
    ap.add_argument("--out", default=None, help="write the rows here (JSON)")
    args = ap.parse_args(argv)
    unknown = [x for x in args.shapes.split(",") if x not in SHAPES and x not in DECODE_SHAPES]
    if unknown:
        ap.error(f"unknown shapes {unknown}: choose from {', '.join([*SHAPES, *DECODE_SHAPES])}")
    result = bench(args.shapes.split(","), args.dtype.split(","), args.attention_bundle, args.bundle, args.reps,
                   args.rounds, systems=args.systems.split(","), ort_threads=args.ort_threads, mask=args.mask)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
