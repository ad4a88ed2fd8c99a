// mamba_ssd benchmarks (Google Benchmark through bench_util.h; GPU only, they skip without one):
//
//   BM_SsdChain/<model>/<T>           chunk_scan_combined_varlen, the whole Mamba2 SSD prefill
//                                     chain, one sequence of T tokens, no initial state, float32
//                                     SSM state (Nemotron-3's cache dtype)
//   BM_SsdKernel/<kernel>/<model>/<T> one step of it (0 cumsum, 1 chunk_state, 2 state_passing,
//                                     3 bmm, 4 chunk_scan) on the chain's own intermediates
// models: 0 = Nemotron-3-Nano TP1 (H 64, P 64, G 8, N 128, chunk 128), 1 = Nemotron-3-Super TP8
// (H 16, P 64, G 1, N 128, chunk 128); T in {2048, 8192, 32768}. Inputs are laid out as
// MambaMixer2 passes them (x / B / C column views of the conv output, dt a column slice of the
// in_proj output).
//
// Counters (bench_util.h): `TFLOP/s` = the matmul FLOPs of the step / time, against the device's
// dense bf16 tensor peak; `GB/s` = the bytes the step must move at least (every input read once,
// every output written once) / time, against its HBM bandwidth; `us/token`.
// FLOPs per sequence of T tokens (nch chunks): chunk_state 2 T H P N; bmm 2 nch G cs^2 N (full
// square, vLLM computes it all); chunk_scan 2 T H P N (C h_prev) + H P nch cs (cs + 1) (the
// causal half of CB x); cumsum and state passing none. Autotuning is warm (one call before
// timing; with MSSD_CACHE_DIR set the picks and binaries come from that cache directory, e.g.
// the GPU tests', which tune the same keys at smaller shapes, as vLLM's warmup does). Times are
// CUDA events around each call on torch's current stream.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "harness/jit/jit.h"
#include "harness/kernels/launch_util.h"
#include "harness/kernels/mamba_ssd/mamba_ssd.h"

namespace cj = coldstart::jit;
namespace ms = coldstart::mamba_ssd;
namespace cb = coldstart::bench;

