// Host metadata to the engine's device: the one place the engine, mixers and warmers turn a host
// vector (token ids, query starts, state slots, flags) into a device tensor. Torch-side only.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

namespace coldstart {

/// A copy of `n` values at `data` (host memory, laid out as `dtype`) as a 1-D tensor of `dtype`
/// on `device`. On the meta device (compile-only mode) an uninitialized meta tensor of that shape,
/// as there is nothing to read. Synchronous: never call it while a stream captures a CUDA graph.
at::Tensor upload(const void* data, int64_t n, c10::ScalarType dtype, c10::Device device);

/// upload() of a vector; `dtype` must have the element's size (e.g. kInt for int32_t, kLong for
/// int64_t, kBool for 0/1 bytes).
template <class T>
at::Tensor upload(const std::vector<T>& values, c10::ScalarType dtype, c10::Device device) {
  return upload(values.data(), static_cast<int64_t>(values.size()), dtype, device);
}

}  // namespace coldstart
