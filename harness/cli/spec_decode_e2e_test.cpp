// End to end, speculative decoding: verify steps and warmup metadata, the MTP drafters
// (Qwen3-Next, DeepSeek V4) and the refusals of what the replay cannot run.
#include "harness/cli/e2e_fixture.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace coldstart {
namespace {

using namespace e2e;  // NOLINT: the fixture and its helpers

/// Speculative decoding on Qwen3-Next (k = 2): vLLM's warmup metadata crashes the FULL capture
/// in the spec conv update (PR #39483), capture metadata does not; capture sizes rounded to
/// multiples of 3; verify rows of 3 tokens replay the size-3 graph; the Qwen GDN warmer's MTP
/// step compiles the fused MTP kernel at startup. A backend without a verify path is refused.
TEST_F(ReplayE2E, QwenNextMtpVerifyStepsAndWarmupMetadata) {
  // The two strategies the checks below read (the others cost CI time for nothing here).
  auto by = replay("scenarios/qwen3-next-gdn-mtp.yaml",
                   "--strategy none --strategy qwen-gdn-warmup");
  ASSERT_EQ(by.size(), 4u);  // 2 strategies x 2 variants
  for (const char* s : {"none", "qwen-gdn-warmup"}) {
    const StrategyResult& crash = by.at(std::string(s) + " [cudagraph_warmup_metadata=build]");
    EXPECT_EQ(crash.outcome, Outcome::kCrash) << s;
    EXPECT_EQ(crash.failed_phase.value_or(""), "graph_capture") << s;
    EXPECT_NE(crash.error.value_or("").find("operation not permitted when stream is capturing: "
                                            "mamba_causal_conv1d_update"),
              std::string::npos)
        << crash.error.value_or("");
    const StrategyResult& ok = by.at(std::string(s) + " [cudagraph_warmup_metadata=capture]");
    ASSERT_EQ(ok.outcome, Outcome::kOk) << s << ": " << ok.error.value_or("");
    const nlohmann::json& spec = ok.extra.at("spec_decode");
    EXPECT_EQ(spec.at("capture_sizes"), nlohmann::json({3, 6, 9}));
    EXPECT_EQ(spec.at("capture_sizes_given"), nlohmann::json({1, 2, 4, 8, 16}));
    // The spec conv update compiled in the capture's warmups, never on the hot path.
    bool warmed = false;
    for (const auto& c : ok.startup_compile_list)
      warmed |= c.kernel == "mamba_causal_conv1d_update" && c.phase == "graph_capture";
    EXPECT_TRUE(warmed) << s;
    for (const auto& c : ok.hot_path_compiles) EXPECT_NE(c.kernel, "mamba_causal_conv1d_update");
    // Verify rows of 3 tokens; the first request's context grows by 2 a step (1 of 2 drafts
    // accepted), and a lone verify request replays the size-3 FULL graph.
    int verify_steps = 0;
    std::vector<int> contexts;
    for (const auto& step : ok.extra.at("schedule")) {
      if (step.at("wave").get<int>() != 0) continue;
      for (const auto& row : step.at("seqs")) {
        if (row.at("kind") != "verify") continue;
        ++verify_steps;
        EXPECT_EQ(row.at("query").get<int>(), 3);
        contexts.push_back(row.at("context").get<int>());
        EXPECT_EQ(step.at("graph"), "full@3");
      }
    }
    EXPECT_EQ(verify_steps, 4) << "8 output tokens after the first, 2 a step";
    ASSERT_GE(contexts.size(), 2u);
    EXPECT_EQ(contexts[0], 600);
    EXPECT_EQ(contexts[1], 602);
  }
  std::set<std::string> mtp;
  for (const auto& c : by.at("qwen-gdn-warmup [cudagraph_warmup_metadata=capture]").startup_compile_list)
    if (c.kernel == "gdn_decode_mtp" && c.phase == "kernel_warmup") mtp.insert(c.key);
  EXPECT_FALSE(mtp.empty()) << "the warmer's MTP step";
  for (const auto& c : by.at("none [cudagraph_warmup_metadata=capture]").startup_compile_list)
    EXPECT_NE(c.kernel, "gdn_decode_mtp");

  const std::string out = paths::join(dir_, "spec.txt"), json = paths::join(dir_, "spec.json");
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device compile-only "
                          "--arch sm_90 --set engine.num_speculative_tokens=1 "
                          "--set engine.speculative_method=synthetic --json " + json, out),
            2);
  EXPECT_NE(read_text(out).find("engine.num_speculative_tokens"), std::string::npos) << read_text(out);
  EXPECT_NE(read_text(out).find("no speculative-decoding verify path"), std::string::npos)
      << read_text(out);
  EXPECT_FALSE(paths::exists(json));
  // A size list that rounds to nothing (vLLM raises at startup) is refused at the list.
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-next-gdn-mtp.yaml --device compile-only "
                          "--arch sm_90 --set 'engine.cudagraph_capture_sizes=[1]' --json " + json,
                          out),
            2);
  EXPECT_NE(read_text(out).find("key 'engine.cudagraph_capture_sizes': no capture size is left "
                                "after rounding to a multiple of 3"),
            std::string::npos)
      << read_text(out);
  EXPECT_FALSE(paths::exists(json));
  // Lazy capture with speculative decoding is not replayed: refused with the capture policies.
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-next-gdn-mtp.yaml --device compile-only "
                          "--arch sm_90 --set engine.cudagraph_capture=lazy "
                          "--set engine.workspace_policy=grow --json " + json,
                          out),
            2);
  EXPECT_NE(read_text(out).find("lazy capture with num_speculative_tokens > 0 is not replayed"),
            std::string::npos)
      << read_text(out);
  EXPECT_FALSE(paths::exists(json));
}

