// Tests of the config selector: tuned tables (parsing, nearest key, vLLM file names, default),
// heuristics, selection scopes (provenance in compile records) and the autotuner, in
// compile-only mode on any machine and, with a GPU, benchmarking and the graph-capture guard.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/jit/driver.h"
#include "harness/common/paths.h"
#include "harness/jit/jit.h"
#include "harness/jit/select.h"

namespace coldstart::jit {
namespace {

namespace fs = std::filesystem;

/// A fresh directory for one test, removed afterwards.
struct TempDir : paths::ScopedTempDir {
  TempDir() : paths::ScopedTempDir("cs-select-test-") {}
};

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out << text;
  return path;
}

std::string source_dir() {
  const char* dir = std::getenv("COLDSTART_SOURCE_DIR");
  return dir != nullptr ? dir : "";
}

std::string fused_moe_fixtures() { return source_dir() + "/fixtures/tuned-configs/fused_moe"; }
// The stem of one of vLLM's fused_moe tables (the fused-MoE family builds these names itself:
// fused_moe::table_stem_fields).
StemFields moe_stem(int E, int N, const std::string& dtype = "") {
  StemFields f = {{"E", std::to_string(E)}, {"N", std::to_string(N)}, {"device_name", "NVIDIA_H200"}};
  if (!dtype.empty()) f.emplace_back("dtype", dtype);
  return f;
}
// A config for the default of a missing table.
KernelConfig fallback_config() {
  return make_config({{"BLOCK_SIZE_M", 16}, {"BLOCK_SIZE_N", 32}, {"BLOCK_SIZE_K", 64}, {"GROUP_SIZE_M", 1}});
}

JitOptions compile_only(const std::string& cache_dir = "") {
  JitOptions o;
  o.arch = "sm_90";
  o.launch = false;
  o.cache_dir = cache_dir;
  return o;
}

// ---------------------------------------------------------------- a tiny autotunable kernel

// y[i] = 2 * x[i]; one element per thread, BLOCK threads per block (BLOCK == 32 * num_warps).
const char* const kScaleSource = R"(
extern "C" __global__ void scale2(float* y, const float* x, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
)";

// The same, but BLOCK=64 does not compile (a candidate a kernel cannot support).
const char* const kPickySource = R"(
extern "C" __global__ void scale2_picky(float* y, const float* x, int n) {
  static_assert(BLOCK != 64, "BLOCK=64 is not supported");
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
)";

KernelSource scale_kernel() { return {"scale2", "scale2", kScaleSource, {"y", "x", "n"}, {}}; }
KernelSource picky_kernel() {
  return {"scale2_picky", "scale2_picky", kPickySource, {"y", "x", "n"}, {}};
}

std::vector<KernelConfig> block_candidates() {
  return {make_config({{"BLOCK", 64}}, 2), make_config({{"BLOCK", 128}}, 4),
          make_config({{"BLOCK", 256}}, 8)};
}

std::vector<KernelArg> scale_args(uint64_t y, uint64_t x, int n) {
  return {KernelArg::pointer(y, DType::kF32), KernelArg::pointer(x, DType::kF32),
          KernelArg::i32(n)};
}

// run_once for the scale kernels: one launch of `kernel` with candidate `c` on `stream`.
std::function<void(const KernelConfig&)> scale_runner(JitRuntime& rt, const KernelSource& kernel,
                                                      uint64_t y, uint64_t x, int n,
                                                      void* stream, int* calls) {
  return [&rt, kernel, y, x, n, stream, calls](const KernelConfig& c) {
    if (calls != nullptr) ++*calls;
    LaunchDims dims;
    dims.grid[0] = static_cast<unsigned>((n + c.threads() - 1) / c.threads());
    dims.block[0] = static_cast<unsigned>(c.threads());
    rt.launch(kernel, c.constexprs, scale_args(y, x, n), dims, stream);
  };
}

// ---------------------------------------------------------------- configs

TEST(Config, NameAndConstexprs) {
  EXPECT_EQ(config_name({{"BLOCK_M", 64}, {"BLOCK_N", 32}}, 4, 2),
            "BLOCK_M=64,BLOCK_N=32,warps=4,stages=2");
  EXPECT_EQ(config_name({}, 8, 1), "warps=8,stages=1");
  const KernelConfig c = make_config({{"BLOCK", 128}}, 4);
  EXPECT_EQ(c.name, "BLOCK=128,warps=4,stages=1");
  EXPECT_EQ(c.threads(), 128);
  const auto all = c.all_constexprs();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].name, "NUM_WARPS");
  EXPECT_EQ(all[1].value, 4);
  EXPECT_EQ(all[2].name, "NUM_STAGES");
  EXPECT_EQ(all[2].value, 1);
}

// ---------------------------------------------------------------- tuned tables: parsing

