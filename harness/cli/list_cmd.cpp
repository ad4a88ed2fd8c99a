// `coldstart list` (what the registries hold and the scenarios' strategies) and `coldstart
// report` (render results files); see replay_options.h.
#include <dirent.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <optional>

#include "harness/replay/engine_keys.h"
#include "harness/cli/compare.h"
#include "harness/cli/replay_options.h"
#include "harness/common/name_filter.h"
#include "harness/common/paths.h"
#include "harness/models/mixer.h"
#include "harness/models/model.h"
#include "reports/render_util.h"
#include "reports/table.h"
#include "warmers/warmer.h"

namespace coldstart::cli {

int report_main(const std::vector<std::string>& inputs, const ReplayArgs& a) {
  parse_monitor(a.jit_monitor);
  paths::check_output_paths({a.json, a.junit, a.md, a.html, a.trace}, inputs, a.force);
  std::vector<RunResults> runs;
  for (const auto& f : inputs)
    for (auto& r : read_any_results(f)) runs.push_back(std::move(r));
  write_outputs(a, runs);
  for (const RunResults& run : runs) {
    std::cout << reports::render_table(run, isatty(STDOUT_FILENO) != 0);
    // The scenario's expect: rules as the run checked them (report does not re-check them).
    if (run.rules.empty()) continue;
    std::cout << fmt::format("expectations of {} (as the run checked them): {}\n",
                             reports::detail::terminal_text(run.scenario.name),
                             reports::detail::rule_tally(run));
    for (const RuleCheck& r : run.rules)
      if (r.status == "unmet")
        for (const std::string& d : r.details)
          std::cout << "  UNMET " << reports::detail::terminal_text(d) << " (rule at "
                    << reports::detail::terminal_text(r.where) << ")\n";
  }
  return 0;
}

int list_main(std::vector<std::string> scenarios, const std::string& filter) {
  std::optional<NameFilter> re;
  if (!filter.empty()) {
    check_filter_size(filter);
    re.emplace(filter);  // InputError naming the offset and what is wrong
  }
  size_t matched = 0;  // lines --filter let through
  auto shown = [&](const std::string& text) {
    const bool yes = !re || re->search(text);
    matched += yes;
    return yes;
  };
  std::vector<std::string> warmers;
  for (const auto& n : warmer_names())
    if (shown(n)) warmers.push_back("  " + n + "  " + make_warmer(n)->description());
  if (!warmers.empty()) std::cout << "warmers:\n";
  for (const auto& w : warmers) std::cout << w << "\n";
  // What the registries hold: model families, the mixer backends their layers run on, the
  // compile-only targets and the config selectors kernels use.
  std::vector<std::string> lines;
  for (const auto& f : model_families()) {
    std::string archs;
    for (const auto& a : f.architectures) archs += (archs.empty() ? "" : ", ") + a;
    if (shown(f.name) || shown(archs)) lines.push_back("  " + f.name + " [" + archs + "]  " + f.description);
  }
  if (!lines.empty()) std::cout << "model families:\n";
  for (const auto& l : lines) std::cout << l << "\n";
  lines.clear();
  for (const auto& b : mixer_backends()) {
    std::string dtypes;
    for (const auto& d : b.kv_cache_dtypes) dtypes += (dtypes.empty() ? "" : ", ") + d;
    const std::string text = b.kind + "/" + b.name + " (kv_cache_dtype: " +
                             (dtypes.empty() ? std::string("any") : dtypes) + ")";
    if (shown(text)) lines.push_back("  " + text + "  " + b.description);
  }
  if (!lines.empty()) std::cout << "mixer backends:\n";
  for (const auto& l : lines) std::cout << l << "\n";
  lines.clear();
  for (const auto& b : moe_backends()) {
    const std::string text = b.name + " (experts: " + b.weight_format + ")";
    if (shown(text)) lines.push_back("  " + text + "  " + b.description);
  }
  if (!lines.empty()) std::cout << "MoE backends:\n";
  for (const auto& l : lines) std::cout << l << "\n";
  lines.clear();
  for (const EngineKeySpec& k : declared_engine_keys()) {
    std::string values;
    if (k.type == EngineKeyType::kInt) values = fmt::format("{}..{}, default {}", k.min, k.max, k.default_value);
    else if (k.type == EngineKeyType::kChoice) values = fmt::format("{}, default {}", fmt::join(k.choices, " | "), k.default_value);
    else if (k.type == EngineKeyType::kText) values = k.pattern_doc;
    else values = "a directory";
    const std::string text = fmt::format("engine.{} ({}; read by {})", k.name, values, k.owner);
    if (shown(text)) lines.push_back("  " + text + "  " + k.doc);
  }
  if (!lines.empty()) std::cout << "engine keys owned by families, backends and warmers:\n";
  for (const auto& l : lines) std::cout << l << "\n";
  lines.clear();
  for (const Target& t : target_profiles()) {
    const std::string text =
        fmt::format("{}  {}, {}, {} SMs, {:.2f} GiB device memory, {} KiB shared memory per block",
                    t.profile, t.device_name, t.arch, t.sm_count,
                    static_cast<double>(t.memory_bytes) / 1073741824.0,
                    t.shared_memory_per_block / 1024);
    if (shown(text)) lines.push_back("  " + text);
  }
  if (!lines.empty()) std::cout << "targets (--target, compile-only mode):\n";
  for (const auto& l : lines) std::cout << l << "\n";
  lines.clear();
  for (const char* sel :
       {"table      vLLM-style tuned JSON (E=..,N=..,device_name=..), nearest batch key",
        "heuristic  a function of the problem shape and the target",
        "autotune   Triton semantics: compile + benchmark every candidate on a key's first call, "
        "keep the fastest (first candidate in compile-only mode)",
        "default    a documented default when no tuned table matches"})
    if (shown(sel)) lines.push_back(std::string("  ") + sel);
  if (!lines.empty()) std::cout << "config selectors (recorded with every compile):\n";
  for (const auto& l : lines) std::cout << l << "\n";
  if (scenarios.empty() && paths::is_directory("scenarios")) {
    DIR* d = opendir("scenarios");
    while (d != nullptr) {
      dirent* e = readdir(d);
      if (e == nullptr) break;
      const std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0)
        scenarios.push_back("scenarios/" + name);
    }
    if (d != nullptr) closedir(d);
    std::sort(scenarios.begin(), scenarios.end());
  }
  for (const auto& f : scenarios) {
    Scenario s = load_scenario(f, {}, replay_rules());
    std::vector<std::string> lines;
    for (const auto& v : s.variants)
      for (const auto& st : s.strategies) {
        if (!shown(s.name) && !shown(st.name) && !shown(s.name + "/" + st.name)) continue;
        std::string ws;
        for (const auto& w : st.warmers) ws += (ws.empty() ? "" : ", ") + w;
        lines.push_back("  " + st.name + (v.name.empty() ? "" : " [" + v.name + "]") + ": [" + ws + "]");
      }
    if (lines.empty()) continue;
    std::cout << "scenario " << s.name << " (" << f << "):\n";
    for (const auto& l : lines) std::cout << l << "\n";
  }
  if (re && matched == 0) {
    // As grep does: a filter that matches nothing is an exit status a script can test.
    std::cerr << fmt::format("coldstart list: nothing matches --filter '{}'\n", filter);
    return 1;
  }
  return 0;
}

}  // namespace coldstart::cli
