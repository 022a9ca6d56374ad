"""One Run of BERT-Large b8 (TorchScript export, fp16) in two pipelines, inside cudaProfilerStart/Stop, for
`ncu --profile-from-start off --metrics gpu__time_duration.sum` to time each kernel: ORT's transformers optimizer then
the rewrite (--attention; the optimizer's Attention kept), and the rewrite then the optimizer (opt_level 0).

    python3 order_probe.py BUNDLE WORK prepare            # export and write both models (no profiling)
    ncu ... python3 order_probe.py BUNDLE WORK "optimizer then ours"
"""
import sys
from pathlib import Path

import onnxruntime as ort
import torch

from benchmarks.model_bench import BATCH, _inputs, device_binding, providers
from benchmarks.optimizer_order import _optimize
from flashgemm.ort import models, rewrite
from flashgemm.ort.session import session_options

bundle, work, which = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
name, batch = "bert-large", BATCH["bert-large"]
src = work / models.file_name(name, False, "float16")
paths = {"optimizer then ours": work / "opt.ours.attention.onnx", "ours then optimizer": work / "ours.attention.opt.onnx"}
if which == "prepare":
    if not src.exists():
        models.export(name, work, dtype="float16", batch=batch, device="cuda")
    opt = _optimize(src, work / "opt.onnx", name, 0)
    rewrite.rewrite_file(opt, paths["optimizer then ours"], log=lambda *a: None, attention=True)
    ours = work / "ours.attention.onnx"
    rewrite.rewrite_file(src, ours, log=lambda *a: None, attention=True)
    _optimize(ours, paths["ours then optimizer"], name, 0)
    sys.exit(0)
sess = ort.InferenceSession(str(paths[which]), session_options(bundle), providers=providers("cuda"))
binding = device_binding(sess, _inputs(name, batch, seed=1)[1])
for _ in range(5):
    sess.run_with_iobinding(binding)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
sess.run_with_iobinding(binding)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
