"""Rewrites of the generated CUDA text (the SOURCE stage of cuda_build.PASSES), one module a pass, named after it.

The last resort: each one exists because TIR cannot express the rewrite at that point of the pipeline (its module
says why), and its tests fail, naming the pass, when TVM's printed code stops matching."""
