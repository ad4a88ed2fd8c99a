#include "harness/kernels/mamba_ssd/mamba_ssd.h"

#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "harness/jit/select.h"
#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::mamba_ssd {
namespace {

using jit::KernelArg;
using jit::KernelConfig;
using namespace kernels;  // launch_util.h: the argument checks and launch helpers

constexpr const char* kFamily = "mamba_ssd";
// dtype, device kind and an optional layout, any rank (the shape is checked separately).
void check_dtype(const CallSite& fn, const char* arg, const at::Tensor& t, at::ScalarType dtype) {
  check(fn, arg, t, dtype, t.defined() ? t.dim() : 0, Layout::kAny);
}

// bf16 rows read as 32-bit pairs: innermost dimension contiguous, even outer strides, 4-byte base.
void check_pairs(const CallSite& fn, const char* arg, const at::Tensor& t) {
  if (t.stride(-1) != 1) fail(fn, arg, "must have a contiguous innermost dimension");
  for (int64_t i = 0; i + 1 < t.dim(); ++i) {
    if (t.stride(i) % 2 != 0) {
      fail(fn, arg,
           fmt::format("must have even strides (bf16 pairs), got stride {} in dimension {}",
                       t.stride(i), i));
    }
  }
  check_aligned(fn, arg, t, 4);
}

void check_int_vector(const CallSite& fn, const char* arg, const at::Tensor& t, int64_t n) {
  check(fn, arg, t, at::kInt, 1, Layout::kContiguous);
  check_size(fn, arg, t, 0, n);
}

// float32 / bfloat16 / float16 storage.
void check_float_dtype(const CallSite& fn, const char* arg, at::ScalarType t) {
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) {
    fail(fn, arg, fmt::format("must be float32, bfloat16 or float16, got {}", c10::toString(t)));
  }
}

std::optional<jit::DType> dtype_or_none(const at::Tensor& t) {
  if (!t.defined()) return std::nullopt;
  return to_jit_dtype(t.scalar_type());
}

KernelArg ptr_or_null(const at::Tensor& t, jit::DType fallback) {
  return t.defined() ? tensor_arg(t) : KernelArg::pointer(0, fallback);
}

int64_t num_chunks_of(const CallSite& fn, const at::Tensor& cu_chunk_seqlens) {
  check(fn, "cu_chunk_seqlens", cu_chunk_seqlens, at::kInt, 1, Layout::kContiguous);
  const int64_t n = cu_chunk_seqlens.size(0) - 1;
  if (n < 1) fail(fn, "cu_chunk_seqlens", "must describe at least one chunk ([nchunks + 1])");
  return n;
}

}  // namespace

