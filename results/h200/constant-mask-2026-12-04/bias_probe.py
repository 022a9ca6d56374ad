"""Probe: what the seed ViT exports add to the attention logits before Softmax (the chain behind the Add)."""
import sys
import numpy as np
import onnx
from onnx import numpy_helper
from flashgemm.ort import models

def walk(g, name, prod, inits, depth=0, seen=None):
    seen = seen if seen is not None else set()
    if depth > 7 or name in seen:
        return
    seen.add(name)
    pad = "  " * depth
    if name in inits:
        a = numpy_helper.to_array(inits[name]); print(f"{pad}{name}: init {a.shape} {a.dtype} min {a.min() if a.size else '-'} max {a.max() if a.size else '-'}"); return
    n = prod.get(name)
    if n is None:
        print(f"{pad}{name}: graph input"); return
    extra = ""
    if n.op_type == "Constant":
        a = numpy_helper.to_array(n.attribute[0].t); extra = f" value {a.shape} {a.dtype} {a.ravel()[:6]}"
    print(f"{pad}{n.op_type} {n.name} -> {name}{extra}")
    for i in n.input:
        if i: walk(g, i, prod, inits, depth + 1, seen)

for exporter, attn in (("torchscript", "eager"), ("dynamo", "sdpa")):
    p = models.export("vit-b16", "/tmp/vb", dtype="float16", batch=2, device="cuda", exporter=exporter, attention=attn,
                      log=lambda *a: None)
    m = onnx.load(str(p), load_external_data=False)
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}
    inits = {i.name: i for i in g.initializer}
    sm = [n for n in g.node if n.op_type == "Softmax"][0]
    print("=====", exporter, attn, m.metadata_props)
    walk(g, sm.input[0], prod, inits)
