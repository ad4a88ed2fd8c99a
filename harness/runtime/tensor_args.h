// Turns at::Tensor / scalar launch arguments into jit::KernelArg. Torch-side only.
#pragma once

#include <ATen/core/Tensor.h>

#include "harness/jit/jit.h"

namespace coldstart {

/// Maps a torch dtype to the JIT's. Throws Error for a dtype no kernel takes.
jit::DType to_jit_dtype(c10::ScalarType t);

/// A pointer argument for `t`. On CUDA the address is `t.data_ptr()`. On the meta device (compile-only
/// mode) it is the tensor's byte offset inside its storage, so alignment specialization ("16")
/// comes out as it would on a GPU, where allocations are at least 256-byte aligned.
jit::KernelArg tensor_arg(const at::Tensor& t);

/// The same with the element type given: FP8 (e4m3) data lives in uint8 tensors here, because
/// libtorch 1.13 has no FP8 dtype (`tensor_arg(bytes, jit::DType::kF8E4M3)`).
jit::KernelArg tensor_arg(const at::Tensor& t, jit::DType dtype);

/// The address tensor_arg() passes: data_ptr() on a device, the byte offset in its storage on
/// the meta device.
uint64_t tensor_address(const at::Tensor& t);

}  // namespace coldstart
