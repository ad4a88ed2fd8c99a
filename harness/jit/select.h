// coldstart config selector: how a kernel's launch config is chosen, with the provenance recorded
// in every compile record (DESIGN.md, "config selector").
//
// Three selectors, one result type (Selection):
// - "table":     a vLLM-style tuned table (JSON: batch size -> config), nearest key to M;
//   "default":   the caller's documented default config when no table file exists for the shape;
// - "heuristic": a function of (shape, target) computed by the caller;
// - "autotune":  Triton-style: on the first call of a (kernel, tuning key) every candidate is
//                compiled and, on a GPU, benchmarked; the fastest is kept in memory and on disk.
//
// A SelectionScope attaches a Selection to the compiles its runtime does on this thread while the
// scope lives: each CompileRecord then carries `selector`, `tuning_key`, `config` and
// `num_candidates`. Compiles outside any scope record selector "" (a fixed config).
//
// Torch-free, like jit.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/jit/jit.h"

namespace coldstart::jit {

// ---------------------------------------------------------------- configs and provenance

/// One candidate launch config of a kernel.
/// - `constexprs` are passed to the compile (NVRTC `-D`), so they are part of the compile key:
///   candidates with different constexprs are different binaries.
/// - `num_warps` is the block size the caller launches with (`threads()` = 32 * num_warps).
///   It is not part of the compile key unless the caller passes it as a constexpr too
///   (`all_constexprs()` does: Triton compiles num_warps / num_stages into the binary).
/// - `num_stages` is the software-pipelining depth a kernel may read as a constexpr; 1 = none.
/// - `name` is a readable label, e.g. "BLOCK_M=64,BLOCK_N=32,warps=4,stages=2"
///   (config_name() builds it); it identifies the candidate in records, selections and the
///   autotune cache, so distinct candidates of one autotune must have distinct names.
struct KernelConfig {
  std::string name;
  std::vector<Constexpr> constexprs;
  int num_warps = 4;
  int num_stages = 1;

  /// Threads per block: 32 * num_warps.
  int threads() const { return 32 * num_warps; }
  /// `constexprs` followed by {"NUM_WARPS", num_warps} and {"NUM_STAGES", num_stages}, for a
  /// kernel whose binary depends on them (e.g. `__launch_bounds__(NUM_WARPS * 32)`).
  std::vector<Constexpr> all_constexprs() const;
};

/// "<NAME>=<value>,...,warps=<num_warps>,stages=<num_stages>", constexprs in the given order,
/// e.g. config_name({{"BLOCK_M",64},{"BLOCK_N",32}}, 4, 2) == "BLOCK_M=64,BLOCK_N=32,warps=4,stages=2".
std::string config_name(const std::vector<Constexpr>& constexprs, int num_warps, int num_stages);

/// A KernelConfig whose name is config_name(constexprs, num_warps, num_stages).
KernelConfig make_config(std::vector<Constexpr> constexprs, int num_warps = 4, int num_stages = 1);

/// Which selector chose a config, and from what. Every field is copied into the compile records
/// made under a SelectionScope of this selection (see CompileRecord).
struct Selection {
  KernelConfig config;     ///< the chosen config (for a compile during autotuning: the candidate)
  std::string selector;    ///< "table" | "heuristic" | "autotune" | "default"
  std::string tuning_key;  ///< what the choice depended on: "M=5 -> 4" (table), "M=5" (default),
                           ///< the caller's key (heuristic, autotune)
  std::vector<std::string> candidates;  ///< names of the configs chosen among (table: one per
                                        ///< entry, in file order; autotune: the candidates;
                                        ///< heuristic / default: empty)
  std::string table_file;  ///< "table": the file read; "default": the path looked for and not
                           ///< found; otherwise ""
  std::optional<double> best_ms;  ///< autotune on a GPU: median time of the pick, milliseconds;
                                  ///< nullopt in compile-only mode and for other selectors
  bool cached = false;  ///< autotune: the pick came from memory or the on-disk cache, nothing was
                        ///< compiled or benchmarked by this call
  double tune_ms = 0;   ///< autotune: host wall time this call spent compiling and benchmarking
                        ///< the candidates, milliseconds (0 when cached)
  std::vector<std::string> failed;  ///< autotune: "<candidate name>: <error>" for candidates
                                    ///< that failed to compile or launch (skipped, as Triton
                                    ///< skips configs that run out of resources)
};

/// Attaches `selection` to the compiles `rt` does on the calling thread while this object lives:
/// their CompileRecords get selector, tuning_key, config (= selection.config.name) and
/// num_candidates (= selection.candidates.size()); so does a compile refused under
/// `--jit-monitor error`. Scopes nest (the innermost scope of `rt` wins); a scope of another
/// runtime does not apply. Hits of the in-memory cache record nothing, as before.
/// `selection` is held by reference and must outlive the scope. Cost: one push and one pop on a
/// thread-local stack; the runtime reads it only on a miss.
class SelectionScope {
 public:
  SelectionScope(const JitRuntime& rt, const Selection& selection);
  ~SelectionScope();
  SelectionScope(const SelectionScope&) = delete;
  SelectionScope& operator=(const SelectionScope&) = delete;

