#include "harness/kernels/gdn_decode/gdn_decode_kernels.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "harness/kernels/source_util.h"

// Embedded by cs_add_kernel_family (harness/kernels/CMakeLists.txt).
extern const char* const kSource_gdn_decode_common;
extern const char* const kSource_gdn_decode_update;
extern const char* const kSource_gdn_decode_mtp;

namespace coldstart::gdn_decode {
namespace {

constexpr const char* kFamily = "gdn_decode";

bool pow2_dim(int x) { return x == 32 || x == 64 || x == 128 || x == 256; }

int next_pow2(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

void check_dims(const char* who, const GdnDims& d) {
  if (d.num_k_heads <= 0 || d.num_v_heads <= 0 || d.num_v_heads % d.num_k_heads != 0) {
    throw InputError(fmt::format("{}: {} value heads is not a positive multiple of {} key heads",
                                 who, d.num_v_heads, d.num_k_heads));
  }
  if (!pow2_dim(d.head_k_dim) || !pow2_dim(d.head_v_dim)) {
    throw InputError(fmt::format("{}: head dims K={} V={} are not supported (each must be 32, 64, "
                                 "128 or 256)",
                                 who, d.head_k_dim, d.head_v_dim));
  }
}

int update_value_tile(const GdnDims& d) { return std::min(next_pow2(d.head_v_dim), 32); }

int mtp_value_tile(int num_reqs, int num_sms, const GdnDims& d) {
  check_dims("gdn_decode::mtp_value_tile", d);
  if (num_reqs < 1 || num_sms < 1) {
    throw InputError(fmt::format("gdn_decode::mtp_value_tile: num_reqs {} and num_sms {} must be "
                                 "positive",
                                 num_reqs, num_sms));
  }
  const int64_t programs = static_cast<int64_t>(num_reqs) * d.num_v_heads;
  int bv = d.head_v_dim;
  if (programs < num_sms) {
    bv = 32;
  } else if (programs <= 4ll * num_sms) {
    bv = 64;
  }
  return std::min(bv, d.head_v_dim);
}

std::vector<int> mtp_warmup_request_counts(int num_sms, const GdnDims& d) {
  check_dims("gdn_decode::mtp_warmup_request_counts", d);
  const int hv = d.num_v_heads;
  std::vector<int> out = {1, (num_sms + hv - 1) / hv, 4 * num_sms / hv + 1};
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const jit::KernelSource& update_kernel() {
  static std::string storage;
  static const jit::KernelSource k = [] {
    jit::KernelSource s = kernels::make_kernel_source(
        kSource_gdn_decode_common, "gdn_decode_update", kSource_gdn_decode_update, storage);
    // vLLM: @triton.jit(do_not_specialize=["N", "T"]) (fused_sigmoid_gating.py @ 95a3d5a40244)
    s.do_not_specialize = {"N", "T"};
    return s;
  }();
  return k;
}

const jit::KernelSource& mtp_kernel() {
  static std::string storage;
  // [inference] the Triton port's do_not_specialize list is unknown: none (Triton's default).
  static const jit::KernelSource k = kernels::make_kernel_source(
      kSource_gdn_decode_common, "gdn_decode_mtp", kSource_gdn_decode_mtp, storage);
  return k;
}

std::vector<const jit::KernelSource*> all_kernels() { return {&update_kernel(), &mtp_kernel()}; }

std::vector<jit::Constexpr> update_constexprs(const GdnDims& d, const UpdateConfig& c) {
  check_dims("gdn_decode::update_constexprs", d);
  const int bk = next_pow2(d.head_k_dim);
  return {{"B", c.batch_constexpr},
          {"H", d.num_k_heads},
          {"HV", d.num_v_heads},
          {"K", d.head_k_dim},
          {"V", d.head_v_dim},
          {"BK", bk},
          {"BV", update_value_tile(d)},
          {"STRIDE_INIT_STATE_TOKEN", c.state_stride},
          {"STRIDE_FINAL_STATE_TOKEN", c.state_stride},
          {"STRIDE_INDICES_SEQ", c.indices_stride_seq},
          {"STRIDE_INDICES_TOK", c.indices_stride_tok},
          {"USE_INITIAL_STATE", 1},
          {"INPLACE_FINAL_STATE", 1},
          {"USE_QK_L2NORM_IN_KERNEL", c.use_qk_l2norm ? 1 : 0},
          {"IS_VARLEN", c.is_varlen ? 1 : 0},
          {"IS_CONTINUOUS_BATCHING", 1},
          {"IS_SPEC_DECODING", c.is_spec_decoding ? 1 : 0},
          {"IS_KDA", 0},
          {"STATE_DTYPE", static_cast<int64_t>(c.state_dtype)},
          {"DT_BIAS_DTYPE", static_cast<int64_t>(c.dt_bias_dtype)}};
}

std::vector<jit::Constexpr> mtp_constexprs(const GdnDims& d, const MtpConfig& c) {
  check_dims("gdn_decode::mtp_constexprs", d);
  if (d.head_k_dim != 128 || d.head_v_dim != 128) {
    throw InputError(fmt::format("gdn_decode::mtp: head dims K={} V={} are not supported (the "
                                 "fused MTP kernel needs K = V = 128)",
                                 d.head_k_dim, d.head_v_dim));
  }
  const int ratio = d.num_v_heads / d.num_k_heads;
  if (!(ratio >= 1 && ratio <= 4) && ratio != 8) {
    throw InputError(fmt::format("gdn_decode::mtp: Hv / Hk = {} is not supported (must be 1, 2, "
                                 "3, 4 or 8)",
                                 ratio));
  }
  if (c.value_tile != 32 && c.value_tile != 64 && c.value_tile != d.head_v_dim) {
    throw InputError(fmt::format("gdn_decode::mtp: value tile {} is not 32, 64 or V", c.value_tile));
  }
  return {{"H", d.num_k_heads},
          {"HV", d.num_v_heads},
          {"K", d.head_k_dim},
          {"V", d.head_v_dim},
          {"BV", c.value_tile},
          {"STATE_DTYPE", static_cast<int64_t>(c.state_dtype)},
          {"SIGMOID_GATE", c.sigmoid_gate ? 1 : 0},
          {"DT_BIAS_DTYPE", static_cast<int64_t>(c.dt_bias_dtype)},
          {"NORM_WEIGHT_DTYPE", static_cast<int64_t>(c.norm_weight_dtype)}};
}

std::vector<KernelCompileCase> compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  std::vector<KernelCompileCase> cases;
  const GdnDims d = gdn_dims(kernels::shapes::kQwen3NextGdnTp1);
  const int64_t conv_dim = 2ll * d.num_k_heads * d.head_k_dim + int64_t{d.num_v_heads} * d.head_v_dim;
  const int64_t ssm = int64_t{d.num_v_heads} * d.head_v_dim * d.head_k_dim;
  const uint64_t base = 1u << 20;  // 256-byte aligned, as a real allocation
  const float scale = 1.0f / std::sqrt(128.0f);
  auto add = [&](const jit::KernelSource& k, std::vector<jit::Constexpr> cs,
                 std::vector<KernelArg> args) {
    cases.push_back(kernels::make_compile_case(kFamily, k, std::move(cs), std::move(args)));
  };
  for (StateDtype sd : {StateDtype::kBF16, StateDtype::kF32}) {
    const DType st = sd == StateDtype::kBF16 ? DType::kBF16 : DType::kF32;
    // A state slot padded like vLLM's hybrid page (the conv state shares the page): stride > ssm.
    const int64_t slot_stride = ssm + (sd == StateDtype::kBF16 ? 3 * conv_dim : 3 * conv_dim / 2);
    for (bool spec : {false, true}) {
      UpdateConfig c;
      c.state_stride = slot_stride;
      c.is_spec_decoding = spec;
      c.indices_stride_seq = spec ? 4 : 1;  // spec: [B, 4] (3 draft tokens); plain: [B]
      c.indices_stride_tok = 1;
      c.state_dtype = sd;
      c.dt_bias_dtype = ParamDtype::kBF16;
      const int64_t tokens = spec ? 32 : 8;
      add(update_kernel(), update_constexprs(d, c),
          {KernelArg::pointer(base, DType::kF32), KernelArg::pointer(base, DType::kBF16),
           KernelArg::pointer(base + 64, DType::kBF16), KernelArg::pointer(base, DType::kBF16),
           KernelArg::f32(1.0f), KernelArg::f32(20.0f), KernelArg::pointer(base, DType::kBF16),
           KernelArg::pointer(base + 4096, DType::kBF16),
           KernelArg::pointer(base + 8192, DType::kBF16), KernelArg::pointer(base, DType::kBF16),
           KernelArg::pointer(base, st), KernelArg::pointer(base, st),
           KernelArg::pointer(base, DType::kI32), KernelArg::pointer(base, DType::kI32),
           spec ? KernelArg::pointer(base, DType::kI32) : KernelArg::pointer(0, DType::kI32),
           KernelArg::f32(scale), KernelArg::i64(spec ? 8 : tokens), KernelArg::i64(tokens),
           KernelArg::i64(conv_dim), KernelArg::i64(conv_dim), KernelArg::i64(conv_dim),
           KernelArg::i64(d.num_v_heads), KernelArg::i64(d.num_v_heads)});
    }
    for (int bv : {32, 64, 128}) {
      MtpConfig m;
      m.value_tile = bv;
      m.state_dtype = sd;
      m.dt_bias_dtype = ParamDtype::kBF16;
      m.norm_weight_dtype = ParamDtype::kBF16;
      const int64_t qkvz = conv_dim + int64_t{d.num_v_heads} * d.head_v_dim;  // packed QKVZ row
      add(mtp_kernel(), mtp_constexprs(d, m),
          {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base + 64, DType::kBF16),
           KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kF32),
           KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kI32),
           KernelArg::pointer(base, DType::kI32), KernelArg::pointer(base, DType::kI32),
           KernelArg::pointer(base, st), KernelArg::pointer(base + 2 * conv_dim, DType::kBF16),
           KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kBF16),
           KernelArg::i32(4), KernelArg::i64(qkvz), KernelArg::i64(2 * d.num_v_heads),
           KernelArg::i64(2 * d.num_v_heads), KernelArg::i64(qkvz), KernelArg::i64(slot_stride),
           KernelArg::f32(scale), KernelArg::f32(1e-6f)});
    }
  }
  return cases;
}

}  // namespace coldstart::gdn_decode
