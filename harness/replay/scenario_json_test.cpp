// The JSON form of a loaded scenario (scenario_json.cpp): what a replay's parent hands its
// children must read back as the scenario the parent validated.
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness/replay/scenario.h"
#include "harness/replay/scenario_test_util.h"

namespace coldstart {
namespace {

using nlohmann::json;
using scenario_test::source_dir;

std::vector<std::string> shipped_scenarios() {
  std::vector<std::string> out;
  const std::string dir = source_dir() + "/scenarios";
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".yaml") == 0) out.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Every variant of every shipped scenario survives the trip field for field (the second
/// serialization equals the first), and the fields the engine branches on come back typed.
TEST(ScenarioJson, EveryShippedVariantRoundTrips) {
  ASSERT_FALSE(source_dir().empty()) << "COLDSTART_SOURCE_DIR is not set";
  const auto files = shipped_scenarios();
  ASSERT_GE(files.size(), 5u);
  int variants = 0;
  for (const std::string& f : files) {
    const Scenario base = load_scenario(f);
    for (const Variant& v : base.variants) {
      const Scenario s = apply_variant(base, v);
      const json j = s;
      const Scenario back = j.get<Scenario>();
      EXPECT_EQ(json(back), j) << f << " [" << v.name << "]";
      EXPECT_EQ(back.engine.cudagraph_mode, s.engine.cudagraph_mode) << f;
      EXPECT_EQ(back.engine.cudagraph_capture_sizes, s.engine.cudagraph_capture_sizes) << f;
      EXPECT_EQ(back.engine.num_gpu_blocks, s.engine.num_gpu_blocks) << f;
      EXPECT_EQ(back.engine.owned, s.engine.owned) << f;
      EXPECT_EQ(back.model.raw, s.model.raw) << f;
      EXPECT_EQ(back.model.rms_norm_eps, s.model.rms_norm_eps) << f;
      ASSERT_EQ(back.variants.size(), 1u) << f;
      EXPECT_EQ(back.variants[0].name, v.name);
      EXPECT_EQ(back.variants[0].overrides, v.overrides);
      EXPECT_FALSE(back.model.config_fnv1a64.empty()) << f;
      EXPECT_TRUE(back.expectations.empty());
      ++variants;
    }
  }
  EXPECT_GT(variants, static_cast<int>(files.size()));  // some scenarios have a matrix
}

/// A number that is not exactly representable in a short decimal comes back bit for bit.
TEST(ScenarioJson, DoublesKeepTheirBits) {
  Scenario s;
  s.model.rms_norm_eps = 1.0 / 3.0;
  s.engine.gpu_memory_utilization = 0.1 + 0.2;
  s.engine.num_gpu_blocks = 123456789012LL;
  s.variants = {Variant{}};
  const Scenario back = json(s).get<Scenario>();
  EXPECT_EQ(back.model.rms_norm_eps, s.model.rms_norm_eps);
  EXPECT_EQ(back.engine.gpu_memory_utilization, s.engine.gpu_memory_utilization);
  EXPECT_EQ(back.engine.num_gpu_blocks, s.engine.num_gpu_blocks);
}

/// A field missing or of the wrong type is an error, never a silent default.
TEST(ScenarioJson, MissingOrMistypedFieldThrows) {
  Scenario s;
  s.variants = {Variant{}};
  json j = s;
  json missing = j;
  missing["engine"].erase("block_size");
  EXPECT_THROW(missing.get<Scenario>(), json::exception);
  json mistyped = j;
  mistyped["requests"] = "many";
  EXPECT_THROW(mistyped.get<Scenario>(), json::exception);
  json mode = j;
  mode["engine"]["cudagraph_mode"] = "sometimes";
  EXPECT_THROW(mode.get<Scenario>(), Error);
}

}  // namespace
}  // namespace coldstart