// The MTP head drafts (speculative_method mtp): its attention layer joins the KV cache, its
// weights load after the target's, and its single-token pass is the first to need the split-KV
// decode kernels (the target's verify rows never take that path). A dummy run with attention
// that also runs the drafter (aot-prefill-warmup) compiles them before the first request; the
// synthetic method has no drafter and never needs them.
TEST_F(ReplayE2E, QwenNextMtpDrafterRunsAfterEveryStep) {
  auto mtp = replay("scenarios/qwen3-next-gdn-mtp.yaml",
                    "--set engine.cudagraph_warmup_metadata=capture --strategy none "
                    "--strategy aot-prefill-warmup");
  ASSERT_EQ(mtp.size(), 2u);  // the two strategies read below (the scenario's rules check the rest)
  auto kernels_in = [](const StrategyResult& r, const std::string& phase) {
    std::set<std::string> out;
    for (const auto& c : r.hot_path_compiles)
      if (phase.empty() || c.phase == phase) out.insert(c.kernel);
    for (const auto& c : r.startup_compile_list)
      if (c.phase == phase) out.insert(c.kernel);
    return out;
  };
  const StrategyResult& none = mtp.at("none []");
  ASSERT_EQ(none.outcome, Outcome::kOk) << none.error.value_or("");
  ASSERT_EQ(none.extra.at("drafter_layer_plan").size(), 1u);
  EXPECT_NE(none.extra.at("drafter_layer_plan")[0].get<std::string>().find("attention"),
            std::string::npos);
  EXPECT_GT(none.extra.at("drafter_weights_bytes").get<int64_t>(), 0);
  // Layer 8 (after the target's 0..7) is in the KV cache groups.
  bool cached = false;
  for (const auto& g : none.extra.at("cache_groups"))
    for (const auto& l : g.at("layers")) cached |= l.get<int>() == 8;
  EXPECT_TRUE(cached) << none.extra.at("cache_groups").dump();
  const std::set<std::string> hot = kernels_in(none, "prefill");
  EXPECT_TRUE(hot.count("paged_decode_stage1") && hot.count("paged_decode_stage2"))
      << "the drafter's single-token pass after the first prefill";
  // Stamped with that pass: the second, one row padded to capture size 3. The target's own
  // compiles of the step carry no drafter pass.
  for (const auto& c : none.hot_path_compiles) {
    if (c.kernel.rfind("paged_decode_stage", 0) == 0) {
      EXPECT_EQ(c.step.drafter_pass, 2) << c.kernel;
      EXPECT_EQ(c.step.drafter_tokens, 3) << c.kernel;
    }
    if (c.kernel == "gdn_post_conv") EXPECT_EQ(c.step.drafter_pass, 0);
  }
  const StrategyResult& aot = mtp.at("aot-prefill-warmup []");
  ASSERT_EQ(aot.outcome, Outcome::kOk) << aot.error.value_or("");
  EXPECT_TRUE(kernels_in(aot, "kernel_warmup").count("paged_decode_stage1"));
  for (const auto& c : aot.hot_path_compiles) EXPECT_NE(c.kernel, "paged_decode_stage1");

  auto syn = replay("scenarios/qwen3-next-gdn-mtp.yaml",
                    "--set engine.cudagraph_warmup_metadata=capture "
                    "--set engine.speculative_method=synthetic --strategy none "
                    "--strategy aot-prefill-warmup");
  ASSERT_EQ(syn.size(), 2u);
  for (const auto& [name, r] : syn) {
    ASSERT_EQ(r.outcome, Outcome::kOk) << name << ": " << r.error.value_or("");
    EXPECT_FALSE(r.extra.contains("drafter_layer_plan")) << name;
    for (const auto& c : r.hot_path_compiles) EXPECT_NE(c.kernel, "paged_decode_stage1") << name;
    EXPECT_FALSE(kernels_in(r, "kernel_warmup").count("paged_decode_stage1")) << name;
  }
  EXPECT_GT(none.extra.at("weights_bytes").get<int64_t>(),
            syn.at("none []").extra.at("weights_bytes").get<int64_t>());

  // A family without an MTP head is refused under the mtp method, before anything runs.
  const std::string out = paths::join(dir_, "mtp.txt"), json = paths::join(dir_, "mtp.json");
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-bf16.yaml --device compile-only --arch sm_90 "
                          "--set engine.num_speculative_tokens=1 --json " + json, out),
            2);
  EXPECT_NE(read_text(out).find("engine.speculative_method"), std::string::npos) << read_text(out);
  EXPECT_NE(read_text(out).find("mtp (the default): the dense family has no MTP head in "
                                "coldstart; set speculative_method: synthetic"),
            std::string::npos)
      << read_text(out);
  EXPECT_FALSE(paths::exists(json));
  // Where the synthetic method is refused too, the hint says so instead of pointing at it.
  EXPECT_EQ(run_coldstart("replay scenarios/nemotron-3-nano.yaml --device compile-only --arch "
                          "sm_90 --set engine.num_speculative_tokens=1 --json " + json, out),
            2);
  EXPECT_NE(read_text(out).find("backend has no verify path, so speculative decoding is not "
                                "replayed for this model"),
            std::string::npos)
      << read_text(out);
  EXPECT_EQ(read_text(out).find("set speculative_method: synthetic"), std::string::npos)
      << read_text(out);
}

