// The replay engine (engine.h), part 2 of 5: the profile run and KV cache allocation (memory
// accounting, vLLM's cache plan, block table, free block queue, binding caches to mixers).
#include "harness/engine/engine.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "harness/engine/engine_internal.h"
#include "harness/models/spec_decode.engine_keys.h"
#include "harness/engine/workspace_policy.engine_keys.h"
#include "harness/jit/select.h"
#include "harness/replay/kv_cache_plan.h"
#include "harness/runtime/meta_memory.h"

namespace coldstart {

using engine_detail::Clock;
using engine_detail::cdiv;
using engine_detail::ms_since;

std::vector<SeqStep> Engine::dummy_seqs(int num_tokens) const {
  // vLLM V1 GPUModelRunner._dummy_run (gpu_model_runner.py, main of 2026, commit 000fc94b):
  // num_reqs = min(num_tokens, max_num_seqs) requests of num_tokens // num_reqs tokens, the last
  // one also taking the remainder; every token in the null block.
  const int num_reqs = std::max(1, std::min(num_tokens, scenario_.engine.max_num_seqs));
  std::vector<SeqStep> seqs;
  for (int r = 0; r < num_reqs; ++r) {
    SeqStep s;
    s.req_slot = r;
    s.query_len = num_tokens / num_reqs + (r == num_reqs - 1 ? num_tokens % num_reqs : 0);
    s.blocks.assign(1, 0);
    seqs.push_back(s);
  }
  return seqs;
}

void Engine::do_profile_run() {
  // vLLM's profile_run: _dummy_run(max_num_batched_tokens, is_profile=True) with no attention
  // metadata, so every mixer returns early; then _dummy_sampler_run on the last token of each
  // dummy request. Its peak activation memory sizes the KV cache.
  reset_peak_memory(mode());
  // Compile-only: the libraries' device state created at their first call in this run (cuBLAS's
  // handle and workspace) grows the memory outside torch's allocator (target.h).
  if (mode() != DeviceMode::kCuda && options_.device.target.memory_bytes > 0) {
    set_meta_outside_allocator_bytes(options_.device.target.context_bytes +
                                     options_.device.target.library_growth_bytes);
  }
  const std::vector<SeqStep> seqs = dummy_seqs(scenario_.engine.max_num_batched_tokens);
  ForwardBatch b = make_batch(seqs, /*skip_attention=*/true);
  sample(model_->compute_logits(last_token_hidden(run_eager(b), b)), b.num_reqs);
  drafter_dummy_run(b, /*capturing=*/false);  // _dummy_run's drafter.dummy_run: in the peak
  const MemoryStats m = memory_stats(mode());
  profile_peak_bytes_ = m.peak_allocated;
  result_.extra["profile_peak_bytes"] = m.peak_allocated;
  result_.extra["profile_run_requests"] = b.num_reqs;
}

void Engine::do_kv_cache_alloc() {
  // The layout vLLM's KV cache manager gives (plan_kv_cache, harness/replay/kv_cache_plan.h):
  // layers grouped by cache spec, group_size shared tensors of num_blocks pages, one layer of
  // every group in each; for hybrid models the block size is raised until an attention page holds
  // a state page. Recurrent-state layers keep one page per running request.
  const EngineConfig& e = scenario_.engine;
  KvCachePlanInput in;
  in.block_size = e.block_size;
  for (auto& m : mixers_) {
    const CacheSpec c = m->cache_spec();
    if (c.kind == CacheSpec::Kind::kNone) continue;
    in.layers.push_back({m->spec().layer, c.group, c.kind == CacheSpec::Kind::kPagedKv,
                         c.bytes_per_token, c.bytes_per_request});
  }
  const bool has_state = std::any_of(in.layers.begin(), in.layers.end(),
                                     [](const LayerCacheNeed& l) { return !l.paged; });
  if (in.layers.empty()) return;
  // Block counts below are in blocks of the size after vLLM's hybrid rule.
  const int block_size = plan_page(in).block_size;
  const int64_t blocks_per_req = cdiv(e.max_model_len, block_size);
  const MemoryStats m = memory_stats(mode());
  if (e.num_gpu_blocks) {
    in.num_gpu_blocks = *e.num_gpu_blocks;
    result_.extra["kv_cache_sizing"] = "num_gpu_blocks from the scenario";
  } else if (m.total_device > 0) {
    // vLLM's sizing (gpu_worker.py determine_available_memory with mem_utils.py
    // memory_profiling): the requested share of the device, gpu_memory_utilization * total, less
    // what is not KV cache: the profile run's peak (weights included) and how much the memory
    // outside torch's allocator grew since the init snapshot (non_torch_increase: library
    // handles, loaded kernel modules; not the CUDA context, which the snapshot already held). On
    // a GPU both are measured (outside = total - free - reserved); in compile-only mode the
    // device is the target's memory and the outside terms are the target's context and library
    // growth (target.h), the H200's measurements.
    const double budget = e.gpu_memory_utilization * static_cast<double>(m.total_device);
    const long long outside = m.total_device - m.free_device - m.reserved - outside_at_init_bytes_;
    // The profile run's peak (each phase starts a new peak window, so not m.peak_allocated).
    const double non_kv = static_cast<double>(profile_peak_bytes_) + static_cast<double>(outside);
    const int64_t available = static_cast<int64_t>(budget - non_kv);
    in.available_bytes = std::max<int64_t>(0, available);
    result_.extra["kv_cache_sizing"] =
        mode() == DeviceMode::kCuda
            ? "gpu_memory_utilization after the profile run (vLLM)"
            : "gpu_memory_utilization of the target's memory after the profile run (vLLM)";
    // The terms of that sum, so a reviewer can redo it (and compile-only mode can be calibrated
    // against a device's totals).
    result_.extra["kv_cache_budget"] = {
        {"total_device_bytes", m.total_device},
        {"gpu_memory_utilization", e.gpu_memory_utilization},
        {"profile_peak_bytes", profile_peak_bytes_},
        {"outside_allocator_bytes", outside},
        {"outside_allocator_at_init_bytes", outside_at_init_bytes_},
        {"available_bytes", available}};
    // vLLM refuses to start when that leaves nothing, or less than one max_model_len request.
    check_enough_kv_cache_memory(in, available, e.max_model_len);
  } else {
    // No device size known (compile-only for a bare --arch without a profile).
    // At most 2^31 - 1 (block ids are 32-bit): a huge max_num_seqs x max_model_len is capped.
    in.num_gpu_blocks = std::min<int64_t>(
        static_cast<int64_t>(e.max_num_seqs) * (blocks_per_req + 1 + num_speculative_tokens(e)) + 1,
        kMaxKvBlocks);
    result_.extra["kv_cache_sizing"] =
        "compile-only, no device memory known: max_num_seqs full-length sequences (+ 1 + "
        "num_speculative_tokens state pages each) + the null block";
  }
  // vLLM's startup check: the cache must hold one max_model_len request (the loader checks a
  // fixed num_gpu_blocks the same way); a request that needs more blocks than are usable is
  // refused by the scheduler.
  in.min_blocks = blocks_per_req;
  const KvCachePlan plan = plan_kv_cache(in);
  if (plan.block_size_raised) {
    // vLLM: "Setting attention block size to N tokens to ensure that attention page size is >=
    // mamba page size"; every mixer is rebuilt for the new block size.
    result_.extra["block_size_raised"] = {{"from", e.block_size}, {"to", plan.block_size}};
    scenario_.engine.block_size = plan.block_size;
    build_mixers();
    block_table_ = at::zeros({e.max_num_seqs, max_blocks_per_req()},
                             block_table_.options().device(block_table_.device()));
  }
  num_blocks_ = plan.num_blocks;
  has_cache_ = true;
  free_blocks_.reset(1, num_blocks_);
  // Zero-filled, as vLLM's GPUModelRunner._allocate_kv_cache_tensors allocates each KV cache
  // tensor (torch.zeros(size, dtype=torch.int8)): the null block's recurrent state, which warmup
  // and padded batches read, starts at zero rather than at whatever the allocator held.
  for (int t = 0; t < plan.group_size; ++t) {
    cache_tensors_.push_back(at::zeros({plan.tensor_bytes()},
                                       at::TensorOptions().dtype(at::kByte).device(device())));
    cache_ledger_ids_.push_back(ledger_.add_buffer(fmt::format("KV cache tensor {}", t),
                                                   plan.tensor_bytes(),
                                                   tensor_address(cache_tensors_.back())));
  }
  shared_buffers_.clear();  // made again by the layers binding their caches below
  nlohmann::json groups = nlohmann::json::array();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    groups.push_back({{"spec", plan.group_specs[g]}, {"layers", plan.groups[g]}});
  }
  for (auto& m : mixers_) {
    const int t = m->spec().layer < static_cast<int>(plan.tensor_of_layer.size())
                      ? plan.tensor_of_layer[m->spec().layer]
                      : -1;
    if (t >= 0) m->bind_cache({cache_tensors_[t], plan.num_blocks, plan.page_bytes, has_state});
  }
  result_.extra["cache_groups"] = groups;
  result_.extra["kv_cache_plan"] = {{"block_size", plan.block_size},
                                    {"page_bytes", plan.page_bytes},
                                    {"state_padding_bytes", plan.state_padding_bytes},
                                    {"tensors", plan.group_size},
                                    {"tensor_bytes", plan.tensor_bytes()}};
  result_.extra["num_gpu_blocks"] = num_blocks_;
  result_.extra["kv_cache_bytes"] = plan.tensor_bytes() * plan.group_size;
  has_state_ = has_state;
}

