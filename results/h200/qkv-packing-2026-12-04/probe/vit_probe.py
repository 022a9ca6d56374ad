"""Probe: where the rewritten TorchScript ViT-B/16 b16 spends its GPU time, and what packing Q/K/V's projections
into one GEMM would save. argv: bundle out_dir"""
import json, subprocess, sys, os, time
from pathlib import Path
import numpy as np

def main():
    bundle, out = sys.argv[1], Path(sys.argv[2])
    from flashgemm.ort import models, rewrite
    work = Path("/tmp/vit"); work.mkdir(exist_ok=True)
    src = work / models.file_name("vit-b16", False, "float16")
    if not src.exists():
        models.export("vit-b16", work, dtype="float16", batch=16, device="cuda")
    ours = work / "ours.onnx"
    rewrite.rewrite_file(src, ours, attention=True)
    res = {}
    # torch: the three projections against one packed GEMM (+ bias), fp16 [3152, 768]
    import torch
    x = torch.randn(3152, 768, device="cuda", dtype=torch.float16)
    ws = [torch.randn(768, 768, device="cuda", dtype=torch.float16) for _ in range(3)]
    bs = [torch.randn(768, device="cuda", dtype=torch.float16) for _ in range(3)]
    wp = torch.cat(ws, 1).contiguous(); bp = torch.cat(bs)
    def sep():
        return [torch.add(x @ w, b) for w, b in zip(ws, bs)]
    def sep_mm():
        return [x @ w for w in ws]
    def packed():
        return torch.add(x @ wp, bp)
    def packed_mm():
        return x @ wp
    def packed_split():
        y = torch.add(x @ wp, bp)
        return [t.contiguous() for t in y.split(768, 1)]
    for name, f in [("three_mm_add", sep), ("three_mm", sep_mm), ("packed_mm_add", packed), ("packed_mm", packed_mm),
                    ("packed_mm_add_split", packed_split)]:
        for _ in range(20): f()
        torch.cuda.synchronize()
        ts = []
        for r in range(5):
            e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
            e0.record()
            for _ in range(200): f()
            e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1) / 200 * 1e3)
        res[name] = sorted(ts)[2]
        print(f"{name:22s} {res[name]:7.2f} us", flush=True)
    # ncu: every kernel of one Run of each model, after warm-up Runs
    for tag, p in (("original", src), ("ours", ours)):
        log = out / f"ncu-{tag}.csv"
        cmd = ["ncu", "--profile-from-start", "off", "--metrics", "gpu__time_duration.sum", "--csv",
               "--log-file", str(log), sys.executable, __file__, "--once", bundle, str(p)]
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        print(tag, "ncu rc", r.returncode, f"{time.time() - t0:.0f} s", r.stderr[-500:], flush=True)
    (out / "vit-probe.json").write_text(json.dumps(res, indent=1))

def once():
    bundle, path = sys.argv[2], sys.argv[3]
    import onnxruntime as ort, torch
    from flashgemm.ort.session import session_options
    from benchmarks.model_bench import _inputs, device_binding, providers
    so = session_options(bundle) if "ours" in path else ort.SessionOptions()
    s = ort.InferenceSession(path, so, providers=providers("cuda"))
    _, feeds = _inputs("vit-b16", 16, seed=1)
    b = device_binding(s, feeds)
    for _ in range(5): s.run_with_iobinding(b)
    torch.cuda.profiler.start()
    s.run_with_iobinding(b)
    torch.cuda.profiler.stop()

if __name__ == "__main__":
    once() if sys.argv[1] == "--once" else main()