CumsumOut chunk_cumsum_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& dt,
                           const at::Tensor& A, const at::Tensor& cu_chunk_seqlens,
                           const at::Tensor& dt_bias, bool dt_softplus, double dt_limit_lo,
                           double dt_limit_hi) {
  const CallSite fn{kFamily, "chunk_cumsum_fwd"};
  d.validate();
  check(fn, "dt", dt, at::kBFloat16, 2, Layout::kAny);
  check(fn, "A", A, at::kFloat, 1, Layout::kContiguous);
  const int64_t T = dt.size(0), H = d.nheads, cs = d.chunk_size;
  check_shape(fn, "dt", dt, {T, H});
  check_shape(fn, "A", A, {H});
  const int64_t nchunks = num_chunks_of(fn, cu_chunk_seqlens);
  if (dt_bias.defined()) {
    check_on_device(fn, "dt_bias", dt_bias);
    check_float_dtype(fn, "dt_bias", dt_bias.scalar_type());
    check_shape(fn, "dt_bias", dt_bias, {H});
    check_same_device(fn, dt, "dt_bias", dt_bias);
  }
  check_same_device(fn, dt, "A", A);
  check_same_device(fn, dt, "cu_chunk_seqlens", cu_chunk_seqlens);
  if (std::isnan(dt_limit_lo) || std::isnan(dt_limit_hi) || dt_limit_lo > dt_limit_hi) {
    fail(fn, "dt_limit", fmt::format("({}, {}) is not a range", dt_limit_lo, dt_limit_hi));
  }
  const auto f32 = dt.options().dtype(at::kFloat);
  CumsumOut o{at::empty({H, nchunks, cs}, f32), at::empty({H, nchunks, cs}, f32)};
  CumsumFlags flags;
  flags.dt_softplus = dt_softplus;
  flags.has_dt_bias = dt_bias.defined();
  flags.dt_min = dt_limit_lo;
  flags.dt_max = dt_limit_hi;
  flags.stride_dt_head = dt.stride(1);
  flags.stride_dt_bias_head = dt_bias.defined() ? dt_bias.stride(0) : 0;
  flags.dt_bias_dtype = dt_bias.defined() ? to_jit_dtype(dt_bias.scalar_type()) : jit::DType::kF32;
  void* stream = stream_for(dt);
  const unsigned gx = grid_dim(fn, "x (chunks)", nchunks, kMaxGridX);
  tuned_launch(rt, cumsum_kernel(), cumsum_tuning_key(d, jit::DType::kBF16, dtype_or_none(dt_bias)),
               cumsum_candidates(), stream, [&](const KernelConfig& c) {
                 const int64_t bh = config_value(c, "BLOCK_SIZE_H", 1);
                 rt.launch(cumsum_kernel(), cumsum_constexprs(d, flags, c),
                           {tensor_arg(dt), tensor_arg(A), ptr_or_null(dt_bias, jit::DType::kF32),
                            tensor_arg(o.dt), tensor_arg(o.dA_cumsum), tensor_arg(cu_chunk_seqlens),
                            KernelArg::i64(dt.stride(0)), KernelArg::i64(o.dt.stride(0)),
                            KernelArg::i64(o.dt.stride(1)), KernelArg::i64(o.dA_cumsum.stride(0)),
                            KernelArg::i64(o.dA_cumsum.stride(1))},
                           dims(gx, grid_dim(fn, "y (head blocks)", cdiv(H, bh), kMaxGridYZ), 1,
                                c.threads()),
                           stream);
               });
  return o;
}

at::Tensor chunk_state_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& B,
                           const at::Tensor& x, const at::Tensor& dt, const at::Tensor& dA_cumsum,
                           const at::Tensor& cu_chunk_seqlens) {
  const CallSite fn{kFamily, "chunk_state_fwd"};
  d.validate();
  check(fn, "B", B, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "x", x, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "dt", dt, at::kFloat, 3, Layout::kContiguous);
  check(fn, "dA_cumsum", dA_cumsum, at::kFloat, 3, Layout::kContiguous);
  const int64_t T = x.size(0), H = d.nheads, P = d.head_dim, G = d.ngroups, N = d.dstate;
  const int64_t nchunks = num_chunks_of(fn, cu_chunk_seqlens);
  check_shape(fn, "x", x, {T, H, P});
  check_shape(fn, "B", B, {T, G, N});
  check_shape(fn, "dt", dt, {H, nchunks, d.chunk_size});
  check_shape(fn, "dA_cumsum", dA_cumsum, {H, nchunks, d.chunk_size});
  check_pairs(fn, "x", x);
  check_pairs(fn, "B", B);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"B", &B},
                                {"dt", &dt},
                                {"dA_cumsum", &dA_cumsum},
                                {"cu_chunk_seqlens", &cu_chunk_seqlens}}) {
    check_same_device(fn, x, name, *t);
  }
  at::Tensor states = at::empty({nchunks, H, P, N}, x.options().dtype(at::kFloat));
  void* stream = stream_for(x);
  tuned_launch(
      rt, chunk_state_kernel(), chunk_state_tuning_key(d, jit::DType::kBF16),
      chunk_state_candidates(), stream, [&](const KernelConfig& c) {
        const int64_t bm = config_value(c, "BLOCK_SIZE_M", 64),
                      bn = config_value(c, "BLOCK_SIZE_N", 64);
        jit::LaunchDims ld = dims(grid_dim(fn, "x (tiles)", cdiv(P, bm) * cdiv(N, bn), kMaxGridX),
                                  grid_dim(fn, "y (chunks)", nchunks, kMaxGridYZ),
                                  grid_dim(fn, "z (heads)", H, kMaxGridYZ), c.threads());
        ld.shared_bytes = chunk_state_smem_bytes(d, c);
        rt.launch(chunk_state_kernel(), chunk_state_constexprs(d, c),
                  {tensor_arg(x), tensor_arg(B), tensor_arg(states), tensor_arg(dt),
                   tensor_arg(dA_cumsum), tensor_arg(cu_chunk_seqlens), KernelArg::i64(x.stride(0)),
                   KernelArg::i64(x.stride(1)), KernelArg::i64(B.stride(0)),
                   KernelArg::i64(B.stride(1)), KernelArg::i64(states.stride(0)),
                   KernelArg::i64(states.stride(1)), KernelArg::i64(states.stride(2)),
                   KernelArg::i64(dt.stride(0)), KernelArg::i64(dt.stride(1)),
                   KernelArg::i64(dA_cumsum.stride(0)), KernelArg::i64(dA_cumsum.stride(1))},
                  ld, stream);
      });
  return states;
}

