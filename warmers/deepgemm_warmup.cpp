// DeepGEMM warmers for DeepSeek V4 (deepseek-v4 model family), from the reference warmer
// ../shared/seeds/deepseek-v4-deep-gemm-warmup.txt (TokenSpeed tokenspeed-kernel
// thirdparty/deep_gemm/warmup.py, PR #398 and #427):
//
// deepgemm-warmup: the seed's coverage. Every M of its dense sampling (1..2048, then every 16th,
//   plus max_num_batched_tokens) through fp8_gemm_nt for each distinct FP8 linear (N, K), through
//   fp8_einsum "bhr,hdr->bhd" for the grouped output projection, through tf32_hc_prenorm_gemm
//   (with the split count the model would use at that M) and through the MoE's two m-grouped
//   contiguous GEMMs at the row bound the model lays each token count out in; the ragged
//   fp8_mqa_logits at 1 and 256 tokens over 4096 keys (clean_logits False, as the seed and the model call it);
//   get_paged_mqa_logits_metadata + fp8_paged_mqa_logits at every 32-aligned decode batch up to
//   the largest decode batch (max(max capture size, max_num_seqs)). Unlike the seed, the distinct
//   kernels are compiled first on a pool of host threads (one per core; the JIT compiles distinct
//   keys concurrently) and only then are the sampled calls run, every one a cache hit: the same
//   kernels, less wall time. The seed gates its GEMM warmups to SM100+ (get_device_capability
//   major < 10 returns), which would leave an H200 with nothing warmed; this warmer runs on both.
// deepgemm-warmup-serial: the same with one thread: the seed's cost, each kernel compiled inline
//   by the first call that needs it.
// decode-warmup: only what decode batches reach (the state before PR #398): the GEMMs at the
//   decode batch sizes (the capture sizes, else 1..max_num_seqs) and the paged indexer kernels at
//   the 32-aligned decode buckets; nothing of the prefill sizes and no ragged MQA logits.
// deepgemm-warmup-mtp: deepgemm-warmup plus what speculative decoding's verify steps reach. The
//   seed warms the paged indexer logits with one query row per request (its q.unsqueeze(1)), but
//   a verify step has 1 + num_speculative_tokens rows a request: the kernel's next_n is part of
//   its compile key, so with MTP the first verify step compiles it on the hot path. This warmer
//   adds the paged logits at that next_n, or, where the kernel flattens it (q > 2), the schedule
//   metadata at the 32-aligned buckets of the flattened rows (the largest decode batch x q). Not the seed's:
//   what fixing it would add.
//
// Each warmer reports its call and kernel counts, the compile seconds (sum over compiles; in
// compile-only mode compiles the run's compile memo served count their first measurement) and the
// wall seconds, in the result's `warmer_reports` and under the table.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "harness/kernels/deepgemm/deepgemm.h"
#include "harness/kernels/deepgemm/deepgemm_indexer.h"
#include "harness/models/deepseek_v4.h"
#include "harness/models/spec_decode.engine_keys.h"
#include "warmers/warmer.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

namespace dg = deepgemm;
namespace v4 = deepseek_v4;

/// One warmup call; calls with equal `kernel` reach the same compiled kernel.
struct Call {
  std::string kernel;
  std::function<void()> run;
};

class DeepGemmWarmupBase : public Warmer {
 protected:
  enum class Coverage { kDense, kDecode };

