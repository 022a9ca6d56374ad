// The ONNX Runtime C++ API, as every file of this library must include it: the OrtApi comes from the host ORT
// (RegisterCustomOps' argument), never from linking libonnxruntime (Python's ORT embeds its own copy).
#pragma once

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT
