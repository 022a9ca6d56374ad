"""Passes over TIR (scheduled and device stages of cuda_build.PASSES), one module a pass, named after it."""
