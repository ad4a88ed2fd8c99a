// coldstart JIT runtime: compile keys with Triton-style argument specialization, an NVRTC
// compiler, an in-memory and an on-disk kernel cache, the JIT monitor, and the launcher.
//
// This header is torch-free on purpose (it is included widely); harness/runtime/tensor_args.h
// turns at::Tensor arguments into KernelArg.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/step_context.h"

namespace coldstart::jit {

/// Element types a kernel argument can carry. kF8E4M3 is OCP FP8 e4m3 ("finite, no inf",
/// torch.float8_e4m3fn), carried in any byte tensor (libtorch 1.13 has no FP8 dtype).
enum class DType : uint8_t { kF32, kF16, kBF16, kU8, kI8, kI16, kI32, kI64, kF8E4M3, kU64 };

/// Short Triton-like name: "fp32", "fp16", "bf16", "u8", "i8", "i16", "i32", "i64", "fp8e4nv"
/// (Triton's name for float8_e4m3fn), "u64".
const char* dtype_name(DType dtype);

/// Size of one element in bytes.
size_t dtype_bytes(DType dtype);

/// A TMA tensor map (CUtensorMap, 128 bytes, passed by value as a `const __grid_constant__`
/// kernel parameter), described in plain values and encoded with cuTensorMapEncodeTiled at
/// launch (compile-only mode never encodes; it still validates). Dimension 0 is the innermost
/// (contiguous) one.
struct TensorMapSpec {
  DType dtype = DType::kU8;  ///< element type (1, 2 or 4 bytes)
  uint64_t address = 0;      ///< global address of element (0, ..., 0); 16-byte aligned
  uint32_t rank = 2;         ///< 1..5
  uint64_t dims[5] = {};     ///< elements per dimension (each >= 1)
  uint64_t strides[4] = {};  ///< byte stride of dimensions 1..rank-1 (multiples of 16)
  uint32_t box[5] = {};      ///< box (tile) elements per dimension, each 1..256
  uint32_t swizzle = 0;      ///< 0 (none), 32, 64 or 128 bytes; box[0] * element bytes must not
                             ///< exceed it when non-zero
  /// Throws InputError naming `what` and the field when the map breaks a TMA rule above.
  void validate(const std::string& what) const;
};

/// One launch argument as the launcher sees it (no torch types).
/// - kPointer: `address` is the device address passed to the kernel (in compile-only mode, the
///   byte offset inside its allocation, which keeps the alignment a real allocation would have);
///   `dtype` is the element type.
/// - kI32 / kI64: an integer, `value` holds it.
/// - kF32: a float, `fvalue` holds it. Floats are never specialized.
/// - kU64: an unsigned 64-bit integer, `address` holds it; specialized like integers.
/// - kTensorMap: a TMA descriptor, `tensor_map` describes it; signature "tmap", never
///   specialized (what the kernel assumes of the box and swizzle is in its constexprs).
struct KernelArg {
  enum class Kind : uint8_t { kPointer, kI32, kI64, kF32, kU64, kTensorMap };
  Kind kind = Kind::kI32;
  DType dtype = DType::kI32;
  uint64_t address = 0;
  int64_t value = 0;
  float fvalue = 0.f;
  std::shared_ptr<const TensorMapSpec> tensor_map;