void Engine::record_declared_scratch() {
  std::vector<std::pair<ScratchDecl, int>> decls;  // with the number of layers declaring it
  auto add = [&](const ScratchDecl& d) {
    for (auto& [have, layers] : decls) {
      if (have.name == d.name && have.bytes == d.bytes && have.source == d.source) {
        ++layers;
        return;
      }
    }
    decls.push_back({d, 1});
  };
  for (const auto& m : mixers_)
    for (const ScratchDecl& d : m->declared_scratch()) add(d);
  // The engine's own. Triton's do_bench buffer: held while a key's candidates are benchmarked
  // (autotune.cpp), inside the profile run's peak only for kernels autotuned there. Listed once
  // the autotuner asked for it in this run, also when that allocation ran out of memory
  // (recorded at the end of the run, whatever its outcome).
  const std::lock_guard<std::mutex> bench_lock(bench_buffer_mu_);
  if (!bench_buffer_phases_.empty()) {
    ScratchDecl bench;
    bench.name = "autotune benchmark buffer";
    bench.bytes = jit::kTritonBenchBufferBytes;
    bench.size_rule = "256 MiB of int32 held while an autotuned kernel benchmarks the candidates "
                      "of a new tuning key, wherever that first happens (profile run, warmup, "
                      "request)";
    bench.kind = "per call";
    bench.seen_by_profile_run = bench_buffer_phases_.count("profile_run") > 0;  // vLLM's GDN warmup
    bench.source = "Triton's do_bench (get_empty_cache_for_benchmark)";
    add(bench);
  }
  if (workspace_ && workspace_->policy() == WorkspacePolicy::kFixed) {
    ScratchDecl fixed;
    fixed.name = "fixed attention workspace";
    fixed.bytes = workspace_fixed_bytes(scenario_.engine);
    fixed.size_rule = "one buffer of workspace_fixed_mb per slot, allocated on first use; a "
                      "larger request raises FlashInfer's buffer-overflow error";
    fixed.config_key = "workspace_fixed_mb (vLLM: VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE)";
    fixed.kind = "persistent";
    fixed.source = "vLLM FlashInferMetadataBuilder._get_workspace_buffer; flashinfer allocator.h";
    add(fixed);
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [d, layers] : decls) {
    list.push_back({{"name", d.name}, {"bytes", d.bytes}, {"layers", layers},
                    {"size_rule", d.size_rule}, {"config_key", d.config_key}, {"kind", d.kind},
                    {"seen_by_profile_run", d.seen_by_profile_run}, {"source", d.source}});
  }
  result_.extra["declared_scratch"] = list;
}