at::Tensor state_passing_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& states,
                             const at::Tensor& dA_cumsum, const at::Tensor& last_chunk_indices,
                             const at::Tensor& initial_states, at::ScalarType out_dtype) {
  const CallSite fn{kFamily, "state_passing_fwd"};
  d.validate();
  check(fn, "states", states, at::kFloat, 4, Layout::kContiguous);
  check(fn, "dA_cumsum", dA_cumsum, at::kFloat, 3, Layout::kContiguous);
  check(fn, "last_chunk_indices", last_chunk_indices, at::kInt, 1, Layout::kContiguous);
  check_float_dtype(fn, "out_dtype", out_dtype);
  const int64_t H = d.nheads, P = d.head_dim, N = d.dstate;
  const int64_t nchunks = states.size(0), batch = last_chunk_indices.size(0);
  check_shape(fn, "states", states, {nchunks, H, P, N});
  check_shape(fn, "dA_cumsum", dA_cumsum, {H, nchunks, d.chunk_size});
  if (initial_states.defined()) {
    check_on_device(fn, "initial_states", initial_states);
    check_float_dtype(fn, "initial_states", initial_states.scalar_type());
    check_shape(fn, "initial_states", initial_states, {batch, H, P, N});
    if (initial_states.stride(3) != 1 || initial_states.stride(2) != N) {
      fail(fn, "initial_states", "must have each [P, N] state contiguous");
    }
    check_same_device(fn, states, "initial_states", initial_states);
  }
  check_same_device(fn, states, "dA_cumsum", dA_cumsum);
  check_same_device(fn, states, "last_chunk_indices", last_chunk_indices);
  at::Tensor out = at::empty({nchunks, H, P, N}, states.options().dtype(out_dtype));
  if (batch == 0) return out;
  const bool has_init = initial_states.defined();
  const jit::DType out_jit = to_jit_dtype(out_dtype);
  const jit::DType init_jit = has_init ? to_jit_dtype(initial_states.scalar_type()) : out_jit;
  const int64_t dim = P * N;
  void* stream = stream_for(states);
  tuned_launch(rt, state_passing_kernel(),
               state_passing_tuning_key(d, out_jit, dtype_or_none(initial_states)),
               state_passing_candidates(), stream, [&](const KernelConfig& c) {
                 const int64_t bs = config_value(c, "BLOCK_SIZE", 64);
                 rt.launch(
                     state_passing_kernel(),
                     state_passing_constexprs(d, has_init, out_jit, init_jit, c),
                     {tensor_arg(states), tensor_arg(out), tensor_arg(dA_cumsum),
                      ptr_or_null(initial_states, init_jit), tensor_arg(last_chunk_indices),
                      KernelArg::i64(states.stride(0)), KernelArg::i64(states.stride(1)),
                      KernelArg::i64(out.stride(0)), KernelArg::i64(out.stride(1)),
                      KernelArg::i64(dA_cumsum.stride(0)), KernelArg::i64(dA_cumsum.stride(1)),
                      KernelArg::i64(has_init ? initial_states.stride(0) : 0),
                      KernelArg::i64(has_init ? initial_states.stride(1) : 0)},
                     dims(grid_dim(fn, "x (state blocks)", cdiv(dim, bs), kMaxGridX),
                          grid_dim(fn, "y (sequences)", batch, kMaxGridYZ),
                          grid_dim(fn, "z (heads)", H, kMaxGridYZ), c.threads()),
                     stream);
               });
  return out;
}