  /// `verify`: also the verify steps' paged indexer kernels (deepgemm-warmup-mtp).
  void warm(WarmupContext& ctx, Coverage coverage, unsigned threads, bool verify = false) {
    const Scenario& s = ctx.scenario();
    if (s.model.architecture != "DeepseekV4ForCausalLM") {
      ctx.skip("the model is not DeepSeek V4: no DeepGEMM call sites");
      return;
    }
    const v4::Dims d = v4::dims(s.model, &s.engine);
    const v4::DeepGemmSites sites = v4::deepgemm_sites(d);
    const Target& t = ctx.target();
    target_ = dg::gemm_target(&t);
    device_ = at::TensorOptions().device(ctx.device());
    meta_ = ctx.device().is_meta();
    const int64_t max_tokens = s.engine.max_num_batched_tokens;
    int64_t max_decode = s.engine.max_num_seqs;
    if (!s.engine.cudagraph_capture_sizes.empty()) {
      max_decode = std::max<int64_t>(max_decode, s.engine.cudagraph_capture_sizes.back());
    }
    std::vector<int64_t> ms;
    if (coverage == Coverage::kDense) {
      ms = dg::dense_warmup_m_values(max_tokens);
    } else if (!s.engine.cudagraph_capture_sizes.empty()) {
      for (int m : s.engine.cudagraph_capture_sizes) ms.push_back(m);
    } else {
      for (int64_t m = 1; m <= s.engine.max_num_seqs; ++m) ms.push_back(m);
    }

    std::vector<Call> calls;
    jit::JitRuntime& rt = ctx.jit();
    for (const auto& [n, k] : sites.fp8_linears) add_linear(rt, calls, n, k, ms);
    add_einsum(rt, calls, sites, ms);
    add_hc(rt, calls, sites, ms);
    add_moe(rt, calls, sites, ms);
    if (sites.indexer) {
      if (coverage == Coverage::kDense) add_mqa_logits(rt, calls, sites);
      add_paged_logits(rt, calls, sites, max_decode, 1);
      const int q = 1 + num_speculative_tokens(s.engine);
      if (verify && q > 1) {
        const int next_n = v4::paged_logits_native_next_n(q) ? q : 1;
        add_paged_logits(rt, calls, sites, next_n == q ? max_decode : max_decode * q, next_n);
      }
    }

    // First the distinct kernels, on `threads` host threads; then every sampled call, in order.
    const auto t0 = std::chrono::steady_clock::now();
    const size_t records0 = rt.monitor().num_records();
    std::vector<const Call*> firsts;
    std::map<std::string, bool> seen;
    for (const Call& c : calls) {
      if (seen.emplace(c.kernel, true).second) firsts.push_back(&c);
    }
    {
      // The pool's compiles run `threads` at a time: compile-only mode charges what the compile
      // memo serves accordingly (JitMonitor::memo_charge_ms_since).
      jit::JitMonitor::ParallelCompiles pool(rt.monitor(), static_cast<int>(threads));
      run_pool(firsts, threads);
    }
    for (const Call& c : calls) c.run();
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double compile_s = rt.monitor().compile_ms_since(records0) / 1000.0;
    const size_t compiled = rt.monitor().num_records() - records0;
    // Compile-only mode: what the run's compile memo served took no time here; the phase is
    // charged what it would have cost on these threads (JitMonitor::memo_charge_ms_since).
    const double charged_s = rt.monitor().memo_charge_ms_since(records0) / 1000.0;
    std::string summary = fmt::format(
        "{} calls over {} M values, {} distinct kernels ({} compiled or loaded here), compile {:.2f} s, "
        "wall {:.2f} s, {} thread{}",
        calls.size(), ms.size(), firsts.size(), compiled, compile_s, wall_s, threads,
        threads == 1 ? "" : "s");
    if (charged_s > 0)
      summary += fmt::format(" (compile-only: the compile memo served them; charged {:.2f} s)", charged_s);
    if (verify && num_speculative_tokens(s.engine) == 0)
      summary += "; no speculative decoding, so no verify-step kernels beyond deepgemm-warmup's";
    ctx.report(summary, {{"calls", calls.size()},
                         {"m_values", ms.size()},
                         {"distinct_kernels", firsts.size()},
                         {"compiled_or_loaded", compiled},
                         {"compile_s", compile_s},
                         {"wall_s", wall_s},
                         {"memo_charged_s", charged_s},
                         {"threads", threads}});
  }

