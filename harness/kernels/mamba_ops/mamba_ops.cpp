#include "harness/kernels/mamba_ops/mamba_ops.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::mamba_ops {
namespace {

using jit::KernelArg;
using namespace kernels;  // launch_util.h: the argument checks and launch helpers

constexpr const char* kFamily = "mamba_ops";

// Byte range [first, last] a strided view can touch.
struct ByteRange {
  int64_t first = 0;
  int64_t last = -1;
};

ByteRange byte_range(const at::Tensor& t) {
  ByteRange r;
  if (t.numel() == 0) return r;
  int64_t span = 0;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * std::abs(t.stride(d));
  r.first = t.storage_offset() * t.element_size();
  r.last = r.first + (span + 1) * t.element_size() - 1;
  return r;
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (!a.has_storage() || !b.has_storage()) return false;
  if (a.storage().unsafeGetStorageImpl() != b.storage().unsafeGetStorageImpl()) return false;
  const ByteRange ra = byte_range(a);
  const ByteRange rb = byte_range(b);
  return ra.first <= rb.last && rb.first <= ra.last;
}

bool same_view(const at::Tensor& a, const at::Tensor& b) {
  return a.has_storage() && b.has_storage() &&
         a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl() &&
         a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides();
}

// The weight [dim, width] (width 2..4) and the optional bias [dim]; returns the width.
int check_weight_bias(const CallSite& fn, const at::Tensor& weight, const at::Tensor& bias,
                      int64_t dim, const at::Tensor& ref) {
  check(fn, "weight", weight, at::kBFloat16, 2, Layout::kAny);
  check_size(fn, "weight", weight, 0, dim);
  const int64_t width = weight.size(1);
  if (width < 2 || width > 4) {
    fail(fn, "weight", fmt::format("has shape {}; the kernel width (dimension 1) must be 2..4",
                                   shape_str(weight)));
  }
  check_same_device(fn, ref, "weight", weight);
  if (bias.defined()) {
    check(fn, "bias", bias, at::kBFloat16, 1, Layout::kContiguous);
    check_size(fn, "bias", bias, 0, dim);
    check_same_device(fn, ref, "bias", bias);
  }
  return static_cast<int>(width);
}

// conv_states [num_slots, rows >= width - 1, dim], bf16, stride(2) == 1.
void check_conv_states(const CallSite& fn, const at::Tensor& s, int64_t dim, int width,
                       const at::Tensor& ref) {
  check(fn, "conv_states", s, at::kBFloat16, 3, Layout::kAny);
  check_size(fn, "conv_states", s, 2, dim);
  if (s.stride(2) != 1) {
    fail(fn, "conv_states",
         "must have a contiguous innermost (channel) dimension: vLLM's SD layout "
         "[num_slots, state_rows, dim]");
  }
  if (s.size(1) < width - 1) {
    fail(fn, "conv_states", fmt::format("has shape {}; it needs at least width - 1 = {} rows",
                                        shape_str(s), width - 1));
  }
  if (s.size(0) < 1) fail(fn, "conv_states", "has no slots");
  check_same_device(fn, ref, "conv_states", s);
}

// x: bf16 [rows, dim >= 1], innermost contiguous (the conv wrappers' input); returns dim.
int64_t check_conv_x(const CallSite& fn, const at::Tensor& x) {
  check(fn, "x", x, at::kBFloat16, 2, Layout::kInnerContiguous);
  const int64_t dim = x.size(1);
  if (dim < 1) fail(fn, "x", fmt::format("has shape {}; dim must be positive", shape_str(x)));
  return dim;
}

// out: bf16 of x's shape, innermost contiguous (the conv wrappers' output).
void check_conv_out(const CallSite& fn, const at::Tensor& out, const at::Tensor& x) {
  check(fn, "out", out, at::kBFloat16, 2, Layout::kInnerContiguous);
  if (out.sizes() != x.sizes()) {
    fail(fn, "out", fmt::format("has shape {}, x has {}", shape_str(out), shape_str(x)));
  }
}

void check_conv_act(const CallSite& fn, Activation act) {
  if (act == Activation::kSigmoid) {
    throw Error(fmt::format("{}::{}: activation sigmoid is not supported (none or silu)",
                            fn.family, fn.name));
  }
}

// A bool tensor as the kernels' byte pointer (the JIT has no bool dtype; same bytes).
KernelArg bool_arg(const at::Tensor& t) { return tensor_arg(t.view(at::kByte)); }

bool pdl_or_default(const jit::JitRuntime& rt, std::optional<bool> launch_pdl) {
  return launch_pdl.has_value() ? *launch_pdl : launch_pdl_for_arch(rt.arch());
}

void check_state_dtype(const CallSite& fn, const char* arg, const at::Tensor& t) {
  const at::ScalarType s = t.scalar_type();
  if (s != at::kFloat && s != at::kHalf && s != at::kBFloat16) {
    fail(fn, arg, fmt::format("must have dtype Float, Half or BFloat16, got {}", c10::toString(s)));
  }
}

void check_indices(const CallSite& fn, const at::Tensor& indices, int64_t n,
                   const at::Tensor& ref) {
  check_on_device(fn, "indices", indices);
  if (indices.scalar_type() != at::kInt && indices.scalar_type() != at::kLong) {
    fail(fn, "indices", fmt::format("must have dtype Int or Long, got {}",
                                    c10::toString(indices.scalar_type())));
  }
  if (indices.dim() != 1) {
    fail(fn, "indices", fmt::format("must have 1 dimension, got shape {}", shape_str(indices)));
  }
  if (n >= 0) check_size(fn, "indices", indices, 0, n);
  check_same_device(fn, ref, "indices", indices);
}

// state [num_slots, ...] (rank >= 2) with state[0] contiguous; returns the row size.
int64_t check_state_rows(const CallSite& fn, const char* arg, const at::Tensor& state) {
  check_on_device(fn, arg, state);
  check_state_dtype(fn, arg, state);
  if (state.dim() < 2) {
    fail(fn, arg, fmt::format("must have at least 2 dimensions, got shape {}", shape_str(state)));
  }
  if (state.size(0) < 1) fail(fn, arg, "has no rows");
  const at::Tensor row = state.select(0, 0);
  if (!row.is_contiguous()) fail(fn, arg, "must have contiguous rows (state[0] contiguous)");
  if (row.numel() == 0) fail(fn, arg, "has empty rows");
  return row.numel();
}

/// The (seq, dim, token) strides of x or out as the conv update kernel indexes them.
struct SeqDimTokenStrides {
  int64_t seq, dim, token;
};

/// Fills the conv update's constexprs and launches it: the plain decode (num_accepted_tokens
/// and query_start_loc undefined) or the varlen spec-decoding path (both defined). The wrappers
/// have checked every argument; b > 0 requests.
void launch_conv_update(jit::JitRuntime& rt, const CallSite& fn, const at::Tensor& x,
                        const at::Tensor& conv_states, const at::Tensor& weight,
                        const at::Tensor& bias, Activation act,
                        const at::Tensor& conv_state_indices,
                        const at::Tensor& num_accepted_tokens, const at::Tensor& query_start_loc,
                        const at::Tensor& out, int64_t b, int seqlen, SeqDimTokenStrides xs,
                        SeqDimTokenStrides os) {
  const bool spec = num_accepted_tokens.defined();
  const int64_t dim = x.size(1);
  ConvUpdateSpec s;
  s.dim = dim;
  s.seqlen = seqlen;
  s.num_cache_lines = conv_states.size(0);
  s.stride_x_seq = xs.seq;
  s.stride_x_dim = xs.dim;
  s.stride_x_token = xs.token;
  s.stride_w_dim = weight.stride(0);
  s.stride_w_width = weight.stride(1);
  s.stride_state_seq = conv_states.stride(0);
  s.stride_state_dim = conv_states.stride(2);
  s.stride_state_tok = conv_states.stride(1);
  s.stride_state_indices = conv_state_indices.stride(0);
  s.stride_o_seq = os.seq;
  s.stride_o_dim = os.dim;
  s.stride_o_token = os.token;
  s.width = static_cast<int>(weight.size(1));
  s.has_bias = bias.defined();
  s.silu = act == Activation::kSilu;
  s.varlen = spec;
  s.spec_decoding = spec;
  const KernelArg null_i32 = KernelArg::pointer(0, jit::DType::kI32);
  rt.launch(conv_update_kernel(), conv_update_constexprs(s),
            {tensor_arg(x), tensor_arg(weight),
             bias.defined() ? tensor_arg(bias) : KernelArg::pointer(0, jit::DType::kBF16),
             tensor_arg(conv_states), tensor_arg(conv_state_indices),
             spec ? tensor_arg(num_accepted_tokens) : null_i32,
             spec ? tensor_arg(query_start_loc) : null_i32, tensor_arg(out),
             KernelArg::i32(to_i32(fn, spec ? "conv_state_indices" : "x", b))},
            dims(grid_dim(fn, "x (batch)", b, 0x7fffffff),
                 grid_dim(fn, "y (channel blocks)", (dim + kConvBlockN - 1) / kConvBlockN, 65535),
                 1, kConvBlockN),
            stream_for(x));
}

}  // namespace

