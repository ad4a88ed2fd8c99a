// End to end, per model family and target: hybrid layouts, MoE configs, Mamba and GDN keys,
// DeepSeek V4 on other archs, the compile memo, the steady request and `coldstart list`.
// Speculative decoding is in spec_decode_e2e_test.cpp.
#include "harness/cli/e2e_fixture.h"

#include <set>
#include <string>
#include <vector>

namespace coldstart {
namespace {

using namespace e2e;  // NOLINT: the fixture and its helpers

TEST_F(ReplayE2E, OverlappingRequestsFormMixedBatchesListedPerStep) {
  auto by = replay("scenarios/qwen3-8b-overlapping-requests.yaml", "--strategy none");
  ASSERT_EQ(by.size(), 1u);
  const nlohmann::json& schedule = by.begin()->second.extra.at("schedule");
  int mixed = 0, max_reqs = 0;
  for (const auto& step : schedule) {
    if (step.at("wave").get<int>() != 0) continue;
    int prefill = 0, decode = 0;
    for (const auto& q : step.at("seqs")) (q.at("kind") == "decode" ? decode : prefill)++;
    EXPECT_EQ(step.at("mixed").get<bool>(), prefill > 0 && decode > 0) << step.dump();
    mixed += step.at("mixed").get<bool>();
    max_reqs = std::max(max_reqs, prefill + decode);
  }
  EXPECT_GE(mixed, 2) << "the second and third requests prefill beside running decodes";
  EXPECT_EQ(max_reqs, 3);
  // The steady request runs alone afterwards.
  for (const auto& step : schedule)
    if (step.at("wave").get<int>() == 1) EXPECT_EQ(step.at("seqs").size(), 1u);
}

/// Qwen3-Next: the hybrid cache layout, which tuned-table entry each token count used and where
/// it first compiled, and the compile keys that separate serving from the GDN warmer.
TEST_F(ReplayE2E, QwenNextHybridLayoutMoeConfigsAndGdnKeys) {
  // (The run's compile memo serves the second strategy's keys, which halves the NVRTC time.)
  auto by = replay("scenarios/qwen3-next-gdn.yaml", "--strategy none --strategy qwen-gdn-warmup");
  ASSERT_EQ(by.size(), 2u);
  const StrategyResult& none = by.at("none []");
  const StrategyResult& warm = by.at("qwen-gdn-warmup []");
  // vLLM's hybrid rule: a 544-token attention page (2 * 544 * 2 KV heads * 256 * 2 B) holds one
  // request's GDN state (conv 3 x 8192 bf16 + SSM 32 x 128 x 128 bf16).
  EXPECT_EQ(none.extra.at("block_size_raised").at("to").get<int>(), 544);
  EXPECT_EQ(none.extra.at("kv_cache_plan").at("page_bytes").get<int64_t>(), 2 * 544 * 2 * 256 * 2);
  // Grouped as vLLM's KV cache manager does: group_size 2 (the attention layers), so the six GDN
  // layers form three groups of two, sharing 2 tensors with the attention group.
  EXPECT_EQ(none.extra.at("cache_groups").size(), 4u);
  EXPECT_EQ(none.extra.at("kv_cache_plan").at("tensors").get<int>(), 2);
  // Fused MoE: M = 2048 (the profile run) and the decode capture sizes use their own table
  // entries; the second chunk (952 tokens) takes entry 1024, first used on the hot path.
  std::map<int, nlohmann::json> used;
  for (const auto& u : none.extra.at("model").at("fused_moe_configs")) used[u.at("M").get<int>()] = u;
  ASSERT_TRUE(used.count(2048) && used.count(952) && used.count(1));
  EXPECT_EQ(used[2048].at("first_phase"), "profile_run");
  EXPECT_EQ(used[2048].at("tuning_key"), "M=2048 -> 2048");
  EXPECT_EQ(used[952].at("tuning_key"), "M=952 -> 1024");
  EXPECT_EQ(used[952].at("first_phase"), "continuation_prefill");
  EXPECT_EQ(used[1].at("first_phase"), "graph_capture");
  // The mixed batch (one decode, then a prefill) gathers states through index / mask slices at
  // num_decodes = 1: unaligned pointers, a key of its own, which the warmer compiled at startup.
  std::string mixed_gather;
  for (const auto& c : none.hot_path_compiles)
    if (c.kernel == "mamba_gather_initial_states" && c.phase == "decode") mixed_gather = c.key;
  ASSERT_FALSE(mixed_gather.empty());
  EXPECT_NE(mixed_gather.find(",*i32,*u8,"), std::string::npos) << mixed_gather;
  bool warmed = false;
  for (const auto& c : warm.startup_compile_list)
    warmed |= c.key == mixed_gather && c.phase == "kernel_warmup";
  EXPECT_TRUE(warmed) << "the warmer's unaligned case compiles the mixed batch's key";
  // The warmer's conv1d call has one token: its key differs from serving's in that
  // specialization only, so serving prefills still compile conv1d.
  int conv_hot = 0;
  for (const auto& c : warm.hot_path_compiles) conv_hot += c.kernel == "mamba_causal_conv1d_fwd";
  EXPECT_EQ(conv_hot, 2) << "2048- and 952-token prefills";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Nemotron-3-Super at one rank of TP 8 with a TurboQuant KV cache: rank shapes, vLLM's hybrid
/// block size, and the continuation prefill's workspace growth at that block size.
TEST_F(ReplayE2E, NemotronSuperRankShapesBlockSizeAndTurboQuantWorkspace) {
  auto by = replay("scenarios/nemotron-3-super-turboquant.yaml",
                   "--strategy none --strategy tq-decode-warmup "
                   "--set requests.0.prompt_tokens=16384");
  ASSERT_EQ(by.size(), 2u);
  const StrategyResult& none = by.at("none []");
  const nlohmann::json& shapes = none.extra.at("model").at("rank_shapes");
  // 32 query heads / 8, 2 KV heads replicated to 1 per rank; 128 Mamba heads / 8, 8 groups / 8;
  // expert intermediate 2688 / 8.
  EXPECT_EQ(shapes.at("attention").at("q_heads"), 4);
  EXPECT_EQ(shapes.at("attention").at("kv_heads"), 1);
  EXPECT_EQ(shapes.at("mamba2").at("heads"), 16);
  EXPECT_EQ(shapes.at("mamba2").at("groups"), 1);
  const int64_t conv_dim = 16 * 64 + 2 * 1 * 128;
  EXPECT_EQ(shapes.at("mamba2").at("conv_dim"), conv_dim);
  EXPECT_EQ(shapes.at("moe").at("intermediate"), 336);
  // vLLM's hybrid rule: the attention block grows until a page holds one Mamba state page
  // (bf16 conv state (4 - 1) x conv_dim + float32 SSM state 16 x 64 x 128), in multiples of 16;
  // a TurboQuant 4-bit token of one KV head at D 128 takes 134 bytes.
  const int64_t state_page = 3 * conv_dim * 2 + 16 * 64 * 128 * 4;
  const int64_t block = ceil_div(ceil_div(state_page, 134), 16) * 16;
  EXPECT_EQ(block, 3984);
  EXPECT_EQ(none.extra.at("block_size_raised").at("to").get<int64_t>(), block);
  // Capture locked the batch-4 decode scratch (4 query heads on this rank); the first
  // continuation chunk (2048 cached tokens) needs one block's K and V.
  EXPECT_EQ(none.workspace.locked_bytes, tq::decode_workspace_bytes(4, 4, 128));
  EXPECT_EQ(none.outcome, Outcome::kCrash);
  EXPECT_NE(none.error.value_or("").find(
                "requires " + mb(tq::continuation_workspace_bytes(1, block, 128)) + " MB"),
            std::string::npos)
      << none.error.value_or("");
  // The decode warmer's reservation covers that one block; the second continuation chunk (4096
  // cached tokens) needs two.
  const StrategyResult& dec = by.at("tq-decode-warmup []");
  EXPECT_EQ(dec.outcome, Outcome::kCrash);
  EXPECT_EQ(dec.failed_phase.value_or(""), "continuation_prefill");
  EXPECT_NE(dec.error.value_or("").find(
                "requires " + mb(tq::continuation_workspace_bytes(1, 2 * block, 128)) +
                " MB, current size is " + mb(tq::continuation_workspace_bytes(1, block, 128))),
            std::string::npos)
      << dec.error.value_or("");
}

/// Nemotron-3-Nano: the continuation chunk's SSD chain is a second specialization
/// (HAS_INITSTATES), the conv1d warmer's one-token call never reaches the prefill's keys, and the
/// run's compile memo serves the second strategy's compiles with the first's measured times.
TEST_F(ReplayE2E, NemotronNanoSsdSpecializationsConvWarmerAndCompileMemo) {
  // This run's own memo: the suite's shared one would serve the first strategy too.
  unsetenv("COLDSTART_COMPILE_MEMO_DIR");
  auto by = replay("scenarios/nemotron-3-nano.yaml",
                   "--strategy none --strategy mamba-conv1d-warmup");
  ASSERT_EQ(by.size(), 2u);
  const StrategyResult& none = by.at("none []");
  const StrategyResult& conv = by.at("mamba-conv1d-warmup []");
  // bf16 conv state 3 x 6144 + float32 SSM state 64 x 64 x 128 over a bf16 token of 2 KV heads.
  const int64_t state_page = 3 * 6144 * 2 + 64 * 64 * 128 * 4;
  EXPECT_EQ(none.extra.at("block_size_raised").at("to").get<int64_t>(),
            ceil_div(ceil_div(state_page, 2 * 128 * 2 * 2), 16) * 16);
  int with_init = 0, without_init = 0;
  for (const auto& c : none.hot_path_compiles) {
    if (c.kernel != "mamba_ssd_chunk_scan") continue;
    const bool init = c.key.find("HAS_INITSTATES=1") != std::string::npos;
    EXPECT_EQ(c.phase, init ? "continuation_prefill" : "prefill") << c.key;
    (init ? with_init : without_init)++;
  }
  EXPECT_GT(with_init, 0);
  EXPECT_EQ(with_init, without_init) << "the same autotune candidates for both";
  std::set<std::string> served;
  for (const auto& c : none.hot_path_compiles)
    if (c.kernel == "mamba_causal_conv1d_fwd") served.insert(c.key);
  int warmed = 0;
  for (const auto& c : conv.startup_compile_list) {
    if (c.kernel != "mamba_causal_conv1d_fwd" || c.phase != "kernel_warmup") continue;
    ++warmed;
    EXPECT_EQ(served.count(c.key), 0u) << "warmed a key serving never uses: " << c.key;
  }
  EXPECT_GT(warmed, 0);
  // Each first-request autotuning is listed with its candidates, and its compile time is that of
  // the candidates' compile records; nothing is benchmarked in compile-only mode.
  ASSERT_TRUE(none.extra.contains("autotunes"));
  std::set<std::string> tuned;
  for (const auto& a : none.extra.at("autotunes")) {
    const std::string kernel = a.at("kernel"), key = a.at("tuning_key"), phase = a.at("phase");
    tuned.insert(kernel);
    EXPECT_TRUE(a.at("hot_path").get<bool>()) << kernel;
    EXPECT_TRUE(a.at("benchmark_ms").is_null()) << kernel;
    int n = 0;
    double ms = 0;
    for (const auto& c : none.hot_path_compiles) {
      if (c.kernel == kernel && c.tuning_key == key && c.phase == phase) {
        ++n;
        ms += c.compile_ms;
      }
    }
    EXPECT_EQ(a.at("num_candidates").get<int>(), n) << kernel << " " << phase;
    EXPECT_EQ(a.at("candidate_ms").size(), static_cast<size_t>(n)) << kernel;
    EXPECT_NEAR(a.at("compile_ms").get<double>(), ms, 1e-3) << kernel;
    EXPECT_GE(a.at("tune_ms").get<double>(), a.at("compile_ms").get<double>()) << kernel;
  }
  EXPECT_EQ(tuned, (std::set<std::string>{"mamba_ssd_cumsum", "mamba_ssd_chunk_state",
                                          "mamba_ssd_state_passing", "mamba_ssd_bmm",
                                          "mamba_ssd_chunk_scan"}));
  // Compile memo: every key the second strategy compiles after startup, none compiled first.
  std::map<std::string, double> first_ms;
  for (const auto& c : none.hot_path_compiles) {
    EXPECT_FALSE(c.reused);
    first_ms[c.key] = c.compile_ms;
  }
  ASSERT_EQ(conv.hot_path_compiles.size(), none.hot_path_compiles.size());
  for (const auto& c : conv.hot_path_compiles) {
    EXPECT_TRUE(c.reused) << c.key;
    ASSERT_TRUE(first_ms.count(c.key)) << c.key;
    EXPECT_NEAR(c.compile_ms, first_ms[c.key], 1e-3) << c.key;
  }
}

/// The H100 and the H200 are both sm_90, but vLLM picks fused_moe tiles from a tuned table named
/// for the device: with every Mamba warmer, the H100's table leaves two more MoE GEMMs cold than
/// the H200's (measured on both GPUs at 42c08e7). The scenario's `device:` rules hold for the
/// --target profile's device name in compile-only mode, and only there.
TEST_F(ReplayE2E, NemotronNanoDeviceRulesFollowTheTargetsTunedTable) {
  struct Case {
    const char* target;
    size_t compiles, moe_tiles;  // conv1d twice, the paged prefill, then w13 + w2 per MoE tile
    const char* met;             // the device of the rule that applies
  };
  for (const Case& c : {Case{"h100", 7, 2, "h100"}, Case{"h200", 5, 1, "h200"}}) {
    SCOPED_TRACE(c.target);
    const std::string out = paths::join(dir_, std::string(c.target) + ".txt"),
                      json = paths::join(dir_, std::string(c.target) + ".json");
    const int rc = run_coldstart("replay scenarios/nemotron-3-nano.yaml --device compile-only "
                                 "--target " + std::string(c.target) +
                                     " --strategy all-mamba --check --json " + json,
                                 out);
    ASSERT_EQ(rc, 0) << read_text(out);
    const auto j = nlohmann::json::parse(read_text(json));
    const auto& r = j.at("results").at(0);
    EXPECT_EQ(r.at("hot_path_compiles").size(), c.compiles);
    std::set<std::string> moe_tiles;
    for (const auto& h : r.at("hot_path_compiles"))
      if (h.at("kernel") == "fused_moe_gemm") moe_tiles.insert(h.at("config").get<std::string>());
    EXPECT_EQ(moe_tiles.size(), c.moe_tiles) << "one tile per M class the table tells apart";
    int device_rules = 0;
    for (const auto& rule : j.at("rules")) {
      const std::string text = rule.at("rule");
      if (text.rfind("device ", 0) != 0) continue;
      ++device_rules;
      const bool mine = text.rfind(std::string("device ") + c.met, 0) == 0;
      EXPECT_EQ(rule.at("status"), mine ? "met" : "not_applicable") << text;
    }
    EXPECT_EQ(device_rules, 5);
  }
}

/// The first prefill autotunes the SSD chain, and Triton's do_bench holds a 256 MiB buffer from
/// torch's allocator while it benchmarks: on a 16 GB target whose KV cache took 99% of the memory,
/// that buffer no longer fits (torch's out-of-memory text, naming the phase, the request and what
/// held the memory). The Mamba warmers autotune in kernel_warmup, when it still fits.
TEST_F(ReplayE2E, NemotronNanoOn16GbRunsOutOfMemoryOnItsFirstPrefillWithoutAMambaWarmup) {
  const std::string out = paths::join(dir_, "a4000.txt"), json = paths::join(dir_, "a4000.json");
  ASSERT_EQ(run_coldstart("replay scenarios/nemotron-3-nano-16gb.yaml --device compile-only "
                          "--target rtx-a4000 --check --json " + json,
                          out),
            0)
      << read_text(out);
  const auto j = nlohmann::json::parse(read_text(json));
  // The engine summary carries what sizes the KV cache, so compare can tell such runs apart.
  EXPECT_EQ(j.at("scenario").at("engine").at("gpu_memory_utilization").get<double>(), 0.96);
  EXPECT_FALSE(j.at("scenario").at("engine").contains("num_gpu_blocks"));
  std::map<std::string, nlohmann::json> by;
  for (const auto& r : j.at("results")) by[r.at("strategy").get<std::string>()] = r;
  ASSERT_EQ(by.size(), 3u);
  const nlohmann::json& none = by.at("none");
  EXPECT_EQ(none.at("outcome"), "crash");
  EXPECT_EQ(none.at("failed_phase"), "prefill");
  // The generated warmer's 22 steps run after the KV cache too, and fit beside it on 16 GB.
  EXPECT_EQ(by.at("envelope").at("outcome"), "ok") << by.at("envelope").value("error", "");
  EXPECT_TRUE(by.at("envelope").at("hot_path_compiles").empty())
      << by.at("envelope").at("hot_path_compiles").dump();
  const std::string e = none.at("error");
  EXPECT_EQ(e.rfind("CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity "
                    "of 15.61 GiB of which ", 0), 0u) << e;
  // The allocation that failed is named: the do_bench buffer of the SSD chain's first autotune,
  // after its first candidate compiled (a hot-path compile of the crashed run).
  EXPECT_NE(e.find("[coldstart: in phase prefill (request 0, step 0), taking Triton's 256.00 MiB "
                   "benchmark buffer for the autotune of mamba_ssd_cumsum for tuning key '"),
            std::string::npos) << e;
  EXPECT_NE(e.find("; held then: weights "), std::string::npos) << e;
  bool cumsum_compiled = false;
  for (const auto& c : none.at("hot_path_compiles")) cumsum_compiled |= c.at("kernel") == "mamba_ssd_cumsum";
  EXPECT_TRUE(cumsum_compiled) << none.at("hot_path_compiles").dump();
  const long long total = none.at("kv_cache_budget").at("total_device_bytes");
  EXPECT_LE(none.at("phase_memory").at("0.prefill").at("peak_allocated_bytes").get<long long>(), total);
  const nlohmann::json& warmed = by.at("all-mamba");
  EXPECT_EQ(warmed.at("outcome"), "ok");
  // The warmers' autotunes held the 256 MiB buffer in kernel_warmup, after the KV cache.
  const nlohmann::json& pm = warmed.at("phase_memory");
  EXPECT_GE(pm.at("kernel_warmup").at("peak_allocated_bytes").get<long long>() -
                pm.at("kv_cache_alloc").at("allocated_bytes").get<long long>(),
            256LL << 20);
  EXPECT_EQ(warmed.at("kv_cache_bytes"), none.at("kv_cache_bytes"));  // same startup sizing
  // Declared, also in the run that crashed: outside the profile run's peak (nothing autotunes there).
  for (const nlohmann::json* r : {&none, &warmed}) {
    bool found = false;
    for (const auto& d : r->at("declared_scratch")) {
      if (d.at("name") != "autotune benchmark buffer") continue;
      found = true;
      EXPECT_EQ(d.at("bytes").get<long long>(), 256LL << 20);
      EXPECT_FALSE(d.at("seen_by_profile_run").get<bool>());
    }
    EXPECT_TRUE(found) << r->at("strategy");
  }
  // The CUDA context and library state are off limits, as on a card: in the budget's terms and in
  // torch's text ("this process has" counts them, "allocated by PyTorch" does not).
  EXPECT_EQ(none.at("kv_cache_budget").at("outside_allocator_at_init_bytes").get<long long>(),
            none.at("meta").at("target").at("context_bytes").get<long long>());
  EXPECT_EQ(none.at("kv_cache_budget").at("outside_allocator_bytes").get<long long>(),
            none.at("meta").at("target").at("library_growth_bytes").get<long long>());
  EXPECT_GT(none.at("meta").at("target").at("context_bytes").get<long long>(), 0);
  // A fixed num_gpu_blocks counts blocks of the raised size (2096 tokens here): 100 hold
  // max_model_len 8192 and the run starts.
  ASSERT_EQ(run_coldstart("replay scenarios/nemotron-3-nano-16gb.yaml --device compile-only "
                          "--target rtx-a4000 --strategy none --set engine.num_gpu_blocks=100 "
                          "--set engine.gpu_memory_utilization=0.9 --json " + json,
                          out),
            0)
      << read_text(out);
  {
    const auto fixed = nlohmann::json::parse(read_text(json)).at("results").at(0);
    EXPECT_EQ(fixed.at("num_gpu_blocks"), 100) << fixed.dump().substr(0, 400);
    EXPECT_EQ(fixed.at("block_size_raised").at("to"), 2096);
  }
  // A utilization the card cannot give once its context exists: vLLM refuses to start.
  ASSERT_EQ(run_coldstart("replay scenarios/nemotron-3-nano-16gb.yaml --device compile-only "
                          "--target rtx-a4000 --strategy none --set engine.gpu_memory_utilization=0.99 "
                          "--json " + json,
                          out),
            0)
      << read_text(out);
  const auto refused = nlohmann::json::parse(read_text(json)).at("results").at(0);
  EXPECT_EQ(refused.at("outcome"), "crash");
  EXPECT_EQ(refused.at("failed_phase"), "init");
  EXPECT_EQ(refused.at("error").get<std::string>().rfind(
                "Free memory on device cuda:0 (15.0", 0), 0u) << refused.at("error");
  EXPECT_NE(refused.at("error").get<std::string>().find(
                "GiB) on startup is less than desired GPU memory utilization (0.99, 15.45 GiB)."),
            std::string::npos) << refused.at("error");
}

/// NemotronH's dense relu2 MLP layers ('-', Nemotron-H 56B) replay in compile-only mode too; a
/// warmer that cannot run its batch under max_num_seqs 1 says so in the result.
TEST_F(ReplayE2E, NemotronHDenseMlpLayersReplayAndASkippedWarmerSaysSo) {
  auto by = replay("scenarios/nemotron-3-nano.yaml",
                   "--strategy mamba-cached-prefill-warmup --set max_num_seqs=1 "
                   "--set model.config=fixtures/hf-configs/nemotron-h-56b-base-8k.json");
  ASSERT_EQ(by.size(), 1u);
  const StrategyResult& r = by.begin()->second;
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.error.value_or("");
  EXPECT_EQ(r.extra.at("model").at("hybrid_override_pattern"), "M-M-M-M*");
  ASSERT_TRUE(r.extra.contains("warmers_skipped"));
  EXPECT_NE(r.extra.at("warmers_skipped").at("mamba-cached-prefill-warmup").get<std::string>().find(
                "max_num_seqs"),
            std::string::npos);
}

/// DeepSeek V4 on a B200 (SM100's DeepGEMM heuristic, its own expect: rules): the first 300-token
/// prompt without a DeepGEMM warmup compiles the FP8 GEMMs its M selects, the grouped output
/// projection among them, each record naming the heuristic's tile for M = 300; the seed's dense
/// sampling leaves nothing; and an sm_86 target skips the scenario (archs: [sm_90, sm_100]).
// What this NVRTC cannot compile for is refused before anything runs (exit 2) with the toolkit's
// version; what it can is accepted. With CUDA 12.8+ the B200 is replayable and sm_999 is not; with
// a distribution's CUDA 11.8 the B200 is refused, and so is DeepSeek V4 on an H200 (its DeepGEMM
// kernels need sm_90a).
TEST_F(ReplayE2E, NvrtcTargetsItCannotCompileForAreRefusedByName) {
  const std::string out = paths::join(dir_, "nvrtc.txt"), json = paths::join(dir_, "nvrtc.json");
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device compile-only --arch sm_999 "
                          "--json " + json, out),
            2);
  EXPECT_NE(read_text(out).find("cannot compile for sm_999"), std::string::npos) << read_text(out);
  if (!jit::nvrtc_can_target("sm_100")) {
    EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device compile-only --target b200 "
                            "--json " + json, out),
              2);
    EXPECT_NE(read_text(out).find("sm_100 needs CUDA 12.8 or newer"), std::string::npos) << read_text(out);
  }
  if (!jit::nvrtc_can_target("sm_90a")) {
    EXPECT_EQ(run_coldstart("replay scenarios/deepseek-v4-flash.yaml --device compile-only --target h200 "
                            "--json " + json, out),
              2);
    EXPECT_NE(read_text(out).find("cannot compile for sm_90a"), std::string::npos) << read_text(out);
  }
  EXPECT_FALSE(paths::exists(json));
}