 private:
  /// Runs each call on a pool of `threads` (the main thread when 1); the first error is rethrown.
  static void run_pool(const std::vector<const Call*>& todo, unsigned threads) {
    if (threads <= 1) {
      for (const Call* c : todo) c->run();
      return;
    }
    std::atomic<size_t> next{0};
    std::exception_ptr error;
    std::mutex mu;
    std::vector<std::thread> pool;
    for (unsigned i = 0; i < threads; ++i) {
      pool.emplace_back([&] {
        for (size_t j = next++; j < todo.size(); j = next++) {
          try {
            todo[j]->run();
          } catch (...) {
            std::lock_guard<std::mutex> lock(mu);
            if (!error) error = std::current_exception();
          }
        }
      });
    }
    for (std::thread& t : pool) t.join();
    if (error) std::rethrow_exception(error);
  }

  at::Tensor zeros(std::vector<int64_t> shape, at::ScalarType t) const {
    return meta_ ? at::empty(shape, device_.dtype(t)) : at::zeros(shape, device_.dtype(t));
  }
  at::Tensor ones(std::vector<int64_t> shape) const {
    return meta_ ? at::empty(shape, device_.dtype(at::kFloat)) : at::ones(shape, device_.dtype(at::kFloat));
  }
  static int64_t align4(int64_t m) { return (m + 3) / 4 * 4; }

  void add_linear(jit::JitRuntime& rt, std::vector<Call>& calls, int64_t n, int64_t k, const std::vector<int64_t>& ms) {
    const int64_t max_m = ms.back();
    const at::Tensor a = zeros({max_m, k}, at::kByte), b = zeros({n, k}, at::kByte);
    const at::Tensor sfb = ones({(n + 127) / 128, k / 128});
    const at::Tensor d = zeros({max_m, n}, at::kBFloat16);
    for (int64_t m : ms) {
      const dg::GemmConfig c = dg::select_fp8_gemm_config({dg::GemmType::kNormal, m, n, k, 1}, target_.sm, target_.num_sms);
      calls.push_back({fmt::format("fp8_gemm_nt {}x{} {}", n, k, c.name()), [=, &rt, this] {
                         dg::fp8_gemm_nt(rt, target_, a.narrow(0, 0, m), ones({k / 128, align4(m)}), b, sfb,
                                         d.narrow(0, 0, m));
                       }});
    }
  }

  void add_einsum(jit::JitRuntime& rt, std::vector<Call>& calls, const v4::DeepGemmSites& s, const std::vector<int64_t>& ms) {
    const int64_t g = s.einsum_groups, n = s.einsum_n, k = s.einsum_k, max_m = ms.back();
    const at::Tensor x = zeros({max_m, g, k}, at::kByte), y = zeros({g, n, k}, at::kByte);
    const at::Tensor sfy = ones({g, (n + 127) / 128, k / 128});
    const at::Tensor z = zeros({max_m, g, n}, at::kBFloat16);
    for (int64_t m : ms) {
      const dg::GemmConfig c = dg::select_fp8_gemm_config({dg::GemmType::kBatched, m, n, k, static_cast<int>(g)},
                                                           target_.sm, target_.num_sms);
      calls.push_back({fmt::format("fp8_einsum {}", c.name()), [=, &rt, this] {
                         dg::fp8_einsum_bhr_hdr_bhd(rt, target_, x.narrow(0, 0, m), ones({g, k / 128, align4(m)}), y, sfy,
                                                    z.narrow(0, 0, m));
                       }});
    }
  }

