// End to end, engine.ranks: all in compile-only mode: every tensor-parallel rank as a process
// joined by c10d, each compiling its own keys, and the result's per-rank block.
#include "harness/cli/e2e_fixture.h"

#include <set>
#include <string>
#include <vector>

namespace coldstart {
namespace {

using namespace e2e;  // NOLINT: the fixture and its helpers

/// The hot-path kernels each rank compiled, by rank.
std::map<int, std::set<std::string>> kernels_by_rank(const StrategyResult& r) {
  std::map<int, std::set<std::string>> out;
  for (const auto& c : r.hot_path_compiles) out[c.rank].insert(c.kernel);
  return out;
}

/// TP 2 (the control: identical shapes; 4 ranks are the EP test's): every rank runs, compiles
/// the same kernels, meets the others in as many collectives, and the result carries one block
/// for all of them.
TEST_F(ReplayE2E, EveryTensorParallelRankRunsAsAProcess) {
  for (int world : {2}) {
    SCOPED_TRACE(world);
    auto by = replay("scenarios/qwen3-8b-tp2-ranks.yaml",
                     "--strategy none --strategy aot-prefill-warmup "
                     "--set engine.tensor_parallel_size=" + std::to_string(world));
    ASSERT_EQ(by.size(), 2u);
    const StrategyResult& none = by.at("none []");
    ASSERT_EQ(none.outcome, Outcome::kOk) << none.error.value_or("");
    const nlohmann::json& ranks = none.extra.at("ranks");
    EXPECT_EQ(ranks.at("world"), world);
    EXPECT_EQ(ranks.at("collective_timeout_ms"), 600000);
    EXPECT_FALSE(none.extra.contains("rank_records")) << "the raw records stay in the ranks";
    ASSERT_EQ(ranks.at("per_rank").size(), static_cast<size_t>(world));
    const auto by_rank = kernels_by_rank(none);
    ASSERT_EQ(by_rank.size(), static_cast<size_t>(world));
    const std::set<std::string> expected = {"paged_cache_store", "paged_decode_stage1",
                                            "paged_decode_stage2", "paged_prefill"};
    for (const auto& [rank, kernels] : by_rank) EXPECT_EQ(kernels, expected) << "rank " << rank;
    const int64_t collectives = ranks["per_rank"][0].at("collectives").get<int64_t>();
    // 36 layers x 2 all-reduces per eager forward: many collectives, the same on every rank.
    EXPECT_GT(collectives, 72);
    for (const auto& pr : ranks.at("per_rank")) {
      EXPECT_EQ(pr.at("outcome"), "ok");
      EXPECT_EQ(pr.at("collectives").get<int64_t>(), collectives);
      EXPECT_EQ(pr.at("hot_path_compiles"), 4);
      EXPECT_GE(pr.at("wait_ms").get<double>(), 0.0);
    }
    // The first request's prefill step is a step of the analysis, its last rank one of the ranks.
    bool prefill = false;
    for (const auto& st : ranks.at("steps")) {
      EXPECT_GE(st.at("last_rank").get<int>(), 0);
      EXPECT_LT(st.at("last_rank").get<int>(), world);
      EXPECT_EQ(st.at("wait_ms").size(), static_cast<size_t>(world));
      prefill |= st.at("phase") == "prefill" && st.at("request") == 0;
    }
    EXPECT_TRUE(prefill) << ranks.at("steps").dump();
    // The warmer closes the same gap on every rank.
    for (const auto& [rank, kernels] : kernels_by_rank(by.at("aot-prefill-warmup []")))
      EXPECT_EQ(kernels, (std::set<std::string>{"paged_decode_stage1", "paged_decode_stage2"}))
          << "rank " << rank;
  }
}

/// The store backend (what a build without Gloo's headers uses) runs the same replay; ranks:
/// rank0 (the default) keeps one process and no ranks block.
TEST_F(ReplayE2E, StoreBackendAndRankZeroOnly) {
  auto by = replay("scenarios/qwen3-8b-tp2-ranks.yaml",
                   "--strategy none --set engine.distributed_backend=store");
  const StrategyResult& none = by.at("none []");
  ASSERT_EQ(none.outcome, Outcome::kOk) << none.error.value_or("");
  EXPECT_EQ(none.extra.at("ranks").at("backend"), "store");
  EXPECT_EQ(kernels_by_rank(none).size(), 2u);

  auto one = replay("scenarios/qwen3-8b-tp2-ranks.yaml", "--strategy none --set engine.ranks=rank0");
  const StrategyResult& single = one.at("none []");
  ASSERT_EQ(single.outcome, Outcome::kOk);
  EXPECT_FALSE(single.extra.contains("ranks"));
  for (const auto& c : single.hot_path_compiles) EXPECT_EQ(c.rank, -1);

  const std::string out = paths::join(dir_, "bad.txt");
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-tp2-ranks.yaml --device compile-only "
                          "--arch sm_90 --set engine.ranks=every",
                          out),
            2);
  EXPECT_NE(read_text(out).find("engine.ranks"), std::string::npos) << read_text(out);
  // A dense model has no experts to split or route.
  for (const char* key : {"engine.enable_expert_parallel=true",
                          "engine.moe_routing_simulation=uniform_random"}) {
    EXPECT_EQ(run_coldstart(std::string("replay scenarios/qwen3-8b-tp2-ranks.yaml --device "
                                        "compile-only --arch sm_90 --set ") + key, out),
              2) << key;
    const std::string name = std::string(key).substr(0, std::string(key).find('='));
    EXPECT_NE(read_text(out).find(name), std::string::npos) << read_text(out);
  }
}