TEST(TunedTable, LoadsVllmFile) {
  ASSERT_FALSE(source_dir().empty()) << "COLDSTART_SOURCE_DIR is not set";
  const TunedTable t =
      load_tuned_table(fused_moe_fixtures() + "/E=512,N=512,device_name=NVIDIA_H200.json");
  EXPECT_EQ(t.triton_version, "");
  ASSERT_EQ(t.entries.size(), 18u);
  EXPECT_EQ(t.entries.front().batch, 1);
  EXPECT_EQ(t.entries.back().batch, 4096);
  const KernelConfig c = t.entries.front().config();
  EXPECT_EQ(c.name, "BLOCK_SIZE_M=16,BLOCK_SIZE_N=32,BLOCK_SIZE_K=64,GROUP_SIZE_M=1,warps=4,stages=4");
  ASSERT_EQ(c.constexprs.size(), 4u);  // file order; num_warps / num_stages are not constexprs
  EXPECT_EQ(c.constexprs[0].name, "BLOCK_SIZE_M");
  EXPECT_EQ(c.constexprs[3].name, "GROUP_SIZE_M");
  EXPECT_EQ(c.num_warps, 4);
  EXPECT_EQ(c.num_stages, 4);
}

TEST(TunedTable, DropsTritonVersionLikeVllm) {
  ASSERT_FALSE(source_dir().empty()) << "COLDSTART_SOURCE_DIR is not set";
  const TunedTable t = load_tuned_table(
      fused_moe_fixtures() + "/E=128,N=1856,device_name=NVIDIA_H200,dtype=fp8_w8a8.json");
  EXPECT_EQ(t.triton_version, "3.6.0");
  ASSERT_EQ(t.entries.size(), 18u);
  EXPECT_EQ(t.entries.front().batch, 1);
  EXPECT_EQ(t.entries.front().config().name,
            "BLOCK_SIZE_M=16,BLOCK_SIZE_N=64,BLOCK_SIZE_K=128,GROUP_SIZE_M=64,warps=4,stages=5");
}

TEST(TunedTable, MissingNumWarpsUsesDefaults) {
  TempDir dir;
  const std::string path = write_file(dir.path, "t.json", R"({"8": {"BLOCK_SIZE_M": 8}})");
  const KernelConfig c = load_tuned_table(path).entries.at(0).config();
  EXPECT_EQ(c.num_warps, 4);
  EXPECT_EQ(c.num_stages, 1);
  EXPECT_EQ(c.name, "BLOCK_SIZE_M=8,warps=4,stages=1");
}

// Loads `text` as a table and expects an InputError whose text contains every one of `parts`.
void expect_input_error(const std::string& text, const std::vector<std::string>& parts) {
  TempDir dir;
  const std::string path = write_file(dir.path, "bad.json", text);
  try {
    load_tuned_table(path);
    ADD_FAILURE() << "expected InputError for " << text;
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(path, 0), 0u) << what;  // names the file first
    for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what;
  }
}

TEST(TunedTable, ParseErrorsNameFileAndKey) {
  expect_input_error(R"({"1": {"BLOCK": 16)", {"not a valid JSON"});
  expect_input_error("[1, 2]", {"expected a JSON object", "array"});
  expect_input_error("{\n  \"1\": {\"BLOCK\": 16},\n  \"abc\": {\"BLOCK\": 32}\n}",
                     {":3: key \"abc\"", "expected a batch size"});
  expect_input_error(R"({"-4": {"BLOCK": 16}})", {"key \"-4\"", "expected a batch size"});
  expect_input_error(R"({"1.5": {"BLOCK": 16}})", {"key \"1.5\""});
  expect_input_error(R"({" 1": {"BLOCK": 16}})", {"key \" 1\""});
  expect_input_error(R"({"1": 16})", {"key \"1\"", "expected an object of integers, got 16"});
  expect_input_error("{\n\"1\": {\n  \"BLOCK\": 16,\n  \"num_warps\": 4.5\n}}",
                     {":4: key \"1\" -> \"num_warps\"", "expected an integer, got 4.5"});
  expect_input_error(R"({"1": {"num_warps": "4"}})",
                     {"key \"1\" -> \"num_warps\"", "got \"4\""});
  expect_input_error(R"({"1": {"num_warps": true}})", {"key \"1\" -> \"num_warps\""});
  expect_input_error(R"({"1": {"B": 1}, "01": {"B": 2}})",
                     {"key \"01\"", "batch size 1 is already given by key \"1\""});
  expect_input_error(R"({"triton_version": 3, "1": {"B": 1}})",
                     {"key \"triton_version\": expected a string"});
  expect_input_error("{}", {"no batch-size entry"});
  expect_input_error(R"({"triton_version": "3.6.0"})", {"no batch-size entry"});
}

