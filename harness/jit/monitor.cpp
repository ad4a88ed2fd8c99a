// The JIT monitor: records every compile with key, duration and phase. See jit.h.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "harness/jit/jit.h"

namespace coldstart::jit {

JitMonitor::JitMonitor(MonitorMode mode) : mode_(mode) {}

void JitMonitor::set_phase(std::string phase) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = std::move(phase);
}

void JitMonitor::set_step(const StepContext& step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
}

StepContext JitMonitor::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_;
}

const std::string& JitMonitor::phase() const {
  std::lock_guard<std::mutex> lock(mu_);
  return phase_;
}

void JitMonitor::activate() {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = true;
}

bool JitMonitor::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_;
}

void JitMonitor::before_compile(const CompileKey& key) { before_compile(key, CompileRecord{}); }

void JitMonitor::before_compile(const CompileKey& key, const CompileRecord& provenance) {
  std::string phase;
  StepContext step;
  std::function<void(const CompileKey&)> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hook = before_compile_hook_;
  }
  if (hook) hook(key);  // outside the lock, as the observer
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_ || mode_ != MonitorMode::kError) return;
    phase = phase_;
    step = step_;
  }
  // The refused compile is still a hot-path compile of this run: record it (no time spent).
  CompileRecord rec;
  rec.kernel = key.kernel;
  rec.key = key.str();
  rec.compile_ms = 0;
  rec.phase = phase;
  rec.hot_path = true;
  rec.source = "refused";
  rec.selector = provenance.selector;
  rec.tuning_key = provenance.tuning_key;
  rec.config = provenance.config;
  rec.num_candidates = provenance.num_candidates;
  rec.step = step;
  record(std::move(rec));
  throw HotPathCompileError(fmt::format(
      "hot-path compile of {} in phase {} with --jit-monitor error: key {}", key.kernel, phase,
      key.str()));
}

void JitMonitor::record(CompileRecord rec) {
  std::function<void(const CompileRecord&)> observer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rec.phase.empty()) rec.phase = phase_;
    if (rec.step.request < 0) rec.step = step_;
    rec.hot_path = active_;
    rec.parallel_scope = parallel_scope_;
    rec.parallel_threads = parallel_threads_;
    if (rec.compile_ms > 0) stall_ms_ += rec.compile_ms;
    if (rec.hot_path && mode_ == MonitorMode::kWarn) {
      std::fprintf(stderr, "coldstart: hot-path compile of %s in phase %s (%.1f ms, %s): key %s\n",
                   rec.kernel.c_str(), rec.phase.c_str(), rec.compile_ms, rec.source.c_str(),
                   rec.key.c_str());
    }
    records_.push_back(rec);
    observer = observer_;
  }
  if (observer) observer(rec);  // outside the lock: the observer may call back into the monitor
}

void JitMonitor::set_before_compile_hook(std::function<void(const CompileKey&)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  before_compile_hook_ = std::move(fn);
}

void JitMonitor::set_observer(std::function<void(const CompileRecord&)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  observer_ = std::move(fn);
}

std::vector<CompileRecord> JitMonitor::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

size_t JitMonitor::num_records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

double JitMonitor::compile_ms_since(size_t first, bool reused_only) const {
  std::lock_guard<std::mutex> lock(mu_);
  double ms = 0;
  for (size_t i = first; i < records_.size(); ++i)
    if (!reused_only || records_[i].reused) ms += records_[i].compile_ms;
  return ms;
}

double JitMonitor::memo_charge_ms_since(size_t first) const {
  std::lock_guard<std::mutex> lock(mu_);
  double ms = 0;
  // Per scope: its threads and the served compiles' times.
  std::map<int, std::pair<int, std::vector<double>>> scopes;
  for (size_t i = first; i < records_.size(); ++i) {
    const CompileRecord& r = records_[i];
    if (!r.reused) continue;
    if (r.parallel_scope == 0 || r.parallel_threads <= 1) {
      ms += r.compile_ms;
      continue;
    }
    auto& scope = scopes[r.parallel_scope];
    scope.first = r.parallel_threads;
    scope.second.push_back(r.compile_ms);
  }
  // Longest first, each on the thread that is free first (LPT). The threads' record order
  // varies from run to run; this order does not, so identical work is charged identically.
  for (auto& [id, scope] : scopes) {
    std::vector<double>& times = scope.second;
    std::sort(times.begin(), times.end(), std::greater<double>());
    std::vector<double> busy(static_cast<size_t>(scope.first), 0.0);
    for (double t : times) *std::min_element(busy.begin(), busy.end()) += t;
    ms += *std::max_element(busy.begin(), busy.end());
  }
  return ms;
}

double JitMonitor::host_stall_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stall_ms_;
}

JitMonitor::ParallelCompiles::ParallelCompiles(JitMonitor& monitor, int threads)
    : monitor_(monitor) {
  std::lock_guard<std::mutex> lock(monitor_.mu_);
  monitor_.parallel_scope_ = ++monitor_.scopes_opened_;
  monitor_.parallel_threads_ = std::max(1, threads);
}

JitMonitor::ParallelCompiles::~ParallelCompiles() {
  std::lock_guard<std::mutex> lock(monitor_.mu_);
  monitor_.parallel_scope_ = 0;
  monitor_.parallel_threads_ = 1;
}

void JitMonitor::warn(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(warnings_.begin(), warnings_.end(), text) == warnings_.end())
    warnings_.push_back(text);
}

std::vector<std::string> JitMonitor::warnings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return warnings_;
}

void JitMonitor::record_autotune(AutotuneRecord rec) {
  std::function<void(const AutotuneRecord&)> observer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rec.phase = phase_;
    rec.step = step_;
    rec.hot_path = active_;
    if (rec.tune_ms > rec.compile_ms) stall_ms_ += rec.tune_ms - rec.compile_ms;
    autotunes_.push_back(rec);
    observer = autotune_observer_;
  }
  if (observer) observer(rec);
}

void JitMonitor::set_autotune_observer(std::function<void(const AutotuneRecord&)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  autotune_observer_ = std::move(fn);
}

std::vector<AutotuneRecord> JitMonitor::autotunes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return autotunes_;
}

}  // namespace coldstart::jit
