// Fused MoE: vLLM's unquantized Triton fused_experts path as runtime-compiled CUDA kernels. This
// header is torch-free: the kernels' sources and compile keys, the sizes vLLM computes on the host
// (sorted_token_ids length, EM, the naive-assignment rule), the GEMM's shared memory, and the
// compile cases. The torch-side API the models call is fused_moe.h.
//
// What vLLM does for one MoE layer (bf16, no expert parallelism; sources below):
//   1. topk_softmax (AOT CUDA op _moe_C.topk_softmax): router logits [M, E] -> topk_weights f32
//      [M, top_k], topk_ids int32 [M, top_k] (renormalized when norm_topk_prob). Sigmoid routers
//      with an e_score_correction_bias and use_grouped_topk (DeepSeek-V3, NemotronH) run the AOT
//      op _moe_C.grouped_topk instead (moe_grouped_topk.cu).
//   2. config = try_get_optimal_moe_config(...): the tuned table entry nearest to M (or
//      get_default_config); jit/select.h implements the lookup.
//   3. _prepare_expert_assignment: when M * top_k * 4 <= E (SPARSITY_FACTOR 4, no expert_map,
//      not wNa16), moe_align_block_size is SKIPPED ("naive block assignment"): sorted_token_ids is
//      None, expert_ids = topk_ids.view(-1), num_tokens_post_padded = [M * top_k * BLOCK_SIZE_M],
//      and the GEMM gets EM = M * top_k * BLOCK_SIZE_M and naive_block_assignment=True, so each
//      program's block holds exactly one (token, k) pair (offs_token = pid_m in row 0, the other
//      rows masked). Otherwise moe_align_block_size (AOT CUDA op) builds sorted_token_ids /
//      expert_ids / num_tokens_post_padded for BLOCK_SIZE_M.
//   4. fused_moe_kernel (Triton, JIT) w13: hidden [M, H] x w13 [E, 2N, H] -> cache1 [M, top_k, 2N],
//      top_k = top_k, MUL_ROUTED_WEIGHT = False.
//   5. silu_and_mul (AOT CUDA op _C.silu_and_mul): cache1 -> cache2 [M * top_k, N]. Non-gated
//      experts (NemotronH's relu2_no_mul: w13 is [E, N, H], cache1 [M, top_k, N]) run two torch
//      ops instead, relu_ in place then square into cache2 (apply_moe_activation in
//      vllm/model_executor/layers/fused_moe/activation.py at 13436117c52e); the tuned-table N is
//      still w2.shape[2] (try_get_optimal_moe_config) and both GEMMs share the config.
//   6. fused_moe_kernel w2: cache2 x w2 [E, H, N] -> cache3 [M, top_k, H], top_k = 1,
//      MUL_ROUTED_WEIGHT = True, same config and the same alignment outputs as step 4.
//   7. moe_sum (AOT op _moe_C.moe_sum): cache3 -> out [M, H].
// Sources: vllm/model_executor/layers/fused_moe/experts/triton_moe.py (TritonExperts.apply, the
// calls of steps 2-7) at vllm-project/vllm 00033579451d; fused_moe.py (fused_moe_kernel,
// invoke_fused_moe_kernel, get_config_file_name, get_moe_configs) at 13cb3e44373b;
// moe_align_block_size.py at 05be99241939 (max_num_tokens_padded); csrc/moe/
// moe_align_sum_kernels.cu at 1377b4e02fb7; csrc/moe/topk_softmax_kernels.cu at ad4715551f2b;
// csrc/activation_kernels.cu at 5500c76dce90. The naive-assignment rule, the
// `if topk_ids.numel() < num_experts` clamp of max_num_tokens_padded and the kernel's
// naive_block_assignment constexpr are from vLLM's fused_moe.py / moe_align_block_size.py of
// 2026 (v0.20+); no vLLM commit of those files is in the reference store, so they were read in
// copies of them (vllm-plugin-FL's, intel-xpu-backend-for-triton's benchmark) that agree with
// each other and with triton_moe.py at 00033579451d [inference: the copies are faithful].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/kernel_registry.h"
#include "harness/kernels/model_shapes.h"

