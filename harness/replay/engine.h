// The replay engine: one server's startup (init, load_weights, profile_run, kv_cache_alloc,
// kernel_warmup, graph_capture, workspace_lock) and its first and second request (prefill,
// continuation_prefill, first_decode, decode), for one scenario variant and one strategy, in the
// current process. The `coldstart replay` command runs each engine in its own child process.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/models/model.h"
#include "harness/replay/result.h"
#include "harness/replay/scenario.h"
#include "harness/runtime/device.h"
#include "harness/runtime/graph.h"
#include "harness/runtime/workspace.h"

namespace coldstart {

/// How to run one engine.
struct EngineOptions {
  DeviceInfo device;                 ///< from select_device()
  jit::JitOptions jit;               ///< arch is filled from `device` when empty
  uint64_t seed = 1234;              ///< weights and prompt tokens
  /// Called with the result so far after every phase (the child streams it to its parent).
  std::function<void(const StrategyResult&)> on_snapshot;
  /// Progress lines for the terminal (what runs now).
  std::function<void(const std::string&)> on_log;
};

/// The device part of a result's `meta` block, carried in each result's extra["meta"] (the parent
/// never touches the GPU, so it learns the device from its children).
nlohmann::json device_meta_json(const DeviceInfo& dev);

/// One sequence's share of a step: which request slot, how many tokens are already cached, how
/// many new tokens, and the sequence's KV-cache blocks.
struct SeqStep {
  int req_slot = 0;
  int context_len = 0;
  int query_len = 0;
  std::vector<int32_t> blocks;
};

class PiecewiseGraphs;
class FullGraph;

/// Runs the replay. All public accessors are for warmers (warmers/*.cpp).
class Engine {
 public:
  Engine(const Scenario& scenario, const StrategySpec& strategy, std::string variant,
         EngineOptions options);
  ~Engine();

  /// Runs startup and the requests. Never throws for a failure inside the replay: a C++
  /// exception (the workspace-lock assertion, a CUDA error, a hot-path compile under
  /// `--jit-monitor error`) becomes outcome "crash" with the error text and the failed phase.
  StrategyResult run();

  // ---- for warmers ----
  const Scenario& scenario() const { return scenario_; }
  DeviceMode mode() const { return options_.device.mode; }
  c10::Device device() const;
  jit::JitRuntime& jit() { return *jit_; }
  WorkspaceManager& workspace() { return *workspace_; }
  AttentionBackend& attention() { return *attention_; }
  Model& model() { return *model_; }
  /// Builds a batch on the engine's own input tensors and block table (so strides and alignment,
  /// and with them the kernels' compile keys, match serving). Token ids are random.
  ForwardBatch make_batch(const std::vector<SeqStep>& seqs, bool skip_attention = false);
  /// Runs one model step for `seqs` the way a request step runs (graphs when a captured size
  /// fits, else eager; attention included; greedy sampling and copy to host). For warmers that
  /// exercise the serving path on synthetic tokens. Returns the sampled token ids.
  std::vector<int64_t> run_step(const std::vector<SeqStep>& seqs) { return execute(make_batch(seqs)); }
  /// Blocks per request row of the block table (= its stride): cdiv(max_model_len, block_size).
  int max_blocks_per_req() const;
  /// Writes a progress line.
  void log(const std::string& line);

 private:
  void phase(const std::string& name, int request, const std::function<void()>& body);
  void snapshot();
  void snapshot_inner();
  void do_init();
  void do_load_weights();
  void do_profile_run();
  void do_kv_cache_alloc();
  void do_kernel_warmup();
  void do_graph_capture();
  void do_workspace_lock();
  void do_request(int index);
  void record_first_time_costs();
  /// One model step: graph replay when a captured size fits, else eager. Returns sampled token
  /// ids (host; zeros in compile-only mode), one per request.
  std::vector<int64_t> execute(const ForwardBatch& batch);
  at::Tensor run_eager(const ForwardBatch& batch, bool last_rows_only);
  /// [B] int64 row of each request's last token in the batch (the rows that get logits).
  at::Tensor last_token_rows(const ForwardBatch& batch) const;
  std::vector<int64_t> sample(const at::Tensor& logits, int rows);

  Scenario scenario_;
  StrategySpec strategy_;
  std::string variant_;
  EngineOptions options_;
  StrategyResult result_;
  std::string current_phase_;

  std::unique_ptr<jit::JitRuntime> jit_;
  std::unique_ptr<WorkspaceManager> workspace_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<AttentionBackend> attention_;
  at::Tensor block_table_;  ///< [max_num_seqs, max_blocks_per_req] int32, persistent
  int64_t num_blocks_ = 0;
  int32_t next_free_block_ = 1;  ///< block 0 is the null block (warmers may scribble there)
  GraphPool pool_;
  std::unique_ptr<GpuSpans> sdpa_spans_;   ///< libtorch prefill attention (SDPA) calls
  std::unique_ptr<GpuSpans> model_spans_;  ///< model pieces run eagerly
  double sampling_ms_ = 0;
  double snapshot_ms_ = 0;                 ///< time spent sending result snapshots                 ///< sampling + copy to host in the current phase
  std::map<int, std::unique_ptr<PiecewiseGraphs>> piecewise_;
  std::map<int, std::unique_ptr<FullGraph>> full_;
  std::chrono::steady_clock::time_point run_start_;
};

}  // namespace coldstart
