#include "harness/kernels/fused_moe/fused_moe.h"

#include <ATen/ATen.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/common/error.h"
#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::fused_moe {
std::string unsupported_shape(const MoeShape& s) {
  if (s.num_experts < 1 || s.num_experts > kMaxExperts || s.intermediate < 1 || s.hidden < 1 ||
      s.top_k < 1 || s.top_k > s.num_experts) {
    return fmt::format(
        "shape E={} N={} H={} top_k={} is not supported (E in [1, {}], N, H >= 1, top_k in [1, E])",
        s.num_experts, s.intermediate, s.hidden, s.top_k, kMaxExperts);
  }
  if (s.use_grouped_topk &&
      (s.top_k > kMaxGroupedTopk || s.n_group < 1 || s.n_group > kMaxExpertGroups ||
       s.num_experts % s.n_group != 0 || s.topk_group < 1 || s.topk_group > s.n_group ||
       s.top_k > s.topk_group * (s.num_experts / s.n_group))) {
    return fmt::format(
        "grouped top-k with E={} top_k={} n_group={} topk_group={} is not supported (top_k <= {}, "
        "n_group in [1, {}] dividing E, topk_group in [1, n_group], top_k <= topk_group * E / "
        "n_group)",
        s.num_experts, s.top_k, s.n_group, s.topk_group, kMaxGroupedTopk, kMaxExpertGroups);
  }
  return "";
}

std::string unsupported_launch(const MoeShape& s, const jit::KernelConfig& cfg, int64_t M) {
  constexpr int64_t kMaxI32 = std::numeric_limits<int32_t>::max();
  const GemmBlock blk = gemm_block(cfg);
  const int64_t n = s.intermediate, h = s.hidden;
  const int64_t w13_rows = s.activation == Activation::kSilu ? 2 * n : n;
  // Expert strides of w13 [E, w13_rows, H] and w2 [E, H, N] (stride_be of the two GEMMs).
  if (w13_rows > kMaxI32 / h)
    return fmt::format("w13's expert stride {} x {} elements is past the GEMM's 32-bit strides",
                       w13_rows, h);
  if (h > kMaxI32 / n)
    return fmt::format("w2's expert stride {} x {} elements is past the GEMM's 32-bit strides", h, n);
  const int64_t pairs = M * s.top_k;
  if (pairs > kMaxI32)
    return fmt::format("{} tokens x top_k {} = {} (token, expert) pairs: past the kernels' "
                       "32-bit counts", M, s.top_k, pairs);
  const bool naive = !s.has_expert_map && uses_naive_block_assignment(M, s.top_k, s.num_experts);
  const int64_t sorted = naive ? 0 : max_num_tokens_padded(pairs, s.num_experts, blk.block_m);
  // w13's GEMM reads M rows of hidden with top_k experts each; w2's reads the pairs with one.
  const struct {
    const char* name;
    int64_t em, n_out;
  } gemms[] = {{"w13", gemm_em(naive, pairs, sorted, M, s.top_k, blk.block_m), w13_rows},
               {"w2", gemm_em(naive, pairs, sorted, pairs, 1, blk.block_m), h}};
  for (const auto& g : gemms) {
    if (g.em > kMaxI32)
      return fmt::format("the {} GEMM of {} tokens pads to {} rows (BLOCK_SIZE_M {}): past the "
                         "kernels' 32-bit row count", g.name, M, g.em, blk.block_m);
    const int64_t blocks_m = (g.em + blk.block_m - 1) / blk.block_m;
    const int64_t blocks_n = (g.n_out + blk.block_n - 1) / blk.block_n;
    if (blocks_m > 0 && blocks_n > kMaxI32 / blocks_m)
      return fmt::format("the {} GEMM of {} tokens needs {} x {} blocks (config {}): past CUDA's "
                         "grid x limit of {}", g.name, M, blocks_m, blocks_n, cfg.name, kMaxI32);
  }
  return "";
}