/// DeepSeek V4's MTP head and verify steps (k = 1 and 3). The MTP layer is one sliding-window
/// layer numbered after the target's and joins the KV cache; its first pass over the 300-token
/// prompt runs h_proj on 4 x 300 rows (a tile the target's own rows do not need). Verify steps
/// take the indexer's paged path: next_n 2 natively at k = 1, flattened onto next_n 1 at k = 3.
/// deepgemm-warmup-mtp compiles the next_n 2 kernel before the first request.
TEST_F(ReplayE2E, DeepseekV4MtpVerifyStepsTakeThePagedIndexer) {
  auto by = replay("scenarios/deepseek-v4-flash-mtp.yaml", "--strategy none --strategy deepgemm-warmup-mtp");
  ASSERT_EQ(by.size(), 4u);  // 2 strategies x 2 variants
  const StrategyResult& k1 = by.at("none [num_speculative_tokens=1]");
  ASSERT_EQ(k1.outcome, Outcome::kOk) << k1.error.value_or("");
  ASSERT_EQ(k1.extra.at("drafter_layer_plan").size(), 1u);
  EXPECT_NE(k1.extra.at("drafter_layer_plan")[0].get<std::string>().find("mla_sparse"), std::string::npos);
  bool cached = false;  // layer 4, after the target's 0..3
  for (const auto& g : k1.extra.at("cache_groups"))
    for (const auto& l : g.at("layers")) cached |= l.get<int>() == 4;
  EXPECT_TRUE(cached) << k1.extra.at("cache_groups").dump();
  EXPECT_GT(k1.extra.at("drafter_weights_bytes").get<int64_t>(), 0);

  // The paged logits keys each variant's verify steps compile (next_n is in the key).
  auto paged_next_n = [](const StrategyResult& r) {
    std::set<std::string> out;
    for (const auto& c : r.hot_path_compiles) {
      if (c.kernel != "fp8_paged_mqa_logits") continue;
      EXPECT_EQ(c.phase, "first_decode") << c.key;
      const size_t at = c.key.find("NEXT_N=");
      if (at != std::string::npos) out.insert(c.key.substr(at, 8));
    }
    return out;
  };
  EXPECT_EQ(paged_next_n(k1), (std::set<std::string>{"NEXT_N=2"}));
  const StrategyResult& k3 = by.at("none [num_speculative_tokens=3]");
  ASSERT_EQ(k3.outcome, Outcome::kOk) << k3.error.value_or("");
  EXPECT_EQ(paged_next_n(k3), (std::set<std::string>{"NEXT_N=1"}));

  // The drafter's first pass (300 rows, h_proj over 1200) compiles its own GEMM tile; the
  // target's compiles in that step carry no drafter pass.
  int drafter = 0;
  for (const auto& c : k1.hot_path_compiles) {
    if (c.step.drafter_pass == 0) continue;
    ++drafter;
    EXPECT_EQ(c.kernel, "fp8_gemm_nt");
    EXPECT_EQ(c.step.drafter_pass, 1);
    EXPECT_EQ(c.step.drafter_tokens, 300);
  }
  EXPECT_EQ(drafter, 1);

  const StrategyResult& warm = by.at("deepgemm-warmup-mtp [num_speculative_tokens=1]");
  ASSERT_EQ(warm.outcome, Outcome::kOk) << warm.error.value_or("");
  EXPECT_TRUE(warm.hot_path_compiles.empty());
  bool warmed = false;
  for (const auto& c : warm.startup_compile_list)
    warmed |= c.kernel == "fp8_paged_mqa_logits" && c.phase == "kernel_warmup" &&
              c.key.find("NEXT_N=2") != std::string::npos;
  EXPECT_TRUE(warmed);

  // A second request arriving at step 1 mixes its prefill with the first one's verify rows: the
  // leading verify rows still take the paged path (vLLM's split), so the next_n 2 kernel compiles
  // in that mixed step, beside the ragged logits of the prefill rows.
  auto mixed = replay("scenarios/deepseek-v4-flash-mtp.yaml",
                      "--strategy none --set engine.num_speculative_tokens=1 --set 'requests=[{prompt_tokens: 300, "
                      "decode_steps: 8}, {prompt_tokens: 200, decode_steps: 4, arrival_step: 1}, {steady: true}]'");
  ASSERT_EQ(mixed.size(), 1u);
  const StrategyResult& m = mixed.begin()->second;
  ASSERT_EQ(m.outcome, Outcome::kOk) << m.error.value_or("");
  bool paged_in_mixed = false;
  for (const auto& c : m.hot_path_compiles)
    paged_in_mixed |= c.kernel == "fp8_paged_mqa_logits" && c.step.step == 1 && c.step.batch_mixed &&
                      c.key.find("NEXT_N=2") != std::string::npos;
  EXPECT_TRUE(paged_in_mixed);
}