void causal_conv1d_fwd(jit::JitRuntime& rt, const at::Tensor& x, const at::Tensor& weight,
                       const at::Tensor& bias, const at::Tensor& conv_states,
                       const at::Tensor& query_start_loc, const at::Tensor& cache_indices,
                       const at::Tensor& has_initial_state, Activation act,
                       const at::Tensor& out) {
  const CallSite fn{kFamily, "causal_conv1d_fwd"};
  const int64_t dim = check_conv_x(fn, x);
  const int64_t t = x.size(0);
  const int width = check_weight_bias(fn, weight, bias, dim, x);
  check_conv_states(fn, conv_states, dim, width, x);
  check(fn, "query_start_loc", query_start_loc, at::kInt, 1, Layout::kContiguous);
  check(fn, "cache_indices", cache_indices, at::kInt, 1, Layout::kAny);
  check(fn, "has_initial_state", has_initial_state, at::kBool, 1, Layout::kContiguous);
  check_conv_out(fn, out, x);
  check_conv_act(fn, act);
  const int64_t b = query_start_loc.size(0) - 1;
  if (b < 0) fail(fn, "query_start_loc", "must have B + 1 >= 1 entries");
  check_size(fn, "cache_indices", cache_indices, 0, b);
  check_size(fn, "has_initial_state", has_initial_state, 0, b);
  if (overlaps(out, x)) fail(fn, "out", "overlaps x (the prefill conv cannot run in place)");
  for (const auto& [name, tensor] : {std::pair<const char*, const at::Tensor*>{"query_start_loc", &query_start_loc},
                                     {"cache_indices", &cache_indices},
                                     {"has_initial_state", &has_initial_state},
                                     {"out", &out}}) {
    check_same_device(fn, x, name, *tensor);
  }
  if (b == 0 || t == 0) return;

  ConvFwdSpec s;
  s.dim = dim;
  s.num_cache_lines = conv_states.size(0);
  s.stride_x_dim = x.stride(1);
  s.stride_x_token = x.stride(0);
  s.stride_w_dim = weight.stride(0);
  s.stride_w_width = weight.stride(1);
  s.stride_istate_seq = conv_states.stride(0);
  s.stride_istate_dim = conv_states.stride(2);
  s.stride_istate_token = conv_states.stride(1);
  s.stride_cache_indices = cache_indices.stride(0);
  s.stride_o_dim = out.stride(1);
  s.stride_o_token = out.stride(0);
  s.width = width;
  s.has_bias = bias.defined();
  s.silu = act == Activation::kSilu;
  // Upper bound of the (sequence, chunk) programs: sum cdiv(len_b, BLOCK_M) <= cdiv(T, BLOCK_M) + B.
  const int64_t programs = (t + kConvBlockM - 1) / kConvBlockM + b;
  rt.launch(conv_fwd_kernel(), conv_fwd_constexprs(s),
            {tensor_arg(x), tensor_arg(weight),
             bias.defined() ? tensor_arg(bias) : KernelArg::pointer(0, jit::DType::kBF16),
             tensor_arg(conv_states), tensor_arg(cache_indices), bool_arg(has_initial_state),
             tensor_arg(query_start_loc), tensor_arg(out), KernelArg::i32(to_i32(fn, "x", t)),
             KernelArg::i32(to_i32(fn, "query_start_loc", b))},
            dims(grid_dim(fn, "x (programs)", programs, 0x7fffffff),
                 grid_dim(fn, "y (channel blocks)", (dim + kConvBlockN - 1) / kConvBlockN, 65535),
                 1, kConvBlockN),
            stream_for(x));
}

