// coldstart: the parent-to-child job file (see child_job.h).
#include "harness/cli/child_job.h"

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/common/paths.h"

namespace coldstart::cli {

using nlohmann::json;

namespace {

/// Which format a job file has; a child refuses another (a job of a different build).
constexpr int kJobFormat = 1;
/// A job carries one scenario (an HF config is at most paths::kMaxScenarioBytes), so this is ample.
constexpr size_t kMaxJobBytes = 64u << 20;

}  // namespace

void to_json(json& j, const ChildJob& job) {
  j = json{{"format", kJobFormat},
           {"scenario", job.scenario},
           {"strategy", job.strategy},
           {"device", job.device},
           {"arch", job.arch},
           {"target", job.target},
           {"sm_count", job.sm_count},
           {"cache_dir", job.cache_dir},
           {"compile_memo", job.compile_memo},
           {"jit_monitor", job.jit_monitor},
           {"seed", job.seed},
           {"verbose", job.verbose},
           {"host_split", job.host_split},
           {"graph_replay_stale", job.graph_replay_stale},
           {"envelope", job.envelope},
           {"rank", job.rank},
           {"rendezvous_port", job.rendezvous_port},
           {"rank_dir", job.rank_dir}};
}

void from_json(const json& j, ChildJob& job) {
  if (j.at("format").get<int>() != kJobFormat)
    throw Error(fmt::format("job format {} is not this binary's ({})", j.at("format").dump(),
                            kJobFormat));
  j.at("scenario").get_to(job.scenario);
  j.at("strategy").get_to(job.strategy);
  j.at("device").get_to(job.device);
  j.at("arch").get_to(job.arch);
  j.at("target").get_to(job.target);
  j.at("sm_count").get_to(job.sm_count);
  j.at("cache_dir").get_to(job.cache_dir);
  j.at("compile_memo").get_to(job.compile_memo);
  j.at("jit_monitor").get_to(job.jit_monitor);
  j.at("seed").get_to(job.seed);
  j.at("verbose").get_to(job.verbose);
  j.at("host_split").get_to(job.host_split);
  j.at("graph_replay_stale").get_to(job.graph_replay_stale);
  j.at("envelope").get_to(job.envelope);
  j.at("rank").get_to(job.rank);
  j.at("rendezvous_port").get_to(job.rendezvous_port);
  j.at("rank_dir").get_to(job.rank_dir);
  if (job.graph_replay_stale != "stop" && job.graph_replay_stale != "run")
    throw Error("graph_replay_stale '" + job.graph_replay_stale + "' is neither stop nor run");
  // What the parent always writes; a hand-edited job that breaks it is refused here.
  if (job.scenario.variants.size() != 1)
    throw Error(fmt::format("the scenario holds {} variants; a job runs exactly one",
                            job.scenario.variants.size()));
  if (job.sm_count < 0) throw Error(fmt::format("sm_count {} is negative", job.sm_count));
}

void write_child_job(const std::string& path, const ChildJob& job) {
  paths::write_file_atomic(path, json(job).dump() + "\n", 0600);
}

ChildJob read_child_job(const std::string& path) {
  std::string text;
  const std::string why = paths::read_input_file(path, kMaxJobBytes, text);
  if (!why.empty()) throw Error(fmt::format("cannot read the job file '{}': {}", path, why));
  try {
    return json::parse(text).get<ChildJob>();
  } catch (const json::exception& e) {
    throw Error(fmt::format("job file '{}' is not a job of this coldstart: {}", path, e.what()));
  } catch (const Error& e) {
    throw Error(fmt::format("job file '{}': {}", path, e.what()));
  }
}

}  // namespace coldstart::cli