TEST(TunedTable, MissingFileIsAnInputError) {
  TempDir dir;
  try {
    load_tuned_table(dir.path + "/nope.json");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path + "/nope.json: cannot read"), std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------- tuned tables: nearest key

TunedTable table_of(const std::vector<int64_t>& keys) {
  TunedTable t;
  t.file = "mem.json";
  for (int64_t k : keys) t.entries.push_back({k, {{"K", k}}});
  return t;
}

TEST(Nearest, ExactBelowAboveAndTies) {
  const TunedTable t = table_of({1, 2, 4, 8, 16, 24, 32});
  EXPECT_EQ(nearest(t, 1).batch, 1);
  EXPECT_EQ(nearest(t, 16).batch, 16);
  EXPECT_EQ(nearest(t, 5).batch, 4);
  EXPECT_EQ(nearest(t, 7).batch, 8);
  EXPECT_EQ(nearest(t, 21).batch, 24);
  // Ties: Python's min() keeps the first minimal key in file order (here the smaller one).
  EXPECT_EQ(nearest(t, 3).batch, 2);
  EXPECT_EQ(nearest(t, 6).batch, 4);
  EXPECT_EQ(nearest(t, 20).batch, 16);
  EXPECT_EQ(nearest(t, 28).batch, 24);
  // Out of range: the nearest end.
  EXPECT_EQ(nearest(t, 0).batch, 1);
  EXPECT_EQ(nearest(t, -5).batch, 1);
  EXPECT_EQ(nearest(t, 100000).batch, 32);
  EXPECT_EQ(nearest(t, std::numeric_limits<int64_t>::max()).batch, 32);
}

TEST(Nearest, TieFollowsFileOrderLikePythonMin) {
  // min([4, 2], key=lambda x: abs(x - 3)) == 4: the first in dict (file) order.
  EXPECT_EQ(nearest(table_of({4, 2}), 3).batch, 4);
  EXPECT_EQ(nearest(table_of({2, 4}), 3).batch, 2);
}

TEST(Nearest, EmptyTableIsAnError) { EXPECT_THROW(nearest(table_of({}), 3), Error); }

// ---------------------------------------------------------------- vLLM file names

TEST(FileNames, DeviceNames) {
  EXPECT_EQ(vllm_device_name("NVIDIA H100 80GB HBM3"), "NVIDIA_H100_80GB_HBM3");
  EXPECT_EQ(vllm_device_name("NVIDIA H200"), "NVIDIA_H200");
  EXPECT_EQ(vllm_device_name("NVIDIA H200 NVL"), "NVIDIA_H200");  // the H200 family
  EXPECT_EQ(vllm_device_name("NVIDIA GH200 480GB"), "NVIDIA_GH200_480GB");
  EXPECT_EQ(vllm_device_name("NVIDIA H20"), "NVIDIA_H20");
  EXPECT_EQ(vllm_device_name("NVIDIA B200"), "NVIDIA_B200");
}

TEST(FileNames, GenericStemFields) {
  EXPECT_EQ(tuned_file_name({{"headdim", "64"},
                             {"dstate", "128"},
                             {"device_name", "NVIDIA_H200"},
                             {"cache_dtype", "float32"}}),
            "headdim=64,dstate=128,device_name=NVIDIA_H200,cache_dtype=float32.json");
}

TEST(FileNames, FindTunedFile) {
  ASSERT_FALSE(source_dir().empty()) << "COLDSTART_SOURCE_DIR is not set";
  const auto found =
      find_tuned_file(fused_moe_fixtures(), moe_stem(512, 512));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, fused_moe_fixtures() + "/E=512,N=512,device_name=NVIDIA_H200.json");
  EXPECT_TRUE(
      find_tuned_file(fused_moe_fixtures(), moe_stem(128, 1856, "fp8_w8a8"))
          .has_value());
  EXPECT_FALSE(
      find_tuned_file(fused_moe_fixtures(), moe_stem(128, 1856))
          .has_value());  // no bf16 H200 table for N=1856 in vLLM
}

// ---------------------------------------------------------------- select_from_table

TEST(SelectFromTable, NearestEntryOfRealTable) {
  ASSERT_FALSE(source_dir().empty()) << "COLDSTART_SOURCE_DIR is not set";
  const auto fields = moe_stem(512, 512);
  const KernelConfig dflt = fallback_config();
  Selection s = select_from_table(fused_moe_fixtures(), fields, 5, dflt);
  EXPECT_EQ(s.selector, "table");
  EXPECT_EQ(s.tuning_key, "M=5 -> 4");
  EXPECT_EQ(s.config.name,
            "BLOCK_SIZE_M=16,BLOCK_SIZE_N=128,BLOCK_SIZE_K=64,GROUP_SIZE_M=1,warps=4,stages=3");
  EXPECT_EQ(s.table_file, fused_moe_fixtures() + "/E=512,N=512,device_name=NVIDIA_H200.json");
  EXPECT_EQ(s.candidates.size(), 18u);
  EXPECT_FALSE(s.best_ms.has_value());
  EXPECT_FALSE(s.cached);

  EXPECT_EQ(select_from_table(fused_moe_fixtures(), fields, 3, dflt).tuning_key, "M=3 -> 2");
  EXPECT_EQ(select_from_table(fused_moe_fixtures(), fields, 20, dflt).tuning_key, "M=20 -> 16");
  const Selection big = select_from_table(fused_moe_fixtures(), fields, 100000, dflt);
  EXPECT_EQ(big.tuning_key, "M=100000 -> 4096");
  EXPECT_EQ(big.config.num_warps, 8);

  const Selection fp8 = select_from_table(
      fused_moe_fixtures(), moe_stem(128, 1856, "fp8_w8a8"), 1, dflt);
  EXPECT_EQ(fp8.selector, "table");
  EXPECT_EQ(fp8.config.num_stages, 5);
}

