"""The bundle stage: pick the best record of each tuned workload, decide twins and any-length kernels, export one
kernels .so with its manifest, and check a built bundle."""
