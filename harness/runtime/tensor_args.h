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

}  // namespace coldstart