TEST(SelectFromTable, DefaultWhenNoFile) {
  ASSERT_FALSE(source_dir().empty()) << "COLDSTART_SOURCE_DIR is not set";
  const auto fields = moe_stem(999, 512);
  const Selection s =
      select_from_table(fused_moe_fixtures(), fields, 5, fallback_config());
  EXPECT_EQ(s.selector, "default");
  EXPECT_EQ(s.tuning_key, "M=5");
  EXPECT_EQ(s.config.name,
            "BLOCK_SIZE_M=16,BLOCK_SIZE_N=32,BLOCK_SIZE_K=64,GROUP_SIZE_M=1,warps=4,stages=1");
  EXPECT_EQ(s.table_file, fused_moe_fixtures() + "/E=999,N=512,device_name=NVIDIA_H200.json");
  EXPECT_TRUE(s.candidates.empty());
}

TEST(SelectFromTable, BadFileIsAnErrorNotADefault) {
  TempDir dir;
  const StemFields fields = {{"E", "8"}, {"N", "16"}, {"device_name", "TEST"}};
  write_file(dir.path, tuned_file_name(fields), R"({"1": {"BLOCK": "x"}})");
  EXPECT_THROW(select_from_table(dir.path, fields, 1, make_config({})), InputError);
}

TEST(Heuristic, RecordsTheCallersChoice) {
  const Selection s = select_by_heuristic("num_tokens=512,sm=90", make_config({{"BLOCK", 64}}));
  EXPECT_EQ(s.selector, "heuristic");
  EXPECT_EQ(s.tuning_key, "num_tokens=512,sm=90");
  EXPECT_EQ(s.config.name, "BLOCK=64,warps=4,stages=1");
  EXPECT_TRUE(s.candidates.empty());
}

// ---------------------------------------------------------------- provenance in compile records

TEST(Scope, CompileRecordsCarryTheSelection) {
  JitRuntime rt(compile_only());
  const KernelSource k = scale_kernel();
  const auto args = scale_args(4096, 8192, 64);
  rt.ensure(k, {{"BLOCK", 32}}, args);  // no scope: a fixed config
  const Selection heur = select_by_heuristic("n=64", make_config({{"BLOCK", 64}}));
  {
    SelectionScope scope(rt, heur);
    EXPECT_EQ(current_selection(rt), &heur);
    rt.ensure(k, heur.config.constexprs, args);
    rt.ensure(k, heur.config.constexprs, args);  // a hit records nothing
  }
  EXPECT_EQ(current_selection(rt), nullptr);
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].selector, "");
  EXPECT_EQ(recs[0].tuning_key, "");
  EXPECT_EQ(recs[0].config, "");
  EXPECT_EQ(recs[0].num_candidates, 0);
  EXPECT_EQ(recs[1].selector, "heuristic");
  EXPECT_EQ(recs[1].tuning_key, "n=64");
  EXPECT_EQ(recs[1].config, "BLOCK=64,warps=4,stages=1");
  EXPECT_EQ(recs[1].num_candidates, 0);
}

TEST(Scope, InnermostOfThisRuntimeWins) {
  JitRuntime rt(compile_only());
  JitRuntime other(compile_only());
  const KernelSource k = scale_kernel();
  const auto args = scale_args(4096, 8192, 64);
  TunedTable t = table_of({1, 8});
  const Selection table = select_from_table(t, 3);
  const Selection heur = select_by_heuristic("h", make_config({{"BLOCK", 128}}));
  const Selection foreign_sel = select_by_heuristic("x", make_config({}));
  {
    SelectionScope outer(rt, table);
    {
      SelectionScope inner(rt, heur);
      SelectionScope foreign(other, foreign_sel);  // another runtime's: does not apply to rt
      rt.ensure(k, {{"BLOCK", 128}}, args);
    }
    rt.ensure(k, {{"BLOCK", 8}}, args);
  }
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].selector, "heuristic");
  EXPECT_EQ(recs[1].selector, "table");
  EXPECT_EQ(recs[1].tuning_key, "M=3 -> 1");
  EXPECT_EQ(recs[1].num_candidates, 2);
  EXPECT_EQ(recs[1].config, "K=1,warps=4,stages=1");
  EXPECT_EQ(current_selection(rt), nullptr);
  EXPECT_EQ(current_selection(other), nullptr);
}