void causal_conv1d_update(jit::JitRuntime& rt, const at::Tensor& x, const at::Tensor& conv_states,
                          const at::Tensor& weight, const at::Tensor& bias, Activation act,
                          const at::Tensor& conv_state_indices, const at::Tensor& out) {
  const CallSite fn{kFamily, "causal_conv1d_update"};
  const int64_t dim = check_conv_x(fn, x);
  const int64_t b = x.size(0);
  const int width = check_weight_bias(fn, weight, bias, dim, x);
  check_conv_states(fn, conv_states, dim, width, x);
  check(fn, "conv_state_indices", conv_state_indices, at::kInt, 1, Layout::kAny);
  check_conv_out(fn, out, x);
  check_conv_act(fn, act);
  check_size(fn, "conv_state_indices", conv_state_indices, 0, b);
  if (!same_view(out, x) && overlaps(out, x)) {
    fail(fn, "out", "overlaps x without being the same view");
  }
  check_same_device(fn, x, "conv_state_indices", conv_state_indices);
  check_same_device(fn, x, "out", out);
  if (b == 0) return;

  // vLLM unsqueezes x to [B, dim, 1]: the token stride of the new last dimension is 1.
  launch_conv_update(rt, fn, x, conv_states, weight, bias, act, conv_state_indices, at::Tensor(),
                     at::Tensor(), out, b, /*seqlen=*/1, {x.stride(0), x.stride(1), 1},
                     {out.stride(0), out.stride(1), 1});
}

