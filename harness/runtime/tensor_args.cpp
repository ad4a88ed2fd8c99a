#include "harness/runtime/tensor_args.h"

#include <c10/core/ScalarType.h>
#include <torch/version.h>

namespace coldstart {

jit::DType to_jit_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return jit::DType::kF32;
    case c10::ScalarType::Half: return jit::DType::kF16;
    case c10::ScalarType::BFloat16: return jit::DType::kBF16;
    case c10::ScalarType::Byte: return jit::DType::kU8;
    case c10::ScalarType::Char: return jit::DType::kI8;
    case c10::ScalarType::Short: return jit::DType::kI16;
    case c10::ScalarType::Int: return jit::DType::kI32;
    case c10::ScalarType::Long: return jit::DType::kI64;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
    case c10::ScalarType::Float8_e4m3fn: return jit::DType::kF8E4M3;
#endif
    default: break;
  }
  throw Error(std::string("tensor_arg: no JIT dtype for torch dtype ") + c10::toString(t));
}

jit::KernelArg tensor_arg(const at::Tensor& t) { return tensor_arg(t, to_jit_dtype(t.scalar_type())); }

uint64_t tensor_address(const at::Tensor& t) {
  const uint64_t offset_bytes =
      static_cast<uint64_t>(t.storage_offset()) * static_cast<uint64_t>(t.element_size());
  uint64_t address = 0;
  if (t.is_meta()) {
    address = offset_bytes;
  } else {
    address = reinterpret_cast<uint64_t>(t.data_ptr());
  }
  return address;
}

jit::KernelArg tensor_arg(const at::Tensor& t, jit::DType dtype) {
  return jit::KernelArg::pointer(tensor_address(t), dtype);
}

}  // namespace coldstart
