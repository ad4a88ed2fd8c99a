#include "harness/kernels/gdn_chunk/gdn_chunk.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "harness/jit/select.h"
#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::gdn_chunk {
namespace {

using jit::KernelArg;
using jit::KernelConfig;
using namespace kernels;  // launch_util.h: the argument checks and launch helpers

constexpr const char* kFamily = "gdn_chunk";
int sm_of(const jit::JitRuntime& rt) { return jit::arch_sm(rt.arch()); }

}  // namespace

void fused_post_conv(jit::JitRuntime& rt, const GdnDims& d, const at::Tensor& conv_out,
                     const at::Tensor& a, const at::Tensor& b, const at::Tensor& A_log,
                     const at::Tensor& dt_bias, const PostConvOut& out) {
  const CallSite fn{kFamily, "fused_post_conv"};
  d.validate();
  check(fn, "conv_out", conv_out, at::kBFloat16, 2, Layout::kInnerContiguous);
  check(fn, "a", a, at::kBFloat16, 2, Layout::kInnerContiguous);
  check(fn, "b", b, at::kBFloat16, 2, Layout::kInnerContiguous);
  check(fn, "A_log", A_log, at::kFloat, 1, Layout::kContiguous);
  check(fn, "dt_bias", dt_bias, at::kBFloat16, 1, Layout::kContiguous);
  check(fn, "out.q", out.q, at::kBFloat16, 3, Layout::kContiguous);
  check(fn, "out.k", out.k, at::kBFloat16, 3, Layout::kContiguous);
  check(fn, "out.v", out.v, at::kBFloat16, 3, Layout::kContiguous);
  check(fn, "out.g", out.g, at::kFloat, 2, Layout::kContiguous);
  check(fn, "out.beta", out.beta, at::kFloat, 2, Layout::kContiguous);
  const int64_t T = conv_out.size(0);
  const int64_t hk = d.num_k_heads, hv = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
  if (conv_out.size(1) < d.conv_dim()) {
    fail(fn, "conv_out",
         fmt::format("has {} columns, fewer than conv_dim {} (2*Hk*K + Hv*V)", conv_out.size(1),
                     d.conv_dim()));
  }
  check_shape(fn, "a", a, {T, hv});
  check_shape(fn, "b", b, {T, hv});
  check_shape(fn, "A_log", A_log, {hv});
  check_shape(fn, "dt_bias", dt_bias, {hv});
  check_shape(fn, "out.q", out.q, {T, hk, K});
  check_shape(fn, "out.k", out.k, {T, hk, K});
  check_shape(fn, "out.v", out.v, {T, hv, V});
  check_shape(fn, "out.g", out.g, {T, hv});
  check_shape(fn, "out.beta", out.beta, {T, hv});
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"a", &a},
                                {"b", &b},
                                {"A_log", &A_log},
                                {"dt_bias", &dt_bias},
                                {"out.q", &out.q},
                                {"out.k", &out.k},
                                {"out.v", &out.v},
                                {"out.g", &out.g},
                                {"out.beta", &out.beta}}) {
    check_same_device(fn, conv_out, name, *t);
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"out.q", &out.q},
                                {"out.k", &out.k},
                                {"out.v", &out.v}}) {
    check_aligned(fn, name, *t, 4);
  }
  if (T == 0) return;
  const int32_t L = to_i32(fn, "conv_out", T);
  const jit::LaunchDims grid =
      dims(grid_dim(fn, "x (token blocks)", (T + kPostConvBlockT - 1) / kPostConvBlockT, kMaxGridX),
           grid_dim(fn, "y (heads)", hk + hv, kMaxGridYZ), 1, kPostConvWarps * 32);
  rt.launch(post_conv_kernel(), post_conv_constexprs(d),
            {tensor_arg(conv_out), tensor_arg(a), tensor_arg(b), tensor_arg(A_log),
             tensor_arg(dt_bias), tensor_arg(out.q), tensor_arg(out.k), tensor_arg(out.v),
             tensor_arg(out.g), tensor_arg(out.beta), KernelArg::i64(conv_out.stride(0)),
             KernelArg::i64(a.stride(0)), KernelArg::i64(b.stride(0)),
             KernelArg::i64(out.q.stride(0)), KernelArg::i64(out.k.stride(0)),
             KernelArg::i64(out.v.stride(0)), KernelArg::i32(L)},
            grid, stream_for(out.q));
}