at::Tensor bmm_chunk_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& C,
                         const at::Tensor& B, const at::Tensor& cu_chunk_seqlens) {
  const CallSite fn{kFamily, "bmm_chunk_fwd"};
  d.validate();
  check(fn, "C", C, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "B", B, at::kBFloat16, 3, Layout::kInnerContiguous);
  const int64_t T = C.size(0), G = d.ngroups, N = d.dstate, cs = d.chunk_size;
  const int64_t nchunks = num_chunks_of(fn, cu_chunk_seqlens);
  check_shape(fn, "C", C, {T, G, N});
  check_shape(fn, "B", B, {T, G, N});
  check_pairs(fn, "C", C);
  check_pairs(fn, "B", B);
  check_same_device(fn, C, "B", B);
  check_same_device(fn, C, "cu_chunk_seqlens", cu_chunk_seqlens);
  at::Tensor out = at::empty({nchunks, G, cs, cs}, C.options().dtype(at::kFloat));
  void* stream = stream_for(C);
  tuned_launch(rt, bmm_kernel(), bmm_tuning_key(d, jit::DType::kBF16), bmm_candidates(), stream,
               [&](const KernelConfig& c) {
                 const int64_t bm = config_value(c, "BLOCK_SIZE_M", 64),
                               bn = config_value(c, "BLOCK_SIZE_N", 64);
                 jit::LaunchDims ld = dims(
                     grid_dim(fn, "x (tiles)", cdiv(cs, bm) * cdiv(cs, bn), kMaxGridX),
                     grid_dim(fn, "y (chunks x groups)", nchunks * G, kMaxGridYZ), 1, c.threads());
                 ld.shared_bytes = bmm_smem_bytes(d, c);
                 rt.launch(bmm_kernel(), bmm_constexprs(d, c),
                           {tensor_arg(C), tensor_arg(B), tensor_arg(out),
                            tensor_arg(cu_chunk_seqlens), KernelArg::i64(C.stride(0)),
                            KernelArg::i64(C.stride(1)), KernelArg::i64(B.stride(0)),
                            KernelArg::i64(B.stride(1)), KernelArg::i64(out.stride(0)),
                            KernelArg::i64(out.stride(1)), KernelArg::i64(out.stride(2))},
                           ld, stream);
               });
  return out;
}

