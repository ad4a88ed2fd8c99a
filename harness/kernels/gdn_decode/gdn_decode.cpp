#include "harness/kernels/gdn_decode/gdn_decode.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::gdn_decode {
namespace {

using jit::KernelArg;
using namespace kernels;  // launch_util.h: the argument checks and launch helpers

constexpr const char* kFamily = "gdn_decode";

// A small parameter vector [n] (A_log, dt_bias, norm_weight), contiguous, of `allowed` dtypes.
ParamDtype check_param(const CallSite& fn, const char* arg, const at::Tensor& t, int64_t n,
                       bool allow_bf16) {
  if (!t.defined()) fail(fn, arg, "is an undefined tensor");
  const at::ScalarType st = t.scalar_type();
  const bool ok = st == at::kFloat || (allow_bf16 && st == at::kBFloat16);
  check(fn, arg, t, ok ? st : at::kFloat, 1, Layout::kContiguous);
  check_size(fn, arg, t, 0, n);
  return st == at::kFloat ? ParamDtype::kF32 : ParamDtype::kBF16;
}

// The state cache [slots, Hv, V, K], bf16 or float32, slot stride free, the rest contiguous.
StateDtype check_state(const CallSite& fn, const at::Tensor& s, const GdnDims& d) {
  if (!s.defined()) fail(fn, "state", "is an undefined tensor");
  const at::ScalarType st = s.scalar_type();
  if (st != at::kFloat && st != at::kBFloat16) {
    fail(fn, "state", fmt::format("must have dtype BFloat16 or Float, got {}", c10::toString(st)));
  }
  check(fn, "state", s, st, 4, Layout::kInnerContiguous);
  check_size(fn, "state", s, 1, d.num_v_heads);
  check_size(fn, "state", s, 2, d.head_v_dim);
  check_size(fn, "state", s, 3, d.head_k_dim);
  const int64_t vk = int64_t{d.head_v_dim} * d.head_k_dim;
  if (s.stride(2) != d.head_k_dim || s.stride(1) != vk || s.stride(0) < d.num_v_heads * vk) {
    fail(fn, "state", fmt::format("must have contiguous [Hv, V, K] slots, got strides ({}, {}, {}, "
                                  "{})",
                                  s.stride(0), s.stride(1), s.stride(2), s.stride(3)));
  }
  if (tensor_arg(s).address % 16 != 0 || s.stride(0) % 4 != 0) {
    fail(fn, "state", "must be 16-byte aligned with a slot stride that is a multiple of 4");
  }
  return st == at::kFloat ? StateDtype::kF32 : StateDtype::kBF16;
}

// A bf16 [rows, ...] view read with 8-byte vector loads: aligned, row stride a multiple of 4.
void check_vector_view(const CallSite& fn, const char* arg, const at::Tensor& t) {
  if (tensor_arg(t).address % 8 != 0 || t.stride(0) % 4 != 0) {
    fail(fn, arg, fmt::format("must be 8-byte aligned with a row stride that is a multiple of 4 "
                              "(row stride {})",
                              t.stride(0)));
  }
}

// [rows, Hv] bf16 gating input (a or b), innermost contiguous.
void check_gate_input(const CallSite& fn, const char* arg, const at::Tensor& t, int64_t rows,
                      int64_t hv) {
  check(fn, arg, t, at::kBFloat16, 2, Layout::kInnerContiguous);
  check_size(fn, arg, t, 0, rows);
  check_size(fn, arg, t, 1, hv);
}

}  // namespace

