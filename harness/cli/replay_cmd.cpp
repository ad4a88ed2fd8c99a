// `coldstart replay`: the parent. It validates every scenario and option, then runs each
// (variant, strategy) `--repeat` times in a child of its own (`coldstart _child`, the same
// binary; harness/isolate), folds repeats into medians and spreads, writes the results after
// every strategy, and checks the scenarios' expect: rules (replay_options.h).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <cstdlib>
#include <ctime>
#include <csignal>
#include <iostream>
#include <set>

#include "reports/render_util.h"
#include "harness/cli/cache_snapshot.h"
#include "harness/cli/ranks_run.h"
#include "harness/dist/ranks.engine_keys.h"
#include "harness/cli/replay_options.h"
#include "harness/cli/run_inputs.h"
#include "harness/common/name_filter.h"
#include "harness/cli/version.h"
#include "harness/common/paths.h"
#include "harness/isolate/isolate.h"
#include "harness/replay/engine_keys.h"
#include "harness/replay/expect.h"
#include "reports/table.h"

namespace coldstart::cli {
namespace {

/// The path children are started from: /proc/self/exe, which the kernel resolves to this
/// process's own executable file even after the build directory replaced or deleted it, so every
/// strategy of a run runs the build the run started with (the path readlink reports would start a
/// newer build, or nothing). Linux only, as the rest of the isolation.
std::string self_exe() { return "/proc/self/exe"; }

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

ScenarioSummary summarize(const Scenario& s) {
  ScenarioSummary sum;
  sum.name = s.name;
  sum.file = s.file;
  const ModelConfig& m = s.model;
  sum.model = {{"architecture", m.architecture}, {"model_type", m.model_type},
               {"config", m.config_file}, {"hidden_size", m.hidden_size},
               {"num_hidden_layers", m.num_hidden_layers},
               {"num_attention_heads", m.num_attention_heads},
               {"num_key_value_heads", m.num_key_value_heads}, {"head_dim", m.head_dim},
               {"intermediate_size", m.intermediate_size}, {"vocab_size", m.vocab_size}};
  const EngineConfig& e = s.engine;
  sum.engine = {{"max_num_seqs", e.max_num_seqs},
                {"max_num_batched_tokens", e.max_num_batched_tokens},
                {"max_model_len", e.max_model_len}, {"block_size", e.block_size},
                {"kv_cache_dtype", e.kv_cache_dtype},
                {"cudagraph_mode", cudagraph_mode_name(e.cudagraph_mode)},
                {"cudagraph_capture_sizes", e.cudagraph_capture_sizes},
                {"tensor_parallel_size", e.tensor_parallel_size},
                // The KV cache's size follows from these: a run at another utilization is not
                // like for like (compare notes it).
                {"gpu_memory_utilization", e.gpu_memory_utilization}};
  if (e.num_gpu_blocks) sum.engine["num_gpu_blocks"] = *e.num_gpu_blocks;
  // The keys their owners declare (engine_keys.h), with their defaults when left out.
  for (const EngineKeySpec& k : declared_engine_keys()) {
    if (k.in_result == EngineKeyInResult::kNever ||
        (k.in_result == EngineKeyInResult::kWhenSet && !e.owned.contains(k.name)))
      continue;
    if (k.type == EngineKeyType::kInt)
      sum.engine[k.name] = e.int_key(k.name);
    else
      sum.engine[k.name] = e.string_key(k.name);
  }
  nlohmann::json req = nlohmann::json::array();
  for (const auto& r : s.requests)
    req.push_back({{"prompt_tokens", r.prompt_tokens}, {"decode_steps", r.decode_steps},
                   {"arrival_step", r.arrival_step}, {"steady", r.steady}});
  sum.engine["requests"] = req;
  return sum;
}

RunMeta make_meta(const std::vector<StrategyResult>& results, const std::string& cmdline,
                  const std::string& started_at) {
  RunMeta m;
  m.coldstart_version = kVersion;
  m.git_sha = git_sha();
  m.hostname = hostname();
  m.started_at = started_at;
  m.command_line = cmdline;
  m.nvrtc = jit::nvrtc_version();
  for (const auto& r : results) {
    auto it = r.extra.find("meta");
    if (it == r.extra.end() || !it->is_object()) continue;
    const auto& j = *it;
    m.mode = j.value("mode", "");
    m.device_name = j.value("device_name", "");
    m.sm = j.value("sm", 0);
    m.sm_count = j.value("sm_count", 0);
    m.driver = j.value("driver", "");
    m.cuda = j.value("cuda", "");
    m.torch = j.value("torch", "");
    break;
  }
  return m;
}

/// A run stopped before any strategy's process reported its device (Ctrl-C during the first
/// startup): in compile-only mode the parent knows the target without touching a GPU, so the
/// header and results name it as the children would ("compile-only: NVIDIA H200"); on a GPU it
/// stays unknown.
void fill_meta_from_target(const ReplayArgs& a, RunMeta& m) {
  const std::optional<Target> t = known_target(a);
  if (!t) return;
  m.mode = "compile-only";
  m.device_name = t->profile.empty() ? "compile-only (" + t->arch + ")"
                                     : "compile-only: " + t->device_name;
  m.sm = t->sm;
  m.sm_count = t->sm_count;
}

/// The result of one strategy's repeated runs: fold_repeats of `reps` when all `wanted` runs
/// finished. Otherwise the run was interrupted: the interrupted run's result with the times of
/// the runs that finished before it (take_finished_times), or, when the interrupt came between
/// two runs, the fold of those that finished; outcome `interrupted` and
/// extra["repeats_completed"] saying how many finished.
StrategyResult interrupted_repeats(std::vector<StrategyResult> reps, int wanted) {
  const bool stopped = !reps.empty() && reps.back().outcome == Outcome::kInterrupted;
  if (!stopped && static_cast<int>(reps.size()) == wanted) return fold_repeats(std::move(reps));
  const int completed = static_cast<int>(reps.size()) - (stopped ? 1 : 0);
  StrategyResult out = stopped ? reps.back() : fold_repeats(reps);
  // The runs that finished before the interrupted one keep their times (its own are partial).
  if (stopped && completed > 0)
    take_finished_times(out, std::vector<StrategyResult>(reps.begin(), reps.end() - 1));
  if (!stopped) {
    const int sig = isolate::interrupt_signal();
    out.outcome = Outcome::kInterrupted;
    out.error = fmt::format("interrupted by {} (the run was stopped) after {} of {} runs",
                            isolate::signal_name(sig), completed, wanted);
    out.failed_phase = std::nullopt;
  }
  if (wanted > 1) out.extra["repeats_completed"] = completed;
  return out;
}

/// Progress on stderr. kLive: one line rewritten in place (what runs now, its phase, how many
/// of how many, elapsed time), for a terminal. kPlain: one line when a strategy run starts and
/// one when it ends, with its outcome and elapsed time, for CI logs (nothing is rewritten).
/// kNone: quiet.
class Progress {
 public:
  Progress(size_t total, ProgressMode mode) : total_(total), mode_(mode) {}
  // Thread-safe: with --jobs several strategy runs report at once (a live line then shows the
  // latest report of any of them).
  void start(size_t index, const std::string& label) {
    std::lock_guard<std::mutex> lock(mu_);
    job_start_[index] = Clock::now();
    if (mode_ == ProgressMode::kPlain) {
      std::cerr << fmt::format("[{}/{}] {}: started ({:.1f} s into the run)\n", index + 1, total_,
                               reports::detail::terminal_text(label), seconds(start_))
                << std::flush;
    }
    update_locked(index, label, "");
  }
  void update(size_t index, const std::string& label, const std::string& phase) {
    std::lock_guard<std::mutex> lock(mu_);
    update_locked(index, label, phase);
  }
  void done(size_t index, const std::string& label, const StrategyResult& r) {
    std::lock_guard<std::mutex> lock(mu_);
    if (mode_ == ProgressMode::kNone) return;
    const auto it = job_start_.find(index);
    std::cerr << fmt::format("{}[{}/{}] {}: {}{} in {:.1f} s\n",
                             mode_ == ProgressMode::kLive ? "\r\033[K" : "", index + 1, total_,
                             reports::detail::terminal_text(label), outcome_name(r.outcome),
                             r.failed_phase ? " in " + reports::detail::terminal_text(*r.failed_phase)
                                            : std::string(),
                             seconds(it == job_start_.end() ? start_ : it->second))
              << std::flush;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  }
  void update_locked(size_t index, const std::string& label, const std::string& phase) {
    if (mode_ != ProgressMode::kLive) return;
    std::cerr << fmt::format("\r\033[K[{}/{}] {}{} ({:.1f} s)", index + 1, total_,
                             reports::detail::terminal_text(label),
                             phase.empty() ? "" : ": " + reports::detail::terminal_text(phase),
                             seconds(start_))
              << std::flush;
  }
  std::mutex mu_;
  size_t total_;
  ProgressMode mode_;
  Clock::time_point start_ = Clock::now();
  std::map<size_t, Clock::time_point> job_start_;
};

struct Job {
  size_t scenario;
  int variant;
  const StrategySpec* strategy;
};

/// Runs one (variant, strategy) of `s` in a child, handing it the job the parent validated
/// (child_job.h; the scenario of that variant from `inputs`, naming the private copies); in this
/// process with --no-isolate. `n` numbers the job file.
StrategyResult run_job(const ReplayArgs& a, const RunInputs& inputs, const Scenario& s,
                       const Job& job, size_t n,
                       const std::function<void(const std::string&)>& on_phase) {
  const StrategySpec& st = *job.strategy;
  ChildJob child_job = make_child_job(a, inputs.child_scenario(job.scenario, job.variant), st);
  if (a.no_isolate) {
    StrategyResult r = run_in_process(child_job, {});
    inputs.name_originals(r);
    return r;
  }
  const std::string job_file = paths::join(inputs.dir(), fmt::format("job-{}.json", n));
  if (replays_all_ranks(child_job.scenario.engine)) {
    // The ranks publish their states here, where this process can read them if it stops rank 0.
    child_job.rank_dir = paths::join(inputs.dir(), fmt::format("ranks-{}", n));
    paths::make_dirs(child_job.rank_dir);
  }
  write_child_job(job_file, child_job);
  isolate::ChildSpec spec;
  spec.argv = {self_exe(), "_child", "--job", job_file};
  spec.timeout_s = a.timeout_s > 0 ? a.timeout_s : s.timeout_s;
  // Whatever the child leaves under $TMPDIR (its cold kernel cache, ...) goes with it, also when
  // the watchdog or an interrupt stops it before it can clean up.
  spec.private_tmpdir = true;
  StrategyResult fallback;
  fallback.strategy = st.name;
  fallback.variant = s.variants[job.variant].name;
  fallback.warmers = st.warmers;
  fallback.extra["allow_hot_path_compiles"] = st.allow_hot_path_compiles;
  auto on_msg = [&](const std::string& line) {
    // Each snapshot says which phase runs (a few dozen lines per strategy).
    if (const auto snap = isolate::parse_snapshot(line); snap && snap->current_phase)
      on_phase(*snap->current_phase);
  };
  // Which strategy a child's line comes from (strategies may run one after another quickly, and
  // a warn line alone cannot say).
  const std::string who = s.variants[job.variant].name.empty()
                              ? st.name
                              : st.name + " [" + s.variants[job.variant].name + "]";
  auto on_err = [&](const std::string& line) {
    // Children's stderr is shown with -v; `--jit-monitor warn` lines always.
    if (a.verbose || line.rfind("coldstart: hot-path compile", 0) == 0)
      std::cerr << "  " << who << ": " << line << "\n";
  };
  isolate::ChildExit ex = isolate::run_child(spec, on_msg, on_err);
  StrategyResult r = isolate::classify(ex, isolate::last_snapshot(ex.messages, fallback));
  if (r.outcome == Outcome::kTimeout || r.outcome == Outcome::kInterrupted)
    add_stopped_ranks(r, child_job);  // what each rank was doing when it was stopped
  inputs.name_originals(r);
  return r;
}

bool selected(const ReplayArgs& a, const Scenario& s, const StrategySpec& st) {
  if (!a.strategies.empty() &&
      std::find(a.strategies.begin(), a.strategies.end(), st.name) == a.strategies.end())
    return false;
  if (a.filter.empty()) return true;
  const NameFilter re(a.filter);  // linear-time search: no pattern can hang or overflow
  return re.search(s.name) || re.search(st.name) || re.search(s.name + "/" + st.name);
}

}  // namespace

int replay_main(ReplayArgs a, const std::string& cmdline) {
  // A reader that went away (`coldstart replay ... | head`) must not cost the run its exit status
  // and --check verdict: the results files are written anyway, and a write to the closed stdout
  // just fails instead of killing the process. (Children get the default action back.)
  std::signal(SIGPIPE, SIG_IGN);
  if (a.repeat < 1) throw InputError("--repeat must be at least 1");
  const std::vector<std::string> outputs = {a.json, a.junit, a.md, a.html, a.trace};
  validate_run_options(a);
  std::vector<Scenario> scenarios;
  for (const auto& f : a.scenario_files) {
    ReplayArgs one = a;
    one.scenario = f;
    scenarios.push_back(load(one));
  }
  // Every output must be writable, and none may be one of the run's inputs (it would be
  // overwritten after the first strategy, and the children, which read the scenario, would then
  // read results).
  std::vector<std::string> inputs_read;
  for (const Scenario& sc : scenarios) inputs_read.insert(inputs_read.end(), {sc.file, sc.model.config_file});
  paths::check_output_paths(outputs, inputs_read, a.force);
  std::vector<std::string> known;  // the scenarios' strategy names, each once, in order
  for (const auto& s : scenarios)
    for (const auto& st : s.strategies)
      if (std::find(known.begin(), known.end(), st.name) == known.end()) known.push_back(st.name);
  for (const auto& name : a.strategies) {
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw InputError(fmt::format("--strategy '{}': in none of the scenarios (their strategies: {})",
                                   name, fmt::join(known, ", ")));
  }
  if (!a.filter.empty()) {
    check_filter_size(a.filter);
    NameFilter check(a.filter);  // InputError naming the offset and what is wrong
  }
  // Fault injection (engine_internal.h stall_if_asked): refuse a name no replay announces, and
  // say that it is on, so an injected stall never passes for a real hang.
  if (const char* stall = std::getenv("COLDSTART_STALL_IN_PHASE")) {
    std::vector<std::string> phases = replay_phase_names();
    phases.erase(std::remove(phases.begin(), phases.end(), "steady_request"), phases.end());
    if (std::find(phases.begin(), phases.end(), stall) == phases.end())
      throw InputError(fmt::format("COLDSTART_STALL_IN_PHASE='{}': not a phase a replay stalls in "
                                   "({})", stall, fmt::join(phases, ", ")));
    std::cerr << fmt::format("coldstart: fault injection: COLDSTART_STALL_IN_PHASE={}: every "
                             "strategy stops in {} until the watchdog (--timeout) stops it\n",
                             stall, stall);
  }
  std::vector<Job> jobs;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    // Startup reads no request (warmers and profile run size from the engine settings), and the
    // envelope replaces the requests: variants that differ only in `requests.` keys sweep the
    // same envelope, so an --envelope run keeps the first of them.
    std::set<std::vector<std::pair<std::string, std::string>>> swept;
    for (size_t v = 0; v < scenarios[i].variants.size(); ++v) {
      if (a.envelope) {
        std::vector<std::pair<std::string, std::string>> engine_side;
        for (const auto& o : scenarios[i].variants[v].overrides)
          if (o.first.rfind("requests", 0) != 0) engine_side.push_back(o);
        if (!swept.insert(engine_side).second) {
          std::cout << fmt::format("{}: variant {} left out: it differs from an earlier one only "
                                   "in its requests, which the envelope replaces\n",
                                   scenarios[i].name, scenarios[i].variants[v].name);
          continue;
        }
      }
      for (const auto& st : scenarios[i].strategies)
        if (selected(a, scenarios[i], st)) jobs.push_back({i, static_cast<int>(v), &st});
    }
  }
  if (jobs.empty()) throw InputError("no strategy selected (check --strategy / --filter)");