TEST_F(ReplayE2E, DeepSeekV4OnB200AndSkippedOnSm86) {
  if (!jit::nvrtc_can_target("sm_100a")) GTEST_SKIP() << jit::nvrtc_cannot_target_text("sm_100a");
  const std::string out = paths::join(dir_, "b200.txt"), json = paths::join(dir_, "b200.json");
  ASSERT_EQ(run_coldstart("replay scenarios/deepseek-v4-flash.yaml --device compile-only --target b200 --check "
                          "--set 'matrix=requests.0.prompt_tokens: [300]' --strategy none --strategy deepgemm-warmup "
                          "--json " + json,
                          out),
            0)
      << read_text(out);
  std::map<std::string, StrategyResult> by;
  for (const auto& run : cli::read_any_results(json))
    for (const auto& r : run.results) by[r.strategy] = r;
  ASSERT_EQ(by.size(), 2u);
  std::set<std::string> kernels;
  for (const CompileEvent& c : hot_path_compiled(by["none"])) {
    kernels.insert(c.kernel);
    if (c.kernel == "fp8_gemm_nt" && c.phase == "prefill") {
      EXPECT_NE(c.tuning_key.find("M=300 "), std::string::npos) << c.tuning_key;
      EXPECT_EQ(c.selector, "heuristic");
      EXPECT_NE(c.key.find("@sm_100a/"), std::string::npos) << c.key;
    }
  }
  EXPECT_TRUE(kernels.count("fp8_einsum_bhr_hdr_bhd")) << "SM100's heuristic changes the einsum tile at M = 300";
  // The C4 layers' indexer reserves its prefill K-gather from the workspace manager in the
  // profile run at vLLM's largest (40 * max_model_len rows of 128 FP8 values + a float32 scale),
  // so the locked workspace holds it and the prompt's gather fits.
  for (const auto& [name, r] : by) {
    const int64_t rows = 40 * 16384;
    EXPECT_EQ(r.workspace.locked_bytes, rows * 128 + rows * 4) << name;
    EXPECT_EQ(r.extra.at("workspace_current_bytes").get<int64_t>(), rows * 132) << name;
    // Declared with vLLM's rule, as one the profile run saw; the autotune buffer as the engine's.
    std::map<std::string, nlohmann::json> scratch;
    for (const auto& d : r.extra.at("declared_scratch")) scratch[d.at("name").get<std::string>()] = d;
    ASSERT_TRUE(scratch.count("indexer prefill K-gather")) << name;
    EXPECT_EQ(scratch["indexer prefill K-gather"].at("bytes").get<int64_t>(), rows * 132) << name;
    EXPECT_TRUE(scratch["indexer prefill K-gather"].at("seen_by_profile_run").get<bool>()) << name;
    EXPECT_EQ(scratch["indexer prefill K-gather"].at("config_key"), "max_model_len") << name;
    // DeepGEMM's kernels take their configs from heuristics: nothing autotuned, no bench buffer.
    EXPECT_FALSE(scratch.count("autotune benchmark buffer")) << name;
  }
  EXPECT_TRUE(hot_path_compiled(by["deepgemm-warmup"]).empty());
  // The warmer's cost is in the result: its sampled calls, its distinct kernels, compile and wall time.
  const nlohmann::json& rep = by["deepgemm-warmup"].extra.at("warmer_reports").at("deepgemm-warmup");
  EXPECT_EQ(rep.at("m_values").get<int>(), 2432);  // 1..2048, then every 16th to 8192
  EXPECT_GT(rep.at("distinct_kernels").get<int>(), 50);
  EXPECT_LE(rep.at("compiled_or_loaded").get<int>(), rep.at("distinct_kernels").get<int>());
  EXPECT_GT(rep.at("compile_s").get<double>(), 0.0);
  EXPECT_EQ(run_coldstart("replay scenarios/deepseek-v4-flash.yaml --device compile-only --target rtx-a4000 --strategy none",
                          out),
            0)
      << read_text(out);
  EXPECT_NE(read_text(out).find("skipped"), std::string::npos) << read_text(out);
}