namespace coldstart::fused_moe {

/// Threads per block of the AOT kernels (fixed in their sources).
constexpr int kTopkWarps = 4;          ///< moe_topk_softmax: one warp per token
constexpr int kGroupedTopkWarps = 4;   ///< moe_grouped_topk: one warp per token
/// moe_grouped_topk limits (vLLM's grouped_topk op: n_group <= 32, topk <= 32).
constexpr int kMaxGroupedTopk = 32;
constexpr int kMaxExpertGroups = 32;
constexpr int kAlignThreads = 1024;    ///< moe_align_block_size: one block
constexpr int kActThreads = 256;       ///< moe_silu_and_mul: one block per token
constexpr int kSumThreads = 256;       ///< moe_sum: one block per token
/// moe_align_block_size handles at most this many experts (vLLM: padded experts < 1024).
constexpr int64_t kMaxExperts = 1024;

/// The kernels (sources embedded at build time).
const jit::KernelSource& topk_softmax_kernel();  ///< moe_topk_softmax (AOT)
const jit::KernelSource& grouped_topk_kernel();  ///< moe_grouped_topk (AOT)
const jit::KernelSource& align_kernel();         ///< moe_align_block_size (AOT)
const jit::KernelSource& silu_and_mul_kernel();  ///< moe_silu_and_mul (AOT)
const jit::KernelSource& sum_kernel();           ///< moe_sum (AOT)
const jit::KernelSource& gemm_kernel();          ///< fused_moe_gemm (JIT, Triton in vLLM)
std::vector<const jit::KernelSource*> all_kernels();

// ---- vLLM's tuned tables for these kernels (fused_moe/configs/*.json) and their default ------

/// vLLM's fused_moe config file name (get_config_file_name in
/// vllm/model_executor/layers/fused_moe/fused_moe.py, vllm-project/vllm 13cb3e44373b):
///     f"E={E},N={N},device_name={device_name}{dtype_selector}{block_shape_selector}.json"
/// with device_name = jit::vllm_device_name(device_name), dtype_selector = ",dtype=<dtype>" unless
/// `dtype` is empty, block_shape_selector = ",block_shape=[<n>,<k>]" (Python's list repr without
/// spaces) when `block_shape` is non-empty and has no zero. E.g. (512, 512, "NVIDIA H200") ->
/// "E=512,N=512,device_name=NVIDIA_H200.json"; (128, 1856, "NVIDIA H200", "fp8_w8a8") ->
/// "E=128,N=1856,device_name=NVIDIA_H200,dtype=fp8_w8a8.json".
std::string table_file_name(int64_t E, int64_t N, const std::string& device_name,
                            const std::string& dtype = "",
                            const std::vector<int64_t>& block_shape = {});

/// The same name as stem fields (for jit::find_tuned_file / jit::select_from_table).
jit::StemFields table_stem_fields(int64_t E, int64_t N, const std::string& device_name,
                                  const std::string& dtype = "",
                                  const std::vector<int64_t>& block_shape = {});

/// vLLM's default fused_moe config for unquantized weights when no tuned file exists
/// (get_default_config, vllm-project/vllm 13cb3e44373b): M <= E -> BLOCK_SIZE_M=16,
/// BLOCK_SIZE_N=32, BLOCK_SIZE_K=64, GROUP_SIZE_M=1; else 64, 64, 32, 8. vLLM also sets
/// SPLIT_K=1 there; it is left out here (the harness's MoE kernel has no split-K). num_warps /
/// num_stages: KernelConfig's defaults (vLLM leaves them to Triton's launch defaults).
jit::KernelConfig default_config(int64_t M, int64_t E);

/// Constexprs of the AOT kernels. `input_bf16`: gating logits are bf16 (else float32).
std::vector<jit::Constexpr> topk_softmax_constexprs(int64_t num_experts, int top_k,
                                                    bool renormalize, bool input_bf16);
/// moe_grouped_topk's constexprs: NUM_EXPERTS, TOP_K, N_GROUP, TOPK_GROUP, RENORMALIZE.
std::vector<jit::Constexpr> grouped_topk_constexprs(int64_t num_experts, int top_k,
                                                    int64_t n_group, int64_t topk_group,
                                                    bool renormalize);
std::vector<jit::Constexpr> align_constexprs(int64_t num_experts);
std::vector<jit::Constexpr> silu_and_mul_constexprs();
std::vector<jit::Constexpr> sum_constexprs(int top_k);

/// The GEMM's block shape, read from a config's constexprs by name.
struct GemmBlock {
  int block_m = 0;
  int block_n = 0;
  int block_k = 0;
  int group_m = 0;
  int num_warps = 4;
  int num_stages = 1;
};

/// Reads BLOCK_SIZE_M / BLOCK_SIZE_N / BLOCK_SIZE_K / GROUP_SIZE_M and num_warps / num_stages of
/// `cfg`. Throws InputError naming the config when one is missing or unsupported: BLOCK_SIZE_M a
/// multiple of 16, BLOCK_SIZE_N of 8, BLOCK_SIZE_K of 16 (each in [8, 256]), GROUP_SIZE_M >= 1,
/// num_warps a power of two in [1, 16], num_stages >= 1, and SPLIT_K (when present) 1.
GemmBlock gemm_block(const jit::KernelConfig& cfg);

/// The GEMM's constexprs: cfg.constexprs (file order, e.g. BLOCK_SIZE_M, BLOCK_SIZE_N,
/// BLOCK_SIZE_K, GROUP_SIZE_M), then MUL_ROUTED_WEIGHT, TOP_K, COMPUTE_TYPE (1 = bf16),
/// NAIVE_BLOCK_ASSIGNMENT, NUM_WARPS, NUM_STAGES (cfg.all_constexprs order). Validates with
/// gemm_block.
std::vector<jit::Constexpr> gemm_constexprs(const jit::KernelConfig& cfg, bool mul_routed_weight,
                                            int top_k, bool naive_block_assignment);

/// Shared memory per block the GEMM may use on compute capability `sm` (sm_80 / sm_87: 163 KiB,
/// sm_90 / sm_100 / sm_103: 227 KiB, others: 99 KiB). The kernel has the same table.
int gemm_smem_limit(int sm);
/// Pipeline depth the GEMM really uses: num_stages, clamped so that the ring of
/// (BM + BN) * (BK + 8) * 2-byte stages plus BM * 16 bytes of row data fits gemm_smem_limit(sm).
/// 0 when not even one stage fits (the kernel refuses to compile then).
int gemm_pipeline_stages(const GemmBlock& blk, int sm);
/// Dynamic shared memory of one GEMM block, bytes: stages * stage bytes + BM * 16.
int gemm_smem_bytes(const GemmBlock& blk, int sm);

/// vLLM's rule for skipping moe_align_block_size (no expert_map, unquantized):
/// num_tokens * top_k * 4 <= num_experts.
bool uses_naive_block_assignment(int64_t num_tokens, int top_k, int64_t num_experts);

/// moe_align_block_size's buffer length (vLLM moe_align_block_size.py): numel + E * (bm - 1),
/// rounded up to bm when pad_sorted_ids (never here), and min(numel * bm, that) when numel < E.
int64_t max_num_tokens_padded(int64_t numel, int64_t num_experts, int64_t block_m);

/// EM, the GEMM's row count (invoke_fused_moe_kernel): naive: num_pairs * bm; aligned:
/// sorted_len, and min(sorted_len, a_rows * top_k * bm) when a_rows < bm (a_rows = A.size(0)).
int64_t gemm_em(bool naive, int64_t num_pairs, int64_t sorted_len, int64_t a_rows, int top_k,
                int64_t block_m);

/// Compile cases for the multi-arch compile test: the AOT kernels for Qwen3-Next (E 512, top 10,
/// bf16 logits), and the GEMM for every distinct config of vLLM's H200 table for E=512,N=512
/// (inlined here, the fixture file is not read) in its w13 aligned form, plus the two default
/// configs (one naive w13, one aligned w2), with Qwen3-Next's argument specialization. NemotronH:
/// grouped_topk for Nemotron-3 Nano (E 128, top 6), Super (E 512, top 22) and a DeepSeek-V3-like
/// grouped case (E 256, 8 groups, 4 kept, top 8), and the GEMM for every distinct config of
/// vLLM's H100 table for E=128,N=1856 in its non-gated w13 form (N_out = N).
std::vector<KernelCompileCase> compile_cases();

}  // namespace coldstart::fused_moe
