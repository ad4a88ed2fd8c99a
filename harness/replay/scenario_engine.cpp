// coldstart: reading a scenario's `engine:` section (the keys vLLM's engine arguments name, and
// the keys their owners declare, engine_keys.h), and vLLM's defaults it falls back to. Part of
// the loader (scenario.cpp), which calls load_engine during its walk.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/paths.h"
#include "harness/replay/engine_keys.h"
#include "harness/replay/hf_config.h"
#include "harness/replay/scenario.h"
#include "harness/replay/scenario_internal.h"

namespace coldstart {
namespace scenario_detail {
namespace {

// vLLM's CacheConfig.block_size choices.
const std::vector<int> kBlockSizes = {1, 8, 16, 32, 64, 128, 256};
constexpr long long kMaxGpuBlocks = std::numeric_limits<int32_t>::max();

// What is wrong with a text key's value, nullopt when nothing is. A list key (item_pattern
// set: items joined by ", ") is checked item by item and names its bad items and their
// places; any value or item longer than kMaxTextItem characters is refused before a regex sees
// it (libstdc++'s std::regex matches recursively: a 30 KB class list overflowed the stack).
constexpr size_t kMaxTextItem = 4096;
std::optional<std::string> text_key_problem(const EngineKeySpec& k, const std::string& v) {
  if (k.item_pattern.empty()) {
    if (v.size() > kMaxTextItem)
      return fmt::format("the value is {} characters long, more than {}", v.size(), kMaxTextItem);
    if (!std::regex_match(v, std::regex(k.pattern)))
      return fmt::format("'{}' is not of the form {}", v, k.pattern_doc);
    return std::nullopt;
  }
  const std::vector<std::string> items = split_list_items(v);  // none: an empty list reads as unset
  const std::regex item(k.item_pattern);
  std::vector<size_t> bad;  // the items not of the form, in order
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string which = items.size() == 1 ? std::string("the value")
                                                : fmt::format("item {} of {}", i + 1, items.size());
    if (items[i].size() > kMaxTextItem)
      return fmt::format("{} is {} characters long, more than {}", which, items[i].size(),
                         kMaxTextItem);
    if (!std::regex_match(items[i], item)) bad.push_back(i);
  }
  if (bad.empty()) return std::nullopt;
  if (items.size() == 1) return fmt::format("'{}' is not of the form {}", v, k.pattern_doc);
  if (bad.size() == 1)
    return fmt::format("item {} of {}, '{}', is not of the form {}", bad[0] + 1, items.size(),
                       items[bad[0]], k.pattern_doc);
  // Several: every bad item named at once (up to 8), so one fix-and-rerun clears them all.
  constexpr size_t kNamed = 8;
  std::vector<std::string> named;
  for (size_t j = 0; j < bad.size() && j < kNamed; ++j)
    named.push_back(fmt::format("{} ('{}')", bad[j] + 1, items[bad[j]]));
  return fmt::format("items {} of {}{} are not of the form {}", fmt::join(named, ", "),
                     items.size(),
                     bad.size() > kNamed ? fmt::format(", and {} more", bad.size() - kNamed) : "",
                     k.pattern_doc);
}

// Reads the engine keys their owners declare (engine_keys.h) into e.owned; a key left out stays
// absent (it reads as its default).
void load_owned_engine_keys(Checker& c, const MapView& ev, EngineConfig& e) {
  for (const EngineKeySpec& k : declared_engine_keys()) {
    const Entry* x = ev.get(k.name);
    if (x == nullptr) continue;
    switch (k.type) {
      case EngineKeyType::kInt:
        if (auto v = read_int_in(c, x->path, x->value, k.min)) {
          if (*v > k.max)
            c.fail(x->path, x->value.Mark(), fmt::format("{} is more than {} {}", *v, k.max, k.unit));
          else
            e.owned[k.name] = static_cast<int64_t>(*v);
        }
        break;
      case EngineKeyType::kChoice:
        if (auto v = read_string(c, x->path, x->value)) {
          if (std::find(k.choices.begin(), k.choices.end(), *v) == k.choices.end())
            c.fail(x->path, x->value.Mark(), fmt::format("'{}' is not one of {}", *v, names(k.choices)));
          else
            e.owned[k.name] = *v;
        }
        break;
      case EngineKeyType::kText:
        if (auto v = read_string(c, x->path, x->value)) {
          if (const std::optional<std::string> bad = text_key_problem(k, *v))
            c.fail(x->path, x->value.Mark(), *bad);
          else
            e.owned[k.name] = *v;
        }
        break;
      case EngineKeyType::kDirectory:
        if (auto v = read_string(c, x->path, x->value)) {
          std::string dir = *v;
          if (!dir.empty() && dir[0] != '/' && !c.from_command_line(x->path))
            dir = paths::join(paths::parent(c.file()), dir);
          dir = paths::normalize(dir);
          std::string unreadable;
          if (!paths::is_directory(dir)) {
            c.fail(x->path, x->value.Mark(), fmt::format("'{}' is not a directory", dir));
          } else if (!(unreadable = paths::find_unreadable_input(dir, ".json", paths::kMaxTableBytes))
                          .empty()) {
            // The files are read whole when a kernel looks one up: a FIFO would hang that read.
            c.fail(x->path, x->value.Mark(), fmt::format("a tuned table cannot be read: {}", unreadable));
          } else {
            e.owned[k.name] = dir;
          }
        }
        break;
    }
  }
}

constexpr long long kMaxBatchedTokens = 1LL << 26;
constexpr long long kMaxNumSeqs = 65535;

}  // namespace

// Reads `engine:`. `model` is null when the model could not be read (cross checks are skipped).
void load_engine(Checker& c, const MapView& ev, const ModelConfig* model, const LengthLimit& limit,
                 EngineConfig& e) {
  auto int_key = [&](const char* key, bool required, long long lo,
                     long long hi = std::numeric_limits<int>::max()) -> std::optional<int> {
    const Entry* x = required ? ev.require(key) : ev.get(key);
    return x ? read_int_in(c, x->path, x->value, lo, hi) : std::nullopt;
  };
  // Harness bounds, not vLLM's (it has none): the replay builds per-token host tables
  // (positions, slot mapping, the profile run's dummy batch) of max_num_batched_tokens entries and
  // per-sequence tables of max_num_seqs rows; 2^31 - 1 tokens ended the child in std::bad_alloc.
  // 2^26 tokens covers a 1M-token prefill without chunking, and 65535 sequences is also the most
  // rows the Mamba2 state-update grid takes (mamba_ssu.cpp).
  auto mns = int_key("max_num_seqs", true, 1, kMaxNumSeqs);
  auto mnbt = int_key("max_num_batched_tokens", true, 1, kMaxBatchedTokens);
  auto mml = int_key("max_model_len", false, 1);
  if (mns) e.max_num_seqs = *mns;
  if (mnbt) e.max_num_batched_tokens = *mnbt;

  if (const Entry* x = ev.get("enable_chunked_prefill"))
    if (auto v = read_bool(c, x->path, x->value)) e.enable_chunked_prefill = *v;
  if (const Entry* x = ev.get("allow_long_max_model_len"))
    if (auto v = read_bool(c, x->path, x->value)) e.allow_long_max_model_len = *v;

  // max_model_len: default and ceiling from the model.
  const Entry* mml_entry = ev.get("max_model_len");
  if (mml) {
    e.max_model_len = *mml;
    if (model && *mml > limit.tokens && !e.allow_long_max_model_len)
      c.fail(mml_entry->path, mml_entry->value.Mark(),
             fmt::format("{} is longer than the model allows ({}, from {}); vLLM refuses this "
                         "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: set "
                         "engine.allow_long_max_model_len: true for that",
                         *mml, limit.tokens, limit.why));
  } else if (!mml_entry && model) {
    e.max_model_len =
        static_cast<int>(std::min<long long>(limit.tokens, std::numeric_limits<int>::max()));
  }

  if (mns && mnbt && *mnbt < *mns) {
    const Entry* x = ev.get("max_num_batched_tokens");
    c.fail(x->path, x->value.Mark(),
           fmt::format("{} is smaller than max_num_seqs ({}); vLLM requires "
                       "max_num_batched_tokens >= max_num_seqs",
                       *mnbt, *mns));
  }
  if (mnbt && e.max_model_len > 0 && !e.enable_chunked_prefill && *mnbt < e.max_model_len) {
    const Entry* x = ev.get("max_num_batched_tokens");
    c.fail(x->path, x->value.Mark(),
           fmt::format("{} is smaller than max_model_len ({}) with chunked prefill disabled, so "
                       "a long prompt could never be scheduled",
                       *mnbt, e.max_model_len));
  }

  if (const Entry* x = ev.get("block_size")) {
    if (auto v = read_int(c, x->path, x->value)) {
      if (std::find(kBlockSizes.begin(), kBlockSizes.end(), *v) == kBlockSizes.end())
        c.fail(x->path, x->value.Mark(),
               fmt::format("{} is not a block size vLLM accepts (1, 8, 16, 32, 64, 128, 256)", *v));
      else
        e.block_size = static_cast<int>(*v);
    }
  }

  // Any name: which KV cache formats a model supports is the caller's check_replayable.
  if (const Entry* x = ev.get("kv_cache_dtype")) {
    if (auto v = read_string(c, x->path, x->value)) {
      if (v->empty())
        c.fail(x->path, x->value.Mark(), "must not be empty (auto, bfloat16, fp8, ...)");
      else
        e.kv_cache_dtype = *v;
    }
  }

  if (const Entry* x = ev.get("cudagraph_mode")) {
    if (auto v = read_string(c, x->path, x->value)) {
      if (auto mode = parse_cudagraph_mode(*v)) {
        e.cudagraph_mode = *mode;
      } else {
        std::vector<std::string> modes = {"none", "piecewise", "full", "full_decode_only",
                                          "full_and_piecewise"};
        c.fail(x->path, x->value.Mark(),
               fmt::format("unknown cudagraph_mode '{}'{}; known: {}", *v,
                           suggest(lower(*v), modes), names(modes)));
      }
    }
  }

  load_owned_engine_keys(c, ev, e);
  if (const Entry* x = ev.get("tensor_parallel_size")) {
    if (auto v = read_int_in(c, x->path, x->value, 1)) {
      if (*v > 64)
        c.fail(x->path, x->value.Mark(), fmt::format("{} ranks is more than 64", *v));
      else
        e.tensor_parallel_size = static_cast<int>(*v);
    }
  }

  if (const Entry* x = ev.get("gpu_memory_utilization")) {
    if (auto v = read_number(c, x->path, x->value)) {
      if (!(*v > 0.0 && *v <= 1.0))
        c.fail(x->path, x->value.Mark(), fmt::format("must be in (0, 1], got {}", *v));
      else
        e.gpu_memory_utilization = *v;
    }
  }

  if (const Entry* x = ev.get("num_gpu_blocks")) {
    if (auto v = read_int(c, x->path, x->value)) {
      if (*v < 1 || *v > kMaxGpuBlocks) {
        // Block ids are 32-bit in the block tables; the bound also keeps blocks x block_size
        // (at most 2^31 x 256) from overflowing.
        c.fail(x->path, x->value.Mark(),
               fmt::format("must be in [1, {}] (block ids are 32-bit), got {}", kMaxGpuBlocks, *v));
      } else {
        // Whether they hold one max_model_len request depends on the block size the model ends
        // up with (raised for recurrent-state layers): check_replayable (models/registry.cpp)
        // and the engine's KV cache plan check it.
        e.num_gpu_blocks = *v;
      }
    }
  }

  if (const Entry* x = ev.get("cudagraph_capture_sizes")) {
    e.capture_sizes_listed = true;
    if (!x->value.IsSequence()) {
      c.fail(x->path, x->value.Mark(),
             fmt::format("expected a list of batch sizes, got {}", kind_name(kind_of(x->value))));
    } else if (x->value.size() == 0 && e.cudagraph_mode != CudaGraphMode::kNone) {
      c.fail(x->path, x->value.Mark(), "empty list; to capture no graphs set cudagraph_mode: none");
    } else {
      for (size_t i = 0; i < x->value.size(); ++i) {
        const YAML::Node& n = x->value[i];
        Path p = child(x->path, std::to_string(i));
        auto v = read_int(c, p, n);
        if (!v) continue;
        if (*v < 1) {
          c.fail(p, n.Mark(), fmt::format("capture sizes must be positive, got {}", *v));
        } else if (!e.cudagraph_capture_sizes.empty() && *v <= e.cudagraph_capture_sizes.back()) {
          c.fail(p, n.Mark(),
                 fmt::format("capture sizes must be strictly ascending: {} follows {}", *v,
                             e.cudagraph_capture_sizes.back()));
        } else if (mnbt && *v > *mnbt) {
          c.fail(p, n.Mark(),
                 fmt::format("capture size {} is above max_num_batched_tokens ({})", *v, *mnbt));
        } else {
          e.cudagraph_capture_sizes.push_back(static_cast<int>(*v));
        }
      }
    }
  }
  // vLLM's compilation_config.max_cudagraph_capture_size (VllmConfig._set_cudagraph_sizes,
  // vllm/config/vllm.py at 000fc94b): without a list it is the top of the default list (cut to
  // max_num_batched_tokens; a value between two default sizes ends the list at the smaller one, as
  // vLLM truncates it); beside a list it must equal the list's largest size, else vLLM raises a
  // ValueError at startup. A step with more tokens than the largest size runs eagerly.
  const Entry* max_size = ev.get("max_cudagraph_capture_size");
  std::optional<int> max_capture;
  if (max_size) max_capture = read_int_in(c, max_size->path, max_size->value, 1, 1 << 20);
  if (e.capture_sizes_listed) {
    if (max_capture && !e.cudagraph_capture_sizes.empty() &&
        *max_capture != e.cudagraph_capture_sizes.back())
      c.fail(max_size->path, max_size->value.Mark(),
             fmt::format("{} differs from the largest listed capture size ({}); vLLM refuses to "
                         "start unless they agree: leave one of the two out, or set both (with "
                         "--set, give max_cudagraph_capture_size the list's last size)",
                         *max_capture, e.cudagraph_capture_sizes.back()));
  } else if (mns && mnbt) {
    e.cudagraph_capture_sizes = default_capture_sizes(*mns, *mnbt, max_capture.value_or(0));
  }
  if (e.cudagraph_mode == CudaGraphMode::kNone) e.cudagraph_capture_sizes.clear();
}

}  // namespace scenario_detail

