"""Meta-Schedule design spaces of the fused op, one module a form (cuda_*), its default (untuned) and generic
schedules, and the CPU (llvm) schedules."""
