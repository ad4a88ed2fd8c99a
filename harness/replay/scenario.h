// coldstart: scenario files. A scenario names a model, the engine settings a vLLM V1 server would
// start with, the requests to replay after startup, and the warmup strategies to compare.
//
// ---------------------------------------------------------------------------------------------
// File format (YAML). Every key below is the complete set accepted at its level; anything else is
// an error that suggests the closest known key. Values are typed: a quoted "16" is a string and is
// rejected where an integer is expected.
//
//   name: qwen3-8b-turboquant          # optional; default: the file name without extension
//   description: free text             # optional
//   model:                             # required
//     config: ../fixtures/hf-configs/qwen3-8b.json
//                                      # an HF config.json, relative to this file's directory
//     overrides:                       # optional: replaces top-level keys of the config; the key
//       num_hidden_layers: 4           # must exist there and the value must have the same JSON
//                                      # type (an integer where the config has a float is fine;
//                                      # a config value of null accepts anything)
//   engine:                            # required
//     max_num_seqs: 4                  # required, > 0
//     max_num_batched_tokens: 2048     # required, > 0 and >= max_num_seqs
//     max_model_len: 32768             # default: the model's derived limit (see below)
//     block_size: 16                   # default 16; one of 1, 8, 16, 32, 64, 128, 256
//     kv_cache_dtype: auto             # default auto; any non-empty name (auto, bfloat16, fp8,
//                                      # turboquant_4bit_nc, ...): which ones a model supports is
//                                      # for the caller's check_replayable (see Rules below)
//     cudagraph_mode: piecewise        # default full_and_piecewise (vLLM >= 0.11); none |
//                                      # piecewise | full | full_decode_only | full_and_piecewise
//     cudagraph_capture_sizes: [1, 2]  # default: vLLM V1's list (default_capture_sizes); when
//                                      # listed: positive, strictly ascending, each at most
//                                      # max_num_batched_tokens. Ignored (empty) when mode is none.
//     max_cudagraph_capture_size: 2    # optional, >= 1: the default list's top (vLLM's field);
//                                      # beside a list it must equal the list's last size
//     gpu_memory_utilization: 0.9      # default 0.9; in (0, 1]
//     num_gpu_blocks: 4096             # optional; fixes the KV cache size instead of sizing it
//                                      # from memory; blocks * block_size must hold max_model_len;
//                                      # at most 2^31 - 1 (block ids are 32-bit)
//     enable_chunked_prefill: true     # default true (V1); when false, max_num_batched_tokens
//                                      # must be >= max_model_len
//     allow_long_max_model_len: false  # default false; the twin of vLLM's
//                                      # VLLM_ALLOW_LONG_MAX_MODEL_LEN: lets max_model_len exceed
//                                      # the model's derived limit
//     tensor_parallel_size: 1          # default 1; 1..64. The replay runs ONE rank with the
//                                      # per-rank shapes vLLM's sharding gives (heads, Mamba
//                                      # heads / groups, expert intermediate; KV heads replicated
//                                      # when fewer than ranks), no communication; with
//                                      # ranks: all (harness/dist/ranks.engine_keys.h) every rank
//                                      # as a process, meeting in the engines' collectives
//     tuned_config_dir: ../fixtures/tuned-configs   # and the other keys that a family, backend
//                                      # or warmer reads: declared by their owners
//                                      # (engine_keys.h; `coldstart list` prints them)
//   requests:                          # required: 1 to 64 entries (roles: see Requests below)
//     - {prompt_tokens: 512, decode_steps: 32}   # the first request after startup
//     - {prompt_tokens: 64, decode_steps: 8, arrival_step: 3}   # joins at scheduler step 3
//     - {prompt_tokens: 512, decode_steps: 32, steady: true}    # the steady-state request
//     - {steady: true}                 # or: the first request's shape (see Requests)
//                                      # keys: prompt_tokens > 0 and decode_steps >= 0
//                                      # (required but in the steady request; prompt_tokens +
//                                      # decode_steps <= max_model_len), arrival_step >= 0
//                                      # (default 0), steady true | false (default false)
//   strategies:                        # required, at least one; names are [A-Za-z0-9_.+-]
//     none: []                         # a list of warmer names, run in that order, or
//     both: {warmers: [a, b], allow_hot_path_compiles: false}   # the long form (allow defaults
//                                      # to true; false makes a hot-path compile a failure)
//   matrix:                            # optional: axes of variants; each axis key is a scenario
//     engine.cudagraph_mode: [piecewise, full_and_piecewise]   # key as for --set, each value a
//                                      # replacement. Several axes give their cross product.
//   timeout_s: 600                     # optional, > 0: per-strategy watchdog in seconds
//   archs: [sm_90, sm_100]             # optional: the archs the scenario runs on; on any other
//                                      # device every strategy is reported skipped, with the reason
//   expect:                            # optional: checks on the results (CI gates); see below
//     - {strategy: none, variant: "cudagraph_mode=piecewise", outcome: crash,
//        failed_phase: first_decode, error_prefix: "Workspace is locked"}
//     - {strategy: "*", mode: cuda, outcome: ok, max_hot_path_compiles: 0}
//
// Requests. The requests with steady false form the "first wave": they are replayed together by a
// vLLM-V1-style scheduler, each joining at its arrival_step (scheduler steps counted from 0, the
// first step after startup). The first of them in file order (index 0 among the first-wave
// requests) gives TTFT and the first-decode figures. A steady request runs alone after every
// first-wave request has finished and gives the steady-state figures (steady_ttft_ms, ...); there
// is at most one, it takes no arrival_step (it arrives when the engine is idle again), and at
// least one request must be in the first wave. Compatibility: when no entry has arrival_step or
// steady and there are exactly two entries, the second is the steady one (the meaning of the
// one-or-two-request format); with one entry there is no steady request. The steady request may
// leave out prompt_tokens and decode_steps: it then takes the first request's as the matrix and
// --set left them, so an axis over the first request's shape moves the steady request with it
// and first/steady compares the same work. A steady request that states a prompt_tokens pins it;
// when that differs from the first request's, results say so (extra.steady_not_comparable) and
// reports show first/steady as not comparable.
//
// Expectations. `expect:` is a list of rules. Each rule has `strategy` (required: a strategy name
// of the scenario as written, or "*" for every strategy), `variant` (optional: one of the matrix's
// variant names as written in the file, e.g. "cudagraph_mode=piecewise", or "" without a matrix;
// omitted = every variant), `mode` (optional: cuda | compile-only; omitted = both), `arch`
// (optional: sm_90, ...: the rule holds on that arch only), `device` (optional: a --target profile
// name, h100, h200, ...: the rule holds only on runs on that card, a GPU of that exact name or
// compile-only for that profile, which a bare sm_90 / sm_100 / sm_86 run also picks: h200, b200,
// rtx-a4000; for what differs between cards of one arch, such as the tuned tables vLLM keys by
// device name), `rank` (optional: with engine.ranks: all, the checks are about that rank alone:
// its own outcome, failed phase, error and compiles; a result without ranks fails the rule), and
// at least one check:
//     outcome: ok | crash | timeout | error | skipped
//     failed_phase: first_decode       # the phase the run failed in
//     error_prefix: "Workspace is"     # the error text starts with this
//     hot_path_compiles: 1             # exactly this many compiles after startup (>= 0)
//     max_hot_path_compiles: 0         # at most this many (>= 0)
//     hot_path_kernels: [tq_cache_store]   # the distinct kernel names compiled after startup, as
//                                      # a set (order and repeats do not matter; [] = none)
// A rule applies to every result it matches (strategy, variant and mode); a rule whose mode is
// not the run's mode does not apply; a rule that applies but matches no result is itself a
// failure, so a typo cannot pass silently; a skipped result is exempt from every check but an
// explicit `outcome: skipped`. Names are checked against the file as written, so a --set that
// replaces the strategies or pins a matrix axis leaves the rules loadable (a rule naming what no
// longer runs then matches no result). harness/replay/expect.h checks results against the rules.
//
// Model values. ModelConfig reads these keys of the merged HF config: architectures[0] (or
// model_type when absent), model_type, hidden_size, num_hidden_layers, num_attention_heads,
// vocab_size (all required); num_key_value_heads (default: num_attention_heads); head_dim (else
// attention_head_dim, else hidden_size / num_attention_heads, which must divide); intermediate_size
// (0 when absent, e.g. pure-MoE configs); max_position_embeddings (else the smallest of the other
// length keys vLLM knows: n_positions, max_seq_len, seq_length, ...); rms_norm_eps (else
// layer_norm_epsilon, else 1e-6); rope_theta (else 10000); torch_dtype (else dtype, else
// "bfloat16", what vLLM's dtype=auto serves); tie_word_embeddings (default true, as in HF).
// The derived length limit is max_position_embeddings, times rope_scaling.factor when the config
// has one (yarn: original_max_position_embeddings times factor), as vLLM derives it.
// rope_scaling.factor must be a positive number; a limit past 2^31 - 1 tokens is no limit.
// Bare Infinity / -Infinity / NaN tokens (outside strings) are accepted in config.json: they are
// read as +/-1.7976931348623157e308 (the largest double) and null. Any other JSON problem (syntax,
// a number past a double's range such as 1e400, a key repeated at any level, nesting deeper than
// 64 levels) is an error naming the config file's line, column and key. Keys the model families
// read themselves (mamba_num_heads, linear_num_key_heads, ...) must have their type, integers
// within 32 bits: check_replayable reports them as model.<key>.
//
// Limits. The scenario and its config.json must be regular files (a FIFO or a device is refused
// without being read) of at most 16 MiB, as must every *.json below tuned_config_dir. A scenario
// is one YAML document (a second one, after '---', is an error at its line); it, and each --set
// value, may expand to at most 100,000 values with aliases counted at every use (a larger one, an
// alias bomb, is refused at the deepest key leading to it). Every matrix variant is validated on
// its own, so variants x file bytes may be at most 64 MiB and variants x values 1,000,000.
//
// Errors. Every bad input throws InputError. Its text holds one line per problem found (the loader
// collects as many as it can) of the form
//     <file>:<line>:<col>: key '<dotted.key>': <what is wrong>
// where <file> is the scenario, or the HF config for a value read from it. A problem in a value
// given on the command line reads `--set <KEY as typed>: key '<dotted.key>': ...`; one from a
// matrix value points at that value in the file and ends with `[variant '<name>']`.
//
// --set KEY=VALUE. KEY is a dotted path (engine.cudagraph_mode, model.overrides.num_hidden_layers,
// requests.0.prompt_tokens, requests.1.arrival_step; a list index may equal the list's length to
// append) or a bare name that is an engine key or a top-level key (cudagraph_mode, timeout_s).
// VALUE is read as a YAML node (`[1, 2, 4]`, `{prompt_tokens: 8, decode_steps: 1}`; an empty VALUE
// is the empty string). Overrides are applied, in order, to the YAML tree before validation, so
// they are checked exactly as the file is. A model.config path given by --set is relative to the
// working directory. An override whose key equals, contains or lies inside a matrix axis removes
// that axis. `matrix` itself can be replaced as a whole (`--set 'matrix={}'`), not key by key.
//
// Rules (ScenarioRules). The loader knows no model or kernel family. It checks warmer names
// against rules.known_warmers (with a suggestion; an empty list leaves that to the caller), and
// calls rules.check_replayable, when set, on every scenario that can be replayed once the file is
// otherwise valid: the scenario itself when it has no matrix, else each matrix variant (the
// scenario as written, whose axis values every variant replaces, is not checked by it); and again
// in apply_variant. Each ScenarioProblem is reported like any other error, at the line of its key
// (e.g. `engine.kv_cache_dtype`); for a key the scenario does not hold (a defaulted one), at the
// line of the nearest enclosing key it holds (`engine:`); for a key of the HF config
// (`model.<name>`, e.g. model.architectures, model.head_dim), at its model.overrides entry when
// there is one, else at model.config; for a value from --set, as `--set <KEY>: key '...': ...`;
// for a matrix value, at that value with ` [variant '<name>']`. A problem with an empty key is
// reported at the file.
// ---------------------------------------------------------------------------------------------
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace coldstart {

/// The model's shape, read from an HF config.json with the scenario's overrides applied.
/// The longest per-strategy watchdog limit a scenario or --timeout may set, seconds (7 days):
/// larger values overflowed the watchdog's clock arithmetic.
constexpr double kMaxTimeoutS = 7 * 24 * 3600.0;

struct ModelConfig {
  std::string architecture;         ///< architectures[0], e.g. "Qwen3ForCausalLM"
  std::string model_type;           ///< e.g. "qwen3"
  int hidden_size = 0;              ///< width of the residual stream
  int num_hidden_layers = 0;        ///< decoder layers
  int num_attention_heads = 0;      ///< query heads
  int num_key_value_heads = 0;      ///< KV heads (GQA); equals query heads when absent
  int head_dim = 0;                 ///< per-head width (explicit or hidden / heads)
  int intermediate_size = 0;        ///< dense MLP width; 0 when the config has none
  int vocab_size = 0;               ///< embedding rows
  int max_position_embeddings = 0;  ///< the config's context length key
  double rms_norm_eps = 1e-6;       ///< RMSNorm epsilon
  double rope_theta = 10000.0;      ///< RoPE base
  std::string torch_dtype;          ///< weight dtype, e.g. "bfloat16"
  bool tie_word_embeddings = true;  ///< lm_head shares the embedding matrix
  nlohmann::json raw;               ///< the whole merged config, for keys other families read
  std::string config_file;          ///< the config.json path as resolved (not canonicalized)
  std::string config_fnv1a64;       ///< FNV-1a 64 (hex) of the config.json bytes parsed, "" if none
};

/// vLLM V1's CUDA graph modes (CompilationConfig.cudagraph_mode).
enum class CudaGraphMode { kNone, kPiecewise, kFull, kFullDecodeOnly, kFullAndPiecewise };

/// The engine settings a vLLM V1 server starts with.
struct EngineConfig {
  int max_num_seqs = 0;            ///< most requests in one batch
  int max_num_batched_tokens = 0;  ///< most tokens in one scheduler step (the prefill chunk)
  int max_model_len = 0;           ///< longest sequence (prompt + output)
  int block_size = 16;             ///< tokens per KV cache block
  /// "auto", "bfloat16", "fp8", "turboquant_4bit_nc", ...: any non-empty name; check_replayable
  /// decides which are supported
  std::string kv_cache_dtype = "auto";
  CudaGraphMode cudagraph_mode = CudaGraphMode::kFullAndPiecewise;  ///< which graphs are captured
  std::vector<int> cudagraph_capture_sizes;  ///< ascending; vLLM V1's default list unless listed;
                                             ///< empty when cudagraph_mode is kNone
  bool capture_sizes_listed = false;         ///< true when the scenario listed the capture sizes
  double gpu_memory_utilization = 0.9;       ///< fraction of GPU memory the engine may use
  std::optional<long long> num_gpu_blocks;   ///< explicit KV cache size in blocks, else from memory
  bool enable_chunked_prefill = true;        ///< V1 default: long prompts are split into chunks
  bool allow_long_max_model_len = false;     ///< max_model_len may exceed the model's derived limit
  int tensor_parallel_size = 1;  ///< ranks; the replay runs rank 0's shapes (1..64)
  /// The keys their owners declare (engine_keys.h), by name, as the loader validated them
  /// (kInt as a number, the others as strings); a key left out is absent and reads as its
  /// default. Owners read them through their typed accessors.
  nlohmann::json owned = nlohmann::json::object();

  /// A declared kInt key's value (its default when unset). Throws Error when no owner declared
  /// `name` as an integer key.
  int64_t int_key(const std::string& name) const;
  /// A declared kChoice / kText / kDirectory key's value (its default when unset). Throws Error when no
  /// owner declared `name` as such a key.
  const std::string& string_key(const std::string& name) const;
  /// Sets a declared key (tests, and the loader); throws Error for an undeclared name or a value
  /// of the wrong JSON type. No range check: the loader's.
  void set_key(const std::string& name, const nlohmann::json& value);
};

/// One request replayed after startup.
struct RequestSpec {
  int prompt_tokens = 0;  ///< prompt length (distinct tokens: no prefix-cache hits)
  int decode_steps = 0;   ///< decode steps after the first sampled token
  int arrival_step = 0;   ///< first-wave requests: the scheduler step at which it arrives
  bool steady = false;    ///< true: runs alone after the first wave (the steady-state figures)
};

/// One warmup strategy: warmers run in order before graph capture.
struct StrategySpec {
  std::string name;                     ///< as written in the scenario, e.g. "none"
  std::vector<std::string> warmers;     ///< warmer names, in run order (empty for "none")
  bool allow_hot_path_compiles = true;  ///< false: a compile after startup fails the strategy
};

/// One point of the scenario's `matrix`: the overrides that turn the scenario into that variant.
struct Variant {
  std::string name;  ///< "" for the scenario as written, else e.g. "cudagraph_mode=piecewise"
  /// (dotted key, YAML text of the value), applied like --set overrides.
  std::vector<std::pair<std::string, std::string>> overrides;
};

/// One rule of the scenario's `expect:` block (format in the comment at the top of this file).
/// Unset optionals do not constrain; every rule has at least one check set.
struct Expectation {
  std::string strategy;                  ///< a strategy name, or "*" for every strategy
  std::optional<std::string> variant;    ///< a variant name; nullopt = every variant
  std::optional<std::string> mode;       ///< "cuda" | "compile-only"; nullopt = both
  std::optional<std::string> arch;       ///< "sm_90", ...: the run's arch; nullopt = any
  /// A target profile name ("h100", "h200", "b200", "a10", "rtx-a4000"): the rule holds only on
  /// runs on that card, i.e. whose meta.device_name (the GPU's; "compile-only: <name>" for a
  /// profile in compile-only mode) is the profile's device name, ignoring case; nullopt = any.
  std::optional<std::string> device;
  /// engine.ranks: all: the checks are about this rank alone (its outcome, failed phase and error
  /// from the result's ranks.per_rank, the compiles tagged with it); nullopt = the whole result.
  std::optional<int> rank;
  std::optional<std::string> outcome;    ///< "ok" | "crash" | "timeout" | "error" | "skipped"
  std::optional<std::string> failed_phase;           ///< e.g. "first_decode"
  std::optional<std::string> error_prefix;           ///< the error text starts with this
  std::optional<int> hot_path_compiles;              ///< exact number of hot-path compiles
  std::optional<int> max_hot_path_compiles;          ///< at most this many
  std::optional<std::vector<std::string>> hot_path_kernels;  ///< sorted distinct kernel names
  std::string where;  ///< "<file>:<line>" of the rule, or "--set <KEY>" when set there
};

struct Scenario;

/// A problem check_replayable finds. `key` is a dotted scenario key ("engine.kv_cache_dtype",
/// "engine.cudagraph_mode", "model.config", or "model.<HF key>" such as "model.head_dim");
/// `message` says what is wrong, e.g. "turboquant_4bit_nc needs a power-of-two head_dim".
struct ScenarioProblem {
  std::string key;
  std::string message;
};

/// What the loader checks beyond the file format, given by the caller (see "Rules" above).
struct ScenarioRules {
  /// Warmer names a strategy may list; empty = not checked here.
  std::vector<std::string> known_warmers;
  /// Whether a validated scenario can be replayed (model family, KV cache format, graph mode...):
  /// every problem found, or none. Unset = not checked.
  std::function<std::vector<ScenarioProblem>(const Scenario&)> check_replayable;
};

/// A loaded, validated scenario.
struct Scenario {
  std::string name;                      ///< `name:`, or the file name without extension
  std::string description;               ///< `description:`, or ""
  std::string file;                      ///< the scenario path as given to load_scenario
  ModelConfig model;                     ///< the model shape
  EngineConfig engine;                   ///< the engine settings
  std::vector<RequestSpec> requests;     ///< in file order; `steady` marks the steady one
  std::vector<StrategySpec> strategies;  ///< in file order
  /// Without a matrix: one entry, the scenario as written (name ""). With one: every point of the
  /// matrix's cross product, in order. After apply_variant: just the applied variant.
  std::vector<Variant> variants;
  double timeout_s = 600;  ///< per-strategy watchdog, seconds
  std::vector<std::string> archs;  ///< archs the scenario runs on ("sm_90"); empty = any
  nlohmann::json expect;   ///< the `expect:` block as JSON (a list of rules), or null when absent
  std::vector<Expectation> expectations;  ///< the `expect:` rules, in file order

  /// What apply_variant needs to rebuild the scenario: the file text as read, the --set overrides
  /// and the rules given to load_scenario. Not meant for other uses.
  struct Source {
    std::string text;
    std::vector<std::string> set_overrides;
    ScenarioRules rules;
  } source;
};

/// Reads, overrides (`--set KEY=VALUE` strings, applied in order) and validates a scenario file,
/// and checks every variant of its matrix too, so a bad matrix value fails here. `rules` adds the
/// caller's checks (warmer names, check_replayable; see "Rules" above). Throws InputError listing
/// every problem found.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& set_overrides = {},
                       const ScenarioRules& rules = {});