TEST(Scope, RefusedAndDiskRecordsCarryTheSelection) {
  TempDir dir;
  const KernelSource k = scale_kernel();
  const auto args = scale_args(4096, 8192, 64);
  { JitRuntime warm(compile_only(dir.path)); warm.ensure(k, {{"BLOCK", 64}}, args); }
  JitOptions o = compile_only(dir.path);
  o.monitor = MonitorMode::kError;
  JitRuntime rt(o);
  rt.monitor().activate();
  const Selection heur = select_by_heuristic("n=64", make_config({{"BLOCK", 64}}));
  SelectionScope scope(rt, heur);
  rt.ensure(k, {{"BLOCK", 64}}, args);  // from disk: allowed after activate()
  EXPECT_THROW(rt.ensure(k, {{"BLOCK", 128}}, args), HotPathCompileError);
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].source, "disk");
  EXPECT_EQ(recs[0].selector, "heuristic");
  EXPECT_EQ(recs[1].source, "refused");
  EXPECT_EQ(recs[1].selector, "heuristic");
  EXPECT_EQ(recs[1].tuning_key, "n=64");
  EXPECT_EQ(recs[1].config, "BLOCK=64,warps=4,stages=1");
}

// ---------------------------------------------------------------- autotune (compile-only)

TEST(Autotune, CompileOnlyCompilesEveryCandidateThenCaches) {
  JitRuntime rt(compile_only());
  const KernelSource k = scale_kernel();
  const auto cands = block_candidates();
  int calls = 0;
  const auto run = scale_runner(rt, k, 4096, 8192, 4096, nullptr, &calls);

  const Selection first = autotune(rt, k, "n=4096", cands, run);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(first.selector, "autotune");
  EXPECT_EQ(first.tuning_key, "n=4096");
  EXPECT_EQ(first.config.name, cands[0].name);  // compile-only: the first candidate
  EXPECT_FALSE(first.best_ms.has_value());
  EXPECT_FALSE(first.cached);
  EXPECT_GT(first.tune_ms, 0.0);
  EXPECT_TRUE(first.failed.empty());
  EXPECT_EQ(first.candidates,
            (std::vector<std::string>{cands[0].name, cands[1].name, cands[2].name}));
  auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(recs[i].selector, "autotune");
    EXPECT_EQ(recs[i].tuning_key, "n=4096");
    EXPECT_EQ(recs[i].config, cands[i].name);
    EXPECT_EQ(recs[i].num_candidates, 3);
    EXPECT_EQ(recs[i].source, "nvrtc");
    EXPECT_NE(recs[i].key.find("BLOCK=" + std::to_string(cands[i].constexprs[0].value)),
              std::string::npos)
        << recs[i].key;
  }

  const Selection second = autotune(rt, k, "n=4096", cands, run);
  EXPECT_EQ(calls, 3);  // nothing compiled or run
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(second.config.name, first.config.name);
  EXPECT_FALSE(second.best_ms.has_value());
  EXPECT_EQ(second.tune_ms, 0.0);
  EXPECT_EQ(rt.monitor().records().size(), 3u);
  EXPECT_EQ(rt.autotuner().cached_picks(), 1u);

  // The pick is written to the cache directory.
  const std::string dir = rt.cache_dir() + "/autotune";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].extension(), ".json");
  std::ifstream in(files[0]);
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc.at("best"), cands[0].name);
  EXPECT_TRUE(doc.at("best_ms").is_null());
  EXPECT_EQ(doc.at("mode"), "compile-only");
  EXPECT_EQ(doc.at("tuning_key"), "n=4096");
  EXPECT_EQ(doc.at("candidates").size(), 3u);

  // Another tuning key is tuned on its own (here its specialization differs: new binaries).
  const auto run2 = scale_runner(rt, k, 4096, 8192, 4097, nullptr, &calls);
  const Selection other = autotune(rt, k, "n=4097", cands, run2);
  EXPECT_FALSE(other.cached);
  EXPECT_EQ(calls, 6);
  EXPECT_EQ(rt.monitor().records().size(), 6u);
  EXPECT_EQ(rt.autotuner().cached_picks(), 2u);
}

TEST(Autotune, LaunchingThePickRecordsItsProvenance) {
  JitRuntime rt(compile_only());
  const KernelSource k = scale_kernel();
  const auto cands = block_candidates();
  const auto run = scale_runner(rt, k, 4096, 8192, 4096, nullptr, nullptr);
  const Selection sel = autotune(rt, k, "n=4096", cands, run);
  {
    SelectionScope scope(rt, sel);
    scale_runner(rt, k, 4096, 8192, 1, nullptr, nullptr)(sel.config);  // a new specialization
  }
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[3].selector, "autotune");
  EXPECT_EQ(recs[3].config, cands[0].name);
  EXPECT_EQ(recs[3].num_candidates, 3);
  EXPECT_NE(recs[3].key.find("i32:1"), std::string::npos) << recs[3].key;
}

