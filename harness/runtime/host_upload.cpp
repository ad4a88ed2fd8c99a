#include "harness/runtime/host_upload.h"

#include <ATen/ATen.h>

namespace coldstart {

at::Tensor upload(const void* data, int64_t n, c10::ScalarType dtype, c10::Device device) {
  const auto opt = at::TensorOptions().dtype(dtype);
  if (device.is_meta()) return at::empty({n}, opt.device(device));
  // from_blob does not copy; `copy = true` makes the result own its memory on any device.
  return at::from_blob(const_cast<void*>(data), {n}, opt)
      .to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace coldstart