void fused_sigmoid_gating_delta_rule_update(jit::JitRuntime& rt, const GdnDims& d,
                                            const at::Tensor& A_log, const at::Tensor& a,
                                            const at::Tensor& b, const at::Tensor& dt_bias,
                                            const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, const at::Tensor& state,
                                            const at::Tensor& state_indices,
                                            const at::Tensor& cu_seqlens,
                                            const at::Tensor& num_accepted_tokens,
                                            const at::Tensor& out, float scale,
                                            bool use_qk_l2norm_in_kernel) {
  const CallSite fn{kFamily, "fused_sigmoid_gating_delta_rule_update"};
  check_dims("gdn_decode::fused_sigmoid_gating_delta_rule_update", d);
  const int64_t hk = d.num_k_heads, hv = d.num_v_heads, kd = d.head_k_dim, vd = d.head_v_dim;

  check(fn, "q", q, at::kBFloat16, 3, Layout::kInnerContiguous);
  const int64_t t = q.size(0);
  check_size(fn, "q", q, 1, hk);
  check_size(fn, "q", q, 2, kd);
  check(fn, "k", k, at::kBFloat16, 3, Layout::kInnerContiguous);
  check_size(fn, "k", k, 0, t);
  check_size(fn, "k", k, 1, hk);
  check_size(fn, "k", k, 2, kd);
  check(fn, "v", v, at::kBFloat16, 3, Layout::kInnerContiguous);
  check_size(fn, "v", v, 0, t);
  check_size(fn, "v", v, 1, hv);
  check_size(fn, "v", v, 2, vd);
  if (q.stride(1) != kd) fail(fn, "q", "must have head stride K");
  if (k.stride(1) != kd) fail(fn, "k", "must have head stride K");
  if (v.stride(1) != vd) fail(fn, "v", "must have head stride V");
  check_vector_view(fn, "q", q);
  check_vector_view(fn, "k", k);
  check_gate_input(fn, "a", a, t, hv);
  check_gate_input(fn, "b", b, t, hv);
  check_param(fn, "A_log", A_log, hv, false);
  const ParamDtype dt_dtype = check_param(fn, "dt_bias", dt_bias, hv, true);
  const StateDtype state_dtype = check_state(fn, state, d);
  check(fn, "out", out, at::kBFloat16, 3, Layout::kContiguous);
  check_size(fn, "out", out, 0, t);
  check_size(fn, "out", out, 1, hv);
  check_size(fn, "out", out, 2, vd);
  if (!(scale > 0.0f)) throw Error(fmt::format("{}::{}: scale {} must be positive", fn.family, fn.name, scale));

  const bool varlen = cu_seqlens.defined();
  const bool spec = num_accepted_tokens.defined();
  int64_t n = t;
  if (varlen) {
    check(fn, "cu_seqlens", cu_seqlens, at::kInt, 1, Layout::kContiguous);
    n = cu_seqlens.size(0) - 1;
    if (n < 0) fail(fn, "cu_seqlens", "must have N + 1 >= 1 entries");
  }
  if (!state_indices.defined()) fail(fn, "state_indices", "is an undefined tensor");
  if (state_indices.scalar_type() != at::kInt || state_indices.dim() < 1 || state_indices.dim() > 2) {
    fail(fn, "state_indices",
         fmt::format("must be int32 [N] or [N, W], got {} {}",
                     c10::toString(state_indices.scalar_type()), shape_str(state_indices)));
  }
  check(fn, "state_indices", state_indices, at::kInt, state_indices.dim(), Layout::kInnerContiguous);
  if (state_indices.size(0) < n) {
    fail(fn, "state_indices", fmt::format("has {} rows for {} sequences", state_indices.size(0), n));
  }
  if (spec) {
    if (!varlen) fail(fn, "num_accepted_tokens", "needs cu_seqlens (spec decode is varlen)");
    if (state_indices.dim() != 2) fail(fn, "state_indices", "must be [N, W] under spec decode");
    check(fn, "num_accepted_tokens", num_accepted_tokens, at::kInt, 1, Layout::kContiguous);
    if (num_accepted_tokens.size(0) < n) {
      fail(fn, "num_accepted_tokens",
           fmt::format("has {} entries for {} sequences", num_accepted_tokens.size(0), n));
    }
  }
  for (const auto& [name, tensor] :
       {std::pair<const char*, const at::Tensor*>{"A_log", &A_log}, {"a", &a}, {"b", &b},
        {"dt_bias", &dt_bias}, {"q", &q}, {"k", &k}, {"v", &v}, {"state_indices", &state_indices},
        {"out", &out}}) {
    check_same_device(fn, state, name, *tensor);
  }
  if (varlen) check_same_device(fn, state, "cu_seqlens", cu_seqlens);
  if (spec) check_same_device(fn, state, "num_accepted_tokens", num_accepted_tokens);
  if (t == 0 || n == 0) return;

  UpdateConfig c;
  c.batch_constexpr = varlen ? 1 : n;  // vLLM: B = q.shape[0] of [B, T, H, K]
  c.state_stride = state.stride(0);
  if (state_indices.dim() == 1) {
    c.indices_stride_seq = state_indices.stride(0);
    c.indices_stride_tok = 1;
  } else {
    c.indices_stride_seq = state_indices.stride(0);
    c.indices_stride_tok = state_indices.stride(1);
  }
  c.use_qk_l2norm = use_qk_l2norm_in_kernel;
  c.is_varlen = varlen;
  c.is_spec_decoding = spec;
  c.state_dtype = state_dtype;
  c.dt_bias_dtype = dt_dtype;
  const int nv = d.head_v_dim / update_value_tile(d);
  const KernelArg none = KernelArg::pointer(0, jit::DType::kI32);
  rt.launch(update_kernel(), update_constexprs(d, c),
            {tensor_arg(A_log), tensor_arg(a), tensor_arg(b), tensor_arg(dt_bias),
             KernelArg::f32(1.0f), KernelArg::f32(20.0f), tensor_arg(q), tensor_arg(k),
             tensor_arg(v), tensor_arg(out), tensor_arg(state), tensor_arg(state),
             varlen ? tensor_arg(cu_seqlens) : none, tensor_arg(state_indices),
             spec ? tensor_arg(num_accepted_tokens) : none, KernelArg::f32(scale),
             KernelArg::i64(n), KernelArg::i64(varlen ? t : 1), KernelArg::i64(q.stride(0)),
             KernelArg::i64(k.stride(0)), KernelArg::i64(v.stride(0)),
             KernelArg::i64(a.stride(0)), KernelArg::i64(b.stride(0))},
            dims(1, static_cast<unsigned>(nv), grid_dim(fn, "z (sequences * value heads)", n * hv, 65535),
                 kUpdateThreads),
            stream_for(state));
}

