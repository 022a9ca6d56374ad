"""The compile pipeline: the ordered table of passes (cuda_build.PASSES), the builder and runner that
Meta-Schedule and the bundle export share, and the stub driver that compiles CUDA without a GPU."""