void chunk_scan_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& CB,
                    const at::Tensor& x, const at::Tensor& dt, const at::Tensor& dA_cumsum,
                    const at::Tensor& C, const at::Tensor& states,
                    const at::Tensor& cu_chunk_seqlens, const at::Tensor& out,
                    const at::Tensor& seq_idx, const at::Tensor& D,
                    const at::Tensor& initial_states) {
  const CallSite fn{kFamily, "chunk_scan_fwd"};
  d.validate();
  check(fn, "CB", CB, at::kFloat, 4, Layout::kContiguous);
  check(fn, "x", x, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "dt", dt, at::kFloat, 3, Layout::kContiguous);
  check(fn, "dA_cumsum", dA_cumsum, at::kFloat, 3, Layout::kContiguous);
  check(fn, "C", C, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "states", states, states.defined() ? states.scalar_type() : at::kFloat, 4,
        Layout::kContiguous);
  check_float_dtype(fn, "states", states.scalar_type());
  check(fn, "out", out, at::kBFloat16, 3, Layout::kInnerContiguous);
  const int64_t T = x.size(0), H = d.nheads, P = d.head_dim, G = d.ngroups, N = d.dstate;
  const int64_t cs = d.chunk_size;
  const int64_t nchunks = num_chunks_of(fn, cu_chunk_seqlens);
  check_shape(fn, "CB", CB, {nchunks, G, cs, cs});
  check_shape(fn, "x", x, {T, H, P});
  check_shape(fn, "dt", dt, {H, nchunks, cs});
  check_shape(fn, "dA_cumsum", dA_cumsum, {H, nchunks, cs});
  check_shape(fn, "C", C, {T, G, N});
  check_shape(fn, "states", states, {nchunks, H, P, N});
  check_shape(fn, "out", out, {T, H, P});
  check_int_vector(fn, "seq_idx", seq_idx, nchunks);
  check_pairs(fn, "x", x);
  check_pairs(fn, "C", C);
  check_pairs(fn, "out", out);
  if (D.defined()) {
    check_on_device(fn, "D", D);
    if (D.scalar_type() != at::kFloat && D.scalar_type() != at::kBFloat16) {
      fail(fn, "D",
           fmt::format("must be float32 or bfloat16, got {}", c10::toString(D.scalar_type())));
    }
    if (D.dim() == 1) {
      check_shape(fn, "D", D, {H});
    } else {
      check_shape(fn, "D", D, {H, P});
      if (D.stride(1) != 1) fail(fn, "D", "must have a contiguous innermost dimension");
    }
    check_same_device(fn, x, "D", D);
  }
  if (initial_states.defined()) {
    check_on_device(fn, "initial_states", initial_states);
    check_float_dtype(fn, "initial_states", initial_states.scalar_type());
    if (initial_states.dim() != 4 || initial_states.size(1) != H || initial_states.size(2) != P ||
        initial_states.size(3) != N || initial_states.stride(3) != 1) {
      fail(fn, "initial_states",
           fmt::format("must be [B, {}, {}, {}] with a contiguous innermost dimension, got {}", H,
                       P, N, shape_str(initial_states)));
    }
    check_same_device(fn, x, "initial_states", initial_states);
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"CB", &CB},
                                {"dt", &dt},
                                {"dA_cumsum", &dA_cumsum},
                                {"C", &C},
                                {"states", &states},
                                {"cu_chunk_seqlens", &cu_chunk_seqlens},
                                {"out", &out},
                                {"seq_idx", &seq_idx}}) {
    check_same_device(fn, x, name, *t);
  }
  ScanFlags f;
  f.has_d = D.defined();
  f.d_has_hdim = D.defined() && D.dim() == 2;
  f.stride_D_head = D.defined() ? D.stride(0) : 0;
  f.has_initstates = initial_states.defined();
  f.states_dtype = to_jit_dtype(states.scalar_type());
  f.init_dtype = f.has_initstates ? to_jit_dtype(initial_states.scalar_type()) : f.states_dtype;
  f.d_dtype = D.defined() ? to_jit_dtype(D.scalar_type()) : jit::DType::kF32;
  const KernelArg none_z = KernelArg::pointer(0, jit::DType::kBF16);
  const int64_t is0 = f.has_initstates ? initial_states.stride(0) : 0;
  const int64_t is1 = f.has_initstates ? initial_states.stride(1) : 0;
  const int64_t is2 = f.has_initstates ? initial_states.stride(2) : 0;
  void* stream = stream_for(out);
  tuned_launch(rt, chunk_scan_kernel(),
               chunk_scan_tuning_key(d, jit::DType::kBF16, f.states_dtype, dtype_or_none(D),
                                     dtype_or_none(initial_states)),
               chunk_scan_candidates(), stream, [&](const KernelConfig& c) {
                 const int64_t bm = config_value(c, "BLOCK_SIZE_M", 64),
                               bn = config_value(c, "BLOCK_SIZE_N", 64);
                 jit::LaunchDims ld =
                     dims(grid_dim(fn, "x (tiles)", cdiv(cs, bm) * cdiv(P, bn), kMaxGridX),
                          grid_dim(fn, "y (chunks)", nchunks, kMaxGridYZ),
                          grid_dim(fn, "z (heads)", H, kMaxGridYZ), c.threads());
                 ld.shared_bytes = chunk_scan_smem_bytes(d, c);
                 rt.launch(chunk_scan_kernel(), chunk_scan_constexprs(d, f, c),
                           {tensor_arg(CB),
                            tensor_arg(x),
                            none_z,
                            tensor_arg(out),
                            tensor_arg(dt),
                            tensor_arg(dA_cumsum),
                            tensor_arg(seq_idx),
                            tensor_arg(C),
                            tensor_arg(states),
                            ptr_or_null(D, f.d_dtype),
                            ptr_or_null(initial_states, f.init_dtype),
                            tensor_arg(cu_chunk_seqlens),
                            KernelArg::i64(CB.stride(0)),
                            KernelArg::i64(CB.stride(1)),
                            KernelArg::i64(CB.stride(2)),
                            KernelArg::i64(x.stride(0)),
                            KernelArg::i64(x.stride(1)),
                            KernelArg::i64(0),
                            KernelArg::i64(0),
                            KernelArg::i64(out.stride(0)),
                            KernelArg::i64(out.stride(1)),
                            KernelArg::i64(dt.stride(1)),
                            KernelArg::i64(dt.stride(0)),
                            KernelArg::i64(dA_cumsum.stride(1)),
                            KernelArg::i64(dA_cumsum.stride(0)),
                            KernelArg::i64(C.stride(0)),
                            KernelArg::i64(C.stride(1)),
                            KernelArg::i64(states.stride(0)),
                            KernelArg::i64(states.stride(1)),
                            KernelArg::i64(states.stride(2)),
                            KernelArg::i64(is0),
                            KernelArg::i64(is1),
                            KernelArg::i64(is2)},
                           ld, stream);
               });
}

