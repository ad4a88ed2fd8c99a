// Mamba2 selective state update for decode (vLLM's selective_state_update as MambaMixer2 calls
// it): the runtime-compiled kernel's source, its constexprs and launch arguments, vLLM's config
// choice (tuned table keyed by batch * nheads, else a dstate heuristic) and the compile cases.
// Torch-free (the torch-side wrapper is in mamba_ssu.h, the float64 reference in
// mamba_ssu_reference.h).
//
// vLLM sources mirrored (stored copies of vllm-project/vllm, read with the search tools; facts,
// not code):
//   caller      vllm/model_executor/layers/mamba/mamba2/mamba_mixer2.py @ 2e0714af
//               (MambaMixer2.conv_ssm_forward, decode branch): imports selective_state_update
//               from mamba/ops/ssu_dispatch.py and calls it with state = kv_cache[1]
//               [slots, H, P, N], x [B, H, P], dt[:, :, None].expand(-1, -1, P), A[:, None, None]
//               .expand(-1, P, N).to(float32), dt_bias / D [:, None].expand(-1, P), B / C
//               .view(-1, G, N) of the conv output, dt_softplus=True, state_batch_indices =
//               dst_state_batch_indices = state_indices_tensor_d (no prefix caching), out [B, H, P],
//               num_accepted_tokens / cu_seqlens (None without spec decode), is_blackwell =
//               is_device_capability_family(100); no z and no null_block_id argument
//   dispatcher  vllm/model_executor/layers/mamba/ops/ssu_dispatch.py @ c2ea2078: a global backend
//               chosen once from MambaConfig.backend; None or "triton" -> TritonSSUBackend (the
//               default of vllm/config/mamba.py @ 00634b8a is MambaBackendEnum.TRITON), so CUDA
//               SM86, SM90 and SM100 all run the Triton kernel unless --mamba-backend flashinfer.
//               There is no per-arch dispatch; SM100 only changes the heuristic below
//               (is_blackwell). TritonSSUBackend forwards null_block_id (default NULL_BLOCK_ID)
//               and enable_stochastic_rounding / stochastic_rounding_philox_rounds (defaults
//               False / 0 in MambaConfig)
//   kernel      vllm/model_executor/layers/mamba/ops/mamba_ssm.py, the stored copy with the
//               signature ssu_dispatch.py @ c2ea2078 calls (null_block_id, is_blackwell,
//               enable_stochastic_rounding, cache_philox_rounds; the index serves it without a
//               commit id): _selective_scan_update_kernel with
//               @triton.jit(do_not_specialize=["N"]), heuristics HAS_DT_BIAS / HAS_D / HAS_Z /
//               HAS_STATE_BATCH_INDICES / IS_SPEC_DECODING / IS_VARLEN (is-not-None of dt_bias,
//               D, z, state_batch_indices, num_accepted_tokens, cu_seqlens) and BLOCK_SIZE_DSTATE
//               = next_power_of_2(dstate); constexprs DT_SOFTPLUS, TIE_HDIM, BLOCK_SIZE_M,
//               USE_RS_ROUNDING, PHILOX_ROUNDS; grid (cdiv(dim, BLOCK_SIZE_M), N, nheads);
//               TIE_HDIM = A.stride(-1) == 0 and A.stride(-2) == 0 and dt.stride(-1) == 0 and
//               dt_bias.stride(-1) == 0; a state row whose index equals null_block_id is read as
//               zeros and not stored, its output is still written; every operand is computed in
//               float32, out and state are stored in their own dtypes
//   config      same file: try_get_optimal_ssm_config(dim, dstate, N, nheads, cache_dtype,
//               is_blackwell) with cache_dtype = str(state.dtype) without "torch."; get_ssm_configs
//               maps "bfloat16" to "float16" (_canonical_cache_dtype), looks for
//               headdim={P},dstate={N},device_name={dev},cache_dtype={dt}.json in
//               VLLM_TUNED_CONFIG_FOLDER first, then in ops/configs/selective_state_update; drops
//               "triton_version", keeps the digit keys; the entry nearest to batch * nheads wins
//               (min over the keys in file order, so ties take the earlier key); the values used
//               are BLOCK_SIZE_M and num_warps. No file: _get_default_ssm_launch_config
//   helpers     vllm/model_executor/layers/mamba/ops/triton_helpers.py @ 51d8b890 (fast_exp =
//               exp2(log2(e) * x)); vllm/v1/attention/backends/utils.py (PAD_SLOT_ID = -1,
//               NULL_BLOCK_ID = 0)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/kernel_registry.h"

