#include "harness/models/layers_common.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "harness/common/paths.h"
#include "harness/dist/rank_group.h"
#include "harness/jit/jit.h"
#include "harness/models/mixer.h"
#include "harness/replay/hf_config.h"

namespace coldstart {

void tp_all_reduce(const MixerContext& ctx, const at::Tensor& t, int layer, const char* site) {
  (void)t;  // one device or none: the bytes are not moved (rank_group.h)
  if (ctx.ranks == nullptr || ctx.ranks->world() < 2) return;
  if (ctx.jit != nullptr && !ctx.jit->capturing_graph().empty()) return;
  ctx.ranks->all_reduce({1}, fmt::format("layer {} {}", layer, site));
}

namespace {

using scenario_detail::json_kind;

// The value of `key`, or null when it is absent or null.
const nlohmann::json* config_value(const ConfigView& c, const char* key) {
  auto it = c.raw().find(key);
  return it == c.raw().end() || it->is_null() ? nullptr : &*it;
}

std::string config_name(const ConfigView& c) {
  return c.model.config_file.empty() ? "the HF config" : paths::filename(c.model.config_file);
}

void config_problem(const ConfigView& c, const char* key, const std::string& text) {
  if (c.problems == nullptr) return;
  for (const ScenarioProblem& p : *c.problems)
    if (p.key == fmt::format("model.{}", key) && p.message == text) return;  // read twice
  c.problems->push_back({fmt::format("model.{}", key), text});
}

void wrong_type(const ConfigView& c, const char* key, const char* want, const nlohmann::json& v) {
  std::string got = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (got.size() > 40) got = got.substr(0, 37) + "...";
  config_problem(c, key,
                 fmt::format("expected {} (in {}), got {} ({})", want, config_name(c),
                             json_kind(v), got));
}

}  // namespace

int64_t config_int(const ConfigView& c, const char* key, int64_t fallback, int64_t lo) {
  const nlohmann::json* v = config_value(c, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) {
    wrong_type(c, key, "an integer", *v);
    return fallback;
  }
  // Compared as written (dump), so a value past 64 bits is never printed wrapped.
  const bool in_range =
      v->is_number_unsigned()
          ? v->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
          : v->get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
                v->get<int64_t>() <= std::numeric_limits<int32_t>::max();
  if (!in_range) {
    config_problem(c, key,
                   fmt::format("{} (in {}) is outside the 32-bit range the replay reads it in",
                               v->dump(), config_name(c)));
    return fallback;
  }
  if (v->get<int64_t>() < lo) {
    config_problem(c, key,
                   fmt::format("must be at least {} (in {}), got {}", lo, config_name(c), v->dump()));
    return fallback;
  }
  return v->get<int64_t>();
}

double config_double(const ConfigView& c, const char* key, double fallback) {
  const nlohmann::json* v = config_value(c, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) {
    wrong_type(c, key, "a number", *v);
    return fallback;
  }
  // A NaN (a bare NaN token in config.json) is no scale, rate or epsilon a family could use.
  if (std::isnan(v->get<double>())) {
    config_problem(c, key, fmt::format("NaN (in {}) is not a number the replay can use",
                                       config_name(c)));
    return fallback;
  }
  return v->get<double>();
}

std::string config_string(const ConfigView& c, const char* key, const std::string& fallback) {
  const nlohmann::json* v = config_value(c, key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) {
    wrong_type(c, key, "a string", *v);
    return fallback;
  }
  return v->get<std::string>();
}

bool config_bool(const ConfigView& c, const char* key, bool fallback) {
  const nlohmann::json* v = config_value(c, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    wrong_type(c, key, "true or false", *v);
    return fallback;
  }
  return v->get<bool>();
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor inv = at::rsqrt(xf.pow(2).mean({-1}, /*keepdim=*/true) + eps);
  return (xf * inv).to(x.scalar_type()) * weight;
}

at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor inv = at::rsqrt(xf.pow(2).mean({-1}, /*keepdim=*/true) + eps);
  return (xf * inv * (weight.to(at::kFloat) + 1.0)).to(x.scalar_type());
}

