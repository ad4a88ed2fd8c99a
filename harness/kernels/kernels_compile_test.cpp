// Compiles every runtime-compiled kernel of every family with NVRTC for sm_86, sm_90 and sm_100
// (no GPU needed). A failure prints the NVRTC log.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "harness/jit/jit.h"
#include "harness/kernels/kernel_registry.h"

namespace coldstart {
namespace {

struct ArchCase {
  KernelCompileCase kc;
  std::string arch;
};

std::vector<ArchCase> arch_cases() {
  std::vector<ArchCase> out;
  for (const KernelCompileCase& c : all_compile_cases()) {
    for (const char* arch : {"sm_86", "sm_90", "sm_100"}) out.push_back({c, arch});
  }
  return out;
}

std::string case_name(const testing::TestParamInfo<ArchCase>& info) {
  std::string s = info.param.kc.label + "_" + info.param.arch;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

class KernelCompile : public testing::TestWithParam<ArchCase> {};

TEST_P(KernelCompile, CompilesToCubin) {
  const ArchCase& c = GetParam();
  std::vector<char> cubin;
  try {
    cubin = jit::compile_to_cubin(*c.kc.kernel, c.kc.constexprs, c.kc.args, c.arch);
  } catch (const std::exception& e) {
    FAIL() << c.kc.label << " for " << c.arch << ":\n" << e.what();
  }
  EXPECT_GT(cubin.size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, KernelCompile, testing::ValuesIn(arch_cases()), case_name);

// A kernel added to a family's list but given no compile case would escape the test above.
TEST(KernelRegistry, EveryKernelHasACompileCase) {
  std::set<std::string> covered;
  for (const KernelCompileCase& c : all_compile_cases()) {
    ASSERT_NE(c.kernel, nullptr) << c.label;
    ASSERT_EQ(c.args.size(), c.kernel->arg_names.size()) << c.label;
    covered.insert(c.kernel->name);
  }
  const auto sources = all_kernel_sources();
  EXPECT_FALSE(sources.empty());
  for (const jit::KernelSource* k : sources) {
    EXPECT_TRUE(covered.count(k->name)) << k->name << " has no compile case";
    EXPECT_NE(k->source, nullptr);
    EXPECT_NE(std::string(k->source).find(k->entry), std::string::npos) << k->name;
  }
}

}  // namespace
}  // namespace coldstart
