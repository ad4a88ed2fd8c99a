// GDN decode kernels on the GPU: achieved memory bandwidth of the decode update
// (gdn_decode_update) at decode batch sizes and of the fused MTP kernel (gdn_decode_mtp) at the
// request counts that select its three value tiles, for bf16 and float32 SSM states.
//
// Bytes counted per launch: the state slots read and written (decode: one read + one write per
// sequence and value head; MTP: one read + one write per token), q/k/v (or mixed_qkv + the output
// gate), a, b and the bf16 output. Each iteration uses a different set of state slots, sets
// cycled so that the state touched between two uses of a slot exceeds 256 MiB (more than the L2),
// so the state comes from HBM. Launches are queued behind a large matmul so the host's launch cost
// does not leave the GPU idle between them; the time is from CUDA events around `iters` launches.
// Reported: microseconds per launch, TB/s (1e12 B/s) and the percentage of the H200's HBM
// bandwidth (bench/h200_ceilings.h; the brief asks for >= 40% at B = 8..256).
//
// Usage: gdn_decode_bench [iters]   (default 50). Without a CUDA GPU it prints why and exits 0.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/h200_ceilings.h"
#include "harness/jit/jit.h"
#include "harness/kernels/gdn_decode/gdn_decode.h"
#include "harness/kernels/launch_util.h"

#ifdef COLDSTART_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gd = coldstart::gdn_decode;