  void add_hc(jit::JitRuntime& rt, std::vector<Call>& calls, const v4::DeepGemmSites& s, const std::vector<int64_t>& ms) {
    const int64_t n = s.hc_n, k = s.hc_k, max_m = ms.back();
    const at::Tensor x = zeros({max_m, k}, at::kBFloat16);
    const at::Tensor fn = ones({n, k});
    for (int64_t m : ms) {
      const int splits = dg::hc_num_splits(m, k, target_.num_sms);
      calls.push_back({fmt::format("tf32_hc_prenorm_gemm splits={}", splits), [=, &rt, this] {
                         at::Tensor mul = zeros({splits, m, n}, at::kFloat), sq = zeros({splits, m}, at::kFloat);
                         dg::tf32_hc_prenorm_gemm(rt, target_, x.narrow(0, 0, m), fn, mul, sq);
                       }});
    }
  }

  void add_moe(jit::JitRuntime& rt, std::vector<Call>& calls, const v4::DeepGemmSites& s, const std::vector<int64_t>& ms) {
    const int64_t E = s.experts;
    const int64_t max_rows = dg::m_grouped_contiguous_rows(ms.back(), s.top_k, E);
    for (const auto& [n, k] : {s.moe_w13, s.moe_w2}) {
      const at::Tensor a = zeros({max_rows, k}, at::kByte), b = zeros({E, n, k}, at::kByte);
      const at::Tensor sfb = ones({E, (n + 127) / 128, k / 128});
      const at::Tensor d = zeros({max_rows, n}, at::kBFloat16);
      // Every row padding but the first block (expert 0): the kernel skips padding blocks.
      at::Tensor idx = meta_ ? at::empty({max_rows}, device_.dtype(at::kInt)) : at::full({max_rows}, -1, device_.dtype(at::kInt));
      if (!meta_) idx.narrow(0, 0, 128).fill_(0);
      for (int64_t m : ms) {
        const int64_t rows = dg::m_grouped_contiguous_rows(m, s.top_k, E);
        const dg::GemmConfig c = dg::select_fp8_gemm_config({dg::GemmType::kMGroupedContiguous, rows, n, k, static_cast<int>(E)},
                                                             target_.sm, target_.num_sms);
        calls.push_back({fmt::format("m_grouped_fp8_gemm_nt_contiguous {}x{} {}", n, k, c.name()), [=, &rt, this] {
                           dg::m_grouped_fp8_gemm_nt_contiguous(rt, target_, a.narrow(0, 0, rows), ones({k / 128, align4(rows)}), b,
                                                                sfb, d.narrow(0, 0, rows), idx.narrow(0, 0, rows));
                         }});
      }
    }
  }

  void add_mqa_logits(jit::JitRuntime& rt, std::vector<Call>& calls, const v4::DeepGemmSites& s) {
    const int64_t H = s.index_heads, D = s.index_dim, kv_len = 4096;
    for (int64_t tokens : {int64_t{1}, int64_t{256}}) {
      calls.push_back({"fp8_mqa_logits", [=, &rt, this] {
                         const at::Tensor q = zeros({tokens, H, D}, at::kByte), kv = zeros({kv_len, D}, at::kByte);
                         const at::Tensor sf = ones({kv_len}), w = ones({tokens, H});
                         const at::Tensor ks = zeros({tokens}, at::kInt);
                         const at::Tensor ke = meta_ ? at::empty({tokens}, device_.dtype(at::kInt))
                                                     : at::full({tokens}, kv_len, device_.dtype(at::kInt));
                         at::Tensor logits = zeros({tokens, kv_len}, at::kFloat);
                         dg::fp8_mqa_logits(rt, target_, q, kv, sf, w, ks, ke, logits, /*clean_logits=*/false);
                       }});
    }
  }