at::Tensor rope_table(int64_t max_positions, int64_t rot, double theta, c10::Device device) {
  const auto fopt = at::TensorOptions().dtype(at::kFloat).device(device);
  if (device.is_meta()) return at::empty({max_positions, rot}, fopt);
  at::Tensor inv_freq = at::pow(theta, -at::arange(0, rot, 2, fopt) / static_cast<double>(rot));
  at::Tensor freqs = at::outer(at::arange(max_positions, fopt), inv_freq);
  return at::cat({freqs.cos(), freqs.sin()}, -1).contiguous();
}

at::Tensor neox_rope(const at::Tensor& x, const at::Tensor& cos_sin) {
  const int64_t rot = cos_sin.size(-1), half = rot / 2, D = x.size(-1);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor cos = cos_sin.narrow(-1, 0, half), sin = cos_sin.narrow(-1, half, half);
  at::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
  std::vector<at::Tensor> parts = {x1 * cos - x2 * sin, x2 * cos + x1 * sin};
  if (rot < D) parts.push_back(xf.narrow(-1, rot, D - rot));
  return at::cat(parts, -1).to(x.scalar_type());
}

WeightMaker::WeightMaker(c10::Device device) : device_(device), meta_(device.is_meta()) {}

at::Tensor WeightMaker::normal(std::vector<int64_t> shape, double std) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kBFloat16).device(device_));
  if (!meta_) t.normal_(0.0, std);
  bytes_ += t.numel() * 2;
  return t;
}

at::Tensor WeightMaker::ones(int64_t n) {
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(at::kBFloat16).device(device_));
  if (!meta_) t.fill_(1.0);
  bytes_ += n * 2;
  return t;
}

at::Tensor WeightMaker::zeros(int64_t n) {
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(at::kBFloat16).device(device_));
  if (!meta_) t.zero_();
  bytes_ += n * 2;
  return t;
}

AttentionShard shard_attention(int64_t q_heads, int64_t kv_heads, int tp,
                               std::vector<ScenarioProblem>& problems) {
  AttentionShard a;
  if (tp <= 0) tp = 1;
  if (q_heads % tp != 0) {
    problems.push_back({"model.num_attention_heads",
                        fmt::format("{} query heads do not split over tensor_parallel_size {}",
                                    q_heads, tp)});
  }
  if (kv_heads >= tp ? kv_heads % tp != 0 : tp % std::max<int64_t>(kv_heads, 1) != 0) {
    problems.push_back({"model.num_key_value_heads",
                        fmt::format("{} KV heads neither split over nor replicate evenly onto "
                                    "tensor_parallel_size {}",
                                    kv_heads, tp)});
  }
  a.q_heads = q_heads / tp;
  a.kv_heads = std::max<int64_t>(1, kv_heads / tp);
  return a;
}

int64_t shard_evenly(int64_t n, int tp, const std::string& key,
                     std::vector<ScenarioProblem>& problems) {
  if (tp <= 0) tp = 1;
  if (n % tp != 0) {
    problems.push_back({key, fmt::format("{} does not split over tensor_parallel_size {}", n, tp)});
    return 0;
  }
  return n / tp;
}

at::Tensor clamped_swiglu(const at::Tensor& gu, double limit) {
  const int64_t I = gu.size(1) / 2;
  if (gu.is_meta()) {
    // Compile-only: the float temporaries the last statement below holds at once (gate, up,
    // silu(gate), the product), so the meta memory count peaks where the GPU does.
    const at::TensorOptions f32 = gu.options().dtype(at::kFloat);
    const at::Tensor g = at::empty({gu.size(0), I}, f32), u = at::empty({gu.size(0), I}, f32);
    const at::Tensor act = at::empty({gu.size(0), I}, f32), prod = at::empty({gu.size(0), I}, f32);
    return at::empty({gu.size(0), I}, gu.options().dtype(at::kBFloat16));
  }
  at::Tensor g = gu.narrow(1, 0, I).to(at::kFloat), u = gu.narrow(1, I, I).to(at::kFloat);
  if (limit > 0) {
    g = g.clamp_max(limit);
    u = u.clamp(-limit, limit);
  }
  return (at::silu(g) * u).to(at::kBFloat16);
}

}  // namespace coldstart
