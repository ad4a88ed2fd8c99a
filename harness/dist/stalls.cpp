#include "harness/dist/stalls.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

namespace coldstart::dist {

nlohmann::json analyse_stalls(const std::vector<RankRecords>& ranks, double min_stall_ms) {
  nlohmann::json per_rank = nlohmann::json::array();
  size_t common = ranks.empty() ? 0 : SIZE_MAX;
  for (const auto& r : ranks) common = std::min(common, r.records.size());
  std::vector<int> last_arrivals(ranks.size(), 0);

  // Steps in the order they first appear on rank 0's records.
  using StepKey = std::tuple<std::string, int, int>;
  struct Step {
    StepKey key;
    int collectives = 0;
    double stall_ms = 0;
    double worst_ms = -1;
    int last_rank = -1;
    std::vector<double> wait_ms;
  };
  std::vector<Step> steps;
  std::map<StepKey, size_t> index;
  for (size_t s = 0; s < common; ++s) {
    const CollectiveRecord& lead = ranks[0].records[s];
    const StepKey key{lead.phase, lead.request, lead.step};
    auto [it, fresh] = index.emplace(key, steps.size());
    if (fresh) steps.push_back({key, 0, 0, -1, -1, std::vector<double>(ranks.size(), 0.0)});
    Step& st = steps[it->second];
    int64_t first = INT64_MAX, last = INT64_MIN;
    size_t last_i = 0;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const CollectiveRecord& c = ranks[i].records[s];
      first = std::min(first, c.arrive_ns);
      if (c.arrive_ns > last) {
        last = c.arrive_ns;
        last_i = i;
      }
      if (c.depart_ns > 0) st.wait_ms[i] += (c.depart_ns - c.arrive_ns) / 1e6;
    }
    const double stall = (last - first) / 1e6;
    ++st.collectives;
    st.stall_ms += stall;
    if (ranks.size() > 1) ++last_arrivals[last_i];
    if (stall > st.worst_ms) {
      st.worst_ms = stall;
      st.last_rank = ranks[last_i].rank;
    }
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    double wait = 0;
    for (const auto& c : ranks[i].records)
      if (c.depart_ns > 0) wait += (c.depart_ns - c.arrive_ns) / 1e6;
    per_rank.push_back({{"rank", ranks[i].rank},
                        {"collectives", ranks[i].records.size()},
                        {"wait_ms", wait},
                        {"last_arrivals", last_arrivals[i]}});
  }
  // The compile keys each rank ran in each step, in one pass: a compile of a step's last rank
  // that every other rank ran there too explains the stall only by its time spread, one the
  // others did not run by the divergence (every_rank false).
  std::vector<std::map<StepKey, std::set<std::string>>> step_keys(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i)
    for (size_t s = 0; s < common; ++s) {
      const CollectiveRecord& c = ranks[i].records[s];
      std::set<std::string>& keys = step_keys[i][StepKey{c.phase, c.request, c.step}];
      for (const auto& n : c.compiles) keys.insert(n.key);
    }
  nlohmann::json out_steps = nlohmann::json::array();
  for (const Step& st : steps) {
    nlohmann::json why = nlohmann::json::array();
    int autotunes = 0;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const RankRecords& r = ranks[i];
      if (r.rank != st.last_rank) continue;
      for (size_t s = 0; s < common; ++s) {
        const CollectiveRecord& c = r.records[s];
        if (StepKey{c.phase, c.request, c.step} != st.key) continue;
        autotunes += c.autotunes;
        for (const auto& n : c.compiles) {
          bool every_rank = true;
          for (size_t j = 0; j < ranks.size(); ++j) {
            if (j == i) continue;
            const auto it = step_keys[j].find(st.key);
            if (it == step_keys[j].end() || it->second.count(n.key) == 0) every_rank = false;
          }
          why.push_back({{"kernel", n.kernel}, {"key", n.key}, {"compile_ms", n.compile_ms},
                         {"source", n.source}, {"every_rank", every_rank}});
        }
      }
    }
    if (st.stall_ms < min_stall_ms && why.empty() && autotunes == 0) continue;
    out_steps.push_back({{"phase", std::get<0>(st.key)},
                         {"request", std::get<1>(st.key)},
                         {"step", std::get<2>(st.key)},
                         {"collectives", st.collectives},
                         {"stall_ms", st.stall_ms},
                         {"last_rank", st.last_rank},
                         {"wait_ms", st.wait_ms},
                         {"why", why},
                         {"autotunes", autotunes}});
  }
  return {{"per_rank", per_rank}, {"steps", out_steps}};
}

std::string rank_state_path(const std::string& dir, int rank) {
  return fmt::format("{}/rank{}.json", dir, rank);
}

