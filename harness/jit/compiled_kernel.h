// coldstart: the definition of jit::CompiledKernel (opaque in jit.h), for code that needs the
// loaded CUfunction itself (the launch benchmark's bare cuLaunchKernel, kernel attribute queries).
#pragma once

#include <cuda.h>

#include <atomic>
#include <string>
#include <vector>

#include "harness/jit/jit.h"

namespace coldstart::jit {

/// One compiled key held by a JitRuntime. Owned by the runtime; valid until it is destroyed.
struct CompiledKernel {
  CompileKey key;                ///< the full compile key
  std::string key_text;          ///< key.str()
  std::vector<char> cubin;       ///< the ELF cubin NVRTC produced (or the disk cache held)
  CUmodule module = nullptr;     ///< loaded module; nullptr in compile-only mode
  CUfunction function = nullptr; ///< the kernel's entry; nullptr in compile-only mode
  /// Largest dynamic shared memory (bytes) this function was opened up to with
  /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (launches above 48 KiB need it).
  std::atomic<unsigned> max_dynamic_smem{0};
};

}  // namespace coldstart::jit
