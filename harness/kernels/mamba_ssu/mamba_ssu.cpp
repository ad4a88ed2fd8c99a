#include "harness/kernels/mamba_ssu/mamba_ssu.h"

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::mamba_ssu {
namespace {

using jit::KernelArg;
using namespace kernels;  // launch_util.h: the argument checks and launch helpers

constexpr const char* kFamily = "mamba_ssu";

// A float32 / bfloat16 / float16 tensor of rank `dim`, any strides.
void check_float(const CallSite& fn, const char* arg, const at::Tensor& t, int64_t dim) {
  if (!t.defined()) fail(fn, arg, "is an undefined tensor");
  const at::ScalarType st = t.scalar_type();
  if (st != at::kFloat && st != at::kBFloat16 && st != at::kHalf) {
    fail(fn, arg, fmt::format("must have dtype Float, BFloat16 or Half, got {}", c10::toString(st)));
  }
  check(fn, arg, t, st, dim, Layout::kAny);
}

// int32 [>= rows] or [>= rows, >= 1]; returns the 2-D view (vLLM unsqueezes 1-D indices).
at::Tensor check_indices(const CallSite& fn, const char* arg, const at::Tensor& t, int64_t rows) {
  check_on_device(fn, arg, t);
  if (t.scalar_type() != at::kInt || t.dim() < 1 || t.dim() > 2) {
    fail(fn, arg, fmt::format("must be int32 [B] or [B, W], got {} {}",
                              c10::toString(t.scalar_type()), shape_str(t)));
  }
  const at::Tensor t2 = t.dim() == 1 ? t.unsqueeze(1) : t;
  if (t2.size(0) < rows || t2.size(1) < 1) {
    fail(fn, arg, fmt::format("has shape {}; it needs at least {} rows and one column",
                              shape_str(t), rows));
  }
  return t2;
}

void copy_strides(int64_t* dst, const at::Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) dst[d] = t.stride(d);
}

// Everything of a call but the launch config.
struct Call {
  UpdateSpec spec;
  UpdateArgs args;
  int64_t batch = 0, nheads = 0, headdim = 0, dstate = 0;
  std::string cache_dtype;
};

Call prepare(const CallSite& fn, const at::Tensor& state, const at::Tensor& x,
             const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
             const at::Tensor& D, const at::Tensor& dt_bias, bool dt_softplus,
             const at::Tensor& sbi, const at::Tensor& dsbi, const at::Tensor& out,
             int64_t null_block_id) {
  check_float(fn, "state", state, 4);
  const int64_t slots = state.size(0), H = state.size(1), P = state.size(2), N = state.size(3);
  if (H < 1 || P < 1 || N < 1 || N > 1024 || H > 65535) {
    fail(fn, "state", fmt::format("has shape {}; heads must be 1..65535, head dim positive and "
                                  "dstate 1..1024",
                                  shape_str(state)));
  }
  check_float(fn, "x", x, 3);
  const int64_t batch = x.size(0);
  check_shape(fn, "x", x, {batch, H, P});
  check_float(fn, "dt", dt, 3);
  check_shape(fn, "dt", dt, {batch, H, P});
  check_float(fn, "A", A, 3);
  check_shape(fn, "A", A, {H, P, N});
  check_float(fn, "B", B, 3);
  const int64_t G = B.size(1);
  check_shape(fn, "B", B, {batch, G, N});
  if (G < 1 || H % G != 0) {
    fail(fn, "B", fmt::format("has {} groups (dimension 1); they must divide the {} heads", G, H));
  }
  check_float(fn, "C", C, 3);
  check_shape(fn, "C", C, {batch, G, N});
  if (D.defined()) {
    check_float(fn, "D", D, 2);
    check_shape(fn, "D", D, {H, P});
  }
  if (dt_bias.defined()) {
    check_float(fn, "dt_bias", dt_bias, 2);
    check_shape(fn, "dt_bias", dt_bias, {H, P});
  }
  check_float(fn, "out", out, 3);
  check_shape(fn, "out", out, {batch, H, P});
  if (batch > 65535) fail(fn, "x", fmt::format("has {} rows; the grid allows 65535", batch));
  at::Tensor src2, dst2;
  if (sbi.defined()) {
    src2 = check_indices(fn, "state_batch_indices", sbi, batch);
    dst2 = dsbi.defined() ? check_indices(fn, "dst_state_batch_indices", dsbi, batch) : src2;
  } else {
    if (dsbi.defined()) {
      fail(fn, "dst_state_batch_indices", "is given without state_batch_indices (vLLM would "
                                          "ignore it and update row b's state in slot b)");
    }
    if (slots < batch) {
      fail(fn, "state", fmt::format("has {} slots; without state_batch_indices row b uses slot b "
                                    "and there are {} rows",
                                    slots, batch));
    }
  }
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor*>{"x", &x}, {"dt", &dt}, {"A", &A}, {"B", &B},
        {"C", &C}, {"D", &D}, {"dt_bias", &dt_bias}, {"state_batch_indices", &sbi},
        {"dst_state_batch_indices", &dsbi}, {"out", &out}}) {
    if (t->defined()) check_same_device(fn, state, name, *t);
  }

  Call c;
  c.batch = batch, c.nheads = H, c.headdim = P, c.dstate = N;
  const at::ScalarType st = state.scalar_type();
  c.cache_dtype = st == at::kFloat ? "float32" : st == at::kBFloat16 ? "bfloat16" : "float16";
  UpdateSpec& s = c.spec;
  s.dt_softplus = dt_softplus;
  // vLLM: A.stride(-1) == 0 and A.stride(-2) == 0 and dt.stride(-1) == 0 and
  // dt_bias.stride(-1) == 0 (dt_bias is required there; None counts as tied here).
  s.tie_hdim = A.stride(2) == 0 && A.stride(1) == 0 && dt.stride(2) == 0 &&
               (!dt_bias.defined() || dt_bias.stride(1) == 0);
  s.has_dt_bias = dt_bias.defined();
  s.has_d = D.defined();
  s.has_state_batch_indices = sbi.defined();
  s.dstate = N;
  auto jd = [](const at::Tensor& t) { return to_jit_dtype(t.scalar_type()); };
  s.state = jd(state), s.x = jd(x), s.dt = jd(dt), s.A = jd(A), s.B = jd(B), s.C = jd(C);
  s.out = jd(out);
  s.dt_bias = dt_bias.defined() ? jd(dt_bias) : jit::DType::kF32;
  s.D = D.defined() ? jd(D) : jit::DType::kF32;

  UpdateArgs& a = c.args;
  a.state = tensor_arg(state), a.x = tensor_arg(x), a.dt = tensor_arg(dt), a.A = tensor_arg(A);
  a.B = tensor_arg(B), a.C = tensor_arg(C), a.out = tensor_arg(out);
  a.dt_bias = dt_bias.defined() ? tensor_arg(dt_bias) : KernelArg::pointer(0, jit::DType::kF32);
  a.D = D.defined() ? tensor_arg(D) : KernelArg::pointer(0, jit::DType::kF32);
  a.state_batch_indices = sbi.defined() ? tensor_arg(src2) : KernelArg::pointer(0, jit::DType::kI32);
  a.dst_state_batch_indices =
      sbi.defined() ? tensor_arg(dst2) : KernelArg::pointer(0, jit::DType::kI32);
  a.null_block_id = null_block_id;
  a.N = batch, a.nheads = H, a.dim = P, a.dstate = N, a.nheads_ngroups_ratio = H / G;
  copy_strides(a.stride_state, state);
  copy_strides(a.stride_x, x);
  copy_strides(a.stride_dt, dt);
  if (dt_bias.defined()) copy_strides(a.stride_dt_bias, dt_bias);
  copy_strides(a.stride_A, A);
  copy_strides(a.stride_B, B);
  copy_strides(a.stride_C, C);
  if (D.defined()) copy_strides(a.stride_D, D);
  copy_strides(a.stride_out, out);
  if (sbi.defined()) {
    copy_strides(a.stride_state_indices, src2);
    copy_strides(a.stride_dst_state_indices, dst2);
  }
  return c;
}