/// Compile-only time accounting (issue 23): identical work costs the same in every variant
/// whether NVRTC ran or the run's compile memo served it; a warmer's pool of N threads is
/// charged as N threads, not as one; warmer_ms agrees with the kernel_warmup phase.
TEST_F(ReplayE2E, CompileOnlyChargesIdenticalWorkAlikeAndOnTheWarmersThreads) {
  auto by = replay("scenarios/deepseek-v4-flash.yaml",
                   "--filter deepgemm --set max_num_batched_tokens=64 "
                   "--set 'matrix=requests.0.prompt_tokens: [1, 48]'");
  ASSERT_EQ(by.size(), 4u);
  auto warmup_ms = [](const StrategyResult& r) {
    for (const auto& p : r.phases)
      if (p.name == "kernel_warmup") return p.ms;
    return -1.0;
  };
  for (const auto& [name, r] : by) {
    ASSERT_EQ(r.outcome, Outcome::kOk) << name << ": " << r.error.value_or("");
    double warmers = 0;
    for (const auto& [w, ms] : r.extra.at("warmer_ms").items()) warmers += ms.get<double>();
    EXPECT_NEAR(warmers, warmup_ms(r), 0.02 * warmup_ms(r) + 20) << name;
  }
  for (const std::string s : {"deepgemm-warmup", "deepgemm-warmup-serial"}) {
    const double a = warmup_ms(by[s + " [prompt_tokens=1]"]), b = warmup_ms(by[s + " [prompt_tokens=48]"]);
    EXPECT_LT(std::max(a, b), 1.25 * std::min(a, b)) << s << ": " << a << " vs " << b << " ms";
  }
  const int threads = by["deepgemm-warmup [prompt_tokens=1]"]
                          .extra.at("warmer_reports").at("deepgemm-warmup").at("threads").get<int>();
  if (threads >= 2) {
    for (const char* v : {" [prompt_tokens=1]", " [prompt_tokens=48]"})
      EXPECT_LT(warmup_ms(by[std::string("deepgemm-warmup") + v]),
                0.8 * warmup_ms(by[std::string("deepgemm-warmup-serial") + v]))
          << v << ": the pool's " << threads << " threads compile side by side";
  }
}

