// The model families read the HF-config keys the typed ModelConfig fields do not carry through
// ConfigView (layers_common.h): a value of the wrong type or an integer past 32 bits is refused by
// check_replayable before anything runs, naming the key (issue 10 item). Such values used to fall
// back to the family's default silently, or be truncated (a compress_ratios entry of 2^32 + 4 read
// as 4).
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/models/model.h"
#include "harness/replay/scenario.h"

namespace coldstart {
namespace {

namespace fs = std::filesystem;

// What DeepSeek V4 replays with.
constexpr const char* kV4Engine = "kv_cache_dtype: auto, block_size: 64, cudagraph_mode: piecewise";

std::string source_dir() {
  const char* d = std::getenv("COLDSTART_SOURCE_DIR");
  return d ? d : "";
}

class ConfigViewChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(source_dir().empty()) << "COLDSTART_SOURCE_DIR is not set";
    std::string templ = (fs::temp_directory_path() / "cs_config_view_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // The fixture config `name` with `from` replaced by `to`, written as cfg.json.
  void write_config(const std::string& name, const std::string& from, const std::string& to) {
    std::ifstream in(source_dir() + "/fixtures/hf-configs/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in " << name;
    text.replace(at, from.size(), to);
    std::ofstream(dir_ + "/cfg.json") << text;
  }

  // Replaces `from` (which must occur) by `to` in cfg.json, as written by write_config.
  void edit_config(const std::string& from, const std::string& to) {
    std::ifstream in(dir_ + "/cfg.json");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in cfg.json";
    text.replace(at, from.size(), to);
    std::ofstream(dir_ + "/cfg.json") << text;
  }

  // The InputError text of a scenario of cfg.json with `layers` layers and `engine` settings,
  // loaded with the model families' check_replayable ("" when it loads).
  std::string error_of(int layers, const std::string& engine, const std::string& tuned = "") {
    std::ofstream(dir_ + "/s.yaml")
        << "model: {config: cfg.json, overrides: {num_hidden_layers: " << layers << "}}\n"
        << "engine: {max_num_seqs: 4, max_num_batched_tokens: 2048, max_model_len: 4096, "
        << "tuned_config_dir: " << (tuned.empty() ? source_dir() + "/fixtures/tuned-configs" : tuned)
        << ", " << engine << "}\n"
        << "requests: [{prompt_tokens: 64, decode_steps: 2}]\n"
        << "strategies: {none: []}\n";
    ScenarioRules rules;
    rules.check_replayable = [](const Scenario& s) { return check_replayable(s); };
    try {
      load_scenario(dir_ + "/s.yaml", {}, rules);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  std::string dir_;
};

TEST_F(ConfigViewChecks, ShippedConfigsLoad) {
  write_config("nemotron-3-nano-30b-a3b.json", "{", "{");
  EXPECT_EQ(error_of(8, "kv_cache_dtype: auto"), "");
  write_config("qwen3-next-80b-a3b.json", "{", "{");
  EXPECT_EQ(error_of(8, "kv_cache_dtype: auto"), "");
  write_config("deepseek-v4-flash.json", "{", "{");
  EXPECT_EQ(error_of(4, kV4Engine), "");
}

TEST_F(ConfigViewChecks, WrongTypeIsRefusedAtItsKey) {
  write_config("nemotron-3-nano-30b-a3b.json", "\"mamba_head_dim\": 64",
               "\"mamba_head_dim\": \"64\"");
  std::string err = error_of(8, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("s.yaml:1:"), std::string::npos) << err;
  EXPECT_NE(err.find("key 'model.mamba_head_dim': expected an integer (in cfg.json), got a "
                     "string (\"64\")"),
            std::string::npos)
      << err;
  write_config("nemotron-3-nano-30b-a3b.json", "\"norm_topk_prob\": true", "\"norm_topk_prob\": 1");
  err = error_of(8, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("key 'model.norm_topk_prob': expected true or false (in cfg.json), got an "
                     "integer (1)"),
            std::string::npos)
      << err;
  write_config("qwen3-next-80b-a3b.json", "\"linear_num_key_heads\": 16",
               "\"linear_num_key_heads\": 16.5");
  err = error_of(8, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("key 'model.linear_num_key_heads': expected an integer (in cfg.json), got a "
                     "number (16.5)"),
            std::string::npos)
      << err;
}

TEST_F(ConfigViewChecks, IntegersPast32BitsAreRefusedNotWrapped) {
  write_config("nemotron-3-nano-30b-a3b.json", "\"mamba_num_heads\": 64",
               "\"mamba_num_heads\": 18446744073709551615");
  std::string err = error_of(8, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("key 'model.mamba_num_heads': 18446744073709551615 (in cfg.json) is outside "
                     "the 32-bit range"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("-1 "), std::string::npos) << err;
  // A negative size reached the shapes ("Trying to create tensor with negative dimension").
  write_config("qwen3-next-80b-a3b.json", "\"linear_num_value_heads\": 32",
               "\"linear_num_value_heads\": -2147483648");
  err = error_of(8, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("key 'model.linear_num_value_heads': must be at least 1 (in cfg.json), got "
                     "-2147483648"),
            std::string::npos)
      << err;
  // 2^32 + 4 read through get<int> was 4, a valid ratio.
  write_config("deepseek-v4-flash.json", "\"compress_ratios\": [\n    0,",
               "\"compress_ratios\": [\n    4294967300,");
  err = error_of(4, kV4Engine);
  EXPECT_NE(err.find("key 'model.compress_ratios': entry 0 is 4294967300"), std::string::npos)
      << err;
}

// Issue 26: values validation passed that then failed in the child with exit 1 (grid out of
// range, storage size overflow, grouped top-k the kernels refuse) or that no kernel could run.
// Each is now a problem at its key before anything runs.
TEST_F(ConfigViewChecks, GridAndStorageLimitsAreCheckedAtValidation) {
  write_config("qwen3-8b.json", "\"num_attention_heads\": 32",
               "\"num_attention_heads\": 1073741824");
  edit_config("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 1073741824");
  std::string err = error_of(1, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("key 'model.num_attention_heads': 1073741824 query heads on a rank"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("caps at 65535"), std::string::npos) << err;

  write_config("qwen3-8b.json", "\"intermediate_size\": 12288", "\"intermediate_size\": 2147483647");
  edit_config("\"hidden_size\": 4096", "\"hidden_size\": 2147483647");
  err = error_of(1, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("key 'model.intermediate_size': the MLP gate/up projection"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("int64 byte size"), std::string::npos) << err;
}

TEST_F(ConfigViewChecks, GroupedTopkTheKernelsCannotRunIsRefused) {
  write_config("nemotron-3-nano-30b-a3b.json", "\"n_group\": 1", "\"n_group\": 3");
  std::string err = error_of(8, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("key 'model.n_group': the fused-MoE kernels cannot route it: grouped top-k"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("n_group in [1, 32] dividing E"), std::string::npos) << err;
  write_config("nemotron-3-nano-30b-a3b.json", "\"topk_group\": 1", "\"topk_group\": 5");
  err = error_of(8, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("key 'model.topk_group': the fused-MoE kernels cannot route it"),
            std::string::npos)
      << err;
}

TEST_F(ConfigViewChecks, DeepSeekV4ValuesNoKernelRunsAreRefused) {
  const std::vector<std::array<std::string, 3>> cases = {
      {"\"qk_rope_head_dim\": 64", "\"qk_rope_head_dim\": 1024", "model.qk_rope_head_dim"},
      {"\"hc_eps\": 1e-06", "\"hc_eps\": -1", "model.hc_eps"},
      {"\"hc_eps\": 1e-06", "\"hc_eps\": NaN", "model.hc_eps"},
      {"\"index_topk\": 512", "\"index_topk\": 0", "model.index_topk"},
      {"\"expert_dtype\": \"fp4\"", "\"expert_dtype\": \"int3\"", "model.expert_dtype"},
      {"\"routed_scaling_factor\": 1.5", "\"routed_scaling_factor\": NaN",
       "model.routed_scaling_factor"}};
  for (const auto& [from, to, key] : cases) {
    write_config("deepseek-v4-flash.json", from, to);
    const std::string err = error_of(4, kV4Engine);
    EXPECT_NE(err.find("key '" + key + "'"), std::string::npos) << to << ": " << err;
  }
}

TEST_F(ConfigViewChecks, Qwen3NextSparseStepZeroIsRefused) {
  write_config("qwen3-next-80b-a3b.json", "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 0");
  const std::string err = error_of(8, "kv_cache_dtype: auto");
  EXPECT_NE(err.find("key 'model.decoder_sparse_step': 0: vLLM divides the layer index by it"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace coldstart

namespace coldstart {
namespace {

// A tuned table the kernels cannot use is refused before anything runs, naming the table file,
// its line and key (a BLOCK_SIZE_K of 1e9, a "NaN" batch size: both failed in the child).
TEST_F(ConfigViewChecks, BrokenTunedTablesAreRefusedAtValidation) {
  write_config("nemotron-3-nano-30b-a3b.json", "{", "{");
  const std::string tuned = dir_ + "/tuned";
  fs::create_directories(tuned + "/fused_moe");
  fs::create_directories(tuned + "/selective_state_update");
  struct Case {
    std::string table, needle;
  };
  const std::vector<Case> cases = {
      {"{\n \"16\": {\"BLOCK_SIZE_M\": 16, \"BLOCK_SIZE_K\": 1000000000}\n}",
       "t.json:2: key \"16\" -> \"BLOCK_SIZE_K\": 1000000000 must be a power of two in [1, 1024]"},
      {"{\"16\": {\"BLOCK_SIZE_K\": 1e9}}", "expected an integer, got 1000000000.0"},
      {"{\"NaN\": {\"BLOCK_SIZE_K\": 64}}", "key \"NaN\": expected a batch size"},
      {"{\"16\": {\"num_warps\": 3}}", "3 must be a power of two in [1, 32]"},
  };
  for (const Case& c : cases) {
    std::ofstream(tuned + "/fused_moe/t.json") << c.table;
    const std::string err = error_of(8, "kv_cache_dtype: auto", tuned);
    EXPECT_NE(err.find("key 'engine.tuned_config_dir'"), std::string::npos) << err;
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
  }
  // The shipped tables load.
  std::ofstream(tuned + "/fused_moe/t.json") << "{\"16\": {\"BLOCK_SIZE_M\": 16, \"num_warps\": 4}}";
  EXPECT_EQ(error_of(8, "kv_cache_dtype: auto", tuned), "");
  EXPECT_EQ(error_of(8, "kv_cache_dtype: auto"), "");
}

}  // namespace
}  // namespace coldstart