  static KernelArg pointer(uint64_t address, DType dtype);
  static KernelArg i32(int32_t v);
  static KernelArg i64(int64_t v);
  static KernelArg u64(uint64_t v);
  static KernelArg f32(float v);
  /// Validates `spec` (TensorMapSpec::validate, naming `what`).
  static KernelArg tmap(const TensorMapSpec& spec, const std::string& what = "tensor map");
};

/// Triton's specialization of one argument: "1" for an integer equal to 1, "16" for an integer or
/// pointer divisible by 16, "" otherwise (and always "" for floats). Mirrors Triton 3.x
/// `specialize_impl` (ints: ==1 / %16; pointers: %16 alignment).
std::string specialization(const KernelArg& arg);

/// A compile-time constant of a kernel (a `tl.constexpr` in Triton terms). Passed to NVRTC as
/// `-D<name>=<value>`; part of the compile key.
struct Constexpr {
  std::string name;
  int64_t value;
};

/// What a kernel's `extern "C"` signature declares of one launch argument, as far as a KernelArg
/// can be checked against it (kernels::make_kernel_source reads it from the .cu text, so the
/// .cu signature is the one list of a kernel's arguments: names, kinds and element sizes).
struct ParamType {
  /// The KernelArg kind the declaration takes; kUnchecked for types the reader cannot map
  /// (template-dependent, `bool`, structs): any argument is accepted there.
  enum class Kind : uint8_t { kUnchecked, kPointer, kI32, kI64, kU64, kF32, kTensorMap };
  /// What a pointee's type says of its elements: floating point, integer, or either (a raw
  /// 16-bit word type holds bf16 as well as i16).
  enum class Elem : uint8_t { kAny, kFloat, kInt };
  Kind kind = Kind::kUnchecked;
  uint8_t elem_bytes = 0;  ///< kPointer: bytes per pointee element; 0 = not checked (void*, ...)
  Elem elem = Elem::kAny;  ///< kPointer: the pointee's class
  std::string text;        ///< the declared type as written, qualifiers dropped ("cs_u16*")
};

/// A runtime-compiled kernel: its CUDA C++ source and the `extern "C" __global__` entry name.
/// `arg_names` name the launch arguments in order (the kernel families read them from the
/// entry's signature: kernels::make_kernel_source); for an integer or pointer argument named N
/// that is specialized, the compiled source sees `-DCS_SPEC_<N>=1` (equal to one) or
/// `-DCS_SPEC_<N>=16` (divisible by 16), so a kernel can assume what its compile key promises.
/// `do_not_specialize` lists arguments left out of specialization (Triton's parameter of the
/// same name).
struct KernelSource {
  std::string name;    ///< kernel name as reported ("tq_decode_stage1")
  std::string entry;   ///< extern "C" symbol in `source`
  const char* source;  ///< CUDA C++ text (embedded into the binary at build time)
  std::vector<std::string> arg_names;
  std::vector<std::string> do_not_specialize;
  /// The archs the kernel exists for: compute capability min_sm..max_sm (max_sm 0 = no upper
  /// bound). Default sm_80 and later (bf16 arithmetic).
  int min_sm = 80;
  int max_sm = 0;
  /// Uses features only the architecture-specific targets have (wgmma, TMA multicast, tcgen05):
  /// compiled for sm_90a / sm_100a instead of sm_90 / sm_100.
  bool arch_specific = false;
  /// The declared type of each argument, parallel to arg_names; empty = not checked (a source
  /// written by hand in a test). make_compile_key checks every launch's arguments against it.
  std::vector<ParamType> arg_types;
};

/// Raised when a kernel is asked for on an arch it does not declare (KernelSource::min_sm /
/// max_sm / arch_specific); the text names the kernel, what it declares and the target.
class UnsupportedArchError : public InputError {
 public:
  using InputError::InputError;
};

/// Compute capability of an arch name: "sm_90" / "sm_90a" -> 90; 0 when not of that form.
int arch_sm(const std::string& arch);
/// The arch a kernel compiles for on `target_arch` ("sm_90" -> "sm_90a" for arch-specific
/// kernels). Throws UnsupportedArchError when the kernel does not exist for it.
std::string kernel_arch(const KernelSource& kernel, const std::string& target_arch);
/// The archs among `candidates` (e.g. nvrtc_supported_archs()) the kernel is declared for, in the
/// spelling it compiles with (arch-specific ones with their "a").
std::vector<std::string> declared_archs(const KernelSource& kernel,
                                        const std::vector<std::string>& candidates);
/// "sm_80+", "sm_90a, sm_100a", ...: what the kernel declares, for messages.
std::string declared_archs_text(const KernelSource& kernel);

/// Everything that makes a new binary. Same key = cache hit.
struct CompileKey {
  std::string kernel;                 ///< KernelSource::name
  uint64_t source_hash = 0;           ///< FNV-1a 64 of the source text
  std::vector<Constexpr> constexprs;  ///< in the order given by the caller
  std::string signature;              ///< per argument "<type>[:<spec>]", comma separated,
                                      ///< e.g. "*bf16:16,*u8:16,i32:1,i32,fp32"
  std::string arch;                   ///< "sm_90"
  std::string compiler;               ///< "nvrtc-13.0"

