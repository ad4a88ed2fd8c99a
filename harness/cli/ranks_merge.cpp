// merge_rank_results and add_stopped_ranks (ranks_run.h): the ranks' results folded into one.
// Torch-free but for the stall analysis's library; unit-tested without processes.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>

#include "harness/cli/ranks_run.h"
#include "harness/common/error.h"
#include "harness/dist/ranks.engine_keys.h"
#include "harness/dist/rank_group.h"
#include "harness/dist/stalls.h"

namespace coldstart::cli {
namespace {

/// Every rank's envelope sweep folded into `out`'s extra["envelope"] (see merge_rank_results);
/// ranks that stopped before their sweep began have none and are left out of it.
void merge_envelopes(const std::vector<StrategyResult>& ranks, StrategyResult& out) {
  // Summed over the ranks (each rank's keys are its own).
  static const char* const kCounts[] = {"startup_keys", "reached_keys", "covered_at_startup",
                                        "loaded_keys",  "cold_keys",    "cold_compile_reused"};
  nlohmann::json merged;
  nlohmann::json per_rank = nlohmann::json::array();
  std::vector<std::string> warm;
  std::map<std::string, long long> first_at;  // class -> its index in the sweep
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto it = ranks[r].extra.find("envelope");
    if (it == ranks[r].extra.end() || !it->is_object()) continue;
    const nlohmann::json& e = *it;
    if (merged.is_null()) {
      merged = e;  // classes, classes_run, stopped_at_class: the first sweeping rank's
      for (const char* k : {"cold", "loaded"}) merged[k] = nlohmann::json::array();
      for (const char* k : kCounts) merged[k] = 0;
      merged["cold_compile_ms"] = 0.0;
      merged["compile_pass_ms"] = 0.0;
    }
    for (const char* k : {"cold", "loaded"})
      for (nlohmann::json c : e.value(k, nlohmann::json::array())) {
        c["rank"] = r;
        merged[k].push_back(std::move(c));
      }
    for (const char* k : kCounts) merged[k] = merged[k].get<long long>() + e.value(k, 0LL);
    for (const char* k : {"cold_compile_ms", "compile_pass_ms"})
      merged[k] = merged[k].get<double>() + e.value(k, 0.0);
    merged["sweep_ms"] = std::max(merged.value("sweep_ms", 0.0), e.value("sweep_ms", 0.0));
    merged["classes_run"] = std::min(merged.value("classes_run", 0LL), e.value("classes_run", 0LL));
    if (e.value("sweep_unfinished", false)) merged["sweep_unfinished"] = true;
    if (!merged.contains("stopped_at_class") && e.contains("stopped_at_class"))
      merged["stopped_at_class"] = e["stopped_at_class"];
    for (const std::string& c : e.value("warmup_classes", std::vector<std::string>{}))
      if (std::find(warm.begin(), warm.end(), c) == warm.end()) warm.push_back(c);
    for (const nlohmann::json& c : e.value("cold", nlohmann::json::array()))
      if (c.contains("class_index")) {
        const long long at = c["class_index"].get<long long>();
        auto [it, fresh] = first_at.emplace(c["class"].get<std::string>(), at);
        if (!fresh) it->second = std::min(it->second, at);
      }
    per_rank.push_back({{"rank", r},
                        {"reached_keys", e.value("reached_keys", 0LL)},
                        {"covered_at_startup", e.value("covered_at_startup", 0LL)},
                        {"cold_keys", e.value("cold_keys", 0LL)},
                        {"cold_compile_ms", e.value("cold_compile_ms", 0.0)}});
  }
  if (merged.is_null()) return;
  // In sweep order, as one process lists them (every rank runs the same classes in one order):
  // the union above has each rank's in turn.
  std::stable_sort(warm.begin(), warm.end(), [&](const std::string& a, const std::string& b) {
    const auto ia = first_at.find(a), ib = first_at.find(b);
    const long long na = ia == first_at.end() ? LLONG_MAX : ia->second;
    const long long nb = ib == first_at.end() ? LLONG_MAX : ib->second;
    return na < nb;
  });
  merged["warmup_classes"] = warm;
  merged["per_rank"] = std::move(per_rank);
  merged["keys_counted"] = "per rank";
  out.extra["envelope"] = std::move(merged);
}

}  // namespace

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
    pr["hot_path_compiles"] = hot_path_compiled(x).size();
    pr["hot_path_loads"] = hot_path_loads(x);
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
  merge_envelopes(ranks, out);
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
  std::string backend;
  try {
    backend = dist::resolve_backend(e.string_key("distributed_backend"));
  } catch (const std::exception&) {
    backend = e.string_key("distributed_backend");  // refused before the run; keep it as set
  }
  r.extra["ranks"] = {{"world", e.tensor_parallel_size},
                      {"backend", backend},
                      {"collective_timeout_ms", collective_timeout(e).count()},
                      {"stopped", true},
                      {"per_rank", std::move(per_rank)}};
}

}  // namespace coldstart::cli