  /// The schedule metadata + paged logits at every 32-aligned batch bucket up to `max_decode`
  /// requests of `next_n` query rows each.
  void add_paged_logits(jit::JitRuntime& rt, std::vector<Call>& calls, const v4::DeepGemmSites& s, int64_t max_decode,
                        int64_t next_n) {
    const int64_t H = s.index_heads, D = s.index_dim, bkv = v4::kIndexerBlockKv;
    const int64_t top = std::max<int64_t>(32, (max_decode + 31) / 32 * 32);
    for (int64_t batch = 32; batch <= top; batch += 32) {
      calls.push_back({fmt::format("paged_mqa_logits batch<={} next_n={}", batch, next_n), [=, &rt, this] {
                         const at::Tensor q = zeros({batch, next_n, H, D}, at::kByte);
                         const at::Tensor cache = zeros({batch, bkv * (D + 4)}, at::kByte);
                         const at::Tensor w = ones({batch * next_n, H});
                         const at::Tensor lens = meta_ ? at::empty({batch, next_n}, device_.dtype(at::kInt))
                                                       : at::full({batch, next_n}, bkv, device_.dtype(at::kInt));
                         const at::Tensor table = meta_ ? at::empty({batch, 1}, device_.dtype(at::kInt))
                                                        : at::arange(batch, device_.dtype(at::kInt)).view({batch, 1});
                         at::Tensor sched = zeros({target_.num_sms + 1, 2}, at::kInt);
                         dg::get_paged_mqa_logits_metadata(rt, target_, lens, bkv, sched);
                         at::Tensor logits = zeros({batch * next_n, 256}, at::kFloat);
                         dg::fp8_paged_mqa_logits(rt, target_, q, cache, w, lens, table, sched, logits);
                       }});
    }
  }

  dg::GemmTarget target_;
  at::TensorOptions device_;
  bool meta_ = true;
};

class DeepGemmWarmup final : public DeepGemmWarmupBase {
 public:
  std::string name() const override { return "deepgemm-warmup"; }
  std::string description() const override {
    return "the seed's dense-M DeepGEMM warmup (TokenSpeed PR #398 / #427): every M to 2048 then every 16th, each "
           "FP8 linear, the grouped output projection, the HC GEMM, the MoE GEMMs, the indexer kernels; distinct "
           "kernels compiled on one thread per core";
  }
  void run(WarmupContext& ctx) override {
    warm(ctx, Coverage::kDense, std::max(1u, std::thread::hardware_concurrency()));
  }
};

class DeepGemmWarmupMtp final : public DeepGemmWarmupBase {
 public:
  std::string name() const override { return "deepgemm-warmup-mtp"; }
  std::string description() const override {
    return "deepgemm-warmup plus the verify steps' paged indexer kernels (next_n = 1 + num_speculative_tokens, or "
           "the flattened batch buckets), which the seed's one-row-per-request paged warmup leaves to the first "
           "verify step under MTP";
  }
  void run(WarmupContext& ctx) override {
    warm(ctx, Coverage::kDense, std::max(1u, std::thread::hardware_concurrency()), /*verify=*/true);
  }
};

class DeepGemmWarmupSerial final : public DeepGemmWarmupBase {
 public:
  std::string name() const override { return "deepgemm-warmup-serial"; }
  std::string description() const override {
    return "deepgemm-warmup on one thread: every kernel compiled inline by its first call, as the seed does";
  }
  void run(WarmupContext& ctx) override { warm(ctx, Coverage::kDense, 1); }
};

class DecodeWarmup final : public DeepGemmWarmupBase {
 public:
  std::string name() const override { return "decode-warmup"; }
  std::string description() const override {
    return "DeepGEMM kernels at decode batch sizes only (the capture sizes; the paged indexer at 32-aligned decode "
           "buckets): the coverage before TokenSpeed PR #398, which leaves prefill tiles to the first prompt";
  }
  void run(WarmupContext& ctx) override { warm(ctx, Coverage::kDecode, 1); }
};

CS_REGISTER_WARMER(DeepGemmWarmup);
CS_REGISTER_WARMER(DeepGemmWarmupMtp);
CS_REGISTER_WARMER(DeepGemmWarmupSerial);
CS_REGISTER_WARMER(DecodeWarmup);

}  // namespace
}  // namespace coldstart