  /// Canonical text, e.g. "tq_decode_stage1[HEAD_DIM=128,...](*bf16:16,...)@sm_90/nvrtc-13.0#<src>".
  std::string str() const;
  /// 16 hex digits of a 64-bit hash of str(); names the on-disk cache entry.
  std::string digest() const;
  bool operator==(const CompileKey& o) const { return str() == o.str(); }
};

/// Builds the compile key for a launch of `kernel` with these constexprs and arguments.
/// Throws Error if `args.size() != kernel.arg_names.size()`, or (check_launch_args) when an
/// argument does not fit its declared type.
CompileKey make_compile_key(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                            const std::vector<KernelArg>& args, const std::string& arch,
                            const std::string& compiler);

/// Throws Error "kernel <name>: argument <n> '<arg>' is declared <type> but the launch passes
/// <kind>" when an argument's kind (pointer, i32, i64, u64, fp32, tensor map) differs from what
/// `kernel.arg_types` declares, or a pointer's element size or class (float / integer) does not
/// fit its pointee type; <n> counts from 1, as the signature reader's errors do. Nothing is
/// checked where arg_types is empty or says kUnchecked.
void check_launch_args(const KernelSource& kernel, const std::vector<KernelArg>& args);

/// What the JIT monitor does with a compile after startup finished.
enum class MonitorMode { kRecord, kWarn, kError };

/// One compile (or disk-cache load) the monitor saw.
struct CompileRecord {
  std::string kernel;
  std::string key;        ///< CompileKey::str()
  double compile_ms = 0;  ///< host wall time of NVRTC + module load (or of the disk load)
  std::string phase;      ///< phase current when it happened
  bool hot_path = false;  ///< after JitMonitor::activate()
  std::string source;     ///< "nvrtc" (compiled), "disk" (loaded from the on-disk cache),
                          ///< "refused" (a hot-path compile stopped by MonitorMode::kError) or
                          ///< "key" (reached in key-only mode, JitRuntime::set_key_only: not
                          ///< compiled)
  // Provenance of the launch config (select.h): filled from the innermost SelectionScope of the
  // runtime on the compiling thread; left empty / 0 for a compile outside any scope.
  std::string selector;    ///< "table" | "heuristic" | "autotune" | "default"; "" = fixed config
  std::string tuning_key;  ///< Selection::tuning_key, e.g. "M=5 -> 4"
  std::string config;      ///< KernelConfig::name of the config compiled
  int num_candidates = 0;  ///< Selection::candidates.size() (autotune: candidates compiled)
  bool reused = false;     ///< compile-only: compile_ms and cubin of this key's first compile in
                           ///< this run (JitOptions::compile_memo_dir), not compiled again
  StepContext step;        ///< the scheduler step running when it happened (JitMonitor::set_step)
  /// The JitMonitor::ParallelCompiles scope it happened in: 0 outside any (compiled on the
  /// caller's thread, one after another), else the scope's id and its number of host threads.
  int parallel_scope = 0;
  int parallel_threads = 1;
};

/// One autotuning the monitor saw (select.h Autotuner::select when it compiled and, on a GPU,
/// benchmarked the candidates; picks served from memory or the on-disk cache are not listed).
struct AutotuneRecord {
  std::string kernel;
  std::string tuning_key;
  std::string phase;           ///< phase current when it happened
  bool hot_path = false;       ///< after JitMonitor::activate()
  std::string config;          ///< the pick (KernelConfig::name)
  int num_candidates = 0;
  int num_failed = 0;          ///< candidates skipped because they failed to compile or launch
  double tune_ms = 0;          ///< host wall time of the whole autotuning, milliseconds (a
                               ///< compile the compile memo served is charged its compile_ms)
  double compile_ms = 0;       ///< of which compiling the candidates (their CompileRecords)
  /// Per candidate (same order), its median kernel time on the GPU in milliseconds; nullopt in
  /// compile-only mode and for a candidate that failed.
  std::vector<std::pair<std::string, std::optional<double>>> candidate_ms;
  StepContext step;  ///< the scheduler step running when it happened (JitMonitor::set_step)
};

/// A kernel first needed while a CUDA graph is being captured: its module load
/// (cuModuleLoadData) is an API call the driver refuses in global-mode stream capture
/// (cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"), as
/// Triton's load_binary hits it when an engine's capture reaches a kernel no warmup compiled
/// (vLLM PRs #36587 and #39483: "RuntimeError: Triton Error [CUDA]: operation not permitted when
/// stream is capturing"). Raised before compiling, in both modes, so compile-only replays fail
/// where the GPU would. The text names the kernel, its compile key and the graph.
class CaptureUnsupportedError : public Error {
 public:
  using Error::Error;
};

/// A compile after startup, raised under MonitorMode::kError (`--jit-monitor error`). The text
/// names the kernel, its compile key and the phase.
class HotPathCompileError : public Error {
 public:
  using Error::Error;
};

/// Records every compile with its key, duration and phase. Compiles after `activate()` (the end
/// of startup) are hot-path compiles. Mirrors vLLM's JIT monitor for Triton kernels.
class JitMonitor {
 public:
  explicit JitMonitor(MonitorMode mode = MonitorMode::kRecord);
  void set_phase(std::string phase);
  const std::string& phase() const;
  /// The scheduler step running from now on (a default StepContext: none); every compile, load
  /// and autotune recorded carries it.
  void set_step(const StepContext& step);
  /// The step set last (request -1 when none runs).
  StepContext step() const;
  /// Startup is over: from now on every compile is a hot-path compile.
  void activate();
  bool active() const;
  /// Called by the runtime for each compile. Under kError and when active, throws
  /// HotPathCompileError *before* the compile happens (so the error costs no compile).
  void before_compile(const CompileKey& key);
  /// The same, and a refused compile's record carries `provenance`'s selector, tuning_key,
  /// config and num_candidates (the other fields of `provenance` are ignored).
  void before_compile(const CompileKey& key, const CompileRecord& provenance);
  void record(CompileRecord rec);
  /// Optional observer, called after each record (the replay streams compiles to its parent).
  void set_observer(std::function<void(const CompileRecord&)> fn);
  /// Optional hook, called with each key as its NVRTC compile is about to start (before the
  /// kError check), from the compiling thread (a multi-rank replay publishes what it compiles).
  void set_before_compile_hook(std::function<void(const CompileKey&)> fn);
  std::vector<CompileRecord> records() const;
  /// Sum of compile_ms over records [first, end): the compile time of what happened since
  /// num_records() was `first`; with `reused_only`, of the compiles the compile memo served.
  double compile_ms_since(size_t first, bool reused_only = false) const;
  /// Compile-only mode: what the compiles the compile memo served since num_records() was
  /// `first` would have cost this run's wall clock had they been compiled here, milliseconds.
  /// Compiles outside a ParallelCompiles scope ran one after another: their compile_ms add up.
  /// Those of one scope of N threads are laid out on N threads, longest first, each on the
  /// thread that is free first (a deterministic order: the threads' record order varies); the
  /// scope costs its longest thread. (A
  /// scope that also compiled for real overlapped those compiles with the served ones; that
  /// overlap is not modelled, so the charge can only be too high.)
  double memo_charge_ms_since(size_t first) const;
  /// Host time the JIT has held the launching thread so far, milliseconds: every record's
  /// compile_ms (NVRTC compile and module load, or a kernel-cache load) plus every autotuning's
  /// benchmarking (tune_ms - compile_ms). GPU-event spans subtract what passed inside them, as
  /// the GPU waited for the host then (GpuSpans::set_stall_clock).
  double host_stall_ms() const;

