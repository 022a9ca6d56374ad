"""Benchmarks of the fused op against its peers on one GPU (timing, peers, DRAM bytes, accuracy, report).

Kept apart from the data's path (tir_kernels -> schedules -> tuning_db -> ort_integration), as flash-attention
keeps its benchmarks apart from its kernels: nothing on that path imports this package.
"""