void causal_conv1d_update_varlen_spec(jit::JitRuntime& rt, const at::Tensor& x,
                                      const at::Tensor& conv_states, const at::Tensor& weight,
                                      const at::Tensor& bias, Activation act,
                                      const at::Tensor& conv_state_indices,
                                      const at::Tensor& num_accepted_tokens,
                                      const at::Tensor& query_start_loc, int max_query_len,
                                      const at::Tensor& out) {
  const CallSite fn{kFamily, "causal_conv1d_update_varlen_spec"};
  const int64_t dim = check_conv_x(fn, x);
  const int64_t t = x.size(0);
  if (max_query_len < 1) {
    fail(fn, "max_query_len", fmt::format("is {}; it must be at least 1", max_query_len));
  }
  const int width = check_weight_bias(fn, weight, bias, dim, x);
  check_conv_states(fn, conv_states, dim, width, x);
  // The kernel reads the window from row num_accepted_tokens - 1 <= max_query_len - 1 and
  // rewrites up to width - 2 + max_query_len rows.
  const int64_t rows_needed = width - 1 + (int64_t{max_query_len} - 1);
  if (conv_states.size(1) < rows_needed) {
    fail(fn, "conv_states",
         fmt::format("has shape {}; speculative decoding with max_query_len {} needs at least "
                     "width - 1 + (max_query_len - 1) = {} rows (vLLM sizes the conv state "
                     "width - 1 + num_speculative_tokens)",
                     shape_str(conv_states), max_query_len, rows_needed));
  }
  check(fn, "conv_state_indices", conv_state_indices, at::kInt, 1, Layout::kAny);
  const int64_t b = conv_state_indices.size(0);
  check(fn, "num_accepted_tokens", num_accepted_tokens, at::kInt, 1, Layout::kContiguous);
  check_size(fn, "num_accepted_tokens", num_accepted_tokens, 0, b);
  check(fn, "query_start_loc", query_start_loc, at::kInt, 1, Layout::kContiguous);
  check_size(fn, "query_start_loc", query_start_loc, 0, b + 1);
  check_conv_out(fn, out, x);
  check_conv_act(fn, act);
  if (overlaps(out, x)) {
    fail(fn, "out", "overlaps x (vLLM writes the verify update into a new tensor)");
  }
  for (const auto& [name, tensor] :
       {std::pair<const char*, const at::Tensor*>{"conv_state_indices", &conv_state_indices},
        {"num_accepted_tokens", &num_accepted_tokens},
        {"query_start_loc", &query_start_loc},
        {"out", &out}}) {
    check_same_device(fn, x, name, *tensor);
  }
  if (b == 0 || t == 0) return;

  // vLLM's varlen view: x and out flat (token, dim), no per-request stride.
  launch_conv_update(rt, fn, x, conv_states, weight, bias, act, conv_state_indices,
                     num_accepted_tokens, query_start_loc, out, b, max_query_len,
                     {0, x.stride(1), x.stride(0)}, {0, out.stride(1), out.stride(0)});
}