  /// While alive, compiles (from any thread) are recorded as one batch of work run by
  /// `threads` host threads pulling from a queue (a warmer's compile pool), so
  /// memo_charge_ms_since charges them as that many threads would take. Not nestable.
  class ParallelCompiles {
   public:
    ParallelCompiles(JitMonitor& monitor, int threads);
    ~ParallelCompiles();
    ParallelCompiles(const ParallelCompiles&) = delete;
    ParallelCompiles& operator=(const ParallelCompiles&) = delete;

   private:
    JitMonitor& monitor_;
  };
  size_t num_records() const;
  /// A problem the runtime worked around (a damaged kernel-cache entry recompiled, a cache
  /// directory that cannot be written); the same text is kept once.
  void warn(const std::string& text);
  std::vector<std::string> warnings() const;
  /// Called by the autotuner after each autotuning it ran; fills phase and hot_path.
  void record_autotune(AutotuneRecord rec);
  std::vector<AutotuneRecord> autotunes() const;
  /// Optional observer, called after each autotuning is recorded, outside the monitor's lock
  /// (a multi-rank replay counts the autotunes run before each collective).
  void set_autotune_observer(std::function<void(const AutotuneRecord&)> fn);
  MonitorMode mode() const { return mode_; }

 private:
  MonitorMode mode_;
  std::string phase_ = "init";
  StepContext step_;
  bool active_ = false;
  std::vector<CompileRecord> records_;
  std::vector<AutotuneRecord> autotunes_;
  std::vector<std::string> warnings_;
  std::function<void(const CompileRecord&)> observer_;
  std::function<void(const CompileKey&)> before_compile_hook_;
  std::function<void(const AutotuneRecord&)> autotune_observer_;
  int parallel_scope_ = 0;    ///< the open ParallelCompiles scope's id, 0 when none is open
  int parallel_threads_ = 1;  ///< its threads
  int scopes_opened_ = 0;
  double stall_ms_ = 0;  ///< host_stall_ms()
  mutable std::mutex mu_;
};

/// Launch geometry. `shared_bytes` is dynamic shared memory. A `cluster` other than 1x1x1
/// launches thread-block clusters (SM90+) through cuLaunchKernelEx; each grid dimension must be
/// a multiple of the cluster's.
struct LaunchDims {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  unsigned cluster[3] = {1, 1, 1};
};

/// Options of the JIT runtime.
struct JitOptions {
  std::string arch;       ///< "sm_90"; empty = the current GPU's (error when there is none)
  std::string cache_dir;  ///< on-disk cache; empty = a fresh temporary directory per runtime,
                          ///< removed at destruction, so a previous run can never hide a
                          ///< missing warmup (`--cache-dir` makes it persistent)
  bool launch = true;     ///< false in compile-only mode: compile, never load or launch
  /// Compile-only mode only (ignored when `launch`): a directory shared by the processes of one
  /// `coldstart replay` run. A key another strategy of the run already compiled is not compiled
  /// again: its cubin and its measured compile_ms are taken from here and the record says
  /// `reused` (NVRTC's output is a function of the key). The kernel cache state each strategy
  /// starts from (`cache_dir`) is unaffected: the compile is still reported as a compile.
  std::string compile_memo_dir;
  MonitorMode monitor = MonitorMode::kRecord;
  /// Several processes sharing one `cache_dir`: a miss takes an advisory lock on the entry
  /// (flock on `<digest>.cubin.lock`, released by the kernel when its holder dies) before it
  /// compiles, and a process that had to wait loads the entry the holder wrote instead of
  /// compiling the key again. A holder that keeps the lock longer than this many seconds (stuck)
  /// is not waited for: the key is compiled anyway, with a JIT warning.
  double disk_lock_timeout_s = 60;
  /// Allocates `bytes` of device scratch and returns a handle that frees it when destroyed; the
  /// autotuner holds Triton's benchmark buffer through it while it benchmarks (or, in compile-only
  /// mode, would benchmark) one candidate, so the engine's memory accounting sees it. `what`
  /// names the autotune ("the autotune of <kernel> for tuning key '<key>', candidate <name>").
  /// May throw (out of memory). Empty: the autotuner allocates nothing.
  std::function<std::shared_ptr<void>(int64_t bytes, const std::string& what)> benchmark_scratch;
};

struct CompiledKernel;  // opaque: cubin bytes, CUmodule, CUfunction
class Autotuner;       // select.h

/// The JIT runtime of one process. Thread-safe for lookups and compiles.
class JitRuntime {
 public:
  explicit JitRuntime(JitOptions options);
  ~JitRuntime();
  JitRuntime(const JitRuntime&) = delete;
  JitRuntime& operator=(const JitRuntime&) = delete;

