// FNV-1a 64: the one checksum coldstart uses, for kernel-cache entries (harness/jit) and for the
// input files a results file records (meta.inputs). Not cryptographic: it tells an edited or
// damaged file from the one recorded, not a forged one.
#pragma once

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace coldstart::checksum {

/// FNV-1a 64 offset basis.
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
/// FNV-1a 64 prime.
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

/// FNV-1a 64 over `n` bytes, continuing from `h`.
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

/// `v` as 16 lower-case hex digits, e.g. "af63bd4c8601b7df".
inline std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

/// FNV-1a 64 of `data` as 16 lower-case hex digits (FNV-1a 64 of "" is "cbf29ce484222325").
inline std::string fnv1a64_hex(const std::string& data) {
  return hex64(fnv1a(data.data(), data.size()));
}

}  // namespace coldstart::checksum
