// Tests of the scenario loader against hostile inputs (issue 10, "no signal on any input"): alias
// bombs, files that are not regular or too large, integers whose products overflow, bad numbers,
// wrong types, duplicate keys and deep nesting in config.json, duplicate keys and a second
// document in the YAML. Each must be a clean InputError naming the file, the line and the key,
// quickly, never a hang, a crash or a wrapped number.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "harness/common/error.h"
#include "harness/replay/scenario.h"
#include "harness/replay/scenario_test_util.h"

namespace coldstart {
namespace {

using namespace scenario_test;  // NOLINT: the shared fixture and helpers

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// `levels` anchors, each a list of 9 uses of the one before: 9^levels values once expanded.
std::string alias_bomb(int levels) {
  std::string s = "&a0 [x, x, x, x, x, x, x, x, x]";
  for (int l = 1; l <= levels; ++l) {
    std::string prev = "*a" + std::to_string(l - 1);
    s = "[" + s + ", &a" + std::to_string(l) + " [";
    for (int k = 0; k < 9; ++k) s += (k ? ", " : "") + prev;
    s += "]]";
  }
  return s;
}

// While alive, keeps a FIFO from blocking a reader forever: it opens the FIFO for writing as soon
// as a reader has it open (and closes it, so the reader sees an empty file). A loader that opens
// the FIFO then reads "" instead of hanging the test, and the test fails on the message.
class FifoUnblocker {
 public:
  explicit FifoUnblocker(std::string path) : path_(std::move(path)), thread_([this] { run(); }) {}
  ~FifoUnblocker() {
    stop_ = true;
    thread_.join();
  }

