// The autotuner: benchmarks every candidate config of a kernel and keeps the fastest, per
// runtime and tuning key, as Triton's @autotune does. See select.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <fstream>
#include <sstream>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/jit/api_timer.h"
#include "harness/common/paths.h"
#include "harness/jit/driver.h"
#include "harness/jit/jit_internal.h"
#include "harness/jit/select.h"

namespace coldstart::jit {
namespace {

using detail::ms_since;

// ---------------------------------------------------------------- autotune helpers

constexpr const char* kAutotuneSchema = "coldstart-autotune/1";

std::string describe(const KernelConfig& c) {
  std::string s = c.name + "|";
  for (size_t i = 0; i < c.constexprs.size(); ++i) {
    s += fmt::format("{}{}={}", i ? "," : "", c.constexprs[i].name, c.constexprs[i].value);
  }
  return s + fmt::format("|warps={}|stages={}", c.num_warps, c.num_stages);
}

std::string device_name_of_runtime() {
  const DriverApi& d = driver();
  CUdevice dev = 0;
  CS_CU_CHECK(d.cuDeviceGet(&dev, 0));
  char name[256] = {0};
  CS_CU_CHECK(d.cuDeviceGetName(name, sizeof(name) - 1, dev));
  return name;
}

// CUDA events, destroyed with the object (best effort: a destructor cannot report).
class Events {
 public:
  explicit Events(size_t n) {
    const DriverApi& d = driver();
    events_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      CUevent e = nullptr;
      CS_CU_CHECK(d.cuEventCreate(&e, CU_EVENT_DEFAULT));
      events_.push_back(e);
    }
  }
  ~Events() {
    for (CUevent e : events_) driver().cuEventDestroy(e);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  CUevent operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<CUevent> events_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int clamp_count(double wanted, int max_reps) {
  if (!(wanted < static_cast<double>(max_reps))) return max_reps;  // also NaN / inf
  return std::max(1, static_cast<int>(wanted));
}

// Triton 3.x do_bench (python/triton/testing.py), without the L2 flush: returns the median time
// of one run_once(c) in milliseconds. `take_buffer` is called where do_bench takes its flush
// buffer, after the first call and a synchronize; the buffer is held until the return.
double bench(const KernelConfig& c, const std::function<void(const KernelConfig&)>& run_once,
             CUstream stream, const AutotuneOptions& options,
             const std::function<std::shared_ptr<void>()>& take_buffer) {
  const DriverApi& d = driver();
  run_once(c);  // compiles (on the first call) and launches once
  CS_CU_CHECK(d.cuStreamSynchronize(stream));
  const std::shared_ptr<void> buffer = take_buffer();

  Events estimate(2);
  CS_CU_CHECK(d.cuEventRecord(estimate[0], stream));
  for (int i = 0; i < 5; ++i) run_once(c);
  CS_CU_CHECK(d.cuEventRecord(estimate[1], stream));
  CS_CU_CHECK(d.cuEventSynchronize(estimate[1]));
  float total_ms = 0;
  CS_CU_CHECK(d.cuEventElapsedTime(&total_ms, estimate[0], estimate[1]));
  const double estimate_ms = total_ms / 5.0;
  const int max_reps = std::max(1, options.max_reps);
  const int n_warmup =
      estimate_ms > 0 ? clamp_count(options.warmup_ms / estimate_ms, max_reps) : max_reps;
  const int n_repeat =
      estimate_ms > 0 ? clamp_count(options.rep_ms / estimate_ms, max_reps) : max_reps;

  Events start(static_cast<size_t>(n_repeat));
  Events end(static_cast<size_t>(n_repeat));
  for (int i = 0; i < n_warmup; ++i) run_once(c);
  for (int i = 0; i < n_repeat; ++i) {
    CS_CU_CHECK(d.cuEventRecord(start[i], stream));
    run_once(c);
    CS_CU_CHECK(d.cuEventRecord(end[i], stream));
  }
  CS_CU_CHECK(d.cuEventSynchronize(end[n_repeat - 1]));
  std::vector<double> times(static_cast<size_t>(n_repeat));
  for (int i = 0; i < n_repeat; ++i) {
    float ms = 0;
    CS_CU_CHECK(d.cuEventElapsedTime(&ms, start[i], end[i]));
    times[i] = ms;
  }
  return median(std::move(times));
}

// Throws CudaError when `stream` is capturing a CUDA graph (benchmarking would invalidate it).
void refuse_under_capture(CUstream stream, const std::string& kernel,
                          const std::string& tuning_key, size_t n) {
  const DriverApi& d = driver();
  ensure_context();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult rc = d.cuStreamIsCapturing(stream, &status);
  std::string state;
  if (rc == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
    state = "the legacy default stream is unusable while another stream captures";
  } else if (rc != CUDA_SUCCESS) {
    throw_cu_error(rc, "cuStreamIsCapturing(stream, &status)", __FILE__, __LINE__);
  } else if (status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    state = "capture active";
  } else if (status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    state = "capture invalidated";
  } else {
    return;
  }
  throw CudaError(fmt::format(
      "autotune of {} for tuning key '{}': benchmarking {} candidates is not permitted while the "
      "stream is capturing a CUDA graph ({}); nothing was compiled or launched. Run this kernel "
      "with this tuning key once before graph capture, so that capture finds its pick cached.",
      kernel, tuning_key, n, state));
}

}  // namespace

// ---------------------------------------------------------------- autotune

struct Autotuner::Impl {
  JitRuntime& rt;
  mutable std::mutex mu;  // held for a whole tune: concurrent autotunes are serialized
  std::unordered_map<std::string, Selection> picks;  // identity -> pick
  std::optional<std::string> device;  // GPU name, asked once (not again during a capture)

