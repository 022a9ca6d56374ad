"""The operator in TensorIR: the fused GEMM + row softmax in each of its forms, and the plain GEMM."""