TEST(Autotune, PersistedPickReloadsInANewRuntime) {
  TempDir dir;
  const KernelSource k = scale_kernel();
  const auto cands = block_candidates();
  std::string picked;
  {
    JitRuntime rt(compile_only(dir.path));
    picked = autotune(rt, k, "n=4096", cands, scale_runner(rt, k, 4096, 8192, 4096, nullptr,
                                                          nullptr))
                 .config.name;
  }
  JitRuntime rt(compile_only(dir.path));
  int calls = 0;
  const auto run = scale_runner(rt, k, 4096, 8192, 4096, nullptr, &calls);
  const Selection sel = autotune(rt, k, "n=4096", cands, run);
  EXPECT_TRUE(sel.cached);
  EXPECT_EQ(sel.config.name, picked);
  EXPECT_EQ(sel.selector, "autotune");
  EXPECT_EQ(sel.candidates.size(), 3u);
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(rt.monitor().records().empty());
  // Launching the pick loads its binary from the same persistent directory.
  {
    SelectionScope scope(rt, sel);
    run(sel.config);
  }
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].source, "disk");
  EXPECT_EQ(recs[0].selector, "autotune");
  EXPECT_EQ(recs[0].config, picked);

  // Other candidates, or an edited kernel source, are tuned again.
  auto fewer = cands;
  fewer.pop_back();
  EXPECT_FALSE(autotune(rt, k, "n=4096", fewer, run).cached);
  KernelSource edited = k;
  const std::string edited_text = std::string(kScaleSource) + "\n// edited\n";
  edited.source = edited_text.c_str();
  EXPECT_FALSE(autotune(rt, edited, "n=4096", cands,
                        scale_runner(rt, edited, 4096, 8192, 4096, nullptr, nullptr))
                   .cached);
  // The name-keyed overload is keyed without the source: a pick of its own.
  EXPECT_FALSE(autotune(rt, "scale2", "n=4096", cands, run).cached);
  EXPECT_TRUE(autotune(rt, "scale2", "n=4096", cands, run).cached);
}

TEST(Autotune, FailingCandidateIsSkipped) {
  JitRuntime rt(compile_only());
  const KernelSource k = picky_kernel();
  const auto cands = block_candidates();  // BLOCK=64 fails its static_assert
  const Selection sel =
      autotune(rt, k, "n=4096", cands, scale_runner(rt, k, 4096, 8192, 4096, nullptr, nullptr));
  EXPECT_EQ(sel.config.name, cands[1].name);  // the first that compiled
  ASSERT_EQ(sel.failed.size(), 1u);
  EXPECT_EQ(sel.failed[0].rfind(cands[0].name + ": ", 0), 0u) << sel.failed[0];
  EXPECT_NE(sel.failed[0].find("BLOCK=64 is not supported"), std::string::npos) << sel.failed[0];
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].config, cands[1].name);
  EXPECT_EQ(recs[1].config, cands[2].name);
}

TEST(Autotune, EveryCandidateFailingRethrowsTheFirstError) {
  JitRuntime rt(compile_only());
  const KernelSource k = picky_kernel();
  const std::vector<KernelConfig> cands = {make_config({{"BLOCK", 64}}, 2),
                                           make_config({{"BLOCK", 64}}, 4)};
  try {
    autotune(rt, k, "n=4096", cands, scale_runner(rt, k, 4096, 8192, 4096, nullptr, nullptr));
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("BLOCK=64 is not supported"), std::string::npos);
  }
  EXPECT_EQ(rt.autotuner().cached_picks(), 0u);
}

TEST(Autotune, SingleCandidateNeedsNoTuning) {
  JitRuntime rt(compile_only());
  const KernelSource k = scale_kernel();
  int calls = 0;
  const std::vector<KernelConfig> one = {make_config({{"BLOCK", 128}}, 4)};
  const auto run = scale_runner(rt, k, 4096, 8192, 4096, nullptr, &calls);
  const Selection sel = autotune(rt, k, "n=4096", one, run);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(sel.selector, "autotune");
  EXPECT_EQ(sel.config.name, one[0].name);
  EXPECT_FALSE(sel.cached);
  EXPECT_TRUE(autotune(rt, k, "n=4096", one, run).cached);
}

// Triton's benchmark buffer: taken through JitOptions::benchmark_scratch per candidate after its
// first call (do_bench: fn(), synchronize, then the buffer), released after its benchmark; a
// cached pick or a single candidate takes none, and an allocation failure (out of memory) ends
// the autotune with that error, after the first candidate compiled.
TEST(Autotune, HoldsTritonsBenchmarkBufferWhileTuningAKey) {
  JitOptions o = compile_only();
  std::vector<int64_t> asked;
  std::vector<std::string> whats;
  int alive = 0, alive_while_running = -1;
  bool refuse = false;
  o.benchmark_scratch = [&](int64_t bytes, const std::string& what) -> std::shared_ptr<void> {
    asked.push_back(bytes);
    whats.push_back(what);
    if (refuse) throw Error("CUDA out of memory. Tried to allocate 256.00 MiB.");
    ++alive;
    return std::shared_ptr<void>(new int(0), [&](void* p) {
      --alive;
      delete static_cast<int*>(p);
    });
  };
  JitRuntime rt(o);
  const KernelSource k = scale_kernel();
  int calls = 0;
  const auto counted = scale_runner(rt, k, 4096, 8192, 4096, nullptr, &calls);
  const auto run = [&](const KernelConfig& c) {
    alive_while_running = alive;
    counted(c);
  };
  const auto cands = block_candidates();
  autotune(rt, k, "n=4096", cands, run);
  EXPECT_EQ(asked, std::vector<int64_t>(cands.size(), kTritonBenchBufferBytes));  // one per candidate
  EXPECT_EQ(kTritonBenchBufferBytes, 256LL << 20);
  EXPECT_EQ(alive_while_running, 0);  // the first call of a candidate runs before the buffer
  EXPECT_EQ(alive, 0);                // released after each candidate
  ASSERT_FALSE(whats.empty());
  EXPECT_EQ(whats[0], "the autotune of " + k.name + " for tuning key 'n=4096', candidate " + cands[0].name);
  autotune(rt, k, "n=4096", cands, run);  // cached: no buffer
  autotune(rt, k, "n=1", {make_config({{"BLOCK", 128}}, 4)}, run);  // one candidate: none
  EXPECT_EQ(asked.size(), cands.size());
  refuse = true;
  const int before = calls;
  const auto run2 = scale_runner(rt, k, 4096, 8192, 4097, nullptr, &calls);
  EXPECT_THROW(autotune(rt, k, "n=4097", cands, run2), Error);
  EXPECT_EQ(calls, before + 1);  // the first candidate ran (compiled) before the buffer failed
  EXPECT_EQ(rt.autotuner().cached_picks(), 2u);  // nothing kept for the failed key
}

