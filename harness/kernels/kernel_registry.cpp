#include "harness/kernels/kernel_registry.h"

#include "harness/kernels/turboquant/turboquant_kernels.h"

namespace coldstart {

std::vector<KernelCompileCase> all_compile_cases() {
  std::vector<KernelCompileCase> cases;
  for (KernelCompileCase& c : tq::compile_cases()) cases.push_back(std::move(c));
  return cases;
}

std::vector<const jit::KernelSource*> all_kernel_sources() {
  std::vector<const jit::KernelSource*> out;
  for (const jit::KernelSource* k : tq::all_kernels()) out.push_back(k);
  return out;
}

}  // namespace coldstart
