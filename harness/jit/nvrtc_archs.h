#pragma once
// What the NVRTC this process loaded can compile for, arch-specific targets included. A
// distribution's toolkit can be older than the kernels' archs (Debian 12's nvidia-cuda-toolkit is
// 11.8: sm_90 but neither sm_90a nor sm_100); coldstart refuses such targets by name (exit 2)
// instead of failing inside NVRTC.
#include <string>
#include <vector>

namespace coldstart::jit {

/// Whether an NVRTC of version `major`.`minor` whose nvrtcGetSupportedArchs lists `supported`
/// ("sm_XX") compiles for `arch`. Plain archs ("sm_90") must be listed; arch-specific ones
/// ("sm_90a", "sm_100a") need their base listed and NVRTC 12.0+ (the first with "a" targets);
/// family ones ("sm_100f") NVRTC 12.9+. False for anything that is not an sm_ name.
bool nvrtc_can_target(const std::string& arch, int major, int minor,
                      const std::vector<std::string>& supported);

/// nvrtc_can_target for this process's NVRTC (version and arch list read once).
bool nvrtc_can_target(const std::string& arch);

/// What this NVRTC compiles for, for messages and `coldstart doctor`: its plain archs as a range
/// with gaps listed ("sm_50..sm_90"), then the arch-specific targets it has among sm_90a /
/// sm_100a / sm_103a / sm_120a ("sm_50..sm_90, sm_90a").
std::string nvrtc_targets_text();

/// The refusal text for an arch this NVRTC cannot compile for: names the NVRTC version, what it
/// compiles for and, for archs coldstart knows, the first CUDA release that compiles for them
/// (sm_90a: 12.0, sm_100 / sm_120: 12.8, sm_100f / sm_103: 12.9).
std::string nvrtc_cannot_target_text(const std::string& arch);

}  // namespace coldstart::jit
