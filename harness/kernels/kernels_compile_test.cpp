// Compiles every runtime-compiled kernel of every family with NVRTC for every arch it declares,
// the target profiles' (sm_86, 90, 100 and sm_90a / sm_100a; with COLDSTART_COMPILE_ALL_ARCHS
// also sm_80, 89, 120)
// (KernelSource::min_sm / max_sm / arch_specific) among those this NVRTC supports (no GPU needed),
// and checks that a plan on an arch a kernel lacks is refused by name. A failure prints the NVRTC
// log.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>

#include "harness/jit/jit.h"
#include "harness/jit/nvrtc_archs.h"
#include "harness/kernels/kernel_registry.h"

namespace coldstart {
namespace {

// One test per kernel and arch, compiling every compile case of that kernel in one process: each
// process pays NVRTC's start-up (~0.1 s) and CTest's per-test overhead once per group rather than
// once per case, which halved this suite's CPU time on the 2-core CI. A failure names the case
// (its label) and prints the NVRTC log; COLDSTART_COMPILE_CASE=<text> compiles only the cases
// whose label contains <text>.
struct ArchGroup {
  std::string kernel;  ///< KernelSource::name
  std::string arch;
  std::vector<KernelCompileCase> cases;
};

void PrintTo(const ArchGroup& g, std::ostream* os) {
  *os << g.kernel << " for " << g.arch << " (" << g.cases.size() << " cases)";
}

std::vector<ArchGroup> arch_groups() {
  std::vector<ArchGroup> out;
  // The archs of the target profiles (GA10x sm_86, Hopper sm_90, Blackwell datacenter sm_100)
  // and, built with COLDSTART_COMPILE_ALL_ARCHS (GPU CI), one arch of every other generation
  // (Ampere A100 sm_80, Ada sm_89, Blackwell consumer sm_120); the arch-specific targets of
  // Hopper and Blackwell; among those this NVRTC supports. Minor variants (sm_87, sm_103,
  // sm_121, ...) compile the same source.
  const auto nvrtc = jit::nvrtc_supported_archs();
  std::vector<std::string> supported;
#ifdef COLDSTART_COMPILE_ALL_ARCHS
  const std::vector<const char*> generations = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"};
#else
  const std::vector<const char*> generations = {"sm_86", "sm_90", "sm_100"};
#endif
  for (const char* a : generations) {
    if (std::find(nvrtc.begin(), nvrtc.end(), a) == nvrtc.end()) continue;
    supported.push_back(a);
    // Arch-specific targets only where this NVRTC has them (an 11.x toolkit has no sm_90a).
    const std::string specific = std::string(a) + "a";
    if ((jit::arch_sm(a) == 90 || jit::arch_sm(a) == 100) && jit::nvrtc_can_target(specific))
      supported.push_back(specific);
  }
  for (const KernelCompileCase& c : all_compile_cases()) {
    for (const std::string& arch : jit::declared_archs(*c.kernel, supported)) {
      auto it = std::find_if(out.begin(), out.end(), [&](const ArchGroup& g) {
        return g.kernel == c.kernel->name && g.arch == arch;
      });
      if (it == out.end()) it = out.insert(out.end(), ArchGroup{c.kernel->name, arch, {}});
      it->cases.push_back(c);
    }
  }
  return out;
}

std::string group_name(const testing::TestParamInfo<ArchGroup>& info) {
  std::string s = info.param.kernel + "_" + info.param.arch;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

class KernelCompile : public testing::TestWithParam<ArchGroup> {};

TEST_P(KernelCompile, EveryCaseCompilesToCubin) {
  const ArchGroup& g = GetParam();
  const char* only = std::getenv("COLDSTART_COMPILE_CASE");
  int compiled = 0;
  for (const KernelCompileCase& c : g.cases) {
    if (only != nullptr && *only != '\0' && c.label.find(only) == std::string::npos) continue;
    std::vector<char> cubin;
    try {
      cubin = jit::compile_to_cubin(*c.kernel, c.constexprs, c.args, g.arch);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.label << " for " << g.arch << ":\n" << e.what();
      continue;
    }
    EXPECT_GT(cubin.size(), 0u) << c.label << " for " << g.arch;
    ++compiled;
  }
  std::cout << g.kernel << " for " << g.arch << ": " << compiled << " of " << g.cases.size()
            << " compile cases compiled"
            << (only != nullptr && *only != '\0'
                    ? std::string(" (the rest left out by COLDSTART_COMPILE_CASE='") + only + "')"
                    : std::string())
            << "\n";
  // A filter that leaves this group nothing to compile is not a pass.
  if (compiled == 0 && !HasFailure())
    GTEST_SKIP() << "no compile case of " << g.kernel << " matches COLDSTART_COMPILE_CASE='"
                 << (only != nullptr ? only : "") << "'";
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, KernelCompile, testing::ValuesIn(arch_groups()), group_name);

// Grouping loses no case: every (case, arch) pair the kernels declare is in exactly one group.
TEST(KernelCompileGroups, EveryCaseIsInOneGroupPerDeclaredArch) {
  const auto groups = arch_groups();
  ASSERT_FALSE(groups.empty());
  std::set<std::string> seen;
  size_t pairs = 0;
  for (const ArchGroup& g : groups) {
    EXPECT_TRUE(seen.insert(g.kernel + "@" + g.arch).second) << g.kernel << " " << g.arch;
    for (const KernelCompileCase& c : g.cases) {
      EXPECT_EQ(c.kernel->name, g.kernel) << c.label;
      ++pairs;
    }
  }
  size_t expected = 0;
  std::set<std::string> archs;
  for (const ArchGroup& g : groups) archs.insert(g.arch);
  const std::vector<std::string> all(archs.begin(), archs.end());
  for (const KernelCompileCase& c : all_compile_cases()) expected += jit::declared_archs(*c.kernel, all).size();
  EXPECT_EQ(pairs, expected);
}

TEST(KernelArchs, EveryKernelCompilesForTheFlagshipTargetsItDeclares) {
  // The archs CI must always cover: the RTX A4000 / A10 (sm_86), H100 / H200 (sm_90), B200
  // (sm_100), when this NVRTC supports them.
  const auto supported = jit::nvrtc_supported_archs();
  for (const KernelCompileCase& c : all_compile_cases()) {
    const auto archs = jit::declared_archs(*c.kernel, supported);
    for (const char* a : {"sm_86", "sm_90", "sm_100"}) {
      if (std::find(supported.begin(), supported.end(), a) == supported.end()) continue;
      if (jit::arch_sm(a) < c.kernel->min_sm || c.kernel->arch_specific) continue;
      EXPECT_NE(std::find(archs.begin(), archs.end(), a), archs.end()) << c.label << " " << a;
    }
  }
}

TEST(KernelArchs, AnArchAKernelLacksIsRefusedByName) {
  jit::KernelSource k{"needs_hopper", "k", "extern \"C\" __global__ void k() {}", {}, {}};
  k.min_sm = 90;
  EXPECT_THROW(jit::kernel_arch(k, "sm_86"), jit::UnsupportedArchError);
  try {
    jit::kernel_arch(k, "sm_86");
  } catch (const jit::UnsupportedArchError& e) {
    EXPECT_NE(std::string(e.what()).find("needs_hopper exists for sm_90+"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(jit::kernel_arch(k, "sm_90"), "sm_90");
  k.arch_specific = true;
  EXPECT_EQ(jit::kernel_arch(k, "sm_90"), "sm_90a");
  EXPECT_EQ(jit::kernel_arch(k, "sm_100"), "sm_100a");
  EXPECT_EQ(jit::declared_archs(k, {"sm_86", "sm_90", "sm_90a", "sm_100a"}),
            (std::vector<std::string>{"sm_90a", "sm_100a"}));
  // A JIT runtime targeting an arch the kernel lacks refuses before compiling anything.
  jit::JitOptions o;
  o.arch = "sm_86";
  o.launch = false;
  jit::JitRuntime rt(o);
  EXPECT_THROW(rt.ensure(k, {}, {}), jit::UnsupportedArchError);
  EXPECT_EQ(rt.cached_kernels(), 0u);
  EXPECT_TRUE(rt.monitor().records().empty());
}

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

// Every kernel's argument types come from its .cu signature, and each compile case fits them
// (make_compile_case checks it; this states it per argument). Unchecked declarations are the
// exception: none of a family's kernels may have all its arguments unchecked.
TEST(KernelRegistry, EveryKernelDeclaresTypedArguments) {
  size_t checked = 0, total = 0;
  for (const jit::KernelSource* k : all_kernel_sources()) {
    ASSERT_EQ(k->arg_types.size(), k->arg_names.size()) << k->name;
    size_t mine = 0;
    for (const jit::ParamType& t : k->arg_types) {
      EXPECT_FALSE(t.text.empty()) << k->name;
      mine += t.kind != jit::ParamType::Kind::kUnchecked;
    }
    EXPECT_GT(mine, 0u) << k->name << ": no argument type could be read from its signature";
    checked += mine;
    total += k->arg_types.size();
  }
  EXPECT_GT(checked * 10, total * 9) << checked << " of " << total << " arguments checked";
  for (const KernelCompileCase& c : all_compile_cases()) {
    EXPECT_NO_THROW(jit::check_launch_args(*c.kernel, c.args)) << c.label;
  }
}

// An argument that does not fit its declaration is refused before anything compiles, naming the
// kernel, the argument and both types.
TEST(KernelRegistry, ArgumentOfTheWrongTypeIsRefusedByName) {
  KernelCompileCase c = all_compile_cases().front();
  const jit::KernelSource& k = *c.kernel;
  size_t i = 0;
  while (i < k.arg_types.size() && k.arg_types[i].kind != jit::ParamType::Kind::kPointer) ++i;
  ASSERT_LT(i, k.arg_types.size()) << c.label << " has no pointer argument";
  std::vector<jit::KernelArg> args = c.args;
  args[i] = jit::KernelArg::i64(7);
  try {
    jit::check_launch_args(k, args);
    ADD_FAILURE() << "an i64 passed for pointer " << k.arg_names[i];
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("kernel " + k.name), std::string::npos) << m;
    EXPECT_NE(m.find("'" + k.arg_names[i] + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("the launch passes an i64"), std::string::npos) << m;
  }
  jit::JitOptions o;
  o.arch = "sm_90a";
  o.launch = false;
  jit::JitRuntime rt(o);
  EXPECT_THROW(rt.ensure(k, c.constexprs, args), Error);
  EXPECT_EQ(rt.cached_kernels(), 0u);
}

// What an older toolkit's NVRTC can target (Debian 12's 11.8, Ubuntu 24.04's 12.0): plain archs
// as listed; "a" targets from 12.0 with their base listed; "f" targets from 12.9.
TEST(NvrtcArchs, OlderToolkitsLackArchSpecificAndBlackwellTargets) {
  const std::vector<std::string> cuda118 = {"sm_35", "sm_50", "sm_80", "sm_86", "sm_89", "sm_90"};
  EXPECT_TRUE(jit::nvrtc_can_target("sm_90", 11, 8, cuda118));
  EXPECT_TRUE(jit::nvrtc_can_target("sm_86", 11, 8, cuda118));
  EXPECT_FALSE(jit::nvrtc_can_target("sm_90a", 11, 8, cuda118));
  EXPECT_FALSE(jit::nvrtc_can_target("sm_100", 11, 8, cuda118));
  EXPECT_TRUE(jit::nvrtc_can_target("sm_90a", 12, 0, cuda118));
  EXPECT_FALSE(jit::nvrtc_can_target("sm_86a", 12, 0, cuda118));  // no "a" target below sm_90
  const std::vector<std::string> cuda129 = {"sm_90", "sm_100", "sm_120"};
  EXPECT_TRUE(jit::nvrtc_can_target("sm_100a", 12, 9, cuda129));
  EXPECT_TRUE(jit::nvrtc_can_target("sm_100f", 12, 9, cuda129));
  EXPECT_FALSE(jit::nvrtc_can_target("sm_100f", 12, 8, cuda129));
  EXPECT_FALSE(jit::nvrtc_can_target("sm_103a", 12, 9, cuda129));  // base not listed
  EXPECT_FALSE(jit::nvrtc_can_target("gfx90a", 12, 9, cuda129));
}

// This NVRTC agrees with its own list, and an arch it lacks is refused by name before NVRTC runs.
TEST(NvrtcArchs, ThisNvrtcRefusesWhatItCannotTargetByName) {
  for (const std::string& a : jit::nvrtc_supported_archs()) EXPECT_TRUE(jit::nvrtc_can_target(a)) << a;
  EXPECT_FALSE(jit::nvrtc_can_target("sm_999"));
  const std::string text = jit::nvrtc_cannot_target_text("sm_999");
  EXPECT_NE(text.find("NVRTC " + jit::nvrtc_version()), std::string::npos) << text;
  EXPECT_NE(text.find("cannot compile for sm_999"), std::string::npos) << text;
  EXPECT_NE(jit::nvrtc_targets_text().find("sm_"), std::string::npos);
  jit::KernelSource k{"plain", "k", "extern \"C\" __global__ void k() {}", {}, {}};
  try {
    jit::compile_to_cubin(k, {}, {}, "sm_999");
    ADD_FAILURE() << "compiled for sm_999";
  } catch (const jit::UnsupportedArchError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot compile for sm_999"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace coldstart