/// The envelope sweep under speculative decoding runs verify batches (issue 29): with k = 3 the
/// seed's DeepGEMM warmup leaves the paged indexer's schedule metadata of verify batches cold
/// (its 32-aligned buckets of B x (1 + k) rows, beyond the decode batches it warms), first
/// reached by a "verify B" class of B rows; the MTP-aware warmer covers them.
TEST_F(ReplayE2E, CoverageSweepsVerifyBatches) {
  const nlohmann::json j = replay_json(
      "scenarios/deepseek-v4-flash-mtp.yaml --target h200 --envelope --strategy deepgemm-warmup "
      "--strategy deepgemm-warmup-mtp --set engine.num_speculative_tokens=3 --set "
      "engine.max_num_batched_tokens=96");
  ASSERT_FALSE(j.is_null());
  std::map<std::string, nlohmann::json> env;
  for (const auto& r : j.at("results")) {
    ASSERT_EQ(r.at("outcome"), "ok") << r.dump();
    env[r.at("strategy").get<std::string>()] = r.at("envelope");
  }
  ASSERT_EQ(env.size(), 2u);
  int verify_cold = 0;
  for (const auto& c : env.at("deepgemm-warmup").at("cold")) {
    const std::string cls = c.at("class").get<std::string>();
    if (cls.rfind("verify ", 0) != 0) continue;
    ++verify_cold;
    EXPECT_EQ(c.at("kernel"), "get_paged_mqa_logits_metadata") << c.dump();
    // "verify B": B rows of 1 + k = 4 tokens each.
    const int rows = std::stoi(cls.substr(7));
    EXPECT_EQ(c.at("seqs").get<int>(), rows) << c.dump();
    EXPECT_EQ(c.at("tokens").get<int>(), 4 * rows) << c.dump();
  }
  EXPECT_GE(verify_cold, 1) << env.at("deepgemm-warmup").dump();
  const auto& mtp = env.at("deepgemm-warmup-mtp");
  for (const auto& c : mtp.at("cold"))
    EXPECT_NE(c.at("class").get<std::string>().rfind("verify ", 0), 0u) << c.dump();
  EXPECT_EQ(mtp.at("reached_keys").get<int>(),
            mtp.at("covered_at_startup").get<int>() + mtp.at("cold_keys").get<int>());
}

}  // namespace
}  // namespace coldstart