/// The same, with only warmer names to check (ScenarioRules{known_warmers}).
Scenario load_scenario(const std::string& path, const std::vector<std::string>& set_overrides,
                       const std::vector<std::string>& known_warmers);

/// The scenario of one variant (normally one of s.variants): the file as loaded, the --set
/// overrides, then the variant's overrides, validated again with the rules given to load_scenario
/// (check_replayable included). Throws InputError when the result is invalid (only possible for a
/// variant that load_scenario did not produce).
Scenario apply_variant(const Scenario& s, const Variant& v);

/// JSON form of a loaded scenario (scenario_json.cpp): every field the replay reads, so that a
/// replay's parent can hand a child the scenario it validated (harness/cli/child_job.h) and the
/// child parses no YAML or config.json again. Not carried: `expect` / `expectations` (the parent
/// checks them) and `source` (the loader's inputs); from_json leaves them empty. from_json
/// validates nothing beyond the JSON types: it throws nlohmann::json::exception for a missing
/// field or a wrong type, Error for an unknown cudagraph_mode.
void to_json(nlohmann::json& j, const ModelConfig& m);
void from_json(const nlohmann::json& j, ModelConfig& m);
void to_json(nlohmann::json& j, const EngineConfig& e);
void from_json(const nlohmann::json& j, EngineConfig& e);
void to_json(nlohmann::json& j, const RequestSpec& r);
void from_json(const nlohmann::json& j, RequestSpec& r);
void to_json(nlohmann::json& j, const StrategySpec& s);
void from_json(const nlohmann::json& j, StrategySpec& s);
void to_json(nlohmann::json& j, const Variant& v);
void from_json(const nlohmann::json& j, Variant& v);
void to_json(nlohmann::json& j, const Scenario& s);
void from_json(const nlohmann::json& j, Scenario& s);

/// The phases a replay reports, in order: startup (init ... sampler_warmup), then the request
/// steps (prefill, continuation_prefill, first_decode, decode, prefill_others, steady_request).
/// `failed_phase` and `expect:` rules name one of them.
const std::vector<std::string>& replay_phase_names();

/// vLLM V1's (>= 0.11) default CUDA graph capture sizes: with m = max_capture_size when > 0 (the
/// engine key max_cudagraph_capture_size), else min(2 * max_num_seqs, 512), the list 1, 2, 4, 8,
/// 16, ..., 248 (step 8), 256, 272, ... (step 16), cut to sizes <= m and
/// <= max_num_batched_tokens. Ascending; empty when max_num_seqs or max_num_batched_tokens < 1.
std::vector<int> default_capture_sizes(int max_num_seqs, int max_num_batched_tokens,
                                       int max_capture_size = 0);

/// vLLM's lowercase name of a mode, e.g. "full_and_piecewise".
const char* cudagraph_mode_name(CudaGraphMode mode);

/// The mode named `name` (case-insensitive, so vLLM's "FULL_AND_PIECEWISE" works), or nullopt.
std::optional<CudaGraphMode> parse_cudagraph_mode(const std::string& name);

}  // namespace coldstart
