#include "harness/kernels/source_util.h"

#include <utility>

#include <fmt/format.h>

#include "harness/common/error.h"

// Embedded by cs_embed_sources (harness/kernels/CMakeLists.txt).
extern const char* const kSource_device_common;

namespace coldstart::kernels {

const char* device_common_source() { return kSource_device_common; }

jit::KernelSource make_kernel_source(const char* common, const char* name, const char* text,
                                     std::vector<std::string> arg_names, std::string& storage) {
  jit::KernelSource k;
  k.name = name;
  k.entry = name;
  storage = std::string(kSource_device_common) + "\n" + common + "\n#line 1 \"" + name + ".cu\"\n" +
            text;
  k.source = storage.c_str();
  k.arg_names = std::move(arg_names);
  return k;
}

std::string compile_case_label(const jit::KernelSource& k, const std::vector<jit::Constexpr>& cs) {
  std::string s = k.name + "[";
  for (size_t i = 0; i < cs.size(); ++i) {
    s += fmt::format("{}{}={}", i ? "," : "", cs[i].name, cs[i].value);
  }
  return s + "]";
}

KernelCompileCase make_compile_case(const char* family, const jit::KernelSource& k,
                                    std::vector<jit::Constexpr> cs,
                                    std::vector<jit::KernelArg> args) {
  KernelCompileCase c;
  c.family = family;
  c.label = compile_case_label(k, cs);
  c.kernel = &k;
  c.constexprs = std::move(cs);
  c.args = std::move(args);
  return c;
}

int kv_group(const char* family, int num_q_heads, int num_kv_heads) {
  if (num_q_heads <= 0 || num_q_heads % num_kv_heads != 0) {
    throw InputError(fmt::format("{}: {} query heads is not a positive multiple of {} KV heads",
                                 family, num_q_heads, num_kv_heads));
  }
  return num_q_heads / num_kv_heads;
}

void require_positive(const char* family, const char* what, int value) {
  if (value <= 0) throw InputError(fmt::format("{}: {} {} must be positive", family, what, value));
}

}  // namespace coldstart::kernels
