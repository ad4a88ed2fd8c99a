#include "harness/kernels/mamba_ops/mamba_ops_kernels.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "harness/kernels/model_shapes.h"
#include "harness/kernels/source_util.h"

// Embedded by cs_add_kernel_family (harness/kernels/CMakeLists.txt).
extern const char* const kSource_mamba_ops_common;
extern const char* const kSource_mamba_causal_conv1d_fwd;
extern const char* const kSource_mamba_causal_conv1d_update;
extern const char* const kSource_mamba_gated_rms_norm;
extern const char* const kSource_mamba_gather_initial_states;
extern const char* const kSource_mamba_scatter_states;

namespace coldstart::mamba_ops {
namespace {

jit::KernelSource make_source(const char* name, const char* text, std::string& storage,
                              std::vector<std::string> do_not_specialize = {}) {
  jit::KernelSource k = kernels::make_kernel_source(kSource_mamba_ops_common, name, text, storage);
  k.do_not_specialize = std::move(do_not_specialize);
  return k;
}

void check_width(int width) {
  if (width < 2 || width > 4) {
    throw InputError(fmt::format("mamba_ops: conv kernel width {} is not supported (2..4)", width));
  }
}

int index_bits(jit::DType t) {
  if (t == jit::DType::kI32) return 32;
  if (t == jit::DType::kI64) return 64;
  throw InputError(fmt::format("mamba_ops: index dtype {} is not supported (i32 or i64)",
                               jit::dtype_name(t)));
}

}  // namespace

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::kNone: return "none";
    case Activation::kSilu: return "silu";
    case Activation::kSigmoid: return "sigmoid";
  }
  return "?";
}

int64_t next_power_of_2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// layernorm_guard.py calc_rows_per_block:
//   rows_per_block = min(next_power_of_2(cdiv(M, 2 * sm_count)), 4)
int gated_rms_norm_rows_per_block(int64_t M, int num_sms) {
  if (num_sms <= 0) {
    throw InputError(fmt::format("mamba_ops: gated_rms_norm needs a positive SM count, got {}",
                                 num_sms));
  }
  if (M <= 0) return 1;  // [inf] next_power_of_2(0) is 1 in vllm.utils.math_utils
  const int64_t two_sms = 2 * static_cast<int64_t>(num_sms);
  return static_cast<int>(std::min<int64_t>(next_power_of_2((M + two_sms - 1) / two_sms), 4));
}

int gated_rms_norm_block_n(int64_t group_size) {
  constexpr int64_t kMaxFused = 65536 / 2;  // MAX_FUSED_SIZE = 65536 // element_size (bf16)
  if (group_size <= 0) {
    throw InputError(fmt::format("mamba_ops: gated_rms_norm group_size {} must be positive",
                                 group_size));
  }
  const int64_t block_n = std::min(kMaxFused, next_power_of_2(group_size));
  if (group_size > block_n) {
    throw InputError(fmt::format(
        "mamba_ops: gated_rms_norm group_size {} exceeds {} columns (vLLM's layer norm does not "
        "support feature dim >= 64KB)",
        group_size, kMaxFused));
  }
  return static_cast<int>(block_n);
}

int gated_rms_norm_num_warps(int block_n) { return std::min(std::max(block_n / 256, 1), 8); }

int64_t state_block_size(int64_t row_size) {
  return std::min<int64_t>(next_power_of_2(row_size), kStateBlockMax);
}

bool launch_pdl_for_arch(const std::string& arch) { return jit::arch_sm(arch) >= 90; }

int dtype_code(jit::DType dtype) {
  switch (dtype) {
    case jit::DType::kF32: return 0;
    case jit::DType::kF16: return 1;
    case jit::DType::kBF16: return 2;
    default: break;
  }
  throw InputError(fmt::format("mamba_ops: dtype {} is not supported (fp32, fp16 or bf16)",
                               jit::dtype_name(dtype)));
}

const jit::KernelSource& conv_fwd_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "mamba_causal_conv1d_fwd", kSource_mamba_causal_conv1d_fwd, storage,
      {"num_seqs"});  // num_seqs is this kernel's own argument: no Triton counterpart
  return k;
}

const jit::KernelSource& conv_update_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_source("mamba_causal_conv1d_update", kSource_mamba_causal_conv1d_update, storage);
  return k;
}