// An autotune first needed inside an engine's graph capture is the engine's crash in compile-only
// mode too (the GPU's do_bench would synchronize inside the capture), even when every candidate
// is already compiled; a pick made before the capture and a single candidate need no benchmark.
TEST(Autotune, BenchmarkingInsideAnEngineCaptureIsRefusedInCompileOnlyMode) {
  JitRuntime rt(compile_only());
  const KernelSource k = scale_kernel();
  const auto cands = block_candidates();
  int calls = 0;
  const auto run = scale_runner(rt, k, 4096, 8192, 4096, nullptr, &calls);
  const Selection warm = autotune(rt, k, "n=4096", cands, run);  // compiles all three
  ASSERT_EQ(calls, 3);
  const size_t records = rt.monitor().records().size();

  rt.set_capturing("FULL decode graph of 8 tokens");
  EXPECT_EQ(rt.capturing_graph(), "FULL decode graph of 8 tokens");
  std::string error;
  try {
    autotune(rt, k, "n=8192", cands, run);  // same kernels, a tuning key not tuned yet
  } catch (const CaptureUnsupportedError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("operation not permitted when stream is capturing"), std::string::npos)
      << error;
  EXPECT_NE(error.find("autotune of scale2 for tuning key 'n=8192'"), std::string::npos) << error;
  EXPECT_NE(error.find("FULL decode graph of 8 tokens"), std::string::npos) << error;
  EXPECT_EQ(calls, 3);  // nothing ran
  const Selection cached = autotune(rt, k, "n=4096", cands, run);
  EXPECT_TRUE(cached.cached);
  EXPECT_EQ(cached.config.name, warm.config.name);
  const std::vector<KernelConfig> one = {cands[1]};
  EXPECT_EQ(autotune(rt, k, "n=8192", one, run).config.name, cands[1].name);
  EXPECT_EQ(rt.monitor().records().size(), records);
  rt.set_capturing("");
  EXPECT_EQ(rt.capturing_graph(), "");
  EXPECT_EQ(autotune(rt, k, "n=8192", cands, run).config.name, cands[0].name);
  EXPECT_EQ(calls, 6);
}

TEST(Autotune, BadCandidateListsAreErrors) {
  JitRuntime rt(compile_only());
  const KernelSource k = scale_kernel();
  const auto run = scale_runner(rt, k, 4096, 8192, 4096, nullptr, nullptr);
  EXPECT_THROW(autotune(rt, k, "n", {}, run), Error);
  const std::vector<KernelConfig> same = {make_config({{"BLOCK", 128}}, 4),
                                          make_config({{"BLOCK", 128}}, 4)};
  EXPECT_THROW(autotune(rt, k, "n", same, run), Error);
}

TEST(Autotune, HotPathCompileErrorPropagatesAndNothingIsKept) {
  JitOptions o = compile_only();
  o.monitor = MonitorMode::kError;
  JitRuntime rt(o);
  rt.monitor().activate();
  const KernelSource k = scale_kernel();
  EXPECT_THROW(autotune(rt, k, "n=4096", block_candidates(),
                        scale_runner(rt, k, 4096, 8192, 4096, nullptr, nullptr)),
               HotPathCompileError);
  EXPECT_EQ(rt.autotuner().cached_picks(), 0u);
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].source, "refused");
  EXPECT_EQ(recs[0].selector, "autotune");
  EXPECT_EQ(recs[0].config, block_candidates()[0].name);
}

// ---------------------------------------------------------------- autotune (GPU)

struct DeviceBuffers {
  CUdeviceptr x = 0;
  CUdeviceptr y = 0;
  explicit DeviceBuffers(int n) {
    const DriverApi& d = driver();
    ensure_context();
    CS_CU_CHECK(d.cuMemAlloc(&x, n * sizeof(float)));
    CS_CU_CHECK(d.cuMemAlloc(&y, n * sizeof(float)));
    std::vector<float> hx(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) hx[static_cast<size_t>(i)] = static_cast<float>(i % 1000);
    CS_CU_CHECK(d.cuMemcpyHtoD(x, hx.data(), n * sizeof(float)));
  }
  ~DeviceBuffers() {
    driver().cuMemFree(x);
    driver().cuMemFree(y);
  }
};