  // From here on, SIGINT / SIGTERM stop the running strategy's child, keep what finished and end
  // the run with 128 + the signal (isolate::InterruptScope); every temporary directory below is
  // removed on the way out. --no-isolate runs strategies in this process: the default action.
  std::optional<isolate::InterruptScope> interrupts;
  if (!a.no_isolate) interrupts.emplace();
  const auto interrupted = [&] { return interrupts && isolate::interrupt_signal() != 0; };

  // The children replay what was validated: the parsed scenarios, and copies of the tuned-config
  // directories they read.
  const RunInputs inputs(scenarios);

  // Compile-only children share one compile memo for this run (JitOptions::compile_memo_dir):
  // removed when the run ends. COLDSTART_COMPILE_MEMO_DIR names a memo kept across runs instead
  // (the test suite's compile-only replays share one): a key an earlier run compiled is then
  // `reused` from the first strategy on, with the compile time measured when it was compiled.
  std::optional<paths::ScopedTempDir> memo;
  if (!a.no_compile_memo && a.device != "cuda") {
    const std::string shared = shared_compile_memo_dir();
    if (!shared.empty()) {
      paths::make_dirs(shared);
      a.compile_memo = shared;
    } else {
      memo.emplace("coldstart-memo-");
      a.compile_memo = memo->path;
    }
  }
  // With a persistent --cache-dir, each strategy run starts from the directory as it was when
  // this run began (its own view), and what it compiled is merged back when it ends.
  std::optional<CacheSnapshots> cache_views;
  if (!a.cache_dir.empty()) cache_views.emplace(a.cache_dir);
  std::vector<RunResults> runs(scenarios.size());
  // The outputs hold the scenarios this run replays: one that --strategy / --filter left with
  // nothing to run is not written as an empty run.
  std::vector<bool> replayed(scenarios.size(), false);
  for (const Job& job : jobs) replayed[job.scenario] = true;
  const auto replayed_runs = [&] {
    std::vector<RunResults> out;
    for (size_t i = 0; i < runs.size(); ++i)
      if (replayed[i]) out.push_back(runs[i]);
    return out;
  };
  for (size_t i = 0; i < scenarios.size(); ++i) runs[i].scenario = summarize(scenarios[i]);
  const std::string started_at = now_iso8601();
  Progress progress(jobs.size(), parse_progress(a.progress, isatty(STDERR_FILENO) != 0));
  int harness_errors = 0;
  std::string write_failed;  // the last results write's error, "" when it succeeded
  size_t not_run = 0;        // strategies an interrupt kept from starting
  const auto label_of = [&](const Job& job) {
    const Scenario& s = scenarios[job.scenario];
    return (scenarios.size() > 1 ? s.name + ": " : std::string()) + job.strategy->name +
           (s.variants[job.variant].name.empty() ? ""
                                                 : " [" + s.variants[job.variant].name + "]");
  };
  // One job's runs (--repeat), folded into its result. Safe to call from several threads: the
  // cache views are taken and merged one at a time.
  std::mutex cache_mu;
  const auto run_one = [&](size_t j) {
    const Job& job = jobs[j];
    const std::string label = label_of(job);
    std::vector<StrategyResult> reps;
    for (int k = 0; k < a.repeat; ++k) {
      if (k > 0 && interrupted()) break;
      const std::string lab = a.repeat > 1 ? fmt::format("{} (run {}/{})", label, k + 1, a.repeat) : label;
      progress.start(j, lab);
      ReplayArgs ja = a;
      if (cache_views) {
        std::lock_guard<std::mutex> lock(cache_mu);
        ja.cache_dir = cache_views->begin_job();
      }
      reps.push_back(run_job(ja, inputs, scenarios[job.scenario], job, j * a.repeat + k,
                             [&](const std::string& phase) { progress.update(j, lab, phase); }));
      if (cache_views) {
        std::lock_guard<std::mutex> lock(cache_mu);
        cache_views->end_job(ja.cache_dir);
      }
      if (reps.back().outcome == Outcome::kInterrupted) break;
    }
    return interrupted_repeats(std::move(reps), a.repeat);
  };
  // Takes job j's result into its run, in job order, and writes the outputs.
  const auto record = [&](size_t j, StrategyResult r) {
    const Job& job = jobs[j];
    progress.done(j, label_of(job), r);
    if (r.outcome == Outcome::kError) ++harness_errors;
    RunResults& run = runs[job.scenario];
    run.results.push_back(std::move(r));
    run.meta = make_meta(run.results, cmdline, started_at);
    if (run.meta.mode.empty()) fill_meta_from_target(a, run.meta);
    run.meta.sets = a.sets;
    run.meta.inputs = inputs.inputs(job.scenario);
    // Written after every strategy, atomically, so results survive a later failure. A write
    // that fails (the directory went away or became read-only) does not stop the run: the
    // results stay in memory and the write is tried again at the end.
    try {
      write_outputs(a, replayed_runs());
      write_failed.clear();
    } catch (const Error& e) {
      if (write_failed.empty())
        std::cerr << "coldstart: writing the results failed ("
                  << reports::detail::terminal_text(e.what()) << "); continuing, will try again "
                                                                 "at the end\n";
      write_failed = e.what();
    }
  };
  if (a.jobs <= 1) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (interrupted()) {
        not_run = jobs.size() - j;
        break;
      }
      record(j, run_one(j));
    }
  } else {
    // --jobs N (compile-only): N workers take the jobs in order, each running its strategy in its
    // own child; this thread records the results in job order as they come. A job replaying
    // every rank (several processes and their rendezvous) runs alone. After an interrupt no job
    // starts; the running ones are stopped by their run_child and recorded. A child started from
    // a worker gets SIGKILL when that thread ends (PR_SET_PDEATHSIG follows the thread,
    // isolate::die_with_parent): each worker waits for its child in run_child, so none ends first.
    std::mutex mu;
    std::condition_variable cv;
    std::shared_mutex alone;
    size_t next = 0, workers_left = 0;
    bool stop_taking = false;
    std::vector<std::optional<StrategyResult>> out(jobs.size());
    std::vector<std::exception_ptr> failed(jobs.size());
    const auto worker = [&] {
      for (;;) {
        size_t j;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next >= jobs.size() || interrupted() || stop_taking) break;
          j = next++;
        }
        std::optional<StrategyResult> r;
        std::exception_ptr err;
        try {
          const Job& job = jobs[j];
          if (replays_all_ranks(inputs.child_scenario(job.scenario, job.variant).engine)) {
            std::unique_lock<std::shared_mutex> excl(alone);
            r = run_one(j);
          } else {
            std::shared_lock<std::shared_mutex> shared(alone);
            r = run_one(j);
          }
        } catch (...) {
          err = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          out[j] = std::move(r);
          failed[j] = err;
          if (err) stop_taking = true;  // as one at a time: a harness fault ends the run
        }
        cv.notify_all();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        --workers_left;
      }
      cv.notify_all();
    };
    std::vector<std::thread> pool;
    // Whatever leaves this block (an exception from record included) stops the job taking and
    // joins every worker first: a running std::thread must never be destroyed.
    struct JoinAll {
      std::vector<std::thread>& pool;
      std::mutex& mu;
      bool& stop;
      ~JoinAll() {
        {
          std::lock_guard<std::mutex> lock(mu);
          stop = true;
        }
        for (std::thread& t : pool)
          if (t.joinable()) t.join();
      }
    } join_all{pool, mu, stop_taking};
    workers_left = std::min<size_t>(static_cast<size_t>(a.jobs), jobs.size());
    const size_t num_workers = workers_left;
    for (size_t w = 0; w < num_workers; ++w) pool.emplace_back(worker);
    std::exception_ptr first_error;
    for (size_t j = 0; j < jobs.size(); ++j) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return out[j] || failed[j] || (j >= next && workers_left == 0); });
      if (failed[j]) {
        if (!first_error) first_error = failed[j];
        continue;
      }
      if (!out[j]) {  // never started: an interrupt came first
        not_run = jobs.size() - j;
        break;
      }
      StrategyResult r = std::move(*out[j]);
      lock.unlock();
      if (!first_error) record(j, std::move(r));
    }
    if (first_error) std::rethrow_exception(first_error);  // join_all joins the workers
  }
  if (!write_failed.empty()) {
    try {
      write_outputs(a, replayed_runs());
      write_failed.clear();
    } catch (const Error& e) {
      write_failed = e.what();
    }
  }
  for (const RunResults& run : runs) {
    if (run.results.empty()) continue;
    std::cout << reports::render_table(run, isatty(STDOUT_FILENO) != 0);
    // A coverage run whose every strategy stopped before the sweep has no envelope table: say
    // why, so the missing section does not read as an empty envelope.
    if (a.envelope && !reports::detail::is_envelope_run(run))
      std::cout << fmt::format("\nserving envelope coverage of {}: no strategy reached the sweep "
                               "(each was skipped or stopped before it; see the outcomes above)\n",
                               run.scenario.name);
  }
  if (!write_failed.empty()) {
    // The table above is what remains of this run: say so, and fail (a harness error).
    std::cerr << "coldstart: error: the results could not be written: " << write_failed << "\n";
    ++harness_errors;
  }
  if (interrupted()) {
    // What finished is in the table and the results; the rules of a partial run are not checked.
    const int sig = isolate::interrupt_signal();
    std::cerr << fmt::format("coldstart: interrupted by {}: {} strategy run(s) not started; "
                             "expect: rules not checked\n",
                             isolate::signal_name(sig), not_run);
    return 128 + sig;
  }
  // An --envelope run replays the envelope, not the scenario's requests: its rules are about
  // requests, so none is checked.
  if (a.envelope) {
    for (const auto& s : scenarios)
      if (!s.expectations.empty())
        std::cout << fmt::format("expectations of {}: not checked (a coverage run replays the "
                                 "envelope, not the requests)\n", s.name);
  }
  // The scenarios' own tests: every `expect:` rule against this run's results. The verdicts go
  // into the results file and the JUnit report (one test case per rule), written once more.
  std::vector<RunExpectations> checks(scenarios.size());
  bool any_rules = false;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    if (a.envelope || scenarios[i].expectations.empty() || runs[i].results.empty()) continue;
    checks[i] = check_run_expectations(scenarios[i], runs[i]);
    runs[i].rules = checks[i].rules;
    any_rules = true;
  }
  if (any_rules && write_failed.empty()) {
    try {
      write_outputs(a, replayed_runs());
    } catch (const Error& e) {
      std::cerr << "coldstart: error: the results could not be written: "
                << reports::detail::terminal_text(e.what(), true) << "\n";
      ++harness_errors;
    }
  }
  int unmet = 0;
  size_t rules_checked = 0;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    if (a.envelope || scenarios[i].expectations.empty() || runs[i].results.empty()) continue;
    // With --strategy / --filter only some strategies ran: rules about the others are not
    // failures of this run (check_run_expectations leaves them out).
    const RunExpectations& x = checks[i];
    rules_checked += x.checked;
    std::string not_applied =
        x.not_applicable
            ? fmt::format("; {} rule(s) for another mode, arch or device not checked", x.not_applicable)
            : "";
    if (x.strategy_not_run > 0)
      not_applied += fmt::format("; {} rule(s) about strategies not run", x.strategy_not_run);
    if (!x.not_checked.empty())
      not_applied += fmt::format("; {} rule(s) about variants this run did not produce not checked",
                                 x.not_checked.size());
    if (x.unmet.empty()) {
      std::cout << fmt::format("expectations of {}: {} rule(s) met ({}){}\n", scenarios[i].name,
                               x.checked, x.mode, not_applied);
    } else {
      size_t unmet_rules = 0;
      for (const RuleCheck& rule : x.rules) unmet_rules += rule.status == "unmet";
      std::cout << fmt::format("expectations of {}: {} rule(s) unmet ({} failed check(s)), {} met "
                               "({}){}\n",
                               scenarios[i].name, unmet_rules, x.unmet.size(),
                               x.checked - unmet_rules, x.mode, not_applied);
      for (const auto& l : x.unmet) std::cout << "  UNMET " << l << "\n";
      unmet += static_cast<int>(x.unmet.size());
    }
    for (const auto& l : x.not_checked) std::cout << "  not checked: " << l << "\n";
  }
  if (harness_errors > 0) return 1;
  if (a.check && unmet > 0) return 3;
  // A run in which no strategy got as far as a result (every one timed out) measured nothing:
  // exit 1 so CI notices, unless --check held the scenario's rules and they expected it.
  size_t total = 0, timed_out = 0, measured = 0;
  for (const RunResults& run : runs)
    for (const StrategyResult& r : run.results) {
      ++total;
      if (r.outcome != Outcome::kTimeout) continue;
      ++timed_out;
      if (std::any_of(r.phases.begin(), r.phases.end(), [](const auto& p) { return p.request >= 0; }))
        ++measured;
    }
  if (total > 0 && timed_out == total && !(a.check && rules_checked > 0)) {
    // A watchdog that fires in teardown stops a run whose requests were already measured.
    const std::string what =
        measured == 0 ? std::string("nothing was measured")
                      : fmt::format("{} of them after replaying requests, but none ended",
                                    measured);
    std::cerr << fmt::format("coldstart: every strategy run ({}) timed out: {} (exit 1; a "
                             "scenario that expects this says so in expect: rules checked with "
                             "--check)\n",
                             total, what);
    return 1;
  }
  return 0;
}

int coverage_main(ReplayArgs a, const std::string& cmdline) {
  if (a.device == "cuda")
    throw InputError("coverage: --device cuda: the envelope's steps are key-only (nothing "
                     "launched), which only compile-only mode runs; pass --target or --arch for "
                     "the GPU to cover");
  if (a.device != "auto" && a.device != "compile-only")
    throw InputError("--device '" + a.device + "': expected compile-only (or auto, the same for "
                     "coverage)");
  a.device = "compile-only";
  a.envelope = true;
  return replay_main(std::move(a), cmdline);
}

}  // namespace coldstart::cli
