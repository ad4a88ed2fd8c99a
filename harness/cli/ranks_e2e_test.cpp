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

/// TP 2 and TP 4 (the control: identical shapes): every rank runs, compiles the same kernels,
/// meets the others in as many collectives, and the result carries one block for all of them.
TEST_F(ReplayE2E, EveryTensorParallelRankRunsAsAProcess) {
  for (int world : {2, 4}) {
    SCOPED_TRACE(world);
    auto by = replay("scenarios/qwen3-8b-tp2-ranks.yaml",
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
                   "--set engine.distributed_backend=store");
  const StrategyResult& none = by.at("none []");
  ASSERT_EQ(none.outcome, Outcome::kOk) << none.error.value_or("");
  EXPECT_EQ(none.extra.at("ranks").at("backend"), "store");
  EXPECT_EQ(kernels_by_rank(none).size(), 2u);

  auto one = replay("scenarios/qwen3-8b-tp2-ranks.yaml", "--set engine.ranks=rank0");
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
}

}  // namespace
}  // namespace coldstart
