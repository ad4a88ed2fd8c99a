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
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/jit/api_timer.h"
#include "harness/jit/jit.h"
#include "harness/models/model.h"
#include "harness/replay/kv_cache_plan.h"
#include "harness/replay/result.h"
#include "harness/replay/scenario.h"
#include "harness/runtime/device.h"
#include "harness/runtime/graph.h"
#include "harness/runtime/workspace.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace dist {
class RankGroup;
}  // namespace dist

/// How to run one engine.
struct EngineOptions {
  DeviceInfo device;                 ///< from select_device()
  jit::JitOptions jit;               ///< arch is filled from `device` when empty
  uint64_t seed = 1234;              ///< weights and prompt tokens
  /// GPU runs: split the engine thread's time while requests run (ttft_host_ms, host_ms) with
  /// CUPTI's API callbacks (api_timer.h). Off by default: the callbacks cost host time on every
  /// CUDA call, which a launch-bound step's TTFT shows (up to 2x on the H200).
  bool host_split = false;
  /// A replay of a captured graph whose buffers moved since capture (graph_ledger.h) is a crash.
  /// false: raised before the launch. true (GPU runs): the graph is launched first, the device
  /// synchronized, and the crash text says whether the device faulted. Compile-only mode never
  /// launches.
  bool run_stale_graph_replays = false;
  /// Compile-only runs (`coldstart coverage`): after startup, instead of the scenario's requests,
  /// run one step of each class of the serving envelope (engine_envelope.cpp) with the JIT in
  /// key-only mode, and record in extra["envelope"] which kernel keys they reach, which of those
  /// startup compiled, and the smallest class reaching each one it did not. A GPU run refuses it.
  bool envelope = false;
  /// Called with the result so far and the phase running ("" when none) when each phase starts
  /// and ends (the child streams both to its parent).
  std::function<void(const StrategyResult&, const std::string& current_phase)> on_snapshot;
  /// Progress lines for the terminal (what runs now).
  std::function<void(const std::string&)> on_log;
  /// engine.ranks: all: this process's rank (joined before the engine runs; the caller keeps it
  /// and reports its records). The model issues its collectives through it, the engine meets
  /// the ranks once per graph replay. nullptr: one process.
  dist::RankGroup* ranks = nullptr;
};

/// The device part of a result's `meta` block, carried in each result's extra["meta"] (the parent
/// never touches the GPU, so it learns the device from its children).
nlohmann::json device_meta_json(const DeviceInfo& dev);

class PiecewiseGraphs;
class FullGraph;

/// Runs the replay. Warmers see it through WarmupContext only.
class Engine final : public WarmupContext {
 public:
  Engine(const Scenario& scenario, const StrategySpec& strategy, std::string variant,
         EngineOptions options);
  ~Engine();

  /// Runs startup and the requests. Never throws for a failure inside the replay: a C++
  /// exception (the workspace-lock assertion, a CUDA error, a hot-path compile under
  /// `--jit-monitor error`) becomes outcome "crash" with the error text and the failed phase.
  StrategyResult run();

  // ---- WarmupContext ----
  const Scenario& scenario() const override { return scenario_; }
  DeviceMode mode() const override { return options_.device.mode; }
  c10::Device device() const override;
  const Target& target() const override { return options_.device.target; }
  jit::JitRuntime& jit() override { return *jit_; }
  WorkspaceManager& workspace() override { return *workspace_; }
  std::vector<Mixer*> mixers(const MixerRef& ref) override;
  ForwardBatch make_batch(const std::vector<SeqStep>& seqs) override {
    return make_batch(seqs, /*skip_attention=*/false);
  }
  std::vector<int64_t> dummy_run(const std::vector<SeqStep>& seqs) override {
    return run_step(seqs);
  }
  std::vector<int64_t> expert_token_classes() override;
  void run_local_experts(int64_t M) override;
  void log(const std::string& line) override;
  void skip(const std::string& reason) override;
  void report(const std::string& summary, const nlohmann::json& data) override;

  /// Blocks per request row of the block table (= its stride): cdiv(max_model_len, block_size).
  int max_blocks_per_req() const;