void launch(jit::JitRuntime& rt, const CallSite& fn, const jit::Selection& sel, Call& c,
            const at::Tensor& state) {
  std::optional<int64_t> bm;
  for (const jit::Constexpr& k : sel.config.constexprs) {
    if (k.name == "BLOCK_SIZE_M") bm = k.value;
  }
  if (!bm) {
    throw InputError(fmt::format("{}::{}: config '{}' has no BLOCK_SIZE_M", fn.family, fn.name,
                                 sel.config.name));
  }
  c.spec.block_size_m = static_cast<int>(*bm);
  c.spec.num_warps = sel.config.num_warps;
  const std::vector<jit::Constexpr> cs = update_constexprs(c.spec);  // validates the config
  if (c.batch == 0) return;
  const jit::SelectionScope scope(rt, sel);
  const int64_t programs_m = (c.headdim + *bm - 1) / *bm;
  rt.launch(update_kernel(), cs, update_kernel_args(c.args),
            dims(grid_dim(fn, "x (head-dim blocks)", programs_m, 0x7fffffff),
                 grid_dim(fn, "y (batch rows)", c.batch, 65535),
                 grid_dim(fn, "z (heads)", c.nheads, 65535),
                 static_cast<unsigned>(sel.config.threads())),
            stream_for(state));
}

}  // namespace

jit::Selection selective_state_update(jit::JitRuntime& rt, const ConfigSource& src,
                                      const at::Tensor& state, const at::Tensor& x,
                                      const at::Tensor& dt, const at::Tensor& A,
                                      const at::Tensor& B, const at::Tensor& C,
                                      const at::Tensor& D, const at::Tensor& dt_bias,
                                      bool dt_softplus, const at::Tensor& state_batch_indices,
                                      const at::Tensor& dst_state_batch_indices,
                                      const at::Tensor& out, int64_t null_block_id) {
  const CallSite fn{kFamily, "selective_state_update"};
  Call c = prepare(fn, state, x, dt, A, B, C, D, dt_bias, dt_softplus, state_batch_indices,
                   dst_state_batch_indices, out, null_block_id);
  const jit::Selection sel = select_config(src, c.headdim, c.dstate, c.cache_dtype, c.batch,
                                           c.nheads, is_blackwell_arch(rt.arch()));
  launch(rt, fn, sel, c, state);
  return sel;
}

void selective_state_update_with(jit::JitRuntime& rt, const jit::Selection& sel,
                                 const at::Tensor& state, const at::Tensor& x,
                                 const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                                 const at::Tensor& C, const at::Tensor& D,
                                 const at::Tensor& dt_bias, bool dt_softplus,
                                 const at::Tensor& state_batch_indices,
                                 const at::Tensor& dst_state_batch_indices, const at::Tensor& out,
                                 int64_t null_block_id) {
  const CallSite fn{kFamily, "selective_state_update_with"};
  Call c = prepare(fn, state, x, dt, A, B, C, D, dt_bias, dt_softplus, state_batch_indices,
                   dst_state_batch_indices, out, null_block_id);
  launch(rt, fn, sel, c, state);
}

}  // namespace coldstart::mamba_ssu
