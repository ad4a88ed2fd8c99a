// The ranks' rendezvous and collectives between real processes (fork), both backends this build
// has, the timeout and its culprit text, and the stall analysis.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>

#include "harness/common/paths.h"
#include "harness/dist/rank_group.h"
#include "harness/dist/stalls.h"

namespace coldstart::dist {
namespace {

using std::chrono::milliseconds;

/// Runs `body(group)` as ranks 0..world-1: rank 0 here, the others in forked processes whose
/// exit status says whether their body returned true. Returns rank 0's body result and fills
/// `child_ok`.
bool run_ranks(int world, const std::string& backend, milliseconds timeout,
               const std::function<bool(RankGroup&)>& body, std::vector<bool>* child_ok) {
  const paths::ScopedTempDir state("cs-rank-test-");
  const std::string& dir = state.path;
  auto rv = Rendezvous::serve(world, timeout);
  const int port = rv->port();
  std::vector<pid_t> pids;
  std::fflush(nullptr);  // a child must not print what the parent buffered
  for (int r = 1; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      bool ok = false;
      try {
        RankGroup g(Rendezvous::connect(port, world, milliseconds(20000)),
                    {r, world, backend, timeout, dir});
        ok = body(g);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      _exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  bool ok = false;
  {
    RankGroup g(std::move(rv), {0, world, backend, timeout, dir});
    ok = body(g);
  }
  child_ok->clear();
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    child_ok->push_back(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  return ok;
}

std::vector<std::string> backends() {
  std::vector<std::string> b = {"store"};
  if (gloo_available()) b.push_back("gloo");
  return b;
}

TEST(RankGroup, AllReduceSumsEveryRanksValuesInOrder) {
  for (const std::string& backend : backends()) {
    for (int world : {2, 4}) {
      SCOPED_TRACE(backend + " world " + std::to_string(world));
      std::vector<bool> kids;
      const bool ok = run_ranks(world, backend, milliseconds(20000), [&](RankGroup& g) {
        if (g.backend() != backend) return false;
        for (int i = 0; i < 3; ++i) {
          const auto sum = g.all_reduce({g.rank() + 1, 10 * i}, "site " + std::to_string(i));
          if (sum != std::vector<int64_t>{world * (world + 1) / 2, 10 * i * world}) return false;
        }
        const auto& recs = g.records();
        return recs.size() == 3 && recs[2].seq == 2 && recs[2].site == "site 2" &&
               recs[2].depart_ns >= recs[2].arrive_ns && recs[2].arrive_ns > 0;
      }, &kids);
      EXPECT_TRUE(ok);
      for (size_t i = 0; i < kids.size(); ++i) EXPECT_TRUE(kids[i]) << "rank " << i + 1;
    }
  }
}

// Paused (a compile-only envelope sweep), a rank's all-reduces return its own values without
// waiting for the others, who may make a different number of them; resumed, they meet again.
TEST(RankGroup, APausedGroupSkipsCollectivesUntilResumed) {
  std::vector<bool> kids;
  const bool ok = run_ranks(2, "store", milliseconds(20000), [&](RankGroup& g) {
    g.set_paused(true);
    for (int i = 0; i <= g.rank() * 3; ++i)  // rank 1 makes 4, rank 0 one
      if (g.all_reduce({7}, "paused") != std::vector<int64_t>{7}) return false;
    g.set_paused(false);
    const auto sum = g.all_reduce({g.rank() + 1}, "resumed");
    return sum == std::vector<int64_t>{3} && g.records().size() == 1 &&
           g.records()[0].site == "resumed";
  }, &kids);
  EXPECT_TRUE(ok);
  for (size_t i = 0; i < kids.size(); ++i) EXPECT_TRUE(kids[i]) << "rank " << i + 1;
}

TEST(RankGroup, CompilesBetweenCollectivesGoWithTheNextRecord) {
  std::vector<bool> kids;
  const bool ok = run_ranks(2, "store", milliseconds(20000), [](RankGroup& g) {
    g.set_step("prefill", 0, 3);
    if (g.rank() == 1) {
      g.compile_started("fused_moe_kernel", "BLOCK_M=64");
      g.compile_finished("fused_moe_kernel", "BLOCK_M=64", 12.5);
      g.autotuned();
    }
    g.all_reduce({1}, "a");
    g.all_reduce({1}, "b");
    const auto& r = g.records();
    if (r[0].phase != "prefill" || r[0].request != 0 || r[0].step != 3) return false;
    if (g.rank() == 0) return r[0].compiles.empty() && r[0].autotunes == 0;
    return r[0].compiles.size() == 1 && r[0].compiles[0].kernel == "fused_moe_kernel" &&
           r[0].compiles[0].compile_ms == 12.5 && r[0].autotunes == 1 && r[1].compiles.empty();
  }, &kids);
  EXPECT_TRUE(ok);
  EXPECT_TRUE(kids.at(0));
}

TEST(RankGroup, TimeoutNamesTheRankThatIsStillCompiling) {
  for (const std::string& backend : backends()) {
    SCOPED_TRACE(backend);
    std::string text;
    bool timed_out = false;
    std::vector<bool> kids;
    run_ranks(2, backend, milliseconds(400), [&](RankGroup& g) {
      g.set_step("prefill", 0, 0);
      g.all_reduce({1}, "warm");
      if (g.rank() == 1) {
        g.compile_started("fused_moe_kernel", "[BLOCK_SIZE_M=64]");
        std::this_thread::sleep_for(milliseconds(1500));
        g.compile_finished("fused_moe_kernel", "[BLOCK_SIZE_M=64]", 1500);
        try {
          g.all_reduce({1}, "layer 3 o_proj");
        } catch (const std::exception&) {
          return true;  // its peer is gone: any error is right here
        }
        return true;
      }
      try {
        g.all_reduce({1}, "layer 3 o_proj");
      } catch (const CollectiveTimeoutError& e) {
        timed_out = true;
        text = e.what();
      } catch (const std::exception& e) {
        text = e.what();
      }
      return true;
    }, &kids);
    std::printf("timeout text (%s): %s\n", backend.c_str(), text.c_str());
    EXPECT_TRUE(timed_out) << text;
    EXPECT_NE(text.find("[Rank 0] collective all_reduce #1 at 'layer 3 o_proj' (prefill, request 0, "
                        "step 0) timed out"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("timeout is 400 ms"), std::string::npos) << text;
    EXPECT_NE(text.find("rank 1 (pid"), std::string::npos) << text;
    EXPECT_NE(text.find("compiling fused_moe_kernel [BLOCK_SIZE_M=64]"), std::string::npos) << text;
  }
}

TEST(RankGroup, TimeoutNamesAPeerWhoseEngineStopped) {
  for (const std::string& backend : backends()) {
    SCOPED_TRACE(backend);
    std::string text;
    std::vector<bool> kids;
    run_ranks(2, backend, milliseconds(400), [&](RankGroup& g) {
      g.set_step("profile_run", -1, -1);
      g.all_reduce({1}, "warm");
      if (g.rank() == 1) {
        // Its engine crashed between collectives; it stays in the group a while, then leaves.
        g.mark_stopped("KV cache too small: 12 blocks\nsecond line not published");
        std::this_thread::sleep_for(milliseconds(1200));
        return true;
      }
      try {
        g.all_reduce({1}, "layer 0 o_proj");
      } catch (const std::exception& e) {
        text = e.what();
      }
      return true;
    }, &kids);
    EXPECT_NE(text.find("rank 1 (pid"), std::string::npos) << text;
    EXPECT_NE(text.find("in profile_run, stopped (last collective #0): KV cache too small: 12 "
                        "blocks)"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("second line"), std::string::npos) << text;
  }
}

TEST(RankGroup, BadMembershipAndBackendAreRefused) {
  EXPECT_THROW(resolve_backend("nccl"), InputError);
  EXPECT_EQ(resolve_backend("store"), "store");
  EXPECT_EQ(resolve_backend("auto"), gloo_available() ? "gloo" : "store");
  if (!gloo_available()) EXPECT_THROW(resolve_backend("gloo"), InputError);
  EXPECT_THROW(RankGroup(Rendezvous::serve(2, milliseconds(1000)), {2, 2, "store", milliseconds(1000), ""}),
               Error);
  EXPECT_THROW(Rendezvous::connect(0, 2, milliseconds(100)), Error);
}

CollectiveRecord rec(int64_t seq, int request, int step, int64_t arrive_ms, int64_t depart_ms,
                     std::vector<CompileNote> compiles = {}) {
  CollectiveRecord r;
  r.seq = seq;
  r.op = "all_reduce";
  r.site = "s" + std::to_string(seq);
  r.phase = request < 0 ? "kernel_warmup" : "prefill";
  r.request = request;
  r.step = step;
  r.arrive_ns = arrive_ms * 1000000;
  r.depart_ns = depart_ms * 1000000;
  r.compiles = std::move(compiles);
  return r;
}

TEST(Stalls, NamesTheLastRankOfEachStepAndItsCompiles) {
  // Startup: both arrive together. Step 0 of request 0: rank 1 compiles 800 ms before the
  // second collective, so rank 0 waits 800 ms there.
  // Both compiled conv1d[T=7] in that step (shared: every_rank), only rank 1 the MoE GEMM.
  RankRecords r0{0, {rec(0, -1, -1, 100, 101), rec(1, 0, 0, 200, 201, {{"conv1d", "T=7", 5}}),
                     rec(2, 0, 0, 210, 1010)}};
  RankRecords r1{1, {rec(0, -1, -1, 100, 101), rec(1, 0, 0, 200, 201, {{"conv1d", "T=7", 6}}),
                     rec(2, 0, 0, 1010, 1010, {{"fused_moe_kernel", "M=64", 800}})}};
  const nlohmann::json a = analyse_stalls({r0, r1});
  ASSERT_EQ(a["steps"].size(), 1u) << a.dump(2);  // the startup step has no stall
  const auto& s = a["steps"][0];
  EXPECT_EQ(s["request"], 0);
  EXPECT_EQ(s["last_rank"], 1);
  EXPECT_NEAR(s["stall_ms"].get<double>(), 800.0, 1e-6);
  EXPECT_NEAR(s["wait_ms"][0].get<double>(), 801.0, 1e-6);
  EXPECT_NEAR(s["wait_ms"][1].get<double>(), 1.0, 1e-6);
  ASSERT_EQ(s["why"].size(), 2u);
  EXPECT_EQ(s["why"][0]["kernel"], "conv1d");
  EXPECT_EQ(s["why"][0]["every_rank"], true);
  EXPECT_EQ(s["why"][1]["kernel"], "fused_moe_kernel");
  EXPECT_EQ(s["why"][1]["every_rank"], false);
  EXPECT_EQ(a["per_rank"][1]["last_arrivals"], 1);
  EXPECT_NEAR(a["per_rank"][0]["wait_ms"].get<double>(), 802.0, 1e-6);
  // Records survive a JSON round trip (the ranks report them to rank 0 as JSON).
  CollectiveRecord back = nlohmann::json(r1.records[2]).get<CollectiveRecord>();
  EXPECT_EQ(back.compiles.at(0).key, "M=64");
  EXPECT_EQ(back.arrive_ns, r1.records[2].arrive_ns);
}

TEST(Stalls, CollectivesOnlySomeRanksReachedAreLeftOut) {
  RankRecords r0{0, {rec(0, 0, 0, 0, 5), rec(1, 0, 0, 10, 0)}};  // #1 timed out on rank 0
  RankRecords r1{1, {rec(0, 0, 0, 5, 5)}};
  const nlohmann::json a = analyse_stalls({r0, r1});
  ASSERT_EQ(a["steps"].size(), 1u);
  EXPECT_EQ(a["steps"][0]["collectives"], 1);
  EXPECT_EQ(a["steps"][0]["last_rank"], 1);
}

// The peers named in a timeout message: one behind, one that came after the deadline (the wait
// overran, as on the H100 where a 20 ms timeout returned after 44 ms), one in time, and one that
// never published. Only the waiting rank itself is skipped.
TEST(Stalls, TimeoutNamesPeersBehindAndPeersThatCameTooLate) {
  const int64_t deadline = 1000000000;  // ns
  nlohmann::json states = nlohmann::json::array();
  states.push_back({{"rank", 0}, {"published", true}, {"pid", 10}, {"phase", "prefill"},
                    {"arrived_seq", 1}, {"arrived_ns", deadline - 5000000}});
  states.push_back({{"rank", 1}, {"published", true}, {"pid", 11}, {"phase", "profile_run"},
                    {"arrived_seq", 1}, {"arrived_ns", deadline + 24000000},
                    {"arrived_after", {{{"kernel", "moe_align_block_size"}, {"compile_ms", 165.0}},
                                       {{"kernel", "moe_sum"}, {"compile_ms", 57.0}}}}});
  states.push_back({{"rank", 2}, {"published", true}, {"pid", 12}, {"phase", "prefill"},
                    {"arrived_seq", 1}, {"arrived_ns", deadline - 1}});
  states.push_back({{"rank", 3}, {"published", true}, {"pid", 13}, {"phase", "prefill"},
                    {"arrived_seq", 0}, {"arrived_ns", 5},
                    {"compiling", {{"what", "fused_moe_gemm" + std::string(300, 'x')},
                                   {"for_ms", 812.0}}}});
  states.push_back({{"rank", 4}, {"published", false}});
  states.push_back({{"rank", 5}, {"published", true}, {"pid", 15}, {"phase", "profile_run"},
                    {"arrived_seq", 0}, {"arrived_ns", 5},
                    {"stopped", "[Rank 5] collective all_reduce #1 timed out"}});
  states.push_back({{"rank", 6}, {"published", true}, {"pid", 16}, {"phase", "prefill"},
                    {"arrived_seq", 1}, {"arrived_ns", deadline - 9},
                    {"stopped", "[Rank 6] collective all_reduce #1 timed out"}});
  const std::string text = late_ranks_text(states, 0, 1, deadline);
  EXPECT_NE(text.find("rank 6 (pid 16, in prefill, stopped at collective #1: [Rank 6]"),
            std::string::npos) << "a peer that came in time and failed there: " << text;
  EXPECT_NE(text.find("rank 5 (pid 15, in profile_run, stopped (last collective #0): [Rank 5] "
                      "collective all_reduce #1 timed out)"),
            std::string::npos) << "a crashed peer is not 'not arrived yet': " << text;
  EXPECT_NE(text.find("rank 1 (pid 11, in profile_run, arrived 24 ms after this rank's timeout, "
                      "after compiling moe_align_block_size 165 ms, moe_sum 57 ms)"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("rank 2"), std::string::npos) << "rank 2 came in time: " << text;
  EXPECT_EQ(text.find("rank 0"), std::string::npos) << "the waiting rank itself: " << text;
  EXPECT_NE(text.find("rank 3 (pid 13, in prefill, last collective #0; compiling fused_moe_gemm"),
            std::string::npos) << text;
  EXPECT_NE(text.find("(218 more chars) for 812 ms)"), std::string::npos)
      << "a long key is cut: " << text;
  EXPECT_NE(text.find("rank 4 (no state published)"), std::string::npos) << text;
  // Everyone in time: said so.
  states.erase(6);
  states.erase(5);
  states.erase(4);
  states.erase(3);
  states.erase(1);
  EXPECT_EQ(late_ranks_text(states, 0, 1, deadline).rfind("none found", 0), 0u);
}

}  // namespace
}  // namespace coldstart::dist
