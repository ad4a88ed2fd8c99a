// mamba_ssu benchmark (Google Benchmark, GPU only; it skips without a CUDA GPU): vLLM's
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
// 200 launches. Counters: `TB/s` (1e12 B/s), `%HBM` of the H200's 4.8 TB/s, `us/launch`, `MiB`.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "bench/h200_ceilings.h"
#include "harness/jit/driver.h"
#include "harness/jit/jit.h"
#include "harness/kernels/launch_util.h"
#include "harness/kernels/mamba_ssu/mamba_ssu.h"

namespace cj = coldstart::jit;
namespace ms = coldstart::mamba_ssu;

namespace {

constexpr double kHbmBytesPerS = coldstart::bench::kH200.hbm_bytes_per_s;
constexpr int kLaunches = 200;

struct Model {
  const char* name;
  int64_t H, P, G, N;
};
const Model kModels[] = {{"nano-tp1", 64, 64, 8, 128}, {"super-tp8", 16, 64, 1, 128}};

cj::JitRuntime& runtime() {
  static cj::JitRuntime* rt = new cj::JitRuntime(cj::JitOptions{});
  return *rt;
}

std::string device_name() {
  const cj::DriverApi& d = cj::driver();
  CUdevice dev = 0;
  char name[256] = {0};
  if (d.cuDeviceGet(&dev, 0) != CUDA_SUCCESS || d.cuDeviceGetName(name, sizeof(name), dev) != CUDA_SUCCESS) {
    return "";
  }
  return name;
}

at::TensorOptions on_gpu(at::ScalarType t) { return at::TensorOptions().device(at::kCUDA).dtype(t); }

// Milliseconds of `launches` calls of fn(i) between two events on `stream`, queued behind work
// that keeps the GPU busy while the host enqueues them.
template <class F>
double time_ms(void* stream, const at::Tensor& big, F&& fn) {
  const cj::DriverApi& d = cj::driver();
  CUevent a = nullptr, b = nullptr;
  d.cuEventCreate(&a, 0);
  d.cuEventCreate(&b, 0);
  for (int i = 0; i < 6; ++i) (void)at::mm(big, big);
  d.cuEventRecord(a, static_cast<CUstream>(stream));
  for (int i = 0; i < kLaunches; ++i) fn(i);
  d.cuEventRecord(b, static_cast<CUstream>(stream));
  d.cuEventSynchronize(b);
  float ms = 0;
  d.cuEventElapsedTime(&ms, a, b);
  d.cuEventDestroy(a);
  d.cuEventDestroy(b);
  return ms;
}

void BM_SsuDecode(benchmark::State& state) {
  if (!at::hasCUDA()) {
    state.SkipWithError("needs a CUDA GPU and a CUDA libtorch");
    return;
  }
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
                             device_name(), ""};
  cj::Selection sel;
  auto call = [&](int i) {
    const at::Tensor s = idx[i % sets].narrow(0, 0, B);
    sel = ms::selective_state_update(runtime(), src, st, x, dt, A_e, Bm, Cm, D_e, db_e, true, s, s,
                                     out);
  };
  call(0);  // compile
  const at::Tensor big = at::randn({8192, 8192}, on_gpu(at::kBFloat16));
  void* stream = coldstart::kernels::stream_for(out);
  double total_ms = 0;
  for (auto _ : state) {
    const double ms_all = time_ms(stream, big, call);
    total_ms += ms_all;
    state.SetIterationTime(ms_all * 1e-3 / kLaunches);
  }
  const double sec = total_ms * 1e-3 / (static_cast<double>(state.iterations()) * kLaunches);
  const double bytes = state_bytes + io_bytes;
  state.counters["TB/s"] = bytes / sec * 1e-12;
  state.counters["%HBM"] = 100.0 * bytes / sec / kHbmBytesPerS;
  state.counters["us/launch"] = sec * 1e6;
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

BENCHMARK_MAIN();
