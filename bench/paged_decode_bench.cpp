// Split-KV paged decode benchmark (Google Benchmark through bench_util.h; GPU only, it skips
// without one): achieved memory bandwidth of one decode step of one attention layer at
// Qwen3-8B's heads (32 query / 8 KV heads, head_dim 128, block size 16), decode batch sizes
// 1..256 at one context length per row, for the three caches the dense family replays: bf16 and
// fp8 e4m3 (paged_decode_stage1 then paged_decode_stage2, harness/kernels/paged) and
// TurboQuant's 4-bit cache (tq_decode_stage1 then tq_decode_stage2, harness/kernels/turboquant).
//
//   BM_PagedDecode/<cache>/<B>/<context>   cache 0: bf16, 1: fp8, 2: turboquant_4bit_nc;
//                                          context in tokens per sequence
//
// Bytes counted per step: the KV cache each sequence holds (read once: K and V of every cached
// token of every KV head, whatever the GQA group; stage 1 re-reads a KV head for each query head
// of its group, which the L2 should absorb), the query, the block table, stage 1's float32
// partials (written, then read by stage 2) and the bf16 output. Each step reads a different set
// of sequences' blocks, sets cycled so that the cache touched between two uses of a set exceeds
// 256 MiB (more than the L2), so the KV comes from HBM. Steps are queued behind large matmuls so
// the host's launch cost does not leave the GPU idle between them; a measurement is CUDA events
// around `launches` steps, 5 measurements per row, and the reported time is per step.
// Counters (bench_util.h): `GB/s` against the device's HBM bandwidth (issue 28 asks for >= 60%
// at B >= 8), `MiB` per step. The label names the cache dtype, batch and context.
//
// Usage: paged_decode_bench [launches] [Google Benchmark flags]   (launches default 50)
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "harness/jit/jit.h"
#include "harness/kernels/launch_util.h"
#include "harness/kernels/model_shapes.h"
#include "harness/kernels/paged/paged.h"
#include "harness/kernels/turboquant/turboquant.h"

namespace pg = coldstart::paged;
namespace tq = coldstart::tq;
namespace cb = coldstart::bench;
namespace shapes = coldstart::kernels::shapes;