namespace {

using jit::DType;
using jit::KernelArg;
using namespace kernels;  // launch_util.h

constexpr const char* kFamily = "fused_moe";

void check_shape(const CallSite& fn, const MoeShape& s) {
  const std::string why = unsupported_shape(s);
  if (!why.empty()) throw InputError(fmt::format("{}::{}: {}", fn.family, fn.name, why));
}

bool gated(const MoeShape& s) { return s.activation == Activation::kSilu; }

KernelArg i32_arg(const CallSite& fn, const char* what, int64_t v) {
  return KernelArg::i32(to_i32(fn, what, v));
}

// Dummy arguments for compiling an AOT kernel: none of them is specialized, so the values do not
// matter for the compile key.
std::vector<KernelArg> dummy_args(const std::vector<DType>& pointers,
                                  const std::vector<KernelArg::Kind>& ints) {
  std::vector<KernelArg> args;
  for (DType t : pointers) args.push_back(KernelArg::pointer(0, t));
  for (KernelArg::Kind kind : ints) {
    args.push_back(kind == KernelArg::Kind::kI64 ? KernelArg::i64(0) : KernelArg::i32(0));
  }
  return args;
}

}  // namespace

void precompile_aot_kernels(jit::JitRuntime& rt, const MoeShape& s) {
  const CallSite fn{kFamily, "precompile_aot_kernels"};
  check_shape(fn, s);
  using Kind = KernelArg::Kind;
  if (s.use_grouped_topk) {
    std::vector<KernelArg> args =
        dummy_args({DType::kF32, DType::kF32, DType::kF32, DType::kI32}, {Kind::kI32, Kind::kI64});
    args.push_back(KernelArg::f32(0.0f));
    rt.ensure(grouped_topk_kernel(),
              grouped_topk_constexprs(s.num_experts, s.top_k, s.n_group, s.topk_group,
                                      s.renormalize),
              args);
  } else {
    for (bool bf16 : {true, false}) {
      rt.ensure(topk_softmax_kernel(),
                topk_softmax_constexprs(s.num_experts, s.top_k, s.renormalize, bf16),
                dummy_args({bf16 ? DType::kBF16 : DType::kF32, DType::kF32, DType::kI32},
                           {Kind::kI32, Kind::kI64}));
    }
  }
  rt.ensure(align_kernel(), align_constexprs(s.num_experts),
            dummy_args({DType::kI32, DType::kI32, DType::kI32, DType::kI32},
                       {Kind::kI32, Kind::kI32, Kind::kI32}));
  if (gated(s)) {
    rt.ensure(silu_and_mul_kernel(), silu_and_mul_constexprs(),
              dummy_args({DType::kBF16, DType::kBF16}, {Kind::kI32, Kind::kI64, Kind::kI64}));
  }
  rt.ensure(sum_kernel(), sum_constexprs(s.top_k),
            dummy_args({DType::kBF16, DType::kBF16}, {Kind::kI32, Kind::kI64}));
}

void topk_softmax(jit::JitRuntime& rt, const MoeShape& s, const at::Tensor& gating_logits,
                  const at::Tensor& topk_weights, const at::Tensor& topk_ids) {
  const CallSite fn{kFamily, "topk_softmax"};
  check_shape(fn, s);
  check_on_device(fn, "gating_logits", gating_logits);
  const bool bf16 = gating_logits.scalar_type() == at::kBFloat16;
  if (!bf16 && gating_logits.scalar_type() != at::kFloat) {
    fail(fn, "gating_logits", fmt::format("must have dtype BFloat16 or Float, got {}",
                                          c10::toString(gating_logits.scalar_type())));
  }
  check(fn, "gating_logits", gating_logits, gating_logits.scalar_type(), 2,
        Layout::kInnerContiguous);
  check_size(fn, "gating_logits", gating_logits, 1, s.num_experts);
  const int64_t m = gating_logits.size(0);
  check(fn, "topk_weights", topk_weights, at::kFloat, 2, Layout::kContiguous);
  check(fn, "topk_ids", topk_ids, at::kInt, 2, Layout::kContiguous);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"topk_weights", &topk_weights},
                                {"topk_ids", &topk_ids}}) {
    check_size(fn, name, *t, 0, m);
    check_size(fn, name, *t, 1, s.top_k);
    check_same_device(fn, gating_logits, name, *t);
  }
  if (m == 0) return;
  rt.launch(topk_softmax_kernel(),
            topk_softmax_constexprs(s.num_experts, s.top_k, s.renormalize, bf16),
            {tensor_arg(gating_logits), tensor_arg(topk_weights), tensor_arg(topk_ids),
             i32_arg(fn, "gating_logits", m), KernelArg::i64(gating_logits.stride(0))},
            dims(grid_dim(fn, "x (tokens / 4)", (m + kTopkWarps - 1) / kTopkWarps, 0x7fffffff), 1,
                 1, kTopkWarps * 32),
            stream_for(gating_logits));
}

