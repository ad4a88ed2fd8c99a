// coldstart: the JSON form of a loaded scenario (scenario.h, "JSON form"). A replay's parent
// validates each scenario once and hands every child the scenario of its variant in this form
// (harness/cli/child_job.h); the child reads it back without parsing YAML or config.json again.
//
// Every field is written and every field is required on reading: the two ends are one binary, so
// a missing field is a bug to report, not a default to guess. Numbers keep their exact values
// (doubles are written with nlohmann's round-trip precision).
#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/replay/scenario.h"

namespace coldstart {

using nlohmann::json;

namespace {

template <typename T>
void read(const json& j, const char* key, T& out) {
  j.at(key).get_to(out);
}

}  // namespace

void to_json(json& j, const ModelConfig& m) {
  j = json{{"architecture", m.architecture},
           {"model_type", m.model_type},
           {"hidden_size", m.hidden_size},
           {"num_hidden_layers", m.num_hidden_layers},
           {"num_attention_heads", m.num_attention_heads},
           {"num_key_value_heads", m.num_key_value_heads},
           {"head_dim", m.head_dim},
           {"intermediate_size", m.intermediate_size},
           {"vocab_size", m.vocab_size},
           {"max_position_embeddings", m.max_position_embeddings},
           {"rms_norm_eps", m.rms_norm_eps},
           {"rope_theta", m.rope_theta},
           {"torch_dtype", m.torch_dtype},
           {"tie_word_embeddings", m.tie_word_embeddings},
           {"raw", m.raw},
           {"config_file", m.config_file},
           {"config_fnv1a64", m.config_fnv1a64}};
}

void from_json(const json& j, ModelConfig& m) {
  read(j, "architecture", m.architecture);
  read(j, "model_type", m.model_type);
  read(j, "hidden_size", m.hidden_size);
  read(j, "num_hidden_layers", m.num_hidden_layers);
  read(j, "num_attention_heads", m.num_attention_heads);
  read(j, "num_key_value_heads", m.num_key_value_heads);
  read(j, "head_dim", m.head_dim);
  read(j, "intermediate_size", m.intermediate_size);
  read(j, "vocab_size", m.vocab_size);
  read(j, "max_position_embeddings", m.max_position_embeddings);
  read(j, "rms_norm_eps", m.rms_norm_eps);
  read(j, "rope_theta", m.rope_theta);
  read(j, "torch_dtype", m.torch_dtype);
  read(j, "tie_word_embeddings", m.tie_word_embeddings);
  m.raw = j.at("raw");
  read(j, "config_file", m.config_file);
  read(j, "config_fnv1a64", m.config_fnv1a64);
}

void to_json(json& j, const EngineConfig& e) {
  j = json{{"max_num_seqs", e.max_num_seqs},
           {"max_num_batched_tokens", e.max_num_batched_tokens},
           {"max_model_len", e.max_model_len},
           {"block_size", e.block_size},
           {"kv_cache_dtype", e.kv_cache_dtype},
           {"cudagraph_mode", cudagraph_mode_name(e.cudagraph_mode)},
           {"cudagraph_capture_sizes", e.cudagraph_capture_sizes},
           {"capture_sizes_listed", e.capture_sizes_listed},
           {"gpu_memory_utilization", e.gpu_memory_utilization},
           {"num_gpu_blocks", e.num_gpu_blocks ? json(*e.num_gpu_blocks) : json(nullptr)},
           {"enable_chunked_prefill", e.enable_chunked_prefill},
           {"allow_long_max_model_len", e.allow_long_max_model_len},
           {"tensor_parallel_size", e.tensor_parallel_size},
           {"owned", e.owned}};
}

void from_json(const json& j, EngineConfig& e) {
  read(j, "max_num_seqs", e.max_num_seqs);
  read(j, "max_num_batched_tokens", e.max_num_batched_tokens);
  read(j, "max_model_len", e.max_model_len);
  read(j, "block_size", e.block_size);
  read(j, "kv_cache_dtype", e.kv_cache_dtype);
  const std::string mode = j.at("cudagraph_mode").get<std::string>();
  const auto parsed = parse_cudagraph_mode(mode);
  if (!parsed) throw Error(fmt::format("scenario JSON: unknown cudagraph_mode '{}'", mode));
  e.cudagraph_mode = *parsed;
  read(j, "cudagraph_capture_sizes", e.cudagraph_capture_sizes);
  read(j, "capture_sizes_listed", e.capture_sizes_listed);
  read(j, "gpu_memory_utilization", e.gpu_memory_utilization);
  const json& blocks = j.at("num_gpu_blocks");
  e.num_gpu_blocks = blocks.is_null() ? std::nullopt : std::optional<long long>(blocks.get<long long>());
  read(j, "enable_chunked_prefill", e.enable_chunked_prefill);
  read(j, "allow_long_max_model_len", e.allow_long_max_model_len);
  read(j, "tensor_parallel_size", e.tensor_parallel_size);
  e.owned = j.at("owned");
  if (!e.owned.is_object()) throw Error("scenario JSON: engine.owned is not an object");
}

void to_json(json& j, const RequestSpec& r) {
  j = json{{"prompt_tokens", r.prompt_tokens},
           {"decode_steps", r.decode_steps},
           {"arrival_step", r.arrival_step},
           {"steady", r.steady}};
}

void from_json(const json& j, RequestSpec& r) {
  read(j, "prompt_tokens", r.prompt_tokens);
  read(j, "decode_steps", r.decode_steps);
  read(j, "arrival_step", r.arrival_step);
  read(j, "steady", r.steady);
}

void to_json(json& j, const StrategySpec& s) {
  j = json{{"name", s.name},
           {"warmers", s.warmers},
           {"allow_hot_path_compiles", s.allow_hot_path_compiles}};
}

void from_json(const json& j, StrategySpec& s) {
  read(j, "name", s.name);
  read(j, "warmers", s.warmers);
  read(j, "allow_hot_path_compiles", s.allow_hot_path_compiles);
}

void to_json(json& j, const Variant& v) {
  j = json{{"name", v.name}, {"overrides", v.overrides}};
}

void from_json(const json& j, Variant& v) {
  read(j, "name", v.name);
  read(j, "overrides", v.overrides);
}

void to_json(json& j, const Scenario& s) {
  j = json{{"name", s.name},
           {"description", s.description},
           {"file", s.file},
           {"model", s.model},
           {"engine", s.engine},
           {"requests", s.requests},
           {"strategies", s.strategies},
           {"variants", s.variants},
           {"timeout_s", s.timeout_s},
           {"archs", s.archs}};
}

void from_json(const json& j, Scenario& s) {
  read(j, "name", s.name);
  read(j, "description", s.description);
  read(j, "file", s.file);
  read(j, "model", s.model);
  read(j, "engine", s.engine);
  read(j, "requests", s.requests);
  read(j, "strategies", s.strategies);
  read(j, "variants", s.variants);
  read(j, "timeout_s", s.timeout_s);
  read(j, "archs", s.archs);
  s.expect = nullptr;
  s.expectations.clear();
  s.source = {};
}

}  // namespace coldstart
