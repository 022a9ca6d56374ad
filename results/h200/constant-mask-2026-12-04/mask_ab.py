"""A/B: ViT-B/16 b16 (TorchScript export) rewritten --attention by the tree before (.gpuold) and after dropping the
constant mask, timed alternately on one bundle. argv: bundle out_json"""
import json, subprocess, sys, time
from pathlib import Path
import numpy as np

if __name__ == "__main__":
    bundle, out = sys.argv[1], Path(sys.argv[2])
    from flashgemm.ort import models
    work = Path("/tmp/vm"); work.mkdir(exist_ok=True)
    src = work / models.file_name("vit-b16", False, "float16")
    if not src.exists():
        models.export("vit-b16", work, dtype="float16", batch=16, device="cuda", log=lambda *a: None)
    code = "import sys; from flashgemm.ort import rewrite; print(rewrite.rewrite_file(sys.argv[1], sys.argv[2], attention=True).text().splitlines()[0])"
    for tag, cwd in (("old", ".gpuold"), ("new", ".")):
        r = subprocess.run([sys.executable, "-c", code, str(src), str(work / f"{tag}.onnx")], cwd=cwd, capture_output=True, text=True)
        print(tag, r.stdout.strip()[:300], r.stderr[-300:] if r.returncode else "", flush=True)
    import onnxruntime as ort
    from benchmarks.model_bench import _inputs, device_binding, providers, time_runs
    from flashgemm.ort.session import session_options
    _, feeds = _inputs("vit-b16", 16, seed=1)
    paths = {"original": src, "old": work / "old.onnx", "new": work / "new.onnx"}
    sess = {k: ort.InferenceSession(str(p), session_options(bundle) if k != "original" else ort.SessionOptions(),
                                    providers=providers("cuda")) for k, p in paths.items()}
    outs = {k: s.run(None, feeds)[0].astype(np.float64) for k, s in sess.items()}
    binds = {k: device_binding(s, feeds) for k, s in sess.items()}
    times = {k: [] for k in sess}
    for r in range(5):
        for k in (list(sess) if r % 2 == 0 else list(sess)[::-1]):
            times[k].append(time_runs(sess[k], binds[k], 5, 30)["median_ms"])
    res = {k: {"median_ms": sorted(v)[2], "rounds_ms": v, "max_abs_diff_vs_original": float(np.abs(outs[k] - outs["original"]).max())} for k, v in times.items()}
    for k, v in res.items():
        print(f"{k:9s} {v['median_ms']:.3f} ms  x{res['original']['median_ms'] / v['median_ms']:.3f}  diff {v['max_abs_diff_vs_original']:.2e}  rounds {[round(x, 3) for x in v['rounds_ms']]}")
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": res}, indent=1))