void grouped_topk(jit::JitRuntime& rt, const MoeShape& s, const at::Tensor& gating_logits,
                  const at::Tensor& e_score_correction_bias, const at::Tensor& topk_weights,
                  const at::Tensor& topk_ids) {
  const CallSite fn{kFamily, "grouped_topk"};
  MoeShape grouped = s;
  grouped.use_grouped_topk = true;  // the grouped limits apply to this call whatever the flag
  check_shape(fn, grouped);
  check_on_device(fn, "gating_logits", gating_logits);
  check(fn, "gating_logits", gating_logits, at::kFloat, 2, Layout::kInnerContiguous);
  check_size(fn, "gating_logits", gating_logits, 1, s.num_experts);
  check(fn, "e_score_correction_bias", e_score_correction_bias, at::kFloat, 1,
        Layout::kContiguous);
  check_size(fn, "e_score_correction_bias", e_score_correction_bias, 0, s.num_experts);
  check_same_device(fn, gating_logits, "e_score_correction_bias", e_score_correction_bias);
  const int64_t m = gating_logits.size(0);
  check(fn, "topk_weights", topk_weights, at::kFloat, 2, Layout::kContiguous);
  check(fn, "topk_ids", topk_ids, at::kInt, 2, Layout::kContiguous);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"topk_weights", &topk_weights},
                                {"topk_ids", &topk_ids}}) {
    check_size(fn, name, *t, 0, m);
    check_size(fn, name, *t, 1, s.top_k);
    check_same_device(fn, gating_logits, name, *t);
  }
  if (m == 0) return;
  rt.launch(grouped_topk_kernel(),
            grouped_topk_constexprs(s.num_experts, s.top_k, s.n_group, s.topk_group,
                                    s.renormalize),
            {tensor_arg(gating_logits), tensor_arg(e_score_correction_bias),
             tensor_arg(topk_weights), tensor_arg(topk_ids), i32_arg(fn, "gating_logits", m),
             KernelArg::i64(gating_logits.stride(0)), KernelArg::f32(s.routed_scaling_factor)},
            dims(grid_dim(fn, "x (tokens / 4)", (m + kGroupedTopkWarps - 1) / kGroupedTopkWarps,
                          0x7fffffff),
                 1, 1, kGroupedTopkWarps * 32),
            stream_for(gating_logits));
}

jit::Selection select_config(const ConfigSource& src, const MoeShape& s, int64_t M) {
  const CallSite fn{kFamily, "select_config"};
  check_shape(fn, s);
  return jit::select_from_table(
      src.table_dir, table_stem_fields(s.num_experts, s.intermediate, src.device_name),
      M, default_config(M, s.num_experts));
}

std::vector<int64_t> envelope_token_classes(const ConfigSource& src, const MoeShape& s,
                                            int64_t max_tokens) {
  std::set<std::string> seen;
  std::vector<int64_t> out;
  for (int64_t M = 1; M <= max_tokens; ++M) {
    const jit::Selection sel = select_config(src, s, M);
    const GemmBlock blk = gemm_block(sel.config);
    const bool naive = !s.has_expert_map && uses_naive_block_assignment(M, s.top_k, s.num_experts);
    const int64_t pairs = M * s.top_k;
    const int64_t sorted = naive ? 0 : max_num_tokens_padded(pairs, s.num_experts, blk.block_m);
    const auto spec = [](int64_t v) { return jit::specialization(jit::KernelArg::i64(v)); };
    const std::string signature = fmt::format(
        "{}|{}|{}|{}|{}", sel.config.name, naive, spec(pairs),
        spec(gemm_em(naive, pairs, sorted, M, s.top_k, blk.block_m)),
        spec(gemm_em(naive, pairs, sorted, pairs, 1, blk.block_m)));
    if (seen.insert(signature).second) out.push_back(M);
  }
  return out;
}

