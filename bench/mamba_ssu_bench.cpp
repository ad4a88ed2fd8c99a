// mamba_ssu benchmark (Google Benchmark through bench_util.h; GPU only, it skips without one): vLLM's
// selective_state_update (harness/kernels/mamba_ssu) for the Mamba2 decode of Nemotron-3 shapes,
// with float32 SSM states and MambaMixer2's expanded views:
//
//   BM_SsuDecode/<model>/<batch>   model 0: Nano TP1 (H 64, P 64, G 8, N 128)
//                                  model 1: Super TP8 (H 16, P 64, G 1, N 128)
//                                  batch 1, 8, 64, 256
//
// The config is vLLM's: the H200 tuned table of fixtures/tuned-configs/selective_state_update
// ($COLDSTART_SOURCE_DIR/fixtures/..., else ./fixtures/...) for this device's name, else the
// heuristic; the label names it. Bytes counted per launch: the state read and written
// (2 * B * H * P * N * 4, which dominates), x, B, C, dt and out (bf16). Each launch uses another
// set of state slots, cycled so that the state touched between two uses of a slot exceeds
// 256 MiB (more than the L2), so the state comes from HBM. Launches are queued behind large
// matmuls so that host launch cost does not leave the GPU idle; the time is CUDA events around
// 200 launches, and the reported time is per launch. Counters (bench_util.h): `GB/s` against the
// device's HBM bandwidth, and `MiB` moved per launch.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "bench/bench_util.h"
#include "harness/jit/jit.h"
#include "harness/kernels/launch_util.h"
#include "harness/kernels/mamba_ssu/mamba_ssu.h"
#include "harness/kernels/model_shapes.h"

namespace cj = coldstart::jit;
namespace ms = coldstart::mamba_ssu;
namespace cb = coldstart::bench;

namespace {

constexpr int kLaunches = 200;

struct Model {
  const char* name;
  int64_t H, P, G, N;
};
Model model(const char* name, const coldstart::kernels::shapes::Mamba2Heads& m) {
  return {name, m.nheads, m.head_dim, m.ngroups, m.dstate};
}
const Model kModels[] = {model("nano-tp1", coldstart::kernels::shapes::kNemotronNanoMambaTp1),
                         model("super-tp8", coldstart::kernels::shapes::kNemotronSuperMambaTp8)};

at::TensorOptions on_gpu(at::ScalarType t) { return at::TensorOptions().device(at::kCUDA).dtype(t); }

void BM_SsuDecode(benchmark::State& state) {
  const Model& m = kModels[state.range(0)];
  const int64_t B = state.range(1), H = m.H, P = m.P, G = m.G, N = m.N;
  const int64_t conv_dim = H * P + 2 * G * N;
  const int64_t ssm = H * P * N;
  const int64_t page = ssm + 3 * conv_dim / 2;  // the page also holds the conv state (3 rows)
  const double state_bytes = 2.0 * B * ssm * 4;
  const double io_bytes = 2.0 * B * (H * P + 2 * G * N + H + H * P);
  const int64_t sets = std::max<int64_t>(
      2, static_cast<int64_t>(std::ceil(256.0 * (1 << 20) / (state_bytes / 2))));
  const int64_t slots = sets * B + 1;  // slot 0: the null block
  at::manual_seed(1);
  const at::Tensor pages = at::randn({slots, page}, on_gpu(at::kFloat)).mul_(0.5);
  const at::Tensor st = pages.as_strided({slots, H, P, N}, {page, P * N, N, 1}, 3 * conv_dim / 2);
  // Index rows 16 entries apart (64-byte aligned, one compile key for every set), slots >= 1.
  const int64_t row = (B + 15) / 16 * 16;
  const at::Tensor perm = (at::randperm(sets * B, on_gpu(at::kLong)) + 1).to(at::kInt).view({sets, B});
  const at::Tensor idx = at::zeros({sets, row}, on_gpu(at::kInt));
  idx.narrow(1, 0, B).copy_(perm);
  const at::Tensor conv = at::randn({B, conv_dim}, on_gpu(at::kFloat)).to(at::kBFloat16);
  const at::Tensor proj = at::randn({B, 3 * H}, on_gpu(at::kFloat)).to(at::kBFloat16);
  const at::Tensor A = -at::rand({H}, on_gpu(at::kFloat)) - 0.5;
  const at::Tensor D = at::rand({H}, on_gpu(at::kFloat)).to(at::kBFloat16);
  const at::Tensor dt_bias = (at::rand({H}, on_gpu(at::kFloat)) - 2.0).to(at::kBFloat16);
  const at::Tensor out = at::empty({B, H, P}, on_gpu(at::kBFloat16));
  const at::Tensor x = conv.narrow(1, 0, H * P).view({B, H, P});
  const at::Tensor Bm = conv.narrow(1, H * P, G * N).view({B, G, N});
  const at::Tensor Cm = conv.narrow(1, H * P + G * N, G * N).view({B, G, N});
  const at::Tensor dt = proj.narrow(1, 2 * H, H).unsqueeze(2).expand({B, H, P});
  const at::Tensor A_e = A.view({H, 1, 1}).expand({H, P, N});
  const at::Tensor D_e = D.view({H, 1}).expand({H, P});
  const at::Tensor db_e = dt_bias.view({H, 1}).expand({H, P});
  const char* root = std::getenv("COLDSTART_SOURCE_DIR");
  const ms::ConfigSource src{std::string(root ? root : ".") +
                                 "/fixtures/tuned-configs/selective_state_update",
                             cb::device_info().name, ""};
  cj::Selection sel;
  auto call = [&](int64_t i) {
    const at::Tensor s = idx[i % sets].narrow(0, 0, B);
    sel = ms::selective_state_update(cb::default_runtime(), src, st, x, dt, A_e, Bm, Cm, D_e, db_e, true, s, s,
                                     out);
  };
  const at::Tensor big = at::randn({8192, 8192}, on_gpu(at::kBFloat16));
  cb::TimingOptions o;
  o.warmup = 1;  // compile
  o.calls = kLaunches;
  o.before = [&] {
    for (int i = 0; i < 6; ++i) (void)at::mm(big, big);
  };
  const double sec = cb::run_timed_loop(state, coldstart::kernels::stream_for(out), o, call);
  const double bytes = state_bytes + io_bytes;
  cb::set_bytes_counters(state, bytes, sec);
  state.counters["MiB"] = bytes / (1 << 20);
  state.SetLabel(std::string(m.name) + " " + sel.selector + " " + sel.tuning_key + " " +
                 sel.config.name);
}

}  // namespace

BENCHMARK(BM_SsuDecode)
    ->ArgsProduct({{0, 1}, {1, 8, 64, 256}})
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) { return cb::bench_main("mamba_ssu_bench", argc, argv); }