const jit::KernelSource& gated_rms_norm_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "mamba_gated_rms_norm", kSource_mamba_gated_rms_norm, storage);
  return k;
}

const jit::KernelSource& gather_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "mamba_gather_initial_states", kSource_mamba_gather_initial_states, storage);
  return k;
}

const jit::KernelSource& scatter_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "mamba_scatter_states", kSource_mamba_scatter_states, storage);
  return k;
}

std::vector<const jit::KernelSource*> all_kernels() {
  return {&conv_fwd_kernel(), &conv_update_kernel(), &gated_rms_norm_kernel(), &gather_kernel(),
          &scatter_kernel()};
}

std::vector<jit::Constexpr> conv_fwd_constexprs(const ConvFwdSpec& s) {
  check_width(s.width);
  return {{"DIM", s.dim},
          {"NUM_CACHE_LINES", s.num_cache_lines},
          {"STRIDE_X_DIM", s.stride_x_dim},
          {"STRIDE_X_TOKEN", s.stride_x_token},
          {"STRIDE_W_DIM", s.stride_w_dim},
          {"STRIDE_W_WIDTH", s.stride_w_width},
          {"STRIDE_ISTATE_SEQ", s.stride_istate_seq},
          {"STRIDE_ISTATE_DIM", s.stride_istate_dim},
          {"STRIDE_ISTATE_TOKEN", s.stride_istate_token},
          {"STRIDE_CACHE_INDICES", s.stride_cache_indices},
          {"STRIDE_O_DIM", s.stride_o_dim},
          {"STRIDE_O_TOKEN", s.stride_o_token},
          {"PAD_SLOT_ID", kPadSlotId},
          {"HAS_BIAS", s.has_bias ? 1 : 0},
          {"KERNEL_WIDTH", s.width},
          {"SILU_ACTIVATION", s.silu ? 1 : 0},
          {"USE_PAD_SLOT", 1},
          {"NP2_STATELEN", next_power_of_2(s.width - 1)},
          {"BLOCK_M", kConvBlockM},
          {"BLOCK_N", kConvBlockN}};
}

std::vector<jit::Constexpr> conv_update_constexprs(const ConvUpdateSpec& s) {
  check_width(s.width);
  if (s.seqlen < 1) {
    throw InputError(fmt::format("mamba_ops: conv update seqlen {} must be at least 1", s.seqlen));
  }
  // causal_conv1d_update: spec decoding keeps seqlen - 1 more rows (the drafts a later step may
  // reject).
  const int64_t state_len = s.width - 1 + (s.spec_decoding ? s.seqlen - 1 : 0);
  return {{"DIM", s.dim},
          {"SEQLEN", s.seqlen},
          {"STATE_LEN", state_len},
          {"NUM_CACHE_LINES", s.num_cache_lines},
          {"STRIDE_X_SEQ", s.stride_x_seq},
          {"STRIDE_X_DIM", s.stride_x_dim},
          {"STRIDE_X_TOKEN", s.stride_x_token},
          {"STRIDE_W_DIM", s.stride_w_dim},
          {"STRIDE_W_WIDTH", s.stride_w_width},
          {"STRIDE_CONV_STATE_SEQ", s.stride_state_seq},
          {"STRIDE_CONV_STATE_DIM", s.stride_state_dim},
          {"STRIDE_CONV_STATE_TOK", s.stride_state_tok},
          {"STRIDE_STATE_INDICES", s.stride_state_indices},
          {"STRIDE_O_SEQ", s.stride_o_seq},
          {"STRIDE_O_DIM", s.stride_o_dim},
          {"STRIDE_O_TOKEN", s.stride_o_token},
          {"PAD_SLOT_ID", kPadSlotId},
          {"HAS_BIAS", s.has_bias ? 1 : 0},
          {"KERNEL_WIDTH", s.width},
          {"SILU_ACTIVATION", s.silu ? 1 : 0},
          {"IS_VARLEN", s.varlen ? 1 : 0},
          {"IS_SPEC_DECODING", s.spec_decoding ? 1 : 0},
          {"USE_PAD_SLOT", 1},
          {"NP2_STATELEN", next_power_of_2(state_len)},
          {"NP2_SEQLEN", next_power_of_2(s.seqlen)},
          {"BLOCK_N", kConvBlockN}};
}