/// The replay's watchdog stops rank 0 (and with it the others) before it can merge: the result
/// still says what every rank was doing then, from the states the ranks published.
TEST_F(ReplayE2E, AStoppedMultiRankRunSaysWhatEachRankWasDoing) {
  const std::string json = paths::join(dir_, "stopped.json"), out = paths::join(dir_, "out.txt");
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-tp2-ranks.yaml --device compile-only --arch "
                          "sm_90 --strategy none --timeout 3 --json " + json, out),
            1)
      << "every strategy timed out: exit 1";
  const auto runs = cli::read_any_results(json);
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_EQ(runs[0].results.size(), 1u);
  const StrategyResult& r = runs[0].results[0];
  ASSERT_EQ(r.outcome, Outcome::kTimeout) << r.error.value_or("");
  EXPECT_NE(read_text(out).find("stopped before their results were merged"), std::string::npos)
      << read_text(out);
  const nlohmann::json& ranks = r.extra.at("ranks");
  EXPECT_EQ(ranks.at("stopped"), true);
  EXPECT_EQ(ranks.at("world"), 2);
  ASSERT_EQ(ranks.at("per_rank").size(), 2u);
  for (const auto& st : ranks.at("per_rank")) {
    EXPECT_EQ(st.at("outcome"), "timeout");
    ASSERT_EQ(st.at("published"), true) << st.dump();
    EXPECT_FALSE(st.at("phase").get<std::string>().empty()) << st.dump();
    EXPECT_GT(st.at("pid").get<long>(), 0);
    if (st.contains("compiling")) EXPECT_GE(st["compiling"].at("for_ms").get<double>(), 0.0);
  }
}

