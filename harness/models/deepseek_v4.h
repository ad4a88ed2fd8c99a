// DeepSeek V4 (DeepseekV4ForCausalLM): the dimensions the model reads from its config and the
// DeepGEMM call sites they give, shared by the model (deepseek_v4.cpp), its attention mixer
// (deepseek_v4_attention.cpp) and the DeepGEMM warmers (warmers/deepgemm_warmup.cpp), which
// warm what the model will call, as the reference warmer scans the model's layers. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness/replay/scenario.h"

namespace coldstart::deepseek_v4 {

/// One layer's attention kind, from compress_ratios: 0 = sliding window only, 4 = C4 (sparse
/// indexer over 4x-compressed rows + window), 128 = C128 (all 128x-compressed rows + window).
struct LayerKind {
  int compress_ratio = 0;
  bool hash_routed = false;  ///< layer < num_hash_layers: experts from a token-id table
  bool has_indexer() const { return compress_ratio == 4; }
};

/// The config as the replay uses it, and what the replay cannot do with it.
struct Dims {
  int64_t hidden = 0, heads = 0, head_dim = 0, rope_dim = 0;
  int64_t q_lora = 0, o_groups = 0, o_lora = 0;
  int64_t index_heads = 0, index_dim = 0, index_topk = 0, window = 0;
  int64_t hc_mult = 0, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6, eps = 1e-6;
  int64_t experts = 0, top_k = 0, moe_inter = 0, shared_experts = 0;
  double routed_scaling = 1.0, swiglu_limit = 0.0;
  std::string expert_dtype;  ///< the checkpoint's ("fp4"); replayed as FP8 either way
  std::vector<LayerKind> layers;
  std::vector<ScenarioProblem> problems;

  int64_t mix_hc() const { return (2 + hc_mult) * hc_mult; }  ///< HC GEMM N (24)
  int64_t hc_width() const { return hc_mult * hidden; }       ///< HC GEMM K (16384)
  int64_t q_width() const { return heads * head_dim; }        ///< wq_b output (32768)
  int64_t kv_width() const { return head_dim; }               ///< the shared latent KV (512)
  int64_t o_group_in() const { return q_width() / o_groups; } ///< wo_a K per group (4096)
};

/// Paged KV bytes per token of every attention layer: the latent KV row kept as bf16
/// (2 * head_dim) plus one FP8 indexer-key row (index_dim + a float32 scale, the SM90 layout).
int64_t kv_bytes_per_token(const Dims& d);

/// The block size the replay needs: DeepGEMM's SM90 paged MQA-logits kernel reads the indexer
/// cache in blocks of 64 tokens (static assert in its kernel).
constexpr int kIndexerBlockKv = 64;

/// Whether the indexer's paged logits kernel takes `q` query rows per request (next_n) in one
/// launch; otherwise a decode / verify batch of q rows a request is flattened to one row per query
/// (deepseek_v4_attention.cpp, decode path). vLLM decides this with _supports_native_decode
/// (vllm/v1/attention/backends/mla/indexer.py @ 0023368d) and native_next_n_supported
/// (vllm/utils/deep_gemm.py); coldstart's port of DeepGEMM's SM90 kernel takes next_n 1 and 2.
/// Newer DeepGEMM adds 4 on SM90 (a 2-CTA multicast kernel) and any next_n on SM100, which the
/// port does not have: the replay flattens every q > 2, as vLLM does with a DeepGEMM before them.
constexpr bool paged_logits_native_next_n(int q) { return q == 1 || q == 2; }

/// Reads the config (ModelConfig::raw) and checks the engine settings: tensor_parallel_size 1,
/// block_size 64, kv_cache_dtype auto. `e` may be null (then no engine checks).
Dims dims(const ModelConfig& c, const EngineConfig* e);

/// Where the model calls DeepGEMM, by shape: what deepgemm warmers sweep.
struct DeepGemmSites {
  std::vector<std::pair<int64_t, int64_t>> fp8_linears;  ///< distinct (N, K) of fp8_gemm_nt
  int64_t einsum_groups = 0, einsum_n = 0, einsum_k = 0; ///< wo_a: fp8_einsum bhr,hdr->bhd
  int64_t hc_n = 0, hc_k = 0;                            ///< tf32_hc_prenorm_gemm
  int64_t experts = 0, top_k = 0;                        ///< m-grouped contiguous MoE GEMMs
  std::pair<int64_t, int64_t> moe_w13, moe_w2;           ///< per expert (N, K)
  bool indexer = false;                                  ///< some layer has the sparse indexer
  int64_t index_heads = 0, index_dim = 0;
};
DeepGemmSites deepgemm_sites(const Dims& d);

}  // namespace coldstart::deepseek_v4