TEST(GpuAutotune, BenchmarksEveryCandidateOnceThenCaches) {
  if (!driver_available()) {
    GTEST_SKIP() << "no CUDA driver/GPU: " << driver_unavailable_reason();
  }
  JitRuntime rt(JitOptions{});  // arch from the GPU, launching on
  const int n = 1 << 20;
  DeviceBuffers buf(n);
  const KernelSource k = scale_kernel();
  const auto cands = block_candidates();
  int calls = 0;
  const auto run = scale_runner(rt, k, buf.y, buf.x, n, nullptr, &calls);
  AutotuneOptions opts;
  opts.warmup_ms = 2;
  opts.rep_ms = 10;

  const Selection first = autotune(rt, k, "n=1048576", cands, run, nullptr, opts);
  EXPECT_FALSE(first.cached);
  ASSERT_TRUE(first.best_ms.has_value());
  EXPECT_GT(*first.best_ms, 0.0);
  EXPECT_GE(calls, 3 * 8);  // per candidate: 1 + 5 (estimate) + >= 1 warmup + >= 1 timed
  auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 3u);  // one compile per candidate, however many launches
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(recs[i].selector, "autotune");
    EXPECT_EQ(recs[i].config, cands[i].name);
    EXPECT_EQ(recs[i].num_candidates, 3);
  }
  EXPECT_TRUE(first.failed.empty());

  const int calls_after_first = calls;
  const Selection second = autotune(rt, k, "n=1048576", cands, run, nullptr, opts);
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(second.config.name, first.config.name);
  ASSERT_TRUE(second.best_ms.has_value());
  EXPECT_EQ(*second.best_ms, *first.best_ms);
  EXPECT_EQ(calls, calls_after_first);
  EXPECT_EQ(rt.monitor().records().size(), 3u);

  // The kernel computed y = 2x with every candidate.
  CS_CU_CHECK(driver().cuStreamSynchronize(nullptr));
  std::vector<float> hy(static_cast<size_t>(n));
  CS_CU_CHECK(driver().cuMemcpyDtoH(hy.data(), buf.y, n * sizeof(float)));
  for (int i = 0; i < n; i += 4099) {
    ASSERT_FLOAT_EQ(hy[static_cast<size_t>(i)], 2.0f * static_cast<float>(i % 1000)) << i;
  }
}

TEST(GpuAutotune, BenchmarkingDuringStreamCaptureRaises) {
  if (!driver_available()) {
    GTEST_SKIP() << "no CUDA driver/GPU: " << driver_unavailable_reason();
  }
  JitRuntime rt(JitOptions{});
  const DriverApi& d = driver();
  const int n = 1 << 16;
  DeviceBuffers buf(n);
  CUstream stream = nullptr;
  CS_CU_CHECK(d.cuStreamCreate(&stream, CU_STREAM_DEFAULT));  // a blocking stream
  const KernelSource k = scale_kernel();
  const auto cands = block_candidates();
  const auto run = scale_runner(rt, k, buf.y, buf.x, n, stream, nullptr);
  AutotuneOptions opts;
  opts.warmup_ms = 1;
  opts.rep_ms = 2;
  const Selection warm = autotune(rt, k, "warm", cands, run, stream, opts);  // before capture
  const size_t records_before = rt.monitor().records().size();

  CS_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  std::string error;
  try {
    autotune(rt, k, "cold", cands, run, stream, opts);
  } catch (const CudaError& e) {
    error = e.what();
  }
  std::string legacy_error;
  try {  // the legacy stream is unusable while a blocking stream captures
    autotune(rt, k, "cold-legacy", cands, run, nullptr, opts);
  } catch (const CudaError& e) {
    legacy_error = e.what();
  }
  const Selection cached = autotune(rt, k, "warm", cands, run, stream, opts);  // fine: no bench
  CUgraph graph = nullptr;
  const CUresult end = d.cuStreamEndCapture(stream, &graph);
  if (graph != nullptr) d.cuGraphDestroy(graph);

  EXPECT_EQ(end, CUDA_SUCCESS) << "the capture was invalidated: " << cu_result_text(end);
  EXPECT_NE(error.find("not permitted while the stream is capturing"), std::string::npos)
      << error;
  EXPECT_NE(error.find("capture active"), std::string::npos) << error;
  EXPECT_NE(legacy_error.find("not permitted while the stream is capturing"), std::string::npos)
      << legacy_error;
  EXPECT_TRUE(cached.cached);
  EXPECT_EQ(cached.config.name, warm.config.name);
  EXPECT_EQ(rt.monitor().records().size(), records_before);  // nothing compiled under capture
  CS_CU_CHECK(d.cuStreamSynchronize(stream));
  CS_CU_CHECK(d.cuStreamDestroy(stream));
}

}  // namespace
}  // namespace coldstart::jit
