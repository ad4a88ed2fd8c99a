// Registry of every runtime-compiled kernel family, for tests that must cover all of them (the
// multi-arch NVRTC compile test). Torch-free.
#pragma once

#include <string>
#include <vector>

#include "harness/jit/jit.h"

namespace coldstart {

/// One kernel with constexprs and launch arguments whose specialization is representative of
/// serving. Pointers carry a 256-byte aligned address (as a real allocation would).
struct KernelCompileCase {
  std::string family;  ///< "turboquant", "paged"
  std::string label;   ///< printable identity, e.g. "tq_decode_stage1[HEAD_DIM=128,...]"
  const jit::KernelSource* kernel = nullptr;
  std::vector<jit::Constexpr> constexprs;
  std::vector<jit::KernelArg> args;
};

/// Every family's compile cases, in registration order. A family registers through one
/// cs_add_kernel_family call in harness/kernels/CMakeLists.txt, which generates the list
/// (its SPECS_HEADER's compile_cases() and all_kernels()).
std::vector<KernelCompileCase> all_compile_cases();

/// Every family's kernel sources.
std::vector<const jit::KernelSource*> all_kernel_sources();

}  // namespace coldstart
