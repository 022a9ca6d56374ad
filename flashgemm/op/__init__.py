"""The operator contract: what a kernel computes (variants, canonical shapes), named workloads, the FP64 reference.

Light: importing it loads neither TVM nor onnxruntime (the graph rewrite and the op's Python helpers need no
compiler)."""