Alignment align_block_size(jit::JitRuntime& rt, const MoeShape& s, const at::Tensor& topk_ids,
                           int64_t block_m) {
  const CallSite fn{kFamily, "align_block_size"};
  check_shape(fn, s);
  check(fn, "topk_ids", topk_ids, at::kInt, 2, Layout::kContiguous);
  check_size(fn, "topk_ids", topk_ids, 1, s.top_k);
  if (block_m < 1) fail(fn, "block_m", fmt::format("must be positive, got {}", block_m));
  const int64_t numel = topk_ids.numel();
  const int64_t len = max_num_tokens_padded(numel, s.num_experts, block_m);
  const auto opts = topk_ids.options();
  Alignment out;
  out.sorted_token_ids = at::empty({len}, opts);
  out.expert_ids = at::empty({(len + block_m - 1) / block_m}, opts);
  out.num_tokens_post_padded = at::empty({1}, opts);
  rt.launch(align_kernel(), align_constexprs(s.num_experts),
            {tensor_arg(topk_ids), tensor_arg(out.sorted_token_ids), tensor_arg(out.expert_ids),
             tensor_arg(out.num_tokens_post_padded), i32_arg(fn, "topk_ids (numel)", numel),
             i32_arg(fn, "block_m", block_m), i32_arg(fn, "sorted_token_ids (length)", len)},
            dims(1, 1, 1, kAlignThreads), stream_for(topk_ids));
  return out;
}

Alignment prepare_expert_assignment(jit::JitRuntime& rt, const MoeShape& s,
                                    const at::Tensor& topk_ids, int64_t block_m) {
  const CallSite fn{kFamily, "prepare_expert_assignment"};
  check_shape(fn, s);
  check(fn, "topk_ids", topk_ids, at::kInt, 2, Layout::kContiguous);
  if (s.has_expert_map || !uses_naive_block_assignment(topk_ids.size(0), s.top_k, s.num_experts)) {
    return align_block_size(rt, s, topk_ids, block_m);
  }
  Alignment out;  // vLLM: (None, topk_ids.view(-1), full((1,), numel * BLOCK_SIZE_M))
  out.expert_ids = topk_ids.view({-1});
  out.num_tokens_post_padded = at::full({1}, topk_ids.numel() * block_m, topk_ids.options());
  return out;
}

void gemm(jit::JitRuntime& rt, const jit::KernelConfig& cfg, const at::Tensor& a,
          const at::Tensor& b, const at::Tensor& c, const at::Tensor& topk_weights,
          const Alignment& asg, bool mul_routed_weight, int top_k) {
  const CallSite fn{kFamily, "gemm"};
  const GemmBlock blk = gemm_block(cfg);
  check(fn, "a", a, at::kBFloat16, 2, Layout::kInnerContiguous);
  check(fn, "b", b, at::kBFloat16, 3, Layout::kInnerContiguous);
  check_on_device(fn, "c", c);
  check(fn, "c", c, at::kBFloat16, c.dim(), Layout::kInnerContiguous);
  check(fn, "expert_ids", asg.expert_ids, at::kInt, 1, Layout::kContiguous);
  check(fn, "num_tokens_post_padded", asg.num_tokens_post_padded, at::kInt, 1,
        Layout::kContiguous);
  const bool naive = !asg.sorted_token_ids.defined();
  if (!naive) check(fn, "sorted_token_ids", asg.sorted_token_ids, at::kInt, 1, Layout::kContiguous);
  if (top_k < 1) fail(fn, "top_k", fmt::format("must be positive, got {}", top_k));
  const int64_t rows = a.size(0);
  const int64_t k_in = a.size(1);
  const int64_t n_out = b.size(1);
  const int64_t pairs = rows * top_k;
  check_size(fn, "b", b, 2, k_in);
  // c: [pairs, n_out] or [pairs / top_k', top_k', n_out] with rows stride(-2) apart.
  if (c.dim() != 2 && c.dim() != 3) fail(fn, "c", fmt::format("must be 2-D or 3-D, got {}", shape_str(c)));
  if (c.size(-1) != n_out || c.numel() != pairs * n_out ||
      (c.dim() == 3 && c.stride(0) != c.size(1) * c.stride(1))) {
    fail(fn, "c", fmt::format("has shape {} (strides [{}]), expected {} rows of {} evenly spaced",
                              shape_str(c), fmt::join(c.strides(), ", "), pairs, n_out));
  }
  if (mul_routed_weight) {
    check(fn, "topk_weights", topk_weights, at::kFloat, topk_weights.dim(), Layout::kContiguous);
    if (topk_weights.numel() != pairs) {
      fail(fn, "topk_weights", fmt::format("has {} elements for {} pairs", topk_weights.numel(), pairs));
    }
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"b", &b}, {"c", &c},
                                {"expert_ids", &asg.expert_ids},
                                {"num_tokens_post_padded", &asg.num_tokens_post_padded}}) {
    check_same_device(fn, a, name, *t);
  }
  if (pairs == 0) return;
  const int64_t sorted_len = naive ? 0 : asg.sorted_token_ids.size(0);
  const int64_t em = gemm_em(naive, pairs, sorted_len, rows, top_k, blk.block_m);
  const int64_t blocks_m = (em + blk.block_m - 1) / blk.block_m;
  if (asg.expert_ids.size(0) < blocks_m) {
    fail(fn, "expert_ids", fmt::format("has {} entries for {} blocks", asg.expert_ids.size(0), blocks_m));
  }
  const int64_t grid = blocks_m * ((n_out + blk.block_n - 1) / blk.block_n);
  const int sm = jit::arch_sm(rt.arch());
  const KernelArg weights = mul_routed_weight ? tensor_arg(topk_weights)
                                              : KernelArg::pointer(0, DType::kF32);
  const KernelArg sorted = naive ? KernelArg::pointer(0, DType::kI32)
                                 : tensor_arg(asg.sorted_token_ids);
  rt.launch(gemm_kernel(), gemm_constexprs(cfg, mul_routed_weight, top_k, naive),
            {tensor_arg(a), tensor_arg(b), tensor_arg(c), weights, sorted,
             tensor_arg(asg.expert_ids), tensor_arg(asg.num_tokens_post_padded),
             i32_arg(fn, "N", n_out), i32_arg(fn, "K", k_in), i32_arg(fn, "EM", em),
             i32_arg(fn, "num_valid_tokens", pairs), i32_arg(fn, "a (stride 0)", a.stride(0)),
             i32_arg(fn, "a (stride 1)", a.stride(1)), i32_arg(fn, "b (stride 0)", b.stride(0)),
             i32_arg(fn, "b (stride 2)", b.stride(2)), i32_arg(fn, "b (stride 1)", b.stride(1)),
             i32_arg(fn, "c (row stride)", c.stride(-2)),
             i32_arg(fn, "c (column stride)", c.stride(-1))},
            dims(grid_dim(fn, "x (blocks)", grid, 0x7fffffff), 1, 1, blk.num_warps * 32,
                 static_cast<unsigned>(gemm_smem_bytes(blk, sm))),
            stream_for(a));
}