std::vector<jit::Constexpr> gated_rms_norm_constexprs(int64_t group_size, int rows_per_block,
                                                      bool norm_before_gate, Activation act,
                                                      jit::DType weight_dtype) {
  const int block_n = gated_rms_norm_block_n(group_size);
  if (rows_per_block != 1 && rows_per_block != 2 && rows_per_block != 4) {
    throw InputError(fmt::format("mamba_ops: ROWS_PER_BLOCK {} is not 1, 2 or 4", rows_per_block));
  }
  const int code = dtype_code(weight_dtype);
  if (code == 1) throw InputError("mamba_ops: gated_rms_norm weight must be bf16 or fp32");
  // vLLM's ACTIVATION is a string constexpr; RMSNormGated passes "swish" (its default).
  const int act_code = act == Activation::kSilu ? 1 : act == Activation::kSigmoid ? 2 : 0;
  return {{"N", group_size},
          {"BLOCK_N", block_n},
          {"ROWS_PER_BLOCK", rows_per_block},
          {"HAS_BIAS", 0},
          {"HAS_Z", 1},
          {"NORM_BEFORE_GATE", norm_before_gate ? 1 : 0},
          {"IS_RMS_NORM", 1},
          {"ACTIVATION", act_code},
          {"W_DTYPE", code}};
}

std::vector<jit::Constexpr> gather_constexprs(int64_t row_size, bool launch_pdl,
                                              jit::DType state_dtype, jit::DType index_dtype) {
  return {{"ROW_SIZE", row_size},
          {"BLOCK_SIZE", state_block_size(row_size)},
          {"LAUNCH_PDL", launch_pdl ? 1 : 0},
          {"STATE_DTYPE", dtype_code(state_dtype)},
          {"INDEX_BITS", index_bits(index_dtype)}};
}

std::vector<jit::Constexpr> scatter_constexprs(int64_t row_size, bool launch_pdl,
                                               jit::DType src_dtype, jit::DType state_dtype,
                                               jit::DType index_dtype) {
  return {{"ROW_SIZE", row_size},
          {"BLOCK_SIZE", state_block_size(row_size)},
          {"LAUNCH_PDL", launch_pdl ? 1 : 0},
          {"SRC_DTYPE", dtype_code(src_dtype)},
          {"STATE_DTYPE", dtype_code(state_dtype)},
          {"INDEX_BITS", index_bits(index_dtype)}};
}

