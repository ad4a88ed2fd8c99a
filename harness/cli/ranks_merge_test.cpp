// Tests of merge_rank_results (ranks_run.h) without processes: every rank's compiles tagged with
// its rank, the per-rank block, the stall analysis attached, and which rank's failure becomes the
// strategy's outcome.
#include <gtest/gtest.h>

#include <algorithm>

#include "harness/cli/ranks_run.h"
#include "harness/dist/rank_group.h"

namespace coldstart::cli {
namespace {

// A rank's collective #seq, arriving at `arrive_ms` and leaving at `depart_ms` (0: never left),
// after `compiled` (a kernel name, "" for none).
dist::CollectiveRecord collective(int64_t seq, double arrive_ms, double depart_ms,
                                  const std::string& compiled = "") {
  dist::CollectiveRecord c;
  c.seq = seq;
  c.op = "all_reduce";
  c.site = "layer 0 o_proj";
  c.phase = "prefill";
  c.request = 0;
  c.step = 0;
  c.arrive_ns = static_cast<int64_t>(arrive_ms * 1e6);
  c.depart_ns = static_cast<int64_t>(depart_ms * 1e6);
  if (!compiled.empty()) c.compiles.push_back({compiled, compiled + "[k]", 40.0, "nvrtc"});
  return c;
}

StrategyResult rank_result(Outcome o, std::vector<dist::CollectiveRecord> records,
                           std::vector<std::string> hot_kernels = {}) {
  StrategyResult r;
  r.strategy = "mamba";
  r.outcome = o;
  r.startup_compiles = 3;
  for (const auto& k : hot_kernels)
    r.hot_path_compiles.push_back(CompileEvent{k, k + "[k]", 40.0, "prefill", "nvrtc"});
  r.extra["rank_records"] = records;
  return r;
}

TEST(MergeRankResults, EveryRanksCompilesAndTheLastArrivalsCompile) {
  // Rank 1 compiled fused_moe_gemm before collective #1 and arrived 45 ms after rank 0.
  std::vector<StrategyResult> ranks = {
      rank_result(Outcome::kOk, {collective(0, 0, 1), collective(1, 10, 55)}),
      rank_result(Outcome::kOk, {collective(0, 0.5, 1), collective(1, 55, 55.1, "fused_moe_gemm")},
                  {"fused_moe_gemm"})};
  ranks[0].ttft_ms = 70.0;
  const StrategyResult m = merge_rank_results(ranks, "store", 600000);
  EXPECT_EQ(m.outcome, Outcome::kOk);
  EXPECT_EQ(m.ttft_ms, 70.0) << "rank 0's timings stand";
  EXPECT_EQ(m.startup_compiles, 6);
  ASSERT_EQ(m.hot_path_compiles.size(), 1u);
  EXPECT_EQ(m.hot_path_compiles[0].rank, 1);
  EXPECT_FALSE(m.extra.contains("rank_records"));
  const nlohmann::json& b = m.extra.at("ranks");
  EXPECT_EQ(b.at("world"), 2);
  EXPECT_EQ(b.at("backend"), "store");
  ASSERT_EQ(b.at("per_rank").size(), 2u);
  EXPECT_EQ(b["per_rank"][1].at("hot_path_compiles"), 1);
  EXPECT_EQ(b["per_rank"][0].at("hot_path_compiles"), 0);
  EXPECT_EQ(b["per_rank"][1].at("outcome"), "ok");
  ASSERT_EQ(b.at("steps").size(), 1u);
  EXPECT_EQ(b["steps"][0].at("last_rank"), 1);
  EXPECT_NEAR(b["steps"][0].at("stall_ms").get<double>(), 45.0 + 0.5, 1e-6);
  EXPECT_EQ(b["steps"][0].at("why").at(0).at("kernel"), "fused_moe_gemm");
}

TEST(MergeRankResults, TheEarliestTimedOutCollectiveIsTheOutcome) {
  // Rank 0's peer left; rank 1 timed out at #5, rank 2 at #3: rank 2's is the root.
  std::vector<StrategyResult> ranks = {
      rank_result(Outcome::kCrash, {collective(0, 0, 1)}),
      rank_result(Outcome::kCrash, {collective(0, 0, 1)}),
      rank_result(Outcome::kCrash, {collective(0, 0, 1)}),
      rank_result(Outcome::kOk, {collective(0, 0, 1)})};
  ranks[0].error = "a peer left the group";
  ranks[1].error = "[Rank 1] collective #5 timed out";
  ranks[1].extra["collective_timeout"] = {{"seq", 5}};
  ranks[2].error = "[Rank 2] collective #3 timed out";
  ranks[2].failed_phase = "prefill";
  ranks[2].extra["collective_timeout"] = {{"seq", 3}};
  const StrategyResult m = merge_rank_results(ranks, "gloo", 150);
  EXPECT_EQ(m.outcome, Outcome::kCrash);
  EXPECT_EQ(m.error, ranks[2].error);
  EXPECT_EQ(m.failed_phase, "prefill");
  EXPECT_EQ(m.extra.at("collective_timeout").at("seq"), 3);
  const nlohmann::json& pr = m.extra.at("ranks").at("per_rank");
  EXPECT_EQ(pr[0].at("error"), "a peer left the group");
  EXPECT_EQ(pr[3].at("outcome"), "ok");
  EXPECT_EQ(m.extra.at("ranks").at("collective_timeout_ms"), 150);

  // Without a timeout the lowest failed rank's outcome stands.
  ranks[1].extra.erase("collective_timeout");
  ranks[2].extra.erase("collective_timeout");
  ranks[0].outcome = Outcome::kOk;
  ranks[0].error.reset();
  ranks[1].outcome = Outcome::kError;
  EXPECT_EQ(merge_rank_results(ranks, "gloo", 150).outcome, Outcome::kError);
}

TEST(MergeRankResults, ARankReportThatDoesNotParseCountsAsNoCollectives) {
  std::vector<StrategyResult> ranks = {rank_result(Outcome::kOk, {collective(0, 0, 1)}),
                                       rank_result(Outcome::kOk, {})};
  ranks[1].extra["rank_records"] = "garbage";
  const StrategyResult m = merge_rank_results(ranks, "store", 1000);
  EXPECT_EQ(m.extra.at("ranks").at("per_rank")[1].at("collectives"), 0);
  EXPECT_TRUE(m.extra.at("ranks").at("steps").empty());
}

/// A rank's coverage sweep: `cold` lists (kernel, first class) of its cold keys.
nlohmann::json sweep(int reached, int at_startup,
                     std::vector<std::pair<std::string, std::string>> cold, double compile_ms) {
  nlohmann::json c = nlohmann::json::array();
  std::vector<std::string> warm;
  for (const auto& [kernel, cls] : cold) {
    // The sweep runs prefill classes before decode ones (engine_envelope.cpp).
    const int index = (cls.rfind("prefill ", 0) == 0 ? 0 : 5000) + std::stoi(cls.substr(cls.find(' ') + 1));
    c.push_back({{"kernel", kernel}, {"key", kernel + "[k]"}, {"class", cls}, {"class_index", index}});
    if (std::find(warm.begin(), warm.end(), cls) == warm.end()) warm.push_back(cls);
  }
  return {{"classes", 100},          {"classes_run", 100},
          {"startup_keys", at_startup}, {"reached_keys", reached},
          {"covered_at_startup", at_startup}, {"loaded_keys", 0},
          {"cold_keys", cold.size()}, {"cold", c},
          {"loaded", nlohmann::json::array()}, {"warmup_classes", warm},
          {"cold_compile_ms", compile_ms}, {"sweep_ms", 10.0 + reached}};
}

TEST(MergeRankResults, EveryRanksEnvelopeCountsItsOwnKeys) {
  // Under expert parallelism rank 1 reaches a MoE key of its own at a class rank 0 never needs;
  // both reach the conv1d key at "decode 2". Rank 2 stopped before its sweep.
  std::vector<StrategyResult> ranks = {rank_result(Outcome::kOk, {}), rank_result(Outcome::kOk, {}),
                                       rank_result(Outcome::kOk, {})};
  ranks[0].extra["envelope"] = sweep(10, 9, {{"conv1d_update", "decode 2"}}, 30.0);
  ranks[1].extra["envelope"] =
      sweep(12, 10, {{"fused_moe_gemm", "prefill 10"}, {"conv1d_update", "decode 2"}}, 50.0);
  ranks[1].extra["envelope"]["sweep_unfinished"] = true;
  const nlohmann::json e = merge_rank_results(ranks, "store", 1000).extra.at("envelope");
  EXPECT_EQ(e.at("reached_keys"), 22);
  EXPECT_EQ(e.at("covered_at_startup"), 19);
  EXPECT_EQ(e.at("cold_keys"), 3);
  EXPECT_DOUBLE_EQ(e.at("cold_compile_ms").get<double>(), 80.0);
  EXPECT_DOUBLE_EQ(e.at("sweep_ms").get<double>(), 22.0) << "the slowest rank's sweep";
  EXPECT_TRUE(e.value("sweep_unfinished", false));
  ASSERT_EQ(e.at("cold").size(), 3u);
  EXPECT_EQ(e["cold"][0].at("rank"), 0);
  EXPECT_EQ(e["cold"][1].at("rank"), 1);
  EXPECT_EQ(e["cold"][1].at("kernel"), "fused_moe_gemm");
  // In sweep order, not rank 0's classes and then rank 1's.
  EXPECT_EQ(e.at("warmup_classes"), (std::vector<std::string>{"prefill 10", "decode 2"}));
  ASSERT_EQ(e.at("per_rank").size(), 2u) << "rank 2 never swept";
  EXPECT_EQ(e["per_rank"][1].at("cold_keys"), 2);
  EXPECT_EQ(e.at("keys_counted"), "per rank");
}

}  // namespace
}  // namespace coldstart::cli