void silu_and_mul(jit::JitRuntime& rt, const at::Tensor& out, const at::Tensor& input) {
  const CallSite fn{kFamily, "silu_and_mul"};
  check(fn, "out", out, at::kBFloat16, 2, Layout::kInnerContiguous);
  check(fn, "input", input, at::kBFloat16, 2, Layout::kInnerContiguous);
  check_size(fn, "input", input, 0, out.size(0));
  check_size(fn, "input", input, 1, 2 * out.size(1));
  check_same_device(fn, input, "out", out);
  if (out.size(0) == 0) return;
  rt.launch(silu_and_mul_kernel(), silu_and_mul_constexprs(),
            {tensor_arg(out), tensor_arg(input), i32_arg(fn, "out (columns)", out.size(1)),
             KernelArg::i64(out.stride(0)), KernelArg::i64(input.stride(0))},
            dims(grid_dim(fn, "x (tokens)", out.size(0), 0x7fffffff), 1, 1, kActThreads),
            stream_for(input));
}

void relu2_no_mul(const at::Tensor& out, const at::Tensor& input) {
  const CallSite fn{kFamily, "relu2_no_mul"};
  check(fn, "out", out, at::kBFloat16, 2, Layout::kInnerContiguous);
  check(fn, "input", input, at::kBFloat16, 2, Layout::kInnerContiguous);
  check_size(fn, "input", input, 0, out.size(0));
  check_size(fn, "input", input, 1, out.size(1));
  check_same_device(fn, input, "out", out);
  // Meta tensors (compile-only mode) carry no data, and some libtorch builds (Debian's 1.13) have
  // no meta kernel for relu: nothing to do.
  if (out.size(0) == 0 || input.is_meta()) return;
  // vLLM (apply_moe_activation, RELU2_NO_MUL): F.relu(input, inplace=True) then
  // torch.square(input, out=output).
  at::Tensor in = input;
  in.relu_();
  at::Tensor o = out;
  at::square_out(o, in);
}