nlohmann::json read_rank_states(const std::string& dir, int world, int64_t now_ns) {
  nlohmann::json out = nlohmann::json::array();
  for (int r = 0; r < world; ++r) {
    nlohmann::json st = {{"rank", r}, {"published", false}};
    std::ifstream f(rank_state_path(dir, r));
    nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (f && j.is_object()) {
      try {
        st["published"] = true;
        st["pid"] = j.value("pid", 0L);
        st["phase"] = j.value("phase", std::string());
        st["arrived_seq"] = j.value("arrived_seq", int64_t{-1});
        st["site"] = j.value("site", std::string());
        st["arrived_ns"] = j.value("arrived_ns", int64_t{0});
        if (j.contains("stopped") && j["stopped"].is_string()) st["stopped"] = j["stopped"];
        st["arrived_after"] = nlohmann::json::array();
        if (j.contains("arrived_after") && j["arrived_after"].is_array())
          for (const auto& c : j["arrived_after"])
            st["arrived_after"].push_back({{"kernel", c.value("kernel", std::string())},
                                           {"compile_ms", c.value("compile_ms", 0.0)}});
        if (j.contains("compiling") && j["compiling"].is_object()) {
          const int64_t since = j["compiling"].value("since_ns", now_ns);
          st["compiling"] = {{"what", j["compiling"].value("what", std::string())},
                             {"for_ms", static_cast<double>(now_ns - since) / 1e6}};
        }
      } catch (const nlohmann::json::exception&) {
        st = {{"rank", r}, {"published", false}};  // a field of the wrong type: unreadable
      }
    }
    out.push_back(std::move(st));
  }
  return out;
}

namespace {
// A compile key cut to fit a log line: the kernel's name and the start of its specialization
// (the state file and the result's ranks block keep the whole key).
std::string short_compile_key(const std::string& key, size_t max_chars = 96) {
  if (key.size() <= max_chars) return key;
  return key.substr(0, max_chars) + fmt::format("... ({} more chars)", key.size() - max_chars);
}
}  // namespace

std::string late_ranks_text(const nlohmann::json& states, int self, int64_t seq,
                            int64_t deadline_ns) {
  std::vector<std::string> out;
  for (const nlohmann::json& st : states) {
    const int r = st.at("rank").get<int>();
    if (r == self) continue;
    if (!st.at("published").get<bool>()) {
      out.push_back(fmt::format("rank {} (no state published)", r));
      continue;
    }
    const int64_t got = st.at("arrived_seq").get<int64_t>();
    // deadline_ns is a CLOCK_MONOTONIC time, so an unknown arrival (0) counts as in time.
    const int64_t arrived_ns = st.value("arrived_ns", int64_t{0});
    const bool stopped = st.contains("stopped");
    if (got > seq || (got == seq && arrived_ns <= deadline_ns && !stopped)) continue;
    std::string what = fmt::format("rank {} (pid {}, in {}, ", r, st.at("pid").get<long>(),
                                   st.at("phase").get<std::string>());
    if (stopped) {
      // It will not come (or came and failed there): its engine stopped. Said first, so a rank
      // failing because this peer left learns why. "last collective #N": it reached N and
      // failed in it or after it (its reason says which).
      what += fmt::format("stopped {}: {}",
                          got == seq  ? fmt::format("at collective #{}", got)
                          : got < 0   ? std::string("before any collective")
                                      : fmt::format("(last collective #{})", got),
                          st["stopped"].get<std::string>());
    } else if (got == seq) {
      // It came, but after this rank's deadline: the wait overran and read it as arrived.
      what += fmt::format("arrived {:.0f} ms after this rank's timeout",
                          (arrived_ns - deadline_ns) / 1e6);
      std::vector<std::string> compiles;
      if (st.contains("arrived_after"))
        for (const auto& c : st["arrived_after"])
          compiles.push_back(fmt::format("{} {:.0f} ms", c.value("kernel", std::string()),
                                         c.value("compile_ms", 0.0)));
      if (!compiles.empty()) what += fmt::format(", after compiling {}", fmt::join(compiles, ", "));
    } else {
      what += got < 0 ? std::string("no collective yet") : fmt::format("last collective #{}", got);
      if (st.contains("compiling"))
        what += fmt::format("; compiling {} for {:.0f} ms",
                            short_compile_key(st["compiling"]["what"].get<std::string>()),
                            st["compiling"]["for_ms"].get<double>());
    }
    out.push_back(what + ")");
  }
  // Each rank reads the others' state files when its own wait ends, so two ranks' messages
  // can disagree about a peer that arrived in between.
  if (out.empty())
    return "none found (every peer's state showed it arrived before this rank's timeout)";
  return fmt::format("{}", fmt::join(out, "; "));
}

}  // namespace coldstart::dist