void chunk_gated_delta_rule(jit::JitRuntime& rt, const GdnDims& d, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                            const at::Tensor& beta, float scale, const at::Tensor& cu_seqlens,
                            const std::vector<int>& seq_lens_host,
                            const at::Tensor& initial_state, const at::Tensor& out,
                            const at::Tensor& final_state, const at::Tensor& scratch) {
  const CallSite fn{kFamily, "chunk_gated_delta_rule"};
  d.validate();
  check(fn, "q", q, at::kBFloat16, 3, Layout::kContiguous);
  check(fn, "k", k, at::kBFloat16, 3, Layout::kContiguous);
  check(fn, "v", v, at::kBFloat16, 3, Layout::kContiguous);
  check(fn, "g", g, at::kFloat, 2, Layout::kContiguous);
  check(fn, "beta", beta, at::kFloat, 2, Layout::kContiguous);
  check(fn, "cu_seqlens", cu_seqlens, at::kInt, 1, Layout::kContiguous);
  check(fn, "initial_state", initial_state, at::kFloat, 4, Layout::kContiguous);
  check(fn, "out", out, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "final_state", final_state, at::kFloat, 4, Layout::kContiguous);
  check(fn, "scratch", scratch, at::kByte, 1, Layout::kContiguous);
  const int64_t T = q.size(0);
  const int64_t S = static_cast<int64_t>(seq_lens_host.size());
  const int64_t hk = d.num_k_heads, hv = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
  check_shape(fn, "q", q, {T, hk, K});
  check_shape(fn, "k", k, {T, hk, K});
  check_shape(fn, "v", v, {T, hv, V});
  check_shape(fn, "g", g, {T, hv});
  check_shape(fn, "beta", beta, {T, hv});
  check_shape(fn, "cu_seqlens", cu_seqlens, {S + 1});
  check_shape(fn, "initial_state", initial_state, {S, hv, V, K});
  check_shape(fn, "out", out, {T, hv, V});
  check_shape(fn, "final_state", final_state, {S, hv, V, K});
  if (out.stride(1) != V || out.stride(0) < hv * V || out.stride(0) % 2 != 0) {
    fail(fn, "out",
         fmt::format("must have [Hv, V] contiguous inside an even token row stride >= {}, got "
                     "strides [{}, {}, {}]",
                     hv * V, out.stride(0), out.stride(1), out.stride(2)));
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"k", &k},
                                {"v", &v},
                                {"g", &g},
                                {"beta", &beta},
                                {"cu_seqlens", &cu_seqlens},
                                {"initial_state", &initial_state},
                                {"out", &out},
                                {"final_state", &final_state},
                                {"scratch", &scratch}}) {
    check_same_device(fn, q, name, *t);
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"q", &q},
                                {"k", &k},
                                {"v", &v},
                                {"out", &out}}) {
    check_aligned(fn, name, *t, 4);
  }
  check_aligned(fn, "scratch", scratch, 256);
  int64_t sum = 0;
  for (int n : seq_lens_host) {
    if (n < 0) fail(fn, "seq_lens_host", fmt::format("has a negative length {}", n));
    sum += n;
  }
  if (sum != T) {
    fail(fn, "seq_lens_host", fmt::format("sums to {}, but q has T = {} tokens", sum, T));
  }
  const int64_t nt = num_chunks(seq_lens_host);
  const ChunkScratchLayout lay = chunk_scratch_layout(d, T, nt, S);
  if (scratch.numel() < lay.total) {
    fail(fn, "scratch",
         fmt::format("has {} bytes, fewer than chunk_scratch_bytes = {}", scratch.numel(),
                     lay.total));
  }
  if (S == 0) return;
  const int32_t t32 = to_i32(fn, "q", T);
  to_i32(fn, "q", nt * kChunkSize);

  // Chunk tables (index.py prepare_chunk_indices / prepare_chunk_offsets), from the host lengths.
  if (!scratch.is_meta()) {
    std::vector<int32_t> idx(static_cast<size_t>(2 * nt));
    std::vector<int32_t> offs(static_cast<size_t>(S + 1), 0);
    int64_t c = 0;
    for (int64_t n = 0; n < S; ++n) {
      const int64_t chunks = (seq_lens_host[n] + kChunkSize - 1) / kChunkSize;
      for (int64_t j = 0; j < chunks; ++j, ++c) {
        idx[2 * c] = static_cast<int32_t>(n);
        idx[2 * c + 1] = static_cast<int32_t>(j);
      }
      offs[n + 1] = static_cast<int32_t>(offs[n] + chunks);
    }
    auto upload = [&](const std::vector<int32_t>& host, int64_t offset) {
      if (host.empty()) return;
      at::Tensor src = at::from_blob(const_cast<int32_t*>(host.data()),
                                     {static_cast<int64_t>(host.size())}, at::kInt);
      if (scratch.is_cuda()) src = src.pin_memory();
      else src = src.clone();
      scratch.narrow(0, offset, static_cast<int64_t>(host.size()) * 4)
          .view(at::kInt)
          .copy_(src, /*non_blocking=*/true);
    };
    upload(idx, lay.chunk_indices);
    upload(offs, lay.chunk_offsets);
  }

  const KernelArg base = tensor_arg(scratch);
  auto sub = [&](int64_t off, jit::DType t) { return KernelArg::pointer(base.address + off, t); };
  using jit::DType;
  const KernelArg gc = sub(lay.g_cumsum, DType::kF32), A = sub(lay.A, DType::kF32),
                  Ai = sub(lay.Ai, DType::kBF16), w = sub(lay.w, DType::kBF16),
                  u = sub(lay.u, DType::kBF16), h = sub(lay.h, DType::kBF16),
                  vn = sub(lay.v_new, DType::kBF16), ci = sub(lay.chunk_indices, DType::kI32),
                  co = sub(lay.chunk_offsets, DType::kI32);
  const KernelArg cu = tensor_arg(cu_seqlens), Targ = KernelArg::i32(t32);
  void* stream = stream_for(out);
  const int sm = sm_of(rt);

  if (nt > 0) {
    const unsigned gx = grid_dim(fn, "x (chunks)", nt, kMaxGridX);
    const unsigned gy = grid_dim(fn, "y (value heads)", hv, kMaxGridYZ);
    tuned_launch(rt, cumsum_kernel(), cumsum_tuning_key(d), cumsum_candidates(), stream,
                 [&](const KernelConfig& c) {
                   rt.launch(cumsum_kernel(), cumsum_constexprs(d, c),
                             {tensor_arg(g), gc, cu, ci, Targ}, dims(gx, gy, 1, c.threads()),
                             stream);
                 });
    tuned_launch(rt, kkt_kernel(), kkt_tuning_key(d), kkt_candidates(), stream,
                 [&](const KernelConfig& c) {
                   rt.launch(kkt_kernel(), kkt_constexprs(d, c),
                             {tensor_arg(k), tensor_arg(beta), gc, A, cu, ci, Targ},
                             dims(gx, gy, 1, c.threads()), stream);
                 });
    tuned_launch(rt, solve_tril_kernel(), solve_tril_tuning_key(d), solve_tril_candidates(),
                 stream, [&](const KernelConfig& c) {
                   rt.launch(solve_tril_kernel(), solve_tril_constexprs(d, c, sm),
                             {A, Ai, cu, ci, Targ}, dims(gx, gy, 1, c.threads()), stream);
                 });
    tuned_launch(rt, wy_kernel(), wy_tuning_key(d), wy_candidates(), stream,
                 [&](const KernelConfig& c) {
                   rt.launch(wy_kernel(), wy_constexprs(d, c),
                             {tensor_arg(k), tensor_arg(v), tensor_arg(beta), w, u, Ai, gc, cu, ci,
                              Targ},
                             dims(gx, gy, 1, c.threads()), stream);
                 });
  }
  tuned_launch(rt, h_kernel(), h_tuning_key(d), h_candidates(), stream,
               [&](const KernelConfig& c) {
                 const int64_t bv = std::min<int64_t>(config_value(c, "BV", 64), V);
                 jit::LaunchDims ld =
                     dims(grid_dim(fn, "x (V blocks)", (V + bv - 1) / bv, kMaxGridX),
                          grid_dim(fn, "y (sequences x value heads)", S * hv, kMaxGridYZ), 1,
                          c.threads());
                 ld.shared_bytes = h_smem_bytes(d, c);
                 rt.launch(h_kernel(), h_constexprs(d, c),
                           {tensor_arg(k), u, w, vn, gc, KernelArg::pointer(0, DType::kF32), h,
                            tensor_arg(initial_state), tensor_arg(final_state), cu, co, Targ},
                           ld, stream);
               });
  if (nt == 0) return;
  tuned_launch(rt, o_kernel(), o_tuning_key(d), o_candidates(sm), stream,
               [&](const KernelConfig& c) {
                 const int64_t bv = std::min<int64_t>(config_value(c, "BV", 64), V);
                 jit::LaunchDims ld =
                     dims(grid_dim(fn, "x (V blocks)", (V + bv - 1) / bv, kMaxGridX),
                          grid_dim(fn, "y (chunks)", nt, kMaxGridYZ),
                          grid_dim(fn, "z (value heads)", hv, kMaxGridYZ), c.threads());
                 ld.shared_bytes = o_smem_bytes(d, c);
                 rt.launch(o_kernel(), o_constexprs(d, c),
                           {tensor_arg(q), tensor_arg(k), vn, h, gc, tensor_arg(out), cu, ci,
                            KernelArg::f32(scale), Targ, KernelArg::i64(out.stride(0))},
                           ld, stream);
               });
}

}  // namespace coldstart::gdn_chunk
