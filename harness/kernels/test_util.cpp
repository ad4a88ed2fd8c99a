#include "harness/kernels/test_util.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "harness/common/error.h"

namespace coldstart::kernels::test {

jit::JitOptions compile_only_options() {
  jit::JitOptions o;
  o.arch = "sm_90";
  o.launch = false;
  return o;
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool gpu_available(std::string* why) {
#ifndef COLDSTART_WITH_CUDA
  *why = "this build's libtorch has no CUDA backend";
  return false;
#else
  if (!at::hasCUDA()) {
    *why = "libtorch sees no CUDA device";
    return false;
  }
  return true;
#endif
}

jit::JitRuntime& gpu_runtime() {
  static jit::JitRuntime* rt = new jit::JitRuntime(jit::JitOptions{});  // current GPU's arch
  return *rt;
}

at::TensorOptions cuda(at::ScalarType t) { return at::TensorOptions().device(at::kCUDA).dtype(t); }

at::Tensor random_bf16(std::vector<int64_t> shape, uint64_t seed, double scale, double shift) {
  at::manual_seed(seed);
  at::Tensor x = at::randn(shape) * scale + shift;
  x = at::where(x == 0, at::full_like(x, 1e-3), x);
  return x.to(at::kBFloat16).to(at::kCUDA);
}

PagedCache shuffled_blocks(int64_t block_size, const std::vector<int64_t>& lens, int64_t stride,
                           uint64_t seed) {
  PagedCache p;
  int64_t total = 0;
  for (int64_t n : lens) total += (n + block_size - 1) / block_size;
  p.num_blocks = total + 5;
  std::vector<int32_t> ids(p.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(static_cast<uint32_t>(seed)));
  p.block_table = at::zeros({static_cast<int64_t>(lens.size()), stride}, at::kInt);
  size_t next = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    const int64_t nb = (lens[b] + block_size - 1) / block_size;
    for (int64_t j = 0; j < nb; ++j) p.block_table[b][j] = ids[next++];
  }
  return p;
}

at::Tensor random_slots(int64_t tokens, int64_t total_slots) {
  std::vector<int64_t> perm(total_slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  at::Tensor slots = at::empty({tokens}, at::kLong);
  for (int64_t t = 0; t < tokens; ++t) slots[t] = (t % 5 == 3) ? -1 : perm[t];
  return slots;
}

}  // namespace coldstart::kernels::test