void gated_rms_norm(jit::JitRuntime& rt, const at::Tensor& x, const at::Tensor& z,
                    const at::Tensor& weight, double eps, bool norm_before_gate, Activation act,
                    int64_t group_size, int num_sms, const at::Tensor& out) {
  const CallSite fn{kFamily, "gated_rms_norm"};
  check(fn, "x", x, at::kBFloat16, 2, Layout::kInnerContiguous);
  check(fn, "z", z, at::kBFloat16, 2, Layout::kInnerContiguous);
  check_on_device(fn, "weight", weight);
  if (weight.scalar_type() != at::kBFloat16 && weight.scalar_type() != at::kFloat) {
    fail(fn, "weight", fmt::format("must have dtype BFloat16 or Float, got {}",
                                   c10::toString(weight.scalar_type())));
  }
  check(fn, "weight", weight, weight.scalar_type(), 1, Layout::kContiguous);
  check(fn, "out", out, at::kBFloat16, 2, Layout::kInnerContiguous);
  const int64_t m = x.size(0);
  const int64_t n = x.size(1);
  if (z.sizes() != x.sizes()) {
    fail(fn, "z", fmt::format("has shape {}, x has {}", shape_str(z), shape_str(x)));
  }
  if (out.sizes() != x.sizes()) {
    fail(fn, "out", fmt::format("has shape {}, x has {}", shape_str(out), shape_str(x)));
  }
  check_size(fn, "weight", weight, 0, n);
  if (group_size <= 0 || n % group_size != 0) {
    throw Error(fmt::format("{}::{}: group_size {} does not divide N = {}", fn.family, fn.name,
                            group_size, n));
  }
  if (!(eps >= 0)) {
    throw Error(fmt::format("{}::{}: eps {} must be non-negative", fn.family, fn.name, eps));
  }
  check_same_device(fn, x, "z", z);
  check_same_device(fn, x, "weight", weight);
  check_same_device(fn, x, "out", out);
  std::vector<jit::Constexpr> cs;
  int rpb = 1;
  try {
    rpb = gated_rms_norm_rows_per_block(m, num_sms);
    cs = gated_rms_norm_constexprs(group_size, rpb, norm_before_gate, act,
                                   to_jit_dtype(weight.scalar_type()));
  } catch (const InputError& e) {
    throw Error(fmt::format("{}::{}: {}", fn.family, fn.name, e.what()));
  }
  if (m == 0) return;
  const int threads = 32 * gated_rms_norm_num_warps(gated_rms_norm_block_n(group_size));
  rt.launch(gated_rms_norm_kernel(), cs,
            {tensor_arg(x), tensor_arg(out), tensor_arg(weight), tensor_arg(z),
             KernelArg::pointer(0, jit::DType::kF32), KernelArg::i64(x.stride(0)),
             KernelArg::i64(out.stride(0)), KernelArg::i64(z.stride(0)),
             KernelArg::i32(to_i32(fn, "x", m)), KernelArg::f32(static_cast<float>(eps))},
            dims(grid_dim(fn, "x (row blocks)", (m + rpb - 1) / rpb, 0x7fffffff),
                 grid_dim(fn, "y (groups)", n / group_size, 65535), 1,
                 static_cast<unsigned>(threads)),
            stream_for(x));
}

