"""What TVM 0.27 lacks or does slowly: tensor intrinsics (bf16, wgmma), the online-softmax reduction, a fast
stack walk while TVMScript parses. Each module says what it works around; delete on upgrade where TVM has it."""