 private:
  const JitRuntime* rt_;
  const Selection* selection_;
};

/// The selection of the innermost live SelectionScope of `rt` on this thread, or nullptr.
const Selection* current_selection(const JitRuntime& rt);

// ---------------------------------------------------------------- tuned tables (vLLM-style)

/// One entry of a tuned table: the batch size it was tuned for and its integer values in file
/// order, e.g. M = 16 -> {BLOCK_SIZE_M: 16, BLOCK_SIZE_N: 32, ..., num_warps: 4, num_stages: 3}.
struct TunedEntry {
  int64_t batch = 0;
  std::vector<std::pair<std::string, int64_t>> values;

  /// The values as a KernelConfig: "num_warps" and "num_stages" fill those fields (KernelConfig's
  /// defaults, 4 and 1, when absent); every other value becomes a constexpr, in file order; the
  /// name is config_name(...).
  KernelConfig config() const;
};

/// A tuned config table as vLLM ships them (fused_moe/configs/*.json, mamba/ops/configs/...):
/// a JSON object whose keys are batch sizes ("1", "2", ..., "4096") and whose values are objects
/// of integers. vLLM drops a top-level "triton_version" string before reading the entries
/// (vllm/model_executor/layers/fused_moe/fused_moe.py, get_moe_configs, at vllm-project/vllm
/// 13cb3e44373b); so does load_tuned_table, keeping it here.
struct TunedTable {
  std::string file;            ///< the path it was read from
  std::string triton_version;  ///< the "triton_version" entry, "" when absent
  std::vector<TunedEntry> entries;  ///< in file order (vLLM's dict order)
};

/// Reads a tuned table. Throws InputError naming the file (and the key, where one is at fault)
/// when the file cannot be read, is not JSON (the parser's line and column are in the text), is
/// not an object, has a key that is not a decimal batch size (Python's int() accepts more, e.g.
/// " 1", "+1", "1_0"; such files do not occur in vLLM), has two keys for one batch size ("1" and
/// "01"; vLLM would silently keep the later value), has an entry that is not an object of
/// integers, a "triton_version" that is not a string, or no entry at all; and when a field the
/// kernels read is out of what they can launch (harness bounds, not vLLM's, which passes them to
/// Triton as they are): BLOCK_SIZE_M / _N / _K a power of two in [1, 1024], GROUP_SIZE_M in
/// [1, 1024], num_warps a power of two in [1, 32], num_stages in [1, 16] (vLLM's shipped tables
/// use 4..256, 1..64, 1..8 and 2..5).
TunedTable load_tuned_table(const std::string& path);

/// The entry whose batch size is nearest to `M`: vLLM's
///     config = configs[min(configs.keys(), key=lambda x: abs(x - M))]
/// (vllm/model_executor/layers/fused_moe/fused_moe.py, try_get_optimal_moe_config, identical at
/// vllm-project/vllm 000d1458098e and 13cb3e44373b). On a tie Python's min() returns the first
/// minimal key in dict order, i.e. file order: for the sorted files vLLM ships, the smaller key
/// (M = 3 between "2" and "4" takes "2"; M = 20 between "16" and "24" takes "16"). Below the
/// smallest key the smallest is taken, above the largest the largest. Throws Error when the table
/// has no entry (load_tuned_table never returns one).
const TunedEntry& nearest(const TunedTable& table, int64_t M);

/// "<k1>=<v1>,<k2>=<v2>,...json" in the given order: vLLM's config file naming, e.g.
/// {{"E","512"},{"N","512"},{"device_name","NVIDIA_H200"}} -> "E=512,N=512,device_name=NVIDIA_H200.json"
/// and {{"headdim","64"},{"dstate","128"},{"device_name","NVIDIA_H200"},{"cache_dtype","float32"}}
/// for vLLM's selective_state_update tables.
using StemFields = std::vector<std::pair<std::string, std::string>>;
std::string tuned_file_name(const StemFields& stem_fields);

/// `dir`/tuned_file_name(stem_fields) when that file exists, else nullopt.
std::optional<std::string> find_tuned_file(const std::string& dir, const StemFields& stem_fields);

/// A device name as vLLM puts it in a file name: spaces become '_' ("NVIDIA H100 80GB HBM3" ->
/// "NVIDIA_H100_80GB_HBM3"), and any name with an "H200" component becomes "NVIDIA_H200"
/// ("NVIDIA H200 NVL" -> "NVIDIA_H200"), as get_config_file_name does at vllm-project/vllm
/// 13cb3e44373b (the older 000d1458098e only replaced spaces).
std::string vllm_device_name(const std::string& device_name);

/// Selection "table" from a loaded table: config = nearest(table, M).config(), tuning_key
/// "M=<M> -> <chosen key>", candidates = every entry's config name in file order, table_file =
/// table.file.
Selection select_from_table(const TunedTable& table, int64_t M);

/// Looks for `dir`/tuned_file_name(stem_fields): when it exists, select_from_table(load, M)
/// (a bad file throws InputError, never falls back silently; a file is read once per process and
/// kept, by path, as vLLM caches get_moe_configs with functools.lru_cache); when it does not,
/// selection
/// "default" with `default_config`, tuning_key "M=<M>" and table_file = the path looked for
/// (vLLM logs "Using default MoE config. Performance might be sub-optimal! Config file not found
/// at <path>" in that case).
Selection select_from_table(const std::string& dir, const StemFields& stem_fields, int64_t M,
                            const KernelConfig& default_config);

// ---------------------------------------------------------------- heuristic

/// Selection "heuristic": records that a function of (shape, target) chose `config`; the caller
/// computes it. `tuning_key` names the inputs, e.g. "num_tokens=512,sm=90".
Selection select_by_heuristic(std::string tuning_key, KernelConfig config);

// ---------------------------------------------------------------- autotune (Triton-style)

/// Bytes of the buffer Triton's do_bench allocates to flush L2 (256 MiB of int32; Triton 3.6's
/// CudaDriver.get_empty_cache_for_benchmark).
constexpr int64_t kTritonBenchBufferBytes = int64_t{256} << 20;

/// How candidates are benchmarked on a GPU, after Triton 3.x's do_bench
/// (python/triton/testing.py): one call, synchronize, 5 calls timed together to estimate one
/// call's time `est`, then max(1, int(warmup_ms / est)) warmup calls and max(1, int(rep_ms /
/// est)) timed calls, each between two CUDA events; the candidate's time is the median.
/// `max_reps` bounds both counts (a kernel of a few microseconds would otherwise take tens of
/// thousands of calls). Unlike do_bench, the L2 cache is not flushed between calls, but do_bench's
/// flush buffer (kTritonBenchBufferBytes) is taken through JitOptions::benchmark_scratch while
/// each candidate is benchmarked (after its first call, as do_bench does), so memory accounting
/// sees what Triton allocates.
struct AutotuneOptions {
  double warmup_ms = 25;  ///< Triton's default
  double rep_ms = 100;    ///< Triton's default
  int max_reps = 1000;
};

/// The autotuner of one JitRuntime (JitRuntime::autotuner()): picks remembered in memory, keyed
/// by kernel, tuning key, candidate list, arch, compiler, mode (GPU or compile-only: a pick made
/// without timings never serves a GPU run) and GPU name, and persisted under
/// `<rt.cache_dir()>/autotune/<16 hex digits>.json` (written atomically), so a new runtime on
/// the same persistent cache directory (`--cache-dir`) loads a pick instead of re-tuning.
/// Thread-safe: concurrent autotunes are serialized (run_once must not call autotune).
class Autotuner {
 public:
  explicit Autotuner(JitRuntime& rt);
  ~Autotuner();
  Autotuner(const Autotuner&) = delete;
  Autotuner& operator=(const Autotuner&) = delete;

