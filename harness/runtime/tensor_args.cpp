#include "harness/runtime/tensor_args.h"

#include <c10/core/ScalarType.h>

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
    default: break;
  }
  throw Error(std::string("tensor_arg: no JIT dtype for torch dtype ") + c10::toString(t));
}

jit::KernelArg tensor_arg(const at::Tensor& t) {
  const uint64_t offset_bytes =
      static_cast<uint64_t>(t.storage_offset()) * static_cast<uint64_t>(t.element_size());
  uint64_t address;
  if (t.is_meta()) {
    address = offset_bytes;
  } else {
    address = reinterpret_cast<uint64_t>(t.data_ptr());
  }
  return jit::KernelArg::pointer(address, to_jit_dtype(t.scalar_type()));
}

}  // namespace coldstart