namespace {

constexpr int kBlockSize = 16;
int g_launches = 50;  // decode steps per measurement (the optional first argument)

at::TensorOptions cuda(at::ScalarType t) { return at::TensorOptions().device(at::kCUDA).dtype(t); }

// A TurboQuant cache of `num_blocks` blocks: random index nibbles, and fp16 key norms, value
// scales and zeros drawn from sane ranges (random bytes there would hold fp16 NaNs).
at::Tensor random_tq_cache(const tq::TqLayout& l, int64_t num_blocks) {
  at::Tensor cache = at::randint(0, 256, tq::cache_shape(l, num_blocks), cuda(at::kByte));
  const std::vector<int64_t> field{num_blocks, l.block_size, l.num_kv_heads, 1};
  auto put_f16 = [&](int64_t byte, const at::Tensor& value) {
    cache.narrow(3, byte, 2).copy_(value.to(at::kHalf).view(at::kByte));
  };
  put_f16(l.head_dim / 2, at::rand(field, cuda(at::kFloat)).mul_(4.0).add_(4.0));    // key norm
  put_f16(l.key_bytes + l.head_dim / 2, at::rand(field, cuda(at::kFloat)).mul_(0.2).add_(0.05));
  put_f16(l.key_bytes + l.head_dim / 2 + 2, at::rand(field, cuda(at::kFloat)).sub_(1.5));
  return cache;
}

void BM_PagedDecode(benchmark::State& state) {
  const int cache_kind = static_cast<int>(state.range(0));
  const bool fp8 = cache_kind == 1;
  const bool turboquant = cache_kind == 2;
  const int64_t batch = state.range(1);
  const int64_t context = state.range(2);
  const auto heads = shapes::kQwen3_8B;
  const pg::PagedLayout layout = pg::PagedLayout::make(
      static_cast<int>(heads.head_dim), kBlockSize, static_cast<int>(heads.num_kv_heads),
      fp8 ? pg::CacheDtype::kFP8E4M3 : pg::CacheDtype::kBF16);
  const tq::TqLayout tq_layout = tq::TqLayout::make(
      static_cast<int>(heads.head_dim), kBlockSize, static_cast<int>(heads.num_kv_heads));
  coldstart::jit::JitRuntime& rt = cb::default_runtime();

  const int64_t blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
  const double block_bytes =
      turboquant ? static_cast<double>(kBlockSize) * heads.num_kv_heads * tq_layout.slot_bytes
                 : static_cast<double>(layout.page_size_bytes());
  const double kv_bytes = static_cast<double>(batch) * blocks_per_seq * block_bytes;
  const int64_t sets =
      std::max<int64_t>(2, static_cast<int64_t>(std::ceil(256.0 * (1 << 20) / kv_bytes)));
  const int64_t num_blocks = sets * batch * blocks_per_seq;
  // Random (never zero) K and V; fp8 as bytes of e4m3(x / scale) through the store kernel would
  // cost a prefill per row, so the fp8 cache holds random bytes with the exponent field kept
  // below NaN (0x7f / 0xff are e4m3's NaNs).
  at::Tensor kv_cache;
  if (turboquant) {
    kv_cache = random_tq_cache(tq_layout, num_blocks);
  } else if (fp8) {
    kv_cache = at::randint(0, 0x77, pg::cache_shape(layout, num_blocks), cuda(at::kByte));
  } else {
    kv_cache = at::randn(pg::cache_shape(layout, num_blocks), cuda(at::kBFloat16));
  }
  const at::Tensor k_scale = at::full({1}, 0.05f, cuda(at::kFloat));
  const at::Tensor v_scale = at::full({1}, 0.05f, cuda(at::kFloat));
  // Set s, sequence b owns a random permutation's slice of the blocks.
  const at::Tensor block_tables = at::randperm(num_blocks, cuda(at::kLong))
                                      .to(at::kInt)
                                      .view({sets, batch, blocks_per_seq});
  const at::Tensor seq_lens = at::full({batch}, static_cast<int>(context), cuda(at::kInt));
  const at::Tensor q = at::randn({batch, heads.num_q_heads, heads.head_dim}, cuda(at::kBFloat16));
  const at::Tensor out = at::empty({batch, heads.num_q_heads, heads.head_dim}, cuda(at::kBFloat16));
  // One buffer large enough for either family's views (TurboQuant's has 32 splits, paged 16).
  const at::Tensor ws_buffer = at::empty(
      {std::max(tq::decode_workspace_bytes(batch, heads.num_q_heads, heads.head_dim),
                pg::decode_workspace_bytes(batch, heads.num_q_heads, heads.head_dim))},
      cuda(at::kByte));
  const pg::DecodeWorkspace ws =
      pg::decode_workspace_views(ws_buffer, batch, heads.num_q_heads, heads.head_dim);
  const tq::DecodeWorkspace tq_ws =
      tq::decode_workspace_views(ws_buffer, batch, heads.num_q_heads, heads.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(heads.head_dim));

  // Stage 1's float32 partials, written then read by stage 2.
  const double partial_bytes = 2.0 * (turboquant ? tq_ws.mid_o : ws.mid_o).numel() * 4;
  const double io_bytes = 2.0 * q.numel() * 2 + 4.0 * batch * blocks_per_seq + partial_bytes;
  cb::TimingOptions o;
  o.warmup = static_cast<int>(sets);  // every set once: block tables' alignment keys compile here
  o.calls = g_launches;
  o.before = [] { cb::queue_busy_matmuls(); };
  const double sec =
      cb::run_timed_loop(state, coldstart::kernels::stream_for(out), o, [&](int64_t i) {
        if (turboquant) {
          tq::decode(rt, tq_layout, q, kv_cache, block_tables[i % sets], seq_lens, scale, tq_ws);
        } else {
          pg::decode(rt, layout, q, kv_cache, k_scale, v_scale, block_tables[i % sets], seq_lens,
                     scale, ws, out);
        }
      });
  cb::set_bytes_counters(state, kv_bytes + io_bytes, sec);
  state.counters["MiB"] = (kv_bytes + io_bytes) / (1 << 20);
  static const char* const kCacheNames[] = {"bf16", "fp8", "turboquant_4bit"};
  state.SetLabel(std::string("decode ") + kCacheNames[cache_kind] + " B=" +
                 std::to_string(batch) + " ctx=" + std::to_string(context));
}

// On the GPU path: reads the optional launch count.
bool setup(const std::vector<std::string>& positional) {
  if (positional.size() > 1 || (positional.size() == 1 && std::atoi(positional[0].c_str()) < 1)) {
    std::fprintf(stderr, "usage: paged_decode_bench [launches >= 1] [Google Benchmark flags]\n");
    return false;
  }
  if (positional.size() == 1) g_launches = std::atoi(positional[0].c_str());
  return true;
}

}  // namespace

BENCHMARK(BM_PagedDecode)
    ->ArgsProduct({{0, 1, 2}, {1, 8, 32, 128, 256}, {1024, 4096}})
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) { return cb::bench_main("paged_decode_bench", argc, argv, setup); }