void gather_initial_states(jit::JitRuntime& rt, const at::Tensor& state, const at::Tensor& indices,
                           const at::Tensor& has_initial_state, const at::Tensor& out,
                           std::optional<bool> launch_pdl) {
  const CallSite fn{kFamily, "gather_initial_states"};
  const int64_t row = check_state_rows(fn, "state", state);
  check_indices(fn, indices, -1, state);
  const int64_t n = indices.size(0);
  check(fn, "has_initial_state", has_initial_state, at::kBool, 1, Layout::kAny);
  check_size(fn, "has_initial_state", has_initial_state, 0, n);
  check_same_device(fn, state, "has_initial_state", has_initial_state);
  check(fn, "out", out, state.scalar_type(), state.dim(), Layout::kContiguous);
  check_size(fn, "out", out, 0, n);
  for (int64_t d = 1; d < state.dim(); ++d) check_size(fn, "out", out, d, state.size(d));
  check_same_device(fn, state, "out", out);
  if (n == 0) return;
  const int64_t block = state_block_size(row);
  rt.launch(gather_kernel(),
            gather_constexprs(row, pdl_or_default(rt, launch_pdl),
                              to_jit_dtype(state.scalar_type()),
                              to_jit_dtype(indices.scalar_type())),
            {tensor_arg(state), tensor_arg(indices), bool_arg(has_initial_state), tensor_arg(out),
             KernelArg::i64(state.stride(0)), KernelArg::i64(indices.stride(0)),
             KernelArg::i64(has_initial_state.stride(0))},
            dims(grid_dim(fn, "x (row blocks)", (row + block - 1) / block, 0x7fffffff),
                 grid_dim(fn, "y (rows)", n, 65535), 1, kStateThreads),
            stream_for(state));
}

void scatter_states(jit::JitRuntime& rt, const at::Tensor& state, const at::Tensor& src,
                    const at::Tensor& indices, std::optional<bool> launch_pdl) {
  const CallSite fn{kFamily, "scatter_states"};
  const int64_t row = check_state_rows(fn, "state", state);
  check_on_device(fn, "src", src);
  check_state_dtype(fn, "src", src);
  if (src.dim() != state.dim()) {
    fail(fn, "src", fmt::format("has shape {}; it must have state's rank {}", shape_str(src),
                                state.dim()));
  }
  for (int64_t d = 1; d < state.dim(); ++d) check_size(fn, "src", src, d, state.size(d));
  const int64_t n = src.size(0);
  if (n > 0 && !src.select(0, 0).is_contiguous()) {
    fail(fn, "src", "must have contiguous rows (src[0] contiguous)");
  }
  check_same_device(fn, state, "src", src);
  check_indices(fn, indices, n, state);
  if (n == 0) return;
  const int64_t block = state_block_size(row);
  rt.launch(scatter_kernel(),
            scatter_constexprs(row, pdl_or_default(rt, launch_pdl),
                               to_jit_dtype(src.scalar_type()),
                               to_jit_dtype(state.scalar_type()),
                               to_jit_dtype(indices.scalar_type())),
            {tensor_arg(state), tensor_arg(src), tensor_arg(indices),
             KernelArg::i64(state.stride(0)), KernelArg::i64(src.stride(0)),
             KernelArg::i64(indices.stride(0))},
            dims(grid_dim(fn, "x (row blocks)", (row + block - 1) / block, 0x7fffffff),
                 grid_dim(fn, "y (rows)", n, 65535), 1, kStateThreads),
            stream_for(state));
}

}  // namespace coldstart::mamba_ops
