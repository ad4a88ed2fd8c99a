// What this NVRTC can compile for; see nvrtc_archs.h.
#include "harness/jit/nvrtc_archs.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "harness/jit/jit.h"

namespace coldstart::jit {
namespace {

struct NvrtcInfo {
  int major = 0;
  int minor = 0;
  std::vector<std::string> supported;
};

const NvrtcInfo& this_nvrtc() {
  static const NvrtcInfo info = [] {
    NvrtcInfo i;
    std::sscanf(nvrtc_version().c_str(), "%d.%d", &i.major, &i.minor);
    i.supported = nvrtc_supported_archs();
    return i;
  }();
  return info;
}

bool at_least(int major, int minor, int want_major, int want_minor) {
  return major > want_major || (major == want_major && minor >= want_minor);
}

}  // namespace

bool nvrtc_can_target(const std::string& arch, int major, int minor,
                      const std::vector<std::string>& supported) {
  const int sm = arch_sm(arch);
  if (sm == 0) return false;
  const std::string base = "sm_" + std::to_string(sm);
  if (std::find(supported.begin(), supported.end(), base) == supported.end()) return false;
  const char suffix = arch.back();
  // "a" targets arrived with CUDA 12.0 (sm_90a), "f" (family) targets with CUDA 12.9.
  if (suffix == 'a') return sm >= 90 && at_least(major, minor, 12, 0);
  if (suffix == 'f') return sm >= 100 && at_least(major, minor, 12, 9);
  return true;
}

bool nvrtc_can_target(const std::string& arch) {
  const NvrtcInfo& n = this_nvrtc();
  return nvrtc_can_target(arch, n.major, n.minor, n.supported);
}

std::string nvrtc_targets_text() {
  const NvrtcInfo& n = this_nvrtc();
  std::vector<int> sms;
  for (const std::string& a : n.supported) {
    if (const int sm = arch_sm(a)) sms.push_back(sm);
  }
  std::sort(sms.begin(), sms.end());
  std::string out;
  if (!sms.empty()) out = fmt::format("sm_{}..sm_{}", sms.front(), sms.back());
  for (const char* a : {"sm_90a", "sm_100a", "sm_103a", "sm_120a"}) {
    if (nvrtc_can_target(a)) out += std::string(out.empty() ? "" : ", ") + a;
  }
  return out.empty() ? "nothing" : out;
}

std::string nvrtc_cannot_target_text(const std::string& arch) {
  const NvrtcInfo& n = this_nvrtc();
  const int sm = arch_sm(arch);
  const char suffix = arch.empty() ? ' ' : arch.back();
  std::string needs;
  if (suffix == 'f' || sm == 103 || sm == 121) {
    needs = "12.9";
  } else if (sm == 100 || sm == 101 || sm == 120) {
    needs = "12.8";
  } else if (suffix == 'a' && sm == 90) {
    needs = "12.0";
  }
  return fmt::format("NVRTC {}.{} (the CUDA toolkit this build uses) cannot compile for {}; it "
                     "compiles for {}{}",
                     n.major, n.minor, arch, nvrtc_targets_text(),
                     needs.empty() ? "" : "; " + arch + " needs CUDA " + needs + " or newer");
}

}  // namespace coldstart::jit
