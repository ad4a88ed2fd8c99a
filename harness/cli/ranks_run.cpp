#include "harness/cli/ranks_run.h"

#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "harness/common/paths.h"
#include "harness/dist/ranks.engine_keys.h"
#include "harness/dist/rank_group.h"
#include "harness/isolate/isolate.h"

namespace coldstart::cli {

namespace {

/// How long a rank > 0 waits for rank 0's store, and rank 0 for every rank to join.
constexpr std::chrono::milliseconds kJoinTimeout{120000};

StrategyResult failed(const ChildJob& job, Outcome outcome, const std::string& error) {
  StrategyResult r;
  r.strategy = job.strategy.name;
  r.variant = job.scenario.variants.at(0).name;
  r.warmers = job.strategy.warmers;
  r.outcome = outcome;
  r.error = error;
  return r;
}

}  // namespace

StrategyResult run_one_rank(const ChildJob& job, SnapshotFn on_snapshot) {
  const EngineConfig& e = job.scenario.engine;
  std::unique_ptr<dist::RankGroup> group;
  try {
    group = std::make_unique<dist::RankGroup>(
        dist::Rendezvous::connect(job.rendezvous_port, e.tensor_parallel_size, kJoinTimeout),
        dist::GroupOptions{job.rank, e.tensor_parallel_size, e.string_key("distributed_backend"),
                           collective_timeout(e), job.rank_dir});
  } catch (const std::exception& ex) {
    return failed(job, Outcome::kError,
                  fmt::format("harness fault: rank {} could not join: {}", job.rank, ex.what()));
  }
  StrategyResult r = run_engine(job, std::move(on_snapshot), group.get());
  r.extra["rank_records"] = group->records();
  return r;
}

StrategyResult run_all_ranks(const ChildJob& job, SnapshotFn on_snapshot) {
  const EngineConfig& e = job.scenario.engine;
  const int world = e.tensor_parallel_size;
  const std::string backend = dist::resolve_backend(e.string_key("distributed_backend"));
  // NVLink multicast (NVLS) stays off for every rank, as the machines' notes require of NCCL;
  // set before the ranks start so they inherit it (no NCCL backend is built yet: see README).
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  // Jobs and published states: in the directory the replay chose (it reads the states if its
  // watchdog stops this process), else a temporary one.
  std::optional<paths::ScopedTempDir> own_dir;
  if (job.rank_dir.empty()) own_dir.emplace("cs-ranks-");
  const std::string dir = own_dir ? own_dir->path : job.rank_dir;
  std::unique_ptr<dist::Rendezvous> rv;
  try {
    rv = dist::Rendezvous::serve(world, kJoinTimeout);
  } catch (const std::exception& ex) {
    return failed(job, Outcome::kError, fmt::format("harness fault: {}", ex.what()));
  }
  // Ranks 1..N-1: children of this process (isolate::run_child, one thread each; a child dies
  // with the thread that started it: isolate::die_with_parent), their stderr lines go to ours,
  // prefixed with their rank.
  std::vector<StrategyResult> results(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  std::mutex err_mu;
  for (int r = 1; r < world; ++r) {
    ChildJob rj = job;
    rj.rank = r;
    rj.rendezvous_port = rv->port();
    rj.rank_dir = dir;
    const std::string file = paths::join(dir, fmt::format("rank{}.job.json", r));
    write_child_job(file, rj);
    threads.emplace_back([&, r, file] {
      isolate::ChildSpec spec;
      spec.argv = {"/proc/self/exe", "_child", "--job", file};
      auto on_err = [&](const std::string& line) {
        const std::lock_guard<std::mutex> lock(err_mu);
        std::cerr << "[rank " << r << "] " << line << "\n";
      };
      const isolate::ChildExit ex = isolate::run_child(spec, [](const std::string&) {}, on_err);
      results[static_cast<size_t>(r)] =
          isolate::classify(ex, isolate::last_snapshot(ex.messages, failed(job, Outcome::kError, "")));
    });
  }
  {
    std::unique_ptr<dist::RankGroup> group;
    try {
      group = std::make_unique<dist::RankGroup>(
          std::move(rv), dist::GroupOptions{0, world, backend, collective_timeout(e), dir});
    } catch (const std::exception& ex) {
      results[0] = failed(job, Outcome::kError,
                          fmt::format("harness fault: rank 0 could not join: {}", ex.what()));
    }
    if (group) {
      results[0] = run_engine(job, on_snapshot, group.get());
      results[0].extra["rank_records"] = group->records();
    }
  }  // rank 0 keeps the store until every rank is done with it (RankGroup's destructor)
  for (auto& t : threads) t.join();
  return merge_rank_results(std::move(results), backend, collective_timeout(e).count());
}

}  // namespace coldstart::cli
