// DeepGEMM-style FP8 GEMM launch wrappers. See deepgemm.h.
#include "harness/kernels/deepgemm/deepgemm.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <algorithm>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::deepgemm {
namespace {

using kernels::CallSite;
using kernels::check;
using kernels::fail;
using kernels::Layout;


int64_t align4(int64_t v) { return (v + 3) / 4 * 4; }

jit::KernelConfig kernel_config(const GemmShape& shape, const GemmConfig& c, bool mma_sync) {
  jit::KernelConfig k;
  k.name = c.name();
  k.constexprs = fp8_gemm_constexprs(shape, c, mma_sync);
  k.num_warps = fp8_gemm_threads(c) / 32;
  k.num_stages = c.num_stages;
  return k;
}

struct GemmCall {
  GemmShape shape;
  jit::KernelArg tmap_a, tmap_b, tmap_sfa;
  jit::KernelArg sfb, grouped_layout, out;
  int64_t ldo = 0, gso = 0;
};

/// The heuristic's pick for a shape and the names of every candidate it ranked (one
/// enumeration serves both).
struct Picked {
  GemmConfig config;
  std::vector<std::string> candidates;
};

jit::Selection launch(jit::JitRuntime& rt, const CallSite& fn, const Picked& picked, const GemmCall& call,
                      const at::Tensor& d, bool mma_sync) {
  const GemmConfig& c = picked.config;
  jit::Selection sel;
  sel.config = kernel_config(call.shape, c, mma_sync);
  sel.selector = "heuristic";
  sel.tuning_key = gemm_tuning_key(call.shape, c);
  sel.candidates = picked.candidates;
  const std::vector<jit::KernelArg> args = {
      call.tmap_a, call.tmap_b, call.tmap_sfa, call.sfb, call.grouped_layout, call.out,
      jit::KernelArg::i32(kernels::to_i32(fn, "m", call.shape.m)), jit::KernelArg::i64(call.ldo),
      jit::KernelArg::i64(call.gso)};
  jit::LaunchDims dims;
  dims.grid[0] = static_cast<unsigned>(c.num_sms);
  dims.block[0] = static_cast<unsigned>(fp8_gemm_threads(c));
  dims.shared_bytes = static_cast<unsigned>(fp8_gemm_smem_bytes(c));
  dims.cluster[0] = static_cast<unsigned>(c.cluster_size());
  const jit::SelectionScope scope(rt, sel);
  rt.launch(fp8_gemm_kernel(call.shape.type), sel.config.constexprs, args, dims, kernels::stream_for(d));
  return sel;
}

Picked pick(const CallSite& fn, const GemmShape& shape, const GemmTarget& target) {
  try {
    const std::vector<GemmConfig> cands = fp8_gemm_candidates(shape, target.sm, target.num_sms);
    Picked p;
    p.config = cands[best_fp8_gemm_candidate(cands, shape, target.sm)];
    p.candidates.reserve(cands.size());
    for (const GemmConfig& cand : cands) p.candidates.push_back(cand.name());
    return p;
  } catch (const jit::UnsupportedArchError&) {
    throw;
  } catch (const InputError& e) {
    throw Error(fmt::format("{}::{}: {}", fn.family, fn.name, e.what()));
  }
}

void check_k(const CallSite& fn, const char* arg, int64_t k) {
  if (k <= 0 || k % kFp8BlockK != 0) fail(fn, arg, fmt::format("K = {} must be a positive multiple of 128", k));
}

void check_scales_a(const CallSite& fn, const char* arg, const at::Tensor& sf, int64_t kb, int64_t m,
                    int64_t dim) {
  check(fn, arg, sf, at::kFloat, dim, Layout::kContiguous);
  if (sf.size(dim - 2) != kb) fail(fn, arg, fmt::format("must have K/128 = {} rows per group, got {}", kb, sf.size(dim - 2)));
  if (sf.size(dim - 1) < align4(m) || sf.size(dim - 1) % 4 != 0) {
    fail(fn, arg, fmt::format("needs a TMA-aligned M extent (a multiple of 4, >= align(M, 4) = {}), got {}",
                              align4(m), sf.size(dim - 1)));
  }
}

/// x [R, K] -> (bytes [R, K], scales [R, K/128]).
std::pair<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x, const CallSite& fn) {
  const int64_t rows = x.size(0), k = x.size(1);
  if (k % 128 != 0) fail(fn, "x", fmt::format("K = {} is not a multiple of 128", k));
  if (x.is_meta()) {
    // The allocations of the path below at its peak (the second statement), so the compile-only
    // memory count matches the GPU's: the float copy of x (none when x is float already), the
    // scales, the scaled and the clamped float temporaries, and the FP8 bytes. libtorch 1.13 has
    // no meta kernel for abs(), so the sizes are allocated directly (meta_memory.h counts them).
    const at::TensorOptions f32 = x.options().dtype(at::kFloat);
    const at::Tensor xf = x.scalar_type() == at::kFloat ? x : at::empty({rows, k}, f32);
    at::Tensor scale = at::empty({rows, k / 128}, f32);
    const at::Tensor scaled = at::empty({rows, k}, f32), clamped = at::empty({rows, k}, f32);
    return {at::empty({rows, k}, x.options().dtype(at::kByte)), scale};
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  const at::Tensor xf = x.to(at::kFloat).reshape({rows, k / 128, 128});
  const at::Tensor scale = xf.abs().amax(-1).clamp_min(1e-10) / 448.0;
  const at::Tensor q = (xf / scale.unsqueeze(-1)).clamp(-448.0, 448.0).to(at::kFloat8_e4m3fn);
  return {q.view(at::kByte).reshape({rows, k}), scale};
#else
  (void)rows;
  throw Error(fmt::format("{}::{}: FP8 casts need libtorch >= 2.1 (this is {})", fn.family, fn.name, TORCH_VERSION));
#endif
}

}  // namespace

