// The GPU a replay plan is for. On a GPU it is read from the device; in compile-only mode it
// comes from a named profile (`--target h200`) or from `--arch` with `--sm-count`. Heuristics and
// tuned-table lookups read it (block sizes from the SM count, a tuned file by device name), and a
// result's `meta` block records it. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace coldstart {

/// One target GPU.
struct Target {
  std::string arch;         ///< NVRTC's virtual arch name without suffix: "sm_90"
  int sm = 0;               ///< compute capability * 10: 90
  int sm_count = 0;         ///< streaming multiprocessors: 132 on an H200
  std::string device_name;  ///< as nvidia-smi prints it: "NVIDIA H200"
  int shared_memory_per_block = 0;  ///< bytes of shared memory one block may opt in to
  std::string profile;      ///< the profile it came from ("h200"), "" when read from a device
  /// Device memory in bytes as cudaMemGetInfo reports its total (what vLLM multiplies by
  /// gpu_memory_utilization and what torch's out-of-memory text calls the total capacity);
  /// 0 when unknown (a bare `--arch` without a flagship profile).
  long long memory_bytes = 0;
  /// Compile-only: device memory outside torch's caching allocator once an engine worker has
  /// initialised CUDA (the CUDA context, torch's and the libraries' device state), in bytes: part
  /// of what cudaMemGetInfo counts as used before the model loads, so it is never free for the
  /// allocator. 0 when unknown. On a GPU it is measured (kv_cache_budget).
  long long context_bytes = 0;
  /// Compile-only: how much that memory grows during the profile run (library handles and
  /// workspaces created at their first call, e.g. cuBLAS's), in bytes; vLLM charges this growth
  /// to the KV budget (non_torch_increase). 0 when unknown.
  long long library_growth_bytes = 0;

  /// The arch with its architecture-specific suffix ("sm_90a", "sm_100a") that kernels using
  /// wgmma / tcgen05 / TMA multicast need; equals `arch` below sm_90.
  std::string arch_specific() const;
  /// vLLM's tuned-config file spelling of the device name: spaces become underscores
  /// ("NVIDIA_H200"), as vLLM's fused_moe get_config_file_name() does with
  /// current_platform.get_device_name().replace(" ", "_").
  std::string tuned_file_device_name() const;
};

/// A named compile-only profile. Known names: rtx-a4000 (sm_86, 48 SMs, 16 GB), a10 (sm_86, 72,
/// 24 GB), h100 (sm_90, 132, 80 GB), h200 (sm_90, 132, 141 GB), b200 (sm_100, 148, 180 GB).
/// Throws InputError for an unknown name, listing the known ones.
Target target_profile(const std::string& name);

/// Every profile, in the order above.
std::vector<Target> target_profiles();

/// A target for a bare arch ("sm_90") in compile-only mode: the profile of that arch when there is
/// exactly one flagship for it (sm_86 -> rtx-a4000, sm_90 -> h200, sm_100 -> b200), with
/// `sm_count` replacing the profile's when > 0; otherwise a generic target named
/// "compile-only (sm_XX)". Throws InputError for an arch that is not sm_XX.
Target target_for_arch(const std::string& arch, int sm_count = 0);

/// Parses "sm_90" / "sm_100a" to 90 / 100. Throws InputError naming `what` on a bad spelling.
int parse_sm(const std::string& arch, const std::string& what = "--arch");

/// NVRTC's arch name of compute capability `sm` (90 -> "sm_90").
inline std::string sm_arch(int sm) { return "sm_" + std::to_string(sm); }

}  // namespace coldstart