namespace {

const ms::SsdDims kModels[] = {ms::ssd_dims(coldstart::kernels::shapes::kNemotronNanoMambaTp1),
                               ms::ssd_dims(coldstart::kernels::shapes::kNemotronSuperMambaTp8)};
const char* const kModelNames[] = {"nano-tp1", "super-tp8"};
const char* const kKernelNames[] = {"cumsum", "chunk_state", "state_passing", "bmm", "chunk_scan"};

cj::JitRuntime& runtime() {
  static cj::JitRuntime* rt = [] {
    cj::JitOptions o;
    if (const char* dir = std::getenv("MSSD_CACHE_DIR")) o.cache_dir = dir;
    return new cj::JitRuntime(o);
  }();
  return *rt;
}

at::TensorOptions on_gpu(at::ScalarType t) {
  return at::TensorOptions().device(at::kCUDA).dtype(t);
}

// The chain's inputs and intermediates for one sequence of T tokens.
struct Problem {
  ms::SsdDims d;
  int64_t T = 0, nchunks = 0;
  at::Tensor x, dt, A, B, C, D, dt_bias, seq_idx, cu_seqlens, cu_chunk, last_chunk, out;
  ms::CumsumOut cs;
  at::Tensor chunk_states, states, CB;
};

Problem make_problem(const ms::SsdDims& d, int64_t T) {
  Problem p;
  p.d = d;
  p.T = T;
  const int64_t H = d.nheads, P = d.head_dim, G = d.ngroups, N = d.dstate;
  const int64_t conv = H * P + 2 * G * N, proj = H * P + conv + H;
  at::manual_seed(3);
  const at::Tensor xbc = at::randn({T, conv}, on_gpu(at::kBFloat16));
  p.x = xbc.narrow(1, 0, H * P).view({T, H, P});
  p.B = xbc.narrow(1, H * P, G * N).view({T, G, N});
  p.C = xbc.narrow(1, H * P + G * N, G * N).view({T, G, N});
  p.dt =
      (at::randn({T, proj}, on_gpu(at::kFloat)) - 1.5).to(at::kBFloat16).narrow(1, H * P + conv, H);
  p.A = -at::exp(at::rand({H}, on_gpu(at::kFloat)));
  p.D = at::randn({H}, on_gpu(at::kBFloat16));
  p.dt_bias = at::randn({H}, on_gpu(at::kBFloat16)) * 0.5;
  const ms::ChunkMetadata md =
      ms::compute_chunk_metadata({0, static_cast<int32_t>(T)}, {0}, d.chunk_size);
  p.nchunks = static_cast<int64_t>(md.seq_idx.size());
  auto dev = [](const std::vector<int32_t>& v) { return at::tensor(v, at::kInt).to(at::kCUDA); };
  p.seq_idx = dev(md.seq_idx);
  p.cu_seqlens = dev({0, static_cast<int32_t>(T)});
  p.cu_chunk = dev(md.cu_chunk_seqlens);
  p.last_chunk = dev(md.last_chunk_indices);
  p.out = at::empty({T, H, P}, on_gpu(at::kBFloat16));
  return p;
}

void run_chain(Problem& p) {
  ms::chunk_scan_combined_varlen(runtime(), p.x, p.dt, p.A, p.B, p.C, p.d.chunk_size, p.D,
                                 p.dt_bias, p.seq_idx, p.cu_seqlens, p.cu_chunk, p.last_chunk,
                                 at::Tensor(), true, 0.0, INFINITY, p.out, at::kFloat);
}

void run_kernel(Problem& p, int k) {
  cj::JitRuntime& rt = runtime();
  switch (k) {
    case 0:
      p.cs = ms::chunk_cumsum_fwd(rt, p.d, p.dt, p.A, p.cu_chunk, p.dt_bias, true, 0.0, INFINITY);
      break;
    case 1:
      p.chunk_states = ms::chunk_state_fwd(rt, p.d, p.B, p.x, p.cs.dt, p.cs.dA_cumsum, p.cu_chunk);
      break;
    case 2:
      p.states = ms::state_passing_fwd(rt, p.d, p.chunk_states, p.cs.dA_cumsum, p.last_chunk,
                                       at::Tensor(), at::kFloat);
      break;
    case 3: p.CB = ms::bmm_chunk_fwd(rt, p.d, p.C, p.B, p.cu_chunk); break;
    default:
      ms::chunk_scan_fwd(rt, p.d, p.CB, p.x, p.cs.dt, p.cs.dA_cumsum, p.C, p.states, p.cu_chunk,
                         p.out, p.seq_idx, p.D, at::Tensor());
      break;
  }
}

struct Cost {
  double flops = 0, bytes = 0;
};

Cost cost_of(const Problem& p, int k) {
  const double T = static_cast<double>(p.T), nch = static_cast<double>(p.nchunks);
  const double H = p.d.nheads, P = p.d.head_dim, G = p.d.ngroups, N = p.d.dstate,
               cs = p.d.chunk_size;
  const double dt_bytes = H * nch * cs * 4;  // dt_out or dA_cumsum
  const double st_bytes = nch * H * P * N * 4;
  const double cb_bytes = nch * G * cs * cs * 4;
  Cost c;
  switch (k) {
    case 0: c.bytes = T * H * 2 + 2 * dt_bytes; break;
    case 1:
      c.flops = 2 * T * H * P * N;
      c.bytes = T * H * P * 2 + T * G * N * 2 + 2 * dt_bytes + st_bytes;
      break;
    case 2: c.bytes = 2 * st_bytes + dt_bytes; break;
    case 3:
      c.flops = 2 * nch * G * cs * cs * N;
      c.bytes = 2 * T * G * N * 2 + cb_bytes;
      break;
    case 4:
      c.flops = 2 * T * H * P * N + H * P * nch * cs * (cs + 1);
      c.bytes = cb_bytes + 2 * T * H * P * 2 + T * G * N * 2 + st_bytes + 2 * dt_bytes;
      break;
    default: {  // the whole chain
      for (int i = 0; i < 5; ++i) {
        const Cost s = cost_of(p, i);
        c.flops += s.flops;
        c.bytes += s.bytes;
      }
    }
  }
  return c;
}

// The counters of one step (or the chain) taking `sec` seconds per call.
void report(benchmark::State& state, const Problem& p, const Cost& c, double sec) {
  cb::set_flops_counters(state, c.flops, sec, cb::Peak::kBf16);
  cb::set_bytes_counters(state, c.bytes, sec);
  state.counters["us/token"] = sec * 1e6 / static_cast<double>(p.T);
}

void BM_SsdChain(benchmark::State& state) {
  const int model = static_cast<int>(state.range(0));
  Problem p = make_problem(kModels[model], state.range(1));
  state.SetLabel(kModelNames[model]);
  // Default options: one warm-up call (autotune, compile), then one call per measurement.
  const double sec =
      cb::run_timed_loop(state, coldstart::kernels::stream_for(p.out), {}, [&] { run_chain(p); });
  report(state, p, cost_of(p, -1), sec);
}

void BM_SsdKernel(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0)), model = static_cast<int>(state.range(1));
  Problem p = make_problem(kModels[model], state.range(2));
  state.SetLabel(std::string(kKernelNames[k]) + " " + kModelNames[model]);
  for (int i = 0; i < 5; ++i) run_kernel(p, i);  // intermediates, warm picks
  cb::TimingOptions o;
  o.warmup = 0;  // the chain above was the warm-up
  const double sec =
      cb::run_timed_loop(state, coldstart::kernels::stream_for(p.out), o, [&] { run_kernel(p, k); });
  report(state, p, cost_of(p, k), sec);
}

void ChainArgs(benchmark::internal::Benchmark* b) {
  for (int64_t m : {0, 1})
    for (int64_t t : {2048, 8192, 32768}) b->Args({m, t});
}

void KernelArgs(benchmark::internal::Benchmark* b) {
  for (int64_t k = 0; k < 5; ++k)
    for (int64_t m : {0, 1})
      for (int64_t t : {2048, 8192, 32768}) b->Args({k, m, t});
}

}  // namespace

BENCHMARK(BM_SsdChain)
    ->Apply(ChainArgs)
    ->MinTime(0.2)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SsdKernel)
    ->Apply(KernelArgs)
    ->MinTime(0.2)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) { return cb::bench_main("mamba_ssd_bench", argc, argv); }
