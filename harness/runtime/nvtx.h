// NVTX ranges (header-only NVTX3; a no-op unless a profiler such as Nsight Systems is attached).
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace coldstart {

/// Pushes an NVTX range named `name` for the lifetime of the object; every replay phase opens
/// one, so an Nsight Systems capture shows the same phase names as the results.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace coldstart