 private:
  void run() {
    while (!stop_) {
      const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO until a reader
      if (fd >= 0) {
        ::close(fd);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::string path_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// --- 1. alias bombs ("billion laughs")

TEST_F(ScenarioFiles, AliasBombIsRefusedAtItsKeyAndFast) {
  // 9^6 = 531,441 values took 24 s to be accepted; 9^9 exhausted memory.
  for (int levels : {6, 9}) {
    const auto t0 = Clock::now();
    std::string err = error_of(std::string(kBase) + "expect: " + alias_bomb(levels) + "\n");
    expect_at(err, 16, "expect", "expands to more than 100000 values");
    EXPECT_LT(seconds_since(t0), 1.0) << levels << " levels";
  }
  // Under model.overrides and as a matrix value (written as flow text for the variant names).
  const auto t0 = Clock::now();
  std::string err =
      error_of(replace(kBase, "  config: qwen3.json\n",
                       "  config: qwen3.json\n  overrides: {x: " + alias_bomb(9) + "}\n"));
  expect_at(err, 4, "model.overrides.x", "alias bomb");
  err = error_of(std::string(kBase) + "matrix: {engine.max_num_seqs: " + alias_bomb(9) + "}\n");
  expect_at(err, 16, "matrix.engine.max_num_seqs", "alias bomb");
  // And in a --set value.
  err = error_of(kBase, {"model.overrides.x=" + alias_bomb(9)});
  EXPECT_NE(err.find("--set model.overrides.x: key 'model.overrides.x': expands to more than"),
            std::string::npos)
      << err;
  EXPECT_LT(seconds_since(t0), 2.0);
  // Aliases that expand to little are fine.
  Scenario s = load(replace(kBase, "  none: []\n", "  none: &w []\n  again: *w\n"));
  EXPECT_EQ(s.strategies.size(), 3u);
}

// Each matrix variant is validated from the text on its own: a 1 MiB file, or 7,000 values of
// aliases, times 1024 variants took 49 s / 28 s to load. The product is bounded.
TEST_F(ScenarioFiles, MatrixTimesSizeIsBounded) {
  std::string axes = "matrix:\n  engine.max_num_seqs: [";
  for (int i = 1; i <= 32; ++i) axes += (i > 1 ? ", " : "") + std::to_string(i);
  axes += "]\n  engine.gpu_memory_utilization: [";
  for (int i = 0; i < 32; ++i) axes += (i ? ", 0." : "0.") + std::to_string(50 + i);
  axes += "]\n";
  const auto t0 = Clock::now();
  std::string long_text = "description: |\n";
  for (int i = 0; i < 10000; ++i) long_text += "  " + std::string(100, 'x') + "\n";
  std::string err = error_of(std::string(kBase) + axes + long_text);
  expect_at(err, 16, "matrix", "variants x bytes may be at most 64 MiB");
  err = error_of(
      replace(kBase, "  config: qwen3.json\n",
              "  config: qwen3.json\n  overrides: {sliding_window: " + alias_bomb(4) + "}\n") +
      axes);
  expect_at(err, 17, "matrix", "variants x values at most 1000000");
  EXPECT_LT(seconds_since(t0), 3.0);
  // The same matrix over the plain scenario loads.
  EXPECT_EQ(load(std::string(kBase) + axes).variants.size(), 1024u);
}

// --- 2. files that are not regular, or too large

TEST_F(ScenarioFiles, FifoOrDeviceAsScenarioOrConfigIsRefused) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  {
    FifoUnblocker unblock(fifo);
    try {
      load_scenario(fifo, {}, ScenarioRules{});
      ADD_FAILURE() << "a FIFO loaded as a scenario";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()),
                fifo + ": cannot read the scenario: is a FIFO, not a regular file");
    }
  }
  {
    FifoUnblocker unblock(fifo);
    expect_at(error_of(replace(kBase, "qwen3.json", "fifo")), 3, "model.config",
              "is a FIFO, not a regular file");
  }
  expect_at(error_of(replace(kBase, "qwen3.json", "/dev/zero")), 3, "model.config",
            "cannot read HF config '/dev/zero': is a character device, not a regular file");
}

TEST_F(ScenarioFiles, FifoAsTunedTableIsRefused) {
  fs::create_directories(dir_ + "/tables/fused_moe");
  ASSERT_EQ(::mkfifo((dir_ + "/tables/fused_moe/E=8,N=64.json").c_str(), 0600), 0);
  expect_at(error_of(replace(kBase, "  block_size: 16\n",
                             "  block_size: 16\n  tuned_config_dir: tables\n")),
            9, "engine.tuned_config_dir",
            "a tuned table cannot be read: " + dir_ +
                "/tables/fused_moe/E=8,N=64.json: is a FIFO, "
                "not a regular file");
  // Links to an enclosing directory made the walk of the tables endless (the parent hung).
  fs::remove(dir_ + "/tables/fused_moe/E=8,N=64.json");
  for (int k = 0; k < 40; ++k)
    fs::create_directory_symlink(".", dir_ + "/tables/l" + std::to_string(k));
  const auto t0 = Clock::now();
  expect_at(error_of(replace(kBase, "  block_size: 16\n",
                             "  block_size: 16\n  tuned_config_dir: tables\n")),
            9, "engine.tuned_config_dir", "more than 100000 entries below it");
  EXPECT_LT(seconds_since(t0), 5.0);
}

TEST_F(ScenarioFiles, OversizedScenarioAndConfigAreRefused) {
  std::string big = kBase + std::string("#") + std::string((16u << 20), 'x') + "\n";
  std::string path = write("big.yaml", big);
  try {
    load_scenario(path, {}, ScenarioRules{});
    ADD_FAILURE() << "a 16 MiB scenario loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("big.yaml: cannot read the scenario: is 16.0 MiB, more "
                                         "than the 16 MiB such a file may be"),
              std::string::npos)
        << e.what();
  }
  write("big.json", "{\"pad\": \"" + std::string((16u << 20), 'x') + "\"}");
  expect_at(error_of(replace(kBase, "qwen3.json", "big.json")), 3, "model.config",
            "more than the 16 MiB such a file may be");
}

// --- 3. integer products that overflow

TEST_F(ScenarioFiles, HugeNumGpuBlocksIsRefusedNotWrapped) {
  // 2^60 blocks x 16 tokens wrapped to 0 and passed the capacity check.
  std::string err = error_of(replace(kBase, "  block_size: 16\n",
                                     "  block_size: 16\n  num_gpu_blocks: 1152921504606849024\n"));
  expect_at(err, 9, "engine.num_gpu_blocks",
            "must be in [1, 2147483647] (block ids are 32-bit), got 1152921504606849024");
  // The largest allowed count times the largest block size does not overflow either.
  Scenario s = load(
      replace(kBase, "  block_size: 16\n", "  block_size: 256\n  num_gpu_blocks: 2147483647\n"));
  EXPECT_EQ(s.engine.num_gpu_blocks.value_or(0), 2147483647);
}

TEST_F(ScenarioFiles, RopeScalingFactorNeverGivesAWrappedLimit) {
  const std::string text = read_text(dir_ + "/qwen3.json");
  auto with_rope = [&](const std::string& rope) {
    write("rope.json", replace(text, "\"rope_scaling\": null", "\"rope_scaling\": " + rope));
    return replace(replace(kBase, "qwen3.json", "rope.json"), "  max_model_len: 32768\n",
                   "  max_model_len: 50000\n");
  };
  // 40960 x 1e300 printed "model allows -9223372036854775808"; it is no limit at all.
  Scenario s = load(with_rope("{\"rope_type\": \"yarn\", \"factor\": 1e300}"));
  EXPECT_EQ(s.engine.max_model_len, 50000);
  std::string err = error_of(with_rope("{\"rope_type\": \"yarn\", \"factor\": -4.0}"));
  EXPECT_NE(err.find("key 'rope_scaling.factor': must be a positive number, got -4"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("-9223372036854775808"), std::string::npos) << err;
  // Values of the wrong type were skipped silently.
  for (const char* rope : {R"("yarn")", R"({"rope_type": "yarn", "factor": "4"})",
                           R"({"type": "yarn", "factor": 4, "original_max_position_embeddings": "4096"})"}) {
    err = error_of(with_rope(rope));
    EXPECT_NE(err.find("key 'rope_scaling"), std::string::npos) << rope << ": " << err;
    EXPECT_NE(err.find("expected a"), std::string::npos) << rope << ": " << err;
  }
  // A rope_type that is not a string threw the JSON library's type_error.
  err = error_of(with_rope("{\"rope_type\": 5, \"factor\": 2.0}"));
  EXPECT_NE(err.find("key 'rope_scaling.rope_type': expected a string, got an integer"),
            std::string::npos)
      << err;
}

// --- 4. numbers and types in config.json

// model.config naming the wrong file (a secrets file) must not echo its content into the error
// (CI logs): the position only.
TEST_F(ScenarioFiles, ConfigParseErrorDoesNotEchoTheFile) {
  write("token.env", "hf_SECRETSECRETSECRET\nmore\n");
  write("creds.json", "{\"user\": \"me\", \"token\": \"hf_SECRETSECRETSECRET\" oops}");
  for (const char* file : {"token.env", "creds.json"}) {
    const std::string err = error_of(replace(kBase, "qwen3.json", file));
    expect_at(err, 3, "model.config", "invalid JSON in HF config");
    EXPECT_EQ(err.find("SECRET"), std::string::npos) << err;
    EXPECT_EQ(err.find("last read"), std::string::npos) << err;
  }
}

TEST_F(ScenarioFiles, ConfigNumberOutOfRangeNamesLineAndKey) {
  const std::string text = read_text(dir_ + "/qwen3.json");
  write("eps.json", replace(text, "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 1e400"));
  std::string err = error_of(replace(kBase, "qwen3.json", "eps.json"));
  expect_at(err, 3, "model.config", "invalid JSON in HF config");
  EXPECT_NE(err.find(dir_ + "/eps.json:20:"), std::string::npos) << err;
  EXPECT_NE(err.find("key 'rms_norm_eps'): number overflow parsing '1e400'"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("json.exception"), std::string::npos) << err;
  // Nested, in a list.
  write("nested.json",
        replace(text, "\"rope_scaling\": null", "\"rope_scaling\": {\"f\": [1, -1e999]}"));
  err = error_of(replace(kBase, "qwen3.json", "nested.json"));
  EXPECT_NE(err.find("key 'rope_scaling.f.1'): number overflow parsing '-1e999'"),
            std::string::npos)
      << err;
}

TEST_F(ScenarioFiles, ConfigNestingIsBounded) {
  const std::string text = read_text(dir_ + "/qwen3.json");
  write("deep.json", replace(text, "\"rope_scaling\": null",
                             "\"rope_scaling\": " + std::string(100, '[') + std::string(100, ']')));
  std::string err = error_of(replace(kBase, "qwen3.json", "deep.json"));
  EXPECT_NE(err.find("deep.json:"), std::string::npos) << err;
  EXPECT_NE(err.find("nests more than 64 levels deep"), std::string::npos) << err;
}

// --- 5. duplicate keys

TEST_F(ScenarioFiles, DuplicateKeysInConfigAreRefused) {
  const std::string text = read_text(dir_ + "/qwen3.json");
  write("dup.json",
        replace(text, "\"hidden_size\": 4096,", "\"hidden_size\": 4096, \"hidden_size\": 8,"));
  std::string err = error_of(replace(kBase, "qwen3.json", "dup.json"));
  EXPECT_NE(err.find(dir_ + "/dup.json:11:24: key 'hidden_size': duplicate key (first at line 11)"),
            std::string::npos)
      << err;
  write("dup2.json", replace(text, "\"rope_scaling\": null",
                             "\"rope_scaling\": {\"factor\": 2.0,\n \"factor\": 4.0}"));
  err = error_of(replace(kBase, "qwen3.json", "dup2.json"));
  EXPECT_NE(err.find("key 'rope_scaling.factor': duplicate key (first at line"), std::string::npos)
      << err;
  // The same name written with an escape is the same key.
  write("dup3.json", replace(text, "\"hidden_size\": 4096,",
                             "\"hidden_size\": 4096, \"hidden\\u005fsize\": 8,"));
  err = error_of(replace(kBase, "qwen3.json", "dup3.json"));
  EXPECT_NE(err.find("key 'hidden_size': duplicate key"), std::string::npos) << err;
}

TEST_F(ScenarioFiles, DuplicateKeysInYamlAreRefusedAtEveryLevel) {
  expect_at(error_of(std::string(kBase) + "name: u\n"), 16, "name",
            "duplicate key (first at line 1)");
  expect_at(error_of(replace(kBase, "  block_size: 16\n", "  block_size: 16\n  block_size: 32\n")),
            9, "engine.block_size", "duplicate key");
  // Inside a model.overrides value and an expect rule, which are kept as JSON.
  std::string err = error_of(
      replace(kBase, "  config: qwen3.json\n",
              "  config: qwen3.json\n  overrides: {rope_scaling: {factor: 2.0, factor: 4.0}}\n"));
  expect_at(err, 4, "model.overrides.rope_scaling", "duplicate key 'factor'");
  err =
      error_of(std::string(kBase) + "expect:\n  - {strategy: none, outcome: ok, outcome: crash}\n");
  expect_at(err, 17, "expect.0.outcome", "duplicate key");
}

// --- 6. a second YAML document

TEST_F(ScenarioFiles, SecondYamlDocumentIsRefused) {
  std::string err = error_of(std::string(kBase) + "---\nname: other\n");
  EXPECT_NE(err.find("s.yaml:17:1: a second YAML document starts here"), std::string::npos) << err;
  // In a --set value too (the first document was taken).
  err = error_of(kBase, {"engine.block_size=16\n---\n32"});
  EXPECT_NE(err.find("--set engine.block_size: key 'engine.block_size': the value holds a second "
                     "YAML document"),
            std::string::npos)
      << err;
  // A trailing '---' with nothing after it, or a leading one, is one document.
  EXPECT_EQ(load(std::string(kBase) + "---\n").name, "t");
  EXPECT_EQ(load("---\n" + std::string(kBase)).name, "t");
}

// --- 7. values accepted silently before issue 26 (each must name the file, line and key)

TEST_F(ScenarioFiles, TorchDtypeMustBeATorchDtypeName) {
  const std::string text = read_text(dir_ + "/qwen3.json");
  write("dt.json", replace(text, "\"torch_dtype\": \"bfloat16\"", "\"torch_dtype\": \"float7\""));
  const std::string err = error_of(replace(kBase, "qwen3.json", "dt.json"));
  EXPECT_NE(err.find(dir_ + "/dt.json:25:"), std::string::npos) << err;
  EXPECT_NE(err.find("key 'torch_dtype': 'float7' is not a torch floating-point dtype"),
            std::string::npos)
      << err;
  write("dt2.json", replace(text, "\"torch_dtype\": \"bfloat16\"", "\"torch_dtype\": \"float16\""));
  EXPECT_EQ(load(replace(kBase, "qwen3.json", "dt2.json")).model.torch_dtype, "float16");
}

TEST_F(ScenarioFiles, NulByteInConfigIsRefused) {
  const std::string text = read_text(dir_ + "/qwen3.json");
  // nlohmann::json stopped at the NUL: the second object after it was never read.
  write("nul.json", text + std::string(1, '\0') + "{\"hidden_size\": 1}\n");
  std::string err = error_of(replace(kBase, "qwen3.json", "nul.json"));
  EXPECT_NE(err.find(dir_ + "/nul.json:"), std::string::npos) << err;
  EXPECT_NE(err.find("a NUL byte"), std::string::npos) << err;
  write("nul2.json", text + std::string(1, '\0'));
  err = error_of(replace(kBase, "qwen3.json", "nul2.json"));
  EXPECT_NE(err.find("a NUL byte"), std::string::npos) << err;
}

TEST_F(ScenarioFiles, NanInConfigIsRefusedWhereANumberIsRead) {
  const std::string text = read_text(dir_ + "/qwen3.json");
  auto with_rope = [&](const std::string& rope) {
    write("rope.json", replace(text, "\"rope_scaling\": null", "\"rope_scaling\": " + rope));
    return replace(kBase, "qwen3.json", "rope.json");
  };
  // A NaN factor read as null: no scaling at all, silently.
  for (const char* type : {"yarn", "linear", "llama3"}) {
    const std::string err = error_of(with_rope(
        fmt::format("{{\"rope_type\": \"{}\", \"factor\": NaN, "
                    "\"original_max_position_embeddings\": 4096}}", type)));
    EXPECT_NE(err.find("key 'rope_scaling.factor': must be a positive number, got nan"),
              std::string::npos)
        << type << ": " << err;
  }
  write("eps.json", replace(text, "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": NaN"));
  const std::string err = error_of(replace(kBase, "qwen3.json", "eps.json"));
  EXPECT_NE(err.find("key 'rms_norm_eps': must be positive, got nan"), std::string::npos) << err;
}

TEST_F(ScenarioFiles, NanOverrideIsABadValueAtItsKey) {
  // Refused later as "changed while the run was starting" with no key (issue 26).
  const std::string err =
      error_of(replace(kBase, "  config: qwen3.json\n",
                       "  config: qwen3.json\n  overrides: {sliding_window: .nan}\n"));
  expect_at(err, 4, "model.overrides.sliding_window", "NaN is not a value");
  EXPECT_EQ(err.find("changed while"), std::string::npos) << err;
}

TEST_F(ScenarioFiles, LayerCountIsBoundedBeforeAnyPlan) {
  const auto t0 = Clock::now();
  const std::string err =
      error_of(replace(kBase, "  config: qwen3.json\n",
                       "  config: qwen3.json\n  overrides: {num_hidden_layers: 2147483647}\n"));
  expect_at(err, 4, "model.overrides.num_hidden_layers", "must be in [1, 4096]");
  EXPECT_LT(seconds_since(t0), 5.0);
}

TEST_F(ScenarioFiles, YamlTagsAreRefused) {
  std::string err = error_of(replace(kBase, "  max_num_seqs: 4\n", "  max_num_seqs: !foo 4\n"));
  expect_at(err, 5, "engine.max_num_seqs", "YAML tag '!foo'");
  err = error_of(std::string(kBase) + "description: !!binary aGVsbG8=\n");
  expect_at(err, 16, "description", "YAML tag '!!binary'");
  err = error_of(kBase, {"engine.max_num_seqs=!foo 4"});
  EXPECT_NE(err.find("YAML tag '!foo'"), std::string::npos) << err;
  // !!str is read (a quoted string), so it stays allowed.
  EXPECT_EQ(load(replace(kBase, "name: t\n", "name: !!str t\n")).name, "t");
}

TEST_F(ScenarioFiles, ConfigPathWithNewlineLoads) {
  // Was refused as "changed while the run was starting" (issue 26): a path may hold any byte.
  fs::copy_file(fs::path(dir_) / "qwen3.json", fs::path(dir_) / "qw\nen.json");
  const Scenario s = load(replace(kBase, "config: qwen3.json", "config: \"qw\\nen.json\""));
  EXPECT_EQ(s.model.config_file, dir_ + "/qw\nen.json");
  EXPECT_EQ(s.model.hidden_size, 4096);
}


TEST_F(ScenarioFiles, BatchAndSequenceCountsAreBounded) {
  // 2^31 - 1 tokens ended the child in std::bad_alloc after validation passed (issue 26).
  std::string err = error_of(replace(kBase, "  max_num_batched_tokens: 2048\n",
                                     "  max_num_batched_tokens: 2147483647\n"));
  expect_at(err, 6, "engine.max_num_batched_tokens", "must be in [1, 67108864]");
  err = error_of(replace(kBase, "  max_num_seqs: 4\n", "  max_num_seqs: 2147483647\n"));
  expect_at(err, 5, "engine.max_num_seqs", "must be in [1, 65535]");
}

}  // namespace
}  // namespace coldstart