at::Tensor chunk_scan_combined_varlen(
    jit::JitRuntime& rt, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
    const at::Tensor& B, const at::Tensor& C, int64_t chunk_size, const at::Tensor& D,
    const at::Tensor& dt_bias, const at::Tensor& seq_idx, const at::Tensor& cu_seqlens,
    const at::Tensor& cu_chunk_seqlens, const at::Tensor& last_chunk_indices,
    const at::Tensor& initial_states, bool dt_softplus, double dt_limit_lo, double dt_limit_hi,
    const at::Tensor& out, at::ScalarType state_dtype) {
  const CallSite fn{kFamily, "chunk_scan_combined_varlen"};
  check(fn, "x", x, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "B", B, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "C", C, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "cu_seqlens", cu_seqlens, at::kInt, 1, Layout::kContiguous);
  check(fn, "last_chunk_indices", last_chunk_indices, at::kInt, 1, Layout::kContiguous);
  check_float_dtype(fn, "state_dtype", state_dtype);
  if (chunk_size > 256 || chunk_size < 1) {
    fail(fn, "chunk_size", fmt::format("{} must be a power of two in 16..256", chunk_size));
  }
  SsdDims d;
  d.nheads = static_cast<int>(x.size(1));
  d.head_dim = static_cast<int>(x.size(2));
  d.ngroups = static_cast<int>(B.size(1));
  d.dstate = static_cast<int>(B.size(2));
  d.chunk_size = static_cast<int>(chunk_size);
  d.validate();
  const int64_t T = x.size(0), batch = cu_seqlens.size(0) - 1;
  if (batch < 0) fail(fn, "cu_seqlens", "must have B + 1 entries");
  check_shape(fn, "B", B, {T, d.ngroups, d.dstate});
  check_shape(fn, "C", C, {T, d.ngroups, d.dstate});
  check_shape(fn, "last_chunk_indices", last_chunk_indices, {batch});
  if (initial_states.defined()) {
    check_on_device(fn, "initial_states", initial_states);
    check_shape(fn, "initial_states", initial_states, {batch, d.nheads, d.head_dim, d.dstate});
  }
  check_same_device(fn, x, "cu_seqlens", cu_seqlens);
  check_same_device(fn, x, "last_chunk_indices", last_chunk_indices);
  const auto state_shape = std::vector<int64_t>{batch, d.nheads, d.head_dim, d.dstate};
  if (T == 0 && batch == 0) return at::empty(state_shape, x.options().dtype(state_dtype));
  // Everything the five steps check again, up front: a bad argument compiles nothing.
  const int64_t H = d.nheads, P = d.head_dim;
  check(fn, "dt", dt, at::kBFloat16, 2, Layout::kAny);
  check_shape(fn, "dt", dt, {T, H});
  check(fn, "A", A, at::kFloat, 1, Layout::kContiguous);
  check_shape(fn, "A", A, {H});
  check(fn, "out", out, at::kBFloat16, 3, Layout::kInnerContiguous);
  check_shape(fn, "out", out, {T, H, P});
  check_pairs(fn, "x", x);
  check_pairs(fn, "B", B);
  check_pairs(fn, "C", C);
  check_pairs(fn, "out", out);
  const int64_t nchunks = num_chunks_of(fn, cu_chunk_seqlens);
  check_int_vector(fn, "seq_idx", seq_idx, nchunks);
  if (D.defined()) {
    check_on_device(fn, "D", D);
    if (D.scalar_type() != at::kFloat && D.scalar_type() != at::kBFloat16) {
      fail(fn, "D",
           fmt::format("must be float32 or bfloat16, got {}", c10::toString(D.scalar_type())));
    }
    if (D.dim() == 1) {
      check_shape(fn, "D", D, {H});
    } else {
      check_shape(fn, "D", D, {H, P});
    }
  }
  if (dt_bias.defined()) {
    check_on_device(fn, "dt_bias", dt_bias);
    check_float_dtype(fn, "dt_bias", dt_bias.scalar_type());
    check_shape(fn, "dt_bias", dt_bias, {H});
  }
  if (initial_states.defined()) {
    check_float_dtype(fn, "initial_states", initial_states.scalar_type());
    if (initial_states.stride(3) != 1 || initial_states.stride(2) != d.dstate) {
      fail(fn, "initial_states", "must have each [P, N] state contiguous");
    }
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"dt", &dt},
                                {"A", &A},
                                {"B", &B},
                                {"C", &C},
                                {"out", &out},
                                {"seq_idx", &seq_idx},
                                {"cu_chunk_seqlens", &cu_chunk_seqlens}}) {
    check_same_device(fn, x, name, *t);
  }
  // 1. dt processing and the cumsum of dt * A; 2. each chunk's own state; 3. the states across
  // chunks; 4. C B^T per chunk; 5. the outputs (vLLM's _mamba_chunk_scan_combined_fwd).
  const CumsumOut cs = chunk_cumsum_fwd(rt, d, dt, A, cu_chunk_seqlens, dt_bias, dt_softplus,
                                        dt_limit_lo, dt_limit_hi);
  const at::Tensor chunk_states =
      chunk_state_fwd(rt, d, B, x, cs.dt, cs.dA_cumsum, cu_chunk_seqlens);
  const at::Tensor states = state_passing_fwd(rt, d, chunk_states, cs.dA_cumsum, last_chunk_indices,
                                              initial_states, state_dtype);
  const at::Tensor CB = bmm_chunk_fwd(rt, d, C, B, cu_chunk_seqlens);
  chunk_scan_fwd(rt, d, CB, x, cs.dt, cs.dA_cumsum, C, states, cu_chunk_seqlens, out, seq_idx, D,
                 initial_states);
  if (states.is_meta()) return at::empty(state_shape, states.options());
  return states.index_select(0, last_chunk_indices);
}

}  // namespace coldstart::mamba_ssd