void fused_gdn_decode_post_conv_mtp(jit::JitRuntime& rt, const GdnDims& d,
                                    const at::Tensor& mixed_qkv, const at::Tensor& a,
                                    const at::Tensor& b, const at::Tensor& A_log,
                                    const at::Tensor& dt_bias, const at::Tensor& state_indices,
                                    const at::Tensor& cu_seqlens,
                                    const at::Tensor& num_accepted_tokens,
                                    const at::Tensor& state, const at::Tensor& output_gate,
                                    const at::Tensor& norm_weight, const at::Tensor& out,
                                    float scale, float norm_eps, const std::string& activation,
                                    int num_sms) {
  const CallSite fn{kFamily, "fused_gdn_decode_post_conv_mtp"};
  check_dims("gdn_decode::fused_gdn_decode_post_conv_mtp", d);
  const int64_t hk = d.num_k_heads, hv = d.num_v_heads, kd = d.head_k_dim, vd = d.head_v_dim;
  check(fn, "mixed_qkv", mixed_qkv, at::kBFloat16, 2, Layout::kInnerContiguous);
  const int64_t l = mixed_qkv.size(0);
  check_size(fn, "mixed_qkv", mixed_qkv, 1, 2 * hk * kd + hv * vd);
  check_vector_view(fn, "mixed_qkv", mixed_qkv);
  check_gate_input(fn, "a", a, l, hv);
  check_gate_input(fn, "b", b, l, hv);
  check_param(fn, "A_log", A_log, hv, false);
  const ParamDtype dt_dtype = check_param(fn, "dt_bias", dt_bias, hv, true);
  check(fn, "state_indices", state_indices, at::kInt, 2, Layout::kContiguous);
  const int64_t n = state_indices.size(0);
  const int64_t w = state_indices.size(1);
  if (n < 1 || w < 1 || w > kMtpMaxTokens) {
    fail(fn, "state_indices", fmt::format("must be [N, W] with N >= 1 and 1 <= W <= {}, got {}",
                                          kMtpMaxTokens, shape_str(state_indices)));
  }
  check(fn, "cu_seqlens", cu_seqlens, at::kInt, 1, Layout::kContiguous);
  check_size(fn, "cu_seqlens", cu_seqlens, 0, n + 1);
  check(fn, "num_accepted_tokens", num_accepted_tokens, at::kInt, 1, Layout::kContiguous);
  check_size(fn, "num_accepted_tokens", num_accepted_tokens, 0, n);
  const StateDtype state_dtype = check_state(fn, state, d);
  if (state_dtype == StateDtype::kBF16 && state.stride(0) % 8 != 0) {
    fail(fn, "state", "bf16 slots must keep 16-byte alignment (slot stride a multiple of 8)");
  }
  check(fn, "output_gate", output_gate, at::kBFloat16, 3, Layout::kInnerContiguous);
  check_size(fn, "output_gate", output_gate, 0, l);
  check_size(fn, "output_gate", output_gate, 1, hv);
  check_size(fn, "output_gate", output_gate, 2, vd);
  if (output_gate.stride(1) != vd) fail(fn, "output_gate", "must have head stride V");
  const ParamDtype nw_dtype = check_param(fn, "norm_weight", norm_weight, vd, true);
  check(fn, "out", out, at::kBFloat16, 3, Layout::kContiguous);
  check_size(fn, "out", out, 0, l);
  check_size(fn, "out", out, 1, hv);
  check_size(fn, "out", out, 2, vd);
  if (activation != "silu" && activation != "sigmoid") {
    throw Error(fmt::format("{}::{}: activation '{}' must be 'silu' or 'sigmoid'", fn.family,
                            fn.name, activation));
  }
  if (!(norm_eps >= 0.0f) || !(scale > 0.0f)) {
    throw Error(fmt::format("{}::{}: scale {} must be positive and norm_eps {} non-negative",
                            fn.family, fn.name, scale, norm_eps));
  }
  for (const auto& [name, tensor] :
       {std::pair<const char*, const at::Tensor*>{"mixed_qkv", &mixed_qkv}, {"a", &a}, {"b", &b},
        {"A_log", &A_log}, {"dt_bias", &dt_bias}, {"state_indices", &state_indices},
        {"cu_seqlens", &cu_seqlens}, {"num_accepted_tokens", &num_accepted_tokens},
        {"output_gate", &output_gate}, {"norm_weight", &norm_weight}, {"out", &out}}) {
    check_same_device(fn, state, name, *tensor);
  }

  MtpConfig c;
  c.value_tile = mtp_value_tile(static_cast<int>(std::min<int64_t>(n, 1 << 30)), num_sms, d);
  c.state_dtype = state_dtype;
  c.sigmoid_gate = activation == "sigmoid";
  c.dt_bias_dtype = dt_dtype;
  c.norm_weight_dtype = nw_dtype;
  const std::vector<jit::Constexpr> cs = mtp_constexprs(d, c);
  if (c.value_tile < d.head_v_dim && n * hv > kMtpArrivalSlots) {
    fail(fn, "state_indices", fmt::format("has {} requests; split-V tiles support at most {} "
                                          "(request, head) pairs",
                                          n, kMtpArrivalSlots));
  }
  if (l == 0) return;
  rt.launch(mtp_kernel(), cs,
            {tensor_arg(mixed_qkv), tensor_arg(a), tensor_arg(b), tensor_arg(A_log),
             tensor_arg(dt_bias), tensor_arg(state_indices), tensor_arg(cu_seqlens),
             tensor_arg(num_accepted_tokens), tensor_arg(state), tensor_arg(output_gate),
             tensor_arg(norm_weight), tensor_arg(out),
             KernelArg::i32(to_i32(fn, "state_indices", w)), KernelArg::i64(mixed_qkv.stride(0)),
             KernelArg::i64(a.stride(0)), KernelArg::i64(b.stride(0)),
             KernelArg::i64(output_gate.stride(0)), KernelArg::i64(state.stride(0)),
             KernelArg::f32(scale), KernelArg::f32(norm_eps)},
            dims(grid_dim(fn, "x (requests)", n, 0x7fffffff), grid_dim(fn, "y (value heads)", hv, 65535),
                 static_cast<unsigned>(d.head_v_dim / c.value_tile), kMtpThreads),
            stream_for(state));
}

}  // namespace coldstart::gdn_decode
