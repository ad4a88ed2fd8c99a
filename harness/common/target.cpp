#include "harness/common/target.h"

#include <fmt/format.h>

#include "harness/common/error.h"

namespace coldstart {

namespace {
// Shared memory a block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin): 99 KiB on
// sm_86 (GA10x), 227 KiB on sm_90 and sm_100 (CUDA C Programming Guide, compute capabilities
// table).
constexpr int kSmem86 = 99 * 1024;
constexpr int kSmem90 = 227 * 1024;

// Device memory as the CUDA runtime reports its total (cudaMemGetInfo), which is less than the
// marketed size (ECC and the driver's reservations). Sources: the "total capacity" torch prints in
// its out-of-memory message (torch.cuda.mem_get_info()[1]) in users' public reports of each card
// (the A10's reports disagree by a few hundred MiB); the H200's and the H100's are what
// cudaMemGetInfo returned on the cards of coldstart's GPU CI (kv_cache_budget.total_device_bytes
// in baselines/h200-sm90.json and h100-sm90.json). On a GPU the device's own total is used.
constexpr long long gib(double g) { return static_cast<long long>(g * 1073741824.0); }
constexpr long long kMemA4000 = gib(15.61);   // 16 GB GDDR6
constexpr long long kMemA10 = gib(22.07);     // 24 GB GDDR6
constexpr long long kMemH100 = 85017493504;   // 80 GB HBM3 (79.18 GiB; read on our H100)
constexpr long long kMemH200 = 150109880320;  // 141 GB HBM3e (139.80 GiB; read on our H200)
constexpr long long kMemB200 = gib(178.35);   // 180 GB HBM3e

// Memory outside torch's allocator, measured on the H200 and the H100 of coldstart's GPU CI
// (driver 13.0 / 580.159.04, torch 2.11, CUDA_MODULE_LOADING lazy): 648,871,936 B after the
// worker's first CUDA allocation and 71,303,168 B more after the profile run, the same in every
// result of baselines/h200-sm90.json (123 at 7ff6b40) and of h100-sm90.json, byte for byte
// (kv_cache_budget.outside_allocator_at_init_bytes / outside_allocator_bytes; Qwen3-Next grew
// 73,400,320 B on both). Both cards have 132 SMs; every profile uses these figures, and a card
// with fewer SMs likely holds a somewhat smaller context (its local-memory reservation scales
// with the SM count), which makes compile-only mode slightly pessimistic there.
constexpr long long kContextMeasured = 648871936;
constexpr long long kLibraryGrowthMeasured = 71303168;

const std::vector<Target>& profiles() {
  static const std::vector<Target> p = {
      {"sm_86", 86, 48, "NVIDIA RTX A4000", kSmem86, "rtx-a4000", kMemA4000, kContextMeasured, kLibraryGrowthMeasured},
      {"sm_86", 86, 72, "NVIDIA A10", kSmem86, "a10", kMemA10, kContextMeasured, kLibraryGrowthMeasured},
      {"sm_90", 90, 132, "NVIDIA H100 80GB HBM3", kSmem90, "h100", kMemH100, kContextMeasured, kLibraryGrowthMeasured},
      {"sm_90", 90, 132, "NVIDIA H200", kSmem90, "h200", kMemH200, kContextMeasured, kLibraryGrowthMeasured},
      {"sm_100", 100, 148, "NVIDIA B200", kSmem90, "b200", kMemB200, kContextMeasured, kLibraryGrowthMeasured},
  };
  return p;
}
/// cudaDevAttrMaxSharedMemoryPerBlockOptin by compute capability (CUDA C Programming Guide,
/// "Technical Specifications per Compute Capability"): 227 KiB on sm_90 / sm_100 / sm_103,
/// 163 KiB on sm_80 / sm_87, 99 KiB on sm_86 / sm_89 / sm_120 / sm_121, 64 KiB on sm_75, 96 KiB
/// on sm_70; 48 KiB (the portable limit) for anything else.
int shared_memory_per_block_optin(int sm) {
  switch (sm) {
    case 90: case 100: case 103: return kSmem90;
    case 80: case 87: return 163 * 1024;
    case 86: case 89: case 120: case 121: return kSmem86;
    case 75: return 64 * 1024;
    case 70: case 72: return 96 * 1024;
    default: return 48 * 1024;
  }
}
}  // namespace

std::string Target::arch_specific() const { return sm >= 90 ? arch + "a" : arch; }

std::string Target::tuned_file_device_name() const {
  std::string s = device_name;
  for (char& c : s)
    if (c == ' ') c = '_';
  return s;
}

int parse_sm(const std::string& arch, const std::string& what) {
  std::string digits = arch.size() > 3 ? arch.substr(3) : "";
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.pop_back();
  bool ok = arch.rfind("sm_", 0) == 0 && !digits.empty() && digits.size() <= 4;
  for (char c : digits) ok = ok && c >= '0' && c <= '9';
  if (!ok || std::stoi(digits) < 50) {
    throw InputError(fmt::format("{} '{}': expected sm_XX, e.g. sm_86, sm_90, sm_100", what, arch));
  }
  return std::stoi(digits);
}

std::vector<Target> target_profiles() { return profiles(); }

Target target_profile(const std::string& name) {
  std::string known;
  for (const Target& t : profiles()) {
    if (t.profile == name) return t;
    known += (known.empty() ? "" : ", ") + t.profile;
  }
  // The name comes from --target or from COLDSTART_TARGET: both are named.
  throw InputError(fmt::format("--target / COLDSTART_TARGET '{}': unknown target (known: {})", name, known));
}

Target target_for_arch(const std::string& arch, int sm_count) {
  const int sm = parse_sm(arch);
  const char* flagship = sm == 86 ? "rtx-a4000" : sm == 90 ? "h200" : sm == 100 ? "b200" : nullptr;
  Target t;
  if (flagship != nullptr) {
    t = target_profile(flagship);
  } else {
    t.arch = "sm_" + std::to_string(sm);
    t.sm = sm;
    t.device_name = "compile-only (" + t.arch + ")";
    t.shared_memory_per_block = shared_memory_per_block_optin(sm);
  }
  if (sm_count > 0) t.sm_count = sm_count;
  return t;
}

}  // namespace coldstart