std::string Engine::memory_holders(const std::exception& e) const {
  // Compile-only: the model's count when it refused; on a GPU, torch's count after the failed
  // allocation (which took nothing).
  const auto* oom = dynamic_cast<const DeviceOutOfMemoryError*>(&e);
  const long long allocated = oom ? oom->allocated_bytes() : memory_stats(mode()).allocated;
  const long long ws = workspace_ ? workspace_->current_bytes() : 0LL;
  std::string where = current_phase_;
  if (jit_) {
    const StepContext st = jit_->monitor().step();
    if (st.request >= 0) where += fmt::format(" (request {}, step {})", st.request, st.step);
  }
  {
    // The allocation that failed was Triton's do_bench buffer: say for which autotune.
    const std::lock_guard<std::mutex> lock(bench_buffer_mu_);
    if (!bench_buffer_failed_for_.empty())
      where += fmt::format(", taking Triton's {} benchmark buffer for {}",
                           torch_format_size(jit::kTritonBenchBufferBytes), bench_buffer_failed_for_);
  }
  if (!result_.extra.contains("weights_bytes")) {
    // Still loading: what is held is the weights loaded so far (and the engine's small buffers).
    return fmt::format("[coldstart: in phase {}; held then: weights loaded so far and other "
                       "buffers {}, workspace {}]",
                       where, torch_format_size(std::max(0LL, allocated - ws)),
                       torch_format_size(ws));
  }
  const long long weights = result_.extra.value("weights_bytes", 0LL);
  // The cache tensors allocated so far (all of them once kv_cache_alloc is done).
  long long kv = 0;
  for (const at::Tensor& t : cache_tensors_) kv += static_cast<long long>(t.nbytes());
  return fmt::format(
      "[coldstart: in phase {}; held then: weights {}, KV cache {}, workspace {}, activations and "
      "other buffers {}]",
      where, torch_format_size(weights), torch_format_size(kv), torch_format_size(ws),
      torch_format_size(std::max(0LL, allocated - weights - kv - ws)));
}

}  // namespace coldstart