std::vector<int> default_capture_sizes(int max_num_seqs, int max_num_batched_tokens,
                                      int max_capture_size) {
  std::vector<int> sizes;
  if (max_num_seqs < 1 || max_num_batched_tokens < 1) return sizes;
  const long long top = max_capture_size > 0 ? max_capture_size
                                             : std::min<long long>(2LL * max_num_seqs, 512LL);
  const long long cap = std::min<long long>(top, max_num_batched_tokens);
  for (int v : {1, 2, 4})
    if (v <= cap) sizes.push_back(v);
  for (int v = 8; v < 256 && v <= cap; v += 8) sizes.push_back(v);
  for (int v = 256; v <= cap; v += 16) sizes.push_back(v);
  return sizes;
}

const char* cudagraph_mode_name(CudaGraphMode mode) {
  switch (mode) {
    case CudaGraphMode::kNone:
      return "none";
    case CudaGraphMode::kPiecewise:
      return "piecewise";
    case CudaGraphMode::kFull:
      return "full";
    case CudaGraphMode::kFullDecodeOnly:
      return "full_decode_only";
    case CudaGraphMode::kFullAndPiecewise:
      return "full_and_piecewise";
  }
  return "?";
}

std::optional<CudaGraphMode> parse_cudagraph_mode(const std::string& name) {
  const std::string n = scenario_detail::lower(name);
  for (auto m : {CudaGraphMode::kNone, CudaGraphMode::kPiecewise, CudaGraphMode::kFull,
                 CudaGraphMode::kFullDecodeOnly, CudaGraphMode::kFullAndPiecewise}) {
    if (n == cudagraph_mode_name(m)) return m;
  }
  return std::nullopt;
}

}  // namespace coldstart