  explicit Impl(JitRuntime& r) : rt(r) {}

  // Reads a pick written by an earlier runtime; false when absent, damaged or for another
  // identity (a digest collision): then it is re-tuned and the file replaced.
  bool read_disk(const std::string& path, const std::string& identity,
                 const std::vector<KernelConfig>& candidates, Selection* sel) const {
    if (!paths::exists(path)) return false;
    try {
      std::ifstream in(path, std::ios::binary);
      if (!in) return false;
      const nlohmann::json doc = nlohmann::json::parse(in);
      if (doc.at("schema") != kAutotuneSchema || doc.at("identity") != identity) return false;
      const std::string best = doc.at("best").get<std::string>();
      auto it = std::find_if(candidates.begin(), candidates.end(),
                             [&](const KernelConfig& c) { return c.name == best; });
      if (it == candidates.end()) return false;
      sel->config = *it;
      const auto& best_ms = doc.at("best_ms");
      if (best_ms.is_number()) sel->best_ms = best_ms.get<double>();
      for (const auto& f : doc.value("failed", nlohmann::json::array())) {
        sel->failed.push_back(f.get<std::string>());
      }
      return true;
    } catch (const nlohmann::json::exception&) {
      return false;
    }
  }

  void write_disk(const std::string& dir, const std::string& path, const std::string& identity,
                  const std::string& kernel, const std::string& tuning_key,
                  const std::string& mode, const std::string& device,
                  const std::vector<KernelConfig>& candidates,
                  const std::vector<std::optional<double>>& ms,
                  const std::vector<std::string>& errors, const Selection& sel) const {
    nlohmann::json doc;
    doc["schema"] = kAutotuneSchema;
    doc["identity"] = identity;
    doc["kernel"] = kernel;
    doc["tuning_key"] = tuning_key;
    doc["arch"] = rt.arch();
    doc["compiler"] = rt.compiler();
    doc["mode"] = mode;
    doc["device"] = device;
    doc["best"] = sel.config.name;
    doc["best_ms"] = sel.best_ms ? nlohmann::json(*sel.best_ms) : nlohmann::json(nullptr);
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < candidates.size(); ++i) {
      list.push_back({{"name", candidates[i].name},
                      {"ms", ms[i] ? nlohmann::json(*ms[i]) : nlohmann::json(nullptr)},
                      {"error", errors[i].empty() ? nlohmann::json(nullptr)
                                                  : nlohmann::json(errors[i])}});
    }
    doc["candidates"] = std::move(list);
    doc["failed"] = sel.failed;
    try {
      paths::make_dirs(dir);
      paths::write_file_atomic(path, doc.dump(2) + "\n");
    } catch (const Error& e) {
      // A read-only or full cache directory: the pick stays in memory for this run.
      rt.monitor().warn(std::string("autotune cache cannot be written (") + e.what() +
                        "): picks are kept in memory only");
    }
  }
};

Autotuner::Autotuner(JitRuntime& rt) : impl_(std::make_unique<Impl>(rt)) {}

Autotuner::~Autotuner() = default;

size_t Autotuner::cached_picks() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->picks.size();
}