/// The steady request follows a matrix axis over the first request's prompt length, so it is a
/// warm twin of the first request (issue 23): with one prompt token the steady request compiles
/// nothing (a fixed 300-token one compiled its own tiles); a steady request that pins another
/// length is marked not comparable, and Markdown shows first/steady as n/c.
TEST_F(ReplayE2E, SteadyRequestFollowsTheFirstRequestsShapeUnlessPinned) {
  auto by = replay("scenarios/deepseek-v4-flash.yaml",
                   "--strategy none --set 'matrix=requests.0.prompt_tokens: [1, 2048]'");
  ASSERT_EQ(by.size(), 2u);
  for (const auto& [label, prompt] : std::map<std::string, int>{
           {"none [prompt_tokens=1]", 1}, {"none [prompt_tokens=2048]", 2048}}) {
    const StrategyResult& r = by.at(label);
    ASSERT_EQ(r.outcome, Outcome::kOk) << label << ": " << r.error.value_or("");
    int steady_tokens = 0;
    for (const auto& step : r.extra.at("schedule"))
      if (step.at("wave") == 1) steady_tokens += step.at("num_tokens").get<int>();
    EXPECT_EQ(steady_tokens, prompt + 8) << label << ": prefill plus 8 decode steps";
    EXPECT_FALSE(r.extra.contains("steady_not_comparable")) << label;
    EXPECT_TRUE(steady_cold(r).empty()) << label << ": " << steady_cold(r).front().key;
  }
  const std::string md = paths::join(dir_, "r.md");
  auto pinned = replay("scenarios/nemotron-3-super-turboquant.yaml",
                       "--strategy tq-reserve-max --set requests.0.prompt_tokens=4096 --md " + md);
  ASSERT_EQ(pinned.size(), 1u);
  const StrategyResult& r = pinned.begin()->second;
  ASSERT_EQ(r.outcome, Outcome::kOk) << r.error.value_or("");
  EXPECT_EQ(r.extra.value("steady_not_comparable", ""),
            "the steady request has 2048 prompt tokens, the first request 4096");
  EXPECT_FALSE(r.extra.contains("first_time_cost_ms"));
  EXPECT_NE(read_text(md).find("| n/c |"), std::string::npos) << read_text(md);
}

/// `list` prints the registries and the scenarios' strategies; --filter narrows them and, like
/// grep, exits 1 when it matches nothing.
TEST_F(ReplayE2E, ListFiltersAndSaysWhenNothingMatches) {
  const std::string out = paths::join(dir_, "list.txt");
  ASSERT_EQ(run_coldstart("list --filter deepgemm", out), 0) << read_text(out);
  const std::string text = read_text(out);
  EXPECT_NE(text.find("warmers:\n  deepgemm-warmup"), std::string::npos) << text;
  EXPECT_NE(text.find("scenario deepseek-v4-flash (scenarios/deepseek-v4-flash.yaml):\n"
                      "  deepgemm-warmup [prompt_tokens=1]: [deepgemm-warmup]"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("tq-decode-warmup"), std::string::npos) << "filtered out";
  EXPECT_EQ(run_coldstart("list --filter no-such-thing", out), 1);
  EXPECT_EQ(read_text(out), "coldstart list: nothing matches --filter 'no-such-thing'\n");
}

}  // namespace
}  // namespace coldstart