 private:
  void phase(const std::string& name, int request, const std::function<void()>& body);
  /// Runs `body` in a fresh device-memory peak window and records result.phase_memory[key]
  /// (peak_allocated_bytes, allocated_bytes; bytes), also when `body` throws (then rethrows).
  /// With `accumulate` the recorded peak is the larger of this window's and the key's earlier
  /// one (the steps aggregated under one role).
  void with_phase_memory(const std::string& key, bool accumulate,
                         const std::function<void()>& body);
  void snapshot();
  void snapshot_inner();
  void do_init();
  void do_load_weights();
  void do_profile_run();
  void do_kv_cache_alloc();
  /// result.declared_scratch: every layer's ScratchDecl (identical ones counted as `layers`) and
  /// the engine's own (the autotuner's benchmark buffer once something was autotuned; a fixed
  /// workspace). Recorded at the end of the run, whatever its outcome.
  void record_declared_scratch();
  void do_kernel_warmup();
  void do_graph_capture();
  /// Captures the full decode graph of capture size `P` (after the policy's eager warmups of its
  /// static batch); `step` names the capture in the ledger's record of moves.
  void capture_full_decode(int P, const std::string& step);
  /// Lazy capture (engine.cudagraph_capture: lazy): captures the smallest full decode size that
  /// holds `num_tokens` if it is not captured yet, and records it in capture_policy.lazy_captures.
  void capture_lazily_if_needed(int num_tokens);
  void do_workspace_lock();
  /// Runs requests `ids` (scenario indexes; the first is the lead) through the scheduler until
  /// all finish. `wave` 0 = the first requests after startup, 1 = the steady-state request.
  void do_wave(const std::vector<int>& ids, int wave);
  /// EngineOptions::envelope: the envelope's classes, one step each, keys only.
  void do_envelope();
  void record_first_time_costs();
  /// One model step: graph replay when a captured size fits, else eager. Returns sampled token
  /// ids (host; zeros in compile-only mode), one per request.
  std::vector<int64_t> execute(const ForwardBatch& batch);
  /// With every rank replayed: the ranks meet once after a replay of `graph` (its captured
  /// all-reduces); no-op otherwise.
  void meet_ranks_after_graph(const std::string& graph);
  /// Every piece and mixer eagerly; returns the final hidden states [N, H].
  at::Tensor run_eager(const ForwardBatch& batch);
  /// The pieces of `model` and its mixers (mixers_[first_mixer + i] for its plan entry i)
  /// eagerly from state `st`; returns the final hidden states [N, H]. With padded_rows > N the
  /// pieces run on that many rows (st's tensors must have them) and the mixers on the first N,
  /// as under a piecewise graph of that size; the result then has padded_rows rows.
  at::Tensor run_pieces(Model& model, size_t first_mixer, ForwardState st,
                        const ForwardBatch& batch, int padded_rows = 0);
  /// The drafter's token count for a pass of `num_tokens` rows: vLLM's EagleProposer pads it to
  /// the smallest capture size that holds it when the drafter runs piecewise graphs
  /// (pad_for_cudagraph), else leaves it.
  int drafter_rows(int num_tokens) const;
  /// A request step as the engine runs it (execute()); with a drafter, then the drafts of the
  /// next step (propose_drafts). Returns execute()'s sampled ids.
  std::vector<int64_t> run_step(const std::vector<SeqStep>& seqs);
  /// vLLM's EagleProposer.propose for the MTP head (spec_decode.engine_keys.h): one drafter pass
  /// over every row of `batch` (`seqs`'s step, just executed) with the target's final hidden
  /// states, then num_speculative_tokens - 1 passes of one row per request.
  void propose_drafts(const std::vector<SeqStep>& seqs, const ForwardBatch& batch);
  /// vLLM's EagleProposer.dummy_run inside _dummy_run, after a dummy target pass: the drafter's
  /// forward over `batch`'s rows (attention skipped: batch.skip_attention), num_speculative_tokens
  /// times, once while `capturing`. No-op without a drafter.
  void drafter_dummy_run(const ForwardBatch& batch, bool capturing);
  /// hidden[last token of each request]: the rows that are sampled, [B, H].
  at::Tensor last_token_hidden(const at::Tensor& hidden, const ForwardBatch& batch) const;
  /// vLLM's _dummy_run batch of `num_tokens` tokens (min(num_tokens, max_num_seqs) requests).
  std::vector<SeqStep> dummy_seqs(int num_tokens) const;
  /// The FULL capture's dummy batch under speculative decoding: num_tokens / (1 + k) verify
  /// requests of 1 + k tokens in the null block; `drafts`: the metadata knows their drafts
  /// (capture metadata) or not (vLLM's build() in the eager warmups).
  std::vector<SeqStep> dummy_verify_seqs(int num_tokens, bool drafts) const;
  void do_sampler_warmup();
  /// (Re)builds one mixer per layer from the model's plan with mixer_ctx_.
  void build_mixers();
  ForwardBatch make_batch(const std::vector<SeqStep>& seqs, bool skip_attention);
  /// Widest mixer output of any layer (columns of the static mixer-output buffer).
  int64_t max_mixer_output_width() const;
  /// [B] int64 row of each request's last token in the batch (the rows that get logits).
  at::Tensor last_token_rows(const ForwardBatch& batch) const;
  std::vector<int64_t> sample(const at::Tensor& logits, int rows);

  Scenario scenario_;
  StrategySpec strategy_;
  std::string variant_;
  EngineOptions options_;
  StrategyResult result_;
  std::string current_phase_;
  std::string current_warmer_;  // the warmer running in kernel_warmup (skip() names it)

