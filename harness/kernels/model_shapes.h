// The served models' per-rank layer geometries, named once. Every kernel family takes its
// real-model shapes from here: its compile cases (the keys a server compiles), its GPU tests
// (checked against the float64 reference at these shapes, plus small shapes of their own) and its
// benchmark (achieved FLOP/s and bandwidth at these shapes). The argument list of each kernel is
// its .cu signature (kernels::make_kernel_source reads names and types from it); these are the
// shapes. Header-only, torch-free; the families convert to their own dims structs.
//
// Values from the HF configs in fixtures/hf-configs (fixtures/SOURCES.md says where from), at the
// tensor-parallel size the shipped scenarios replay.
#pragma once

#include <cstdint>

namespace coldstart::kernels::shapes {

/// A gated-delta-net (linear attention) layer: Hk key heads, Hv value heads, K and V head dims.
struct GdnHeads {
  int num_k_heads;
  int num_v_heads;
  int head_k_dim;
  int head_v_dim;
};

/// Qwen3-Next-80B-A3B at TP1 (qwen3-next-80b-a3b.json: linear_num_key_heads 16,
/// linear_num_value_heads 32, linear_key_head_dim 128, linear_value_head_dim 128).
inline constexpr GdnHeads kQwen3NextGdnTp1{16, 32, 128, 128};

/// Width of a GDN layer's causal-conv row (q, k and v channels): 2 * Hk * K + Hv * V.
constexpr int64_t conv_dim(const GdnHeads& h) {
  return 2 * int64_t{h.num_k_heads} * h.head_k_dim + int64_t{h.num_v_heads} * h.head_v_dim;
}
/// Elements of one sequence's GDN state, [Hv, V, K].
constexpr int64_t state_elems(const GdnHeads& h) {
  return int64_t{h.num_v_heads} * h.head_v_dim * h.head_k_dim;
}

/// A Mamba2 mixer: H heads of P channels, G groups sharing B / C, state size N, SSD chunk size.
struct Mamba2Heads {
  int nheads;
  int head_dim;
  int ngroups;
  int dstate;
  int chunk_size;
};

/// Nemotron-3 Nano 30B-A3B at TP1 (nemotron-3-nano-30b-a3b.json: mamba_num_heads 64,
/// mamba_head_dim 64, n_groups 8, ssm_state_size 128, chunk_size 128).
inline constexpr Mamba2Heads kNemotronNanoMambaTp1{64, 64, 8, 128, 128};
/// Nemotron-3 Super 120B-A12B at TP8 (nemotron-3-super-120b-a12b.json: 128 heads and 8 groups
/// over 8 ranks; head dim 64, state 128, chunk 128).
inline constexpr Mamba2Heads kNemotronSuperMambaTp8{16, 64, 1, 128, 128};

/// A routed-expert MoE layer's GEMM shapes: E experts, intermediate N (per rank), expert input
/// width H (the latent size for a latent MoE), top-k; `nemotron` = sigmoid grouped-top-k routing
/// and the non-gated ReLU^2 experts of NemotronH (else softmax top-k and gated SiLU).
struct MoeExperts {
  int64_t num_experts;
  int64_t intermediate;
  int64_t hidden;
  int top_k;
  bool nemotron;
};

/// Qwen3-Next-80B-A3B (num_experts 512, moe_intermediate_size 512, hidden_size 2048,
/// num_experts_per_tok 10).
inline constexpr MoeExperts kQwen3NextMoe{512, 512, 2048, 10, false};
/// Nemotron-3 Nano (n_routed_experts 128, moe_intermediate_size 1856, hidden_size 2688, top-6).
inline constexpr MoeExperts kNemotronNanoMoe{128, 1856, 2688, 6, true};
/// Nemotron-3 Super at TP8 (512 experts, top-22, moe_intermediate_size 2688 / 8 = 336,
/// moe_latent_size 1024).
inline constexpr MoeExperts kNemotronSuperMoeTp8{512, 336, 1024, 22, true};

/// A dense attention layer's heads: query heads, KV heads, head dim.
struct AttentionHeads {
  int num_q_heads;
  int num_kv_heads;
  int head_dim;
};

/// Qwen3-8B (qwen3-8b.json: num_attention_heads 32, num_key_value_heads 8, head_dim 128).
inline constexpr AttentionHeads kQwen3_8B{32, 8, 128};
/// Qwen3-Next-80B-A3B's full-attention layers at TP1 (num_attention_heads 16,
/// num_key_value_heads 2, head_dim 256).
inline constexpr AttentionHeads kQwen3NextAttentionTp1{16, 2, 256};
/// Nemotron-3 Nano's attention layers at TP1 (num_attention_heads 32, num_key_value_heads 2,
/// head_dim 128).
inline constexpr AttentionHeads kNemotronNanoAttentionTp1{32, 2, 128};

/// One linear layer as an N x K GEMM (out features, in features).
struct LinearShape {
  const char* name;
  int64_t n;
  int64_t k;
};

/// DeepSeek V4 Flash's FP8 linears the DeepGEMM-style GEMM replays (deepseek-v4-flash.json:
/// hidden_size 4096, q_lora_rank 1024, 64 heads of 512, o_lora_rank 1024 x o_groups 8,
/// moe_intermediate_size 2048): the fused q_a / kv projection, q_b, o_b, the shared expert's w13.
inline constexpr LinearShape kDeepSeekV4FlashLinears[] = {{"wqa_wkv", 1536, 4096},
                                                          {"wq_b", 32768, 1024},
                                                          {"wo_b", 4096, 8192},
                                                          {"shared_w13", 4096, 4096}};

}  // namespace coldstart::kernels::shapes
