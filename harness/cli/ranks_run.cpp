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
#include "harness/dist/stalls.h"
#include "harness/isolate/isolate.h"

namespace coldstart::cli {

namespace {

std::chrono::milliseconds collective_timeout(const EngineConfig& e) {
  return std::chrono::milliseconds(e.int_key("collective_timeout_ms"));
}

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

StrategyResult merge_rank_results(std::vector<StrategyResult> ranks, const std::string& backend,
                                  long long timeout_ms) {
  CS_CHECK(!ranks.empty(), "no rank results");
  std::vector<dist::RankRecords> records;
  for (size_t r = 0; r < ranks.size(); ++r) {
    dist::RankRecords rr;
    rr.rank = static_cast<int>(r);
    auto it = ranks[r].extra.find("rank_records");
    if (it != ranks[r].extra.end()) {
      try {
        rr.records = it->get<std::vector<dist::CollectiveRecord>>();
      } catch (const std::exception&) {
        rr.records.clear();  // a rank's report that does not parse counts as no collectives
      }
      ranks[r].extra.erase(it);
    }
    records.push_back(std::move(rr));
  }
  const nlohmann::json stalls = dist::analyse_stalls(records);
  // Rank 0's result with every rank's compiles, each tagged with its rank.
  StrategyResult out = ranks[0];
  out.hot_path_compiles.clear();
  out.startup_compile_list.clear();
  out.startup_compiles = 0;
  auto append = [](const std::vector<CompileEvent>& from, int rank,
                   std::vector<CompileEvent>& into) {
    for (CompileEvent c : from) {
      c.rank = rank;
      into.push_back(std::move(c));
    }
  };
  nlohmann::json per_rank = nlohmann::json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const StrategyResult& x = ranks[r];
    append(x.hot_path_compiles, static_cast<int>(r), out.hot_path_compiles);
    append(x.startup_compile_list, static_cast<int>(r), out.startup_compile_list);
    out.startup_compiles += x.startup_compiles;
    nlohmann::json pr = stalls["per_rank"].at(r);
    pr["outcome"] = outcome_name(x.outcome);
    if (x.error) pr["error"] = *x.error;
    if (x.failed_phase) pr["failed_phase"] = *x.failed_phase;
    int loads = 0;
    for (const auto& c : x.hot_path_compiles) loads += c.source == "disk" ? 1 : 0;
    pr["hot_path_compiles"] = static_cast<int>(x.hot_path_compiles.size()) - loads;
    pr["hot_path_loads"] = loads;
    pr["startup_compiles"] = x.startup_compiles;
    pr["ttft_ms"] = x.ttft_ms ? nlohmann::json(*x.ttft_ms) : nlohmann::json();
    per_rank.push_back(std::move(pr));
  }
  // The outcome: a watchdog's timeout first, then the lowest rank that did not end ok. The
  // earliest collective that timed out is the root: a later timeout, and every "peer left",
  // follows from the rank that gave up on it.
  const StrategyResult* bad = nullptr;
  int64_t bad_seq = INT64_MAX;
  for (const auto& x : ranks) {
    const auto t = x.extra.find("collective_timeout");
    if (x.outcome == Outcome::kOk || t == x.extra.end() || !t->is_object()) continue;
    const int64_t seq = t->value("seq", INT64_MAX);
    if (seq < bad_seq) {
      bad = &x;
      bad_seq = seq;
    }
  }
  for (const auto& x : ranks)
    if (bad == nullptr && x.outcome != Outcome::kOk) bad = &x;
  if (bad != nullptr && bad != &ranks[0]) {
    out.outcome = bad->outcome;
    out.error = bad->error;
    out.skipped = bad->skipped;
    out.failed_phase = bad->failed_phase;
    for (const char* k : {"failed_step", "collective_timeout"}) {
      if (bad->extra.contains(k)) out.extra[k] = bad->extra.at(k);
      else out.extra.erase(k);
    }
  }
  out.extra["ranks"] = {{"world", ranks.size()},
                        {"backend", backend},
                        {"collective_timeout_ms", timeout_ms},
                        {"per_rank", per_rank},
                        {"steps", stalls["steps"]}};
  return out;
}

void add_stopped_ranks(StrategyResult& r, const ChildJob& job) {
  const EngineConfig& e = job.scenario.engine;
  if (!replays_all_ranks(e) || job.rank_dir.empty() || r.extra.contains("ranks")) return;
  nlohmann::json per_rank = dist::read_rank_states(job.rank_dir, e.tensor_parallel_size,
                                                   dist::monotonic_ns());
  for (auto& pr : per_rank) pr["outcome"] = outcome_name(r.outcome);
  r.extra["ranks"] = {{"world", e.tensor_parallel_size},
                      {"collective_timeout_ms", collective_timeout(e).count()},
                      {"stopped", true},
                      {"per_rank", std::move(per_rank)}};
}

}  // namespace coldstart::cli