namespace {

constexpr double kTargetBytesPerS = coldstart::bench::kH200.hbm_bytes_per_s;
const gd::GdnDims kDims{16, 32, 128, 128};  // Qwen3-Next-80B-A3B, TP1
constexpr int64_t kConvDim = 2 * 16 * 128 + 32 * 128;
constexpr int64_t kSsm = 32 * 128 * 128;

#ifdef COLDSTART_WITH_CUDA

#define BENCH_CUDA_CHECK(call)                                                           \
  do {                                                                                   \
    const cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,          \
                   cudaGetErrorString(e_));                                              \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

at::TensorOptions cuda(at::ScalarType t) { return at::TensorOptions().device(at::kCUDA).dtype(t); }

// Keeps the GPU busy for a few milliseconds so the launches queued after it run back to back.
void occupy_gpu(const at::Tensor& big) {
  for (int i = 0; i < 4; ++i) (void)at::mm(big, big);
}

// Milliseconds of `iters` calls of launch(i), timed on torch's current stream, after
// `warm` first calls (every slot set once: each set's index pointer alignment is its own compile
// key, which must not compile inside the timed loop).
template <typename F>
double time_ms(int iters, int64_t warm, const at::Tensor& big, F launch) {
  void* stream = coldstart::kernels::stream_for(big);
  cudaEvent_t start, stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  for (int64_t i = 0; i < warm; ++i) launch(static_cast<int>(i));
  BENCH_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  occupy_gpu(big);
  BENCH_CUDA_CHECK(cudaEventRecord(start, static_cast<cudaStream_t>(stream)));
  for (int i = 0; i < iters; ++i) launch(i);
  BENCH_CUDA_CHECK(cudaEventRecord(stop, static_cast<cudaStream_t>(stream)));
  BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  BENCH_CUDA_CHECK(cudaEventDestroy(start));
  BENCH_CUDA_CHECK(cudaEventDestroy(stop));
  return ms;
}

// Number of slot sets of `set_bytes` each so that a cycle touches more than 256 MiB.
int64_t num_sets(double set_bytes) {
  return std::max<int64_t>(2, static_cast<int64_t>(std::ceil(256.0 * (1 << 20) / set_bytes)));
}

void report(const char* kernel, const char* dtype, const std::string& shape, double bytes,
            double ms, int iters) {
  const double us = ms * 1e3 / iters;
  const double bps = bytes / (us * 1e-6);
  std::printf("%-8s %-5s %-22s %10.2f %12.3f %8.3f %7.1f%%\n", kernel, dtype, shape.c_str(), us,
              bytes / (1 << 20), bps / 1e12, 100.0 * bps / kTargetBytesPerS);
}

void bench_update(coldstart::jit::JitRuntime& rt, int64_t batch, at::ScalarType st, int iters,
                  const at::Tensor& big) {
  const int64_t elt = st == at::kFloat ? 4 : 2;
  const double state_bytes = 2.0 * batch * kSsm * elt;  // read + write
  const double io_bytes = batch * (2.0 * 2048 + 4096) * 2 + batch * 64 * 2 + batch * 4096 * 2;
  const int64_t sets = num_sets(state_bytes / 2);
  const at::Tensor state = at::randn({sets * batch, 32, 128, 128}, cuda(at::kFloat)).mul_(0.1).to(st);
  const at::Tensor slots = at::randperm(sets * batch, cuda(at::kLong)).to(at::kInt).view({sets, batch});
  const at::Tensor conv = at::randn({batch, kConvDim}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor ba = at::randn({batch, 64}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor A_log = at::rand({32}, cuda(at::kFloat));
  const at::Tensor dt_bias = at::randn({32}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor cu = at::arange(batch + 1, cuda(at::kInt));
  const at::Tensor out = at::empty({batch, 32, 128}, cuda(at::kBFloat16));
  const at::Tensor q = conv.narrow(1, 0, 2048).view({batch, 16, 128});
  const at::Tensor k = conv.narrow(1, 2048, 2048).view({batch, 16, 128});
  const at::Tensor v = conv.narrow(1, 4096, 4096).view({batch, 32, 128});
  const float scale = 1.0f / std::sqrt(128.0f);
  const double ms = time_ms(iters, sets, big, [&](int i) {
    gd::fused_sigmoid_gating_delta_rule_update(rt, kDims, A_log, ba.narrow(1, 32, 32),
                                               ba.narrow(1, 0, 32), dt_bias, q, k, v, state,
                                               slots[i % sets], cu, at::Tensor(), out, scale, true);
  });
  report("update", st == at::kFloat ? "fp32" : "bf16", "B=" + std::to_string(batch),
         state_bytes + io_bytes, ms, iters);
}

void bench_mtp(coldstart::jit::JitRuntime& rt, int64_t reqs, int64_t per_req, at::ScalarType st,
               int iters, const at::Tensor& big, int num_sms) {
  const int64_t elt = st == at::kFloat ? 4 : 2;
  const int64_t l = reqs * per_req;
  const double state_bytes = static_cast<double>(reqs + l) * kSsm * elt;  // 1 read + T writes
  const double io_bytes = l * (kConvDim + 2.0 * 4096) * 2 + l * 64 * 2;
  const int64_t sets = num_sets(state_bytes);
  // Slot 0 is vLLM's null block; each set holds reqs * per_req distinct slots >= 1.
  const at::Tensor state = at::randn({sets * l + 1, 32, 128, 128}, cuda(at::kFloat)).mul_(0.1).to(st);
  const at::Tensor slots = (at::randperm(sets * l, cuda(at::kLong)) + 1).to(at::kInt).view({sets, reqs, per_req});
  const at::Tensor qkvz = at::randn({l, kConvDim + 4096}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor ba = at::randn({l, 64}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor A_log = at::rand({32}, cuda(at::kFloat));
  const at::Tensor dt_bias = at::randn({32}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor norm_w = at::ones({128}, cuda(at::kBFloat16));
  const at::Tensor cu = at::arange(0, l + 1, per_req, cuda(at::kInt));
  const at::Tensor acc = at::full({reqs}, static_cast<int>(per_req), cuda(at::kInt));
  const at::Tensor out = at::empty({l, 32, 128}, cuda(at::kBFloat16));
  const float scale = 1.0f / std::sqrt(128.0f);
  const double ms = time_ms(iters, sets, big, [&](int i) {
    gd::fused_gdn_decode_post_conv_mtp(rt, kDims, qkvz.narrow(1, 0, kConvDim), ba.narrow(1, 32, 32),
                                       ba.narrow(1, 0, 32), A_log, dt_bias, slots[i % sets], cu,
                                       acc, state, qkvz.narrow(1, kConvDim, 4096).view({l, 32, 128}),
                                       norm_w, out, scale, 1e-6f, "silu", num_sms);
  });
  const int bv = gd::mtp_value_tile(static_cast<int>(reqs), num_sms, kDims);
  report("mtp", st == at::kFloat ? "fp32" : "bf16",
         "reqs=" + std::to_string(reqs) + " T=" + std::to_string(per_req) + " BV=" + std::to_string(bv),
         state_bytes + io_bytes, ms, iters);
}

#endif  // COLDSTART_WITH_CUDA

}  // namespace

int main(int argc, char** argv) {
#ifndef COLDSTART_WITH_CUDA
  (void)argc;
  (void)argv;
  std::printf("gdn_decode_bench: skipped (this build's libtorch has no CUDA backend)\n");
  return 0;
#else
  if (!at::hasCUDA()) {
    std::printf("gdn_decode_bench: skipped (libtorch sees no CUDA device)\n");
    return 0;
  }
  const int iters = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  cudaDeviceProp prop{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs; %d launches per row; %% of %.1f TB/s\n", prop.name,
              prop.multiProcessorCount, iters, kTargetBytesPerS / 1e12);
  std::printf("%-8s %-5s %-22s %10s %12s %8s %8s\n", "kernel", "state", "shape", "us/launch",
              "MiB/launch", "TB/s", "target");
  coldstart::jit::JitRuntime rt(coldstart::jit::JitOptions{});
  const at::Tensor big = at::randn({8192, 8192}, cuda(at::kBFloat16));
  for (at::ScalarType st : {at::kBFloat16, at::kFloat}) {
    for (int64_t b : {1, 8, 32, 128, 256}) bench_update(rt, b, st, iters, big);
  }
  const int sms = prop.multiProcessorCount;
  for (at::ScalarType st : {at::kBFloat16, at::kFloat}) {
    for (int reqs : gd::mtp_warmup_request_counts(sms, kDims)) bench_mtp(rt, reqs, 4, st, iters, big, sms);
  }
  return 0;
#endif
}