void moe_sum(jit::JitRuntime& rt, const at::Tensor& input, const at::Tensor& out) {
  const CallSite fn{kFamily, "moe_sum"};
  check(fn, "input", input, at::kBFloat16, 3, Layout::kContiguous);
  check(fn, "out", out, at::kBFloat16, 2, Layout::kInnerContiguous);
  check_size(fn, "out", out, 0, input.size(0));
  check_size(fn, "out", out, 1, input.size(2));
  check_same_device(fn, input, "out", out);
  if (input.size(0) == 0) return;
  rt.launch(sum_kernel(), sum_constexprs(static_cast<int>(input.size(1))),
            {tensor_arg(out), tensor_arg(input), i32_arg(fn, "input (hidden)", input.size(2)),
             KernelArg::i64(out.stride(0))},
            dims(grid_dim(fn, "x (tokens)", input.size(0), 0x7fffffff), 1, 1, kSumThreads),
            stream_for(input));
}

void fused_experts_with(jit::JitRuntime& rt, const MoeShape& s, const jit::Selection& sel,
                        const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
                        const at::Tensor& topk_weights, const at::Tensor& topk_ids,
                        const at::Tensor& out) {
  const CallSite fn{kFamily, "fused_experts"};
  check_shape(fn, s);
  const GemmBlock blk = gemm_block(sel.config);
  check(fn, "hidden", hidden, at::kBFloat16, 2, Layout::kContiguous);
  check(fn, "w13", w13, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "w2", w2, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "topk_weights", topk_weights, at::kFloat, 2, Layout::kContiguous);
  check(fn, "topk_ids", topk_ids, at::kInt, 2, Layout::kContiguous);
  check(fn, "out", out, at::kBFloat16, 2, Layout::kInnerContiguous);
  const int64_t m = hidden.size(0);
  check_size(fn, "hidden", hidden, 1, s.hidden);
  check_size(fn, "w13", w13, 0, s.num_experts);
  const int64_t w13_rows = gated(s) ? 2 * s.intermediate : s.intermediate;
  check_size(fn, "w13", w13, 1, w13_rows);
  check_size(fn, "w13", w13, 2, s.hidden);
  check_size(fn, "w2", w2, 0, s.num_experts);
  check_size(fn, "w2", w2, 1, s.hidden);
  check_size(fn, "w2", w2, 2, s.intermediate);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"topk_weights", &topk_weights},
                                {"topk_ids", &topk_ids}}) {
    check_size(fn, name, *t, 0, m);
    check_size(fn, name, *t, 1, s.top_k);
  }
  check_size(fn, "out", out, 0, m);
  check_size(fn, "out", out, 1, s.hidden);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"w13", &w13}, {"w2", &w2},
                                {"topk_weights", &topk_weights}, {"topk_ids", &topk_ids},
                                {"out", &out}}) {
    check_same_device(fn, hidden, name, *t);
  }
  if (m == 0) return;
  const jit::SelectionScope scope(rt, sel);
  const Alignment asg = prepare_expert_assignment(rt, s, topk_ids, blk.block_m);
  const auto opts = hidden.options();
  const int64_t n = s.intermediate;
  const at::Tensor cache1 = at::empty({m, s.top_k, w13_rows}, opts);
  gemm(rt, sel.config, hidden, w13, cache1, at::Tensor(), asg, false, s.top_k);
  const at::Tensor cache2 = at::empty({m * s.top_k, n}, opts);
  if (gated(s)) {
    silu_and_mul(rt, cache2, cache1.view({m * s.top_k, 2 * n}));
  } else {
    relu2_no_mul(cache2, cache1.view({m * s.top_k, n}));
  }
  // With an expert map the pairs of other ranks' experts (-1) are skipped at the alignment and
  // never written: they must add zero in moe_sum. (vLLM aligns over the global ids instead and
  // its kernel writes zeros for the blocks of experts that map to -1.)
  const at::Tensor cache3 = s.has_expert_map ? at::zeros({m, s.top_k, s.hidden}, opts)
                                             : at::empty({m, s.top_k, s.hidden}, opts);
  gemm(rt, sel.config, cache2, w2, cache3, topk_weights, asg, true, 1);
  moe_sum(rt, cache3, out);
}

jit::Selection fused_experts(jit::JitRuntime& rt, const MoeShape& s, const ConfigSource& src,
                             const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
                             const at::Tensor& topk_weights, const at::Tensor& topk_ids,
                             const at::Tensor& out) {
  jit::Selection sel = select_config(src, s, hidden.defined() ? hidden.size(0) : 0);
  fused_experts_with(rt, s, sel, hidden, w13, w2, topk_weights, topk_ids, out);
  return sel;
}

}  // namespace coldstart::fused_moe
