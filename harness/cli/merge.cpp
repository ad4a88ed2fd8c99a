// coldstart merge, and reading any results file (single-run or merged). See compare.h.
#include <iostream>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "reports/render_util.h"
#include "harness/cli/compare.h"
#include "harness/common/error.h"
#include "harness/common/target.h"
#include "harness/common/paths.h"

namespace coldstart::cli {
namespace {

using nlohmann::json;


// Prefixes an error text with the file unless it already names it.
std::string with_path(const std::string& path, const std::string& what) {
  return what.rfind(path + ":", 0) == 0 ? what : path + ": " + what;
}

RunResults run_from_json(const std::string& path, const json& j, const std::string& where) {
  try {
    return j.get<RunResults>();
  } catch (const InputError& e) {
    throw InputError(with_path(path, where + e.what()));
  } catch (const json::exception& e) {
    throw InputError(with_path(path, where + json_error_text(e)));
  }
}

}  // namespace

void write_merged_json(const std::string& path, const std::vector<RunResults>& runs) {
  json j = {{"schema", kMergedSchema}, {"runs", json::array()}};
  for (const RunResults& r : runs) j["runs"].push_back(r);
  paths::write_file_atomic(path, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

std::vector<RunResults> read_any_results(const std::string& path) {
  const json j = read_results_file_json(path);
  if (!j.is_object() || !j.contains("schema") || !j["schema"].is_string()) {
    throw InputError(fmt::format("{}: not a coldstart results file (no \"schema\" string; "
                                 "expected \"{}\" or \"{}\")",
                                 path, kResultSchema, kMergedSchema));
  }
  const std::string schema = j["schema"].get<std::string>();
  if (schema == kResultSchema) return {run_from_json(path, j, "")};
  if (schema != kMergedSchema) {
    throw InputError(fmt::format("{}: unknown schema \"{}\" (expected \"{}\" or \"{}\")", path,
                                 schema, kResultSchema, kMergedSchema));
  }
  if (!j.contains("runs") || !j["runs"].is_array()) {
    throw InputError(path + ": merged results file without a \"runs\" array");
  }
  std::vector<RunResults> runs;
  for (size_t i = 0; i < j["runs"].size(); ++i) {
    runs.push_back(run_from_json(path, j["runs"][i], fmt::format("runs[{}]: ", i)));
  }
  return runs;
}

std::vector<RunResults> merge_results(const std::vector<RunResults>& runs,
                                      std::vector<std::string>* warnings) {
  std::vector<RunResults> out = runs;
  using Key = std::tuple<std::string, std::string, std::string, std::string>;
  // Where each key lives now: (run index, result index).
  std::map<Key, std::pair<size_t, size_t>> seen;
  std::vector<std::vector<bool>> dropped(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    dropped[i].assign(out[i].results.size(), false);
    for (size_t k = 0; k < out[i].results.size(); ++k) {
      const StrategyResult& r = out[i].results[k];
      const Key key{out[i].scenario.name, run_target(out[i].meta), r.variant, r.strategy};
      auto it = seen.find(key);
      if (it != seen.end()) {
        dropped[it->second.first][it->second.second] = true;
        if (warnings != nullptr) {
          const RunMeta& old = out[it->second.first].meta;
          warnings->push_back(fmt::format(
              "duplicate result {} / {}{} ({}): keeping the later one (host {}, {}), dropping "
              "the earlier (host {}, {})",
              out[i].scenario.name, r.strategy, r.variant.empty() ? "" : " [" + r.variant + "]",
              run_target(out[i].meta) + ", " + sm_arch(out[i].meta.sm), out[i].meta.hostname,
              out[i].meta.started_at,
              old.hostname, old.started_at));
        }
        it->second = {i, k};
      } else {
        seen.emplace(key, std::make_pair(i, k));
      }
    }
  }
  std::vector<RunResults> merged;
  for (size_t i = 0; i < out.size(); ++i) {
    const bool had_results = !out[i].results.empty();
    std::vector<StrategyResult> kept;
    for (size_t k = 0; k < out[i].results.size(); ++k) {
      if (!dropped[i][k]) kept.push_back(std::move(out[i].results[k]));
    }
    if (had_results && kept.empty()) continue;  // everything in it was superseded
    out[i].results = std::move(kept);
    merged.push_back(std::move(out[i]));
  }
  return merged;
}

int merge_main(const std::vector<std::string>& inputs, const std::string& output, bool force) {
  if (inputs.empty()) {
    std::cerr << "coldstart merge: no input files\n";
    return 2;
  }
  std::vector<RunResults> all;
  try {
    paths::check_output_paths({output}, inputs, force);
    for (const std::string& path : inputs) {
      auto runs = read_any_results(path);
      for (auto& r : runs) all.push_back(std::move(r));
    }
  } catch (const InputError& e) {
    std::cerr << "coldstart merge: " << reports::detail::terminal_text(e.what(), true) << "\n";
    return 2;
  }
  std::vector<std::string> warnings;
  const auto merged = merge_results(all, &warnings);
  for (const std::string& w : warnings)
    std::cerr << "coldstart merge: warning: " << reports::detail::terminal_text(w) << "\n";
  try {
    write_merged_json(output, merged);
  } catch (const Error& e) {
    std::cerr << "coldstart merge: " << reports::detail::terminal_text(e.what(), true) << "\n";
    return 1;
  }
  size_t results = 0;
  std::set<int> sms;
  for (const auto& r : merged) {
    results += r.results.size();
    sms.insert(r.meta.sm);
  }
  std::string sm_list;
  for (int sm : sms) sm_list += (sm_list.empty() ? "" : ", ") + sm_arch(sm);
  std::cerr << fmt::format("coldstart merge: {} runs, {} strategy results ({}) from {} files -> {}\n",
                           merged.size(), results, sm_list, inputs.size(), output);
  return 0;
}

}  // namespace coldstart::cli
