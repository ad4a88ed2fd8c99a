#include "harness/kernels/kernel_registry.h"

namespace coldstart {
namespace detail {
// Generated from the cs_add_kernel_family calls (harness/kernels/CMakeLists.txt).
void append_family_compile_cases(std::vector<KernelCompileCase>& out);
void append_family_kernels(std::vector<const jit::KernelSource*>& out);
}  // namespace detail

std::vector<KernelCompileCase> all_compile_cases() {
  std::vector<KernelCompileCase> cases;
  detail::append_family_compile_cases(cases);
  return cases;
}

std::vector<const jit::KernelSource*> all_kernel_sources() {
  std::vector<const jit::KernelSource*> out;
  detail::append_family_kernels(out);
  return out;
}

}  // namespace coldstart