Fp8Activation quantize_fp8(const at::Tensor& x) {
  const CallSite fn{kFamily, "quantize_fp8"};
  if (!x.defined() || x.dim() != 2) fail(fn, "x", "must be a 2-D tensor");
  auto [data, scale] = quantize_rows(x, fn);
  const int64_t m = x.size(0);
  at::Tensor sf = at::zeros({x.size(1) / 128, align4(m)}, scale.options());
  if (!x.is_meta()) sf.narrow(1, 0, m).copy_(scale.t());
  return {data, sf};
}

Fp8Activation quantize_fp8_groups(const at::Tensor& x) {
  const CallSite fn{kFamily, "quantize_fp8_groups"};
  if (!x.defined() || x.dim() != 3) fail(fn, "x", "must be a 3-D tensor [M, G, K]");
  const int64_t m = x.size(0), g = x.size(1), k = x.size(2);
  auto [data, scale] = quantize_rows(x.reshape({m * g, k}), fn);
  at::Tensor sf = at::zeros({g, k / 128, align4(m)}, scale.options());
  if (!x.is_meta()) sf.narrow(2, 0, m).copy_(scale.view({m, g, k / 128}).permute({1, 2, 0}));
  return {data.view({m, g, k}), sf};
}

at::Tensor random_fp8_weight(std::vector<int64_t> shape, const at::TensorOptions& device) {
  const at::TensorOptions u8 = device.dtype(at::kByte);
  at::Tensor w = at::empty(shape, u8);
  if (device.device().is_meta()) return w;
  // One uniform byte in [0, 64) per element, drawn in place: bit 5 becomes the sign, bits 0..2
  // the mantissa and bits 3..4 the low two exponent bits under a fixed 0x20: exponent field 4..7
  // (magnitude 0.125 .. 1.875), any mantissa, random sign. The bytes are turned into e4m3 in
  // slabs of at most 64 MiB, so the only temporary is one slab: a [256, 4096, 4096] expert
  // tensor (4 GiB) costs 4 GiB plus 64 MiB at load, where int32 draws cost 12 times that and
  // ran an 80 GB card out of memory in load_weights.
  w.random_(0, 64);
  at::Tensor flat = w.view({-1});
  const int64_t n = flat.numel(), slab = int64_t{64} << 20;
  for (int64_t begin = 0; begin < n; begin += slab) {
    at::Tensor part = flat.narrow(0, begin, std::min(slab, n - begin));
    const at::Tensor sign = part.bitwise_and(32).mul_(4);  // bit 5 -> bit 7
    part.bitwise_and_(31).bitwise_or_(0x20).bitwise_or_(sign);
  }
  return w;
}

at::Tensor mn_major_scales(const at::Tensor& sf) {
  const CallSite fn{kFamily, "mn_major_scales"};
  check(fn, "sf", sf, at::kFloat, 2, Layout::kAny);
  const int64_t m = sf.size(0);
  at::Tensor out = at::zeros({sf.size(1), align4(m)}, sf.options());
  out.narrow(1, 0, m).copy_(sf.t());
  return out;
}

