// The dimensions of one Mamba2 layer at one tensor-parallel rank, as the NemotronH model writes
// them into its MixerSpec and as the Mamba2 mixer and the Mamba warmers read them back. Shapes
// follow vLLM's MambaMixer2 (vllm/model_executor/layers/mamba/mamba2/mamba_mixer2.py @ 2e0714af):
// intermediate = H * P, conv_dim = intermediate + 2 * G * N, the conv output's columns are
// [x (H*P) | B (G*N) | C (G*N)].
#pragma once

#include <ATen/core/Tensor.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/models/mixer.h"

namespace coldstart {

/// The conv output split into the SSM's inputs (views, row stride conv_dim).
struct Mamba2Views {
  at::Tensor x;  ///< [T, H, P]
  at::Tensor B;  ///< [T, G, N]
  at::Tensor C;  ///< [T, G, N]
};

/// One rank's Mamba2 dimensions.
struct Mamba2Dims {
  int64_t heads = 0;        ///< H: Mamba heads on this rank
  int64_t head_dim = 0;     ///< P
  int64_t groups = 0;       ///< G: B/C groups on this rank
  int64_t state = 0;        ///< N: ssm_state_size
  int64_t conv_kernel = 0;  ///< conv1d width
  int64_t chunk_size = 0;   ///< SSD chunk length (tokens)
  bool conv_bias = true;    ///< use_conv_bias
  at::ScalarType ssm_dtype = at::kFloat;  ///< SSM state cache dtype

  int64_t intermediate() const { return heads * head_dim; }
  int64_t conv_dim() const { return intermediate() + 2 * groups * state; }
  /// Bytes of one request's conv state ([conv_kernel - 1, conv_dim] bf16).
  int64_t conv_state_bytes() const { return (conv_kernel - 1) * conv_dim() * 2; }
  /// Bytes of one request's SSM state ([H, P, N] in ssm_dtype).
  int64_t ssm_state_bytes() const {
    return heads * head_dim * state * static_cast<int64_t>(c10::elementSize(ssm_dtype));
  }

  /// x / B / C views of a conv output [T, conv_dim] (any row stride, innermost contiguous).
  Mamba2Views split(const at::Tensor& conv_out) const {
    const int64_t T = conv_out.size(0), I = intermediate(), GN = groups * state;
    return {conv_out.narrow(1, 0, I).view({T, heads, head_dim}),
            conv_out.narrow(1, I, GN).view({T, groups, state}),
            conv_out.narrow(1, I + GN, GN).view({T, groups, state})};
  }

  /// The dims a model wrote into a "mamba2" MixerSpec: heads = num_heads, groups = num_kv_heads,
  /// P = head_dim, the rest from params (ssm_state_size, conv_kernel, chunk_size, use_conv_bias,
  /// ssm_dtype "float32" | "bfloat16").
  static Mamba2Dims from_spec(const MixerSpec& s) {
    Mamba2Dims d;
    d.heads = s.num_heads;
    d.groups = s.num_kv_heads;
    d.head_dim = s.head_dim;
    d.state = s.params.value("ssm_state_size", int64_t{128});
    d.conv_kernel = s.params.value("conv_kernel", int64_t{4});
    d.chunk_size = s.params.value("chunk_size", int64_t{128});
    d.conv_bias = s.params.value("use_conv_bias", true);
    d.ssm_dtype = s.params.value("ssm_dtype", std::string("float32")) == "bfloat16" ? at::kBFloat16
                                                                                  : at::kFloat;
    return d;
  }

  /// What the kernels cannot run, each under the config key it comes from (the limits of
  /// mamba_ssd's SsdDims::validate, mamba_ssu and mamba_ops).
  std::vector<ScenarioProblem> problems() const {
    std::vector<ScenarioProblem> out;
    auto pow2_16_256 = [](int64_t v) { return v >= 16 && v <= 256 && (v & (v - 1)) == 0; };
    if (conv_kernel < 2 || conv_kernel > 4)
      out.push_back({"model.conv_kernel",
                     fmt::format("the causal conv1d kernels (mamba_ops) take widths 2..4, got {}",
                                 conv_kernel)});
    if (heads < 1 || heads > 65535) {
      out.push_back({"model.mamba_num_heads",
                     fmt::format("{} Mamba heads per rank; the kernels take 1..65535", heads)});
    } else if (groups <= 0 || heads % groups != 0) {
      out.push_back({"model.n_groups", fmt::format("{} groups per rank must be positive and "
                                                   "divide the {} Mamba heads per rank",
                                                   groups, heads)});
    }
    if (!pow2_16_256(head_dim))
      out.push_back({"model.mamba_head_dim",
                     fmt::format("the SSD kernels take a power of two in 16..256, got {}",
                                 head_dim)});
    if (!pow2_16_256(state))
      out.push_back({"model.ssm_state_size",
                     fmt::format("the SSD kernels take a power of two in 16..256, got {}", state)});
    if (!pow2_16_256(chunk_size))
      out.push_back({"model.chunk_size",
                     fmt::format("the SSD kernels take a power of two in 16..256, got {}",
                                 chunk_size)});
    return out;
  }
};

}  // namespace coldstart
