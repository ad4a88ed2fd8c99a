// coldstart JIT: helpers shared by the JIT's translation units (not part of the public API).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/common/checksum.h"
#include "harness/jit/jit.h"

namespace coldstart::jit::detail {

// FNV-1a 64 lives in harness/common (results files checksum their inputs with it too).
using checksum::kFnvOffset;
using checksum::kFnvPrime;
using checksum::fnv1a;

/// FNV-1a 64 of a NUL-terminated string (nullptr hashes as "").
inline uint64_t fnv1a_cstr(const char* s, uint64_t h = kFnvOffset) {
  if (s == nullptr) return h;
  for (; *s != '\0'; ++s) {
    h ^= static_cast<unsigned char>(*s);
    h *= kFnvPrime;
  }
  return h;
}

/// fnv1a_cstr(source) of a kernel's source text, remembered per text: every launch's compile key
/// carries it, and hashing tens of kilobytes a byte at a time on each key was the largest single
/// cost of a key-only envelope sweep. The remembered text is compared in full before its hash is
/// reused (a test may build a new source at an address an earlier one used). Thread-safe.
uint64_t source_hash(const char* source);

/// Milliseconds of host wall time since `t0`.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// 16 lower-case hex digits.
std::string hex64(uint64_t v);

/// Specialization as a small code: 0 = none, 1 = "1", 16 = "16". Ignores do_not_specialize.
inline uint8_t spec_code(const KernelArg& a) {
  switch (a.kind) {
    case KernelArg::Kind::kPointer:
      return (a.address % 16 == 0) ? 16 : 0;
    case KernelArg::Kind::kI32:
    case KernelArg::Kind::kI64:
      if (a.value == 1) return 1;
      return (a.value % 16 == 0) ? 16 : 0;
    case KernelArg::Kind::kU64:
      if (a.address == 1) return 1;
      return (a.address % 16 == 0) ? 16 : 0;
    case KernelArg::Kind::kF32:
    case KernelArg::Kind::kTensorMap:
      return 0;
  }
  return 0;
}

/// Whether argument `i` of `kernel` takes part in specialization.
bool is_specialized(const KernelSource& kernel, size_t i);

/// compile_to_cubin with the key text already built (it goes into error messages).
std::vector<char> compile_cubin(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                                const std::vector<KernelArg>& args, const std::string& arch,
                                const std::string& key_text);

}  // namespace coldstart::jit::detail