jit::Selection fp8_gemm_nt(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& a,
                           const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                           const at::Tensor& d, const GemmOptions& options) {
  const CallSite fn{kFamily, "fp8_gemm_nt"};
  check(fn, "a", a, at::kByte, 2, Layout::kInnerContiguous);
  check(fn, "b", b, at::kByte, 2, Layout::kContiguous);
  check(fn, "d", d, at::kBFloat16, 2, Layout::kInnerContiguous);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  check_k(fn, "a", k);
  kernels::check_size(fn, "b", b, 1, k);
  kernels::check_size(fn, "d", d, 0, m);
  kernels::check_size(fn, "d", d, 1, n);
  check_scales_a(fn, "sfa", sfa, k / 128, m, 2);
  check(fn, "sfb", sfb, at::kFloat, 2, Layout::kContiguous);
  kernels::check_size(fn, "sfb", sfb, 0, (n + 127) / 128);
  kernels::check_size(fn, "sfb", sfb, 1, k / 128);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"sfa", &sfa}, {"b", &b}, {"sfb", &sfb}, {"d", &d}}) {
    kernels::check_same_device(fn, a, name, *t);
  }
  if (m == 0) return {};
  const GemmShape shape{GemmType::kNormal, m, n, k, 1};
  const Picked picked = pick(fn, shape, target);
  const GemmConfig& c = picked.config;
  GemmCall call;
  call.shape = shape;
  call.tmap_a = kernels::tensor_map_arg(fn, "a", a, jit::DType::kF8E4M3, {k, m}, {a.stride(0)},
                        {128, static_cast<uint32_t>(c.block_m)}, 128);
  call.tmap_b = kernels::tensor_map_arg(fn, "b", b, jit::DType::kF8E4M3, {k, n}, {k}, {128, static_cast<uint32_t>(c.block_n)}, 128);
  call.tmap_sfa = kernels::tensor_map_arg(fn, "sfa", sfa, jit::DType::kF32, {sfa.size(1), k / 128}, {sfa.size(1) * 4},
                          {static_cast<uint32_t>(c.block_m), 1}, 0);
  call.sfb = tensor_arg(sfb);
  call.grouped_layout = jit::KernelArg::pointer(0, jit::DType::kI32);
  call.out = tensor_arg(d);
  call.ldo = d.stride(0);
  return launch(rt, fn, picked, call, d, options.mma_sync);
}

int64_t m_grouped_contiguous_rows(int64_t num_tokens, int64_t top_k, int64_t experts) {
  constexpr int64_t kAlign = kMkAlignmentForContiguousLayout;
  const int64_t rows = num_tokens * top_k + experts * (kAlign - 1);
  return (rows + kAlign - 1) / kAlign * kAlign;
}

jit::Selection m_grouped_fp8_gemm_nt_contiguous(jit::JitRuntime& rt, const GemmTarget& target,
                                                const at::Tensor& a, const at::Tensor& sfa,
                                                const at::Tensor& b, const at::Tensor& sfb,
                                                const at::Tensor& d, const at::Tensor& m_indices,
                                                const GemmOptions& options) {
  const CallSite fn{kFamily, "m_grouped_fp8_gemm_nt_contiguous"};
  check(fn, "a", a, at::kByte, 2, Layout::kInnerContiguous);
  check(fn, "b", b, at::kByte, 3, Layout::kContiguous);
  check(fn, "d", d, at::kBFloat16, 2, Layout::kInnerContiguous);
  check(fn, "m_indices", m_indices, at::kInt, 1, Layout::kContiguous);
  const int64_t m = a.size(0), k = a.size(1), groups = b.size(0), n = b.size(1);
  check_k(fn, "a", k);
  if (m % kMkAlignmentForContiguousLayout != 0) {
    fail(fn, "a", fmt::format("M = {} must be a multiple of the contiguous-layout alignment {}", m,
                              kMkAlignmentForContiguousLayout));
  }
  kernels::check_size(fn, "b", b, 2, k);
  kernels::check_size(fn, "d", d, 0, m);
  kernels::check_size(fn, "d", d, 1, n);
  kernels::check_size(fn, "m_indices", m_indices, 0, m);
  check_scales_a(fn, "sfa", sfa, k / 128, m, 2);
  check(fn, "sfb", sfb, at::kFloat, 3, Layout::kContiguous);
  kernels::check_size(fn, "sfb", sfb, 0, groups);
  kernels::check_size(fn, "sfb", sfb, 1, (n + 127) / 128);
  kernels::check_size(fn, "sfb", sfb, 2, k / 128);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"sfa", &sfa}, {"b", &b}, {"sfb", &sfb}, {"d", &d}, {"m_indices", &m_indices}}) {
    kernels::check_same_device(fn, a, name, *t);
  }
  if (m == 0) return {};
  const GemmShape shape{GemmType::kMGroupedContiguous, m, n, k, static_cast<int>(groups)};
  const Picked picked = pick(fn, shape, target);
  const GemmConfig& c = picked.config;
  GemmCall call;
  call.shape = shape;
  call.tmap_a = kernels::tensor_map_arg(fn, "a", a, jit::DType::kF8E4M3, {k, m}, {a.stride(0)},
                        {128, static_cast<uint32_t>(c.block_m)}, 128);
  call.tmap_b = kernels::tensor_map_arg(fn, "b", b, jit::DType::kF8E4M3, {k, groups * n}, {k},
                        {128, static_cast<uint32_t>(c.block_n)}, 128);
  call.tmap_sfa = kernels::tensor_map_arg(fn, "sfa", sfa, jit::DType::kF32, {sfa.size(1), k / 128}, {sfa.size(1) * 4},
                          {static_cast<uint32_t>(c.block_m), 1}, 0);
  call.sfb = tensor_arg(sfb);
  call.grouped_layout = tensor_arg(m_indices);
  call.out = tensor_arg(d);
  call.ldo = d.stride(0);
  return launch(rt, fn, picked, call, d, options.mma_sync);
}