  std::unique_ptr<jit::JitRuntime> jit_;
  std::unique_ptr<WorkspaceManager> workspace_;
  std::unique_ptr<Model> model_;
  /// The MTP head under speculative decoding with the mtp method (Model::make_mtp_drafter), else
  /// null; its mixers follow the target's in mixers_, from index model_->num_layers().
  std::unique_ptr<Model> drafter_;
  /// With a drafter: the final hidden states of the last executed step's rows [N, H] bf16.
  at::Tensor step_hidden_;
  std::vector<std::unique_ptr<Mixer>> mixers_;  ///< one per layer, in layer order
  std::vector<at::Tensor> cache_tensors_;       ///< the shared cache tensors (kv_cache_plan.h)
  /// Every device buffer a captured graph references, with a generation per move
  /// (graph_ledger.h): the workspace slots, the KV cache tensors, the block table and each
  /// graph's static batch.
  GraphLedger ledger_;
  std::vector<GraphLedger::BufferId> cache_ledger_ids_;  ///< per cache tensor
  GraphLedger::BufferId block_table_ledger_id_ = -1;
  /// The device address of `t`'s data for the ledger's report (0 in compile-only mode).
  uint64_t tensor_address(const at::Tensor& t) const;
  /// Checks graph `id` before a replay (graph_ledger.h). Fresh: returns none. Stale: throws
  /// StaleGraphReplayError, unless run_stale_graph_replays on a GPU, where it returns the stale
  /// reference and the caller replays, then calls finish_stale_replay().
  std::optional<StaleReference> check_replay(GraphLedger::GraphId id);
  /// After a stale graph was launched: synchronizes, and throws StaleGraphReplayError with
  /// whether the device faulted.
  [[noreturn]] void finish_stale_replay(const StaleReference& ref);
  /// Persistent buffers layers share (MixerContext::shared_buffers), made when caches are bound.
  std::map<std::string, at::Tensor> shared_buffers_;
  MixerContext mixer_ctx_;                      ///< what mixers and the model were built with
  bool has_state_ = false;                      ///< some layer keeps per-request state
  at::Tensor block_table_;  ///< [max_num_seqs, max_blocks_per_req] int32, persistent
  int64_t num_blocks_ = 0;
  /// vLLM's free block queue: every block but the null block 0 (warmers may scribble there),
  /// taken from the front when a request is admitted, returned to the back when it finishes.
  FreeBlockQueue free_blocks_;
  bool has_cache_ = false;  ///< some layer has a cache (else requests need no blocks)
  GraphPool pool_;
  std::unique_ptr<GpuSpans> sdpa_spans_;   ///< libtorch prefill attention (SDPA) calls
  std::unique_ptr<GpuSpans> model_spans_;  ///< model pieces (eager or graph replays), logits
  std::unique_ptr<GpuSpans> mixer_spans_;  ///< mixers (attention, GDN, Mamba2), run eagerly
  /// Where the engine's thread spends its time (CUDA API calls by kind through CUPTI, the JIT,
  /// the model's host code), GPU runs; nullptr without CUPTI.
  jit::ApiTimer* api_timer_ = nullptr;
  /// What held the engine's thread while the GPU may have idled, ms, cumulative: the JIT's
  /// compiles, loads and autotuning plus CUDA API host time (not waits).
  double host_stall_ms() const;
  /// {part name: ms} of the engine thread's time between two api_timer_ readings.
  static nlohmann::json host_split(const jit::HostTimes& from, const jit::HostTimes& to);
  double sampling_ms_ = 0;
  long long profile_peak_bytes_ = 0;  ///< the profile run's peak allocation (KV cache sizing)
  /// Device memory outside torch's allocator when init began (the CUDA context), bytes.
  long long outside_at_init_bytes_ = 0;
  /// Phases in which the autotuner asked for its benchmark buffer (declared_scratch).
  std::set<std::string> bench_buffer_phases_;
  mutable std::mutex bench_buffer_mu_;  ///< warmers autotune from several threads
  /// The autotune whose benchmark buffer could not be allocated ("" when none).
  std::string bench_buffer_failed_for_;
  /// What held device memory when `e` (an out-of-memory error) was raised: "[coldstart: in phase
  /// P (request R, step S); held then: weights .., KV cache .., workspace .., activations and
  /// other buffers ..]", sizes in torch's spelling.
  std::string memory_holders(const std::exception& e) const;
  /// How the current request step runs: "full@4", "piecewise@8", "eager"; "" before execute()
  /// picked one.
  std::string step_graph_;
  /// Why the current step runs eagerly (eager_reason()), "" when it does not or no reason is known.
  std::string step_eager_reason_;
  /// Why `batch` finds no captured graph: the mode captures none of its kind, or it has more
  /// tokens than the largest capture size of its kind; "" when neither explains it.
  std::string eager_reason(const ForwardBatch& batch) const;
  /// The capture size graph_capture is warming up or capturing ("full decode capture size 4"),
  /// for the ledger's record of what moved a buffer.
  std::string capture_step_;
  double snapshot_ms_ = 0;                 ///< time spent sending result snapshots
  std::map<int, std::unique_ptr<PiecewiseGraphs>> piecewise_;
  std::map<int, std::unique_ptr<FullGraph>> full_;
  std::vector<int> lazy_sizes_;  ///< full decode sizes left to lazy capture, ascending
  nlohmann::json schedule_ = nlohmann::json::array();  ///< per step: the batch (first 512 steps)
  std::chrono::steady_clock::time_point run_start_;
};

}  // namespace coldstart