  /// Returns the compiled kernel for this launch's key, compiling it (NVRTC -> cubin for
  /// `arch()`, then cuModuleLoadData when launching is enabled) on a miss, and recording the
  /// compile with the monitor. Throws CudaError on an NVRTC/driver failure (the NVRTC log is in
  /// the text) and HotPathCompileError under `--jit-monitor error`.
  const CompiledKernel& ensure(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                               const std::vector<KernelArg>& args);

  /// ensure() then cuLaunchKernel on `stream` (a CUstream; nullptr = legacy default stream), or
  /// cuLaunchKernelEx for a cluster launch; tensor-map arguments are encoded first
  /// (cuTensorMapEncodeTiled). In compile-only mode (`launch == false`) only ensure() and the
  /// geometry checks run. Throws InputError for a grid that is not a multiple of the cluster and
  /// CudaError when the driver lacks cuLaunchKernelEx / cuTensorMapEncodeTiled (older than 12.0).
  void launch(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
              const std::vector<KernelArg>& args, const LaunchDims& dims, void* stream);

  const std::string& arch() const;
  /// "nvrtc-<major>.<minor>"
  const std::string& compiler() const;
  JitMonitor& monitor();
  /// Number of distinct compiled keys held in memory.
  size_t cached_kernels() const;
  /// The on-disk cache directory in use: JitOptions::cache_dir, or the fresh temporary directory
  /// made when that was empty (removed, with its contents, when the runtime is destroyed).
  const std::string& cache_dir() const;
  /// JitOptions::launch: true when kernels are loaded and launched (GPU), false in compile-only
  /// mode.
  bool launches() const;
  /// Key-only mode, for compile-only runtimes (throws Error when turned on in one that
  /// launches): while on, a key this runtime does not hold is not
  /// compiled; ensure() records it once with the monitor (CompileRecord::source "key", or
  /// "disk" when the on-disk cache holds it, which a real run would load; compile_ms 0, phase
  /// and step as usual) and returns a placeholder without a cubin, so a
  /// forward pass lists every kernel key it reaches at the cost of the keys alone. Autotunes
  /// still run (each candidate's key recorded; the pick is compile-only mode's, the first
  /// candidate, which a candidate that would fail to compile could change). A key recorded
  /// while on is compiled as usual by its first ensure() after the mode is turned off. Turn it
  /// on and off between forward passes (the engine thread), not while ensure() runs elsewhere.
  void set_key_only(bool on);
  bool key_only() const;
  /// The compile-key texts (CompileKey::str()) ensure() saw while key-only mode was on, held
  /// or not, each once, sorted.
  std::vector<std::string> reached_keys() const;
  /// How many keys reached_keys() would list, without copying them.
  size_t reached_key_count() const;
  void clear_reached_keys();
  /// With key-only mode off (throws Error while it is on): compiles, through ensure() as any
  /// launch would (on-disk cache, compile memo, monitor record with compile_ms), each key
  /// recorded as "key" (reached, not held, not on disk) since the last call, in the order first
  /// reached; returns how many. `coldstart coverage` uses it to measure what a cold process
  /// would spend compiling the keys startup left cold. Errors of a compile propagate.
  size_t compile_key_only_misses();
  /// Marks a CUDA graph capture in progress (`graph` names it, "" ends it): until it ends, a
  /// kernel not yet loaded in this runtime throws CaptureUnsupportedError instead of compiling
  /// or loading. Thread-safe.
  void set_capturing(const std::string& graph);
  /// The graph being captured (set_capturing), "" when none. Thread-safe.
  std::string capturing_graph() const;
  /// The autotuner of this runtime (select.h), made on first use; picks live as long as the
  /// runtime and persist under cache_dir()/autotune/.
  Autotuner& autotuner();
  /// JitOptions::benchmark_scratch(bytes, what), or nullptr when no allocator was given.
  std::shared_ptr<void> benchmark_scratch(int64_t bytes, const std::string& what) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// NVRTC's version as "major.minor".
std::string nvrtc_version();

/// The archs this NVRTC can compile for, as "sm_XX" (nvrtcGetSupportedArchs).
std::vector<std::string> nvrtc_supported_archs();

/// Compiles `kernel` with `constexprs` and `args`' specialization for `arch` and returns the
/// cubin bytes; used by the multi-arch compile test and by JitRuntime. Throws CudaError with the
/// NVRTC log on failure.
std::vector<char> compile_to_cubin(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                                   const std::vector<KernelArg>& args, const std::string& arch);

}  // namespace coldstart::jit