jit::Selection fp8_einsum_bhr_hdr_bhd(jit::JitRuntime& rt, const GemmTarget& target,
                                      const at::Tensor& x, const at::Tensor& sfx,
                                      const at::Tensor& y, const at::Tensor& sfy,
                                      const at::Tensor& z, const GemmOptions& options) {
  const CallSite fn{kFamily, "fp8_einsum_bhr_hdr_bhd"};
  check(fn, "x", x, at::kByte, 3, Layout::kInnerContiguous);
  check(fn, "y", y, at::kByte, 3, Layout::kContiguous);
  check(fn, "z", z, at::kBFloat16, 3, Layout::kInnerContiguous);
  const int64_t batch = x.size(0), heads = x.size(1), r = x.size(2), dd = y.size(1);
  check_k(fn, "x", r);
  kernels::check_size(fn, "y", y, 0, heads);
  kernels::check_size(fn, "y", y, 2, r);
  kernels::check_size(fn, "z", z, 0, batch);
  kernels::check_size(fn, "z", z, 1, heads);
  kernels::check_size(fn, "z", z, 2, dd);
  check_scales_a(fn, "sfx", sfx, r / 128, batch, 3);
  kernels::check_size(fn, "sfx", sfx, 0, heads);
  check(fn, "sfy", sfy, at::kFloat, 3, Layout::kContiguous);
  kernels::check_size(fn, "sfy", sfy, 0, heads);
  kernels::check_size(fn, "sfy", sfy, 1, (dd + 127) / 128);
  kernels::check_size(fn, "sfy", sfy, 2, r / 128);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"sfx", &sfx}, {"y", &y}, {"sfy", &sfy}, {"z", &z}}) {
    kernels::check_same_device(fn, x, name, *t);
  }
  if (batch == 0) return {};
  const GemmShape shape{GemmType::kBatched, batch, dd, r, static_cast<int>(heads)};
  const Picked picked = pick(fn, shape, target);
  const GemmConfig& c = picked.config;
  GemmCall call;
  call.shape = shape;
  call.tmap_a = kernels::tensor_map_arg(fn, "x", x, jit::DType::kF8E4M3, {r, batch, heads}, {x.stride(0), x.stride(1)},
                        {128, static_cast<uint32_t>(c.block_m), 1}, 128);
  call.tmap_b = kernels::tensor_map_arg(fn, "y", y, jit::DType::kF8E4M3, {r, heads * dd}, {r},
                        {128, static_cast<uint32_t>(c.block_n)}, 128);
  const int64_t mp = sfx.size(2);
  call.tmap_sfa = kernels::tensor_map_arg(fn, "sfx", sfx, jit::DType::kF32, {mp, r / 128, heads}, {mp * 4, mp * (r / 128) * 4},
                          {static_cast<uint32_t>(c.block_m), 1, 1}, 0);
  call.sfb = tensor_arg(sfy);
  call.grouped_layout = jit::KernelArg::pointer(0, jit::DType::kI32);
  call.out = tensor_arg(z);
  call.ldo = z.stride(0);
  call.gso = z.stride(1);
  return launch(rt, fn, picked, call, z, options.mma_sync);
}

}  // namespace coldstart::deepgemm