std::vector<KernelCompileCase> compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  std::vector<KernelCompileCase> cases;
  const uint64_t base = 1u << 20;  // 256-byte aligned, as a real allocation
  auto add = [&](const jit::KernelSource& k, std::vector<jit::Constexpr> cs,
                 std::vector<KernelArg> args) {
    cases.push_back(kernels::make_compile_case("mamba_ops", k, std::move(cs), std::move(args)));
  };
  // Qwen3-Next-80B GDN, TP 1: conv dim 8192 (q, k 16 x 128 each, v 32 x 128), width 4; a slot
  // page holds the conv state (3 x 8192 bf16) and the SSM state (32 x 128 x 128 fp32).
  const kernels::shapes::GdnHeads gdn = kernels::shapes::kQwen3NextGdnTp1;
  const int64_t dim = kernels::shapes::conv_dim(gdn);
  const int64_t page_elems = (3 * dim * 2 + kernels::shapes::state_elems(gdn) * 4) / 2;  // bf16s
  const int64_t slots = 257;
  for (int width : {4, 2}) {
    ConvFwdSpec f;
    f.dim = dim;
    f.num_cache_lines = slots;
    f.stride_x_token = dim + int64_t{gdn.num_v_heads} * gdn.head_v_dim;  // mixed_qkv: a slice of qkvz
    f.stride_w_dim = width;
    f.stride_istate_seq = page_elems;
    f.stride_istate_token = dim;
    f.stride_o_token = dim;
    f.width = width;
    f.has_bias = width == 2;
    add(conv_fwd_kernel(), conv_fwd_constexprs(f),
        {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kBF16),
         KernelArg::pointer(f.has_bias ? base : 0, DType::kBF16),
         KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kI32),
         KernelArg::pointer(base, DType::kU8), KernelArg::pointer(base, DType::kI32),
         KernelArg::pointer(base, DType::kBF16), KernelArg::i32(1000), KernelArg::i32(3)});
    ConvUpdateSpec u;
    u.dim = dim;
    u.num_cache_lines = slots;
    u.stride_x_seq = dim;
    u.stride_w_dim = width;
    u.stride_state_seq = page_elems;
    u.stride_state_tok = dim;
    u.stride_o_seq = dim;
    u.width = width;
    u.has_bias = width == 2;
    add(conv_update_kernel(), conv_update_constexprs(u),
        {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kBF16),
         KernelArg::pointer(u.has_bias ? base : 0, DType::kBF16),
         KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kI32),
         KernelArg::pointer(0, DType::kI32), KernelArg::pointer(0, DType::kI32),
         KernelArg::pointer(base, DType::kBF16), KernelArg::i32(16)});
  }
  // Speculative-decoding verify (MTP with num_speculative_tokens 2, the setting of vLLM PR
  // #39483's qwen3_next_mtp report and of scenarios/qwen3-next-gdn-mtp.yaml: max_query_len 3): x
  // the spec rows of mixed_qkv [T, dim] (row stride dim, as the decode case's), the conv state
  // width - 1 + 2 = 5 rows.
  {
    const int64_t spec_tokens = 2;
    const int64_t spec_page =
        ((3 + spec_tokens) * dim * 2 + kernels::shapes::state_elems(gdn) * 4) / 2;  // bf16s
    ConvUpdateSpec u;
    u.dim = dim;
    u.seqlen = spec_tokens + 1;
    u.num_cache_lines = slots;
    u.stride_x_seq = 0;
    u.stride_x_token = dim;
    u.stride_w_dim = 4;
    u.stride_state_seq = spec_page;
    u.stride_state_tok = dim;
    u.stride_o_seq = 0;
    u.stride_o_token = dim;
    u.width = 4;
    u.varlen = true;
    u.spec_decoding = true;
    add(conv_update_kernel(), conv_update_constexprs(u),
        {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kBF16),
         KernelArg::pointer(0, DType::kBF16), KernelArg::pointer(base, DType::kBF16),
         KernelArg::pointer(base, DType::kI32), KernelArg::pointer(base, DType::kI32),
         KernelArg::pointer(base, DType::kI32), KernelArg::pointer(base, DType::kBF16),
         KernelArg::i32(16)});
  }
  // Gated RMSNorm over [T * 32 heads, 128]: silu after the norm (GDN), sigmoid before it.
  for (int rpb : {1, 4}) {
    const bool silu = rpb == 4;
    add(gated_rms_norm_kernel(),
        gated_rms_norm_constexprs(128, rpb, silu, silu ? Activation::kSilu : Activation::kSigmoid,
                                  silu ? DType::kBF16 : DType::kF32),
        {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kBF16),
         KernelArg::pointer(base, silu ? DType::kBF16 : DType::kF32),
         KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(0, DType::kF32),
         KernelArg::i64(128), KernelArg::i64(128), KernelArg::i64(128), KernelArg::i32(1024),
         KernelArg::f32(1e-6f)});
  }
  // State rows: the GDN SSM state (Hv x V x K) in fp32, and a bf16 state.
  const int64_t row = kernels::shapes::state_elems(gdn);
  add(gather_kernel(), gather_constexprs(row, true, DType::kF32, DType::kI32),
      {KernelArg::pointer(base, DType::kF32), KernelArg::pointer(base, DType::kI32),
       KernelArg::pointer(base, DType::kU8), KernelArg::pointer(base, DType::kF32),
       KernelArg::i64(row), KernelArg::i64(1), KernelArg::i64(1)});
  add(gather_kernel(), gather_constexprs(row, false, DType::kBF16, DType::kI64),
      {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base + 8, DType::kI64),
       KernelArg::pointer(base + 1, DType::kU8), KernelArg::pointer(base, DType::kBF16),
       KernelArg::i64(row), KernelArg::i64(2), KernelArg::i64(1)});
  add(scatter_kernel(), scatter_constexprs(row, true, DType::kF32, DType::kBF16, DType::kI32),
      {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kF32),
       KernelArg::pointer(base, DType::kI32), KernelArg::i64(row), KernelArg::i64(row),
       KernelArg::i64(1)});
  add(scatter_kernel(), scatter_constexprs(row, false, DType::kF32, DType::kF32, DType::kI64),
      {KernelArg::pointer(base, DType::kF32), KernelArg::pointer(base, DType::kF32),
       KernelArg::pointer(base + 8, DType::kI64), KernelArg::i64(row), KernelArg::i64(row),
       KernelArg::i64(2)});
  return cases;
}

}  // namespace coldstart::mamba_ops
