// How the KV cache and the recurrent-state cache are laid out, as vLLM V1's KV cache manager
// does it for dense and hybrid (attention + Mamba2 / GDN) models. Torch-free.
//
// Followed (read through the code-search tool; commits of vllm-project/vllm):
// - page sizes: vllm/v1/kv_cache_interface.py (bc8282e6): an attention page is
//   block_size * bytes_per_token; a Mamba page is the sum of one request's state tensors;
//   without prefix caching a Mamba layer holds 1 block per request (mamba_cache_mode "none");
// - page-size unification: vllm/model_executor/models/config.py (1936cf38),
//   HybridAttentionMambaModelConfig.verify_and_update_config: attn_block = align *
//   cdiv(mamba_page, align * attention bytes per token) with align 16; the block size becomes
//   attn_block when the scenario's is smaller; the Mamba page is padded up to the attention page;
// - grouping and allocation: vllm/v1/core/kv_cache_utils.py (bbf906a8, mid-2025),
//   _get_kv_cache_config_uniform_page_size: layers grouped by spec, group_size = the smallest
//   number of layers of one spec, each spec split into groups of group_size layers; group_size
//   tensors of num_blocks pages, each shared by one layer of every group; num_blocks =
//   available_bytes // page // group_size. The 2026 refactor (get_kv_cache_groups) was not re-read.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "harness/common/error.h"

namespace coldstart {

/// One layer's cache need.
struct LayerCacheNeed {
  int layer = 0;
  std::string spec;              ///< layers with equal specs are grouped (e.g. "attention/paged_bf16")
  bool paged = true;             ///< true: paged KV (attention); false: recurrent state
  int64_t bytes_per_token = 0;   ///< paged: K+V bytes of one token in this layer
  int64_t state_bytes = 0;       ///< state: one request's conv + SSM state bytes in this layer
};

/// The inputs of the plan.
struct KvCachePlanInput {
  std::vector<LayerCacheNeed> layers;
  int block_size = 16;                  ///< the scenario's block size (tokens)
  std::optional<int64_t> num_gpu_blocks;  ///< fixed block count, else from available_bytes
  int64_t available_bytes = 0;          ///< memory for the caches after the profile run
  int64_t min_blocks = 1;               ///< blocks the plan must hold (else an Error)
  int align = 16;                       ///< attention block alignment of the hybrid rule (FA)
};

/// The layout.
struct KvCachePlan {
  int block_size = 16;         ///< tokens per block after the hybrid rule (may exceed the input)
  bool block_size_raised = false;
  int64_t page_bytes = 0;      ///< bytes of one block (page) in every layer
  int64_t state_padding_bytes = 0;  ///< bytes a state page is padded by (hybrid)
  int group_size = 0;          ///< layers per group = number of shared tensors
  std::vector<std::vector<int>> groups;  ///< layer ids of each group (a spec's layers, in order)
  std::vector<std::string> group_specs;  ///< the spec of each group
  int64_t num_blocks = 0;      ///< pages in each shared tensor
  /// tensor_of_layer[layer] = index of the shared tensor (0..group_size-1) that holds it.
  std::vector<int> tensor_of_layer;
  int64_t tensor_bytes() const { return page_bytes * num_blocks; }
};

/// The page every layer shares: the block size after vLLM's hybrid rule and the page bytes
/// (independent of how many blocks there will be).
struct KvCachePage {
  int block_size = 16;
  bool block_size_raised = false;
  int64_t page_bytes = 0;
  int64_t state_padding_bytes = 0;
};

/// The most blocks a plan may have: block ids are 32-bit (the block tables are int32).
constexpr int64_t kMaxKvBlocks = INT32_MAX;

/// The page of `in` (num_gpu_blocks, available_bytes and min_blocks are not read): what the
/// engine needs to count blocks in the final block size before sizing the cache. Throws Error
/// when a layer need is malformed; page_bytes is 0 when there are no layers.
KvCachePage plan_page(const KvCachePlanInput& in);

/// Plans the caches (the page of plan_page, then groups and blocks). Throws Error when a layer
/// need is malformed or fewer than min_blocks blocks fit. Layers with neither paged nor state needs are left out (tensor_of_layer -1).
/// The arithmetic is checked: a page, a block count past kMaxKvBlocks or a cache size that does
/// not fit 64 bits throws Error naming the operands, never a wrapped value.
KvCachePlan plan_kv_cache(const KvCachePlanInput& in);

/// vLLM refuses to start for want of memory: less than gpu_memory_utilization of the device is
/// free when the worker starts (check_startup_free_memory), or the memory left for the caches after
/// the profile run holds nothing, or not one request of max_model_len tokens
/// (check_enough_kv_cache_memory). The texts are vLLM's ValueErrors.
class KvCacheMemoryError : public Error {
 public:
  using Error::Error;
};

/// Bytes the caches need to hold one request of `tokens` tokens, as vLLM's check sums each layer's
/// max_memory_usage_bytes: a paged layer cdiv(tokens, block_size) pages, a state layer one page,
/// in the page of plan_page(in).
int64_t kv_cache_bytes_for_request(const KvCachePlanInput& in, int64_t tokens);

/// vLLM's estimate_max_model_len: the most tokens in [1, max_model_len] whose request fits
/// `available_bytes` (binary search), 0 when not even one token fits.
int64_t estimate_max_model_len(const KvCachePlanInput& in, int64_t available_bytes,
                               int64_t max_model_len);

/// vLLM's startup check of the memory the caches get: throws KvCacheMemoryError with vLLM's text
/// when `available_bytes` <= 0 ("No available memory for the cache blocks. ...") or less than one
/// request of `max_model_len` tokens needs ("To serve at least one request with the models's max
/// seq len (...), (X GiB KV cache is needed, ...").
void check_enough_kv_cache_memory(const KvCachePlanInput& in, int64_t available_bytes,
                                  int64_t max_model_len);

/// vLLM's worker start (vllm/v1/worker/utils.py request_memory, from gpu_worker.py's
/// Worker.init_device once the device and its distributed group are set up): throws
/// KvCacheMemoryError ("Free memory on device cuda:0 (F/T GiB) on startup is less than desired GPU
/// memory utilization (U, R GiB). ...") when `free_bytes` < ceil(`gpu_memory_utilization` *
/// `total_bytes`). Sizes in bytes.
void check_startup_free_memory(int64_t free_bytes, int64_t total_bytes, double gpu_memory_utilization);

/// Python's str() of round(x, 2), as vLLM prints GiB figures in its startup check: at most two
/// decimals, trailing zeros dropped but one kept ("15.0", "14.6", "139.8").
std::string python_round2(double x);

/// vLLM's free block queue over the block ids [first, end): taken from the front, returned to the
/// back. The ids never handed out are kept as a range, so a cache of 2^31 blocks costs no memory
/// until its blocks are used (a std::deque of every id took 8 GiB).
class FreeBlockQueue {
 public:
  /// The queue [first, first + 1, ..., end - 1]; ids are 32-bit (end <= kMaxKvBlocks + 1).
  void reset(int64_t first, int64_t end);
  void clear() { reset(0, 0); }
  size_t size() const { return static_cast<size_t>(end_ - next_) + returned_.size(); }
  /// The id at the front (the queue must not be empty).
  int32_t front() const;
  void pop_front();
  void push_back(int32_t block) { returned_.push_back(block); }

 private:
  int64_t next_ = 0, end_ = 0;   // ids never handed out, in order, come first
  std::deque<int32_t> returned_;  // then the ids returned, in the order returned
};

}  // namespace coldstart