/// Expert parallelism over 4 ranks with vLLM's normal_routing simulation: each rank's fused-MoE
/// M is its own routed count, so ranks 0 and 3 (the tails of the distribution, about 25 of 48
/// prompt tokens) compile the small-M GEMMs in the first prefill and ranks 1 and 2 do not; the
/// stall analysis names a compiling rank as the last to arrive. The warmer's dummy steps leave
/// nothing to compile on any rank.
TEST_F(ReplayE2E, ExpertParallelRanksCompileTheirOwnMClasses) {
  // The kernel cache lets the coverage run below load its startup instead of compiling it.
  const std::string cache = paths::join(dir_, "cache");
  auto by = replay("scenarios/nemotron-3-nano-ep4-ranks.yaml", "--strategy mamba --cache-dir " + cache);
  ASSERT_EQ(by.size(), 1u);
  const StrategyResult& r = by.at("mamba []");
  ASSERT_EQ(r.outcome, Outcome::kOk) << r.error.value_or("");
  std::map<int, std::set<std::string>> moe_keys;  // rank -> the fused-MoE keys of its prefill
  for (const auto& c : r.hot_path_compiles)
    if (c.kernel == "fused_moe_gemm" && c.phase == "prefill") moe_keys[c.rank].insert(c.key);
  EXPECT_EQ(moe_keys.size(), 2u);
  EXPECT_EQ(moe_keys[0].size(), 2u) << "w13 and w2 GEMMs";
  EXPECT_EQ(moe_keys[0], moe_keys[3]);
  EXPECT_FALSE(moe_keys.count(1));
  EXPECT_FALSE(moe_keys.count(2));
  // Their tuning keys are the routed counts (M = 25 and 26 of 48 with this seed).
  for (const auto& c : r.hot_path_compiles)
    if (c.kernel == "fused_moe_gemm") EXPECT_LT(std::stoi(c.tuning_key.substr(2)), 32) << c.tuning_key;
  const nlohmann::json& ranks = r.extra.at("ranks");
  EXPECT_EQ(ranks.at("world"), 4);
  bool prefill = false;
  for (const auto& st : ranks.at("steps")) {
    if (st.at("phase") != "prefill") continue;
    prefill = true;
    const int last = st.at("last_rank").get<int>();
    EXPECT_GT(st.at("stall_ms").get<double>(), 0.0);
    // The last rank compiled there (every rank compiles the attention kernels in that step).
    EXPECT_FALSE(st.at("why").empty()) << "rank " << last;
  }
  EXPECT_TRUE(prefill) << ranks.dump();

  // Coverage sweeps every rank's envelope (a small one here): the ranks run the same classes,
  // meeting in every step's collectives, and the result counts each rank's keys. Keys the
  // replay above compiled on a rank are on disk for it.
  const nlohmann::json cov = replay_json(
      "scenarios/nemotron-3-nano-ep4-ranks.yaml --arch sm_90 --envelope --strategy mamba "
      "--cache-dir " + cache + " --set engine.max_num_batched_tokens=40 "
      "--set engine.max_model_len=64 --set engine.max_num_seqs=2");
  ASSERT_FALSE(cov.is_null());
  const nlohmann::json& env = cov.at("results").at(0).at("envelope");
  ASSERT_EQ(env.at("per_rank").size(), 4u) << env.dump();
  long long reached = 0;
  for (const auto& pr : env.at("per_rank")) {
    EXPECT_GT(pr.at("reached_keys").get<long long>(), 0) << pr.dump();
    reached += pr.at("reached_keys").get<long long>();
  }
  EXPECT_EQ(env.at("reached_keys").get<long long>(), reached);
  EXPECT_EQ(env.at("reached_keys").get<long long>(),
            env.at("covered_at_startup").get<long long>() + env.at("loaded_keys").get<long long>() +
                env.at("cold_keys").get<long long>());
  // Each rank's fused-MoE keys of the envelope are its own, and every one is first reached by an
  // "experts M" class (the rank's experts alone at a count class, run before the batches: what
  // a rank receives follows the routing): ranks 1 and 2, which the replay's prompt left without
  // a small-M GEMM, reach one too.
  std::set<int> moe_ranks;
  for (const char* part : {"cold", "loaded"})
    for (const auto& c : env.at(part))
      if (c.at("kernel") == "fused_moe_gemm") {
        moe_ranks.insert(c.at("rank").get<int>());
        EXPECT_EQ(c.at("class").get<std::string>().rfind("experts ", 0), 0u) << c.dump();
      }
  EXPECT_TRUE(moe_ranks.count(1) && moe_ranks.count(2)) << env.dump();
  EXPECT_FALSE(env.at("warmup_classes").empty());

  // Refused before anything runs: EP without every rank, or with graphs, and in compile-only
  // mode without a routing simulation (the router's scores need the GPU).
  const std::string out = paths::join(dir_, "bad.txt");
  const std::string json = paths::join(dir_, "no_sim.json");
  EXPECT_EQ(run_coldstart("replay scenarios/nemotron-3-nano-ep4-ranks.yaml --device compile-only "
                          "--arch sm_90 --strategy mamba --set engine.moe_routing_simulation=none "
                          "--json " + json, out),
            2);
  EXPECT_NE(read_text(out).find("compile-only mode cannot route tokens"), std::string::npos)
      << read_text(out);
  EXPECT_FALSE(paths::exists(json));
  for (const char* set : {"--set engine.ranks=rank0", "--set engine.cudagraph_mode=piecewise"}) {
    EXPECT_EQ(run_coldstart(std::string("replay scenarios/nemotron-3-nano-ep4-ranks.yaml "
                                        "--device compile-only --arch sm_90 ") + set, out),
              2) << set;
    EXPECT_NE(read_text(out).find(std::string(set).find("ranks") != std::string::npos
                                      ? "engine.enable_expert_parallel"
                                      : "engine.cudagraph_mode"),
              std::string::npos)
        << read_text(out);
  }
}

}  // namespace
}  // namespace coldstart
