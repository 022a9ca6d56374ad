"""ONNX Runtime: the custom-op library (csrc/, built by CMake), sessions that load it, one-node models, the op's
ONNX schema and the graph rewrite that puts the op into models."""