Selection Autotuner::tune(const std::string& kernel, const std::string& source_tag,
                          const std::string& tuning_key,
                          const std::vector<KernelConfig>& candidates,
                          const std::function<void(const KernelConfig&)>& run_once, void* stream,
                          const AutotuneOptions& options) {
  if (candidates.empty()) {
    throw Error(fmt::format("autotune of {} for tuning key '{}': no candidate configs", kernel,
                            tuning_key));
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    for (size_t j = i + 1; j < candidates.size(); ++j) {
      if (candidates[i].name == candidates[j].name) {
        throw Error(fmt::format(
            "autotune of {} for tuning key '{}': candidates {} and {} have the same name '{}'",
            kernel, tuning_key, i, j, candidates[i].name));
      }
    }
  }
  JitRuntime& rt = impl_->rt;
  const bool gpu = rt.launches();
  const std::string mode = gpu ? "gpu" : "compile-only";
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->device) impl_->device = gpu ? device_name_of_runtime() : "";
  const std::string device = *impl_->device;

  // Everything the pick depends on. Compile-only picks (no timings) never serve a GPU run.
  std::string identity = fmt::format(
      "{}\nkernel={}\nsource={}\ntuning_key={}\narch={}\ncompiler={}\nmode={}\ndevice={}",
      kAutotuneSchema, kernel, source_tag, tuning_key, rt.arch(), rt.compiler(), mode, device);
  for (const KernelConfig& c : candidates) identity += "\ncandidate=" + describe(c);

  auto hit = impl_->picks.find(identity);
  if (hit != impl_->picks.end()) {
    Selection sel = hit->second;
    sel.cached = true;
    sel.tune_ms = 0;
    return sel;
  }

  Selection sel;
  sel.selector = "autotune";
  sel.tuning_key = tuning_key;
  for (const KernelConfig& c : candidates) sel.candidates.push_back(c.name);

  const std::string dir = rt.cache_dir() + "/autotune";
  const std::string path =
      dir + "/" + detail::hex64(detail::fnv1a(identity.data(), identity.size())) + ".json";
  if (impl_->read_disk(path, identity, candidates, &sel)) {
    sel.cached = true;
    impl_->picks.emplace(identity, sel);
    return sel;
  }

  if (candidates.size() == 1) {  // Triton: a single config needs no benchmarking
    sel.config = candidates.front();
    impl_->picks.emplace(identity, sel);
    return sel;
  }

  // The autotuner's record times the benchmarking; the API timer must not count it again.
  const ApiTimeExcluded timed_by_monitor;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t first_record = rt.monitor().num_records();
  const CUstream cu_stream = static_cast<CUstream>(stream);
  // Inside an engine's graph capture (JitRuntime::set_capturing), in both modes: Triton's
  // do_bench synchronizes the device after its first call of the kernel
  // (python/triton/testing.py, do_bench: torch.cuda.synchronize(); triton-lang/triton 0079eee),
  // which CUDA refuses while a stream captures in global mode, torch.cuda.graph's default; torch
  // raises "CUDA error: operation not permitted when stream is capturing" (vLLM PR #42070 hit it
  // from an autotune inside capture). The engine raises it, so it is a crash, and compile-only
  // replays fail where the GPU would instead of picking a candidate silently.
  if (const std::string graph = rt.capturing_graph(); !graph.empty()) {
    throw CaptureUnsupportedError(fmt::format(
        "CUDA error: operation not permitted when stream is capturing: the autotune of {} for "
        "tuning key '{}' was first needed while capturing the {}; benchmarking its {} candidates "
        "synchronizes the device, which is refused during stream capture "
        "(cudaErrorStreamCaptureUnsupported). Run this kernel with this tuning key once before "
        "graph capture, so that capture finds its pick cached.",
        kernel, tuning_key, graph, candidates.size()));
  }
  if (gpu) refuse_under_capture(cu_stream, kernel, tuning_key, candidates.size());
  // Triton's do_bench holds a 256 MiB buffer from torch's allocator while it benchmarks (its L2
  // flush: triton.runtime.driver.active.get_empty_cache_for_benchmark(), int32 [256 MiB / 4] in
  // Triton 3.x). An autotune first reached after the KV cache took its share of the device needs
  // that much free: on a small GPU that is an out-of-memory error on the first request (vLLM PR
  // #36599 moved the GDN kernels' autotuning into the profile run for this reason). As in
  // do_bench, per candidate: taken after the candidate's first call (which compiles it) and a
  // synchronize, released when its benchmark returns. Taken in both modes so the memory model
  // sees it; coldstart's bench() does not flush L2 with it.
  auto take_buffer = [&](const KernelConfig& c) {
    return rt.benchmark_scratch(
        kTritonBenchBufferBytes,
        fmt::format("the autotune of {} for tuning key '{}', candidate {}", kernel, tuning_key, c.name));
  };

  std::vector<std::optional<double>> ms(candidates.size());
  std::vector<std::string> errors(candidates.size());
  std::vector<bool> ok(candidates.size(), false);
  std::exception_ptr first_error;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Selection candidate = sel;  // provenance of this candidate's compiles
    candidate.config = candidates[i];
    SelectionScope scope(rt, candidate);
    try {
      if (gpu) {
        ms[i] = bench(candidates[i], run_once, cu_stream, options,
                      [&] { return take_buffer(candidates[i]); });
      } else {
        run_once(candidates[i]);           // compiles; nothing is launched
        (void)take_buffer(candidates[i]);  // where do_bench would hold its buffer
      }
      ok[i] = true;
    } catch (const CudaError& e) {
      errors[i] = e.what();
      sel.failed.push_back(candidates[i].name + ": " + e.what());
      if (!first_error) first_error = std::current_exception();
    }
  }

  // GPU: the fastest median (the first on a tie). Compile-only: the first that compiled.
  std::optional<size_t> pick;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!ok[i]) continue;
    if (!pick || (gpu && *ms[i] < *ms[*pick])) pick = i;
    if (!gpu) break;
  }
  if (!pick) std::rethrow_exception(first_error);
  sel.config = candidates[*pick];
  sel.best_ms = ms[*pick];
  sel.tune_ms = ms_since(t0);
  AutotuneRecord log;
  log.kernel = kernel;
  log.tuning_key = tuning_key;
  log.config = sel.config.name;
  log.num_candidates = static_cast<int>(candidates.size());
  log.num_failed = static_cast<int>(sel.failed.size());
  log.tune_ms = sel.tune_ms + rt.monitor().memo_charge_ms_since(first_record);
  log.compile_ms = rt.monitor().compile_ms_since(first_record);
  for (size_t i = 0; i < candidates.size(); ++i) log.candidate_ms.emplace_back(candidates[i].name, ms[i]);
  rt.monitor().record_autotune(std::move(log));
  impl_->picks.emplace(identity, sel);
  impl_->write_disk(dir, path, identity, kernel, tuning_key, mode, device, candidates, ms, errors,
                    sel);
  return sel;
}

Selection autotune(JitRuntime& rt, const std::string& kernel, const std::string& tuning_key,
                   const std::vector<KernelConfig>& candidates,
                   const std::function<void(const KernelConfig&)>& run_once, void* stream,
                   const AutotuneOptions& options) {
  return rt.autotuner().tune(kernel, "", tuning_key, candidates, run_once, stream, options);
}

Selection autotune(JitRuntime& rt, const KernelSource& kernel, const std::string& tuning_key,
                   const std::vector<KernelConfig>& candidates,
                   const std::function<void(const KernelConfig&)>& run_once, void* stream,
                   const AutotuneOptions& options) {
  return rt.autotuner().tune(kernel.name, detail::hex64(detail::source_hash(kernel.source)),
                             tuning_key, candidates, run_once, stream, options);
}

}  // namespace coldstart::jit