  /// See autotune(). `source_tag` ("" or a hash of the kernel source) joins the cache key.
  Selection tune(const std::string& kernel, const std::string& source_tag,
                 const std::string& tuning_key, const std::vector<KernelConfig>& candidates,
                 const std::function<void(const KernelConfig&)>& run_once, void* stream,
                 const AutotuneOptions& options);

  /// Number of picks held in memory.
  size_t cached_picks() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Picks the config of `kernel` for `tuning_key` among `candidates`, with Triton's autotuner
/// semantics (python/triton/runtime/autotuner.py, Autotuner.run / check_disk_cache, Triton 3.x at
/// triton-lang/triton 009401737888):
/// - A pick already made for this (kernel, tuning_key, candidates) by this runtime, or stored in
///   its cache directory by an earlier runtime, is returned with cached = true; nothing is
///   compiled or benchmarked (this is also allowed while `stream` is capturing a CUDA graph).
/// - One candidate: it is the pick, without compiling or benchmarking (Triton: "Match
///   single-config autotune behavior: no benchmarking is needed"); it compiles when the caller
///   launches it.
/// - Otherwise, on the first call, `run_once(candidate)` is called for each candidate in order
///   under a SelectionScope (selector "autotune", config = that candidate), so every candidate
///   compile is a CompileRecord with selector "autotune". run_once must launch the kernel once
///   with that config through `rt` (rt.launch with candidate.constexprs, or all_constexprs(),
///   and candidate.threads() threads per block) on `stream`.
///   * GPU (the runtime launches): each candidate is then timed as AutotuneOptions says, with CUDA
///     events on `stream`; the pick is the fastest median (the first on a tie, like Python's
///     min()); best_ms is its median in milliseconds. run_once is called many times: it must be
///     safe to repeat (Triton's reset_to_zero / restore_value are the caller's job here).
///   * Compile-only (the runtime launches nothing): run_once is called once per candidate, which
///     compiles it; nothing is timed, best_ms is nullopt, and the pick is the first candidate in
///     the list that compiled (kernel authors order candidates by preference).
///   A candidate whose run_once throws CudaError (an NVRTC error such as a failed static_assert,
///   or a launch that runs out of resources) is skipped and listed in `failed`, as Triton times
///   such configs as infinity; when every candidate fails, the first error is rethrown. Any other
///   exception (e.g. HotPathCompileError under `--jit-monitor error`) propagates and nothing is
///   remembered.
/// - Benchmarking needs host synchronization, which CUDA forbids while `stream` (a CUstream;
///   nullptr = the legacy default stream) is capturing a graph: Triton's do_bench then fails
///   with "operation not permitted when stream is capturing" and the capture is invalidated
///   (triton-lang/triton#10596). Here, when benchmarking is needed while the engine captures a
///   graph (JitRuntime::set_capturing), autotune throws CaptureUnsupportedError in both modes
///   (the engine's crash, so compile-only replays fail where the GPU would); otherwise, on the
///   GPU, when cuStreamIsCapturing says `stream` is capturing (or, for the legacy stream, that
///   another stream's capture makes it unusable), it throws CudaError. Either is thrown before
///   compiling or launching anything, so the capture stays valid; warm the key up before capture.
/// Throws Error when `candidates` is empty or two candidates share a name.
Selection autotune(JitRuntime& rt, const std::string& kernel, const std::string& tuning_key,
                   const std::vector<KernelConfig>& candidates,
                   const std::function<void(const KernelConfig&)>& run_once,
                   void* stream = nullptr, const AutotuneOptions& options = {});

/// autotune() keyed by kernel.name and a hash of kernel.source, so an edited kernel source is
/// re-tuned even with a persistent cache directory (Triton's disk key includes fn.cache_key).
Selection autotune(JitRuntime& rt, const KernelSource& kernel, const std::string& tuning_key,
                   const std::vector<KernelConfig>& candidates,
                   const std::function<void(const KernelConfig&)>& run_once,
                   void* stream = nullptr, const AutotuneOptions& options = {});

}  // namespace coldstart::jit