namespace coldstart::mamba_ssu {

/// vLLM's NULL_BLOCK_ID, the default null_block_id of selective_state_update: a state index equal
/// to it makes the kernel read that row's state as zeros and store nothing.
constexpr int64_t kNullBlockId = 0;
/// vLLM's PAD_SLOT_ID (older versions of the kernel compared against it as pad_slot_id).
constexpr int64_t kPadSlotId = -1;

/// vLLM's device name in an SSM config file name (mamba_ssm.py, get_ssm_device_name): runs of
/// whitespace, '/' and '-' become one '_', then pathvalidate's sanitize_filename drops characters
/// no file name may hold (\ : * ? " < > | and control characters) [inference: its "universal"
/// rules] and trailing spaces and dots. "NVIDIA H200" -> "NVIDIA_H200", "NVIDIA H100 80GB HBM3"
/// -> "NVIDIA_H100_80GB_HBM3"; unlike fused_moe's names, "NVIDIA H200 NVL" stays
/// "NVIDIA_H200_NVL".
std::string ssm_device_name(const std::string& device_name);

/// The table key of a state dtype name ("float32", "bfloat16", "float16": str(state.dtype)
/// without "torch."): "bfloat16" shares "float16"'s tables (_canonical_cache_dtype). Throws
/// InputError for any other name.
std::string canonical_cache_dtype(const std::string& cache_dtype);

/// "headdim=<P>,dstate=<N>,device_name=<ssm_device_name(dev)>,cache_dtype=<canonical>.json".
std::string config_file_name(int64_t headdim, int64_t dstate, const std::string& device_name,
                             const std::string& cache_dtype);

/// vLLM's is_blackwell for a target arch ("sm_100", "sm_103a", ...): compute capability family
/// 100 (is_device_capability_family(100): 10.x). sm_110 / sm_120 are not.
bool is_blackwell_arch(const std::string& arch);

/// _get_default_ssm_launch_config: (BLOCK_SIZE_M, num_warps) = (32, 4) for dstate <= 16,
/// (16, 4) <= 32, (8, 4) <= 64; above 64: (32, 8) on Blackwell, else (4, 4) for dstate <= 128 and
/// (4, 8) beyond. The config's constexpr is BLOCK_SIZE_M; num_warps is its num_warps.
jit::KernelConfig default_config(int64_t dstate, bool is_blackwell);

/// Where configs come from (vLLM: VLLM_TUNED_CONFIG_FOLDER, then its packaged folder).
struct ConfigSource {
  std::string table_dir;    ///< the packaged folder (mamba/ops/configs/selective_state_update)
  std::string device_name;  ///< as the device reports it, e.g. "NVIDIA H200" (ssm_device_name)
  std::string user_dir;     ///< VLLM_TUNED_CONFIG_FOLDER: searched first when not empty
};

/// vLLM's launch config of selective_state_update for `batch` rows of `nheads` heads of head dim
/// `headdim` and state size `dstate`, state dtype name `cache_dtype` (see canonical_cache_dtype):
/// - a table file config_file_name(...) in src.user_dir, else in src.table_dir: selector
///   "table", config BLOCK_SIZE_M / num_warps of the entry nearest to batch * nheads (ties: the
///   earlier key of the file), tuning_key "batch*nheads=<E> -> <key>", candidates every entry's
///   config, table_file the file read (each file is read once per process, as vLLM caches it);
/// - no file: selector "heuristic", default_config(dstate, is_blackwell), tuning_key
///   "dstate=<N>,is_blackwell=<0|1>" (vLLM logs "Using default Mamba SSU config").
/// Throws InputError naming the file (and the key) for a table that is not valid JSON, has a
/// non-numeric key, a non-integer value or no entry, or whose chosen entry lacks BLOCK_SIZE_M or
/// num_warps or holds values no kernel can take (BLOCK_SIZE_M not a power of two in 1..1024,
/// num_warps not a power of two in 1..32); InputError for a bad dtype name or non-positive sizes.
jit::Selection select_config(const ConfigSource& src, int64_t headdim, int64_t dstate,
                             const std::string& cache_dtype, int64_t batch, int64_t nheads,
                             bool is_blackwell = false);

/// The runtime-compiled kernel (source embedded at build time); do_not_specialize {N}.
const jit::KernelSource& update_kernel();  ///< mamba_ssu_update
std::vector<const jit::KernelSource*> all_kernels();

/// Element-type code of the kernel's tensors: 0 float32, 1 float16, 2 bfloat16. Throws
/// InputError for any other dtype.
int dtype_code(jit::DType dtype);

/// What of a call enters the kernel's constexprs.
struct UpdateSpec {
  bool dt_softplus = true;
  bool tie_hdim = true;
  int block_size_m = 4;
  int num_warps = 4;
  bool has_dt_bias = true;
  bool has_d = true;
  bool has_state_batch_indices = true;
  int64_t dstate = 128;  ///< BLOCK_SIZE_DSTATE = next_power_of_2(dstate)
  jit::DType state = jit::DType::kF32, x = jit::DType::kBF16, dt = jit::DType::kBF16,
             dt_bias = jit::DType::kBF16, A = jit::DType::kF32, B = jit::DType::kBF16,
             C = jit::DType::kBF16, D = jit::DType::kBF16, out = jit::DType::kBF16;
};

/// Constexprs of mamba_ssu_update: vLLM's (DT_SOFTPLUS, TIE_HDIM, BLOCK_SIZE_M, HAS_DT_BIAS,
/// HAS_D, HAS_Z=0, HAS_STATE_BATCH_INDICES, IS_SPEC_DECODING=0, IS_VARLEN=0, BLOCK_SIZE_DSTATE,
/// USE_RS_ROUNDING=0, PHILOX_ROUNDS=0), then NUM_WARPS and the dtype codes STATE_DTYPE, X_DTYPE,
/// DT_DTYPE, DT_BIAS_DTYPE, A_DTYPE, B_DTYPE, C_DTYPE, D_DTYPE, OUT_DTYPE. Throws InputError for
/// a block size or warp count the kernel cannot take or dstate outside 1..1024.
std::vector<jit::Constexpr> update_constexprs(const UpdateSpec& s);

/// The launch arguments of one call, in vLLM's order (pointers as KernelArg: pointer(0, ...) for
/// None; strides in elements, 0 for None tensors as vLLM passes them).
struct UpdateArgs {
  jit::KernelArg state, x, dt, dt_bias, A, B, C, D, out, state_batch_indices,
      dst_state_batch_indices;
  int64_t null_block_id = kNullBlockId;
  int64_t N = 0, nheads = 0, dim = 0, dstate = 0, nheads_ngroups_ratio = 1;
  int64_t stride_state[4] = {}, stride_x[3] = {}, stride_dt[3] = {}, stride_dt_bias[2] = {},
          stride_A[3] = {}, stride_B[3] = {}, stride_C[3] = {}, stride_D[2] = {},
          stride_out[3] = {}, stride_state_indices[2] = {}, stride_dst_state_indices[2] = {};
};

/// The 54 KernelArgs of mamba_ssu_update for `a` (None pointers for rand_seed, z,
/// num_accepted_tokens and cu_seqlens; z strides 0); every integer is an i64.
std::vector<jit::KernelArg> update_kernel_args(const UpdateArgs& a);

/// Representative compile cases: Nemotron-3 Nano TP1 decode (H 64, P 64, G 8, N 128) with a
/// float32 page-strided state at the H200 table's two configs, a bf16 state at the default
/// heuristic, the Blackwell heuristic, Super TP8 (H 16, G 1) with a float16 state, and a non-tied
/// call with dstate 48 and a state whose strides defeat the vector path. Labels (the constexprs)
/// are distinct, as the compile test requires.
std::vector<KernelCompileCase> compile_cases();

}  // namespace coldstart::mamba_ssu
